//! Device context memory: known issues, quirks, follow-ups and preferences per device.
//! Resolved and expired entries leave the active context but stay in the history.

use breeze_core::{AuditEvent, DeviceId, Timestamp};
use serde::Serialize;
use serde_json::Value;

use uuid::Uuid;

use crate::{
    Result, StoreError, audit,
    sql::{Arg, Tx, sql},
};

/// One remembered fact about a device.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ContextEntry {
    pub id: Uuid,
    pub device_id: DeviceId,
    pub context_type: String,
    pub summary: String,
    #[sqlx(json(nullable))]
    pub details: Option<Value>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub resolved_at: Option<Timestamp>,
}

impl ContextEntry {
    /// `active`, `resolved` or `expired` at `now`.
    pub fn state(&self, now: Timestamp) -> &'static str {
        if self.resolved_at.is_some() {
            "resolved"
        } else if self.expires_at.is_some_and(|e| e <= now) {
            "expired"
        } else {
            "active"
        }
    }
}

/// The kinds of context entry.
pub const CONTEXT_TYPES: [&str; 4] = ["issue", "quirk", "followup", "preference"];

const COLUMNS: &str = "id, device_id, context_type, summary, details, created_by, created_at, expires_at, resolved_at";

/// A context entry to record.
#[derive(Debug, Clone)]
pub struct NewContext {
    pub device_id: DeviceId,
    pub context_type: String,
    pub summary: String,
    pub details: Option<Value>,
    pub created_by: String,
    pub expires_at: Option<Timestamp>,
}

impl crate::OrgContext<'_> {
    /// Records a context entry on a device of this organization.
    pub async fn add_context(&self, new: NewContext, audit: AuditEvent) -> Result<ContextEntry> {
        if !CONTEXT_TYPES.contains(&new.context_type.as_str()) {
            return Err(StoreError::Invalid(format!(
                "unknown context type {:?} (expected one of {})",
                new.context_type,
                CONTEXT_TYPES.join(", ")
            )));
        }
        self.whole().devices().get_device(new.device_id).await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO device_context (org_id, {COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(new.device_id)
        .bind(&new.context_type)
        .bind(&new.summary)
        .bind(new.details.as_ref().map_or(Arg::Json(None), Arg::json))
        .bind(&new.created_by)
        .bind(now)
        .bind(new.expires_at)
        .bind(None::<Timestamp>)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "device_id": new.device_id, "context_type": new.context_type, "summary": new.summary,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_context(id).await
    }

    /// One context entry of this organization.
    pub async fn get_context(&self, id: Uuid) -> Result<ContextEntry> {
        sql(format!(
            "SELECT {COLUMNS} FROM device_context WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("context entry"))
    }

    /// A device's context, newest first; resolved and expired entries only when asked for.
    pub async fn device_context(
        &self,
        device: DeviceId,
        include_inactive: bool,
    ) -> Result<Vec<ContextEntry>> {
        self.whole().devices().get_device(device).await?;
        let mut q = sql(format!(
            "SELECT {COLUMNS} FROM device_context WHERE org_id = $1 AND device_id = $2"
        ))
        .bind(self.org)
        .bind(device);
        if !include_inactive {
            let now = q.arg(self.store.clock.now());
            q.push(&format!(
                " AND resolved_at IS NULL AND (expires_at IS NULL OR expires_at > {now})"
            ));
        }
        q.push(" ORDER BY created_at DESC, id DESC");
        q.fetch_all(self).await
    }

    /// Marks an entry resolved (kept in history). Resolving twice keeps the first time.
    pub async fn resolve_context(&self, id: Uuid, audit: AuditEvent) -> Result<ContextEntry> {
        self.whole()
            .stamp_once("device_context", "resolved_at", id, audit)
            .await?;
        self.get_context(id).await
    }
}
