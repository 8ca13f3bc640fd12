//! Sign-in and sign-out pages.
//!
//! `GET /login?next=/path` shows the form (and the compact "Connecting an AI agent?" card);
//! `POST /login` checks the password through `AuthService::login` (throttled per email, every
//! attempt audited), sets the same session cookie as the REST sign-in and sends the person to
//! `next` — only when it is a path on this site ([`super::safe_next`]), else to `/`.
//! `POST /logout` ends the session.

use askama::Template;
use axum::{
    Router,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use breeze_auth::AuthError;
use rand::rngs::OsRng;
use serde::Deserialize;

use super::{Layout, PageError, SignedForm, csrf, render_status, safe_next};
use crate::{
    ApiError, AppState,
    extract::{RequestId, same_origin, session_cookie},
};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/login", get(show).post(submit))
        .route("/logout", post(logout))
}

/// Where to sign in before going to `next`.
pub(crate) fn login_url(next: &str) -> String {
    let next = safe_next(next);
    if next == "/" {
        "/login".to_owned()
    } else {
        let encoded: String =
            serde_urlencoded::to_string([("next", next)]).unwrap_or_else(|_| "next=%2F".to_owned());
        format!("/login?{encoded}")
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    l: Layout,
    next: String,
    email: String,
    error: String,
    login_token: String,
    mcp_url: String,
}

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// The pre-session token from the `breeze_login` cookie.
fn login_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == csrf::LOGIN_COOKIE)
        .map(|(_, value)| value)
}

fn cookie_header(state: &AppState, name: &str, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .unwrap_or(HeaderValue::from_static(""))
}

/// The sign-in form, with a fresh pre-session token (cookie and hidden field).
fn form(
    state: &AppState,
    status: StatusCode,
    next: &str,
    email: &str,
    error: &str,
) -> Result<Response, PageError> {
    let token = breeze_auth::api_key::random_token(&mut OsRng);
    let page = LoginPage {
        l: Layout::bare("Sign in"),
        next: next.to_owned(),
        email: email.to_owned(),
        error: error.to_owned(),
        login_token: token.clone(),
        mcp_url: super::mcp_url(state),
    };
    let mut r = render_status(status, &page)?;
    r.headers_mut().append(
        header::SET_COOKIE,
        cookie_header(state, csrf::LOGIN_COOKIE, &token, 3600),
    );
    Ok(r)
}

async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<NextQuery>,
) -> Result<Response, PageError> {
    let next = safe_next(q.next.as_deref().unwrap_or("/"));
    // Already signed in: straight on.
    if let Some(token) = session_cookie(&headers)
        && state.auth.authenticate_session(Some(token)).await.is_ok()
    {
        return Ok(Redirect::to(next).into_response());
    }
    form(&state, StatusCode::OK, next, "", "")
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    next: String,
    #[serde(default)]
    csrf: String,
}

async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    RequestId(request_id): RequestId,
    crate::extract::ClientAddr(client): crate::extract::ClientAddr,
    body: axum::body::Bytes,
) -> Result<Response, PageError> {
    same_origin(
        &axum::http::Method::POST,
        &headers,
        &state.config.public_url,
    )?;
    let f: LoginForm = serde_urlencoded::from_bytes(&body)
        .map_err(|e| PageError::bad_request(format!("Invalid form: {e}")))?;
    let next = safe_next(&f.next);
    let expected = login_cookie(&headers).unwrap_or_default();
    if !csrf::matches(expected, Some(&f.csrf)) {
        return form(
            &state,
            StatusCode::FORBIDDEN,
            next,
            &f.email,
            "The sign-in form expired or did not come from this site. Please try again.",
        );
    }
    if f.email.trim().is_empty() || f.password.is_empty() {
        return form(
            &state,
            StatusCode::BAD_REQUEST,
            next,
            &f.email,
            "Enter your email and password.",
        );
    }
    match state
        .auth
        .login(&f.email, &f.password, client, request_id)
        .await
    {
        Ok(session) => {
            let max_age = (session.expires_at - state.clock.now()).num_seconds();
            let mut r = Redirect::to(next).into_response();
            let cookie = crate::routes::auth::cookie(&state, &session.token, max_age)?;
            r.headers_mut().append(header::SET_COOKIE, cookie);
            r.headers_mut().append(
                header::SET_COOKIE,
                cookie_header(&state, csrf::LOGIN_COOKIE, "", 0),
            );
            Ok(r)
        }
        Err(AuthError::InvalidCredentials) => form(
            &state,
            StatusCode::UNAUTHORIZED,
            next,
            &f.email,
            "Invalid email or password.",
        ),
        Err(e @ AuthError::TooManyAttempts { .. }) => {
            let api = ApiError::from(e);
            let message = api.message.clone();
            let mut r = form(
                &state,
                StatusCode::TOO_MANY_REQUESTS,
                next,
                &f.email,
                &message,
            )?;
            if let Some(v) = api.into_response().headers().get(header::RETRY_AFTER) {
                r.headers_mut().insert(header::RETRY_AFTER, v.clone());
            }
            Ok(r)
        }
        Err(e) => Err(ApiError::from(e).into()),
    }
}

#[derive(Deserialize)]
struct Empty {}

async fn logout(
    State(state): State<AppState>,
    f: SignedForm<Empty>,
) -> Result<Response, PageError> {
    let SignedForm {
        who,
        form: Empty {},
        headers,
    } = f;
    tracing::debug!(user = %who.user.id, "signing out");
    if let Some(token) = session_cookie(&headers) {
        state.auth.logout(token).await.map_err(ApiError::from)?;
    }
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        crate::routes::auth::cookie(&state, "", 0)?,
    );
    Ok(r)
}
