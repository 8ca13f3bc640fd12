//! Breeze's persistence: one [`Store`] over SQLite (the embedded default) or PostgreSQL.
//!
//! Both backends run the same statements (see the `sql` module) against their own migration trees
//! (`migrations/sqlite`, `migrations/postgres`, kept in lockstep by a test). Organization data is
//! reached through [`OrgStore`], a handle bound to one organization whose every query is filtered
//! by it: holding an `OrgStore` for A cannot reveal B's rows, even by id.
//!
//! Mutations that deserve an audit record take an [`AuditEvent`] and write it in the same
//! transaction as the change.

mod advisory_feeds;
mod agents;
mod ai;
mod alerts;
mod api_keys;
mod approvals;
mod audit;
mod audit_appender;
mod audit_retention;
mod automations;
mod bus;
mod catalog;
mod commands;
mod compliance;
mod config_policies;
mod context;
mod contracts;
mod cross_org;
mod deployments;
mod devices;
mod directory;
mod documents;
mod dynamic_groups;
mod error;
mod events;
mod handles;
mod health;
mod idempotency;
mod inventory;
mod invoices;
mod ledger;
mod live_queries;
mod maintenance;
mod metrics;
mod oauth;
mod overview;
mod packages;
mod patches;
mod payments;
mod pdf;
mod pdf_font;
mod protected_paths;
mod quotes;
mod report_schedules;
mod reports;
mod row_security;
mod runs;
mod scan_schedules;
mod scheduled;
mod scripts;
mod security;
mod sql;
mod tenancy;
#[cfg(feature = "testing")]
pub mod testing;
mod tickets;
mod tool_sources;
mod users;
mod vulnerabilities;
mod wal;

use std::{str::FromStr, time::Duration};

pub use advisory_feeds::{AdvisoryFeed, FeedCheck};
pub use agents::{
    AgentLogFilter, AgentLogRecord, CLONE_EVENT_KIND, CLONE_EVENT_SOURCE, DeviceCredential,
    DeviceState, EnrollDevice, Enrolled, EnrollmentKeyRecord, INVALID_ENROLLMENT_KEY,
    INVALID_REENROLL_TOKEN, NewEnrollmentKey, ReenrollProof, SUSPECTED_CLONE_RULE,
    UserSessionRecord,
};
pub use ai::{
    AiBudget, AiMessage, AiSession, AiSpend, AiToolExecution, AiUsageRow, MAX_AI_SESSION_PAGE,
    MAX_AI_TITLE_CHARS, NewAiMessage, NewAiUsage,
};
pub use alerts::{
    Alert, AlertCursor, AlertEvent, AlertFilter, AlertPage, AlertRule, AlertSummary,
    MAX_ALERT_PAGE, MAX_COOLDOWN_MINUTES, MAX_NAME_CHARS, MAX_NOTE_CHARS, MAX_RULE_CHANNELS,
    MAX_RULES_PER_ORG, MAX_SUPPRESS_MINUTES, NewChannel, NewRule, NotificationChannel, Observation,
    Observed, RuleTarget, RuleUpdate, SAMPLE_GAP, engine_actor,
};
pub use api_keys::{ApiKeyRecord, NewApiKey};
pub use approvals::{APPROVAL_MODES, AUTOMATIC, ApprovalRecord, Decision, NewApproval};
pub use audit::{AuditCursor, AuditFilter, AuditPage, AuditView, MAX_AUDIT_PAGE};
pub use audit_appender::{AuditAppender, MAX_BACKLOG as AUDIT_JOURNAL_MAX_BACKLOG, Unwritten};
pub use audit_retention::{
    AuditExport, ExportSummary, PurgeReport, RetentionInForce, read_audit_archive,
};
pub use automations::{
    ActionSpec, Automation, AutomationRun, AutomationUpdate, DeviceOutcome,
    MAX_AUTOMATIONS_PER_ORG, MAX_RUN_DEVICES, MAX_RUN_PAGE, NewAutomation, NewRun,
    RUN_INTERRUPTED_AFTER, TriggerSpec, automations_actor,
};
pub use breeze_core::AuditEvent;
pub use bus::Signal;
pub use catalog::{
    CatalogComponent, CatalogFilter, CatalogItem, CatalogUpdate, MAX_CATALOG_PAGE, NewCatalogItem,
    PriceOverride,
};
pub use commands::{CommandRecord, MAX_STORED_OUTPUT_BYTES, NewCommand, kind_tag};
pub use compliance::{
    ComplianceChange, CompliancePolicy, CompliancePolicyUpdate, ComplianceStatus, EvaluationReport,
    FinishedCheck, MAX_POLICIES_PER_ORG, MAX_REMEDIATION_DEVICES, NewCompliancePolicy,
    PolicySummary, Remediation, RemediationUpdate, agent_probes, compliance_actor, probe_of,
};
pub use config_policies::{
    ConfigAssignment, ConfigPolicy, ConfigPolicyUpdate, ConfigReport, MAX_CONFIG_ASSIGNMENTS,
    MAX_CONFIG_POLICIES, MAX_PRIORITY, NewAssignment, NewConfigPolicy, PolicyOwner,
};
pub use context::{CONTEXT_TYPES, ContextEntry, NewContext};
pub use contracts::{
    Contract, ContractLine, ContractPage, ContractPeriod, ContractUpdate, MAX_CONTRACT_PAGE,
    NewContract, NewContractLine, PeriodsBilled,
};
pub use cross_org::CrossOrg;
pub use deployments::{
    Advance, Control, Deferral, Deployment, DeploymentDevice, DeviceResult, MAX_DEPLOYMENT_DEVICES,
    MAX_DEPLOYMENTS_PER_ORG, MAX_RINGS, NewDeployment, NewRing, NewRingMembers, PackageAction,
    Payload, Ring, STEP_LEASE, deployment_request_id, deployments_actor,
};
pub use devices::{DeviceFilter, NewDevice};
pub use directory::{DevicePage, DirectorySettings};
pub use dynamic_groups::{
    MembershipChange, Recomputed, TIME_REEVALUATION, groups_actor, groups_clock_actor,
};
pub use error::{Result, StoreError};
pub use events::{DeviceEvent, EVENT_RETENTION, MAX_EVENTS_PER_DEVICE, MAX_TRIGGER_EVENTS};
pub use handles::{
    OrgAgents, OrgAi, OrgAlerts, OrgApiKeys, OrgApprovals, OrgAudit, OrgAutomations, OrgCatalog,
    OrgCommands, OrgCompliance, OrgConfigPolicies, OrgContext, OrgContracts, OrgDeployments,
    OrgDevices, OrgDynamicGroups, OrgIdempotency, OrgInvoices, OrgLiveQueries, OrgMaintenance,
    OrgPatches, OrgQuotes, OrgReports, OrgScripts, OrgSecurity, OrgTelemetry, OrgTenancy,
    OrgTickets, OrgToolSources, OrgVulnerabilities,
};
pub use health::DbHealth;
pub use idempotency::{
    ClaimOutcome, IDEMPOTENCY_RETENTION, IDEMPOTENCY_STALE_AFTER, MAX_REQUEST_ID_CHARS,
    RequestClaim,
};
pub use inventory::{DeviceInventory, MAX_CACHED_PACKAGES};
pub use invoices::{Invoice, InvoiceLine, InvoicePage, MAX_INVOICE_PAGE, NewLine, Payment};
pub use live_queries::{
    ANSWER_STATUSES, AnswerCounts, LiveAnswerRecord, LiveQueryRecord, NewLiveAnswer, NewLiveQuery,
};
pub use maintenance::{
    AlertSuppression, MAX_WINDOWS_PER_ORG, MaintenanceWindow, NewWindow, WindowUpdate,
};
pub use metrics::{Aggregation, MetricPoint, MetricTotals, MetricsRetention};
pub use oauth::{
    NewOAuthClient, NewOAuthCode, NewRefreshToken, OAuthClientKind, OAuthClientRecord,
    OAuthCodeRecord, OAuthGrantRecord, Redeemed, Refreshed,
};
pub use overview::DeviceOverview;
pub use packages::{MAX_PACKAGE_PAGE, PackagePage};
pub use patches::{
    DevicePatch, MAX_PATCH_JOB_DEVICES, MAX_PATCH_PACKAGES, MAX_PATCH_PAGE, NewPatchDecision,
    NewPatchJob, PatchApproval, PatchDecision, PatchFilter, PatchHistoryEntry, PatchJob,
    PatchJobDevice, PatchJobKind, PatchScan, PatchTally, check_package_text, records_patch_result,
};
pub use payments::{
    LinkPaid, LinkRefunded, NewPaymentLink, PartnerBilling, PaymentLink, QuoteLink, QuoteSettled,
    Refund, Refunded, Settled,
};
pub use pdf_font::{PdfFont, WELL_KNOWN_FONTS};
pub use quotes::{MAX_QUOTE_PAGE, NewQuoteLine, Quote, QuoteBlock, QuoteLine};
pub use report_schedules::{
    MAX_REPORT_SCHEDULES_PER_ORG, NewReportSchedule, ReportCadence, ReportSchedule, WEEKDAYS,
};
pub use reports::{
    CHUNK_BYTES, MAX_REPORT_BYTES, MAX_REPORT_ROWS, MAX_REPORTS_PER_ORG, MAX_RUNS_KEPT,
    MAX_RUNS_PER_REQUESTER, NewReport, REPORT_PAGE, ReportCaps, ReportDefinition, ReportRequest,
    ReportRun, ReportUpdate, Requester,
};
pub use row_security::RowSecurity;
pub use runs::RunUpdate;
pub use scan_schedules::{
    MAX_SCAN_INTERVAL_MINUTES, MAX_SCAN_SCHEDULES_PER_ORG, MIN_SCAN_INTERVAL_MINUTES,
    NewScanSchedule, ScanCadence, ScanSchedule,
};
pub use scripts::{MAX_SCRIPT_BYTES, NewScript, SCRIPT_LANGUAGES, Script, ScriptParameter};
pub use security::{
    FlaggedFile, NewFinding, NewFlagged, NewPosture, NewQuarantine, PostureSnapshot,
    QuarantineEntry, SCANS_KEPT, ScanOutcome, SecurityFinding, SecurityScan,
};
/// The database driver's error, for callers that classify failures (e.g. unavailable vs bug).
pub use sqlx::Error as SqlxError;
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqlitePoolOptions},
};
pub use tickets::{
    CommentScope, LinkedAlert, MAX_TICKET_PAGE, NewPart, NewTicket, NewTime, Ticket, TicketComment,
    TicketFilter, TicketPage, TicketPart, TicketUpdate, TimeEntry,
};
pub use tool_sources::{
    DiscoveryRecord, MAX_SOURCES, NewToolSource, PartnerToolSources, SourceChange, SourceOwner,
    SourceTool, ToolChange, ToolSource, ToolSwitch,
};
pub use users::{NewUser, UserWithSecret};
pub use vulnerabilities::{
    AdvisoryDetail, AdvisoryRow, ExposedAdvisory, ExposureFinding, ExposureSummary, ImportOutcome,
    OPERATOR_ORIGIN, SEVERITIES, SeverityCount,
};

use breeze_core::{Clock, OrgId};
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Sqlite(sqlx::SqlitePool),
    /// Two pools on one database: `system` in the `system` row-security scope, `tenant` for
    /// [`OrgStore`]'s statements, each setting its organization (see [`row_security`]).
    /// The audit appender's request records go through connections of their own
    /// ([`audit::AuditConnections`]).
    Postgres {
        system: sqlx::PgPool,
        tenant: sqlx::PgPool,
        audit: Arc<audit::AuditConnections>,
    },
}

/// How to open a store.
#[derive(Clone)]
pub struct StoreOptions {
    /// `sqlite://path/to/file.db` or `postgres://user@host/db`.
    pub url: String,
    /// Upper bound on pooled connections.
    pub max_connections: u32,
    /// PostgreSQL only: the schema to work in (tests use one per run).
    pub pg_schema: Option<String>,
    /// How long a statement waits for a lock another connection holds before it fails as
    /// [`StoreError::Unavailable`]: SQLite's busy timeout, PostgreSQL's `lock_timeout`.
    pub lock_timeout: Duration,
    /// PostgreSQL's `statement_timeout`: no request waits longer on one statement (migrations
    /// run without it).
    pub statement_timeout: Duration,
    /// The TrueType font PDF reports embed (`BREEZE_PDF_FONT`); `None` looks in
    /// [`WELL_KNOWN_FONTS`], and without one reports are set in Helvetica (Latin-1 only).
    pub pdf_font: Option<std::path::PathBuf>,
    /// PostgreSQL: whether the audit appender's request records wait for their commit to
    /// reach the disk (`BREEZE_AUDIT_SYNCHRONOUS_COMMIT`). On by default: an answered request's
    /// record survives a PostgreSQL crash. Off, a commit is acknowledged before its WAL is
    /// flushed, and a crash (`pg_ctl stop -m immediate`, a killed server, a power cut) loses
    /// what the WAL writer had not flushed yet (up to three `wal_writer_delay`s, 600 ms by
    /// default); an opt-out for speed (see [`AuditAppender`]). A change's own audit record is
    /// always committed with the change.
    pub audit_synchronous_commit: bool,
    /// PostgreSQL: a directory of this process's own where a request's audit record is
    /// journaled when no other request's shares its insert, and moved into `audit_log` moments
    /// later, as on a SQLite file (see [`AuditAppender`]); `None` inserts every record before
    /// the request is answered.
    pub audit_journal: Option<std::path::PathBuf>,
    /// How long a change that takes access away (a revoked key or grant, a role change, a
    /// password change) waits after its commit before it returns: the longest another process
    /// on this database may still serve the old credential from its cache
    /// (`BREEZE_AUTH_CACHE_MS`). So when a revocation returns, no server honours what it
    /// revoked, whether or not the bus's signal reached it. Zero for a process that shares
    /// the database with no other caching process (a server on a SQLite file, tests).
    pub credential_fence: Duration,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("url", &redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("pg_schema", &self.pg_schema)
            .field("lock_timeout", &self.lock_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("pdf_font", &self.pdf_font)
            .field("audit_synchronous_commit", &self.audit_synchronous_commit)
            .field("audit_journal", &self.audit_journal)
            .field("credential_fence", &self.credential_fence)
            .finish()
    }
}

impl StoreOptions {
    /// Options for `url` with the default pool size.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 10,
            pg_schema: None,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            pdf_font: None,
            audit_synchronous_commit: true,
            audit_journal: None,
            credential_fence: DEFAULT_CREDENTIAL_FENCE,
        }
    }
}

/// The file a `sqlite:` database URL names, or `None` for an in-memory database or another
/// backend: lets a command that must not create a database check that it exists first.
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    if !url.starts_with("sqlite:") || url.contains(":memory:") || url.contains("mode=memory") {
        return None;
    }
    let opts = SqliteConnectOptions::from_str(url).ok()?;
    Some(opts.get_filename().to_path_buf())
}

/// Creates `dir` (and parents) when missing; a directory Breeze creates is private to its
/// owner (0700), since the database holds password and key hashes.
pub(crate) fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    if dir.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    Ok(())
}

/// Hides the password in a database URL so it can be logged.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Rows a SQLite connection's worker thread may send ahead of its reader.
const SQLITE_ROW_BUFFER: usize = 512;

/// The pragmas of every SQLite connection a store opens (the pool's, and the audit journal's
/// own in `audit_appender`).
pub(crate) const SQLITE_PRAGMAS: [(&str, &str); 4] = [
    ("journal_mode", "WAL"),
    ("synchronous", "NORMAL"),
    // Pages are read through a shared mapping instead of copied into each connection's cache
    // (which a commit on another connection invalidates).
    ("mmap_size", "268435456"),
    // The server copies the WAL back in the background (`Store::checkpoint`), so a commit does
    // not stop for a checkpoint and its fsync; this is the backstop for a process that never
    // does.
    ("wal_autocheckpoint", "16384"),
];

/// How long a statement waits for a PostgreSQL connection (from a pool, or a new one for the
/// audit appender) before it fails as unavailable.
const PG_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The audit appender's own PostgreSQL connections: as many as it keeps batches in flight
/// ([`AuditAppender::max_in_flight`]).
const AUDIT_CONNECTIONS: usize = 4;

/// How long a SQLite connection waits for another's write lock.
pub(crate) const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// [`StoreOptions::lock_timeout`] by default: a request waits this long for a lock at most,
/// then answers "unavailable, retry".
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// [`StoreOptions::credential_fence`] by default: the key and token caches' default ttl.
pub const DEFAULT_CREDENTIAL_FENCE: Duration = Duration::from_secs(1);

/// [`StoreOptions::statement_timeout`] by default.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// A rusqlite connection to the SQLite file at `path` with the pool's settings (see
/// [`Store::connect`]): the audit journal's and the checkpointer's.
pub(crate) fn open_connection(path: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(SQLITE_BUSY_TIMEOUT)?;
    let pragmas: String = SQLITE_PRAGMAS
        .iter()
        .map(|(name, value)| format!("PRAGMA {name} = {value};"))
        .collect();
    conn.execute_batch(&pragmas)?;
    Ok(conn)
}

/// The store: a connection pool and the clock used to stamp rows. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) pool: Pool,
    pub(crate) clock: Arc<dyn Clock>,
    /// The in-memory device listing (see [`directory`]), shared by clones.
    pub(crate) directory: Arc<directory::DeviceDirectory>,
    /// Parsed device inventories (see [`inventory`]), shared by clones.
    pub(crate) inventories: Arc<inventory::InventoryCache>,
    /// Each organization's partner, as read once ([`OrgTenancy::partner_id`]); shared by clones.
    pub(crate) partners: Arc<tenancy::PartnerOf>,
    /// The credentials generation: bumped (by [`Store::credentials_changed`]) after every
    /// committed change to what an API key authenticates as. Shared by clones, so a cache
    /// keyed on it sees every change made through this store in this process.
    credentials: Arc<AtomicU64>,
    /// [`StoreOptions::credential_fence`].
    credential_fence: Duration,
    /// The database file, for SQLite on disk (where audit appends go through a journal).
    pub(crate) sqlite_file: Option<Arc<std::path::Path>>,
    /// PostgreSQL: the audit journal's directory, if it has one.
    pub(crate) audit_journal_dir: Option<Arc<std::path::Path>>,
    /// That journal, once an appender opened it; shared by clones.
    pub(crate) audit_journal: audit_appender::JournalSlot,
    /// Runs the file's checkpoints while it has no journal (whose thread runs them then).
    checkpointer: Option<wal::Checkpointer>,
    /// When the next checkpoint is due ([`Store::checkpoint_when_due`]).
    pub(crate) cadence: Arc<wal::Cadence>,
    /// What this store tells, and hears from, other servers on the database (see [`bus`]).
    bus: Arc<bus::Bus>,
    /// The font PDF reports embed.
    pub(crate) pdf_font: pdf_font::FontChoice,
    /// The database's health as last probed (see [`health`]); shared by clones.
    pub(crate) health: Arc<health::Health>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the database at `options.url` (creating a SQLite file and its directory when
    /// missing). Does not migrate; call [`Store::migrate`].
    pub async fn connect(options: &StoreOptions, clock: Arc<dyn Clock>) -> Result<Store> {
        let url = options.url.as_str();
        // First: a font setting that cannot be used is refused before anything is opened.
        let pdf_font = pdf_font::FontChoice::new(options.pdf_font.as_deref())?;
        let mut sqlite_file = None;
        let pool = if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(|e| StoreError::Config(format!("DATABASE_URL: {e}")))?
                .create_if_missing(true)
                .foreign_keys(true)
                .busy_timeout(options.lock_timeout)
                // A page of rows (reads page by 500) crosses from sqlx's worker thread in one
                // go: with the default 50 the worker stalls every 50 rows until the reader
                // drains them, and each stall is a pair of futex calls.
                .row_buffer_size(SQLITE_ROW_BUFFER);
            let opts = SQLITE_PRAGMAS
                .iter()
                .fold(opts, |opts, &(name, value)| opts.pragma(name, value));
            if let Some(dir) = opts.get_filename().parent()
                && !dir.as_os_str().is_empty()
            {
                create_private_dir(dir).map_err(|e| {
                    StoreError::Config(format!(
                        "cannot create the data directory {}: {e}",
                        dir.display()
                    ))
                })?;
            }
            if !url.contains(":memory:") && !url.contains("mode=memory") {
                sqlite_file = Some(Arc::from(opts.get_filename()));
            }
            Pool::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(options.max_connections)
                    // A file cannot drop the connection; pinging it before every use would cost
                    // a round trip to the connection's worker thread.
                    .test_before_acquire(false)
                    .connect_with(opts)
                    .await?,
            )
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let mut opts = PgConnectOptions::from_str(url)
                .map_err(|e| StoreError::Config(format!("DATABASE_URL: {e}")))?;
            if let Some(schema) = &options.pg_schema {
                opts = opts.options([("search_path", schema.as_str())]);
            }
            // Without these a request waited on a lock as long as its holder liked (24 s and
            // more), holding a pooled connection all along.
            let millis = |d: Duration| d.as_millis().max(1).to_string();
            opts = opts.options([
                ("lock_timeout", millis(options.lock_timeout)),
                ("statement_timeout", millis(options.statement_timeout)),
            ]);
            let pool = || {
                PgPoolOptions::new()
                    .max_connections(options.max_connections)
                    .acquire_timeout(PG_ACQUIRE_TIMEOUT)
                    // The pool already pings a connection when it comes back (and drops it if
                    // the ping fails); pinging again before each use doubled the round trips of
                    // every statement. A connection that breaks while idle (a database restart)
                    // fails the one statement that next uses it, and is dropped.
                    .test_before_acquire(false)
            };
            let system = opts
                .clone()
                .options([(row_security::SCOPE_SETTING, row_security::SYSTEM_SCOPE)]);
            let commit = if options.audit_synchronous_commit {
                "on"
            } else {
                "off"
            };
            let audit = system
                .clone()
                .options([("synchronous_commit", commit)])
                .application_name("breeze-audit");
            Pool::Postgres {
                system: pool().connect_with(system).await?,
                // Connections open as organizations' statements need them.
                tenant: pool().min_connections(0).connect_lazy_with(opts),
                audit: Arc::new(audit::AuditConnections::new(
                    audit,
                    AUDIT_CONNECTIONS.min(options.max_connections as usize),
                )),
            }
        } else {
            return Err(StoreError::Config(format!(
                "DATABASE_URL must start with sqlite:// or postgres://, got {:?}",
                redact_url(url)
            )));
        };
        let audit_journal_dir = match &pool {
            Pool::Postgres { .. } => options.audit_journal.as_deref().map(Arc::from),
            Pool::Sqlite(_) => None,
        };
        Ok(Store {
            health: Arc::new(health::Health::new()),
            bus: bus::Bus::new(&pool, options.pg_schema.as_deref()),
            pool,
            clock,
            directory: Arc::new(directory::DeviceDirectory::new(DirectorySettings::default())),
            inventories: Arc::default(),
            partners: Arc::default(),
            credentials: Arc::new(AtomicU64::new(0)),
            credential_fence: options.credential_fence,
            checkpointer: sqlite_file.clone().map(wal::Checkpointer::new),
            cadence: Arc::default(),
            audit_journal_dir,
            sqlite_file,
            audit_journal: Default::default(),
            pdf_font,
        })
    }

    /// The credentials generation: a counter that changes after every committed change, made
    /// through this store or a clone of it, to what an API key authenticates as (a revoked
    /// key, a role assignment, a reported approval request). A cache of authenticated keys
    /// that remembers the generation it read at can tell, without a query, that it may be
    /// stale. Changes made by another server on the same PostgreSQL database move it when their
    /// signal arrives ([`Store::spawn_bus_listener`]); until then the cache's own ttl bounds it.
    pub fn credentials_generation(&self) -> u64 {
        self.credentials.load(Ordering::Acquire)
    }

    /// Moves the credentials generation on, tells the other servers, and returns once none of
    /// them can still serve the old credential. Called after the transaction of any change to
    /// what a key or token authenticates as has committed (or failed: a spurious bump costs a
    /// cache miss, a missing one a stale principal). Every such change calls this one helper.
    ///
    /// The signal is sent before this returns, so a server that hears it drops its cache
    /// before the change's caller can act on the answer. Hearing it is still asynchronous
    /// (and at most once), so the change then waits out [`StoreOptions::credential_fence`]:
    /// any entry read before the commit has expired by then, and the spec's "revoking a grant
    /// invalidates all of its tokens immediately" holds on every server, not only this one.
    pub(crate) async fn credentials_changed(&self) {
        self.bump_credentials();
        self.announce(Signal::CredentialsChanged).await;
        if !self.credential_fence.is_zero() {
            tokio::time::sleep(self.credential_fence).await;
        }
    }

    /// Moves the credentials generation on without telling other servers (for a change one
    /// of them announced).
    fn bump_credentials(&self) {
        self.credentials.fetch_add(1, Ordering::AcqRel);
    }

    /// Applies every pending migration for this backend.
    pub async fn migrate(&self) -> Result<()> {
        match &self.pool {
            Pool::Sqlite(p) => sqlx::migrate!("./migrations/sqlite").run(p).await?,
            Pool::Postgres { system: p, .. } => {
                // A migration may rewrite a large table: it runs without the request timeouts.
                let mut conn = p.acquire().await?;
                sqlx::query("SET statement_timeout = 0")
                    .execute(&mut *conn)
                    .await?;
                sqlx::query("SET lock_timeout = 0")
                    .execute(&mut *conn)
                    .await?;
                let migrated = sqlx::migrate!("./migrations/postgres")
                    .run(&mut *conn)
                    .await;
                sqlx::query("RESET statement_timeout")
                    .execute(&mut *conn)
                    .await?;
                sqlx::query("RESET lock_timeout")
                    .execute(&mut *conn)
                    .await?;
                migrated?;
            }
        }
        Ok(())
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<()> {
        sql::sql("SELECT 1")
            .fetch_scalar::<i32>(self)
            .await
            .map(drop)
    }

    /// Checks that the database takes writes: an update that changes nothing, which fails on a
    /// read-only database (file or mode, standby, `default_transaction_read_only`) and waits
    /// for the write lock at most the lock timeout.
    pub async fn ping_write(&self) -> Result<()> {
        sql::sql("UPDATE partners SET name = name WHERE 1 = 0")
            .execute(self)
            .await
            .map(drop)
    }

    /// SQLite on a file: copies committed pages from the write-ahead log back into the
    /// database without waiting for readers or blocking writers (a passive checkpoint), so that
    /// no commit has to (SQLite checkpoints on commit only past `wal_autocheckpoint`); once the
    /// log is long, also has the next writer start it over (see the `wal` module). PostgreSQL and
    /// in-memory SQLite: nothing.
    pub async fn checkpoint(&self) -> Result<()> {
        // On a file with an audit journal, the journal's thread runs it, below the requests'
        // priority: a checkpoint under load copies megabytes, and on a processor the requests
        // share it would hold them up and lengthen their tail latency.
        if let Some(Some(journal)) = self.audit_journal.get() {
            return journal.checkpoint().await;
        }
        match &self.checkpointer {
            Some(checkpointer) => checkpointer.checkpoint().await,
            None => Ok(()),
        }
    }

    /// Whether [`Store::checkpoint`] has anything to do: a SQLite file, whose write-ahead log it
    /// copies back. PostgreSQL and in-memory SQLite need no checkpoints from us.
    pub fn has_write_ahead_log(&self) -> bool {
        self.sqlite_file.is_some()
    }

    /// [`Store::checkpoint`] when one is due: once 1000 audit records were written through this
    /// store (or its clones) since the last, or 250 ms after it by the store's clock (see the
    /// `wal` module). Returns whether it ran. The server calls this every 25 ms.
    pub async fn checkpoint_when_due(&self) -> Result<bool> {
        if !self.cadence.take_due(self.clock.now()) {
            return Ok(false);
        }
        self.checkpoint().await.map(|()| true)
    }

    /// The connection pool's use: connections open, and of those how many are idle.
    pub fn pool_stats(&self) -> (u32, usize) {
        match &self.pool {
            Pool::Sqlite(p) => (p.size(), p.num_idle()),
            Pool::Postgres { system, tenant, .. } => (
                system.size() + tenant.size(),
                system.num_idle() + tenant.num_idle(),
            ),
        }
    }

    /// Which backend this store uses.
    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres { .. } => Backend::Postgres,
        }
    }

    /// Whether PostgreSQL's row security (the `org_wall` policies of migration 0032, the wall
    /// behind [`OrgStore`]'s filters) holds for the role this store connects as.
    pub async fn row_security(&self) -> Result<RowSecurity> {
        match &self.pool {
            Pool::Sqlite(_) => Ok(RowSecurity::NotAvailable),
            Pool::Postgres { system, .. } => row_security::check(system).await,
        }
    }

    /// The clock that stamps rows.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Moves journaled audit records into the table, then closes the pool, waiting for
    /// connections to be returned.
    pub async fn close(&self) {
        self.flush_audit().await;
        match &self.pool {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres {
                system,
                tenant,
                audit,
            } => {
                audit.close().await;
                tenant.close().await;
                system.close().await;
            }
        }
    }

    /// A handle whose every query is confined to organization `org`.
    pub fn org(&self, org: OrgId) -> OrgStore<'_> {
        OrgStore { store: self, org }
    }
}

/// The store seen from inside one organization. Every query it runs is filtered by that
/// organization; rows of others are indistinguishable from missing ones.
#[derive(Debug, Clone, Copy)]
pub struct OrgStore<'a> {
    pub(crate) store: &'a Store,
    pub(crate) org: OrgId,
}

impl OrgStore<'_> {
    /// The organization this handle is bound to.
    pub fn org_id(&self) -> OrgId {
        self.org
    }

    /// Refuses to add one more row to `table` when this organization already has `max` of
    /// them (`what` names them in the conflict): the cap every per-organization list keeps.
    pub(crate) async fn check_room(&self, table: &str, max: i64, what: &str) -> Result<()> {
        let count = sql::sql(format!("SELECT COUNT(*) FROM {table} WHERE org_id = $1"))
            .bind(self.org)
            .fetch_scalar::<i64>(self)
            .await?;
        if count >= max {
            return Err(StoreError::Conflict(format!(
                "the organization already has {max} {what}"
            )));
        }
        Ok(())
    }

    /// Sets the timestamp `column` of row `id` in `table` (of this organization) to now, unless
    /// it is already set; audits `audit` in the same transaction only when something changed.
    /// The shape of every "revoke", "resolve", "decide" that must happen once.
    pub(crate) async fn stamp_once(
        &self,
        table: &'static str,
        column: &'static str,
        id: uuid::Uuid,
        audit: AuditEvent,
    ) -> Result<()> {
        let now = self.store.clock.now();
        let mut tx = sql::Tx::begin_in(self).await?;
        let changed = sql::sql(format!(
            "UPDATE {table} SET {column} = $1 WHERE id = $2 AND org_id = $3 AND {column} IS NULL"
        ))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if changed > 0 {
            audit::insert(&mut tx, &audit.org(self.org).resource(id), now).await?;
        }
        tx.commit().await
    }
}
