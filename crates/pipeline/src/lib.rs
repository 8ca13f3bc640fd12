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
//! that are a batch envelope ([`envelope`]) go through [`batch`], which composes the same steps
//! per item: every item cleared before the first runs, one approval for a Tier 3 batch, each
//! item then run as a single call runs. An approved request runs through `release.rs`, whoever
//! claimed it: the waiting call, or the resumer ([`Pipeline::spawn_resumer`]).

pub mod approvals;
pub mod batch;
pub mod budget;
pub mod envelope;
pub mod errors;
mod external;
pub use external::ExternalListing;
pub mod idempotency;
mod progress;
mod release;
pub mod standing;

use std::sync::Arc;

pub use breeze_core::Caller;
use breeze_gateway::Gateway;
use breeze_guard::{AwaitingApproval, Clearance, Cleared};
pub use breeze_guard::{Guard, Refusal};
use breeze_store::{ApprovalRecord, Store};
use breeze_tools::{
    ApprovalWait, CallOptions, ErrorCode, Pin, ProgressReport, RawOutput, Registry, ToolError,
    ToolSpec, Unscoped,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    approvals::{ApprovalConfig, Approvals, Draft, Waited},
    idempotency::{Begin, Held},
};

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

/// Why a call stopped before it ran: the guard refused it, or its arguments are invalid.
#[derive(Debug)]
pub(crate) enum Stop {
    Refused(Refusal),
    Invalid(ToolError),
}

impl Stop {
    /// The stop as a tool error, for a caller holding `caller`'s scopes (a batch item's).
    pub(crate) fn into_error(self, caller: &Caller) -> ToolError {
        match self {
            Stop::Refused(r) => errors::refusal_error(&r, caller.scopes()),
            Stop::Invalid(e) => e,
        }
    }
}

impl From<Stop> for CallOutcome {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::Refused(r) => CallOutcome::Refused(r),
            Stop::Invalid(e) => CallOutcome::Failed(e),
        }
    }
}

/// Whether a guard check counts the call against the tool's rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A call about to run (or to be requested).
    Yes,
    /// A preview, or a check that only looks: the call was or will be counted elsewhere.
    No,
}

#[derive(Clone)]
struct Inner {
    unscoped: Unscoped,
    store: Store,
    registry: Arc<Registry>,
    guard: Guard,
    approvals: Approvals,
    /// `BREEZE_MCP_MAX_RESPONSE_BYTES`: 0 = no budget.
    max_response_bytes: usize,
    /// `BREEZE_MCP_MAX_ITEMS`.
    max_batch_items: usize,
    /// Tool Sources, when configured: the external tools a name the registry lacks may be.
    sources: Option<breeze_sources::service::Sources>,
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
        let approvals = Approvals::new(store.clone(), approvals);
        Self {
            inner: Arc::new(Inner {
                unscoped: Unscoped::new(store.clone(), gateway),
                store,
                registry,
                guard,
                approvals,
                max_response_bytes: 0,
                max_batch_items: envelope::DEFAULT_MAX_ITEMS,
                sources: None,
            }),
        }
    }

    /// The most items one batch may carry (`BREEZE_MCP_MAX_ITEMS`; default
    /// [`envelope::DEFAULT_MAX_ITEMS`]).
    #[must_use]
    pub fn with_max_batch_items(mut self, max: usize) -> Self {
        Arc::make_mut(&mut self.inner).max_batch_items = max;
        self
    }

    /// This pipeline calling the external tools of `sources` too (see `external.rs`).
    #[must_use]
    pub fn with_sources(mut self, sources: breeze_sources::service::Sources) -> Self {
        Arc::make_mut(&mut self.inner).sources = Some(sources);
        self
    }

    /// This pipeline's tools reaching the outside billing services (payment links,
    /// distributor lookups) through `billing`.
    #[must_use]
    pub fn with_billing(mut self, billing: breeze_billing::Billing) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.unscoped = inner.unscoped.clone().with_billing(billing);
        self
    }

    /// Tool Sources, when configured.
    pub fn sources(&self) -> Option<&breeze_sources::service::Sources> {
        self.inner.sources.as_ref()
    }

    /// This pipeline with a response budget of `bytes` (0: none; see [`budget`]).
    #[must_use]
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.inner).max_response_bytes = bytes;
        self
    }

    /// Every tool.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The guard, for listing (`Guard::visible`).
    pub fn guard(&self) -> &Guard {
        &self.inner.guard
    }

    /// The approval workflow: decisions wake waiting calls.
    pub fn approvals(&self) -> &Approvals {
        &self.inner.approvals
    }

    /// The tools `caller` sees listed, in name order: those whose lowest-tier call its scopes
    /// reach.
    pub fn visible<'a>(&'a self, caller: &Caller) -> impl Iterator<Item = &'a ToolSpec> + 'a {
        let scopes = caller.scopes();
        self.inner
            .registry
            .iter()
            .filter(move |t| self.inner.guard.visible(scopes, *t))
    }

    /// Runs one call through every step. `cancel` is the caller's: a cancelled call stops (a
    /// waiting Tier 3 request is withdrawn) and its outcome is not for anyone's eyes.
    ///
    /// Traced as a `tool.call` span (`debug`: free unless traces are exported) with the steps
    /// `guard`, `handler` and `approval.wait` under it.
    pub async fn call(
        &self,
        caller: &Caller,
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

    /// The one call path: the request id taken out → the guard and validation
    /// ([`Pipeline::clear`]) → the idempotency claim ([`Pipeline::hold`]) → the handler now
    /// ([`Pipeline::run_now`]) or after a person's approval → the budget and the claim's
    /// outcome ([`Pipeline::settle`]). A batch composes the same steps per item ([`batch`]).
    async fn call_untraced(
        &self,
        caller: &Caller,
        tool: &str,
        mut arguments: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let Some(spec) = self.inner.registry.get(tool) else {
            // Boxed like the approval path: external calls are the rarer kind.
            return Box::pin(self.call_external(caller, tool, arguments, options, cancel)).await;
        };
        if envelope::is_batch(&arguments) {
            // Boxed, like the approval path: rare, and its state would weigh on every call.
            return Box::pin(batch::run(self, caller, spec, arguments, options, cancel)).await;
        }
        // Out before the guard: the clearance is bound to the arguments the handler gets.
        let request_id = match idempotency::take_request_id(spec, &mut arguments) {
            Ok(id) => id,
            Err(e) => return CallOutcome::Failed(e),
        };
        let clearance = match self
            .clear(caller, spec, &arguments, Count::Yes)
            .instrument(tracing::debug_span!("guard"))
            .await
        {
            Ok(c) => c,
            Err(stop) => return stop.into(),
        };
        let needs_approval = matches!(clearance, Clearance::NeedsApproval(_));
        let write = spec.is_write(&arguments);
        let held = match self
            .hold(
                caller,
                spec,
                request_id.as_deref(),
                needs_approval,
                &arguments,
            )
            .await
        {
            Ok(held) => held,
            Err(answer) => return answer,
        };
        let outcome = match clearance {
            Clearance::Run(cleared) => {
                match self
                    .run_now(spec, cleared, arguments, options, cancel)
                    .await
                {
                    Ok(output) => CallOutcome::Output(output),
                    Err(e) => CallOutcome::Failed(e),
                }
            }
            // Boxed: this path's state would otherwise sit in every call's future, and the
            // transports move whole futures into boxes.
            Clearance::NeedsApproval(awaiting) => {
                Box::pin(self.with_approval(caller, spec, awaiting, arguments, options, cancel))
                    .await
            }
        };
        self.settle(write, held, outcome, cancel).await
    }

    /// Step 1: the guard's verdict on a call (`count`: against the tool's rate limit), then
    /// the call's arguments against the tool's schema — in that order, so a caller learns
    /// nothing of a tool it may not call.
    pub(crate) async fn clear(
        &self,
        caller: &Caller,
        spec: &ToolSpec,
        args: &Value,
        count: Count,
    ) -> Result<Clearance, Stop> {
        let guard = &self.inner.guard;
        let verdict = match count {
            Count::Yes => guard.check(caller, spec, args).await,
            Count::No => guard.check_uncounted(caller, spec, args),
        };
        let clearance = verdict.map_err(Stop::Refused)?;
        spec.validate(args).map_err(Stop::Invalid)?;
        Ok(clearance)
    }

    /// Step 2: a write's `requestId` claimed for this call ([`idempotency`]); `Err` is the
    /// answer of a replay or a conflict, and nothing runs.
    pub(crate) async fn hold(
        &self,
        caller: &Caller,
        spec: &ToolSpec,
        request_id: Option<&str>,
        needs_approval: bool,
        args: &Value,
    ) -> Result<Option<Held>, CallOutcome> {
        let Some(id) = request_id else {
            return Ok(None);
        };
        match idempotency::begin(&self.inner.store, caller, spec, needs_approval, id, args).await {
            Begin::Run(held) => Ok(Some(held)),
            Begin::Answer(outcome) => Err(outcome),
        }
    }

    /// Step 3: the handler, with the clearance it spends; `cancel` stops it.
    pub(crate) async fn run_now(
        &self,
        spec: &ToolSpec,
        cleared: Cleared,
        args: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> Result<RawOutput, ToolError> {
        let handler = spec
            .call(&self.inner.unscoped, cleared, args, options)
            .instrument(tracing::debug_span!("handler"));
        tokio::select! {
            r = handler => r,
            () = cancel.cancelled() => Err(cancelled()),
        }
    }

    /// The tool's precheck of a call awaiting approval: what can be refused before a person
    /// is asked, and the stored data to pin.
    pub(crate) async fn precheck(
        &self,
        spec: &ToolSpec,
        awaiting: &AwaitingApproval,
        args: &Value,
        request_id: Option<String>,
    ) -> Result<Option<Pin>, ToolError> {
        let options = CallOptions {
            request_id,
            ..CallOptions::default()
        };
        spec.precheck(&self.inner.unscoped, awaiting, args, options)
            .await
    }

    /// Step 4: the response budget, then the claim's outcome stored for replays.
    pub(crate) async fn settle(
        &self,
        write: bool,
        held: Option<Held>,
        outcome: CallOutcome,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let outcome = budget::apply(self.inner.max_response_bytes, write, outcome);
        if let Some(held) = held {
            held.finish(&outcome, cancel.is_cancelled()).await;
        }
        outcome
    }

    /// A Tier 3 call: the tool's precheck (what can be refused before a person is asked, with
    /// the call's own error), then a person's approval and the call's result once approved
    /// (or why it did not run, or "pending").
    async fn with_approval(
        &self,
        caller: &Caller,
        spec: &ToolSpec,
        awaiting: AwaitingApproval,
        arguments: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let CallOptions {
            request_id,
            progress,
            approval,
        } = options;
        let pin = match self
            .precheck(spec, &awaiting, &arguments, request_id.clone())
            .await
        {
            Ok(pin) => pin,
            Err(e) => return CallOutcome::Failed(e),
        };
        // The approved call is cleared again when it runs (the requester may have lost the
        // right meanwhile): this verdict ends here.
        drop(awaiting);
        let draft = Draft::single(spec, arguments, request_id, pin);
        match self
            .approve_and_run(caller, draft, progress, &approval, cancel)
            .await
        {
            Ok(output) => CallOutcome::Output(raw(&output)),
            Err(outcome) => outcome,
        }
    }

    /// Records the approval request `draft` describes, waits for a person (bounded, with
    /// progress), and once approved runs it as released ([`release`]). `Err` is the answer
    /// when it did not run now: refused, or still pending.
    pub(crate) async fn approve_and_run(
        &self,
        caller: &Caller,
        draft: Draft,
        progress: Option<mpsc::UnboundedSender<ProgressReport>>,
        approval: &ApprovalWait,
        cancel: &CancellationToken,
    ) -> Result<Value, CallOutcome> {
        let phases = progress::Phases::new(progress);
        let waited = self
            .inner
            .approvals
            .request_and_wait(caller, draft, phases.waiting(), approval, cancel)
            .instrument(tracing::debug_span!("approval.wait"))
            .await;
        match waited {
            Waited::Claimed(record) => {
                // Run apart from this call: if the client goes away now, the approved call
                // still finishes and its outcome is recorded.
                let (this, running) = (self.clone(), phases.running());
                let run = tokio::spawn(async move { this.release(&record, running).await });
                run.await
                    .unwrap_or_else(|e| {
                        Err(ToolError::new(
                            ErrorCode::Internal,
                            format!("the approved call failed: {e}"),
                        ))
                    })
                    .map_err(CallOutcome::Failed)
            }
            Waited::Finished(result) => result.map_err(CallOutcome::Failed),
            Waited::Refused(e) => Err(CallOutcome::Failed(e)),
            Waited::Pending(r) => Err(CallOutcome::Pending(r)),
        }
    }

    /// At start, fails requests a previous process left running; then, every poll interval,
    /// expires stale requests and runs approved ones nobody is waiting for.
    pub fn spawn_resumer(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let approvals = &this.inner.approvals;
            match this.inner.store.fail_interrupted_approvals().await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    requests = n,
                    "approved calls interrupted by the last shutdown were marked failed, not retried"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "could not check for interrupted approved calls");
                }
            }
            loop {
                match approvals.claim_orphans().await {
                    Ok(claimed) => {
                        for r in claimed {
                            tracing::info!(approval = %r.id, tool = %r.tool, "running an approved call whose caller is gone");
                            let _ = this.release(&r, None).await;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "approval resumer failed a round"),
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(approvals.poll() * 2) => {}
                }
            }
        })
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
