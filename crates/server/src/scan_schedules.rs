//! The scheduled security scan worker, one of the server's background tasks
//! ([`crate::serve`]).
//!
//! Each [`ScanScheduleWorker::tick`] takes the schedules whose occurrence is due (by the
//! store's clock) through their lease ([`Store::claim_scan_schedule`]: the instance that moves
//! `next_run_at` forward fires it, so a cluster fires each occurrence once), and makes the
//! stored `security_scan` scan call through [`Pipeline::call`] as the schedule's owner rebuilt
//! as it stands now (`owner_runs::acting_as`) — the same guard, per-tool rate limit (3 scans in
//! 10 minutes per user) and Tier 3 approval as an MCP call; its scans are recorded as any scan
//! is. What the occurrence came to (ran, pending_approval, refused — a rate limit included —,
//! failed) is kept on the schedule; a missed occurrence is not made up.

use std::{sync::Arc, time::Duration};

use breeze_core::security::ScheduledScanStatus;
use breeze_pipeline::{CallOutcome, Pipeline};
use breeze_store::{ScanSchedule, Store, StoreError};
use breeze_tools::CallOptions;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{
    owner_runs,
    workers::{Tasks, Worker},
};

/// How often the worker looks for due schedules.
pub const SCAN_SCHEDULE_TICK: Duration = Duration::from_secs(30);

/// The request id a schedule's calls carry (on approval requests and audit records).
pub fn schedule_request_id(s: &ScanSchedule) -> String {
    format!("scan-schedule:{}", s.id)
}

/// The worker. Cheap to share (`Arc`).
pub struct ScanScheduleWorker {
    store: Store,
    pipeline: Pipeline,
    runs: Tasks,
}

impl ScanScheduleWorker {
    pub fn new(store: Store, pipeline: Pipeline) -> Self {
        Self {
            store,
            pipeline,
            runs: Tasks::default(),
        }
    }
}

/// Runs every [`SCAN_SCHEDULE_TICK`].
impl Worker for ScanScheduleWorker {
    const NAME: &'static str = "scan schedule";
    type Report = usize;
    type Error = StoreError;

    fn period(&self) -> Duration {
        SCAN_SCHEDULE_TICK
    }

    /// One round: fires every due occurrence this instance claims, each in a task of its own
    /// (a scan call waits for its devices' answers). Returns how many it fired.
    async fn tick(self: &Arc<Self>) -> Result<usize, StoreError> {
        let now = self.store.clock().now();
        let mut fired = 0;
        for s in self.store.cross_org().due_scan_schedules(now, 100).await? {
            let Some(due) = s.next_run_at else { continue };
            let next = s.next_after(due, now);
            if !self.store.claim_scan_schedule(&s, due, next).await? {
                continue;
            }
            fired += 1;
            let this = self.clone();
            self.runs.spawn(async move {
                let (org, id) = (s.org_id, s.id);
                let (status, message) = match this.fire(&s).await {
                    Ok(r) => r,
                    Err(e) => (ScheduledScanStatus::Failed, Some(format!("internal error: {e}"))),
                };
                if let Err(e) = this
                    .store
                    .org(org)
                    .security().record_scan_schedule_run(id, status, message.as_deref())
                    .await
                {
                    tracing::warn!(schedule = %id, error = %e, "scan schedule outcome not recorded");
                }
            });
        }
        Ok(fired)
    }
}

impl ScanScheduleWorker {
    /// Waits until every occurrence fired so far has finished (tests, and shutdown).
    pub async fn settle(&self) {
        self.runs.settle().await;
    }

    /// Makes one occurrence's scan call as the owner: (status, message).
    async fn fire(
        &self,
        s: &ScanSchedule,
    ) -> Result<(ScheduledScanStatus, Option<String>), StoreError> {
        let standing = match owner_runs::acting_as(&self.store, s.org_id, &s.owner_actor).await? {
            Ok(st) => st,
            Err(why) => return Ok((ScheduledScanStatus::Refused, Some(why))),
        };
        let mut args = s.arguments.clone();
        if let Value::Object(m) = &mut args {
            m.insert("action".into(), Value::from("scan"));
        }
        let outcome = self
            .pipeline
            .call(
                &standing,
                "security_scan",
                args,
                CallOptions {
                    request_id: Some(schedule_request_id(s)),
                    ..CallOptions::default()
                },
                &CancellationToken::new(),
            )
            .await;
        Ok(match outcome {
            CallOutcome::Output(raw) => {
                let answer: Value = serde_json::from_str(raw.get()).unwrap_or_default();
                let scans: Vec<&str> = answer["scans"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x["scanId"].as_str())
                    .collect();
                (
                    ScheduledScanStatus::Ran,
                    Some(format!("scans {}", scans.join(", "))),
                )
            }
            CallOutcome::Pending(r) => (
                ScheduledScanStatus::PendingApproval,
                Some(format!("waits for approval request {}", r.id)),
            ),
            CallOutcome::Refused(r) => (ScheduledScanStatus::Refused, Some(r.to_string())),
            CallOutcome::Failed(e) => (ScheduledScanStatus::Failed, Some(e.message)),
            other => (
                ScheduledScanStatus::Failed,
                Some(format!("unexpected outcome: {other:?}")),
            ),
        })
    }
}
