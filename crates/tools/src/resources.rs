//! MCP resources: read-only, organization-scoped JSON views.
//!
//! `breeze://devices` (at most 500), `breeze://scripts` (the script library, at most 200),
//! `breeze://alerts` (unresolved alerts, newest first, at most 200), `breeze://automations`
//! (automations by name, at most 200: trigger, task, enabled, next run), the template
//! `breeze://devices/{id}` (the `get_device_details` document: the device with what its agent
//! reported, camelCase like every tool output, its latest security posture, its standing
//! against each compliance policy, and its pending patches from its last scan), and
//! `breeze://server` (identity, transport, protocol versions).
//!
//! Reading a resource is authorized like calling a tool: the key's user must hold a role in
//! the key's organization, and that role the resource's [`permission_for`] (the server applies
//! it with `rbac::check` before [`read`]).

use breeze_core::{DeviceId, Permission};
use breeze_store::{DeviceFilter, OrgStore, StoreError};
use serde_json::{Value, json};

/// A listed resource.
#[derive(Debug, Clone, Copy)]
pub struct ResourceSpec {
    pub uri: &'static str,
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
}

/// All listed resources, in a fixed order.
pub const RESOURCES: &[ResourceSpec] = &[
    ResourceSpec {
        uri: "breeze://devices",
        name: "devices",
        title: "Device inventory",
        description: "The organization's devices (up to 500): id, hostname, status, OS, agent version, last seen.",
    },
    ResourceSpec {
        uri: "breeze://alerts",
        name: "alerts",
        title: "Active alerts",
        description: "Active (open or acknowledged) alerts, newest first (up to 200): id, title, severity, status, device, rule, triggered at.",
    },
    ResourceSpec {
        uri: "breeze://scripts",
        name: "scripts",
        title: "Script library",
        description: "Scripts available to run (up to 200).",
    },
    ResourceSpec {
        uri: "breeze://automations",
        name: "automations",
        title: "Automations",
        description: "Automations (up to 200): name, description, enabled, trigger, task, next run.",
    },
    ResourceSpec {
        uri: "breeze://server",
        name: "server",
        title: "Server identity",
        description: "This Breeze server: name, version, revision, transport and protocol versions.",
    },
];

/// The device template.
pub const DEVICE_TEMPLATE: ResourceSpec = ResourceSpec {
    uri: "breeze://devices/{id}",
    name: "device",
    title: "One device",
    description: "One device of the organization, by id.",
};

/// The permission reading `uri` needs in the key's organization, besides a role there;
/// `None` for `breeze://server` (no organization data) and for URIs that name no resource.
pub fn permission_for(uri: &str) -> Option<Permission> {
    match uri {
        "breeze://devices" => Some(Permission::DevicesRead),
        _ if uri.starts_with("breeze://devices/") => Some(Permission::DevicesRead),
        "breeze://scripts" | "breeze://automations" => Some(Permission::ScriptsRead),
        "breeze://alerts" => Some(Permission::AlertsRead),
        _ => None,
    }
}

/// Row caps per resource.
pub const DEVICES_LIMIT: u32 = 500;
pub const LIST_LIMIT: u32 = 200;
/// Pending patches a device document lists by name (the counts cover them all).
pub const PATCHES_SHOWN: u32 = 50;

/// Adds to a device document its standing against each compliance policy
/// (`compliance`: policy, status, failing rules, when evaluated) and its pending patches
/// (`pendingPatches`: the last scan's available updates — counts, reboot flag and the first
/// [`PATCHES_SHOWN`] by name — or null before any scan).
async fn add_compliance_and_patches(
    org: &OrgStore<'_>,
    device: DeviceId,
    doc: &mut Value,
) -> Result<(), StoreError> {
    let names: std::collections::HashMap<uuid::Uuid, String> = org
        .compliance()
        .list_compliance_policies()
        .await?
        .into_iter()
        .map(|p| (p.id, p.name))
        .collect();
    let compliance: Vec<Value> = org
        .compliance()
        .compliance_statuses(None, Some(device), None, LIST_LIMIT)
        .await?
        .iter()
        .map(|s| {
            json!({
                "policyId": s.policy_id, "policyName": names.get(&s.policy_id),
                "status": s.status,
                "failingRules": s.results.iter().filter(|r| r.passed == Some(false)).count(),
                "evaluatedAt": s.evaluated_at.to_rfc3339(),
            })
        })
        .collect();
    let scan = org
        .patches()
        .patch_scans()
        .await?
        .into_iter()
        .find(|s| s.device_id == device && s.scanned_at.is_some());
    let pending = match scan {
        None => Value::Null,
        Some(scan) => {
            let filter = breeze_store::PatchFilter {
                device: Some(device),
                limit: PATCHES_SHOWN,
                ..Default::default()
            };
            let packages: Vec<Value> = org
                .patches()
                .list_device_patches(&filter)
                .await?
                .iter()
                .map(|p| {
                    json!({
                        "name": p.name, "installedVersion": p.installed_version,
                        "availableVersion": p.available_version, "security": p.security,
                        "severity": p.severity,
                    })
                })
                .collect();
            json!({
                "count": scan.patch_count, "securityCount": scan.security_count,
                "rebootRequired": scan.reboot_required,
                "scannedAt": scan.scanned_at.map(|t| t.to_rfc3339()),
                "packages": packages,
            })
        }
    };
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("compliance".into(), Value::Array(compliance));
        obj.insert("pendingPatches".into(), pending);
    }
    Ok(())
}

/// Why a resource could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    #[error("Unknown resource URI: {0}")]
    Unknown(String),
    #[error("Device not found: {0}")]
    DeviceNotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Reads `uri` within the organization. `server` is the `breeze://server` document.
pub async fn read(org: &OrgStore<'_>, uri: &str, server: &Value) -> Result<Value, ResourceError> {
    match uri {
        "breeze://devices" => {
            let (devices, _) = org
                .devices()
                .list_devices(&DeviceFilter::default(), DEVICES_LIMIT, 0)
                .await?;
            Ok(Value::Array(
                devices
                    .iter()
                    .map(|d| {
                        json!({
                            "id": d.id, "hostname": d.hostname, "status": d.status, "osType": d.os_family,
                            "osVersion": d.os_version, "agentVersion": d.agent_version, "lastSeenAt": d.last_seen_at,
                        })
                    })
                    .collect(),
            ))
        }
        "breeze://scripts" => {
            let scripts = org.scripts().list_scripts(None, None).await?;
            Ok(Value::Array(
                scripts
                    .iter()
                    .take(LIST_LIMIT as usize)
                    .map(|s| {
                        json!({
                            "id": s.id, "name": s.name, "description": s.description,
                            "language": s.language, "category": s.category,
                            "parameters": s.parameters, "updatedAt": s.updated_at,
                        })
                    })
                    .collect(),
            ))
        }
        "breeze://alerts" => {
            let filter = breeze_store::AlertFilter {
                unresolved: true,
                ..Default::default()
            };
            let page = org.alerts().list_alerts(&filter, None, LIST_LIMIT).await?;
            Ok(Value::Array(
                page.alerts
                    .iter()
                    .map(|a| {
                        json!({
                            "id": a.id, "title": a.title, "severity": a.severity,
                            "status": a.status, "deviceId": a.device_id, "ruleId": a.rule_id,
                            "message": a.message, "triggeredAt": a.triggered_at,
                        })
                    })
                    .collect(),
            ))
        }
        "breeze://automations" => {
            let automations = org.automations().list_automations().await?;
            Ok(Value::Array(
                automations
                    .iter()
                    .take(LIST_LIMIT as usize)
                    .map(|a| {
                        json!({
                            "id": a.id, "name": a.name, "description": a.description,
                            "enabled": a.enabled, "trigger": a.trigger_kind, "cron": a.cron,
                            "timeZone": a.time_zone, "alertRuleId": a.alert_rule_id,
                            "task": a.action_kind, "scriptId": a.script_id,
                            "channelId": a.channel_id, "targetType": a.target_kind,
                            "nextRunAt": a.next_run_at, "updatedAt": a.updated_at,
                        })
                    })
                    .collect(),
            ))
        }
        "breeze://server" => Ok(server.clone()),
        _ => {
            let Some(id) = uri.strip_prefix("breeze://devices/") else {
                return Err(ResourceError::Unknown(uri.to_owned()));
            };
            let parsed = uuid::Uuid::parse_str(id)
                .map(DeviceId)
                .map_err(|_| ResourceError::DeviceNotFound(id.to_owned()))?;
            // The same document as get_device_details: camelCase throughout.
            match crate::tools::devices::device_details(
                crate::tools::devices::DeviceReads::of(*org),
                parsed,
            )
            .await
            {
                Ok(mut doc) => {
                    crate::tools::security::add_posture(org.security(), parsed, &mut doc).await?;
                    add_compliance_and_patches(org, parsed, &mut doc).await?;
                    Ok(doc)
                }
                Err(StoreError::NotFound(_)) => Err(ResourceError::DeviceNotFound(id.to_owned())),
                Err(e) => Err(e.into()),
            }
        }
    }
}
