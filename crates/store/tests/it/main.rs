//! The shared store test-suite: every case runs once on SQLite and once on PostgreSQL.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod agents;
mod ai;
mod alerts;
mod approvals;
mod audit;
mod audit_retention;
mod automations;
mod bus;
mod compliance;
mod config_policies;
mod context;
mod crash;
mod directory;
mod dynamic_groups;
mod idempotency;
mod invoices;
mod isolation;
mod live_queries;
mod maintenance;
mod migrations;
mod packages;
mod patches;
mod reports;
mod row_security;
mod security;
mod tenancy;
mod tickets;
mod tool_sources;
mod users;
mod vulnerabilities;
mod wal;

use std::sync::Arc;

use breeze_core::{Actor, AuditEvent};
use breeze_store::Store;

/// Partner `p` with organizations A and B.
pub(crate) async fn two_orgs(s: &Store) -> (breeze_core::OrgId, breeze_core::OrgId) {
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let mut orgs = Vec::new();
    for (name, slug) in [("A", "a"), ("B", "b")] {
        let org = s
            .create_organization(partner.id, name, slug, audit("organization.create", "org"))
            .await
            .unwrap();
        orgs.push(org.id);
    }
    (orgs[0], orgs[1])
}

/// An audit event from the test harness.
pub(crate) fn audit(action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("test"), action, resource)
}

#[test]
fn migration_trees_are_in_lockstep() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let names = |backend: &str| {
        let mut v: Vec<String> = std::fs::read_dir(dir.join(backend))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let (sqlite, postgres) = (names("sqlite"), names("postgres"));
    assert!(!sqlite.is_empty());
    assert_eq!(
        sqlite, postgres,
        "every migration needs a SQLite and a PostgreSQL version"
    );
}

#[tokio::test]
async fn refuses_unknown_database_urls() {
    let clock = Arc::new(breeze_core::SystemClock);
    let err = Store::connect(&breeze_store::StoreOptions::new("mysql://x@y/z"), clock)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("DATABASE_URL must start with sqlite:// or postgres://"),
        "{err}"
    );
}

/// A PDF font setting that cannot be used stops the store from opening, naming the setting,
/// rather than silently printing reports in Helvetica.
#[tokio::test]
async fn refuses_an_unusable_pdf_font() {
    let clock = Arc::new(breeze_core::SystemClock);
    let dir = tempfile::tempdir().unwrap();
    let options = breeze_store::StoreOptions {
        pdf_font: Some(dir.path().join("missing.ttf")),
        ..breeze_store::StoreOptions::new(format!(
            "sqlite://{}",
            dir.path().join("breeze.db").display()
        ))
    };
    let err = Store::connect(&options, clock).await.unwrap_err();
    assert!(
        matches!(&err, breeze_store::StoreError::Config(m) if m.starts_with("BREEZE_PDF_FONT: ")
            && m.contains("missing.ttf")),
        "{err:?}"
    );
}

#[test]
fn redacts_database_passwords() {
    assert_eq!(
        breeze_store::redact_url("postgres://breeze:hunter2@db:5432/breeze"),
        "postgres://breeze:***@db:5432/breeze"
    );
    assert_eq!(
        breeze_store::redact_url("sqlite://./breeze-data/breeze.db"),
        "sqlite://./breeze-data/breeze.db"
    );
}

/// A test's PostgreSQL schema survives another test's sweep of stale schemas, whatever clock
/// either test runs on: the sweep goes by when a schema was really created. (It once went by
/// each test's own clock, so a test on the wall clock dropped the schemas of tests on a manual
/// clock set a day or more back, while they ran.)
#[tokio::test]
async fn a_test_schema_outlives_another_tests_sweep() {
    use breeze_core::{Clock, ManualClock, SystemClock};
    use breeze_store::{Backend, testing::TestStore};
    let days_back = ManualClock::new(SystemClock.now() - chrono::Duration::days(3));
    let first = TestStore::new(Backend::Postgres, Arc::new(days_back)).await;
    let second = TestStore::new(Backend::Postgres, Arc::new(SystemClock)).await;
    first
        .store
        .append_audit(&audit("thing.happen", "thing"))
        .await
        .unwrap();
    assert_eq!(first.store.raw_dump("audit_log").await.unwrap().len(), 1);
    first.cleanup().await;
    second.cleanup().await;
}
