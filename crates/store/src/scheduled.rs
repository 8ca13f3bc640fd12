//! Lease rows for periodic jobs (`scheduled_runs`, migrations 0017 and 0030), two kinds:
//!
//! - **Period leases** ([`Store::claim_scheduled_run`]): an instance runs a job only after it
//!   moved the job's `last_run_at` forward with one conditional statement, so instances sharing
//!   a database run each job once per period between them, whichever asks first.
//! - **Held leases** ([`Store::hold_lease`]): one instance holds the job and renews it each time
//!   it runs; the others stand by and take over only once the lease went unrenewed for its time
//!   to live (the holder died or lost the database). For work that keeps state between runs —
//!   the alert engine's walk through the rules — so the same instance does it while it lives.

use chrono::Duration;

use crate::{Result, Store, sql::sql};

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
