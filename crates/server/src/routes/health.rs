//! Liveness and readiness.

use axum::{Json, Router, extract::State, routing::get};
use serde_json::{Value, json};

use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// The process is up.
async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

/// The process can serve: the database answers.
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.store.ping().await.map_err(ApiError::unavailable)?;
    Ok(Json(json!({ "status": "ready", "database": "ok" })))
}
