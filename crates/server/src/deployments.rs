//! The deployment worker, one of the server's background tasks ([`crate::serve`]).
//!
//! Each [`DeploymentWorker::tick`] takes the running deployments whose step is due through
//! their lease ([`Store::claim_deployment_step`]: one instance at a time per deployment) and
//! steps each in a tracked task:
//! 1. **Approvals.** Devices whose run waits for an approval request are settled once the
//!    request is final (the approved call's answer, or failed with the refusal); devices left
//!    `running` by an instance that died are failed.
//! 2. **The gate** ([`breeze_core::deployment::gate`]) of the current ring: pause as soon as
//!    its failures exceed the deployment's ceiling (recorded with the reason, audited
//!    `deployment.pause.auto`); once every device is done, start the next ring only if the
//!    ring met its success threshold (else pause), or complete after the last.
//! 3. **Sending.** The ring's pending devices go out 10 at a time (`run_script`'s limit), the gate
//!    checked again after each call, so a failing canary stops the rest of its ring too.
//!    Devices offline when their turn comes are skipped (they count neither way) — except in a
//!    deployment that waits for maintenance windows (below).
//!
//! **Maintenance windows.** A deployment created with `when=maintenance_window` sends a
//! device's run only while a window is open for it — the one it names (`windowId`, as
//! `manage_patches` install in a window), else any enabled window covering the device. The
//! others stay pending, deferred with the reason and the next opening (when known), and are
//! sent at the first tick after their window opens; a ring is done only when they are. A
//! device offline while its window is open is not skipped: it stays pending (deferred, saying
//! so) and goes at the first tick that finds it online inside a window — later in this one,
//! or in the next.
//!
//! **Cancelling** ([`breeze_store::OrgDeployments::control_deployment`]) withdraws, in the cancel's transaction, the
//! approval requests the deployment's runs still wait for (pending, or approved and unclaimed):
//! nobody can approve them, the approval resumer never runs them, and a call waiting on one
//! ends refused; their devices are skipped, the reason naming the cancelled deployment. A send
//! under way when the cancel lands withdraws what it just requested itself. A run already on a
//! device — its approved call claimed and under way — is not interrupted (killing a script or
//! a package manager half-way leaves the device in a state nobody knows): the cancelled
//! deployment stays due for the worker until those runs end, each device's result is recorded
//! as it arrives, and nothing else starts; the deployment stays `cancelled`.
//!
//! **The Tier 3 rule** (`owner_runs`). Every run is `run_script` (a script payload),
//! `manage_patches` `install` (a package payload, then followed through its patch job) or
//! `manage_patches` `remove` (a package removal, answered per device) through
//! [`Pipeline::call`] as the deployment's owner — the credential that created it, then whoever
//! last started or resumed it — rebuilt as it stands now: the guard and the approvals apply
//! exactly as to an MCP call. A key without `ai:execute` is refused (the deployment pauses
//! with the refusal); one with it gets approval requests a person must grant; a revoked owner
//! pauses it. Nothing reaches an agent any other way.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use breeze_core::{
    ApprovalStatus, Caller, DeploymentStatus, DeviceId, DeviceOutcomeStatus, DeviceRunStatus,
    DeviceStatus, PatchPartStatus,
    deployment::{Gate, gate},
};
use breeze_pipeline::{CallOutcome, Pipeline};
use breeze_store::{
    Advance, Deferral, Deployment, DeploymentDevice, DeviceOutcome, DeviceResult, OrgStore,
    PackageAction, PatchJobDevice, Payload, STEP_LEASE, Store, StoreError, deployment_request_id,
};
use breeze_tools::CallOptions;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    owner_runs::{self, DEVICES_PER_CALL, ScriptCall, succeeded},
    workers::{Tasks, Worker},
};

/// The worker's pace.
#[derive(Debug, Clone)]
pub struct DeploymentConfig {
    /// How often a tick runs.
    pub tick: Duration,
    /// The most deployments one tick steps.
    pub deployments_per_tick: u32,
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(15),
            deployments_per_tick: 20,
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeploymentTick {
    /// Deployments this instance took a step of.
    pub stepped: usize,
}

/// The deployment worker. Cheap to share (`Arc`).
pub struct DeploymentWorker {
    store: Store,
    pipeline: Pipeline,
    config: DeploymentConfig,
    steps: Tasks,
}

/// What sending a ring's next devices came to.
enum Sent {
    /// Devices were sent or skipped: gate again.
    Progress,
    /// No pending device is in its maintenance window now.
    Waiting,
    /// The deployment must pause: its owner cannot run it.
    Pause(String),
}

/// ", the next opens at …" for a deferral's reason.
fn opens(next: Option<breeze_core::Timestamp>) -> String {
    next.map(|t| format!(", next opening at {}", t.to_rfc3339()))
        .unwrap_or_default()
}

/// How one device's `run_script` outcome counts in a deployment (`None`: still running).
fn result_of(o: &DeviceOutcome, approval: Option<Uuid>) -> DeviceResult {
    let status = match o.status {
        DeviceOutcomeStatus::PendingApproval => None,
        DeviceOutcomeStatus::Offline | DeviceOutcomeStatus::NotFound => {
            Some(DeviceRunStatus::Skipped)
        }
        _ if succeeded(o) => Some(DeviceRunStatus::Succeeded),
        _ => Some(DeviceRunStatus::Failed),
    };
    let error = o.error.clone().or_else(|| match (status, o.exit_code) {
        (Some(DeviceRunStatus::Failed), Some(code)) => Some(format!("exit code {code}")),
        (Some(DeviceRunStatus::Failed), None) => Some(format!("run {}", o.status)),
        _ => None,
    });
    DeviceResult {
        device_id: o.device_id,
        status,
        approval_id: approval,
        command_id: o.command_id.clone(),
        exit_code: o.exit_code,
        output: o.stdout.clone(),
        error,
        patch_job_id: None,
    }
}

fn failed(device: DeviceId, why: &str) -> DeviceResult {
    DeviceResult {
        device_id: device,
        status: Some(DeviceRunStatus::Failed),
        error: Some(why.to_owned()),
        ..DeviceResult::default()
    }
}

/// The devices of a `manage_patches` install answer: each waits for the job it started, or
/// failed when no job was made (nothing to install: the answer says why).
fn job_started(answer: &Value, devices: &[DeviceId]) -> Vec<DeviceResult> {
    match answer["job"]["id"]
        .as_str()
        .and_then(|j| j.parse::<Uuid>().ok())
    {
        Some(job) => devices
            .iter()
            .map(|d| DeviceResult {
                device_id: *d,
                patch_job_id: Some(job),
                ..DeviceResult::default()
            })
            .collect(),
        None => {
            let why = answer["skipped"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "manage_patches started no install job".into());
            devices.iter().map(|d| failed(*d, &why)).collect()
        }
    }
}

/// The devices of a `manage_patches` remove answer: each device's removal as it came back
/// (offline: skipped; still running when the call returned: failed, saying so).
fn removal_results(answer: &Value, devices: &[DeviceId]) -> Vec<DeviceResult> {
    let removals = answer["removals"].as_array().cloned().unwrap_or_default();
    devices
        .iter()
        .map(|d| {
            let Some(r) = removals
                .iter()
                .find(|r| r["deviceId"].as_str() == Some(d.to_string().as_str()))
            else {
                return failed(*d, "manage_patches remove gave no answer for this device");
            };
            let status = match r["status"].as_str() {
                Some("succeeded") => DeviceRunStatus::Succeeded,
                Some("offline") => DeviceRunStatus::Skipped,
                _ => DeviceRunStatus::Failed,
            };
            DeviceResult {
                device_id: *d,
                status: Some(status),
                command_id: r["commandId"].as_str().map(str::to_owned),
                output: r
                    .get("packages")
                    .map(|p| p.to_string().chars().take(1000).collect()),
                error: r["error"].as_str().map(str::to_owned).or_else(|| {
                    (status == DeviceRunStatus::Failed)
                        .then(|| format!("removal {}", r["status"].as_str().unwrap_or("failed")))
                }),
                ..DeviceResult::default()
            }
        })
        .collect()
}

/// How a device's part of patch job `job` counts (`None`: not final yet).
fn part_result(device: DeviceId, job: Uuid, parts: &[PatchJobDevice]) -> Option<DeviceResult> {
    let Some(part) = parts.iter().find(|p| p.device_id == device) else {
        return Some(failed(
            device,
            &format!("left out of patch job {job} (the package is not offered by its last scan)"),
        ));
    };
    let status = match part.status {
        PatchPartStatus::Succeeded => DeviceRunStatus::Succeeded,
        PatchPartStatus::Failed | PatchPartStatus::Partial | PatchPartStatus::Skipped => {
            DeviceRunStatus::Failed
        }
        PatchPartStatus::Scheduled | PatchPartStatus::Sent => return None,
    };
    Some(DeviceResult {
        device_id: device,
        status: Some(status),
        command_id: part.command_id.map(|c| c.to_string()),
        output: part.results.as_ref().map(|r| {
            let text = r.to_string();
            text.chars().take(1000).collect()
        }),
        error: part.error.clone().or_else(|| {
            (status == DeviceRunStatus::Failed).then(|| format!("patch job {}", part.status))
        }),
        ..DeviceResult::default()
    })
}

impl DeploymentWorker {
    pub fn new(store: Store, pipeline: Pipeline, config: DeploymentConfig) -> Self {
        Self {
            store,
            pipeline,
            config,
            steps: Tasks::default(),
        }
    }
}

/// Runs every `config.tick`.
impl Worker for DeploymentWorker {
    const NAME: &'static str = "deployment worker";
    type Report = DeploymentTick;
    type Error = StoreError;

    fn period(&self) -> Duration {
        self.config.tick
    }

    /// One round: every due deployment this instance can lease is stepped in a task of its own.
    async fn tick(self: &Arc<Self>) -> Result<DeploymentTick, StoreError> {
        let mut report = DeploymentTick::default();
        let now = self.store.clock().now();
        for d in self
            .store
            .cross_org()
            .due_deployments(now, self.config.deployments_per_tick)
            .await?
        {
            let Some(due) = d.next_step_at else { continue };
            if !self.store.claim_deployment_step(&d, due).await? {
                continue;
            }
            report.stepped += 1;
            let this = self.clone();
            self.steps.spawn(async move {
                let (org, id) = (d.org_id, d.id);
                if let Err(e) = this.step(d).await {
                    tracing::warn!(deployment = %id, error = %e, "deployment step failed");
                }
                // Due again next tick, whatever happened (a paused or finished one is not).
                let now = this.store.clock().now();
                if let Err(e) = this
                    .store
                    .org(org)
                    .deployments()
                    .release_deployment(id, now)
                    .await
                {
                    tracing::warn!(deployment = %id, error = %e, "deployment not released");
                }
            });
        }
        Ok(report)
    }
}

impl DeploymentWorker {
    /// Waits until every step started so far has finished (tests, and shutdown).
    pub async fn settle(&self) {
        self.steps.settle().await;
    }

    /// One step: settle approvals (also of a cancelled deployment's runs still under way),
    /// then — running only — gate and send until the ring waits or the deployment pauses or
    /// ends.
    async fn step(&self, d: Deployment) -> Result<(), StoreError> {
        let org = self.store.org(d.org_id);
        self.follow(&org, &d).await?;
        loop {
            let d = org.deployments().get_deployment(d.id).await?;
            if d.status != DeploymentStatus::Running {
                return Ok(());
            }
            let Some(ring) = d.ring().cloned() else {
                org.deployments()
                    .advance_deployment(&d, Advance::Complete)
                    .await?;
                return Ok(());
            };
            let tallies = org.deployments().deployment_tallies(&d).await?;
            let index = usize::try_from(d.current_ring).unwrap_or(usize::MAX);
            let tally = tallies.get(index).copied().unwrap_or_default();
            let decision = gate(
                &tally,
                index,
                &ring.name,
                d.rings.len(),
                d.max_failure(),
                ring.success_percent,
                d.ring_accepted(),
            );
            match decision {
                Gate::Pause(reason) => {
                    org.deployments()
                        .advance_deployment(&d, Advance::Pause(reason))
                        .await?;
                    return Ok(());
                }
                Gate::Advance => {
                    org.deployments()
                        .advance_deployment(&d, Advance::NextRing)
                        .await?;
                }
                Gate::Complete => {
                    org.deployments()
                        .advance_deployment(&d, Advance::Complete)
                        .await?;
                    return Ok(());
                }
                Gate::Continue if tally.pending == 0 => return Ok(()),
                Gate::Continue => match self.send(&org, &d).await? {
                    Sent::Progress => {}
                    // Every pending device is outside its window: the next tick looks again.
                    Sent::Waiting => return Ok(()),
                    Sent::Pause(reason) => {
                        org.deployments()
                            .advance_deployment(&d, Advance::Pause(reason))
                            .await?;
                        return Ok(());
                    }
                },
            }
        }
    }

    /// Of a deployment's `pending` devices, those whose maintenance window is open now (all of
    /// them unless the deployment runs only in windows); the others are deferred, saying why
    /// and when their next window opens.
    async fn in_window(
        &self,
        org: &OrgStore<'_>,
        d: &Deployment,
        pending: &[DeploymentDevice],
    ) -> Result<Vec<DeviceId>, StoreError> {
        let ids: Vec<DeviceId> = pending.iter().map(|p| p.device_id).collect();
        if !d.maintenance_window_only {
            return Ok(ids);
        }
        let now = self.store.clock().now();
        let (open, deferrals) = match d.window_id {
            Some(w) => {
                let (is_open, reason, until) = match org.maintenance().get_window(w).await {
                    Ok(w) if !w.enabled => (
                        false,
                        format!("deferred: its maintenance window {:?} is disabled", w.name),
                        None,
                    ),
                    Ok(w) => {
                        let next = w.current_or_next(now).map(|o| o.starts_at);
                        (
                            w.open_at(now).is_some(),
                            format!(
                                "deferred: outside maintenance window {:?}{}",
                                w.name,
                                opens(next)
                            ),
                            next,
                        )
                    }
                    Err(StoreError::NotFound(_)) => (
                        false,
                        "deferred: its maintenance window no longer exists".into(),
                        None,
                    ),
                    Err(e) => return Err(e),
                };
                if is_open {
                    (ids, Vec::new())
                } else {
                    let deferrals = ids
                        .iter()
                        .map(|id| Deferral {
                            device_id: *id,
                            reason: reason.clone(),
                            until,
                        })
                        .collect();
                    (Vec::new(), deferrals)
                }
            }
            None => {
                let covering = org.maintenance().windows_covering(&ids).await?;
                let (mut open, mut deferrals) = (Vec::new(), Vec::new());
                for id in ids {
                    let windows = covering.get(&id).map(Vec::as_slice).unwrap_or_default();
                    if windows.iter().any(|w| w.open_at(now).is_some()) {
                        open.push(id);
                        continue;
                    }
                    let next = windows
                        .iter()
                        .filter_map(|w| w.current_or_next(now).map(|o| (o.starts_at, w)))
                        .min_by_key(|(t, _)| *t);
                    let reason = match next {
                        _ if windows.is_empty() => {
                            "deferred: no enabled maintenance window covers this device".into()
                        }
                        Some((t, w)) => format!(
                            "deferred: outside its maintenance windows; {:?}{}",
                            w.name,
                            opens(Some(t))
                        ),
                        None => "deferred: none of its maintenance windows opens again".into(),
                    };
                    deferrals.push(Deferral {
                        device_id: id,
                        reason,
                        until: next.map(|(t, _)| t),
                    });
                }
                (open, deferrals)
            }
        };
        org.deployments()
            .defer_deployment_devices(d.id, &deferrals)
            .await?;
        Ok(open)
    }

    /// Sends the next [`DEVICES_PER_CALL`] pending devices of the current ring (those in their
    /// maintenance window, for a deployment that waits for windows).
    async fn send(&self, org: &OrgStore<'_>, d: &Deployment) -> Result<Sent, StoreError> {
        let pending = org
            .deployments()
            .deployment_devices(d.id, Some(d.current_ring), Some(DeviceRunStatus::Pending))
            .await?;
        let ready = self.in_window(org, d, &pending).await?;
        if ready.is_empty() {
            return Ok(Sent::Waiting);
        }
        let mut skipped = Vec::new();
        let mut online = Vec::new();
        let mut offline = Vec::new();
        for id in ready {
            if online.len() + skipped.len() == DEVICES_PER_CALL {
                break;
            }
            match org.devices().get_device(id).await {
                Ok(device) if device.status == DeviceStatus::Online => online.push(device.id),
                // In its window but offline: it keeps its place and goes when it is online
                // inside a window (this one, or the next).
                Ok(device) if d.maintenance_window_only => offline.push(device),
                Ok(device) => skipped.push(DeviceResult {
                    device_id: device.id,
                    status: Some(DeviceRunStatus::Skipped),
                    error: Some(format!(
                        "{} was {} when its ring came; not run",
                        device.hostname, device.status
                    )),
                    ..DeviceResult::default()
                }),
                Err(StoreError::NotFound(_)) => skipped.push(DeviceResult {
                    device_id: id,
                    status: Some(DeviceRunStatus::Skipped),
                    error: Some("the device no longer exists".into()),
                    ..DeviceResult::default()
                }),
                Err(e) => return Err(e),
            }
        }
        if !offline.is_empty() {
            let deferrals: Vec<Deferral> = offline
                .iter()
                .map(|device| Deferral {
                    device_id: device.id,
                    reason: format!(
                        "deferred: {} was {} while its maintenance window was open; it goes \
                         when it is online inside a window",
                        device.hostname, device.status
                    ),
                    until: None,
                })
                .collect();
            org.deployments()
                .defer_deployment_devices(d.id, &deferrals)
                .await?;
        }
        org.deployments()
            .record_deployment_results(d.id, &skipped)
            .await?;
        if online.is_empty() {
            // Only offline devices are in their window: look again next tick.
            return Ok(if skipped.is_empty() {
                Sent::Waiting
            } else {
                Sent::Progress
            });
        }
        let standing = match owner_runs::acting_as(&self.store, d.org_id, &d.owner_actor).await? {
            Ok(s) => s,
            Err(why) => return Ok(Sent::Pause(why)),
        };
        org.deployments()
            .deployment_devices_running(d.id, &online)
            .await?;
        let caller = standing.clone();
        let (results, refusal) = match &d.payload {
            Payload::Script {
                script_id,
                parameters,
                timeout_seconds,
            } => {
                let call = ScriptCall {
                    script_id: *script_id,
                    parameters,
                    timeout_seconds: Some(i64::from(*timeout_seconds)),
                };
                let called = owner_runs::call_script(
                    &self.pipeline,
                    &caller,
                    call,
                    &online,
                    Some(deployment_request_id(d.id)),
                )
                .await;
                let mut results: BTreeMap<DeviceId, DeviceResult> = online
                    .iter()
                    .map(|id| {
                        (
                            *id,
                            failed(*id, "run_script gave no answer for this device"),
                        )
                    })
                    .collect();
                for o in &called.outcomes {
                    if let Some(r) = results.get_mut(&o.device_id) {
                        *r = result_of(o, called.approval);
                    }
                }
                (results.into_values().collect(), called.refusal)
            }
            Payload::Package { name, action } => {
                self.package(&caller, d.id, name, *action, &online).await
            }
        };
        // Cancelled while the call waited for a person: the cancel withdrew its request, so
        // the refusal is the cancel's, not the devices' failure.
        let (mut results, refusal) = (results, refusal);
        if refusal.is_some()
            && org.deployments().get_deployment(d.id).await?.status == DeploymentStatus::Cancelled
        {
            for r in results
                .iter_mut()
                .filter(|r| r.status == Some(DeviceRunStatus::Failed))
            {
                r.status = Some(DeviceRunStatus::Skipped);
                r.error = Some(format!(
                    "the deployment was cancelled while its run waited for approval; {}",
                    r.error.as_deref().unwrap_or("the request was withdrawn")
                ));
            }
        }
        org.deployments()
            .record_deployment_results(d.id, &results)
            .await?;
        // A cancel that came while this call was out could not see the approval request it
        // made: withdraw it now, so a person cannot approve it and nothing runs.
        let withdrawn = org
            .deployments()
            .withdraw_cancelled_deployment_approvals(d.id)
            .await?;
        if !withdrawn.is_empty() {
            tracing::info!(deployment = %d.id, ?withdrawn, "withdrew the approval requests of a deployment cancelled mid-send");
            return Ok(Sent::Progress);
        }
        Ok(match refusal {
            Some(why) => Sent::Pause(format!(
                "its run as {} was refused: {why}",
                standing.actor()
            )),
            None => Sent::Progress,
        })
    }

    /// Installs package `name` on `devices` through `manage_patches` as `caller` (each device
    /// then waits for the patch job, or the approval request that will start it), or removes
    /// it (each device's answer is in the call's, or the approved call's).
    async fn package(
        &self,
        caller: &Caller,
        deployment: Uuid,
        name: &str,
        action: PackageAction,
        devices: &[DeviceId],
    ) -> (Vec<DeviceResult>, Option<String>) {
        let ids: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        let args = match action {
            PackageAction::Install => json!({
                "action": "install",
                "deviceIds": ids,
                "packageNames": [name],
                "when": "now",
                "rebootPolicy": "never",
            }),
            PackageAction::Remove => json!({
                "action": "remove",
                "deviceIds": ids,
                "packageNames": [name],
            }),
        };
        let outcome = self
            .pipeline
            .call(
                caller,
                "manage_patches",
                args,
                CallOptions {
                    request_id: Some(deployment_request_id(deployment)),
                    ..CallOptions::default()
                },
                &CancellationToken::new(),
            )
            .await;
        let all = |why: &str| devices.iter().map(|d| failed(*d, why)).collect::<Vec<_>>();
        match outcome {
            CallOutcome::Output(raw) => {
                let answer: Value = serde_json::from_str(raw.get()).unwrap_or_default();
                match action {
                    PackageAction::Install => (job_started(&answer, devices), None),
                    PackageAction::Remove => (removal_results(&answer, devices), None),
                }
            }
            CallOutcome::Pending(record) => (
                devices
                    .iter()
                    .map(|d| DeviceResult {
                        device_id: *d,
                        approval_id: Some(record.id),
                        ..DeviceResult::default()
                    })
                    .collect(),
                None,
            ),
            CallOutcome::Refused(refusal) => {
                let why = refusal.to_string();
                (all(&why), Some(why))
            }
            CallOutcome::Failed(e) => (all(&e.message), Some(e.message)),
            other => (all(&format!("unexpected outcome: {other:?}")), None),
        }
    }

    /// Settles devices whose approval request is final, and fails devices an instance that
    /// died left running.
    async fn follow(&self, org: &OrgStore<'_>, d: &Deployment) -> Result<(), StoreError> {
        let running = org
            .deployments()
            .deployment_devices(d.id, None, Some(DeviceRunStatus::Running))
            .await?;
        let mut approvals: Vec<Uuid> = running.iter().filter_map(|r| r.approval_id).collect();
        approvals.sort();
        approvals.dedup();
        for id in approvals {
            let Some(records) = owner_runs::final_approvals(&self.store, d.org_id, &[id]).await?
            else {
                continue;
            };
            let mut results = Vec::new();
            for r in &records {
                match (r.tool.as_str(), r.status, &r.result) {
                    ("manage_patches", ApprovalStatus::Completed, Some(answer))
                        if r.arguments["action"] == "remove" =>
                    {
                        results.extend(removal_results(answer, &owner_runs::approval_devices(r)));
                    }
                    ("manage_patches", ApprovalStatus::Completed, Some(answer)) => {
                        results.extend(job_started(answer, &owner_runs::approval_devices(r)));
                    }
                    _ => {
                        let (outcomes, _) = owner_runs::approval_outcomes(r);
                        results.extend(outcomes.iter().map(|o| result_of(o, None)));
                    }
                }
            }
            // A device the request named but its answer did not: failed, not stuck.
            for dev in running.iter().filter(|r| r.approval_id == Some(id)) {
                if !results.iter().any(|r| r.device_id == dev.device_id) {
                    results.push(DeviceResult {
                        device_id: dev.device_id,
                        status: Some(DeviceRunStatus::Failed),
                        error: Some(format!("approval {id} ended without an answer for it")),
                        ..DeviceResult::default()
                    });
                }
            }
            org.deployments()
                .record_deployment_results(d.id, &results)
                .await?;
        }
        let running = org
            .deployments()
            .deployment_devices(d.id, None, Some(DeviceRunStatus::Running))
            .await?;
        let mut jobs: Vec<Uuid> = running.iter().filter_map(|r| r.patch_job_id).collect();
        jobs.sort();
        jobs.dedup();
        for job in jobs {
            let parts = match org.patches().get_patch_job(job).await {
                Ok((_, parts)) => parts,
                Err(StoreError::NotFound(_)) => Vec::new(),
                Err(e) => return Err(e),
            };
            let results: Vec<DeviceResult> = running
                .iter()
                .filter(|r| r.patch_job_id == Some(job))
                .filter_map(|r| part_result(r.device_id, job, &parts))
                .collect();
            org.deployments()
                .record_deployment_results(d.id, &results)
                .await?;
        }
        let stale = self.store.clock().now() - STEP_LEASE;
        let interrupted: Vec<DeviceResult> = running
            .iter()
            .filter(|r| {
                r.approval_id.is_none()
                    && r.patch_job_id.is_none()
                    && r.started_at.is_some_and(|t| t < stale)
            })
            .map(|r| DeviceResult {
                device_id: r.device_id,
                status: Some(DeviceRunStatus::Failed),
                error: Some("interrupted: the instance sending it stopped".into()),
                ..DeviceResult::default()
            })
            .collect();
        org.deployments()
            .record_deployment_results(d.id, &interrupted)
            .await
    }
}
