//! Approval requests for people: list the pending ones of every organization you can reach,
//! and approve, deny or report one. Only a signed-in person decides — an API key cannot
//! approve its own (or anyone's) Tier 3 call.

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, post},
};
use breeze_core::User;
use breeze_store::{ApprovalRecord, Decision};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use breeze_pipeline::approvals::{DecideError, DecisionRequest, decide, find_for};

use crate::{
    ApiError, AppState,
    extract::{Authenticated, RequestId},
};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/approvals", get(list))
        .route("/approvals/{id}", get(show))
        .route("/approvals/{id}/{decision}", post(decide_one))
}

fn person(who: Authenticated) -> Result<User, ApiError> {
    who.person("see or decide approval requests").cloned()
}

impl From<DecideError> for ApiError {
    fn from(e: DecideError) -> Self {
        match e {
            DecideError::NotFound => ApiError::not_found("approval request not found"),
            DecideError::Forbidden(m) => ApiError::forbidden(m),
            DecideError::Store(s) => s.into(),
        }
    }
}

async fn list(State(state): State<AppState>, who: Authenticated) -> Result<Json<Value>, ApiError> {
    let user = person(who)?;
    let orgs: Vec<_> = state
        .store
        .user_organizations(user.id)
        .await?
        .into_iter()
        .map(|(o, _)| o.id)
        .collect();
    let pending = state.store.cross_org().pending_approvals(&orgs).await?;
    Ok(Json(json!({ "approvals": pending })))
}

async fn show(
    State(state): State<AppState>,
    who: Authenticated,
    Path(id): Path<String>,
) -> Result<Json<ApprovalRecord>, ApiError> {
    let user = person(who)?;
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::not_found("approval request not found"))?;
    Ok(Json(find_for(&state.store, user.id, id).await?))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    reason: Option<String>,
}

async fn decide_one(
    State(state): State<AppState>,
    who: Authenticated,
    RequestId(request_id): RequestId,
    Path((id, decision)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Json<ApprovalRecord>, ApiError> {
    let actor = who.actor();
    let user = person(who)?;
    let decision: Decision = decision.parse().map_err(|_| {
        ApiError::not_found(format!(
            "no decision {decision:?}; use approve, deny or report"
        ))
    })?;
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::not_found("approval request not found"))?;
    let body: DecisionBody = if body.iter().all(u8::is_ascii_whitespace) {
        DecisionBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("Invalid request body: {e}")))?
    };
    let reason = body.reason;
    if reason.as_ref().is_some_and(|r| r.len() > 1000) {
        return Err(ApiError::bad_request("reason: at most 1000 characters"));
    }
    let record = decide(
        &state.store,
        state.pipeline.registry(),
        &user,
        actor,
        DecisionRequest {
            id,
            decision,
            reason,
            request_id,
        },
    )
    .await?;
    state.pipeline.approvals().notify_decided();
    Ok(Json(record))
}
