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
//! **The Tier 3 rule** (`owner_runs`). A run's script goes through [`Pipeline::call`]
//! as `run_script` — the same guard (scope, role, per-tool limit, allowlist) and the same
//! durable approval as an MCP call — with the credential the run acts as (the automation's owner: the API key or OAuth
//! grant that created or last changed it; for a manual run, whoever asked) as it stands now
//! ([`breeze_pipeline::standing`]). A key without `ai:execute` is refused; one with it gets an
//! approval request that a person must grant before anything runs (the run waits in
//! `pending_approval`, and the approval's resumer runs the approved call); a revoked key or a
//! user without a role makes the run void. Nothing reaches an agent any other way.
//!
//! Devices under an open maintenance window that holds back alerts are left out of a script
//! run, each recorded in the run's outcome with the window that held it back.

use std::{collections::HashMap, sync::Arc, time::Duration};

use crate::{
    owner_runs::{self, ScriptCall, overall},
    workers::{Tasks, Worker},
};
use breeze_alerts::{ChannelMessage, NotifyConfig};
use breeze_core::{
    AutomationAction, AutomationTrigger, DeviceId, DeviceOutcomeStatus, RunStatus, Timestamp,
};
use breeze_pipeline::Pipeline;
use breeze_store::{
    Automation, AutomationRun, DeviceFilter, DeviceOutcome, MAX_RUN_DEVICES, NewRun, OrgStore,
    RuleTarget, RunUpdate, Store, StoreError,
};
use serde_json::json;
use tokio::sync::Mutex;

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
    runs: Tasks,
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
            runs: Tasks::default(),
        }
    }

    fn now(&self) -> Timestamp {
        self.store.clock().now()
    }
}

/// Runs every `config.tick`; first fails the runs a stopped instance left running.
impl Worker for AutomationWorker {
    const NAME: &'static str = "automation worker";
    type Report = TickReport;
    type Error = StoreError;

    fn period(&self) -> Duration {
        self.config.tick
    }

    /// One round: schedules, alerts, queued runs (started in tasks of their own), approvals.
    async fn tick(self: &Arc<Self>) -> Result<TickReport, StoreError> {
        let mut report = TickReport {
            scheduled: self.schedules().await?,
            alerted: self.alerts().await?,
            ..TickReport::default()
        };
        for run in self
            .store
            .cross_org()
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
                        .automations()
                        .update_run(
                            id,
                            RunUpdate::ended(RunStatus::Failed, format!("internal error: {e}")),
                        )
                        .await;
                }
            });
        }
        report.followed_up = self.follow_approvals().await?;
        Ok(report)
    }

    async fn start(self: &Arc<Self>) {
        match self.store.fail_interrupted_runs().await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(runs = n, "interrupted automation runs marked failed"),
            Err(e) => tracing::warn!(error = %e, "could not check for interrupted runs"),
        }
    }
}

impl AutomationWorker {
    /// Waits until every run started so far has finished its part (tests, and shutdown).
    pub async fn settle(&self) {
        self.runs.settle().await;
    }

    async fn schedules(&self) -> Result<usize, StoreError> {
        let now = self.now();
        let mut queued = 0;
        for a in self.store.cross_org().due_automations(now, 200).await? {
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
        let automations = self.store.cross_org().alert_automations(1000).await?;
        let mut by_org: HashMap<_, Vec<Automation>> = HashMap::new();
        for a in automations {
            by_org.entry(a.org_id).or_default().push(a);
        }
        let mut queued = 0;
        for (org_id, automations) in by_org {
            let org = self.store.org(org_id);
            for alert in org.automations().alerts_raised_since(since, 500).await? {
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
                    if org
                        .automations()
                        .queue_run(a.id, run, audit)
                        .await?
                        .is_some()
                    {
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
            .automations()
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
        self.finish(run, RunUpdate::ended(status, message)).await
    }

    async fn execute(&self, run: AutomationRun) -> Result<(), StoreError> {
        let org = self.store.org(run.org_id);
        let a = match org.automations().get_automation(run.automation_id).await {
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
        let channel = match org.alerts().get_channel(channel_id).await {
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
            return Ok(match org.devices().get_device(d).await {
                Ok(device) => vec![(device.id, device.hostname)],
                Err(StoreError::NotFound(_)) => vec![],
                Err(e) => return Err(e),
            });
        }
        let filter = match a.target()? {
            RuleTarget::Device(d) => {
                return Ok(match org.devices().get_device(d).await {
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
            .devices()
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
        let standing = match owner_runs::acting_as(&self.store, a.org_id, acting).await? {
            Ok(s) => s,
            Err(why) => return self.finish_with(run, RunStatus::Refused, why).await,
        };
        let mut targets = self.devices(org, a, run).await?;
        let mut outcomes = Vec::new();
        if targets.len() > MAX_RUN_DEVICES {
            for (d, hostname) in targets.drain(MAX_RUN_DEVICES..) {
                outcomes.push(DeviceOutcome {
                    device_id: d,
                    hostname: Some(hostname),
                    status: DeviceOutcomeStatus::NotRun,
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
        let held = org
            .maintenance()
            .maintenance_covering(&ids, self.now())
            .await?;
        let mut free = Vec::new();
        for (d, hostname) in targets {
            match held.get(&d) {
                Some((window, _)) => outcomes.push(DeviceOutcome {
                    device_id: d,
                    hostname: Some(hostname),
                    status: DeviceOutcomeStatus::Suppressed,
                    error: Some("under maintenance".into()),
                    window_id: Some(window.id),
                    window_name: Some(window.name.clone()),
                    ..Default::default()
                }),
                None => free.push(d),
            }
        }
        let script = ScriptCall {
            script_id: a.script_id.unwrap_or_default(),
            parameters: &a.parameters,
            timeout_seconds: Some(a.timeout_seconds),
        };
        let mut done = owner_runs::run_script_as(&self.pipeline, &standing, script, &free).await;
        outcomes.append(&mut done.outcomes);
        done.outcomes = outcomes;
        let status = done.status();
        let message = match status {
            RunStatus::Suppressed => Some("every device is under maintenance".into()),
            _ => done.message(status, &standing.actor()),
        };
        self.finish(
            run,
            RunUpdate {
                status,
                approval_ids: done.approvals,
                devices: done.outcomes,
                message,
            },
        )
        .await
    }

    /// Finishes runs whose approval requests are all final: the approved calls' outcomes, or
    /// the refusal, per device.
    async fn follow_approvals(&self) -> Result<usize, StoreError> {
        let mut done = 0;
        for run in self.store.cross_org().runs_awaiting_approval(100).await? {
            let Some(records) =
                owner_runs::final_approvals(&self.store, run.org_id, &run.approval_ids).await?
            else {
                continue;
            };
            let (outcomes, note) = owner_runs::settle_approvals(&run.devices, &records);
            // Every instance sees the waiting run: the one whose update moves it finishes it.
            if self
                .store
                .org(run.org_id)
                .automations()
                .finish_awaiting_run(
                    run.id,
                    RunUpdate {
                        status: overall(&outcomes),
                        approval_ids: run.approval_ids.clone(),
                        devices: outcomes,
                        message: note.or(run.message.clone()),
                    },
                )
                .await?
                .is_some()
            {
                done += 1;
            }
        }
        Ok(done)
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
        RuleTarget::Site(s) => match org.devices().get_device(device).await {
            Ok(d) => d.site_id == s,
            Err(StoreError::NotFound(_)) => false,
            Err(e) => return Err(e),
        },
        RuleTarget::Group(g) => org
            .tenancy()
            .groups_of_device(device)
            .await?
            .iter()
            .any(|x| x.id == g),
    })
}
