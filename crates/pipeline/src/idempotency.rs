//! Idempotent writes: a write call's optional `requestId`, claimed durably before anything
//! runs and answered from the stored outcome on a replay.
//!
//! Every tool with a write takes `requestId` (1 to 200 characters; the registry adds it to
//! the input schema). The pipeline takes it out of the arguments before validation, so the
//! handler's typed input (which denies unknown fields) never sees it, and on a write call
//! claims `(organization, principal = caller.actor, requestId)` for the tool and the SHA-256
//! of the tool and its canonical arguments ([`payload_hash`]), after the guard and validation
//! and before approval and the handler (`breeze_store::OrgIdempotency::claim_request`):
//!
//! - claimed: the call runs, then its answer is stored (`complete_request`), a Tier 3 call's
//!   pending-approval answer included, so a replay creates no second approval request; a
//!   retryable failure (`retryable: true`, e.g. UPSTREAM_ERROR) or a cancelled call releases
//!   the claim instead, so a retry runs; a call dropped before it ended (its client went away)
//!   releases it too;
//! - replay: the stored answer with `replayed: true`, nothing runs;
//! - mismatch: CONFLICT, not retryable; in progress: CONFLICT, retryable.
//!
//! On a read call a `requestId` is ignored: reads change nothing and run again.

use breeze_core::{Caller, OrgId};
use breeze_store::{
    ClaimOutcome, IDEMPOTENCY_STALE_AFTER, MAX_REQUEST_ID_CHARS, RequestClaim, Store,
};
use breeze_tools::{ErrorCode, REQUEST_ID, ToolError, ToolSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{CallOutcome, approvals::APPROVAL_TTL_SECS, pending_answer, raw};

/// Removes `requestId` from `arguments` (always: a read ignores it) and returns it when the
/// call writes. A write's requestId that is not a string of 1 to 200 characters is
/// INVALID_ARGUMENT.
pub(crate) fn take_request_id(
    spec: &ToolSpec,
    arguments: &mut Value,
) -> Result<Option<String>, ToolError> {
    let Some(value) = arguments.as_object_mut().and_then(|m| m.remove(REQUEST_ID)) else {
        return Ok(None);
    };
    if !spec.is_write(arguments) {
        return Ok(None);
    }
    match value {
        Value::String(id) if (1..=MAX_REQUEST_ID_CHARS).contains(&id.chars().count()) => {
            Ok(Some(id))
        }
        other => Err(ToolError::invalid(format!(
            "Invalid arguments for {}: requestId must be a string of 1 to {MAX_REQUEST_ID_CHARS} characters, got {other}",
            spec.name
        ))),
    }
}

/// What makes two calls "the same call": the SHA-256 of the tool's name and its arguments
/// without the requestId, canonical (serde_json objects serialize with sorted keys).
pub fn payload_hash(tool: &str, arguments: &Value) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(arguments.to_string().as_bytes());
    h.finalize().into()
}

/// How long a claim holds before it counts as abandoned: a Tier 3 call holds it while it waits
/// for a person (at most the approval's lifetime) and then runs, so its claim lasts longer.
fn stale_after(needs_approval: bool) -> chrono::Duration {
    if needs_approval {
        chrono::Duration::seconds(APPROVAL_TTL_SECS) + IDEMPOTENCY_STALE_AFTER
    } else {
        IDEMPOTENCY_STALE_AFTER
    }
}

/// What claiming decided.
pub(crate) enum Begin {
    /// Run the call, then [`Held::finish`] it.
    Run(Held),
    /// Answer this without running anything.
    Answer(CallOutcome),
}

/// Claims `request_id` for this call.
pub(crate) async fn begin(
    store: &Store,
    caller: &Caller,
    spec: &ToolSpec,
    needs_approval: bool,
    request_id: &str,
    arguments: &Value,
) -> Begin {
    let hash = payload_hash(spec.name, arguments);
    let claimed = store
        .org(caller.org())
        .idempotency()
        .claim_request(
            &caller.actor(),
            request_id,
            spec.name,
            &hash,
            store.clock().now(),
            stale_after(needs_approval),
        )
        .await;
    match claimed {
        Ok(ClaimOutcome::Claimed(claim)) => {
            if claim.reclaimed {
                tracing::warn!(
                    tool = spec.name,
                    request_id,
                    "took over a stale idempotency claim: an earlier call with this requestId never finished"
                );
            }
            Begin::Run(Held {
                store: store.clone(),
                org: caller.org(),
                claim: Some(claim),
            })
        }
        Ok(ClaimOutcome::Replay {
            result, is_error, ..
        }) => Begin::Answer(replayed(result, is_error)),
        Ok(ClaimOutcome::InProgress { claimed_at }) => {
            let mut e = ToolError::new(
                ErrorCode::Conflict,
                format!(
                    "requestId {request_id:?} is in use by the same call, still running (since {})",
                    claimed_at.to_rfc3339()
                ),
            )
            .hint("wait a few seconds, then call again with the same requestId to get its result");
            e.retryable = true;
            Begin::Answer(CallOutcome::Failed(e))
        }
        Ok(ClaimOutcome::Mismatch) => Begin::Answer(CallOutcome::Failed(
            ToolError::new(
                ErrorCode::Conflict,
                format!("requestId {request_id:?} was used for a different call"),
            )
            .hint("use a new requestId for a new call; reuse one only to repeat the same call"),
        )),
        Err(e) => Begin::Answer(CallOutcome::Failed(e.into())),
    }
}

/// A stored answer, marked as a replay.
fn replayed(mut result: Value, is_error: bool) -> CallOutcome {
    if let Some(m) = result.as_object_mut() {
        m.insert("replayed".into(), Value::Bool(true));
    }
    if is_error {
        CallOutcome::ReplayedError(raw(&result))
    } else {
        CallOutcome::Output(raw(&result))
    }
}

/// A held claim: finished with the call's outcome, or released when dropped unfinished (the
/// call's future was dropped: its client went away).
pub(crate) struct Held {
    store: Store,
    org: OrgId,
    claim: Option<RequestClaim>,
}

impl Held {
    /// Stores `outcome` for replays, or releases the claim when the outcome is worth retrying
    /// (a retryable error, or the call was `cancelled`; a batch's answer is always stored).
    pub(crate) async fn finish(mut self, outcome: &CallOutcome, cancelled: bool) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        let stored = match outcome {
            CallOutcome::Output(out) => serde_json::from_str::<Value>(out.get())
                .ok()
                .map(|v| (v, false)),
            CallOutcome::Pending(r) => Some((pending_answer(r), false)),
            // Stored whatever its items did: a retry must not run again the items that ran.
            CallOutcome::Batch { answer, is_error } => serde_json::from_str::<Value>(answer.get())
                .ok()
                .map(|v| (v, *is_error)),
            CallOutcome::Failed(e) if !cancelled && !e.retryable => Some((e.to_structured(), true)),
            _ => None,
        };
        let org = self.store.org(self.org);
        let done = match stored {
            Some((result, is_error)) => {
                org.idempotency()
                    .complete_request(&claim, &result, is_error, self.store.clock().now())
                    .await
            }
            None => org.idempotency().release_request(&claim).await,
        };
        match done {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                request_id = claim.request_id,
                "an idempotency claim was taken over before its call finished"
            ),
            Err(e) => tracing::warn!(
                request_id = claim.request_id,
                error = %e,
                "could not record an idempotent call's outcome"
            ),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, org) = (self.store.clone(), self.org);
        runtime.spawn(async move {
            if let Err(e) = store.org(org).idempotency().release_request(&claim).await {
                tracing::warn!(request_id = claim.request_id, error = %e, "could not release an abandoned idempotency claim");
            }
        });
    }
}
