//! Route modules, one per area, each exposing `router()`; merged here.

pub(crate) mod agents;
pub(crate) mod ai;
pub(crate) mod api_keys;
pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod auth;
pub(crate) mod fleet;
pub(crate) mod health;
pub(crate) mod live_queries;
pub(crate) mod oauth;
pub(crate) mod orgs;
pub(crate) mod payments;
pub(crate) mod protected_paths;
pub(crate) mod reports;
pub(crate) mod tickets;
pub(crate) mod tool_sources;
pub(crate) mod vulnerabilities;

use axum::Router;

use crate::{ApiError, AppState};

/// Everything under `/api/v1`.
pub(crate) fn api_router() -> Router<AppState> {
    Router::new()
        .merge(auth::router())
        .merge(orgs::router())
        .merge(api_keys::router())
        .merge(audit::router())
        .merge(agents::router())
        .merge(live_queries::router())
        .merge(vulnerabilities::router())
        .merge(ai::router())
        .merge(approvals::router())
        .merge(fleet::router())
        .merge(payments::router())
        .merge(protected_paths::router())
        .merge(reports::router())
        .merge(tickets::router())
        .merge(tool_sources::router())
        .merge(oauth::grants_router())
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this endpoint",
    )
}
