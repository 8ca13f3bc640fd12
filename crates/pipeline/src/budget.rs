//! The response budget (`BREEZE_MCP_MAX_RESPONSE_BYTES`, 0 = off): a read whose structured
//! output is larger fails with RESPONSE_TOO_LARGE (it changed nothing; narrow it and call
//! again); a write is never turned into an error — the change happened — and answers
//! `{"status": "applied", "payloadOmitted": true, "bytes": N, "hint": …}` instead.

use breeze_tools::{ErrorCode, ToolError};
use serde_json::json;

use crate::{CallOutcome, raw};

/// Applies the budget of `max` bytes (0: none) to a call's outcome; `write` says whether the
/// call was a write.
pub fn apply(max: usize, write: bool, outcome: CallOutcome) -> CallOutcome {
    let CallOutcome::Output(out) = &outcome else {
        return outcome;
    };
    let bytes = out.get().len();
    if max == 0 || bytes <= max {
        return outcome;
    }
    if write {
        CallOutcome::Output(raw(&json!({
            "status": "applied",
            "payloadOmitted": true,
            "bytes": bytes,
            "hint": "re-query with a read tool",
        })))
    } else {
        let mut e = ToolError::new(
            ErrorCode::ResponseTooLarge,
            format!("the answer is {bytes} bytes, above the server's limit of {max} bytes; nothing changed"),
        )
        .hint("narrow the query, e.g. a smaller limit or a filter, and call again");
        e.retryable = false;
        CallOutcome::Failed(e)
    }
}
