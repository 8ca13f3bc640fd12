//! One chat turn: a person's message in, a stream of [`ChatEvent`]s out, always ending with
//! [`ChatEvent::Done`].
//!
//! [`Assistant::begin`] decides whether the turn may start — the session is the person's and
//! active, the per-user message rate (failing closed when the limiter cannot decide), the
//! organization's budget (failing closed when the database cannot be read), a provider is
//! configured — and stores the person's message before any provider is called, so a provider
//! failure loses nothing. [`Assistant::run`] then loops: the conversation (trimmed to the
//! context window) goes to the provider, text streams out as it comes, the response is stored
//! with its usage and cost in one transaction, and each tool call the model made goes through
//! `Pipeline::call` as the chat's [`Caller`] (`Caller::ai_chat`: the person's role, its own
//! audit actor naming the session) — Tier 1–2 run at once; Tier 3 becomes the one durable
//! approval request an MCP call makes, announced as `approval_required` while the turn waits
//! (approvable from the chat, the approvals page or the CLI); a refused, rejected or expired
//! call goes back to the model as a tool error so it can continue.

use std::{sync::Arc, time::Duration};

use breeze_core::{
    AiMessageRole, AiSessionId, AiSessionStatus, AiToolStatus, ApprovalStatus, AuditEvent,
    AuditResult, Caller, Clock, Operation, OrgId, PermissionSet, Pricing, ScopePolicy, UserId,
    authz,
};
use breeze_limits::{LimiterError, RateLimiter};
use breeze_pipeline::{CallOutcome, Pipeline, errors::refusal_error};
use breeze_store::{AiMessage, AiSession, NewAiMessage, NewAiUsage, Store, StoreError};
use breeze_tools::{ApprovalWait, CallOptions, ErrorCode, ToolError};
use chrono::{Datelike, TimeZone, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    context::{self, PromptFacts},
    provider::{Provider, ProviderConfig, Request, Response, ToolDef},
};

/// The setting that names the provider, quoted when none is configured.
pub const PROVIDER_SETTING: &str = "BREEZE_AI_PROVIDER";

/// One event of a turn's stream, as the dashboard and the CLI read it (`event:` is
/// [`ChatEvent::name`], `data:` the JSON of the fields).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ChatEvent {
    MessageStart {
        message_id: Uuid,
    },
    ContentDelta {
        delta: String,
    },
    ToolUseStart {
        tool_name: String,
        tool_use_id: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        output: Value,
        is_error: bool,
    },
    ApprovalRequired {
        execution_id: Uuid,
        tool_name: String,
        input: Value,
        description: String,
    },
    MessageEnd {
        input_tokens: u64,
        output_tokens: u64,
    },
    Error {
        message: String,
    },
    Done,
}

impl ChatEvent {
    /// The event's name on the stream.
    pub fn name(&self) -> &'static str {
        match self {
            ChatEvent::MessageStart { .. } => "message_start",
            ChatEvent::ContentDelta { .. } => "content_delta",
            ChatEvent::ToolUseStart { .. } => "tool_use_start",
            ChatEvent::ToolResult { .. } => "tool_result",
            ChatEvent::ApprovalRequired { .. } => "approval_required",
            ChatEvent::MessageEnd { .. } => "message_end",
            ChatEvent::Error { .. } => "error",
            ChatEvent::Done => "done",
        }
    }
}

/// The assistant's settings.
#[derive(Debug, Clone)]
pub struct AssistantConfig {
    /// `None`: no provider configured; every turn says which setting to set.
    pub provider: Option<ProviderConfig>,
    pub pricing: Pricing,
    /// Sessions idle this long expire (`BREEZE_AI_SESSION_IDLE_DAYS`, default 30 days).
    pub idle_expiry: Duration,
    /// How long a Tier 3 call in chat waits for a decision before it is rejected
    /// (`BREEZE_AI_APPROVAL_TIMEOUT_SECONDS`, default 300).
    pub approval_timeout: Duration,
    /// Model responses per turn at most (each may call tools).
    pub max_rounds: u32,
    /// The most bytes of one tool's output handed to the model.
    pub max_tool_output_bytes: usize,
    /// Messages per person per [`AssistantConfig::rate_window`].
    pub rate_limit: u32,
    pub rate_window: Duration,
}

impl Default for AssistantConfig {
    fn default() -> Self {
        Self {
            provider: None,
            pricing: Pricing::default(),
            idle_expiry: Duration::from_secs(30 * 86_400),
            approval_timeout: Duration::from_secs(300),
            max_rounds: 8,
            max_tool_output_bytes: 16 * 1024,
            rate_limit: 20,
            rate_window: Duration::from_secs(60),
        }
    }
}

/// Who speaks, where: what a door knows of the signed-in person for a turn.
#[derive(Debug, Clone)]
pub struct Speaker {
    pub org_id: OrgId,
    pub org_name: String,
    pub user_id: UserId,
    pub user_name: String,
    pub user_email: String,
    /// The person's permissions in the organization (`None`: no role there).
    pub permissions: Option<PermissionSet>,
}

/// Why a turn could not start at all (answered without a stream).
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    /// Not the person's session (or none such): indistinguishable on purpose.
    #[error("chat session not found")]
    NotFound,
    #[error("the message is empty")]
    Empty,
    #[error(transparent)]
    Store(StoreError),
}

/// A turn that may run: the person's message is stored.
#[derive(Debug)]
pub struct Begun {
    speaker: Speaker,
    session: AiSession,
    /// Why the turn stops before the provider (budget, rate, provider, session state), said as
    /// the stream's `error`; the message was not stored then.
    refusal: Option<String>,
}

struct Inner {
    store: Store,
    pipeline: Pipeline,
    provider: Option<Provider>,
    limiter: Arc<dyn RateLimiter>,
    clock: Arc<dyn Clock>,
    config: AssistantConfig,
}

/// The assistant. Cheap to clone.
#[derive(Clone)]
pub struct Assistant {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Assistant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assistant").finish_non_exhaustive()
    }
}

/// The error when no provider is configured, naming the setting.
pub fn no_provider_message() -> String {
    format!(
        "No AI provider is configured: set {PROVIDER_SETTING} (anthropic or openai) with \
         BREEZE_AI_MODEL and BREEZE_AI_API_KEY (or BREEZE_AI_BASE_URL for a self-hosted model)."
    )
}

impl Assistant {
    /// The assistant over `store` and `pipeline`, limiting messages with `limiter`.
    pub fn new(
        store: Store,
        pipeline: Pipeline,
        limiter: Arc<dyn RateLimiter>,
        config: AssistantConfig,
    ) -> Self {
        let provider = config.provider.clone().map(Provider::new);
        Self {
            inner: Arc::new(Inner {
                clock: store.clock().clone(),
                store,
                pipeline,
                provider,
                limiter,
                config,
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &AssistantConfig {
        &self.inner.config
    }

    /// The tools offered to `caller`: exactly those it could call (some action its scopes and
    /// role allow), in name order.
    pub fn offered_tools(&self, caller: &Caller) -> Vec<ToolDef> {
        self.inner
            .pipeline
            .visible(caller)
            .filter(|spec| {
                let ops: Vec<Operation> = if spec.actions.is_empty() {
                    vec![Operation {
                        tier: spec.tier,
                        permission: spec.permission,
                    }]
                } else {
                    spec.actions
                        .iter()
                        .map(|a| Operation {
                            tier: a.tier,
                            permission: a.permission,
                        })
                        .collect()
                };
                ops.into_iter()
                    .any(|op| authz::authorize(caller, op, ScopePolicy::default()).is_ok())
            })
            .map(|spec| ToolDef {
                name: spec.name.to_owned(),
                description: spec.description.to_owned(),
                input_schema: spec.listed_input_schema.clone(),
            })
            .collect()
    }

    /// Checks that the turn may start and stores the person's message (see the module docs).
    /// `Err` only when the session is not the person's; every other refusal is the stream's
    /// `error`.
    pub async fn begin(
        &self,
        speaker: Speaker,
        session: AiSessionId,
        text: &str,
    ) -> Result<Begun, BeginError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(BeginError::Empty);
        }
        let ai = self.inner.store.org(speaker.org_id);
        let ai = ai.ai();
        // An idle time past the calendar: the earliest instant, which no session precedes.
        let cutoff = chrono::Duration::from_std(self.inner.config.idle_expiry)
            .ok()
            .and_then(|idle| self.inner.clock.now().checked_sub_signed(idle))
            .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC);
        let refuse = |session, why: String| {
            Ok(Begun {
                speaker: speaker.clone(),
                session,
                refusal: Some(why),
            })
        };
        // Idle sessions expire before they take a message, sweeper or not.
        let session = match ai.expire_if_idle(speaker.user_id, session, cutoff).await {
            Ok(_) => match ai.get_session(speaker.user_id, session).await {
                Ok(s) => s,
                Err(StoreError::NotFound(_)) => return Err(BeginError::NotFound),
                Err(e) => return Err(BeginError::Store(e)),
            },
            Err(e) => return Err(BeginError::Store(e)),
        };
        if session.status != AiSessionStatus::Active {
            return refuse(
                session.clone(),
                format!(
                    "This chat is {}: start a new one to continue (its history stays).",
                    session.status
                ),
            );
        }
        if self.inner.provider.is_none() {
            return refuse(session, no_provider_message());
        }
        if let Some(why) = self.rate_refusal(speaker.user_id).await {
            return refuse(session, why);
        }
        if let Some(why) = self.budget_refusal(speaker.org_id).await {
            return refuse(session, why);
        }
        ai.append_messages(
            speaker.user_id,
            session.id,
            &[NewAiMessage::text(AiMessageRole::User, text)],
            None,
        )
        .await
        .map_err(BeginError::Store)?;
        Ok(Begun {
            speaker,
            session,
            refusal: None,
        })
    }

    /// Why the person may not send a message now, if so: over the rate, or the limiter could
    /// not decide (fails closed).
    async fn rate_refusal(&self, user: UserId) -> Option<String> {
        let c = &self.inner.config;
        let key = format!("ai:chat:{user}");
        match self
            .inner
            .limiter
            .check(&key, c.rate_limit, c.rate_window)
            .await
        {
            Ok(d) if d.allowed => None,
            Ok(d) => Some(format!(
                "Too many messages: at most {} per {} s. Try again in {} s.",
                c.rate_limit,
                c.rate_window.as_secs(),
                d.retry_after.as_secs().max(1)
            )),
            Err(LimiterError::Unavailable(e)) => {
                tracing::warn!(error = %e, "chat refused: the rate limiter cannot decide");
                Some("The message rate limiter is unavailable; refusing to be safe. Try again shortly.".into())
            }
        }
    }

    /// Why the organization may not spend more now, if so: a budget spent, a model without a
    /// price under a budget, or a budget that cannot be read (fails closed).
    pub async fn budget_refusal(&self, org: OrgId) -> Option<String> {
        let ai = self.inner.store.org(org);
        let ai = ai.ai();
        let closed = |e: StoreError| {
            tracing::warn!(error = %e, "chat refused: the AI budget cannot be read");
            Some("The AI budget cannot be checked now (the database did not answer); refusing to be safe.".to_owned())
        };
        let budget = match ai.budget().await {
            Ok(b) => b,
            Err(e) => return closed(e),
        };
        let now = self.inner.clock.now();
        let day = Utc
            .with_ymd_and_hms(now.year(), now.month(), now.day(), 0, 0, 0)
            .single()
            .unwrap_or(now);
        let month = Utc
            .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
            .single()
            .unwrap_or(now);
        for (limit, since, what) in [
            (budget.daily_cents, day, "daily"),
            (budget.monthly_cents, month, "monthly"),
        ] {
            let Some(limit) = limit else { continue };
            let spent = match ai.spent_since(since).await {
                Ok(s) => s,
                Err(e) => return closed(e),
            };
            if spent.unpriced_messages > 0 {
                return Some(format!(
                    "The organization's {what} AI budget cannot be checked: a model without a price \
                     was used. Set its price in BREEZE_AI_PRICING."
                ));
            }
            if spent.micro_cents >= limit.saturating_mul(1_000_000) {
                return Some(format!(
                    "The organization's {what} AI budget of {limit} cents is spent."
                ));
            }
        }
        None
    }

    /// Runs a begun turn, sending its events to `events`; the last is always
    /// [`ChatEvent::Done`]. Runs to its end even when nobody listens any more, so a tool call's
    /// result and the model's answer are stored.
    pub async fn run(&self, begun: Begun, events: mpsc::UnboundedSender<ChatEvent>) {
        let out = Out(events);
        if let Some(why) = begun.refusal {
            out.send(ChatEvent::Error { message: why });
        } else if let Err(message) = self.rounds(&begun.speaker, &begun.session, &out).await {
            out.send(ChatEvent::Error { message });
        }
        out.send(ChatEvent::Done);
    }

    async fn rounds(
        &self,
        speaker: &Speaker,
        session: &AiSession,
        out: &Out,
    ) -> Result<(), String> {
        let Some(provider) = &self.inner.provider else {
            return Err(no_provider_message());
        };
        let caller = Caller::ai_chat(
            session.id,
            speaker.user_id,
            speaker.org_id,
            speaker.permissions,
        );
        let tools = self.offered_tools(&caller);
        let system = context::system_prompt(&PromptFacts {
            org_name: &speaker.org_name,
            user_name: &speaker.user_name,
            user_email: &speaker.user_email,
            page_context: session.page_context.as_ref(),
        });
        let store = self.inner.store.org(speaker.org_id);
        let ai = store.ai();
        let window = provider.config().context_tokens;
        // Room for the answer and the system prompt and tool definitions (roughly).
        let overhead = provider.config().max_tokens as usize
            + system.len() / 4
            + tools
                .iter()
                .map(|t| (t.description.len() + t.input_schema.to_string().len()) / 4)
                .sum::<usize>();
        for _ in 0..self.inner.config.max_rounds {
            let history: Vec<AiMessage> = ai
                .messages(speaker.user_id, session.id)
                .await
                .map_err(|e| format!("the conversation could not be read: {e}"))?;
            let mut turns = context::turns(&history);
            context::trim(&mut turns, window.saturating_sub(overhead));
            let message_id = Uuid::now_v7();
            out.send(ChatEvent::MessageStart { message_id });
            let response = provider
                .complete(
                    Request {
                        system: &system,
                        turns: &turns,
                        tools: &tools,
                    },
                    &mut |delta| {
                        out.send(ChatEvent::ContentDelta {
                            delta: delta.to_owned(),
                        });
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            self.store_response(speaker, session.id, message_id, provider, &response)
                .await
                .map_err(|e| format!("the answer could not be stored: {e}"))?;
            out.send(ChatEvent::MessageEnd {
                input_tokens: response.input_tokens,
                output_tokens: response.output_tokens,
            });
            if response.tool_uses.is_empty() {
                return Ok(());
            }
            for call in &response.tool_uses {
                self.tool_call(&caller, session.id, call, out).await?;
            }
        }
        Err(format!(
            "Stopped after {} model responses in one turn; ask again to continue.",
            self.inner.config.max_rounds
        ))
    }

    /// The response and its tool calls as messages, with its usage and cost, in one
    /// transaction.
    async fn store_response(
        &self,
        speaker: &Speaker,
        session: AiSessionId,
        message_id: Uuid,
        provider: &Provider,
        r: &Response,
    ) -> Result<(), StoreError> {
        let mut messages = vec![NewAiMessage {
            id: message_id,
            ..NewAiMessage::text(AiMessageRole::Assistant, r.text.clone())
        }];
        for call in &r.tool_uses {
            messages.push(NewAiMessage {
                tool_use_id: Some(call.id.clone()),
                tool_name: Some(call.name.clone()),
                payload: Some(call.input.clone()),
                ..NewAiMessage::text(AiMessageRole::ToolUse, "")
            });
        }
        let model = &provider.config().model;
        let usage = NewAiUsage {
            model: model.clone(),
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cost_micro_cents: self.inner.config.pricing.cost_micro_cents(
                model,
                r.input_tokens,
                r.output_tokens,
            ),
        };
        self.inner
            .store
            .org(speaker.org_id)
            .ai()
            .append_messages(speaker.user_id, session, &messages, Some(&usage))
            .await
    }

    /// One tool call through the pipeline, its execution row, its audit record, and its result
    /// stored and handed back. `Err` ends the turn (the result could not be stored, or the
    /// approval wait lost the database).
    async fn tool_call(
        &self,
        caller: &Caller,
        session: AiSessionId,
        call: &crate::provider::ToolUse,
        out: &Out,
    ) -> Result<(), String> {
        let store = &self.inner.store;
        let org = store.org(caller.org());
        out.send(ChatEvent::ToolUseStart {
            tool_name: call.name.clone(),
            tool_use_id: call.id.clone(),
            input: call.input.clone(),
        });
        let execution = org
            .ai()
            .create_execution(caller.user(), session, &call.id, &call.name, &call.input)
            .await
            .map_err(|e| format!("the tool call could not be recorded: {e}"))?;
        let (told, mut requests) = mpsc::unbounded_channel();
        let options = CallOptions {
            approval: ApprovalWait {
                wait: Some(self.inner.config.approval_timeout),
                requested: Some(told),
                // The assistant's requests name their chat session, not a client.
                client: None,
            },
            ..CallOptions::default()
        };
        let never = CancellationToken::new();
        let pipeline = &self.inner.pipeline;
        let running = pipeline.call(caller, &call.name, call.input.clone(), options, &never);
        tokio::pin!(running);
        let mut approval = None;
        let outcome = loop {
            tokio::select! {
                outcome = &mut running => break outcome,
                Some(request) = requests.recv() => {
                    approval = Some(request.id);
                    if let Err(e) = org.ai().execution_awaits(execution.id, request.id).await {
                        tracing::warn!(error = %e, "could not mark a chat tool call as awaiting approval");
                    }
                    out.send(ChatEvent::ApprovalRequired {
                        execution_id: execution.id,
                        tool_name: call.name.clone(),
                        input: call.input.clone(),
                        description: request.description.clone(),
                    });
                }
            }
        };
        let (result, mut status, error) = match outcome {
            CallOutcome::Output(raw) => (
                serde_json::from_str(raw.get()).unwrap_or(Value::Null),
                AiToolStatus::Completed,
                None,
            ),
            CallOutcome::Batch { answer, is_error } => (
                serde_json::from_str(answer.get()).unwrap_or(Value::Null),
                if is_error {
                    AiToolStatus::Failed
                } else {
                    AiToolStatus::Completed
                },
                None,
            ),
            CallOutcome::Failed(e) => failed(e),
            CallOutcome::ReplayedError(raw) => {
                let v: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
                let message = v["error"]["message"]
                    .as_str()
                    .unwrap_or("failed")
                    .to_owned();
                (v, AiToolStatus::Failed, Some(message))
            }
            CallOutcome::Refused(r) => failed(refusal_error(&r, caller.scopes())),
            CallOutcome::UnknownTool => failed(ToolError::new(
                ErrorCode::NotFound,
                format!("there is no tool named {}", call.name),
            )),
            CallOutcome::Pending(r) => {
                // The chat's wait ended without a decision: the request is rejected, so it can
                // no longer be approved behind the model's back.
                let secs = self.inner.config.approval_timeout.as_secs();
                let why = format!("no decision in the chat within {secs} s");
                let audit =
                    AuditEvent::new(caller.actor(), "approval.withdraw", "approval_request");
                if let Err(e) = store.withdraw_approval(r.id, &why, audit).await {
                    tracing::warn!(error = %e, "could not withdraw a chat approval request");
                }
                failed(ToolError::new(
                    ErrorCode::Forbidden,
                    format!("Approval request {} was rejected: {why}", r.id),
                ))
            }
        };
        let is_error = error.is_some() || status == AiToolStatus::Failed;
        let mut end_turn = None;
        if let Some(id) = approval {
            match org.approvals().get_approval(id).await.map(|r| r.status) {
                Ok(
                    ApprovalStatus::Denied
                    | ApprovalStatus::Reported
                    | ApprovalStatus::Expired
                    | ApprovalStatus::Withdrawn,
                ) => status = AiToolStatus::Rejected,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not read a chat approval's status"),
            }
            // The approval wait's circuit breaker: the database failed it repeatedly.
            if status == AiToolStatus::Failed
                && error
                    .as_deref()
                    .is_some_and(|m| m.starts_with("stopped waiting for approval"))
            {
                end_turn = error.clone();
            }
        }
        if let Err(e) = org
            .ai()
            .finish_execution(execution.id, status, Some(&result), error.as_deref())
            .await
        {
            tracing::warn!(error = %e, "could not record a chat tool call's end");
        }
        let mut audit = AuditEvent::new(caller.actor(), "ai.tools.call", "tool")
            .org(caller.org())
            .resource(&call.name)
            .details(json!({
                "session": session, "toolUseId": call.id, "executionId": execution.id,
                "approvalId": approval, "status": status,
            }));
        if let Some(e) = &error {
            audit = audit.failed(AuditResult::Failure, e.clone());
        }
        if let Err(e) = org.audit().append_audit(audit).await {
            tracing::warn!(error = %e, "could not audit a chat tool call");
        }
        let handed = held_to(&result, self.inner.config.max_tool_output_bytes);
        out.send(ChatEvent::ToolResult {
            tool_use_id: call.id.clone(),
            output: result,
            is_error,
        });
        org.ai()
            .append_messages(
                caller.user(),
                session,
                &[NewAiMessage {
                    tool_use_id: Some(call.id.clone()),
                    tool_name: Some(call.name.clone()),
                    is_error,
                    ..NewAiMessage::text(AiMessageRole::ToolResult, handed)
                }],
                None,
            )
            .await
            .map_err(|e| format!("the tool result could not be stored: {e}"))?;
        match end_turn {
            Some(message) => Err(message),
            None => Ok(()),
        }
    }
}

/// A failed call: its structured error as the output, and its message.
fn failed(e: ToolError) -> (Value, AiToolStatus, Option<String>) {
    (e.to_structured(), AiToolStatus::Failed, Some(e.message))
}

/// `output` as the JSON text handed to the model, held to `max` bytes: over it, a valid JSON
/// object that says so and carries the start of the text, never a cut-off document.
pub fn held_to(output: &Value, max: usize) -> String {
    let text = output.to_string();
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(200).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({
        "truncated": true,
        "originalBytes": text.len(),
        "note": "The output was longer than the assistant's budget; ask for a narrower query \
                 (filters, a limit) to see the rest.",
        "start": &text[..end],
    })
    .to_string()
}

/// The turn's event sink: a listener gone away is no error (the turn still finishes).
struct Out(mpsc::UnboundedSender<ChatEvent>);

impl Out {
    fn send(&self, e: ChatEvent) {
        let _ = self.0.send(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_over_the_budget_stays_valid_json() {
        let big = json!({ "rows": vec!["ü".repeat(50); 200] });
        let held = held_to(&big, 1000);
        let v: Value = serde_json::from_str(&held).unwrap();
        assert_eq!(v["truncated"], true);
        assert_eq!(v["originalBytes"], big.to_string().len());
        assert!(held.len() <= 1200, "{}", held.len());
        let small = json!({ "ok": 1 });
        assert_eq!(held_to(&small, 1000), small.to_string());
    }

    #[test]
    fn events_serialize_as_the_stream_names_them() {
        let e = ChatEvent::ToolResult {
            tool_use_id: "t".into(),
            output: json!(1),
            is_error: false,
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({ "type": "tool_result", "toolUseId": "t", "output": 1, "isError": false })
        );
        assert_eq!(e.name(), "tool_result");
        assert_eq!(
            serde_json::to_value(ChatEvent::Done).unwrap(),
            json!({ "type": "done" })
        );
    }
}
