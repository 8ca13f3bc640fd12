//! `manage_groups`: device groups (static membership) — list, get, create, update, delete,
//! add and remove devices. Reads are Tier 1, membership changes Tier 2, structure changes Tier 3.

use breeze_core::{AuditEvent, DeviceGroup, DeviceGroupId, DeviceId, Permission, SiteId};
use breeze_store::StoreError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{devices::DeviceSummary, parse_uuid};
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
        Create = "create" => (T3, Create, DevicesWrite),
        Update = "update" => (T3, Update, DevicesWrite),
        Delete = "delete" => (T3, Delete, DevicesWrite),
        AddDevices = "add_devices" => (T2, Update, DevicesWrite),
        RemoveDevices = "remove_devices" => (T2, Update, DevicesWrite),
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
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct GroupView {
    id: String,
    name: String,
    description: Option<String>,
    site_id: Option<String>,
    created_at: String,
}

impl From<DeviceGroup> for GroupView {
    fn from(g: DeviceGroup) -> Self {
        Self {
            id: g.id.to_string(),
            name: g.name,
            description: g.description,
            site_id: g.site_id.map(|s| s.to_string()),
            created_at: g.created_at.to_rfc3339(),
        }
    }
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

pub(crate) struct ManageGroups;

impl Tool for ManageGroups {
    const NAME: &'static str = "manage_groups";
    const TITLE: &'static str = "Manage device groups";
    const DESCRIPTION: &'static str = "Device groups of the organization. action=list|get read; add_devices|remove_devices change membership (Tier 2); create|update|delete change groups themselves (Tier 3, need human approval).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(20, 300);
    type Actions = GroupAction;
    type Input = GroupsInput;
    type Output = Rendered<GroupsOutput<'static>>;

    /// The group an update or delete names exists in the organization.
    async fn precheck(cx: &ToolCx<'_>, input: &Self::Input) -> Result<Option<Pin>, ToolError> {
        if matches!(input.action, GroupAction::Update | GroupAction::Delete) {
            cx.org
                .get_group(group_id(input)?)
                .await
                .map_err(group_missing)?;
        }
        Ok(None)
    }

    async fn call(cx: &ToolCx<'_>, input: Self::Input) -> Result<Self::Output, ToolError> {
        match input.action {
            GroupAction::List => {
                let site = input
                    .site_id
                    .as_deref()
                    .map(|s| parse_uuid("siteId", s).map(SiteId))
                    .transpose()?;
                let groups: Vec<GroupView> = cx
                    .org
                    .list_groups()
                    .await?
                    .into_iter()
                    .filter(|g| site.is_none() || g.site_id == site)
                    .map(GroupView::from)
                    .collect();
                Rendered::of(&GroupsOutput {
                    showing: Some(groups.len()),
                    groups: Some(groups),
                    ..Default::default()
                })
            }
            GroupAction::Get => {
                let id = group_id(&input)?;
                let group = cx.org.get_group(id).await.map_err(group_missing)?;
                let devices = cx.org.group_members(id).await?;
                let members: Vec<DeviceSummary<'_>> = devices
                    .iter()
                    .map(|d| DeviceSummary::new(d, None))
                    .collect();
                Rendered::of(&GroupsOutput {
                    group: Some(group.into()),
                    showing: Some(members.len()),
                    members: Some(members),
                    ..Default::default()
                })
            }
            GroupAction::AddDevices | GroupAction::RemoveDevices => {
                let id = group_id(&input)?;
                cx.org.get_group(id).await.map_err(group_missing)?;
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
                        match cx.org.add_to_group(id, device).await {
                            Ok(()) => true,
                            Err(StoreError::NotFound(_)) => false,
                            Err(e) => return Err(e.into()),
                        }
                    } else {
                        cx.org.remove_from_group(id, device).await?
                    };
                    if done {
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
                cx.org.append_audit(audit).await?;
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
                let group = cx
                    .org
                    .create_group(name, site, input.description.as_deref(), audit)
                    .await?;
                Rendered::of(&GroupsOutput {
                    message: Some(format!("created group {}", group.name)),
                    group: Some(group.into()),
                    ..Default::default()
                })
            }
            GroupAction::Update => {
                let id = group_id(&input)?;
                let audit =
                    AuditEvent::new(cx.actor.clone(), "device_group.update", "device_group")
                        .request(cx.request_id.clone());
                let group = cx
                    .org
                    .update_group(
                        id,
                        input.name.as_deref(),
                        input.description.as_deref(),
                        audit,
                    )
                    .await
                    .map_err(group_missing)?;
                Rendered::of(&GroupsOutput {
                    message: Some("group updated".into()),
                    group: Some(group.into()),
                    ..Default::default()
                })
            }
            GroupAction::Delete => {
                let id = group_id(&input)?;
                let audit =
                    AuditEvent::new(cx.actor.clone(), "device_group.delete", "device_group")
                        .request(cx.request_id.clone());
                cx.org
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
