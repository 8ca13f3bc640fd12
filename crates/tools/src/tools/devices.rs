//! Device inventory: `query_devices`, `get_device_details`, `get_device_software` (the
//! installed packages `get_device_details` only counts, paged).

use breeze_core::{Device, DeviceId, DeviceStatus, OsFamily, Permission, SiteId};
use breeze_store::{
    DeviceFilter, DeviceOverview, OrgAgents, OrgCommands, OrgDevices, OrgTenancy, StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DEVICE_NOT_FOUND, parse_uuid};
use crate::reach::{self, Reach};
use crate::{NoActions, Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetDeviceDetails>();
    r.register::<GetDeviceSoftware>();
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
    /// Set when this device enrolled with the machine id of that existing device (UUID) and
    /// no proof of being it: a possible clone or impostor, kept apart from it. Re-enrolling
    /// the real device takes a re-enroll token an administrator issues for it.
    #[serde(
        serialize_with = "display_opt",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    suspected_clone_of: Option<DeviceId>,
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
            suspected_clone_of: d.suspected_clone_of,
        }
    }
}

fn display_opt<S: serde::Serializer>(
    v: &Option<impl std::fmt::Display>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
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

pub(crate) struct QueryDevices;

impl Tool for QueryDevices {
    const NAME: &'static str = "query_devices";
    const TITLE: &'static str = "Query devices";
    const DESCRIPTION: &'static str = "Search and filter the organization's devices by status, OS, site, group, hostname and tags: the matching devices, the total that match and how many are shown.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = QueryDevicesInput;
    type Output = Rendered<QueryDevicesOutput<'static>>;
    type Reach = reach::Devices;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
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
            .devices()
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

/// `get_device_details` (and the `breeze://devices/{id}` resource): the device row, what its
/// agent last reported (inventory, heartbeat), its newest metrics sample, groups and context.
/// Inventory-backed fields are empty (or null) until the agent has reported; installed
/// packages are counted, never listed.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceDetails<'a> {
    device: DeviceSummary<'a>,
    /// Groups the device belongs to.
    groups: Vec<GroupRef>,
    /// Active context entries (known issues, quirks, follow-ups, preferences).
    active_context: usize,
    /// OS as the agent reported it (kernel and architecture included).
    os: Option<OsDetails>,
    /// CPU and memory, from the agent's inventory.
    hardware: Option<Hardware>,
    /// Mounted filesystems with their size and usage, from the agent's inventory.
    disks: Vec<DiskDetails>,
    network_interfaces: Vec<InterfaceDetails>,
    /// Seconds since boot, from the latest heartbeat.
    uptime_secs: Option<i64>,
    /// RFC 3339, when the agent reports it.
    boot_time: Option<String>,
    pending_reboot: Option<bool>,
    logged_in_users: Vec<LoggedInUser>,
    /// RFC 3339: the latest heartbeat.
    last_heartbeat_at: Option<String>,
    /// RFC 3339: when the agent collected its inventory.
    inventory_collected_at: Option<String>,
    /// The newest metrics sample (analyze_metrics has the series).
    latest_metrics: Option<LatestMetrics>,
    /// How many packages are installed; null where the platform cannot list them. The list
    /// itself, paged and filterable: get_device_software.
    installed_package_count: Option<usize>,
    /// The device's newest commands and script runs (at most 5), newest first.
    recent_commands: Vec<CommandRef>,
}

/// A command sent to the device and how it ended; never its output or arguments (the
/// dashboard and REST API hold those).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct CommandRef {
    id: String,
    /// e.g. shell, list_processes, live_query.
    kind: String,
    /// Its library script, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    script: Option<String>,
    /// pending, sent, running, completed, failed, timed_out or cancelled.
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i64>,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
}

/// How many of a device's commands its details carry.
const RECENT_COMMANDS: u32 = 5;

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct OsDetails {
    family: String,
    name: String,
    version: String,
    kernel: String,
    arch: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Hardware {
    cpu_model: String,
    physical_cores: u32,
    logical_cores: u32,
    memory_total_bytes: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct DiskDetails {
    mount: String,
    filesystem: String,
    total_bytes: u64,
    available_bytes: u64,
    used_bytes: u64,
    /// 0-100, rounded to one decimal.
    used_percent: f64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct InterfaceDetails {
    name: String,
    mac: Option<String>,
    /// With prefix length, e.g. "192.168.1.5/24".
    addresses: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct LoggedInUser {
    username: String,
    terminal: Option<String>,
    host: Option<String>,
    /// RFC 3339.
    login_at: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct LatestMetrics {
    /// RFC 3339.
    at: String,
    cpu_percent: f64,
    ram_percent: f64,
    /// The fullest mount's usage.
    disk_percent: f64,
    net_rx_bytes: i64,
    net_tx_bytes: i64,
    process_count: f64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct GroupRef {
    id: String,
    name: String,
}

fn disk_details(d: &breeze_agent_proto::DiskInfo) -> DiskDetails {
    let used = d.total_bytes.saturating_sub(d.available_bytes);
    #[allow(clippy::cast_precision_loss)] // a percentage
    let used_percent = if d.total_bytes == 0 {
        0.0
    } else {
        (used as f64 * 1000.0 / d.total_bytes as f64).round() / 10.0
    };
    DiskDetails {
        mount: d.mount.clone(),
        filesystem: d.filesystem.clone(),
        total_bytes: d.total_bytes,
        available_bytes: d.available_bytes,
        used_bytes: used,
        used_percent,
    }
}

/// What a device's details document reads: the device at a glance, its groups, its parsed
/// inventory and its newest commands.
#[derive(Clone, Copy)]
pub(crate) struct DeviceReads<'a> {
    devices: OrgDevices<'a>,
    tenancy: OrgTenancy<'a>,
    agents: OrgAgents<'a>,
    commands: OrgCommands<'a>,
}

impl<'a> DeviceReads<'a> {
    pub(crate) fn of(org: breeze_store::OrgStore<'a>) -> Self {
        Self {
            devices: org.devices(),
            tenancy: org.tenancy(),
            agents: org.agents(),
            commands: org.commands(),
        }
    }

    fn from_cx<R: Reach>(cx: &ToolCx<'a, R>) -> Self {
        Self {
            devices: cx.devices(),
            tenancy: cx.tenancy(),
            agents: cx.agents(),
            commands: cx.commands(),
        }
    }
}

/// The details document of `device`, shared by `get_device_details` and the
/// `breeze://devices/{id}` resource so both read the same (camelCase throughout). A device of
/// another organization is not found.
pub(crate) async fn device_details(
    org: DeviceReads<'_>,
    device: DeviceId,
) -> Result<serde_json::Value, StoreError> {
    // Four statements (the overview, the groups, the commands: the device and its rows), plus
    // one when the inventory is not cached.
    let DeviceOverview {
        device,
        site_name,
        state,
        active_context,
        latest_metric: latest,
    } = org.devices.overview(device).await?;
    let groups = org
        .tenancy
        .groups_of_device(device.id)
        .await?
        .into_iter()
        .map(|g| GroupRef {
            id: g.id.to_string(),
            name: g.name,
        })
        .collect();
    // Parsed once per report (a stored inventory that no longer parses reads as none).
    let parsed = org
        .agents
        .inventory_as_of(device.id, state.as_ref().and_then(|s| s.inventory_at))
        .await?;
    let inv = parsed.as_deref().and_then(|p| p.inventory.as_ref());
    let recent_commands = org
        .commands
        .list_commands(device.id, RECENT_COMMANDS)
        .await?
        .into_iter()
        .map(|c| CommandRef {
            id: c.id.to_string(),
            kind: c.kind,
            script: c.script_name,
            status: c.status.to_string(),
            exit_code: c.exit_code,
            created_at: c.created_at.to_rfc3339(),
            completed_at: c.completed_at.map(|t| t.to_rfc3339()),
        })
        .collect();
    let details = DeviceDetails {
        device: DeviceSummary::new(&device, site_name.as_deref()),
        groups,
        active_context: usize::try_from(active_context).unwrap_or(usize::MAX),
        os: inv.map(|i| OsDetails {
            family: i.os.family.clone(),
            name: i.os.name.clone(),
            version: i.os.version.clone(),
            kernel: i.os.kernel.clone(),
            arch: i.os.arch.clone(),
        }),
        hardware: inv.map(|i| Hardware {
            cpu_model: i.cpu.model.clone(),
            physical_cores: i.cpu.physical_cores,
            logical_cores: i.cpu.logical_cores,
            memory_total_bytes: i.memory_total_bytes,
        }),
        disks: inv.map_or_else(Vec::new, |i| i.disks.iter().map(disk_details).collect()),
        network_interfaces: inv.map_or_else(Vec::new, |i| {
            i.interfaces
                .iter()
                .map(|n| InterfaceDetails {
                    name: n.name.clone(),
                    mac: n.mac.clone(),
                    addresses: n.addresses.clone(),
                })
                .collect()
        }),
        uptime_secs: state.as_ref().and_then(|s| s.uptime_secs),
        boot_time: inv.and_then(|i| i.boot_time).map(|t| t.to_rfc3339()),
        pending_reboot: state.as_ref().map(|s| s.pending_reboot),
        logged_in_users: state.as_ref().map_or_else(Vec::new, |s| {
            s.logged_in_users
                .iter()
                .map(|u| LoggedInUser {
                    username: u.username.clone(),
                    terminal: u.terminal.clone(),
                    host: u.host.clone(),
                    login_at: u.login_at.map(|t| t.to_rfc3339()),
                })
                .collect()
        }),
        last_heartbeat_at: state
            .as_ref()
            .and_then(|s| s.heartbeat_at)
            .map(|t| t.to_rfc3339()),
        inventory_collected_at: inv.map(|i| i.collected_at.to_rfc3339()),
        latest_metrics: latest.map(|m| LatestMetrics {
            at: m.at.to_rfc3339(),
            cpu_percent: m.cpu_avg,
            ram_percent: m.ram_avg,
            disk_percent: m.disk_avg,
            net_rx_bytes: m.net_rx_bytes,
            net_tx_bytes: m.net_tx_bytes,
            process_count: m.process_avg,
        }),
        installed_package_count: parsed.as_deref().and_then(|p| p.package_count()),
        recent_commands,
    };
    serde_json::to_value(&details).map_err(|e| StoreError::Invalid(e.to_string()))
}

/// Looks a device up, answering "not found or access denied" for a foreign or missing one.
pub(crate) async fn find_device<R: Reach>(
    cx: &ToolCx<'_, R>,
    device_id: &str,
) -> Result<Device, ToolError> {
    let id = uuid::Uuid::parse_str(device_id)
        .map(DeviceId)
        .map_err(|_| ToolError::not_found(DEVICE_NOT_FOUND))?;
    match cx.devices().get_device(id).await {
        Ok(d) => Ok(d),
        Err(StoreError::NotFound(_)) => Err(ToolError::not_found(DEVICE_NOT_FOUND)),
        Err(e) => Err(e.into()),
    }
}

pub(crate) struct GetDeviceDetails;

impl Tool for GetDeviceDetails {
    const NAME: &'static str = "get_device_details";
    const TITLE: &'static str = "Get device details";
    const DESCRIPTION: &'static str = "All Breeze knows about one device: identity, status, agent, site, tags, groups, hardware, OS, network interfaces, disks, uptime, pending reboot, logged-in users, last 5 commands, latest metrics and the count of active context entries. Installed packages are counted, not listed: get_device_software pages through them.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = DeviceIdInput;
    type Output = Rendered<DeviceDetails<'static>>;
    type Reach = (
        reach::Agents,
        reach::Commands,
        reach::Devices,
        reach::Tenancy,
    );

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let id = uuid::Uuid::parse_str(&input.device_id)
            .map(DeviceId)
            .map_err(|_| ToolError::not_found(DEVICE_NOT_FOUND))?;
        match device_details(DeviceReads::from_cx(cx), id).await {
            Ok(doc) => Rendered::of(&doc),
            Err(StoreError::NotFound(_)) => Err(ToolError::not_found(DEVICE_NOT_FOUND)),
            Err(e) => Err(e.into()),
        }
    }
}

// --- get_device_software ---------------------------------------------------------------------

/// Arguments of `get_device_software`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SoftwareInput {
    /// The device's id (UUID).
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    /// Only packages whose name contains this text (case-insensitive).
    #[schemars(length(min = 1, max = 200))]
    name: Option<String>,
    /// How many packages per page (1-200, default 50).
    #[schemars(range(min = 1, max = 200))]
    limit: Option<u32>,
    /// The nextCursor of the previous page, unchanged.
    #[schemars(length(min = 1, max = 2000))]
    cursor: Option<String>,
}

/// One installed package.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct PackageView {
    name: String,
    version: String,
}

/// A page of a device's installed packages.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SoftwareOutput {
    device_id: String,
    /// Ordered by name (case-insensitive), then version.
    packages: Vec<PackageView>,
    /// How many packages match, over every page.
    total: usize,
    /// Pass as cursor for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    /// False when the agent has not reported an inventory yet or its platform cannot list
    /// packages.
    listed: bool,
}

pub(crate) struct GetDeviceSoftware;

impl Tool for GetDeviceSoftware {
    const NAME: &'static str = "get_device_software";
    const TITLE: &'static str = "List installed software";
    const DESCRIPTION: &'static str = "The packages installed on one device (name and version, from the agent's latest inventory), ordered by name. Page with the previous page's nextCursor; total counts every match.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = SoftwareInput;
    type Output = SoftwareOutput;
    type Reach = reach::Devices;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        let page = cx
            .devices()
            .device_packages(
                device.id,
                input.name.as_deref(),
                input.cursor.as_deref(),
                input.limit.unwrap_or(50),
            )
            .await
            .map_err(|e| match e {
                // Only the cursor can be invalid here: name it as the field.
                StoreError::Invalid(m) => ToolError::invalid(format!("cursor: {m}")),
                other => other.into(),
            })?;
        Ok(SoftwareOutput {
            device_id: device.id.to_string(),
            packages: page
                .packages
                .into_iter()
                .map(|p| PackageView {
                    name: p.name,
                    version: p.version,
                })
                .collect(),
            total: page.total,
            next_cursor: page.next_cursor,
            listed: page.listed,
        })
    }
}
