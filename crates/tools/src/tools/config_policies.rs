//! Configuration policies: `list_configuration_policies`, `get_effective_configuration`,
//! `preview_configuration_change` (Tier 1), `apply_configuration_policy` and
//! `remove_configuration_policy_assignment` (Tier 2).
//!
//! Resolution is `breeze_core::config_policy` (device > group > site > organization >
//! partner, then priority, then the older assignment; per setting, each naming its source).
//! A preview resolves every affected device with the change made in memory, exactly as the
//! store would after applying it. Applying or removing is `breeze_domain::config_policies`
//! (the same operation `breeze config-policies` runs): audited, and the new effective
//! configuration sent to the affected devices' agents; the agent reports what it applied with
//! its heartbeats, and `get_effective_configuration` shows the drift. Policies themselves are
//! created with `breeze config-policies` (audited). Another organization's
//! policy, assignment, device, site or group is "not found", like a missing one.

use std::collections::BTreeMap;

use breeze_core::{
    ConfigLevel, Permission, PolicyStatus,
    config_policy::{Candidate, Effective, EffectiveValue, Source, diff, resolve_for},
};
use breeze_domain::{
    Agents,
    config_policies::{Assign, ConfigPolicies},
};
use breeze_store::{ConfigAssignment, ConfigPolicy, NewAssignment, PolicyOwner, StoreError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::devices::find_device;
use crate::reach::{self, Reach};
use crate::{Effect, NoActions, Registry, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ApplyConfigurationPolicy>();
    r.register::<GetEffectiveConfiguration>();
    r.register::<ListConfigurationPolicies>();
    r.register::<PreviewConfigurationChange>();
    r.register::<RemoveConfigurationPolicyAssignment>();
}

const POLICY_NOT_FOUND: &str = "Configuration policy not found or access denied";
const ASSIGNMENT_NOT_FOUND: &str = "Configuration policy assignment not found or access denied";
const TARGET_NOT_FOUND: &str = "Assignment target not found or access denied";
/// The most devices a preview lists (the count covers all).
const MAX_PREVIEW_DEVICES: usize = 100;

/// Any JSON value (a setting's value), as an explicit schema object: SDKs refuse a bare
/// `true` schema.
pub(crate) struct AnyJson;

impl JsonSchema for AnyJson {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AnyJson".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "description": "any JSON value" })
    }
}

fn uuid_arg(raw: &str, missing: &str) -> Result<Uuid, ToolError> {
    Uuid::parse_str(raw).map_err(|_| ToolError::not_found(missing))
}

/// The organization's configuration policies as the domain changes them: audited as the
/// caller, sent to agents through this server's gateway.
fn domain<'a, R: Reach>(cx: &ToolCx<'a, R>) -> ConfigPolicies<'a> {
    ConfigPolicies::new(
        cx.config_policies(),
        Agents::Gateway(*cx.fleet()),
        cx.actor.clone(),
    )
    .request(cx.request_id.clone())
}

/// Domain errors with this module's wording for what was not found.
fn refused(e: breeze_domain::Error) -> ToolError {
    match e {
        breeze_domain::Error::Store(e) => not_found(e),
    }
}

/// Store errors with this module's wording for what was not found.
fn not_found(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("configuration policy") => ToolError::not_found(POLICY_NOT_FOUND),
        StoreError::NotFound("configuration policy assignment") => {
            ToolError::not_found(ASSIGNMENT_NOT_FOUND)
        }
        StoreError::NotFound("site" | "device group" | "group" | "device" | "organization") => {
            ToolError::not_found(TARGET_NOT_FOUND)
        }
        other => other.into(),
    }
}

/// A hierarchy level as tools accept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LevelArg {
    Partner,
    Organization,
    Site,
    DeviceGroup,
    Device,
}

impl From<LevelArg> for ConfigLevel {
    fn from(l: LevelArg) -> Self {
        match l {
            LevelArg::Partner => ConfigLevel::Partner,
            LevelArg::Organization => ConfigLevel::Organization,
            LevelArg::Site => ConfigLevel::Site,
            LevelArg::DeviceGroup => ConfigLevel::DeviceGroup,
            LevelArg::Device => ConfigLevel::Device,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StatusArg {
    Active,
    Inactive,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AssignmentView {
    id: String,
    policy_id: String,
    /// partner, organization, site, device_group or device.
    level: String,
    target_id: String,
    priority: i32,
    created_by: String,
    created_at: String,
}

impl From<ConfigAssignment> for AssignmentView {
    fn from(a: ConfigAssignment) -> Self {
        Self {
            id: a.id.to_string(),
            policy_id: a.policy_id.to_string(),
            level: a.level.to_string(),
            target_id: a.target_id.to_string(),
            priority: a.priority,
            created_by: a.created_by,
            created_at: a.created_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PolicyView {
    id: String,
    name: String,
    description: Option<String>,
    /// active or inactive (inactive policies resolve nowhere).
    status: String,
    /// organization, or partner (partner-wide, read-only here).
    owner: String,
    feature_types: Vec<String>,
    /// Feature type → the settings it sets.
    #[schemars(with = "serde_json::Map<String, Value>")]
    settings: Value,
    assignments: Vec<AssignmentView>,
    updated_at: String,
}

impl PolicyView {
    fn new(p: ConfigPolicy, assignments: Vec<AssignmentView>) -> Self {
        Self {
            id: p.id.to_string(),
            feature_types: p.settings.keys().map(|f| f.to_string()).collect(),
            settings: serde_json::to_value(&p.settings).unwrap_or_default(),
            name: p.name,
            description: p.description,
            status: p.status.to_string(),
            owner: match p.owner {
                PolicyOwner::Organization(_) => "organization".into(),
                PolicyOwner::Partner(_) => "partner".into(),
            },
            assignments,
            updated_at: p.updated_at.to_rfc3339(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// list_configuration_policies
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListInput {
    status: Option<StatusArg>,
    /// 1–100 (default 50).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListOutput {
    policies: Vec<PolicyView>,
    showing: usize,
    total: usize,
}

pub(crate) struct ListConfigurationPolicies;

impl Tool for ListConfigurationPolicies {
    const NAME: &'static str = "list_configuration_policies";
    const TITLE: &'static str = "List configuration policies";
    const DESCRIPTION: &'static str = "Configuration policies this organization sees (its own and partner-wide ones) with their feature types (monitoring, agent_log, patch, maintenance, monitored_services), settings and assignments.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = ListInput;
    type Output = ListOutput;
    type Reach = reach::ConfigPolicies;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let status = input.status.map(|s| match s {
            StatusArg::Active => PolicyStatus::Active,
            StatusArg::Inactive => PolicyStatus::Inactive,
        });
        let policies = cx.config_policies().list_config_policies(status).await?;
        let mut assignments: BTreeMap<Uuid, Vec<AssignmentView>> = BTreeMap::new();
        for a in cx.config_policies().list_config_assignments().await? {
            assignments.entry(a.policy_id).or_default().push(a.into());
        }
        let total = policies.len();
        let limit = input.limit.unwrap_or(50) as usize;
        let policies: Vec<PolicyView> = policies
            .into_iter()
            .take(limit)
            .map(|p| {
                let a = assignments.remove(&p.id).unwrap_or_default();
                PolicyView::new(p, a)
            })
            .collect();
        Ok(ListOutput {
            showing: policies.len(),
            policies,
            total,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// get_effective_configuration
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DeviceInput {
    /// The device's id (UUID).
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
}

/// One effective setting.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ValueView {
    #[schemars(with = "AnyJson")]
    value: Value,
    /// The assignment it comes from: policy, level, target, priority.
    source: Source,
}

impl From<&EffectiveValue> for ValueView {
    fn from(v: &EffectiveValue) -> Self {
        Self {
            value: v.value.clone(),
            source: v.source.clone(),
        }
    }
}

type EffectiveView = BTreeMap<String, BTreeMap<String, ValueView>>;

fn effective_view(e: &Effective) -> EffectiveView {
    e.iter()
        .map(|(f, fields)| {
            (
                f.to_string(),
                fields.iter().map(|(k, v)| (k.clone(), v.into())).collect(),
            )
        })
        .collect()
}

/// A setting the agent runs with another value than the effective one.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DriftView {
    /// e.g. monitoring.metricIntervalSeconds.
    setting: String,
    #[schemars(with = "AnyJson")]
    desired: Value,
    #[schemars(with = "AnyJson")]
    applied: Value,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppliedView {
    /// The configuration revision the agent applied.
    revision: Option<String>,
    /// The values in effect on the device (metricsIntervalSecs, inventoryIntervalSecs, logLevel).
    #[schemars(with = "serde_json::Map<String, Value>")]
    values: Value,
    reported_at: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EffectiveOutput {
    device_id: String,
    /// Feature type → setting → {value, source}.
    effective: EffectiveView,
    /// The digest of the effective values the agent is sent.
    revision: String,
    /// What the agent last reported as applied (none: not reported yet).
    applied: Option<AppliedView>,
    /// The agent applied this revision and runs every setting it applies at its value.
    in_sync: bool,
    drift: Vec<DriftView>,
}

pub(crate) struct GetEffectiveConfiguration;

impl Tool for GetEffectiveConfiguration {
    const NAME: &'static str = "get_effective_configuration";
    const TITLE: &'static str = "Get effective configuration";
    const DESCRIPTION: &'static str = "A device's effective configuration resolved through the hierarchy (device > group > site > organization > partner, then priority): every setting with its source policy and level, and drift against what the agent reports it applied.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = DeviceInput;
    type Output = EffectiveOutput;
    type Reach = (reach::ConfigPolicies, reach::Devices);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        let effective = cx
            .config_policies()
            .effective_configuration(device.id)
            .await?;
        let wire = breeze_gateway::wire_policy(&effective);
        let report = cx.config_policies().config_report(device.id).await?;
        let mut drift = Vec::new();
        if let Some(r) = &report {
            let desired = [
                (
                    "monitoring.metricIntervalSeconds",
                    wire.metrics_interval_secs.map(Value::from),
                    "metricsIntervalSecs",
                ),
                (
                    "monitoring.inventoryIntervalSeconds",
                    wire.inventory_interval_secs.map(Value::from),
                    "inventoryIntervalSecs",
                ),
                (
                    "agent_log.level",
                    wire.log_level.and_then(|l| serde_json::to_value(l).ok()),
                    "logLevel",
                ),
                // The one patch setting the agent applies itself (its own scan schedule); the
                // others are the server's decisions (approvals, install jobs' reboots).
                (
                    "patch.scanIntervalMinutes",
                    wire.features
                        .get("patch")
                        .and_then(|f| f.get("scanIntervalMinutes"))
                        .cloned(),
                    "patchScanIntervalMinutes",
                ),
            ];
            for (setting, want, key) in desired {
                let have = r.applied.get(key).cloned().unwrap_or(Value::Null);
                if let Some(want) = want
                    && want != have
                {
                    drift.push(DriftView {
                        setting: setting.into(),
                        desired: want,
                        applied: have,
                    });
                }
            }
        }
        let in_sync = report
            .as_ref()
            .is_some_and(|r| r.revision.as_deref() == Some(wire.revision.as_str()))
            && drift.is_empty();
        Ok(EffectiveOutput {
            device_id: device.id.to_string(),
            effective: effective_view(&effective),
            revision: wire.revision,
            applied: report.map(|r| AppliedView {
                revision: r.revision,
                values: r.applied,
                reported_at: r.reported_at.to_rfc3339(),
            }),
            in_sync,
            drift,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// preview_configuration_change
// ---------------------------------------------------------------------------------------------

/// An assignment a preview adds.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AddArg {
    #[schemars(length(min = 36, max = 36))]
    config_policy_id: String,
    level: LevelArg,
    #[schemars(length(min = 36, max = 36))]
    target_id: String,
    /// 0–1000 (default 0); higher wins on the same level.
    #[schemars(range(min = 0, max = 1000))]
    priority: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PreviewInput {
    /// Only this device (default: every affected device).
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    /// Assignments to add.
    #[schemars(length(max = 10))]
    add: Option<Vec<AddArg>>,
    /// Assignment ids to remove.
    #[schemars(length(max = 10))]
    remove: Option<Vec<String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChangeView {
    feature_type: String,
    field: String,
    before: Option<ValueView>,
    after: Option<ValueView>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceChanges {
    device_id: String,
    changes: Vec<ChangeView>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PreviewOutput {
    /// Devices whose effective configuration would change.
    affected_devices: usize,
    devices: Vec<DeviceChanges>,
    showing: usize,
    /// Nothing was changed.
    applied: bool,
}

/// Checks an assignment the organization could make and returns the candidate it would be.
async fn candidate_for<R: Reach>(cx: &ToolCx<'_, R>, add: &AddArg) -> Result<Candidate, ToolError> {
    let policy_id = uuid_arg(&add.config_policy_id, POLICY_NOT_FOUND)?;
    let target_id = uuid_arg(&add.target_id, TARGET_NOT_FOUND)?;
    let new = NewAssignment {
        policy_id,
        level: add.level.into(),
        target_id,
        priority: i64::from(add.priority.unwrap_or(0)),
        created_by: cx.actor.to_string(),
    };
    let policy = cx
        .config_policies()
        .check_new_assignment(&new)
        .await
        .map_err(not_found)?;
    Ok(Candidate {
        // Newer than every stored assignment, as the one applying it would be.
        assignment_id: Uuid::now_v7(),
        policy_id,
        policy_name: policy.name,
        level: new.level,
        target_id,
        priority: i32::try_from(new.priority).unwrap_or(0),
        settings: std::sync::Arc::new(policy.settings),
    })
}

pub(crate) struct PreviewConfigurationChange;

impl Tool for PreviewConfigurationChange {
    const NAME: &'static str = "preview_configuration_change";
    const TITLE: &'static str = "Preview configuration change";
    const DESCRIPTION: &'static str = "What adding (add: configPolicyId, level, targetId, priority) or removing (remove: assignment ids) policy assignments would change, per affected device and setting, before and after with sources. Changes nothing.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = PreviewInput;
    type Output = PreviewOutput;
    type Reach = (reach::ConfigPolicies, reach::Devices);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let adds = input.add.unwrap_or_default();
        let removes = input.remove.unwrap_or_default();
        if adds.is_empty() && removes.is_empty() {
            return Err(ToolError::invalid("give add or remove (or both)"));
        }
        let only = match &input.device_id {
            Some(d) => Some(vec![find_device(cx, d).await?.id]),
            None => None,
        };
        let mut remove_ids = Vec::new();
        for raw in &removes {
            let id = uuid_arg(raw, ASSIGNMENT_NOT_FOUND)?;
            cx.config_policies()
                .get_config_assignment(id)
                .await
                .map_err(not_found)?;
            remove_ids.push(id);
        }
        let before = cx.config_policies().config_candidates().await?;
        let mut after: Vec<Candidate> = before
            .iter()
            .filter(|c| !remove_ids.contains(&c.assignment_id))
            .cloned()
            .collect();
        for add in &adds {
            after.push(candidate_for(cx, add).await?);
        }
        let places = cx.config_policies().device_places(only.as_deref()).await?;
        let mut devices = Vec::new();
        for place in &places {
            let changes = diff(&resolve_for(place, &before), &resolve_for(place, &after));
            if !changes.is_empty() {
                devices.push(DeviceChanges {
                    device_id: place.device.to_string(),
                    changes: changes
                        .into_iter()
                        .map(|c| ChangeView {
                            feature_type: c.feature.to_string(),
                            field: c.field,
                            before: c.before.as_ref().map(Into::into),
                            after: c.after.as_ref().map(Into::into),
                        })
                        .collect(),
                });
            }
        }
        let affected = devices.len();
        devices.truncate(MAX_PREVIEW_DEVICES);
        Ok(PreviewOutput {
            affected_devices: affected,
            showing: devices.len(),
            devices,
            applied: false,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// apply_configuration_policy / remove_configuration_policy_assignment
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ApplyInput {
    #[schemars(length(min = 36, max = 36))]
    config_policy_id: String,
    /// organization, site, device_group or device (partner-wide: the partner's CLI).
    level: LevelArg,
    /// The organization, site, group or device id.
    #[schemars(length(min = 36, max = 36))]
    target_id: String,
    /// 0–1000 (default 0); higher wins on the same level.
    #[schemars(range(min = 0, max = 1000))]
    priority: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AssignmentOutput {
    assignment: AssignmentView,
    /// Devices the assignment covers (their agents are sent the new configuration).
    affected_devices: usize,
    message: String,
}

pub(crate) struct ApplyConfigurationPolicy;

impl Tool for ApplyConfigurationPolicy {
    const NAME: &'static str = "apply_configuration_policy";
    const TITLE: &'static str = "Apply configuration policy";
    const DESCRIPTION: &'static str = "Assign a configuration policy at a level of the hierarchy (organization, site, device_group, device) with a priority; covered devices' agents get the new effective configuration. Preview first with preview_configuration_change.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::DevicesWrite;
    const EFFECTS: &'static [Effect] = &[Effect::Create];
    type Actions = NoActions;
    type Input = ApplyInput;
    type Output = AssignmentOutput;
    type Reach = (reach::ConfigPolicies, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let changed = domain(cx)
            .assign(Assign {
                policy_id: uuid_arg(&input.config_policy_id, POLICY_NOT_FOUND)?,
                level: input.level.into(),
                target_id: uuid_arg(&input.target_id, TARGET_NOT_FOUND)?,
                priority: i64::from(input.priority.unwrap_or(0)),
            })
            .await
            .map_err(refused)?;
        let (assignment, affected) = (changed.value, changed.devices.len());
        Ok(AssignmentOutput {
            message: format!(
                "policy assigned to {} {}",
                assignment.level, assignment.target_id
            ),
            assignment: assignment.into(),
            affected_devices: affected,
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RemoveInput {
    #[schemars(length(min = 36, max = 36))]
    assignment_id: String,
}

pub(crate) struct RemoveConfigurationPolicyAssignment;

impl Tool for RemoveConfigurationPolicyAssignment {
    const NAME: &'static str = "remove_configuration_policy_assignment";
    const TITLE: &'static str = "Remove configuration policy assignment";
    const DESCRIPTION: &'static str = "Remove a configuration policy assignment; the devices it covered fall back to what the rest of the hierarchy resolves, and their agents are sent it.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::DevicesWrite;
    const EFFECTS: &'static [Effect] = &[Effect::Delete];
    type Actions = NoActions;
    type Input = RemoveInput;
    type Output = AssignmentOutput;
    type Reach = (reach::ConfigPolicies, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let id = uuid_arg(&input.assignment_id, ASSIGNMENT_NOT_FOUND)?;
        let changed = domain(cx).unassign(id).await.map_err(refused)?;
        let (assignment, affected) = (changed.value, changed.devices.len());
        Ok(AssignmentOutput {
            message: "assignment removed".into(),
            assignment: assignment.into(),
            affected_devices: affected,
        })
    }
}
