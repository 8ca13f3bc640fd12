//! Running a library script as a stored credential, through the call pipeline: the one path
//! the automation, compliance and deployment workers share.
//!
//! **The Tier 3 rule.** A worker never sends a script to an agent itself. It rebuilds the
//! credential it acts as (an automation's or deployment's owner, whoever asked for a manual
//! run or a remediation) as that credential stands now ([`breeze_pipeline::standing`]), and
//! calls `run_script` through [`Pipeline::call`] as it — the same guard (scope, role, per-tool
//! limit, allowlist) and the same durable approval as an MCP call. A key without `ai:execute`
//! is refused; one with it gets an approval request a person must grant; a revoked key or a
//! user without a role cannot act at all. The workers differ only in what they record, so this
//! module gives them the call ([`call_script`], [`run_script_as`]), the caller
//! ([`acting_as`]), and the reading of answers and finished approvals into per-device
//! outcomes ([`script_outcomes`], [`approval_outcomes`], [`overall`]).

use std::collections::BTreeMap;

use breeze_core::{
    Actor, ActorType, ApprovalStatus, Caller, DeviceId, DeviceOutcomeStatus, OrgId, RunStatus,
};
use breeze_pipeline::{CallOutcome, Pipeline, standing};
use breeze_store::{ApprovalRecord, DeviceOutcome, Store, StoreError};
use breeze_tools::CallOptions;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// `run_script` takes at most this many devices a call.
pub(crate) const DEVICES_PER_CALL: usize = 10;
/// The most output kept per device in a run's history.
const KEPT_OUTPUT_CHARS: usize = 1000;

/// The actor a stored `kind:id` text names.
pub(crate) fn actor_of(text: &str) -> Option<Actor> {
    let (kind, id) = text.split_once(':')?;
    Some(Actor::new(kind.parse::<ActorType>().ok()?, id))
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The device outcomes of a `run_script` answer.
pub(crate) fn script_outcomes(answer: &Value) -> Vec<DeviceOutcome> {
    answer["results"]
        .as_array()
        .map(|results| {
            results
                .iter()
                .filter_map(|r| {
                    let device_id = DeviceId(r["deviceId"].as_str()?.parse().ok()?);
                    Some(DeviceOutcome {
                        device_id,
                        hostname: r["hostname"].as_str().map(str::to_owned),
                        // An answer naming no status this server knows still records
                        // the device, as `unknown`.
                        status: r["status"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or_default(),
                        exit_code: r["exitCode"].as_i64(),
                        command_id: r["commandId"].as_str().map(str::to_owned),
                        stdout: r["stdout"].as_str().map(|s| truncate(s, KEPT_OUTPUT_CHARS)),
                        error: r["error"]
                            .as_str()
                            .or(r["stderr"].as_str())
                            .map(|s| truncate(s, KEPT_OUTPUT_CHARS)),
                        ..Default::default()
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The same `status` and `error` for each of `devices`.
pub(crate) fn outcome_for(
    devices: &[DeviceId],
    status: DeviceOutcomeStatus,
    error: &str,
) -> Vec<DeviceOutcome> {
    devices
        .iter()
        .map(|d| DeviceOutcome {
            device_id: *d,
            status,
            error: Some(error.to_owned()),
            ..Default::default()
        })
        .collect()
}

/// A finished run's status from its devices' outcomes.
pub(crate) fn overall(devices: &[DeviceOutcome]) -> RunStatus {
    let acted: Vec<&DeviceOutcome> = devices
        .iter()
        .filter(|d| d.status != DeviceOutcomeStatus::Suppressed)
        .collect();
    if acted.is_empty() {
        return if devices.is_empty() {
            RunStatus::Failed
        } else {
            RunStatus::Suppressed
        };
    }
    if acted
        .iter()
        .all(|d| d.status == DeviceOutcomeStatus::Refused)
    {
        return RunStatus::Refused;
    }
    let ok = acted.iter().filter(|d| succeeded(d)).count();
    match ok {
        0 => RunStatus::Failed,
        n if n == acted.len() => RunStatus::Succeeded,
        _ => RunStatus::Partial,
    }
}

/// Whether a device's script ran to exit code 0.
pub(crate) fn succeeded(d: &DeviceOutcome) -> bool {
    d.status == DeviceOutcomeStatus::Completed && d.exit_code == Some(0)
}

/// Whom a worker acts as: the stored credential `acting` (`kind:id`) rebuilt as it stands
/// now, or — `Ok(Err(why))` — why it cannot act (the run is refused, nothing runs).
pub(crate) async fn acting_as(
    store: &Store,
    org: OrgId,
    acting: &str,
) -> Result<Result<Caller, String>, StoreError> {
    let Some(actor) = actor_of(acting) else {
        return Ok(Err(format!("{acting} cannot act")));
    };
    match standing::standing_worker(store, org, &actor).await {
        Ok(caller) => Ok(Ok(caller)),
        Err(standing::StandingError::Void(why)) => Ok(Err(format!(
            "runs as {actor}, which cannot act: the {why}; nothing was run"
        ))),
        Err(standing::StandingError::Store(e)) => Err(e),
    }
}

/// The library script a worker runs, with its arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScriptCall<'a> {
    pub script_id: Uuid,
    pub parameters: &'a BTreeMap<String, String>,
    /// `None`: `run_script`'s default.
    pub timeout_seconds: Option<i64>,
}

/// What one `run_script` call of up to [`DEVICES_PER_CALL`] devices came to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Called {
    /// Each device's outcome (`pending_approval` while a person decides).
    pub outcomes: Vec<DeviceOutcome>,
    /// The approval request the call waits for.
    pub approval: Option<Uuid>,
    /// Why the pipeline refused or failed the whole call.
    pub refusal: Option<String>,
}

/// Calls `run_script` on `devices` (at most [`DEVICES_PER_CALL`]) through the pipeline as
/// `caller`, with `request_id` on its approval request and audit records when given.
pub(crate) async fn call_script(
    pipeline: &Pipeline,
    caller: &Caller,
    script: ScriptCall<'_>,
    devices: &[DeviceId],
    request_id: Option<String>,
) -> Called {
    let mut args = json!({
        "scriptId": script.script_id.to_string(),
        "deviceIds": devices.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        "parameters": script.parameters,
    });
    if let Some(t) = script.timeout_seconds {
        args["timeoutSeconds"] = json!(t);
    }
    let outcome = pipeline
        .call(
            caller,
            "run_script",
            args,
            CallOptions {
                request_id,
                ..CallOptions::default()
            },
            &CancellationToken::new(),
        )
        .await;
    match outcome {
        CallOutcome::Output(raw) => {
            let answer: Value = serde_json::from_str(raw.get()).unwrap_or_default();
            Called {
                outcomes: script_outcomes(&answer),
                ..Called::default()
            }
        }
        CallOutcome::Pending(record) => Called {
            outcomes: outcome_for(
                devices,
                DeviceOutcomeStatus::PendingApproval,
                &format!("waiting for approval request {}", record.id),
            ),
            approval: Some(record.id),
            refusal: None,
        },
        CallOutcome::Refused(refusal) => {
            let why = refusal.to_string();
            Called {
                outcomes: outcome_for(devices, DeviceOutcomeStatus::Refused, &why),
                approval: None,
                refusal: Some(why),
            }
        }
        CallOutcome::Failed(e) => Called {
            outcomes: outcome_for(devices, DeviceOutcomeStatus::Failed, &e.message),
            approval: None,
            refusal: Some(e.message),
        },
        other => Called {
            outcomes: outcome_for(
                devices,
                DeviceOutcomeStatus::Failed,
                &format!("unexpected outcome: {other:?}"),
            ),
            ..Called::default()
        },
    }
}

/// What running a script on many devices came to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Dispatched {
    pub outcomes: Vec<DeviceOutcome>,
    pub approvals: Vec<Uuid>,
    pub refusals: Vec<String>,
}

impl Dispatched {
    /// The run's status: waiting for approval while any request is open, else from the
    /// outcomes.
    pub(crate) fn status(&self) -> RunStatus {
        if self.approvals.is_empty() {
            overall(&self.outcomes)
        } else {
            RunStatus::PendingApproval
        }
    }

    /// The run's message for `status` (`None` when the outcomes say it all).
    pub(crate) fn message(&self, status: RunStatus, actor: &Actor) -> Option<String> {
        match status {
            RunStatus::PendingApproval => Some(format!(
                "run_script as {actor} waits for approval ({} request(s))",
                self.approvals.len()
            )),
            _ => self.refusals.first().map(|r| format!("as {actor}: {r}")),
        }
    }
}

/// Runs `script` on `devices` through the pipeline as `caller`, [`DEVICES_PER_CALL`] at a
/// time.
pub(crate) async fn run_script_as(
    pipeline: &Pipeline,
    caller: &Caller,
    script: ScriptCall<'_>,
    devices: &[DeviceId],
) -> Dispatched {
    let mut done = Dispatched::default();
    for chunk in devices.chunks(DEVICES_PER_CALL) {
        let called = call_script(pipeline, caller, script, chunk, None).await;
        done.outcomes.extend(called.outcomes);
        done.approvals.extend(called.approval);
        done.refusals.extend(called.refusal);
    }
    done
}

/// The devices a `run_script` approval request names.
pub(crate) fn approval_devices(record: &ApprovalRecord) -> Vec<DeviceId> {
    record.arguments["deviceIds"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(|d| d.as_str()?.parse().ok().map(DeviceId))
                .collect()
        })
        .unwrap_or_default()
}

/// The device outcomes of a final `run_script` approval request: the approved call's answer,
/// or each named device failed (the call failed) or refused (denied, expired, withdrawn),
/// with a note saying why.
pub(crate) fn approval_outcomes(record: &ApprovalRecord) -> (Vec<DeviceOutcome>, Option<String>) {
    match (record.status, &record.result) {
        (ApprovalStatus::Completed, Some(answer)) => (script_outcomes(answer), None),
        (status, result) => {
            let why = result
                .as_ref()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .or_else(|| record.reason.clone())
                .unwrap_or_else(|| format!("approval {status}"));
            let device_status = if status == ApprovalStatus::Failed {
                DeviceOutcomeStatus::Failed
            } else {
                DeviceOutcomeStatus::Refused
            };
            (
                outcome_for(
                    &approval_devices(record),
                    device_status,
                    &format!("approval {}: {why}", record.id),
                ),
                Some(format!("approval {status}: {why}")),
            )
        }
    }
}

/// A run's outcomes once all its approval requests (`records`) are final: what was known
/// before (`kept`, less the `pending_approval` placeholders) plus what each request came to,
/// and the first note on a request that did not complete.
pub(crate) fn settle_approvals(
    kept: &[DeviceOutcome],
    records: &[ApprovalRecord],
) -> (Vec<DeviceOutcome>, Option<String>) {
    let mut outcomes: Vec<DeviceOutcome> = kept
        .iter()
        .filter(|d| d.status != DeviceOutcomeStatus::PendingApproval)
        .cloned()
        .collect();
    let mut first_note = None;
    for r in records {
        let (more, note) = approval_outcomes(r);
        outcomes.extend(more);
        if first_note.is_none() {
            first_note = note;
        }
    }
    (outcomes, first_note)
}

/// The approval requests `ids` of organization `org`, when every one of them is final.
pub(crate) async fn final_approvals(
    store: &Store,
    org: OrgId,
    ids: &[Uuid],
) -> Result<Option<Vec<ApprovalRecord>>, StoreError> {
    let org = store.org(org);
    let mut records = Vec::new();
    for id in ids {
        let r = org.approvals().get_approval(*id).await?;
        if !r.is_final() {
            return Ok(None);
        }
        records.push(r);
    }
    Ok(Some(records))
}
