//! Security scans on a schedule (migration 0029): a `security_scan` scan call's arguments, run
//! by the server's worker as the schedule's owner every `interval_minutes` or at a cron
//! occurrence in a time zone. The store runs nothing; the worker calls the tool through the
//! pipeline (Tier 3: the guard, the tool's rate limit and approvals apply), and its scans are
//! recorded as any scan is.
//!
//! The lease is the schedule's own `next_run_at` ([`Store::claim_scan_schedule`]): the
//! instance whose conditional update moves it forward fires the occurrence, so instances
//! sharing the database fire each occurrence once.

use breeze_core::{AuditEvent, CronSchedule, OrgId, Timestamp, security::ScheduledScanStatus};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    CrossOrg, Result, Store, StoreError,
    alerts::{MAX_NAME_CHARS, check_text},
    audit,
    scheduled::RowLease,
    sql::{Arg, Tx, sql},
};

/// The most scan schedules one organization may keep.
pub const MAX_SCAN_SCHEDULES_PER_ORG: i64 = 50;
/// The shortest interval: the tool allows 3 scans in 10 minutes per user, and a schedule is
/// not meant to use them all.
pub const MIN_SCAN_INTERVAL_MINUTES: u32 = 60;
/// The longest interval (30 days).
pub const MAX_SCAN_INTERVAL_MINUTES: u32 = 43_200;

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanCadence {
    /// Every this many minutes from its creation.
    Interval(u32),
    /// A five-field cron expression read in an IANA zone.
    Cron { cron: String, time_zone: String },
}

/// A scan schedule to create.
#[derive(Debug, Clone)]
pub struct NewScanSchedule {
    pub name: String,
    /// The scan call's arguments (`action` excluded).
    pub arguments: Value,
    pub cadence: ScanCadence,
    /// Whose call it is (`Actor` text).
    pub owner_actor: String,
}

/// A scan schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ScanSchedule {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    #[sqlx(json)]
    pub arguments: Value,
    pub interval_minutes: Option<i64>,
    pub cron: Option<String>,
    pub time_zone: String,
    pub owner_actor: String,
    pub next_run_at: Option<Timestamp>,
    pub last_run_at: Option<Timestamp>,
    /// What the last occurrence came to.
    pub last_status: Option<ScheduledScanStatus>,
    pub last_message: Option<String>,
    pub created_at: Timestamp,
}

impl ScanSchedule {
    /// The occurrence after the one due at `due`, seen at `now`: an interval counts on from
    /// `due` past `now` (missed occurrences are not made up); a cron is its next after `now`.
    pub fn next_after(&self, due: Timestamp, now: Timestamp) -> Option<Timestamp> {
        match (&self.interval_minutes, &self.cron) {
            (Some(m), _) if *m > 0 => {
                let step = chrono::Duration::minutes(*m);
                let mut next = due + step;
                if next <= now {
                    let behind = (now - next).num_minutes() / m + 1;
                    next += step * i32::try_from(behind).unwrap_or(i32::MAX);
                }
                Some(next)
            }
            (_, Some(cron)) => CronSchedule::parse(cron, &self.time_zone)
                .ok()?
                .next_after(now),
            _ => None,
        }
    }
}

const COLUMNS: &str = "id, org_id, name, arguments, interval_minutes, cron, time_zone, \
    owner_actor, next_run_at, last_run_at, last_status, last_message, created_at";

impl crate::OrgSecurity<'_> {
    /// Creates a schedule (its first occurrence one interval from now, or the cron's next),
    /// audited `audit`.
    pub async fn create_scan_schedule(
        &self,
        new: NewScanSchedule,
        audit: AuditEvent,
    ) -> Result<ScanSchedule> {
        check_text("name", &new.name, MAX_NAME_CHARS)?;
        let now = self.store.clock.now();
        let (interval, cron, tz, first) = match &new.cadence {
            ScanCadence::Interval(m) => {
                if !(MIN_SCAN_INTERVAL_MINUTES..=MAX_SCAN_INTERVAL_MINUTES).contains(m) {
                    return Err(StoreError::Invalid(format!(
                        "intervalMinutes must be between {MIN_SCAN_INTERVAL_MINUTES} and \
                         {MAX_SCAN_INTERVAL_MINUTES}"
                    )));
                }
                (
                    Some(i64::from(*m)),
                    None,
                    "UTC".to_owned(),
                    now + chrono::Duration::minutes(i64::from(*m)),
                )
            }
            ScanCadence::Cron { cron, time_zone } => {
                let s = CronSchedule::parse(cron, time_zone).map_err(StoreError::Invalid)?;
                let first = s
                    .next_after(now)
                    .ok_or_else(|| StoreError::Invalid(format!("{cron:?} never fires")))?;
                if let Some(second) = s.next_after(first)
                    && second - first
                        < chrono::Duration::minutes(i64::from(MIN_SCAN_INTERVAL_MINUTES))
                {
                    return Err(StoreError::Invalid(format!(
                        "{cron:?} fires more often than every {MIN_SCAN_INTERVAL_MINUTES} minutes"
                    )));
                }
                (None, Some(cron.clone()), time_zone.clone(), first)
            }
        };
        self.whole()
            .check_room(
                "security_scan_schedules",
                MAX_SCAN_SCHEDULES_PER_ORG,
                "scan schedules",
            )
            .await?;
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO security_scan_schedules ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, \
             $7, $8, $9, NULL, NULL, NULL, $10)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(Arg::json(&new.arguments))
        .bind(interval)
        .bind(cron.as_deref())
        .bind(tz.as_str())
        .bind(new.owner_actor.as_str())
        .bind(first)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": new.name, "arguments": new.arguments, "intervalMinutes": interval,
            "cron": cron, "timeZone": tz, "owner": new.owner_actor, "firstRunAt": first,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_scan_schedule(id).await
    }

    /// One schedule of this organization.
    pub async fn get_scan_schedule(&self, id: Uuid) -> Result<ScanSchedule> {
        sql(format!(
            "SELECT {COLUMNS} FROM security_scan_schedules WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("scan schedule"))
    }

    /// This organization's schedules, oldest first.
    pub async fn list_scan_schedules(&self) -> Result<Vec<ScanSchedule>> {
        sql(format!(
            "SELECT {COLUMNS} FROM security_scan_schedules WHERE org_id = $1 \
             ORDER BY created_at, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Deletes a schedule (its past scans stay), audited `audit`.
    pub async fn delete_scan_schedule(&self, id: Uuid, audit: AuditEvent) -> Result<ScanSchedule> {
        let s = self.get_scan_schedule(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("DELETE FROM security_scan_schedules WHERE id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "name": s.name }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(s)
    }

    /// Records what an occurrence came to.
    pub async fn record_scan_schedule_run(
        &self,
        id: Uuid,
        status: ScheduledScanStatus,
        message: Option<&str>,
    ) -> Result<()> {
        sql(
            "UPDATE security_scan_schedules SET last_run_at = $1, last_status = $2, \
             last_message = $3 WHERE id = $4 AND org_id = $5",
        )
        .bind(self.store.clock.now())
        .bind(status.as_str())
        .bind(message)
        .bind(id)
        .bind(self.org)
        .execute(self)
        .await
        .map(drop)
    }
}

/// The schedules' lease: their own `next_run_at` ([`crate::scheduled::RowLease`]).
const LEASE: RowLease = RowLease {
    table: "security_scan_schedules",
    columns: COLUMNS,
    at: "next_run_at",
    only: "TRUE",
};

impl Store {
    /// Takes the occurrence due at `due`: moves `next_run_at` to `next` if it is still `due`
    /// (one statement: one instance wins). False when another instance was first.
    pub async fn claim_scan_schedule(
        &self,
        s: &ScanSchedule,
        due: Timestamp,
        next: Option<Timestamp>,
    ) -> Result<bool> {
        LEASE.claim(self, (s.id, s.org_id), due, next).await
    }
}

impl CrossOrg<'_> {
    /// Schedules of every organization due at `now`, soonest first, at most `limit`.
    pub async fn due_scan_schedules(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ScanSchedule>> {
        LEASE.due(self.store, now, limit).await
    }
}
