//! Audit records for hot paths that write one per request.
//!
//! An [`AuditAppender`] takes a batch of records and returns once they are safe, handing back
//! any it could not write. How depends on the database:
//!
//! - **A SQLite file: directly, or through a journal.**
//!   - A batch of [`DIRECT_MIN_BATCH`] records or more (what concurrent requests hand in
//!     together) is inserted into `audit_log` at once, in one transaction on a connection of
//!     its own that never waits for the write lock and never checkpoints, so the caller is not
//!     blocked by another writer: when the lock is taken, or the insert fails, the batch is
//!     journaled instead.
//!   - Otherwise the batch is appended to a journal file next to the database
//!     (`<db>-audit-<n>.jsonl`, one JSON line per record) with one `write`, and the call
//!     returns. The records are also held in memory (up to [`MAX_HELD`]), and the next direct
//!     inserts take them along in their transactions ([`MAX_ALONG`] each). What no direct
//!     insert took within about one [`MOVE_INTERVAL`] (a request at a time sends no batch
//!     direct) a thread with its own connection, at a lower priority than the requests, moves
//!     into `audit_log` (in transactions of [`ROWS_PER_MOVE`] rows); it deletes a segment once
//!     all of it is in. Why both: under load the journal takes the batches that found the write lock taken
//!     (by a checkpoint's restart), and a mover inserting them would take the lock in turn,
//!     at its low priority holding it while requests run, so that more batches find it taken
//!     and are journaled; taken along, they cost their insert and nothing more. The same
//!     thread runs the database's checkpoints ([`Store::checkpoint`]), so that they too take
//!     the processor only below the requests. Once [`MAX_BACKLOG`] records wait in the
//!     journal, batches of any size go direct. [`Store::flush_audit`], which every audit query
//!     runs first, moves at once, so a process reads its own records. Segments left by a
//!     process that died, and those of records beyond [`MAX_HELD`], are moved from their
//!     files. Moves insert `OR IGNORE` by id, so a record inserted twice (a crash between
//!     commit and delete, a segment moved from its file while a direct insert took some of
//!     its records along) is stored once. A lock file (`<db>-audit.lock`) gives the journal to
//!     one process at a time; another (a second server on the same file) writes through the
//!     pool.
//!
//!   Both have the durability of SQLite's own write-ahead log at `synchronous = NORMAL`: the
//!   record survives the process, not necessarily a power cut. Why two ways: a lone record
//!   costs an order of magnitude more to commit (the pages a commit writes) than to journal,
//!   and moves then commit in bulk; a batch's commit is cheap per record, and inserting it
//!   where it was handed in puts the work between requests, in the runtime's own order,
//!   instead of on a thread the kernel slots in among them a millisecond at a time, which
//!   would set the tail latency under load.
//! - **PostgreSQL with a journal directory** ([`crate::StoreOptions::audit_journal`], which
//!   `breeze serve` sets): the same journal, in that directory (`audit-<n>.jsonl`, lock
//!   `audit.lock`), whose mover inserts over a connection of its own (one statement over
//!   arrays per [`ROWS_PER_MOVE`] rows, `ON CONFLICT DO NOTHING`); a batch of
//!   [`DIRECT_MIN_BATCH`] or more goes to the pool's path below, awaited, since an insert there
//!   costs a round trip however many rows it holds. Why: a lone record otherwise waits for a
//!   round trip to the database, which at one request at a time is most of the request. The
//!   durability is the SQLite journal's, and so is the price: what the mover has not moved yet
//!   (at most [`MOVE_INTERVAL`] of records, or more while the database is unreachable, up to
//!   [`MAX_BACKLOG`], after which records are inserted or refused) sits on this instance's
//!   disk until it next starts, which is why each instance needs a directory of its own that
//!   outlives it (a second process finds the lock taken and goes without).
//! - **Otherwise (PostgreSQL without one, in-memory SQLite): the pool**, one statement or
//!   transaction per batch, each record retried alone if the batch fails.
//!
//! Rows are encoded exactly as sqlx encodes them (ids as 16-byte blobs, timestamps as RFC 3339
//! with automatic fractional digits, details as JSON text), so rows written any way sort and
//! read back alike; a test compares them column by column.

use std::{
    borrow::Cow,
    collections::{BTreeMap, VecDeque},
    fs::{File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
    sync::{
        Arc, LazyLock, Mutex, OnceLock, Weak,
        atomic::{AtomicUsize, Ordering},
        mpsc::{self, RecvTimeoutError},
    },
    time::{Duration, Instant},
};

use breeze_core::{ActorType, AuditEvent, AuditId, AuditResult, OrgId, Timestamp};
use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sqlx::{Connection, PgConnection, postgres::PgConnectOptions};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::{
    Backend, Store, StoreError,
    audit::{self, PgRows, Row, Stored, audit_columns},
    open_connection,
    sql::{json_without_nul, without_nul},
    wal,
};

/// Records that could not be written, each with its place in the batch handed in and why.
pub type Unwritten = Vec<(usize, AuditEvent, StoreError)>;

/// How long records gather in the journal before they are moved into the table: short, since
/// a move is work done in one go (a few hundred records per move under load), yet long enough
/// that a move's fixed costs (a new segment file, a commit) are shared by many records (with
/// [`ROWS_PER_MOVE`] rows to a transaction).
pub(crate) const MOVE_INTERVAL: Duration = Duration::from_millis(25);
/// Batches at least this large are inserted into the table directly rather than journaled
/// (see the module docs).
const DIRECT_MIN_BATCH: usize = 8;
/// Records waiting in the journal from which on a batch of any size is inserted directly. The
/// mover runs at a lower priority (`MOVER_NICE_INCREMENT`), so while requests keep the
/// processor busy it may fall behind; this bounds what it leaves waiting, and so how long a
/// flush (every audit query) can wait for it.
pub const MAX_BACKLOG: usize = 1024;
/// Most journaled records held in memory for the direct inserts to take along (see the module
/// docs); beyond it, while the database refuses them, records wait in the journal files only.
const MAX_HELD: usize = 1 << 16;
/// Most held records one direct insert takes along: after the table was busy for a while,
/// many wait, and one insert taking them all would hold up every request meanwhile; spread
/// over the next few, each costs a little more.
const MAX_ALONG: usize = 64;
/// How much lower than the rest of the process the mover's priority is (Linux nice values).
/// Moves then use the processor when requests leave it idle, and a request arriving mid-move
/// takes the processor at once instead of waiting out the mover's time slice, which keeps
/// tail latency down. Under full load the mover still gets a share of the processor, and
/// [`MAX_BACKLOG`] sends the rest direct.
#[cfg(target_os = "linux")]
const MOVER_NICE_INCREMENT: i32 = 10;
/// How often a move that failed is tried again.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The store's journal, opened by the first appender (shared by clones of the store).
pub(crate) type JournalSlot = Arc<OnceLock<Option<Arc<Journal>>>>;

/// Writes batches of audit records. Cheap to clone.
#[derive(Clone)]
pub struct AuditAppender {
    store: Store,
    journal: Option<Arc<Journal>>,
}

impl std::fmt::Debug for AuditAppender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditAppender")
            .field("backend", &self.store.backend())
            .field("journal", &self.journal.as_ref().map(|j| &j.base))
            .finish()
    }
}

impl Store {
    /// An appender for this store's audit log: through a journal on a SQLite file, or on
    /// PostgreSQL in the directory [`crate::StoreOptions::audit_journal`] names (opened, and
    /// any segments a dead process left moved, on first use), otherwise through the pool. When
    /// the journal cannot be had (another process holds it, or the directory is not writable)
    /// the log says why and the pool is used.
    pub fn audit_appender(&self) -> AuditAppender {
        let journal = self.journal_place().and_then(|place| {
            self.audit_journal
                .get_or_init(|| {
                    Journal::open(place)
                        .inspect_err(|e| {
                            tracing::warn!(error = %e, "audit journal unavailable; writing through the pool");
                        })
                        .ok()
                })
                .clone()
        });
        AuditAppender {
            store: self.clone(),
            journal,
        }
    }

    /// Where this store's audit journal lives, if it has one.
    fn journal_place(&self) -> Option<Place<'_>> {
        match (&self.sqlite_file, &self.pool, &self.audit_journal_dir) {
            (Some(db), _, _) => Some(Place::Sqlite(db)),
            (None, crate::Pool::Postgres { audit, .. }, Some(dir)) => {
                Some(Place::Postgres(dir, audit.options()))
            }
            _ => None,
        }
    }

    /// Opens this store's audit journal (as [`Store::audit_appender`] does) and moves every
    /// record in it into the table now, including segments a dead process left; returns the
    /// journal's path (a SQLite file's, or the directory's `audit`), to which its segment
    /// numbers are appended. For an instance being retired, whose journal would otherwise wait
    /// until a process opens that directory again.
    ///
    /// Fails, naming why, when this store has no journal (PostgreSQL without
    /// [`crate::StoreOptions::audit_journal`], in-memory SQLite), when another process holds it
    /// (stop that one, or let it move its own), or when segments are still left (the database
    /// refused them; the log says why, nothing is lost, and a later run tries again).
    pub async fn move_audit_journal(&self) -> Result<PathBuf, StoreError> {
        let place = self.journal_place().ok_or_else(|| {
            StoreError::AuditJournal(
                "this store keeps no audit journal (on PostgreSQL, name its directory)".into(),
            )
        })?;
        let mut failure = None;
        let journal = self
            .audit_journal
            .get_or_init(|| {
                Journal::open(place)
                    .inspect_err(|e| failure = Some(e.to_string()))
                    .ok()
            })
            .clone()
            .ok_or_else(|| {
                StoreError::AuditJournal(failure.unwrap_or_else(|| {
                    "the audit journal could not be opened when this process first wrote; the \
                     log says why"
                        .into()
                }))
            })?;
        journal.flush().await;
        let left: Vec<PathBuf> = segments(&journal.base)
            .map_err(|e| StoreError::AuditJournal(format!("cannot list journal segments: {e}")))?
            .into_iter()
            .map(|s| segment_path(&journal.base, s.seq))
            .filter(|path| std::fs::metadata(path).is_ok_and(|m| m.len() > 0))
            .collect();
        if let Some(first) = left.first() {
            return Err(StoreError::AuditJournal(format!(
                "{} journal segment(s) could not be moved, {} the first (the log says why; run \
                 it again once the database takes them)",
                left.len(),
                first.display()
            )));
        }
        Ok(journal.base.clone())
    }

    /// Records this process journaled that are not in `audit_log` yet (`None` without a
    /// journal, or before the first append opened it). They sit on this instance's disk: a
    /// backlog that grows means the database does not take them.
    pub fn audit_journal_backlog(&self) -> Option<usize> {
        match self.audit_journal.get() {
            Some(Some(journal)) => Some(journal.backlog.load(Ordering::Relaxed)),
            _ => None,
        }
    }

    /// Moves journaled audit records into the table now (see [`AuditAppender`]); nothing to do
    /// without a journal. A move that fails keeps the journal for the next attempt.
    pub async fn flush_audit(&self) {
        if let Some(Some(journal)) = self.audit_journal.get() {
            journal.flush().await;
        }
    }
}

impl AuditAppender {
    /// How many [`AuditAppender::append`] calls are worth having in flight at once: a few on
    /// PostgreSQL (which commits concurrent transactions together, so a commit's latency rather
    /// than its CPU bounds one writer), one on SQLite.
    pub fn max_in_flight(&self) -> usize {
        match self.store.backend() {
            Backend::Sqlite => 1,
            Backend::Postgres => crate::AUDIT_CONNECTIONS,
        }
    }

    /// Writes `events` stamped now and returns the records that could not be written.
    pub async fn append(&self, events: Vec<AuditEvent>) -> Unwritten {
        let records = events.len();
        let unwritten = self.write(events).await;
        self.store
            .cadence
            .wrote(records.saturating_sub(unwritten.len()));
        unwritten
    }

    /// Writes `events` stamped now without awaiting anything, when this store can (a SQLite
    /// file, through its journal or a direct insert); `false` when it cannot, or that failed,
    /// and the caller writes them with [`append`](Self::append). With no await, a caller that
    /// is dropped cannot cut the write off halfway.
    pub fn append_now(&self, events: &[AuditEvent]) -> bool {
        let Some(journal) = &self.journal else {
            return false;
        };
        if !journal.write(events, self.store.clock.now()) {
            return false;
        }
        self.store.cadence.wrote(events.len());
        true
    }

    async fn write(&self, events: Vec<AuditEvent>) -> Unwritten {
        let now = self.store.clock.now();
        if let Some(journal) = &self.journal
            && journal.write(&events, now)
        {
            return Vec::new();
        }
        self.append_through_pool(events, now).await
    }

    async fn append_through_pool(&self, events: Vec<AuditEvent>, now: Timestamp) -> Unwritten {
        let Err(e) = audit::insert_batch(&self.store, &events, now).await else {
            return Vec::new();
        };
        tracing::warn!(error = %e, records = events.len(), "audit batch failed; retrying one by one");
        let mut unwritten = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            if let Err(e) = audit::insert(&self.store, &event, now).await {
                unwritten.push((i, event, e));
            }
        }
        unwritten
    }
}

/// Whether a batch of `records` is inserted directly, with `backlog` records in the journal.
fn goes_direct(records: usize, backlog: usize) -> bool {
    records >= DIRECT_MIN_BATCH || backlog >= MAX_BACKLOG
}

/// One journaled record, as written: the row's columns, already in their stored form.
#[derive(Serialize)]
struct LineOut<'a> {
    id: AuditId,
    at: &'a str,
    org: Option<OrgId>,
    actor_type: &'static str,
    actor_id: &'a str,
    action: &'a str,
    resource_type: &'a str,
    resource_id: Option<&'a str>,
    details: &'a RawValue,
    result: &'static str,
    error: Option<&'a str>,
    request_id: Option<&'a str>,
}

/// One journaled record, as read back: borrowed from the segment's text where it can be, and
/// `details` kept as the JSON text it will be stored as.
#[derive(Deserialize)]
struct LineIn<'a> {
    id: Uuid,
    #[serde(borrow)]
    at: Cow<'a, str>,
    org: Option<Uuid>,
    actor_type: ActorType,
    #[serde(borrow)]
    actor_id: Cow<'a, str>,
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow)]
    resource_type: Cow<'a, str>,
    #[serde(borrow)]
    resource_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    details: &'a RawValue,
    result: AuditResult,
    #[serde(borrow)]
    error: Option<Cow<'a, str>>,
    #[serde(borrow)]
    request_id: Option<Cow<'a, str>>,
}

/// What the appenders tell the mover.
enum Msg {
    /// A segment that was empty has records.
    Pending,
    /// Move everything now and answer.
    Flush(oneshot::Sender<()>),
    /// Checkpoint the database (see [`Store::checkpoint`]) and answer.
    Checkpoint(oneshot::Sender<rusqlite::Result<()>>),
}

/// The journal of one database: the segment being appended to, and the mover thread.
pub(crate) struct Journal {
    /// `<db>-audit` on SQLite, `<dir>/audit` on PostgreSQL: segments are `<base>-<n>.jsonl`,
    /// the lock `<base>.lock`.
    base: PathBuf,
    current: Mutex<Segment>,
    mover: mpsc::Sender<Msg>,
    /// SQLite's direct path. PostgreSQL has none: large batches go through the appender's
    /// connections.
    direct: Option<Direct>,
    /// Records this process journaled that are not in the table yet (shared with the mover).
    backlog: Arc<AtomicUsize>,
    /// Held (locked) for the journal's life.
    _lock: File,
}

struct Segment {
    seq: u64,
    file: File,
    len: u64,
    /// Records appended to it and not held in memory.
    unheld: usize,
}

/// SQLite's direct path: the connection batches are inserted on, and the journaled records the
/// inserts take along.
struct Direct {
    /// Never waits for the write lock and never checkpoints (the server's checkpointer does),
    /// so it never blocks its caller.
    conn: Mutex<rusqlite::Connection>,
    /// Locked after `conn` when both are: whoever holds `conn` has no held records in flight
    /// but its own.
    held: Mutex<Held>,
}

/// Journaled records not yet in the table, in the form they are inserted in.
#[derive(Default)]
struct Held {
    /// Oldest first.
    rows: VecDeque<HeldRow>,
    /// Per segment, how many of its held records are not in the table yet: held, or taken by
    /// an insert that has not committed. Its file is deleted only once none are left.
    unmoved: BTreeMap<u64, usize>,
}

/// One journaled record as it is inserted; `seq` is its segment's.
struct HeldRow {
    seq: u64,
    id: AuditId,
    at: Arc<str>,
    details: Box<RawValue>,
    event: AuditEvent,
}

impl HeldRow {
    fn row(&self) -> Row<'_> {
        Row::of_event(&self.event, self.id, &self.at, self.details.get())
    }
}

impl Direct {
    /// Inserts `events`, and the oldest [`MAX_ALONG`] held records along with them, in one
    /// transaction, or nothing: `Err` with `DatabaseBusy` at once when another connection holds
    /// the write lock, the held records then held again. Returns how many held records went in.
    fn insert(&self, events: &[AuditEvent], now: Timestamp) -> rusqlite::Result<usize> {
        let at = now.to_rfc3339_opts(SecondsFormat::AutoSi, false);
        let details = events
            .iter()
            .map(|e| serde_json::to_string(&e.details))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
        let rows = events
            .iter()
            .zip(&details)
            .map(|(e, details)| Row::of_event(e, AuditId::new(), at.as_str(), details));
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let taken: Vec<HeldRow> = {
            let mut held = self.held();
            let along = held.rows.len().min(MAX_ALONG);
            held.rows.drain(..along).collect()
        };
        let inserted = insert_rows(&mut conn, rows.chain(taken.iter().map(HeldRow::row)));
        let along = self.settle(taken, inserted.is_ok());
        drop(conn);
        inserted.map(|()| along)
    }

    /// Holds `events`, journaled in segment `seq` as `ids` with `details`; `false` when that
    /// would hold more than [`MAX_HELD`].
    fn hold(
        &self,
        seq: u64,
        events: &[AuditEvent],
        ids: Vec<AuditId>,
        details: Vec<Box<RawValue>>,
        at: &Arc<str>,
    ) -> bool {
        let mut held = self.held();
        if held.rows.len() + events.len() > MAX_HELD {
            return false;
        }
        held.rows.extend(
            events
                .iter()
                .zip(ids)
                .zip(details)
                .map(|((event, id), details)| HeldRow {
                    seq,
                    id,
                    at: at.clone(),
                    details,
                    event: event.clone(),
                }),
        );
        *held.unmoved.entry(seq).or_default() += events.len();
        true
    }

    /// Takes the held records of segments up to `seq`, for the mover; with `conn` locked, so
    /// that no direct insert has any in flight (a flush then misses none).
    fn take(&self, seq: u64) -> Vec<HeldRow> {
        let _conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut held = self.held();
        let (taken, kept): (VecDeque<_>, _) = std::mem::take(&mut held.rows)
            .into_iter()
            .partition(|r| r.seq <= seq);
        held.rows = kept;
        taken.into()
    }

    /// Counts `taken` as in the table when `committed`, or holds them again; returns how many
    /// went in.
    fn settle(&self, taken: Vec<HeldRow>, committed: bool) -> usize {
        if taken.is_empty() {
            return 0;
        }
        let mut held = self.held();
        if !committed {
            // Back in front, oldest first, as they were taken from there.
            for row in taken.into_iter().rev() {
                held.rows.push_front(row);
            }
            return 0;
        }
        for row in &taken {
            if let Some(left) = held.unmoved.get_mut(&row.seq) {
                *left = left.saturating_sub(1);
            }
        }
        taken.len()
    }

    /// How many held records of segment `seq` are not in the table yet.
    fn unmoved(&self, seq: u64) -> usize {
        self.held().unmoved.get(&seq).copied().unwrap_or(0)
    }

    /// Forgets segment `seq`, whose file was moved: its held records are in the table. Returns
    /// how many were still held.
    fn forget(&self, seq: u64) -> usize {
        let mut held = self.held();
        held.unmoved.remove(&seq);
        let before = held.rows.len();
        held.rows.retain(|r| r.seq != seq);
        before - held.rows.len()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Journal {
    fn open(place: Place<'_>) -> Result<Arc<Journal>, StoreError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            StoreError::AuditJournal(format!("{what} ({}): {e}", place.path().display()))
        };
        let base = match place {
            Place::Sqlite(db) => with_suffix(db, "-audit"),
            Place::Postgres(dir, _) => {
                crate::create_private_dir(dir)
                    .map_err(|e| fail("cannot create the journal directory", &e))?;
                dir.join("audit")
            }
        };
        let lock = File::create(with_suffix(&base, ".lock"))
            .map_err(|e| fail("cannot create the journal lock", &e))?;
        lock.try_lock()
            .map_err(|e| fail("the journal is held by another process", &e))?;
        let (sink, direct) = match place {
            Place::Sqlite(db) => {
                let conn = open_connection(db).map_err(|e| fail("cannot open the database", &e))?;
                let direct = open_connection(db)
                    .and_then(|c| {
                        c.busy_timeout(Duration::ZERO)?;
                        c.execute_batch("PRAGMA wal_autocheckpoint = 0")?;
                        Ok(c)
                    })
                    .map_err(|e| fail("cannot open the database", &e))?;
                let direct = Direct {
                    conn: Mutex::new(direct),
                    held: Mutex::default(),
                };
                (Sink::Sqlite(conn), Some(direct))
            }
            Place::Postgres(_, options) => (
                Sink::Postgres(Box::new(
                    PgSink::new(options.clone())
                        .map_err(|e| fail("cannot start the journal's runtime", &e))?,
                )),
                None,
            ),
        };
        let sealed = segments(&base).map_err(|e| fail("cannot list journal segments", &e))?;
        let seq = sealed.last().map_or(0, |s| s.seq + 1);
        let current =
            Segment::create(&base, seq).map_err(|e| fail("cannot create a segment", &e))?;
        let (tx, rx) = mpsc::channel();
        let backlog = Arc::new(AtomicUsize::new(0));
        let journal = Arc::new(Journal {
            base: base.clone(),
            current: Mutex::new(current),
            mover: tx,
            direct,
            backlog: backlog.clone(),
            _lock: lock,
        });
        let weak = Arc::downgrade(&journal);
        std::thread::Builder::new()
            .name("breeze-audit".into())
            .spawn(move || {
                lower_priority();
                let mut mover = Mover {
                    sink,
                    base,
                    sealed,
                    backlog,
                    last_move: Instant::now(),
                    failed: false,
                };
                mover.run(&weak, &rx);
            })
            .map_err(|e| fail("cannot start the journal thread", &e))?;
        Ok(journal)
    }

    /// Inserts `events` directly or journals them (see the module docs); `false` when neither
    /// worked, or when they go direct on PostgreSQL, whose insert is awaited (the caller
    /// writes them through the pool).
    fn write(&self, events: &[AuditEvent], now: Timestamp) -> bool {
        if goes_direct(events.len(), self.backlog.load(Ordering::Relaxed)) {
            let Some(direct) = &self.direct else {
                return false;
            };
            match direct.insert(events, now) {
                Ok(along) => {
                    self.backlog.fetch_sub(along, Ordering::Relaxed);
                    return true;
                }
                Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "audit batch insert failed; journaling it");
                }
            }
        }
        match self.append(events, now) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "audit journal write failed; writing through the pool");
                false
            }
        }
    }

    /// Appends `events` with one write, and holds them on SQLite.
    fn append(&self, events: &[AuditEvent], now: Timestamp) -> std::io::Result<()> {
        let at: Arc<str> = now.to_rfc3339_opts(SecondsFormat::AutoSi, false).into();
        let ids: Vec<AuditId> = events.iter().map(|_| AuditId::new()).collect();
        let details = events
            .iter()
            .map(|e| serde_json::value::to_raw_value(&e.details))
            .collect::<Result<Vec<_>, _>>()?;
        let mut buf = Vec::with_capacity(events.len() * 512);
        for ((e, &id), details) in events.iter().zip(&ids).zip(&details) {
            let line = LineOut {
                id,
                at: &at,
                org: e.org_id,
                actor_type: e.actor.kind.as_str(),
                actor_id: &e.actor.id,
                action: &e.action,
                resource_type: &e.resource_type,
                resource_id: e.resource_id.as_deref(),
                details,
                result: e.result.as_str(),
                error: e.error_message.as_deref(),
                request_id: e.request_id.as_deref(),
            };
            serde_json::to_writer(&mut buf, &line)?;
            buf.push(b'\n');
        }
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = current.file.write_all(&buf) {
            // Cut off what part of the batch got in (the caller writes the whole batch another
            // way), so that neither a half line nor a duplicate stays in the journal.
            let len = current.len;
            if let Err(cut) = current.file.set_len(len) {
                tracing::error!(error = %cut, "audit journal: cannot cut off a failed write");
            }
            return Err(e);
        }
        let was_empty = current.len == 0;
        current.len += buf.len() as u64;
        // Held under the segment's lock, so that the mover, which seals under it, counts all of
        // a sealed segment's held records before it looks whether any are left.
        let held = self
            .direct
            .as_ref()
            .is_some_and(|d| d.hold(current.seq, events, ids, details, &at));
        if !held {
            current.unheld += events.len();
        }
        self.backlog.fetch_add(events.len(), Ordering::Relaxed);
        drop(current);
        if was_empty {
            let _ = self.mover.send(Msg::Pending);
        }
        Ok(())
    }

    async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.mover.send(Msg::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// [`Store::checkpoint`], run on the mover's thread.
    pub(crate) async fn checkpoint(&self) -> Result<(), StoreError> {
        let (done, wait) = oneshot::channel();
        let stopped = || StoreError::AuditJournal("the journal's thread has stopped".into());
        self.mover
            .send(Msg::Checkpoint(done))
            .map_err(|_| stopped())?;
        wait.await
            .map_err(|_| stopped())?
            .map_err(|e| StoreError::Checkpoint(e.to_string()))
    }

    /// Starts a new segment when the current one holds records; returns the sealed one.
    /// Only the mover seals, so the number cannot change between the two locks; the new file is
    /// created between them, so appends never wait on the file system for it.
    fn seal(&self) -> std::io::Result<Option<Sealed>> {
        let seq = {
            let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            if current.len == 0 {
                return Ok(None);
            }
            current.seq
        };
        let next = Segment::create(&self.base, seq + 1)?;
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let sealed = std::mem::replace(&mut *current, next);
        Ok(Some(Sealed {
            seq: sealed.seq,
            // PostgreSQL's journal holds nothing, and neither does SQLite's beyond MAX_HELD.
            from_file: self.direct.is_none() || sealed.unheld > 0,
            unheld: sealed.unheld,
        }))
    }
}

impl Segment {
    fn create(base: &Path, seq: u64) -> std::io::Result<Segment> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(segment_path(base, seq))?;
        let len = file.metadata()?.len();
        Ok(Segment {
            seq,
            file,
            len,
            unheld: 0,
        })
    }
}

fn segment_path(base: &Path, seq: u64) -> PathBuf {
    with_suffix(base, &format!("-{seq:016}.jsonl"))
}

/// `path` with `suffix` appended to its file name (`breeze.db` → `breeze.db-audit`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// A segment no longer appended to.
#[derive(Clone, Copy)]
struct Sealed {
    seq: u64,
    /// Its records are moved from its file (PostgreSQL's, one a process that died left, one
    /// with records beyond [`MAX_HELD`]), not from memory.
    from_file: bool,
    /// Its records this process appended and did not hold (counted in the backlog until the
    /// file is moved).
    unheld: usize,
}

/// The segments on disk, in order (as left by another process).
fn segments(base: &Path) -> std::io::Result<Vec<Sealed>> {
    let dir = base
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let prefix = format!(
        "{}-",
        base.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut seqs: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            let name = name.to_str()?;
            name.strip_prefix(&prefix)?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()
        })
        .collect();
    seqs.sort_unstable();
    Ok(seqs
        .into_iter()
        .map(|seq| Sealed {
            seq,
            from_file: true,
            unheld: 0,
        })
        .collect())
}

/// Lowers the calling thread's priority by [`MOVER_NICE_INCREMENT`]. Linux only: elsewhere
/// `setpriority` applies to the whole process.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let me = Some(rustix::thread::gettid());
        let lowered = getpriority_process(me)
            .and_then(|nice| setpriority_process(me, (nice + MOVER_NICE_INCREMENT).min(19)));
        if let Err(e) = lowered {
            tracing::debug!(error = %e, "audit journal: cannot lower the mover's priority");
        }
    }
}

/// The thread that moves sealed segments into the table.
struct Mover {
    sink: Sink,
    base: PathBuf,
    /// Sealed segments not yet moved, oldest first.
    sealed: Vec<Sealed>,
    /// The journal's count of records not yet moved.
    backlog: Arc<AtomicUsize>,
    /// When segments were last moved (or a move was tried).
    last_move: Instant,
    /// Whether that move failed.
    failed: bool,
}

impl Mover {
    /// Moves the segments a dead process left, then, each time records arrive, waits
    /// [`MOVE_INTERVAL`] for more (or until a flush) and starts a round: it seals the segment
    /// being appended to and moves what is due (see [`Mover::move_sealed`]). Held records get
    /// one round to be taken along by a direct insert before the mover inserts them itself,
    /// so rounds come every [`MOVE_INTERVAL`] while any wait; a failed move is retried every
    /// [`RETRY_INTERVAL`]. When the journal is gone, moves what is left and ends.
    fn run(&mut self, journal: &Weak<Journal>, messages: &mpsc::Receiver<Msg>) {
        self.move_sealed(None, None);
        loop {
            let mut flushes = Vec::new();
            let first = if self.sealed.is_empty() {
                messages.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                messages.recv_timeout(
                    self.round_interval()
                        .saturating_sub(self.last_move.elapsed()),
                )
            };
            match first {
                Ok(Msg::Flush(done)) => flushes.push(done),
                Ok(Msg::Checkpoint(done)) => {
                    let _ = done.send(self.sink.checkpoint());
                    // Checkpoints come often; rounds keep their own schedule.
                    if self.sealed.is_empty() || self.last_move.elapsed() < self.round_interval() {
                        continue;
                    }
                }
                Ok(Msg::Pending) => {
                    let deadline = Instant::now() + MOVE_INTERVAL;
                    while let Ok(msg) =
                        messages.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    {
                        match msg {
                            Msg::Flush(done) => {
                                flushes.push(done);
                                break;
                            }
                            Msg::Checkpoint(done) => {
                                let _ = done.send(self.sink.checkpoint());
                            }
                            Msg::Pending => {}
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let Some(journal) = journal.upgrade() else {
                break;
            };
            // Segments sealed in an earlier round have had theirs.
            let aged = self.sealed.last().map(|s| s.seq);
            match journal.seal() {
                Ok(Some(sealed)) => self.sealed.push(sealed),
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "audit journal: cannot start a new segment"),
            }
            let due = if flushes.is_empty() {
                aged
            } else {
                Some(u64::MAX)
            };
            self.move_sealed(journal.direct.as_ref(), due);
            drop(journal);
            for done in flushes {
                let _ = done.send(());
            }
        }
        // The journal is gone, and with it the segment being appended to: move everything.
        self.sealed = segments(&self.base).unwrap_or_default();
        self.move_sealed(None, None);
    }

    /// How long after a round the next comes when no message starts it.
    fn round_interval(&self) -> Duration {
        if !self.failed && self.sealed.iter().any(|s| !s.from_file) {
            MOVE_INTERVAL
        } else {
            RETRY_INTERVAL
        }
    }

    /// Inserts the held records of segments up to `due`, then goes through the sealed
    /// segments in order: moves one from its file, or finds all its held records in the table,
    /// and deletes it; stops at the first that fails or still has records held (kept for the
    /// next round).
    fn move_sealed(&mut self, direct: Option<&Direct>, due: Option<u64>) {
        self.last_move = Instant::now();
        self.failed = false;
        if let (Some(direct), Some(due)) = (direct, due)
            && let Err(e) = self.move_held(direct, due)
        {
            tracing::error!(error = %e, "audit journal: move failed; will retry");
            self.failed = true;
        }
        while let Some(&sealed) = self.sealed.first() {
            let path = segment_path(&self.base, sealed.seq);
            if sealed.from_file {
                if let Err(e) = self.move_segment(&path) {
                    tracing::error!(error = %e, path = %path.display(), "audit journal: move failed; will retry");
                    self.failed = true;
                    return;
                }
            } else if direct.is_none_or(|d| d.unmoved(sealed.seq) > 0) {
                return;
            }
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::error!(error = %e, path = %path.display(), "audit journal: cannot remove a moved segment");
                self.failed = true;
                return;
            }
            self.sealed.remove(0);
            let forgotten = direct.map_or(0, |d| d.forget(sealed.seq));
            self.backlog
                .fetch_sub(sealed.unheld + forgotten, Ordering::Relaxed);
        }
    }

    /// Inserts the held records of segments up to `due`, [`ROWS_PER_MOVE`] to a transaction;
    /// what a failure leaves is held again.
    fn move_held(&mut self, direct: &Direct, due: u64) -> Result<(), Box<dyn std::error::Error>> {
        let Sink::Sqlite(conn) = &mut self.sink else {
            return Err("records are held only on SQLite".into());
        };
        let mut rest = direct.take(due);
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(ROWS_PER_MOVE));
            let chunk = std::mem::replace(&mut rest, tail);
            if let Err(e) = insert_rows(conn, chunk.iter().map(HeldRow::row)) {
                direct.settle(chunk.into_iter().chain(rest).collect(), false);
                return Err(e.into());
            }
            let moved = direct.settle(chunk, true);
            self.backlog.fetch_sub(moved, Ordering::Relaxed);
            // Gives the processor back between transactions, as `move_segment` does.
            std::thread::yield_now();
        }
        Ok(())
    }

    fn move_segment(&mut self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let mut lines = Vec::new();
        for (n, raw) in text.split(|&b| b == b'\n').enumerate() {
            if raw.is_empty() {
                continue;
            }
            // A line cut short by a crash was never acknowledged: its write had not returned.
            // Parsing also refuses values the table would (an unknown actor type or result).
            match serde_json::from_slice::<LineIn<'_>>(raw) {
                Ok(line) => lines.push(line),
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), line = n + 1, "audit journal: skipping a torn or invalid line");
                }
            }
        }
        // Short transactions, giving the processor back between them: a move is background
        // work, and the requests it would hold up share the processor. A segment moved partly
        // before a crash is moved again, and `OR IGNORE` skips what is already in.
        for chunk in lines.chunks(ROWS_PER_MOVE) {
            self.sink.insert(chunk)?;
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// Where a journal is kept, and the database its mover writes to.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// Next to this SQLite file (`<db>-audit-<n>.jsonl`).
    Sqlite(&'a Path),
    /// In this directory (`audit-<n>.jsonl`), moved over connections with these options.
    Postgres(&'a Path, &'a PgConnectOptions),
}

impl Place<'_> {
    fn path(&self) -> &Path {
        match self {
            Place::Sqlite(p) | Place::Postgres(p, _) => p,
        }
    }
}

/// What the mover writes journaled records into.
enum Sink {
    Sqlite(rusqlite::Connection),
    /// Boxed: a runtime and connection options are large beside a SQLite connection.
    Postgres(Box<PgSink>),
}

impl Sink {
    /// Inserts `lines` at once (one transaction), skipping ids already stored.
    fn insert(&mut self, lines: &[LineIn<'_>]) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Sink::Sqlite(conn) => Ok(insert_rows(
                conn,
                lines.iter().map(|l| line_row(l, &*l.at)),
            )?),
            Sink::Postgres(pg) => pg.insert(lines),
        }
    }

    /// [`Store::checkpoint`]: SQLite's; PostgreSQL needs none from us.
    fn checkpoint(&self) -> rusqlite::Result<()> {
        match self {
            Sink::Sqlite(conn) => wal::checkpoint(conn),
            Sink::Postgres(_) => Ok(()),
        }
    }
}

/// The mover's PostgreSQL connection, driven by a runtime of the mover's own thread (the
/// mover is synchronous, and must not take the requests' runtime). Opened when first needed,
/// and again after a statement fails (the database may have restarted).
struct PgSink {
    /// Always `Some` until dropped (see the `Drop` impl).
    runtime: Option<tokio::runtime::Runtime>,
    options: PgConnectOptions,
    conn: Option<PgConnection>,
}

impl Drop for PgSink {
    /// A runtime dropped the ordinary way panics inside another runtime's task, which is where
    /// [`Journal::open`] runs and drops this should opening fail after it was made.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl PgSink {
    fn new(options: PgConnectOptions) -> std::io::Result<PgSink> {
        Ok(PgSink {
            runtime: Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            ),
            options,
            conn: None,
        })
    }

    fn insert(&mut self, lines: &[LineIn<'_>]) -> Result<(), Box<dyn std::error::Error>> {
        let PgSink {
            runtime,
            options,
            conn,
        } = self;
        let Some(runtime) = runtime else {
            return Err("the journal's runtime is gone".into());
        };
        runtime.block_on(async {
            if conn.is_none() {
                let opened = tokio::time::timeout(
                    crate::PG_ACQUIRE_TIMEOUT,
                    PgConnection::connect_with(options),
                )
                .await
                .map_err(|_| "timed out connecting to PostgreSQL")??;
                *conn = Some(opened);
            }
            let Some(c) = conn.as_mut() else {
                return Ok(());
            };
            let inserted = move_lines_pg(c, lines).await;
            if inserted.is_err() {
                *conn = None;
            }
            Ok(inserted?)
        })
    }
}

/// Inserts journaled `lines` on PostgreSQL, one statement over arrays (so one round trip and
/// atomic), each row keeping the time it was journaled at and skipping ids already stored (a
/// segment moved again after a crash). Times are bound as the driver binds a timestamp (whole
/// microseconds), so that journaled rows read back as inserted ones do. A line whose time does
/// not parse (the journal's writer never wrote one) is skipped.
async fn move_lines_pg(conn: &mut PgConnection, lines: &[LineIn<'_>]) -> Result<(), sqlx::Error> {
    let mut rows = PgRows::with_capacity(lines.len());
    for line in lines {
        match chrono::DateTime::parse_from_rfc3339(&line.at) {
            Ok(at) => rows.push(&line_row(line, at.to_utc())),
            Err(e) => {
                tracing::warn!(error = %e, id = %line.id, "audit journal: skipping a line with an invalid time");
            }
        }
    }
    rows.insert(conn, Stored::Skip).await
}

/// Records per transaction of a move: each transaction gives the processor back (see
/// [`Mover::move_segment`]), and each commit rewrites the table's and the index's last,
/// partly filled pages, so fewer, larger ones write fewer pages per record.
const ROWS_PER_MOVE: usize = 256;

/// `line`'s row, its time as `at` (the line's own text on SQLite, parsed on PostgreSQL).
fn line_row<'a, At>(line: &'a LineIn<'a>, at: At) -> Row<'a, At> {
    Row {
        id: *line.id.as_bytes(),
        at,
        org: line.org.map(|o| *o.as_bytes()),
        actor_type: line.actor_type,
        actor_id: &line.actor_id,
        action: &line.action,
        resource_type: &line.resource_type,
        resource_id: line.resource_id.as_deref(),
        details: line.details.get(),
        result: line.result,
        error: line.error.as_deref(),
        request_id: line.request_id.as_deref(),
    }
}

/// Inserts `rows` in one transaction, skipping ids already stored: [`ROWS_PER_STATEMENT`] at a
/// time, then one by one.
fn insert_rows<'a>(
    conn: &mut rusqlite::Connection,
    rows: impl IntoIterator<Item = Row<'a>>,
) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut many = tx.prepare_cached(&INSERT_MANY)?;
        let mut chunk = Vec::with_capacity(ROWS_PER_STATEMENT);
        for row in rows {
            chunk.push(row);
            if chunk.len() == ROWS_PER_STATEMENT {
                execute_with(&mut many, &chunk)?;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            let mut one = tx.prepare_cached(&INSERT_ONE)?;
            for row in &chunk {
                execute_with(&mut one, std::slice::from_ref(row))?;
            }
        }
    }
    tx.commit()
}

/// Binds `rows` to `insert`'s parameters in order ([`AUDIT_COLUMNS`] each, as
/// [`audit_columns!`] names them) and runs it.
///
/// Text is bound as the `sql` module binds it: each U+0000 as U+FFFD (a scan of the bytes,
/// allocating only for a value that holds one).
fn execute_with(insert: &mut rusqlite::Statement<'_>, rows: &[Row<'_>]) -> rusqlite::Result<()> {
    for (i, row) in rows.iter().enumerate() {
        let columns: [&dyn rusqlite::ToSql; AUDIT_COLUMNS] = [
            &row.id,
            &row.at,
            &row.org,
            &row.actor_type.as_str(),
            &without_nul(row.actor_id),
            &without_nul(row.action),
            &without_nul(row.resource_type),
            &row.resource_id.map(without_nul),
            &json_without_nul(row.details),
            &row.result.as_str(),
            &row.error.map(without_nul),
            &row.request_id.map(without_nul),
        ];
        for (j, value) in columns.into_iter().enumerate() {
            insert.raw_bind_parameter(i * AUDIT_COLUMNS + j + 1, value)?;
        }
    }
    insert.raw_execute().map(drop)
}

/// The columns of an audit row, as [`audit_columns!`] names them.
const AUDIT_COLUMNS: usize = 12;

/// Rows per run of [`INSERT_MANY`]: a statement's own costs (binding aside: its reset, cursors
/// and halt) are paid once for all of them, which measurably cuts SQLite's work per row.
const ROWS_PER_STATEMENT: usize = 16;

/// The statement every audit row on SQLite is inserted by when it is not one of
/// [`ROWS_PER_STATEMENT`] (the direct path and the mover).
pub(crate) static INSERT_ONE: LazyLock<String> = LazyLock::new(|| insert_of(1));

/// [`INSERT_ONE`] for [`ROWS_PER_STATEMENT`] rows at once.
pub(crate) static INSERT_MANY: LazyLock<String> = LazyLock::new(|| insert_of(ROWS_PER_STATEMENT));

/// The insert of `rows` audit rows, skipping ids already stored.
fn insert_of(rows: usize) -> String {
    let row = format!("({})", ["?"; AUDIT_COLUMNS].join(", "));
    format!(
        "INSERT OR IGNORE INTO audit_log ({}) VALUES {}",
        audit_columns!(),
        vec![row.as_str(); rows].join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Journal::open`] runs inside the server's runtime and drops the sink it made when a
    /// later step fails; a runtime dropped the ordinary way there panics.
    #[tokio::test]
    async fn a_postgres_sink_can_be_dropped_inside_a_runtime() {
        drop(PgSink::new(PgConnectOptions::new()).unwrap());
    }

    #[test]
    fn small_batches_go_direct_only_behind_a_backlog() {
        assert!(!goes_direct(1, 0));
        assert!(!goes_direct(DIRECT_MIN_BATCH - 1, MAX_BACKLOG - 1));
        assert!(goes_direct(DIRECT_MIN_BATCH, 0));
        assert!(goes_direct(1, MAX_BACKLOG));
    }

    /// Rows go in [`ROWS_PER_STATEMENT`] at a time and then one by one, and a row whose id is
    /// already stored is skipped in either statement without costing its neighbours (a segment
    /// moved again after a crash holds rows already in the table).
    #[tokio::test]
    async fn rows_go_in_many_at_a_time_and_stored_ids_are_skipped() {
        let clock = Arc::new(breeze_core::SystemClock);
        let test = crate::testing::TestStore::new(Backend::Sqlite, clock).await;
        let dir = test.dir.as_ref().map(|d| d.path().join("breeze.db"));
        let mut conn = open_connection(&dir.unwrap()).unwrap();
        let ids: Vec<[u8; 16]> = (0..ROWS_PER_STATEMENT * 3 + 5)
            .map(|_| *AuditId::new().0.as_bytes())
            .collect();
        let names: Vec<String> = (0..ids.len()).map(|i| format!("r{i}")).collect();
        let rows = |range: std::ops::Range<usize>| {
            range.map(|i| Row {
                id: ids[i],
                at: "2026-12-02T17:00:00+00:00",
                org: None,
                actor_type: ActorType::ApiKey,
                actor_id: "k",
                action: "mcp.tools.call",
                resource_type: "mcp",
                resource_id: Some(&names[i]),
                details: "{}",
                result: AuditResult::Success,
                error: None,
                request_id: None,
            })
        };
        let stored = |conn: &rusqlite::Connection| -> Vec<String> {
            let mut q = conn
                .prepare("SELECT resource_id FROM audit_log ORDER BY id")
                .unwrap();
            q.query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };

        // Two statements' worth and three left over.
        let first = ROWS_PER_STATEMENT * 2 + 3;
        insert_rows(&mut conn, rows(0..first)).unwrap();
        assert_eq!(stored(&conn), names[..first]);
        // Again, overlapping: the stored rows straddle a many-row statement and the leftovers.
        insert_rows(&mut conn, rows(ROWS_PER_STATEMENT..ids.len())).unwrap();
        assert_eq!(stored(&conn), names);
    }
}
