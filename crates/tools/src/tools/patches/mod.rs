//! `manage_patches`: what the organization's devices can update (apt and dnf, through their
//! agents), what is decided about each package, and installing and rolling back.
//!
//! - Tier 1: `list` (available updates from each device's last scan, with the decision that
//!   applies there, paged), `compliance` (per device and a summary: approved or security
//!   updates still missing), `results` (an install or rollback job with each device's outcome,
//!   or the newest jobs and a device's package history).
//! - Tier 2: `scan` (asks agents to scan now; results arrive as they answer), `approve`,
//!   `decline`, `defer` (until a date) a package — organization-wide or for the devices a
//!   configuration policy's patch settings cover, any version or one — and `bulk_approve`
//!   (named packages, or every available one matching `securityOnly`/`severity`); `cancel` a
//!   job still waiting for its window.
//! - Tier 3: `install` (named packages, else every approved one, on named devices; now or in
//!   a maintenance window; reboot never / if_needed / always, never under logged-in users
//!   unless `rebootWithUsers`) and `rollback` (to the version before the last install, or a
//!   named one). The approver sees the plan per device (pinned: the call runs only while the
//!   plan is what was approved). `remove` (destructive) takes named installed packages off
//!   named devices through each agent's package manager and answers per device and package;
//!   apt refuses a removal that would take a package not named with it.
//!
//! Which decision applies on a device: one for a configuration policy that sets the device's
//! patch settings, else the organization's, else the policy's auto-approval (`autoApprove`,
//! optionally only `autoApproveSeverities`); otherwise the update is pending. A deferral past
//! its date, or a decision about another version, is no decision. Everything that changes
//! something is audited; another organization's device, policy, window or job is "not found".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use breeze_agent_proto::{CommandKind, PackageVersion, RebootMode};
use breeze_core::{
    AuditEvent, DeviceId, DeviceStatus, FeatureType, OrgId, Permission, Timestamp,
    config_policy::resolve_for,
};
use breeze_store::{
    DeviceFilter, DevicePatch, MAX_PATCH_PAGE, NewCommand, NewPatchDecision, NewPatchJob,
    OrgConfigPolicies, OrgPatches, PatchApproval, PatchDecision, PatchFilter, PatchJob,
    PatchJobDevice, PatchJobKind, StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::DEVICE_NOT_FOUND;
use super::device_command::{CommandView, RunOptions, gateway_error, run};
use crate::reach::{self, Reach};
use crate::{Pin, RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

mod decisions;
mod inventory;
mod jobs;
mod removal;

use decisions::{bulk_approve, decide};
use inventory::{compliance, list, scan};
pub use jobs::start_scheduled_patch_job;
use jobs::{install, plan, results};
use removal::{removal, remove};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManagePatches>();
}

const POLICY_NOT_FOUND: &str = "Configuration policy not found or access denied";
const JOB_NOT_FOUND: &str = "Patch job not found or access denied";
const WINDOW_NOT_FOUND: &str = "Maintenance window not found or access denied";
/// The most devices one scan, install or rollback names.
const MAX_DEVICES: usize = 100;
/// How long a patch command may wait for an offline agent, and run.
const SCAN_TIMEOUT_SECS: u32 = 600;
const INSTALL_TIMEOUT_SECS: u32 = 3600;
const QUEUE_TTL_MINUTES: i64 = 60;
/// How long `scan` waits for answers before reporting what arrived.
const SCAN_WAIT: Duration = Duration::from_secs(20);

crate::actions! {
    // Reads are Tier 1; scanning and deciding Tier 2; changing packages Tier 3.
    pub(crate) enum PatchAction {
        List = "list" => (T1, Read, DevicesRead),
        Compliance = "compliance" => (T1, Read, DevicesRead),
        Results = "results" => (T1, Read, DevicesRead),
        Scan = "scan" => (T2, Execute, DevicesExecute),
        Approve = "approve" => (T2, Update, DevicesWrite),
        Decline = "decline" => (T2, Update, DevicesWrite),
        Defer = "defer" => (T2, Update, DevicesWrite),
        BulkApprove = "bulk_approve" => (T2, Update, DevicesWrite),
        Cancel = "cancel" => (T2, Update, DevicesExecute),
        Install = "install" => (T3, Execute, DevicesExecute),
        Rollback = "rollback" => (T3, Execute, DevicesExecute),
        // Destructive: the package is gone from the device.
        Remove = "remove" => (T3, Delete, DevicesExecute),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SeverityArg {
    Critical,
    Important,
    Moderate,
    Low,
}

impl SeverityArg {
    fn as_str(self) -> &'static str {
        match self {
            SeverityArg::Critical => "critical",
            SeverityArg::Important => "important",
            SeverityArg::Moderate => "moderate",
            SeverityArg::Low => "low",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RebootArg {
    Never,
    IfNeeded,
    Always,
}

impl RebootArg {
    fn as_str(self) -> &'static str {
        match self {
            RebootArg::Never => "never",
            RebootArg::IfNeeded => "if_needed",
            RebootArg::Always => "always",
        }
    }
}

fn reboot_mode(s: &str) -> RebootMode {
    match s {
        "if_needed" => RebootMode::IfNeeded,
        "always" => RebootMode::Always,
        _ => RebootMode::Never,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WhenArg {
    Now,
    MaintenanceWindow,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PatchesInput {
    action: PatchAction,
    /// list, compliance: one device; results: its package history.
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    /// scan (default: every online device), install, rollback, remove (required): 1–100
    /// devices.
    #[schemars(length(min = 1, max = 100))]
    device_ids: Option<Vec<String>>,
    /// approve, decline, defer: the package.
    #[schemars(length(min = 1, max = 200))]
    package_name: Option<String>,
    /// bulk_approve, install (default: every approved update), rollback, remove (required:
    /// installed packages to remove, at most 20).
    #[schemars(length(min = 1, max = 500))]
    package_names: Option<Vec<String>>,
    /// approve, decline, defer: only this version (default any); rollback of one package: the
    /// version to go back to (default: the one before its last install).
    #[schemars(length(min = 1, max = 200))]
    version: Option<String>,
    /// approve, decline, defer, bulk_approve: only for the devices this configuration
    /// policy's patch settings cover (default: the whole organization).
    #[schemars(length(min = 36, max = 36))]
    config_policy_id: Option<String>,
    /// defer (required): RFC 3339, in the future.
    #[schemars(length(min = 10, max = 40))]
    defer_until: Option<String>,
    #[schemars(length(max = 2000))]
    note: Option<String>,
    /// list, bulk_approve: only security updates.
    security_only: Option<bool>,
    /// list, bulk_approve: only this severity (as the package manager rates it; dnf).
    severity: Option<SeverityArg>,
    /// list: part of the package name.
    #[schemars(length(min = 1, max = 100))]
    search: Option<String>,
    /// install, rollback: now (default) or in a maintenance window (windowId).
    when: Option<WhenArg>,
    #[schemars(length(min = 36, max = 36))]
    window_id: Option<String>,
    /// install, rollback: never (default), if_needed (the OS asks for one) or always.
    reboot_policy: Option<RebootArg>,
    /// install, rollback: reboot even with users logged in (default false: deferred).
    reboot_with_users: Option<bool>,
    /// results, cancel: the job.
    #[schemars(length(min = 36, max = 36))]
    job_id: Option<String>,
    /// list: the nextCursor of the previous page.
    #[schemars(length(max = 400))]
    cursor: Option<String>,
    /// list: 1–500 (default 100); results: jobs (default 20).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u32>,
}

/// One available update and the decision that applies on its device.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct PatchView {
    device_id: String,
    hostname: String,
    name: String,
    installed_version: Option<String>,
    available_version: String,
    arch: Option<String>,
    source: Option<String>,
    security: bool,
    severity: Option<String>,
    advisory: Option<String>,
    /// approved, auto_approved, declined, deferred or pending.
    decision: String,
    defer_until: Option<String>,
    scanned_at: String,
}

/// The fleet's patch compliance, as `manage_patches compliance` sums it up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetPatchCompliance {
    pub devices: usize,
    pub scanned: usize,
    pub compliant: usize,
    /// Of the scanned devices.
    pub compliance_percent: f64,
    /// Approved (or auto-approved) updates not installed, over all devices.
    pub missing_approved: usize,
    /// Security updates nobody decided about, over all devices.
    pub pending_security: usize,
}

/// The organization's patch compliance summed up by the very code `manage_patches
/// compliance` runs, for a door that shows the figure without calling the tool (the
/// dashboard's overview, after it authorized the person for the tool's read).
pub async fn fleet_patch_compliance(
    devices: breeze_store::OrgDevices<'_>,
    patches: OrgPatches<'_>,
    policies: OrgConfigPolicies<'_>,
    now: Timestamp,
) -> Result<FleetPatchCompliance, ToolError> {
    let s = inventory::compliance_of(devices, patches, policies, now, None)
        .await?
        .summary;
    Ok(FleetPatchCompliance {
        devices: s.devices,
        scanned: s.scanned,
        compliant: s.compliant,
        compliance_percent: s.compliance_percent,
        missing_approved: s.missing_approved,
        pending_security: s.pending_security,
    })
}

/// One device's patch compliance.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct DeviceCompliance {
    device_id: String,
    hostname: String,
    /// Never scanned: nothing is known.
    scanned: bool,
    last_scan_at: Option<String>,
    manager: Option<String>,
    available: usize,
    security: usize,
    critical: usize,
    important: usize,
    /// Approved (or auto-approved) and not installed.
    missing_approved: usize,
    /// Security updates nobody decided about.
    pending_security: usize,
    /// Nothing approved is missing and no security update waits for a decision.
    compliant: bool,
    reboot_required: bool,
    logged_in_users: Vec<String>,
    /// A scan asked for and not answered yet (its command id), or the last scan's error.
    scan_pending: Option<String>,
    scan_error: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ComplianceSummary {
    devices: usize,
    scanned: usize,
    never_scanned: usize,
    compliant: usize,
    /// Of the scanned devices.
    compliance_percent: f64,
    missing_approved: usize,
    pending_security: usize,
    reboot_required: usize,
    /// Packages missing on the most devices: name → devices.
    top_missing: BTreeMap<String, usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ApprovalView {
    id: String,
    package_name: String,
    version: Option<String>,
    /// The configuration policy it is scoped to (none: organization-wide).
    config_policy_id: Option<String>,
    /// approved, declined or deferred.
    decision: String,
    defer_until: Option<String>,
    note: Option<String>,
    decided_by: String,
    decided_at: String,
}

impl From<PatchApproval> for ApprovalView {
    fn from(a: PatchApproval) -> Self {
        Self {
            id: a.id.to_string(),
            package_name: a.package_name,
            version: a.version,
            config_policy_id: a.policy_id.map(|p| p.to_string()),
            decision: a.decision.as_str().into(),
            defer_until: a.defer_until.map(|t| t.to_rfc3339()),
            note: a.note,
            decided_by: a.decided_by,
            decided_at: a.decided_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct JobView {
    id: String,
    /// install or rollback.
    kind: String,
    /// scheduled, running, succeeded, partial, failed, cancelled.
    status: String,
    reboot_policy: String,
    reboot_with_users: bool,
    /// now or maintenance_window.
    schedule: String,
    window_id: Option<String>,
    window_name: Option<String>,
    requested_by: String,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    /// Each device's part (results only).
    #[serde(skip_serializing_if = "Option::is_none")]
    devices: Option<Vec<JobDeviceView>>,
}

impl JobView {
    fn new(j: PatchJob, parts: Option<Vec<PatchJobDevice>>) -> Self {
        Self {
            id: j.id.to_string(),
            kind: j.kind.to_string(),
            status: j.status.to_string(),
            reboot_policy: j.reboot_policy,
            reboot_with_users: j.reboot_with_users,
            schedule: j.schedule,
            window_id: j.window_id.map(|w| w.to_string()),
            window_name: j.window_name,
            requested_by: j.requested_by,
            created_at: j.created_at.to_rfc3339(),
            started_at: j.started_at.map(|t| t.to_rfc3339()),
            finished_at: j.finished_at.map(|t| t.to_rfc3339()),
            devices: parts.map(|p| p.into_iter().map(JobDeviceView::from).collect()),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct JobDeviceView {
    device_id: String,
    /// scheduled, sent, succeeded, partial, failed, skipped.
    status: String,
    /// What the device was asked to do: package names, or {name, version} for a rollback.
    #[schemars(with = "Vec<Value>")]
    packages: Value,
    command_id: Option<String>,
    /// Per package: name, status (installed, rolled_back, failed, not_available),
    /// fromVersion, toVersion, error.
    #[schemars(with = "Option<Vec<serde_json::Map<String, Value>>>")]
    results: Option<Value>,
    /// not_needed, not_requested, deferred_users_logged_in, scheduled, failed.
    reboot: Option<String>,
    reboot_detail: Option<String>,
    error: Option<String>,
    updated_at: String,
}

impl From<PatchJobDevice> for JobDeviceView {
    fn from(p: PatchJobDevice) -> Self {
        Self {
            device_id: p.device_id.to_string(),
            status: p.status.to_string(),
            packages: p.packages,
            command_id: p.command_id.map(|c| c.to_string()),
            results: p.results,
            reboot: p.reboot,
            reboot_detail: p.reboot_detail,
            error: p.error,
            updated_at: p.updated_at.to_rfc3339(),
        }
    }
}

/// One device's answer to `scan`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ScanView {
    device_id: String,
    hostname: String,
    command_id: Option<String>,
    /// completed, queued (answers when the agent gets to it), failed, skipped (offline).
    status: String,
    patches: Option<i64>,
    security: Option<i64>,
    error: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct HistoryView {
    device_id: String,
    job_id: Option<String>,
    package_name: String,
    /// install, rollback or remove (a removal has no job).
    action: String,
    from_version: Option<String>,
    to_version: Option<String>,
    status: String,
    error: Option<String>,
    at: String,
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PatchesOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    patches: Option<Vec<PatchView>>,
    /// list: pass as cursor for the next page (absent on the last).
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    devices: Option<Vec<DeviceCompliance>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<ComplianceSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scans: Option<Vec<ScanView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approvals: Option<Vec<ApprovalView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<JobView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jobs: Option<Vec<JobView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<Vec<HistoryView>>,
    /// remove: each device's removal.
    #[serde(skip_serializing_if = "Option::is_none")]
    removals: Option<Vec<RemovalView>>,
    /// install, rollback: devices or packages left out, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// One package of a removal.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RemovedPackage {
    name: String,
    /// removed, not_installed, failed.
    status: String,
    /// The version that was installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    from_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One device's removal.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RemovalView {
    device_id: String,
    hostname: String,
    /// succeeded (every named package removed or not installed), failed, offline (nothing
    /// sent), running (still going when the call returned; its result is recorded on the
    /// command).
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    command_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    manager: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packages: Option<Vec<RemovedPackage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Decisions per device
// ---------------------------------------------------------------------------------------------

/// A device's patch settings as the configuration policies resolve them.
#[derive(Debug, Clone, Default)]
struct DevicePolicy {
    /// The policies that set any of its patch settings.
    policies: Vec<Uuid>,
    auto_approve: bool,
    /// `None`: every severity.
    auto_severities: Option<Vec<String>>,
    reboot_delay_minutes: Option<u32>,
}

/// The organization's decisions and every device's patch settings.
struct Decisions {
    /// Every decision of the organization, as the store lists them (by package, then time).
    approvals: Vec<PatchApproval>,
    org: HashMap<String, PatchApproval>,
    by_policy: HashMap<(Uuid, String), PatchApproval>,
    devices: HashMap<DeviceId, DevicePolicy>,
    now: Timestamp,
}

impl Decisions {
    async fn load(
        policies: OrgConfigPolicies<'_>,
        patches: OrgPatches<'_>,
        only: Option<&[DeviceId]>,
        now: Timestamp,
    ) -> Result<Self, ToolError> {
        let mut d = Decisions {
            approvals: patches.list_patch_approvals().await?,
            org: HashMap::new(),
            by_policy: HashMap::new(),
            devices: HashMap::new(),
            now,
        };
        for a in &d.approvals {
            match a.policy_id {
                Some(p) => {
                    d.by_policy.insert((p, a.package_name.clone()), a.clone());
                }
                None => {
                    d.org.insert(a.package_name.clone(), a.clone());
                }
            }
        }
        let candidates = policies.config_candidates().await?;
        for place in policies.device_places(only).await? {
            let effective = resolve_for(&place, &candidates);
            let mut policy = DevicePolicy::default();
            if let Some(fields) = effective.get(&FeatureType::Patch) {
                let mut ids: Vec<Uuid> = fields.values().map(|v| v.source.policy_id).collect();
                ids.sort();
                ids.dedup();
                policy.policies = ids;
                policy.auto_approve = fields
                    .get("autoApprove")
                    .and_then(|v| v.value.as_bool())
                    .unwrap_or(false);
                policy.auto_severities = fields.get("autoApproveSeverities").and_then(|v| {
                    v.value.as_array().map(|a| {
                        a.iter()
                            .filter_map(|s| s.as_str().map(str::to_owned))
                            .collect()
                    })
                });
                policy.reboot_delay_minutes = fields
                    .get("rebootDelayMinutes")
                    .and_then(|v| v.value.as_u64())
                    .and_then(|v| u32::try_from(v).ok());
            }
            d.devices.insert(DeviceId(place.device), policy);
        }
        Ok(d)
    }

    /// The decision on `device` for `patch`: (approved | auto_approved | declined | deferred |
    /// pending, the deferral's date).
    fn decide(&self, patch: &DevicePatch) -> (&'static str, Option<Timestamp>) {
        let policy = self.devices.get(&patch.device_id);
        let scoped = policy
            .into_iter()
            .flat_map(|p| p.policies.iter())
            .find_map(|p| {
                self.by_policy
                    .get(&(*p, patch.name.clone()))
                    .filter(|a| a.effective(&patch.available_version, self.now).is_some())
            });
        let found = scoped.or_else(|| {
            self.org
                .get(&patch.name)
                .filter(|a| a.effective(&patch.available_version, self.now).is_some())
        });
        if let Some(a) = found {
            return match a.decision {
                PatchDecision::Approved => ("approved", None),
                PatchDecision::Declined => ("declined", None),
                PatchDecision::Deferred => ("deferred", a.defer_until),
            };
        }
        if policy.is_some_and(|p| p.auto_approves(patch.severity.as_deref())) {
            return ("auto_approved", None);
        }
        ("pending", None)
    }

    /// The device's patch settings (the defaults when no policy sets any).
    fn policy(&self, device: DeviceId) -> Option<&DevicePolicy> {
        self.devices.get(&device)
    }

    /// Every package some decision names, sorted: only their patches can be decided otherwise
    /// than by their device's policy.
    fn named_packages(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .org
            .keys()
            .chain(self.by_policy.keys().map(|(_, name)| name))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

impl DevicePolicy {
    /// Whether the policy approves an update of `severity` that no decision names.
    fn auto_approves(&self, severity: Option<&str>) -> bool {
        self.auto_approve
            && match &self.auto_severities {
                None => true,
                Some(list) => severity.is_some_and(|s| list.iter().any(|l| l == s)),
            }
    }
}

fn approved(decision: &str) -> bool {
    matches!(decision, "approved" | "auto_approved")
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

fn device_id(raw: &str) -> Result<DeviceId, ToolError> {
    Uuid::parse_str(raw)
        .map(DeviceId)
        .map_err(|_| ToolError::not_found(DEVICE_NOT_FOUND))
}

fn store_error(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("device") => ToolError::not_found(DEVICE_NOT_FOUND),
        StoreError::NotFound("configuration policy") => ToolError::not_found(POLICY_NOT_FOUND),
        StoreError::NotFound("patch job") => ToolError::not_found(JOB_NOT_FOUND),
        StoreError::NotFound("maintenance window") => ToolError::not_found(WINDOW_NOT_FOUND),
        other => other.into(),
    }
}

/// The named devices, each the organization's (a foreign or unknown one is "not found").
async fn named_devices<R: Reach>(
    cx: &ToolCx<'_, R>,
    ids: &[String],
) -> Result<Vec<breeze_core::Device>, ToolError> {
    if ids.len() > MAX_DEVICES {
        return Err(ToolError::invalid(format!(
            "deviceIds: at most {MAX_DEVICES} devices"
        )));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for raw in ids {
        let id = device_id(raw)?;
        if seen.insert(id) {
            out.push(cx.devices().get_device(id).await.map_err(store_error)?);
        }
    }
    Ok(out)
}

fn required<'a, T>(value: &'a Option<T>, field: &str, action: &str) -> Result<&'a T, ToolError> {
    value
        .as_ref()
        .ok_or_else(|| ToolError::invalid(format!("{field} is required for {action}")))
}

fn package_names(input: &PatchesInput) -> Result<Option<Vec<String>>, ToolError> {
    let Some(names) = &input.package_names else {
        return Ok(None);
    };
    let mut out: Vec<String> = Vec::new();
    for n in names {
        breeze_store::check_package_text("packageNames", n)?;
        if !out.contains(n) {
            out.push(n.clone());
        }
    }
    Ok(Some(out))
}

fn policy_id(input: &PatchesInput) -> Result<Option<Uuid>, ToolError> {
    input
        .config_policy_id
        .as_deref()
        .map(|p| Uuid::parse_str(p).map_err(|_| ToolError::not_found(POLICY_NOT_FOUND)))
        .transpose()
}

fn audit<R: Reach>(cx: &ToolCx<'_, R>, action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(cx.actor.clone(), action, resource).request(cx.request_id.clone())
}

/// `deviceId|name` of the last row, base64-free and opaque enough.
fn cursor_of(p: &DevicePatch) -> String {
    format!("{}|{}", p.device_id, p.name)
}

fn parse_cursor(raw: &str) -> Result<(DeviceId, String), ToolError> {
    let bad = || ToolError::invalid("cursor: not a cursor this tool gave; start again without it");
    let (d, n) = raw.split_once('|').ok_or_else(bad)?;
    let d = Uuid::parse_str(d).map_err(|_| bad())?;
    if n.is_empty() {
        return Err(bad());
    }
    Ok((DeviceId(d), n.to_owned()))
}

// ---------------------------------------------------------------------------------------------
// Install and rollback plans
// ---------------------------------------------------------------------------------------------

/// What an install or rollback would do: per device, its packages; and what is left out.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Plan {
    kind: &'static str,
    reboot_policy: &'static str,
    reboot_with_users: bool,
    window: Option<(Uuid, String)>,
    devices: Vec<PlanDevice>,
    skipped: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct PlanDevice {
    device_id: DeviceId,
    hostname: String,
    packages: Value,
    reboot_delay_minutes: u32,
}

// ---------------------------------------------------------------------------------------------
// The tool
// ---------------------------------------------------------------------------------------------

pub(crate) struct ManagePatches;

impl Tool for ManagePatches {
    const NAME: &'static str = "manage_patches";
    const TITLE: &'static str = "Manage patches";
    const DESCRIPTION: &'static str = "Patch management through the agents' package managers (apt, dnf): list available updates per device (security flag, severity), compliance per device and summary, results of install jobs (Tier 1); scan now, approve/decline/defer a package (organization-wide or per configuration policy), bulk_approve, cancel a scheduled job (Tier 2); install approved or named updates now or in a maintenance window with a reboot policy (never/if_needed/always, deferred while users are logged in), rollback to the previous version, remove installed packages (Tier 3, approval; remove is destructive and never reboots).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(15, 300);
    type Actions = PatchAction;
    type Input = PatchesInput;
    type Output = Rendered<PatchesOutput>;
    type Reach = (
        reach::Commands,
        reach::ConfigPolicies,
        reach::Devices,
        reach::Maintenance,
        reach::Patches,
        reach::Fleet,
    );

    /// Install and rollback: the plan per device, pinned for the approver.
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        if input.action == PatchAction::Remove {
            let (devices, packages) = removal(cx, input).await?;
            return Ok(Some(Pin {
                summary: format!(
                    "remove {} from {} device(s): {}",
                    packages.join(", "),
                    devices.len(),
                    devices
                        .iter()
                        .map(|d| d.hostname.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                data: json!({
                    "packages": packages,
                    "devices": devices.iter().map(|d| d.id.to_string()).collect::<Vec<_>>(),
                }),
            }));
        }
        if !matches!(input.action, PatchAction::Install | PatchAction::Rollback) {
            return Ok(None);
        }
        let plan = plan(cx, input).await?;
        let packages: usize = plan
            .devices
            .iter()
            .map(|d| d.packages.as_array().map_or(0, Vec::len))
            .sum();
        Ok(Some(Pin {
            summary: format!(
                "{} {packages} package(s) on {} device(s), reboot {}{}",
                plan.kind,
                plan.devices.len(),
                plan.reboot_policy,
                plan.window
                    .as_ref()
                    .map(|w| format!(", in window {:?}", w.1))
                    .unwrap_or_default()
            ),
            data: serde_json::to_value(&plan).unwrap_or_default(),
        }))
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let out = match input.action {
            PatchAction::List => list(cx, &input).await?,
            PatchAction::Compliance => compliance(cx, &input).await?,
            PatchAction::Results => results(cx, &input).await?,
            PatchAction::Scan => scan(cx, &input).await?,
            PatchAction::Approve | PatchAction::Decline | PatchAction::Defer => {
                decide(cx, &input).await?
            }
            PatchAction::BulkApprove => bulk_approve(cx, &input).await?,
            PatchAction::Cancel => {
                let raw = required(&input.job_id, "jobId", "cancel")?;
                let id = Uuid::parse_str(raw).map_err(|_| ToolError::not_found(JOB_NOT_FOUND))?;
                let cancelled = cx
                    .patches()
                    .cancel_patch_job(id, audit(cx, "patch.job.cancel", "patch_job"))
                    .await
                    .map_err(store_error)?;
                let (job, parts) = cx.patches().get_patch_job(id).await.map_err(store_error)?;
                PatchesOutput {
                    message: Some(if cancelled {
                        "the job was waiting for its window and is cancelled".into()
                    } else {
                        format!("the job is {} and cannot be cancelled", job.status)
                    }),
                    job: Some(JobView::new(job, Some(parts))),
                    ..Default::default()
                }
            }
            PatchAction::Install | PatchAction::Rollback => install(cx, &input).await?,
            PatchAction::Remove => remove(cx, &input).await?,
        };
        Rendered::of(&out)
    }
}
