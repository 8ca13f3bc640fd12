//! PostgreSQL failing under the store, on a server of the test's own (Debian's binaries, run as
//! the `postgres` user):
//!
//! - a crash under the audit log: `pg_ctl stop -m immediate` skips the shutdown checkpoint and
//!   leaves what sat in its WAL buffers unwritten, as a killed server or a power cut would. Its
//!   WAL writer is slowed to 10 s, so an asynchronous commit stays unflushed long enough for
//!   the crash to catch it every time, not only by luck;
//! - an outage: once the health monitor knows the database is down, statements fail at once
//!   (retryable) instead of each waiting out the pool's 10 s acquire timeout.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    sync::Arc,
};

use breeze_core::{Actor, AuditEvent, SystemClock};
use breeze_store::{DbHealth, Store, StoreOptions};

/// A PostgreSQL server on a free port in a temporary directory.
struct PrivatePostgres {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
}

impl PrivatePostgres {
    fn start(settings: &[&str]) -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries under /usr/lib/postgresql")
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("pg_ctl").exists())
            .expect("pg_ctl under /usr/lib/postgresql/*/bin");
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Self { dir, port, bin };
        assert!(
            Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(pg.dir.path())
                .status()
                .unwrap()
                .success()
        );
        let data = pg.dir.path().join("data");
        pg.as_postgres(&[
            pg.bin.join("initdb").to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-D",
            data.to_str().unwrap(),
        ]);
        let mut conf = String::new();
        for s in settings {
            conf.push_str(s);
            conf.push('\n');
        }
        std::fs::write(data.join("postgresql.auto.conf"), conf).unwrap();
        pg.ctl(&["start"]);
        pg
    }

    fn as_postgres(&self, args: &[&str]) {
        let ok = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{args:?}");
    }

    fn ctl(&self, action: &[&str]) {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("log");
        let options = format!(
            "-p {} -k {} -h 127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let pg_ctl = self.bin.join("pg_ctl");
        let mut args = vec![
            pg_ctl.to_str().unwrap(),
            "-D",
            data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-o",
            &options,
            "-w",
        ];
        args.extend_from_slice(action);
        self.as_postgres(&args);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args([
                "-D",
                data.to_str().unwrap_or_default(),
                "-m",
                "immediate",
                "stop",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

async fn connect(url: &str, journal: &std::path::Path) -> Store {
    let store = Store::connect(
        &StoreOptions {
            audit_journal: Some(journal.to_owned()),
            // What `breeze serve` sets, with the audit commit left at its default.
            ..StoreOptions::new(url)
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    store
}

async fn probes(store: &Store) -> usize {
    store
        .raw_strings("SELECT CAST(count(*) AS TEXT) FROM audit_log WHERE action = 'crash.probe'")
        .await
        .unwrap()[0]
        .parse()
        .unwrap()
}

/// Records handed to the appender one request at a time (journaled, then moved into the
/// database) are all there after PostgreSQL crashed the moment they were moved: by default
/// their commits waited for the disk.
#[tokio::test]
async fn answered_requests_stay_audited_through_a_postgresql_crash() {
    const RECORDS: usize = 40;
    let pg = PrivatePostgres::start(&["wal_writer_delay = 10000", "wal_writer_flush_after = 0"]);
    let journal = tempfile::tempdir().unwrap();
    let store = connect(&pg.url(), journal.path()).await;
    let appender = store.audit_appender();
    for i in 0..RECORDS {
        let event =
            AuditEvent::new(Actor::system("t"), "crash.probe", "probe").resource(format!("p{i}"));
        assert!(
            appender.append(vec![event]).await.is_empty(),
            "record {i} is safe"
        );
    }
    // Moved from the journal into `audit_log` (the segments are deleted once committed).
    store.flush_audit().await;
    assert_eq!(probes(&store).await, RECORDS);

    pg.ctl(&["-m", "immediate", "stop"]);
    store.close().await;
    pg.ctl(&["start"]);
    let store = connect(&pg.url(), journal.path()).await;
    assert_eq!(
        probes(&store).await,
        RECORDS,
        "every record the database had acknowledged is still there after the crash"
    );
    store.close().await;
}

/// Waits up to `secs` for `check`, failing the test naming `what`.
async fn eventually(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// PostgreSQL stops: the monitor says so within seconds, and from then on every statement
/// fails at once as retryable, naming the outage (not after the pool's 10 s acquire timeout
/// each); it starts again: the monitor says so and statements work.
#[tokio::test]
async fn statements_fail_fast_while_the_database_is_known_down() {
    let pg = PrivatePostgres::start(&[]);
    let journal = tempfile::tempdir().unwrap();
    let store = connect(&pg.url(), journal.path()).await;
    let (org, _) = crate::two_orgs(&store).await;
    let stop = tokio::sync::Notify::new();
    let stop = std::sync::Arc::new(stop);
    let waiter = stop.clone();
    store.spawn_health_monitor(async move { waiter.notified().await });
    eventually(10, "the first verdict", || store.health() == DbHealth::Ok).await;

    pg.ctl(&["-m", "fast", "stop"]);
    eventually(10, "the outage to be known", || {
        matches!(store.health(), DbHealth::Down { .. })
    })
    .await;
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let err = store.org(org).tenancy().list_sites().await.unwrap_err();
        let took = started.elapsed();
        assert!(err.is_retryable(), "{err}");
        assert!(
            took < std::time::Duration::from_secs(2),
            "a statement fails at once while the database is known down, not after the pool's \
             timeout: {took:?} ({err})"
        );
        assert!(err.to_string().contains("has not answered since"), "{err}");
    }

    pg.ctl(&["start"]);
    eventually(20, "the database to be known up again", || {
        store.health() == DbHealth::Ok
    })
    .await;
    assert!(store.org(org).tenancy().list_sites().await.is_ok());
    stop.notify_one();
    store.close().await;
}
