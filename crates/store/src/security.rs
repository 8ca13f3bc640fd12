//! Security scans (migration 0026): scans per device, their findings and flagged files,
//! quarantined files, and the posture snapshots that make trends.
//!
//! A scan row is written when its `security_scan` command is queued (audited, naming who asked)
//! and stays `running` until [`crate::OrgSecurity::record_scan_result`] stores the agent's answer — the
//! findings, the flagged files and the posture snapshot in one transaction, guarded by
//! `status = 'running'` so two callers noticing the same result record it once. The newest
//! [`SCANS_KEPT`] scans of a device are kept (with their findings); posture snapshots outlive
//! them for trends. Quarantine records follow what the agent did to a file (quarantined,
//! removed, restored), each change audited.

use breeze_core::{
    AuditEvent, DeviceId, Timestamp,
    security::{CheckStatus, FindingSeverity, QuarantineState, ScanStatus},
};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    Result, StoreError, audit,
    sql::{Arg, Tx, sql},
};

/// Scans kept per device (older ones and their findings are pruned; snapshots stay).
pub const SCANS_KEPT: i64 = 20;

/// One device's scan.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct SecurityScan {
    pub id: Uuid,
    pub device_id: DeviceId,
    pub command_id: Uuid,
    #[sqlx(try_from = "String")]
    pub status: ScanStatus,
    pub requested_by: String,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub error: Option<String>,
    /// Whether the agent ran as root (`None` until the result).
    pub privileged: Option<bool>,
}

const SCAN_COLUMNS: &str =
    "id, device_id, command_id, status, requested_by, started_at, finished_at, error, privileged";

/// One check's finding.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct SecurityFinding {
    pub id: Uuid,
    pub scan_id: Uuid,
    pub device_id: DeviceId,
    #[sqlx(rename = "check_name")]
    pub check: String,
    #[sqlx(try_from = "String")]
    pub status: CheckStatus,
    #[sqlx(try_from = "String")]
    pub severity: FindingSeverity,
    pub title: String,
    #[sqlx(json)]
    pub evidence: Value,
}

/// A finding to record.
#[derive(Debug, Clone)]
pub struct NewFinding {
    pub check: String,
    pub status: CheckStatus,
    pub severity: FindingSeverity,
    pub title: String,
    pub evidence: Value,
}

/// A file a scan flagged.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct FlaggedFile {
    pub id: Uuid,
    pub scan_id: Uuid,
    pub device_id: DeviceId,
    pub path: String,
    pub reason: String,
    #[sqlx(rename = "check_name")]
    pub check: String,
    #[sqlx(try_from = "String")]
    pub severity: FindingSeverity,
    pub sha256: Option<String>,
    pub mode: String,
    pub uid: i64,
    pub gid: i64,
    pub size_bytes: i64,
}

const FLAGGED_COLUMNS: &str = "id, scan_id, device_id, path, reason, check_name, severity, sha256, mode, uid, gid, size_bytes";

/// A flagged file to record.
#[derive(Debug, Clone)]
pub struct NewFlagged {
    pub path: String,
    pub reason: String,
    pub check: String,
    pub severity: FindingSeverity,
    pub sha256: Option<String>,
    pub mode: String,
    pub uid: i64,
    pub gid: i64,
    pub size_bytes: i64,
}

/// The posture a scan gave.
#[derive(Debug, Clone)]
pub struct NewPosture {
    pub score: i64,
    pub risk_level: String,
    pub factors: Value,
}

/// An agent's answer to a scan.
#[derive(Debug, Clone)]
pub struct ScanOutcome {
    /// Completed or failed.
    pub status: ScanStatus,
    pub error: Option<String>,
    pub privileged: Option<bool>,
    pub findings: Vec<NewFinding>,
    pub flagged: Vec<NewFlagged>,
    pub posture: Option<NewPosture>,
}

/// A posture snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct PostureSnapshot {
    pub id: Uuid,
    pub device_id: DeviceId,
    pub scan_id: Uuid,
    pub score: i64,
    pub risk_level: String,
    #[sqlx(json)]
    pub factors: Value,
    pub taken_at: Timestamp,
}

const POSTURE_COLUMNS: &str = "id, device_id, scan_id, score, risk_level, factors, taken_at";

/// A quarantined file's record.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineEntry {
    pub id: Uuid,
    pub device_id: DeviceId,
    pub flagged_id: Option<Uuid>,
    /// The agent's quarantine id.
    pub agent_ref: String,
    pub original_path: String,
    pub sha256: String,
    pub mode: String,
    pub uid: i64,
    pub gid: i64,
    pub size_bytes: i64,
    #[sqlx(try_from = "String")]
    pub state: QuarantineState,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_by: String,
    pub updated_at: Timestamp,
}

const QUARANTINE_COLUMNS: &str = "id, device_id, flagged_id, agent_ref, original_path, sha256, \
    mode, uid, gid, size_bytes, state, created_by, created_at, updated_by, updated_at";

/// A quarantine to record (what the agent answered).
#[derive(Debug, Clone)]
pub struct NewQuarantine {
    pub device_id: DeviceId,
    pub flagged_id: Option<Uuid>,
    pub agent_ref: String,
    pub original_path: String,
    pub sha256: String,
    pub mode: String,
    pub uid: i64,
    pub gid: i64,
    pub size_bytes: i64,
    pub state: QuarantineState,
    pub created_by: String,
}

impl crate::OrgSecurity<'_> {
    /// Records a scan queued as `command_id` on one of this organization's devices (audited).
    pub async fn create_security_scan(
        &self,
        device: DeviceId,
        command_id: Uuid,
        requested_by: &str,
        audit: AuditEvent,
    ) -> Result<SecurityScan> {
        self.whole().devices().get_device(device).await?;
        let id = Uuid::now_v7();
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO security_scans (id, org_id, device_id, command_id, status, requested_by, \
             started_at) VALUES ($1, $2, $3, $4, 'running', $5, $6)",
        )
        .bind(id)
        .bind(self.org)
        .bind(device)
        .bind(command_id)
        .bind(requested_by)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "deviceId": device, "commandId": command_id }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_security_scan(id).await
    }

    /// One of this organization's scans.
    pub async fn get_security_scan(&self, id: Uuid) -> Result<SecurityScan> {
        sql(format!(
            "SELECT {SCAN_COLUMNS} FROM security_scans WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("security scan"))
    }

    /// This organization's scans, newest first, of one device and/or status.
    pub async fn list_security_scans(
        &self,
        device: Option<DeviceId>,
        status: Option<ScanStatus>,
        limit: u32,
    ) -> Result<Vec<SecurityScan>> {
        sql(format!(
            "SELECT {SCAN_COLUMNS} FROM security_scans WHERE org_id = $1 \
             AND ($2 IS NULL OR device_id = $2) AND ($3 IS NULL OR status = $3) \
             ORDER BY started_at DESC, id DESC LIMIT $4"
        ))
        .bind(self.org)
        .bind(device)
        .bind(status.map(|s| s.as_str()))
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// The newest completed scan of a device, if any.
    pub async fn latest_completed_scan(&self, device: DeviceId) -> Result<Option<SecurityScan>> {
        sql(format!(
            "SELECT {SCAN_COLUMNS} FROM security_scans WHERE org_id = $1 AND device_id = $2 \
             AND status = 'completed' ORDER BY started_at DESC, id DESC LIMIT 1"
        ))
        .bind(self.org)
        .bind(device)
        .fetch_optional(self)
        .await
    }

    /// Stores a running scan's outcome, its findings, flagged files and posture snapshot in one
    /// transaction. `false`: the scan was recorded already (nothing written).
    pub async fn record_scan_result(&self, scan_id: Uuid, outcome: ScanOutcome) -> Result<bool> {
        let scan = self.get_security_scan(scan_id).await?;
        if outcome.status == ScanStatus::Running {
            return Err(StoreError::Invalid(
                "status: a scan's outcome is completed or failed".into(),
            ));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE security_scans SET status = $1, finished_at = $2, error = $3, privileged = $4 \
             WHERE id = $5 AND org_id = $6 AND status = 'running'",
        )
        .bind(outcome.status.as_str())
        .bind(now)
        .bind(outcome.error.as_deref())
        .bind(outcome.privileged)
        .bind(scan_id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Ok(false);
        }
        for f in &outcome.findings {
            sql(
                "INSERT INTO security_findings (id, org_id, scan_id, device_id, check_name, \
                 status, severity, title, evidence) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(Uuid::now_v7())
            .bind(self.org)
            .bind(scan_id)
            .bind(scan.device_id)
            .bind(f.check.as_str())
            .bind(f.status.as_str())
            .bind(f.severity.as_str())
            .bind(f.title.as_str())
            .bind(Arg::json(&f.evidence))
            .execute(&mut tx)
            .await?;
        }
        for f in &outcome.flagged {
            sql(format!(
                "INSERT INTO security_flagged_files (org_id, {FLAGGED_COLUMNS}) VALUES ($1, $2, \
                 $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
            ))
            .bind(self.org)
            .bind(Uuid::now_v7())
            .bind(scan_id)
            .bind(scan.device_id)
            .bind(f.path.as_str())
            .bind(f.reason.as_str())
            .bind(f.check.as_str())
            .bind(f.severity.as_str())
            .bind(f.sha256.as_deref())
            .bind(f.mode.as_str())
            .bind(f.uid)
            .bind(f.gid)
            .bind(f.size_bytes)
            .execute(&mut tx)
            .await?;
        }
        if let Some(p) = &outcome.posture {
            sql(format!(
                "INSERT INTO security_posture_snapshots (org_id, {POSTURE_COLUMNS}) VALUES ($1, \
                 $2, $3, $4, $5, $6, $7, $8)"
            ))
            .bind(self.org)
            .bind(Uuid::now_v7())
            .bind(scan.device_id)
            .bind(scan_id)
            .bind(p.score.clamp(0, 100))
            .bind(p.risk_level.as_str())
            .bind(Arg::json(&p.factors))
            .bind(now)
            .execute(&mut tx)
            .await?;
        }
        // Older scans of the device go, with their findings and flagged files.
        sql(
            "DELETE FROM security_scans WHERE org_id = $1 AND device_id = $2 AND status <> \
             'running' AND id NOT IN (SELECT id FROM security_scans WHERE org_id = $1 AND \
             device_id = $2 ORDER BY started_at DESC, id DESC LIMIT $3)",
        )
        .bind(self.org)
        .bind(scan.device_id)
        .bind(SCANS_KEPT)
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// A scan's findings, in check order as recorded.
    pub async fn scan_findings(&self, scan_id: Uuid) -> Result<Vec<SecurityFinding>> {
        sql(
            "SELECT id, scan_id, device_id, check_name, status, severity, title, evidence \
             FROM security_findings WHERE scan_id = $1 AND org_id = $2 ORDER BY id",
        )
        .bind(scan_id)
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// A scan's flagged files.
    pub async fn scan_flagged_files(&self, scan_id: Uuid) -> Result<Vec<FlaggedFile>> {
        sql(format!(
            "SELECT {FLAGGED_COLUMNS} FROM security_flagged_files WHERE scan_id = $1 AND \
             org_id = $2 ORDER BY id"
        ))
        .bind(scan_id)
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// One flagged file of this organization.
    pub async fn get_flagged_file(&self, id: Uuid) -> Result<FlaggedFile> {
        sql(format!(
            "SELECT {FLAGGED_COLUMNS} FROM security_flagged_files WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("flagged file"))
    }

    /// Records what the agent quarantined (audited).
    pub async fn record_quarantine(
        &self,
        new: NewQuarantine,
        audit: AuditEvent,
    ) -> Result<QuarantineEntry> {
        self.whole().devices().get_device(new.device_id).await?;
        let id = Uuid::now_v7();
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO security_quarantine (org_id, {QUARANTINE_COLUMNS}) VALUES ($1, $2, $3, \
             $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(new.device_id)
        .bind(new.flagged_id)
        .bind(new.agent_ref.as_str())
        .bind(new.original_path.as_str())
        .bind(new.sha256.as_str())
        .bind(new.mode.as_str())
        .bind(new.uid)
        .bind(new.gid)
        .bind(new.size_bytes)
        .bind(new.state.as_str())
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(new.created_by.as_str())
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "the agent reported a quarantine id twice".to_owned()))?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "deviceId": new.device_id, "path": new.original_path, "sha256": new.sha256,
            "state": new.state, "agentRef": new.agent_ref,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_quarantine(id).await
    }

    /// One quarantine record of this organization.
    pub async fn get_quarantine(&self, id: Uuid) -> Result<QuarantineEntry> {
        sql(format!(
            "SELECT {QUARANTINE_COLUMNS} FROM security_quarantine WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("quarantined file"))
    }

    /// This organization's quarantine records, newest first (one device's, when given).
    pub async fn list_quarantine(
        &self,
        device: Option<DeviceId>,
        limit: u32,
    ) -> Result<Vec<QuarantineEntry>> {
        sql(format!(
            "SELECT {QUARANTINE_COLUMNS} FROM security_quarantine WHERE org_id = $1 AND \
             ($2 IS NULL OR device_id = $2) ORDER BY created_at DESC, id DESC LIMIT $3"
        ))
        .bind(self.org)
        .bind(device)
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// Moves a quarantine record from `from` to `to` (audited); a record no longer in `from`
    /// is a conflict.
    pub async fn set_quarantine_state(
        &self,
        id: Uuid,
        from: QuarantineState,
        to: QuarantineState,
        by: &str,
        audit: AuditEvent,
    ) -> Result<QuarantineEntry> {
        let entry = self.get_quarantine(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE security_quarantine SET state = $1, updated_by = $2, updated_at = $3 \
             WHERE id = $4 AND org_id = $5 AND state = $6",
        )
        .bind(to.as_str())
        .bind(by)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .bind(from.as_str())
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Err(StoreError::Conflict(format!(
                "the file is {}, not {from}",
                entry.state
            )));
        }
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "deviceId": entry.device_id, "path": entry.original_path, "from": from, "to": to,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_quarantine(id).await
    }

    /// Posture snapshots since `since`, oldest first (one device's, when given).
    pub async fn posture_snapshots(
        &self,
        device: Option<DeviceId>,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<PostureSnapshot>> {
        sql(format!(
            "SELECT {POSTURE_COLUMNS} FROM security_posture_snapshots WHERE org_id = $1 AND \
             ($2 IS NULL OR device_id = $2) AND taken_at >= $3 ORDER BY taken_at, id LIMIT $4"
        ))
        .bind(self.org)
        .bind(device)
        .bind(since)
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// The device's newest posture snapshot, if it was ever scanned.
    pub async fn latest_posture(&self, device: DeviceId) -> Result<Option<PostureSnapshot>> {
        sql(format!(
            "SELECT {POSTURE_COLUMNS} FROM security_posture_snapshots WHERE org_id = $1 AND \
             device_id = $2 ORDER BY taken_at DESC, id DESC LIMIT 1"
        ))
        .bind(self.org)
        .bind(device)
        .fetch_optional(self)
        .await
    }

    /// Each device's newest posture snapshot.
    pub async fn latest_postures(&self) -> Result<Vec<PostureSnapshot>> {
        sql(format!(
            "SELECT {POSTURE_COLUMNS} FROM security_posture_snapshots s WHERE org_id = $1 AND \
             id = (SELECT t.id FROM security_posture_snapshots t WHERE t.org_id = $1 AND \
             t.device_id = s.device_id ORDER BY t.taken_at DESC, t.id DESC LIMIT 1) \
             ORDER BY device_id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }
}
