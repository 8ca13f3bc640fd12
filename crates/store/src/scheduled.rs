//! Lease rows for periodic jobs (`scheduled_runs`, migrations 0017 and 0030), two kinds:
//!
//! - **Period leases** ([`Store::claim_scheduled_run`]): an instance runs a job only after it
//!   moved the job's `last_run_at` forward with one conditional statement, so instances sharing
//!   a database run each job once per period between them, whichever asks first.
//! - **Held leases** ([`Store::hold_lease`]): one instance holds the job and renews it each time
//!   it runs; the others stand by and take over only once the lease went unrenewed for its time
//!   to live (the holder died or lost the database). For work that keeps state between runs —
//!   the alert engine's walk through the rules — so the same instance does it while it lives.
//!
//! A third kind lives on the rows themselves: a [`RowLease`] is a table whose every row says
//! when it is next due (an automation's `next_run_at`, a compliance policy's
//! `next_evaluation_at`, a deployment's `next_step_at`, a scan schedule's `next_run_at`). The
//! due rows are read and each is claimed by moving that column from the instant read to the
//! next with one conditional statement — written here once for every such table.

use breeze_core::{OrgId, Timestamp};
use chrono::Duration;
use uuid::Uuid;

use crate::{
    Result, Store,
    sql::{FromRows, Target, sql},
};

/// A table whose rows carry their own lease: the column `at` holds when each row is next due.
pub(crate) struct RowLease {
    pub table: &'static str,
    /// The columns a row is read with.
    pub columns: &'static str,
    /// The lease column.
    pub at: &'static str,
    /// A constant condition a row must also meet to be due or claimed (e.g.
    /// `"status = 'running'"`); no placeholders.
    pub only: &'static str,
}

impl RowLease {
    /// Rows of every organization due at `now`, soonest first, at most `limit`.
    pub(crate) async fn due<T: FromRows>(
        &self,
        store: &Store,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<T>> {
        let RowLease {
            table,
            columns,
            at,
            only,
        } = self;
        sql(format!(
            "SELECT {columns} FROM {table} WHERE {only} AND {at} IS NOT NULL AND {at} <= $1 \
             ORDER BY {at}, id LIMIT $2"
        ))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(store)
        .await
    }

    /// Claims row `id`'s occurrence `due`: moves the lease column to `next` if it still holds
    /// `due` and the row still meets `only` (one statement, so of instances claiming at once
    /// one wins). False when another instance, or a change to the row, was first.
    pub(crate) async fn claim<'a>(
        &self,
        target: impl Into<Target<'a>>,
        (id, org): (Uuid, OrgId),
        due: Timestamp,
        next: Option<Timestamp>,
    ) -> Result<bool> {
        let RowLease {
            table, at, only, ..
        } = self;
        let n = sql(format!(
            "UPDATE {table} SET {at} = $1 WHERE id = $2 AND org_id = $3 AND {at} = $4 \
             AND {only}"
        ))
        .bind(next)
        .bind(id)
        .bind(org)
        .bind(due)
        .execute(target)
        .await?;
        Ok(n == 1)
    }
}

impl Store {
    /// Claims this period's run of job `name`: true (and the run is recorded as started now)
    /// when it has never run or last ran at least `period` ago by the store's clock; false when
    /// another instance — or this one — already ran it this period.
    pub async fn claim_scheduled_run(&self, name: &str, period: Duration) -> Result<bool> {
        let now = self.clock.now();
        let n = sql(
            "INSERT INTO scheduled_runs (name, last_run_at) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET last_run_at = excluded.last_run_at \
             WHERE scheduled_runs.last_run_at <= $3",
        )
        .bind(name)
        .bind(now)
        .bind(now - period)
        .execute(self)
        .await?;
        Ok(n > 0)
    }

    /// Takes or renews the held lease `name` for `holder` (an instance's id): true when
    /// `holder` holds it now — it was free, `holder` held it already, or its holder let it go
    /// unrenewed for `ttl` by the store's clock; false while another instance holds it. One
    /// conditional statement, so of instances asking at once exactly one gets a free lease.
    pub async fn hold_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let now = self.clock.now();
        let n = sql(
            "INSERT INTO scheduled_runs (name, last_run_at, holder) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET last_run_at = excluded.last_run_at, \
             holder = excluded.holder \
             WHERE scheduled_runs.holder = excluded.holder OR scheduled_runs.last_run_at <= $4",
        )
        .bind(name)
        .bind(now)
        .bind(holder)
        .bind(now - ttl)
        .execute(self)
        .await?;
        Ok(n > 0)
    }

    /// Gives up the held lease `name` if `holder` holds it (a clean shutdown), so another
    /// instance takes it at its next try instead of after the time to live. Returns whether
    /// it was held.
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        let n = sql("DELETE FROM scheduled_runs WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(self)
            .await?;
        Ok(n > 0)
    }
}
