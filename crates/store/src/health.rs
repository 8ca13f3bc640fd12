//! The database's health as last probed, for readiness and for failing fast.
//!
//! Without it, every statement on an unreachable PostgreSQL waits out the pool's acquire
//! timeout (10 s) before it fails, and so does `/readyz`: a load balancer learns of the outage
//! late, and every caller waits 10 s for its 503. [`Store::spawn_health_monitor`] probes the
//! database every second on a connection of its own (so a busy pool does not look like a dead
//! database): `SELECT 1`, then an update that changes nothing (a read-only database fails
//! it). [`Store::health`] is the last verdict, read without touching the database. After
//! [`DOWN_AFTER`] consecutive failed reachability probes the database is known down, and every
//! statement that would take a new connection fails at once as
//! [`crate::StoreError::Unavailable`] (retryable) until a probe succeeds again. A database
//! that answers but refuses writes is reported, not failed fast: reads still work.
//!
//! Only PostgreSQL is monitored: a SQLite file cannot become unreachable, and its write lock
//! is routinely held for longer than a probe may wait.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use breeze_core::Timestamp;
use sqlx::{Connection, PgConnection, postgres::PgConnectOptions};

use crate::{Pool, Store};

/// How often the database is probed.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long one probe may take before it counts as failed.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// Consecutive failed reachability probes after which the database is known down.
pub(crate) const DOWN_AFTER: u32 = 2;

/// The last verdict on the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbHealth {
    /// Not probed yet (no monitor runs, or it just started).
    Unknown,
    /// It answers and takes writes.
    Ok,
    /// It answers but refuses writes (a standby, `default_transaction_read_only`, a full disk).
    ReadOnly { since: Timestamp, error: String },
    /// It does not answer; statements fail at once until it does.
    Down { since: Timestamp, error: String },
}

/// The monitor's state, shared by a store's clones.
#[derive(Debug)]
pub(crate) struct Health {
    state: Mutex<DbHealth>,
    /// Whether statements fail fast (the database is known down).
    down: AtomicBool,
}

impl Health {
    pub(crate) fn new() -> Self {
        Health {
            state: Mutex::new(DbHealth::Unknown),
            down: AtomicBool::new(false),
        }
    }

    /// Why statements fail fast now, if they do.
    pub(crate) fn refusal(&self) -> Option<sqlx::Error> {
        if !self.down.load(Ordering::Relaxed) {
            return None;
        }
        let why = match &*lock(&self.state) {
            DbHealth::Down { since, error } => {
                format!("the database has not answered since {since}: {error}")
            }
            _ => "the database is down".to_owned(),
        };
        Some(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            why,
        )))
    }

    fn set(&self, health: DbHealth) {
        self.down
            .store(matches!(health, DbHealth::Down { .. }), Ordering::Relaxed);
        let mut state = lock(&self.state);
        // Keep the start of an outage across probes.
        let health = match (&*state, health) {
            (DbHealth::Down { since, .. }, DbHealth::Down { error, .. }) => DbHealth::Down {
                since: *since,
                error,
            },
            (DbHealth::ReadOnly { since, .. }, DbHealth::ReadOnly { error, .. }) => {
                DbHealth::ReadOnly {
                    since: *since,
                    error,
                }
            }
            (_, h) => h,
        };
        *state = health;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One probe's outcome.
enum Probe {
    Ok,
    ReadOnly(String),
    Unreachable(String),
}

async fn probe(conn: &mut Option<PgConnection>, options: &PgConnectOptions) -> Probe {
    let attempt = async {
        if conn.is_none() {
            *conn = Some(
                PgConnection::connect_with(options)
                    .await
                    .map_err(|e| Probe::Unreachable(e.to_string()))?,
            );
        }
        let Some(c) = conn.as_mut() else {
            return Err(Probe::Unreachable("no connection".into()));
        };
        sqlx::query("SELECT 1")
            .execute(&mut *c)
            .await
            .map_err(|e| Probe::Unreachable(e.to_string()))?;
        sqlx::query("UPDATE partners SET name = name WHERE 1 = 0")
            .execute(&mut *c)
            .await
            .map_err(|e| Probe::ReadOnly(e.to_string()))?;
        Ok(())
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok(())) => Probe::Ok,
        Ok(Err(p)) => p,
        Err(_) => Probe::Unreachable(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
    }
}

impl Store {
    /// The database's health as last probed by [`Store::spawn_health_monitor`]
    /// ([`DbHealth::Unknown`] when none runs, and on SQLite).
    pub fn health(&self) -> DbHealth {
        lock(&self.health.state).clone()
    }

    /// Probes the database every second until `stop` (PostgreSQL; `None` on SQLite).
    pub fn spawn_health_monitor(
        &self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let Pool::Postgres { audit, .. } = &self.pool else {
            return None;
        };
        let options = audit.options().clone().application_name("breeze-health");
        let store = self.clone();
        Some(tokio::spawn(async move {
            tokio::pin!(stop);
            let mut conn = None;
            let mut failures = 0u32;
            let mut tick = tokio::time::interval(PROBE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = &mut stop => break,
                    _ = tick.tick() => {}
                }
                let now = store.clock.now();
                match probe(&mut conn, &options).await {
                    Probe::Ok => {
                        if failures >= DOWN_AFTER {
                            tracing::info!("the database answers again");
                        }
                        failures = 0;
                        store.health.set(DbHealth::Ok);
                    }
                    Probe::ReadOnly(error) => {
                        failures = 0;
                        store.health.set(DbHealth::ReadOnly { since: now, error });
                    }
                    Probe::Unreachable(error) => {
                        // A connection that failed once is not trusted again.
                        conn = None;
                        failures += 1;
                        if failures == DOWN_AFTER {
                            tracing::warn!(%error, "the database does not answer; requests that need it fail at once until it does");
                        }
                        if failures >= DOWN_AFTER {
                            store.health.set(DbHealth::Down { since: now, error });
                        }
                    }
                }
            }
        }))
    }
}
