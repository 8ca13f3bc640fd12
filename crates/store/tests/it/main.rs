//! The shared store test-suite: every case runs once on SQLite and once on PostgreSQL.

mod audit;
mod isolation;
mod tenancy;
mod users;

use std::{future::Future, sync::Arc};

use breeze_core::{Actor, AuditEvent, ManualClock};
use breeze_store::{Backend, Store, testing::TestStore};
use chrono::{TimeZone, Utc};

/// What a test case receives: a fresh store and the clock it runs on.
pub struct Ctx {
    pub store: Store,
    pub clock: ManualClock,
}

pub async fn run<F, Fut>(backend: Backend, case: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap());
    let test = TestStore::new(backend, Arc::new(clock.clone())).await;
    case(Ctx {
        store: test.store.clone(),
        clock,
    })
    .await;
    test.cleanup().await;
}

/// An audit event from the test harness.
pub fn audit(action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("test"), action, resource)
}

/// Declares each listed `async fn(Ctx)` as a test on both backends.
#[macro_export]
macro_rules! on_both_backends {
    ($($case:ident),+ $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $case() {
                $crate::run(breeze_store::Backend::Sqlite, super::$case).await;
            })+
        }
        mod postgres {
            $(#[tokio::test]
            async fn $case() {
                $crate::run(breeze_store::Backend::Postgres, super::$case).await;
            })+
        }
    };
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
    let clock = Arc::new(ManualClock::new(Utc::now()));
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
