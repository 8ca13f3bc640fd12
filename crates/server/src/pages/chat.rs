//! The AI assistant's chat in the dashboard: the person's sessions (newest first, searchable),
//! one session's conversation with a card per tool call, and the composer.
//!
//! `GET /o/{org}/chat` renders the page (`?session=<id>` one of the person's own sessions;
//! another person's answers 404, as over REST). A page that links here names what it shows
//! (`?device=<id>`, `?alert=<id>`, `?context=overview`, or any other `?context=<text>` as a
//! custom context); a device or alert is looked up in this organization (so it is true, and
//! another organization's device is "not found"), and every context is shown as a badge and
//! injected into the session `POST /o/{org}/chat/sessions` opens (a form with the CSRF token,
//! like every form). `GET /o/{org}/chat/sessions?q=&session=` is the list alone, for the
//! search box (htmx) and for the script, which reloads it once it opened a session and after
//! each turn (a new chat, or a title changed elsewhere, shows without reloading the page).
//!
//! `POST /o/{org}/chat/sessions/{id}` renames, closes or deletes one of the person's own
//! sessions (`op` = `rename` with `title`, `close`, `delete`), through the same store calls
//! as the REST door; anyone else's session answers 404.
//!
//! The live part is `assets/chat.js` (no inline script): it sends a message to the REST route
//! `POST /api/v1/ai/sessions/{id}/messages` and reads its event stream, approves or rejects a
//! waiting tool call with `POST …/approve/{execution}`, and polls `GET /api/v1/ai/usage` for
//! the cost indicator. Those routes are the REST door's: authorized there, same origin only.

use std::collections::HashMap;

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use breeze_core::{AiMessageRole, AiSessionId, AiToolStatus, AuditEvent, Operation, Permission};
use breeze_store::{AiSession, AiToolExecution, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Layout, PageError, Section, SignedForm, SignedIn, assets, render};
use crate::{ApiError, AppState, authz::OrgScope, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/chat", get(show))
        .route("/o/{org}/chat/sessions", get(list_fragment).post(create))
        .route("/o/{org}/chat/sessions/{id}", axum::routing::post(change))
}

/// Sessions the list shows.
const LISTED: i64 = 50;

/// The longest custom page context (`?context=<text>`), in characters.
const MAX_CUSTOM_CONTEXT: usize = 200;

/// What a page said the chat is about, as the query string names it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct About {
    device: String,
    alert: String,
    context: String,
}

impl About {
    /// The page context, looked up in this organization; `None` when none was named.
    async fn resolve(
        &self,
        state: &AppState,
        scope: &OrgScope,
    ) -> Result<Option<Value>, PageError> {
        let not_found = |what: &'static str| PageError::from(ApiError::not_found(what));
        let store = scope.store(state);
        if !self.device.is_empty() {
            let id = self
                .device
                .parse()
                .map_err(|_| not_found("device not found"))?;
            let d = store.devices().get_device(id).await?;
            return Ok(Some(
                json!({ "type": "device", "id": d.id, "hostname": d.hostname }),
            ));
        }
        if !self.alert.is_empty() {
            let id = Uuid::parse_str(&self.alert).map_err(|_| not_found("alert not found"))?;
            let a = store.alerts().get_alert(id).await?;
            return Ok(Some(json!({
                "type": "alert", "id": a.id, "title": a.title, "deviceId": a.device_id,
                "severity": a.severity, "status": a.status,
            })));
        }
        match self.context.trim() {
            "" => Ok(None),
            "overview" => Ok(Some(
                json!({ "type": "overview", "organization": scope.org.name }),
            )),
            // Any other text is a custom context a page names (a ticket, a report…): shown
            // and injected as given, bounded like a title; it names nothing looked up.
            label if label.chars().count() > MAX_CUSTOM_CONTEXT => Err(PageError::bad_request(
                format!("A custom context is at most {MAX_CUSTOM_CONTEXT} characters."),
            )),
            label => Ok(Some(json!({ "type": "custom", "label": label }))),
        }
    }
}

/// The badge a page context shows: its kind and what it names.
fn badge(ctx: Option<&Value>) -> String {
    let Some(ctx) = ctx else {
        return String::new();
    };
    let s = |k: &str| ctx[k].as_str().unwrap_or_default().to_owned();
    match ctx["type"].as_str() {
        Some("device") => format!("Device: {}", s("hostname")),
        Some("alert") => format!("Alert: {}", s("title")),
        Some("overview") => "Overview".to_owned(),
        Some("custom") if !s("label").is_empty() => format!("Context: {}", s("label")),
        Some(other) => format!("Context: {other}"),
        None => "Custom context".to_owned(),
    }
}

struct SessionLink {
    id: String,
    title: String,
    status: String,
    when: String,
    active: bool,
}

/// One entry of the conversation: a message, or a tool call's card.
struct Entry {
    /// `user`, `assistant`, `system` or `tool`.
    kind: &'static str,
    text: String,
    tool: String,
    tool_use_id: String,
    input: String,
    output: String,
    is_error: bool,
    status: String,
    execution_id: String,
    /// Waiting for the person's decision: the card shows Approve / Reject.
    awaiting: bool,
}

impl Entry {
    fn message(kind: &'static str, text: String) -> Self {
        Self {
            kind,
            text,
            tool: String::new(),
            tool_use_id: String::new(),
            input: String::new(),
            output: String::new(),
            is_error: false,
            status: String::new(),
            execution_id: String::new(),
            awaiting: false,
        }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// The conversation as entries: each tool call's card carries its input, its result (the
/// text handed to the model) and its execution's status.
fn entries(messages: Vec<breeze_store::AiMessage>, executions: &[AiToolExecution]) -> Vec<Entry> {
    let by_use: HashMap<&str, &AiToolExecution> = executions
        .iter()
        .map(|e| (e.tool_use_id.as_str(), e))
        .collect();
    let mut out: Vec<Entry> = Vec::new();
    for m in messages {
        match m.role {
            AiMessageRole::User => out.push(Entry::message("user", m.content)),
            AiMessageRole::Assistant if !m.content.is_empty() => {
                out.push(Entry::message("assistant", m.content));
            }
            AiMessageRole::Assistant | AiMessageRole::System => {}
            AiMessageRole::ToolUse => {
                let use_id = m.tool_use_id.unwrap_or_default();
                let exec = by_use.get(use_id.as_str());
                out.push(Entry {
                    tool: m.tool_name.unwrap_or_default(),
                    input: m.payload.as_ref().map(pretty).unwrap_or_default(),
                    status: exec.map(|e| e.status.to_string()).unwrap_or_default(),
                    execution_id: exec.map(|e| e.id.to_string()).unwrap_or_default(),
                    awaiting: exec.is_some_and(|e| {
                        e.status == AiToolStatus::Pending && e.approval_id.is_some()
                    }),
                    tool_use_id: use_id,
                    ..Entry::message("tool", String::new())
                });
            }
            AiMessageRole::ToolResult => {
                let use_id = m.tool_use_id.unwrap_or_default();
                let text = serde_json::from_str::<Value>(&m.content)
                    .map(|v| pretty(&v))
                    .unwrap_or(m.content);
                if let Some(card) = out
                    .iter_mut()
                    .rev()
                    .find(|e| e.kind == "tool" && e.tool_use_id == use_id)
                {
                    card.output = text;
                    card.is_error = m.is_error;
                }
            }
        }
    }
    out
}

#[derive(Template)]
#[template(path = "chat.html")]
struct ChatPage {
    l: Layout,
    /// The organization's slug (the session list's links, shared with its fragment).
    l_org: String,
    chat_js: &'static str,
    chat_css: &'static str,
    /// Whether a model provider is configured; if not, the page says how.
    configured: bool,
    setting: &'static str,
    sessions: Vec<SessionLink>,
    q: String,
    /// The open session ("" for a new chat).
    session_id: String,
    title: String,
    closed: bool,
    badge: String,
    /// The new chat's context as the form carries it back (`device=<id>` …).
    about_field: &'static str,
    about_value: String,
    entries: Vec<Entry>,
}

#[derive(Template)]
#[template(path = "chat_sessions.html")]
struct SessionsFragment {
    l_org: String,
    sessions: Vec<SessionLink>,
    q: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ShowQuery {
    session: String,
    q: String,
    device: String,
    alert: String,
    context: String,
}

async fn scope(state: &AppState, who: &SignedIn, org: &str) -> Result<OrgScope, PageError> {
    Ok(who
        .scope(state, org, Operation::read(Permission::DevicesRead))
        .await?)
}

/// The person's sessions in the organization, newest first, or those matching `q`.
async fn session_links(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    q: &str,
    open: Option<AiSessionId>,
) -> Result<Vec<SessionLink>, PageError> {
    let store = scope.store(state);
    let ai = store.ai();
    let q = q.trim();
    if q.chars().count() > 200 {
        return Err(PageError::bad_request("Search: at most 200 characters."));
    }
    let found = if q.is_empty() {
        ai.list_sessions(who.user.id, LISTED, 0).await?
    } else {
        ai.search_sessions(who.user.id, q, LISTED).await?
    };
    Ok(found
        .into_iter()
        .map(|s| SessionLink {
            id: s.id.to_string(),
            active: Some(s.id) == open,
            title: s.title,
            status: s.status.to_string(),
            when: s.last_active_at.format("%Y-%m-%d %H:%M").to_string(),
        })
        .collect())
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org).await?;
    let not_found = || PageError::from(ApiError::not_found("chat session not found"));
    let open: Option<AiSession> = if q.session.is_empty() {
        None
    } else {
        let id: AiSessionId = q.session.parse().map_err(|_| not_found())?;
        match scope.store(&state).ai().get_session(who.user.id, id).await {
            Ok(s) => Some(s),
            Err(StoreError::NotFound(_)) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        }
    };
    let about = About {
        device: q.device,
        alert: q.alert,
        context: q.context,
    };
    let (about_field, about_value) = if !about.device.is_empty() {
        ("device", about.device.clone())
    } else if !about.alert.is_empty() {
        ("alert", about.alert.clone())
    } else {
        ("context", about.context.clone())
    };
    let (entries, badge) = match &open {
        Some(s) => {
            let store = scope.store(&state);
            let ai = store.ai();
            let messages = ai.messages(who.user.id, s.id).await?;
            let executions = ai.executions(who.user.id, s.id).await?;
            (
                entries(messages, &executions),
                badge(s.page_context.as_ref()),
            )
        }
        None => (
            Vec::new(),
            badge(about.resolve(&state, &scope).await?.as_ref()),
        ),
    };
    let sessions = session_links(&state, &who, &scope, &q.q, open.as_ref().map(|s| s.id)).await?;
    let title = open
        .as_ref()
        .map_or("New chat", |s| s.title.as_str())
        .to_owned();
    let mut l = Layout::for_user(&state, &who, Some(&scope.org), Section::Chat, &title).await?;
    if !about_value.is_empty() {
        // A custom context is free text: encoded for the link's query string.
        let value =
            percent_encoding::utf8_percent_encode(&about_value, percent_encoding::NON_ALPHANUMERIC);
        l.chat_about(&format!("{about_field}={value}"));
    }
    render(&ChatPage {
        l_org: scope.org.slug.clone(),
        l,
        chat_js: assets::url("chat.js"),
        chat_css: assets::url("chat.css"),
        configured: state.assistant.config().provider.is_some(),
        setting: breeze_assistant::PROVIDER_SETTING,
        sessions,
        q: q.q,
        session_id: open.as_ref().map(|s| s.id.to_string()).unwrap_or_default(),
        closed: open
            .as_ref()
            .is_some_and(|s| s.status != breeze_core::AiSessionStatus::Active),
        title,
        badge,
        about_field,
        about_value,
        entries,
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListQuery {
    q: String,
    /// The session the page shows, marked current in the list (the page's script reloads
    /// the list after it opened a session, or after a turn, when a title may have changed).
    session: String,
}

async fn list_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org).await?;
    // A malformed id marks nothing: the list is the same either way.
    let open = q.session.parse::<AiSessionId>().ok();
    let sessions = session_links(&state, &who, &scope, &q.q, open).await?;
    render(&SessionsFragment {
        l_org: scope.org.slug,
        sessions,
        q: q.q,
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NewChat {
    /// The first message, which names the chat (the composer sends the message itself).
    content: String,
    device: String,
    alert: String,
    context: String,
}

/// Opens a session with the page's context and goes to it.
async fn create(
    State(state): State<AppState>,
    RequestId(rid): RequestId,
    Path(org): Path<String>,
    f: SignedForm<NewChat>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = scope(&state, &who, &org).await?;
    let about = About {
        device: f.form.device,
        alert: f.form.alert,
        context: f.form.context,
    };
    let context = about.resolve(&state, &scope).await?;
    let first = f.form.content.trim();
    let title: String = if first.is_empty() {
        "New chat".to_owned()
    } else {
        first.chars().take(60).collect()
    };
    let session = scope
        .store(&state)
        .ai()
        .create_session(
            who.user.id,
            &title,
            context.as_ref(),
            AuditEvent::new(
                who.authenticated().actor(),
                "ai.session.create",
                "ai_session",
            )
            .request(rid),
        )
        .await?;
    Ok(Redirect::to(&format!(
        "/o/{}/chat?session={}",
        scope.org.slug, session.id
    ))
    .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Change {
    /// `rename`, `close` or `delete`.
    op: String,
    title: String,
}

/// Renames, closes or deletes one of the person's sessions, then shows it (or, deleted, the
/// chat page without it).
async fn change(
    State(state): State<AppState>,
    RequestId(rid): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Change>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = scope(&state, &who, &org).await?;
    let not_found = || PageError::from(ApiError::not_found("chat session not found"));
    let id: AiSessionId = id.parse().map_err(|_| not_found())?;
    let store = scope.store(&state);
    let ai = store.ai();
    let audit = |action: &str| {
        AuditEvent::new(who.authenticated().actor(), action, "ai_session").request(rid.clone())
    };
    let gone = |e: StoreError| match e {
        StoreError::NotFound(_) => not_found(),
        other => other.into(),
    };
    let slug = &scope.org.slug;
    match f.form.op.as_str() {
        "rename" => {
            ai.rename_session(who.user.id, id, &f.form.title, audit("ai.session.rename"))
                .await
                .map_err(gone)?;
        }
        "close" => {
            ai.close_session(who.user.id, id, audit("ai.session.close"))
                .await
                .map_err(gone)?;
        }
        "delete" => {
            ai.delete_session(who.user.id, id, audit("ai.session.delete"))
                .await
                .map_err(gone)?;
            return Ok(Redirect::to(&format!("/o/{slug}/chat")).into_response());
        }
        other => {
            return Err(PageError::bad_request(format!(
                "op: {other:?} is none of rename, close, delete"
            )));
        }
    }
    Ok(Redirect::to(&format!("/o/{slug}/chat?session={id}")).into_response())
}
