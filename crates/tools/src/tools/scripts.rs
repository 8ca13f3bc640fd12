//! `run_script`: a library script on up to 10 devices at once. Each device gets its own command
//! (an execution recorded with the script's id and name); the call waits for all of them in
//! parallel, bounded, and reports each device's outcome.

use std::collections::BTreeMap;

use breeze_agent_proto::{CommandKind, Interpreter};
use breeze_core::Permission;
use breeze_store::{Script, StoreError};
use futures::future::join_all;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{
    DEVICE_NOT_FOUND,
    device_command::{CommandView, RunOptions, failure, online_device, run},
};
use crate::reach::{self, Reach};
use crate::{
    Effect, ErrorCode, NoActions, Pin, RateLimit, Registry, Tier, Tool, ToolCx, ToolError, per,
};

pub(crate) fn register(r: &mut Registry) {
    r.register::<RunScript>();
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunScriptInput {
    /// The script's id (UUID) or exact name in the library.
    #[schemars(length(min = 1, max = 200))]
    script_id: String,
    /// Devices to run it on (1-10).
    #[schemars(length(min = 1, max = 10))]
    device_ids: Vec<String>,
    /// Values for the script's declared parameters, by name; passed as arguments in
    /// declaration order.
    parameters: Option<BTreeMap<String, String>>,
    /// Seconds before the agent stops the script (5-600, default 120).
    #[schemars(range(min = 5, max = 600))]
    timeout_seconds: Option<u32>,
}

/// One device's outcome.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceRun {
    device_id: String,
    #[serde(flatten)]
    #[schemars(flatten)]
    outcome: Outcome,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
enum Outcome {
    Ran(Box<CommandView>),
    Refused { status: String, error: String },
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunScriptOutput {
    script_id: String,
    script_name: String,
    results: Vec<DeviceRun>,
    /// Devices whose script completed with exit code 0.
    succeeded: usize,
}

/// The tool error for runs of which none completed (each device failed, timed out or was
/// refused), naming each device's reason: a client or model must not read such an answer as
/// done. One completed run, whatever its exit code, makes the answer a result whose `results`
/// say what happened elsewhere. Retrying helps only when every run timed out.
fn nothing_ran(results: &[DeviceRun]) -> Option<ToolError> {
    let mut reasons = Vec::new();
    let mut timed_out = true;
    for r in results {
        match &r.outcome {
            Outcome::Ran(view) => {
                let e = failure(view)?;
                timed_out &= view.status == breeze_core::CommandStatus::TimedOut;
                reasons.push(e.message);
            }
            Outcome::Refused { error, .. } => {
                timed_out = false;
                reasons.push(format!("{}: {error}", r.device_id));
            }
        }
    }
    let first = reasons.first()?;
    let message = match reasons.len() {
        1 => first.clone(),
        n => format!(
            "the script ran on none of the {n} devices: {}",
            reasons.join("; ")
        ),
    };
    let mut error = ToolError::new(ErrorCode::UpstreamError, message).hint(
        "each device reported why it did not run the script; fix the cause on the device or \
         choose other devices",
    );
    error.retryable = timed_out;
    Some(error)
}

fn interpreter(language: &str) -> Interpreter {
    match language {
        "sh" => Interpreter::Sh,
        "python" => Interpreter::Python,
        "powershell" => Interpreter::Powershell,
        _ => Interpreter::Bash,
    }
}

/// The script's arguments from named values: declared order, defaults filled in, required ones
/// checked, undeclared names refused.
fn arguments(script: &Script, given: &BTreeMap<String, String>) -> Result<Vec<String>, ToolError> {
    if let Some(unknown) = given
        .keys()
        .find(|k| !script.parameters.iter().any(|p| &p.name == *k))
    {
        let declared: Vec<&str> = script.parameters.iter().map(|p| p.name.as_str()).collect();
        return Err(ToolError::invalid(format!(
            "parameters.{unknown}: the script declares no such parameter (it declares: {})",
            if declared.is_empty() {
                "none".to_owned()
            } else {
                declared.join(", ")
            }
        )));
    }
    script
        .parameters
        .iter()
        .map(|p| match given.get(&p.name).or(p.default.as_ref()) {
            Some(v) => Ok(v.clone()),
            None if p.required => Err(ToolError::invalid(format!(
                "parameters.{}: required by the script",
                p.name
            ))),
            None => Ok(String::new()),
        })
        .collect()
}

/// The library script `id_or_name`, with the error a call gives when it is not there.
async fn find<R: Reach>(cx: &ToolCx<'_, R>, id_or_name: &str) -> Result<Script, ToolError> {
    match cx.scripts().find_script(id_or_name).await {
        Ok(s) => Ok(s),
        Err(StoreError::NotFound(_)) => {
            Err(ToolError::not_found("Script not found or access denied"))
        }
        Err(e) => Err(e.into()),
    }
}

/// What an approver of `run_script` reviews and what the run is pinned to: the script as it is
/// now (name, language, body and its SHA-256, declared parameters).
pub(crate) fn pin(script: &Script) -> Pin {
    let digest = Sha256::digest(script.body.as_bytes());
    let body_sha256: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Pin {
        summary: format!(
            "script {} ({}, body sha256 {})",
            script.name,
            script.language,
            &body_sha256[..16]
        ),
        data: json!({
            "script": {
                "id": script.id, "name": script.name, "language": script.language,
                "bodySha256": body_sha256, "body": script.body, "parameters": script.parameters,
            }
        }),
    }
}

pub(crate) struct RunScript;

impl Tool for RunScript {
    const NAME: &'static str = "run_script";
    const TITLE: &'static str = "Run a script";
    const DESCRIPTION: &'static str = "Run a library script (by id or name) on up to 10 devices in parallel, with values for its declared parameters. Each run is recorded with its output and exit code. Waits up to the script's timeout plus 15 seconds; runs still going are reported with their command id.";
    const TIER: Tier = Tier::T3;
    const PERMISSION: Permission = Permission::ScriptsExecute;
    const RATE_LIMIT: Option<RateLimit> = per(5, 300);
    const EFFECTS: &'static [Effect] = &[Effect::Execute];
    type Actions = NoActions;
    type Input = RunScriptInput;
    type Output = RunScriptOutput;
    type Reach = (
        reach::Commands,
        reach::Devices,
        reach::Scripts,
        reach::Fleet,
    );

    /// The script exists and takes these parameters; every device is the caller's and at least
    /// one is online (the call itself reports an offline device among several in its result).
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        let script = find(cx, &input.script_id).await?;
        arguments(&script, &input.parameters.clone().unwrap_or_default())?;
        let mut offline = None;
        let mut online = 0;
        for id in &input.device_ids {
            match online_device(cx, id).await {
                Ok(_) => online += 1,
                Err(e) if e.code == ErrorCode::NotFound => return Err(e),
                Err(e) => offline = offline.or(Some(e)),
            }
        }
        match offline {
            Some(e) if online == 0 => Err(e),
            _ => Ok(Some(pin(&script))),
        }
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let script = find(cx, &input.script_id).await?;
        let args = arguments(&script, &input.parameters.clone().unwrap_or_default())?;
        let mut ids = input.device_ids.clone();
        ids.sort();
        ids.dedup();
        let timeout = input.timeout_seconds.unwrap_or(120);
        let runs = ids.iter().map(|id| {
            let (script, args) = (&script, args.clone());
            async move {
                let outcome = match online_device(cx, id).await {
                    Err(e) => Outcome::Refused {
                        status: if e.message == DEVICE_NOT_FOUND {
                            "not_found"
                        } else {
                            "offline"
                        }
                        .into(),
                        error: e.message,
                    },
                    Ok(device) => {
                        let kind = CommandKind::Script {
                            interpreter: interpreter(&script.language),
                            body: script.body.clone(),
                            args,
                        };
                        let mut opts = RunOptions::new(timeout, u64::from(timeout) + 15);
                        opts.script = Some((script.id, script.name.clone()));
                        opts.audit_action = "script.execute";
                        match run(cx, &device, kind, opts).await {
                            Ok(view) => Outcome::Ran(Box::new(view)),
                            Err(e) => Outcome::Refused {
                                status: "failed".into(),
                                error: e.message,
                            },
                        }
                    }
                };
                DeviceRun {
                    device_id: id.clone(),
                    outcome,
                }
            }
        });
        let results = join_all(runs).await;
        if let Some(error) = nothing_ran(&results) {
            return Err(error);
        }
        let succeeded = results
            .iter()
            .filter(|r| matches!(&r.outcome, Outcome::Ran(v) if v.completed() && v.exit_code == Some(0)))
            .count();
        Ok(RunScriptOutput {
            script_id: script.id.to_string(),
            script_name: script.name,
            results,
            succeeded,
        })
    }
}

#[cfg(test)]
mod tests {
    use breeze_core::CommandStatus;

    use super::*;

    fn ran(host: &str, status: CommandStatus, exit_code: Option<i64>) -> DeviceRun {
        DeviceRun {
            device_id: format!("id-{host}"),
            outcome: Outcome::Ran(Box::new(CommandView {
                command_id: format!("cmd-{host}"),
                device_id: format!("id-{host}"),
                hostname: host.into(),
                status,
                exit_code,
                stdout: None,
                stderr: Some("bash: not found".into()),
                output_truncated: false,
                result: None,
                error: None,
                duration_ms: None,
                message: None,
            })),
        }
    }

    fn refused(host: &str) -> DeviceRun {
        DeviceRun {
            device_id: format!("id-{host}"),
            outcome: Outcome::Refused {
                status: "offline".into(),
                error: format!("{host} is not online"),
            },
        }
    }

    #[test]
    fn a_run_that_completed_nowhere_is_an_error_naming_each_reason() {
        // One completed run, even with a failing exit code, is an answer.
        let mixed = [
            ran("a", CommandStatus::Failed, Some(127)),
            ran("b", CommandStatus::Completed, Some(3)),
        ];
        assert!(nothing_ran(&mixed).is_none());
        // A run still going is not a failure yet.
        assert!(nothing_ran(&[ran("a", CommandStatus::Running, None)]).is_none());

        let one = nothing_ran(&[ran("a", CommandStatus::Failed, Some(127))]).unwrap();
        assert_eq!(one.code, ErrorCode::UpstreamError);
        assert!(
            one.message.starts_with("failed on a: bash: not found"),
            "{}",
            one.message
        );
        assert!(one.message.contains("command id cmd-a"), "{}", one.message);
        assert!(!one.retryable);

        let all = nothing_ran(&[
            ran("a", CommandStatus::Failed, Some(127)),
            ran("b", CommandStatus::TimedOut, None),
            refused("c"),
        ])
        .unwrap();
        assert!(
            all.message
                .starts_with("the script ran on none of the 3 devices: failed on a"),
            "{}",
            all.message
        );
        assert!(all.message.contains("timed out on b"), "{}", all.message);
        assert!(
            all.message.contains("id-c: c is not online"),
            "{}",
            all.message
        );
        assert!(!all.retryable, "retrying does not bring c online");

        let slow = nothing_ran(&[
            ran("a", CommandStatus::TimedOut, None),
            ran("b", CommandStatus::TimedOut, None),
        ])
        .unwrap();
        assert!(slow.retryable, "only timeouts: another try may finish");
    }
}
