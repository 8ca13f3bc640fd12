//! Migrations over existing rows: a database migrated only to [`BASELINE`] and seeded with
//! realistic rows by raw SQL (written against that schema, so the seed never has to follow the
//! store's code) is brought forward one migration at a time, and no table may lose a row nor
//! a foreign key dangle at any step — which covers every migration added after the baseline
//! without anyone writing a test for it. Migration 0030 (which rebuilds the three report tables
//! on SQLite to widen a CHECK, and adds the held lease's `holder`) is then held to more: every
//! row, byte, foreign key and index survives, and PDF reports and held leases work on the
//! upgraded rows.

use std::{collections::BTreeMap, sync::Arc};

use breeze_core::{ManualClock, OrgId, ReportFormat, ReportStatus};
use breeze_store::{Backend, ReportRequest, ReportUpdate, Store, testing::TestStore};
use chrono::{Duration, TimeZone, Utc};
use uuid::Uuid;

use crate::audit;

/// The schema the seed is written against. Raise it (and rewrite the seed) only if a table it
/// seeds changes shape; migrations after it are covered either way.
const BASELINE: i64 = 29;

/// The report tables 0030 rebuilds on SQLite, and the lease table it widens.
const TOUCHED_BY_0030: [&str; 4] = [
    "report_definitions",
    "report_runs",
    "report_chunks",
    "scheduled_runs",
];

/// Fixed ids, so a literal names each seeded row.
fn id(n: u8) -> Uuid {
    Uuid::from_bytes([
        0x01, 0x93, 0x00, 0x00, 0x00, 0x00, 0x70, 0x00, 0x80, 0x00, 0, 0, 0, 0, 0, n,
    ])
}

/// An SQL literal for a value, in the backend's spelling.
struct Lit(Backend);

impl Lit {
    fn id(&self, n: u8) -> String {
        let id = id(n);
        match self.0 {
            Backend::Sqlite => format!("x'{}'", id.simple()),
            Backend::Postgres => format!("'{id}'"),
        }
    }

    fn bytes(&self, b: &[u8]) -> String {
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        match self.0 {
            Backend::Sqlite => format!("x'{hex}'"),
            Backend::Postgres => format!("'\\x{hex}'::bytea"),
        }
    }
}

/// The output of seeded run `n`'s chunk `seq`: bytes no text column would keep (NUL, invalid
/// UTF-8), so a copy that went through text would show.
fn chunk_bytes(n: u8, seq: u8) -> Vec<u8> {
    let mut b = format!("run {n} chunk {seq}: Grüße, Ωμέγα, ").into_bytes();
    b.extend([0x00, 0xff, 0xfe, n, seq]);
    b
}

/// Seeds, by raw SQL against the [`BASELINE`] schema: a partner with organizations A and B,
/// a site and devices in each, report definitions, runs (completed with output over several
/// chunks, failed without, ad hoc) in both organizations, and both kinds of lease row.
async fn seed(s: &Store) {
    let l = Lit(s.backend());
    let t0 = "'2026-11-29T12:00:00+00:00'";
    let t1 = "'2026-11-30T11:00:00+00:00'";
    let (p, a, b, site_a, site_b) = (l.id(1), l.id(2), l.id(3), l.id(4), l.id(5));
    let mut statements = vec![
        format!("INSERT INTO partners (id, name, slug, created_at) VALUES ({p}, 'P', 'p', {t0})"),
        format!(
            "INSERT INTO organizations (id, partner_id, name, slug, created_at) VALUES \
             ({a}, {p}, 'A', 'a', {t0}), ({b}, {p}, 'B', 'b', {t0})"
        ),
        format!(
            "INSERT INTO sites (id, org_id, name, timezone, created_at) VALUES \
             ({site_a}, {a}, 'HQ', 'Europe/Berlin', {t0}), ({site_b}, {b}, 'Branch', 'UTC', {t0})"
        ),
        format!(
            "INSERT INTO devices (id, org_id, site_id, hostname, os_family, os_name, os_version, \
             status, agent_version, last_seen_at, tags, created_at) VALUES \
             ({}, {a}, {site_a}, 'büro-pc', 'windows', 'Windows 11', '23H2', 'online', '1.0.0', \
              {t1}, '[\"office\"]', {t0}), \
             ({}, {a}, {site_a}, 'web-01', 'linux', 'Debian', '12', 'offline', NULL, NULL, \
              '[]', {t0}), \
             ({}, {b}, {site_b}, 'b-only', 'macos', 'macOS', '15.1', 'online', '1.0.0', {t1}, \
              '[]', {t0})",
            l.id(6),
            l.id(7),
            l.id(8)
        ),
        format!(
            "INSERT INTO report_definitions (id, org_id, name, description, kind, format, \
             filters, created_by, created_at, updated_at) VALUES \
             ({}, {a}, 'Fleet', 'every device', 'device_inventory', 'json', '{{}}', 'user:1', \
              {t0}, {t1}), \
             ({}, {a}, 'Alerts', NULL, 'alert_history', 'csv', '{{\"sinceHours\":24}}', \
              'key:2', {t0}, {t0}), \
             ({}, {b}, 'Fleet', NULL, 'device_inventory', 'csv', '{{\"status\":\"online\"}}', \
              'user:3', {t0}, {t0})",
            l.id(20),
            l.id(21),
            l.id(22)
        ),
    ];
    // Runs: (id, org, definition, name, kind, format, status, chunks, error).
    let runs = [
        (
            30,
            &a,
            Some(20),
            "Fleet",
            "device_inventory",
            "json",
            "completed",
            3u8,
            None,
        ),
        (
            31,
            &a,
            Some(21),
            "Alerts",
            "alert_history",
            "csv",
            "failed",
            0,
            Some("'boom'"),
        ),
        (
            32,
            &a,
            None,
            "Ad hoc",
            "audit_activity",
            "csv",
            "completed",
            1,
            None,
        ),
        (
            33,
            &b,
            Some(22),
            "Fleet",
            "device_inventory",
            "csv",
            "completed",
            2,
            None,
        ),
        (
            34,
            &b,
            Some(22),
            "Fleet",
            "device_inventory",
            "csv",
            "running",
            0,
            None,
        ),
    ];
    for (n, org, def, name, kind, format, status, chunks, error) in runs {
        let def = def.map_or("NULL".to_owned(), |d| l.id(d));
        let bytes: usize = (0..chunks).map(|c| chunk_bytes(n, c).len()).sum();
        let finished = if status == "running" { "NULL" } else { t1 };
        statements.push(format!(
            "INSERT INTO report_runs (id, org_id, definition_id, name, kind, format, filters, \
             status, row_count, byte_count, chunk_count, error, requested_by, started_at, \
             finished_at) VALUES ({}, {org}, {def}, '{name}', '{kind}', '{format}', '{{}}', \
             '{status}', {}, {bytes}, {chunks}, {}, 'user:1', {t0}, {finished})",
            l.id(n),
            u32::from(chunks) * 10,
            error.unwrap_or("NULL"),
        ));
        for seq in 0..chunks {
            statements.push(format!(
                "INSERT INTO report_chunks (run_id, org_id, seq, data) VALUES ({}, {org}, {seq}, \
                 {})",
                l.id(n),
                l.bytes(&chunk_bytes(n, seq))
            ));
        }
    }
    // A period lease that ran an hour ago, and the alert engine's lease from before leases
    // could be held, unrenewed for a day.
    statements.push(format!(
        "INSERT INTO scheduled_runs (name, last_run_at) VALUES ('oauth-sweep', {t1}), \
         ('alert-engine', {t0})"
    ));
    for statement in statements {
        s.raw_execute(&statement)
            .await
            .unwrap_or_else(|e| panic!("seed: {e}\n{statement}"));
    }
}

/// Rows per table of this database.
async fn row_counts(s: &Store) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for table in s.raw_tables().await.unwrap() {
        if table.starts_with("_sqlx") {
            continue;
        }
        let n = s
            .raw_strings(&format!("SELECT CAST(COUNT(*) AS TEXT) FROM {table}"))
            .await
            .unwrap();
        counts.insert(table, n[0].parse().unwrap());
    }
    counts
}

/// Rows that break a foreign key (SQLite checks them only on writes with `foreign_keys` on, and
/// a table rebuild can leave some behind; PostgreSQL never keeps one).
async fn dangling_foreign_keys(s: &Store) -> Vec<String> {
    match s.backend() {
        Backend::Sqlite => s
            .raw_strings(
                "SELECT \"table\" || ' row ' || CAST(rowid AS TEXT) || ' -> ' || parent \
                 FROM pragma_foreign_key_check",
            )
            .await
            .unwrap(),
        Backend::Postgres => Vec::new(),
    }
}

/// Index names (with the table each is on) of `tables`; SQLite's automatic indexes (behind
/// UNIQUE and PRIMARY KEY) are counted per table, as a rebuilt table's are named after the
/// table it was created as.
async fn indexes(s: &Store, tables: &[&str]) -> Vec<String> {
    let list = tables
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let query = match s.backend() {
        Backend::Sqlite => format!(
            "SELECT tbl_name || ': ' || name FROM sqlite_master WHERE type = 'index' \
             AND sql IS NOT NULL AND tbl_name IN ({list}) \
             UNION ALL SELECT tbl_name || ': ' || CAST(COUNT(*) AS TEXT) || ' automatic' \
             FROM sqlite_master WHERE type = 'index' AND sql IS NULL AND tbl_name IN ({list}) \
             GROUP BY tbl_name"
        ),
        Backend::Postgres => format!(
            "SELECT CAST(tablename AS TEXT) || ': ' || CAST(indexname AS TEXT) FROM pg_indexes \
             WHERE schemaname = current_schema() AND tablename IN ({list})"
        ),
    };
    let mut names = s.raw_strings(&query).await.unwrap();
    names.sort();
    names
}

/// Every foreign key of `table` as `column -> parent (column) on delete action`.
async fn foreign_keys(s: &Store, table: &str) -> Vec<String> {
    let query = match s.backend() {
        Backend::Sqlite => format!(
            "SELECT \"from\" || ' -> ' || \"table\" || ' (' || \"to\" || ') on delete ' || \
             on_delete FROM pragma_foreign_key_list('{table}')"
        ),
        Backend::Postgres => format!(
            "SELECT CAST(pg_get_constraintdef(oid) AS TEXT) FROM pg_constraint \
             WHERE conrelid = CAST('{table}' AS regclass) AND contype = 'f'"
        ),
    };
    let mut keys = s.raw_strings(&query).await.unwrap();
    keys.sort();
    keys
}

async fn unmigrated(backend: Backend) -> (TestStore, ManualClock) {
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap());
    (
        TestStore::unmigrated(backend, Arc::new(clock.clone())).await,
        clock,
    )
}

/// Every migration after the baseline, applied one at a time over the seeded rows: no table
/// loses a row, no foreign key dangles, and the last step is the schema `migrate` makes.
async fn no_migration_after_the_baseline_loses_rows(backend: Backend) {
    let (test, _clock) = unmigrated(backend).await;
    let s = &test.store;
    s.migrate_through(BASELINE).await.unwrap();
    seed(s).await;
    let mut before = row_counts(s).await;
    for table in [
        "partners",
        "organizations",
        "sites",
        "devices",
        "report_definitions",
        "report_runs",
        "report_chunks",
        "scheduled_runs",
    ] {
        assert!(before[table] > 0, "the seed fills {table}");
    }
    assert!(dangling_foreign_keys(s).await.is_empty());

    let versions = s.migration_versions();
    let later: Vec<i64> = versions.iter().copied().filter(|v| *v > BASELINE).collect();
    assert!(!later.is_empty(), "migrations after the baseline exist");
    for version in later {
        s.migrate_through(version).await.unwrap();
        let after = row_counts(s).await;
        for (table, n) in &before {
            let now = after.get(table).copied();
            assert!(
                now.is_some_and(|m| m >= *n),
                "migration {version} took {table} from {n} rows to {now:?}"
            );
        }
        let dangling = dangling_foreign_keys(s).await;
        assert!(
            dangling.is_empty(),
            "after migration {version}: {dangling:?}"
        );
        before = after;
    }
    // `migrate` (the embedded migrator, checking the applied ones' checksums) has nothing left.
    s.migrate().await.unwrap();
    assert_eq!(s.raw_applied_migrations().await.unwrap(), versions);
    test.cleanup().await;
}

/// Migration 0030 over a populated database: the report tables' rows, bytes, foreign keys and
/// indexes are all there after it, the leases too, and the upgraded rows take what 0030 is
/// for (a definition switched to PDF generates a PDF; the stale alert-engine lease is taken and
/// then held).
async fn migration_0030_keeps_reports_and_leases(backend: Backend) {
    let (test, clock) = unmigrated(backend).await;
    let s = &test.store;
    s.migrate_through(29).await.unwrap();
    seed(s).await;
    let dump = |s: &Store| {
        let s = s.clone();
        async move {
            let mut all = Vec::new();
            for table in ["report_definitions", "report_runs", "report_chunks"] {
                let mut rows = s.raw_dump(table).await.unwrap();
                rows.sort();
                all.push((table, rows));
            }
            all
        }
    };
    let leases = |s: &Store| {
        let s = s.clone();
        async move {
            let mut rows = s
                .raw_strings("SELECT name || ' ' || CAST(last_run_at AS TEXT) FROM scheduled_runs")
                .await
                .unwrap();
            rows.sort();
            rows
        }
    };
    let reports_before = dump(s).await;
    let leases_before = leases(s).await;
    let indexes_before = indexes(s, &TOUCHED_BY_0030).await;
    let keys_before: Vec<_> = {
        let mut v = Vec::new();
        for t in TOUCHED_BY_0030 {
            v.push(foreign_keys(s, t).await);
        }
        v
    };
    assert!(
        indexes_before
            .iter()
            .any(|i| i == "report_runs: report_runs_definition"),
        "{indexes_before:?}"
    );

    s.migrate_through(30).await.unwrap();

    assert_eq!(dump(s).await, reports_before);
    assert_eq!(leases(s).await, leases_before);
    assert_eq!(
        s.raw_strings("SELECT name FROM scheduled_runs WHERE holder IS NOT NULL")
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(indexes(s, &TOUCHED_BY_0030).await, indexes_before);
    for (t, keys) in TOUCHED_BY_0030.iter().zip(&keys_before) {
        assert_eq!(&foreign_keys(s, t).await, keys, "foreign keys of {t}");
    }
    assert!(
        keys_before[2].iter().any(|k| k.contains("report_runs")),
        "chunks name their runs' table: {:?}",
        keys_before[2]
    );
    s.migrate().await.unwrap();

    // Through the store: definitions, history and downloads as seeded.
    let oa = s.org(OrgId(id(2)));
    let ob = s.org(OrgId(id(3)));
    assert_eq!(oa.reports().list_reports().await.unwrap().len(), 2);
    assert_eq!(ob.reports().list_reports().await.unwrap().len(), 1);
    let runs = oa.reports().report_runs(None, 100).await.unwrap();
    assert_eq!(runs.len(), 3);
    let failed = oa.reports().get_report_run(id(31)).await.unwrap();
    assert_eq!(
        (failed.status, failed.error.as_deref()),
        (ReportStatus::Failed, Some("boom"))
    );
    for (org, run, chunks) in [(&oa, 30, 3u8), (&oa, 32, 1), (&ob, 33, 2)] {
        for seq in 0..chunks {
            assert_eq!(
                org.reports()
                    .report_chunk(id(run), i64::from(seq))
                    .await
                    .unwrap(),
                Some(chunk_bytes(run, seq)),
                "run {run} chunk {seq}"
            );
        }
        assert_eq!(
            org.reports()
                .report_chunk(id(run), i64::from(chunks))
                .await
                .unwrap(),
            None
        );
    }

    // The chunks' foreign key points at the rebuilt runs and still cascades and refuses.
    let l = Lit(backend);
    s.raw_execute(&format!("DELETE FROM report_runs WHERE id = {}", l.id(32)))
        .await
        .unwrap();
    assert_eq!(oa.reports().report_chunk(id(32), 0).await.unwrap(), None);
    assert_eq!(
        oa.reports().report_chunk(id(30), 2).await.unwrap(),
        Some(chunk_bytes(30, 2))
    );
    let orphan = s
        .raw_execute(&format!(
            "INSERT INTO report_chunks (run_id, org_id, seq, data) VALUES ({}, {}, 0, {})",
            l.id(99),
            l.id(2),
            l.bytes(b"x")
        ))
        .await;
    assert!(orphan.is_err(), "a chunk of no run is refused");
    // The CHECKs were widened, not dropped.
    for table in ["report_definitions", "report_runs"] {
        let bad = s
            .raw_execute(&format!("UPDATE {table} SET format = 'xml'"))
            .await;
        assert!(bad.is_err(), "{table} refuses an unknown format");
    }
    // The names are still unique per organization.
    let dup = s
        .raw_execute(&format!(
            "INSERT INTO report_definitions (id, org_id, name, kind, format, filters, \
             created_by, created_at, updated_at) VALUES ({}, {}, 'Fleet', 'device_inventory', \
             'json', '{{}}', 'x', '2026-11-30T12:00:00+00:00', '2026-11-30T12:00:00+00:00')",
            l.id(98),
            l.id(2)
        ))
        .await;
    assert!(dup.is_err(), "a second 'Fleet' in A is refused");

    // A seeded definition switched to PDF generates a PDF of A's two devices.
    let fleet = oa
        .reports()
        .update_report(
            id(20),
            ReportUpdate {
                format: Some(ReportFormat::Pdf),
                ..Default::default()
            },
            audit("report.update", "report"),
        )
        .await
        .unwrap();
    assert_eq!(fleet.format, ReportFormat::Pdf);
    let run = oa
        .reports()
        .generate_report(
            ReportRequest::from(&fleet),
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    assert_eq!((run.status, run.row_count), (ReportStatus::Completed, 2));
    let mut pdf = Vec::new();
    let mut seq = 0;
    while let Some(chunk) = oa.reports().report_chunk(run.id, seq).await.unwrap() {
        pdf.extend(chunk);
        seq += 1;
    }
    assert!(breeze_store::testing::check_pdf(&pdf) >= 1);
    assert_eq!(
        oa.reports()
            .report_runs(Some(id(20)), 100)
            .await
            .unwrap()
            .len(),
        2
    );

    // The alert engine's old lease row, unrenewed for a day, is taken and then held.
    let ttl = Duration::minutes(2);
    assert!(s.hold_lease("alert-engine", "node-1", ttl).await.unwrap());
    assert!(!s.hold_lease("alert-engine", "node-2", ttl).await.unwrap());
    clock.advance(Duration::minutes(1));
    assert!(s.hold_lease("alert-engine", "node-1", ttl).await.unwrap());
    assert!(s.release_lease("alert-engine", "node-1").await.unwrap());
    assert!(s.hold_lease("alert-engine", "node-2", ttl).await.unwrap());
    // The period lease ran an hour ago: not again today.
    assert!(
        !s.claim_scheduled_run("oauth-sweep", Duration::days(1))
            .await
            .unwrap()
    );
    assert!(
        s.claim_scheduled_run("oauth-sweep", Duration::minutes(30))
            .await
            .unwrap()
    );
    test.cleanup().await;
}

#[tokio::test]
async fn no_migration_after_the_baseline_loses_rows_on_sqlite() {
    no_migration_after_the_baseline_loses_rows(Backend::Sqlite).await;
}

#[tokio::test]
async fn no_migration_after_the_baseline_loses_rows_on_postgres() {
    no_migration_after_the_baseline_loses_rows(Backend::Postgres).await;
}

#[tokio::test]
async fn migration_0030_keeps_reports_and_leases_on_sqlite() {
    migration_0030_keeps_reports_and_leases(Backend::Sqlite).await;
}

#[tokio::test]
async fn migration_0030_keeps_reports_and_leases_on_postgres() {
    migration_0030_keeps_reports_and_leases(Backend::Postgres).await;
}

/// Migration 0038 over the seeded rows, with built-in roles as an older Breeze made them: the
/// roles gain the ticket and billing permissions (administrators all, technicians tickets,
/// read-only users reading tickets; custom roles none), and the seeded organization and device
/// take tickets, time, an assembled invoice and its issue.
async fn migration_0038_brings_tickets_and_billing_to_seeded_rows(backend: Backend) {
    use breeze_core::{Currency, Money, Permission, TicketPriority};
    let (test, _clock) = unmigrated(backend).await;
    let s = &test.store;
    s.migrate_through(37).await.unwrap();
    seed(s).await;
    let l = Lit(backend);
    let (p, roles) = (l.id(1), [l.id(40), l.id(41), l.id(42), l.id(43)]);
    s.raw_execute(&format!(
        "INSERT INTO roles (id, partner_id, name, description, permissions, builtin) VALUES \
         ({}, {p}, 'Administrator', 'all', '[\"devices.read\",\"users.manage\"]', TRUE), \
         ({}, {p}, 'Technician', 'ops', '[\"devices.read\"]', TRUE), \
         ({}, {p}, 'Read Only', 'ro', '[\"devices.read\"]', TRUE), \
         ({}, {p}, 'Custom', 'mine', '[\"devices.read\"]', FALSE)",
        roles[0], roles[1], roles[2], roles[3]
    ))
    .await
    .unwrap();
    s.migrate().await.unwrap();

    let partner = breeze_core::PartnerId(id(1));
    let perms =
        |name: &'static str| async move { s.find_role(partner, name).await.unwrap().permissions };
    let admin = perms("Administrator").await;
    for p in [
        Permission::DevicesRead,
        Permission::UsersManage,
        Permission::TicketsManage,
        Permission::InvoicesSend,
        Permission::InvoicesRead,
    ] {
        assert!(admin.contains(p), "administrator keeps or gains {p}");
    }
    let tech = perms("Technician").await;
    assert!(tech.contains(Permission::TicketsWrite) && !tech.contains(Permission::InvoicesRead));
    let ro = perms("Read Only").await;
    assert!(ro.contains(Permission::TicketsRead) && !ro.contains(Permission::TicketsWrite));
    assert!(
        !perms("Custom").await.contains(Permission::TicketsRead),
        "custom roles untouched"
    );

    // The seeded organization and device take the new tables.
    let org = OrgId(id(2));
    let user = s
        .create_user(
            breeze_store::NewUser {
                partner_id: partner,
                org_id: None,
                email: "tech@p.test".into(),
                name: "T".into(),
                password_hash: "x".into(),
            },
            audit("user.create", "user"),
        )
        .await
        .unwrap();
    s.assign_role(
        user.id,
        org,
        breeze_core::RoleId(id(41)),
        audit("r", "user"),
    )
    .await
    .unwrap();
    let t = s
        .org(org)
        .tickets()
        .create_ticket(
            breeze_store::NewTicket {
                subject: "büro-pc is slow".into(),
                description: String::new(),
                category: None,
                priority: TicketPriority::High,
                device_id: Some(breeze_core::DeviceId(id(6))),
                submitter: None,
                assignee_id: Some(user.id),
                tags: vec![],
                due_at: None,
                created_by: "test".into(),
            },
            audit("ticket.create", "ticket"),
        )
        .await
        .unwrap();
    assert_eq!(t.number, 1);
    let usd = Currency::parse("USD").unwrap();
    s.org(org)
        .tickets()
        .log_time(
            t.id,
            30,
            breeze_store::NewTime {
                user: user.id,
                actor: breeze_core::Actor::system("t"),
                billable: true,
                rate: Money::new(9000, usd),
                note: None,
            },
            audit("ticket.log_time", "ticket"),
        )
        .await
        .unwrap();
    let inv = s.org(org).invoices();
    let draft = inv
        .assemble_from_ticket(t.id, 0, "test", audit("invoice.assemble", "invoice"))
        .await
        .unwrap();
    assert_eq!(draft.total_minor, 4500);
    let issued = inv
        .issue(draft.id, audit("invoice.issue", "invoice"))
        .await
        .unwrap();
    assert_eq!(issued.number, Some(1));
    assert!(dangling_foreign_keys(s).await.is_empty());
    test.cleanup().await;
}

/// Migration 0039 (Tool Sources) over a populated database: the built-in roles a partner
/// already has gain the external-tools grants their descriptions promise (a custom role
/// gains nothing), and the seeded organizations can hold sources and tools at once.
async fn migration_0039_grants_external_tools_to_builtin_roles(backend: Backend) {
    let (test, _clock) = unmigrated(backend).await;
    let s = &test.store;
    s.migrate_through(BASELINE).await.unwrap();
    seed(s).await;
    let l = Lit(s.backend());
    let p = l.id(1);
    let old = r#"'["devices.read", "audit.read"]'"#;
    for (n, name, builtin) in [
        (40, "Administrator", "TRUE"),
        (41, "Technician", "TRUE"),
        (42, "Read Only", "TRUE"),
        (43, "Custom", "FALSE"),
    ] {
        s.raw_execute(&format!(
            "INSERT INTO roles (id, partner_id, name, description, permissions, builtin) \
             VALUES ({}, {p}, '{name}', '', {old}, {builtin})",
            l.id(n)
        ))
        .await
        .unwrap();
    }
    s.migrate_through(38).await.unwrap();
    s.migrate_through(39).await.unwrap();
    let perms = s
        .raw_strings("SELECT name || ':' || CAST(permissions AS TEXT) FROM roles ORDER BY name")
        .await
        .unwrap();
    let of = |role: &str| {
        perms
            .iter()
            .find(|p| p.starts_with(&format!("{role}:")))
            .cloned()
            .unwrap()
    };
    for role in ["Administrator", "Technician"] {
        let p = of(role);
        assert!(
            p.contains("external_tools.read") && p.contains("external_tools.write"),
            "{p}"
        );
        assert!(p.contains("devices.read"), "kept what it had: {p}");
    }
    let ro = of("Read Only");
    assert!(
        ro.contains("external_tools.read") && !ro.contains("external_tools.write"),
        "{ro}"
    );
    assert!(
        !of("Custom").contains("external_tools"),
        "custom roles get nothing"
    );
    // Roles still decode as permission sets, and the seeded organization takes a source.
    let org = OrgId(id(2));
    let partner = s
        .org(org)
        .tenancy()
        .organization()
        .await
        .unwrap()
        .partner_id;
    let roles = s.list_roles(partner).await.unwrap();
    assert!(roles.iter().any(|r| {
        r.permissions
            .contains(breeze_core::Permission::ExternalToolsWrite)
    }));
    test.cleanup().await;
}

#[tokio::test]
async fn migration_0038_brings_tickets_and_billing_to_seeded_rows_on_sqlite() {
    migration_0038_brings_tickets_and_billing_to_seeded_rows(Backend::Sqlite).await;
}

#[tokio::test]
async fn migration_0038_brings_tickets_and_billing_to_seeded_rows_on_postgres() {
    migration_0038_brings_tickets_and_billing_to_seeded_rows(Backend::Postgres).await;
}

#[tokio::test]
async fn migration_0039_grants_external_tools_to_builtin_roles_on_sqlite() {
    migration_0039_grants_external_tools_to_builtin_roles(Backend::Sqlite).await;
}

#[tokio::test]
async fn migration_0039_grants_external_tools_to_builtin_roles_on_postgres() {
    migration_0039_grants_external_tools_to_builtin_roles(Backend::Postgres).await;
}

/// Migrations 0046 (catalog) and 0047 (contracts) over a populated database: administrators
/// gain the catalog and contract grants (technicians, read-only users and custom roles
/// nothing), and an invoice line made before 0046 outlives the rebuild of its table (SQLite)
/// and the widened kind check, still frozen on its issued invoice.
async fn migrations_0046_0047_grant_billing_and_keep_invoice_lines(backend: Backend) {
    use breeze_core::{Currency, Money, Permission, Quantity};
    let (test, _clock) = unmigrated(backend).await;
    let s = &test.store;
    s.migrate_through(BASELINE).await.unwrap();
    seed(s).await;
    let l = Lit(s.backend());
    let p = l.id(1);
    let old = r#"'["devices.read"]'"#;
    for (n, name, builtin) in [
        (40, "Administrator", "TRUE"),
        (41, "Technician", "TRUE"),
        (42, "Read Only", "TRUE"),
        (43, "Custom", "FALSE"),
    ] {
        s.raw_execute(&format!(
            "INSERT INTO roles (id, partner_id, name, description, permissions, builtin) \
             VALUES ({}, {p}, '{name}', '', {old}, {builtin})",
            l.id(n)
        ))
        .await
        .unwrap();
    }
    s.migrate_through(45).await.unwrap();
    // An issued invoice with a line, as Breeze before the catalog made it.
    let org = OrgId(id(2));
    let usd = Currency::parse("USD").unwrap();
    let invoices = s.org(org).invoices();
    // The store's line queries name 0046's columns: the old line is written raw.
    let inv = l.id(50);
    let line = l.id(51);
    s.raw_execute(&format!(
        "INSERT INTO invoices (id, org_id, partner_id, number, status, currency, subtotal_minor, \
         tax_minor, total_minor, paid_minor, created_by, created_at, updated_at) \
         VALUES ({inv}, {}, {p}, NULL, 'draft', 'USD', 1000, 0, 1000, 0, 't', {now}, {now})",
        l.id(2),
        now = "'2026-11-30T11:00:00+00:00'"
    ))
    .await
    .unwrap();
    s.raw_execute(&format!(
        "INSERT INTO invoice_lines (id, org_id, invoice_id, position, kind, description, \
         quantity_milli, unit_price_minor, amount_minor, tax_bp, tax_minor, currency) \
         VALUES ({line}, {}, {inv}, 1, 'manual', 'old', 1000, 1000, 1000, 0, 0, 'USD')",
        l.id(2)
    ))
    .await
    .unwrap();
    s.raw_execute(&format!(
        "UPDATE invoices SET status = 'issued', number = 1, issued_at = updated_at \
         WHERE id = {inv}"
    ))
    .await
    .unwrap();
    s.migrate().await.unwrap();

    let partner = breeze_core::PartnerId(id(1));
    let perms =
        |name: &'static str| async move { s.find_role(partner, name).await.unwrap().permissions };
    let admin = perms("Administrator").await;
    for p in [
        Permission::CatalogRead,
        Permission::CatalogWrite,
        Permission::ContractsRead,
        Permission::ContractsWrite,
        Permission::ContractsManage,
        Permission::DevicesRead,
    ] {
        assert!(admin.contains(p), "administrator keeps or gains {p}");
    }
    for role in ["Technician", "Read Only", "Custom"] {
        let got = perms(role).await;
        assert!(
            !got.contains(Permission::CatalogRead) && !got.contains(Permission::ContractsRead),
            "{role} gains no billing grant"
        );
    }
    let lines = invoices.lines(id(50)).await.unwrap();
    assert_eq!(lines.len(), 1, "the line outlived the migration");
    assert_eq!(lines[0].description, "old");
    assert_eq!(lines[0].catalog_item_id, None);
    // Still frozen: an issued invoice's lines never change.
    assert!(
        s.raw_execute(&format!("DELETE FROM invoice_lines WHERE id = {line}"))
            .await
            .is_err(),
        "the freezing trigger came back with the table"
    );
    // And the new kinds are accepted on a draft.
    let d = invoices
        .create_draft(usd, None, None, "test", audit("invoice.create", "invoice"))
        .await
        .unwrap();
    invoices
        .add_line(
            d.id,
            breeze_store::NewLine {
                description: "x".into(),
                quantity: Quantity::ONE,
                unit_price: Money::new(100, usd),
                tax_bp: 0,
            },
            audit("invoice.add_line", "invoice"),
        )
        .await
        .unwrap();
    test.cleanup().await;
}

#[tokio::test]
async fn migrations_0046_0047_grant_billing_and_keep_invoice_lines_on_sqlite() {
    migrations_0046_0047_grant_billing_and_keep_invoice_lines(Backend::Sqlite).await;
}

#[tokio::test]
async fn migrations_0046_0047_grant_billing_and_keep_invoice_lines_on_postgres() {
    migrations_0046_0047_grant_billing_and_keep_invoice_lines(Backend::Postgres).await;
}
