//! The AI assistant's REST door, for a signed-in person: chat sessions (create, list newest
//! first, search, read with messages and tool calls, rename, close, delete), a message answered
//! as `text/event-stream` (the events of `breeze_assistant::ChatEvent`, always ending with
//! `done`), the decision on a tool call waiting for approval, and usage for the cost indicator.
//!
//! Thin: a session is found among the organizations the person reaches and is theirs alone
//! (anyone else's answers 404); the turn itself is `breeze_assistant`'s. `/sessions/search` is
//! a static segment, so the router matches it before `/sessions/{id}`.

use std::convert::Infallible;

use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use breeze_assistant::{BeginError, ChatEvent, Speaker};
use breeze_core::{
    AiSessionId, AuditEvent, Caller, Decision, Operation, OrgId, Permission, User, authz,
};
use breeze_pipeline::approvals::{DecisionRequest, decide};
use breeze_store::{AiBudget, AiSession, StoreError};
use chrono::Duration;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_stream::wrappers::UnboundedReceiverStream;
use uuid::Uuid;

use crate::{
    ApiError, AppState,
    extract::{Authenticated, Json, RequestId},
};

/// The longest message a person may send.
const MAX_MESSAGE_CHARS: usize = 32_000;

/// The most bytes of page context a session keeps.
const MAX_PAGE_CONTEXT_BYTES: usize = 4_000;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ai/sessions", get(list).post(create))
        .route("/ai/sessions/search", get(search))
        .route(
            "/ai/sessions/{id}",
            get(show).patch(rename).delete(delete_one),
        )
        .route("/ai/sessions/{id}/close", post(close))
        .route("/ai/sessions/{id}/messages", post(message))
        .route("/ai/sessions/{id}/approve/{execution}", post(approve))
        .route("/ai/usage", get(usage))
        .route("/ai/budget", axum::routing::put(set_budget))
}

fn person(who: &Authenticated) -> Result<User, ApiError> {
    who.person("use the AI assistant").cloned()
}

fn audit(who: &Authenticated, action: &str, request_id: Option<String>) -> AuditEvent {
    AuditEvent::new(who.actor(), action, "ai_session").request(request_id)
}

fn session_id(id: &str) -> Result<AiSessionId, ApiError> {
    id.parse()
        .map_err(|_| ApiError::not_found("chat session not found"))
}

/// The organization a request names (`org`: id or slug), or the person's only one.
async fn org_of(state: &AppState, user: &User, named: Option<&str>) -> Result<OrgId, ApiError> {
    let orgs = state.store.user_organizations(user.id).await?;
    match named {
        Some(n) => orgs
            .iter()
            .find(|(o, _)| o.id.to_string() == n || o.slug == n)
            .map(|(o, _)| o.id)
            .ok_or_else(|| ApiError::not_found("organization not found")),
        None if orgs.len() == 1 => Ok(orgs[0].0.id),
        None => Err(ApiError::bad_request(
            "you reach several organizations: name one with org (its id or slug)",
        )),
    }
}

/// The person's session `id`, in whichever of their organizations it is.
async fn find(state: &AppState, user: &User, id: AiSessionId) -> Result<AiSession, ApiError> {
    for (org, _) in state.store.user_organizations(user.id).await? {
        match state.store.org(org.id).ai().get_session(user.id, id).await {
            Ok(s) => return Ok(s),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::not_found("chat session not found"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateBody {
    org: Option<String>,
    title: Option<String>,
    page_context: Option<Value>,
}

async fn create(
    State(state): State<AppState>,
    who: Authenticated,
    RequestId(rid): RequestId,
    Json(body): Json<CreateBody>,
) -> Result<Response, ApiError> {
    let user = person(&who)?;
    let org = org_of(&state, &user, body.org.as_deref()).await?;
    if let Some(ctx) = &body.page_context
        && (!ctx.is_object() || ctx.to_string().len() > MAX_PAGE_CONTEXT_BYTES)
    {
        return Err(ApiError::bad_request(format!(
            "pageContext: a JSON object of at most {MAX_PAGE_CONTEXT_BYTES} bytes"
        )));
    }
    let title = body.title.as_deref().unwrap_or("New chat");
    let session = state
        .store
        .org(org)
        .ai()
        .create_session(
            user.id,
            title,
            body.page_context.as_ref(),
            audit(&who, "ai.session.create", rid),
        )
        .await?;
    Ok((StatusCode::CREATED, axum::Json(session)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    org: Option<String>,
    limit: Option<i64>,
    offset: Option<i64>,
}

async fn list(
    State(state): State<AppState>,
    who: Authenticated,
    Query(q): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let user = person(&who)?;
    let org = org_of(&state, &user, q.org.as_deref()).await?;
    let sessions = state
        .store
        .org(org)
        .ai()
        .list_sessions(user.id, q.limit.unwrap_or(50), q.offset.unwrap_or(0))
        .await?;
    Ok(axum::Json(json!({ "sessions": sessions })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchQuery {
    q: String,
    org: Option<String>,
    limit: Option<i64>,
}

async fn search(
    State(state): State<AppState>,
    who: Authenticated,
    Query(q): Query<SearchQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let user = person(&who)?;
    let org = org_of(&state, &user, q.org.as_deref()).await?;
    if q.q.trim().is_empty() || q.q.chars().count() > 200 {
        return Err(ApiError::bad_request("q: 1 to 200 characters"));
    }
    let sessions = state
        .store
        .org(org)
        .ai()
        .search_sessions(user.id, q.q.trim(), q.limit.unwrap_or(50))
        .await?;
    Ok(axum::Json(json!({ "sessions": sessions })))
}

async fn show(
    State(state): State<AppState>,
    who: Authenticated,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let user = person(&who)?;
    let session = find(&state, &user, session_id(&id)?).await?;
    let ai = state.store.org(session.org_id);
    let ai = ai.ai();
    let messages = ai.messages(user.id, session.id).await?;
    let executions = ai.executions(user.id, session.id).await?;
    Ok(axum::Json(json!({
        "session": session, "messages": messages, "executions": executions,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RenameBody {
    title: String,
}

async fn rename(
    State(state): State<AppState>,
    who: Authenticated,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
    Json(body): Json<RenameBody>,
) -> Result<axum::Json<AiSession>, ApiError> {
    let user = person(&who)?;
    let session = find(&state, &user, session_id(&id)?).await?;
    Ok(axum::Json(
        state
            .store
            .org(session.org_id)
            .ai()
            .rename_session(
                user.id,
                session.id,
                &body.title,
                audit(&who, "ai.session.rename", rid),
            )
            .await?,
    ))
}

async fn close(
    State(state): State<AppState>,
    who: Authenticated,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
) -> Result<axum::Json<AiSession>, ApiError> {
    let user = person(&who)?;
    let session = find(&state, &user, session_id(&id)?).await?;
    Ok(axum::Json(
        state
            .store
            .org(session.org_id)
            .ai()
            .close_session(user.id, session.id, audit(&who, "ai.session.close", rid))
            .await?,
    ))
}

async fn delete_one(
    State(state): State<AppState>,
    who: Authenticated,
    RequestId(rid): RequestId,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let user = person(&who)?;
    let session = find(&state, &user, session_id(&id)?).await?;
    state
        .store
        .org(session.org_id)
        .ai()
        .delete_session(user.id, session.id, audit(&who, "ai.session.delete", rid))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    content: String,
}

/// A person's message, answered as an event stream that always ends with `done`.
async fn message(
    State(state): State<AppState>,
    who: Authenticated,
    Path(id): Path<String>,
    Json(body): Json<MessageBody>,
) -> Result<Response, ApiError> {
    let user = person(&who)?;
    if body.content.chars().count() > MAX_MESSAGE_CHARS {
        return Err(ApiError::bad_request(format!(
            "content: at most {MAX_MESSAGE_CHARS} characters"
        )));
    }
    let session = find(&state, &user, session_id(&id)?).await?;
    let org = state
        .store
        .org(session.org_id)
        .tenancy()
        .organization()
        .await?;
    // The person's role as it stands now: the chat acts with exactly that.
    let access = state
        .store
        .org_access(user.id, session.org_id)
        .await?
        .ok_or_else(|| ApiError::not_found("chat session not found"))?;
    let speaker = Speaker {
        org_id: org.id,
        org_name: org.name,
        user_id: user.id,
        user_name: user.name.clone(),
        user_email: user.email.clone(),
        permissions: Some(access.permissions),
    };
    let begun = match state
        .assistant
        .begin(speaker, session.id, &body.content)
        .await
    {
        Ok(b) => b,
        Err(BeginError::NotFound) => return Err(ApiError::not_found("chat session not found")),
        Err(BeginError::Empty) => return Err(ApiError::bad_request("content: empty message")),
        Err(BeginError::Store(e)) => return Err(e.into()),
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let assistant = state.assistant.clone();
    // Its own task: a person who closes the page does not cut a tool call or its record short.
    tokio::spawn(async move { assistant.run(begun, tx).await });
    let events = UnboundedReceiverStream::new(rx).map(|e: ChatEvent| {
        Ok::<_, Infallible>(
            Event::default()
                .event(e.name())
                .json_data(&e)
                .unwrap_or_else(|_| Event::default().event("error")),
        )
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApproveBody {
    approve: bool,
    reason: Option<String>,
}

/// The person's decision on a tool call of their chat waiting for approval: the same decision
/// on the same request the approvals page and the CLI make.
async fn approve(
    State(state): State<AppState>,
    who: Authenticated,
    RequestId(rid): RequestId,
    Path((id, execution)): Path<(String, String)>,
    Json(body): Json<ApproveBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let actor = who.actor();
    let user = person(&who)?;
    if body.reason.as_ref().is_some_and(|r| r.len() > 1000) {
        return Err(ApiError::bad_request("reason: at most 1000 characters"));
    }
    let session = find(&state, &user, session_id(&id)?).await?;
    let execution =
        Uuid::parse_str(&execution).map_err(|_| ApiError::not_found("tool execution not found"))?;
    let exec = state
        .store
        .org(session.org_id)
        .ai()
        .get_execution(user.id, session.id, execution)
        .await?;
    let Some(approval) = exec.approval_id else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            "this tool call does not wait for an approval",
        ));
    };
    let record = decide(
        &state.store,
        state.pipeline.registry(),
        &user,
        actor,
        DecisionRequest {
            id: approval,
            decision: if body.approve {
                Decision::Approve
            } else {
                Decision::Deny
            },
            reason: body.reason,
            request_id: rid,
        },
    )
    .await?;
    state.pipeline.approvals().notify_decided();
    Ok(axum::Json(
        json!({ "executionId": exec.id, "approval": record }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    org: Option<String>,
    days: Option<i64>,
}

/// Usage per day, model and person, with the budget and what was spent against it.
async fn usage(
    State(state): State<AppState>,
    who: Authenticated,
    Query(q): Query<UsageQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let user = person(&who)?;
    let org = org_of(&state, &user, q.org.as_deref()).await?;
    let days = q.days.unwrap_or(30).clamp(1, 366);
    let ai = state.store.org(org);
    let ai = ai.ai();
    let since = state.clock.now() - Duration::days(days);
    let rows = ai.usage_since(since).await?;
    let budget = ai.budget().await?;
    Ok(axum::Json(json!({
        "days": days,
        "usage": rows,
        "budget": budget,
        "refusal": state.assistant.budget_refusal(org).await,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BudgetBody {
    org: Option<String>,
    daily_cents: Option<i64>,
    monthly_cents: Option<i64>,
}

/// Sets the organization's AI budget (`null`: no limit of that kind): a setting, so a person
/// whose role manages settings, by the one permission model.
async fn set_budget(
    State(state): State<AppState>,
    who: Authenticated,
    RequestId(rid): RequestId,
    Json(body): Json<BudgetBody>,
) -> Result<axum::Json<AiBudget>, ApiError> {
    let user = person(&who)?;
    let org = org_of(&state, &user, body.org.as_deref()).await?;
    let access = state
        .store
        .org_access(user.id, org)
        .await?
        .ok_or_else(|| ApiError::not_found("organization not found"))?;
    let caller = Caller::dashboard_session(user.id, org, Some(access.permissions));
    authz::authorize(
        &caller,
        Operation::write(Permission::SettingsManage),
        state.scope_policy(),
    )
    .map_err(|d| ApiError::forbidden(d.to_string()))?;
    let budget = AiBudget {
        daily_cents: body.daily_cents,
        monthly_cents: body.monthly_cents,
    };
    let ai = state.store.org(org);
    let ai = ai.ai();
    ai.set_budget(
        budget,
        AuditEvent::new(who.actor(), "ai.budget.set", "ai_budget").request(rid),
    )
    .await?;
    Ok(axum::Json(ai.budget().await?))
}
