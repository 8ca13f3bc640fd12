//! Request extractors: JSON bodies with our error shape, the request id, and who
//! authenticated.
//!
//! A request that changes state on the strength of the session cookie must come from this
//! server's own origin ([`same_origin`]): SameSite=Strict is one wall, this is the second.

use axum::{
    extract::{FromRequest, FromRequestParts, Request, rejection::JsonRejection},
    http::{HeaderMap, Method, StatusCode, request::Parts},
};
use breeze_core::{Actor, ActorType, Caller, User, UserId};
use serde::de::DeserializeOwned;

use crate::{ApiError, AppState, REQUEST_ID_HEADER, SESSION_COOKIE};

/// `axum::Json`, but a bad body becomes an [`ApiError`] naming the problem.
pub(crate) struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<crate::BodyLimit>()
            .map_or(crate::MAX_REST_BODY_BYTES, |l| l.0);
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(rejection) => Err(match rejection {
                JsonRejection::MissingJsonContentType(_) => ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "Expected a JSON body with Content-Type: application/json",
                ),
                JsonRejection::BytesRejection(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        format!("Request body exceeds {limit} bytes"),
                    )
                }
                JsonRejection::JsonDataError(e) => {
                    ApiError::bad_request(format!("Invalid request body: {}", e.body_text()))
                }
                JsonRejection::JsonSyntaxError(e) => {
                    ApiError::bad_request(format!("Malformed JSON: {}", e.body_text()))
                }
                other => ApiError::bad_request(other.body_text()),
            }),
        }
    }
}

/// The id of this request (set by the request-id layer).
pub(crate) struct RequestId(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(RequestId(
            parts
                .headers
                .get(REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ))
    }
}

/// Who authenticated a REST request: an `X-API-Key` header when present, else the session
/// cookie. A credential is already a [`Caller`] in its one organization; a person becomes one
/// in the organization a route names (`crate::authz`), with their role there.
#[derive(Debug, Clone)]
pub(crate) enum Authenticated {
    /// A person signed in to the dashboard.
    Person(User),
    /// An API key, bound to one organization.
    Credential(Caller),
}

impl Authenticated {
    /// The user whose role applies.
    pub(crate) fn user_id(&self) -> UserId {
        match self {
            Authenticated::Person(u) => u.id,
            Authenticated::Credential(c) => c.user(),
        }
    }

    /// Who the audit trail names.
    pub(crate) fn actor(&self) -> Actor {
        match self {
            Authenticated::Person(u) => Actor::new(ActorType::User, u.id),
            Authenticated::Credential(c) => c.actor(),
        }
    }

    /// The signed-in person, or the refusal a credential gets for what only a person does.
    pub(crate) fn person(&self, what: &str) -> Result<&User, ApiError> {
        match self {
            Authenticated::Person(u) => Ok(u),
            Authenticated::Credential(_) => Err(ApiError::forbidden(format!(
                "API keys cannot {what}; sign in as a user"
            ))),
        }
    }
}

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Authenticated once per request: the organization layer (`authz`) may have done it.
        if let Some(who) = parts.extensions.get::<Authenticated>() {
            return Ok(who.clone());
        }
        if let Some(key) = parts.headers.get("x-api-key") {
            let key = key
                .to_str()
                .map_err(|_| ApiError::unauthorized("Invalid API key format"))?;
            let caller = state.auth.authenticate_api_key(Some(key)).await?;
            return Ok(Authenticated::Credential(caller));
        }
        match session_cookie(&parts.headers) {
            Some(token) => {
                same_origin(&parts.method, &parts.headers, &state.config.public_url)?;
                let user = state.auth.authenticate_session(Some(token)).await?;
                Ok(Authenticated::Person(user))
            }
            None => Err(ApiError::unauthorized("Missing X-API-Key header")),
        }
    }
}

/// Refuses a state-changing request (any method but GET, HEAD, OPTIONS) that a browser sent
/// from another origin than `public_url`'s: by its `Origin` (`null` included), else its
/// `Sec-Fetch-Site`, else its `Referer`. A request with none of them is no browser's
/// cross-site request (browsers send `Origin` on every one) and passes.
pub(crate) fn same_origin(
    method: &Method,
    headers: &HeaderMap,
    public_url: &str,
) -> Result<(), ApiError> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let ours = origin_of(public_url);
    let refuse = |what: &str| {
        Err(ApiError::forbidden(format!(
            "cross-origin request refused: {what} is not {ours}"
        )))
    };
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("(invalid)"));
    if let Some(origin) = header("origin") {
        return if origin_of(origin) == ours {
            Ok(())
        } else {
            refuse(&format!("Origin {origin:?}"))
        };
    }
    if let Some(site) = header("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return refuse(&format!("Sec-Fetch-Site {site:?}"));
    }
    if let Some(referer) = header("referer")
        && origin_of(referer) != ours
    {
        return refuse("the Referer's origin");
    }
    Ok(())
}

/// The origin of `url` (`scheme://host[:port]`), lowercased, without a default port.
fn origin_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let scheme = scheme.to_ascii_lowercase();
    let mut authority = authority.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => Some(":80"),
        "https" => Some(":443"),
        _ => None,
    };
    if let Some(port) = default_port
        && authority.ends_with(port)
    {
        authority.truncate(authority.len() - port.len());
    }
    format!("{scheme}://{authority}")
}

/// A state-changing request that must come from this server's origin when a browser sends it
/// (sign-in and sign-out, which do not go through [`Authenticated`]).
pub(crate) struct SameOrigin;

impl FromRequestParts<AppState> for SameOrigin {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        same_origin(&parts.method, &parts.headers, &state.config.public_url)?;
        Ok(SameOrigin)
    }
}

/// The session token from the `Cookie` header, if any.
pub(crate) fn session_cookie(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
}

/// An agent authenticated by its device token (`Authorization: Bearer brz_…`).
pub(crate) struct AgentAuth(pub breeze_auth::DevicePrincipal);

impl FromRequestParts<AppState> for AgentAuth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        Ok(AgentAuth(state.auth.authenticate_device(header).await?))
    }
}

/// The client's address: the connection's peer, or the address a trusted proxy forwarded
/// for (see [`crate::client_addr`]); none when the server was started without connect info
/// (tests that drive the router directly).
pub(crate) struct ClientAddr(pub Option<std::net::IpAddr>);

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(peer) = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip())
        else {
            return Ok(ClientAddr(None));
        };
        let forwarded = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok());
        Ok(ClientAddr(Some(
            state.config.trusted_proxies.client(peer, forwarded),
        )))
    }
}
