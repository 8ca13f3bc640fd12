//! The one loop behind every scheduled call (security scans, reports): a [`ScheduleWorker`]
//! of a [`Scheduled`] kind, one of the server's background tasks ([`crate::serve`]).
//!
//! Each tick takes the schedules whose occurrence is due (by the store's clock) through their
//! lease (the instance that moves `next_run_at` forward fires it, so a cluster fires each
//! occurrence once) and makes the schedule's call through [`Pipeline::call`] as its owner
//! rebuilt as they stand now: the same guard, per-tool rate limit, Tier 3 approval and audit
//! record as an MCP call. What the occurrence came to is kept on the schedule; a missed
//! occurrence is not made up. A kind says only what differs: where its schedules live, who
//! its owner is, which call it makes and what an answer means.

use std::{future::Future, marker::PhantomData, sync::Arc, time::Duration};

use breeze_core::{Caller, OrgId, Timestamp};
use breeze_pipeline::{CallOutcome, Pipeline};
use breeze_store::{Store, StoreError};
use breeze_tools::CallOptions;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::workers::{Tasks, Worker};

/// How often a schedule worker looks for due occurrences.
pub const SCHEDULE_TICK: Duration = Duration::from_secs(30);

/// What an occurrence came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Came {
    /// The call completed.
    Ran,
    /// The call waits for a person's approval.
    PendingApproval,
    /// The guard, the owner's standing or the approval refused it.
    Refused,
    Failed,
}

impl Came {
    pub fn as_str(self) -> &'static str {
        match self {
            Came::Ran => "ran",
            Came::PendingApproval => "pending_approval",
            Came::Refused => "refused",
            Came::Failed => "failed",
        }
    }
}

/// An occurrence's outcome as its schedule keeps it.
#[derive(Debug)]
pub struct Occurrence {
    pub came: Came,
    pub message: Option<String>,
    /// What the call made, when the kind keeps it (a report's run).
    pub made: Option<Uuid>,
}

impl Occurrence {
    fn new(came: Came, message: Option<String>) -> Self {
        Self {
            came,
            message,
            made: None,
        }
    }
}

/// The call one occurrence makes.
pub struct ScheduledCall {
    pub tool: &'static str,
    pub arguments: Value,
    /// Carried on the call's audit record and any approval request.
    pub request_id: String,
}

/// A kind of schedule: a stored row that names a call to make on a cadence.
pub trait Scheduled: Send + Sync + Sized + 'static {
    /// What the logs call its worker.
    const NAME: &'static str;

    fn id(&self) -> Uuid;
    fn org(&self) -> OrgId;
    /// The occurrence due next (`None`: the schedule is spent).
    fn due_at(&self) -> Option<Timestamp>;
    /// The occurrence after `due`, seen at `now`.
    fn next_after(&self, due: Timestamp, now: Timestamp) -> Option<Timestamp>;

    /// Every organization's schedules due at `now`, at most `limit`.
    fn due(
        store: &Store,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Self>, StoreError>> + Send;
    /// Moves `next_run_at` from `due` to `next`; false when another instance did first.
    fn claim(
        &self,
        store: &Store,
        due: Timestamp,
        next: Option<Timestamp>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// The owner as they stand now, or why they cannot act.
    fn owner(
        &self,
        store: &Store,
    ) -> impl Future<Output = Result<Result<Caller, String>, StoreError>> + Send;
    /// The call the occurrence due at `due` makes.
    fn call(&self, due: Timestamp) -> ScheduledCall;
    /// What a completed call's answer came to.
    fn ran(answer: &Value) -> Occurrence;
    /// Keeps the outcome on the schedule.
    fn record(
        &self,
        store: &Store,
        outcome: &Occurrence,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The worker of one kind of schedule. Cheap to share (`Arc`).
pub struct ScheduleWorker<S> {
    store: Store,
    pipeline: Pipeline,
    runs: Tasks,
    kind: PhantomData<fn() -> S>,
}

impl<S: Scheduled> ScheduleWorker<S> {
    pub fn new(store: Store, pipeline: Pipeline) -> Self {
        Self {
            store,
            pipeline,
            runs: Tasks::default(),
            kind: PhantomData,
        }
    }

    /// Waits until every occurrence fired so far has finished (tests, and shutdown).
    pub async fn settle(&self) {
        self.runs.settle().await;
    }

    /// Makes one occurrence's call as the owner.
    async fn fire(&self, s: &S, due: Timestamp) -> Result<Occurrence, StoreError> {
        let caller = match s.owner(&self.store).await? {
            Ok(c) => c,
            Err(why) => return Ok(Occurrence::new(Came::Refused, Some(why))),
        };
        let call = s.call(due);
        let options = CallOptions {
            request_id: Some(call.request_id),
            ..CallOptions::default()
        };
        let outcome = self
            .pipeline
            .call(
                &caller,
                call.tool,
                call.arguments,
                options,
                &CancellationToken::new(),
            )
            .await;
        Ok(match outcome {
            CallOutcome::Output(raw) => {
                S::ran(&serde_json::from_str(raw.get()).unwrap_or_default())
            }
            CallOutcome::Pending(r) => Occurrence::new(
                Came::PendingApproval,
                Some(format!("waits for approval request {}", r.id)),
            ),
            CallOutcome::Refused(r) => Occurrence::new(Came::Refused, Some(r.to_string())),
            CallOutcome::Failed(e) => Occurrence::new(Came::Failed, Some(e.message)),
            other => Occurrence::new(Came::Failed, Some(format!("unexpected outcome: {other:?}"))),
        })
    }
}

/// Runs every [`SCHEDULE_TICK`].
impl<S: Scheduled> Worker for ScheduleWorker<S> {
    const NAME: &'static str = S::NAME;
    type Report = usize;
    type Error = StoreError;

    fn period(&self) -> Duration {
        SCHEDULE_TICK
    }

    /// One round: fires every due occurrence this instance claims, each in a task of its own
    /// (a scan waits for its devices, a large report takes a while). Returns how many it fired.
    async fn tick(self: &Arc<Self>) -> Result<usize, StoreError> {
        let now = self.store.clock().now();
        let mut fired = 0;
        for s in S::due(&self.store, now, 100).await? {
            let Some(due) = s.due_at() else { continue };
            if !s.claim(&self.store, due, s.next_after(due, now)).await? {
                continue;
            }
            fired += 1;
            let this = self.clone();
            self.runs.spawn(async move {
                let outcome = match this.fire(&s, due).await {
                    Ok(o) => o,
                    Err(e) => Occurrence::new(Came::Failed, Some(format!("internal error: {e}"))),
                };
                if let Err(e) = s.record(&this.store, &outcome).await {
                    tracing::warn!(
                        schedule = %s.id(),
                        org = %s.org(),
                        error = %e,
                        "{} outcome not recorded",
                        S::NAME
                    );
                }
            });
        }
        Ok(fired)
    }
}
