//! `cargo xtask bench billing [--tickets N] [--invoices N] [--concurrency C] [--duration SECS]
//! [--database sqlite|postgres|both]`: `list_invoices` and `manage_tickets list` (25 a page,
//! newest first) through Breeze's whole MCP pipeline over an organization of 100,000 tickets
//! and 10,000 invoices, beside the rmcp peer answering `query_devices` from memory in the same
//! run (as `bench tools` does).
//!
//! Seeding is one set-based statement per table per 50,000 rows (SQLite's recursive CTE,
//! PostgreSQL's `generate_series`), the way `bench tools` seeds its audit log: tickets in every
//! status and priority, numbered above the demo's own; invoices issued (every third paid) with
//! gap-free numbers above the demo's. Each call is made with the demo's write key: the billing
//! reads are Tier 2 (`ai:write`) on purpose. The server runs on CPU 0, the load generator on
//! CPU 1; server CPU per call is read from `/proc` (and, on PostgreSQL, the backends' CPU).

use std::process::Stdio;

use anyhow::Context;

use super::{
    Running, build_breeze, build_peers,
    devices::measure,
    instance::{Db, Instance, free_port},
    perf_peers, pinned, workspace_root,
};

const QUERY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query_devices","arguments":{"status":"offline","limit":25}}}"#;

/// The calls measured: a label and its JSON-RPC body.
const CALLS: [(&str, &str); 2] = [
    (
        "list_invoices",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_invoices","arguments":{"limit":25}}}"#,
    ),
    (
        "manage_tickets list",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"manage_tickets","arguments":{"action":"list","limit":25}}}"#,
    ),
];

/// Seeded numbers start above this, clear of what the demo made.
const NUMBER_BASE: i64 = 1_000_000;

/// Rows per seeding statement.
const STEP: i64 = 50_000;

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &[
            "--tickets",
            "--invoices",
            "--concurrency",
            "--duration",
            "--database",
        ],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let tickets = num("--tickets", 100_000)? as i64;
    let invoices = num("--invoices", 10_000)? as i64;
    let conc = num("--concurrency", 10)? as usize;
    let duration = num("--duration", 5)?;
    let dbs = match f.get("--database").map_or("both", String::as_str) {
        "both" => vec![Db::Sqlite, Db::Postgres],
        other => vec![Db::parse(other)?],
    };

    let root = workspace_root()?;
    let peers = perf_peers(&root)?;
    eprintln!("building (release): loadgen, peer-rmcp, breeze…");
    build_peers(&peers, &["loadgen", "peer-rmcp"])?;
    let bin = build_breeze(&root)?;
    let dir = super::profile().1;
    let loadgen = peers.join("target").join(dir).join("loadgen");
    let body_dir = root.join("target/bench/bodies/billing");
    std::fs::create_dir_all(&body_dir)?;
    let query = body_dir.join("query_offline.json");
    std::fs::write(&query, QUERY)?;

    let peer = {
        let port = free_port()?;
        let peer = Running::start(
            pinned(0)
                .arg(peers.join("target").join(dir).join("peer-rmcp"))
                .args(["--port", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            port,
        )
        .context("starting peer-rmcp")?;
        eprintln!("measuring peer-rmcp…");
        measure(
            "peer-rmcp query_devices (memory)".into(),
            &loadgen,
            peer.id(),
            &format!("http://127.0.0.1:{port}/mcp"),
            &query,
            &[],
            conc,
            duration,
            &Vec::new,
        )?
    };

    let mut tables = Vec::new();
    for db in dbs {
        let env = [
            ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "1000000000"),
            ("MCP_TOOL_RATE_LIMITS", "false"),
        ];
        let inst = Instance::start(&root, &bin, db, 0, &env)?;
        seed(&inst, tickets, invoices)?;
        let key = inst.api_key("write")?;
        let url = format!("{}/mcp", inst.base_url);
        let mut rows = Vec::new();
        for (label, body) in CALLS {
            let file = body_dir.join(format!("{}.json", label.replace(' ', "_")));
            std::fs::write(&file, body)?;
            eprintln!("measuring {label} on {}…", db.name());
            rows.push(measure(
                label.to_owned(),
                &loadgen,
                inst.pid(),
                &url,
                &file,
                &[format!("X-API-Key: {key}")],
                conc,
                duration,
                &|| inst.db_backend_pids(),
            )?);
        }
        tables.push((db, rows));
    }

    report!();
    report!(
        "## Billing reads over {tickets} tickets and {invoices} invoices, 25 a page, concurrency {conc}, {duration} s each (+2 s warm-up)"
    );
    report!();
    report!(
        "peer-rmcp answering query_devices from memory: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, {:.1} µs CPU per call.",
        peer.rps,
        peer.p50,
        peer.p99,
        peer.cpu_us
    );
    for (db, rows) in tables {
        report!();
        report!("### {}", db.name());
        report!();
        report!(
            "| call | req/s | × rmcp | p50 ms | p99 ms | errors | server CPU µs/call | PostgreSQL CPU µs/call | reply bytes |"
        );
        report!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            report!(
                "| {} | {:.0} | {:.2} | {:.3} | {:.3} | {} | {:.1} | {} | {} |",
                r.name,
                r.rps,
                r.rps / peer.rps.max(1e-9),
                r.p50,
                r.p99,
                r.errors,
                r.cpu_us,
                r.db_cpu_us.map_or("-".to_owned(), |c| format!("{c:.1}")),
                r.bytes
            );
        }
    }
    Ok(())
}

/// Seeds the demo organization's tickets and invoices (see the module docs).
fn seed(inst: &Instance, tickets: i64, invoices: i64) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let org: uuid::Uuid = inst.demo["organization"]["id"]
        .as_str()
        .context("demo.json names no organization")?
        .parse()?;
    let base = super::sim::now() - chrono::Duration::days(400);
    let sqlite = inst.db == Db::Sqlite;
    for (table, total) in [("tickets", tickets), ("invoices", invoices)] {
        let mut from = 0;
        while from < total {
            let to = (from + STEP).min(total);
            inst.sql(&seed_sql(sqlite, table, org, base, from, to))?;
            from = to;
        }
    }
    inst.analyze()?;
    eprintln!(
        "seeded {} tickets and {} invoices in {:.0} s",
        inst.count("SELECT count(*) FROM tickets")?,
        inst.count("SELECT count(*) FROM invoices")?,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One statement adding rows `from..to` of `table` (`tickets` or `invoices`) to organization
/// `org`, the first created at `base` and each a few minutes after the previous.
fn seed_sql(
    sqlite: bool,
    table: &str,
    org: uuid::Uuid,
    base: chrono::DateTime<chrono::Utc>,
    from: i64,
    to: i64,
) -> String {
    let last = to - 1;
    // Expressions over the row number `i`, the same text on both databases where it can be.
    let (id, at, org_lit, series) = if sqlite {
        (
            "randomblob(16)".to_owned(),
            format!(
                "strftime('%Y-%m-%dT%H:%M:%S', '{}', '+' || (i * 5) || ' minutes') || \
                 '.000000+00:00'",
                base.format("%Y-%m-%d %H:%M:%S")
            ),
            format!("X'{}'", org.simple()),
            format!(
                "WITH RECURSIVE n(i) AS (SELECT {from} UNION ALL SELECT i + 1 FROM n \
                 WHERE i < {last}) "
            ),
        )
    } else {
        (
            "gen_random_uuid()".to_owned(),
            format!(
                "'{}'::timestamptz + i * interval '5 minutes'",
                base.to_rfc3339()
            ),
            format!("'{org}'::uuid"),
            String::new(),
        )
    };
    let from_rows = if sqlite {
        "FROM n".to_owned()
    } else {
        format!("FROM generate_series({from}, {last}) AS i")
    };
    let partner = format!("(SELECT partner_id FROM organizations WHERE id = {org_lit})");
    let tags = if sqlite { "'[]'" } else { "'[]'::jsonb" };
    match table {
        "tickets" => format!(
            "{series}INSERT INTO tickets (id, org_id, partner_id, number, subject, description, \
             category, priority, status, device_id, submitter, assignee_id, tags, due_at, \
             created_by, created_at, updated_at, resolved_at, closed_at) \
             SELECT {id}, {org_lit}, {partner}, {NUMBER_BASE} + i, 'Printer jams ' || i, \
             'Seeded ticket ' || i, 'bench', \
             CASE i % 4 WHEN 0 THEN 'low' WHEN 1 THEN 'normal' WHEN 2 THEN 'high' ELSE 'urgent' END, \
             CASE i % 6 WHEN 0 THEN 'new' WHEN 1 THEN 'open' WHEN 2 THEN 'pending' \
             WHEN 3 THEN 'on_hold' WHEN 4 THEN 'resolved' ELSE 'closed' END, \
             NULL, NULL, NULL, {tags}, NULL, 'bench', {at}, {at}, \
             CASE WHEN i % 6 = 4 THEN {at} END, CASE WHEN i % 6 = 5 THEN {at} END \
             {from_rows}"
        ),
        _ => format!(
            "{series}INSERT INTO invoices (id, org_id, partner_id, number, status, currency, \
             subtotal_minor, tax_minor, total_minor, paid_minor, notes, due_at, ticket_id, \
             issued_at, voided_at, void_reason, created_by, created_at, updated_at) \
             SELECT {id}, {org_lit}, {partner}, {NUMBER_BASE} + i, \
             CASE WHEN i % 3 = 0 THEN 'paid' ELSE 'issued' END, 'USD', \
             10000 + i, 2000, 12000 + i, CASE WHEN i % 3 = 0 THEN 12000 + i ELSE 0 END, \
             NULL, NULL, NULL, {at}, NULL, NULL, 'bench', {at}, {at} \
             {from_rows}"
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use std::sync::Arc;

    use breeze_core::ManualClock;
    use breeze_store::{Backend, TicketFilter, testing::TestStore};

    use super::*;

    /// The seeding statements run on both databases and make rows the store reads back:
    /// tickets newest first, invoices issued and paid with their numbers.
    async fn seeds(backend: Backend) {
        let clock = ManualClock::new(super::super::sim::now());
        let test = TestStore::new(backend, Arc::new(clock)).await;
        let s = test.store.clone();
        let audit = |a: &str| breeze_core::AuditEvent::new(breeze_core::Actor::system("t"), a, "t");
        let p = s.create_partner("P", "p", audit("p")).await.unwrap();
        let org = s
            .create_organization(p.id, "A", "a", audit("o"))
            .await
            .unwrap()
            .id;
        let base = super::super::sim::now() - chrono::Duration::days(400);
        for table in ["tickets", "invoices"] {
            for (from, to) in [(0, 7), (7, 12)] {
                let statement = seed_sql(backend == Backend::Sqlite, table, org.0, base, from, to);
                s.raw_execute(&statement).await.unwrap();
            }
        }
        let page = s
            .org(org)
            .tickets()
            .list_tickets(&TicketFilter::default(), None, 25)
            .await
            .unwrap();
        assert_eq!(page.tickets.len(), 12);
        assert_eq!(page.tickets[0].number, NUMBER_BASE + 11, "newest first");
        let invoices = s
            .org(org)
            .invoices()
            .list_invoices(None, None, 25)
            .await
            .unwrap();
        assert_eq!(invoices.invoices.len(), 12);
        assert!(invoices.invoices.iter().all(|i| i.reference().is_some()));
        test.cleanup().await;
    }

    #[tokio::test]
    async fn seeds_on_sqlite() {
        seeds(Backend::Sqlite).await;
    }

    #[tokio::test]
    async fn seeds_on_postgres() {
        seeds(Backend::Postgres).await;
    }
}
