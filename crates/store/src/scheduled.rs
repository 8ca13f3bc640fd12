//! Lease rows for periodic jobs (`scheduled_runs`, migration 0017): an instance runs a job only
//! after it moved the job's `last_run_at` forward with one conditional statement, so instances
//! sharing a database run each job once per period between them, whichever asks first.

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
}
