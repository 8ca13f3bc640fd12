//! Device commands: a durable queue with a status lifecycle
//! (pending → sent → running → completed | failed | timed_out | cancelled).
//!
//! Every transition is a conditional `UPDATE` that only moves a command forward, so duplicate
//! deliveries and duplicate results are harmless: the first terminal result is kept, later ones
//! change nothing. One terminal state yields to a result: `timed_out` set by the sweeper (no
//! result by the deadline) takes the agent's result when it arrives after all, since the
//! command did run; the row keeps its output and is marked `completed_late`.

use breeze_agent_proto::{Command, CommandKind, CommandOutcome, CommandResult};
use breeze_core::{AuditEvent, CommandStatus, DeviceId, OrgId, Timestamp};
use chrono::Duration;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    CrossOrg, Result, Store, StoreError, audit,
    sql::{Arg, Tx, sql},
};

/// Statuses a command can still leave.
const OPEN: &str = "('pending', 'sent', 'running')";

/// Server-side ceiling on stored stdout and stderr, each, whatever the agent sends.
pub const MAX_STORED_OUTPUT_BYTES: usize = 1024 * 1024;

const COLUMNS: &str = "id, org_id, device_id, kind, payload, status, timeout_secs, \
    output_cap_bytes, script_id, script_name, created_by, created_at, deadline_at, sent_at, \
    started_at, completed_at, exit_code, stdout, stderr, stdout_truncated, stderr_truncated, \
    result, error, protected_paths, completed_late";

/// A command as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CommandRecord {
    pub id: Uuid,
    pub org_id: OrgId,
    pub device_id: DeviceId,
    /// The command kind's tag, e.g. `shell`, `list_processes`.
    pub kind: String,
    /// The full [`CommandKind`] as JSON.
    #[sqlx(json)]
    pub payload: Value,
    #[sqlx(try_from = "String")]
    pub status: CommandStatus,
    pub timeout_secs: i64,
    pub output_cap_bytes: i64,
    pub script_id: Option<Uuid>,
    pub script_name: Option<String>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub deadline_at: Timestamp,
    pub sent_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub exit_code: Option<i64>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    #[sqlx(json(nullable))]
    pub result: Option<Value>,
    pub error: Option<String>,
    /// The organization's protected-path additions when the command was queued (file and
    /// disk commands only; the agent adds them to its own list).
    #[sqlx(json)]
    pub protected_paths: Vec<String>,
    /// The result arrived after the command had been timed out for want of one: the command
    /// ran, and this is its outcome.
    pub completed_late: bool,
}

impl CommandRecord {
    /// Whether the command reached a final state.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// The wire form handed to the agent.
    pub fn to_wire(&self) -> Result<Command> {
        let kind: CommandKind = serde_json::from_value(self.payload.clone())
            .map_err(|e| StoreError::Corrupt(format!("command {}: {e}", self.id)))?;
        Ok(Command {
            id: self.id,
            timeout_secs: u32::try_from(self.timeout_secs).unwrap_or(u32::MAX),
            output_cap_bytes: u64::try_from(self.output_cap_bytes).unwrap_or(0),
            kind,
            protected_paths: self.protected_paths.clone(),
        })
    }
}

/// A command to queue.
#[derive(Debug, Clone)]
pub struct NewCommand {
    pub device_id: DeviceId,
    pub kind: CommandKind,
    pub timeout_secs: u32,
    pub output_cap_bytes: u64,
    /// How long the command may wait for delivery before it counts as timed out, on top of
    /// its own timeout.
    pub queue_ttl: Duration,
    pub script: Option<(Uuid, String)>,
    pub created_by: String,
}

/// The kind tag of a command, as stored in `kind`.
pub fn kind_tag(kind: &CommandKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn cap(mut s: String, truncated: &mut bool) -> String {
    if s.len() > MAX_STORED_OUTPUT_BYTES {
        let mut end = MAX_STORED_OUTPUT_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        *truncated = true;
    }
    s
}

fn outcome_str(o: CommandOutcome) -> &'static str {
    match o {
        CommandOutcome::Completed => "completed",
        CommandOutcome::Failed => "failed",
        CommandOutcome::TimedOut => "timed_out",
        CommandOutcome::Cancelled => "cancelled",
    }
}

impl crate::OrgCommands<'_> {
    /// Queues a command for a device of this organization, audited in the same transaction.
    pub async fn create_command(
        &self,
        new: NewCommand,
        audit: AuditEvent,
    ) -> Result<CommandRecord> {
        self.whole().devices().get_device(new.device_id).await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let deadline = now + new.queue_ttl + Duration::seconds(i64::from(new.timeout_secs));
        let kind = kind_tag(&new.kind);
        let mut tx = Tx::begin_in(self).await?;
        let protected = if new.kind.touches_paths() {
            crate::protected_paths::load(&mut tx, self.org).await?
        } else {
            Vec::new()
        };
        sql(format!(
            "INSERT INTO device_commands ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, 'pending', $6, \
             $7, $8, $9, $10, $11, $12, NULL, NULL, NULL, NULL, NULL, NULL, FALSE, FALSE, NULL, NULL, \
             $13, FALSE)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.device_id)
        .bind(&kind)
        .bind(Arg::json(&new.kind))
        .bind(i64::from(new.timeout_secs))
        .bind(i64::try_from(new.output_cap_bytes).unwrap_or(i64::MAX))
        .bind(new.script.as_ref().map(|s| s.0))
        .bind(new.script.as_ref().map(|s| s.1.as_str()))
        .bind(&new.created_by)
        .bind(now)
        .bind(deadline)
        .bind(Arg::json(&protected))
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "device_id": new.device_id, "kind": kind,
            "script": new.script.as_ref().map(|s| &s.1),
            "timeout_secs": new.timeout_secs,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_command(id).await
    }

    /// Queues one command for each of several devices of this organization in one
    /// transaction, audited by one record (its details: how many, of which kind). Every
    /// command must be of the same kind tag; each device must be this organization's (the
    /// composite foreign key refuses another's). Returns the commands in the order given.
    pub async fn create_commands(
        &self,
        news: Vec<NewCommand>,
        audit: AuditEvent,
    ) -> Result<Vec<CommandRecord>> {
        let Some(first) = news.first() else {
            return Ok(Vec::new());
        };
        let kind = kind_tag(&first.kind);
        let touches_paths = first.kind.touches_paths();
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let protected = if touches_paths {
            crate::protected_paths::load(&mut tx, self.org).await?
        } else {
            Vec::new()
        };
        let mut out = Vec::with_capacity(news.len());
        for new in &news {
            if kind_tag(&new.kind) != kind {
                return Err(StoreError::Invalid(
                    "a batch of commands must all be of one kind".into(),
                ));
            }
            let deadline = now + new.queue_ttl + Duration::seconds(i64::from(new.timeout_secs));
            let row: Option<CommandRecord> = sql(format!(
                "INSERT INTO device_commands ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, 'pending', $6, \
                 $7, NULL, NULL, $8, $9, $10, NULL, NULL, NULL, NULL, NULL, NULL, FALSE, FALSE, NULL, \
                 NULL, $11, FALSE) RETURNING {COLUMNS}"
            ))
            .bind(Uuid::now_v7())
            .bind(self.org)
            .bind(new.device_id)
            .bind(&kind)
            .bind(Arg::json(&new.kind))
            .bind(i64::from(new.timeout_secs))
            .bind(i64::try_from(new.output_cap_bytes).unwrap_or(i64::MAX))
            .bind(&new.created_by)
            .bind(now)
            .bind(deadline)
            .bind(Arg::json(&protected))
            .fetch_optional(&mut tx)
            .await?;
            out.extend(row);
        }
        let audit = audit.org(self.org).details(serde_json::json!({
            "kind": kind,
            "devices": news.len(),
            "timeout_secs": first.timeout_secs,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Those of `ids` (this organization's commands) that reached a final state.
    pub async fn finished_commands(&self, ids: &[Uuid]) -> Result<Vec<CommandRecord>> {
        let mut out = Vec::new();
        for chunk in ids.chunks(200) {
            let mut q = sql(format!(
                "SELECT {COLUMNS} FROM device_commands WHERE org_id = $1 AND status NOT IN {OPEN}"
            ))
            .bind(self.org);
            let list: Vec<String> = chunk.iter().map(|id| q.arg(*id)).collect();
            q.push(&format!(" AND id IN ({})", list.join(", ")));
            out.extend(q.fetch_all(self).await?);
        }
        Ok(out)
    }

    /// Cancels those of `ids` that have not finished; returns the ones cancelled.
    pub async fn cancel_commands(&self, ids: &[Uuid], reason: &str) -> Result<Vec<CommandRecord>> {
        let mut out = Vec::new();
        for chunk in ids.chunks(200) {
            let mut q = sql(format!(
                "UPDATE device_commands SET status = 'cancelled', completed_at = $1, error = $2 \
                 WHERE org_id = $3 AND status IN {OPEN}"
            ))
            .bind(self.store.clock.now())
            .bind(reason)
            .bind(self.org);
            let list: Vec<String> = chunk.iter().map(|id| q.arg(*id)).collect();
            q.push(&format!(
                " AND id IN ({}) RETURNING {COLUMNS}",
                list.join(", ")
            ));
            out.extend(q.fetch_all(self).await?);
        }
        Ok(out)
    }

    /// One command of this organization.
    pub async fn get_command(&self, id: Uuid) -> Result<CommandRecord> {
        sql(format!(
            "SELECT {COLUMNS} FROM device_commands WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("command"))
    }

    /// The latest commands of a device of this organization, newest first.
    pub async fn list_commands(&self, device: DeviceId, limit: u32) -> Result<Vec<CommandRecord>> {
        self.whole().devices().get_device(device).await?;
        sql(format!(
            "SELECT {COLUMNS} FROM device_commands WHERE org_id = $1 AND device_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT $3"
        ))
        .bind(self.org)
        .bind(device)
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// The latest runs of library scripts in this organization (of one script when given),
    /// newest first, whichever device ran them.
    pub async fn script_executions(
        &self,
        script: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<CommandRecord>> {
        let mut q = sql(format!(
            "SELECT {COLUMNS} FROM device_commands WHERE org_id = $1 AND script_id IS NOT NULL"
        ))
        .bind(self.org);
        if let Some(id) = script {
            let p = q.arg(id);
            q.push(&format!(" AND script_id = {p}"));
        }
        let p = q.arg(i64::from(limit));
        q.push(&format!(" ORDER BY created_at DESC, id DESC LIMIT {p}"));
        q.fetch_all(self).await
    }

    /// The newest command of `kind` on a device of this organization that completed.
    pub async fn latest_completed_command(
        &self,
        device: DeviceId,
        kind: &str,
    ) -> Result<Option<CommandRecord>> {
        sql(format!(
            "SELECT {COLUMNS} FROM device_commands WHERE org_id = $1 AND device_id = $2 \
             AND kind = $3 AND status = 'completed' ORDER BY completed_at DESC, id DESC LIMIT 1"
        ))
        .bind(self.org)
        .bind(device)
        .bind(kind)
        .fetch_optional(self)
        .await
    }

    /// Cancels a command that has not finished; returns whether it was still open.
    pub async fn cancel_command(&self, id: Uuid, reason: &str) -> Result<bool> {
        let n = sql(format!(
            "UPDATE device_commands SET status = 'cancelled', completed_at = $1, error = $2 \
             WHERE id = $3 AND org_id = $4 AND status IN {OPEN}"
        ))
        .bind(self.store.clock.now())
        .bind(reason)
        .bind(id)
        .bind(self.org)
        .execute(self)
        .await?;
        Ok(n > 0)
    }
}

impl Store {
    /// Hands out a device's commands that have not started yet (oldest first), marking them
    /// sent. Commands already sent are handed out again — a delivery can be lost with a
    /// connection, and the agent runs a command id at most once — until the agent reports
    /// them started or they end.
    pub async fn claim_pending_commands(&self, device: DeviceId) -> Result<Vec<CommandRecord>> {
        let now = self.clock.now();
        let rows: Vec<CommandRecord> = sql(format!(
            "UPDATE device_commands SET status = 'sent', sent_at = COALESCE(sent_at, $1) \
             WHERE device_id = $2 AND status IN ('pending', 'sent') AND deadline_at > $1 \
             RETURNING {COLUMNS}"
        ))
        .bind(now)
        .bind(device)
        .fetch_all(self)
        .await?;
        let mut rows = rows;
        rows.sort_by_key(|r| (r.created_at, r.id));
        Ok(rows)
    }

    /// Marks one command sent (pushed on a live socket). Returns whether it was pending.
    pub async fn mark_command_sent(&self, id: Uuid) -> Result<bool> {
        let n = sql("UPDATE device_commands SET status = 'sent', sent_at = $1 \
                     WHERE id = $2 AND status = 'pending'")
        .bind(self.clock.now())
        .bind(id)
        .execute(self)
        .await?;
        Ok(n > 0)
    }

    /// Marks those of `ids` still pending sent (about to be pushed on live sockets); returns
    /// the ones marked.
    pub async fn mark_commands_sent(&self, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let mut out = Vec::new();
        for chunk in ids.chunks(200) {
            let mut q = sql("UPDATE device_commands SET status = 'sent', sent_at = $1 \
                             WHERE status = 'pending'")
            .bind(self.clock.now());
            let list: Vec<String> = chunk.iter().map(|id| q.arg(*id)).collect();
            q.push(&format!(" AND id IN ({}) RETURNING id", list.join(", ")));
            let rows: Vec<(Uuid,)> = q.fetch_all(self).await?;
            out.extend(rows.into_iter().map(|(id,)| id));
        }
        Ok(out)
    }

    /// Puts a sent command back to pending (the push failed); it goes out with the next
    /// heartbeat or reconnect.
    pub async fn requeue_command(&self, id: Uuid) -> Result<()> {
        sql(
            "UPDATE device_commands SET status = 'pending', sent_at = NULL \
             WHERE id = $1 AND status = 'sent'",
        )
        .bind(id)
        .execute(self)
        .await
        .map(drop)
    }

    /// Puts every command handed to `device` but not started back to pending: the socket
    /// they were pushed on is gone, so nothing says the agent has them. Whoever holds the
    /// agent's next socket (or answers its next HTTP heartbeat) hands them out again; the
    /// agent runs a command id at most once, so a delivery that did arrive costs nothing.
    /// Returns how many went back.
    pub async fn requeue_sent_commands(&self, device: DeviceId) -> Result<u64> {
        sql(
            "UPDATE device_commands SET status = 'pending', sent_at = NULL \
             WHERE device_id = $1 AND status = 'sent'",
        )
        .bind(device)
        .execute(self)
        .await
    }

    /// The device reports it started the command.
    pub async fn mark_command_running(&self, device: DeviceId, id: Uuid) -> Result<bool> {
        let n = sql(
            "UPDATE device_commands SET status = 'running', started_at = $1 \
                     WHERE id = $2 AND device_id = $3 AND status IN ('pending', 'sent')",
        )
        .bind(self.clock.now())
        .bind(id)
        .bind(device)
        .execute(self)
        .await?;
        Ok(n > 0)
    }

    /// Stores a command's result unless it already has one (the first result wins): while the
    /// command is open, or after the sweeper timed it out for want of a result (then it is
    /// marked `completed_late`). Returns the stored command when this result was the one kept;
    /// `None` when the command is unknown, belongs to another device, already has a result, or
    /// was cancelled. Storing is idempotent by command id, so an agent may send a result again
    /// until it is acknowledged.
    pub async fn complete_command(
        &self,
        device: DeviceId,
        r: CommandResult,
    ) -> Result<Option<CommandRecord>> {
        let (mut out_trunc, mut err_trunc) = (r.stdout_truncated, r.stderr_truncated);
        let stdout = cap(r.stdout, &mut out_trunc);
        let stderr = cap(r.stderr, &mut err_trunc);
        // A stored result always sets stdout (empty at least); the sweeper's timeout never
        // does, which is how a late result tells the sweeper's timeout from a stored one.
        let row: Option<CommandRecord> = sql(format!(
            "UPDATE device_commands SET status = $1, started_at = COALESCE(started_at, $2), \
             completed_at = $3, exit_code = $4, stdout = $5, stderr = $6, \
             stdout_truncated = $7, stderr_truncated = $8, result = $9, error = $10, \
             completed_late = (status = 'timed_out') \
             WHERE id = $11 AND device_id = $12 \
             AND (status IN {OPEN} OR (status = 'timed_out' AND stdout IS NULL)) \
             RETURNING {COLUMNS}"
        ))
        .bind(outcome_str(r.status))
        .bind(r.started_at)
        .bind(self.clock.now())
        .bind(r.exit_code.map(i64::from))
        .bind(stdout)
        .bind(stderr)
        .bind(out_trunc)
        .bind(err_trunc)
        .bind(r.result.as_ref().map_or(Arg::Json(None), Arg::json))
        .bind(r.error)
        .bind(r.command_id)
        .bind(device)
        .fetch_optional(self)
        .await?;
        Ok(row)
    }
}

impl CrossOrg<'_> {
    /// Concludes every open command past its deadline as timed out; returns them.
    pub async fn time_out_commands(&self) -> Result<Vec<CommandRecord>> {
        let now = self.store.clock.now();
        sql(format!(
            "UPDATE device_commands SET status = 'timed_out', completed_at = $1, \
             error = CASE WHEN status = 'pending' \
                 THEN 'the device did not pick the command up in time' \
                 ELSE 'no result arrived before the deadline' END \
             WHERE status IN {OPEN} AND deadline_at <= $1 RETURNING {COLUMNS}"
        ))
        .bind(now)
        .fetch_all(self)
        .await
    }
}
