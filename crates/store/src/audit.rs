//! The append-only audit log: writing records (alone or inside a change's transaction) and
//! querying them with filters and keyset pagination.

use std::borrow::Cow;

use breeze_core::{
    Actor, ActorType, AiSessionId, AuditEvent, AuditId, AuditRecord, AuditResult, OrgId, Timestamp,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::{Connection, PgConnection, postgres::PgConnectOptions, types::Json};
use uuid::Uuid;

use crate::{
    Pool, Result, Store, StoreError,
    sql::{Arg, Sql, Target, Tx, escape_like, json_without_nul, sql, without_nul},
};

/// Columns of an audit row, in insert order (a macro, so that statements can `concat!` it).
macro_rules! audit_columns {
    () => {
        "id, created_at, org_id, actor_type, actor_id, action, resource_type, resource_id, \
         details, result, error_message, request_id"
    };
}
pub(crate) use audit_columns;

const INSERT_COLUMNS: &str = concat!("INSERT INTO audit_log (", audit_columns!(), ") VALUES ");

/// Records per multi-row insert (12 parameters each; well under both backends' limits).
const ROWS_PER_INSERT: usize = 64;

/// Appends one `($n, …)` tuple for `event` to `q`.
fn push_row(q: &mut Sql, id: AuditId, event: &AuditEvent, now: Timestamp) {
    q.push_row([
        id.into(),
        now.into(),
        event.org_id.into(),
        event.actor.kind.as_str().into(),
        event.actor.id.as_str().into(),
        event.action.as_str().into(),
        event.resource_type.as_str().into(),
        event.resource_id.clone().into(),
        Arg::json(&event.details),
        event.result.as_str().into(),
        event.error_message.clone().into(),
        event.request_id.clone().into(),
    ]);
}

/// Writes `event` stamped `now`, on `target` (the pool, or the transaction of the change).
pub(crate) async fn insert<'a>(
    target: impl Into<Target<'a>>,
    event: &AuditEvent,
    now: Timestamp,
) -> Result<AuditId> {
    let id = AuditId::new();
    let mut q = sql(INSERT_COLUMNS);
    push_row(&mut q, id, event, now);
    q.execute(target).await?;
    Ok(id)
}

/// Deletes row `id` of `org` from `table` in `tx`; `what` names it when it is not there (gone
/// already, or another organization's).
pub(crate) async fn delete_row(
    tx: &mut Tx,
    org: OrgId,
    table: &str,
    id: impl Into<Arg>,
    what: &'static str,
) -> Result<()> {
    let n = sql(format!("DELETE FROM {table} WHERE id = $1 AND org_id = $2"))
        .bind(id)
        .bind(org)
        .execute(tx)
        .await?;
    if n == 0 {
        return Err(StoreError::NotFound(what));
    }
    Ok(())
}

/// The names of an update's fields that were supplied, for the `changed` list of its audit
/// record: each pair is a field's wire name and whether the update set it.
pub(crate) fn changed_fields<const N: usize>(
    fields: [(&'static str, bool); N],
) -> Vec<&'static str> {
    fields
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect()
}

/// Which audit records to return. Every field narrows the result.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuditFilter {
    /// Exact action, or a prefix ending in `.` or `*` (`mcp.` matches `mcp.tools.call`).
    pub action: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    pub actor_type: Option<ActorType>,
    pub actor_id: Option<String>,
    pub result: Option<AuditResult>,
    /// Inclusive lower bound.
    pub since: Option<Timestamp>,
    /// Exclusive upper bound.
    pub until: Option<Timestamp>,
}

impl AuditFilter {
    /// Narrows to one AI chat session's records. The assistant acts as its session (actor
    /// `ai_chat:<session>`, see `Caller::ai_chat`), so its tool calls (`ai.tools.call`), the
    /// pipeline's records of them, the changes they made and their approval requests all carry
    /// the session in the actor columns, not only in `details`. A filter that already
    /// names another actor is refused rather than silently matching nothing.
    pub fn in_chat_session(mut self, session: AiSessionId) -> Result<Self> {
        let id = session.to_string();
        if self.actor_type.is_some_and(|t| t != ActorType::AiChat)
            || self.actor_id.as_deref().is_some_and(|a| a != id)
        {
            return Err(StoreError::Invalid(
                "a chat session filter names its actor (ai_chat and the session's id); leave the \
                 actor filters empty"
                    .into(),
            ));
        }
        self.actor_type = Some(ActorType::AiChat);
        self.actor_id = Some(id);
        Ok(self)
    }
}

/// What a listing narrows beyond [`AuditFilter`]: the dashboard's view of the log.
#[derive(Debug, Clone, Default)]
pub struct AuditView {
    /// Actions left out, each exact or a `LIKE` pattern (`mcp.notifications.%`): protocol
    /// noise a person does not want to page through.
    pub exclude_actions: Vec<&'static str>,
    /// Only the records of one request (a tool call and the changes it made).
    pub request_id: Option<String>,
}

/// Where the next page starts: the last record of the previous page (newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditCursor {
    pub created_at: Timestamp,
    pub id: AuditId,
}

impl AuditCursor {
    /// The opaque string form handed to clients.
    pub fn encode(&self) -> String {
        use base64::Engine as _;
        let raw = format!("{}|{}", self.created_at.to_rfc3339(), self.id);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    /// Parses [`AuditCursor::encode`]'s output.
    pub fn decode(s: &str) -> Result<Self> {
        use base64::Engine as _;
        let bad = || StoreError::Invalid(format!("invalid cursor {s:?}"));
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| bad())?;
        let raw = String::from_utf8(raw).map_err(|_| bad())?;
        let (ts, id) = raw.split_once('|').ok_or_else(bad)?;
        Ok(Self {
            created_at: chrono_parse(ts).ok_or_else(bad)?,
            id: id.parse().map_err(|_| bad())?,
        })
    }
}

fn chrono_parse(s: &str) -> Option<Timestamp> {
    s.parse::<Timestamp>().ok()
}

/// One page of audit records, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage {
    pub records: Vec<AuditRecord>,
    /// Present when more records follow. Clients get it in [`AuditCursor::encode`]d form.
    #[serde(skip)]
    pub next_cursor: Option<AuditCursor>,
}

#[derive(sqlx::FromRow)]
pub(crate) struct AuditRow {
    id: Uuid,
    created_at: Timestamp,
    org_id: Option<Uuid>,
    actor_type: String,
    actor_id: String,
    action: String,
    resource_type: String,
    resource_id: Option<String>,
    details: Json<Value>,
    result: String,
    error_message: Option<String>,
    request_id: Option<String>,
}

impl TryFrom<AuditRow> for AuditRecord {
    type Error = StoreError;
    fn try_from(r: AuditRow) -> Result<Self> {
        let corrupt = |e: breeze_core::ParseError| StoreError::Corrupt(e.to_string());
        Ok(AuditRecord {
            id: AuditId(r.id),
            created_at: r.created_at,
            event: AuditEvent {
                org_id: r.org_id.map(OrgId),
                actor: Actor {
                    kind: r.actor_type.parse().map_err(corrupt)?,
                    id: r.actor_id,
                },
                action: r.action,
                resource_type: r.resource_type,
                resource_id: r.resource_id,
                details: r.details.0,
                result: r.result.parse().map_err(corrupt)?,
                error_message: r.error_message,
                request_id: r.request_id,
            },
        })
    }
}

/// Narrows `q` (a statement ending in a `WHERE` clause) to records created at or after
/// `since` and before `until`.
pub(crate) fn push_time_bounds(q: &mut Sql, since: Option<Timestamp>, until: Option<Timestamp>) {
    if let Some(since) = since {
        let p = q.arg(since);
        q.push(&format!(" AND created_at >= {p}"));
    }
    if let Some(until) = until {
        let p = q.arg(until);
        q.push(&format!(" AND created_at < {p}"));
    }
}

/// The most records one page may hold.
pub const MAX_AUDIT_PAGE: u32 = 500;

impl Store {
    /// Appends an audit record on its own (for events with no change to share a transaction).
    pub async fn append_audit(&self, event: &AuditEvent) -> Result<AuditId> {
        insert(self, event, self.clock.now()).await
    }
}

/// Writes `events` stamped `now` atomically, with as few statements as possible. The pool's
/// path of [`crate::AuditAppender`].
///
/// On PostgreSQL that is one statement over arrays ([`insert_batch_pg`]); on SQLite one
/// transaction of one multi-row insert per [`ROWS_PER_INSERT`] records.
pub(crate) async fn insert_batch(
    store: &Store,
    events: &[AuditEvent],
    now: Timestamp,
) -> Result<()> {
    if let Pool::Postgres { audit, .. } = &store.pool {
        return audit.insert(events, now).await;
    }
    let mut tx = Tx::begin(&store.pool).await?;
    for chunk in events.chunks(ROWS_PER_INSERT) {
        let mut q = sql(INSERT_COLUMNS);
        for (i, event) in chunk.iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            push_row(&mut q, AuditId::new(), event, now);
        }
        q.execute(&mut tx).await?;
    }
    tx.commit().await
}

/// The insert of [`PgRows`]' arrays, one statement whatever their length (`$2` holds each row's
/// time, `$9` its details as JSON text); `ON CONFLICT DO NOTHING` is added where stored ids are
/// skipped ([`Stored::Skip`]).
///
/// Every request's record goes through here on PostgreSQL, so its cost is the hot path's. One
/// statement is atomic without a transaction: a batch is one round trip, where BEGIN, INSERT
/// and COMMIT were three. And one text serves every batch size, so each connection prepares it
/// once, where a `VALUES` list per size was parsed and planned again whenever a size fell out
/// of the connection's statement cache.
macro_rules! pg_insert_arrays {
    () => {
        concat!(
            "INSERT INTO audit_log (",
            audit_columns!(),
            ") SELECT id, created_at, org_id, actor_type, actor_id, action, resource_type, \
             resource_id, details::json, result, error_message, request_id \
             FROM UNNEST($1::uuid[], $2::timestamptz[], $3::uuid[], $4::text[], $5::text[], \
             $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], \
             $12::text[]) \
             AS r(id, created_at, org_id, actor_type, actor_id, action, resource_type, \
             resource_id, details, result, error_message, request_id)"
        )
    };
}

/// What [`PgRows::insert`] does with a row whose id is already stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// Fail the statement: new records, whose ids cannot have been stored.
    Refuse,
    /// Skip the row: a journal segment moved again after a crash holds rows already in.
    Skip,
}

/// One audit row's columns in their stored form, borrowed: SQLite's id bytes, and the time as
/// `At` (SQLite's text by default; PostgreSQL's timestamp for [`PgRows`]).
pub(crate) struct Row<'a, At = &'a str> {
    pub(crate) id: [u8; 16],
    pub(crate) at: At,
    pub(crate) org: Option<[u8; 16]>,
    pub(crate) actor_type: ActorType,
    pub(crate) actor_id: &'a str,
    pub(crate) action: &'a str,
    pub(crate) resource_type: &'a str,
    pub(crate) resource_id: Option<&'a str>,
    /// JSON text.
    pub(crate) details: &'a str,
    pub(crate) result: AuditResult,
    pub(crate) error: Option<&'a str>,
    pub(crate) request_id: Option<&'a str>,
}

impl<'a, At> Row<'a, At> {
    /// `event`'s row, stored as `id` at `at` with `details` (its details as JSON text).
    pub(crate) fn of_event(event: &'a AuditEvent, id: AuditId, at: At, details: &'a str) -> Self {
        Row {
            id: *id.0.as_bytes(),
            at,
            org: event.org_id.map(|o| *o.0.as_bytes()),
            actor_type: event.actor.kind,
            actor_id: &event.actor.id,
            action: &event.action,
            resource_type: &event.resource_type,
            resource_id: event.resource_id.as_deref(),
            details,
            result: event.result,
            error: event.error_message.as_deref(),
            request_id: event.request_id.as_deref(),
        }
    }
}

/// Audit rows as the arrays of one PostgreSQL statement: the pool's batches
/// ([`insert_batch_pg`]) and the audit journal's moves alike, so that rows written either way
/// are stored alike. Text is stored as every other statement stores it: each U+0000 as U+FFFD
/// (PostgreSQL's text refuses U+0000). The arrays borrow the rows' text, copying only a value
/// that holds a U+0000: every request's record passes through here.
pub(crate) struct PgRows<'a> {
    ids: Vec<Uuid>,
    times: Vec<Timestamp>,
    orgs: Vec<Option<Uuid>>,
    actor_types: Vec<&'static str>,
    actor_ids: Vec<Cow<'a, str>>,
    actions: Vec<Cow<'a, str>>,
    resource_types: Vec<Cow<'a, str>>,
    resource_ids: Vec<Option<Cow<'a, str>>>,
    details: Vec<Cow<'a, str>>,
    results: Vec<&'static str>,
    error_messages: Vec<Option<Cow<'a, str>>>,
    request_ids: Vec<Option<Cow<'a, str>>>,
}

impl<'a> PgRows<'a> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        PgRows {
            ids: Vec::with_capacity(n),
            times: Vec::with_capacity(n),
            orgs: Vec::with_capacity(n),
            actor_types: Vec::with_capacity(n),
            actor_ids: Vec::with_capacity(n),
            actions: Vec::with_capacity(n),
            resource_types: Vec::with_capacity(n),
            resource_ids: Vec::with_capacity(n),
            details: Vec::with_capacity(n),
            results: Vec::with_capacity(n),
            error_messages: Vec::with_capacity(n),
            request_ids: Vec::with_capacity(n),
        }
    }

    pub(crate) fn push(&mut self, row: &Row<'a, Timestamp>) {
        self.ids.push(Uuid::from_bytes(row.id));
        self.times.push(row.at);
        self.orgs.push(row.org.map(Uuid::from_bytes));
        self.actor_types.push(row.actor_type.as_str());
        self.actor_ids.push(without_nul(row.actor_id));
        self.actions.push(without_nul(row.action));
        self.resource_types.push(without_nul(row.resource_type));
        self.resource_ids.push(row.resource_id.map(without_nul));
        self.details.push(json_without_nul(row.details));
        self.results.push(row.result.as_str());
        self.error_messages.push(row.error.map(without_nul));
        self.request_ids.push(row.request_id.map(without_nul));
    }

    /// Inserts the rows in one statement (so one round trip, and atomic).
    pub(crate) async fn insert(
        self,
        conn: &mut PgConnection,
        stored: Stored,
    ) -> std::result::Result<(), sqlx::Error> {
        let statement = match stored {
            Stored::Refuse => pg_insert_arrays!(),
            Stored::Skip => concat!(pg_insert_arrays!(), " ON CONFLICT DO NOTHING"),
        };
        sqlx::query(statement)
            .bind(self.ids)
            .bind(self.times)
            .bind(self.orgs)
            .bind(self.actor_types)
            .bind(self.actor_ids)
            .bind(self.actions)
            .bind(self.resource_types)
            .bind(self.resource_ids)
            .bind(self.details)
            .bind(self.results)
            .bind(self.error_messages)
            .bind(self.request_ids)
            .execute(conn)
            .await
            .map(drop)
    }
}

/// Connections of the audit appender's own on PostgreSQL, kept out of the pools.
///
/// Every request's record is written here, so what a pooled connection costs on each use
/// would be the hot path's: the pool pings a connection (a round trip) every time it comes
/// back. These are taken and put back without one; a connection whose statement failed, or
/// whose caller gave up mid-way, is dropped and the next batch opens a new one.
///
/// Their commits are synchronous unless asynchronous ones were asked for
/// ([`crate::StoreOptions::audit_synchronous_commit`] off): then PostgreSQL acknowledges the
/// commit before its write-ahead log reaches the disk, so at one request at a time the record
/// costs no disk flush, but a PostgreSQL crash loses what its WAL writer had not flushed (three
/// times `wal_writer_delay`, 600 ms by default). A change's own audit record, written in the
/// change's transaction, is committed synchronously as always.
pub(crate) struct AuditConnections {
    options: PgConnectOptions,
    idle: std::sync::Mutex<Vec<PgConnection>>,
    permits: tokio::sync::Semaphore,
}

impl std::fmt::Debug for AuditConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditConnections")
            .field("available", &self.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl AuditConnections {
    /// At most `max` connections with `options`, opened when first needed.
    pub(crate) fn new(options: PgConnectOptions, max: usize) -> Self {
        Self {
            options,
            idle: std::sync::Mutex::default(),
            permits: tokio::sync::Semaphore::new(max.max(1)),
        }
    }

    /// What its connections are opened with (the audit journal's mover opens its own alike).
    pub(crate) fn options(&self) -> &PgConnectOptions {
        &self.options
    }

    /// Writes `events` stamped `now` in one statement.
    async fn insert(&self, events: &[AuditEvent], now: Timestamp) -> Result<()> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolClosed))?;
        let mut conn = self.take_or_connect().await?;
        insert_batch_pg(&mut conn, events, now).await?;
        self.put_back(conn);
        Ok(())
    }

    /// An idle connection, or a new one (waited for as long as a pool acquire).
    async fn take_or_connect(&self) -> Result<PgConnection> {
        if let Some(conn) = self.take_idle() {
            return Ok(conn);
        }
        tokio::time::timeout(
            crate::PG_ACQUIRE_TIMEOUT,
            PgConnection::connect_with(&self.options),
        )
        .await
        .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolTimedOut))?
        .map_err(StoreError::from)
    }

    fn put_back(&self, conn: PgConnection) {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(conn);
    }

    fn take_idle(&self) -> Option<PgConnection> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    }

    /// A setting as the audit connections see it (`SHOW`), for tests.
    #[cfg(feature = "testing")]
    pub(crate) async fn show(&self, setting: &str) -> Result<String> {
        let mut conn = self.take_or_connect().await?;
        let value = show(&mut conn, setting).await?;
        self.put_back(conn);
        Ok(value)
    }

    /// Closes the idle connections; later batches open new ones.
    pub(crate) async fn close(&self) {
        while let Some(conn) = self.take_idle() {
            let _ = conn.close().await;
        }
    }
}

#[cfg(feature = "testing")]
async fn show(conn: &mut PgConnection, setting: &str) -> Result<String> {
    Ok(sqlx::query_scalar("SELECT current_setting($1)")
        .bind(setting)
        .fetch_one(conn)
        .await?)
}

async fn insert_batch_pg(
    conn: &mut PgConnection,
    events: &[AuditEvent],
    now: Timestamp,
) -> Result<()> {
    let details: Vec<String> = events.iter().map(|e| e.details.to_string()).collect();
    let mut rows = PgRows::with_capacity(events.len());
    for (event, details) in events.iter().zip(&details) {
        rows.push(&Row::of_event(event, AuditId::new(), now, details));
    }
    rows.insert(conn, Stored::Refuse).await?;
    Ok(())
}

impl crate::OrgAudit<'_> {
    /// Appends an audit record in this organization (whatever `event.org_id` said).
    pub async fn append_audit(&self, event: AuditEvent) -> Result<AuditId> {
        insert(self, &event.org(self.org), self.store.clock.now()).await
    }

    /// Audit records of this organization matching `filter`, newest first, `limit` per page
    /// (capped at [`MAX_AUDIT_PAGE`]), starting after `after`.
    pub async fn query_audit(
        &self,
        filter: &AuditFilter,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> Result<AuditPage> {
        self.query_audit_view(filter, &AuditView::default(), after, limit)
            .await
    }

    /// [`Self::query_audit`], narrowed further by `view`.
    pub async fn query_audit_view(
        &self,
        filter: &AuditFilter,
        view: &AuditView,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> Result<AuditPage> {
        // Records still in the audit journal are part of the log.
        self.store.flush_audit().await;
        let limit = limit.clamp(1, MAX_AUDIT_PAGE);
        let mut q = sql(
            "SELECT id, created_at, org_id, actor_type, actor_id, action, resource_type, \
                         resource_id, details, result, error_message, request_id \
                         FROM audit_log WHERE org_id = $1",
        )
        .bind(self.org);
        if let Some(action) = &filter.action {
            if let Some(prefix) = action
                .strip_suffix('*')
                .or(action.ends_with('.').then_some(action.as_str()))
            {
                let p = q.arg(format!("{}%", escape_like(prefix)));
                q.push(&format!(" AND action LIKE {p} ESCAPE '\\'"));
            } else {
                let p = q.arg(action.as_str());
                q.push(&format!(" AND action = {p}"));
            }
        }
        for (column, value) in [
            ("resource_type", filter.resource_type.as_deref()),
            ("resource_id", filter.resource_id.as_deref()),
            ("actor_type", filter.actor_type.map(ActorType::as_str)),
            ("actor_id", filter.actor_id.as_deref()),
            ("result", filter.result.map(AuditResult::as_str)),
        ] {
            if let Some(value) = value {
                let p = q.arg(value);
                q.push(&format!(" AND {column} = {p}"));
            }
        }
        for pattern in &view.exclude_actions {
            let p = q.arg(*pattern);
            q.push(&format!(" AND action NOT LIKE {p}"));
        }
        if let Some(r) = &view.request_id {
            let p = q.arg(r.as_str());
            q.push(&format!(" AND request_id = {p}"));
        }
        // Resuming, the cursor is the upper bound (see `Sql::push_keyset`).
        let until = if after.is_some() { None } else { filter.until };
        push_time_bounds(&mut q, filter.since, until);
        if let Some(cursor) = after {
            q.push_keyset("created_at", cursor.created_at, "id", cursor.id, true);
        }
        let fetch = q.arg(i64::from(limit) + 1);
        q.push(&format!(" ORDER BY created_at DESC, id DESC LIMIT {fetch}"));

        let mut rows: Vec<AuditRow> = q.fetch_all(self).await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let records = rows
            .into_iter()
            .map(AuditRecord::try_from)
            .collect::<Result<Vec<_>>>()?;
        let next_cursor = more
            .then(|| {
                records.last().map(|r| AuditCursor {
                    created_at: r.created_at,
                    id: r.id,
                })
            })
            .flatten();
        Ok(AuditPage {
            records,
            next_cursor,
        })
    }
}
