//! The response budget (`BREEZE_MCP_MAX_RESPONSE_BYTES`, 0 = off): a read whose structured
//! output is larger fails with RESPONSE_TOO_LARGE (it changed nothing; narrow it and call
//! again); a write is never turned into an error — the change happened — and answers
//! `{"status": "applied", "payloadOmitted": true, "bytes": N, "hint": …}` instead.
//!
//! A batch is held to the same budget as a whole: a preview (which runs nothing) over it fails
//! like a read; a commit keeps its outcome, counts and each item's status and error, marks
//! itself `payloadOmitted` and drops what the items returned — then, if that is still too
//! large, the successful items' entries, then every entry (the counts remain).

use breeze_tools::{ErrorCode, RawOutput, ToolError};
use serde_json::{Value, json};

use crate::{CallOutcome, raw};

/// Applies the budget of `max` bytes (0: none) to a call's outcome; `write` says whether the
/// call was a write (for a batch: a commit).
pub fn apply(max: usize, write: bool, outcome: CallOutcome) -> CallOutcome {
    let over = |out: &RawOutput| max != 0 && out.get().len() > max;
    match outcome {
        CallOutcome::Output(out) if over(&out) => {
            let bytes = out.get().len();
            if write {
                CallOutcome::Output(raw(&json!({
                    "status": "applied",
                    "payloadOmitted": true,
                    "bytes": bytes,
                    "hint": "re-query with a read tool",
                })))
            } else {
                CallOutcome::Failed(too_large(bytes, max))
            }
        }
        CallOutcome::Batch { answer, is_error } if over(&answer) => {
            let bytes = answer.get().len();
            if write {
                CallOutcome::Batch {
                    answer: trimmed_batch(&answer, max),
                    is_error,
                }
            } else {
                CallOutcome::Failed(too_large(bytes, max))
            }
        }
        other => other,
    }
}

fn too_large(bytes: usize, max: usize) -> ToolError {
    let mut e = ToolError::new(
        ErrorCode::ResponseTooLarge,
        format!(
            "the answer is {bytes} bytes, above the server's limit of {max} bytes; nothing changed"
        ),
    )
    .hint("narrow the query, e.g. a smaller limit, a filter or fewer items, and call again");
    e.retryable = false;
    e
}

/// A committed batch's answer within `max` bytes where it can be (see the module docs).
fn trimmed_batch(answer: &RawOutput, max: usize) -> RawOutput {
    let Ok(mut v) = serde_json::from_str::<Value>(answer.get()) else {
        return answer.clone();
    };
    v["payloadOmitted"] = json!(true);
    v["bytes"] = json!(answer.get().len());
    v["hint"] = json!("the items ran; re-query with a read tool to see what they changed");
    let steps: [fn(&mut Vec<Value>); 3] = [
        |items| {
            for item in items.iter_mut() {
                if let Some(m) = item.as_object_mut() {
                    m.remove("output");
                }
            }
        },
        |items| items.retain(|i| i["status"] != "ok"),
        Vec::clear,
    ];
    for step in steps {
        if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
            step(items);
        }
        let out = raw(&v);
        if out.get().len() <= max {
            return out;
        }
    }
    raw(&v)
}
