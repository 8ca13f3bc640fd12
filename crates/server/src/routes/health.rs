//! Liveness and readiness.

use std::time::Duration;

use axum::{Json, Router, extract::State, routing::get};
use breeze_store::DbHealth;
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

/// Longest a readiness check waits for the database when it probes it itself (SQLite, or
/// before the health monitor's first verdict): a load balancer's check must not hang.
const LIVE_PROBE_TIMEOUT: Duration = Duration::from_millis(900);

/// The process can serve: it is not shutting down, and the database answers and takes writes
/// (a read-only or locked database fails nearly every request, since each one writes its audit
/// record). On PostgreSQL the answer is the health monitor's last verdict (probed every
/// second), so it comes at once even while the database does not answer.
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        return Err(ApiError::unavailable("shutting down"));
    }
    match state.store.health() {
        DbHealth::Ok => {}
        DbHealth::Down { since, error } => {
            return Err(ApiError::unavailable(format!(
                "the database has not answered since {since}: {error}"
            )));
        }
        DbHealth::ReadOnly { since, error } => {
            return Err(ApiError::unavailable(format!(
                "the database cannot write since {since}: {error}"
            )));
        }
        DbHealth::Unknown => {
            let live =
                async {
                    state.store.ping().await.map_err(ApiError::unavailable)?;
                    state.store.ping_write().await.map_err(|e| {
                        ApiError::unavailable(format!("the database cannot write: {e}"))
                    })
                };
            tokio::time::timeout(LIVE_PROBE_TIMEOUT, live)
                .await
                .map_err(|_| {
                    ApiError::unavailable(format!(
                        "the database did not answer within {} ms",
                        LIVE_PROBE_TIMEOUT.as_millis()
                    ))
                })??;
        }
    }
    // Half full: the database takes records slower than requests make them (or not at all),
    // and they wait on this instance's disk; past the limit requests start to be refused.
    let limit = breeze_store::AUDIT_JOURNAL_MAX_BACKLOG / 2;
    if let Some(backlog) = state.store.audit_journal_backlog()
        && backlog >= limit
    {
        return Err(ApiError::unavailable(format!(
            "{backlog} audit records wait in this instance's journal for the database (limit {limit})"
        )));
    }
    Ok(Json(json!({ "status": "ready", "database": "ok" })))
}
