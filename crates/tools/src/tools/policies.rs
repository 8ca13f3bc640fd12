//! `manage_policies`: compliance policies — list, get, compliance_status, compliance_summary,
//! history (reads, Tier 1); evaluate, create, update, activate, deactivate (Tier 2); delete
//! and remediate (Tier 3).
//!
//! A policy's rules are decided over the devices' stored inventory (package installed or at
//! least a version, OS at least a version) in the server, and by the agent for the rest
//! (service running, file present or its SHA-256, a setting's value, disk encryption,
//! firewall): `evaluate` re-decides the inventory rules at once, queues one `ComplianceCheck`
//! command per online targeted device (at most [`MAX_CHECKS_PER_CALL`]) and waits a bounded
//! time (`waitSeconds`) for their answers; answers that come later are folded in by the
//! server's compliance worker, which also re-evaluates every active policy periodically.
//!
//! **Remediation never runs on this tool's say-so.** `remediate` (Tier 3, so a person approves
//! it first) only queues a remediation; the server's worker then runs the policy's library
//! script on the non-compliant devices through the call pipeline as `run_script` — Tier 3
//! again, as the credential that asked, cleared by the guard as it stands then, with its own
//! approval pinned to the script's body — exactly as an automation's script runs. Follow it
//! with `get` (its remediations) and re-`evaluate` once it has run.

use std::collections::BTreeMap;
use std::time::Duration;

use breeze_core::{
    AuditEvent, ComplianceRule, ComplianceState, DeviceId, Permission, PolicyEnforcement,
    RuleResult,
};
use breeze_store::{
    CompliancePolicy, CompliancePolicyUpdate, EvaluationReport, NewCompliancePolicy, Remediation,
    RuleTarget, StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use breeze_domain::compliance::ComplianceChecks;

use super::args::{TargetArg, uuid_or_missing};
use super::device_command::safe_path;
use crate::reach::{self, Reach};
use crate::{ErrorCode, Pin, RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManagePolicies>();
}

const POLICY_NOT_FOUND: &str = "Compliance policy not found or access denied";
/// The most devices one `evaluate` sends agent checks to.
pub(crate) const MAX_CHECKS_PER_CALL: usize = 25;

crate::actions! {
    // What `manage_policies` does: reads are Tier 1; evaluating and shaping policies Tier 2;
    // deleting and remediating (a script run on devices, approved again as run_script) Tier 3.
    pub(crate) enum PolicyAction {
        List = "list" => (T1, Read, DevicesRead),
        Get = "get" => (T1, Read, DevicesRead),
        ComplianceStatus = "compliance_status" => (T1, Read, DevicesRead),
        ComplianceSummary = "compliance_summary" => (T1, Read, DevicesRead),
        History = "history" => (T1, Read, DevicesRead),
        Evaluate = "evaluate" => (T2, Update, DevicesWrite),
        Create = "create" => (T2, Create, DevicesWrite),
        Update = "update" => (T2, Update, DevicesWrite),
        Activate = "activate" => (T2, Update, DevicesWrite),
        Deactivate = "deactivate" => (T2, Update, DevicesWrite),
        Delete = "delete" => (T3, Delete, DevicesWrite),
        Remediate = "remediate" => (T3, Execute, ScriptsExecute),
    }
}

/// What a policy does about non-compliance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EnforcementArg {
    /// Report only.
    Monitor,
    /// After an evaluation finds non-compliant devices, queue a remediation as the policy's
    /// owner (still approved as run_script).
    Remediate,
}

impl From<EnforcementArg> for PolicyEnforcement {
    fn from(e: EnforcementArg) -> Self {
        match e {
            EnforcementArg::Monitor => PolicyEnforcement::Monitor,
            EnforcementArg::Remediate => PolicyEnforcement::Remediate,
        }
    }
}

/// A device's standing against a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StatusArg {
    Compliant,
    NonCompliant,
    Unknown,
}

impl From<StatusArg> for ComplianceState {
    fn from(s: StatusArg) -> Self {
        match s {
            StatusArg::Compliant => ComplianceState::Compliant,
            StatusArg::NonCompliant => ComplianceState::NonCompliant,
            StatusArg::Unknown => ComplianceState::Unknown,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PoliciesInput {
    action: PolicyAction,
    /// get, evaluate, update, activate, deactivate, delete, remediate (required);
    /// compliance_status, history (optional).
    #[schemars(length(min = 36, max = 36))]
    policy_id: Option<String>,
    /// compliance_status, history, evaluate, remediate: only this device.
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    /// create (required), update.
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(max = 2000))]
    description: Option<String>,
    /// create (required), update: 1 to 50 rules. Inventory rules: package_installed,
    /// package_min_version, os_version. Agent rules: service_running, file_present,
    /// file_sha256, setting_value, disk_encrypted, firewall_enabled.
    #[schemars(length(min = 1, max = 50))]
    rules: Option<Vec<ComplianceRule>>,
    /// Which devices (default organization).
    target: Option<TargetArg>,
    /// create (default monitor), update.
    enforcement: Option<EnforcementArg>,
    /// The library script remediate runs on non-compliant devices.
    #[schemars(length(min = 36, max = 36))]
    remediation_script_id: Option<String>,
    remediation_parameters: Option<BTreeMap<String, String>>,
    /// Periodic re-evaluation (default 60).
    #[schemars(range(min = 5, max = 10080))]
    evaluate_every_minutes: Option<u32>,
    /// create (default true).
    active: Option<bool>,
    /// compliance_status: only devices in this status.
    status: Option<StatusArg>,
    /// evaluate: how long to wait for agent checks (default 10, 0 = do not wait).
    #[schemars(range(min = 0, max = 30))]
    wait_seconds: Option<u32>,
    /// compliance_status, history: most rows (default 100).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct PolicyView {
    id: String,
    name: String,
    description: Option<String>,
    rules: Vec<ComplianceRule>,
    target_type: String,
    target_id: Option<String>,
    /// monitor or remediate.
    enforcement: String,
    remediation_script_id: Option<String>,
    remediation_parameters: BTreeMap<String, String>,
    active: bool,
    /// The credential a remediation the worker queues acts as.
    owner: String,
    evaluate_every_minutes: i64,
    next_evaluation_at: Option<String>,
    last_evaluated_at: Option<String>,
    updated_at: String,
}

impl From<CompliancePolicy> for PolicyView {
    fn from(p: CompliancePolicy) -> Self {
        let target_id = p
            .target_site_id
            .map(|s| s.to_string())
            .or(p.target_group_id.map(|g| g.to_string()))
            .or(p.target_device_id.map(|d| d.to_string()));
        Self {
            id: p.id.to_string(),
            name: p.name,
            description: p.description,
            rules: p.rules,
            target_type: p.target_kind.to_string(),
            target_id,
            enforcement: p.enforcement.to_string(),
            remediation_script_id: p.remediation_script_id.map(|s| s.to_string()),
            remediation_parameters: p.remediation_parameters,
            active: p.active,
            owner: p.owner_actor,
            evaluate_every_minutes: p.evaluate_every_minutes,
            next_evaluation_at: p.next_evaluation_at.map(|t| t.to_rfc3339()),
            last_evaluated_at: p.last_evaluated_at.map(|t| t.to_rfc3339()),
            updated_at: p.updated_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct StatusView {
    policy_id: String,
    device_id: String,
    hostname: String,
    /// compliant, non_compliant or unknown.
    status: String,
    /// Each rule's result (rule index, source, passed, detail).
    results: Vec<RuleResult>,
    /// An agent check still awaited.
    check_pending: bool,
    evaluated_at: String,
    changed_at: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SummaryView {
    policy_id: String,
    name: String,
    active: bool,
    compliant: u64,
    non_compliant: u64,
    unknown: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ChangeView {
    policy_id: String,
    device_id: String,
    from_status: Option<String>,
    to_status: String,
    results: Vec<RuleResult>,
    at: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EvaluationView {
    devices: usize,
    changed: usize,
    status_changes: usize,
    compliant: usize,
    non_compliant: usize,
    unknown: usize,
    /// Agent checks queued by this call.
    checks_sent: usize,
    /// Of those, answered within waitSeconds (the rest are folded in later by the worker).
    checks_answered: usize,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RemediationView {
    id: String,
    policy_id: String,
    requested_by: String,
    /// queued, running, pending_approval, succeeded, partial, failed, refused.
    status: String,
    device_ids: Vec<String>,
    approval_ids: Vec<String>,
    /// deviceId, hostname, status, exitCode, commandId, stdout, error.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    devices: Value,
    message: Option<String>,
    created_at: String,
    finished_at: Option<String>,
}

impl From<Remediation> for RemediationView {
    fn from(r: Remediation) -> Self {
        Self {
            id: r.id.to_string(),
            policy_id: r.policy_id.to_string(),
            requested_by: r.requested_by,
            status: r.status.to_string(),
            device_ids: r.device_ids.iter().map(|d| d.to_string()).collect(),
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
pub(crate) struct PoliciesOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    policies: Option<Vec<PolicyView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<PolicyView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    statuses: Option<Vec<StatusView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<Vec<SummaryView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<Vec<ChangeView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evaluation: Option<EvaluationView>,
    /// get: the newest; remediate: the queued one.
    #[serde(skip_serializing_if = "Option::is_none")]
    remediations: Option<Vec<RemediationView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn policy_id(input: &PoliciesInput) -> Result<Uuid, ToolError> {
    uuid_or_missing(input.policy_id.as_deref(), "policyId", POLICY_NOT_FOUND)
}

fn device_id(input: &PoliciesInput) -> Result<Option<DeviceId>, ToolError> {
    input
        .device_id
        .as_deref()
        .map(|d| {
            Uuid::parse_str(d)
                .map(DeviceId)
                .map_err(|_| ToolError::not_found(super::DEVICE_NOT_FOUND))
        })
        .transpose()
}

fn missing(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("compliance policy") => ToolError::not_found(POLICY_NOT_FOUND),
        other => other.into(),
    }
}

fn audit<R: Reach>(cx: &ToolCx<'_, R>, action: &str) -> AuditEvent {
    AuditEvent::new(cx.actor.clone(), action, "compliance_policy").request(cx.request_id.clone())
}

fn script_id(input: &PoliciesInput) -> Result<Option<Uuid>, ToolError> {
    input
        .remediation_script_id
        .as_deref()
        .map(|s| {
            Uuid::parse_str(s)
                .map_err(|_| ToolError::not_found("Script not found or access denied"))
        })
        .transpose()
}

/// The server's lexical wall for rule paths (the agent checks again, following links).
fn check_rule_paths(rules: &[ComplianceRule]) -> Result<(), ToolError> {
    for (i, rule) in rules.iter().enumerate() {
        if let Some(path) = breeze_store::probe_of(rule).as_ref().and_then(|p| p.path()) {
            safe_path(&format!("rules[{i}].path"), path)?;
        }
    }
    Ok(())
}

fn target(input: &PoliciesInput) -> Result<Option<RuleTarget>, ToolError> {
    input.target.as_ref().map(TargetArg::resolve).transpose()
}

/// Queues agent checks of `policy` on up to [`MAX_CHECKS_PER_CALL`] online targeted devices,
/// waits up to `wait` for their answers and folds in those that came. (sent, answered).
async fn check_agents<R: Reach>(
    cx: &ToolCx<'_, R>,
    policy: &CompliancePolicy,
    only: Option<&[DeviceId]>,
    wait: Duration,
) -> Result<(usize, usize), ToolError> {
    let sent = ComplianceChecks::new(cx.compliance(), *cx.fleet())
        .queue(
            policy,
            only,
            MAX_CHECKS_PER_CALL,
            &cx.actor,
            cx.request_id.clone(),
        )
        .await
        .map_err(|breeze_domain::Error::Store(e)| ToolError::from(e))?;
    if wait.is_zero() || sent.is_empty() {
        return Ok((sent.len(), 0));
    }
    let waits = sent
        .iter()
        .map(|(_, id)| cx.fleet().wait(*id, wait, |_| {}));
    let done = futures::future::join_all(waits).await;
    let mut answered = 0;
    for ((d, _), cmd) in sent.iter().zip(done) {
        let Ok(cmd) = cmd else { continue };
        if cmd.is_terminal() {
            cx.compliance()
                .fold_compliance_check(policy, *d, &cmd)
                .await?;
            answered += 1;
        }
    }
    Ok((sent.len(), answered))
}

pub(crate) struct ManagePolicies;

impl Tool for ManagePolicies {
    const NAME: &'static str = "manage_policies";
    const TITLE: &'static str = "Manage compliance policies";
    const DESCRIPTION: &'static str = "Compliance policies: rules over inventory (package installed or at least a version, OS version) and agent checks (service running, file present or sha256, setting value, disk encryption, firewall) on a target. action=list|get|compliance_status|compliance_summary|history read; evaluate|create|update|activate|deactivate (Tier 2); delete and remediate (Tier 3: queues the policy's script on non-compliant devices, run as run_script with its own approval).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(20, 300);
    type Actions = PolicyAction;
    type Input = PoliciesInput;
    type Output = Rendered<PoliciesOutput>;
    type Reach = (
        reach::Compliance,
        reach::Devices,
        reach::Scripts,
        reach::Fleet,
    );

    /// Delete: the policy exists. Remediate: it exists, has a script (pinned: the approver sees
    /// its body) and a non-compliant device.
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        match input.action {
            PolicyAction::Delete => {
                cx.compliance()
                    .get_compliance_policy(policy_id(input)?)
                    .await
                    .map_err(missing)?;
                Ok(None)
            }
            PolicyAction::Remediate => {
                let p = cx
                    .compliance()
                    .get_compliance_policy(policy_id(input)?)
                    .await
                    .map_err(missing)?;
                let script = p.remediation_script_id.ok_or_else(|| {
                    ToolError::invalid("the policy has no remediationScriptId")
                        .hint("set one with action=update")
                })?;
                let script = cx.scripts().get_script(script).await?;
                let only = device_id(input)?;
                let bad = cx
                    .compliance()
                    .compliance_statuses(Some(p.id), only, Some(ComplianceState::NonCompliant), 1)
                    .await?;
                if bad.is_empty() {
                    return Err(ToolError::invalid(
                        "no device is non-compliant with this policy; nothing to remediate",
                    )
                    .hint("run action=evaluate first"));
                }
                Ok(Some(super::scripts::pin(&script)))
            }
            _ => Ok(None),
        }
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            PolicyAction::List => {
                let all: Vec<PolicyView> = cx
                    .compliance()
                    .list_compliance_policies()
                    .await?
                    .into_iter()
                    .map(Into::into)
                    .collect();
                Rendered::of(&PoliciesOutput {
                    showing: Some(all.len()),
                    policies: Some(all),
                    ..Default::default()
                })
            }
            PolicyAction::Get => {
                let id = policy_id(&input)?;
                let p = cx
                    .compliance()
                    .get_compliance_policy(id)
                    .await
                    .map_err(missing)?;
                let remediations = cx.compliance().list_remediations(id, 5).await?;
                Rendered::of(&PoliciesOutput {
                    policy: Some(p.into()),
                    remediations: Some(remediations.into_iter().map(Into::into).collect()),
                    ..Default::default()
                })
            }
            PolicyAction::ComplianceStatus => {
                let policy = match input.policy_id.as_deref() {
                    None => None,
                    Some(_) => {
                        let id = policy_id(&input)?;
                        cx.compliance()
                            .get_compliance_policy(id)
                            .await
                            .map_err(missing)?;
                        Some(id)
                    }
                };
                let device = device_id(&input)?;
                if let Some(d) = device {
                    cx.devices().get_device(d).await?;
                }
                let rows: Vec<StatusView> = cx
                    .compliance()
                    .compliance_statuses(
                        policy,
                        device,
                        input.status.map(Into::into),
                        input.limit.unwrap_or(100),
                    )
                    .await?
                    .into_iter()
                    .map(|s| StatusView {
                        policy_id: s.policy_id.to_string(),
                        device_id: s.device_id.to_string(),
                        hostname: s.hostname,
                        status: s.status.to_string(),
                        results: s.results,
                        check_pending: s.check_command_id.is_some(),
                        evaluated_at: s.evaluated_at.to_rfc3339(),
                        changed_at: s.changed_at.to_rfc3339(),
                    })
                    .collect();
                Rendered::of(&PoliciesOutput {
                    showing: Some(rows.len()),
                    statuses: Some(rows),
                    ..Default::default()
                })
            }
            PolicyAction::ComplianceSummary => {
                let rows: Vec<SummaryView> = cx
                    .compliance()
                    .compliance_summary()
                    .await?
                    .into_iter()
                    .map(|s| SummaryView {
                        policy_id: s.policy_id.to_string(),
                        name: s.name,
                        active: s.active,
                        compliant: s.compliant,
                        non_compliant: s.non_compliant,
                        unknown: s.unknown,
                    })
                    .collect();
                Rendered::of(&PoliciesOutput {
                    showing: Some(rows.len()),
                    summary: Some(rows),
                    ..Default::default()
                })
            }
            PolicyAction::History => {
                let policy = match input.policy_id.as_deref() {
                    None => None,
                    Some(_) => {
                        let id = policy_id(&input)?;
                        cx.compliance()
                            .get_compliance_policy(id)
                            .await
                            .map_err(missing)?;
                        Some(id)
                    }
                };
                let device = device_id(&input)?;
                let rows: Vec<ChangeView> = cx
                    .compliance()
                    .compliance_history(policy, device, input.limit.unwrap_or(100))
                    .await?
                    .into_iter()
                    .map(|c| ChangeView {
                        policy_id: c.policy_id.to_string(),
                        device_id: c.device_id.to_string(),
                        from_status: c.from_status.map(|s| s.to_string()),
                        to_status: c.to_status.to_string(),
                        results: c.results,
                        at: c.at.to_rfc3339(),
                    })
                    .collect();
                Rendered::of(&PoliciesOutput {
                    showing: Some(rows.len()),
                    history: Some(rows),
                    ..Default::default()
                })
            }
            PolicyAction::Evaluate => {
                let id = policy_id(&input)?;
                let p = cx
                    .compliance()
                    .get_compliance_policy(id)
                    .await
                    .map_err(missing)?;
                let device = device_id(&input)?;
                if let Some(d) = device {
                    cx.devices().get_device(d).await?;
                }
                let only = device.map(|d| vec![d]);
                let report: EvaluationReport = cx
                    .compliance()
                    .evaluate_policy_inventory(&p, only.as_deref())
                    .await?;
                let wait = Duration::from_secs(u64::from(input.wait_seconds.unwrap_or(10)));
                let (sent, answered) = check_agents(cx, &p, only.as_deref(), wait).await?;
                // Counts after the agents' answers.
                let after = cx
                    .compliance()
                    .compliance_summary()
                    .await?
                    .into_iter()
                    .find(|s| s.policy_id == id)
                    .unwrap_or_default();
                let rows: Vec<StatusView> = cx
                    .compliance()
                    .compliance_statuses(Some(id), device, None, 100)
                    .await?
                    .into_iter()
                    .map(|s| StatusView {
                        policy_id: s.policy_id.to_string(),
                        device_id: s.device_id.to_string(),
                        hostname: s.hostname,
                        status: s.status.to_string(),
                        results: s.results,
                        check_pending: s.check_command_id.is_some(),
                        evaluated_at: s.evaluated_at.to_rfc3339(),
                        changed_at: s.changed_at.to_rfc3339(),
                    })
                    .collect();
                let message = if sent > answered {
                    format!(
                        "{} agent check(s) still running; their answers are folded in when they arrive (read action=compliance_status later)",
                        sent - answered
                    )
                } else {
                    format!("evaluated {} device(s)", report.devices)
                };
                Rendered::of(&PoliciesOutput {
                    evaluation: Some(EvaluationView {
                        devices: report.devices,
                        changed: report.changed,
                        status_changes: report.status_changes,
                        compliant: usize::try_from(after.compliant).unwrap_or(usize::MAX),
                        non_compliant: usize::try_from(after.non_compliant).unwrap_or(usize::MAX),
                        unknown: usize::try_from(after.unknown).unwrap_or(usize::MAX),
                        checks_sent: sent,
                        checks_answered: answered,
                    }),
                    showing: Some(rows.len()),
                    statuses: Some(rows),
                    message: Some(message),
                    ..Default::default()
                })
            }
            PolicyAction::Create => {
                let name = input
                    .name
                    .clone()
                    .ok_or_else(|| ToolError::invalid("name is required for create"))?;
                let rules = input
                    .rules
                    .clone()
                    .ok_or_else(|| ToolError::invalid("rules is required for create"))?;
                check_rule_paths(&rules)?;
                let new = NewCompliancePolicy {
                    name,
                    description: input.description.clone(),
                    rules,
                    target: target(&input)?.unwrap_or(RuleTarget::Organization),
                    enforcement: input
                        .enforcement
                        .map_or(PolicyEnforcement::Monitor, Into::into),
                    remediation_script: script_id(&input)?,
                    remediation_parameters: input
                        .remediation_parameters
                        .clone()
                        .unwrap_or_default(),
                    active: input.active.unwrap_or(true),
                    owner_actor: cx.actor.to_string(),
                    evaluate_every_minutes: input.evaluate_every_minutes.unwrap_or(60),
                };
                let p = cx
                    .compliance()
                    .create_compliance_policy(new, audit(cx, "compliance_policy.create"))
                    .await?;
                Rendered::of(&PoliciesOutput {
                    message: Some(format!(
                        "created compliance policy {}; evaluate it with action=evaluate",
                        p.name
                    )),
                    policy: Some(p.into()),
                    ..Default::default()
                })
            }
            PolicyAction::Update => {
                let id = policy_id(&input)?;
                if let Some(rules) = &input.rules {
                    check_rule_paths(rules)?;
                }
                let update = CompliancePolicyUpdate {
                    name: input.name.clone(),
                    description: input.description.clone(),
                    rules: input.rules.clone(),
                    target: target(&input)?,
                    enforcement: input.enforcement.map(Into::into),
                    remediation_script: script_id(&input)?,
                    remediation_parameters: input.remediation_parameters.clone(),
                    active: input.active,
                    evaluate_every_minutes: input.evaluate_every_minutes,
                    // Whoever shapes what it does is whom its remediations act as.
                    owner_actor: Some(cx.actor.to_string()),
                };
                let p = cx
                    .compliance()
                    .update_compliance_policy(id, update, audit(cx, "compliance_policy.update"))
                    .await
                    .map_err(missing)?;
                Rendered::of(&PoliciesOutput {
                    message: Some(format!("compliance policy {} updated", p.name)),
                    policy: Some(p.into()),
                    ..Default::default()
                })
            }
            PolicyAction::Activate | PolicyAction::Deactivate => {
                let id = policy_id(&input)?;
                let on = input.action == PolicyAction::Activate;
                let update = CompliancePolicyUpdate {
                    active: Some(on),
                    ..Default::default()
                };
                let verb = if on {
                    "compliance_policy.activate"
                } else {
                    "compliance_policy.deactivate"
                };
                let p = cx
                    .compliance()
                    .update_compliance_policy(id, update, audit(cx, verb))
                    .await
                    .map_err(missing)?;
                Rendered::of(&PoliciesOutput {
                    message: Some(format!(
                        "compliance policy {} {}",
                        p.name,
                        if on { "activated" } else { "deactivated" }
                    )),
                    policy: Some(p.into()),
                    ..Default::default()
                })
            }
            PolicyAction::Delete => {
                let id = policy_id(&input)?;
                let p = cx
                    .compliance()
                    .delete_compliance_policy(id, audit(cx, "compliance_policy.delete"))
                    .await
                    .map_err(missing)?;
                Rendered::of(&PoliciesOutput {
                    message: Some(format!("compliance policy {} deleted", p.name)),
                    ..Default::default()
                })
            }
            PolicyAction::Remediate => {
                let id = policy_id(&input)?;
                let only = device_id(&input)?.map(|d| vec![d]);
                let r = cx
                    .compliance()
                    .queue_remediation(
                        id,
                        only.as_deref(),
                        &cx.actor.to_string(),
                        audit(cx, "compliance.remediation.queue"),
                    )
                    .await
                    .map_err(|e| match e {
                        StoreError::Conflict(m) => ToolError::new(ErrorCode::Conflict, m),
                        other => missing(other),
                    })?;
                Rendered::of(&PoliciesOutput {
                    message: Some(format!(
                        "remediation {} queued on {} device(s); its script runs as you through run_script (Tier 3: another approval, pinned to the script); follow it with action=get",
                        r.id,
                        r.device_ids.len()
                    )),
                    remediations: Some(vec![r.into()]),
                    ..Default::default()
                })
            }
        }
    }
}
