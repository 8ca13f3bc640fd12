//! `GET /metrics`: the server's counters in the Prometheus text format 0.0.4, or OpenMetrics
//! 1.0.0 when the scraper's `Accept` prefers it.
//!
//! Off unless configured ([`MetricsAccess`]): on a listener of its own (`BREEZE_METRICS_ADDR`,
//! unauthenticated: bind it where only the scraper reaches), and/or on the main listener to a
//! bearer token (`BREEZE_METRICS_TOKEN`, compared in constant time). Nothing else is served on
//! the metrics listener.
//!
//! The hot path only touches atomics: per-tool counters and histograms are made once, for every
//! registered tool, and looked up by name (a tool the registry does not know is counted as
//! `other`); the per-route HTTP counters go through `prometheus-client`'s family (a read lock
//! and a hash once the route was seen). Gauges that the process already knows (agents
//! connected, database pool) are read when scraped.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    extract::{MatchedPath, State},
    http::{HeaderMap, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use breeze_guard::Refusal;
use breeze_limits::{LimiterError, RateDecision, RateLimiter};
use breeze_pipeline::CallOutcome;
use futures::future::BoxFuture;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::AppState;

/// Who may read `/metrics`: `BREEZE_METRICS_ADDR` and `BREEZE_METRICS_TOKEN`; neither means off.
#[derive(Clone, Default)]
pub struct MetricsAccess {
    /// A listener of its own, serving `/metrics` only, without authentication.
    pub addr: Option<std::net::SocketAddr>,
    /// `/metrics` on the main listener to `Authorization: Bearer <token>`.
    pub token: Option<String>,
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAccess")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcome {
    tool: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: String,
    decision: &'static str,
}

/// How a `tools/call` ended, as the label `outcome`.
const OUTCOMES: [&str; 6] = [
    "ok",
    "tool_error",
    "pending_approval",
    "batch",
    "refused",
    "unknown_tool",
];

/// One tool's counters (one per outcome) and its latency histogram.
struct ToolMetrics {
    calls: [Counter; OUTCOMES.len()],
    seconds: Histogram,
}

/// The process's metrics. Cheap to share (`Arc`); every method is a few atomic operations.
pub struct Metrics {
    registry: Registry,
    http: Family<HttpLabels, Counter>,
    tools: HashMap<&'static str, ToolMetrics>,
    other_tool: ToolMetrics,
    refusals: Family<Reason, Counter>,
    approval_waits: Counter,
    limits: Family<LimitLabels, Counter>,
    agents: Gauge,
    pool_size: Gauge,
    pool_idle: Gauge,
    db_up: Gauge,
    journal_backlog: Gauge,
    sockets_moved: Counter,
    mcp_sessions: Gauge,
    redis_round_trips: Counter,
    redis_failures: Counter,
    cluster_notes_sent: Counter,
    cluster_notes_received: Counter,
    /// Reads the MCP engine's sessions and cluster counts (set once the engine exists).
    mcp: std::sync::OnceLock<McpStats>,
}

/// Reads live MCP sessions and cluster counts, when scraped.
type McpStats = Box<dyn Fn() -> (usize, Option<breeze_mcp::cluster::ClusterStats>) + Send + Sync>;

/// Brings `counter` up to `total` (a count kept elsewhere, monotonic).
fn catch_up(counter: &Counter, total: u64) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

fn latency_histogram() -> Histogram {
    // 1 ms … ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    /// Metrics for a server with `tools` registered.
    pub fn new<'a>(tools: impl IntoIterator<Item = &'static str> + 'a) -> Self {
        let mut registry = Registry::with_prefix("breeze");
        let http = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by matched route, method and status",
            http.clone(),
        );
        let calls = Family::<ToolOutcome, Counter>::default();
        registry.register(
            "mcp_tool_calls",
            "MCP tools/call requests by tool and outcome",
            calls.clone(),
        );
        let seconds = Family::<ToolLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register(
            "mcp_tool_call_seconds",
            "Time from a tools/call reaching the pipeline to its outcome (an agent-backed tool's \
             time includes the command's round trip to the device)",
            seconds.clone(),
        );
        let tool = |name: &'static str| ToolMetrics {
            calls: OUTCOMES.map(|outcome| {
                calls.get_or_create_owned(&ToolOutcome {
                    tool: name,
                    outcome,
                })
            }),
            seconds: seconds.get_or_create_owned(&ToolLabel { tool: name }),
        };
        let tools = tools.into_iter().map(|name| (name, tool(name))).collect();
        let other_tool = tool("other");
        let refusals = Family::<Reason, Counter>::default();
        registry.register(
            "guard_refusals",
            "Tool calls the guard refused, by reason",
            refusals.clone(),
        );
        let approval_waits = Counter::default();
        registry.register(
            "approval_waits",
            "Tier 3 calls answered pending_approval (the approval wait ran out first)",
            approval_waits.clone(),
        );
        let limits = Family::<LimitLabels, Counter>::default();
        registry.register(
            "rate_limit_decisions",
            "Rate-limit decisions by limit (the key's first segment) and decision",
            limits.clone(),
        );
        let agents = Gauge::default();
        registry.register(
            "agents_connected",
            "Agents holding a socket to this instance",
            agents.clone(),
        );
        let pool_size = Gauge::default();
        registry.register(
            "db_pool_connections",
            "Database connections open in the pool",
            pool_size.clone(),
        );
        let pool_idle = Gauge::default();
        registry.register(
            "db_pool_idle_connections",
            "Open database connections not in use",
            pool_idle.clone(),
        );
        let db_up = Gauge::default();
        registry.register(
            "db_up",
            "The database's last health probe: 1 answers and takes writes, 0 down or read-only, -1 not probed (SQLite)",
            db_up.clone(),
        );
        let journal_backlog = Gauge::default();
        registry.register(
            "audit_journal_backlog_records",
            "Audit records in this instance's journal not yet in the database",
            journal_backlog.clone(),
        );
        let sockets_moved = Counter::default();
        registry.register(
            "agent_sockets_moved",
            "Agent sockets dropped because the agent connected to another instance",
            sockets_moved.clone(),
        );
        let mcp_sessions = Gauge::default();
        registry.register(
            "mcp_sessions",
            "MCP sessions live on this instance (adopted from other instances included)",
            mcp_sessions.clone(),
        );
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let redis_round_trips = counter(
            &mut registry,
            "redis_session_round_trips",
            "Commands and scripts sent to Redis for MCP sessions (every attempt)",
        );
        let redis_failures = counter(
            &mut registry,
            "redis_session_failures",
            "Of those, the ones that failed or timed out",
        );
        let cluster_notes_sent = counter(
            &mut registry,
            "cluster_notes_sent",
            "Notes published to the other instances (stream messages, answers, cancellations, session ends)",
        );
        let cluster_notes_received = counter(
            &mut registry,
            "cluster_notes_received",
            "Notes heard from the cluster",
        );
        Self {
            registry,
            http,
            tools,
            other_tool,
            refusals,
            approval_waits,
            limits,
            agents,
            pool_size,
            pool_idle,
            db_up,
            journal_backlog,
            sockets_moved,
            mcp_sessions,
            redis_round_trips,
            redis_failures,
            cluster_notes_sent,
            cluster_notes_received,
            mcp: std::sync::OnceLock::new(),
        }
    }

    /// Reads the MCP engine's sessions (and cluster counts) through `stats` at every scrape.
    pub fn watch_mcp(
        &self,
        stats: impl Fn() -> (usize, Option<breeze_mcp::cluster::ClusterStats>) + Send + Sync + 'static,
    ) {
        let _ = self.mcp.set(Box::new(stats));
    }

    /// Counts a `tools/call` of `tool` that ended with `outcome` after `elapsed`.
    pub fn tool_call(&self, tool: &str, outcome: &CallOutcome, elapsed: Duration) {
        let m = self.tools.get(tool).unwrap_or(&self.other_tool);
        let i = match outcome {
            CallOutcome::Output(_) => 0,
            CallOutcome::Failed(_) | CallOutcome::ReplayedError(_) => 1,
            CallOutcome::Pending(_) => {
                self.approval_waits.inc();
                2
            }
            CallOutcome::Batch { .. } => 3,
            CallOutcome::Refused(r) => {
                self.refusals
                    .get_or_create(&Reason {
                        reason: refusal_reason(r),
                    })
                    .inc();
                4
            }
            CallOutcome::UnknownTool => 5,
        };
        m.calls[i].inc();
        m.seconds.observe(elapsed.as_secs_f64());
    }

    /// Counts one rate-limit decision on `key`.
    fn limit_decision(&self, key: &str, decision: &'static str) {
        let limit = match key.split_once(':') {
            Some((prefix, _)) if prefix.len() <= 24 => prefix,
            _ => "other",
        };
        self.limits
            .get_or_create(&LimitLabels {
                limit: limit.to_owned(),
                decision,
            })
            .inc();
    }

    /// The text exposition, with the gauges read from `state` now.
    pub fn render(&self, state: &AppState) -> String {
        self.agents
            .set(i64::try_from(state.gateway.connected_count()).unwrap_or(i64::MAX));
        let (size, idle) = state.store.pool_stats();
        self.pool_size.set(i64::from(size));
        self.pool_idle.set(i64::try_from(idle).unwrap_or(i64::MAX));
        self.db_up.set(match state.store.health() {
            breeze_store::DbHealth::Ok => 1,
            breeze_store::DbHealth::Down { .. } | breeze_store::DbHealth::ReadOnly { .. } => 0,
            breeze_store::DbHealth::Unknown => -1,
        });
        self.journal_backlog.set(
            state
                .store
                .audit_journal_backlog()
                .map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX)),
        );
        catch_up(&self.sockets_moved, state.gateway.moved_sockets());
        if let Some(read) = self.mcp.get() {
            let (sessions, cluster) = read();
            self.mcp_sessions
                .set(i64::try_from(sessions).unwrap_or(i64::MAX));
            if let Some(c) = cluster {
                catch_up(&self.redis_round_trips, c.redis_round_trips);
                catch_up(&self.redis_failures, c.redis_failures);
                catch_up(&self.cluster_notes_sent, c.notes_sent);
                catch_up(&self.cluster_notes_received, c.notes_received);
            }
        }
        let mut out = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A guard refusal's reason as a label.
fn refusal_reason(r: &Refusal) -> &'static str {
    match r {
        Refusal::MissingScope { .. } => "missing_scope",
        Refusal::NoRole => "no_role",
        Refusal::MissingPermission(_) => "missing_permission",
        Refusal::PersonOnly { .. } => "person_only",
        Refusal::RateLimited { .. } => "rate_limited",
        Refusal::LimiterUnavailable => "limiter_unavailable",
        Refusal::NotAllowlisted { .. } => "not_allowlisted",
        Refusal::Blocked { .. } => "blocked",
        Refusal::NotApprovable { .. } => "not_approvable",
    }
}

impl Metrics {
    /// Counts one HTTP response: its route (the matched pattern, `unmatched` for none), method
    /// and status. Called by the edge layer ([`crate::edge`]) once per request.
    pub(crate) fn http_response(
        &self,
        route: Option<&MatchedPath>,
        method: &Method,
        status: StatusCode,
    ) {
        let method = match *method {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::PATCH => "PATCH",
            Method::DELETE => "DELETE",
            Method::HEAD => "HEAD",
            Method::OPTIONS => "OPTIONS",
            _ => "other",
        };
        self.http
            .get_or_create(&HttpLabels {
                route: route.map_or("unmatched", MatchedPath::as_str).to_owned(),
                method,
                status: status.as_u16(),
            })
            .inc();
    }
}

/// The content type of the Prometheus text format 0.0.4, the default.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of OpenMetrics 1.0.0, answered when the scraper prefers it.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether `accept` prefers OpenMetrics to the Prometheus text format: its quality for
/// `application/openmetrics-text` is positive and at least that of `text/plain` (or of a
/// wildcard). No `Accept` (or one naming neither) gets the Prometheus text format, which every
/// scraper reads; Prometheus itself asks for OpenMetrics first.
pub fn prefers_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition: no `# EOF` or `# UNIT` lines,
/// and a counter's `# TYPE` and `# HELP` name its samples (`foo_total`), as that format has it.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(name) = rest.strip_suffix(" counter")
        {
            counters.insert(name.to_owned());
        }
    }
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# TYPE ", "# HELP "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            (counters.contains(name) && !name.ends_with("_total"))
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(r) => out.push_str(r.trim_end()),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The scrape response, in the format the scraper's `Accept` prefers.
fn exposition(state: &AppState, headers: &HeaderMap) -> Response {
    let text = state.metrics.render(state);
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if prefers_openmetrics(accept) {
        ([(header::CONTENT_TYPE, OPENMETRICS_TEXT)], text).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            to_prometheus_text(&text),
        )
            .into_response()
    }
}

/// `GET /metrics` on the main listener: only to the configured bearer token (404 when none is
/// configured, 401 otherwise).
pub(crate) async fn scrape_with_token(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Response {
    let Some(token) = state.config.metrics.token.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        presented.as_bytes(),
        token.as_bytes(),
    )) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
        )
            .into_response();
    }
    exposition(&state, &headers)
}

/// The router of the metrics listener (`BREEZE_METRICS_ADDR`): `GET /metrics`, nothing else.
pub fn listener_router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(
                |State(state): State<AppState>, headers: HeaderMap| async move {
                    exposition(&state, &headers)
                },
            ),
        )
        .with_state(state)
}

/// A rate limiter that counts the decisions of the one it wraps.
pub(crate) struct CountingLimiter {
    pub(crate) inner: Arc<dyn RateLimiter>,
    pub(crate) metrics: Arc<Metrics>,
}

impl RateLimiter for CountingLimiter {
    fn check<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        Box::pin(async move {
            let decided = self.inner.check(key, limit, window).await;
            let decision = match &decided {
                Ok(d) if d.allowed => "allowed",
                Ok(_) => "refused",
                Err(_) => "unavailable",
            };
            self.metrics.limit_decision(key, decision);
            decided
        })
    }

    fn peek<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        self.inner.peek(key, limit, window)
    }

    fn reset<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), LimiterError>> {
        self.inner.reset(key)
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}
