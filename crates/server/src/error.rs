//! The one error type of the HTTP edge and its mapping to `{"error":{"code","message"}}`.
//!
//! 5xx errors are logged with their detail and answered with a generic message; everything
//! else tells the client exactly what was wrong.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use breeze_auth::AuthError;
use breeze_store::StoreError;
use serde_json::json;

/// An HTTP error: status, machine-readable code, human message.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// For 5xx: what really happened, logged but never sent.
    detail: Option<String>,
    /// Seconds for a `Retry-After` header; the body then says `"retryable": true`.
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a message the client may read.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            detail: None,
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// A failure of ours; `detail` is logged, the client sees a generic message.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: "Internal server error".into(),
            detail: Some(detail.to_string()),
            retry_after: None,
        }
    }

    /// A dependency is down.
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "unavailable",
            message: "Service temporarily unavailable".into(),
            detail: Some(detail.to_string()),
            retry_after: None,
        }
    }
}

impl ApiError {
    /// Adds a `Retry-After` header of `secs` seconds.
    #[must_use]
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, detail = self.detail.as_deref().unwrap_or(""), "request failed");
        }
        let body = if self.retry_after.is_some() {
            json!({ "error": { "code": self.code, "message": self.message, "retryable": true } })
        } else {
            json!({ "error": { "code": self.code, "message": self.message } })
        };
        let mut response = (self.status, Json(body)).into_response();
        // For the dashboard, which answers the same error as a page.
        response
            .extensions_mut()
            .insert(ErrorMessage(self.message.clone()));
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("X-API-Key"),
            );
        }
        response
    }
}

/// The client-readable message of an error response, kept as a response extension so the
/// dashboard can show it on its error page.
#[derive(Debug, Clone)]
pub(crate) struct ErrorMessage(pub(crate) String);

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::not_found(format!("{what} not found")),
            StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            StoreError::Invalid(m) => ApiError::bad_request(m),
            StoreError::Forbidden(m) => ApiError::forbidden(m),
            // Locked, read-only, unreachable: the request may succeed in a moment.
            StoreError::Unavailable(_) => ApiError::unavailable(e).retry_after(1),
            other => ApiError::internal(other),
        }
    }
}

impl From<breeze_gateway::GatewayError> for ApiError {
    fn from(e: breeze_gateway::GatewayError) -> Self {
        match e {
            breeze_gateway::GatewayError::Store(s) => s.into(),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::MissingApiKey
            | AuthError::InvalidApiKeyFormat
            | AuthError::InvalidApiKey
            | AuthError::InvalidCredentials
            | AuthError::MissingDeviceToken
            | AuthError::InvalidDeviceToken
            | AuthError::InvalidEnrollmentKey
            | AuthError::InvalidReenrollToken
            | AuthError::NotSignedIn => ApiError::unauthorized(e.to_string()),
            AuthError::TooManyAttempts { retry_after } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                AuthError::TooManyAttempts { retry_after }.to_string(),
            )
            .retry_after(retry_after.as_secs().max(1)),
            AuthError::Unavailable => ApiError::unavailable("sign-in limiter unavailable"),
            AuthError::Forbidden(m) => ApiError::forbidden(m),
            AuthError::Invalid(m) => ApiError::bad_request(m),
            AuthError::Store(s) => s.into(),
        }
    }
}

impl From<breeze_sources::service::SourcesError> for ApiError {
    fn from(e: breeze_sources::service::SourcesError) -> Self {
        use breeze_sources::service::SourcesError as E;
        match e {
            E::Store(e) => e.into(),
            E::NoKey => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "tool_sources_unavailable",
                e.to_string(),
            ),
            E::Invalid(_) | E::Egress(_) | E::Auth(_) => ApiError::bad_request(e.to_string()),
            E::Vault(e) => ApiError::internal(e),
        }
    }
}

impl From<breeze_sources::service::CallFailure> for ApiError {
    fn from(e: breeze_sources::service::CallFailure) -> Self {
        use breeze_sources::service::CallFailure as F;
        match e {
            F::Unknown(_) => ApiError::not_found(e.to_string()),
            F::Unavailable(_) => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            F::Upstream(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", e.to_string())
            }
        }
    }
}
