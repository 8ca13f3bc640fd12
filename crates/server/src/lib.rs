//! Breeze's HTTP edge: the axum application and how it is served.
//!
//! [`app`] builds the whole router from an [`AppState`], so tests drive it with `oneshot` and no
//! socket. Handlers are thin: extract, authorize through `authz`, call the store or auth
//! service, return JSON. Every failure becomes an [`ApiError`], mapped once to
//! `{"error":{"code","message"}}`.

pub mod advisory_feeds;
mod audit_writer;
mod authz;
pub use authz::ORG_ROUTES;
pub mod automations;
pub mod catalog;
mod cimd_guard;
pub mod client_addr;
pub mod compliance;
pub mod contract_billing;
pub mod deployments;
mod edge;
mod error;
mod extract;
pub mod groups;
mod housekeeping;
pub mod mcp;
pub mod metrics;
pub mod oauth;
mod owner_runs;
mod pages;
pub mod patch_jobs;
pub mod report_schedules;
mod routes;
pub mod scan_schedules;
pub mod schedules;
pub mod tool_sources;
pub mod views;
pub mod workers;

use std::{sync::Arc, time::Duration};

use axum::{Router, extract::DefaultBodyLimit};
use breeze_auth::AuthService;
use breeze_core::Clock;
use breeze_gateway::{Gateway, GatewayConfig};
use breeze_guard::{Guard, GuardConfig};
use breeze_limits::RateLimiter;
use breeze_mcp::{Engine, EngineConfig};
use breeze_pipeline::{Pipeline, approvals};
use breeze_store::Store;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;

pub use error::ApiError;

/// The header carrying a request's id, set when the client sent none.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The name of the dashboard session cookie.
pub const SESSION_COOKIE: &str = "breeze_session";

/// Largest REST request body accepted where a route states no other limit (see
/// `body_limit`): every JSON request of the API fits in it many times over.
pub const MAX_REST_BODY_BYTES: usize = 64 * 1024;

/// The body limit in force for a request, for the 413 to state it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize);

/// Caps the request bodies of `router`'s routes at `bytes`, instead of
/// [`MAX_REST_BODY_BYTES`], for routes whose bodies need more.
pub(crate) fn body_limit<S>(router: Router<S>, bytes: usize) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router
        .layer(DefaultBodyLimit::max(bytes))
        .layer(axum::Extension(BodyLimit(bytes)))
}

/// Settings the HTTP layer needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where clients reach this server, e.g. `https://rmm.example.com`.
    pub public_url: String,
    /// Production hardening: secure cookies, fail-closed rate limits, `ai:execute_admin`.
    pub production: bool,
    /// The MCP engine's limits and origins.
    pub mcp: EngineConfig,
    /// `MCP_REQUIRE_EXECUTE_ADMIN`.
    pub require_execute_admin: bool,
    /// `MCP_TOOL_RATE_LIMITS`: whether each tool's own per-user limit applies.
    pub tool_rate_limits: bool,
    /// `MCP_EXECUTE_TOOL_ALLOWLIST`.
    pub execute_allowlist: breeze_guard::Allowlist,
    /// The device gateway's intervals and retention.
    pub gateway: GatewayConfig,
    /// Enrollment attempts allowed per client address per minute.
    pub enroll_rate_per_minute: u32,
    /// `BREEZE_TRUSTED_PROXIES`: load balancers whose `X-Forwarded-For` names the client.
    pub trusted_proxies: client_addr::TrustedProxies,
    /// Step-up approvals: how long calls wait, the webhook.
    pub approvals: approvals::ApprovalConfig,
    /// The AI assistant: its provider (none until configured), prices, limits.
    pub assistant: breeze_assistant::AssistantConfig,
    /// MCP catalog modes: the default mode, the `breeze_discover` page budget.
    pub catalog: catalog::CatalogConfig,
    /// `BREEZE_MCP_MAX_RESPONSE_BYTES`: the response budget of a tool call (0 = off).
    pub max_response_bytes: usize,
    /// The most items one batch call may carry (`BREEZE_MCP_MAX_ITEMS`).
    pub max_batch_items: usize,
    /// OAuth 2.1 for MCP clients (`MCP_OAUTH_ENABLED`); `None` when off.
    pub oauth: Option<oauth::OAuthSettings>,
    /// Tool Sources: the credential key (`TOOL_SOURCES_KEY`; `None`: sources can be listed,
    /// not created or called) and the egress settings (private egress, extra trusted roots).
    pub tool_sources: ToolSourcesConfig,
    /// The outside billing services: Stripe's and TD SYNNEX's addresses (accounts are the
    /// partners', sealed with `tool_sources.key`, through `tool_sources.egress`).
    pub billing: breeze_billing::BillingConfig,
    /// The alert engine's pace and notification channels (SMTP relay, webhook policy).
    pub alerts: breeze_alerts::AlertEngineConfig,
    /// The automation worker's pace.
    pub automations: automations::AutomationConfig,
    /// The deployment worker's pace.
    pub deployments: deployments::DeploymentConfig,
    /// Audit retention and its daily purge.
    pub audit: AuditRetentionConfig,
    /// The advisory feeds refreshed on a schedule (none by default).
    pub advisory_feeds: advisory_feeds::AdvisoryFeedsConfig,
    /// Who may read `GET /metrics` (off by default).
    pub metrics: metrics::MetricsAccess,
    /// How long a shutdown keeps serving with `/readyz` answering 503 before it drains
    /// (`BREEZE_SHUTDOWN_DELAY_SECONDS`): the time a load balancer needs to stop sending
    /// new connections here, so none arrives after the listener closes.
    pub shutdown_delay: Duration,
    /// Links each request's span to the trace its client sent (W3C `traceparent`), when traces
    /// are exported; set by the binary, which alone knows OpenTelemetry.
    pub span_parent: Option<SpanParent>,
}

/// Tool Sources' settings.
#[derive(Debug, Clone, Default)]
pub struct ToolSourcesConfig {
    /// The key credentials are sealed under.
    pub key: Option<breeze_sources::vault::Vault>,
    /// `TOOL_SOURCES_ALLOW_PRIVATE_EGRESS`, `TOOL_SOURCES_EXTRA_ROOTS`.
    pub egress: breeze_sources::egress::EgressConfig,
}

/// Gives a request's span (second argument) the parent its headers name.
pub type SetSpanParent = dyn Fn(&axum::http::HeaderMap, &tracing::Span) + Send + Sync;

/// Makes a request's `http` span a child of the trace context in its headers.
#[derive(Clone)]
pub struct SpanParent(pub Arc<SetSpanParent>);

impl std::fmt::Debug for SpanParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpanParent")
    }
}

/// The audit log's retention, applied by a daily job that [`serve`] starts.
#[derive(Debug, Clone, Default)]
pub struct AuditRetentionConfig {
    /// `BREEZE_AUDIT_RETENTION_DAYS`: `None` keeps records forever. It settles the cluster's
    /// retention only when nothing has yet (see `breeze_store::Store::settle_audit_retention`).
    pub days: Option<u32>,
    /// Whether `days` was set explicitly (not the default): an instance configured otherwise
    /// than the cluster's retention says so loudly, at start and at every daily run.
    pub explicit: bool,
    /// `BREEZE_AUDIT_ARCHIVE_DIR`: where purged records are archived. `None` runs no job (the
    /// database's retention is left as it is): for embedding and tests.
    pub archive_dir: Option<std::path::PathBuf>,
}

impl ServerConfig {
    /// Development defaults for `public_url`.
    pub fn development(public_url: &str) -> Self {
        Self {
            public_url: public_url.to_owned(),
            production: false,
            mcp: EngineConfig {
                public_base_url: public_url.to_owned(),
                ..EngineConfig::default()
            },
            require_execute_admin: true,
            tool_rate_limits: true,
            execute_allowlist: breeze_guard::Allowlist::None,
            gateway: GatewayConfig::default(),
            enroll_rate_per_minute: 10,
            trusted_proxies: client_addr::TrustedProxies::default(),
            approvals: approvals::ApprovalConfig {
                public_url: public_url.to_owned(),
                ..approvals::ApprovalConfig::default()
            },
            catalog: catalog::CatalogConfig::default(),
            assistant: breeze_assistant::AssistantConfig::default(),
            max_response_bytes: 0,
            max_batch_items: breeze_pipeline::envelope::DEFAULT_MAX_ITEMS,
            oauth: None,
            tool_sources: ToolSourcesConfig::default(),
            billing: breeze_billing::BillingConfig::new(public_url),
            alerts: breeze_alerts::AlertEngineConfig {
                notify: breeze_alerts::NotifyConfig {
                    // Development: a webhook receiver on this machine is the usual test.
                    allow_private_targets: true,
                    ..Default::default()
                },
                ..Default::default()
            },
            automations: automations::AutomationConfig::default(),
            deployments: deployments::DeploymentConfig::default(),
            audit: AuditRetentionConfig::default(),
            advisory_feeds: advisory_feeds::AdvisoryFeedsConfig::default(),
            metrics: metrics::MetricsAccess::default(),
            shutdown_delay: Duration::ZERO,
            span_parent: None,
        }
    }
}

impl ServerConfig {
    /// Whether cookies get the `Secure` attribute: in production, or whenever served over https.
    pub fn secure_cookies(&self) -> bool {
        self.production || self.public_url.starts_with("https://")
    }
}

/// Everything a handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub auth: AuthService,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<ServerConfig>,
    pub gateway: Gateway,
    /// Backs the per-address enrollment limit (and is shared with the MCP transport limits).
    pub limiter: Arc<dyn RateLimiter>,
    /// Every tool call, from every front door, goes through it.
    pub pipeline: Pipeline,
    /// The AI assistant's chat turns (its tool calls go through `pipeline`).
    pub assistant: breeze_assistant::Assistant,
    /// The OAuth authorization server, when enabled.
    pub oauth: Option<breeze_oauth::OAuth>,
    /// Counters for `GET /metrics`.
    pub metrics: Arc<metrics::Metrics>,
    /// Set when a shutdown begins: `/readyz` answers 503 from then on.
    pub shutting_down: Arc<std::sync::atomic::AtomicBool>,
    /// Live dashboard streams held, per person and organization (capped).
    pub(crate) dashboard_streams: Arc<pages::events::StreamSlots>,
    /// The outside billing services (payment links, Stripe webhooks, distributor lookups);
    /// `None` when the egress settings failed.
    pub billing: Option<breeze_billing::Billing>,
}

impl AppState {
    /// The deployment's scope rule, for the permission model at REST's and the dashboard's
    /// doors (the guard holds the same).
    pub(crate) fn scope_policy(&self) -> breeze_core::ScopePolicy {
        breeze_core::ScopePolicy {
            production: self.config.production,
            require_execute_admin: self.config.require_execute_admin,
        }
    }

    /// The state for `config`, with a device gateway over `store`.
    pub fn new(
        store: Store,
        auth: AuthService,
        clock: Arc<dyn Clock>,
        config: ServerConfig,
        limiter: Arc<dyn RateLimiter>,
    ) -> Self {
        let tools = breeze_tools::all();
        let metrics = Arc::new(metrics::Metrics::new(
            tools.iter().map(|t| t.name).collect::<Vec<_>>(),
        ));
        let limiter: Arc<dyn RateLimiter> = Arc::new(metrics::CountingLimiter {
            inner: limiter,
            metrics: metrics.clone(),
        });
        let gateway = Gateway::new(store.clone(), config.gateway.clone());
        let guard = Guard::new(
            GuardConfig {
                production: config.production,
                require_execute_admin: config.require_execute_admin,
                tool_rate_limits: config.tool_rate_limits,
                allowlist: config.execute_allowlist.clone(),
            },
            limiter.clone(),
            clock.clone(),
        );
        let pipeline = Pipeline::new(
            store.clone(),
            gateway.clone(),
            Arc::new(tools),
            guard,
            config.approvals.clone(),
        )
        .with_max_response_bytes(config.max_response_bytes)
        .with_max_batch_items(config.max_batch_items);
        // Egress settings are checked when the configuration is read; if the roots still
        // fail here, external tools are off (and said so) rather than the server.
        let (pipeline, billing) =
            match breeze_sources::egress::Egress::new(&config.tool_sources.egress) {
                Ok(egress) => {
                    let billing = breeze_billing::Billing::new(
                        store.clone(),
                        egress.clone(),
                        config.tool_sources.key.clone(),
                        config.billing.clone(),
                        clock.clone(),
                    );
                    let pipeline = pipeline
                        .with_sources(breeze_sources::service::Sources::new(
                            store.clone(),
                            config.tool_sources.key.clone(),
                            egress,
                            clock.clone(),
                        ))
                        .with_billing(billing.clone());
                    (pipeline, Some(billing))
                }
                Err(e) => {
                    tracing::error!(
                        error = %e,
                        "tool sources and billing services are off: the egress settings failed"
                    );
                    (pipeline, None)
                }
            };
        let assistant = breeze_assistant::Assistant::new(
            store.clone(),
            pipeline.clone(),
            limiter.clone(),
            config.assistant.clone(),
        );
        let oauth = config.oauth.as_ref().map(|o| {
            breeze_oauth::OAuth::new(
                store.clone(),
                clock.clone(),
                o.config.clone(),
                o.key.clone(),
                &o.cookie_secret,
                Arc::new(cimd_guard::GuardedFetcher::new(
                    Arc::new(oauth::HttpFetcher),
                    limiter.clone(),
                )),
            )
        });
        Self {
            store,
            auth,
            clock,
            config: Arc::new(config),
            gateway,
            limiter,
            pipeline,
            assistant,
            oauth,
            metrics,
            shutting_down: Arc::default(),
            dashboard_streams: Arc::default(),
            billing,
        }
    }
}

/// The running application: REST state and the MCP engine (whose sessions live as long as it).
#[derive(Clone)]
pub struct Breeze {
    pub state: AppState,
    pub mcp: Arc<Engine<mcp::BreezeMcp>>,
}

impl Breeze {
    /// Builds the application and starts its background tasks (audit writer) on the current
    /// runtime. `limiter` backs the transport rate limits.
    pub fn new(state: AppState) -> Self {
        Self::build(state, None)
    }

    /// [`Breeze::new`] as one instance of a cluster: MCP sessions, their caps and what travels
    /// between a session's requests are shared through `cluster` (Redis).
    pub fn clustered(state: AppState, cluster: Arc<breeze_mcp::cluster::SessionCluster>) -> Self {
        Self::build(state, Some(cluster))
    }

    fn build(state: AppState, cluster: Option<Arc<breeze_mcp::cluster::SessionCluster>>) -> Self {
        let limiter = state.limiter.clone();
        let audit = audit_writer::AuditWriter::spawn(state.store.audit_appender());
        let app = Arc::new(mcp::BreezeMcp::new(state.clone(), audit));
        let mut engine_config = state.config.mcp.clone();
        engine_config.fail_closed = state.config.production;
        let mcp = match cluster {
            Some(c) => Engine::in_cluster(app, engine_config, limiter, c),
            None => Engine::new(app, engine_config, limiter),
        };
        // Weak: the engine holds the state that holds the metrics.
        let engine = Arc::downgrade(&mcp);
        state
            .metrics
            .watch_mcp(move || engine.upgrade().map_or((0, None), |e| e.session_stats()));
        Self { state, mcp }
    }
}

/// The whole application.
pub fn app(breeze: Breeze) -> Router {
    let metrics = breeze.state.metrics.clone();
    let span_parent = breeze.state.config.span_parent.clone();
    let rest = Router::new()
        .merge(routes::health::router())
        .route("/metrics", axum::routing::get(metrics::scrape_with_token))
        .merge(pages::router())
        .merge(match breeze.state.config.oauth.as_ref() {
            Some(o) => routes::oauth::router(o.dcr.enabled),
            None => Router::new(),
        })
        .nest(
            "/api/v1",
            routes::api_router().route_layer(axum::middleware::from_fn_with_state(
                breeze.state.clone(),
                authz::org_routes,
            )),
        )
        .with_state(breeze.state);
    let router = Router::new()
        .merge(breeze_mcp::http::router(
            breeze.mcp,
            &breeze_mcp::http::Routes::default(),
        ))
        .merge(rest)
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed);
    // One `layer` call with the whole stack: axum wraps every route in each layer it is
    // given, cloning and boxing it on every request; composed first (and the edge's work
    // done by one service rather than axum middleware, see `edge`), that happens once.
    let edge = edge::EdgeLayer::new(metrics);
    let body_limit = DefaultBodyLimit::max(MAX_REST_BODY_BYTES);
    if !http_spans_recorded() {
        // The trace layer times every request and wraps every response body, a few per cent
        // of a request's CPU under load: for nothing when the filter records neither its span
        // nor its events (`BREEZE_LOG=warn` and no trace export). Failures are logged by the
        // edge either way.
        return router.layer(tower::ServiceBuilder::new().layer(edge).layer(body_limit));
    }
    router.layer(
        tower::ServiceBuilder::new()
            .layer(edge)
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(move |req: &axum::http::Request<_>| {
                        let id = req
                            .headers()
                            .get(REQUEST_ID_HEADER)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default();
                        let span = tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id);
                        if let Some(parent) = &span_parent {
                            (parent.0)(req.headers(), &span);
                        }
                        span
                    })
                    .on_failure(()),
            )
            .layer(body_limit),
    )
}

/// Whether the installed subscriber records the request span [`app`] opens (info, this crate's
/// target) or the trace layer's own request and response events (debug). Filters are fixed
/// once the process has started, so [`app`] asks once.
fn http_spans_recorded() -> bool {
    tracing::span_enabled!(tracing::Level::INFO)
        || tracing::event_enabled!(target: "tower_http::trace::on_request", tracing::Level::DEBUG)
        || tracing::event_enabled!(target: "tower_http::trace::on_response", tracing::Level::DEBUG)
}

/// Reports the gateway may hold for the alert engine before it misses some (the tick's sweep
/// catches those).
const INCREMENTAL_QUEUE: usize = 8192;

/// Wires the gateway's stored metrics and events reports to the alert engine's incremental
/// path: reports waiting together are coalesced per device and kind, then evaluated.
fn spawn_incremental_alerts(
    gateway: &Gateway,
    engine: Arc<breeze_alerts::AlertEngine>,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(INCREMENTAL_QUEUE);
    gateway.listen_reports(tx);
    engine.enable_incremental();
    tokio::spawn(async move {
        loop {
            let first = tokio::select! {
                () = stop.cancelled() => break,
                r = rx.recv() => match r { Some(r) => r, None => break },
            };
            let mut due = std::collections::HashSet::from([first]);
            while let Ok(more) = rx.try_recv() {
                due.insert(more);
            }
            let mut grouped: std::collections::HashMap<_, Vec<_>> =
                std::collections::HashMap::new();
            for r in due {
                grouped.entry((r.org, r.kind)).or_default().push(r.device);
            }
            for ((org, kind), devices) in grouped {
                if let Err(e) = engine.devices_reported(org, &devices, kind).await {
                    tracing::warn!(%org, error = %e, "incremental alert evaluation failed");
                }
            }
        }
    })
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains: no new connections or MCP
/// sessions, calls waiting for approval answer `pending_approval`, every SSE stream ends with a
/// `retry:` hint and every agent socket closes (so clients and agents reconnect, behind a load
/// balancer to another instance), and requests in flight finish (for at most 30 seconds).
pub async fn serve(
    listener: TcpListener,
    breeze: Breeze,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let sweeper_stop = tokio_util::sync::CancellationToken::new();
    breeze.mcp.spawn_sweeper(sweeper_stop.clone());
    breeze.state.gateway.spawn_sweeper(sweeper_stop.clone());
    // Other instances on the same PostgreSQL: their signals reach this one's caches and agents.
    breeze.state.store.spawn_bus_listener();
    // Readiness from the last probe, and statements that fail at once while it is down.
    breeze
        .state
        .store
        .spawn_health_monitor(sweeper_stop.clone().cancelled_owned());
    breeze
        .state
        .gateway
        .spawn_bus_follower(sweeper_stop.clone());
    breeze.state.pipeline.spawn_resumer(sweeper_stop.clone());
    let alerts = Arc::new(breeze_alerts::AlertEngine::new(
        breeze.state.store.clone(),
        breeze.state.config.alerts.clone(),
    ));
    spawn_incremental_alerts(&breeze.state.gateway, alerts.clone(), sweeper_stop.clone());
    let alerts_task = workers::spawn(alerts, sweeper_stop.clone());
    let store = &breeze.state.store;
    workers::spawn(
        Arc::new(groups::GroupTimer::new(
            store.clone(),
            groups::GroupTimerConfig::default(),
        )),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(automations::AutomationWorker::new(
            store.clone(),
            breeze.state.pipeline.clone(),
            breeze.state.config.alerts.notify.clone(),
            breeze.state.config.automations.clone(),
        )),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(patch_jobs::PatchJobDispatcher::new(
            store.clone(),
            breeze.state.gateway.clone(),
        )),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(compliance::ComplianceWorker::new(
            store.clone(),
            breeze.state.gateway.clone(),
            breeze.state.pipeline.clone(),
            compliance::ComplianceConfig::default(),
        )),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(deployments::DeploymentWorker::new(
            store.clone(),
            breeze.state.pipeline.clone(),
            breeze.state.config.deployments.clone(),
        )),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(contract_billing::ContractBillingWorker::new(store.clone())),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(scan_schedules::ScanScheduleWorker::new(
            store.clone(),
            breeze.state.pipeline.clone(),
        )),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(report_schedules::ReportScheduleWorker::new(
            store.clone(),
            breeze.state.pipeline.clone(),
        )),
        sweeper_stop.clone(),
    );
    if let Some(sources) = breeze.state.pipeline.sources() {
        workers::spawn(
            Arc::new(tool_sources::DiscoveryWorker::new(sources.clone())),
            sweeper_stop.clone(),
        );
    }
    if store.has_write_ahead_log() {
        workers::spawn(
            Arc::new(housekeeping::Checkpointer(store.clone())),
            sweeper_stop.clone(),
        );
    }
    if let Some(dir) = &breeze.state.config.audit.archive_dir {
        let retention = Arc::new(housekeeping::AuditRetention {
            store: store.clone(),
            days: breeze.state.config.audit.days,
            explicit: breeze.state.config.audit.explicit,
            archive_dir: dir.clone(),
        });
        // Settled (or found to differ, loudly) at start; the purge waits for the first run.
        let at_start = retention.clone();
        tokio::spawn(async move {
            if let Err(e) = at_start.settle().await {
                tracing::warn!(error = %e, "cannot read the audit retention");
            }
        });
        workers::spawn(retention, sweeper_stop.clone());
    }
    workers::spawn(
        Arc::new(housekeeping::AiSessionExpiry {
            store: store.clone(),
            idle: breeze.state.config.assistant.idle_expiry,
        }),
        sweeper_stop.clone(),
    );
    workers::spawn(
        Arc::new(housekeeping::LiveQueryRetention(store.clone())),
        sweeper_stop.clone(),
    );
    if !breeze.state.config.advisory_feeds.urls.is_empty() {
        workers::spawn(
            Arc::new(advisory_feeds::AdvisoryRefresh::new(
                store.clone(),
                breeze.state.config.advisory_feeds.clone(),
            )),
            sweeper_stop.clone(),
        );
    }
    if let Some(oauth) = breeze.state.oauth.clone() {
        workers::spawn(
            Arc::new(housekeeping::OAuthSweeper(oauth)),
            sweeper_stop.clone(),
        );
    }
    // Streamed replies are small writes; without TCP_NODELAY each waits ~40 ms for Nagle.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    if let Some(addr) = breeze.state.config.metrics.addr {
        let metrics_listener = TcpListener::bind(addr).await?;
        let router = metrics::listener_router(breeze.state.clone());
        let stop = sweeper_stop.clone();
        tokio::spawn(async move {
            let served = axum::serve(metrics_listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "the metrics listener failed");
            }
        });
    }
    let gateway = breeze.state.gateway.clone();
    let approvals = breeze.state.pipeline.approvals().clone();
    let engine = breeze.mcp.clone();
    let shutting_down = breeze.state.shutting_down.clone();
    let delay = breeze.state.config.shutdown_delay;
    let make = app(breeze).into_make_service_with_connect_info::<std::net::SocketAddr>();
    let server = axum::serve(listener, make).with_graceful_shutdown(async move {
        shutdown.await;
        // Not ready any more, but still serving: the load balancer stops sending new
        // connections before the listener closes, so none is refused mid-way.
        shutting_down.store(true, std::sync::atomic::Ordering::SeqCst);
        if !delay.is_zero() {
            tracing::info!(
                delay_ms = delay.as_millis(),
                "shutting down: /readyz answers 503 while the load balancer catches up"
            );
            tokio::time::sleep(delay).await;
        }
        // Calls waiting for approval answer `pending_approval` while their connections are
        // still open; no new MCP sessions; SSE streams end with a reconnect hint; agents move.
        approvals.drain();
        engine.drain();
        gateway.close_all();
        let _ = tx.send(());
    });
    let drain_deadline = async {
        let _ = rx.await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    };
    let result = tokio::select! {
        r = server => r,
        () = drain_deadline => {
            tracing::warn!("in-flight requests did not finish within 30 s; stopping anyway");
            Ok(())
        }
    };
    sweeper_stop.cancel();
    // The engine gives its tick's lease up as it stops, so another instance ticks at once
    // rather than after the lease lapses; a moment's wait for it, no more.
    let _ = tokio::time::timeout(Duration::from_secs(2), alerts_task).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether [`http_spans_recorded`] under a subscriber with `filter`.
    fn recorded(filter: &str) -> bool {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .finish();
        tracing::subscriber::with_default(subscriber, http_spans_recorded)
    }

    #[test]
    fn the_trace_layer_runs_only_when_its_span_or_events_are_recorded() {
        assert!(!recorded("warn"));
        assert!(!recorded("info,breeze_server=warn"));
        assert!(recorded("info"));
        assert!(recorded("warn,breeze_server=info"));
        assert!(recorded("warn,tower_http=debug"));
        assert!(recorded("warn,tower_http::trace::on_response=debug"));
    }
}
