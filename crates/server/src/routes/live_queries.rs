//! Live queries over REST: `GET /orgs/{org}/live-queries` lists the kept queries (paged by
//! `before`), `POST` runs one (`{"question":{...},"target":{...}}` plus optional limits, as
//! `run_live_query`; answers once the run ends, with `"prepareOnly":true` before anything is
//! sent), `GET /orgs/{org}/live-queries/{id}` pages one query's answers (`after`, `limit`).
//! The work is `breeze_domain::live_queries`, shared with the tool and the page.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    routing::get,
};
use breeze_agent_proto::livequery::Question;
use breeze_core::DeviceId;
use breeze_domain::live_queries::{AskedLimits, LiveQueries, LiveTarget, RunLimits};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    ApiError, AppState,
    authz::OrgScope,
    extract::{Json as JsonBody, RequestId},
};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/orgs/{org}/live-queries",
            get(list_queries).post(run_query),
        )
        .route("/orgs/{org}/live-queries/{id}", get(query_results))
}

pub(crate) fn service<'a>(state: &'a AppState, scope: &OrgScope) -> LiveQueries<'a> {
    service_for(state, scope.org.id)
}

/// The organization's live queries, as every door of the server reaches them.
pub(crate) fn service_for(state: &AppState, org: breeze_core::OrgId) -> LiveQueries<'_> {
    let o = state.store.org(org);
    LiveQueries::new(
        o.devices(),
        o.tenancy(),
        o.live_queries(),
        o.commands(),
        state.gateway.org(org),
    )
}

fn domain(e: breeze_domain::Error) -> ApiError {
    let breeze_domain::Error::Store(e) = e;
    e.into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RunRequest {
    question: Question,
    #[serde(default = "organization")]
    target: LiveTarget,
    #[serde(default)]
    prepare_only: bool,
    device_timeout_secs: Option<u32>,
    timeout_secs: Option<u32>,
    max_rows_per_device: Option<u32>,
    max_bytes_per_device: Option<u64>,
    max_rows: Option<u64>,
    max_bytes: Option<u64>,
    retention_days: Option<u32>,
}

fn organization() -> LiveTarget {
    LiveTarget::Organization
}

async fn run_query(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    JsonBody(req): JsonBody<RunRequest>,
) -> Result<Json<Value>, ApiError> {
    let limits = RunLimits::new(AskedLimits {
        device_timeout_secs: req.device_timeout_secs,
        overall_timeout_secs: req.timeout_secs,
        device_rows: req.max_rows_per_device,
        device_bytes: req.max_bytes_per_device,
        query_rows: req.max_rows,
        query_bytes: req.max_bytes,
        retention_days: req.retention_days,
    })
    .map_err(domain)?;
    let svc = service(&state, &scope);
    let prepared = svc
        .prepare(req.question, req.target)
        .await
        .map_err(domain)?;
    if req.prepare_only {
        return Ok(Json(json!({
            "devicesTargeted": prepared.targeted(),
            "devicesOnline": prepared.online.len(),
            "estimatedRows": prepared.estimated_rows(&limits),
            "offline": prepared.offline,
            "unsupported": prepared.unsupported,
        })));
    }
    let s = svc
        .run(
            prepared,
            limits,
            &scope.caller.actor(),
            request_id,
            |_| {},
            |_, _| {},
        )
        .await
        .map_err(domain)?;
    let now = state.store.clock().now();
    Ok(Json(json!({
        "query": query_json(&s.query, &s.counts, now),
        "offline": s.offline,
        "unsupported": s.unsupported,
        "timedOut": s.timed_out,
        "capsHit": s.caps_hit.iter().map(|(d, cap)| json!({
            "deviceId": d.device_id, "hostname": d.hostname, "cap": cap,
        })).collect::<Vec<_>>(),
        "firstRowMs": s.first_row_after.map(|d| d.as_millis() as u64),
        "elapsedMs": s.elapsed.as_millis() as u64,
    })))
}

pub(crate) fn query_json(
    q: &breeze_store::LiveQueryRecord,
    c: &breeze_store::AnswerCounts,
    now: breeze_core::Timestamp,
) -> Value {
    json!({
        "id": q.id,
        "question": q.question,
        "target": q.target,
        "status": q.status(now),
        "createdBy": q.created_by,
        "createdAt": q.created_at,
        "expiresAt": q.expires_at,
        "finishedAt": q.finished_at,
        "devicesTargeted": q.devices_targeted,
        "devicesOnline": q.devices_online,
        "answered": c.answered,
        "failed": c.failed,
        "timedOut": c.timed_out,
        "offline": c.offline,
        "rows": c.rows,
        "queryCap": q.query_cap,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    before: Option<Uuid>,
    limit: Option<u32>,
}

async fn list_queries(
    State(state): State<AppState>,
    scope: OrgScope,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(25).clamp(1, 100);
    let mut page = service(&state, &scope)
        .list(q.before, limit + 1)
        .await
        .map_err(domain)?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let now = state.store.clock().now();
    let next = more.then(|| page.last().map(|(q, _)| q.id)).flatten();
    Ok(Json(json!({
        "queries": page.iter().map(|(q, c)| query_json(q, c, now)).collect::<Vec<_>>(),
        "nextBefore": next,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultsQuery {
    after: Option<Uuid>,
    limit: Option<u32>,
}

async fn query_results(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, id)): Path<(String, String)>,
    Query(q): Query<ResultsQuery>,
) -> Result<Json<Value>, ApiError> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::not_found("live query not found"))?;
    let limit = q.limit.unwrap_or(25).clamp(1, 100);
    let svc = service(&state, &scope);
    let (query, counts) = svc.get(id).await.map_err(domain)?;
    let mut page = svc
        .results(id, q.after.map(DeviceId), limit + 1)
        .await
        .map_err(domain)?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let next = more
        .then(|| page.last().map(|(a, _)| a.device_id))
        .flatten();
    let now = state.store.clock().now();
    Ok(Json(json!({
        "query": query_json(&query, &counts, now),
        "answers": page.iter().map(|(a, hostname)| json!({
            "deviceId": a.device_id,
            "hostname": hostname,
            "status": a.status,
            "rowCount": a.row_count,
            "cap": a.cap,
            "error": a.error,
            "answeredAt": a.answered_at,
            "rows": a.rows,
        })).collect::<Vec<_>>(),
        "nextAfter": next,
    })))
}
