//! Group commits of audit records, for hot paths that write one per request.
//!
//! An [`AuditAppender`] writes a batch of records in one transaction and hands back the ones it
//! could not write. On a SQLite file it drives a connection of its own from a dedicated thread:
//! the batch crosses to that thread once and the answer comes back once, where sqlx's pool
//! would hand every statement (begin, insert, commit) to a connection's worker thread and back.
//! At one request at a time that took a request from nine thread switches to about three. On
//! PostgreSQL (and in-memory SQLite, which a second connection cannot open) it goes through
//! the pool.
//!
//! Rows are encoded exactly as sqlx encodes them (ids as 16-byte blobs, timestamps as
//! RFC 3339 with automatic fractional digits, details as JSON text), so the two writers' rows
//! sort and read back alike; a test on both backends reads every field back.

use std::{path::Path, sync::mpsc, time::Duration};

use breeze_core::{AuditEvent, AuditId, Timestamp};
use chrono::SecondsFormat;
use rusqlite::{TransactionBehavior, params};
use tokio::sync::oneshot;

use crate::{Backend, Result, Store, StoreError, audit};

/// Records that could not be written, each with why.
pub type Unwritten = Vec<(AuditEvent, StoreError)>;

/// Writes batches of audit records, each in one transaction. Cheap to clone.
#[derive(Clone)]
pub struct AuditAppender {
    store: Store,
    thread: Option<mpsc::Sender<Job>>,
}

struct Job {
    events: Vec<AuditEvent>,
    now: Timestamp,
    done: oneshot::Sender<Unwritten>,
}

impl std::fmt::Debug for AuditAppender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditAppender")
            .field("backend", &self.store.backend())
            .field("own_thread", &self.thread.is_some())
            .finish()
    }
}

impl Store {
    /// An appender for this store's audit log. On a SQLite file it opens a connection of its
    /// own, driven by a thread that lives as long as the appender; if that connection cannot be
    /// opened, it says so in the log and writes through the pool instead.
    pub fn audit_appender(&self) -> AuditAppender {
        let thread = self.sqlite_file.as_deref().and_then(|path| {
            spawn_writer(path)
                .inspect_err(|e| {
                    tracing::warn!(
                        error = %e,
                        "audit appender: no connection of its own; writing through the pool"
                    );
                })
                .ok()
        });
        AuditAppender {
            store: self.clone(),
            thread,
        }
    }
}

impl AuditAppender {
    /// How many [`AuditAppender::append`] calls are worth having in flight at once: one on
    /// SQLite (one writer at a time), a few on PostgreSQL (which commits concurrent
    /// transactions together, so a commit's latency rather than its CPU bounds one writer).
    pub fn max_in_flight(&self) -> usize {
        match self.store.backend() {
            Backend::Sqlite => 1,
            Backend::Postgres => 4,
        }
    }

    /// Writes `events` stamped now, in one transaction; if that fails, each alone. Returns the
    /// records that could still not be written.
    pub async fn append(&self, events: Vec<AuditEvent>) -> Unwritten {
        let now = self.store.clock.now();
        let Some(thread) = &self.thread else {
            return self.append_through_pool(events, now).await;
        };
        let (done, answer) = oneshot::channel();
        if let Err(mpsc::SendError(job)) = thread.send(Job { events, now, done }) {
            return gone(job.events);
        }
        // The thread answers every job it takes; a dropped sender means it died with the job.
        answer.await.unwrap_or_default()
    }

    async fn append_through_pool(&self, events: Vec<AuditEvent>, now: Timestamp) -> Unwritten {
        let Err(e) = audit::insert_batch(&self.store, &events, now).await else {
            return Vec::new();
        };
        tracing::warn!(error = %e, records = events.len(), "audit batch failed; retrying one by one");
        let mut unwritten = Vec::new();
        for event in events {
            if let Err(e) = audit::insert(&self.store, &event, now).await {
                unwritten.push((event, e));
            }
        }
        unwritten
    }
}

fn gone(events: Vec<AuditEvent>) -> Unwritten {
    events
        .into_iter()
        .map(|e| (e, StoreError::AuditWriter("its thread has stopped".into())))
        .collect()
}

/// Opens the thread's connection (here, so that a failure is reported to the caller) and
/// starts the thread.
fn spawn_writer(path: &Path) -> Result<mpsc::Sender<Job>> {
    let conn = open(path).map_err(|e| {
        StoreError::Config(format!(
            "cannot open {} for the audit writer: {e}",
            path.display()
        ))
    })?;
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("breeze-audit".into())
        .spawn(move || run(conn, rx))
        .map_err(|e| StoreError::Config(format!("cannot start the audit writer thread: {e}")))?;
    Ok(tx)
}

/// The pool's settings that matter to a writer (see `Store::connect`).
fn open(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         PRAGMA mmap_size = 268435456; PRAGMA wal_autocheckpoint = 16384;",
    )?;
    Ok(conn)
}

/// The thread: one job at a time until every appender is gone.
fn run(mut conn: rusqlite::Connection, jobs: mpsc::Receiver<Job>) {
    while let Ok(Job { events, now, done }) = jobs.recv() {
        let _ = done.send(write(&mut conn, events, now));
    }
}

fn write(conn: &mut rusqlite::Connection, events: Vec<AuditEvent>, now: Timestamp) -> Unwritten {
    let Err(e) = insert_all(conn, &events, now) else {
        return Vec::new();
    };
    tracing::warn!(error = %e, records = events.len(), "audit batch failed; retrying one by one");
    events
        .into_iter()
        .filter_map(|event| {
            insert_all(conn, std::slice::from_ref(&event), now)
                .err()
                .map(|e| (event, StoreError::AuditWriter(e.to_string())))
        })
        .collect()
}

const INSERT_ONE: &str = "INSERT INTO audit_log (id, created_at, org_id, actor_type, actor_id, \
    action, resource_type, resource_id, details, result, error_message, request_id) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// `events` in one immediate transaction (a write transaction from its first statement).
fn insert_all(
    conn: &mut rusqlite::Connection,
    events: &[AuditEvent],
    now: Timestamp,
) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let created_at = now.to_rfc3339_opts(SecondsFormat::AutoSi, false);
        let mut insert = tx.prepare_cached(INSERT_ONE)?;
        for e in events {
            let details = serde_json::to_string(&e.details)
                .map_err(|err| rusqlite::Error::ToSqlConversionFailure(Box::new(err)))?;
            insert.execute(params![
                AuditId::new().0.as_bytes(),
                created_at,
                e.org_id.map(|o| *o.0.as_bytes()),
                e.actor.kind.as_str(),
                e.actor.id,
                e.action,
                e.resource_type,
                e.resource_id,
                details,
                e.result.as_str(),
                e.error_message,
                e.request_id,
            ])?;
        }
    }
    tx.commit()
}
