//! The audit log: append-only, filtered queries, keyset pagination.

use std::{collections::HashSet, path::PathBuf, sync::Arc};

use breeze_core::{Actor, ActorType, AuditEvent, AuditResult, Clock};
use breeze_store::{AuditCursor, AuditFilter, Backend};
use chrono::Duration;

use crate::audit;
use breeze_store::testing::Ctx;

async fn records_cannot_be_changed_or_deleted(cx: Ctx) {
    let s = &cx.store;
    s.append_audit(&audit("thing.happen", "thing"))
        .await
        .unwrap();
    assert_append_only(s).await;
}

/// Changing or deleting any audit row fails, naming the rule.
async fn assert_append_only(s: &breeze_store::Store) {
    for statement in [
        "UPDATE audit_log SET action = 'forged'",
        "DELETE FROM audit_log",
    ] {
        let err = s.raw_execute(statement).await.unwrap_err();
        assert!(
            err.to_string().contains("append-only"),
            "{statement}: {err}"
        );
    }
}

/// The table refuses a result other than success, failure or denied.
async fn assert_result_is_checked(s: &breeze_store::Store) {
    let insert = |result: &str| {
        format!(
            "INSERT INTO audit_log (id, created_at, actor_type, actor_id, action, resource_type, \
             details, result) VALUES ({}, '2026-01-01T00:00:00Z', 'system', 'test', 'x.y', 'x', \
             '{{}}', '{result}')",
            match s.backend() {
                Backend::Sqlite => "randomblob(16)",
                Backend::Postgres => "gen_random_uuid()",
            }
        )
    };
    let err = s.raw_execute(&insert("forged")).await.unwrap_err();
    assert!(
        err.to_string().contains("CHECK") || err.to_string().contains("check"),
        "{err}"
    );
    for result in ["success", "failure", "denied"] {
        s.raw_execute(&insert(result)).await.unwrap();
    }
}

async fn filters_and_keyset_pagination(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let org = s
        .create_organization(
            partner.id,
            "O",
            "o",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let start = s.clock().now();
    // 25 records, several sharing a timestamp, so pagination must break ties by id.
    for i in 0..25 {
        if i % 3 == 0 {
            cx.clock.advance(Duration::seconds(10));
        }
        let (actor, action, result) = match i % 5 {
            0 => (
                Actor::new(ActorType::ApiKey, "key-1"),
                "mcp.tools.call",
                AuditResult::Success,
            ),
            1 => (
                Actor::new(ActorType::ApiKey, "key-2"),
                "mcp.tools.list",
                AuditResult::Success,
            ),
            2 => (
                Actor::new(ActorType::User, "user-1"),
                "auth.login",
                AuditResult::Failure,
            ),
            3 => (
                Actor::new(ActorType::User, "user-1"),
                "api_key.create",
                AuditResult::Success,
            ),
            _ => (
                Actor::new(ActorType::ApiKey, "key-1"),
                "mcp.tools.call",
                AuditResult::Denied,
            ),
        };
        let mut event = AuditEvent::new(actor, action, "tool")
            .org(org.id)
            .resource(format!("r{i}"))
            .details(serde_json::json!({ "i": i }))
            .request(Some(format!("req-{i}")));
        event.result = result;
        s.append_audit(&event).await.unwrap();
    }
    let o = s.org(org.id);
    let mine = AuditFilter {
        resource_type: Some("tool".into()),
        ..Default::default()
    };

    // Walk all pages of 10.
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = o.audit().query_audit(&mine, cursor, 10).await.unwrap();
        pages += 1;
        seen.extend(
            page.records
                .iter()
                .map(|r| (r.created_at, r.id, r.event.details["i"].as_i64().unwrap())),
        );
        match page.next_cursor {
            Some(c) => cursor = Some(AuditCursor::decode(&c.encode()).unwrap()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25);
    assert_eq!(
        seen.iter().map(|s| s.1).collect::<HashSet<_>>().len(),
        25,
        "no record twice"
    );
    assert!(
        seen.windows(2).all(|w| (w[0].0, w[0].1) > (w[1].0, w[1].1)),
        "newest first"
    );
    assert_eq!(seen[0].2, 24);

    let count = |f: AuditFilter| async move {
        o.audit()
            .query_audit(&f, None, 500)
            .await
            .unwrap()
            .records
            .len()
    };
    assert_eq!(
        count(AuditFilter {
            action: Some("mcp.tools.call".into()),
            ..mine.clone()
        })
        .await,
        10
    );
    assert_eq!(
        count(AuditFilter {
            action: Some("mcp.".into()),
            ..mine.clone()
        })
        .await,
        15
    );
    assert_eq!(
        count(AuditFilter {
            action: Some("mcp.tools*".into()),
            ..mine.clone()
        })
        .await,
        15
    );
    assert_eq!(
        count(AuditFilter {
            action: Some("mcp".into()),
            ..mine.clone()
        })
        .await,
        0
    );
    assert_eq!(
        count(AuditFilter {
            actor_type: Some(ActorType::User),
            ..mine.clone()
        })
        .await,
        10
    );
    assert_eq!(
        count(AuditFilter {
            actor_id: Some("key-2".into()),
            ..mine.clone()
        })
        .await,
        5
    );
    assert_eq!(
        count(AuditFilter {
            result: Some(AuditResult::Denied),
            ..mine.clone()
        })
        .await,
        5
    );
    assert_eq!(
        count(AuditFilter {
            resource_id: Some("r7".into()),
            ..mine.clone()
        })
        .await,
        1
    );
    // Time range: records 0..=2 are stamped start+10s, 3..=5 start+20s, ...
    let range = AuditFilter {
        since: Some(start + Duration::seconds(20)),
        until: Some(start + Duration::seconds(40)),
        ..mine.clone()
    };
    assert_eq!(count(range).await, 6);

    let full = o
        .audit()
        .query_audit(
            &AuditFilter {
                resource_id: Some("r3".into()),
                ..mine
            },
            None,
            1,
        )
        .await
        .unwrap();
    let rec = &full.records[0];
    assert_eq!(rec.event.actor, Actor::new(ActorType::User, "user-1"));
    assert_eq!(rec.event.request_id.as_deref(), Some("req-3"));
    assert_eq!(rec.event.org_id, Some(org.id));

    assert!(AuditCursor::decode("not a cursor").is_err());
}

async fn batches_write_every_record(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let org = s
        .create_organization(
            partner.id,
            "O",
            "o",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    // 130 records cross the 64-row statement boundary (PostgreSQL) twice, and fill eight 16-row
    // statements with two rows left over (SQLite); every field, including awkward text and JSON,
    // must read back as written.
    let events: Vec<AuditEvent> = (0..130)
        .map(|i| {
            let e = AuditEvent::new(Actor::new(ActorType::ApiKey, "k"), "mcp.ping", "mcp")
                .org(org.id)
                .resource(format!("r{i}"))
                .details(serde_json::json!({ "i": i, "quote": "a\"b\\c", "é": [1, null] }))
                .request(Some(format!("req-{i}")));
            if i % 3 == 0 {
                e.failed(AuditResult::Failure, format!("went \"wrong\" {i}"))
            } else {
                e
            }
        })
        .collect();
    let unwritten = s.audit_appender().append(events.clone()).await;
    assert!(unwritten.is_empty(), "{unwritten:?}");
    // Written one at a time, the same record reads back the same way.
    s.append_audit(&events[0]).await.unwrap();
    let f = AuditFilter {
        action: Some("mcp.ping".into()),
        ..Default::default()
    };
    let page = s
        .org(org.id)
        .audit()
        .query_audit(&f, None, 500)
        .await
        .unwrap();
    assert_eq!(page.records.len(), 131);
    let ids: HashSet<_> = page.records.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 131);
    for (i, written) in events.iter().enumerate() {
        let read: Vec<_> = page
            .records
            .iter()
            .filter(|r| r.event.resource_id.as_deref() == Some(&*format!("r{i}")))
            .collect();
        assert_eq!(read.len(), if i == 0 { 2 } else { 1 }, "r{i}");
        for r in read {
            assert_eq!(&r.event, written, "r{i}");
        }
    }
}

/// Every column of every audit row but the id, as the database renders it.
async fn stored_rows_without_ids(s: &breeze_store::Store) -> Vec<String> {
    let mut rows: Vec<String> = s
        .raw_dump("audit_log")
        .await
        .unwrap()
        .into_iter()
        .map(|row| match s.backend() {
            Backend::Sqlite => row.split_once(',').unwrap().1.to_owned(),
            Backend::Postgres => {
                let mut v: serde_json::Value = serde_json::from_str(&row).unwrap();
                v.as_object_mut().unwrap().remove("id");
                v.to_string()
            }
        })
        .collect();
    rows.sort();
    rows
}

async fn the_appender_stores_rows_exactly_as_the_pool_does(cx: Ctx) {
    let s = &cx.store;
    let appender = s.audit_appender();
    // On a SQLite file, and on PostgreSQL with a journal directory, the appender journals a
    // lone record and inserts a batch directly; otherwise it writes through the pool.
    let journaled = !format!("{appender:?}").contains("journal: None");
    let has_journal = s.backend() == Backend::Sqlite || s.raw_audit_journal_dir().is_some();
    assert_eq!(journaled, has_journal, "{appender:?}");
    let event = AuditEvent::new(Actor::new(ActorType::ApiKey, "k"), "mcp.tools.call", "mcp")
        .resource("query_devices")
        .details(serde_json::json!({ "tool": "query_devices", "n": 1.5, "s": "é\"\n" }))
        .request(Some("req".into()))
        .failed(AuditResult::Denied, "no");
    // Whole seconds and nanoseconds: timestamps are text on SQLite, and must sort alike.
    for at in [
        cx.clock.now(),
        cx.clock.now() + Duration::nanoseconds(123_456_789),
    ] {
        cx.clock.set(at);
        s.append_audit(&event).await.unwrap();
        for batch in [1, 20] {
            let unwritten = appender.append(vec![event.clone(); batch]).await;
            assert!(unwritten.is_empty(), "{unwritten:?}");
        }
    }
    let rows = stored_rows_without_ids(s).await;
    assert_eq!(rows.len(), 44);
    assert!(rows[..22].iter().all(|r| *r == rows[0]), "{rows:#?}");
    assert!(rows[22..].iter().all(|r| *r == rows[22]), "{rows:#?}");
    assert_ne!(rows[0], rows[22]);
}

/// A record whose text holds NUL (a hostile client's method, tool name or URI) is stored with
/// U+0000 as U+FFFD, whichever way it is written: PostgreSQL refused it, so the request left
/// no trace.
async fn records_with_nul_are_stored(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let org = s
        .create_organization(partner.id, "A", "a", audit("o", "organization"))
        .await
        .unwrap();
    let event = AuditEvent::new(
        Actor::new(ActorType::ApiKey, "k\0"),
        "mcp.tools\0call",
        "mcp\0",
    )
    .org(org.id)
    .resource("breeze://devices\0")
    .details(serde_json::json!({ "tool": "query\0devices", "uri\0": "\\u0000" }))
    .request(Some("req\0".into()))
    .failed(AuditResult::Failure, "Unknown tool: query\0devices");
    s.append_audit(&event).await.unwrap();
    // A lone record (journaled on a SQLite file) and a batch (inserted directly there).
    let appender = s.audit_appender();
    for batch in [1, 20] {
        let unwritten = appender.append(vec![event.clone(); batch]).await;
        assert!(unwritten.is_empty(), "{unwritten:?}");
    }
    s.flush_audit().await;
    let page = s
        .org(org.id)
        .audit()
        .query_audit(
            &AuditFilter {
                action: Some("mcp.".into()),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    assert_eq!(page.records.len(), 22);
    for r in &page.records {
        let e = &r.event;
        assert_eq!(e.action, "mcp.tools\u{FFFD}call");
        assert_eq!(e.actor.id, "k\u{FFFD}");
        assert_eq!(e.resource_type, "mcp\u{FFFD}");
        assert_eq!(e.resource_id.as_deref(), Some("breeze://devices\u{FFFD}"));
        assert_eq!(e.request_id.as_deref(), Some("req\u{FFFD}"));
        assert_eq!(
            e.error_message.as_deref(),
            Some("Unknown tool: query\u{FFFD}devices")
        );
        assert_eq!(
            e.details,
            serde_json::json!({ "tool": "query\u{FFFD}devices", "uri\u{FFFD}": "\\u0000" })
        );
    }
    // The stored rows are alike byte for byte, however they were written.
    let rows = stored_rows_without_ids(s).await;
    let nul_rows: Vec<&String> = rows.iter().filter(|r| r.contains("mcp.tools")).collect();
    assert_eq!(nul_rows.len(), 22);
    assert!(nul_rows.iter().all(|r| *r == nul_rows[0]), "{nul_rows:#?}");
}

async fn records_are_never_lost_when_the_table_cannot_take_them(cx: Ctx) {
    let s = &cx.store;
    let appender = s.audit_appender();
    s.raw_execute("ALTER TABLE audit_log RENAME TO audit_log_away")
        .await
        .unwrap();
    // A lone record and a batch (which SQLite would insert directly, were the table there).
    let events: Vec<AuditEvent> = (0..13)
        .map(|i| audit("thing.happen", "thing").resource(format!("r{i}")))
        .collect();
    let mut unwritten = appender.append(events[..1].to_vec()).await;
    unwritten.extend(
        appender
            .append(events[1..].to_vec())
            .await
            .into_iter()
            .map(|(i, event, e)| (i + 1, event, e)),
    );
    // What was journaled waits there (a move fails) until the table is back: on SQLite every
    // record; on PostgreSQL with a journal the lone one (the batch is inserted, and fails).
    // Through the pool, each record that failed comes back with the reason.
    let journaled = match (s.backend(), s.raw_audit_journal_dir()) {
        (Backend::Sqlite, _) => 13,
        (Backend::Postgres, Some(_)) => 1,
        (Backend::Postgres, None) => 0,
    };
    assert_eq!(unwritten.len(), 13 - journaled, "{unwritten:?}");
    for (i, event, error) in &unwritten {
        assert_eq!(event, &events[*i]);
        assert!(error.to_string().contains("audit_log"), "{error}");
    }
    s.flush_audit().await;
    s.raw_execute("ALTER TABLE audit_log_away RENAME TO audit_log")
        .await
        .unwrap();
    s.flush_audit().await;
    let rows = s.raw_dump("audit_log").await.unwrap();
    assert_eq!(rows.len(), journaled, "{rows:?}");
    for i in 0..journaled {
        assert!(
            rows.iter()
                .any(|r| r.contains(&format!("'r{i}'")) || r.contains(&format!("\"r{i}\""))),
            "{rows:?}"
        );
    }
}

/// PostgreSQL: the appender's own connections commit synchronously unless asked not to, and a
/// connection that died under them (a database restart, an administrator's
/// `pg_terminate_backend`) loses no record: the batch is written again through the pool and
/// the next one opens a new connection.
#[tokio::test]
async fn audit_connections_commit_as_configured_and_survive_a_dead_connection() {
    use breeze_store::testing::{TestStore, store_url};
    let clock = Arc::new(breeze_core::SystemClock);
    let test = TestStore::new(Backend::Postgres, clock.clone()).await;
    let s = &test.store;
    assert_eq!(
        s.raw_audit_setting("synchronous_commit").await.unwrap(),
        Some("on".into())
    );
    let schema = s
        .raw_strings("SELECT CAST(current_schema() AS TEXT)")
        .await
        .unwrap()
        .remove(0);
    let relaxed = breeze_store::Store::connect(
        &breeze_store::StoreOptions {
            pg_schema: Some(schema),
            max_connections: 2,
            audit_synchronous_commit: false,
            ..breeze_store::StoreOptions::new(store_url())
        },
        clock,
    )
    .await
    .unwrap();
    assert_eq!(
        relaxed
            .raw_audit_setting("synchronous_commit")
            .await
            .unwrap(),
        Some("off".into())
    );
    relaxed.close().await;

    let event = |i: usize| {
        AuditEvent::new(Actor::system("t"), "audit.probe", "probe").resource(format!("p{i}"))
    };
    let appender = s.audit_appender();
    assert!(appender.append(vec![event(0)]).await.is_empty());
    // Kill this store's audit connection (the one whose search path is this test's schema).
    let killed = s
        .raw_strings(
            "SELECT CAST(pg_terminate_backend(pid) AS TEXT) FROM pg_stat_activity \
             WHERE application_name = 'breeze-audit' AND pid <> pg_backend_pid() \
               AND usename = current_user",
        )
        .await
        .unwrap();
    assert!(killed.iter().any(|k| k == "true"), "{killed:?}");
    for i in 1..4 {
        let unwritten = appender.append(vec![event(i)]).await;
        assert!(unwritten.is_empty(), "{unwritten:?}");
    }
    let written = s
        .raw_strings("SELECT resource_id FROM audit_log WHERE action = 'audit.probe' ORDER BY 1")
        .await
        .unwrap();
    assert_eq!(written, ["p0", "p1", "p2", "p3"]);
    test.cleanup().await;
}

/// The appender's cases again on PostgreSQL with an audit journal, as `breeze serve` runs.
mod postgres_journaled {
    macro_rules! journaled {
        ($($case:ident),+) => {
            $(#[tokio::test]
            async fn $case() {
                breeze_store::testing::run_journaled(super::$case).await;
            })+
        };
    }
    journaled!(
        the_appender_stores_rows_exactly_as_the_pool_does,
        records_with_nul_are_stored,
        records_are_never_lost_when_the_table_cannot_take_them,
        a_dead_process_journal_is_moved_on_the_next_start,
        a_retired_journal_is_moved_on_demand
    );
}

breeze_store::on_both_backends!(
    the_appender_stores_rows_exactly_as_the_pool_does,
    records_with_nul_are_stored,
    records_are_never_lost_when_the_table_cannot_take_them,
    batches_write_every_record,
    records_cannot_be_changed_or_deleted,
    filters_and_keyset_pagination
);

/// Where `cx`'s audit journal lives: its directory and the name its segments start with.
fn journal_place(cx: &Ctx) -> (PathBuf, &'static str) {
    // Beside a SQLite file, or in PostgreSQL's journal directory.
    match (&cx.dir, cx.store.raw_audit_journal_dir()) {
        (Some(dir), _) => (dir.clone(), "breeze.db-audit"),
        (None, Some(dir)) => (dir, "audit"),
        (None, None) => panic!("a store without an audit journal"),
    }
}

/// A journal line as the journal writes it (the row's columns in their stored form), for a
/// record of `thing.happen` on resource `left-<i>`.
fn journal_line(i: u32) -> String {
    serde_json::json!({
        "id": uuid::Uuid::now_v7(),
        "at": "2026-11-30T12:00:00+00:00",
        "org": null,
        "actor_type": "system",
        "actor_id": "test",
        "action": "thing.happen",
        "resource_type": "thing",
        "resource_id": format!("left-{i}"),
        "details": { "i": i },
        "result": "success",
        "error": null,
        "request_id": null,
    })
    .to_string()
}

/// Segments a dead process left are moved when the journal next opens: every complete line
/// once (a line already moved is not duplicated), a torn last line skipped.
async fn a_dead_process_journal_is_moved_on_the_next_start(cx: Ctx) {
    let s = &cx.store;
    let (dir, base) = journal_place(&cx);
    let (first, second) = (journal_line(0), journal_line(1));
    let text = format!("{first}\n{second}\n{first}\n{}", &journal_line(2)[..40]);
    std::fs::write(dir.join(format!("{base}-0000000000000007.jsonl")), text).unwrap();

    let appender = s.audit_appender();
    let unwritten = appender
        .append(vec![audit("thing.happen", "thing").resource("new")])
        .await;
    assert!(unwritten.is_empty());
    let page = s
        .org(breeze_core::OrgId::new())
        .audit()
        .query_audit(&AuditFilter::default(), None, 10)
        .await
        .unwrap();
    assert!(page.records.is_empty(), "records without an organization");
    let rows = s.raw_dump("audit_log").await.unwrap();
    let resources: Vec<&str> = ["left-0", "left-1", "left-2", "new"]
        .into_iter()
        .filter(|r| rows.iter().any(|row| row.contains(r)))
        .collect();
    assert_eq!(resources, ["left-0", "left-1", "new"], "{rows:?}");
    assert_eq!(rows.len(), 3, "{rows:?}");
    // Moved segments are gone; the journal's files sit beside the database.
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert!(
        files.iter().all(|n| !n.contains("0000000000000007")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|n| *n == format!("{base}.lock")),
        "{files:?}"
    );
}

#[tokio::test]
async fn a_dead_process_journal_is_moved_on_the_next_start_on_sqlite() {
    breeze_store::testing::run(
        Backend::Sqlite,
        a_dead_process_journal_is_moved_on_the_next_start,
    )
    .await;
}

/// `Store::move_audit_journal` (`breeze audit move-journal`) moves what a retired instance left
/// at once, and refuses, saying why, a journal that another process holds.
async fn a_retired_journal_is_moved_on_demand(cx: Ctx) {
    let s = &cx.store;
    let (dir, base) = journal_place(&cx);
    let segment = dir.join(format!("{base}-0000000000000003.jsonl"));
    std::fs::write(
        &segment,
        format!("{}\n{}\n", journal_line(0), journal_line(1)),
    )
    .unwrap();

    let moved = s.move_audit_journal().await.unwrap();
    assert_eq!(moved, dir.join(base));
    let rows = s.raw_dump("audit_log").await.unwrap();
    let left = rows.iter().filter(|r| r.contains("left-")).count();
    assert_eq!(left, 2, "{rows:?}");
    assert!(!segment.exists(), "the moved segment is still there");

    // Another store on the same journal (another process, as far as the lock goes).
    let journal = cx.store.raw_audit_journal_dir();
    let other = s.reopen_with(|o| o.audit_journal = journal).await.unwrap();
    let refused = other.move_audit_journal().await.unwrap_err().to_string();
    assert!(refused.contains("held by another process"), "{refused}");
    other.close().await;
}

#[tokio::test]
async fn a_retired_journal_is_moved_on_demand_on_sqlite() {
    breeze_store::testing::run(Backend::Sqlite, a_retired_journal_is_moved_on_demand).await;
}

/// Without a journal there is nothing to move, and the error says so.
#[tokio::test]
async fn moving_a_journal_needs_one() {
    breeze_store::testing::run(Backend::Postgres, |cx: Ctx| async move {
        let refused = cx.store.move_audit_journal().await.unwrap_err().to_string();
        assert!(refused.contains("keeps no audit journal"), "{refused}");
    })
    .await;
}

/// Migrations 0006 and 0007 rebuild the SQLite table (and 0006 drops an index on both
/// backends): records written before them are all there after them, byte for byte, still cannot
/// be changed, and a result outside the three known values is still refused.
async fn records_survive_the_audit_storage_migration(backend: Backend) {
    use breeze_store::testing::TestStore;
    let clock = std::sync::Arc::new(breeze_core::SystemClock);
    let test = TestStore::unmigrated(backend, clock).await;
    let s = &test.store;
    s.migrate_through(5).await.unwrap();
    for i in 0..3 {
        s.append_audit(
            &audit("thing.happen", "thing")
                .resource(format!("before-{i}"))
                .details(serde_json::json!({ "i": i, "text": "it's \"quoted\"" })),
        )
        .await
        .unwrap();
    }
    let mut before = s.raw_dump("audit_log").await.unwrap();
    assert_eq!(before.len(), 3);

    s.migrate().await.unwrap();
    let mut after = s.raw_dump("audit_log").await.unwrap();
    before.sort();
    after.sort();
    assert_eq!(after, before);
    assert_append_only(s).await;
    assert_result_is_checked(s).await;
    // And the table takes new records.
    s.append_audit(&audit("thing.happen", "thing"))
        .await
        .unwrap();
    assert_eq!(s.raw_dump("audit_log").await.unwrap().len(), 7);
    test.cleanup().await;
}

#[tokio::test]
async fn records_survive_the_audit_storage_migration_on_sqlite() {
    records_survive_the_audit_storage_migration(Backend::Sqlite).await;
}

#[tokio::test]
async fn records_survive_the_audit_storage_migration_on_postgres() {
    records_survive_the_audit_storage_migration(Backend::Postgres).await;
}

/// An audit row's insert is checked in place: SQLite builds no temporary table for it (an IN
/// list in the result's CHECK did, on every statement, at ~20 % of the insert's cost), whether
/// the statement inserts one row or many.
#[tokio::test]
async fn inserting_an_audit_row_builds_no_temporary_table() {
    breeze_store::testing::run(Backend::Sqlite, |cx: Ctx| async move {
        let conn = rusqlite::Connection::open(cx.dir.clone().unwrap().join("breeze.db")).unwrap();
        for insert in breeze_store::testing::sqlite_audit_inserts() {
            let mut plan = conn.prepare(&format!("EXPLAIN {insert}")).unwrap();
            let nulls = std::iter::repeat_n(rusqlite::types::Null, plan.parameter_count());
            let opcodes: Vec<String> = plan
                .query_map(rusqlite::params_from_iter(nulls), |row| {
                    row.get::<_, String>(1)
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert!(opcodes.iter().any(|op| op == "IdxInsert"), "{opcodes:?}");
            assert!(
                !opcodes.iter().any(|op| op == "OpenEphemeral"),
                "the insert builds a temporary table: {opcodes:?}"
            );
        }
        assert_result_is_checked(&cx.store).await;
    })
    .await;
}

/// Lines in the journal's segments (records not yet in the table).
fn journaled_lines(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap().lines().count())
        .sum()
}

/// Records on resources `<tag>-<i>` for each `i` in `range`.
fn tagged(tag: &str, range: std::ops::Range<usize>) -> Vec<AuditEvent> {
    range
        .map(|i| audit("thing.happen", "thing").resource(format!("{tag}-{i}")))
        .collect()
}

/// A batch goes straight into the table when the write lock is free, and into the journal,
/// without waiting, when another connection holds it.
#[tokio::test]
async fn a_batch_is_inserted_directly_or_journaled_when_the_table_is_busy() {
    breeze_store::testing::run(Backend::Sqlite, |cx: Ctx| async move {
        let s = &cx.store;
        let dir = cx.dir.clone().unwrap();
        let appender = s.audit_appender();
        let batch = |tag: &str| tagged(tag, 0..20);
        assert!(appender.append(batch("free")).await.is_empty());
        assert_eq!(journaled_lines(&dir), 0, "a batch skips the journal");
        assert!(
            appender
                .append(batch("lone")[..1].to_vec())
                .await
                .is_empty()
        );
        assert_eq!(journaled_lines(&dir), 1, "a lone record is journaled");

        // Another connection takes the write lock (as a long write elsewhere would).
        let holder = rusqlite::Connection::open(dir.join("breeze.db")).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        // Waiting would block the caller's thread (the insert is synchronous) for the busy
        // timeout, 10 s; a timer could not interrupt it, so the test measures.
        let start = std::time::Instant::now();
        let unwritten = appender.append(batch("busy")).await;
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "the batch waited {:?} for the lock",
            start.elapsed()
        );
        assert!(unwritten.is_empty(), "{unwritten:?}");
        assert_eq!(journaled_lines(&dir), 21, "the busy batch is journaled");
        holder.execute_batch("ROLLBACK").unwrap();

        let rows = s.raw_dump("audit_log").await.unwrap();
        assert_eq!(rows.len(), 41, "{rows:?}");
        for tag in ["free", "busy"] {
            for i in 0..20 {
                assert!(rows.iter().any(|r| r.contains(&format!("'{tag}-{i}'"))));
            }
        }
        assert_eq!(journaled_lines(&dir), 0, "moved in by the flush");
    })
    .await;
}

/// Records journaled while the table was busy go in with the next batch inserted directly,
/// in its transaction, and their segment is then deleted without a flush: under load the mover
/// has nothing to insert. A direct insert that finds the table busy again holds them again.
#[tokio::test]
async fn journaled_records_are_taken_along_by_the_next_direct_batch() {
    breeze_store::testing::run(Backend::Sqlite, |cx: Ctx| async move {
        let s = &cx.store;
        let dir = cx.dir.clone().unwrap();
        let appender = s.audit_appender();
        let batch = |tag: &str| tagged(tag, 0..20);
        let db = rusqlite::Connection::open(dir.join("breeze.db")).unwrap();
        let stored = |tag: &str| -> i64 {
            db.query_row(
                "SELECT COUNT(*) FROM audit_log WHERE resource_id LIKE ?1",
                [format!("{tag}-%")],
                |r| r.get(0),
            )
            .unwrap()
        };

        let journaled = std::time::Instant::now();
        db.execute_batch("BEGIN IMMEDIATE").unwrap();
        for tag in ["busy", "still-busy"] {
            assert!(appender.append(batch(tag)).await.is_empty());
        }
        db.execute_batch("ROLLBACK").unwrap();
        assert_eq!(journaled_lines(&dir), 40, "both busy batches are journaled");
        assert!(appender.append(batch("free")).await.is_empty());
        // The mover's first round comes a move interval (25 ms) after the first record was
        // journaled, and inserts held records only in the round after that: before it, only
        // the direct insert can have put them in.
        if journaled.elapsed() < std::time::Duration::from_millis(25) {
            for tag in ["busy", "still-busy", "free"] {
                assert_eq!(
                    stored(tag),
                    20,
                    "{tag}: in the table before the mover's round"
                );
            }
        } else {
            eprintln!("too slow to tell the direct insert from the mover; checked the rest");
        }

        // The mover's next rounds find every record of the segment in and delete it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while journaled_lines(&dir) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the segment was never deleted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        for tag in ["busy", "still-busy", "free"] {
            assert_eq!(stored(tag), 20, "{tag}");
        }
        assert_eq!(s.raw_dump("audit_log").await.unwrap().len(), 60);
    })
    .await;
}

/// While the table stays busy, the journal holds records in memory only up to a bound (65,536);
/// the records beyond it wait in their segment's file alone, and are moved from there.
#[tokio::test]
async fn records_beyond_what_is_held_are_moved_from_their_files() {
    breeze_store::testing::run(Backend::Sqlite, |cx: Ctx| async move {
        let s = &cx.store;
        let dir = cx.dir.clone().unwrap();
        let appender = s.audit_appender();
        const RECORDS: usize = (1 << 16) + 5000;
        let db = rusqlite::Connection::open(dir.join("breeze.db")).unwrap();
        db.execute_batch("BEGIN IMMEDIATE").unwrap();
        for first in (0..RECORDS).step_by(5000) {
            let batch = tagged("spill", first..(first + 5000).min(RECORDS));
            assert!(appender.append(batch).await.is_empty());
        }
        db.execute_batch("ROLLBACK").unwrap();
        assert_eq!(journaled_lines(&dir), RECORDS);

        s.flush_audit().await;
        let (rows, distinct): (i64, i64) = db
            .query_row(
                "SELECT COUNT(*), COUNT(DISTINCT resource_id) FROM audit_log \
                 WHERE resource_id LIKE 'spill-%'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((rows, distinct), (RECORDS as i64, RECORDS as i64));
        assert_eq!(journaled_lines(&dir), 0, "every segment is deleted");
    })
    .await;
}

/// The journal's mover runs at a lower priority than the rest of the process (Linux nice
/// values), so that requests take the processor from it.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_journal_mover_runs_at_a_lower_priority() {
    breeze_store::testing::run(Backend::Sqlite, |cx: Ctx| async move {
        let s = &cx.store;
        let unwritten = s
            .audit_appender()
            .append(vec![audit("thing.happen", "thing")])
            .await;
        assert!(unwritten.is_empty());
        // Answered by the mover's loop, which runs after it lowered its priority.
        s.flush_audit().await;
        // Every mover thread in this test process (tests run side by side); ours is among them.
        let movers: Vec<i64> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| {
                let task = task.ok()?.path();
                let comm = std::fs::read_to_string(task.join("comm")).ok()?;
                (comm.trim() == "breeze-audit").then_some(())?;
                let stat = std::fs::read_to_string(task.join("stat")).ok()?;
                // Fields after the command's closing parenthesis start at field 3; nice is 19.
                let after = stat.rsplit_once(')')?.1;
                after.split_whitespace().nth(19 - 3)?.parse().ok()
            })
            .collect();
        assert!(movers.iter().any(|&nice| nice >= 10), "{movers:?}");
    })
    .await;
}
