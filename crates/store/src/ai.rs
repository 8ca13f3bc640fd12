//! The AI assistant as stored: chat sessions, their messages, the tool calls the model made in
//! them, token usage with its cost, and each organization's budget.
//!
//! A session belongs to one person in one organization. Every query of [`crate::OrgAi`] names
//! the owner as well as the organization, so another person's session — even in the same
//! organization — is `NotFound`, like one that does not exist. Usage rows outlive their session
//! (no foreign key to it), so deleting a chat never gives a budget back; an unpriced model's
//! usage has no cost (`None`), never a cost of zero.

use std::collections::BTreeMap;

use breeze_core::{
    AiMessageRole, AiSessionId, AiSessionStatus, AiToolStatus, AuditEvent, Timestamp, UserId,
};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    Result, Store, StoreError, audit,
    sql::{Arg, Tx, escape_like, sql},
};

const SESSION_COLUMNS: &str =
    "id, org_id, user_id, status, title, page_context, created_at, last_active_at, closed_at";
const MESSAGE_COLUMNS: &str =
    "id, session_id, seq, role, content, tool_use_id, tool_name, payload, is_error, created_at";
const EXECUTION_COLUMNS: &str = "id, session_id, tool_use_id, tool_name, input, status, \
     approval_id, output, error, created_at, completed_at";

/// The longest title kept; longer ones are cut at a character boundary.
pub const MAX_AI_TITLE_CHARS: usize = 200;

/// The most sessions one listing returns.
pub const MAX_AI_SESSION_PAGE: i64 = 100;

/// A chat session.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct AiSession {
    pub id: AiSessionId,
    pub org_id: breeze_core::OrgId,
    pub user_id: UserId,
    pub status: AiSessionStatus,
    pub title: String,
    /// What the page the chat was opened on showed (device, alert, overview, custom).
    #[sqlx(json(nullable))]
    pub page_context: Option<Value>,
    pub created_at: Timestamp,
    pub last_active_at: Timestamp,
    pub closed_at: Option<Timestamp>,
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct AiMessage {
    pub id: Uuid,
    pub session_id: AiSessionId,
    pub seq: i64,
    pub role: AiMessageRole,
    pub content: String,
    pub tool_use_id: Option<String>,
    pub tool_name: Option<String>,
    /// A tool call's input (`tool_use`) or what was handed back to the model (`tool_result`).
    #[sqlx(json(nullable))]
    pub payload: Option<Value>,
    pub is_error: bool,
    pub created_at: Timestamp,
}

/// A message to append.
#[derive(Debug, Clone)]
pub struct NewAiMessage {
    /// Chosen by the caller, so a stream can name the message before it is stored.
    pub id: Uuid,
    pub role: AiMessageRole,
    pub content: String,
    pub tool_use_id: Option<String>,
    pub tool_name: Option<String>,
    pub payload: Option<Value>,
    pub is_error: bool,
}

impl NewAiMessage {
    /// A plain message of `role`.
    pub fn text(role: AiMessageRole, content: impl Into<String>) -> Self {
        Self {
            id: Uuid::now_v7(),
            role,
            content: content.into(),
            tool_use_id: None,
            tool_name: None,
            payload: None,
            is_error: false,
        }
    }
}

/// What one model response spent, recorded with its message.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAiUsage {
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Millionths of a cent; `None` when the model's price is unknown.
    pub cost_micro_cents: Option<i64>,
}

/// A tool call the model made in chat.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct AiToolExecution {
    pub id: Uuid,
    pub session_id: AiSessionId,
    pub tool_use_id: String,
    pub tool_name: String,
    #[sqlx(json)]
    pub input: Value,
    pub status: AiToolStatus,
    /// A Tier 3 call's approval request (the one record every door decides).
    pub approval_id: Option<Uuid>,
    #[sqlx(json(nullable))]
    pub output: Option<Value>,
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

/// An organization's spending limits, in cents; `None`: no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct AiBudget {
    pub daily_cents: Option<i64>,
    pub monthly_cents: Option<i64>,
}

/// What an organization spent since some time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AiSpend {
    /// The priced usage, in millionths of a cent.
    pub micro_cents: i64,
    /// Messages of a model whose price is unknown (their cost is not in `micro_cents`).
    pub unpriced_messages: i64,
}

/// Usage per day (UTC), model and user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AiUsageRow {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub model: String,
    pub user_id: UserId,
    pub messages: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Millionths of a cent; `None` when any of these messages' model is unpriced.
    pub cost_micro_cents: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct UsageLine {
    created_at: Timestamp,
    model: String,
    user_id: UserId,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro_cents: Option<i64>,
}

/// `title` trimmed and held to [`MAX_AI_TITLE_CHARS`]; an empty title is refused.
fn clean_title(title: &str) -> Result<String> {
    let t = title.trim();
    if t.is_empty() {
        return Err(StoreError::Invalid("a chat title cannot be empty".into()));
    }
    Ok(t.chars().take(MAX_AI_TITLE_CHARS).collect())
}

fn to_i64(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| StoreError::Invalid(format!("{what} out of range: {n}")))
}

impl crate::OrgAi<'_> {
    /// Opens a chat session for `user`, audited.
    pub async fn create_session(
        &self,
        user: UserId,
        title: &str,
        page_context: Option<&Value>,
        audit: AuditEvent,
    ) -> Result<AiSession> {
        let title = clean_title(title)?;
        let now = self.store.clock.now();
        let id = AiSessionId::new();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO ai_sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, 'active', $4, $5, \
             $6, $6, NULL)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(user)
        .bind(&title)
        .bind(page_context.map_or(Arg::Json(None), Arg::json))
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(json!({ "title": title }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_session(user, id).await
    }

    /// `user`'s session `id` in this organization; anyone else's is `NotFound`.
    pub async fn get_session(&self, user: UserId, id: AiSessionId) -> Result<AiSession> {
        sql(format!(
            "SELECT {SESSION_COLUMNS} FROM ai_sessions WHERE id = $1 AND org_id = $2 AND user_id = $3"
        ))
        .bind(id)
        .bind(self.org)
        .bind(user)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("chat session"))
    }

    /// `user`'s sessions, most recently active first, `limit` (at most
    /// [`MAX_AI_SESSION_PAGE`]) from `offset`.
    pub async fn list_sessions(
        &self,
        user: UserId,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<AiSession>> {
        sql(format!(
            "SELECT {SESSION_COLUMNS} FROM ai_sessions WHERE org_id = $1 AND user_id = $2 \
             ORDER BY last_active_at DESC, id DESC LIMIT $3 OFFSET $4"
        ))
        .bind(self.org)
        .bind(user)
        .bind(limit.clamp(1, MAX_AI_SESSION_PAGE))
        .bind(offset.max(0))
        .fetch_all(self)
        .await
    }

    /// `user`'s sessions whose title or a user or assistant message contains `query` (case
    /// folded; `%`, `_` and `\` match only themselves), most recently active first.
    pub async fn search_sessions(
        &self,
        user: UserId,
        query: &str,
        limit: i64,
    ) -> Result<Vec<AiSession>> {
        let mut q = sql(format!(
            "SELECT {SESSION_COLUMNS} FROM ai_sessions s WHERE s.org_id = $1 AND s.user_id = $2"
        ))
        .bind(self.org)
        .bind(user);
        let p = q.arg(format!("%{}%", escape_like(&query.to_lowercase())));
        q.push(&format!(
            " AND (LOWER(s.title) LIKE {p} ESCAPE '\\' OR EXISTS (SELECT 1 FROM ai_messages m \
             WHERE m.session_id = s.id AND m.org_id = s.org_id AND m.role IN ('user', 'assistant') \
             AND LOWER(m.content) LIKE {p} ESCAPE '\\'))"
        ));
        let l = q.arg(limit.clamp(1, MAX_AI_SESSION_PAGE));
        q.push(&format!(
            " ORDER BY s.last_active_at DESC, s.id DESC LIMIT {l}"
        ));
        q.fetch_all(self).await
    }

    /// Renames `user`'s session, audited.
    pub async fn rename_session(
        &self,
        user: UserId,
        id: AiSessionId,
        title: &str,
        audit: AuditEvent,
    ) -> Result<AiSession> {
        let title = clean_title(title)?;
        self.change_session(
            user,
            id,
            "title = $1",
            Arg::from(title.clone()),
            audit.details(json!({ "title": title })),
        )
        .await
    }

    /// Closes `user`'s session, audited: it keeps its history and takes no new message.
    pub async fn close_session(
        &self,
        user: UserId,
        id: AiSessionId,
        audit: AuditEvent,
    ) -> Result<AiSession> {
        let now = self.store.clock.now();
        self.change_session(
            user,
            id,
            "status = 'closed', closed_at = $1",
            Arg::from(now),
            audit,
        )
        .await
    }

    async fn change_session(
        &self,
        user: UserId,
        id: AiSessionId,
        set: &str,
        value: Arg,
        audit: AuditEvent,
    ) -> Result<AiSession> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let changed = sql(format!(
            "UPDATE ai_sessions SET {set} WHERE id = $2 AND org_id = $3 AND user_id = $4"
        ))
        .bind(value)
        .bind(id)
        .bind(self.org)
        .bind(user)
        .execute(&mut tx)
        .await?;
        if changed == 0 {
            return Err(StoreError::NotFound("chat session"));
        }
        audit::insert(&mut tx, &audit.org(self.org).resource(id), now).await?;
        tx.commit().await?;
        self.get_session(user, id).await
    }

    /// Deletes `user`'s session with its messages and tool calls, audited. Its usage stays.
    pub async fn delete_session(
        &self,
        user: UserId,
        id: AiSessionId,
        audit: AuditEvent,
    ) -> Result<()> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let deleted = sql("DELETE FROM ai_sessions WHERE id = $1 AND org_id = $2 AND user_id = $3")
            .bind(id)
            .bind(self.org)
            .bind(user)
            .execute(&mut tx)
            .await?;
        if deleted == 0 {
            return Err(StoreError::NotFound("chat session"));
        }
        audit::insert(&mut tx, &audit.org(self.org).resource(id), now).await?;
        tx.commit().await
    }

    /// The messages of `user`'s session, in order.
    pub async fn messages(&self, user: UserId, id: AiSessionId) -> Result<Vec<AiMessage>> {
        self.get_session(user, id).await?;
        sql(format!(
            "SELECT {MESSAGE_COLUMNS} FROM ai_messages WHERE org_id = $1 AND session_id = $2 \
             ORDER BY seq"
        ))
        .bind(self.org)
        .bind(id)
        .fetch_all(self)
        .await
    }

    /// Appends messages to `user`'s active session in one transaction, with the usage of the
    /// model response they came from when given (the first message is the one it is recorded
    /// against), and marks the session active now. A closed or expired session takes none.
    pub async fn append_messages(
        &self,
        user: UserId,
        id: AiSessionId,
        messages: &[NewAiMessage],
        usage: Option<&NewAiUsage>,
    ) -> Result<()> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let touched = sql(
            "UPDATE ai_sessions SET last_active_at = $1 WHERE id = $2 AND org_id = $3 \
             AND user_id = $4 AND status = 'active'",
        )
        .bind(now)
        .bind(id)
        .bind(self.org)
        .bind(user)
        .execute(&mut tx)
        .await?;
        if touched == 0 {
            let s = self.get_session(user, id).await?;
            return Err(StoreError::Invalid(format!(
                "chat session {id} is {}: it takes no new message",
                s.status
            )));
        }
        for m in messages {
            sql(format!(
                "INSERT INTO ai_messages (org_id, {MESSAGE_COLUMNS}) VALUES ($1, $2, $3, \
                 (SELECT COALESCE(MAX(seq), 0) + 1 FROM ai_messages WHERE session_id = $3 \
                 AND org_id = $1), $4, $5, $6, $7, $8, $9, $10)"
            ))
            .bind(self.org)
            .bind(m.id)
            .bind(id)
            .bind(m.role.as_str())
            .bind(&m.content)
            .bind(m.tool_use_id.as_deref())
            .bind(m.tool_name.as_deref())
            .bind(m.payload.as_ref().map_or(Arg::Json(None), Arg::json))
            .bind(m.is_error)
            .bind(now)
            .execute(&mut tx)
            .await?;
        }
        if let Some(u) = usage {
            let message = messages.first().map(|m| m.id).ok_or_else(|| {
                StoreError::Invalid("usage needs the message it was spent on".into())
            })?;
            sql(
                "INSERT INTO ai_usage (id, org_id, session_id, message_id, user_id, model, \
                 input_tokens, output_tokens, cost_micro_cents, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(Uuid::now_v7())
            .bind(self.org)
            .bind(id)
            .bind(message)
            .bind(user)
            .bind(&u.model)
            .bind(to_i64(u.input_tokens, "input tokens")?)
            .bind(to_i64(u.output_tokens, "output tokens")?)
            .bind(u.cost_micro_cents)
            .bind(now)
            .execute(&mut tx)
            .await?;
        }
        tx.commit().await
    }

    /// Records a tool call the model made in `user`'s session.
    pub async fn create_execution(
        &self,
        user: UserId,
        session: AiSessionId,
        tool_use_id: &str,
        tool_name: &str,
        input: &Value,
    ) -> Result<AiToolExecution> {
        self.get_session(user, session).await?;
        let id = Uuid::now_v7();
        sql(format!(
            "INSERT INTO ai_tool_executions (org_id, {EXECUTION_COLUMNS}) VALUES ($1, $2, $3, $4, \
             $5, $6, 'executing', NULL, NULL, NULL, $7, NULL)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(session)
        .bind(tool_use_id)
        .bind(tool_name)
        .bind(Arg::json(input))
        .bind(self.store.clock.now())
        .execute(self)
        .await?;
        self.get_execution(user, session, id).await
    }

    /// A tool call now waits for the approval request `approval`.
    pub async fn execution_awaits(&self, id: Uuid, approval: Uuid) -> Result<()> {
        sql(
            "UPDATE ai_tool_executions SET status = 'pending', approval_id = $1 \
             WHERE id = $2 AND org_id = $3 AND status IN ('executing', 'pending')",
        )
        .bind(approval)
        .bind(id)
        .bind(self.org)
        .execute(self)
        .await?;
        Ok(())
    }

    /// A tool call ended (`completed`, `failed` or `rejected`) with `output` or `error`.
    pub async fn finish_execution(
        &self,
        id: Uuid,
        status: AiToolStatus,
        output: Option<&Value>,
        error: Option<&str>,
    ) -> Result<()> {
        if !status.is_final() {
            return Err(StoreError::Invalid(format!(
                "a tool call cannot finish as {status}"
            )));
        }
        sql(
            "UPDATE ai_tool_executions SET status = $1, output = $2, error = $3, completed_at = $4 \
             WHERE id = $5 AND org_id = $6",
        )
        .bind(status.as_str())
        .bind(output.map_or(Arg::Json(None), Arg::json))
        .bind(error)
        .bind(self.store.clock.now())
        .bind(id)
        .bind(self.org)
        .execute(self)
        .await?;
        Ok(())
    }

    /// Tool call `id` of `user`'s session `session`; anyone else's is `NotFound`.
    pub async fn get_execution(
        &self,
        user: UserId,
        session: AiSessionId,
        id: Uuid,
    ) -> Result<AiToolExecution> {
        self.get_session(user, session).await?;
        sql(format!(
            "SELECT {EXECUTION_COLUMNS} FROM ai_tool_executions WHERE id = $1 AND org_id = $2 \
             AND session_id = $3"
        ))
        .bind(id)
        .bind(self.org)
        .bind(session)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("tool execution"))
    }

    /// The tool calls of `user`'s session, oldest first.
    pub async fn executions(
        &self,
        user: UserId,
        session: AiSessionId,
    ) -> Result<Vec<AiToolExecution>> {
        self.get_session(user, session).await?;
        sql(format!(
            "SELECT {EXECUTION_COLUMNS} FROM ai_tool_executions WHERE org_id = $1 \
             AND session_id = $2 ORDER BY created_at, id"
        ))
        .bind(self.org)
        .bind(session)
        .fetch_all(self)
        .await
    }

    /// The organization's budget (no row: no limits).
    pub async fn budget(&self) -> Result<AiBudget> {
        Ok(
            sql("SELECT daily_cents, monthly_cents FROM ai_budgets WHERE org_id = $1")
                .bind(self.org)
                .fetch_optional(self)
                .await?
                .unwrap_or_default(),
        )
    }

    /// Sets the organization's budget, audited.
    pub async fn set_budget(&self, budget: AiBudget, audit: AuditEvent) -> Result<()> {
        if budget.daily_cents.is_some_and(|c| c < 0) || budget.monthly_cents.is_some_and(|c| c < 0)
        {
            return Err(StoreError::Invalid("a budget cannot be negative".into()));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO ai_budgets (org_id, daily_cents, monthly_cents, updated_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (org_id) DO UPDATE SET \
             daily_cents = excluded.daily_cents, monthly_cents = excluded.monthly_cents, \
             updated_at = excluded.updated_at",
        )
        .bind(self.org)
        .bind(budget.daily_cents)
        .bind(budget.monthly_cents)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).details(json!({
            "daily_cents": budget.daily_cents, "monthly_cents": budget.monthly_cents,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await
    }

    /// What the organization spent since `since`.
    pub async fn spent_since(&self, since: Timestamp) -> Result<AiSpend> {
        let (micro_cents, unpriced_messages): (i64, i64) = sql(
            "SELECT CAST(COALESCE(SUM(cost_micro_cents), 0) AS BIGINT), \
             CAST(COUNT(*) - COUNT(cost_micro_cents) AS BIGINT) \
             FROM ai_usage WHERE org_id = $1 AND created_at >= $2",
        )
        .bind(self.org)
        .bind(since)
        .fetch_optional(self)
        .await?
        .unwrap_or_default();
        Ok(AiSpend {
            micro_cents,
            unpriced_messages,
        })
    }

    /// Usage since `since` per day (UTC), model and user, oldest day first.
    pub async fn usage_since(&self, since: Timestamp) -> Result<Vec<AiUsageRow>> {
        let lines: Vec<UsageLine> = sql(
            "SELECT created_at, model, user_id, input_tokens, output_tokens, cost_micro_cents \
             FROM ai_usage WHERE org_id = $1 AND created_at >= $2",
        )
        .bind(self.org)
        .bind(since)
        .fetch_all(self)
        .await?;
        // Grouped here rather than in SQL: the two databases spell "the UTC day" differently.
        let mut rows: BTreeMap<(String, String, UserId), AiUsageRow> = BTreeMap::new();
        for l in lines {
            let day = l.created_at.format("%Y-%m-%d").to_string();
            let row = rows
                .entry((day.clone(), l.model.clone(), l.user_id))
                .or_insert_with(|| AiUsageRow {
                    day,
                    model: l.model,
                    user_id: l.user_id,
                    messages: 0,
                    input_tokens: 0,
                    output_tokens: 0,
                    cost_micro_cents: Some(0),
                });
            row.messages += 1;
            row.input_tokens += l.input_tokens;
            row.output_tokens += l.output_tokens;
            row.cost_micro_cents = match (row.cost_micro_cents, l.cost_micro_cents) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        Ok(rows.into_values().collect())
    }
}

impl crate::OrgAi<'_> {
    /// Marks `user`'s session expired when it has been idle since before `cutoff`; returns
    /// whether it did. A turn asks this first, so an idle session never takes a message before
    /// the sweeper saw it.
    pub async fn expire_if_idle(
        &self,
        user: UserId,
        id: AiSessionId,
        cutoff: Timestamp,
    ) -> Result<bool> {
        let changed = sql(
            "UPDATE ai_sessions SET status = 'expired' WHERE id = $1 AND org_id = $2 \
             AND user_id = $3 AND status = 'active' AND last_active_at < $4",
        )
        .bind(id)
        .bind(self.org)
        .bind(user)
        .bind(cutoff)
        .execute(self)
        .await?;
        Ok(changed > 0)
    }
}

impl Store {
    /// Marks active sessions idle since before `cutoff` expired (their history stays); returns
    /// how many. Upkeep across organizations that reads nothing back.
    pub async fn expire_idle_ai_sessions(&self, cutoff: Timestamp) -> Result<u64> {
        sql("UPDATE ai_sessions SET status = 'expired' WHERE status = 'active' AND last_active_at < $1")
            .bind(cutoff)
            .execute(self)
            .await
    }
}
