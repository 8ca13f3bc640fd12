//! The patch-job dispatcher, one of the server's background tasks ([`crate::serve`]).
//!
//! An install or rollback that `manage_patches` scheduled into a maintenance window waits as
//! a `scheduled` job. Each tick lists the scheduled jobs of every organization
//! ([`CrossOrg::scheduled_patch_jobs`](breeze_store::CrossOrg::scheduled_patch_jobs)) and
//! starts those whose window is open now (or that name none), through the job's own
//! organization ([`breeze_tools::start_scheduled_patch_job`]): each device's command is queued
//! as whoever asked for the install, which was approved then. A job whose window is gone
//! cannot be read waits for a later tick.

use std::{sync::Arc, time::Duration};

use breeze_gateway::Gateway;
use breeze_store::{Store, StoreError};

use crate::workers::Worker;

/// How often scheduled patch jobs are checked against their maintenance windows.
const PATCH_DISPATCH_TICK: Duration = Duration::from_secs(30);

/// The dispatcher. Cheap to share (`Arc`).
pub struct PatchJobDispatcher {
    store: Store,
    gateway: Gateway,
}

impl PatchJobDispatcher {
    pub fn new(store: Store, gateway: Gateway) -> Self {
        Self { store, gateway }
    }
}

/// Runs every 30 seconds (`PATCH_DISPATCH_TICK`); a tick answers how many jobs it started.
impl Worker for PatchJobDispatcher {
    const NAME: &'static str = "patch job dispatch";
    type Report = usize;
    type Error = StoreError;

    fn period(&self) -> Duration {
        PATCH_DISPATCH_TICK
    }

    async fn tick(self: &Arc<Self>) -> Result<usize, StoreError> {
        let jobs = self.store.cross_org().scheduled_patch_jobs().await?;
        let now = self.store.clock().now();
        let mut started = 0;
        for job in jobs {
            let org = self.store.org(job.org_id);
            let open = match job.window_id {
                Some(w) => match org.maintenance().get_window(w).await {
                    Ok(w) => w.open_at(now).is_some(),
                    Err(_) => false,
                },
                None => true,
            };
            if !open {
                continue;
            }
            let fleet = self.gateway.org(job.org_id);
            if let Err(e) =
                breeze_tools::start_scheduled_patch_job(org.patches(), &fleet, job.org_id, &job)
                    .await
            {
                tracing::warn!(job = %job.id, error = %e.message, "could not start a patch job");
            } else {
                started += 1;
            }
        }
        Ok(started)
    }

    fn log(&self, started: &usize) {
        if *started > 0 {
            tracing::info!(
                jobs = started,
                "patch jobs started in their maintenance window"
            );
        }
    }
}
