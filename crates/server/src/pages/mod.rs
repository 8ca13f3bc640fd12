//! The dashboard: server-rendered HTML pages for people, beside the REST API.
//!
//! Templates are askama files in `crates/server/templates/` (checked when the crate compiles;
//! every page extends `base.html`), progressively enhanced with htmx; every asset is embedded
//! ([`assets`]). A page handler takes [`SignedIn`] (no session → redirect to
//! `/login?next=…`), authorizes through `authz::org_scope` exactly like the REST route of the
//! same data (another organization's page answers 404), builds a [`layout::Layout`] and renders.
//! A state-changing request takes [`SignedForm`], which also checks the CSRF token ([`csrf`]).
//! Every page response carries a strict Content-Security-Policy (no inline script or style)
//! and `X-Frame-Options: DENY`.
//!
//! Organization pages live under `/o/{org}/…` (`{org}` is the slug), so the organization is
//! part of every URL: bookmarkable, and the switcher is a set of links.

mod actions;
mod alerts;
mod approvals;
pub(crate) mod assets;
mod audit;
mod billing;
mod chat;
pub(crate) mod csrf;
mod device_actions;
mod devices;
pub(crate) mod events;
pub(crate) mod kit;
pub(crate) mod layout;
mod live_queries;
mod login;
mod names;
mod organization;
mod overview;
mod patches;
mod policies;
mod reports;
mod scripts;
mod settings;
mod tool_sources;
mod vulnerabilities;

use askama::Template;
use axum::{
    Router,
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts},
    response::{Html, IntoResponse, Redirect, Response},
    routing::get,
};
use breeze_core::{Operation, Permission, Tier, User, Verdict};
use serde::de::DeserializeOwned;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::{
    ApiError, AppState,
    authz::OrgScope,
    extract::{Authenticated, session_cookie},
};

pub(crate) use layout::{Layout, Section};

/// The Content-Security-Policy of every page.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// The dashboard's routes (merged into the application by `app`).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(root).post(misdirected_mcp))
        .merge(login::router())
        .merge(alerts::router())
        .merge(approvals::router())
        .merge(audit::router())
        .merge(billing::router())
        .merge(chat::router())
        .merge(devices::router())
        .merge(live_queries::router())
        .merge(vulnerabilities::router())
        .merge(device_actions::router())
        .route("/o/{org}/events", get(events::stream))
        .merge(overview::router())
        .merge(scripts::router())
        .merge(organization::router())
        .merge(patches::router())
        .merge(policies::router())
        .merge(reports::router())
        .merge(settings::router())
        .merge(tool_sources::router())
        // Any other path under an organization is a page that does not exist: the HTML 404,
        // not the API's JSON one.
        .route("/o/{org}/{*rest}", axum::routing::any(no_such_page))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        // Assets are outside the page headers' layer only in spirit: they carry them too.
        .route("/assets/{file}", get(assets::serve))
}

/// A failed page request, answered as an HTML page (or a redirect to sign-in).
#[derive(Debug)]
pub(crate) enum PageError {
    /// Not signed in: go to the sign-in page, then back to `next`.
    SignIn { next: String, htmx: bool },
    /// Anything the REST API would refuse, with its status and message.
    Api(ApiError),
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError::Api(e)
    }
}

impl From<breeze_store::StoreError> for PageError {
    fn from(e: breeze_store::StoreError) -> Self {
        PageError::Api(e.into())
    }
}

impl From<askama::Error> for PageError {
    fn from(e: askama::Error) -> Self {
        PageError::Api(ApiError::internal(format!("template: {e}")))
    }
}

impl PageError {
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        PageError::Api(ApiError::bad_request(message))
    }
}

/// The page shown for a refused or failed request.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    l: Layout,
    status: u16,
    reason: String,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            PageError::SignIn { next, htmx } => {
                let to = login::login_url(&next);
                if htmx {
                    // htmx follows a redirect inside its request; this makes the whole page go.
                    let mut r = StatusCode::NO_CONTENT.into_response();
                    if let Ok(v) = HeaderValue::from_str(&to) {
                        r.headers_mut().insert("hx-redirect", v);
                    }
                    r
                } else {
                    Redirect::to(&to).into_response()
                }
            }
            PageError::Api(e) => {
                let status = e.status;
                // Logs 5xx detail, sets Retry-After; the body is replaced by a page.
                let api = e.into_response();
                let message = if status.is_server_error() {
                    "Something went wrong on our side. Try again in a moment.".to_owned()
                } else {
                    message_of(&api)
                };
                let page = ErrorPage {
                    l: Layout::bare(status.canonical_reason().unwrap_or("Error")),
                    status: status.as_u16(),
                    reason: status.canonical_reason().unwrap_or("Error").to_owned(),
                    message,
                };
                let body = page
                    .render()
                    .unwrap_or_else(|_| "<!doctype html><title>Error</title>".to_owned());
                let mut r = (status, Html(body)).into_response();
                if let Some(v) = api.headers().get(header::RETRY_AFTER) {
                    r.headers_mut().insert(header::RETRY_AFTER, v.clone());
                }
                r
            }
        }
    }
}

/// The message an [`ApiError`] response carries (kept on the error for pages to show).
fn message_of(r: &Response) -> String {
    r.extensions()
        .get::<crate::error::ErrorMessage>()
        .map_or_else(|| "Request refused".to_owned(), |m| m.0.clone())
}

/// Renders `template` as a 200 page.
pub(crate) fn render<T: Template>(template: &T) -> Result<Response, PageError> {
    Ok(Html(template.render()?).into_response())
}

/// Renders `template` with `status` (a form shown again with its error).
pub(crate) fn render_status<T: Template>(
    status: StatusCode,
    template: &T,
) -> Result<Response, PageError> {
    Ok((status, Html(template.render()?)).into_response())
}

/// A signed-in person (the session cookie), with the session's CSRF token. A request without a
/// valid session is sent to sign in; a state-changing one must also come from our origin.
pub(crate) struct SignedIn {
    pub(crate) user: User,
    pub(crate) csrf: String,
}

impl SignedIn {
    /// Who authenticated, as the authorization (`authz`) judges it.
    pub(crate) fn authenticated(&self) -> Authenticated {
        Authenticated::Person(self.user.clone())
    }

    /// This person in organization `org` (id or slug), allowed `op` there by the permission
    /// model; an organization they cannot reach is "not found".
    pub(crate) async fn scope(
        &self,
        state: &AppState,
        org: &str,
        op: Operation,
    ) -> Result<OrgScope, ApiError> {
        crate::authz::org_scope(state, &self.authenticated(), org, op).await
    }
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let htmx = parts.headers.contains_key("hx-request");
        let back = || PageError::SignIn {
            next: parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
            htmx,
        };
        let Some(token) = session_cookie(&parts.headers) else {
            return Err(back());
        };
        crate::extract::same_origin(&parts.method, &parts.headers, &state.config.public_url)?;
        match state.auth.authenticate_session(Some(token)).await {
            Ok(user) => Ok(SignedIn {
                user,
                csrf: csrf::token_for(token),
            }),
            Err(breeze_auth::AuthError::NotSignedIn) => Err(back()),
            Err(e) => Err(ApiError::from(e).into()),
        }
    }
}

/// A state-changing form post by a signed-in person: the session, a valid CSRF token (form
/// field `csrf` or header `X-CSRF-Token`) and the urlencoded form `T`. A wrong or missing
/// token is refused with 403 before the form is looked at.
pub(crate) struct SignedForm<T> {
    pub(crate) who: SignedIn,
    pub(crate) form: T,
    pub(crate) headers: HeaderMap,
}

impl<T: DeserializeOwned + Send> FromRequest<AppState> for SignedForm<T> {
    type Rejection = PageError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let who = SignedIn::from_request_parts(&mut parts, state).await?;
        let bytes = Bytes::from_request(Request::from_parts(parts.clone(), body), state)
            .await
            .map_err(|e| PageError::bad_request(e.body_text()))?;
        let presented = parts
            .headers
            .get(csrf::HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| form_urlencoded_field(&bytes, csrf::FIELD));
        if !csrf::matches(&who.csrf, presented.as_deref()) {
            return Err(ApiError::forbidden(
                "This form has expired or did not come from this site (CSRF token missing or \
                 wrong). Go back, reload the page and try again.",
            )
            .into());
        }
        let form = serde_urlencoded::from_bytes::<T>(&bytes)
            .map_err(|e| PageError::bad_request(format!("Invalid form: {e}")))?;
        Ok(SignedForm {
            who,
            form,
            headers: parts.headers,
        })
    }
}

/// The first value of `name` in an urlencoded body.
pub(crate) fn form_urlencoded_field(body: &[u8], name: &str) -> Option<String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// `/o/{org}/…` that no page answers: the HTML 404 page (signed in or not, the same answer,
/// so it tells nothing about the organization).
async fn no_such_page() -> PageError {
    PageError::Api(ApiError::not_found(
        "There is no such page. Check the address, or go back to the overview.",
    ))
}

/// The operation tool `tool`'s action `action` declares: what the guard judges that call by.
/// A page offering the same change is authorized by this very declaration, so the page and
/// the tool cannot disagree. An unknown tool or action is never allowed (fail closed).
/// A tool without actions (`run_script`) is judged by its own tier and permission.
pub(crate) fn tool_operation(state: &AppState, tool: &str, action: &str) -> Operation {
    match state.pipeline.registry().get(tool) {
        Some(spec)
            if spec.actions.is_empty() || spec.action(&action_args(spec, action)).is_some() =>
        {
            let args = action_args(spec, action);
            Operation {
                tier: spec.effective_tier(&args),
                permission: spec.permission_for(&args),
            }
        }
        _ => Operation {
            tier: Tier::T4,
            permission: Permission::SettingsManage,
        },
    }
}

/// A call of `spec` naming `action` (under the tool's own action key).
fn action_args(spec: &breeze_tools::ToolSpec, action: &str) -> serde_json::Value {
    let mut args = serde_json::Map::new();
    args.insert(spec.action_key.to_owned(), action.into());
    serde_json::Value::Object(args)
}

/// Whether the scope's caller may do `op` now, by the one permission model: what decides if a
/// page shows a button (the post is checked again when it comes).
pub(crate) fn allowed(state: &AppState, scope: &OrgScope, op: Operation) -> bool {
    matches!(
        breeze_core::authz::authorize(&scope.caller, op, state.scope_policy()),
        Ok(Verdict::Allowed)
    )
}

/// This server's Streamable HTTP MCP URL (what the cards show).
pub(crate) fn mcp_url(state: &AppState) -> String {
    format!("{}/mcp", state.config.public_url.trim_end_matches('/'))
}

/// `GET /`: the first organization's overview (or a page saying there is none).
/// `GET /`: the dashboard for a browser; for an MCP client that was given the server's address
/// instead of its endpoint (it asks for an event stream, not a page), the hint.
async fn root(
    state: axum::extract::State<AppState>,
    headers: HeaderMap,
    who: Result<SignedIn, PageError>,
) -> Result<Response, PageError> {
    let accepts = |what: &str| {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains(what))
    };
    if accepts("text/event-stream") && !accepts("text/html") {
        return Ok(misdirected_mcp(state).await);
    }
    home(state, who?).await
}

/// A JSON-RPC request sent to the server's address rather than its MCP endpoint: 404 with a
/// JSON-RPC error naming the endpoint, which MCP clients show their user.
async fn misdirected_mcp(axum::extract::State(state): axum::extract::State<AppState>) -> Response {
    let endpoint = format!("{}/mcp", state.config.public_url.trim_end_matches('/'));
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32601,
            "message": format!("This is Breeze's web address, not its MCP endpoint: connect your MCP client to {endpoint}"),
        },
    });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

async fn home(
    axum::extract::State(state): axum::extract::State<AppState>,
    who: SignedIn,
) -> Result<Response, PageError> {
    let orgs = state.store.user_organizations(who.user.id).await?;
    match orgs.first() {
        Some((org, _)) => Ok(Redirect::to(&format!("/o/{}", org.slug)).into_response()),
        None => {
            let l = Layout::for_user(&state, &who, None, Section::Home, "Breeze").await?;
            render(&NoOrganization { l })
        }
    }
}

#[derive(Template)]
#[template(path = "no_org.html")]
struct NoOrganization {
    l: Layout,
}

/// Whether `next` is a safe place to send a person after sign-in: a path on this site,
/// starting with exactly one `/`, with no backslash, no control or space character, nothing
/// that decodes to one, and no scheme or host. Anything else means `/`.
pub(crate) fn safe_next(next: &str) -> &str {
    fn raw_ok(s: &str) -> bool {
        s.starts_with('/')
            && !s.starts_with("//")
            && !s.contains('\\')
            && s.len() <= 2048
            && s.chars().all(|c| c.is_ascii_graphic())
    }
    // What a decoding hop (a proxy, a framework) would make of it: still a local path, and no
    // control character or backslash anywhere. Twice, for double-encoded separators.
    fn decoded_ok(s: &str) -> bool {
        s.starts_with('/')
            && !s.starts_with("//")
            && !s.contains('\\')
            && !s.chars().any(char::is_control)
    }
    if !raw_ok(next) {
        return "/";
    }
    // A second decoding that fails is only a literal `%` from the first one.
    match percent_decode(next) {
        Some(once) if decoded_ok(&once) => {
            let twice = percent_decode(&once).unwrap_or(once);
            if decoded_ok(&twice) { next } else { "/" }
        }
        _ => "/",
    }
}

/// `s` with every `%XX` decoded; `None` when that is not UTF-8 or an escape is malformed.
fn percent_decode(s: &str) -> Option<String> {
    // The decoder keeps a malformed escape as written; here it makes the path unsafe.
    let well_formed = s.split('%').skip(1).all(|rest| {
        rest.as_bytes()
            .get(..2)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return None;
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn next_accepts_only_same_origin_paths() {
        for good in [
            "/",
            "/o/acme/approvals",
            "/oauth/auth?client_id=x&redirect_uri=http%3A%2F%2F127.0.0.1%2Fcb&state=a%20b",
            "/o/acme/devices?search=web-01&page=2",
            "/oauth/auth?state=100%25",
        ] {
            assert_eq!(safe_next(good), good, "{good}");
        }
        for bad in [
            "",
            "//evil.example",
            "//evil.example/o/acme",
            "///evil.example",
            "https://evil.example/",
            "http:/evil.example",
            "javascript:alert(1)",
            "evil.example",
            "/\\evil.example",
            "\\\\evil.example",
            "/%2fevil.example",
            "/%2Fevil.example",
            "/%5cevil.example",
            "/%5Cevil.example",
            "/%252f%252fevil.example",
            "/%2f%2fevil.example",
            "%2f%2fevil.example",
            "/\tevil",
            "/ /evil.example",
            "/\r\nLocation: https://evil.example",
            "/%0d%0aSet-Cookie:x=1",
            "/%00",
            "/%zz",
            "/\u{3002}evil",
        ] {
            assert_eq!(safe_next(bad), "/", "{bad:?} must fall back to /");
        }
    }
}
