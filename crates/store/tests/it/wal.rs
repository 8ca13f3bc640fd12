//! SQLite's write-ahead log stays bounded under a steady stream of writes.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use breeze_core::{Actor, ActorType, AuditEvent};
use breeze_store::{
    Backend,
    testing::{Ctx, run},
};

/// A writer that commits all the time (as the audit appender does under load) never lets
/// SQLite start its log over by itself: each write begins before a passive checkpoint has
/// copied the whole log back. The store's checkpoint restarts it, so the file stops growing
/// at a few thousand frames instead of taking every page ever written.
#[tokio::test]
async fn the_wal_stays_bounded_under_a_steady_writer() {
    run(Backend::Sqlite, |cx: Ctx| wal_stays_bounded(cx, false)).await;
}

/// The same with an audit journal open, whose thread then runs the checkpoints.
#[tokio::test]
async fn the_wal_stays_bounded_when_the_journal_checkpoints() {
    run(Backend::Sqlite, |cx: Ctx| wal_stays_bounded(cx, true)).await;
}

/// Opens the audit journal when asked (its thread then runs the checkpoints) and creates the
/// table the tests' writers fill; returns the database file.
async fn prepare(cx: &Ctx, journal: bool) -> std::path::PathBuf {
    let s = &cx.store;
    let appender = journal.then(|| s.audit_appender());
    assert_eq!(
        appender.is_some_and(|a| !format!("{a:?}").contains("journal: None")),
        journal
    );
    s.raw_execute("CREATE TABLE scratch (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        .await
        .unwrap();
    cx.dir.clone().unwrap().join("breeze.db")
}

async fn wal_stays_bounded(cx: Ctx, journal: bool) {
    let s = &cx.store;
    let db = prepare(&cx, journal).await;
    let stop = Arc::new(AtomicBool::new(false));
    let rows = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, stop, rows) = (db.clone(), stop.clone(), rows.clone());
        std::thread::spawn(move || {
            let mut conn = rusqlite::Connection::open(&db).unwrap();
            conn.busy_timeout(Duration::from_secs(10)).unwrap();
            conn.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
            while !stop.load(Ordering::Relaxed) {
                let tx = conn.transaction().unwrap();
                for _ in 0..50 {
                    tx.execute("INSERT INTO scratch (body) VALUES (zeroblob(400))", [])
                        .unwrap();
                }
                tx.commit().unwrap();
                rows.fetch_add(50, Ordering::Relaxed);
                // The server's writer commits a batch, then serves requests before the
                // next one; a loop that takes the lock again at once would starve the
                // checkpoint's busy handler (which sleeps between tries) of any chance.
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    // Enough rows for ~100 MB of log if it were never restarted (over 3× the bound).
    const ROWS: u64 = 150_000;
    let wal = db.with_extension("db-wal");
    let mut largest = 0;
    let started = Instant::now();
    while rows.load(Ordering::Relaxed) < ROWS && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.checkpoint().await.unwrap();
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let rows = rows.load(Ordering::Relaxed);
    assert!(
        rows >= ROWS,
        "the writer wrote only {rows} rows in a minute"
    );
    // 4096 frames restart the log; one 20 ms tick adds far fewer than as many again.
    let bound = 2 * 4096 * (4096 + 24);
    assert!(
        largest < bound,
        "the WAL reached {largest} bytes (bound {bound}) over {rows} rows"
    );
}

/// A writer that holds the write lock for 50 ms at a time and leaves it free for 0.2 ms does not
/// keep a restart waiting: it gets the lock in the first gap (so the writer commits a few times
/// meanwhile, not the dozens to hundreds it would against SQLite's own busy handler, whose
/// tries come 100 ms apart), and the log then starts over.
#[tokio::test]
async fn a_restart_gets_the_lock_from_a_writer_that_keeps_retaking_it() {
    run(Backend::Sqlite, |cx: Ctx| restart_gets_the_lock(cx, false)).await;
}

/// The same with the journal's thread running the checkpoint.
#[tokio::test]
async fn a_restart_on_the_journal_thread_gets_the_lock_too() {
    run(Backend::Sqlite, |cx: Ctx| restart_gets_the_lock(cx, true)).await;
}

async fn restart_gets_the_lock(cx: Ctx, journal: bool) {
    let db = prepare(&cx, journal).await;
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, stop, commits) = (db.clone(), stop.clone(), commits.clone());
        std::thread::spawn(move || {
            let mut conn = rusqlite::Connection::open(&db).unwrap();
            conn.busy_timeout(Duration::from_secs(10)).unwrap();
            conn.execute_batch("PRAGMA wal_autocheckpoint = 0; PRAGMA synchronous = OFF")
                .unwrap();
            // Over 4096 pages in the log, so that the checkpoint restarts it. (No checkpoint
            // may run before the writer holds the lock: a log all copied back is started over
            // by the next writer itself.)
            let tx = conn.transaction().unwrap();
            for _ in 0..4500 {
                tx.execute("INSERT INTO scratch (body) VALUES (zeroblob(3000))", [])
                    .unwrap();
            }
            tx.commit().unwrap();
            while !stop.load(Ordering::Relaxed) {
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .unwrap();
                tx.execute("INSERT INTO scratch (body) VALUES (zeroblob(100))", [])
                    .unwrap();
                std::thread::sleep(Duration::from_millis(50));
                tx.commit().unwrap();
                commits.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
            conn
        })
    };
    while commits.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let before = commits.load(Ordering::Relaxed);
    cx.store.checkpoint().await.unwrap();
    let waited = commits.load(Ordering::Relaxed) - before;
    // The writer's next commit starts the log over.
    let seen = commits.load(Ordering::Relaxed);
    while commits.load(Ordering::Relaxed) < seen + 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let conn = writer.join().unwrap();
    let frames: i64 = conn
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
        .unwrap();
    // Measured: 2–5 commits with the polling handler (the passive checkpoint's copying and the
    // restart's fsync included), up to 27 with four processes spinning on the two cores. With
    // SQLite's own handler 2–201 in six runs (four over 40; lucky when its first try lands in a
    // gap), and once it gave up after its 10 s.
    assert!(
        waited <= 40,
        "the writer committed {waited} times while the restart waited for the lock"
    );
    assert!(
        frames < 100,
        "the log was not started over: {frames} frames"
    );
}

/// The server's checkpoints come when due: after 1000 audit records written, or 250 ms by the
/// store's clock after the last (so at one request at a time every few hundred records, and
/// under load every few tens of milliseconds), and at once when the clock went back. On both
/// backends (PostgreSQL's checkpoint does nothing, but the cadence is the same).
async fn checkpoints_are_due_by_records_or_time(cx: Ctx) {
    let s = &cx.store;
    let due = || async { s.checkpoint_when_due().await.unwrap() };
    assert!(due().await, "the first is due");
    assert!(!due().await);
    let appender = s.audit_appender();
    let event = AuditEvent::new(Actor::new(ActorType::ApiKey, "k"), "mcp.ping", "mcp");
    for batch in [1, 998] {
        assert!(appender.append(vec![event.clone(); batch]).await.is_empty());
    }
    assert!(!due().await, "999 records");
    assert!(appender.append(vec![event.clone()]).await.is_empty());
    assert!(due().await, "1000 records");
    assert!(!due().await);
    cx.clock.advance(chrono::Duration::milliseconds(249));
    assert!(!due().await, "249 ms");
    cx.clock.advance(chrono::Duration::milliseconds(1));
    assert!(due().await, "250 ms");
    assert!(!due().await);
    cx.clock.advance(chrono::Duration::milliseconds(-1));
    assert!(due().await, "the clock went back");
}

/// Only a SQLite file has a write-ahead log for the server to checkpoint; on PostgreSQL the
/// server starts no checkpointer.
async fn only_a_sqlite_file_has_a_write_ahead_log(cx: Ctx) {
    assert_eq!(
        cx.store.has_write_ahead_log(),
        cx.store.backend() == Backend::Sqlite
    );
}

breeze_store::on_both_backends!(
    checkpoints_are_due_by_records_or_time,
    only_a_sqlite_file_has_a_write_ahead_log
);
