//! The audit log of an organization: filtered, newest first, keyset-paginated.

use axum::{
    Json, Router,
    extract::{Query, State, rejection::QueryRejection},
    routing::get,
};
use breeze_core::{ActorType, AiSessionId, AuditResult, Timestamp};
use breeze_store::{AuditCursor, AuditFilter, AuditPage};
use serde::Deserialize;

use crate::{ApiError, AppState, authz::OrgScope};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/audit", get(query))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    action: Option<String>,
    resource_type: Option<String>,
    resource_id: Option<String>,
    actor_type: Option<ActorType>,
    actor_id: Option<String>,
    /// One AI chat session's records (its actor; see `AuditFilter::in_chat_session`).
    session: Option<AiSessionId>,
    result: Option<AuditResult>,
    since: Option<Timestamp>,
    until: Option<Timestamp>,
    cursor: Option<String>,
    limit: Option<u32>,
}

#[derive(serde::Serialize)]
struct Page {
    #[serde(flatten)]
    page: AuditPage,
    /// Pass as `cursor` to get the next page; absent on the last page.
    next: Option<String>,
}

async fn query(
    State(state): State<AppState>,
    scope: OrgScope,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<Page>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > breeze_store::MAX_AUDIT_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {}",
            breeze_store::MAX_AUDIT_PAGE
        )));
    }
    let after = q.cursor.as_deref().map(AuditCursor::decode).transpose()?;
    let filter = AuditFilter {
        action: q.action,
        resource_type: q.resource_type,
        resource_id: q.resource_id,
        actor_type: q.actor_type,
        actor_id: q.actor_id,
        result: q.result,
        since: q.since,
        until: q.until,
    };
    let filter = match q.session {
        Some(session) => filter.in_chat_session(session)?,
        None => filter,
    };
    let page = scope
        .store(&state)
        .audit()
        .query_audit(&filter, after, limit)
        .await?;
    let next = page.next_cursor.map(|c| c.encode());
    Ok(Json(Page { page, next }))
}
