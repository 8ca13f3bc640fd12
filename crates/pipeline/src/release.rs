//! Running an approved request, once, whoever claimed it (the waiting call or the resumer):
//! the tool must still have the definition the approver saw and the arguments must be the
//! approved ones; the requester is rebuilt as they stand now ([`standing::approval_release`])
//! and cleared again by the guard; the tool's precheck must find the data it pinned
//! unchanged; then the guard releases the call against the approval
//! (`breeze_guard::Guard::release`) and it runs as any call runs ([`Pipeline::run_now`]). A
//! batch request goes through [`batch::release`], which does the same per item. The outcome is
//! recorded on the request.

use breeze_store::ApprovalRecord;
use breeze_tools::{CallOptions, ErrorCode, ProgressReport, ToolError};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    Pipeline,
    approvals::{approval_of, arguments_hash, definition_hash, pin_unchanged, refused, void},
    batch, envelope,
    standing::{self, StandingError},
};

impl Pipeline {
    /// Runs the claimed request `r` and records its outcome on it.
    pub(crate) async fn release(
        &self,
        r: &ApprovalRecord,
        progress: Option<mpsc::UnboundedSender<ProgressReport>>,
    ) -> Result<Value, ToolError> {
        let outcome = self.release_unrecorded(r, progress).await;
        self.inner.approvals.finish(r, &outcome).await;
        outcome
    }

    async fn release_unrecorded(
        &self,
        r: &ApprovalRecord,
        progress: Option<mpsc::UnboundedSender<ProgressReport>>,
    ) -> Result<Value, ToolError> {
        let Some(spec) = self.inner.registry.get(&r.tool) else {
            return Box::pin(self.release_external(r)).await;
        };
        if definition_hash(spec).as_slice() != r.definition_hash.as_slice() {
            return Err(refused(format!(
                "the definition of {} changed after it was approved; refusing to run what nobody approved",
                r.tool
            )));
        }
        if arguments_hash(&r.arguments).as_slice() != r.arguments_hash.as_slice() {
            return Err(refused(
                "the arguments differ from the approved ones; nothing was run",
            ));
        }
        let caller = match standing::approval_release(&self.inner.store, r).await {
            Ok(caller) => caller,
            Err(StandingError::Void(why)) => {
                return Err(void(r, &format!("the requesting {why}")));
            }
            Err(StandingError::Store(e)) => return Err(e.into()),
        };
        if envelope::is_batch(&r.arguments) {
            return batch::release(self, spec, r, &caller, progress).await;
        }
        spec.validate(&r.arguments)?;
        // Cleared again as the requester stands now: scope, role and allowlist.
        let guard = &self.inner.guard;
        let awaiting = guard
            .recheck_approved(&caller, spec, &r.arguments)
            .map_err(|refusal| void(r, &refusal.to_string()))?;
        // The same checks as before the request was made, on the data as it is now; the
        // snapshot pinned then must still be what the call would act on.
        let pin = self
            .precheck(spec, &awaiting, &r.arguments, r.request_id.clone())
            .await?;
        if !pin_unchanged(pin.as_ref(), r) {
            let now = pin.map_or_else(|| "nothing".to_owned(), |p| p.summary);
            return Err(refused(format!(
                "what {} depends on changed after it was approved (now: {now}); refusing to run what nobody approved",
                r.tool
            )));
        }
        let cleared = guard
            .release(awaiting, approval_of(r, &r.arguments))
            .map_err(|refusal| void(r, &refusal.to_string()))?;
        let options = CallOptions {
            request_id: r.request_id.clone(),
            progress,
            ..CallOptions::default()
        };
        // Apart from any caller: nothing cancels an approved execution once it starts.
        let never = CancellationToken::new();
        let output = self
            .run_now(spec, cleared, r.arguments.clone(), options, &never)
            .await?;
        serde_json::from_str(output.get())
            .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))
    }
}
