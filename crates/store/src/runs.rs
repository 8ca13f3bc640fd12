//! The bookkeeping every "run a script as a credential" history shares: automation runs
//! (`automation_runs`) and compliance remediations (`compliance_remediations`) are rows with
//! the same life — queued, claimed by one instance, waiting for approval, finished with each
//! device's outcome — so taking queued rows, listing those that wait for approval and recording
//! progress are written once here, over a [`RunTable`] that names the table and its audit
//! words. Each module keeps what is its own (how a run is queued, what it belongs to).

use breeze_core::{Actor, AuditEvent, RunStatus, Timestamp};
use uuid::Uuid;

use crate::{
    DeviceOutcome, Result, Store, StoreError, audit,
    sql::{Arg, FromRows, Tx, sql},
};

/// A run's progress or end.
#[derive(Debug, Clone)]
pub struct RunUpdate {
    pub status: RunStatus,
    pub approval_ids: Vec<Uuid>,
    pub devices: Vec<DeviceOutcome>,
    pub message: Option<String>,
}

impl RunUpdate {
    /// A run that ended with `status` before reaching any device: no approvals, no outcomes.
    pub fn ended(status: RunStatus, message: impl Into<String>) -> Self {
        Self {
            status,
            approval_ids: vec![],
            devices: vec![],
            message: Some(message.into()),
        }
    }
}

/// A table of runs: its name and columns, and how its changes are audited.
pub(crate) struct RunTable {
    pub table: &'static str,
    pub columns: &'static str,
    /// The `NotFound` name of one row.
    pub what: &'static str,
    /// The audit record's resource type.
    pub resource_type: &'static str,
    /// Audit actions for a final update and for one that leaves the run open.
    pub finish_action: &'static str,
    pub wait_action: &'static str,
    /// The worker, in audit records.
    pub actor: fn() -> Actor,
}

/// A row of a [`RunTable`] as its module reads it.
pub(crate) trait RunRow: FromRows {
    fn id(&self) -> Uuid;
    /// Marks the row as claimed at `now` (what the claiming update wrote).
    fn started(&mut self, now: Timestamp);
}

impl RunTable {
    /// Takes up to `limit` queued rows (oldest first; each by a conditional update, so one
    /// instance gets each) and marks them running.
    pub(crate) async fn claim_queued<T: RunRow>(
        &self,
        store: &Store,
        limit: u32,
    ) -> Result<Vec<T>> {
        let queued: Vec<T> = sql(format!(
            "SELECT {} FROM {} WHERE status = 'queued' ORDER BY created_at, id LIMIT $1",
            self.columns, self.table
        ))
        .bind(i64::from(limit))
        .fetch_all(store)
        .await?;
        let now = store.clock.now();
        let mut claimed = Vec::new();
        for mut row in queued {
            let n = sql(format!(
                "UPDATE {} SET status = 'running', started_at = $1 WHERE id = $2 \
                 AND status = 'queued'",
                self.table
            ))
            .bind(now)
            .bind(row.id())
            .execute(store)
            .await?;
            if n == 1 {
                row.started(now);
                claimed.push(row);
            }
        }
        Ok(claimed)
    }

    /// Rows waiting for approval of their script runs, oldest first, at most `limit`.
    pub(crate) async fn awaiting_approval<T: RunRow>(
        &self,
        store: &Store,
        limit: u32,
    ) -> Result<Vec<T>> {
        sql(format!(
            "SELECT {} FROM {} WHERE status = 'pending_approval' ORDER BY created_at, id LIMIT $1",
            self.columns, self.table
        ))
        .bind(i64::from(limit))
        .fetch_all(store)
        .await
    }

    /// One row of `org`.
    pub(crate) async fn get<T: RunRow>(
        &self,
        org: &impl crate::handles::Scoped,
        id: Uuid,
    ) -> Result<T> {
        sql(format!(
            "SELECT {} FROM {} WHERE id = $1 AND org_id = $2",
            self.columns, self.table
        ))
        .bind(id)
        .bind(org.org())
        .fetch_optional(org.store())
        .await?
        .ok_or(StoreError::NotFound(self.what))
    }

    /// Records a row's progress or end with its audit record (`finish_action` when it ends,
    /// `wait_action` otherwise), and reads it back.
    pub(crate) async fn update<T: RunRow>(
        &self,
        org: &impl crate::handles::Scoped,
        id: Uuid,
        update: RunUpdate,
    ) -> Result<T> {
        self.update_from(org, id, update, None)
            .await?
            .ok_or(StoreError::NotFound(self.what))
    }

    /// [`RunTable::update`] only if the row is still `from` (when given): `None` when it is
    /// not (or does not exist). Instances that both saw a row waiting for approval finish it
    /// once — the one whose update moved it — and the other records nothing.
    pub(crate) async fn update_from<T: RunRow>(
        &self,
        org: &impl crate::handles::Scoped,
        id: Uuid,
        update: RunUpdate,
        from: Option<RunStatus>,
    ) -> Result<Option<T>> {
        let now = org.store().clock.now();
        let done = update.status.is_terminal();
        let mut tx = Tx::begin(&org.store().pool).await?;
        let mut q = sql(format!(
            "UPDATE {} SET status = $1, approval_ids = $2, devices = $3, message = $4, \
             finished_at = $5 WHERE id = $6 AND org_id = $7",
            self.table
        ))
        .bind(update.status.as_str())
        .bind(Arg::json(&update.approval_ids))
        .bind(Arg::json(&update.devices))
        .bind(update.message.as_deref())
        .bind(done.then_some(now))
        .bind(id)
        .bind(org.org());
        if let Some(from) = from {
            let p = q.arg(from.as_str());
            q.push(&format!(" AND status = {p}"));
        }
        let n = q.execute(&mut tx).await?;
        if n == 0 {
            return Ok(None);
        }
        let action = if done {
            self.finish_action
        } else {
            self.wait_action
        };
        let audit = AuditEvent::new((self.actor)(), action, self.resource_type)
            .org(org.org())
            .resource(id)
            .details(serde_json::json!({
                "status": update.status, "approvals": update.approval_ids,
                "devices": update.devices.len(), "message": update.message,
            }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get(org, id).await.map(Some)
    }
}
