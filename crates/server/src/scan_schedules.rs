//! Scheduled security scans: a [`Scheduled`] kind, fired by the server's one schedule loop
//! ([`crate::schedules`]).
//!
//! An occurrence makes the stored `security_scan` scan call as the schedule's owner (an API
//! key or OAuth grant, `owner_runs::acting_as`) — so the per-tool rate limit (3 scans in 10
//! minutes per user) and the Tier 3 approval hold as for an MCP call; its scans are recorded
//! as any scan is.

use breeze_core::{Caller, OrgId, Timestamp, security::ScheduledScanStatus};
use breeze_store::{ScanSchedule, Store, StoreError};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    owner_runs,
    schedules::{Came, Occurrence, ScheduleWorker, Scheduled, ScheduledCall},
};

/// The scan schedule worker.
pub type ScanScheduleWorker = ScheduleWorker<ScanSchedule>;

/// The request id a schedule's calls carry (on approval requests and audit records).
pub fn schedule_request_id(s: &ScanSchedule) -> String {
    format!("scan-schedule:{}", s.id)
}

impl Scheduled for ScanSchedule {
    const NAME: &'static str = "scan schedule";

    fn id(&self) -> Uuid {
        self.id
    }

    fn org(&self) -> OrgId {
        self.org_id
    }

    fn due_at(&self) -> Option<Timestamp> {
        self.next_run_at
    }

    fn next_after(&self, due: Timestamp, now: Timestamp) -> Option<Timestamp> {
        ScanSchedule::next_after(self, due, now)
    }

    async fn due(store: &Store, now: Timestamp, limit: u32) -> Result<Vec<Self>, StoreError> {
        store.cross_org().due_scan_schedules(now, limit).await
    }

    async fn claim(
        &self,
        store: &Store,
        due: Timestamp,
        next: Option<Timestamp>,
    ) -> Result<bool, StoreError> {
        store.claim_scan_schedule(self, due, next).await
    }

    async fn owner(&self, store: &Store) -> Result<Result<Caller, String>, StoreError> {
        owner_runs::acting_as(store, self.org_id, &self.owner_actor).await
    }

    fn call(&self, _due: Timestamp) -> ScheduledCall {
        let mut arguments = self.arguments.clone();
        if let Value::Object(m) = &mut arguments {
            m.insert("action".into(), Value::from("scan"));
        }
        ScheduledCall {
            tool: "security_scan",
            arguments,
            request_id: schedule_request_id(self),
        }
    }

    fn ran(answer: &Value) -> Occurrence {
        let scans: Vec<&str> = answer["scans"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x["scanId"].as_str())
            .collect();
        Occurrence {
            came: Came::Ran,
            message: Some(format!("scans {}", scans.join(", "))),
            made: None,
        }
    }

    async fn record(&self, store: &Store, outcome: &Occurrence) -> Result<(), StoreError> {
        let status = match outcome.came {
            Came::Ran => ScheduledScanStatus::Ran,
            Came::PendingApproval => ScheduledScanStatus::PendingApproval,
            Came::Refused => ScheduledScanStatus::Refused,
            Came::Failed => ScheduledScanStatus::Failed,
        };
        store
            .org(self.org_id)
            .security()
            .record_scan_schedule_run(self.id, status, outcome.message.as_deref())
            .await
    }
}
