//! The periodic re-evaluation of dynamic groups whose filters depend on time.
//!
//! Why: a filter such as "`lastSeenMinutes` gt 30" (offline for more than half an hour) changes
//! its answer as the clock moves, with no write to the device — the store's recomputation on
//! inventory and status changes never sees it. So once per [`GroupTimerConfig::period`] and
//! once per cluster (the lease pattern of the other periodic jobs: `claim_scheduled_run` moves
//! the job's `last_run_at` forward with one conditional statement, so of several instances one
//! runs it), every time-dependent group is recomputed over all its devices; each change is in
//! the membership log as `system:dynamic-groups-clock` with the reason
//! [`breeze_store::TIME_REEVALUATION`]. Time comes from the store's `Clock`, so tests step it.

use std::{sync::Arc, time::Duration};

use breeze_core::{DeviceGroupId, OrgId};
use breeze_store::{Recomputed, Store, StoreError};

use crate::workers::Worker;

/// The lease row's name in `scheduled_runs`.
pub const LEASE: &str = "dynamic_groups.time";

/// The re-evaluation's pace.
#[derive(Debug, Clone)]
pub struct GroupTimerConfig {
    /// How often groups are re-evaluated across the cluster (and how often each instance asks
    /// for the lease).
    pub period: Duration,
}

impl Default for GroupTimerConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(60),
        }
    }
}

/// The worker. Cheap to share (`Arc`).
pub struct GroupTimer {
    store: Store,
    config: GroupTimerConfig,
}

impl GroupTimer {
    pub fn new(store: Store, config: GroupTimerConfig) -> Self {
        Self { store, config }
    }
}

/// Runs every period.
impl Worker for GroupTimer {
    const NAME: &'static str = "dynamic group re-evaluation";
    type Report = Option<Vec<(OrgId, DeviceGroupId, Recomputed)>>;
    type Error = StoreError;

    fn period(&self) -> Duration {
        self.config.period
    }

    /// Re-evaluates the time-dependent groups if this instance wins this period's lease;
    /// `None` when another instance (or this one) already ran this period.
    async fn tick(self: &Arc<Self>) -> Result<Self::Report, StoreError> {
        let period =
            chrono::Duration::from_std(self.config.period).unwrap_or(chrono::Duration::minutes(1));
        // A little slack, so an instance whose timer fires a hair early still takes its turn.
        let due = period - chrono::Duration::milliseconds(500).min(period / 10);
        if !self.store.claim_scheduled_run(LEASE, due).await? {
            return Ok(None);
        }
        self.store
            .cross_org()
            .reevaluate_time_dependent_groups()
            .await
            .map(Some)
    }

    fn log(&self, changed: &Self::Report) {
        if let Some(changed) = changed.as_ref().filter(|c| !c.is_empty()) {
            tracing::info!(
                groups = changed.len(),
                "dynamic groups re-evaluated as time passed"
            );
        }
    }
}
