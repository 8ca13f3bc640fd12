//! Report definitions on a schedule (migration 0067): daily, weekly or monthly at a time of
//! day, read in a time zone. The store runs nothing; the server's worker makes the
//! `generate_report` generate call through the pipeline as the schedule's owner, and the run is
//! stored like any other (downloadable from the Reports page).
//!
//! The lease is the schedule's own `next_run_at` ([`Store::claim_report_schedule`]): the
//! instance whose conditional update moves it forward fires the occurrence, so instances
//! sharing the database fire each occurrence once. A missed occurrence is not made up: the
//! next is the first after the moment the worker saw the due one.

use breeze_core::{AuditEvent, CronSchedule, OrgId, ReportFormat, Timestamp};
use serde::Serialize;
use uuid::Uuid;

use crate::{
    CrossOrg, Result, Store, StoreError, audit,
    scheduled::RowLease,
    sql::{Tx, sql},
};

/// The most report schedules one organization may keep.
pub const MAX_REPORT_SCHEDULES_PER_ORG: i64 = 100;

/// When a schedule fires, at its time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportCadence {
    Daily,
    /// On this weekday (0 = Sunday … 6 = Saturday).
    Weekly(u8),
    /// On this day of the month (1-28, so every month has it).
    Monthly(u8),
}

impl ReportCadence {
    /// The cadence of the stored columns, or what is wrong with them.
    pub fn from_parts(cadence: &str, day: Option<i64>) -> Result<Self> {
        let day_in = |lo: i64, hi: i64, what: &str| {
            day.filter(|d| (lo..=hi).contains(d))
                .and_then(|d| u8::try_from(d).ok())
                .ok_or_else(|| StoreError::Invalid(format!("{what} must be {lo} to {hi}")))
        };
        Ok(match cadence {
            "daily" => Self::Daily,
            "weekly" => Self::Weekly(day_in(0, 6, "the weekday (0 = Sunday)")?),
            "monthly" => Self::Monthly(day_in(1, 28, "the day of the month")?),
            other => {
                return Err(StoreError::Invalid(format!(
                    "cadence must be daily, weekly or monthly, not {other:?}"
                )));
            }
        })
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Daily => "daily",
            Self::Weekly(_) => "weekly",
            Self::Monthly(_) => "monthly",
        }
    }

    /// The stored day (none for daily).
    pub fn day(self) -> Option<i64> {
        match self {
            Self::Daily => None,
            Self::Weekly(d) | Self::Monthly(d) => Some(i64::from(d)),
        }
    }

    /// The five-field cron expression of this cadence at `at_minute` past midnight.
    fn cron(self, at_minute: u32) -> String {
        let (h, m) = (at_minute / 60, at_minute % 60);
        match self {
            Self::Daily => format!("{m} {h} * * *"),
            Self::Weekly(d) => format!("{m} {h} * * {d}"),
            Self::Monthly(d) => format!("{m} {h} {d} * *"),
        }
    }
}

/// The weekday names, Sunday first (as [`ReportCadence::Weekly`] counts them).
pub const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A schedule to create.
#[derive(Debug, Clone)]
pub struct NewReportSchedule {
    /// The report definition (of the same organization).
    pub report_id: Uuid,
    pub cadence: ReportCadence,
    /// Minutes after midnight, 0-1439.
    pub at_minute: u32,
    /// `UTC` or an IANA zone.
    pub time_zone: String,
    pub format: ReportFormat,
    /// Whose call it is (`Actor` text).
    pub owner_actor: String,
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReportSchedule {
    pub id: Uuid,
    pub org_id: OrgId,
    pub report_id: Uuid,
    pub cadence: String,
    pub day: Option<i64>,
    pub at_minute: i64,
    pub time_zone: String,
    #[sqlx(try_from = "String")]
    pub format: ReportFormat,
    pub owner_actor: String,
    pub next_run_at: Option<Timestamp>,
    pub last_run_at: Option<Timestamp>,
    /// What the last occurrence came to: ran, pending_approval, refused or failed.
    pub last_status: Option<String>,
    pub last_message: Option<String>,
    /// The report run the last occurrence made.
    pub last_run_id: Option<Uuid>,
    pub created_at: Timestamp,
}

impl ReportSchedule {
    fn parsed(&self) -> Option<CronSchedule> {
        let cadence = ReportCadence::from_parts(&self.cadence, self.day).ok()?;
        let at = u32::try_from(self.at_minute).ok()?;
        CronSchedule::parse(&cadence.cron(at), &self.time_zone).ok()
    }

    /// The first occurrence after `now` (missed ones are not made up).
    pub fn next_after(&self, now: Timestamp) -> Option<Timestamp> {
        self.parsed()?.next_after(now)
    }

    /// The schedule in words, e.g. "Weekly on Monday at 07:30 (Europe/Berlin)".
    pub fn describe(&self) -> String {
        let at = format!("{:02}:{:02}", self.at_minute / 60, self.at_minute % 60);
        let when = match ReportCadence::from_parts(&self.cadence, self.day) {
            Ok(ReportCadence::Daily) => "Daily".to_owned(),
            Ok(ReportCadence::Weekly(d)) => {
                format!("Weekly on {}", WEEKDAYS[usize::from(d) % 7])
            }
            Ok(ReportCadence::Monthly(d)) => format!("Monthly on day {d}"),
            Err(_) => self.cadence.clone(),
        };
        format!("{when} at {at} ({})", self.time_zone)
    }
}

const COLUMNS: &str = "id, org_id, report_id, cadence, day, at_minute, time_zone, format, \
    owner_actor, next_run_at, last_run_at, last_status, last_message, last_run_id, created_at";

impl crate::OrgReports<'_> {
    /// Creates a schedule for one of this organization's report definitions (another's is not
    /// found), its first occurrence the next after now; audited `audit`.
    pub async fn create_report_schedule(
        &self,
        new: NewReportSchedule,
        audit: AuditEvent,
    ) -> Result<ReportSchedule> {
        if new.at_minute >= 1440 {
            return Err(StoreError::Invalid(
                "the time of day must be 00:00 to 23:59".into(),
            ));
        }
        let report = self.get_report(new.report_id).await?;
        let schedule = CronSchedule::parse(&new.cadence.cron(new.at_minute), &new.time_zone)
            .map_err(StoreError::Invalid)?;
        let now = self.store.clock.now();
        let first = schedule
            .next_after(now)
            .ok_or_else(|| StoreError::Invalid("the schedule never fires".into()))?;
        self.whole()
            .check_room(
                "report_schedules",
                MAX_REPORT_SCHEDULES_PER_ORG,
                "report schedules",
            )
            .await?;
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO report_schedules ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, $10, NULL, NULL, NULL, NULL, $11)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(report.id)
        .bind(new.cadence.as_str())
        .bind(new.cadence.day())
        .bind(i64::from(new.at_minute))
        .bind(new.time_zone.as_str())
        .bind(new.format.as_str())
        .bind(new.owner_actor.as_str())
        .bind(first)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "reportId": report.id, "report": report.name, "cadence": new.cadence.as_str(),
            "day": new.cadence.day(), "atMinute": new.at_minute, "timeZone": new.time_zone,
            "format": new.format.as_str(), "owner": new.owner_actor, "firstRunAt": first,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_report_schedule(id).await
    }

    /// One schedule of this organization.
    pub async fn get_report_schedule(&self, id: Uuid) -> Result<ReportSchedule> {
        sql(format!(
            "SELECT {COLUMNS} FROM report_schedules WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("report schedule"))
    }

    /// This organization's schedules, oldest first.
    pub async fn list_report_schedules(&self) -> Result<Vec<ReportSchedule>> {
        sql(format!(
            "SELECT {COLUMNS} FROM report_schedules WHERE org_id = $1 ORDER BY created_at, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Deletes a schedule (its past runs stay), audited `audit`.
    pub async fn delete_report_schedule(
        &self,
        id: Uuid,
        audit: AuditEvent,
    ) -> Result<ReportSchedule> {
        let s = self.get_report_schedule(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("DELETE FROM report_schedules WHERE id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "reportId": s.report_id, "schedule": s.describe() }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(s)
    }

    /// Records what an occurrence came to (`status`: ran, pending_approval, refused, failed)
    /// and the run it made.
    pub async fn record_report_schedule_run(
        &self,
        id: Uuid,
        status: &str,
        message: Option<&str>,
        run: Option<Uuid>,
    ) -> Result<()> {
        sql(
            "UPDATE report_schedules SET last_run_at = $1, last_status = $2, \
             last_message = $3, last_run_id = $4 WHERE id = $5 AND org_id = $6",
        )
        .bind(self.store.clock.now())
        .bind(status)
        .bind(message)
        .bind(run)
        .bind(id)
        .bind(self.org)
        .execute(self)
        .await
        .map(drop)
    }
}

/// The schedules' lease: their own `next_run_at` ([`crate::scheduled::RowLease`]).
const LEASE: RowLease = RowLease {
    table: "report_schedules",
    columns: COLUMNS,
    at: "next_run_at",
    only: "TRUE",
};

impl Store {
    /// Takes the occurrence due at `due`: moves `next_run_at` to `next` if it is still `due`
    /// (one statement: one instance wins). False when another instance was first.
    pub async fn claim_report_schedule(
        &self,
        s: &ReportSchedule,
        due: Timestamp,
        next: Option<Timestamp>,
    ) -> Result<bool> {
        LEASE.claim(self, (s.id, s.org_id), due, next).await
    }
}

impl CrossOrg<'_> {
    /// Report schedules of every organization due at `now`, soonest first, at most `limit`.
    pub async fn due_report_schedules(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ReportSchedule>> {
        LEASE.due(self.store, now, limit).await
    }
}
