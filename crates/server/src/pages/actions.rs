//! A page's action is a tool call: [`run`] hands the tool and its arguments to
//! `Pipeline::call` as the signed-in person (the page's `OrgScope` caller), so the guard,
//! validation, Tier 3's approval rule, the per-tool limit and the audit record are the very ones
//! an MCP client meets. No page changes a device, a group or a window any other way.
//!
//! A call that talks to agents (a script, a service, a scan) may take longer than a page should
//! wait: the call runs in its own task, and a page waits [`WAIT`] for it. What finished by then
//! is reported; what has not goes on and shows up where its results are kept (the device's
//! recent commands, the scans, the approvals page).

use std::time::Duration;

use breeze_pipeline::CallOutcome;
use breeze_tools::CallOptions;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{AppState, authz::OrgScope};

/// How long a page waits for a tool call before answering "still running".
pub(crate) const WAIT: Duration = Duration::from_secs(4);

/// What became of one tool call, worded for a person.
#[derive(Debug, Clone)]
pub(crate) struct Ran {
    /// The call did what was asked (or is still doing it, or waits for an approval).
    pub(crate) ok: bool,
    pub(crate) message: String,
}

/// Calls `tool` with `args` through the pipeline as the scope's caller (the signed-in person),
/// for the page request `request_id`.
pub(crate) async fn run(
    state: &AppState,
    scope: &OrgScope,
    tool: &str,
    args: Value,
    request_id: Option<String>,
) -> Ran {
    let pipeline = state.pipeline.clone();
    let caller = scope.caller.clone();
    let name = tool.to_owned();
    let options = CallOptions {
        request_id,
        ..CallOptions::default()
    };
    // The call is not the page's to cancel: a person who closes the tab has still asked.
    let call = tokio::spawn(async move {
        let never = CancellationToken::new();
        pipeline.call(&caller, &name, args, options, &never).await
    });
    match tokio::time::timeout(WAIT, call).await {
        Ok(Ok(outcome)) => worded(tool, outcome),
        Ok(Err(e)) => {
            tracing::error!(error = %e, tool, "a page's tool call panicked");
            Ran {
                ok: false,
                message: "Something went wrong on our side. Try again in a moment.".to_owned(),
            }
        }
        Err(_) => Ran {
            ok: true,
            message: "Sent; still running. Its result appears on the device's page under \
                      Recent commands."
                .to_owned(),
        },
    }
}

/// The outcome as a person reads it.
fn worded(tool: &str, outcome: CallOutcome) -> Ran {
    let ok = |message: String| Ran { ok: true, message };
    let failed = |message: String| Ran { ok: false, message };
    match outcome {
        CallOutcome::Output(raw) => {
            let v: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            ok(summary(tool, &v))
        }
        CallOutcome::Batch { is_error, .. } if is_error => failed("Nothing was done.".into()),
        CallOutcome::Batch { .. } => ok("Done.".into()),
        CallOutcome::Failed(e) => failed(e.message),
        CallOutcome::ReplayedError(raw) => {
            let v: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            failed(
                v["error"]["message"]
                    .as_str()
                    .unwrap_or("That request failed before.")
                    .to_owned(),
            )
        }
        CallOutcome::Pending(record) => ok(format!(
            "Waiting for approval: {}. Decide it on the approvals page.",
            record.description
        )),
        CallOutcome::Refused(r) => failed(r.to_string()),
        CallOutcome::UnknownTool => failed(format!("There is no tool {tool}.")),
    }
}

/// A tool's output in one sentence: its own `message` when it has one; for `run_script`, how
/// many devices ran it successfully and why the others did not.
fn summary(tool: &str, v: &Value) -> String {
    if let Some(results) = v["results"].as_array()
        && tool == "run_script"
    {
        let name = v["scriptName"].as_str().unwrap_or("the script");
        let succeeded = v["succeeded"].as_u64().unwrap_or(0);
        let mut s = format!(
            "Ran {name}: {succeeded} of {} device{} succeeded.",
            results.len(),
            if results.len() == 1 { "" } else { "s" }
        );
        let mut reasons: Vec<&str> = results.iter().filter_map(|r| r["error"].as_str()).collect();
        reasons.sort_unstable();
        reasons.dedup();
        if !reasons.is_empty() {
            s.push(' ');
            s.push_str(&reasons.join("; "));
        }
        return s;
    }
    // execute_command's reboot: what the agent did about it, in its words.
    if let Some(reboot) = v["result"]["reboot"].as_str() {
        let host = v["hostname"].as_str().unwrap_or("the device");
        let detail = v["result"]["detail"].as_str().unwrap_or("");
        return match reboot {
            "scheduled" => format!("Reboot of {host} scheduled: {detail}."),
            _ => format!("{host} was not rebooted: {detail}."),
        };
    }
    match v["message"].as_str() {
        Some(m) if !m.is_empty() => {
            let mut m = m.to_owned();
            if let Some(first) = m.get(..1) {
                m.replace_range(..1, &first.to_uppercase());
            }
            if !m.ends_with('.') {
                m.push('.');
            }
            m
        }
        _ => "Done.".to_owned(),
    }
}
