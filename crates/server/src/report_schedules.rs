//! The report schedule worker, one of the server's background tasks ([`crate::serve`]).
//!
//! Each [`ReportScheduleWorker::tick`] takes the schedules whose occurrence is due (by the
//! store's clock) through their lease ([`Store::claim_report_schedule`]: the instance that moves
//! `next_run_at` forward fires it, so a cluster fires each occurrence once), and makes the
//! `generate_report` generate call for the schedule's definition and format through
//! [`Pipeline::call`] as the schedule's owner rebuilt as it stands now — the same guard,
//! per-tool rate limit and audit record as an MCP call or the Reports page's "Run now". The
//! owner is an API key or OAuth grant (`owner_runs::acting_as`), or the person who made the
//! schedule on the Reports page: then the call is theirs as a dashboard caller with the
//! permissions their role in the organization gives them now (none once they lost it or were
//! disabled: the occurrence is refused). That is safe for this one call only because
//! `generate` is not Tier 3 — no approval is skipped — and it reads what the person may read.
//! The run is stored like any other and downloaded from the Reports page. What the occurrence
//! came to (ran, pending_approval, refused, failed) and the run it made are kept on the
//! schedule; a missed occurrence is not made up.

use std::{sync::Arc, time::Duration};

use breeze_core::{ActorType, Caller, UserId};
use breeze_pipeline::{CallOutcome, Pipeline};
use breeze_store::{ReportSchedule, Store, StoreError};
use breeze_tools::CallOptions;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    owner_runs,
    workers::{Tasks, Worker},
};

/// How often the worker looks for due schedules.
pub const REPORT_SCHEDULE_TICK: Duration = Duration::from_secs(30);

/// The request id an occurrence's call carries (on its audit record and any approval
/// request): the schedule and the occurrence, so each occurrence is its own request.
pub fn schedule_request_id(s: &ReportSchedule, due: breeze_core::Timestamp) -> String {
    format!("report-schedule:{}:{}", s.id, due.timestamp())
}

/// The worker. Cheap to share (`Arc`).
pub struct ReportScheduleWorker {
    store: Store,
    pipeline: Pipeline,
    runs: Tasks,
}

impl ReportScheduleWorker {
    pub fn new(store: Store, pipeline: Pipeline) -> Self {
        Self {
            store,
            pipeline,
            runs: Tasks::default(),
        }
    }
}

/// Runs every [`REPORT_SCHEDULE_TICK`].
impl Worker for ReportScheduleWorker {
    const NAME: &'static str = "report schedule";
    type Report = usize;
    type Error = StoreError;

    fn period(&self) -> Duration {
        REPORT_SCHEDULE_TICK
    }

    /// One round: fires every due occurrence this instance claims, each in a task of its own
    /// (a large report takes a while to write). Returns how many it fired.
    async fn tick(self: &Arc<Self>) -> Result<usize, StoreError> {
        let now = self.store.clock().now();
        let mut fired = 0;
        for s in self
            .store
            .cross_org()
            .due_report_schedules(now, 100)
            .await?
        {
            let Some(due) = s.next_run_at else { continue };
            let next = s.next_after(now);
            if !self.store.claim_report_schedule(&s, due, next).await? {
                continue;
            }
            fired += 1;
            let this = self.clone();
            self.runs.spawn(async move {
                let (org, id) = (s.org_id, s.id);
                let (status, message, run) = match this.fire(&s, due).await {
                    Ok(r) => r,
                    Err(e) => ("failed", Some(format!("internal error: {e}")), None),
                };
                if let Err(e) = this
                    .store
                    .org(org)
                    .reports()
                    .record_report_schedule_run(id, status, message.as_deref(), run)
                    .await
                {
                    tracing::warn!(schedule = %id, error = %e, "report schedule outcome not recorded");
                }
            });
        }
        Ok(fired)
    }
}

impl ReportScheduleWorker {
    /// Waits until every occurrence fired so far has finished (tests, and shutdown).
    pub async fn settle(&self) {
        self.runs.settle().await;
    }

    /// The schedule's owner as they stand now, or why they cannot act.
    async fn owner(&self, s: &ReportSchedule) -> Result<Result<Caller, String>, StoreError> {
        let person = owner_runs::actor_of(&s.owner_actor)
            .filter(|a| a.kind == ActorType::User)
            .and_then(|a| a.id.parse().ok())
            .map(UserId);
        let Some(user) = person else {
            return owner_runs::acting_as(&self.store, s.org_id, &s.owner_actor).await;
        };
        Ok(match self.store.org_access(user, s.org_id).await? {
            Some(access) => Ok(Caller::dashboard_session(
                user,
                s.org_id,
                Some(access.permissions),
            )),
            None => Err(format!(
                "runs as {}, who no longer holds a role in this organization; nothing was run",
                s.owner_actor
            )),
        })
    }

    /// Makes one occurrence's call as the owner: (status, message, the run made).
    async fn fire(
        &self,
        s: &ReportSchedule,
        due: breeze_core::Timestamp,
    ) -> Result<(&'static str, Option<String>, Option<Uuid>), StoreError> {
        let standing = match self.owner(s).await? {
            Ok(st) => st,
            Err(why) => return Ok(("refused", Some(why), None)),
        };
        let args = json!({
            "action": "generate",
            "reportId": s.report_id.to_string(),
            "format": s.format.as_str(),
        });
        let outcome = self
            .pipeline
            .call(
                &standing,
                "generate_report",
                args,
                CallOptions {
                    request_id: Some(schedule_request_id(s, due)),
                    ..CallOptions::default()
                },
                &CancellationToken::new(),
            )
            .await;
        Ok(match outcome {
            CallOutcome::Output(raw) => {
                let answer: Value = serde_json::from_str(raw.get()).unwrap_or_default();
                let run = answer["run"]["id"]
                    .as_str()
                    .and_then(|r| Uuid::parse_str(r).ok());
                match answer["run"]["status"].as_str() {
                    Some("failed") => (
                        "failed",
                        answer["run"]["error"].as_str().map(str::to_owned),
                        run,
                    ),
                    _ => ("ran", None, run),
                }
            }
            CallOutcome::Pending(r) => (
                "pending_approval",
                Some(format!("waits for approval request {}", r.id)),
                None,
            ),
            CallOutcome::Refused(r) => ("refused", Some(r.to_string()), None),
            CallOutcome::Failed(e) => ("failed", Some(e.message), None),
            other => (
                "failed",
                Some(format!("unexpected outcome: {other:?}")),
                None,
            ),
        })
    }
}
