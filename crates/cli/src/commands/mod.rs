//! Subcommand implementations and what they share: opening the store, serving until a signal.

pub(crate) mod admin;
pub(crate) mod advisories;
pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod billing;
pub(crate) mod chat;
pub(crate) mod config_policies;
pub(crate) mod demo;
pub(crate) mod fleet;
pub(crate) mod fleet_seed;
pub(crate) mod grants;
pub(crate) mod skill;
pub(crate) mod sources;
pub(crate) mod stdio;
pub(crate) mod tools;

use std::sync::Arc;

use anyhow::Context;
use breeze_auth::{AuthService, AuthSettings};
use breeze_core::{Clock, SystemClock};
use breeze_mcp::{EngineConfig, session::SessionLimits};
use breeze_server::{AppState, Breeze, ServerConfig};
use breeze_store::{Backend, Store, StoreOptions};

use crate::config::Settings;

/// An opened, migrated installation.
#[derive(Clone)]
pub(crate) struct App {
    pub(crate) store: Store,
    pub(crate) auth: AuthService,
    pub(crate) clock: Arc<dyn Clock>,
}

/// Opens an existing database for an administrative command. A SQLite file that is not there
/// is refused, naming the path: run from another directory, `./breeze-data` is a different
/// (empty) database, and creating it would only lead to "organization not found".
pub(crate) async fn open_existing(settings: &Settings) -> anyhow::Result<App> {
    refuse_missing_sqlite(settings, "run this command")?;
    open_as(settings, Opener::Command).await
}

/// Refuses a SQLite database whose file is not there: a wrong directory or a typo in
/// `DATABASE_URL` must not quietly start an empty Breeze with nobody in it.
fn refuse_missing_sqlite(settings: &Settings, what: &str) -> anyhow::Result<()> {
    if let Some(file) = breeze_store::sqlite_file(&settings.database_url)
        && !file.exists()
    {
        anyhow::bail!(
            "no database at {}: {what} where `breeze demo` or `breeze serve` keeps its data, or \
             set BREEZE_DATA_DIR / DATABASE_URL; to start a new, empty one on purpose run \
             `breeze init` (or `breeze serve --create`)",
            file.display()
        );
    }
    Ok(())
}

/// Who opens the store, which decides whether a revocation waits for other processes' caches
/// ([`StoreOptions::credential_fence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opener {
    /// `breeze serve`, `breeze demo`, `breeze migrate`: on a SQLite file the only process
    /// that serves (the audit journal holds the file for one), so nobody else caches its keys.
    Server,
    /// An administrative command, which may run beside a server that caches what it revokes.
    Command,
}

/// Connects to the configured database as a server and applies pending migrations.
pub(crate) async fn open(settings: &Settings) -> anyhow::Result<App> {
    open_as(settings, Opener::Server).await
}

async fn open_as(settings: &Settings, opener: Opener) -> anyhow::Result<App> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let url = breeze_store::redact_url(&settings.database_url);
    let cache_ttl = std::time::Duration::from_millis(settings.auth_cache_ms);
    let shared = opener == Opener::Command || !settings.database_url.starts_with("sqlite:");
    let store = Store::connect(
        &StoreOptions {
            pdf_font: settings.pdf_font.clone(),
            audit_synchronous_commit: settings.audit_synchronous_commit,
            audit_journal: settings.audit_journal_dir.clone(),
            credential_fence: if shared {
                cache_ttl
            } else {
                std::time::Duration::ZERO
            },
            ..StoreOptions::new(settings.database_url.clone())
        },
        clock.clone(),
    )
    .await
    .with_context(|| format!("cannot open the database at {url}"))?;
    store
        .migrate()
        .await
        .with_context(|| format!("cannot migrate the database at {url}"))?;
    if store.backend() == Backend::Sqlite && settings.production() {
        tracing::warn!(
            "running production on SQLite; use DATABASE_URL=postgres://… for more than one instance"
        );
    }
    let auth_settings = AuthSettings {
        fail_closed: settings.production(),
        cache_ttl: chrono::Duration::from_std(cache_ttl)?,
        ..AuthSettings::default()
    };
    let auth = AuthService::new(store.clone(), clock.clone(), auth_settings);
    Ok(App { store, auth, clock })
}

/// `breeze serve` (`create`: a missing SQLite file is created).
pub(crate) async fn serve(settings: Settings, create: bool) -> anyhow::Result<()> {
    if !create {
        refuse_missing_sqlite(&settings, "start `breeze serve`")?;
    }
    let listener = bind(&settings).await?;
    let app = open(&settings).await?;
    if let breeze_store::RowSecurity::BypassedBy { role } = app.store.row_security().await? {
        // Not refused: the code's organization filters still hold. But the second wall is
        // down, and whoever runs this should know.
        tracing::warn!(
            %role,
            "PostgreSQL role {role} bypasses row-level security (a superuser or BYPASSRLS): \
             connect as a role without either so the org_wall policies hold (see README, \
             Deployment)"
        );
    }
    run_server(&settings, listener, app).await
}

/// Binds the configured address; done first, so a busy port fails before anything else.
pub(crate) async fn bind(settings: &Settings) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (set BREEZE_LISTEN or --listen)",
                settings.listen
            )
        })
}

/// Serves on `listener` until Ctrl-C or SIGTERM.
pub(crate) async fn run_server(
    settings: &Settings,
    listener: tokio::net::TcpListener,
    app: App,
) -> anyhow::Result<()> {
    tracing::info!(listen = %settings.listen, public_url = %settings.public_url, backend = ?app.store.backend(), "breeze is serving");
    let settings = &with_tool_sources_key(settings, &app.store).await?;
    let limiter: Arc<dyn breeze_limits::RateLimiter> = match &settings.redis_url {
        Some(url) => {
            let limiter =
                breeze_limits::RedisLimiter::new(url, &format!("{}rl:", settings.redis_prefix))
                    .context("REDIS_URL")?;
            tracing::info!(redis = %breeze_store::redact_url(url), "rate limits are shared through Redis");
            Arc::new(limiter)
        }
        None => Arc::new(breeze_limits::MemoryLimiter::new()),
    };
    let state = AppState::new(
        app.store.clone(),
        app.auth.with_limiter(limiter.clone()),
        app.clock,
        server_config(settings),
        limiter,
    );
    let breeze = match &settings.redis_url {
        Some(url) => {
            let prefix = format!("{}mcp:", settings.redis_prefix);
            let cluster =
                breeze_mcp::cluster::SessionCluster::new(url, &prefix).context("REDIS_URL")?;
            tracing::info!(instance = %cluster.instance(), "MCP sessions are shared through Redis");
            Breeze::clustered(state, Arc::new(cluster))
        }
        None => Breeze::new(state),
    };
    breeze_server::serve(listener, breeze, shutdown_signal())
        .await
        .context("server failed")?;
    app.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// [`server_config`], for the settings tests.
#[cfg(test)]
pub(crate) fn server_config_for_test(settings: &Settings) -> ServerConfig {
    server_config(settings)
}

/// The server's configuration from validated settings.
fn server_config(settings: &Settings) -> ServerConfig {
    let m = &settings.mcp;
    ServerConfig {
        public_url: settings.public_url.clone(),
        production: settings.production(),
        require_execute_admin: m.require_execute_admin,
        tool_rate_limits: m.tool_rate_limits,
        execute_allowlist: breeze_guard::Allowlist::parse(&m.execute_allowlist),
        gateway: breeze_gateway::GatewayConfig {
            metrics_retention: settings.metrics_retention,
            ..breeze_gateway::GatewayConfig::default()
        },
        enroll_rate_per_minute: settings.enroll_rate_per_minute,
        trusted_proxies: settings.trusted_proxies.clone(),
        max_response_bytes: m.max_response_bytes,
        max_batch_items: m.max_items,
        oauth: settings.oauth.clone(),
        tool_sources: breeze_server::ToolSourcesConfig {
            key: settings.tool_sources.key.clone(),
            egress: settings.tool_sources.egress.clone(),
        },
        billing: {
            let mut b = breeze_billing::BillingConfig::new(&settings.public_url);
            if let Some(u) = &settings.tool_sources.stripe_api {
                b.stripe_api = u.clone();
            }
            b.synnex_api = settings.tool_sources.synnex_api.clone();
            b
        },
        alerts: settings.alerts.clone(),
        automations: breeze_server::automations::AutomationConfig::default(),
        deployments: breeze_server::deployments::DeploymentConfig::default(),
        metrics: settings.metrics.clone(),
        shutdown_delay: settings.shutdown_delay,
        span_parent: settings
            .traces
            .is_some()
            .then(crate::telemetry::span_parent),
        audit: breeze_server::AuditRetentionConfig {
            days: settings.audit_retention_days,
            explicit: settings.audit_retention_explicit,
            archive_dir: Some(settings.audit_archive_dir.clone()),
        },
        advisory_feeds: settings.advisory_feeds.clone(),
        approvals: breeze_pipeline::approvals::ApprovalConfig {
            wait: std::time::Duration::from_secs(settings.approval_wait_secs),
            webhook_url: settings.approval_webhook_url.clone(),
            public_url: settings.public_url.clone(),
            ..Default::default()
        },
        assistant: settings.assistant.clone(),
        catalog: breeze_server::catalog::CatalogConfig {
            default_mode: m.catalog,
            discover_bytes: m.discover_bytes,
        },
        mcp: EngineConfig {
            sessions: SessionLimits {
                max_total: m.max_sessions,
                max_per_tenant: m.max_sessions_per_org,
                max_per_key: m.max_sessions_per_key,
                idle_ttl: m.session_ttl,
            },
            sse_rate_per_minute: m.sse_rate_per_minute,
            message_rate_per_minute: m.message_rate_per_minute,
            max_body_bytes: m.max_body_bytes,
            public_base_url: settings.public_url.clone(),
            allowed_origins: m.allowed_origins.clone(),
            allow_localhost_origins: !settings.production(),
            fail_closed: settings.production(),
            ..EngineConfig::default()
        },
    }
}

/// `settings` with the key tool sources' credentials are sealed under: the configured one;
/// outside production, one kept in the data directory (made on first use); in production
/// none — and then the start is refused while any source exists, whose credentials could
/// not be opened.
pub(crate) async fn with_tool_sources_key(
    settings: &Settings,
    store: &Store,
) -> anyhow::Result<Settings> {
    let mut settings = settings.clone();
    if settings.tool_sources.key.is_some() {
        return Ok(settings);
    }
    if settings.production() {
        if store.cross_org().tool_sources_exist().await? {
            anyhow::bail!(
                "tool sources exist but TOOL_SOURCES_KEY is not set: their credentials cannot be \
                 opened (set the key they were sealed under)"
            );
        }
        return Ok(settings);
    }
    let path = settings.data_dir.join("tool-sources.key");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = breeze_sources::vault::Vault::generate_key()?;
            std::fs::create_dir_all(&settings.data_dir)?;
            write_private(&path, &key)
                .with_context(|| format!("cannot write {}", path.display()))?;
            key
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    settings.tool_sources.key = Some(
        breeze_sources::vault::Vault::from_setting(&text)
            .with_context(|| format!("the key in {} is unusable", path.display()))?,
    );
    Ok(settings)
}

/// Writes `text` to a new file only its owner can read.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(text.as_bytes())
}

/// Resolves on Ctrl-C or SIGTERM.
///
/// The SIGTERM handler is installed when this is called, not when the future is first
/// polled: the server polls its shutdown future on a task of its own, and a SIGTERM that
/// arrives after `/healthz` answers but before that task runs would otherwise kill the
/// process with the default disposition instead of draining it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async move {
            match term {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            () = ctrl_c => {},
            () = term => {},
        }
        tracing::info!("shutting down; finishing in-flight requests");
    }
}

#[cfg(test)]
mod tool_source_key_tests {
    //! The key tool sources' credentials are sealed under: development keeps one in the data
    //! directory; production without one refuses to start once a source exists.

    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use std::collections::BTreeMap;

    use breeze_core::{Actor, AuditEvent, tool_source::Slug};
    use breeze_store::{NewToolSource, testing::TestStore};

    use super::*;
    use crate::config::SettingFlags;

    fn settings(dir: &std::path::Path, production: bool) -> Settings {
        let mut env = BTreeMap::new();
        env.insert("BREEZE_DATA_DIR".to_owned(), dir.display().to_string());
        if production {
            env.insert("BREEZE_ENV".to_owned(), "production".to_owned());
            env.insert(
                "BREEZE_PUBLIC_URL".to_owned(),
                "https://rmm.example.com".to_owned(),
            );
        }
        Settings::load(&env, &SettingFlags::default()).unwrap()
    }

    #[tokio::test]
    async fn development_keeps_a_key_and_production_refuses_without_one() {
        let test = TestStore::new(Backend::Sqlite, Arc::new(SystemClock)).await;
        let store = &test.store;
        let dir = tempfile::tempdir().unwrap();

        // Development: a key is made once, kept private, and read back the same.
        let first = with_tool_sources_key(&settings(dir.path(), false), store)
            .await
            .unwrap();
        let path = dir.path().join("tool-sources.key");
        let text = std::fs::read_to_string(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let sealed = first
            .tool_sources
            .key
            .as_ref()
            .unwrap()
            .seal(&breeze_sources::vault::Credential::None, "s")
            .unwrap();
        let again = with_tool_sources_key(&settings(dir.path(), false), store)
            .await
            .unwrap();
        assert!(again.tool_sources.key.unwrap().open(&sealed, "s").is_ok());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);

        // Production: no key and no source starts; no key once a source exists does not.
        let prod = dir.path().join("prod");
        assert!(
            with_tool_sources_key(&settings(&prod, true), store)
                .await
                .is_ok()
        );
        assert!(
            !prod.join("tool-sources.key").exists(),
            "production never makes one"
        );
        let audit = || AuditEvent::new(Actor::system("test"), "test", "test");
        let partner = store.create_partner("P", "p", audit()).await.unwrap();
        store
            .partner_tool_sources(partner.id)
            .create_tool_source(
                NewToolSource {
                    id: uuid::Uuid::now_v7(),
                    slug: Slug::parse("docs").unwrap(),
                    display_name: "Docs".into(),
                    kind: breeze_core::tool_source::SourceKind::Mcp,
                    url: "https://docs.example.com/mcp".into(),
                    document_url: None,
                    auth_method: "none".into(),
                    credential: sealed,
                    offer_to_mcp: false,
                    created_by: "test".into(),
                },
                audit(),
            )
            .await
            .unwrap();
        let err = with_tool_sources_key(&settings(&prod, true), store)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("TOOL_SOURCES_KEY"), "{err}");
        test.cleanup().await;
    }
}
