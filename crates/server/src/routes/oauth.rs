//! OAuth 2.1 endpoints (mounted only when `MCP_OAUTH_ENABLED`): discovery documents, the
//! authorization endpoint with its sign-in redirect and consent page, token, registration,
//! revocation and introspection, and the user's grants under `/api/v1/oauth/grants`.
//!
//! Protocol errors are answered in the RFC 6749 §5.2 shape (`{"error", "error_description"}`)
//! — the one mapping of `OAuthError` — and token responses carry `Cache-Control: no-store`.
//! An authorization request whose client or redirect URI is not trusted gets an error page,
//! never a redirect. The consent page is a page-stack page (`templates/oauth/consent.html`)
//! with its own Content-Security-Policy: `frame-ancestors 'none'` and a `form-action` that
//! admits the client's redirect origin (browsers apply it to the redirect after the post).
//! Consent is protected twice: the page stack's session CSRF token, and a token bound to the
//! session, a `__Host-` consent cookie's nonce and every parameter the code will carry.

use askama::Template;
use axum::{
    Json, Router,
    body::Bytes,
    extract::{FromRequestParts, Path, RawQuery, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};
use breeze_core::{Actor, ActorType, AuditEvent, GrantId, OrgId};
use breeze_oauth::{AuthorizeError, AuthorizeRequest, OAuth, OAuthError, OAuthErrorCode};
use breeze_store::OAuthGrantRecord;
use serde::Serialize;
use serde_json::json;

use crate::{
    ApiError, AppState,
    extract::{Authenticated, ClientAddr, RequestId},
    pages::{Layout, PageError, SignedForm, SignedIn},
};

/// The consent cookie: a nonce the consent token is bound to (double submit per browser).
const CONSENT_COOKIE_SECURE: &str = "__Host-breeze_consent";
/// The same cookie where the server is reached over plain http (development).
const CONSENT_COOKIE_PLAIN: &str = "breeze_consent";
/// Largest registration request accepted.
const MAX_REGISTRATION_BYTES: usize = 16 * 1024;

/// The grants API, under `/api/v1` (404 while OAuth is off).
pub(crate) fn grants_router() -> Router<AppState> {
    Router::new()
        .route("/oauth/grants", get(list_grants))
        .route("/oauth/grants/{id}", delete(revoke_grant))
}

/// The OAuth routes; `registration` mounts `/oauth/reg` (DCR). Discovery, JWKS, token,
/// revocation and registration answer browsers of any origin (CORS, no credentials): a
/// browser-based client (MCP Inspector, a web app) calls them from its own page. The
/// authorization endpoint and consent (cookies, a page) and introspection (an API key) do not.
pub(crate) fn router(registration: bool) -> Router<AppState> {
    let mut public = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata).options(preflight),
        )
        .route(
            "/.well-known/oauth-authorization-server/{*path}",
            get(server_metadata).options(preflight),
        )
        .route(
            "/.well-known/openid-configuration",
            get(server_metadata).options(preflight),
        )
        .route(
            "/.well-known/openid-configuration/{*path}",
            get(server_metadata).options(preflight),
        )
        .route(
            "/mcp/.well-known/openid-configuration",
            get(server_metadata).options(preflight),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata).options(preflight),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(resource_metadata).options(preflight),
        )
        .route("/.well-known/jwks.json", get(jwks).options(preflight))
        .route("/oauth/token", post(token).options(preflight))
        .route("/oauth/token/revocation", post(revoke).options(preflight));
    if registration {
        public = public.merge(crate::body_limit(
            Router::new()
                .route("/oauth/reg", post(register).options(preflight))
                .route("/oauth/register", post(register).options(preflight)),
            MAX_REGISTRATION_BYTES,
        ));
    }
    Router::new()
        .route("/oauth/auth", get(authorize).post(consent))
        .route("/oauth/token/introspection", post(introspect))
        .merge(public.layer(cors()))
}

/// `OPTIONS` on a cross-origin route: the CORS layer answers a preflight itself; any other
/// `OPTIONS` gets this (the routes need a handler for the layer to wrap — the application's
/// method-not-allowed answer is not layered).
async fn preflight() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// Any origin, without credentials (none of these endpoints reads a cookie); the headers the
/// SDKs send (the TypeScript SDK adds `MCP-Protocol-Version` to discovery requests).
fn cors() -> tower_http::cors::CorsLayer {
    use axum::http::Method;
    tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::Any)
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::HeaderName::from_static("mcp-protocol-version"),
        ])
        .expose_headers([header::WWW_AUTHENTICATE, header::RETRY_AFTER])
        .max_age(std::time::Duration::from_secs(86_400))
}

fn oauth(state: &AppState) -> Result<&OAuth, ApiError> {
    state
        .oauth
        .as_ref()
        .ok_or_else(|| ApiError::not_found("OAuth is not enabled on this server"))
}

/// An OAuth protocol error as RFC 6749 §5.2 wants it.
pub(crate) struct OAuthFailure(OAuthError);

impl From<OAuthError> for OAuthFailure {
    fn from(e: OAuthError) -> Self {
        Self(e)
    }
}

impl From<ApiError> for OAuthFailure {
    fn from(e: ApiError) -> Self {
        Self(OAuthError::protocol(
            OAuthErrorCode::InvalidRequest,
            e.message,
        ))
    }
}

impl IntoResponse for OAuthFailure {
    fn into_response(self) -> Response {
        let (status, code, description, retry) = match self.0 {
            OAuthError::Protocol { code, description } => {
                let status = match code {
                    OAuthErrorCode::InvalidClient | OAuthErrorCode::InvalidToken => {
                        StatusCode::UNAUTHORIZED
                    }
                    OAuthErrorCode::ServerError => StatusCode::INTERNAL_SERVER_ERROR,
                    _ => StatusCode::BAD_REQUEST,
                };
                (status, code.as_str(), description, None)
            }
            OAuthError::RateLimited { retry_after } => (
                StatusCode::TOO_MANY_REQUESTS,
                "slow_down",
                "too many requests".to_owned(),
                Some(retry_after.as_secs().max(1)),
            ),
            OAuthError::Store(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "OAuth request found the database unavailable");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "temporarily_unavailable",
                    "try again shortly".to_owned(),
                    Some(1),
                )
            }
            OAuthError::Store(e) => {
                tracing::error!(error = %e, "OAuth request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "internal error".to_owned(),
                    None,
                )
            }
        };
        let mut r = (
            status,
            Json(json!({ "error": code, "error_description": description })),
        )
            .into_response();
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        if let Some(secs) = retry
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            h.insert(header::RETRY_AFTER, v);
        }
        r
    }
}

/// Discovery documents may be cached briefly.
fn discovery(body: impl Serialize) -> Response {
    let mut r = Json(body).into_response();
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    r
}

async fn server_metadata(State(state): State<AppState>) -> Result<Response, ApiError> {
    let registration = state.config.oauth.as_ref().is_some_and(|o| o.dcr.enabled);
    Ok(discovery(oauth(&state)?.server_metadata(registration)))
}

async fn resource_metadata(State(state): State<AppState>) -> Result<Response, ApiError> {
    Ok(discovery(oauth(&state)?.resource_metadata()))
}

async fn jwks(State(state): State<AppState>) -> Result<Response, ApiError> {
    Ok(discovery(oauth(&state)?.jwks()))
}

fn pairs_of(raw: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(raw).into_owned().collect()
}

/// A 303 to `location` (RFC 9700 §4.12: never 307, which would repeat a form post).
fn see_other(location: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// The page for a request that cannot go back to its client.
fn refusal_page(e: OAuthError) -> Response {
    let status = match &e {
        OAuthError::Store(_) => None,
        _ => Some(StatusCode::BAD_REQUEST),
    };
    let api = match (status, e) {
        (Some(s), OAuthError::Protocol { code, description }) => ApiError::new(
            s,
            "oauth_error",
            format!("{}: {description}", code.as_str()),
        ),
        (_, OAuthError::Store(s)) => s.into(),
        (_, other) => ApiError::bad_request(other.to_string()),
    };
    page_headers(PageError::Api(api).into_response(), None)
}

/// The page headers of the authorization endpoint: no framing, no caching, a form target that
/// admits the client's redirect origin, and a referrer for this origin only: the consent form's
/// POST must carry its `Origin` (a browser sends `Origin: null` from a `no-referrer` page, which
/// the same-origin check refuses), while nothing of this page's URL reaches another origin.
fn page_headers(mut r: Response, redirect_origin: Option<&str>) -> Response {
    let csp = format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; \
         base-uri 'none'; form-action 'self'{}",
        redirect_origin.map(|o| format!(" {o}")).unwrap_or_default()
    );
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn origin_of(uri: &str) -> Option<String> {
    url::Url::parse(uri)
        .ok()
        .map(|u| u.origin().ascii_serialization())
        .filter(|o| o != "null")
}

fn consent_cookie_name(state: &AppState) -> &'static str {
    if state.config.secure_cookies() {
        CONSENT_COOKIE_SECURE
    } else {
        CONSENT_COOKIE_PLAIN
    }
}

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

#[derive(Template)]
#[template(path = "oauth/consent.html")]
struct ConsentPage {
    l: Layout,
    client_name: String,
    client_id: String,
    redirect_host: String,
    user_email: String,
    scopes: Vec<(String, &'static str)>,
    params: Vec<(String, String)>,
    orgs: Vec<(OrgId, String)>,
    csrf: String,
    consent_token: String,
}

fn describe_scope(s: &str) -> &'static str {
    match s {
        "mcp:read" => "read fleet data (Tier 1)",
        "mcp:write" => "make low-risk changes (Tier 2)",
        "mcp:execute" => "request commands and scripts; each needs a person's approval (Tier 3)",
        "offline_access" => "stay connected until you revoke it",
        _ => "identify you",
    }
}

/// The parameters the consent form carries back: the authorization request's own.
const AUTHORIZE_PARAMS: [&str; 9] = [
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
    "prompt",
];

/// `GET /oauth/auth`: validate, then sign in (303 to `/login?next=…`), then the consent page.
async fn authorize(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    ClientAddr(addr): ClientAddr,
    req: Request,
) -> Response {
    let Some(oauth) = state.oauth.clone() else {
        return ApiError::not_found("OAuth is not enabled on this server").into_response();
    };
    let pairs = pairs_of(query.as_deref().unwrap_or_default().as_bytes());
    // A metadata document fetched for this request counts against its address.
    let request = match crate::cimd_guard::asking_from(addr, oauth.authorize(&pairs)).await {
        Ok(r) => r,
        Err(AuthorizeError::Page(e)) => return refusal_page(e),
        Err(AuthorizeError::Redirect(location)) => return see_other(&location),
    };
    let (mut parts, _) = req.into_parts();
    let who = match SignedIn::from_request_parts(&mut parts, &state).await {
        Ok(w) => w,
        Err(PageError::SignIn { next, .. }) => {
            let base = state
                .config
                .oauth
                .as_ref()
                .and_then(|o| o.consent_url_base.clone())
                .unwrap_or_default();
            let next = crate::pages::safe_next(&next);
            let query: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("next", next)
                .finish();
            return page_headers(see_other(&format!("{base}/login?{query}")), None);
        }
        Err(e) => return page_headers(e.into_response(), None),
    };
    match consent_page(&state, &oauth, &request, &pairs, &who, &parts.headers).await {
        Ok(r) => page_headers(r, origin_of(&request.redirect_uri).as_deref()),
        Err(e) => page_headers(e.into_response(), None),
    }
}

async fn consent_page(
    state: &AppState,
    oauth: &OAuth,
    request: &AuthorizeRequest,
    pairs: &[(String, String)],
    who: &SignedIn,
    headers: &HeaderMap,
) -> Result<Response, PageError> {
    let orgs = state.store.user_organizations(who.user.id).await?;
    if orgs.is_empty() {
        return Err(ApiError::forbidden(
            "You hold no role in any organization, so there is nothing to grant.",
        )
        .into());
    }
    let session = crate::extract::session_cookie(headers).unwrap_or_default();
    let cookie = consent_cookie_name(state);
    let nonce = cookie_value(headers, cookie)
        .filter(|n| n.len() >= 32)
        .map_or_else(|| oauth.nonce(), str::to_owned);
    let page = ConsentPage {
        l: Layout::bare("Authorize"),
        client_name: match breeze_oauth::client::display_name(&request.client.client_name) {
            name if name.trim().is_empty() => "An unnamed client".to_owned(),
            name => name,
        },
        client_id: request.client.client_id.clone(),
        redirect_host: request.redirect_host(),
        user_email: who.user.email.clone(),
        scopes: request
            .scopes
            .iter()
            .map(|s| (s.clone(), describe_scope(s)))
            .collect(),
        params: pairs
            .iter()
            .filter(|(k, _)| AUTHORIZE_PARAMS.contains(&k.as_str()))
            .cloned()
            .collect(),
        orgs: orgs.into_iter().map(|(o, _)| (o.id, o.name)).collect(),
        csrf: who.csrf.clone(),
        consent_token: oauth.csrf_token(session, &nonce, request),
    };
    let mut r = crate::pages::render(&page)?;
    let secure = if state.config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{cookie}={nonce}; Path=/; HttpOnly; SameSite=Lax; Max-Age=900{secure}"
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(r)
}

/// `POST /oauth/auth`: the consent decision.
async fn consent(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    form: SignedForm<Vec<(String, String)>>,
) -> Response {
    let Some(oauth) = state.oauth.clone() else {
        return ApiError::not_found("OAuth is not enabled on this server").into_response();
    };
    let SignedForm { who, form, headers } = form;
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let params: Vec<(String, String)> = form
        .iter()
        .filter(|(k, _)| AUTHORIZE_PARAMS.contains(&k.as_str()))
        .cloned()
        .collect();
    let request = match oauth.authorize(&params).await {
        Ok(r) => r,
        Err(AuthorizeError::Page(e)) => return refusal_page(e),
        Err(AuthorizeError::Redirect(location)) => return see_other(&location),
    };
    let session = crate::extract::session_cookie(&headers).unwrap_or_default();
    let nonce = cookie_value(&headers, consent_cookie_name(&state)).unwrap_or_default();
    let token = field("consent_token").unwrap_or_default();
    if nonce.is_empty() || !oauth.check_csrf(token, session, nonce, &request) {
        let event = AuditEvent::new(
            Actor::new(ActorType::User, who.user.id),
            "oauth.consent",
            "oauth_client",
        )
        .resource(&request.client.client_id)
        .failed(
            breeze_core::AuditResult::Denied,
            "consent token missing or wrong",
        )
        .request(request_id);
        if let Err(e) = state.store.append_audit(&event).await {
            tracing::warn!(error = %e, "could not audit a refused consent");
        }
        return page_headers(
            PageError::Api(ApiError::forbidden(
                "This consent form has expired or did not come from this site. Start the connection again from your AI client.",
            ))
            .into_response(),
            None,
        );
    }
    let location = match field("decision") {
        Some("approve") => {
            let org = field("org_id").and_then(|o| o.parse::<OrgId>().ok());
            let allowed = match org {
                Some(org) => match state.store.org_access(who.user.id, org).await {
                    Ok(access) => access.is_some(),
                    Err(e) => return PageError::from(e).into_response(),
                },
                None => false,
            };
            let Some(org) = org.filter(|_| allowed) else {
                return page_headers(
                    PageError::Api(ApiError::forbidden("Choose an organization you belong to."))
                        .into_response(),
                    None,
                );
            };
            match oauth.issue_code(&request, who.user.id, org).await {
                Ok(l) => l,
                Err(e) => return refusal_page(e),
            }
        }
        _ => oauth.denied_location(&request),
    };
    let mut r = see_other(&location);
    let cookie = consent_cookie_name(&state);
    let secure = if state.config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{cookie}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}"
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn no_store(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    r
}

fn form_body(headers: &HeaderMap, body: &Bytes) -> Result<Vec<(String, String)>, OAuthFailure> {
    let ok = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !ok {
        return Err(OAuthFailure(OAuthError::protocol(
            OAuthErrorCode::InvalidRequest,
            "expected Content-Type: application/x-www-form-urlencoded",
        )));
    }
    Ok(pairs_of(body))
}

/// `POST /oauth/token`.
async fn token(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthFailure> {
    let oauth = oauth(&state)?;
    let pairs = form_body(&headers, &body)?;
    let answer = oauth.token(&pairs, request_id).await?;
    Ok(no_store(Json(answer).into_response()))
}

/// `POST /oauth/token/revocation` (RFC 7009): 200 whatever the token was.
async fn revoke(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthFailure> {
    let oauth = oauth(&state)?;
    let pairs = form_body(&headers, &body)?;
    oauth.revoke(&pairs, request_id).await?;
    Ok(no_store(StatusCode::OK.into_response()))
}

/// `POST /oauth/token/introspection` (RFC 7662): only for an API key (a resource server of
/// the same organization), never anonymously.
async fn introspect(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthFailure> {
    let oauth = oauth(&state)?;
    let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) else {
        return Err(OAuthFailure(OAuthError::protocol(
            OAuthErrorCode::InvalidClient,
            "introspection requires X-API-Key",
        )));
    };
    let principal = state
        .auth
        .authenticate_api_key(Some(key))
        .await
        .map_err(|e| {
            OAuthFailure(OAuthError::protocol(
                OAuthErrorCode::InvalidClient,
                e.to_string(),
            ))
        })?;
    let pairs = form_body(&headers, &body)?;
    let token = pairs
        .iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    let answer = oauth.introspect(token, principal.org()).await?;
    Ok(no_store(Json(answer).into_response()))
}

/// `POST /oauth/reg` (RFC 7591).
async fn register(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    ClientAddr(addr): ClientAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthFailure> {
    let oauth = oauth(&state)?;
    let Some(settings) = state.config.oauth.as_ref() else {
        return Err(ApiError::not_found("OAuth is not enabled").into());
    };
    // Per address, before anything else is looked at; fail closed in production.
    let key = format!("oauth-reg:{}", breeze_limits::address_key(addr));
    match state
        .limiter
        .check(
            &key,
            settings.register_per_minute,
            std::time::Duration::from_secs(60),
        )
        .await
    {
        Ok(d) if d.allowed => {}
        Ok(d) => {
            return Err(OAuthFailure(OAuthError::RateLimited {
                retry_after: d.retry_after,
            }));
        }
        Err(e) if state.config.production => {
            tracing::error!(error = %e, "registration limiter unavailable; refusing");
            return Err(OAuthFailure(OAuthError::RateLimited {
                retry_after: std::time::Duration::from_secs(1),
            }));
        }
        Err(e) => tracing::warn!(error = %e, "registration limiter unavailable; allowing"),
    }
    let actor = if settings.dcr.require_iat {
        let iat = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(s, _)| s.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim());
        match state.auth.authenticate_api_key(iat).await {
            Ok(k) => k.actor(),
            Err(_) => {
                let event = AuditEvent::new(
                    Actor::system("anonymous"),
                    "oauth.client.register",
                    "oauth_client",
                )
                .failed(
                    breeze_core::AuditResult::Denied,
                    "initial access token missing or invalid",
                )
                .request(request_id);
                state
                    .store
                    .append_audit(&event)
                    .await
                    .map_err(OAuthError::from)?;
                return Err(OAuthFailure(OAuthError::protocol(
                    OAuthErrorCode::InvalidToken,
                    "registration requires an initial access token (Authorization: Bearer <API key>)",
                )));
            }
        }
    } else {
        Actor::system("anonymous")
    };
    let req: breeze_oauth::RegistrationRequest = serde_json::from_slice(&body).map_err(|e| {
        OAuthFailure(OAuthError::protocol(
            OAuthErrorCode::InvalidClientMetadata,
            format!("the body is not a registration request: {e}"),
        ))
    })?;
    let answer = oauth.register(&req, actor, request_id).await?;
    Ok(no_store(
        (StatusCode::CREATED, Json(answer)).into_response(),
    ))
}

/// A grant as the user sees it, in the contract's vocabulary.
#[derive(Serialize)]
struct GrantView {
    id: GrantId,
    client_id: String,
    client_name: String,
    organization_id: OrgId,
    scopes: Vec<String>,
    resource: String,
    status: breeze_core::GrantStatus,
    state: &'static str,
    created_at: breeze_core::Timestamp,
    last_used_at: Option<breeze_core::Timestamp>,
    revoked_at: Option<breeze_core::Timestamp>,
    revoke_reason: Option<String>,
}

impl From<OAuthGrantRecord> for GrantView {
    fn from(g: OAuthGrantRecord) -> Self {
        let state = breeze_oauth::connection_state(&g);
        Self {
            id: g.id,
            client_id: g.client_id,
            client_name: g.client_name,
            organization_id: g.org_id,
            scopes: g.scopes,
            resource: g.resource,
            status: g.status,
            state,
            created_at: g.created_at,
            last_used_at: g.last_used_at,
            revoked_at: g.revoked_at,
            revoke_reason: g.revoke_reason,
        }
    }
}

/// Only a signed-in person manages their grants (API keys manage no credentials).
fn person(who: &Authenticated) -> Result<breeze_core::UserId, ApiError> {
    who.person("manage OAuth grants").map(|u| u.id)
}

/// `GET /api/v1/oauth/grants`: the signed-in user's grants, newest first.
async fn list_grants(
    State(state): State<AppState>,
    who: Authenticated,
) -> Result<Json<serde_json::Value>, ApiError> {
    oauth(&state)?;
    let user = person(&who)?;
    let grants: Vec<GrantView> = state
        .store
        .user_oauth_grants(user)
        .await?
        .into_iter()
        .map(GrantView::from)
        .collect();
    Ok(Json(json!({ "grants": grants })))
}

/// `DELETE /api/v1/oauth/grants/{id}`: revokes one of the user's grants and all its tokens.
async fn revoke_grant(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    who: Authenticated,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    oauth(&state)?;
    let user = person(&who)?;
    let id: GrantId = id
        .parse()
        .map_err(|_| ApiError::not_found("OAuth grant not found"))?;
    let event = AuditEvent::new(who.actor(), "oauth.grant.revoke", "oauth_grant")
        .details(json!({ "reason": "revoked_by_user" }))
        .request(request_id);
    let grant = state.store.revoke_user_oauth_grant(user, id, event).await?;
    Ok(Json(json!({ "grant": GrantView::from(grant) })))
}
