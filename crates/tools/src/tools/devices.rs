//! Device inventory: `query_devices`, `get_device_details`.

use breeze_core::{Device, DeviceId, DeviceStatus, OsFamily, Permission, SiteId};
use breeze_store::{DeviceFilter, StoreError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DEVICE_NOT_FOUND, parse_uuid};
use crate::{Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetDeviceDetails>();
    r.register::<QueryDevices>();
}

/// A device as tools show it, borrowed from the device it describes (a listing serializes
/// straight from the directory's snapshot, copying nothing first).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceSummary<'a> {
    #[serde(serialize_with = "display")]
    #[schemars(with = "String")]
    id: DeviceId,
    hostname: &'a str,
    os_type: &'static str,
    os_name: &'a str,
    os_version: &'a str,
    status: &'static str,
    agent_version: Option<&'a str>,
    /// RFC 3339.
    #[serde(serialize_with = "rfc3339")]
    #[schemars(with = "Option<String>")]
    last_seen_at: Option<breeze_core::Timestamp>,
    tags: &'a [String],
    #[serde(serialize_with = "display")]
    #[schemars(with = "String")]
    site_id: SiteId,
    site_name: Option<&'a str>,
}

impl<'a> DeviceSummary<'a> {
    pub(crate) fn new(d: &'a Device, site_name: Option<&'a str>) -> Self {
        Self {
            id: d.id,
            hostname: &d.hostname,
            os_type: d.os_family.as_str(),
            os_name: &d.os_name,
            os_version: &d.os_version,
            status: d.status.as_str(),
            agent_version: d.agent_version.as_deref(),
            last_seen_at: d.last_seen_at,
            tags: &d.tags,
            site_id: d.site_id,
            site_name,
        }
    }
}

fn display<S: serde::Serializer>(v: &impl std::fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn rfc3339<S: serde::Serializer>(
    t: &Option<breeze_core::Timestamp>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.to_rfc3339()),
        None => s.serialize_none(),
    }
}

/// Filters for `query_devices`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct QueryDevicesInput {
    /// Only devices in this state.
    status: Option<StatusArg>,
    /// Only devices running this OS family.
    os_type: Option<OsArg>,
    /// Only devices in this site (UUID).
    #[schemars(length(min = 36, max = 36))]
    site_id: Option<String>,
    /// Only members of this device group (UUID).
    #[schemars(length(min = 36, max = 36))]
    group_id: Option<String>,
    /// Case-insensitive substring of the hostname.
    #[schemars(length(max = 200))]
    search: Option<String>,
    /// Devices must carry every one of these tags.
    #[schemars(length(max = 20))]
    tags: Option<Vec<String>>,
    /// How many devices to return (1-100, default 25).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum StatusArg {
    Online,
    Offline,
    Maintenance,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum OsArg {
    Windows,
    Macos,
    Linux,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct QueryDevicesOutput<'a> {
    devices: Vec<DeviceSummary<'a>>,
    /// How many devices match in all.
    total: u64,
    /// How many are in `devices`.
    showing: usize,
}

/// Site names of the organization, for labelling devices.
pub(crate) async fn site_names(
    cx: &ToolCx<'_>,
) -> Result<std::collections::HashMap<SiteId, String>, ToolError> {
    Ok(cx
        .org
        .list_sites()
        .await?
        .into_iter()
        .map(|s| (s.id, s.name))
        .collect())
}

pub(crate) struct QueryDevices;

impl Tool for QueryDevices {
    const NAME: &'static str = "query_devices";
    const TITLE: &'static str = "Query devices";
    const DESCRIPTION: &'static str = "Search and filter the organization's devices by status, OS, site, group, hostname and tags. Returns the matching devices (most useful fields), the total that match, and how many are shown.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Input = QueryDevicesInput;
    type Output = Rendered<QueryDevicesOutput<'static>>;

    async fn call(cx: &ToolCx<'_>, input: Self::Input) -> Result<Self::Output, ToolError> {
        let filter = DeviceFilter {
            status: input.status.map(|s| match s {
                StatusArg::Online => DeviceStatus::Online,
                StatusArg::Offline => DeviceStatus::Offline,
                StatusArg::Maintenance => DeviceStatus::Maintenance,
            }),
            os_family: input.os_type.map(|o| match o {
                OsArg::Windows => OsFamily::Windows,
                OsArg::Macos => OsFamily::Macos,
                OsArg::Linux => OsFamily::Linux,
            }),
            site_id: input
                .site_id
                .as_deref()
                .map(|s| parse_uuid("siteId", s).map(SiteId))
                .transpose()?,
            group_id: input
                .group_id
                .as_deref()
                .map(|s| parse_uuid("groupId", s).map(breeze_core::DeviceGroupId))
                .transpose()?,
            search: input.search,
            tags: input.tags.unwrap_or_default(),
        };
        // Serialized straight from the device directory's snapshot.
        let page = cx
            .org
            .device_page(&filter, input.limit.unwrap_or(25).clamp(1, 100), 0)
            .await?;
        let devices: Vec<DeviceSummary<'_>> = page
            .iter()
            .map(|(d, site)| DeviceSummary::new(d, Some(site)))
            .collect();
        Rendered::of(&QueryDevicesOutput {
            showing: devices.len(),
            devices,
            total: page.total(),
        })
    }
}

/// Arguments of `get_device_details`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DeviceIdInput {
    /// The device's id (UUID).
    #[schemars(length(min = 36, max = 36))]
    pub(crate) device_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceDetails<'a> {
    device: DeviceSummary<'a>,
    /// Groups the device belongs to.
    groups: Vec<GroupRef>,
    /// Active context entries (known issues, quirks, follow-ups, preferences).
    active_context: usize,
}

#[derive(Debug, Serialize, JsonSchema)]
struct GroupRef {
    id: String,
    name: String,
}

/// Looks a device up, answering "not found or access denied" for a foreign or missing one.
pub(crate) async fn find_device(cx: &ToolCx<'_>, device_id: &str) -> Result<Device, ToolError> {
    let id = uuid::Uuid::parse_str(device_id)
        .map(DeviceId)
        .map_err(|_| ToolError::not_found(DEVICE_NOT_FOUND))?;
    match cx.org.get_device(id).await {
        Ok(d) => Ok(d),
        Err(StoreError::NotFound(_)) => Err(ToolError::not_found(DEVICE_NOT_FOUND)),
        Err(e) => Err(e.into()),
    }
}

pub(crate) struct GetDeviceDetails;

impl Tool for GetDeviceDetails {
    const NAME: &'static str = "get_device_details";
    const TITLE: &'static str = "Get device details";
    const DESCRIPTION: &'static str = "Everything Breeze knows about one device: identity, OS, status, agent, site, tags, group memberships and how many active context entries it has.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Input = DeviceIdInput;
    type Output = Rendered<DeviceDetails<'static>>;

    async fn call(cx: &ToolCx<'_>, input: Self::Input) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        let sites = site_names(cx).await?;
        let groups = cx
            .org
            .groups_of_device(device.id)
            .await?
            .into_iter()
            .map(|g| GroupRef {
                id: g.id.to_string(),
                name: g.name,
            })
            .collect();
        let active_context = cx.org.device_context(device.id, false).await?.len();
        Rendered::of(&DeviceDetails {
            device: DeviceSummary::new(&device, sites.get(&device.site_id).map(String::as_str)),
            groups,
            active_context,
        })
    }
}
