//! Dashboard sign-in: email and password for a session cookie.

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Deserialize, Serialize};

use crate::{
    ApiError, AppState, SESSION_COOKIE,
    extract::{Authenticated, ClientAddr, Json, RequestId, SameOrigin},
};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/auth/login", post(login))
        .route("/auth/logout", post(logout))
        .route("/auth/logout-everywhere", post(logout_everywhere))
        .route("/auth/me", get(me))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginRequest {
    email: String,
    password: String,
}

#[derive(Serialize)]
struct OrgMembership {
    id: breeze_core::OrgId,
    slug: String,
    name: String,
    role: String,
}

async fn memberships(
    state: &AppState,
    user: breeze_core::UserId,
) -> Result<Vec<OrgMembership>, ApiError> {
    Ok(state
        .store
        .user_organizations(user)
        .await?
        .into_iter()
        .map(|(o, role)| OrgMembership {
            id: o.id,
            slug: o.slug,
            name: o.name,
            role,
        })
        .collect())
}

pub(crate) fn cookie(
    state: &AppState,
    value: &str,
    max_age_secs: i64,
) -> Result<HeaderValue, ApiError> {
    let secure = if state.config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
    ))
    .map_err(ApiError::internal)
}

async fn login(
    State(state): State<AppState>,
    _: SameOrigin,
    RequestId(request_id): RequestId,
    ClientAddr(client): ClientAddr,
    Json(req): Json<LoginRequest>,
) -> Result<Response, ApiError> {
    let session = state
        .auth
        .login(&req.email, &req.password, client, request_id)
        .await?;
    let max_age = (session.expires_at - state.clock.now()).num_seconds();
    let orgs = memberships(&state, session.user.id).await?;
    let body = serde_json::json!({ "user": session.user, "organizations": orgs, "expires_at": session.expires_at });
    let mut response = axum::Json(body).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie(&state, &session.token, max_age)?);
    Ok(response)
}

async fn logout(
    State(state): State<AppState>,
    _: SameOrigin,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(token) = crate::extract::session_cookie(&headers) {
        state.auth.logout(token).await?;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie(&state, "", 0)?);
    Ok(response)
}

/// `POST /api/v1/auth/logout-everywhere`: the signed-in person ends every session of theirs
/// (this one included) and revokes every OAuth grant they gave an AI client; audited
/// (`auth.logout_everywhere`, with both counts). API keys manage no credentials.
async fn logout_everywhere(
    State(state): State<AppState>,
    _: SameOrigin,
    RequestId(request_id): RequestId,
    who: Authenticated,
) -> Result<Response, ApiError> {
    let user = who.person("sign anyone out")?;
    let event = breeze_core::AuditEvent::new(who.actor(), "auth.logout_everywhere", "user")
        .request(request_id);
    let (sessions, grants) = state.store.sign_out_everywhere(user.id, event).await?;
    let body = serde_json::json!({ "sessions_ended": sessions, "grants_revoked": grants });
    let mut response = axum::Json(body).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie(&state, "", 0)?);
    Ok(response)
}

async fn me(
    State(state): State<AppState>,
    who: Authenticated,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let user = state.store.get_user(who.user_id()).await?;
    let (principal, orgs) = match &who {
        Authenticated::Person(u) => (
            serde_json::json!({ "type": "user", "id": u.id, "email": u.email }),
            memberships(&state, user.id).await?,
        ),
        Authenticated::Credential(c) => (
            serde_json::json!({
                "type": "api_key",
                "key_id": c.api_key_id(),
                "org_id": c.org(),
                "user_id": c.user(),
                "scopes": c.scopes(),
                "permissions": c.permissions(),
            }),
            memberships(&state, user.id)
                .await?
                .into_iter()
                .filter(|m| m.id == c.org())
                .collect(),
        ),
    };
    Ok(axum::Json(
        serde_json::json!({ "principal": principal, "user": user, "organizations": orgs }),
    ))
}
