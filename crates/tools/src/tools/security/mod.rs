//! `security_scan` (Tier 3 for every action, 3 calls per 10 minutes) and
//! `get_security_posture` (Tier 1).
//!
//! A scan is a `security_scan` command on each chosen online device (read-only Linux checks:
//! firewall, pending security updates, disk encryption, SSH root login and password
//! authentication, world-writable system files, listening services, antivirus/EDR, indicator
//! paths). Its row is written when it is queued; the agent's answer — findings, flagged files
//! and the posture it gives (`breeze_core::security::score`) — is recorded when the call sees
//! it finish, or later by `status`/`results`, whichever comes first (the store records it
//! once). `quarantine`, `remove` and `restore` act only on files a scan of the same device
//! flagged (pinned by the sha256 the scan saw) or on the organization's own quarantine
//! records; the agent refuses protected paths whatever is asked. Another organization's
//! device, scan, flagged file or quarantine record is "not found", like a missing one.
//!
//! The posture is eight weighted factors (`breeze_core::security::FACTOR_WEIGHTS`, stated in
//! every answer), per device from its newest scan and for the fleet as the average of its
//! devices' newest postures, with recommendations ordered by the points each would gain and
//! the trend from the stored snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use breeze_agent_proto::{CommandKind, DEFAULT_OUTPUT_CAP_BYTES};
use breeze_core::{
    AuditEvent, Device, DeviceGroupId, DeviceId, DeviceStatus, Permission, SiteId,
    security::{
        self as posture, CheckStatus, FACTOR_WEIGHTS, FactorScore, FindingInput, FindingSeverity,
        Posture, QuarantineState, Recommendation, RiskLevel, ScanStatus,
    },
};
use breeze_gateway::GatewayError;
use breeze_store::{
    CommandRecord, DeviceFilter, FlaggedFile, NewCommand, NewFinding, NewFlagged, NewPosture,
    NewQuarantine, PostureSnapshot, QuarantineEntry, ScanOutcome, SecurityScan, StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{
    device_command::{RunOptions, online_device, require_completed, run, safe_path},
    devices::find_device,
};
use crate::reach::{self, Reach};
use crate::{ErrorCode, NoActions, Pin, RateLimit, Registry, Tier, Tool, ToolCx, ToolError, per};

mod scoring;

use scoring::GetSecurityPosture;
pub(crate) use scoring::add_posture;

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetSecurityPosture>();
    r.register::<SecurityScanTool>();
}

const SCAN_NOT_FOUND: &str = "Security scan not found or access denied";
const FLAGGED_NOT_FOUND: &str = "Flagged file not found or access denied";
const QUARANTINE_NOT_FOUND: &str = "Quarantined file not found or access denied";
/// Most devices one scan call reaches.
const MAX_SCAN_DEVICES: usize = 50;
/// The agent stops a scan after this long.
const SCAN_TIMEOUT_SECS: u32 = 300;
/// How long a scan call waits for results before answering with the scans still running.
const SCAN_WAIT: Duration = Duration::from_secs(90);
/// How long a command waits for an online agent that is reconnecting.
const QUEUE_TTL_SECS: i64 = 75;

fn uuid_arg(raw: &str, missing: &str) -> Result<Uuid, ToolError> {
    Uuid::parse_str(raw).map_err(|_| ToolError::not_found(missing))
}

fn gateway_error(e: GatewayError) -> ToolError {
    match e {
        GatewayError::Store(s) => s.into(),
    }
}

crate::actions! {
    // Every action is Tier 3, as the spec lists the tool: a scan runs on devices, and its
    // results, status and the quarantine are held to the same bar.
    pub(crate) enum ScanAction {
        Scan = "scan" => (T3, Execute, DevicesExecute),
        Status = "status" => (T3, Read, DevicesRead),
        Results = "results" => (T3, Read, DevicesRead),
        Quarantine = "quarantine" => (T3, Update, FilesWrite),
        Remove = "remove" => (T3, Delete, FilesWrite),
        Restore = "restore" => (T3, Update, FilesWrite),
        // Scheduling a Tier 3 scan is Tier 3: each occurrence runs as the scheduler.
        Schedule = "schedule" => (T3, Create, DevicesExecute),
        ListSchedules = "list_schedules" => (T3, Read, DevicesRead),
        Unschedule = "unschedule" => (T3, Delete, DevicesExecute),
    }
}

/// Which devices a scan reaches.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ScanTarget {
    /// Every online device of the organization (at most 50).
    Organization,
    #[serde(rename_all = "camelCase")]
    Site {
        #[schemars(length(min = 36, max = 36))]
        site_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Group {
        #[schemars(length(min = 36, max = 36))]
        group_id: String,
    },
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ScanInput {
    action: ScanAction,
    /// scan: the devices (1-50); or give target.
    #[schemars(length(min = 1, max = 50))]
    device_ids: Option<Vec<String>>,
    /// scan, when deviceIds is not given: an organization, site or group (online devices, at
    /// most 50).
    target: Option<ScanTarget>,
    /// scan: extra directories to walk for world-writable files (absolute, at most 10).
    #[schemars(length(max = 10))]
    extra_roots: Option<Vec<String>>,
    /// scan: indicator paths; a file present at one is flagged (absolute, at most 100).
    #[schemars(length(max = 100))]
    indicator_paths: Option<Vec<String>>,
    /// status, results: one scan.
    #[schemars(length(min = 36, max = 36))]
    scan_id: Option<String>,
    /// status, results: the device's latest scans (results: its newest completed one).
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    /// results: only failed and unknown checks.
    failed_only: Option<bool>,
    /// quarantine, remove: a file a scan flagged (from results).
    #[schemars(length(min = 36, max = 36))]
    flagged_file_id: Option<String>,
    /// remove, restore: a quarantine record (from a quarantine answer or status).
    #[schemars(length(min = 36, max = 36))]
    quarantine_id: Option<String>,
    /// schedule: a name for the schedule (default "scheduled security scan").
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    /// schedule: run the scan (deviceIds or target, extraRoots, indicatorPaths as for scan)
    /// every this many minutes (60-43200); or give cron (which wins when both are given).
    #[schemars(range(min = 60, max = 43200))]
    interval_minutes: Option<u32>,
    /// schedule: a five-field cron expression ("0 3 * * 1-5"), read in timeZone; at most
    /// hourly.
    #[schemars(length(min = 9, max = 100))]
    cron: Option<String>,
    /// schedule with cron: an IANA time zone (default UTC).
    #[schemars(length(min = 1, max = 64))]
    time_zone: Option<String>,
    /// unschedule: the schedule.
    #[schemars(length(min = 36, max = 36))]
    schedule_id: Option<String>,
}

/// A scan schedule as tools show it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScheduleView {
    schedule_id: String,
    name: String,
    /// The scan call each occurrence makes.
    #[schemars(with = "serde_json::Map<String, Value>")]
    arguments: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    interval_minutes: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    time_zone: String,
    /// Whose Tier 3 call each occurrence is (approval and rate limit as for that caller).
    owner: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_run_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_run_at: Option<String>,
    /// ran, pending_approval, refused, failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_message: Option<String>,
}

impl From<breeze_store::ScanSchedule> for ScheduleView {
    fn from(s: breeze_store::ScanSchedule) -> Self {
        Self {
            schedule_id: s.id.to_string(),
            name: s.name,
            arguments: s.arguments,
            interval_minutes: s.interval_minutes,
            cron: s.cron,
            time_zone: s.time_zone,
            owner: s.owner_actor,
            next_run_at: s.next_run_at.map(|t| t.to_rfc3339()),
            last_run_at: s.last_run_at.map(|t| t.to_rfc3339()),
            last_status: s.last_status.map(|s| s.to_string()),
            last_message: s.last_message,
        }
    }
}

/// A scan as tools show it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScanView {
    scan_id: String,
    device_id: String,
    /// running, completed or failed.
    status: String,
    requested_by: String,
    started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Whether the agent ran as root (unprivileged scans answer more checks "unknown").
    #[serde(skip_serializing_if = "Option::is_none")]
    privileged: Option<bool>,
    /// Checks by status (pass, fail, unknown), once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<BTreeMap<String, usize>>,
}

impl ScanView {
    fn new(s: &SecurityScan, summary: Option<BTreeMap<String, usize>>) -> Self {
        Self {
            scan_id: s.id.to_string(),
            device_id: s.device_id.to_string(),
            status: s.status.to_string(),
            requested_by: s.requested_by.clone(),
            started_at: s.started_at.to_rfc3339(),
            finished_at: s.finished_at.map(|t| t.to_rfc3339()),
            error: s.error.clone(),
            privileged: s.privileged,
            summary,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FindingView {
    check: String,
    /// pass, fail or unknown (the agent could not tell).
    status: String,
    /// info, low, medium, high or critical.
    severity: String,
    title: String,
    #[schemars(with = "serde_json::Map<String, Value>")]
    evidence: Value,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FlaggedView {
    flagged_file_id: String,
    path: String,
    reason: String,
    check: String,
    severity: String,
    sha256: Option<String>,
    mode: String,
    uid: i64,
    gid: i64,
    size_bytes: i64,
}

impl From<FlaggedFile> for FlaggedView {
    fn from(f: FlaggedFile) -> Self {
        Self {
            flagged_file_id: f.id.to_string(),
            path: f.path,
            reason: f.reason,
            check: f.check,
            severity: f.severity.to_string(),
            sha256: f.sha256,
            mode: f.mode,
            uid: f.uid,
            gid: f.gid,
            size_bytes: f.size_bytes,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResultsView {
    scan: ScanView,
    findings: Vec<FindingView>,
    flagged_files: Vec<FlaggedView>,
    /// The posture this scan gives the device (completed scans).
    #[serde(skip_serializing_if = "Option::is_none")]
    posture: Option<Posture>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QuarantineView {
    quarantine_id: String,
    device_id: String,
    original_path: String,
    sha256: String,
    mode: String,
    uid: i64,
    gid: i64,
    size_bytes: i64,
    /// quarantined (restorable), removed or restored.
    state: String,
    created_by: String,
    updated_at: String,
}

impl From<QuarantineEntry> for QuarantineView {
    fn from(q: QuarantineEntry) -> Self {
        Self {
            quarantine_id: q.id.to_string(),
            device_id: q.device_id.to_string(),
            original_path: q.original_path,
            sha256: q.sha256,
            mode: q.mode,
            uid: q.uid,
            gid: q.gid,
            size_bytes: q.size_bytes,
            state: q.state.to_string(),
            created_by: q.created_by,
            updated_at: q.updated_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SkippedView {
    device_id: String,
    reason: String,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScanOutput {
    /// scan, status: the scans.
    #[serde(skip_serializing_if = "Option::is_none")]
    scans: Option<Vec<ScanView>>,
    /// scan: devices not scanned (offline) and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<SkippedView>,
    /// results: one scan's findings, flagged files and posture.
    #[serde(skip_serializing_if = "Option::is_none")]
    results: Option<ResultsView>,
    /// quarantine, remove, restore: the record after the action; status: the device's.
    #[serde(skip_serializing_if = "Option::is_none")]
    quarantine: Option<QuarantineView>,
    /// status with deviceId: the device's quarantine records.
    #[serde(skip_serializing_if = "Option::is_none")]
    quarantined_files: Option<Vec<QuarantineView>>,
    /// schedule, unschedule: the schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    schedule: Option<ScheduleView>,
    /// list_schedules.
    #[serde(skip_serializing_if = "Option::is_none")]
    schedules: Option<Vec<ScheduleView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Recording results
// ---------------------------------------------------------------------------------------------

fn parse_finding(v: &Value) -> Option<NewFinding> {
    Some(NewFinding {
        check: v.get("check")?.as_str()?.chars().take(64).collect(),
        status: v
            .get("status")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .unwrap_or(CheckStatus::Unknown),
        severity: v
            .get("severity")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .unwrap_or(FindingSeverity::Info),
        title: v
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(500)
            .collect(),
        evidence: v.get("evidence").cloned().unwrap_or(Value::Null),
    })
}

fn parse_flagged(v: &Value) -> Option<NewFlagged> {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    let n = |k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0);
    Some(NewFlagged {
        path: s("path")?.to_owned(),
        reason: s("reason").unwrap_or("flagged").chars().take(500).collect(),
        check: s("check").unwrap_or("unknown").chars().take(64).collect(),
        severity: s("severity")
            .and_then(|x| x.parse().ok())
            .unwrap_or(FindingSeverity::Medium),
        sha256: s("sha256")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_owned),
        mode: s("mode").unwrap_or("").chars().take(8).collect(),
        uid: n("uid"),
        gid: n("gid"),
        size_bytes: n("sizeBytes"),
    })
}

/// The posture findings give.
fn posture_of(findings: &[NewFinding]) -> Posture {
    let inputs: Vec<FindingInput<'_>> = findings
        .iter()
        .map(|f| FindingInput {
            check: &f.check,
            status: f.status,
            severity: f.severity,
            evidence: &f.evidence,
        })
        .collect();
    posture::score(&inputs)
}

/// What a finished scan command says, as a scan outcome.
fn outcome_of(command: &CommandRecord) -> ScanOutcome {
    let completed = command.status == breeze_core::CommandStatus::Completed;
    let result = command.result.as_ref().filter(|_| completed);
    let Some(result) = result else {
        return ScanOutcome {
            status: ScanStatus::Failed,
            error: Some(
                command
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("the scan ended {}", command.status)),
            ),
            privileged: None,
            findings: Vec::new(),
            flagged: Vec::new(),
            posture: None,
        };
    };
    let findings: Vec<NewFinding> = result
        .get("checks")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(parse_finding).collect())
        .unwrap_or_default();
    let flagged: Vec<NewFlagged> = result
        .get("flaggedFiles")
        .and_then(Value::as_array)
        .map(|a| a.iter().take(200).filter_map(parse_flagged).collect())
        .unwrap_or_default();
    let p = posture_of(&findings);
    ScanOutcome {
        status: ScanStatus::Completed,
        error: None,
        privileged: result.get("privileged").and_then(Value::as_bool),
        findings,
        flagged,
        posture: Some(NewPosture {
            score: i64::from(p.score),
            risk_level: p.risk_level.clone(),
            factors: serde_json::to_value(&p.factors).unwrap_or_default(),
        }),
    }
}

/// A running scan whose command has finished gets its outcome recorded; the scan as it is now.
async fn settle<R: Reach>(
    cx: &ToolCx<'_, R>,
    scan: SecurityScan,
) -> Result<SecurityScan, ToolError> {
    if scan.status != ScanStatus::Running {
        return Ok(scan);
    }
    let command = match cx.commands().get_command(scan.command_id).await {
        Ok(c) => c,
        Err(StoreError::NotFound(_)) => return Ok(scan),
        Err(e) => return Err(e.into()),
    };
    if !command.is_terminal() {
        return Ok(scan);
    }
    cx.security()
        .record_scan_result(scan.id, outcome_of(&command))
        .await?;
    Ok(cx.security().get_security_scan(scan.id).await?)
}

async fn summary<R: Reach>(
    cx: &ToolCx<'_, R>,
    scan: &SecurityScan,
) -> Result<Option<BTreeMap<String, usize>>, ToolError> {
    if scan.status != ScanStatus::Completed {
        return Ok(None);
    }
    let mut counts = BTreeMap::new();
    for f in cx.security().scan_findings(scan.id).await? {
        *counts.entry(f.status.to_string()).or_insert(0) += 1;
    }
    Ok(Some(counts))
}

async fn view<R: Reach>(cx: &ToolCx<'_, R>, scan: SecurityScan) -> Result<ScanView, ToolError> {
    let scan = settle(cx, scan).await?;
    let s = summary(cx, &scan).await?;
    Ok(ScanView::new(&scan, s))
}

async fn find_scan<R: Reach>(cx: &ToolCx<'_, R>, raw: &str) -> Result<SecurityScan, ToolError> {
    let id = uuid_arg(raw, SCAN_NOT_FOUND)?;
    match cx.security().get_security_scan(id).await {
        Ok(s) => Ok(s),
        Err(StoreError::NotFound(_)) => Err(ToolError::not_found(SCAN_NOT_FOUND)),
        Err(e) => Err(e.into()),
    }
}

async fn find_flagged<R: Reach>(
    cx: &ToolCx<'_, R>,
    raw: Option<&str>,
) -> Result<FlaggedFile, ToolError> {
    let raw = raw.ok_or_else(|| ToolError::invalid("flaggedFileId is required"))?;
    let id = uuid_arg(raw, FLAGGED_NOT_FOUND)?;
    match cx.security().get_flagged_file(id).await {
        Ok(f) => Ok(f),
        Err(StoreError::NotFound(_)) => Err(ToolError::not_found(FLAGGED_NOT_FOUND)),
        Err(e) => Err(e.into()),
    }
}

async fn find_quarantine<R: Reach>(
    cx: &ToolCx<'_, R>,
    raw: Option<&str>,
) -> Result<QuarantineEntry, ToolError> {
    let raw = raw.ok_or_else(|| ToolError::invalid("quarantineId is required"))?;
    let id = uuid_arg(raw, QUARANTINE_NOT_FOUND)?;
    match cx.security().get_quarantine(id).await {
        Ok(q) => Ok(q),
        Err(StoreError::NotFound(_)) => Err(ToolError::not_found(QUARANTINE_NOT_FOUND)),
        Err(e) => Err(e.into()),
    }
}

// ---------------------------------------------------------------------------------------------
// security_scan
// ---------------------------------------------------------------------------------------------

/// The devices a scan names: `(online devices, skipped)`.
async fn scan_devices<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
) -> Result<(Vec<Device>, Vec<SkippedView>), ToolError> {
    let mut devices = Vec::new();
    let mut skipped = Vec::new();
    match (&input.device_ids, &input.target) {
        (None, None) => return Err(ToolError::invalid("scan needs deviceIds or target")),
        (Some(ids), _) => {
            for raw in ids {
                let d = find_device(cx, raw).await?;
                if devices.iter().any(|x: &Device| x.id == d.id) {
                    continue;
                }
                if d.status == DeviceStatus::Online {
                    devices.push(d);
                } else {
                    skipped.push(SkippedView {
                        device_id: d.id.to_string(),
                        reason: format!("not online (status: {})", d.status),
                    });
                }
            }
        }
        (None, Some(target)) => {
            let mut filter = DeviceFilter {
                status: Some(DeviceStatus::Online),
                ..Default::default()
            };
            match target {
                ScanTarget::Organization => {}
                ScanTarget::Site { site_id } => {
                    let id = SiteId(uuid_arg(site_id, "Site not found or access denied")?);
                    cx.tenancy()
                        .get_site(id)
                        .await
                        .map_err(|_| ToolError::not_found("Site not found or access denied"))?;
                    filter.site_id = Some(id);
                }
                ScanTarget::Group { group_id } => {
                    let id = DeviceGroupId(uuid_arg(group_id, "Group not found or access denied")?);
                    cx.tenancy()
                        .get_group(id)
                        .await
                        .map_err(|_| ToolError::not_found("Group not found or access denied"))?;
                    filter.group_id = Some(id);
                }
            }
            let (found, _) = cx
                .devices()
                .list_devices(&filter, MAX_SCAN_DEVICES as u32, 0)
                .await?;
            devices = found;
        }
    }
    if devices.is_empty() {
        return Err(ToolError::new(
            ErrorCode::UpstreamError,
            "No online device to scan; nothing was sent",
        )
        .hint("try again when the devices are back online"));
    }
    devices.truncate(MAX_SCAN_DEVICES);
    Ok((devices, skipped))
}

fn check_scan_paths(input: &ScanInput) -> Result<(), ToolError> {
    for p in input.extra_roots.iter().flatten() {
        if !p.starts_with('/') {
            return Err(ToolError::invalid(format!(
                "extraRoots: {p:?} is not an absolute path"
            )));
        }
        safe_path("extraRoots", p)?;
    }
    for p in input.indicator_paths.iter().flatten() {
        if !p.starts_with('/') {
            return Err(ToolError::invalid(format!(
                "indicatorPaths: {p:?} is not an absolute path"
            )));
        }
        safe_path("indicatorPaths", p)?;
    }
    Ok(())
}

async fn do_scan<R: Reach>(cx: &ToolCx<'_, R>, input: &ScanInput) -> Result<ScanOutput, ToolError> {
    check_scan_paths(input)?;
    let (devices, skipped) = scan_devices(cx, input).await?;
    let kind = CommandKind::SecurityScan {
        extra_roots: input.extra_roots.clone().unwrap_or_default(),
        indicator_paths: input.indicator_paths.clone().unwrap_or_default(),
    };
    let mut scans = Vec::new();
    for device in &devices {
        let audit = AuditEvent::new(cx.actor.clone(), "device.security_scan", "device_command")
            .request(cx.request_id.clone());
        let command = cx
            .fleet()
            .submit(
                NewCommand {
                    device_id: device.id,
                    kind: kind.clone(),
                    timeout_secs: SCAN_TIMEOUT_SECS,
                    output_cap_bytes: DEFAULT_OUTPUT_CAP_BYTES,
                    queue_ttl: chrono::Duration::seconds(QUEUE_TTL_SECS),
                    script: None,
                    created_by: cx.actor.to_string(),
                },
                audit,
            )
            .await
            .map_err(gateway_error)?;
        let audit = AuditEvent::new(cx.actor.clone(), "security_scan.start", "security_scan")
            .request(cx.request_id.clone());
        let scan = cx
            .security()
            .create_security_scan(device.id, command.id, &cx.actor.to_string(), audit)
            .await?;
        scans.push(scan);
    }
    let deadline = tokio::time::Instant::now() + SCAN_WAIT;
    let total = scans.len();
    let mut views = Vec::new();
    for (i, scan) in scans.into_iter().enumerate() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        cx.fleet()
            .wait(scan.command_id, left, |_| {})
            .await
            .map_err(gateway_error)?;
        cx.report(
            (i + 1) as f64,
            Some(total as f64),
            Some(format!("{} of {total} scans answered or waited for", i + 1)),
        );
        views.push(view(cx, scan).await?);
    }
    let running = views.iter().filter(|v| v.status == "running").count();
    let message = (running > 0).then(|| {
        format!("{running} scan(s) still running; ask again with action status or results and their scanId")
    });
    Ok(ScanOutput {
        scans: Some(views),
        skipped,
        message,
        ..Default::default()
    })
}

async fn do_status<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
) -> Result<ScanOutput, ToolError> {
    if let Some(raw) = &input.scan_id {
        let scan = find_scan(cx, raw).await?;
        return Ok(ScanOutput {
            scans: Some(vec![view(cx, scan).await?]),
            ..Default::default()
        });
    }
    let device = match &input.device_id {
        Some(d) => Some(find_device(cx, d).await?.id),
        None => None,
    };
    let mut views = Vec::new();
    for scan in cx.security().list_security_scans(device, None, 20).await? {
        views.push(view(cx, scan).await?);
    }
    let quarantined = match device {
        Some(d) => Some(
            cx.security()
                .list_quarantine(Some(d), 50)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        None => None,
    };
    Ok(ScanOutput {
        scans: Some(views),
        quarantined_files: quarantined,
        ..Default::default()
    })
}

async fn do_results<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
) -> Result<ScanOutput, ToolError> {
    let scan = match (&input.scan_id, &input.device_id) {
        (Some(raw), _) => settle(cx, find_scan(cx, raw).await?).await?,
        (None, Some(d)) => {
            let device = find_device(cx, d).await?;
            for s in cx
                .security()
                .list_security_scans(Some(device.id), Some(ScanStatus::Running), 5)
                .await?
            {
                settle(cx, s).await?;
            }
            cx.security()
                .latest_completed_scan(device.id)
                .await?
                .ok_or_else(|| {
                    ToolError::not_found("No completed security scan for this device")
                        .hint("run security_scan with action scan first")
                })?
        }
        (None, None) => return Err(ToolError::invalid("results needs scanId or deviceId")),
    };
    let failed_only = input.failed_only.unwrap_or(false);
    let stored = cx.security().scan_findings(scan.id).await?;
    let news: Vec<NewFinding> = stored
        .iter()
        .map(|f| NewFinding {
            check: f.check.clone(),
            status: f.status,
            severity: f.severity,
            title: f.title.clone(),
            evidence: f.evidence.clone(),
        })
        .collect();
    let posture = (scan.status == ScanStatus::Completed).then(|| posture_of(&news));
    let summary = summary(cx, &scan).await?;
    let findings = stored
        .into_iter()
        .filter(|f| !failed_only || f.status != CheckStatus::Pass)
        .map(|f| FindingView {
            check: f.check,
            status: f.status.to_string(),
            severity: f.severity.to_string(),
            title: f.title,
            evidence: f.evidence,
        })
        .collect();
    let flagged = cx
        .security()
        .scan_flagged_files(scan.id)
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    let message = (scan.status == ScanStatus::Running)
        .then(|| "The scan is still running; ask again shortly".to_owned());
    Ok(ScanOutput {
        results: Some(ResultsView {
            scan: ScanView::new(&scan, summary),
            findings,
            flagged_files: flagged,
            posture,
        }),
        message,
        ..Default::default()
    })
}

/// The agent's quarantine answer as a record to store.
fn quarantine_record<R: Reach>(
    cx: &ToolCx<'_, R>,
    device: DeviceId,
    flagged: &FlaggedFile,
    result: &Value,
) -> Result<NewQuarantine, ToolError> {
    let s = |k: &str| result.get(k).and_then(Value::as_str).map(str::to_owned);
    let n = |k: &str| result.get(k).and_then(Value::as_i64).unwrap_or(0);
    let agent_ref = s("quarantineId").ok_or_else(|| {
        ToolError::new(
            ErrorCode::UpstreamError,
            "the agent's answer names no quarantine id",
        )
    })?;
    let state = match s("state").as_deref() {
        Some("removed") => QuarantineState::Removed,
        _ => QuarantineState::Quarantined,
    };
    Ok(NewQuarantine {
        device_id: device,
        flagged_id: Some(flagged.id),
        agent_ref,
        original_path: flagged.path.clone(),
        sha256: s("sha256").unwrap_or_default(),
        mode: s("mode").unwrap_or_else(|| flagged.mode.clone()),
        uid: n("uid"),
        gid: n("gid"),
        size_bytes: n("sizeBytes"),
        state,
        created_by: cx.actor.to_string(),
    })
}

/// quarantine, or remove of a flagged file (quarantined, then its content deleted).
async fn do_quarantine<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
    delete: bool,
) -> Result<ScanOutput, ToolError> {
    let flagged = find_flagged(cx, input.flagged_file_id.as_deref()).await?;
    safe_path("path", &flagged.path)?;
    let device = online_device(cx, &flagged.device_id.to_string()).await?;
    let kind = CommandKind::QuarantineFile {
        path: flagged.path.clone(),
        expected_sha256: flagged.sha256.clone(),
        delete,
    };
    let mut opts = RunOptions::new(60, 60);
    opts.audit_action = if delete {
        "device.security_remove"
    } else {
        "device.security_quarantine"
    };
    let done = require_completed(run(cx, &device, kind, opts).await?)?;
    let Some(result) = done.result.as_ref().filter(|_| done.completed()) else {
        return Ok(ScanOutput {
            message: done
                .message
                .or_else(|| Some("the quarantine is still running on the device".into())),
            ..Default::default()
        });
    };
    let record = quarantine_record(cx, device.id, &flagged, result)?;
    let audit = AuditEvent::new(
        cx.actor.clone(),
        if delete {
            "security_scan.remove"
        } else {
            "security_scan.quarantine"
        },
        "security_quarantine",
    )
    .request(cx.request_id.clone());
    let entry = cx.security().record_quarantine(record, audit).await?;
    Ok(ScanOutput {
        message: Some(if delete {
            format!(
                "{} was deleted (its quarantine record is kept)",
                entry.original_path
            )
        } else {
            format!(
                "{} is quarantined; restore it with quarantineId {}",
                entry.original_path, entry.id
            )
        }),
        quarantine: Some(entry.into()),
        ..Default::default()
    })
}

/// remove of a quarantined file, or restore.
async fn do_quarantined<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
    restore: bool,
) -> Result<ScanOutput, ToolError> {
    let entry = find_quarantine(cx, input.quarantine_id.as_deref()).await?;
    if entry.state != QuarantineState::Quarantined {
        return Err(ToolError::new(
            ErrorCode::Conflict,
            format!(
                "the file is {}; only quarantined files can be {}",
                entry.state,
                if restore { "restored" } else { "removed" }
            ),
        ));
    }
    if restore {
        safe_path("path", &entry.original_path)?;
    }
    let device = online_device(cx, &entry.device_id.to_string()).await?;
    let (kind, action, to) = if restore {
        (
            CommandKind::RestoreQuarantined {
                quarantine_id: entry.agent_ref.clone(),
            },
            "device.security_restore",
            QuarantineState::Restored,
        )
    } else {
        (
            CommandKind::DeleteQuarantined {
                quarantine_id: entry.agent_ref.clone(),
            },
            "device.security_remove",
            QuarantineState::Removed,
        )
    };
    let mut opts = RunOptions::new(60, 60);
    opts.audit_action = action;
    let done = require_completed(run(cx, &device, kind, opts).await?)?;
    if !done.completed() {
        return Ok(ScanOutput {
            message: done.message,
            ..Default::default()
        });
    }
    let audit = AuditEvent::new(
        cx.actor.clone(),
        if restore {
            "security_scan.restore"
        } else {
            "security_scan.remove"
        },
        "security_quarantine",
    )
    .request(cx.request_id.clone());
    let entry = cx
        .security()
        .set_quarantine_state(
            entry.id,
            QuarantineState::Quarantined,
            to,
            &cx.actor.to_string(),
            audit,
        )
        .await?;
    Ok(ScanOutput {
        message: Some(format!("{} is {}", entry.original_path, entry.state)),
        quarantine: Some(entry.into()),
        ..Default::default()
    })
}

pub(crate) struct SecurityScanTool;

impl Tool for SecurityScanTool {
    const NAME: &'static str = "security_scan";
    const TITLE: &'static str = "Security scan";
    const DESCRIPTION: &'static str = "Run read-only security checks on Linux devices (firewall, pending security updates, disk encryption, SSH root login and password auth, world-writable system files, listening services, antivirus/EDR, indicator paths), check status, read results (findings with severity and evidence, flagged files, posture), and quarantine, remove or restore flagged files (restorable quarantine on the agent); schedule a scan (intervalMinutes, or cron in timeZone; each occurrence is this call as the scheduler), list_schedules, unschedule. Every action is Tier 3.";
    const TIER: Tier = Tier::T3;
    const PERMISSION: Permission = Permission::DevicesExecute;
    const RATE_LIMIT: Option<RateLimit> = per(3, 600);
    type Actions = ScanAction;
    type Input = ScanInput;
    type Output = ScanOutput;
    type Reach = (
        reach::Commands,
        reach::Deployments,
        reach::Devices,
        reach::Security,
        reach::Tenancy,
        reach::Fleet,
    );

    /// Checks what the call names exists in the caller's organization (and the device is
    /// online for actions that reach it); a quarantine is pinned to the flagged file's sha256.
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        match input.action {
            ScanAction::Scan => {
                check_scan_paths(input)?;
                scan_devices(cx, input).await?;
                Ok(None)
            }
            ScanAction::Schedule => {
                check_scan_paths(input)?;
                scan_target_exists(cx, input).await?;
                schedule_cadence(input)?;
                Ok(None)
            }
            ScanAction::Unschedule => {
                find_schedule(cx, input).await?;
                Ok(None)
            }
            ScanAction::ListSchedules => Ok(None),
            ScanAction::Status | ScanAction::Results => {
                if let Some(raw) = &input.scan_id {
                    find_scan(cx, raw).await?;
                }
                if let Some(d) = &input.device_id {
                    find_device(cx, d).await?;
                }
                Ok(None)
            }
            ScanAction::Quarantine => {
                let f = find_flagged(cx, input.flagged_file_id.as_deref()).await?;
                online_device(cx, &f.device_id.to_string()).await?;
                Ok(Some(Pin {
                    summary: format!(
                        "{} (sha256 {})",
                        f.path,
                        f.sha256.as_deref().unwrap_or("not hashed")
                    ),
                    data: serde_json::json!({ "flaggedFileId": f.id, "path": f.path, "sha256": f.sha256 }),
                }))
            }
            ScanAction::Remove | ScanAction::Restore => {
                if input.action == ScanAction::Remove && input.quarantine_id.is_none() {
                    let f = find_flagged(cx, input.flagged_file_id.as_deref()).await?;
                    online_device(cx, &f.device_id.to_string()).await?;
                    return Ok(Some(Pin {
                        summary: format!(
                            "delete {} (sha256 {})",
                            f.path,
                            f.sha256.as_deref().unwrap_or("not hashed")
                        ),
                        data: serde_json::json!({ "flaggedFileId": f.id, "path": f.path, "sha256": f.sha256 }),
                    }));
                }
                let q = find_quarantine(cx, input.quarantine_id.as_deref()).await?;
                online_device(cx, &q.device_id.to_string()).await?;
                Ok(Some(Pin {
                    summary: format!("{} ({})", q.original_path, q.state),
                    data: serde_json::json!({ "quarantineId": q.id, "state": q.state }),
                }))
            }
        }
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            ScanAction::Scan => do_scan(cx, &input).await,
            ScanAction::Status => do_status(cx, &input).await,
            ScanAction::Results => do_results(cx, &input).await,
            ScanAction::Quarantine => do_quarantine(cx, &input, false).await,
            ScanAction::Remove if input.quarantine_id.is_some() => {
                do_quarantined(cx, &input, false).await
            }
            ScanAction::Remove => do_quarantine(cx, &input, true).await,
            ScanAction::Restore => do_quarantined(cx, &input, true).await,
            ScanAction::Schedule => do_schedule(cx, &input).await,
            ScanAction::ListSchedules => Ok(ScanOutput {
                schedules: Some(
                    cx.security()
                        .list_scan_schedules()
                        .await?
                        .into_iter()
                        .map(Into::into)
                        .collect(),
                ),
                ..ScanOutput::default()
            }),
            ScanAction::Unschedule => {
                let s = find_schedule(cx, &input).await?;
                let audit = AuditEvent::new(
                    cx.actor.clone(),
                    "security.schedule.delete",
                    "security_scan_schedule",
                )
                .request(cx.request_id.clone());
                let s = cx.security().delete_scan_schedule(s.id, audit).await?;
                Ok(ScanOutput {
                    message: Some(format!(
                        "schedule {:?} deleted; its past scans stay",
                        s.name
                    )),
                    schedule: Some(s.into()),
                    ..ScanOutput::default()
                })
            }
        }
    }
}

const SCHEDULE_NOT_FOUND: &str = "Scan schedule not found or access denied";

async fn find_schedule<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
) -> Result<breeze_store::ScanSchedule, ToolError> {
    let raw = input
        .schedule_id
        .as_deref()
        .ok_or_else(|| ToolError::invalid("scheduleId is required for unschedule"))?;
    let id = uuid_arg(raw, SCHEDULE_NOT_FOUND)?;
    cx.security()
        .get_scan_schedule(id)
        .await
        .map_err(|e| match e {
            StoreError::NotFound(_) => ToolError::not_found(SCHEDULE_NOT_FOUND),
            other => other.into(),
        })
}

/// A schedule's devices or target exist in the organization (online or not: they are
/// scanned as they stand at each occurrence).
async fn scan_target_exists<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
) -> Result<(), ToolError> {
    match (&input.device_ids, &input.target) {
        (None, None) => Err(ToolError::invalid("schedule needs deviceIds or target")),
        (Some(ids), _) => {
            for raw in ids {
                find_device(cx, raw).await?;
            }
            Ok(())
        }
        (None, Some(ScanTarget::Organization)) => Ok(()),
        (None, Some(ScanTarget::Site { site_id })) => {
            let id = SiteId(uuid_arg(site_id, "Site not found or access denied")?);
            cx.tenancy()
                .get_site(id)
                .await
                .map(drop)
                .map_err(|_| ToolError::not_found("Site not found or access denied"))
        }
        (None, Some(ScanTarget::Group { group_id })) => {
            let id = DeviceGroupId(uuid_arg(group_id, "Group not found or access denied")?);
            cx.tenancy()
                .get_group(id)
                .await
                .map(drop)
                .map_err(|_| ToolError::not_found("Group not found or access denied"))
        }
    }
}

fn schedule_cadence(input: &ScanInput) -> Result<breeze_store::ScanCadence, ToolError> {
    // A cron, when given, is the cadence (it says more than an interval).
    match (input.interval_minutes, &input.cron) {
        (Some(m), None) => Ok(breeze_store::ScanCadence::Interval(m)),
        (_, Some(cron)) => {
            let time_zone = input.time_zone.clone().unwrap_or_else(|| "UTC".into());
            breeze_core::CronSchedule::parse(cron, &time_zone).map_err(ToolError::invalid)?;
            Ok(breeze_store::ScanCadence::Cron {
                cron: cron.clone(),
                time_zone,
            })
        }
        (None, None) => Err(ToolError::invalid("schedule needs intervalMinutes or cron")),
    }
}

/// `schedule`: stores the scan call for the server's worker to make at each occurrence, as
/// this caller.
async fn do_schedule<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &ScanInput,
) -> Result<ScanOutput, ToolError> {
    let cadence = schedule_cadence(input)?;
    let mut arguments = serde_json::Map::new();
    if let Some(ids) = &input.device_ids {
        arguments.insert("deviceIds".into(), serde_json::json!(ids));
    } else if let Some(t) = &input.target {
        arguments.insert("target".into(), target_json(t));
    }
    if let Some(r) = &input.extra_roots {
        arguments.insert("extraRoots".into(), serde_json::json!(r));
    }
    if let Some(p) = &input.indicator_paths {
        arguments.insert("indicatorPaths".into(), serde_json::json!(p));
    }
    let audit = AuditEvent::new(
        cx.actor.clone(),
        "security.schedule.create",
        "security_scan_schedule",
    )
    .request(cx.request_id.clone());
    let s = cx
        .security()
        .create_scan_schedule(
            breeze_store::NewScanSchedule {
                name: input
                    .name
                    .clone()
                    .unwrap_or_else(|| "scheduled security scan".into()),
                arguments: Value::Object(arguments),
                cadence,
                owner_actor: cx.actor.to_string(),
            },
            audit,
        )
        .await?;
    let view = ScheduleView::from(s);
    Ok(ScanOutput {
        message: Some(format!(
            "scheduled; the first scan runs at {} as {} (each occurrence is a security_scan call: Tier 3, its rate limit, approvals as for that caller)",
            view.next_run_at.as_deref().unwrap_or("never"),
            view.owner
        )),
        schedule: Some(view),
        ..ScanOutput::default()
    })
}

fn target_json(t: &ScanTarget) -> Value {
    match t {
        ScanTarget::Organization => serde_json::json!({ "kind": "organization" }),
        ScanTarget::Site { site_id } => serde_json::json!({ "kind": "site", "siteId": site_id }),
        ScanTarget::Group { group_id } => {
            serde_json::json!({ "kind": "group", "groupId": group_id })
        }
    }
}
