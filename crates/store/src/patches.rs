//! Patch management (migrations 0024, 0068): what each device's package manager offers (its last
//! scan), decisions per package (approve, decline, defer until a date; organization-wide or
//! for the devices a configuration policy covers), install and rollback jobs with each
//! device's result, and the history of every package change an agent reported.
//!
//! Scans arrive two ways, both through [`Store::record_patch_scan`]: the agent's own schedule
//! (with an inventory) and a scan a tool asked for (a `patch_scan` command's result, taken by
//! [`Store::record_patch_command`] when the gateway stores it). Install and rollback results
//! come back the same way and settle the job: every device answered → `succeeded`, `partial`
//! or `failed`. Decisions, jobs and scans asked for are audited; what agents report is not
//! (it is the agent's data, like inventory).

use std::collections::HashMap;

use breeze_agent_proto::{
    AvailablePatch, CommandKind, PackageOutcome, PatchInstallReport, PatchScanReport,
};
pub use breeze_core::PatchJobKind;
use breeze_core::{
    AuditEvent, CommandStatus, DeviceId, OrgId, PackageStatus, PatchJobStatus, PatchPartStatus,
    Timestamp,
};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    CommandRecord, CrossOrg, Result, Store, StoreError, audit,
    sql::{Arg, Sql, Tx, sql},
};

/// The most rows one page of available patches holds.
pub const MAX_PATCH_PAGE: u32 = 500;
/// The most packages one decision, job or device part names.
pub const MAX_PATCH_PACKAGES: usize = 500;
/// The most devices one job reaches.
pub const MAX_PATCH_JOB_DEVICES: usize = 1000;
/// The longest package name or version accepted.
const MAX_PACKAGE_CHARS: usize = 200;

/// One update a device's last scan found.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct DevicePatch {
    pub device_id: DeviceId,
    pub name: String,
    pub installed_version: Option<String>,
    pub available_version: String,
    pub arch: Option<String>,
    pub source: Option<String>,
    pub security: bool,
    pub severity: Option<String>,
    pub advisory: Option<String>,
    pub scanned_at: Timestamp,
}

/// A device's last scan, and a scan asked for and not answered yet.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct PatchScan {
    pub device_id: DeviceId,
    pub manager: Option<String>,
    pub scanned_at: Option<Timestamp>,
    pub patch_count: i64,
    pub security_count: i64,
    pub reboot_required: bool,
    #[sqlx(json)]
    pub logged_in_users: Vec<String>,
    pub requested_at: Option<Timestamp>,
    pub requested_by: Option<String>,
    pub command_id: Option<Uuid>,
    pub error: Option<String>,
    /// The scan's patches counted by severity and security.
    #[sqlx(json)]
    pub tallies: Vec<PatchTally>,
}

/// How many of a scan's patches have one severity and security flag: a device's share of the
/// fleet's compliance, counted when the scan is written so that the fleet's figure is a sum of
/// these, not a read of every available patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PatchTally {
    /// Lower-cased, as stored on the patches.
    pub severity: Option<String>,
    pub security: bool,
    pub count: u32,
}

/// Counts `patches` by severity and security, in a stable order.
fn tallies<'a>(patches: impl IntoIterator<Item = &'a AvailablePatch>) -> Vec<PatchTally> {
    let mut counts: std::collections::BTreeMap<(Option<String>, bool), u32> = Default::default();
    for p in patches {
        let severity = p.severity.as_deref().map(str::to_lowercase);
        *counts.entry((severity, p.security)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((severity, security), count)| PatchTally {
            severity,
            security,
            count,
        })
        .collect()
}

/// Which available patches a listing shows.
#[derive(Debug, Clone, Default)]
pub struct PatchFilter {
    pub device: Option<DeviceId>,
    pub security_only: bool,
    /// Exact severity (critical, important, moderate, low).
    pub severity: Option<String>,
    /// Part of the package name.
    pub search: Option<String>,
    /// Only packages of these names (any name when empty).
    pub names: Vec<String>,
    /// Keyset: rows after this (device, name).
    pub after: Option<(DeviceId, String)>,
    pub limit: u32,
}

/// A decision about a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchDecision {
    Approved,
    Declined,
    Deferred,
}

impl PatchDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            PatchDecision::Approved => "approved",
            PatchDecision::Declined => "declined",
            PatchDecision::Deferred => "deferred",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        match s {
            "approved" => Ok(Self::Approved),
            "declined" => Ok(Self::Declined),
            "deferred" => Ok(Self::Deferred),
            other => Err(StoreError::Corrupt(format!("patch decision {other:?}"))),
        }
    }
}

/// A stored decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchApproval {
    pub id: Uuid,
    /// The configuration policy whose devices it covers; `None`: the whole organization.
    pub policy_id: Option<Uuid>,
    pub package_name: String,
    /// `None`: any version.
    pub version: Option<String>,
    pub decision: PatchDecision,
    pub defer_until: Option<Timestamp>,
    pub note: Option<String>,
    pub decided_by: String,
    pub decided_at: Timestamp,
}

impl PatchApproval {
    /// The decision as it stands at `now` for a candidate `version`: a deferral past its date,
    /// or a decision about another version, is no decision.
    pub fn effective(&self, version: &str, now: Timestamp) -> Option<PatchDecision> {
        if self.version.as_deref().is_some_and(|v| v != version) {
            return None;
        }
        match (self.decision, self.defer_until) {
            (PatchDecision::Deferred, Some(until)) if until <= now => None,
            (d, _) => Some(d),
        }
    }
}

#[derive(sqlx::FromRow)]
struct ApprovalRow {
    id: Uuid,
    policy_id: Option<Uuid>,
    package_name: String,
    version: Option<String>,
    decision: String,
    defer_until: Option<Timestamp>,
    note: Option<String>,
    decided_by: String,
    decided_at: Timestamp,
}

impl ApprovalRow {
    fn into_approval(self) -> Result<PatchApproval> {
        Ok(PatchApproval {
            id: self.id,
            policy_id: self.policy_id,
            package_name: self.package_name,
            version: self.version,
            decision: PatchDecision::parse(&self.decision)?,
            defer_until: self.defer_until,
            note: self.note,
            decided_by: self.decided_by,
            decided_at: self.decided_at,
        })
    }
}

/// A decision to record (it replaces the package's decision in the same scope).
#[derive(Debug, Clone)]
pub struct NewPatchDecision {
    pub package_name: String,
    pub version: Option<String>,
    pub policy_id: Option<Uuid>,
    pub decision: PatchDecision,
    /// Required for a deferral, and in the future.
    pub defer_until: Option<Timestamp>,
    pub note: Option<String>,
    pub decided_by: String,
}

/// An install or rollback job.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct PatchJob {
    pub id: Uuid,
    pub org_id: OrgId,
    pub kind: PatchJobKind,
    /// never, if_needed or always.
    pub reboot_policy: String,
    pub reboot_with_users: bool,
    /// now or maintenance_window.
    pub schedule: String,
    pub window_id: Option<Uuid>,
    pub window_name: Option<String>,
    pub status: PatchJobStatus,
    pub requested_by: String,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
}

/// One device's part of a job.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct PatchJobDevice {
    pub job_id: Uuid,
    pub device_id: DeviceId,
    /// Install: package names; rollback: `{name, version}` objects.
    #[sqlx(json)]
    pub packages: Value,
    pub status: PatchPartStatus,
    pub command_id: Option<Uuid>,
    #[sqlx(json(nullable))]
    pub results: Option<Value>,
    pub reboot: Option<String>,
    pub reboot_detail: Option<String>,
    pub error: Option<String>,
    pub updated_at: Timestamp,
}

/// A job to create.
#[derive(Debug, Clone)]
pub struct NewPatchJob {
    pub kind: PatchJobKind,
    /// never, if_needed or always.
    pub reboot_policy: String,
    pub reboot_with_users: bool,
    /// `None`: now; else the maintenance window it waits for.
    pub window: Option<(Uuid, String)>,
    /// Each device and what it is asked to do (see [`PatchJobDevice::packages`]).
    pub devices: Vec<(DeviceId, Value)>,
    pub requested_by: String,
}

/// One package change an agent reported.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct PatchHistoryEntry {
    pub id: Uuid,
    pub device_id: DeviceId,
    pub job_id: Option<Uuid>,
    pub package_name: String,
    pub action: String,
    pub from_version: Option<String>,
    pub to_version: Option<String>,
    pub status: PackageStatus,
    pub error: Option<String>,
    pub at: Timestamp,
}

const PATCH_COLUMNS: &str = "device_id, name, installed_version, available_version, arch, \
    source, security, severity, advisory, scanned_at";
const SCAN_COLUMNS: &str = "device_id, manager, scanned_at, patch_count, security_count, \
    reboot_required, logged_in_users, requested_at, requested_by, command_id, error, tallies";
const APPROVAL_COLUMNS: &str = "id, policy_id, package_name, version, decision, defer_until, \
    note, decided_by, decided_at";
const JOB_COLUMNS: &str = "id, org_id, kind, reboot_policy, reboot_with_users, schedule, \
    window_id, window_name, status, requested_by, created_at, started_at, finished_at";
const JOB_DEVICE_COLUMNS: &str = "job_id, device_id, packages, status, command_id, results, \
    reboot, reboot_detail, error, updated_at";
const HISTORY_COLUMNS: &str = "id, device_id, job_id, package_name, action, from_version, \
    to_version, status, error, at";

/// Checks a package name (or version): 1–200 characters, no whitespace or control characters.
pub fn check_package_text(field: &str, value: &str) -> Result<()> {
    let n = value.chars().count();
    if n == 0 || n > MAX_PACKAGE_CHARS || value.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(StoreError::Invalid(format!(
            "{field}: {value:?} is not a package name or version (1–{MAX_PACKAGE_CHARS} \
             characters, no spaces)"
        )));
    }
    if value.starts_with('-') {
        return Err(StoreError::Invalid(format!(
            "{field}: {value:?} may not start with '-'"
        )));
    }
    Ok(())
}

/// Writes a scan report in `tx`: the device's patches replaced, its scan row upserted (and a
/// pending request answered).
async fn write_scan(
    tx: &mut Tx,
    org: OrgId,
    device: DeviceId,
    report: &PatchScanReport,
    now: Timestamp,
) -> Result<()> {
    sql("DELETE FROM device_patches WHERE device_id = $1 AND org_id = $2")
        .bind(device)
        .bind(org)
        .execute(&mut *tx)
        .await?;
    let mut seen = std::collections::HashSet::new();
    let patches: Vec<_> = report
        .patches
        .iter()
        .filter(|p| check_package_text("name", &p.name).is_ok() && seen.insert(p.name.clone()))
        .take(5000)
        .collect();
    for chunk in patches.chunks(50) {
        let mut q = sql(format!(
            "INSERT INTO device_patches (org_id, {PATCH_COLUMNS}) VALUES "
        ));
        for (i, p) in chunk.iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            q.push_row([
                Arg::from(org),
                Arg::from(device),
                Arg::from(p.name.as_str()),
                Arg::from(p.installed_version.clone()),
                Arg::from(p.available_version.as_str()),
                Arg::from(p.arch.clone()),
                Arg::from(p.source.clone()),
                Arg::from(p.security),
                Arg::from(p.severity.as_deref().map(str::to_lowercase)),
                Arg::from(p.advisory.clone()),
                Arg::from(report.scanned_at),
            ]);
        }
        q.execute(&mut *tx).await?;
    }
    let security = patches.iter().filter(|p| p.security).count();
    sql(
        "INSERT INTO patch_scans (device_id, org_id, manager, scanned_at, patch_count, \
         security_count, reboot_required, logged_in_users, tallies) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (device_id) DO UPDATE SET manager = excluded.manager, \
         scanned_at = excluded.scanned_at, patch_count = excluded.patch_count, \
         security_count = excluded.security_count, reboot_required = excluded.reboot_required, \
         logged_in_users = excluded.logged_in_users, tallies = excluded.tallies, \
         command_id = NULL, error = NULL",
    )
    .bind(device)
    .bind(org)
    .bind(report.manager.as_str())
    .bind(report.scanned_at.min(now))
    .bind(i64::try_from(patches.len()).unwrap_or(i64::MAX))
    .bind(i64::try_from(security).unwrap_or(i64::MAX))
    .bind(report.reboot_required)
    .bind(Arg::json(&report.logged_in_users))
    .bind(Arg::json(&tallies(patches.iter().copied())))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

impl Store {
    /// Stores a device's scan report (the agent's own schedule, or a `patch_scan` result).
    pub async fn record_patch_scan(
        &self,
        device: DeviceId,
        org: OrgId,
        report: &PatchScanReport,
    ) -> Result<()> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        write_scan(&mut tx, org, device, report, now).await?;
        tx.commit().await
    }

    /// Takes what a finished patch command (scan, install, rollback, removal) reports: a scan
    /// is stored; an install or rollback settles its device's part of the job, adds each
    /// package change to the history, stores the scan made after it, and settles the job once
    /// every device has answered; a removal (no job) adds each named package's outcome to the
    /// history as `remove` — `failed` with the reason when the agent gave no answer. Other
    /// commands, and installs of no job, change nothing.
    pub async fn record_patch_command(&self, cmd: &CommandRecord) -> Result<()> {
        let org = cmd.org_id;
        let device = cmd.device_id;
        let now = self.clock.now();
        let completed = cmd.status == CommandStatus::Completed;
        match cmd.kind.as_str() {
            "patch_scan" => {
                let report = cmd
                    .result
                    .clone()
                    .filter(|_| completed)
                    .and_then(|v| serde_json::from_value::<PatchScanReport>(v).ok());
                match report {
                    Some(r) => self.record_patch_scan(device, org, &r).await,
                    None => {
                        let error = cmd
                            .error
                            .clone()
                            .unwrap_or_else(|| format!("scan {}", cmd.status.as_str()));
                        sql("UPDATE patch_scans SET command_id = NULL, error = $1 \
                             WHERE device_id = $2 AND org_id = $3 AND command_id = $4")
                        .bind(error)
                        .bind(device)
                        .bind(org)
                        .bind(cmd.id)
                        .execute(self)
                        .await?;
                        Ok(())
                    }
                }
            }
            "patch_install" | "patch_rollback" => {
                let action = if cmd.kind == "patch_install" {
                    "install"
                } else {
                    "rollback"
                };
                let part = sql(format!(
                    "SELECT {JOB_DEVICE_COLUMNS} FROM patch_job_devices \
                     WHERE command_id = $1 AND org_id = $2 AND device_id = $3"
                ))
                .bind(cmd.id)
                .bind(org)
                .bind(device)
                .fetch_optional::<PatchJobDevice>(self)
                .await?;
                let Some(part) = part else { return Ok(()) };
                if part.status != PatchPartStatus::Sent {
                    return Ok(());
                }
                let report = cmd
                    .result
                    .clone()
                    .filter(|_| completed)
                    .and_then(|v| serde_json::from_value::<PatchInstallReport>(v).ok());
                let mut tx = Tx::begin(&self.pool).await?;
                match &report {
                    Some(r) => {
                        let good = r
                            .packages
                            .iter()
                            .filter(|o| o.status.changed_as_asked())
                            .count();
                        let status = if !r.packages.is_empty() && good == r.packages.len() {
                            PatchPartStatus::Succeeded
                        } else if good > 0 {
                            PatchPartStatus::Partial
                        } else {
                            PatchPartStatus::Failed
                        };
                        sql(
                            "UPDATE patch_job_devices SET status = $1, results = $2, reboot = $3, \
                             reboot_detail = $4, updated_at = $5 \
                             WHERE job_id = $6 AND device_id = $7 AND org_id = $8",
                        )
                        .bind(status.as_str())
                        .bind(Arg::json(&r.packages))
                        .bind(r.reboot.as_str())
                        .bind(r.reboot_detail.clone())
                        .bind(now)
                        .bind(part.job_id)
                        .bind(device)
                        .bind(org)
                        .execute(&mut tx)
                        .await?;
                        for o in &r.packages {
                            insert_history(&mut tx, org, device, Some(part.job_id), action, o, now)
                                .await?;
                        }
                        if let Some(scan) = &r.scan {
                            write_scan(&mut tx, org, device, scan, now).await?;
                        }
                    }
                    None => {
                        let error = cmd.error.clone().unwrap_or_else(|| {
                            format!("the agent's answer was {}", cmd.status.as_str())
                        });
                        sql(
                            "UPDATE patch_job_devices SET status = 'failed', error = $1, \
                             updated_at = $2 WHERE job_id = $3 AND device_id = $4 AND org_id = $5",
                        )
                        .bind(error)
                        .bind(now)
                        .bind(part.job_id)
                        .bind(device)
                        .bind(org)
                        .execute(&mut tx)
                        .await?;
                    }
                }
                settle_job(&mut tx, org, part.job_id, now).await?;
                tx.commit().await
            }
            "package_remove" => {
                let report = cmd
                    .result
                    .clone()
                    .filter(|_| completed)
                    .and_then(|v| serde_json::from_value::<PatchInstallReport>(v).ok());
                // Each package the agent answered for, or — no answer (failed, timed out,
                // cancelled) — each package the command named, failed with the reason.
                let outcomes: Vec<PackageOutcome> = match report {
                    Some(r) => r.packages,
                    None => {
                        let named = match serde_json::from_value::<CommandKind>(cmd.payload.clone())
                        {
                            Ok(CommandKind::PackageRemove { packages }) => packages,
                            _ => Vec::new(),
                        };
                        let error = cmd.error.clone().unwrap_or_else(|| {
                            format!("the agent's answer was {}", cmd.status.as_str())
                        });
                        named
                            .into_iter()
                            .map(|name| PackageOutcome {
                                name,
                                status: PackageStatus::Failed,
                                from_version: None,
                                to_version: None,
                                error: Some(error.clone()),
                            })
                            .collect()
                    }
                };
                let mut tx = Tx::begin(&self.pool).await?;
                for o in &outcomes {
                    insert_history(&mut tx, org, device, None, "remove", o, now).await?;
                }
                tx.commit().await
            }
            _ => Ok(()),
        }
    }
}

impl CrossOrg<'_> {
    /// Jobs waiting for a maintenance window, of every organization (the dispatcher's list).
    pub async fn scheduled_patch_jobs(&self) -> Result<Vec<PatchJob>> {
        sql(format!(
            "SELECT {JOB_COLUMNS} FROM patch_jobs WHERE status = 'scheduled' ORDER BY created_at"
        ))
        .fetch_all(self)
        .await
    }
}

/// Sets a running job's final status once no device part is still scheduled or sent.
async fn settle_job(tx: &mut Tx, org: OrgId, job: Uuid, now: Timestamp) -> Result<()> {
    let counts: Vec<(PatchPartStatus, i64)> = sql(
        "SELECT status, COUNT(*) FROM patch_job_devices WHERE job_id = $1 AND org_id = $2 \
         GROUP BY status",
    )
    .bind(job)
    .bind(org)
    .fetch_all(&mut *tx)
    .await?;
    let count = |s: PatchPartStatus| {
        counts
            .iter()
            .filter(|(k, _)| *k == s)
            .map(|(_, n)| *n)
            .sum::<i64>()
    };
    if counts.iter().any(|(k, n)| k.is_open() && *n > 0) {
        return Ok(());
    }
    let total: i64 = counts.iter().map(|(_, n)| n).sum();
    let status = if count(PatchPartStatus::Succeeded) == total {
        PatchJobStatus::Succeeded
    } else if count(PatchPartStatus::Succeeded) + count(PatchPartStatus::Partial) > 0 {
        PatchJobStatus::Partial
    } else {
        PatchJobStatus::Failed
    };
    sql("UPDATE patch_jobs SET status = $1, finished_at = $2 \
         WHERE id = $3 AND org_id = $4 AND status = 'running'")
    .bind(status.as_str())
    .bind(now)
    .bind(job)
    .bind(org)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

impl crate::OrgPatches<'_> {
    /// Available patches of the organization's devices (their last scans), by device then
    /// package name, in keyset pages.
    pub async fn list_device_patches(&self, f: &PatchFilter) -> Result<Vec<DevicePatch>> {
        self.device_patches_query(f).fetch_all(self).await
    }

    /// Every available patch `f` matches (its `after` and `limit` ignored), by device then
    /// package name: [`Self::list_device_patches`]'s pages, read one after another. Callers
    /// bound `f` to what they need (a severity, named packages), never the whole fleet blindly.
    pub async fn every_device_patch(&self, f: &PatchFilter) -> Result<Vec<DevicePatch>> {
        let mut page_filter = PatchFilter {
            after: None,
            limit: MAX_PATCH_PAGE,
            ..f.clone()
        };
        let mut all = Vec::new();
        loop {
            let page = self.list_device_patches(&page_filter).await?;
            let full = page.len() == MAX_PATCH_PAGE as usize;
            page_filter.after = page.last().map(|p| (p.device_id, p.name.clone()));
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }

    /// The plan of a [`Self::list_device_patches`] page resumed after `after`, for a test to
    /// hold it to an index range that starts at the cursor.
    #[cfg(feature = "testing")]
    pub async fn explain_device_patches_after(&self, after: (DeviceId, &str)) -> Result<String> {
        self.device_patches_query(&PatchFilter {
            after: Some((after.0, after.1.to_owned())),
            limit: MAX_PATCH_PAGE,
            ..Default::default()
        })
        .explain(self)
        .await
    }

    /// The distinct names of the available patches `f` matches (its `after` and `limit`
    /// ignored), by name, at most `limit`: what a bulk approval without package names approves.
    pub async fn available_package_names(
        &self,
        f: &PatchFilter,
        limit: usize,
    ) -> Result<Vec<String>> {
        let mut q =
            sql("SELECT DISTINCT name FROM device_patches WHERE org_id = $1").bind(self.org);
        patch_conditions(&mut q, f);
        let p = q.arg(i64::try_from(limit).unwrap_or(i64::MAX));
        q.push(&format!(" ORDER BY name LIMIT {p}"));
        let rows: Vec<(String,)> = q.fetch_all(self).await?;
        Ok(rows.into_iter().map(|(n,)| n).collect())
    }

    fn device_patches_query(&self, f: &PatchFilter) -> Sql {
        let mut q = sql(format!(
            "SELECT {PATCH_COLUMNS} FROM device_patches WHERE org_id = $1"
        ))
        .bind(self.org);
        patch_conditions(&mut q, f);
        if let Some((d, n)) = &f.after {
            let pd = q.arg(*d);
            let pn = q.arg(n.as_str());
            // The redundant `device_id >=` starts the index range (`device_patches_org`) at
            // the cursor; the `OR` alone is no range, and each page would read every row
            // before it again (the fleet's compliance pages through all of them).
            q.push(&format!(
                " AND device_id >= {pd} AND (device_id > {pd} OR name > {pn})"
            ));
        }
        let limit = f.limit.clamp(1, MAX_PATCH_PAGE);
        let p = q.arg(i64::from(limit));
        q.push(&format!(" ORDER BY device_id, name LIMIT {p}"));
        q
    }

    /// How many updates each of `devices` has available, and how many of them are security
    /// updates (at most 200 devices; those with none are absent), in one query: the device
    /// list's column.
    pub async fn available_counts(
        &self,
        devices: &[DeviceId],
    ) -> Result<std::collections::HashMap<DeviceId, (i64, i64)>> {
        if devices.is_empty() || devices.len() > 200 {
            return Ok(std::collections::HashMap::new());
        }
        let mut q = sql(
            "SELECT device_id, COUNT(*), COALESCE(SUM(CASE WHEN security THEN 1 ELSE 0 END), 0) \
             FROM device_patches WHERE org_id = $1",
        )
        .bind(self.org);
        let list: Vec<String> = devices.iter().map(|d| q.arg(*d)).collect();
        q.push(&format!(
            " AND device_id IN ({}) GROUP BY device_id",
            list.join(", ")
        ));
        let rows: Vec<(DeviceId, i64, i64)> = q.fetch_all(self).await?;
        Ok(rows.into_iter().map(|(d, n, s)| (d, (n, s))).collect())
    }

    /// On how many devices each package is available, by package name and severity: of
    /// `devices` (every device of the organization when `None`), in bounded statements. What
    /// an auto-approving policy leaves missing, for the compliance's most-missing packages.
    pub async fn available_by_name(
        &self,
        devices: Option<&[DeviceId]>,
    ) -> Result<HashMap<(String, Option<String>), u64>> {
        let mut out: HashMap<(String, Option<String>), u64> = HashMap::new();
        let select = "SELECT name, severity, COUNT(*) FROM device_patches WHERE org_id = $1";
        let mut statements = Vec::new();
        match devices {
            None => statements.push(sql(select).bind(self.org)),
            Some(ids) => {
                for chunk in ids.chunks(500) {
                    let mut q = sql(select).bind(self.org);
                    let list: Vec<String> = chunk.iter().map(|d| q.arg(*d)).collect();
                    q.push(&format!(" AND device_id IN ({})", list.join(", ")));
                    statements.push(q);
                }
            }
        }
        for mut q in statements {
            q.push(" GROUP BY name, severity");
            let rows: Vec<(String, Option<String>, i64)> = q.fetch_all(self).await?;
            for (name, severity, n) in rows {
                *out.entry((name, severity)).or_default() += u64::try_from(n).unwrap_or(0);
            }
        }
        Ok(out)
    }

    /// The organization's scan rows (one per device that ever scanned or was asked to).
    pub async fn patch_scans(&self) -> Result<Vec<PatchScan>> {
        sql(format!(
            "SELECT {SCAN_COLUMNS} FROM patch_scans WHERE org_id = $1 ORDER BY device_id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Notes that a scan was asked of `device` (command `command`), audited.
    pub async fn request_patch_scan(
        &self,
        device: DeviceId,
        command: Uuid,
        requested_by: &str,
        audit: AuditEvent,
    ) -> Result<()> {
        self.whole().devices().get_device(device).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO patch_scans (device_id, org_id, requested_at, requested_by, command_id) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (device_id) DO UPDATE SET \
             requested_at = excluded.requested_at, requested_by = excluded.requested_by, \
             command_id = excluded.command_id, error = NULL",
        )
        .bind(device)
        .bind(self.org)
        .bind(now)
        .bind(requested_by)
        .bind(command)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(self.org)
            .resource(device.0)
            .details(json!({ "commandId": command }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await
    }

    /// Records a decision (replacing the package's decision in the same scope), audited.
    pub async fn decide_patch(
        &self,
        new: NewPatchDecision,
        audit: AuditEvent,
    ) -> Result<PatchApproval> {
        check_package_text("packageName", &new.package_name)?;
        if let Some(v) = &new.version {
            check_package_text("version", v)?;
        }
        if let Some(n) = &new.note {
            crate::alerts::check_text("note", n, crate::alerts::MAX_NOTE_CHARS)?;
        }
        let now = self.store.clock.now();
        let defer_until = match (new.decision, new.defer_until) {
            (PatchDecision::Deferred, Some(t)) if t > now => Some(t),
            (PatchDecision::Deferred, Some(t)) => {
                return Err(StoreError::Invalid(format!(
                    "deferUntil: {} is not in the future",
                    t.to_rfc3339()
                )));
            }
            (PatchDecision::Deferred, None) => {
                return Err(StoreError::Invalid(
                    "deferUntil is required to defer a patch".into(),
                ));
            }
            (_, _) => None,
        };
        if let Some(p) = new.policy_id {
            let found = sql("SELECT COUNT(*) FROM config_policies WHERE id = $1 AND org_id = $2")
                .bind(p)
                .bind(self.org)
                .fetch_scalar::<i64>(self)
                .await?;
            if found == 0 {
                return Err(StoreError::NotFound("configuration policy"));
            }
        }
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        let mut del = sql("DELETE FROM patch_approvals WHERE org_id = $1 AND package_name = $2")
            .bind(self.org)
            .bind(new.package_name.as_str());
        match new.policy_id {
            Some(p) => {
                let ph = del.arg(p);
                del.push(&format!(" AND policy_id = {ph}"));
            }
            None => del.push(" AND policy_id IS NULL"),
        }
        del.execute(&mut tx).await?;
        sql(format!(
            "INSERT INTO patch_approvals (org_id, {APPROVAL_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(new.policy_id)
        .bind(new.package_name.as_str())
        .bind(new.version.clone())
        .bind(new.decision.as_str())
        .bind(defer_until)
        .bind(new.note.clone())
        .bind(new.decided_by.as_str())
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(json!({
            "package": new.package_name, "version": new.version, "policyId": new.policy_id,
            "decision": new.decision, "deferUntil": defer_until, "note": new.note,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(PatchApproval {
            id,
            policy_id: new.policy_id,
            package_name: new.package_name,
            version: new.version,
            decision: new.decision,
            defer_until,
            note: new.note,
            decided_by: new.decided_by,
            decided_at: now,
        })
    }

    /// Every decision of the organization, by package.
    pub async fn list_patch_approvals(&self) -> Result<Vec<PatchApproval>> {
        sql(format!(
            "SELECT {APPROVAL_COLUMNS} FROM patch_approvals WHERE org_id = $1 \
             ORDER BY package_name, decided_at"
        ))
        .bind(self.org)
        .fetch_all::<ApprovalRow>(self)
        .await?
        .into_iter()
        .map(ApprovalRow::into_approval)
        .collect()
    }

    /// Creates a job (`running` when it starts now, `scheduled` when it waits for a window)
    /// with one part per device, audited.
    pub async fn create_patch_job(&self, new: NewPatchJob, audit: AuditEvent) -> Result<PatchJob> {
        if new.devices.is_empty() {
            return Err(StoreError::Invalid(
                "a patch job needs at least one device".into(),
            ));
        }
        if !["never", "if_needed", "always"].contains(&new.reboot_policy.as_str()) {
            return Err(StoreError::Invalid(format!(
                "rebootPolicy: {:?} is not never, if_needed or always",
                new.reboot_policy
            )));
        }
        if new.devices.len() > MAX_PATCH_JOB_DEVICES {
            return Err(StoreError::Invalid(format!(
                "a patch job reaches at most {} devices",
                MAX_PATCH_JOB_DEVICES
            )));
        }
        for (d, _) in &new.devices {
            self.whole().devices().get_device(*d).await?;
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let (schedule, status, started) = match new.window {
            None => ("now", PatchJobStatus::Running, Some(now)),
            Some(_) => ("maintenance_window", PatchJobStatus::Scheduled, None),
        };
        let part_status = if new.window.is_some() {
            PatchPartStatus::Scheduled
        } else {
            PatchPartStatus::Sent
        };
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO patch_jobs ({JOB_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
             $10, $11, $12, NULL)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.kind.as_str())
        .bind(new.reboot_policy.as_str())
        .bind(new.reboot_with_users)
        .bind(schedule)
        .bind(new.window.as_ref().map(|w| w.0))
        .bind(new.window.as_ref().map(|w| w.1.clone()))
        .bind(status.as_str())
        .bind(new.requested_by.as_str())
        .bind(now)
        .bind(started)
        .execute(&mut tx)
        .await?;
        for (device, packages) in &new.devices {
            sql(format!(
                "INSERT INTO patch_job_devices ({JOB_DEVICE_COLUMNS}, org_id) VALUES \
                 ($1, $2, $3, $4, NULL, NULL, NULL, NULL, NULL, $5, $6)"
            ))
            .bind(id)
            .bind(*device)
            .bind(Arg::json(packages))
            .bind(part_status.as_str())
            .bind(now)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        }
        let audit = audit.org(self.org).resource(id).details(json!({
            "kind": new.kind, "rebootPolicy": new.reboot_policy,
            "rebootWithUsers": new.reboot_with_users,
            "window": new.window.as_ref().map(|w| json!({ "id": w.0, "name": w.1 })),
            "devices": new.devices.iter().map(|(d, p)| json!({ "deviceId": d, "packages": p }))
                .collect::<Vec<_>>(),
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_patch_job(id).await.map(|(j, _)| j)
    }

    /// Ties a device's part to the command that carries it (or fails it when the command
    /// could not be queued), and marks a scheduled job running.
    pub async fn patch_part_sent(
        &self,
        job: Uuid,
        device: DeviceId,
        command: std::result::Result<Uuid, String>,
    ) -> Result<()> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "UPDATE patch_jobs SET status = 'running', started_at = COALESCE(started_at, $1) \
             WHERE id = $2 AND org_id = $3 AND status IN ('scheduled', 'running')",
        )
        .bind(now)
        .bind(job)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        let (status, cmd, error) = match command {
            Ok(c) => (PatchPartStatus::Sent, Some(c), None),
            Err(e) => (PatchPartStatus::Failed, None, Some(e)),
        };
        sql(
            "UPDATE patch_job_devices SET status = $1, command_id = $2, error = $3, \
             updated_at = $4 WHERE job_id = $5 AND device_id = $6 AND org_id = $7",
        )
        .bind(status.as_str())
        .bind(cmd)
        .bind(error)
        .bind(now)
        .bind(job)
        .bind(device)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        settle_job(&mut tx, self.org, job, now).await?;
        tx.commit().await
    }

    /// A job and its device parts.
    pub async fn get_patch_job(&self, id: Uuid) -> Result<(PatchJob, Vec<PatchJobDevice>)> {
        let job: PatchJob = sql(format!(
            "SELECT {JOB_COLUMNS} FROM patch_jobs WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("patch job"))?;
        let parts = sql(format!(
            "SELECT {JOB_DEVICE_COLUMNS} FROM patch_job_devices WHERE job_id = $1 AND org_id = $2 \
             ORDER BY device_id"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_all(self)
        .await?;
        Ok((job, parts))
    }

    /// The newest jobs first.
    pub async fn list_patch_jobs(&self, limit: u32) -> Result<Vec<PatchJob>> {
        sql(format!(
            "SELECT {JOB_COLUMNS} FROM patch_jobs WHERE org_id = $1 \
             ORDER BY created_at DESC, id DESC LIMIT $2"
        ))
        .bind(self.org)
        .bind(i64::from(limit.clamp(1, 100)))
        .fetch_all(self)
        .await
    }

    /// Cancels a job still waiting for its window, audited; answers whether it was waiting.
    pub async fn cancel_patch_job(&self, id: Uuid, audit: AuditEvent) -> Result<bool> {
        self.get_patch_job(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE patch_jobs SET status = 'cancelled', finished_at = $1 \
                     WHERE id = $2 AND org_id = $3 AND status = 'scheduled'",
        )
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n > 0 {
            sql(
                "UPDATE patch_job_devices SET status = 'skipped', updated_at = $1 \
                 WHERE job_id = $2 AND org_id = $3",
            )
            .bind(now)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
            audit::insert(&mut tx, &audit.org(self.org).resource(id), now).await?;
        }
        tx.commit().await?;
        Ok(n > 0)
    }

    /// Package changes on the organization's devices, newest first.
    pub async fn patch_history(
        &self,
        device: Option<DeviceId>,
        package: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PatchHistoryEntry>> {
        let mut q = sql(format!(
            "SELECT {HISTORY_COLUMNS} FROM patch_history WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(d) = device {
            let p = q.arg(d);
            q.push(&format!(" AND device_id = {p}"));
        }
        if let Some(n) = package {
            let p = q.arg(n);
            q.push(&format!(" AND package_name = {p}"));
        }
        let p = q.arg(i64::from(limit.clamp(1, 500)));
        q.push(&format!(" ORDER BY at DESC, id DESC LIMIT {p}"));
        q.fetch_all(self).await
    }

    /// The version each of `packages` had on `device` before its latest successful install:
    /// what a rollback goes back to.
    pub async fn previous_versions(
        &self,
        device: DeviceId,
        packages: &[String],
    ) -> Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        for p in packages {
            let row: Option<(Option<String>,)> = sql(
                "SELECT from_version FROM patch_history WHERE org_id = $1 AND device_id = $2 \
                 AND package_name = $3 AND action = 'install' AND status = 'installed' \
                 ORDER BY at DESC, id DESC LIMIT 1",
            )
            .bind(self.org)
            .bind(device)
            .bind(p.as_str())
            .fetch_optional(self)
            .await?;
            if let Some((Some(v),)) = row {
                out.insert(p.clone(), v);
            }
        }
        Ok(out)
    }
}

/// The conditions of a [`PatchFilter`] (all but its keyset and limit), appended to `q`.
fn patch_conditions(q: &mut Sql, f: &PatchFilter) {
    if let Some(d) = f.device {
        let p = q.arg(d);
        q.push(&format!(" AND device_id = {p}"));
    }
    if f.security_only {
        let p = q.arg(true);
        q.push(&format!(" AND security = {p}"));
    }
    if let Some(s) = &f.severity {
        let p = q.arg(s.to_lowercase());
        q.push(&format!(" AND severity = {p}"));
    }
    if let Some(s) = &f.search {
        let p = q.arg(format!("%{}%", crate::sql::escape_like(&s.to_lowercase())));
        q.push(&format!(" AND LOWER(name) LIKE {p} ESCAPE '\\'"));
    }
    if !f.names.is_empty() {
        let list: Vec<String> = f.names.iter().map(|n| q.arg(n.as_str())).collect();
        q.push(&format!(" AND name IN ({})", list.join(", ")));
    }
}

/// Appends one package change to `patch_history`.
async fn insert_history(
    tx: &mut Tx,
    org: OrgId,
    device: DeviceId,
    job: Option<Uuid>,
    action: &str,
    o: &PackageOutcome,
    now: Timestamp,
) -> Result<()> {
    sql(format!(
        "INSERT INTO patch_history (org_id, {HISTORY_COLUMNS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
    ))
    .bind(org)
    .bind(Uuid::now_v7())
    .bind(device)
    .bind(job)
    .bind(o.name.as_str())
    .bind(action)
    .bind(o.from_version.clone())
    .bind(o.to_version.clone())
    .bind(o.status.as_str())
    .bind(o.error.clone())
    .bind(now)
    .execute(tx)
    .await
    .map(drop)
}

/// Whether [`Store::record_patch_command`] wants a finished command of kind tag `kind` (patch
/// scans, installs and rollbacks, and package removals).
pub fn records_patch_result(kind: &str) -> bool {
    kind.starts_with("patch_") || kind == "package_remove"
}
