//! `manage_groups`: device groups — list, get, create, update, delete, add and remove devices,
//! preview a dynamic filter, membership log. Reads are Tier 1, membership changes Tier 2,
//! structure changes Tier 3.
//!
//! A group created or updated with a `filter` is dynamic: its members are the devices the
//! filter matches (over OS, site, hostname, status, agent version, tags, installed packages,
//! last seen, disk free), recomputed by the store when the filter changes and when a device's
//! inventory or status changes; devices are not added or removed by hand. Every membership
//! change is in the group's log (who or what, why, when).

use breeze_core::{
    AuditEvent, DeviceGroup, DeviceGroupId, DeviceId, GroupFilter, Permission, SiteId,
};
use breeze_store::StoreError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{devices::DeviceSummary, parse_uuid};
use crate::reach::{self, Reach};
use crate::{Pin, RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManageGroups>();
}

crate::actions! {
    // What `manage_groups` does: reads are Tier 1, membership changes Tier 2, changes to the
    // groups themselves Tier 3.
    pub(crate) enum GroupAction {
        List = "list" => (T1, Read, DevicesRead),
        Get = "get" => (T1, Read, DevicesRead),
        Preview = "preview" => (T1, Read, DevicesRead),
        MembershipLog = "membership_log" => (T1, Read, DevicesRead),
        AddDevices = "add_devices" => (T2, Update, DevicesWrite),
        RemoveDevices = "remove_devices" => (T2, Update, DevicesWrite),
        Create = "create" => (T3, Create, DevicesWrite),
        Update = "update" => (T3, Update, DevicesWrite),
        Delete = "delete" => (T3, Delete, DevicesWrite),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GroupsInput {
    action: GroupAction,
    /// The group (UUID); required for get, update, delete, add_devices, remove_devices.
    #[schemars(length(min = 36, max = 36))]
    group_id: Option<String>,
    /// Group name; required for create.
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(max = 1000))]
    description: Option<String>,
    /// Tie the group to a site (create), or filter by site (list).
    #[schemars(length(min = 36, max = 36))]
    site_id: Option<String>,
    /// Devices to add or remove (1-100).
    #[schemars(length(min = 1, max = 100))]
    device_ids: Option<Vec<String>>,
    /// Makes the group dynamic (field op value; gt/lt for numbers).
    filter: Option<FilterArg>,
    #[schemars(range(min = 1, max = 200))]
    limit: Option<u32>,
}

// A dynamic group's filter: all (default) or any of the conditions.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilterArg {
    #[serde(rename = "match")]
    mode: Option<MatchArg>,
    #[schemars(length(min = 1, max = 20))]
    conditions: Vec<ConditionArg>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MatchArg {
    All,
    Any,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum FieldArg {
    Os,
    OsName,
    OsVersion,
    Hostname,
    Site,
    Status,
    AgentVersion,
    Tag,
    Package,
    LastSeenMinutes,
    DiskFreePercent,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum OpArg {
    Eq,
    Ne,
    Contains,
    StartsWith,
    Matches,
    In,
    Gt,
    Lt,
}

// `field op value`: text ops on text fields (matches is a * ? glob, in takes a list), gt/lt
// on lastSeenMinutes and diskFreePercent.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConditionArg {
    field: FieldArg,
    op: OpArg,
    value: ValueArg,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum ValueArg {
    Text(#[schemars(length(max = 255))] String),
    Number(f64),
    List(#[schemars(length(max = 100))] Vec<String>),
}

impl FilterArg {
    fn resolve(&self) -> Result<GroupFilter, ToolError> {
        // The core types carry the meaning; these mirror them for the schema.
        let json = serde_json::json!({
            "match": match self.mode { Some(MatchArg::Any) => "any", _ => "all" },
            "conditions": self.conditions.iter().map(|c| serde_json::json!({
                "field": serde_json::to_value(c.field_name()).unwrap_or_default(),
                "op": c.op_name(),
                "value": match &c.value {
                    ValueArg::Text(t) => serde_json::json!(t),
                    ValueArg::Number(n) => serde_json::json!(n),
                    ValueArg::List(l) => serde_json::json!(l),
                },
            })).collect::<Vec<_>>(),
        });
        let filter: GroupFilter =
            serde_json::from_value(json).map_err(|e| ToolError::invalid(format!("filter: {e}")))?;
        filter
            .validate()
            .map_err(|e| ToolError::invalid(format!("filter: {e}")))?;
        Ok(filter)
    }
}

impl ConditionArg {
    fn field_name(&self) -> &'static str {
        match self.field {
            FieldArg::Os => "os",
            FieldArg::OsName => "osName",
            FieldArg::OsVersion => "osVersion",
            FieldArg::Hostname => "hostname",
            FieldArg::Site => "site",
            FieldArg::Status => "status",
            FieldArg::AgentVersion => "agentVersion",
            FieldArg::Tag => "tag",
            FieldArg::Package => "package",
            FieldArg::LastSeenMinutes => "lastSeenMinutes",
            FieldArg::DiskFreePercent => "diskFreePercent",
        }
    }

    fn op_name(&self) -> &'static str {
        match self.op {
            OpArg::Eq => "eq",
            OpArg::Ne => "ne",
            OpArg::Contains => "contains",
            OpArg::StartsWith => "startsWith",
            OpArg::Matches => "matches",
            OpArg::In => "in",
            OpArg::Gt => "gt",
            OpArg::Lt => "lt",
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct GroupView {
    id: String,
    name: String,
    description: Option<String>,
    site_id: Option<String>,
    created_at: String,
    dynamic: bool,
    /// A dynamic group's filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    filter: Option<serde_json::Value>,
}

impl GroupView {
    fn new(g: DeviceGroup, filter: Option<&GroupFilter>) -> Self {
        Self {
            id: g.id.to_string(),
            name: g.name,
            description: g.description,
            site_id: g.site_id.map(|s| s.to_string()),
            created_at: g.created_at.to_rfc3339(),
            dynamic: filter.is_some(),
            filter: filter.and_then(|f| serde_json::to_value(f).ok()),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct LogView {
    device_id: String,
    /// added or removed.
    change: String,
    actor: String,
    reason: String,
    at: String,
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupsOutput<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<Vec<GroupView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<GroupView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    members: Option<Vec<DeviceSummary<'a>>>,
    /// preview: how many devices the filter matches (members lists up to limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    matched: Option<usize>,
    /// membership_log: newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    log: Option<Vec<LogView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    /// Devices added or removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<usize>,
    /// Device ids skipped (not found, or already in the requested state).
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

const GROUP_NOT_FOUND: &str = "Group not found or access denied";

fn group_id(input: &GroupsInput) -> Result<DeviceGroupId, ToolError> {
    let raw = input
        .group_id
        .as_deref()
        .ok_or_else(|| ToolError::invalid("groupId is required for this action"))?;
    uuid::Uuid::parse_str(raw)
        .map(DeviceGroupId)
        .map_err(|_| ToolError::not_found(GROUP_NOT_FOUND))
}

fn group_missing(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("device group") => ToolError::not_found(GROUP_NOT_FOUND),
        other => other.into(),
    }
}

/// Sets a group's filter (audited) and recomputes its members as the caller.
async fn set_filter<R: Reach>(
    cx: &ToolCx<'_, R>,
    group: DeviceGroupId,
    filter: &GroupFilter,
) -> Result<breeze_store::Recomputed, ToolError> {
    let audit = AuditEvent::new(cx.actor.clone(), "device_group.set_filter", "device_group")
        .request(cx.request_id.clone());
    Ok(cx
        .dynamic_groups()
        .set_group_filter(group, filter, &cx.actor, audit)
        .await?)
}

pub(crate) struct ManageGroups;

impl Tool for ManageGroups {
    const NAME: &'static str = "manage_groups";
    const TITLE: &'static str = "Manage device groups";
    const DESCRIPTION: &'static str = "Device groups, static or dynamic (filter). action=list|get|preview|membership_log read; add_devices|remove_devices (Tier 2); create|update|delete (Tier 3).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(20, 300);
    type Actions = GroupAction;
    type Input = GroupsInput;
    type Output = Rendered<GroupsOutput<'static>>;
    type Reach = (
        reach::Audit,
        reach::Devices,
        reach::DynamicGroups,
        reach::Tenancy,
    );

    /// The group an update or delete names exists in the organization.
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        if matches!(input.action, GroupAction::Update | GroupAction::Delete) {
            cx.tenancy()
                .get_group(group_id(input)?)
                .await
                .map_err(group_missing)?;
        }
        Ok(None)
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            GroupAction::List => {
                let site = input
                    .site_id
                    .as_deref()
                    .map(|s| parse_uuid("siteId", s).map(SiteId))
                    .transpose()?;
                let filters = cx.dynamic_groups().group_filters().await?;
                let groups: Vec<GroupView> = cx
                    .tenancy()
                    .list_groups()
                    .await?
                    .into_iter()
                    .filter(|g| site.is_none() || g.site_id == site)
                    .map(|g| {
                        let dynamic = filters.contains_key(&g.id);
                        let mut view = GroupView::new(g, None);
                        view.dynamic = dynamic;
                        view
                    })
                    .collect();
                Rendered::of(&GroupsOutput {
                    showing: Some(groups.len()),
                    groups: Some(groups),
                    ..Default::default()
                })
            }
            GroupAction::Get => {
                let id = group_id(&input)?;
                let group = cx.tenancy().get_group(id).await.map_err(group_missing)?;
                let filter = cx.dynamic_groups().group_filter(id).await?;
                let devices = cx.devices().group_members(id).await?;
                let members: Vec<DeviceSummary<'_>> = devices
                    .iter()
                    .map(|d| DeviceSummary::new(d, None))
                    .collect();
                Rendered::of(&GroupsOutput {
                    group: Some(GroupView::new(group, filter.as_ref())),
                    showing: Some(members.len()),
                    members: Some(members),
                    ..Default::default()
                })
            }
            GroupAction::Preview => {
                let filter = input
                    .filter
                    .as_ref()
                    .ok_or_else(|| ToolError::invalid("filter is required for preview"))?
                    .resolve()?;
                let devices = cx.dynamic_groups().preview_filter(&filter).await?;
                let limit = input.limit.unwrap_or(50) as usize;
                let members: Vec<DeviceSummary<'_>> = devices
                    .iter()
                    .take(limit)
                    .map(|d| DeviceSummary::new(d, None))
                    .collect();
                Rendered::of(&GroupsOutput {
                    matched: Some(devices.len()),
                    showing: Some(members.len()),
                    members: Some(members),
                    ..Default::default()
                })
            }
            GroupAction::MembershipLog => {
                let id = group_id(&input)?;
                let log: Vec<LogView> = cx
                    .dynamic_groups()
                    .membership_log(id, input.limit.unwrap_or(50))
                    .await
                    .map_err(group_missing)?
                    .into_iter()
                    .map(|c| LogView {
                        device_id: c.device_id.to_string(),
                        change: c.change,
                        actor: c.actor,
                        reason: c.reason,
                        at: c.at.to_rfc3339(),
                    })
                    .collect();
                Rendered::of(&GroupsOutput {
                    showing: Some(log.len()),
                    log: Some(log),
                    ..Default::default()
                })
            }
            GroupAction::AddDevices | GroupAction::RemoveDevices => {
                let id = group_id(&input)?;
                cx.tenancy().get_group(id).await.map_err(group_missing)?;
                if cx.dynamic_groups().group_filter(id).await?.is_some() {
                    return Err(ToolError::new(
                        crate::ErrorCode::Conflict,
                        "the group is dynamic: its filter decides its members (update the filter)",
                    ));
                }
                let ids = input.device_ids.filter(|v| !v.is_empty()).ok_or_else(|| {
                    ToolError::invalid("deviceIds is required for add_devices/remove_devices")
                })?;
                let (mut changed, mut skipped) = (0, Vec::new());
                for raw in ids {
                    let Ok(device) = uuid::Uuid::parse_str(&raw).map(DeviceId) else {
                        skipped.push(raw);
                        continue;
                    };
                    let done = if input.action == GroupAction::AddDevices {
                        match cx.tenancy().add_to_group(id, device).await {
                            Ok(()) => true,
                            Err(StoreError::NotFound(_)) => false,
                            Err(e) => return Err(e.into()),
                        }
                    } else {
                        cx.tenancy().remove_from_group(id, device).await?
                    };
                    if done {
                        let added = input.action == GroupAction::AddDevices;
                        cx.dynamic_groups()
                            .log_membership(id, device, added, &cx.actor, "by hand")
                            .await?;
                        changed += 1;
                    } else {
                        skipped.push(raw);
                    }
                }
                let verb = if input.action == GroupAction::AddDevices {
                    "added to"
                } else {
                    "removed from"
                };
                let audit = AuditEvent::new(
                    cx.actor.clone(),
                    "device_group.membership",
                    "device_group",
                )
                .org(cx.org_id())
                .resource(id)
                .details(
                    serde_json::json!({ "action": verb, "changed": changed, "skipped": skipped }),
                )
                .request(cx.request_id.clone());
                cx.audit().append_audit(audit).await?;
                Rendered::of(&GroupsOutput {
                    message: Some(format!("{changed} device(s) {verb} the group")),
                    changed: Some(changed),
                    skipped: (!skipped.is_empty()).then_some(skipped),
                    ..Default::default()
                })
            }
            GroupAction::Create => {
                let name = input
                    .name
                    .as_deref()
                    .ok_or_else(|| ToolError::invalid("name is required for create"))?;
                let site = input
                    .site_id
                    .as_deref()
                    .map(|s| parse_uuid("siteId", s).map(SiteId))
                    .transpose()?;
                let audit =
                    AuditEvent::new(cx.actor.clone(), "device_group.create", "device_group")
                        .request(cx.request_id.clone());
                let filter = input.filter.as_ref().map(FilterArg::resolve).transpose()?;
                let group = cx
                    .tenancy()
                    .create_group(name, site, input.description.as_deref(), audit)
                    .await?;
                let changes = match &filter {
                    Some(f) => Some(set_filter(cx, group.id, f).await?),
                    None => None,
                };
                Rendered::of(&GroupsOutput {
                    message: Some(format!("created group {}", group.name)),
                    changed: changes.map(|c| c.added.len() + c.removed.len()),
                    group: Some(GroupView::new(group, filter.as_ref())),
                    ..Default::default()
                })
            }
            GroupAction::Update => {
                let id = group_id(&input)?;
                let filter = input.filter.as_ref().map(FilterArg::resolve).transpose()?;
                let audit =
                    AuditEvent::new(cx.actor.clone(), "device_group.update", "device_group")
                        .request(cx.request_id.clone());
                let group = cx
                    .tenancy()
                    .update_group(
                        id,
                        input.name.as_deref(),
                        input.description.as_deref(),
                        audit,
                    )
                    .await
                    .map_err(group_missing)?;
                let changes = match &filter {
                    Some(f) => Some(set_filter(cx, id, f).await?),
                    None => None,
                };
                let filter = cx.dynamic_groups().group_filter(id).await?;
                Rendered::of(&GroupsOutput {
                    message: Some("group updated".into()),
                    changed: changes.map(|c| c.added.len() + c.removed.len()),
                    group: Some(GroupView::new(group, filter.as_ref())),
                    ..Default::default()
                })
            }
            GroupAction::Delete => {
                let id = group_id(&input)?;
                let audit =
                    AuditEvent::new(cx.actor.clone(), "device_group.delete", "device_group")
                        .request(cx.request_id.clone());
                cx.tenancy()
                    .delete_group(id, audit)
                    .await
                    .map_err(group_missing)?;
                Rendered::of(&GroupsOutput {
                    message: Some("group deleted".into()),
                    ..Default::default()
                })
            }
        }
    }
}
