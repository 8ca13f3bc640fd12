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

/// The process can serve: it is not shutting down, and the database answers and takes writes
/// (a read-only or locked database fails nearly every request, since each one writes its audit
/// record).
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        return Err(ApiError::unavailable("shutting down"));
    }
    state.store.ping().await.map_err(ApiError::unavailable)?;
    state
        .store
        .ping_write()
        .await
        .map_err(|e| ApiError::unavailable(format!("the database cannot write: {e}")))?;
    Ok(Json(json!({ "status": "ready", "database": "ok" })))
}
