//! Live queries: the question asked of a set of devices (audited when it is run) and each
//! device's answer — its rows, the cap that stopped it, or why it did not answer — kept until
//! the query's retention ends so the results can be read again by query id, a page at a time.
//! A device answers once: a second answer for the same query and device changes nothing.

use std::collections::HashMap;

use breeze_core::{AuditEvent, DeviceId, Timestamp};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    Result, StoreError, audit,
    sql::{Arg, Tx, sql},
};

/// One live query as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct LiveQueryRecord {
    pub id: Uuid,
    #[sqlx(json)]
    pub question: Value,
    #[sqlx(json)]
    pub target: Value,
    pub created_by: String,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub devices_targeted: i64,
    pub devices_online: i64,
    /// When the run stops waiting for answers.
    pub deadline_at: Option<Timestamp>,
    /// When the run ended (every targeted device's part recorded).
    pub finished_at: Option<Timestamp>,
    /// The query-wide cap that stopped its rows (`query_rows`, `query_bytes`), if one did.
    pub query_cap: Option<String>,
}

impl LiveQueryRecord {
    /// `running`, `finished`, or `interrupted` (past its deadline and never finished: the
    /// server running it stopped).
    pub fn status(&self, now: Timestamp) -> &'static str {
        match (self.finished_at, self.deadline_at) {
            (Some(_), _) => "finished",
            (None, Some(d)) if now > d + chrono::Duration::seconds(60) => "interrupted",
            (None, _) => "running",
        }
    }
}

const QUERY_COLUMNS: &str = "id, question, target, created_by, created_at, expires_at, \
    devices_targeted, devices_online, deadline_at, finished_at, query_cap";

/// How a query's devices answered, counted per status, with the rows kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerCounts {
    pub answered: i64,
    pub failed: i64,
    pub timed_out: i64,
    pub offline: i64,
    pub rows: i64,
}

impl AnswerCounts {
    /// Devices whose part is recorded.
    pub fn total(&self) -> i64 {
        self.answered + self.failed + self.timed_out + self.offline
    }
}

/// A live query to record before it is sent.
#[derive(Debug, Clone)]
pub struct NewLiveQuery {
    pub question: Value,
    pub target: Value,
    pub created_by: String,
    /// How long the results are kept.
    pub retention: chrono::Duration,
    pub devices_targeted: i64,
    pub devices_online: i64,
    /// How long the run may wait for answers.
    pub run_for: chrono::Duration,
}

/// How a device's part of a query ended.
pub const ANSWER_STATUSES: [&str; 4] = ["answered", "failed", "timed_out", "offline"];

/// One device's answer.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct LiveAnswerRecord {
    pub device_id: DeviceId,
    /// `answered`, `failed`, `timed_out` or `offline`.
    pub status: String,
    #[sqlx(json)]
    pub rows: Vec<Value>,
    pub row_count: i64,
    /// The cap that stopped the device's answer (`rows`, `bytes`, …).
    pub cap: Option<String>,
    pub error: Option<String>,
    pub answered_at: Timestamp,
}

const ANSWER_COLUMNS: &str = "device_id, status, rows, row_count, cap, error, answered_at";

/// A device's answer to record.
#[derive(Debug, Clone)]
pub struct NewLiveAnswer {
    pub device_id: DeviceId,
    pub status: String,
    pub rows: Vec<Value>,
    pub cap: Option<String>,
    pub error: Option<String>,
}

impl crate::OrgLiveQueries<'_> {
    /// Records a query about to be sent, audited with its question and target.
    pub async fn create_query(
        &self,
        new: NewLiveQuery,
        audit: AuditEvent,
    ) -> Result<LiveQueryRecord> {
        if new.retention <= chrono::Duration::zero() {
            return Err(StoreError::Invalid("the retention must be positive".into()));
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO live_queries (org_id, {QUERY_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, NULL)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(Arg::json(&new.question))
        .bind(Arg::json(&new.target))
        .bind(&new.created_by)
        .bind(now)
        .bind(now + new.retention)
        .bind(new.devices_targeted)
        .bind(new.devices_online)
        .bind(now + new.run_for)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "question": new.question,
            "target": new.target,
            "devicesTargeted": new.devices_targeted,
            "devicesOnline": new.devices_online,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_query(id).await
    }

    /// One query of this organization whose results are still kept.
    pub async fn get_query(&self, id: Uuid) -> Result<LiveQueryRecord> {
        sql(format!(
            "SELECT {QUERY_COLUMNS} FROM live_queries WHERE id = $1 AND org_id = $2 AND expires_at > $3"
        ))
        .bind(id)
        .bind(self.org)
        .bind(self.store.clock.now())
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("live query"))
    }

    /// The organization's kept queries, newest first (ids are UUIDv7, so in creation order),
    /// older than the query `before` when given, at most `limit` (1–200).
    pub async fn list_queries(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<LiveQueryRecord>> {
        let mut q = sql(format!(
            "SELECT {QUERY_COLUMNS} FROM live_queries WHERE org_id = $1 AND expires_at > $2"
        ))
        .bind(self.org)
        .bind(self.store.clock.now());
        if let Some(before) = before {
            let at = q.arg(before);
            q.push(&format!(" AND id < {at}"));
        }
        let limit = q.arg(i64::from(limit.clamp(1, 200)));
        q.push(&format!(" ORDER BY id DESC LIMIT {limit}"));
        q.fetch_all(self).await
    }

    /// Marks a run ended, with the query-wide cap that stopped its rows; `false` when it had
    /// ended already.
    pub async fn finish_query(&self, id: Uuid, query_cap: Option<&str>) -> Result<bool> {
        let n = sql("UPDATE live_queries SET finished_at = $1, query_cap = $2 \
             WHERE id = $3 AND org_id = $4 AND finished_at IS NULL")
        .bind(self.store.clock.now())
        .bind(query_cap)
        .bind(id)
        .bind(self.org)
        .execute(self)
        .await?;
        Ok(n == 1)
    }

    /// Each of `queries`' answers counted per status, with their rows (queries with no answer
    /// yet are absent).
    pub async fn answer_counts(&self, queries: &[Uuid]) -> Result<HashMap<Uuid, AnswerCounts>> {
        let mut out: HashMap<Uuid, AnswerCounts> = HashMap::new();
        for chunk in queries.chunks(200) {
            let mut q = sql(
                "SELECT query_id, status, COUNT(*), CAST(COALESCE(SUM(row_count), 0) AS BIGINT) \
                 FROM live_query_answers WHERE org_id = $1",
            )
            .bind(self.org);
            let list: Vec<String> = chunk.iter().map(|id| q.arg(*id)).collect();
            q.push(&format!(
                " AND query_id IN ({}) GROUP BY query_id, status",
                list.join(", ")
            ));
            let rows: Vec<(Uuid, String, i64, i64)> = q.fetch_all(self).await?;
            for (id, status, n, rows) in rows {
                let c = out.entry(id).or_default();
                c.rows += rows;
                match status.as_str() {
                    "answered" => c.answered += n,
                    "failed" => c.failed += n,
                    "timed_out" => c.timed_out += n,
                    _ => c.offline += n,
                }
            }
        }
        Ok(out)
    }

    /// Stores several devices' answers in one transaction; a device that answered already,
    /// or is not this organization's (deleted meanwhile), is skipped. Returns how many were
    /// stored. The query must be kept.
    pub async fn record_answers(&self, query: Uuid, answers: Vec<NewLiveAnswer>) -> Result<u64> {
        if let Some(bad) = answers
            .iter()
            .find(|a| !ANSWER_STATUSES.contains(&a.status.as_str()))
        {
            return Err(StoreError::Invalid(format!(
                "unknown answer status {:?}",
                bad.status
            )));
        }
        self.get_query(query).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let mut stored = 0;
        for answer in answers {
            stored += sql(format!(
                "INSERT INTO live_query_answers (org_id, query_id, {ANSWER_COLUMNS}) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE EXISTS \
                 (SELECT 1 FROM devices WHERE id = $3 AND org_id = $1) \
                 ON CONFLICT (query_id, device_id) DO NOTHING"
            ))
            .bind(self.org)
            .bind(query)
            .bind(answer.device_id)
            .bind(&answer.status)
            .bind(Arg::json(&answer.rows))
            .bind(answer.rows.len() as i64)
            .bind(answer.cap)
            .bind(answer.error)
            .bind(now)
            .execute(&mut tx)
            .await?;
        }
        tx.commit().await?;
        Ok(stored)
    }

    /// A number that changes whenever an answer to one of the organization's running queries
    /// is stored or a query starts or ends: what a live page polls to know it should reload.
    pub async fn activity(&self) -> Result<(i64, i64)> {
        let since = self.store.clock.now() - chrono::Duration::hours(1);
        sql(
            "SELECT COUNT(*), (SELECT COUNT(*) FROM live_queries WHERE org_id = $1 \
             AND created_at > $2 AND finished_at IS NOT NULL) FROM live_query_answers a \
             JOIN live_queries q ON q.id = a.query_id AND q.org_id = a.org_id \
             WHERE a.org_id = $1 AND q.created_at > $2",
        )
        .bind(self.org)
        .bind(since)
        .fetch_optional(self)
        .await
        .map(Option::unwrap_or_default)
    }

    /// Stores a device's answer; `false` when the device had answered already (the first
    /// answer stands). The device must be this organization's and the query kept.
    pub async fn record_answer(&self, query: Uuid, answer: NewLiveAnswer) -> Result<bool> {
        if !ANSWER_STATUSES.contains(&answer.status.as_str()) {
            return Err(StoreError::Invalid(format!(
                "unknown answer status {:?}",
                answer.status
            )));
        }
        self.get_query(query).await?;
        self.whole().devices().get_device(answer.device_id).await?;
        let inserted = sql(format!(
            "INSERT INTO live_query_answers (org_id, query_id, {ANSWER_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (query_id, device_id) DO NOTHING"
        ))
        .bind(self.org)
        .bind(query)
        .bind(answer.device_id)
        .bind(&answer.status)
        .bind(Arg::json(&answer.rows))
        .bind(answer.rows.len() as i64)
        .bind(answer.cap)
        .bind(answer.error)
        .bind(self.store.clock.now())
        .execute(self)
        .await?;
        Ok(inserted == 1)
    }

    /// A page of a kept query's answers in device order, after the device `after`, at most
    /// `limit` (1–500) devices.
    pub async fn answers(
        &self,
        query: Uuid,
        after: Option<DeviceId>,
        limit: u32,
    ) -> Result<Vec<LiveAnswerRecord>> {
        self.get_query(query).await?;
        let mut q = sql(format!(
            "SELECT {ANSWER_COLUMNS} FROM live_query_answers WHERE org_id = $1 AND query_id = $2"
        ))
        .bind(self.org)
        .bind(query);
        if let Some(after) = after {
            let at = q.arg(after);
            q.push(&format!(" AND device_id > {at}"));
        }
        let limit = q.arg(i64::from(limit.clamp(1, 500)));
        q.push(&format!(" ORDER BY device_id LIMIT {limit}"));
        q.fetch_all(self).await
    }
}

impl crate::Store {
    /// Deletes every organization's queries (and their answers) whose retention ended before
    /// `now` (upkeep; reads nothing back).
    pub async fn purge_expired_live_queries(&self) -> Result<u64> {
        sql("DELETE FROM live_queries WHERE expires_at <= $1")
            .bind(self.clock.now())
            .execute(self)
            .await
    }
}
