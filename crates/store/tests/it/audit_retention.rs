//! Audit retention: the database refuses to delete records younger than the retention, the
//! purge archives before it deletes, archives read back as the records stored, and (PostgreSQL)
//! months past the retention are dropped whole.

use std::time::Instant;

use breeze_core::{AuditRecord, Clock, OrgId, SystemClock};
use breeze_store::{AuditExport, AuditFilter, Backend, Store, read_audit_archive, testing::Ctx};
use chrono::Duration;

use crate::audit;

/// Records `action` stamped `age` before the clock's now (then puts the clock back).
async fn record_aged(cx: &Ctx, action: &str, age: Duration) {
    let now = cx.clock.now();
    cx.clock.set(now - age);
    cx.store
        .append_audit(&audit(action, "thing"))
        .await
        .unwrap();
    cx.clock.set(now);
}

/// Every action in the log, sorted.
async fn actions(s: &Store) -> Vec<String> {
    let mut all: Vec<String> = s
        .raw_dump("audit_log")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|row| {
            ["old", "young", "edge", "now", "other"]
                .into_iter()
                .find(|a| {
                    row.contains(&format!("'{a}.thing'")) || row.contains(&format!("\"{a}.thing\""))
                })
                .map(str::to_owned)
        })
        .collect();
    all.sort();
    all
}

fn archive_dir(cx: &Ctx) -> tempfile::TempDir {
    let _ = cx;
    tempfile::tempdir().unwrap()
}

/// Deleting a younger record fails, naming the rule.
async fn assert_refused(s: &Store, statement: &str) {
    let err = s.raw_execute(statement).await.unwrap_err();
    assert!(
        err.to_string().contains("append-only"),
        "{statement}: {err}"
    );
}

/// The boundary: with 90 days, a record 91 days old is archived and purged, one 89 days old
/// stays, and so does everything while the log is kept forever.
async fn purge_keeps_everything_younger_than_the_retention(cx: Ctx) {
    cx.clock.set(SystemClock.now());
    let s = &cx.store;
    record_aged(&cx, "old.thing", Duration::days(91)).await;
    record_aged(&cx, "young.thing", Duration::days(89)).await;
    record_aged(&cx, "now.thing", Duration::zero()).await;
    let dir = archive_dir(&cx);

    // Kept forever (the migration's start): nothing happens.
    assert_eq!(s.audit_retention().await.unwrap(), None);
    let report = s.purge_audit(dir.path()).await.unwrap();
    assert_eq!(
        (report.cutoff, report.archived, report.archive),
        (None, 0, None)
    );
    assert_eq!(actions(s).await, ["now", "old", "young"]);

    assert!(s.set_audit_retention(Some(90)).await.unwrap());
    assert!(!s.set_audit_retention(Some(90)).await.unwrap(), "unchanged");
    assert_eq!(s.audit_retention().await.unwrap(), Some(90));
    let report = s.purge_audit(dir.path()).await.unwrap();
    assert_eq!(report.archived, 1, "{report:?}");
    assert!(
        report.rows_deleted + u64::from(report.partitions_dropped) >= 1,
        "{report:?}"
    );
    assert_eq!(actions(s).await, ["now", "young"]);

    // The archive holds exactly the purged record, as it was stored.
    let path = report.archive.unwrap();
    assert!(
        path.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .ends_with(".jsonl.gz")
    );
    let archived = read_audit_archive(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].event.action, "old.thing");
    assert_eq!(archived[0].created_at, cx.clock.now() - Duration::days(91));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // No partial file is left behind; a purge with nothing to do writes no archive.
    let again = s.purge_audit(dir.path()).await.unwrap();
    assert_eq!((again.archived, again.archive), (0, None));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // The retention's change is in the log, written by the database.
    let changes = s
        .raw_dump("audit_log")
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.contains("audit.retention_changed"))
        .count();
    assert_eq!(changes, 1);
}

/// A record younger than the retention cannot be deleted by any statement, nor the log
/// truncated, nor the retention row removed; one older than it can be.
async fn younger_records_cannot_be_deleted_even_by_sql(cx: Ctx) {
    cx.clock.set(SystemClock.now());
    let s = &cx.store;
    record_aged(&cx, "old.thing", Duration::days(40)).await;
    record_aged(&cx, "young.thing", Duration::days(20)).await;

    // Kept forever: not even the old one.
    assert_refused(s, "DELETE FROM audit_log WHERE action = 'old.thing'").await;
    s.set_audit_retention(Some(30)).await.unwrap();
    assert_refused(s, "DELETE FROM audit_log").await;
    assert_refused(s, "DELETE FROM audit_log WHERE action = 'young.thing'").await;
    assert_refused(
        s,
        "UPDATE audit_log SET action = 'forged' WHERE action = 'old.thing'",
    )
    .await;
    assert_refused(s, "UPDATE audit_log SET created_at = created_at").await;
    if s.backend() == Backend::Postgres {
        assert_refused(s, "TRUNCATE audit_log").await;
        assert_refused(s, "TRUNCATE audit_log_default").await;
        // Even a partition holding only young rows, by the name the server gives it.
        let now = cx.clock.now();
        s.prepare_audit_partitions().await.unwrap();
        assert_refused(s, &format!("TRUNCATE audit_log_p{}", now.format("%Y%m"))).await;
    }
    let err = s
        .raw_execute("DELETE FROM audit_retention")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("one row"), "{err}");
    // Zero days is not a retention (0 means "forever" to the server, never "delete all").
    assert!(
        s.raw_execute("UPDATE audit_retention SET days = 0")
            .await
            .is_err()
    );
    assert_eq!(actions(s).await, ["old", "young"]);

    // Past the retention, plain SQL may delete: the rule is the age, not the statement.
    assert_eq!(
        s.raw_execute("DELETE FROM audit_log WHERE action = 'old.thing'")
            .await
            .unwrap(),
        1
    );
    assert_eq!(actions(s).await, ["young"]);
}

/// An export holds exactly the records its filter selects, as `query_audit` returns them.
async fn exports_round_trip(cx: Ctx) {
    let s = &cx.store;
    let org = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let org = s
        .create_organization(org.id, "O", "o", audit("org.create", "org"))
        .await
        .unwrap()
        .id;
    let other = OrgId::new();
    let start = cx.clock.now();
    for i in 0..12 {
        cx.clock.advance(Duration::minutes(1));
        let target = if i % 3 == 0 { other } else { org };
        s.append_audit(
            &audit("other.thing", "thing")
                .org(target)
                .resource(i)
                .details(serde_json::json!({ "i": i, "text": "nul\u{0}é\n\"" }))
                .request(Some(format!("req-{i}"))),
        )
        .await
        .unwrap();
    }
    let since = start + Duration::minutes(3);
    let until = start + Duration::minutes(10);
    let filter = AuditExport {
        org: Some(org),
        since: Some(since),
        until: Some(until),
    };
    let (summary, bytes) = s.export_audit(&filter, Vec::new()).await.unwrap();
    let exported = read_audit_archive(bytes.as_slice()).unwrap();

    let page = s
        .org(org)
        .audit()
        .query_audit(
            &AuditFilter {
                since: Some(since),
                until: Some(until),
                action: Some("other.thing".into()),
                ..AuditFilter::default()
            },
            None,
            500,
        )
        .await
        .unwrap();
    let mut expected: Vec<AuditRecord> = page.records;
    expected.sort_by_key(|r| r.id);
    assert_eq!(exported.len(), 5, "minutes 3..10 of org, {exported:#?}");
    assert_eq!(exported, expected);
    assert_eq!(summary.records, 5);
    assert_eq!(summary.oldest, exported.iter().map(|r| r.created_at).min());
    assert_eq!(summary.newest, exported.iter().map(|r| r.created_at).max());

    // Everything, system records included.
    let (all, bytes) = s
        .export_audit(&AuditExport::default(), Vec::new())
        .await
        .unwrap();
    assert_eq!(
        read_audit_archive(bytes.as_slice()).unwrap().len() as u64,
        all.records
    );
    assert_eq!(all.records, 14);
}

/// PostgreSQL: months wholly past the retention are dropped as partitions, the month the
/// cutoff cuts through loses only its older rows, and every purged row is in the archive.
async fn months_past_the_retention_are_dropped_whole(cx: Ctx) {
    if cx.store.backend() != Backend::Postgres {
        return;
    }
    let s = &cx.store;
    let now = SystemClock.now();
    // The months of 200 days ago and around, made before their rows arrive.
    cx.clock.set(now - Duration::days(200));
    s.prepare_audit_partitions().await.unwrap();
    cx.clock.set(now - Duration::days(95));
    s.prepare_audit_partitions().await.unwrap();
    cx.clock.set(now);
    for days in [200, 199, 150, 95, 89] {
        record_aged(
            &cx,
            if days > 90 {
                "old.thing"
            } else {
                "young.thing"
            },
            Duration::days(days),
        )
        .await;
    }
    s.set_audit_retention(Some(90)).await.unwrap();
    let dir = archive_dir(&cx);
    let report = s.purge_audit(dir.path()).await.unwrap();
    assert_eq!(report.archived, 4, "{report:?}");
    assert!(report.partitions_dropped >= 2, "{report:?}");
    assert_eq!(actions(s).await, ["young"]);
    let archived =
        read_audit_archive(std::fs::File::open(report.archive.unwrap()).unwrap()).unwrap();
    assert!(archived.iter().all(|r| r.event.action == "old.thing"));
}

/// The retention is one value for the cluster: the first instance settles it from its own
/// setting, a second instance configured otherwise (here: 1 day, then forever) changes nothing
/// however often it runs, and only an explicit change moves it — which every instance then
/// reads.
async fn the_retention_is_settled_once_for_the_cluster(cx: Ctx) {
    let first = &cx.store;
    let second = first.reopen().await.unwrap();
    let in_force = first.settle_audit_retention(Some(90)).await.unwrap();
    assert_eq!((in_force.days, in_force.settled_now), (Some(90), true));
    for _ in 0..3 {
        for other in [Some(1), None] {
            let seen = second.settle_audit_retention(other).await.unwrap();
            assert_eq!((seen.days, seen.settled_now), (Some(90), false));
        }
    }
    assert!(second.set_audit_retention(Some(30)).await.unwrap());
    let seen = first.settle_audit_retention(Some(90)).await.unwrap();
    assert_eq!(
        seen.days,
        Some(30),
        "the explicit change governs every instance"
    );
    assert!(second.set_audit_retention(None).await.unwrap());
    assert_eq!(
        first.audit_retention().await.unwrap(),
        None,
        "forever, explicitly"
    );
    let seen = first.settle_audit_retention(Some(90)).await.unwrap();
    assert_eq!((seen.days, seen.settled_now), (None, false));
}

breeze_store::on_both_backends!(
    the_retention_is_settled_once_for_the_cluster,
    purge_keeps_everything_younger_than_the_retention,
    younger_records_cannot_be_deleted_even_by_sql,
    exports_round_trip,
    months_past_the_retention_are_dropped_whole,
);

/// How long a purge takes over many rows, on each backend (printed; run with `--nocapture`).
/// `BREEZE_PURGE_ROWS` sets how many (default 20,000; the measurement in the README used
/// 3,000,000): rows spread over the six months before the retention, and a tenth as many
/// young rows that stay.
async fn purge_time(backend: Backend) {
    #[allow(clippy::disallowed_methods)] // a test's size, not a Breeze setting
    let rows: i64 = std::env::var("BREEZE_PURGE_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let clock = breeze_core::ManualClock::new(SystemClock.now());
    let test =
        breeze_store::testing::TestStore::new(backend, std::sync::Arc::new(clock.clone())).await;
    let s = &test.store;
    let now = clock.now();
    if backend == Backend::Postgres {
        for back in [270, 240, 210, 180, 150, 120, 95] {
            clock.set(now - Duration::days(back));
            s.prepare_audit_partitions().await.unwrap();
        }
        clock.set(now);
    }
    let (id, ts, details) = match backend {
        Backend::Postgres => (
            "gen_random_uuid()",
            "now() - make_interval(days => 91) - make_interval(secs => i * 180.0 * 86400 / {n})",
            "jsonb_build_object('tool', 'query_devices', 'i', i)",
        ),
        Backend::Sqlite => (
            "randomblob(16)",
            "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '-91 days', '-' || (i * 180 * 86400 / {n}) || ' seconds')",
            "json_object('tool', 'query_devices', 'i', i)",
        ),
    };
    let series = match backend {
        Backend::Postgres => "generate_series(1, {n}) AS g(i)".to_owned(),
        Backend::Sqlite => "(WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {n}) SELECT i FROM g)".to_owned(),
    };
    let insert = |n: i64, ts: &str| {
        format!(
            "INSERT INTO audit_log (id, created_at, org_id, actor_type, actor_id, action, \
             resource_type, resource_id, details, result, error_message, request_id) \
             SELECT {id}, {ts}, NULL, 'api_key', 'k', 'mcp.tools.call', 'tool', 'query_devices', \
             {details}, 'success', NULL, 'req' FROM {series}"
        )
        .replace("{n}", &n.to_string())
    };
    let started = Instant::now();
    // In slices, each well inside the statement timeout.
    let slice = 100_000.min(rows);
    for k in 0..rows / slice {
        let ts = ts
            .replace("i *", &format!("(i + {}) *", k * slice))
            .replace("{n}", &rows.to_string());
        s.raw_execute(&insert(slice, &ts)).await.unwrap();
    }
    let young_ts = match backend {
        Backend::Postgres => "now() - make_interval(secs => i)",
        Backend::Sqlite => "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '-' || i || ' seconds')",
    };
    s.raw_execute(&insert(rows / 10, young_ts)).await.unwrap();
    let filled = started.elapsed();
    s.set_audit_retention(Some(90)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = s.purge_audit(dir.path()).await.unwrap();
    let archive_bytes = std::fs::metadata(report.archive.as_ref().unwrap())
        .unwrap()
        .len();
    #[allow(clippy::print_stdout)] // the measurement is the output
    {
        println!(
            "purge {backend:?}: {rows} old rows (+{} young) inserted in {filled:.1?}; archived {} \
             in {:.1?} ({:.1} MB gzip); deleted: {} partitions dropped + {} rows one by one in {:.1?}",
            rows / 10,
            report.archived,
            report.archive_time,
            archive_bytes as f64 / 1e6,
            report.partitions_dropped,
            report.rows_deleted,
            report.delete_time,
        );
    }
    assert_eq!(report.archived, rows as u64);
    let (left, _) = s
        .export_audit(&AuditExport::default(), std::io::sink())
        .await
        .unwrap();
    assert_eq!(
        left.records,
        rows as u64 / 10 + 1,
        "the young rows and the retention's change"
    );
    test.cleanup().await;
}

#[tokio::test]
async fn purge_time_postgres() {
    purge_time(Backend::Postgres).await;
}

#[tokio::test]
async fn purge_time_sqlite() {
    purge_time(Backend::Sqlite).await;
}
