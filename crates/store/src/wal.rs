//! SQLite's write-ahead log kept short: the checkpoints that
//! [`Store::checkpoint`](crate::Store::checkpoint) runs.
//!
//! A commit appends pages (frames) to the log; a checkpoint copies them back into the database
//! file. SQLite starts the log over only when a write begins after a checkpoint has copied all
//! of it back, which under a steady stream of writes (an audit row per MCP request) never
//! happens by itself: the log grows without bound, and every page lookup searches all of it. So each checkpoint is passive (copies what it can without
//! waiting for anyone), and once the log holds [`WAL_RESTART_FRAMES`] it is followed by a
//! restart, which takes the write lock, copies the rest and has the next writer start over.
//!
//! The restart must get the write lock between two commits of a writer that takes it again
//! at once. SQLite's own busy handler sleeps up to 100 ms between tries, so against a writer
//! that leaves the lock free for a fraction of a millisecond at a time it can lose for seconds
//! on end while the log keeps growing. The restart therefore polls every [`LOCK_POLL`] instead: once it holds the lock,
//! writers wait for it, so the log cannot outgrow what was written while the passive
//! checkpoint ran.
//!
//! The server asks for one every few tens of milliseconds
//! ([`Store::checkpoint_when_due`](crate::Store::checkpoint_when_due)); one runs once [`DUE_ROWS`]
//! audit records were written since the last, or [`DUE_INTERVAL`] after it. So under load (tens of
//! thousands of records a second) checkpoints come every few tens of milliseconds and each copies
//! little, which keeps the thread that runs them off the processor in short stretches; at a request
//! at a time they come every ~150 ms, and the pages every commit rewrites (the table's and its
//! index's last ones) are copied and synced once for many commits rather than once for a few.
//!
//! Checkpoints run on rusqlite connections of their own (a custom busy handler is not to be had
//! through the pool): the audit journal's thread's when it has one (see
//! [`crate::AuditAppender`]), otherwise a [`Checkpointer`]'s on a blocking thread.

use std::{
    path::Path,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use breeze_core::Timestamp;

use crate::{SQLITE_BUSY_TIMEOUT, StoreError, open_connection};

/// Audit records written since the last checkpoint from which the next is due.
const DUE_ROWS: u64 = 1000;
/// Time since the last checkpoint from which the next is due, however little was written (other
/// tables' writes are not counted).
const DUE_INTERVAL: Duration = Duration::from_millis(250);

/// Frames (pages) in the log from which a checkpoint restarts it (~16 MB).
const WAL_RESTART_FRAMES: i64 = 4096;
/// The passive checkpoint: one row (busy, frames in the log, frames copied back).
const PASSIVE_CHECKPOINT: &str = "PRAGMA wal_checkpoint(PASSIVE)";
/// The checkpoint that has the next writer start the log over.
const RESTART_CHECKPOINT: &str = "PRAGMA wal_checkpoint(RESTART)";
/// How long a restart waits between tries for the write lock (and for readers of the old log).
const LOCK_POLL: Duration = Duration::from_micros(100);

/// Checkpoints `conn`'s database: passive, then a restart once the log holds
/// [`WAL_RESTART_FRAMES`] (see the module docs). Blocks; `conn` keeps its busy timeout.
pub(crate) fn checkpoint(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let frames: i64 = conn.query_row(PASSIVE_CHECKPOINT, [], |row| row.get(1))?;
    if frames < WAL_RESTART_FRAMES {
        return Ok(());
    }
    conn.busy_handler(Some(poll_for_lock))?;
    let restarted = conn.query_row(RESTART_CHECKPOINT, [], |_| Ok(()));
    conn.busy_timeout(SQLITE_BUSY_TIMEOUT)?;
    restarted
}

/// A busy handler that tries again every [`LOCK_POLL`], for as long as the busy timeout.
fn poll_for_lock(tries: i32) -> bool {
    const MAX_TRIES: u128 = SQLITE_BUSY_TIMEOUT.as_micros() / LOCK_POLL.as_micros();
    std::thread::sleep(LOCK_POLL);
    u128::try_from(tries).is_ok_and(|tries| tries < MAX_TRIES)
}

/// Runs [`checkpoint`] for a SQLite file without an audit journal, on a connection of its own
/// (opened on first use) on a blocking thread. Shared by clones of the store.
#[derive(Clone)]
pub(crate) struct Checkpointer {
    db: Arc<Path>,
    conn: Arc<Mutex<Option<rusqlite::Connection>>>,
}

impl Checkpointer {
    pub(crate) fn new(db: Arc<Path>) -> Self {
        Self {
            db,
            conn: Arc::default(),
        }
    }

    pub(crate) async fn checkpoint(&self) -> Result<(), StoreError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut slot = this.conn.lock().unwrap_or_else(PoisonError::into_inner);
            let conn = match &mut *slot {
                Some(conn) => conn,
                empty => empty.insert(open_connection(&this.db)?),
            };
            checkpoint(conn)
        })
        .await
        .map_err(|e| StoreError::Checkpoint(e.to_string()))?
        .map_err(|e| StoreError::Checkpoint(e.to_string()))
    }
}

/// When the next checkpoint is due (see the module docs). Shared by clones of the store.
#[derive(Debug, Default)]
pub(crate) struct Cadence {
    /// Audit records written through the store's appenders.
    written: AtomicU64,
    /// `written` and the time when the last due checkpoint was started.
    last: Mutex<Option<(u64, Timestamp)>>,
}

impl Cadence {
    pub(crate) fn wrote(&self, records: usize) {
        self.written.fetch_add(
            u64::try_from(records).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Whether a checkpoint is due at `now`; when it is, the next is counted from here. A clock
    /// that went back makes it due.
    pub(crate) fn take_due(&self, now: Timestamp) -> bool {
        let written = self.written.load(Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let due = last.is_none_or(|(rows, at)| {
            written.saturating_sub(rows) >= DUE_ROWS
                || now < at
                || (now - at).to_std().is_ok_and(|since| since >= DUE_INTERVAL)
        });
        if due {
            *last = Some((written, now));
        }
        due
    }
}
