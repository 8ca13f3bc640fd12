//! The shared store test-suite: every case runs once on SQLite and once on PostgreSQL.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod agents;
mod approvals;
mod audit;
mod context;
mod directory;
mod isolation;
mod tenancy;
mod users;

use std::sync::Arc;

use breeze_core::{Actor, AuditEvent};
use breeze_store::Store;

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
