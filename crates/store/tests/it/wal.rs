//! SQLite's write-ahead log stays bounded under a steady stream of writes.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

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

async fn wal_stays_bounded(cx: Ctx, journal: bool) {
    let s = &cx.store;
    let appender = journal.then(|| s.audit_appender());
    assert_eq!(
        appender.is_some_and(|a| !format!("{a:?}").contains("journal: None")),
        journal
    );
    s.raw_execute("CREATE TABLE scratch (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        .await
        .unwrap();
    let db = cx.dir.clone().unwrap().join("breeze.db");
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
