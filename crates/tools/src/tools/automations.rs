//! `manage_automations`: list, get, history, create, update, delete, enable, disable, run.
//!
//! An automation starts on a `schedule` (five-field cron in an IANA `timeZone`), on an `alert`
//! (a rule, or any rule at or above a severity) or only by hand (`manual`), and does one `task`:
//! run a library script on the devices of its `target` (for an alert, on the alert's device
//! when the target covers it), or notify a channel. `create_ticket` is refused until tickets
//! exist.
//!
//! Reads are Tier 1; create, update, enable, disable and run Tier 2; delete Tier 3 (the spec's
//! "1/2/3"). **A script never runs on an automation's say-so:** the server's worker runs each
//! run's script through the call pipeline as `run_script`, Tier 3, as the automation's owner
//! (the key or OAuth grant that created or last changed it; for a manual run, whoever ran it),
//! cleared by the guard as that credential stands then — so a key without `ai:execute` gets a
//! refused run, and one with it an approval request a person must grant (unless the
//! organization's approval policy for `run_script` says otherwise, as for any MCP call). The
//! history shows each run, its approval requests, and each device's outcome.

use std::collections::BTreeMap;

use breeze_core::{AuditEvent, AutomationTrigger, Permission, RunStatus};
use breeze_store::{
    ActionSpec, Automation, AutomationRun, AutomationUpdate, NewAutomation, NewRun, RuleTarget,
    StoreError, TriggerSpec,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::args::{SeverityArg, TargetArg, uuid_or_missing};
use crate::reach::{self, Reach};
use crate::{Pin, RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManageAutomations>();
}

const AUTOMATION_NOT_FOUND: &str = "Automation not found or access denied";

/// Runs `get` shows.
const RECENT_RUNS: u32 = 5;

crate::actions! {
    // What `manage_automations` does: reads are Tier 1; creating, changing, switching and
    // running Tier 2 (a script run is Tier 3 on its own, as its owner); deleting Tier 3.
    pub(crate) enum AutomationToolAction {
        List = "list" => (T1, Read, ScriptsRead),
        Get = "get" => (T1, Read, ScriptsRead),
        History = "history" => (T1, Read, ScriptsRead),
        Create = "create" => (T2, Create, ScriptsWrite),
        Update = "update" => (T2, Update, ScriptsWrite),
        Enable = "enable" => (T2, Update, ScriptsWrite),
        Disable = "disable" => (T2, Update, ScriptsWrite),
        Run = "run" => (T2, Execute, ScriptsExecute),
        Delete = "delete" => (T3, Delete, ScriptsWrite),
    }
}

/// What starts it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum TriggerArg {
    /// cron: five fields (minute hour day month weekday), read in timeZone (default UTC).
    #[serde(rename_all = "camelCase")]
    Schedule {
        #[schemars(length(min = 9, max = 100))]
        cron: String,
        #[schemars(length(min = 1, max = 64))]
        time_zone: Option<String>,
    },
    /// An alert of ruleId, or of any rule at or above minSeverity.
    #[serde(rename_all = "camelCase")]
    Alert {
        #[schemars(length(min = 36, max = 36))]
        rule_id: Option<String>,
        min_severity: Option<SeverityArg>,
    },
    /// Only action=run.
    Manual,
}

/// What it does.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum TaskArg {
    /// A library script on the target's devices (each run: run_script, Tier 3).
    #[serde(rename_all = "camelCase")]
    RunScript {
        #[schemars(length(min = 36, max = 36))]
        script_id: String,
        parameters: Option<BTreeMap<String, String>>,
        #[schemars(range(min = 5, max = 600))]
        timeout_seconds: Option<u32>,
    },
    /// A message to a notification channel.
    #[serde(rename_all = "camelCase")]
    Notify {
        #[schemars(length(min = 36, max = 36))]
        channel_id: String,
        #[schemars(length(max = 2000))]
        message: Option<String>,
    },
    /// Not available until tickets exist.
    CreateTicket,
}

impl TriggerArg {
    fn resolve(&self) -> Result<TriggerSpec, ToolError> {
        Ok(match self {
            TriggerArg::Schedule { cron, time_zone } => TriggerSpec::Schedule {
                cron: cron.clone(),
                time_zone: time_zone.clone().unwrap_or_else(|| "UTC".to_owned()),
            },
            TriggerArg::Alert {
                rule_id,
                min_severity,
            } => TriggerSpec::Alert {
                rule: rule_id
                    .as_deref()
                    .map(|r| {
                        Uuid::parse_str(r).map_err(|_| {
                            ToolError::not_found("alert rule not found or access denied")
                        })
                    })
                    .transpose()?,
                min_severity: min_severity.map(Into::into),
            },
            TriggerArg::Manual => TriggerSpec::Manual,
        })
    }
}

impl TaskArg {
    fn resolve(&self) -> Result<ActionSpec, ToolError> {
        Ok(match self {
            TaskArg::RunScript {
                script_id,
                parameters,
                timeout_seconds,
            } => ActionSpec::RunScript {
                script: Uuid::parse_str(script_id)
                    .map_err(|_| ToolError::not_found("Script not found or access denied"))?,
                parameters: parameters.clone().unwrap_or_default(),
                timeout_seconds: timeout_seconds.unwrap_or(120),
            },
            TaskArg::Notify {
                channel_id,
                message,
            } => ActionSpec::Notify {
                channel: Uuid::parse_str(channel_id).map_err(|_| {
                    ToolError::not_found("notification channel not found or access denied")
                })?,
                message: message.clone(),
            },
            TaskArg::CreateTicket => {
                return Err(ToolError::invalid(
                    "task create_ticket: Breeze has no tickets yet; nothing was created",
                )
                .hint("use kind notify to tell a channel instead"));
            }
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AutomationsInput {
    action: AutomationToolAction,
    /// get, history (optional), update, delete, enable, disable, run.
    #[schemars(length(min = 36, max = 36))]
    automation_id: Option<String>,
    /// create (required), update.
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(max = 2000))]
    description: Option<String>,
    /// create (required), update.
    trigger: Option<TriggerArg>,
    /// create (required), update.
    task: Option<TaskArg>,
    /// Whose devices a script runs on (default organization).
    target: Option<TargetArg>,
    /// create (default true).
    enabled: Option<bool>,
    /// history: most runs (default 20).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AutomationView {
    id: String,
    name: String,
    description: Option<String>,
    enabled: bool,
    /// kind schedule (cron, timeZone), alert (ruleId, minSeverity) or manual.
    #[schemars(with = "serde_json::Map<String, Value>")]
    trigger: Value,
    /// kind run_script (scriptId, parameters, timeoutSeconds) or notify (channelId, message).
    #[schemars(with = "serde_json::Map<String, Value>")]
    task: Value,
    target_type: String,
    target_id: Option<String>,
    /// The credential its runs act as.
    owner: String,
    next_run_at: Option<String>,
    updated_at: String,
}

impl From<Automation> for AutomationView {
    fn from(a: Automation) -> Self {
        let trigger = match a.trigger_kind {
            AutomationTrigger::Schedule => {
                json!({ "kind": "schedule", "cron": a.cron, "timeZone": a.time_zone })
            }
            AutomationTrigger::Alert => json!({
                "kind": "alert", "ruleId": a.alert_rule_id, "minSeverity": a.alert_min_severity,
            }),
            AutomationTrigger::Manual => json!({ "kind": "manual" }),
        };
        let task = match a.action_kind {
            breeze_core::AutomationAction::RunScript => json!({
                "kind": "run_script", "scriptId": a.script_id, "parameters": a.parameters,
                "timeoutSeconds": a.timeout_seconds,
            }),
            _ => json!({ "kind": "notify", "channelId": a.channel_id, "message": a.message }),
        };
        let target_id = a
            .target_site_id
            .map(|s| s.to_string())
            .or(a.target_group_id.map(|g| g.to_string()))
            .or(a.target_device_id.map(|d| d.to_string()));
        Self {
            id: a.id.to_string(),
            name: a.name,
            description: a.description,
            enabled: a.enabled,
            trigger,
            task,
            target_type: a.target_kind.to_string(),
            target_id,
            owner: a.owner_actor,
            next_run_at: a.next_run_at.map(|t| t.to_rfc3339()),
            updated_at: a.updated_at.to_rfc3339(),
        }
    }
}

/// One run and each device's outcome.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RunView {
    id: String,
    automation_id: String,
    /// schedule, alert or manual.
    trigger: String,
    occurrence_at: Option<String>,
    alert_id: Option<String>,
    requested_by: String,
    /// queued, running, pending_approval, succeeded, partial, failed, refused, suppressed,
    /// skipped.
    status: String,
    /// Approval requests its script runs wait or waited for.
    approval_ids: Vec<String>,
    /// deviceId, hostname, status, exitCode, commandId, stdout, error, windowId, windowName.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    devices: Value,
    message: Option<String>,
    created_at: String,
    finished_at: Option<String>,
}

impl From<AutomationRun> for RunView {
    fn from(r: AutomationRun) -> Self {
        Self {
            id: r.id.to_string(),
            automation_id: r.automation_id.to_string(),
            trigger: r.trigger_kind.to_string(),
            occurrence_at: r.occurrence_at.map(|t| t.to_rfc3339()),
            alert_id: r.alert_id.map(|a| a.to_string()),
            requested_by: r.requested_by,
            status: r.status.to_string(),
            approval_ids: r.approval_ids.iter().map(Uuid::to_string).collect(),
            devices: serde_json::to_value(&r.devices).unwrap_or_default(),
            message: r.message,
            created_at: r.created_at.to_rfc3339(),
            finished_at: r.finished_at.map(|t| t.to_rfc3339()),
        }
    }
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AutomationsOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    automations: Option<Vec<AutomationView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    automation: Option<AutomationView>,
    /// get: the newest runs; history: runs, newest first; run: the queued run.
    #[serde(skip_serializing_if = "Option::is_none")]
    runs: Option<Vec<RunView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn automation_id(input: &AutomationsInput) -> Result<Uuid, ToolError> {
    uuid_or_missing(
        input.automation_id.as_deref(),
        "automationId",
        AUTOMATION_NOT_FOUND,
    )
}

fn missing(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("automation") => ToolError::not_found(AUTOMATION_NOT_FOUND),
        other => other.into(),
    }
}

fn audit<R: Reach>(cx: &ToolCx<'_, R>, action: &str) -> AuditEvent {
    AuditEvent::new(cx.actor.clone(), action, "automation").request(cx.request_id.clone())
}

fn target(input: &AutomationsInput) -> Result<Option<RuleTarget>, ToolError> {
    input.target.as_ref().map(TargetArg::resolve).transpose()
}

pub(crate) struct ManageAutomations;

impl Tool for ManageAutomations {
    const NAME: &'static str = "manage_automations";
    const TITLE: &'static str = "Manage automations";
    const DESCRIPTION: &'static str = "Automations: a trigger (schedule: cron + timeZone; alert: ruleId or minSeverity; manual) and a task (run_script on the target's devices, or notify a channel). Script runs go through run_script's Tier 3 approval as the automation's owner. action=list|get|history read; create|update|enable|disable|run (Tier 2); delete (Tier 3).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::ScriptsRead;
    const RATE_LIMIT: Option<RateLimit> = per(10, 600);
    type Actions = AutomationToolAction;
    type Input = AutomationsInput;
    type Output = Rendered<AutomationsOutput>;
    type Reach = (reach::Automations, reach::Devices);

    /// The automation a delete names exists in the organization.
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        if input.action == AutomationToolAction::Delete {
            cx.automations()
                .get_automation(automation_id(input)?)
                .await
                .map_err(missing)?;
        }
        Ok(None)
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            AutomationToolAction::List => {
                let all: Vec<AutomationView> = cx
                    .automations()
                    .list_automations()
                    .await?
                    .into_iter()
                    .map(Into::into)
                    .collect();
                Rendered::of(&AutomationsOutput {
                    showing: Some(all.len()),
                    automations: Some(all),
                    ..Default::default()
                })
            }
            AutomationToolAction::Get => {
                let id = automation_id(&input)?;
                let a = cx.automations().get_automation(id).await.map_err(missing)?;
                let runs = cx.automations().list_runs(Some(id), RECENT_RUNS).await?;
                Rendered::of(&AutomationsOutput {
                    automation: Some(a.into()),
                    runs: Some(runs.into_iter().map(Into::into).collect()),
                    ..Default::default()
                })
            }
            AutomationToolAction::History => {
                let id = match input.automation_id.as_deref() {
                    None => None,
                    Some(_) => {
                        let id = automation_id(&input)?;
                        cx.automations().get_automation(id).await.map_err(missing)?;
                        Some(id)
                    }
                };
                let runs: Vec<RunView> = cx
                    .automations()
                    .list_runs(id, input.limit.unwrap_or(20))
                    .await?
                    .into_iter()
                    .map(Into::into)
                    .collect();
                Rendered::of(&AutomationsOutput {
                    showing: Some(runs.len()),
                    runs: Some(runs),
                    ..Default::default()
                })
            }
            AutomationToolAction::Create => {
                let name = input
                    .name
                    .clone()
                    .ok_or_else(|| ToolError::invalid("name is required for create"))?;
                let trigger = input
                    .trigger
                    .as_ref()
                    .ok_or_else(|| ToolError::invalid("trigger is required for create"))?
                    .resolve()?;
                let action = input
                    .task
                    .as_ref()
                    .ok_or_else(|| ToolError::invalid("task is required for create"))?
                    .resolve()?;
                let new = NewAutomation {
                    name,
                    description: input.description.clone(),
                    enabled: input.enabled.unwrap_or(true),
                    trigger,
                    action,
                    target: target(&input)?.unwrap_or(RuleTarget::Organization),
                    owner_actor: cx.actor.to_string(),
                };
                let a = cx
                    .automations()
                    .create_automation(new, audit(cx, "automation.create"))
                    .await?;
                Rendered::of(&AutomationsOutput {
                    message: Some(format!(
                        "created automation {}; its runs act as {}",
                        a.name, a.owner_actor
                    )),
                    automation: Some(a.into()),
                    ..Default::default()
                })
            }
            AutomationToolAction::Update => {
                let id = automation_id(&input)?;
                let update = AutomationUpdate {
                    name: input.name.clone(),
                    description: input.description.clone(),
                    enabled: input.enabled,
                    trigger: input
                        .trigger
                        .as_ref()
                        .map(TriggerArg::resolve)
                        .transpose()?,
                    action: input.task.as_ref().map(TaskArg::resolve).transpose()?,
                    target: target(&input)?,
                    // Whoever shapes what it does is whom it runs as.
                    owner_actor: Some(cx.actor.to_string()),
                };
                let a = cx
                    .automations()
                    .update_automation(id, update, audit(cx, "automation.update"))
                    .await
                    .map_err(missing)?;
                Rendered::of(&AutomationsOutput {
                    message: Some(format!(
                        "automation updated; its runs now act as {}",
                        a.owner_actor
                    )),
                    automation: Some(a.into()),
                    ..Default::default()
                })
            }
            AutomationToolAction::Enable | AutomationToolAction::Disable => {
                let id = automation_id(&input)?;
                let on = input.action == AutomationToolAction::Enable;
                let update = AutomationUpdate {
                    enabled: Some(on),
                    ..Default::default()
                };
                let verb = if on {
                    "automation.enable"
                } else {
                    "automation.disable"
                };
                let a = cx
                    .automations()
                    .update_automation(id, update, audit(cx, verb))
                    .await
                    .map_err(missing)?;
                Rendered::of(&AutomationsOutput {
                    message: Some(format!(
                        "automation {} {}",
                        a.name,
                        if on { "enabled" } else { "disabled" }
                    )),
                    automation: Some(a.into()),
                    ..Default::default()
                })
            }
            AutomationToolAction::Run => {
                let id = automation_id(&input)?;
                let new = NewRun {
                    trigger: AutomationTrigger::Manual,
                    occurrence_at: None,
                    alert_id: None,
                    device_id: None,
                    requested_by: cx.actor.to_string(),
                    status: RunStatus::Queued,
                    message: None,
                };
                let run = cx
                    .automations()
                    .queue_run(id, new, audit(cx, "automation.run.queue"))
                    .await
                    .map_err(missing)?
                    .ok_or_else(|| ToolError::invalid("the run could not be queued"))?;
                Rendered::of(&AutomationsOutput {
                    message: Some(format!(
                        "run {} queued; a script run acts as you and waits for approval (Tier 3); follow it with action=history",
                        run.id
                    )),
                    runs: Some(vec![run.into()]),
                    ..Default::default()
                })
            }
            AutomationToolAction::Delete => {
                let id = automation_id(&input)?;
                let a = cx
                    .automations()
                    .delete_automation(id, audit(cx, "automation.delete"))
                    .await
                    .map_err(missing)?;
                Rendered::of(&AutomationsOutput {
                    message: Some(format!("automation {} deleted", a.name)),
                    ..Default::default()
                })
            }
        }
    }
}
