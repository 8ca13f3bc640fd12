//! One tool call, from "this caller asks to run tool T with arguments A" to its result: the
//! pipeline every front door goes through (MCP now; the AI chat and Tool Sources next).
//!
//! [`Pipeline::call`] runs, in order: the guard (`breeze-guard`: scope for the call's tier,
//! RBAC, the per-tool limit, the production allowlist) → input validation against the tool's
//! schema → for Tier 3, the tool's precheck and a person's approval ([`approvals`], durable) →
//! the handler, with a [`breeze_tools::ToolCx`] confined to the cleared organization. The
//! guard's verdict is the only key to a handler (`breeze_guard::Cleared`), so no caller can
//! skip a step. The pipeline knows no HTTP and no MCP: a front door turns its request into a
//! [`Caller`] and a [`CallOutcome`] into its own answer, and writes the request's audit event
//! (with what only it knows: transport, session).
//!
//! Around those steps: a write's `requestId` is claimed after validation and its outcome
//! stored for replays ([`idempotency`]), and the answer is held to the response budget
//! ([`budget`]). Refusals become structured errors with [`errors::refusal_error`]. Arguments
//! that are a batch envelope (`items`, `mode`, `atomicity`) go through [`batch`] instead: every
//! item validated and guarded before the first runs, one approval for a Tier 3 batch, each item
//! then through the same handler.

pub mod approvals;
pub mod batch;
pub mod budget;
pub mod errors;
pub mod idempotency;
pub mod standing;

use std::sync::Arc;

use breeze_gateway::Gateway;
use breeze_guard::{AwaitingApproval, Clearance};
pub use breeze_guard::{Caller, Guard, Refusal};
use breeze_store::{ApprovalRecord, Store};
use breeze_tools::{CallOptions, ErrorCode, RawOutput, Registry, Services, ToolError, ToolSpec};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::approvals::{ApprovalConfig, Approvals, Outcome};

/// How a call ended, for the front door to answer.
#[derive(Debug)]
pub enum CallOutcome {
    /// The tool ran: its structured output, as JSON text.
    Output(RawOutput),
    /// The call failed with a tool error: invalid arguments, the handler's own error, an
    /// approval denied, withdrawn or void, a requestId conflict, a read over the budget.
    Failed(ToolError),
    /// A replay (same requestId, same call) of a call that failed: its stored error envelope
    /// `{"error": …, "replayed": true}`, as JSON text. Nothing ran.
    ReplayedError(RawOutput),
    /// A Tier 3 call still waits for a person; the caller follows it with
    /// `get_approval_status`.
    Pending(Box<ApprovalRecord>),
    /// The guard refused the call; nothing ran.
    Refused(Refusal),
    /// A batch's answer ([`batch`]): its items' outcomes, an error result when nothing ran (an
    /// item was rejected) or no item succeeded.
    Batch { answer: RawOutput, is_error: bool },
    /// No tool has this name.
    UnknownTool,
}

impl CallOutcome {
    /// The outcome's name, as traces record it.
    pub fn kind(&self) -> &'static str {
        match self {
            CallOutcome::Output(_) => "output",
            CallOutcome::Failed(_) => "failed",
            CallOutcome::ReplayedError(_) => "replayed_error",
            CallOutcome::Pending(_) => "pending",
            CallOutcome::Refused(_) => "refused",
            CallOutcome::Batch {
                is_error: false, ..
            } => "batch",
            CallOutcome::Batch { is_error: true, .. } => "batch_error",
            CallOutcome::UnknownTool => "unknown_tool",
        }
    }
}

#[derive(Clone)]
struct Inner {
    store: Store,
    gateway: Gateway,
    registry: Arc<Registry>,
    guard: Guard,
    approvals: Approvals,
    /// `BREEZE_MCP_MAX_RESPONSE_BYTES`: 0 = no budget.
    max_response_bytes: usize,
    /// `BREEZE_MCP_MAX_ITEMS`.
    max_batch_items: usize,
}

/// The call pipeline. Cheap to clone.
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline {
    pub fn new(
        store: Store,
        gateway: Gateway,
        registry: Arc<Registry>,
        guard: Guard,
        approvals: ApprovalConfig,
    ) -> Self {
        let approvals = Approvals::new(
            store.clone(),
            gateway.clone(),
            registry.clone(),
            guard.clone(),
            approvals,
        );
        Self {
            inner: Arc::new(Inner {
                store,
                gateway,
                registry,
                guard,
                approvals,
                max_response_bytes: 0,
                max_batch_items: batch::DEFAULT_MAX_ITEMS,
            }),
        }
    }

    /// The most items one batch may carry (`BREEZE_MCP_MAX_ITEMS`; default
    /// [`batch::DEFAULT_MAX_ITEMS`]).
    #[must_use]
    pub fn with_max_batch_items(mut self, max: usize) -> Self {
        Arc::make_mut(&mut self.inner).max_batch_items = max;
        self
    }

    /// This pipeline with a response budget of `bytes` (0: none; see [`budget`]).
    #[must_use]
    pub fn with_max_response_bytes(self, bytes: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_response_bytes: bytes,
                ..(*self.inner).clone()
            }),
        }
    }

    /// Every tool.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The guard, for listing (`Guard::visible`).
    pub fn guard(&self) -> &Guard {
        &self.inner.guard
    }

    /// The approval workflow: decisions wake waiting calls, the resumer runs orphaned ones.
    pub fn approvals(&self) -> &Approvals {
        &self.inner.approvals
    }

    /// The tools `caller` sees listed, in name order: those whose lowest-tier call its scopes
    /// reach.
    pub fn visible<'a>(&'a self, caller: &'a Caller<'_>) -> impl Iterator<Item = &'a ToolSpec> {
        self.inner
            .registry
            .iter()
            .filter(|t| self.inner.guard.visible(caller.scopes, *t))
    }

    fn services(&self) -> Services<'_> {
        Services {
            store: &self.inner.store,
            gateway: &self.inner.gateway,
        }
    }

    /// Runs one call through every step. `cancel` is the caller's: a cancelled call stops (a
    /// waiting Tier 3 request is withdrawn) and its outcome is not for anyone's eyes.
    ///
    /// Traced as a `tool.call` span (`debug`: free unless traces are exported) with the steps
    /// `guard`, `handler` and `approval.wait` under it.
    pub async fn call(
        &self,
        caller: &Caller<'_>,
        tool: &str,
        arguments: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let span = tracing::debug_span!("tool.call", tool, outcome = tracing::field::Empty);
        let outcome = self
            .call_untraced(caller, tool, arguments, options, cancel)
            .instrument(span.clone())
            .await;
        span.record("outcome", outcome.kind());
        outcome
    }

    async fn call_untraced(
        &self,
        caller: &Caller<'_>,
        tool: &str,
        arguments: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let Some(spec) = self.inner.registry.get(tool) else {
            return CallOutcome::UnknownTool;
        };
        if batch::is_batch(&arguments) {
            // Boxed, like the approval path: rare, and its state would weigh on every call.
            return Box::pin(batch::run(self, caller, spec, arguments, options, cancel)).await;
        }
        let checked = self.inner.guard.check(caller, spec, &arguments);
        let clearance = match checked.instrument(tracing::debug_span!("guard")).await {
            Ok(c) => c,
            Err(r) => return CallOutcome::Refused(r),
        };
        let mut arguments = arguments;
        let request_id = match idempotency::take_request_id(spec, &mut arguments) {
            Ok(id) => id,
            Err(e) => return CallOutcome::Failed(e),
        };
        if let Err(e) = spec.validate(&arguments) {
            return CallOutcome::Failed(e);
        }
        let write = spec.is_write(&arguments);
        let held = match request_id {
            None => None,
            Some(id) => {
                let needs_approval = matches!(clearance, Clearance::NeedsApproval(_));
                let store = &self.inner.store;
                match idempotency::begin(store, caller, spec, needs_approval, &id, &arguments).await
                {
                    idempotency::Begin::Run(held) => Some(held),
                    idempotency::Begin::Answer(outcome) => return outcome,
                }
            }
        };
        let outcome = self
            .run(caller, spec, clearance, arguments, options, cancel)
            .await;
        let outcome = budget::apply(self.inner.max_response_bytes, write, outcome);
        if let Some(held) = held {
            held.finish(&outcome, cancel.is_cancelled()).await;
        }
        outcome
    }

    /// The cleared call itself: at once, or after a person's approval.
    async fn run(
        &self,
        caller: &Caller<'_>,
        spec: &ToolSpec,
        clearance: Clearance,
        arguments: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        match clearance {
            Clearance::Run(cleared) => {
                let handler = spec
                    .call(self.services(), &cleared, arguments, options)
                    .instrument(tracing::debug_span!("handler"));
                tokio::select! {
                    r = handler => match r {
                        Ok(output) => CallOutcome::Output(output),
                        Err(e) => CallOutcome::Failed(e),
                    },
                    () = cancel.cancelled() => CallOutcome::Failed(cancelled()),
                }
            }
            // Boxed: this path's state (~9 KB) would otherwise sit in every call's future, and
            // the transports move whole futures into boxes.
            Clearance::NeedsApproval(awaiting) => {
                Box::pin(self.with_approval(caller, spec, awaiting, arguments, options, cancel))
                    .await
            }
        }
    }

    /// A Tier 3 call: the tool's precheck (what can be refused before a person is asked, with
    /// the call's own error), a durable approval request, a bounded wait with progress, and the
    /// call's result once a person approved it (or why it did not run, or "pending").
    async fn with_approval(
        &self,
        caller: &Caller<'_>,
        spec: &ToolSpec,
        awaiting: AwaitingApproval,
        arguments: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let CallOptions {
            request_id,
            progress,
        } = options;
        let precheck = CallOptions {
            request_id: request_id.clone(),
            progress: None,
        };
        let pin = match spec
            .precheck(self.services(), &awaiting, &arguments, precheck)
            .await
        {
            Ok(pin) => pin,
            Err(e) => return CallOutcome::Failed(e),
        };
        // The approved call is cleared again when it runs (the requester may have lost the
        // right meanwhile): this verdict ends here.
        drop(awaiting);
        let outcome = self
            .inner
            .approvals
            .request_and_wait(caller, spec, &arguments, request_id, pin, progress, cancel)
            .instrument(tracing::debug_span!("approval.wait"))
            .await;
        match outcome {
            Outcome::Ran(Ok(output)) => CallOutcome::Output(raw(&output)),
            Outcome::Ran(Err(e)) | Outcome::Refused(e) => CallOutcome::Failed(e),
            Outcome::Pending(r) => CallOutcome::Pending(r),
        }
    }
}

pub(crate) fn cancelled() -> ToolError {
    ToolError::new(ErrorCode::Internal, "cancelled by the client")
}

/// `value` as JSON text.
pub fn raw(value: &Value) -> RawOutput {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawOutput::default())
}

/// The `structuredContent` of a call that waits for a person's approval.
pub fn pending_answer(r: &ApprovalRecord) -> Value {
    json!({
        "status": "pending_approval",
        "approvalId": r.id,
        "description": r.description,
        "expiresAt": r.expires_at,
        "message": format!(
            "This Tier 3 call waits for a person's approval (approval {}). Once approved it runs once; check with get_approval_status.",
            r.id
        ),
    })
}
