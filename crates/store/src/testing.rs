//! Test harness: a fresh, isolated store per test on either backend.
//!
//! SQLite tests get a new database file in a temporary directory. PostgreSQL tests get a new
//! schema in the database at `BREEZE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), so parallel runs never see each other's rows.
//! Schemas left behind by crashed runs are dropped after a day.
//!
//! Test stores on PostgreSQL connect as [`TEST_ROLE`], which owns its schema but is neither a
//! superuser nor exempt from row security: every PostgreSQL test runs behind the `org_wall`
//! policies (migration 0032), as a deployment that follows the README does.

use std::{future::Future, sync::Arc};

use breeze_core::{Clock, ManualClock, OrgId};
use chrono::{TimeZone, Utc};
use sqlx::{Connection, PgConnection};

use crate::{Backend, Result, Store, StoreOptions};

/// Checks that bytes are a structurally valid PDF as the report writer makes them (header,
/// cross-reference offsets, stream lengths, page count); returns the number of pages.
pub use crate::pdf::check_structure as check_pdf;

/// A device to create in a test: a Debian 12 Linux machine at `site`, no agent yet, no tags.
/// A test that needs more says so with struct update syntax
/// (`NewDevice { tags, ..new_device(site, "web-01", DeviceStatus::Online) }`).
pub fn new_device(
    site: breeze_core::SiteId,
    hostname: impl Into<String>,
    status: breeze_core::DeviceStatus,
) -> crate::NewDevice {
    crate::NewDevice {
        site_id: site,
        hostname: hostname.into(),
        os_family: breeze_core::OsFamily::Linux,
        os_name: "Debian".into(),
        os_version: "12".into(),
        status,
        agent_version: None,
        last_seen_at: None,
        tags: Vec::new(),
    }
}

/// The statements SQLite audit rows are inserted by (one row, and many at a time), for tests
/// that inspect their plans.
pub fn sqlite_audit_inserts() -> [&'static str; 2] {
    [
        crate::audit_appender::INSERT_ONE.as_str(),
        crate::audit_appender::INSERT_MANY.as_str(),
    ]
}

/// The PostgreSQL server tests use unless `BREEZE_TEST_POSTGRES_URL` says otherwise.
pub const DEFAULT_TEST_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL URL for tests.
pub fn postgres_url() -> String {
    #[allow(clippy::disallowed_methods)] // test-harness setting, not a Breeze setting
    std::env::var("BREEZE_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_TEST_POSTGRES_URL.into())
}

/// The role PostgreSQL test stores connect as: it owns its test schema, and row security
/// holds for it (no superuser, no `BYPASSRLS`).
pub const TEST_ROLE: &str = "breeze_wall_test";

/// [`TEST_ROLE`]'s password (trust authentication ignores it; password authentication needs
/// one).
const TEST_ROLE_PASSWORD: &str = "breeze-wall-test";

/// [`postgres_url`] with [`TEST_ROLE`] as its user: what test stores connect with.
pub fn store_url() -> String {
    let url = postgres_url();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url;
    };
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{TEST_ROLE}:{TEST_ROLE_PASSWORD}@{host}")
}

/// Options for a test store at `url`: no [credential fence](StoreOptions::credential_fence),
/// since the caches under test run on a manual clock that a real wait would not move (the
/// fence's own tests set one).
pub fn test_options(url: impl Into<String>) -> StoreOptions {
    StoreOptions {
        credential_fence: std::time::Duration::ZERO,
        ..StoreOptions::new(url)
    }
}

/// Creates [`TEST_ROLE`] unless it exists (parallel test processes may race to it).
async fn ensure_test_role(admin: &mut PgConnection) {
    let create = format!(
        "DO $$ BEGIN \
           IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{TEST_ROLE}') THEN \
             CREATE ROLE {TEST_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{TEST_ROLE_PASSWORD}'; \
           END IF; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; \
         END $$"
    );
    sqlx::raw_sql(&create)
        .execute(admin)
        .await
        .expect("create the test role");
}

/// An isolated, migrated store; dropping it removes the SQLite file. Call
/// [`TestStore::cleanup`] to drop a PostgreSQL schema.
pub struct TestStore {
    pub store: Store,
    /// Keeps the SQLite directory alive.
    pub dir: Option<tempfile::TempDir>,
    schema: Option<String>,
}

impl TestStore {
    /// A fresh, migrated store on `backend`. Panics with a clear message when the backend is
    /// unreachable: these tests exist to run against a real database.
    pub async fn new(backend: Backend, clock: Arc<dyn Clock>) -> TestStore {
        let test = TestStore::unmigrated(backend, clock).await;
        test.store.migrate().await.expect("migrate the test store");
        test
    }

    /// A fresh store on `backend` with no tables yet (for tests of a migration itself).
    pub async fn unmigrated(backend: Backend, clock: Arc<dyn Clock>) -> TestStore {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("create a temporary directory");
                let url = format!("sqlite://{}", dir.path().join("breeze.db").display());
                let store = Store::connect(&test_options(url), clock)
                    .await
                    .expect("open SQLite");
                TestStore {
                    store,
                    dir: Some(dir),
                    schema: None,
                }
            }
            Backend::Postgres => {
                let url = postgres_url();
                let mut admin = PgConnection::connect(&url).await.unwrap_or_else(|e| {
                    panic!(
                        "PostgreSQL tests need a server at {url} (set BREEZE_TEST_POSTGRES_URL): {e}"
                    )
                });
                // Wall-clock time, never the test's clock: schemas of tests on other clocks (a
                // manual clock set days back) must not look stale to this one's sweep.
                let now = breeze_core::SystemClock.now().timestamp().max(0);
                sweep_stale_schemas(&mut admin, now).await;
                let schema = format!("breeze_test_{now}_{}", uuid::Uuid::now_v7().simple());
                ensure_test_role(&mut admin).await;
                sqlx::query(&format!("CREATE SCHEMA {schema} AUTHORIZATION {TEST_ROLE}"))
                    .execute(&mut admin)
                    .await
                    .expect("create a test schema");
                let _ = admin.close().await;
                let options = StoreOptions {
                    pg_schema: Some(schema.clone()),
                    max_connections: 5,
                    ..test_options(store_url())
                };
                let store = Store::connect(&options, clock)
                    .await
                    .expect("open PostgreSQL");
                TestStore {
                    store,
                    dir: None,
                    schema: Some(schema),
                }
            }
        }
    }

    /// Closes the store and drops its PostgreSQL schema.
    pub async fn cleanup(self) {
        self.store.close().await;
        if let Some(schema) = self.schema
            && let Ok(mut admin) = PgConnection::connect(&postgres_url()).await
        {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&mut admin)
                .await;
        }
    }
}

/// Drops test schemas created (by the wall clock) more than a day before `now`: those left by
/// runs that panicked before cleanup.
async fn sweep_stale_schemas(admin: &mut PgConnection, now: i64) {
    let Ok(names) = sqlx::query_scalar::<_, String>(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'breeze\\_test\\_%'",
    )
    .fetch_all(&mut *admin)
    .await
    else {
        return;
    };
    for name in names {
        let created = name.split('_').nth(2).and_then(|t| t.parse::<i64>().ok());
        if created.is_some_and(|t| now - t > 86_400) {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .execute(&mut *admin)
                .await;
        }
    }
}

/// What a shared test case receives: a fresh store and the manual clock it runs on.
pub struct Ctx {
    pub store: Store,
    pub clock: ManualClock,
    /// The SQLite file's directory (None on PostgreSQL).
    pub dir: Option<std::path::PathBuf>,
}

/// Runs `case` on a fresh store on `backend`, with a clock set to 2026-11-30 12:00 UTC.
pub async fn run<F, Fut>(backend: Backend, case: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    #[allow(clippy::unwrap_used)] // a fixed, valid date
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap());
    let test = TestStore::new(backend, Arc::new(clock.clone())).await;
    let dir = test.dir.as_ref().map(|d| d.path().to_owned());
    case(Ctx {
        store: test.store.clone(),
        clock,
        dir,
    })
    .await;
    test.cleanup().await;
}

/// Runs `case` as [`run`] does on PostgreSQL, on a store whose audit appender journals lone
/// records in a directory of its own ([`StoreOptions::audit_journal`], as `breeze serve` on
/// PostgreSQL does).
pub async fn run_journaled<F, Fut>(case: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    run(Backend::Postgres, |cx: Ctx| async move {
        let journal = tempfile::tempdir().expect("create a temporary directory");
        let store = cx
            .store
            .reopen_with(|o| o.audit_journal = Some(journal.path().to_owned()))
            .await
            .expect("reopen the test store with an audit journal");
        case(Ctx {
            store: store.clone(),
            clock: cx.clock,
            dir: None,
        })
        .await;
        store.close().await;
    })
    .await;
}

/// Declares each listed `async fn(Ctx)` as two tests, `sqlite::<name>` and `postgres::<name>`.
/// The calling crate needs tokio as a dev-dependency.
#[macro_export]
macro_rules! on_both_backends {
    ($($case:ident),+ $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $case() {
                $crate::testing::run($crate::Backend::Sqlite, super::$case).await;
            })+
        }
        mod postgres {
            $(#[tokio::test]
            async fn $case() {
                $crate::testing::run($crate::Backend::Postgres, super::$case).await;
            })+
        }
    };
}

/// A connection taken out of a store's pool that keeps the locks its statements took (a
/// `BEGIN IMMEDIATE` on SQLite, a `LOCK TABLE` on PostgreSQL) until it is dropped or
/// [`released`](HeldConnection::release): another process holding the database.
pub struct HeldConnection(Held);

enum Held {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl HeldConnection {
    /// Closes the connection, which gives up its locks.
    pub async fn release(self) {
        let _ = match self.0 {
            Held::Sqlite(c) => c.close().await,
            Held::Postgres(c) => c.close().await,
        };
    }
}

/// Raw access for tests that must look past the store's interface (e.g. to prove a secret is
/// stored nowhere). Compiled only with the `testing` feature.
impl Store {
    /// Runs raw SQL. For tests and diagnostics that must look past the store's interface
    /// (e.g. proving a secret is stored nowhere); never used by Breeze itself.
    pub async fn raw_execute(&self, statement: &str) -> Result<u64> {
        crate::sql::sql(statement).execute(self).await
    }

    /// Runs raw SQL as organization `org`'s statements run: on PostgreSQL on the tenant pool,
    /// in its row-security scope. For tests of the wall itself (a statement that forgot its
    /// `org_id` filter).
    pub async fn raw_execute_in(&self, org: OrgId, statement: &str) -> Result<u64> {
        crate::sql::sql(statement).execute(&self.org(org)).await
    }

    /// [`Store::raw_strings`] as organization `org`'s statements run (see
    /// [`Store::raw_execute_in`]).
    pub async fn raw_strings_in(&self, org: OrgId, query: &str) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = crate::sql::sql(query).fetch_all(&self.org(org)).await?;
        Ok(rows.into_iter().map(|(r,)| r).collect())
    }

    /// A setting as the audit appender's own PostgreSQL connections see it (`None` on SQLite).
    pub async fn raw_audit_setting(&self, setting: &str) -> Result<Option<String>> {
        match &self.pool {
            crate::Pool::Sqlite(_) => Ok(None),
            crate::Pool::Postgres { audit, .. } => audit.show(setting).await.map(Some),
        }
    }

    /// Runs `query` (an `i64` scalar, `$1` bound to `arg`) on the system pool, or with `org`
    /// as organization `org`'s statements run (see [`Store::raw_execute_in`]): for the
    /// row-security benchmark, which compares the two.
    pub async fn raw_scalar(
        &self,
        org: Option<OrgId>,
        query: &'static str,
        arg: uuid::Uuid,
    ) -> Result<i64> {
        let q = crate::sql::sql(query).bind(arg);
        match org {
            Some(org) => q.fetch_scalar(&self.org(org)).await,
            None => q.fetch_scalar(self).await,
        }
    }

    /// Runs `statements` on a connection of the pool's own that is then kept out of the pool
    /// and returned (see [`HeldConnection`]).
    pub async fn raw_hold(&self, statements: &[&str]) -> Result<HeldConnection> {
        Ok(HeldConnection(match &self.pool {
            crate::Pool::Sqlite(p) => {
                let mut conn = p.acquire().await?.detach();
                for statement in statements {
                    sqlx::query(statement).execute(&mut conn).await?;
                }
                Held::Sqlite(conn)
            }
            crate::Pool::Postgres { system: p, .. } => {
                let mut conn = p.acquire().await?.detach();
                for statement in statements {
                    sqlx::query(statement).execute(&mut conn).await?;
                }
                Held::Postgres(conn)
            }
        }))
    }

    /// A second store on this store's database (the same SQLite file, or the same PostgreSQL
    /// schema) with the same clock, as a restarted process would open it: for tests that what
    /// was stored survives a restart.
    pub async fn reopen(&self) -> Result<Store> {
        self.reopen_with_clock(self.clock.clone()).await
    }

    /// [`Store::reopen`] on another clock: an instance whose time runs ahead (or behind), for
    /// tests of work that comes due later than a test can wait.
    pub async fn reopen_with_clock(&self, clock: Arc<dyn Clock>) -> Result<Store> {
        let options = self.reopen_options().await?;
        Store::connect(&options, clock).await
    }

    /// [`Store::reopen`] with options changed by `change`.
    pub async fn reopen_with(&self, change: impl FnOnce(&mut StoreOptions)) -> Result<Store> {
        let mut options = self.reopen_options().await?;
        change(&mut options);
        Store::connect(&options, self.clock.clone()).await
    }

    /// The audit journal's directory on PostgreSQL, when it has one.
    pub fn raw_audit_journal_dir(&self) -> Option<std::path::PathBuf> {
        self.audit_journal_dir
            .as_deref()
            .map(std::path::Path::to_owned)
    }

    async fn reopen_options(&self) -> Result<StoreOptions> {
        Ok(match (&self.sqlite_file, self.backend()) {
            (Some(file), _) => test_options(format!("sqlite://{}", file.display())),
            (None, Backend::Postgres) => {
                let schema: String = crate::sql::sql("SELECT CAST(current_schema() AS TEXT)")
                    .fetch_scalar(self)
                    .await?;
                StoreOptions {
                    pg_schema: Some(schema),
                    max_connections: 5,
                    ..test_options(store_url())
                }
            }
            (None, Backend::Sqlite) => {
                return Err(crate::StoreError::Config(
                    "an in-memory SQLite database cannot be reopened".into(),
                ));
            }
        })
    }

    /// Every row of `table` rendered as one string.
    pub async fn raw_dump(&self, table: &str) -> Result<Vec<String>> {
        // Audit records still in the journal are rows too.
        self.flush_audit().await;
        let text = match self.backend() {
            Backend::Postgres => format!("SELECT CAST(row_to_json(t) AS TEXT) FROM {table} t"),
            Backend::Sqlite => {
                let cols: Vec<(String,)> =
                    crate::sql::sql(format!("SELECT name FROM pragma_table_info('{table}')"))
                        .fetch_all(self)
                        .await?;
                let quoted: Vec<String> = cols.iter().map(|(c,)| format!("quote({c})")).collect();
                format!("SELECT {} FROM {table}", quoted.join(" || ',' || "))
            }
        };
        let rows: Vec<(String,)> = crate::sql::sql(text).fetch_all(self).await?;
        Ok(rows.into_iter().map(|(r,)| r).collect())
    }

    /// Applies this backend's migrations numbered `last` or lower, and no others: the schema a
    /// database had before a later migration, for tests of that migration over existing rows.
    /// [`Store::migrate`] then applies the rest.
    pub async fn migrate_through(&self, last: i64) -> Result<()> {
        let backend = match self.backend() {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        };
        let all = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(backend);
        let some = tempfile::tempdir().expect("create a temporary directory");
        for entry in std::fs::read_dir(&all).expect("list the migrations") {
            let path = entry.expect("list the migrations").path();
            let version = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('_').next())
                .and_then(|v| v.parse::<i64>().ok());
            if version.is_some_and(|v| v <= last) {
                std::fs::copy(
                    &path,
                    some.path().join(path.file_name().expect("a file name")),
                )
                .expect("copy a migration");
            }
        }
        let migrator = sqlx::migrate::Migrator::new(some.path()).await?;
        match &self.pool {
            crate::Pool::Sqlite(p) => migrator.run(p).await?,
            crate::Pool::Postgres { system: p, .. } => migrator.run(p).await?,
        }
        Ok(())
    }

    /// The first column of every row `query` returns, as text (the query casts it): for tests
    /// that read the catalog (indexes, foreign keys, row counts) past the store's interface.
    pub async fn raw_strings(&self, query: &str) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = crate::sql::sql(query).fetch_all(self).await?;
        Ok(rows.into_iter().map(|(r,)| r).collect())
    }

    /// The version of every migration applied to this database, in order.
    pub async fn raw_applied_migrations(&self) -> Result<Vec<i64>> {
        let rows: Vec<(i64,)> =
            crate::sql::sql("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
                .fetch_all(self)
                .await?;
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }

    /// The versions of this backend's migrations (those [`Store::migrate`] applies), in order.
    pub fn migration_versions(&self) -> Vec<i64> {
        let migrator = match self.backend() {
            Backend::Sqlite => sqlx::migrate!("./migrations/sqlite"),
            Backend::Postgres => sqlx::migrate!("./migrations/postgres"),
        };
        migrator.iter().map(|m| m.version).collect()
    }

    /// Names of every table Breeze created.
    pub async fn raw_tables(&self) -> Result<Vec<String>> {
        let text = match self.backend() {
            Backend::Postgres => {
                "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            }
            Backend::Sqlite => {
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            }
        };
        let rows: Vec<(String,)> = crate::sql::sql(text).fetch_all(self).await?;
        Ok(rows.into_iter().map(|(r,)| r).collect())
    }
}
