//! The server's housekeeping [`Worker`]s: jobs that keep the store and the credentials tidy
//! rather than act on devices — the SQLite checkpoint, the daily audit retention, the daily
//! OAuth sweep, the hourly expiry of idle AI chats — and the alert engine, whose type lives in
//! `breeze-alerts`.

use std::{convert::Infallible, path::PathBuf, sync::Arc, time::Duration};

use breeze_alerts::{AlertEngine, TickReport};
use breeze_oauth::{OAuth, OAuthError};
use breeze_store::{Store, StoreError};

use crate::workers::Worker;

/// How often the server asks whether SQLite's write-ahead log is due to be copied back (the
/// store decides, by what was written: `Store::checkpoint_when_due`).
const CHECKPOINT_TICK: Duration = Duration::from_millis(25);

/// Checkpoints the database when due, asking every [`CHECKPOINT_TICK`] (SQLite's write-ahead
/// log; started only for a store that has one), so that commits on the request path never run
/// one.
pub(crate) struct Checkpointer(pub(crate) Store);

impl Worker for Checkpointer {
    const NAME: &'static str = "checkpoint";
    type Report = bool;
    type Error = StoreError;

    fn period(&self) -> Duration {
        CHECKPOINT_TICK
    }

    async fn tick(self: &Arc<Self>) -> Result<bool, StoreError> {
        self.0.checkpoint_when_due().await
    }
}

/// How often the audit retention job runs.
const AUDIT_RETENTION_EVERY: Duration = Duration::from_secs(24 * 60 * 60);

/// When it first runs after start: soon, so that an instance restarted more often than daily
/// still purges, but not while it starts up.
const AUDIT_RETENTION_FIRST: Duration = Duration::from_secs(60);

/// The daily audit job: settles the cluster's retention from this instance's setting when
/// nothing has (the database enforces it), makes PostgreSQL's monthly partitions ahead, and
/// purges what is past the retention in force after archiving it (`Store::purge_audit`; on
/// PostgreSQL one instance at a time).
pub(crate) struct AuditRetention {
    pub(crate) store: Store,
    pub(crate) days: Option<u32>,
    pub(crate) explicit: bool,
    pub(crate) archive_dir: PathBuf,
}

impl AuditRetention {
    /// Settles the retention if nothing has, and says loudly when this instance was
    /// configured otherwise than the cluster: the stored value governs the purge either way.
    pub(crate) async fn settle(&self) -> Result<(), breeze_store::StoreError> {
        let in_force = self.store.settle_audit_retention(self.days).await?;
        let configured = self.days.filter(|&d| d > 0);
        if in_force.settled_now {
            tracing::info!(days = ?in_force.days, "audit retention settled for the cluster");
        } else if self.explicit && in_force.days != configured {
            let show = |d: Option<u32>| d.map_or("forever".to_owned(), |d| format!("{d} days"));
            tracing::error!(
                configured = %show(configured),
                in_force = %show(in_force.days),
                "BREEZE_AUDIT_RETENTION_DAYS on this instance differs from the cluster's audit \
                 retention stored in the database; the stored retention governs every purge. \
                 Change it for the whole cluster with `breeze audit retention --days N` (or \
                 --forever), and set every instance alike"
            );
        }
        Ok(())
    }
}

impl Worker for AuditRetention {
    const NAME: &'static str = "audit retention";
    // A run cut short by shutdown leaves at most a `.partial` archive (replaced by the next
    // run) and records not yet deleted (deleted by it).
    const STOPS_MID_TICK: bool = true;
    type Report = ();
    type Error = Infallible;

    fn period(&self) -> Duration {
        AUDIT_RETENTION_EVERY
    }

    fn first_delay(&self) -> Duration {
        AUDIT_RETENTION_FIRST
    }

    /// One run; failures are logged and retried at the next run.
    async fn tick(self: &Arc<Self>) -> Result<(), Infallible> {
        let store = &self.store;
        if let Err(e) = self.settle().await {
            tracing::warn!(error = %e, "cannot read the audit retention");
            return Ok(());
        }
        if let Err(e) = store.prepare_audit_partitions().await {
            tracing::warn!(error = %e, "cannot make the audit log's partitions");
        }
        match store.purge_audit(&self.archive_dir).await {
            Ok(r) if r.skipped => tracing::info!("audit purge skipped: another instance runs it"),
            Ok(r) if r.archived > 0 || r.partitions_dropped > 0 => tracing::info!(
                cutoff = ?r.cutoff,
                archived = r.archived,
                archive = ?r.archive,
                partitions_dropped = r.partitions_dropped,
                rows_deleted = r.rows_deleted,
                archive_ms = r.archive_time.as_millis() as u64,
                delete_ms = r.delete_time.as_millis() as u64,
                "audit records past the retention archived and purged"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "audit purge failed; records are kept until the next run");
            }
        }
        Ok(())
    }
}

/// How often the server asks whether the daily OAuth sweep is due (the lease decides, by the
/// store's clock, so a day passes the same for every instance).
const OAUTH_SWEEP_TICK: Duration = Duration::from_secs(600);

/// The daily sweep of stale OAuth clients, codes and refresh tokens
/// ([`OAuth::sweep_when_due`]).
pub(crate) struct OAuthSweeper(pub(crate) OAuth);

impl Worker for OAuthSweeper {
    const NAME: &'static str = "OAuth sweep";
    type Report = Option<u64>;
    type Error = OAuthError;

    fn period(&self) -> Duration {
        OAUTH_SWEEP_TICK
    }

    async fn tick(self: &Arc<Self>) -> Result<Option<u64>, OAuthError> {
        self.0.sweep_when_due().await
    }

    fn log(&self, swept: &Option<u64>) {
        if let Some(n) = swept {
            tracing::info!(clients = n, "daily OAuth sweep done");
        }
    }
}

/// Every `config.tick`; a stopping instance gives the tick's once-per-cluster lease up, so
/// another instance takes it at its next tick rather than after the lease lapses.
impl Worker for AlertEngine {
    const NAME: &'static str = "alert engine";
    type Report = TickReport;
    type Error = StoreError;

    fn period(&self) -> Duration {
        AlertEngine::period(self)
    }

    async fn tick(self: &Arc<Self>) -> Result<TickReport, StoreError> {
        AlertEngine::tick(self).await
    }

    async fn stopped(self: &Arc<Self>) {
        if let Err(e) = self.release_lease().await {
            tracing::warn!(error = %e, "could not give the alert engine's lease up");
        }
    }
}

/// Deletes live queries (and their answers) whose retention ended, every ten minutes; a query
/// past its retention is already out of every listing and lookup, so this only frees space.
/// Every instance may run it: the delete is idempotent.
pub(crate) struct LiveQueryRetention(pub(crate) Store);

impl Worker for LiveQueryRetention {
    const NAME: &'static str = "live query retention";
    type Report = u64;
    type Error = StoreError;

    fn period(&self) -> Duration {
        Duration::from_secs(600)
    }

    async fn tick(self: &Arc<Self>) -> Result<u64, StoreError> {
        self.0.purge_expired_live_queries().await
    }

    fn log(&self, purged: &u64) {
        if *purged > 0 {
            tracing::info!(queries = purged, "expired live query results deleted");
        }
    }
}

/// Marks AI chat sessions idle past the configured time expired (their history stays), every
/// hour, so listings show them as they are; a turn checks its own session as well, so one
/// between two sweeps never takes a message.
pub(crate) struct AiSessionExpiry {
    pub(crate) store: Store,
    pub(crate) idle: Duration,
}

impl Worker for AiSessionExpiry {
    const NAME: &'static str = "AI session expiry";
    type Report = u64;
    type Error = StoreError;

    fn period(&self) -> Duration {
        Duration::from_secs(3600)
    }

    async fn tick(self: &Arc<Self>) -> Result<u64, StoreError> {
        let cutoff = chrono::Duration::from_std(self.idle)
            .ok()
            .and_then(|idle| self.store.clock().now().checked_sub_signed(idle));
        match cutoff {
            Some(cutoff) => self.store.expire_idle_ai_sessions(cutoff).await,
            // An idle time past the calendar: nothing is that old.
            None => Ok(0),
        }
    }
}
