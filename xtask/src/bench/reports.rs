//! `cargo xtask bench reports [--rows N] [--database sqlite|postgres|both]`: an audit-activity
//! report over an audit log of N records (1,000,000 by default), in this process on a fresh
//! test store, timed at a quarter, half and all of N — a run must take time linear in its
//! rows (each page resumes at its cursor on `audit_log_org_time`), aiming at under 10 s for
//! 1,000,000 rows on SQLite in a release build.
//!
//! The log is seeded with one SQL statement per step (SQLite's recursive CTE, PostgreSQL's
//! `generate_series`): tool-call records of one organization spread over 20 days, stamped as
//! the store stamps them. Each step generates the report as CSV and prints its rows, bytes,
//! chunks, seconds and rows per second, then how the time per row grew from a quarter of the
//! log to all of it; a release run fails past 1.5x (not linear). A debug xtask runs itself
//! again in release (`BENCH_PROFILE=debug` for a smoke run, whose numbers mean nothing).

use std::{sync::Arc, time::Instant};

use breeze_core::{ManualClock, ReportFilters, ReportFormat, ReportKind};
use breeze_store::{Backend, ReportRequest, Store, testing::TestStore};

/// Milliseconds between two seeded records: a million of them cover 20 days.
const SPACING_MS: i64 = 1_728;

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(args, &["--rows", "--database"])?;
    let rows = super::number(&f, "--rows", 1_000_000)? as i64;
    let dbs = match f.get("--database").map_or("sqlite", String::as_str) {
        "both" => vec![Backend::Sqlite, Backend::Postgres],
        "sqlite" => vec![Backend::Sqlite],
        "postgres" => vec![Backend::Postgres],
        other => anyhow::bail!("--database: {other:?} is not sqlite, postgres or both"),
    };
    #[allow(clippy::disallowed_methods)] // benchmark knob, as in `bench::profile`
    let smoke = std::env::var("BENCH_PROFILE").as_deref() == Ok("debug");
    if !smoke
        && let Some(done) = super::rerun_in_release(&super::workspace_root()?, "reports", args)
    {
        return done;
    }
    report!(
        "bench reports: an audit-activity report (CSV) over {rows} audit records ({} build)",
        if cfg!(debug_assertions) {
            "DEBUG"
        } else {
            "release"
        }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for db in dbs {
        runtime.block_on(bench(db, rows, !smoke))?;
    }
    Ok(())
}

/// `strict`: fail when the time per row grows (a smoke run's few rows time nothing reliably).
async fn bench(backend: Backend, rows: i64, strict: bool) -> anyhow::Result<()> {
    let clock = ManualClock::new(super::sim::now());
    let test = TestStore::new(backend, Arc::new(clock.clone())).await;
    let store = test.store.clone();
    let partner = store
        .create_partner("P", "p", super::audit("partner"))
        .await?;
    let org = store
        .create_organization(partner.id, "A", "a", super::audit("org"))
        .await?
        .id;
    report!();
    report!("{backend:?}:");
    report!(
        "{:>10} {:>12} {:>8} {:>10} {:>12} {:>14}",
        "rows",
        "bytes",
        "chunks",
        "seconds",
        "rows/s",
        "s per 1M rows"
    );
    let mut seeded = 0;
    // Seconds per row at each step: a report linear in its rows keeps it flat.
    let mut per_row = Vec::new();
    for target in [rows / 4, rows / 2, rows] {
        let started = Instant::now();
        seed(&store, backend, org, seeded, target).await?;
        eprintln!(
            "seeded {} records in {:.1} s",
            target - seeded,
            started.elapsed().as_secs_f64()
        );
        seeded = target;
        let started = Instant::now();
        let run = store
            .org(org)
            .reports()
            .generate_report(
                ReportRequest {
                    definition_id: None,
                    name: "bench".into(),
                    kind: ReportKind::AuditActivity,
                    format: ReportFormat::Csv,
                    filters: ReportFilters {
                        since_hours: Some(21 * 24),
                        ..ReportFilters::default()
                    },
                },
                "bench",
                super::audit("report.generate"),
            )
            .await?;
        let secs = started.elapsed().as_secs_f64();
        per_row.push(secs / run.row_count.max(1) as f64);
        report!(
            "{:>10} {:>12} {:>8} {:>10.2} {:>12.0} {:>14.2}{}",
            run.row_count,
            run.byte_count,
            run.chunk_count,
            secs,
            run.row_count as f64 / secs,
            secs * 1e6 / run.row_count.max(1) as f64,
            if run.truncated { "  (truncated)" } else { "" }
        );
    }
    // Quadratic paging (each page re-reading the rows before it) made the full log's time per
    // row grow with the log: 4x the rows, 4x the time per row. Linear stays near 1x.
    let growth = per_row.last().copied().unwrap_or(0.0) / per_row[0].max(f64::MIN_POSITIVE);
    report!(
        "time per row at {rows} rows vs {} rows: {growth:.2}x ({})",
        rows / 4,
        if growth < 1.5 { "linear" } else { "NOT LINEAR" }
    );
    test.cleanup().await;
    anyhow::ensure!(
        !strict || growth < 1.5,
        "the report's time per row grew {growth:.2}x from {} to {rows} rows: not linear",
        rows / 4
    );
    Ok(())
}

/// Adds records `from..to` of the organization's seeded log (the newest `SPACING_MS` before
/// now, the older ones further back).
async fn seed(
    store: &Store,
    backend: Backend,
    org: breeze_core::OrgId,
    from: i64,
    to: i64,
) -> anyhow::Result<()> {
    if to <= from {
        return Ok(());
    }
    let base = store.clock().now() - chrono::Duration::milliseconds(SPACING_MS * to);
    let statement = audit_seed_sql(backend == Backend::Sqlite, org.0, base, from, to);
    store.raw_execute(&statement).await?;
    // What autovacuum does to a log that grew over time (see `Instance::analyze`).
    if backend == Backend::Postgres {
        store.raw_execute("ANALYZE audit_log").await?;
    }
    Ok(())
}

/// One statement adding records `from..to` of an organization's seeded audit log, the first
/// at `base` and each `SPACING_MS` after the previous: tool-call records stamped and keyed as
/// the store stamps and keys them (SQLite's recursive CTE, PostgreSQL's `generate_series`).
///
/// Ids are UUID v7 of the record's time, as the store's are: the log's key order is its time
/// order, which is what makes reading it in time order sequential (random ids would scatter a
/// time-ordered read over the whole key tree, a cost no real log has).
pub(super) fn audit_seed_sql(
    sqlite: bool,
    org: uuid::Uuid,
    base: chrono::DateTime<chrono::Utc>,
    from: i64,
    to: i64,
) -> String {
    let last = to - 1;
    if sqlite {
        format!(
            "WITH RECURSIVE n(i) AS (SELECT {from} UNION ALL SELECT i + 1 FROM n WHERE i < {last}) \
             INSERT INTO audit_log (id, created_at, org_id, actor_type, actor_id, action, \
             resource_type, resource_id, details, result, error_message, request_id) \
             SELECT unhex(printf('%012X', {base_ms} + i * {SPACING_MS}) || '7' \
             || substr(hex(randomblob(2)), 2) || '8' || substr(hex(randomblob(8)), 2)), \
             strftime('%Y-%m-%dT%H:%M:%S', '{base}', '+' || ((i * {SPACING_MS}) / 1000) || ' seconds') \
             || printf('.%06d+00:00', ((i * {SPACING_MS}) % 1000) * 1000), \
             X'{org_hex}', 'api_key', 'bench-key', 'tools.call', 'tool', 'query_devices', \
             '{{\"tool\":\"query_devices\",\"n\":' || i || '}}', 'success', NULL, 'req-' || i \
             FROM n",
            base = base.format("%Y-%m-%d %H:%M:%S"),
            base_ms = base.timestamp_millis(),
            org_hex = org.simple(),
        )
    } else {
        format!(
            "INSERT INTO audit_log (id, created_at, org_id, actor_type, actor_id, action, \
             resource_type, resource_id, details, result, error_message, request_id) \
             SELECT (lpad(to_hex({base_ms} + i * {SPACING_MS}), 12, '0') || '7' \
             || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, \
             '{base}'::timestamptz + i * interval '{SPACING_MS} milliseconds', \
             '{org}'::uuid, 'api_key', 'bench-key', 'tools.call', 'tool', 'query_devices', \
             json_build_object('tool', 'query_devices', 'n', i), 'success', NULL, 'req-' || i \
             FROM generate_series({from}, {last}) AS i",
            base = base.to_rfc3339(),
            base_ms = base.timestamp_millis(),
        )
    }
}
