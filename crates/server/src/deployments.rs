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
//!    Devices offline when their turn comes are skipped (they count neither way).
//!
//! **The Tier 3 rule** (`owner_runs`). Every run is `run_script` (a script payload) or
//! `manage_patches` `install` (a package payload, then followed through its patch job) through
//! [`Pipeline::call`] as the deployment's owner — the credential that created it, then whoever
//! last started or resumed it — rebuilt as it stands now: the guard and the approvals apply
//! exactly as to an MCP call. A key without `ai:execute` is refused (the deployment pauses
//! with the refusal); one with it gets approval requests a person must grant; a revoked owner
//! pauses it. Nothing reaches an agent any other way.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use breeze_core::{
    DeploymentStatus, DeviceId, DeviceRunStatus, DeviceStatus,
    deployment::{Gate, gate},
};
use breeze_pipeline::{CallOutcome, Pipeline};
use breeze_store::{
    Advance, Deployment, DeviceOutcome, DeviceResult, OrgStore, PatchJobDevice, Payload,
    STEP_LEASE, Store, StoreError,
};
use breeze_tools::CallOptions;
use serde_json::{Value, json};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use uuid::Uuid;

use crate::owner_runs::{self, DEVICES_PER_CALL, ScriptCall, succeeded};

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
    steps: TaskTracker,
}

/// How one device's `run_script` outcome counts in a deployment (`None`: still running).
fn result_of(o: &DeviceOutcome, approval: Option<Uuid>) -> DeviceResult {
    let status = match o.status.as_str() {
        "pending_approval" => None,
        "offline" | "not_found" => Some(DeviceRunStatus::Skipped),
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

/// How a device's part of patch job `job` counts (`None`: not final yet).
fn part_result(device: DeviceId, job: Uuid, parts: &[PatchJobDevice]) -> Option<DeviceResult> {
    let Some(part) = parts.iter().find(|p| p.device_id == device) else {
        return Some(failed(
            device,
            &format!("left out of patch job {job} (the package is not offered by its last scan)"),
        ));
    };
    let status = match part.status.as_str() {
        "succeeded" => DeviceRunStatus::Succeeded,
        "failed" | "partial" | "skipped" => DeviceRunStatus::Failed,
        _ => return None,
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
            steps: TaskTracker::new(),
        }
    }

    /// One round: every due deployment this instance can lease is stepped in a task of its own.
    pub async fn tick(self: &Arc<Self>) -> Result<DeploymentTick, StoreError> {
        let mut report = DeploymentTick::default();
        let now = self.store.clock().now();
        for d in self
            .store
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
                if let Err(e) = this.store.org(org).release_deployment(id, now).await {
                    tracing::warn!(deployment = %id, error = %e, "deployment not released");
                }
            });
        }
        Ok(report)
    }

    /// Waits until every step started so far has finished (tests, and shutdown).
    pub async fn settle(&self) {
        self.steps.close();
        self.steps.wait().await;
        self.steps.reopen();
    }

    /// One step: settle approvals, then gate and send until the ring waits or the deployment
    /// pauses or ends.
    async fn step(&self, d: Deployment) -> Result<(), StoreError> {
        let org = self.store.org(d.org_id);
        self.follow(&org, &d).await?;
        loop {
            let d = org.get_deployment(d.id).await?;
            if d.status != DeploymentStatus::Running {
                return Ok(());
            }
            let Some(ring) = d.ring().cloned() else {
                org.advance_deployment(&d, Advance::Complete).await?;
                return Ok(());
            };
            let tallies = org.deployment_tallies(&d).await?;
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
                    org.advance_deployment(&d, Advance::Pause(reason)).await?;
                    return Ok(());
                }
                Gate::Advance => {
                    org.advance_deployment(&d, Advance::NextRing).await?;
                }
                Gate::Complete => {
                    org.advance_deployment(&d, Advance::Complete).await?;
                    return Ok(());
                }
                Gate::Continue if tally.pending == 0 => return Ok(()),
                Gate::Continue => {
                    if let Some(reason) = self.send(&org, &d).await? {
                        org.advance_deployment(&d, Advance::Pause(reason)).await?;
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Sends the next [`DEVICES_PER_CALL`] pending devices of the current ring. `Some(why)`
    /// when the deployment must pause because its owner cannot run it.
    async fn send(&self, org: &OrgStore<'_>, d: &Deployment) -> Result<Option<String>, StoreError> {
        let pending = org
            .deployment_devices(d.id, Some(d.current_ring), Some(DeviceRunStatus::Pending))
            .await?;
        let mut skipped = Vec::new();
        let mut online = Vec::new();
        for p in pending.iter().take(DEVICES_PER_CALL) {
            match org.get_device(p.device_id).await {
                Ok(device) if device.status == DeviceStatus::Online => online.push(device.id),
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
                    device_id: p.device_id,
                    status: Some(DeviceRunStatus::Skipped),
                    error: Some("the device no longer exists".into()),
                    ..DeviceResult::default()
                }),
                Err(e) => return Err(e),
            }
        }
        org.record_deployment_results(d.id, &skipped).await?;
        if online.is_empty() {
            return Ok(None);
        }
        let standing = match owner_runs::acting_as(&self.store, d.org_id, &d.owner_actor).await? {
            Ok(s) => s,
            Err(why) => return Ok(Some(why)),
        };
        org.deployment_devices_running(d.id, &online).await?;
        let caller = standing.caller();
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
                let called = owner_runs::call_script(&self.pipeline, &caller, call, &online).await;
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
            Payload::Package { name } => self.install(&caller, name, &online).await,
        };
        org.record_deployment_results(d.id, &results).await?;
        Ok(refusal.map(|why| format!("its run as {} was refused: {why}", standing.actor)))
    }

    /// Installs package `name` on `devices` through `manage_patches` as `caller`: each device
    /// then waits for the patch job (or the approval request that will start it).
    async fn install(
        &self,
        caller: &breeze_pipeline::Caller<'_>,
        name: &str,
        devices: &[DeviceId],
    ) -> (Vec<DeviceResult>, Option<String>) {
        let args = json!({
            "action": "install",
            "deviceIds": devices.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            "packageNames": [name],
            "when": "now",
            "rebootPolicy": "never",
        });
        let outcome = self
            .pipeline
            .call(
                caller,
                "manage_patches",
                args,
                CallOptions::default(),
                &CancellationToken::new(),
            )
            .await;
        let all = |why: &str| devices.iter().map(|d| failed(*d, why)).collect::<Vec<_>>();
        match outcome {
            CallOutcome::Output(raw) => {
                let answer: Value = serde_json::from_str(raw.get()).unwrap_or_default();
                (job_started(&answer, devices), None)
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
                match (r.tool.as_str(), r.status.as_str(), &r.result) {
                    ("manage_patches", "completed", Some(answer)) => {
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
            org.record_deployment_results(d.id, &results).await?;
        }
        let running = org
            .deployment_devices(d.id, None, Some(DeviceRunStatus::Running))
            .await?;
        let mut jobs: Vec<Uuid> = running.iter().filter_map(|r| r.patch_job_id).collect();
        jobs.sort();
        jobs.dedup();
        for job in jobs {
            let parts = match org.get_patch_job(job).await {
                Ok((_, parts)) => parts,
                Err(StoreError::NotFound(_)) => Vec::new(),
                Err(e) => return Err(e),
            };
            let results: Vec<DeviceResult> = running
                .iter()
                .filter(|r| r.patch_job_id == Some(job))
                .filter_map(|r| part_result(r.device_id, job, &parts))
                .collect();
            org.record_deployment_results(d.id, &results).await?;
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
        org.record_deployment_results(d.id, &interrupted).await
    }

    /// Runs [`DeploymentWorker::tick`] every `config.tick` until `stop`.
    pub fn spawn(self: Arc<Self>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.config.tick);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = tick.tick() => {
                        if let Err(e) = self.tick().await {
                            tracing::warn!(error = %e, "deployment worker tick failed");
                        }
                    }
                }
            }
        })
    }
}
