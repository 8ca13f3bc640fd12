//! Automations (migration 0021): what starts one (a cron schedule in a time zone, an alert, a
//! person), what it does (run a library script on its target's devices, notify a channel), and
//! the history of its runs with each device's outcome.
//!
//! Every change to an automation is written with its audit record in one transaction. The
//! schedule's lease is the automation's own `next_run_at`: [`Store::claim_schedule`] moves it
//! from the occurrence that came due to the next one with one conditional statement and queues
//! the run in the same transaction, so instances sharing the database fire each occurrence once
//! and a restart loses nothing (the same technique as `scheduled_runs`, on a row per
//! automation). An alert queues at most one run per automation (a unique index), whichever
//! instance sees it first. A queued run is taken by one worker ([`CrossOrg::claim_queued_runs`](crate::CrossOrg::claim_queued_runs),
//! a conditional update). The store does no running: the server's worker does, as the
//! automation's owner, through the tool pipeline.

use std::collections::BTreeMap;

use breeze_core::{
    AuditEvent, AutomationAction, AutomationTrigger, CronSchedule, DeviceGroupId, DeviceId,
    DeviceOutcomeStatus, OrgId, RunStatus, Severity, SiteId, TargetKind, Timestamp,
    maintenance::parse_time_zone,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    Alert, CrossOrg, Result, RuleTarget, Store, StoreError,
    alerts::{
        ALERT_COLUMNS, MAX_NAME_CHARS, MAX_NOTE_CHARS, check_text, target_columns, target_of,
    },
    audit,
    runs::{RunRow, RunTable, RunUpdate},
    scheduled::RowLease,
    sql::{Arg, Tx, sql},
};

/// The most automations one organization may keep.
pub const MAX_AUTOMATIONS_PER_ORG: i64 = 200;
/// The most runs one history listing returns.
pub const MAX_RUN_PAGE: u32 = 100;
/// The most devices one run acts on (the rest are reported as not run).
pub const MAX_RUN_DEVICES: usize = 50;
/// How long a run may stay `running` before it counts as interrupted (its instance died).
pub const RUN_INTERRUPTED_AFTER: chrono::Duration = chrono::Duration::minutes(30);

/// What starts an automation, with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerSpec {
    /// A five-field cron expression read in an IANA zone.
    Schedule {
        cron: String,
        time_zone: String,
    },
    /// An alert raised by `rule` (any rule when `None`) of at least `min_severity`.
    Alert {
        rule: Option<Uuid>,
        min_severity: Option<Severity>,
    },
    Manual,
}

/// What an automation does, with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionSpec {
    /// Run library script `script` with `parameters` on the target's devices.
    RunScript {
        script: Uuid,
        parameters: BTreeMap<String, String>,
        timeout_seconds: u32,
    },
    /// Send `message` (or a default) to notification channel `channel`.
    Notify {
        channel: Uuid,
        message: Option<String>,
    },
}

/// An automation as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Automation {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    pub description: Option<String>,
    pub enabled: bool,
    #[sqlx(try_from = "String")]
    pub trigger_kind: AutomationTrigger,
    pub cron: Option<String>,
    pub time_zone: String,
    pub alert_rule_id: Option<Uuid>,
    pub alert_min_severity: Option<String>,
    #[sqlx(try_from = "String")]
    pub action_kind: AutomationAction,
    pub script_id: Option<Uuid>,
    #[sqlx(json)]
    pub parameters: BTreeMap<String, String>,
    pub timeout_seconds: i64,
    pub channel_id: Option<Uuid>,
    pub message: Option<String>,
    #[sqlx(try_from = "String")]
    pub target_kind: TargetKind,
    pub target_site_id: Option<SiteId>,
    pub target_group_id: Option<DeviceGroupId>,
    pub target_device_id: Option<DeviceId>,
    /// Who it runs as: the API key or OAuth grant that created or last changed it
    /// (`api_key:…`, `oauth_grant:…`).
    pub owner_actor: String,
    /// The schedule's next occurrence (its lease); `None` unless an enabled schedule.
    pub next_run_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Automation {
    /// The automation's target as one value.
    pub fn target(&self) -> Result<RuleTarget> {
        target_of(
            self.target_kind,
            (
                self.target_site_id,
                self.target_group_id,
                self.target_device_id,
            ),
            || format!("automation {}", self.id),
        )
    }

    /// The trigger as one value.
    pub fn trigger(&self) -> Result<TriggerSpec> {
        Ok(match self.trigger_kind {
            AutomationTrigger::Schedule => TriggerSpec::Schedule {
                cron: self.cron.clone().ok_or_else(|| {
                    StoreError::Corrupt(format!("automation {} has no cron", self.id))
                })?,
                time_zone: self.time_zone.clone(),
            },
            AutomationTrigger::Alert => TriggerSpec::Alert {
                rule: self.alert_rule_id,
                min_severity: self
                    .alert_min_severity
                    .as_deref()
                    .map(str::parse)
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
            },
            AutomationTrigger::Manual => TriggerSpec::Manual,
        })
    }

    /// The parsed schedule, for a schedule trigger.
    pub fn schedule(&self) -> Option<CronSchedule> {
        let cron = self.cron.as_deref()?;
        (self.trigger_kind == AutomationTrigger::Schedule)
            .then(|| CronSchedule::parse(cron, &self.time_zone).ok())
            .flatten()
    }

    /// Whether `alert` starts this automation (an enabled alert trigger whose rule or severity
    /// matches).
    pub fn matches_alert(&self, alert: &Alert) -> bool {
        let Ok(TriggerSpec::Alert { rule, min_severity }) = self.trigger() else {
            return false;
        };
        self.enabled
            && alert.org_id == self.org_id
            && rule.is_none_or(|r| r == alert.rule_id)
            && min_severity.is_none_or(|s| alert.severity >= s)
    }
}

/// An automation to create.
#[derive(Debug, Clone)]
pub struct NewAutomation {
    pub name: String,
    pub description: Option<String>,
    pub enabled: bool,
    pub trigger: TriggerSpec,
    pub action: ActionSpec,
    pub target: RuleTarget,
    /// The creating credential (`Actor` text); the automation runs as it.
    pub owner_actor: String,
}

/// Changes to an automation; `None` keeps the current value. The changing credential becomes
/// the owner, so the automation never runs with more than its last author could do.
#[derive(Debug, Clone, Default)]
pub struct AutomationUpdate {
    pub name: Option<String>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
    pub trigger: Option<TriggerSpec>,
    pub action: Option<ActionSpec>,
    pub target: Option<RuleTarget>,
    /// The new owner, when the change is one of substance (not enable/disable).
    pub owner_actor: Option<String>,
}

/// One device's part of a run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceOutcome {
    pub device_id: DeviceId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    pub status: DeviceOutcomeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    /// The first part of the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The maintenance window that held the run back on this device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_name: Option<String>,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AutomationRun {
    pub id: Uuid,
    pub org_id: OrgId,
    pub automation_id: Uuid,
    #[sqlx(try_from = "String")]
    pub trigger_kind: AutomationTrigger,
    /// The schedule occurrence it ran for.
    pub occurrence_at: Option<Timestamp>,
    /// The alert that started it, and that alert's device.
    pub alert_id: Option<Uuid>,
    pub device_id: Option<DeviceId>,
    /// Who asked: the manual runner, or the automation's owner for a trigger.
    pub requested_by: String,
    #[sqlx(try_from = "String")]
    pub status: RunStatus,
    /// Approval requests its script runs wait or waited for.
    #[sqlx(json)]
    pub approval_ids: Vec<Uuid>,
    #[sqlx(json)]
    pub devices: Vec<DeviceOutcome>,
    pub message: Option<String>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
}

/// A run to record.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub trigger: AutomationTrigger,
    pub occurrence_at: Option<Timestamp>,
    pub alert_id: Option<Uuid>,
    pub device_id: Option<DeviceId>,
    pub requested_by: String,
    /// `Queued` for the worker, or `Skipped` for a missed schedule.
    pub status: RunStatus,
    pub message: Option<String>,
}

/// The run table's shared bookkeeping ([`crate::runs`]).
const RUNS: RunTable = RunTable {
    table: "automation_runs",
    columns: RUN_COLUMNS,
    what: "automation run",
    resource_type: "automation_run",
    finish_action: "automation.run.finish",
    wait_action: "automation.run.wait",
    actor: automations_actor,
};

impl RunRow for AutomationRun {
    fn id(&self) -> Uuid {
        self.id
    }

    fn started(&mut self, now: Timestamp) {
        self.status = RunStatus::Running;
        self.started_at = Some(now);
    }
}

const AUTOMATION_COLUMNS: &str = "id, org_id, name, description, enabled, trigger_kind, cron, \
    time_zone, alert_rule_id, alert_min_severity, action_kind, script_id, parameters, \
    timeout_seconds, channel_id, message, target_kind, target_site_id, target_group_id, \
    target_device_id, owner_actor, next_run_at, created_at, updated_at";
const RUN_COLUMNS: &str = "id, org_id, automation_id, trigger_kind, occurrence_at, alert_id, \
    device_id, requested_by, status, approval_ids, devices, message, created_at, started_at, \
    finished_at";

/// The automation worker, in audit records.
pub fn automations_actor() -> breeze_core::Actor {
    breeze_core::Actor::system("automations")
}

/// The stored columns of a trigger: kind, cron, time zone, rule, severity.
type TriggerColumns = (
    &'static str,
    Option<String>,
    String,
    Option<Uuid>,
    Option<&'static str>,
);

fn trigger_columns(t: &TriggerSpec) -> TriggerColumns {
    match t {
        TriggerSpec::Schedule { cron, time_zone } => (
            "schedule",
            Some(cron.clone()),
            time_zone.clone(),
            None,
            None,
        ),
        TriggerSpec::Alert { rule, min_severity } => (
            "alert",
            None,
            "UTC".to_owned(),
            *rule,
            min_severity.map(Severity::as_str),
        ),
        TriggerSpec::Manual => ("manual", None, "UTC".to_owned(), None, None),
    }
}

/// The stored columns of an action: kind, script, parameters, timeout, channel, message.
type ActionColumns = (
    &'static str,
    Option<Uuid>,
    BTreeMap<String, String>,
    i64,
    Option<Uuid>,
    Option<String>,
);

fn action_columns(a: &ActionSpec) -> ActionColumns {
    match a {
        ActionSpec::RunScript {
            script,
            parameters,
            timeout_seconds,
        } => (
            "run_script",
            Some(*script),
            parameters.clone(),
            i64::from(*timeout_seconds),
            None,
            None,
        ),
        ActionSpec::Notify { channel, message } => (
            "notify",
            None,
            BTreeMap::new(),
            0,
            Some(*channel),
            message.clone(),
        ),
    }
}

/// The schedule's first occurrence after `now`, for an enabled schedule trigger.
fn first_run(trigger: &TriggerSpec, enabled: bool, now: Timestamp) -> Result<Option<Timestamp>> {
    match trigger {
        TriggerSpec::Schedule { cron, time_zone } => {
            let s = CronSchedule::parse(cron, time_zone).map_err(StoreError::Invalid)?;
            Ok(enabled.then(|| s.next_after(now)).flatten())
        }
        _ => Ok(None),
    }
}

impl crate::OrgAutomations<'_> {
    async fn check_automation(
        &self,
        description: Option<&str>,
        trigger: &TriggerSpec,
        action: &ActionSpec,
        target: RuleTarget,
    ) -> Result<()> {
        if description.is_some_and(|d| d.chars().count() > MAX_NOTE_CHARS) {
            return Err(StoreError::Invalid(format!(
                "description is longer than {MAX_NOTE_CHARS} characters"
            )));
        }
        match trigger {
            TriggerSpec::Schedule { cron, time_zone } => {
                parse_time_zone(time_zone).map_err(StoreError::Invalid)?;
                CronSchedule::parse(cron, time_zone).map_err(StoreError::Invalid)?;
            }
            TriggerSpec::Alert {
                rule: Some(rule), ..
            } => {
                let r = self.whole().alerts().get_rule(*rule).await?;
                if r.deleted_at.is_some() {
                    return Err(StoreError::NotFound("alert rule"));
                }
            }
            _ => {}
        }
        match action {
            ActionSpec::RunScript {
                script,
                timeout_seconds,
                ..
            } => {
                self.whole().scripts().get_script(*script).await?;
                if !(5..=600).contains(timeout_seconds) {
                    return Err(StoreError::Invalid(
                        "timeoutSeconds must be between 5 and 600".into(),
                    ));
                }
            }
            ActionSpec::Notify { channel, message } => {
                self.whole().alerts().get_channel(*channel).await?;
                if message
                    .as_deref()
                    .is_some_and(|m| m.chars().count() > MAX_NOTE_CHARS)
                {
                    return Err(StoreError::Invalid(format!(
                        "message is longer than {MAX_NOTE_CHARS} characters"
                    )));
                }
            }
        }
        self.whole().alerts().check_target(target).await
    }

    /// Creates an automation after checking its schedule, rule, script or channel, and target
    /// are valid and this organization's.
    pub async fn create_automation(
        &self,
        new: NewAutomation,
        audit: AuditEvent,
    ) -> Result<Automation> {
        check_text("name", &new.name, MAX_NAME_CHARS)?;
        self.check_automation(
            new.description.as_deref(),
            &new.trigger,
            &new.action,
            new.target,
        )
        .await?;
        self.whole()
            .check_room("automations", MAX_AUTOMATIONS_PER_ORG, "automations")
            .await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let next = first_run(&new.trigger, new.enabled, now)?;
        let (tk, cron, tz, rule, severity) = trigger_columns(&new.trigger);
        let (ak, script, params, timeout, channel, message) = action_columns(&new.action);
        let (site, group, device) = target_columns(new.target);
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO automations ({AUTOMATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, \
             $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(new.description.as_deref())
        .bind(new.enabled)
        .bind(tk)
        .bind(cron)
        .bind(tz)
        .bind(rule)
        .bind(severity)
        .bind(ak)
        .bind(script)
        .bind(Arg::json(&params))
        .bind(timeout)
        .bind(channel)
        .bind(message)
        .bind(new.target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(new.owner_actor.as_str())
        .bind(next)
        .bind(now)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("an automation named {:?} exists", new.name)))?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": new.name, "trigger": tk, "action": ak, "target": new.target,
            "scriptId": script, "channelId": channel, "enabled": new.enabled, "nextRunAt": next,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_automation(id).await
    }

    /// One automation of this organization.
    pub async fn get_automation(&self, id: Uuid) -> Result<Automation> {
        sql(format!(
            "SELECT {AUTOMATION_COLUMNS} FROM automations WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("automation"))
    }

    /// The organization's automations, by name.
    pub async fn list_automations(&self) -> Result<Vec<Automation>> {
        sql(format!(
            "SELECT {AUTOMATION_COLUMNS} FROM automations WHERE org_id = $1 ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Changes an automation; the audit record names the fields changed. Enabling (or changing
    /// the schedule) sets the next run to the first occurrence after now: nothing missed while
    /// disabled runs.
    pub async fn update_automation(
        &self,
        id: Uuid,
        update: AutomationUpdate,
        audit: AuditEvent,
    ) -> Result<Automation> {
        let current = self.get_automation(id).await?;
        if let Some(name) = &update.name {
            check_text("name", name, MAX_NAME_CHARS)?;
        }
        let trigger = match &update.trigger {
            Some(t) => t.clone(),
            None => current.trigger()?,
        };
        let action = match &update.action {
            Some(a) => a.clone(),
            None => match current.action_kind {
                AutomationAction::RunScript => ActionSpec::RunScript {
                    script: current.script_id.ok_or(StoreError::NotFound("script"))?,
                    parameters: current.parameters.clone(),
                    timeout_seconds: u32::try_from(current.timeout_seconds).unwrap_or(120),
                },
                _ => ActionSpec::Notify {
                    channel: current.channel_id.ok_or(StoreError::NotFound("channel"))?,
                    message: current.message.clone(),
                },
            },
        };
        let target = update.target.unwrap_or(current.target()?);
        self.check_automation(update.description.as_deref(), &trigger, &action, target)
            .await?;
        let enabled = update.enabled.unwrap_or(current.enabled);
        let now = self.store.clock.now();
        let reschedule = update.trigger.is_some() || (enabled && !current.enabled);
        let next = if !enabled {
            None
        } else if reschedule || current.next_run_at.is_none() {
            first_run(&trigger, enabled, now)?
        } else {
            current.next_run_at
        };
        let name = update.name.clone().unwrap_or(current.name.clone());
        let owner = update
            .owner_actor
            .clone()
            .unwrap_or(current.owner_actor.clone());
        let (tk, cron, tz, rule, severity) = trigger_columns(&trigger);
        let (ak, script, params, timeout, channel, message) = action_columns(&action);
        let (site, group, device) = target_columns(target);
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE automations SET name = $1, description = $2, enabled = $3, trigger_kind = $4, \
             cron = $5, time_zone = $6, alert_rule_id = $7, alert_min_severity = $8, \
             action_kind = $9, script_id = $10, parameters = $11, timeout_seconds = $12, \
             channel_id = $13, message = $14, target_kind = $15, target_site_id = $16, \
             target_group_id = $17, target_device_id = $18, owner_actor = $19, \
             next_run_at = $20, updated_at = $21 WHERE id = $22 AND org_id = $23",
        )
        .bind(name.as_str())
        .bind(
            update
                .description
                .as_deref()
                .or(current.description.as_deref()),
        )
        .bind(enabled)
        .bind(tk)
        .bind(cron)
        .bind(tz)
        .bind(rule)
        .bind(severity)
        .bind(ak)
        .bind(script)
        .bind(Arg::json(&params))
        .bind(timeout)
        .bind(channel)
        .bind(message)
        .bind(target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(owner.as_str())
        .bind(next)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("an automation named {name:?} exists")))?;
        if n == 0 {
            return Err(StoreError::NotFound("automation"));
        }
        let changed = audit::changed_fields([
            ("name", update.name.is_some()),
            ("description", update.description.is_some()),
            ("enabled", update.enabled.is_some()),
            ("trigger", update.trigger.is_some()),
            ("action", update.action.is_some()),
            ("target", update.target.is_some()),
        ]);
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "changed": changed, "enabled": enabled, "owner": owner, "nextRunAt": next,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_automation(id).await
    }

    /// Deletes an automation and its run history (the audit log keeps both).
    pub async fn delete_automation(&self, id: Uuid, audit: AuditEvent) -> Result<Automation> {
        let current = self.get_automation(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("DELETE FROM automation_runs WHERE automation_id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        audit::delete_row(&mut tx, self.org, "automations", id, "automation").await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "name": current.name }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(current)
    }

    /// Records a run of `automation` (audited `automation.run.queue`, or `.skip`). `None` when
    /// the same occurrence or alert already has one.
    pub async fn queue_run(
        &self,
        automation: Uuid,
        new: NewRun,
        audit: AuditEvent,
    ) -> Result<Option<AutomationRun>> {
        self.get_automation(automation).await?;
        let mut tx = Tx::begin_in(self).await?;
        let run = insert_run(&mut tx, self.store, self.org, automation, &new, audit).await?;
        tx.commit().await?;
        match run {
            Some(id) => Ok(Some(self.get_run(id).await?)),
            None => Ok(None),
        }
    }

    /// One run of this organization.
    pub async fn get_run(&self, id: Uuid) -> Result<AutomationRun> {
        RUNS.get(self, id).await
    }

    /// The newest runs (of one automation, or of all), at most `limit` (≤ [`MAX_RUN_PAGE`]).
    pub async fn list_runs(
        &self,
        automation: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<AutomationRun>> {
        let mut q = sql(format!(
            "SELECT {RUN_COLUMNS} FROM automation_runs WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(a) = automation {
            let p = q.arg(a);
            q.push(&format!(" AND automation_id = {p}"));
        }
        let l = q.arg(i64::from(limit.clamp(1, MAX_RUN_PAGE)));
        q.push(&format!(" ORDER BY created_at DESC, id DESC LIMIT {l}"));
        q.fetch_all(self).await
    }

    /// Records a run's progress or end (audited `automation.run.finish` when it ends).
    pub async fn update_run(&self, id: Uuid, update: RunUpdate) -> Result<AutomationRun> {
        RUNS.update(self, id, update).await
    }

    /// Finishes a run waiting for approval: [`crate::OrgAutomations::update_run`] only if it is still
    /// `pending_approval`; `None` when another instance finished it first.
    pub async fn finish_awaiting_run(
        &self,
        id: Uuid,
        update: RunUpdate,
    ) -> Result<Option<AutomationRun>> {
        RUNS.update_from(self, id, update, Some(RunStatus::PendingApproval))
            .await
    }

    /// Alerts raised at or after `since`, oldest first, at most `limit`.
    pub async fn alerts_raised_since(&self, since: Timestamp, limit: u32) -> Result<Vec<Alert>> {
        sql(format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE org_id = $1 AND triggered_at >= $2 \
             ORDER BY triggered_at, id LIMIT $3"
        ))
        .bind(self.org)
        .bind(since)
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }
}

/// Inserts a run unless its occurrence or alert has one; its id when inserted.
async fn insert_run(
    tx: &mut Tx,
    store: &Store,
    org: OrgId,
    automation: Uuid,
    new: &NewRun,
    audit: AuditEvent,
) -> Result<Option<Uuid>> {
    let now = store.clock.now();
    let id = Uuid::now_v7();
    let done = new.status.is_terminal();
    let n = sql(format!(
        "INSERT INTO automation_runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
         $9, $10, $11, $12, $13, $14, $15) ON CONFLICT DO NOTHING"
    ))
    .bind(id)
    .bind(org)
    .bind(automation)
    .bind(new.trigger.as_str())
    .bind(new.occurrence_at)
    .bind(new.alert_id)
    .bind(new.device_id)
    .bind(new.requested_by.as_str())
    .bind(new.status.as_str())
    .bind(Arg::json(&Vec::<Uuid>::new()))
    .bind(Arg::json(&Vec::<DeviceOutcome>::new()))
    .bind(new.message.as_deref())
    .bind(now)
    .bind(done.then_some(now))
    .bind(done.then_some(now))
    .execute(&mut *tx)
    .await?;
    if n == 0 {
        return Ok(None);
    }
    let audit = audit
        .org(org)
        .resource(automation)
        .details(serde_json::json!({
            "runId": id, "trigger": new.trigger, "status": new.status,
            "occurrenceAt": new.occurrence_at, "alertId": new.alert_id,
            "deviceId": new.device_id, "message": new.message,
        }));
    audit::insert(tx, &audit, now).await?;
    Ok(Some(id))
}

/// A schedule automation's lease: its own `next_run_at`.
const SCHEDULE: RowLease = RowLease {
    table: "automations",
    columns: AUTOMATION_COLUMNS,
    at: "next_run_at",
    only: "trigger_kind = 'schedule' AND enabled = TRUE",
};

impl Store {
    /// Takes the lease of `automation`'s occurrence `due`: moves its next run to `next` if it
    /// is still `due` (one statement, so one instance wins) and records `run` in the same
    /// transaction. False when another instance (or a change to the automation) was first.
    pub async fn claim_schedule(
        &self,
        automation: &Automation,
        due: Timestamp,
        next: Option<Timestamp>,
        run: NewRun,
    ) -> Result<bool> {
        let mut tx = Tx::begin(&self.pool).await?;
        if !SCHEDULE
            .claim(&mut tx, (automation.id, automation.org_id), due, next)
            .await?
        {
            return Ok(false);
        }
        let action = if run.status == RunStatus::Skipped {
            "automation.run.skip"
        } else {
            "automation.run.queue"
        };
        let audit = AuditEvent::new(automations_actor(), action, "automation");
        insert_run(&mut tx, self, automation.org_id, automation.id, &run, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Marks runs left `running` for longer than [`RUN_INTERRUPTED_AFTER`] failed (their
    /// instance stopped mid-run); they are never retried. Returns how many.
    pub async fn fail_interrupted_runs(&self) -> Result<u64> {
        let now = self.clock.now();
        sql(
            "UPDATE automation_runs SET status = 'failed', finished_at = $1, \
             message = 'interrupted: the instance running it stopped; not retried' \
             WHERE status = 'running' AND started_at < $2",
        )
        .bind(now)
        .bind(now - RUN_INTERRUPTED_AFTER)
        .execute(self)
        .await
    }
}

impl CrossOrg<'_> {
    /// Enabled schedule automations of every organization whose next run is due at `now`,
    /// soonest first, at most `limit`.
    pub async fn due_automations(&self, now: Timestamp, limit: u32) -> Result<Vec<Automation>> {
        SCHEDULE.due(self.store, now, limit).await
    }

    /// Enabled alert-triggered automations of every organization, at most `limit`.
    pub async fn alert_automations(&self, limit: u32) -> Result<Vec<Automation>> {
        sql(format!(
            "SELECT {AUTOMATION_COLUMNS} FROM automations WHERE trigger_kind = 'alert' \
             AND enabled = $1 ORDER BY org_id, id LIMIT $2"
        ))
        .bind(true)
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// Takes up to `limit` queued runs for this worker (each by a conditional update, so one
    /// instance gets each) and marks them running.
    pub async fn claim_queued_runs(&self, limit: u32) -> Result<Vec<AutomationRun>> {
        RUNS.claim_queued(self.store, limit).await
    }

    /// Runs waiting for approval of their script runs, oldest first, at most `limit`.
    pub async fn runs_awaiting_approval(&self, limit: u32) -> Result<Vec<AutomationRun>> {
        RUNS.awaiting_approval(self.store, limit).await
    }
}
