//! Periodic jobs run once per cluster, whatever the number of servers on the database.
//!
//! Every server runs the same timers (the gateway's sweep every few seconds). A run is named by
//! its job and its slot — the interval it belongs to, the server's clock divided by the
//! period — and the first server to insert that pair runs it; the others skip it. A claim is
//! one statement that both backends decide atomically by the primary key, so no server holds
//! anything between runs and a dead server leaves nothing behind: the next slot is anybody's.
//! Servers whose clocks disagree by more than a period may each claim a different slot and run
//! twice in it, which the jobs tolerate (every change they make is a conditional update).

use breeze_core::Timestamp;

use crate::{Result, Store, sql::sql};

impl Store {
    /// Claims run `slot` of `job` for this server: `true` for exactly one of the servers that
    /// ask, which then runs it.
    pub async fn claim_run(&self, job: &str, slot: i64) -> Result<bool> {
        let claimed = sql(
            "INSERT INTO cluster_runs (job, slot, claimed_at) VALUES ($1, $2, $3) \
                           ON CONFLICT (job, slot) DO NOTHING",
        )
        .bind(job)
        .bind(slot)
        .bind(self.clock.now())
        .execute(self)
        .await?;
        Ok(claimed == 1)
    }

    /// Forgets runs claimed before `before`. Returns how many.
    pub async fn prune_runs(&self, before: Timestamp) -> Result<u64> {
        sql("DELETE FROM cluster_runs WHERE claimed_at < $1")
            .bind(before)
            .execute(self)
            .await
    }
}
