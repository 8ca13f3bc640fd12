//! The automation worker, one of the server's background tasks ([`crate::serve`]).
//!
//! Each [`AutomationWorker::tick`]:
//! 1. **Schedules.** Enabled schedule automations whose next run is due (by the store's
//!    `Clock`) are claimed through their lease ([`Store::claim_schedule`]: one instance per
//!    occurrence). A run late by at most [`breeze_core::automation::CATCH_UP`] (a restart, a
//!    slow tick) fires once for the latest missed occurrence; older ones are skipped and recorded
//!    as one `skipped` run. The next run is the first occurrence after now.
//! 2. **Alerts.** Alerts raised since the last tick (with an overlap; after a start, the last
//!    `alert_lookback`) that an enabled alert automation matches — its rule or severity, its
//!    target covering the alert's device, raised after the automation was made — queue one run
//!    each (a unique index: once per cluster).
//! 3. **Runs.** Queued runs are claimed (one instance each) and executed in tracked tasks.
//! 4. **Approvals.** Runs waiting for approval are finished once their requests are.
//!
//! **The Tier 3 rule.** A run's script goes through [`Pipeline::call`] as `run_script` — the
//! same guard (scope, role, per-tool limit, allowlist) and the same durable approval as an MCP
//! call — with the credential the run acts as (the automation's owner: the API key or OAuth
//! grant that created or last changed it; for a manual run, whoever asked) as it stands now
//! ([`breeze_pipeline::standing`]). A key without `ai:execute` is refused; one with it gets an
//! approval request that a person must grant before anything runs (the run waits in
//! `pending_approval`, and the approval's resumer runs the approved call); a revoked key or a
//! user without a role makes the run void. Nothing reaches an agent any other way.
//!
//! Devices under an open maintenance window that holds back alerts are left out of a script
//! run, each recorded in the run's outcome with the window that held it back.

use std::{collections::HashMap, sync::Arc, time::Duration};

use breeze_alerts::{ChannelMessage, NotifyConfig};
use breeze_core::{
    Actor, ActorType, AutomationAction, AutomationTrigger, DeviceId, RunStatus, Timestamp,
};
use breeze_pipeline::{CallOutcome, Pipeline, standing};
use breeze_store::{
    Automation, AutomationRun, DeviceFilter, DeviceOutcome, MAX_RUN_DEVICES, NewRun, OrgStore,
    RuleTarget, RunUpdate, Store, StoreError,
};
use breeze_tools::CallOptions;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// `run_script` takes at most this many devices a call.
const DEVICES_PER_CALL: usize = 10;
/// The most output kept per device in a run's history.
const KEPT_OUTPUT_CHARS: usize = 1000;

/// The worker's pace.
#[derive(Debug, Clone)]
pub struct AutomationConfig {
    /// How often a tick runs.
    pub tick: Duration,
    /// The most queued runs one tick starts.
    pub runs_per_tick: u32,
    /// How far back a starting worker looks for alerts.
    pub alert_lookback: chrono::Duration,
}

impl Default for AutomationConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(15),
            runs_per_tick: 20,
            alert_lookback: chrono::Duration::minutes(10),
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Scheduled runs this instance queued (or recorded as skipped).
    pub scheduled: usize,
    /// Runs queued for alerts.
    pub alerted: usize,
    /// Runs started.
    pub started: usize,
    /// Runs finished after their approvals were.
    pub followed_up: usize,
}

/// The automation worker. Cheap to share (`Arc`).
pub struct AutomationWorker {
    store: Store,
    pipeline: Pipeline,
    notify: NotifyConfig,
    config: AutomationConfig,
    /// Alerts at or after this instant are looked at next tick.
    alerts_since: Mutex<Option<Timestamp>>,
    runs: TaskTracker,
}

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
                        status: r["status"].as_str().unwrap_or("unknown").to_owned(),
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

pub(crate) fn outcome_for(devices: &[DeviceId], status: &str, error: &str) -> Vec<DeviceOutcome> {
    devices
        .iter()
        .map(|d| DeviceOutcome {
            device_id: *d,
            status: status.to_owned(),
            error: Some(error.to_owned()),
            ..Default::default()
        })
        .collect()
}

/// A finished run's status from its devices' outcomes.
pub(crate) fn overall(devices: &[DeviceOutcome]) -> RunStatus {
    let acted: Vec<&DeviceOutcome> = devices
        .iter()
        .filter(|d| d.status != "suppressed")
        .collect();
    if acted.is_empty() {
        return if devices.is_empty() {
            RunStatus::Failed
        } else {
            RunStatus::Suppressed
        };
    }
    if acted.iter().all(|d| d.status == "refused") {
        return RunStatus::Refused;
    }
    let ok = acted
        .iter()
        .filter(|d| d.status == "completed" && d.exit_code == Some(0))
        .count();
    match ok {
        0 => RunStatus::Failed,
        n if n == acted.len() => RunStatus::Succeeded,
        _ => RunStatus::Partial,
    }
}

impl AutomationWorker {
    pub fn new(
        store: Store,
        pipeline: Pipeline,
        notify: NotifyConfig,
        config: AutomationConfig,
    ) -> Self {
        Self {
            store,
            pipeline,
            notify,
            config,
            alerts_since: Mutex::new(None),
            runs: TaskTracker::new(),
        }
    }

    fn now(&self) -> Timestamp {
        self.store.clock().now()
    }

    /// One round: schedules, alerts, queued runs (started in tasks of their own), approvals.
    pub async fn tick(self: &Arc<Self>) -> Result<TickReport, StoreError> {
        let mut report = TickReport {
            scheduled: self.schedules().await?,
            alerted: self.alerts().await?,
            ..TickReport::default()
        };
        for run in self
            .store
            .claim_queued_runs(self.config.runs_per_tick)
            .await?
        {
            report.started += 1;
            let this = self.clone();
            self.runs.spawn(async move {
                let (org, id) = (run.org_id, run.id);
                if let Err(e) = this.execute(run).await {
                    tracing::warn!(run = %id, error = %e, "automation run failed on the store");
                    let _ = this
                        .store
                        .org(org)
                        .update_run(
                            id,
                            RunUpdate {
                                status: RunStatus::Failed,
                                approval_ids: vec![],
                                devices: vec![],
                                message: Some(format!("internal error: {e}")),
                            },
                        )
                        .await;
                }
            });
        }
        report.followed_up = self.follow_approvals().await?;
        Ok(report)
    }

    /// Waits until every run started so far has finished its part (tests, and shutdown).
    pub async fn settle(&self) {
        self.runs.close();
        self.runs.wait().await;
        self.runs.reopen();
    }

    async fn schedules(&self) -> Result<usize, StoreError> {
        let now = self.now();
        let mut queued = 0;
        for a in self.store.due_automations(now, 200).await? {
            let (Some(schedule), Some(due)) = (a.schedule(), a.next_run_at) else {
                continue;
            };
            let d = schedule.due(due, now);
            let run = NewRun {
                trigger: AutomationTrigger::Schedule,
                occurrence_at: Some(d.fire.unwrap_or(due)),
                alert_id: None,
                device_id: None,
                requested_by: a.owner_actor.clone(),
                status: if d.fire.is_some() {
                    RunStatus::Queued
                } else {
                    RunStatus::Skipped
                },
                message: (d.skipped > 0).then(|| {
                    format!(
                        "{} missed occurrence(s) skipped (more than {} minutes late)",
                        d.skipped,
                        breeze_core::automation::CATCH_UP.num_minutes()
                    )
                }),
            };
            if self.store.claim_schedule(&a, due, d.next, run).await? {
                queued += 1;
            }
        }
        Ok(queued)
    }

    async fn alerts(&self) -> Result<usize, StoreError> {
        let now = self.now();
        let since = {
            let mut since = self.alerts_since.lock().await;
            // An overlap, for alerts committed late; the unique index keeps runs single.
            let from = since.map_or(now - self.config.alert_lookback, |s| {
                s - chrono::Duration::minutes(1)
            });
            *since = Some(now);
            from
        };
        let automations = self.store.alert_automations(1000).await?;
        let mut by_org: HashMap<_, Vec<Automation>> = HashMap::new();
        for a in automations {
            by_org.entry(a.org_id).or_default().push(a);
        }
        let mut queued = 0;
        for (org_id, automations) in by_org {
            let org = self.store.org(org_id);
            for alert in org.alerts_raised_since(since, 500).await? {
                for a in &automations {
                    if !a.matches_alert(&alert)
                        || alert.triggered_at < a.created_at
                        || !covers(&org, a.target()?, alert.device_id).await?
                    {
                        continue;
                    }
                    let run = NewRun {
                        trigger: AutomationTrigger::Alert,
                        occurrence_at: None,
                        alert_id: Some(alert.id),
                        device_id: Some(alert.device_id),
                        requested_by: a.owner_actor.clone(),
                        status: RunStatus::Queued,
                        message: Some(format!("alert: {}", alert.title)),
                    };
                    let audit = breeze_core::AuditEvent::new(
                        breeze_store::automations_actor(),
                        "automation.run.queue",
                        "automation",
                    );
                    if org.queue_run(a.id, run, audit).await?.is_some() {
                        queued += 1;
                    }
                }
            }
        }
        Ok(queued)
    }

    async fn finish(&self, run: &AutomationRun, update: RunUpdate) -> Result<(), StoreError> {
        self.store
            .org(run.org_id)
            .update_run(run.id, update)
            .await?;
        Ok(())
    }

    async fn finish_with(
        &self,
        run: &AutomationRun,
        status: RunStatus,
        message: impl Into<String>,
    ) -> Result<(), StoreError> {
        self.finish(
            run,
            RunUpdate {
                status,
                approval_ids: vec![],
                devices: vec![],
                message: Some(message.into()),
            },
        )
        .await
    }

    async fn execute(&self, run: AutomationRun) -> Result<(), StoreError> {
        let org = self.store.org(run.org_id);
        let a = match org.get_automation(run.automation_id).await {
            Ok(a) => a,
            Err(StoreError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if !a.enabled && run.trigger_kind != AutomationTrigger::Manual {
            return self
                .finish_with(&run, RunStatus::Skipped, "the automation is disabled")
                .await;
        }
        match a.action_kind {
            AutomationAction::Notify => self.notify(&org, &a, &run).await,
            AutomationAction::RunScript => self.run_script(&org, &a, &run).await,
            AutomationAction::CreateTicket => {
                self.finish_with(&run, RunStatus::Failed, "tickets do not exist yet")
                    .await
            }
        }
    }

    async fn notify(
        &self,
        org: &OrgStore<'_>,
        a: &Automation,
        run: &AutomationRun,
    ) -> Result<(), StoreError> {
        let Some(channel_id) = a.channel_id else {
            return self.finish_with(run, RunStatus::Failed, "no channel").await;
        };
        let channel = match org.get_channel(channel_id).await {
            Ok(c) => c,
            Err(StoreError::NotFound(_)) => {
                return self
                    .finish_with(run, RunStatus::Failed, "the channel was deleted")
                    .await;
            }
            Err(e) => return Err(e),
        };
        let text = a
            .message
            .clone()
            .unwrap_or_else(|| format!("Automation {} ran ({}).", a.name, run.trigger_kind));
        let message = ChannelMessage {
            event: "automation.notify",
            subject: format!("[Breeze automation] {}", a.name),
            text: text.clone(),
            payload: json!({
                "event": "automation.notify",
                "automation": { "id": a.id, "name": a.name },
                "run": { "id": run.id, "trigger": run.trigger_kind, "alertId": run.alert_id,
                         "deviceId": run.device_id, "occurrenceAt": run.occurrence_at },
                "message": text,
            }),
        };
        let sent = breeze_alerts::notify::send(
            &self.notify,
            self.store.clock().as_ref(),
            &channel,
            &message,
        )
        .await;
        let (status, message) = match sent {
            Ok(m) => (RunStatus::Succeeded, format!("{}: {m}", channel.name)),
            Err(e) => (RunStatus::Failed, format!("{}: {e}", channel.name)),
        };
        self.finish_with(run, status, message).await
    }

    /// The devices a run acts on: the alert's device for an alert run, else the target's.
    async fn devices(
        &self,
        org: &OrgStore<'_>,
        a: &Automation,
        run: &AutomationRun,
    ) -> Result<Vec<(DeviceId, String)>, StoreError> {
        if let Some(d) = run.device_id {
            return Ok(match org.get_device(d).await {
                Ok(device) => vec![(device.id, device.hostname)],
                Err(StoreError::NotFound(_)) => vec![],
                Err(e) => return Err(e),
            });
        }
        let filter = match a.target()? {
            RuleTarget::Device(d) => {
                return Ok(match org.get_device(d).await {
                    Ok(device) => vec![(device.id, device.hostname)],
                    Err(StoreError::NotFound(_)) => vec![],
                    Err(e) => return Err(e),
                });
            }
            RuleTarget::Organization => DeviceFilter::default(),
            RuleTarget::Site(s) => DeviceFilter {
                site_id: Some(s),
                ..Default::default()
            },
            RuleTarget::Group(g) => DeviceFilter {
                group_id: Some(g),
                ..Default::default()
            },
        };
        let (devices, _) = org
            .list_devices(&filter, MAX_RUN_DEVICES as u32 + 1, 0)
            .await?;
        Ok(devices.into_iter().map(|d| (d.id, d.hostname)).collect())
    }

    async fn run_script(
        &self,
        org: &OrgStore<'_>,
        a: &Automation,
        run: &AutomationRun,
    ) -> Result<(), StoreError> {
        // Whom the script runs as: the person who asked for a manual run, else the owner.
        let acting = if run.trigger_kind == AutomationTrigger::Manual {
            &run.requested_by
        } else {
            &a.owner_actor
        };
        let Some(actor) = actor_of(acting) else {
            return self
                .finish_with(run, RunStatus::Refused, format!("{acting} cannot act"))
                .await;
        };
        let clock = self.store.clock().clone();
        let standing = match standing::standing(&self.store, clock.as_ref(), a.org_id, &actor).await
        {
            Ok(s) => s,
            Err(standing::StandingError::Void(why)) => {
                return self
                    .finish_with(
                        run,
                        RunStatus::Refused,
                        format!("runs as {actor}, which cannot act: {why}; nothing was run"),
                    )
                    .await;
            }
            Err(standing::StandingError::Store(e)) => return Err(e),
        };
        let mut targets = self.devices(org, a, run).await?;
        let mut outcomes = Vec::new();
        if targets.len() > MAX_RUN_DEVICES {
            for (d, hostname) in targets.drain(MAX_RUN_DEVICES..) {
                outcomes.push(DeviceOutcome {
                    device_id: d,
                    hostname: Some(hostname),
                    status: "not_run".into(),
                    error: Some(format!("a run acts on at most {MAX_RUN_DEVICES} devices")),
                    ..Default::default()
                });
            }
        }
        if targets.is_empty() {
            return self
                .finish_with(run, RunStatus::Failed, "no device to run on")
                .await;
        }
        let ids: Vec<DeviceId> = targets.iter().map(|(d, _)| *d).collect();
        let held = org.maintenance_covering(&ids, self.now()).await?;
        let mut free = Vec::new();
        for (d, hostname) in targets {
            match held.get(&d) {
                Some((window, _)) => outcomes.push(DeviceOutcome {
                    device_id: d,
                    hostname: Some(hostname),
                    status: "suppressed".into(),
                    error: Some("under maintenance".into()),
                    window_id: Some(window.id),
                    window_name: Some(window.name.clone()),
                    ..Default::default()
                }),
                None => free.push(d),
            }
        }
        let mut approvals = Vec::new();
        let mut refusals = Vec::new();
        let caller = standing.caller();
        for chunk in free.chunks(DEVICES_PER_CALL) {
            let args = json!({
                "scriptId": a.script_id.map(|s| s.to_string()).unwrap_or_default(),
                "deviceIds": chunk.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
                "parameters": a.parameters,
                "timeoutSeconds": a.timeout_seconds,
            });
            let outcome = self
                .pipeline
                .call(
                    &caller,
                    "run_script",
                    args,
                    CallOptions::default(),
                    &CancellationToken::new(),
                )
                .await;
            match outcome {
                CallOutcome::Output(raw) => {
                    let answer: Value = serde_json::from_str(raw.get()).unwrap_or_default();
                    outcomes.extend(script_outcomes(&answer));
                }
                CallOutcome::Pending(record) => {
                    approvals.push(record.id);
                    outcomes.extend(outcome_for(
                        chunk,
                        "pending_approval",
                        &format!("waiting for approval request {}", record.id),
                    ));
                }
                CallOutcome::Refused(refusal) => {
                    let why = refusal.to_string();
                    outcomes.extend(outcome_for(chunk, "refused", &why));
                    refusals.push(why);
                }
                CallOutcome::Failed(e) => {
                    outcomes.extend(outcome_for(chunk, "failed", &e.message));
                    refusals.push(e.message);
                }
                other => {
                    let why = format!("unexpected outcome: {other:?}");
                    outcomes.extend(outcome_for(chunk, "failed", &why));
                }
            }
        }
        let status = if approvals.is_empty() {
            overall(&outcomes)
        } else {
            RunStatus::PendingApproval
        };
        let message = match status {
            RunStatus::PendingApproval => Some(format!(
                "run_script as {actor} waits for approval ({} request(s))",
                approvals.len()
            )),
            RunStatus::Suppressed => Some("every device is under maintenance".into()),
            _ => refusals.first().map(|r| format!("as {actor}: {r}")),
        };
        self.finish(
            run,
            RunUpdate {
                status,
                approval_ids: approvals,
                devices: outcomes,
                message,
            },
        )
        .await
    }

    /// Finishes runs whose approval requests are all final: the approved calls' outcomes, or
    /// the refusal, per device.
    async fn follow_approvals(&self) -> Result<usize, StoreError> {
        let mut done = 0;
        for run in self.store.runs_awaiting_approval(100).await? {
            let org = self.store.org(run.org_id);
            let mut records = Vec::new();
            for id in &run.approval_ids {
                records.push(org.get_approval(*id).await?);
            }
            if !records.iter().all(|r| r.is_final()) {
                continue;
            }
            let mut outcomes: Vec<DeviceOutcome> = run
                .devices
                .iter()
                .filter(|d| d.status != "pending_approval")
                .cloned()
                .collect();
            let mut notes = Vec::new();
            for r in &records {
                let devices: Vec<DeviceId> = r.arguments["deviceIds"]
                    .as_array()
                    .map(|ids| {
                        ids.iter()
                            .filter_map(|d| d.as_str()?.parse().ok().map(DeviceId))
                            .collect()
                    })
                    .unwrap_or_default();
                match (r.status.as_str(), &r.result) {
                    ("completed", Some(answer)) => outcomes.extend(script_outcomes(answer)),
                    (status, result) => {
                        let why = result
                            .as_ref()
                            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                            .or_else(|| r.reason.clone())
                            .unwrap_or_else(|| format!("approval {status}"));
                        let device_status = if status == "failed" {
                            "failed"
                        } else {
                            "refused"
                        };
                        outcomes.extend(outcome_for(
                            &devices,
                            device_status,
                            &format!("approval {}: {why}", r.id),
                        ));
                        notes.push(format!("approval {status}: {why}"));
                    }
                }
            }
            let status = overall(&outcomes);
            org.update_run(
                run.id,
                RunUpdate {
                    status,
                    approval_ids: run.approval_ids.clone(),
                    devices: outcomes,
                    message: notes.first().cloned().or(run.message.clone()),
                },
            )
            .await?;
            done += 1;
        }
        Ok(done)
    }

    /// Runs [`AutomationWorker::tick`] every `config.tick` until `stop`; first fails runs a
    /// stopped instance left running.
    pub fn spawn(self: Arc<Self>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            match self.store.fail_interrupted_runs().await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(runs = n, "interrupted automation runs marked failed"),
                Err(e) => tracing::warn!(error = %e, "could not check for interrupted runs"),
            }
            let mut tick = tokio::time::interval(self.config.tick);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = tick.tick() => {
                        if let Err(e) = self.tick().await {
                            tracing::warn!(error = %e, "automation worker tick failed");
                        }
                    }
                }
            }
        })
    }
}

/// Whether `target` covers `device`.
async fn covers(
    org: &OrgStore<'_>,
    target: RuleTarget,
    device: DeviceId,
) -> Result<bool, StoreError> {
    Ok(match target {
        RuleTarget::Organization => true,
        RuleTarget::Device(d) => d == device,
        RuleTarget::Site(s) => match org.get_device(device).await {
            Ok(d) => d.site_id == s,
            Err(StoreError::NotFound(_)) => false,
            Err(e) => return Err(e),
        },
        RuleTarget::Group(g) => org
            .groups_of_device(device)
            .await?
            .iter()
            .any(|x| x.id == g),
    })
}
