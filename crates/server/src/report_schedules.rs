//! Scheduled reports: a [`Scheduled`] kind, fired by the server's one schedule loop
//! ([`crate::schedules`]).
//!
//! An occurrence makes the `generate_report` generate call for the schedule's definition and
//! format — the same guard, per-tool rate limit and audit record as an MCP call or the Reports
//! page's "Run now". The owner is an API key or OAuth grant (`owner_runs::acting_as`), or the
//! person who made the schedule on the Reports page: then the call is theirs as a dashboard
//! caller with the permissions their role in the organization gives them now (none once they
//! lost it or were disabled: the occurrence is refused). That is safe for this one call only
//! because `generate` is not Tier 3 — no approval is skipped — and it reads what the person
//! may read. The run is stored like any other and downloaded from the Reports page; the
//! schedule keeps which run its last occurrence made.

use breeze_core::{ActorType, Caller, OrgId, Timestamp, UserId};
use breeze_store::{ReportSchedule, Store, StoreError};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    owner_runs,
    schedules::{Came, Occurrence, ScheduleWorker, Scheduled, ScheduledCall},
};

/// The report schedule worker.
pub type ReportScheduleWorker = ScheduleWorker<ReportSchedule>;

/// The request id an occurrence's call carries (on its audit record and any approval
/// request): the schedule and the occurrence, so each occurrence is its own request.
pub fn schedule_request_id(s: &ReportSchedule, due: Timestamp) -> String {
    format!("report-schedule:{}:{}", s.id, due.timestamp())
}

impl Scheduled for ReportSchedule {
    const NAME: &'static str = "report schedule";

    fn id(&self) -> Uuid {
        self.id
    }

    fn org(&self) -> OrgId {
        self.org_id
    }

    fn due_at(&self) -> Option<Timestamp> {
        self.next_run_at
    }

    fn next_after(&self, _due: Timestamp, now: Timestamp) -> Option<Timestamp> {
        ReportSchedule::next_after(self, now)
    }

    async fn due(store: &Store, now: Timestamp, limit: u32) -> Result<Vec<Self>, StoreError> {
        store.cross_org().due_report_schedules(now, limit).await
    }

    async fn claim(
        &self,
        store: &Store,
        due: Timestamp,
        next: Option<Timestamp>,
    ) -> Result<bool, StoreError> {
        store.claim_report_schedule(self, due, next).await
    }

    async fn owner(&self, store: &Store) -> Result<Result<Caller, String>, StoreError> {
        let person = owner_runs::actor_of(&self.owner_actor)
            .filter(|a| a.kind == ActorType::User)
            .and_then(|a| a.id.parse().ok())
            .map(UserId);
        let Some(user) = person else {
            return owner_runs::acting_as(store, self.org_id, &self.owner_actor).await;
        };
        Ok(match store.org_access(user, self.org_id).await? {
            Some(access) => Ok(Caller::dashboard_session(
                user,
                self.org_id,
                Some(access.permissions),
            )),
            None => Err(format!(
                "runs as {}, who no longer holds a role in this organization; nothing was run",
                self.owner_actor
            )),
        })
    }

    fn call(&self, due: Timestamp) -> ScheduledCall {
        ScheduledCall {
            tool: "generate_report",
            arguments: json!({
                "action": "generate",
                "reportId": self.report_id.to_string(),
                "format": self.format.as_str(),
            }),
            request_id: schedule_request_id(self, due),
        }
    }

    fn ran(answer: &Value) -> Occurrence {
        let run = &answer["run"];
        let made = run["id"].as_str().and_then(|r| Uuid::parse_str(r).ok());
        match run["status"].as_str() {
            Some("failed") => Occurrence {
                came: Came::Failed,
                message: run["error"].as_str().map(str::to_owned),
                made,
            },
            _ => Occurrence {
                came: Came::Ran,
                message: None,
                made,
            },
        }
    }

    async fn record(&self, store: &Store, outcome: &Occurrence) -> Result<(), StoreError> {
        store
            .org(self.org_id)
            .reports()
            .record_report_schedule_run(
                self.id,
                outcome.came.as_str(),
                outcome.message.as_deref(),
                outcome.made,
            )
            .await
    }
}
