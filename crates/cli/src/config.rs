//! Settings: read once from the environment and command-line flags, validated, then passed
//! explicitly. This is the only place Breeze reads environment variables.
//!
//! A flag beats its environment variable, which beats the default. An unknown `BREEZE_*`
//! variable or an invalid value refuses to start, naming the setting.

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf};

use anyhow::bail;
use clap::Args;

/// Environment variables Breeze understands, with what each is for.
pub(crate) const KNOWN_SETTINGS: &[(&str, &str)] = &[
    (
        "BREEZE_LISTEN",
        "address to listen on (default 127.0.0.1:3000)",
    ),
    (
        "DATABASE_URL",
        "sqlite://… or postgres://… (default sqlite://./breeze-data/breeze.db)",
    ),
    (
        "REDIS_URL",
        "redis://… (or redis+sentinel://…) for shared rate limits and sessions (optional)",
    ),
    (
        "BREEZE_REDIS_PREFIX",
        "prefix of every Redis key and channel, for deployments sharing one Redis (default breeze:)",
    ),
    (
        "BREEZE_ENV",
        "development or production (default development)",
    ),
    (
        "BREEZE_PUBLIC_URL",
        "URL clients use to reach this server (default http://<listen>)",
    ),
    (
        "BREEZE_DATA_DIR",
        "directory for the SQLite file and demo.json (default ./breeze-data)",
    ),
    (
        "BREEZE_LOG",
        "log filter, e.g. info or breeze_server=debug (default info)",
    ),
    ("BREEZE_LOG_FORMAT", "pretty or json (default pretty)"),
    (
        "BREEZE_APPROVAL_WEBHOOK_URL",
        "called (POST, JSON) with each new approval request, e.g. to notify a phone (optional)",
    ),
    (
        "BREEZE_ALERT_TICK_SECONDS",
        "how often the alert engine evaluates the rules (default 30)",
    ),
    (
        "BREEZE_SMTP_HOST",
        "SMTP relay for email notification channels (optional; without it email channels record a failure)",
    ),
    (
        "BREEZE_SMTP_PORT",
        "the relay's port (default 587 with starttls, 465 with tls, 25 with none)",
    ),
    (
        "BREEZE_SMTP_SECURITY",
        "starttls, tls or none (default starttls)",
    ),
    (
        "BREEZE_SMTP_FROM",
        "the From address of alert mail, e.g. Breeze <alerts@example.com> (required with BREEZE_SMTP_HOST)",
    ),
    ("BREEZE_SMTP_USERNAME", "the relay's user (optional)"),
    ("BREEZE_SMTP_PASSWORD", "the relay's password (optional)"),
    (
        "BREEZE_WEBHOOK_ALLOW_PRIVATE",
        "let alert webhooks reach loopback and private addresses (default true in development, false in production)",
    ),
    (
        "BREEZE_AI_PROVIDER",
        "the AI assistant's model provider: anthropic or openai (an OpenAI-compatible server: vLLM, Ollama, LM Studio); unset, the chat says how to configure one",
    ),
    (
        "BREEZE_AI_MODEL",
        "the model (default claude-sonnet-4-5-20250929 for anthropic; required for openai)",
    ),
    (
        "BREEZE_AI_BASE_URL",
        "the provider's base URL (default https://api.anthropic.com, or https://api.openai.com/v1)",
    ),
    (
        "BREEZE_AI_API_KEY",
        "the provider's key (required for anthropic; optional for a self-hosted server); never logged or returned",
    ),
    (
        "BREEZE_AI_MAX_TOKENS",
        "the longest answer, in tokens (default 4096)",
    ),
    (
        "BREEZE_AI_TEMPERATURE",
        "sampling temperature, 0 to 2 (default: the provider's)",
    ),
    (
        "BREEZE_AI_CONTEXT_TOKENS",
        "the model's context window: longer chats are trimmed, oldest tool results first (default 200000)",
    ),
    (
        "BREEZE_AI_PRICING",
        "model prices over the defaults, in cents per million tokens: model=INPUT/OUTPUT,… (a model without a price has an unknown cost)",
    ),
    (
        "BREEZE_AI_SESSION_IDLE_DAYS",
        "days after which an idle chat session expires, keeping its history (default 30)",
    ),
    (
        "BREEZE_AI_APPROVAL_TIMEOUT_SECONDS",
        "how long a chat's Tier 3 call waits for a decision before it is rejected (1-300, default 300)",
    ),
    (
        "BREEZE_AI_MESSAGES_PER_MINUTE",
        "chat messages per person per minute (default 20)",
    ),
    (
        "MCP_APPROVAL_WAIT_SECONDS",
        "how long a Tier 3 call waits for approval before answering pending (0-300, default 45: below the 60 s request timeout of common MCP clients)",
    ),
    (
        "BREEZE_AUTH_CACHE_MS",
        "ms an API key is served from memory: the longest another process's revocation goes unseen (0-60000, 0 = off, default 1000)",
    ),
    (
        "BREEZE_ENROLL_RATE_PER_MINUTE",
        "agent enrollments allowed per client address per minute (default 10)",
    ),
    (
        "BREEZE_TRUSTED_PROXIES",
        "load balancers (addresses or CIDR networks, comma-separated) whose X-Forwarded-For names the client, for per-address limits (default none)",
    ),
    (
        "BREEZE_METRICS_RAW_DAYS",
        "days raw metric points are kept (default 7)",
    ),
    (
        "BREEZE_METRICS_HOURLY_DAYS",
        "days hourly metric rollups are kept (default 90)",
    ),
    (
        "BREEZE_METRICS_DAILY_DAYS",
        "days daily metric rollups are kept (default 730)",
    ),
    (
        "BREEZE_ADVISORY_FEEDS",
        "URLs of OSV advisories (osv.dev's per-ecosystem all.zip, a mirror, a JSON record), comma-separated, imported and refreshed on a schedule (default none)",
    ),
    (
        "BREEZE_ADVISORY_REFRESH_HOURS",
        "hours between checks of each advisory feed (default 24; 1 to 720)",
    ),
    (
        "BREEZE_ADVISORY_MAX_MB",
        "the largest advisory feed download, in MiB (default 1024)",
    ),
    (
        "BREEZE_AUDIT_RETENTION_DAYS",
        "days audit records are kept before they are archived and purged (default 90; 0 = keep forever)",
    ),
    (
        "BREEZE_AUDIT_SYNCHRONOUS_COMMIT",
        "PostgreSQL: request audit records wait for their commit to reach the disk, so a PostgreSQL crash loses none (default true; false = asynchronous commits, which a crash may lose)",
    ),
    (
        "BREEZE_AUDIT_JOURNAL_DIR",
        "PostgreSQL: this instance's own directory where a request's audit record that shares no insert is journaled, then moved into the database moments later (default <data dir>/audit-journal; off = insert every record before answering)",
    ),
    (
        "BREEZE_AUDIT_ARCHIVE_DIR",
        "where purged audit records are archived as gzip JSON lines (default <data dir>/audit-archive)",
    ),
    (
        "BREEZE_PDF_FONT",
        "TrueType font PDF reports embed for text beyond Latin-1 (default: DejaVu Sans Condensed or Sans if installed, else Helvetica)",
    ),
    (
        "BREEZE_METRICS_ADDR",
        "serve GET /metrics (Prometheus) on this address of its own, e.g. 127.0.0.1:9464 (optional)",
    ),
    (
        "BREEZE_METRICS_TOKEN",
        "serve GET /metrics on the main listener to `Authorization: Bearer <token>` (optional; 16+ characters)",
    ),
    (
        "BREEZE_SHUTDOWN_DELAY_SECONDS",
        "on SIGTERM, seconds to keep serving with /readyz at 503 before draining, so a load balancer stops sending first (0-300; default 5 in production, 0 in development)",
    ),
    (
        "TOOL_SOURCES_KEY",
        "32 random bytes in base64 sealing tool sources' credentials; required in production once a source exists (development keeps one in the data directory)",
    ),
    (
        "BREEZE_SOURCE_CREDENTIAL",
        "`breeze sources add`: the source's credential as JSON, instead of --credential (which other users can see in the process list)",
    ),
    (
        "TOOL_SOURCES_ALLOW_PRIVATE_EGRESS",
        "let tool sources reach private, loopback and link-local addresses (self-hosted only; default false)",
    ),
    (
        "TOOL_SOURCES_EXTRA_ROOTS",
        "a PEM file of extra root certificates tool sources may present (optional)",
    ),
    (
        "BREEZE_STRIPE_SECRET_KEY",
        "`breeze billing stripe`: the partner's Stripe secret key (sealed before it is stored)",
    ),
    (
        "BREEZE_STRIPE_WEBHOOK_SECRET",
        "`breeze billing stripe`: the signing secret of the partner's Stripe webhook endpoint",
    ),
    (
        "BREEZE_SYNNEX_PASSWORD",
        "`breeze billing synnex`: the partner's TD SYNNEX EC Express password",
    ),
    (
        "BREEZE_STRIPE_API_URL",
        "Stripe's API for payment links (default https://api.stripe.com; a stand-in or proxy in tests)",
    ),
    (
        "BREEZE_SYNNEX_API_URL",
        "TD SYNNEX EC Express for distributor lookups, every region (default: the partner's region, ec.us.tdsynnex.com or ec.ca.tdsynnex.com)",
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "export traces over OTLP/HTTP to this collector (…/v1/traces is added); off when unset",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "the traces URL itself, instead of OTEL_EXPORTER_OTLP_ENDPOINT",
    ),
    (
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "http/protobuf (default) or http/json (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL wins)",
    ),
    (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "key=value,… sent with every export (a collector's credentials)",
    ),
    (
        "OTEL_SERVICE_NAME",
        "the traces' service.name (default breeze)",
    ),
    (
        "OTEL_TRACES_SAMPLER_ARG",
        "share of traces kept, 0.0 to 1.0, parent-based (default 1.0)",
    ),
    (
        "BREEZE_AGENT_CONFIG",
        "`breeze agent`: the agent's config file",
    ),
    (
        "BREEZE_AGENT_LOG",
        "`breeze agent`: the agent's stderr log filter (default info)",
    ),
    (
        "BREEZE_AGENT_EXIT_WITH_PARENT",
        "internal: set by `breeze demo` on its local agent",
    ),
    (
        "BREEZE_DEMO_AGENT",
        "whether `breeze demo` starts a local agent for this machine (default true)",
    ),
    (
        "BREEZE_URL",
        "`breeze mcp stdio`: the Breeze server to forward to, e.g. https://rmm.example.com",
    ),
    (
        "BREEZE_API_KEY",
        "`breeze mcp stdio`: the API key (brz_…) it presents (AUTH_TOKEN is read too)",
    ),
    (
        "BREEZE_USER",
        "`breeze chat`: the person's email it signs in as (default: the demo's admin)",
    ),
    (
        "BREEZE_PASSWORD",
        "`breeze chat`: that person's password (otherwise asked for on the terminal)",
    ),
    (
        "BREEZE_TEST_POSTGRES_URL",
        "PostgreSQL for the test-suite (tests only)",
    ),
    (
        "BREEZE_TEST_REDIS_URL",
        "Redis for the test-suite (tests only)",
    ),
    (
        "BREEZE_MCP_CATALOG",
        "MCP catalog of a connection that chooses none: full or consolidated (default full)",
    ),
    (
        "BREEZE_MCP_DISCOVER_BYTES",
        "most bytes of one breeze_discover page, at least 1024 (default 8192)",
    ),
    (
        "MCP_MAX_SESSIONS_PER_KEY",
        "MCP sessions one API key or OAuth grant may hold, Streamable HTTP and legacy SSE together (default 5)",
    ),
    (
        "MCP_MAX_SSE_SESSIONS_PER_KEY",
        "the specification's name of MCP_MAX_SESSIONS_PER_KEY, read as it with a notice",
    ),
    (
        "MCP_SESSION_TTL_SECONDS",
        "seconds an MCP session may sit idle before it ends (60-86400, default 1800)",
    ),
    (
        "NODE_ENV",
        "the specification's production switch: production is read as BREEZE_ENV=production (they must agree when both are set)",
    ),
    (
        "MCP_MAX_SESSIONS_PER_ORG",
        "MCP sessions one organization's keys may hold together (default 25)",
    ),
    ("MCP_MAX_SESSIONS", "MCP sessions server-wide (default 100)"),
    (
        "MCP_SSE_RATE_LIMIT_PER_MINUTE",
        "MCP stream connections per key per minute (default 30)",
    ),
    (
        "MCP_MESSAGE_RATE_LIMIT_PER_MINUTE",
        "MCP messages per key per minute (default 120)",
    ),
    (
        "MCP_MESSAGE_MAX_BODY_BYTES",
        "largest MCP request body (default 65536)",
    ),
    (
        "MCP_REQUIRE_EXECUTE_ADMIN",
        "production: Tier 3 needs ai:execute_admin (default true)",
    ),
    (
        "MCP_TOOL_RATE_LIMITS",
        "each tool's own per-user rate limit (default true; false only in development, e.g. to benchmark a tool)",
    ),
    (
        "MCP_ALLOWED_ORIGINS",
        "comma-separated browser origins allowed to call MCP",
    ),
    (
        "BREEZE_MCP_MAX_ITEMS",
        "most items one batch tool call may carry (default 1000)",
    ),
    (
        "MCP_EXECUTE_TOOL_ALLOWLIST",
        "production: Tier 3+ tools allowed (comma-separated, * for all)",
    ),
    (
        "MCP_OAUTH_ENABLED",
        "OAuth 2.1 for MCP clients: mounts /oauth/* and /.well-known/oauth-*, MCP accepts Bearer tokens (default false)",
    ),
    (
        "OAUTH_ISSUER",
        "public issuer base URL (default: the origin of BREEZE_PUBLIC_URL)",
    ),
    (
        "OAUTH_RESOURCE_URL",
        "the protected resource tokens are for (default BREEZE_PUBLIC_URL/mcp)",
    ),
    (
        "OAUTH_JWKS_PRIVATE_JWK",
        "EdDSA (OKP/Ed25519) private JWK signing access tokens; required in production with OAuth",
    ),
    (
        "OAUTH_JWKS_PUBLIC_JWK",
        "its public JWK (derived when unset; must match when set)",
    ),
    (
        "OAUTH_COOKIE_SECRET",
        "secret (32+ characters) keying the consent page's tokens; required in production with OAuth",
    ),
    (
        "OAUTH_DCR_ENABLED",
        "serve Dynamic Client Registration at /oauth/reg (default false)",
    ),
    (
        "OAUTH_DCR_REQUIRE_IAT",
        "registration needs an initial access token: a Breeze API key as Authorization: Bearer (default false)",
    ),
    (
        "OAUTH_DCR_ALLOW_ANONYMOUS",
        "deliberately allow anonymous registration, as Claude.ai and ChatGPT need (default false)",
    ),
    (
        "OAUTH_DCR_IGNORE_SOFTWARE_ID",
        "accept a registration naming a software_id (mcp-remote sends one), the field ignored: never stored nor shown (default false: refused)",
    ),
    (
        "OAUTH_CIMD_ENABLED",
        "resolve https client_ids as client ID metadata documents and advertise it (Claude Code uses them); false when this server has no outbound HTTPS (default true)",
    ),
    (
        "OAUTH_CONSENT_URL_BASE",
        "origin of the sign-in page when the web app is served elsewhere (default: this server)",
    ),
    (
        "BREEZE_MCP_MAX_RESPONSE_BYTES",
        "largest tool answer in bytes: a larger read fails with RESPONSE_TOO_LARGE, a larger write answers payloadOmitted (default 0 = off)",
    ),
];

/// Prefixes whose variables must all be known.
const CHECKED_PREFIXES: [&str; 3] = ["BREEZE_", "MCP_", "OAUTH_"];

/// Names the specification gives settings that Breeze names better: `(spec name, Breeze name,
/// why the Breeze name)`. The spec name is read as the Breeze name, with a one-line notice;
/// both set to different values refuse to start.
pub(crate) const ALIASES: &[(&str, &str, &str)] = &[(
    "MCP_MAX_SSE_SESSIONS_PER_KEY",
    "MCP_MAX_SESSIONS_PER_KEY",
    "the cap counts Streamable HTTP sessions as well as legacy SSE ones",
)];

/// `env` with every [`ALIASES`] spec name read as its Breeze name, and the notices saying so.
fn resolve_aliases(
    env: &BTreeMap<String, String>,
) -> anyhow::Result<(BTreeMap<String, String>, Vec<String>)> {
    let mut env = env.clone();
    let mut notices = Vec::new();
    for (spec, breeze, why) in ALIASES {
        let Some(value) = env.get(*spec).cloned() else {
            continue;
        };
        match env.get(*breeze) {
            Some(set) if set.trim() != value.trim() => bail!(
                "{spec}={value:?} and {breeze}={set:?} disagree; they are one setting ({spec} is the specification's name of {breeze}): set {breeze} only"
            ),
            _ => {}
        }
        notices.push(format!(
            "{spec} is read as {breeze} ({why}); rename it to {breeze}"
        ));
        env.insert((*breeze).to_owned(), value);
    }
    Ok((env, notices))
}

/// MCP settings.
#[derive(Debug, Clone)]
pub(crate) struct McpSettings {
    /// `MCP_MAX_SESSIONS_PER_KEY` (`MCP_MAX_SSE_SESSIONS_PER_KEY`).
    pub(crate) max_sessions_per_key: usize,
    /// `MCP_SESSION_TTL_SECONDS`: how long a session may sit idle.
    pub(crate) session_ttl: std::time::Duration,
    pub(crate) max_sessions_per_org: usize,
    pub(crate) max_sessions: usize,
    pub(crate) sse_rate_per_minute: u32,
    pub(crate) message_rate_per_minute: u32,
    pub(crate) max_body_bytes: usize,
    pub(crate) require_execute_admin: bool,
    /// `MCP_TOOL_RATE_LIMITS`: the tools' own per-user limits (never off in production).
    pub(crate) tool_rate_limits: bool,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) execute_allowlist: String,
    /// `BREEZE_MCP_CATALOG`.
    pub(crate) catalog: breeze_server::catalog::CatalogMode,
    /// `BREEZE_MCP_DISCOVER_BYTES`.
    pub(crate) discover_bytes: usize,
    /// `BREEZE_MCP_MAX_RESPONSE_BYTES`: the response budget of a tool call (0 = off).
    pub(crate) max_response_bytes: usize,
    /// `BREEZE_MCP_MAX_ITEMS`: items in one batch call.
    pub(crate) max_items: usize,
}

/// Parses a positive whole-number setting, or gives its default.
fn number<T: std::str::FromStr + PartialOrd + From<u8>>(
    env: &BTreeMap<String, String>,
    var: &str,
    default: T,
) -> anyhow::Result<T> {
    match env.get(var).map(|v| v.trim()) {
        None | Some("") => Ok(default),
        Some(v) => match v.parse::<T>() {
            Ok(n) if n >= T::from(1) => Ok(n),
            _ => bail!("invalid {var}: {v:?} (expected a positive whole number)"),
        },
    }
}

/// The advisory feeds: http(s) URLs, checked every 1–720 hours, downloads capped.
fn advisory_feeds(
    env: &BTreeMap<String, String>,
) -> anyhow::Result<breeze_server::advisory_feeds::AdvisoryFeedsConfig> {
    let mut urls = Vec::new();
    for raw in env
        .get("BREEZE_ADVISORY_FEEDS")
        .map(String::as_str)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        match url::Url::parse(raw) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                if !urls.contains(&u.to_string()) {
                    urls.push(u.to_string());
                }
            }
            _ => bail!("invalid BREEZE_ADVISORY_FEEDS: {raw:?} is not an http(s) URL"),
        }
    }
    let hours = number(env, "BREEZE_ADVISORY_REFRESH_HOURS", 24u64)?;
    if hours > 720 {
        bail!("invalid BREEZE_ADVISORY_REFRESH_HOURS: {hours} (expected 1 to 720)");
    }
    let mb = number(env, "BREEZE_ADVISORY_MAX_MB", 1024u64)?;
    Ok(breeze_server::advisory_feeds::AdvisoryFeedsConfig {
        urls,
        every: std::time::Duration::from_secs(hours * 3600),
        max_bytes: mb.saturating_mul(1024 * 1024),
    })
}

/// The AI assistant's settings: with no `BREEZE_AI_PROVIDER` there is no provider (the chat
/// names the setting); a provider without what it needs refuses to start.
fn assistant_settings(
    env: &BTreeMap<String, String>,
) -> anyhow::Result<breeze_assistant::AssistantConfig> {
    use breeze_assistant::{AssistantConfig, ProviderConfig, ProviderKind};
    let get = |var: &str| env.get(var).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mut config = AssistantConfig::default();
    if let Some(p) = get("BREEZE_AI_PRICING") {
        config.pricing = breeze_core::Pricing::with_overrides(p)
            .map_err(|e| anyhow::anyhow!("invalid BREEZE_AI_PRICING: {e}"))?;
    }
    let idle_days = number(env, "BREEZE_AI_SESSION_IDLE_DAYS", 30u64)?;
    if idle_days > 36_500 {
        bail!("invalid BREEZE_AI_SESSION_IDLE_DAYS: {idle_days} (expected 1 to 36500)");
    }
    config.idle_expiry = std::time::Duration::from_secs(idle_days * 86_400);
    let timeout = number(env, "BREEZE_AI_APPROVAL_TIMEOUT_SECONDS", 300u64)?;
    if timeout > 300 {
        bail!(
            "invalid BREEZE_AI_APPROVAL_TIMEOUT_SECONDS: {timeout} (expected 1 to 300: a request expires after 5 minutes)"
        );
    }
    config.approval_timeout = std::time::Duration::from_secs(timeout);
    config.rate_limit = number(env, "BREEZE_AI_MESSAGES_PER_MINUTE", 20u32)?;
    let Some(kind) = get("BREEZE_AI_PROVIDER") else {
        for var in ["BREEZE_AI_MODEL", "BREEZE_AI_BASE_URL", "BREEZE_AI_API_KEY"] {
            if get(var).is_some() {
                bail!("{var} is set but BREEZE_AI_PROVIDER is not (anthropic or openai)");
            }
        }
        return Ok(config);
    };
    let kind: ProviderKind = kind
        .parse()
        .map_err(|e| anyhow::anyhow!("invalid BREEZE_AI_PROVIDER: {e}"))?;
    let (model, base) = match kind {
        ProviderKind::Anthropic => (
            get("BREEZE_AI_MODEL").unwrap_or("claude-sonnet-4-5-20250929"),
            get("BREEZE_AI_BASE_URL").unwrap_or("https://api.anthropic.com"),
        ),
        ProviderKind::OpenAi => (
            get("BREEZE_AI_MODEL").ok_or_else(|| {
                anyhow::anyhow!("BREEZE_AI_MODEL is required with BREEZE_AI_PROVIDER=openai")
            })?,
            get("BREEZE_AI_BASE_URL").unwrap_or("https://api.openai.com/v1"),
        ),
    };
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        bail!("invalid BREEZE_AI_BASE_URL: {base:?} (expected an http(s) URL)");
    }
    let mut p = ProviderConfig::new(kind, model, base);
    p.api_key = get("BREEZE_AI_API_KEY").map(str::to_owned);
    if kind == ProviderKind::Anthropic && p.api_key.is_none() {
        bail!("BREEZE_AI_API_KEY is required with BREEZE_AI_PROVIDER=anthropic");
    }
    p.max_tokens = number(env, "BREEZE_AI_MAX_TOKENS", 4096u32)?;
    p.context_tokens = number(env, "BREEZE_AI_CONTEXT_TOKENS", 200_000usize)?;
    if let Some(t) = get("BREEZE_AI_TEMPERATURE") {
        p.temperature = Some(
            t.parse::<f32>()
                .ok()
                .filter(|t| (0.0..=2.0).contains(t))
                .ok_or_else(|| {
                    anyhow::anyhow!("invalid BREEZE_AI_TEMPERATURE: {t:?} (expected 0 to 2)")
                })?,
        );
    }
    config.provider = Some(p);
    Ok(config)
}

fn boolean(env: &BTreeMap<String, String>, var: &str, default: bool) -> anyhow::Result<bool> {
    match env
        .get(var)
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") => Ok(default),
        Some("true" | "1" | "yes") => Ok(true),
        Some("false" | "0" | "no") => Ok(false),
        Some(v) => bail!("invalid {var}: {v:?} (expected true or false)"),
    }
}

/// Tool Sources' settings, checked when read.
#[derive(Clone, Default)]
pub(crate) struct ToolSourceSettings {
    /// `TOOL_SOURCES_KEY`, validated.
    pub(crate) key: Option<breeze_sources::vault::Vault>,
    pub(crate) egress: breeze_sources::egress::EgressConfig,
    /// `BREEZE_STRIPE_API_URL`, `BREEZE_SYNNEX_API_URL`: where the billing services are
    /// (through the same egress); `None`: the real ones.
    pub(crate) stripe_api: Option<url::Url>,
    pub(crate) synnex_api: Option<url::Url>,
}

impl std::fmt::Debug for ToolSourceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSourceSettings")
            .field("key", &self.key.as_ref().map(|_| "set"))
            .field("allow_private", &self.egress.allow_private)
            .finish_non_exhaustive()
    }
}

impl ToolSourceSettings {
    fn load(env: &BTreeMap<String, String>) -> anyhow::Result<Self> {
        let key = match env.get("TOOL_SOURCES_KEY").map(|v| v.trim()) {
            None | Some("") => None,
            Some(v) => Some(
                breeze_sources::vault::Vault::from_setting(v)
                    .map_err(|e| anyhow::anyhow!("invalid TOOL_SOURCES_KEY: {e}"))?,
            ),
        };
        let extra_roots_pem = match env.get("TOOL_SOURCES_EXTRA_ROOTS").map(|v| v.trim()) {
            None | Some("") => None,
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                anyhow::anyhow!("invalid TOOL_SOURCES_EXTRA_ROOTS: cannot read {path:?}: {e}")
            })?),
        };
        let egress = breeze_sources::egress::EgressConfig {
            allow_private: boolean(env, "TOOL_SOURCES_ALLOW_PRIVATE_EGRESS", false)?,
            extra_roots_pem,
        };
        // The roots are parsed now, so a bad file stops the start with its reason.
        breeze_sources::egress::Egress::new(&egress)
            .map_err(|e| anyhow::anyhow!("invalid TOOL_SOURCES_EXTRA_ROOTS: {e}"))?;
        let service = |var: &str| -> anyhow::Result<Option<url::Url>> {
            match env.get(var).map(|v| v.trim()) {
                None | Some("") => Ok(None),
                Some(v) => match url::Url::parse(v) {
                    Ok(u) if u.scheme() == "https" => Ok(Some(u)),
                    _ => bail!("invalid {var}: {v:?} (expected an https URL)"),
                },
            }
        };
        Ok(Self {
            key,
            egress,
            stripe_api: service("BREEZE_STRIPE_API_URL")?,
            synnex_api: service("BREEZE_SYNNEX_API_URL")?,
        })
    }
}

impl McpSettings {
    fn load(env: &BTreeMap<String, String>) -> anyhow::Result<Self> {
        Ok(Self {
            max_sessions_per_key: number(env, "MCP_MAX_SESSIONS_PER_KEY", 5usize)?,
            session_ttl: {
                let secs = number(env, "MCP_SESSION_TTL_SECONDS", 1800u64)?;
                if !(60..=86_400).contains(&secs) {
                    bail!("invalid MCP_SESSION_TTL_SECONDS: {secs} (expected 60 to 86400 seconds)");
                }
                std::time::Duration::from_secs(secs)
            },
            max_sessions_per_org: number(env, "MCP_MAX_SESSIONS_PER_ORG", 25usize)?,
            max_sessions: number(env, "MCP_MAX_SESSIONS", 100usize)?,
            sse_rate_per_minute: number(env, "MCP_SSE_RATE_LIMIT_PER_MINUTE", 30u32)?,
            message_rate_per_minute: number(env, "MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", 120u32)?,
            max_body_bytes: number(env, "MCP_MESSAGE_MAX_BODY_BYTES", 65_536usize)?,
            require_execute_admin: boolean(env, "MCP_REQUIRE_EXECUTE_ADMIN", true)?,
            tool_rate_limits: boolean(env, "MCP_TOOL_RATE_LIMITS", true)?,
            catalog: match env.get("BREEZE_MCP_CATALOG").map(|v| v.trim()) {
                None | Some("") => breeze_server::catalog::CatalogMode::Full,
                Some(v) => breeze_server::catalog::CatalogMode::parse(v)
                    .map_err(|e| anyhow::anyhow!("invalid BREEZE_MCP_CATALOG: {e}"))?,
            },
            discover_bytes: {
                let n = number(
                    env,
                    "BREEZE_MCP_DISCOVER_BYTES",
                    breeze_server::catalog::DEFAULT_DISCOVER_BYTES,
                )?;
                if n < breeze_server::catalog::MIN_DISCOVER_BYTES {
                    bail!(
                        "invalid BREEZE_MCP_DISCOVER_BYTES: {n} (expected at least {})",
                        breeze_server::catalog::MIN_DISCOVER_BYTES
                    );
                }
                n
            },
            max_response_bytes: match env.get("BREEZE_MCP_MAX_RESPONSE_BYTES").map(|v| v.trim()) {
                None | Some("") => 0,
                Some(v) => match v.parse::<usize>() {
                    Ok(n) => n,
                    Err(_) => bail!(
                        "invalid BREEZE_MCP_MAX_RESPONSE_BYTES: {v:?} (expected a whole number of bytes, 0 = off)"
                    ),
                },
            },
            max_items: number(
                env,
                "BREEZE_MCP_MAX_ITEMS",
                breeze_pipeline::envelope::DEFAULT_MAX_ITEMS,
            )?,
            execute_allowlist: env
                .get("MCP_EXECUTE_TOOL_ALLOWLIST")
                .cloned()
                .unwrap_or_default(),
            allowed_origins: env
                .get("MCP_ALLOWED_ORIGINS")
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// Flags that override environment settings (each command offers those it uses: see
/// [`ServerFlags`] and [`StoreFlags`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct SettingFlags {
    pub(crate) listen: Option<String>,
    pub(crate) database_url: Option<String>,
    pub(crate) redis_url: Option<String>,
    pub(crate) environment: Option<String>,
    pub(crate) public_url: Option<String>,
    pub(crate) data_dir: Option<String>,
    pub(crate) log_format: Option<String>,
}

/// The settings flags of the commands that serve (`serve`, `demo`).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Server settings (flags beat the environment variables)")]
pub(crate) struct ServerFlags {
    /// Address to listen on [env: BREEZE_LISTEN; default 127.0.0.1:3000].
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<String>,
    /// Public base URL clients use [env: BREEZE_PUBLIC_URL].
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<String>,
    /// development or production [env: BREEZE_ENV].
    #[arg(long = "env", value_name = "ENV")]
    pub(crate) environment: Option<String>,
    /// Redis URL, for shared limits and sessions [env: REDIS_URL].
    #[arg(long, value_name = "URL")]
    pub(crate) redis_url: Option<String>,
    /// Log lines as pretty or json [env: BREEZE_LOG_FORMAT].
    #[arg(long, value_name = "FORMAT")]
    pub(crate) log_format: Option<String>,
    #[command(flatten)]
    pub(crate) store: StoreFlags,
}

/// The settings flags of every command that opens the database.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Database (flags beat the environment variables)")]
pub(crate) struct StoreFlags {
    /// sqlite://path or postgres://… [env: DATABASE_URL].
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) database_url: Option<String>,
    /// Directory of the SQLite file and demo.json [env: BREEZE_DATA_DIR; default ./breeze-data].
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) data_dir: Option<String>,
}

impl From<&StoreFlags> for SettingFlags {
    fn from(f: &StoreFlags) -> Self {
        Self {
            database_url: f.database_url.clone(),
            data_dir: f.data_dir.clone(),
            ..Self::default()
        }
    }
}

impl From<&ServerFlags> for SettingFlags {
    fn from(f: &ServerFlags) -> Self {
        Self {
            listen: f.listen.clone(),
            redis_url: f.redis_url.clone(),
            environment: f.environment.clone(),
            public_url: f.public_url.clone(),
            log_format: f.log_format.clone(),
            ..Self::from(&f.store)
        }
    }
}

/// Deployment mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Environment {
    Development,
    Production,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Pretty,
    Json,
}

/// Validated settings.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) listen: SocketAddr,
    pub(crate) database_url: String,
    pub(crate) redis_url: Option<String>,
    /// `BREEZE_REDIS_PREFIX`: every Redis key and channel starts with it.
    pub(crate) redis_prefix: String,
    pub(crate) environment: Environment,
    pub(crate) public_url: String,
    pub(crate) data_dir: PathBuf,
    pub(crate) log_filter: String,
    pub(crate) log_format: LogFormat,
    pub(crate) mcp: McpSettings,
    /// `breeze demo` enrolls and starts a local agent.
    pub(crate) demo_agent: bool,
    pub(crate) enroll_rate_per_minute: u32,
    /// `BREEZE_TRUSTED_PROXIES`.
    pub(crate) trusted_proxies: breeze_server::client_addr::TrustedProxies,
    pub(crate) metrics_retention: breeze_store::MetricsRetention,
    pub(crate) approval_webhook_url: Option<String>,
    pub(crate) approval_wait_secs: u64,
    /// The AI assistant (`BREEZE_AI_*`).
    pub(crate) assistant: breeze_assistant::AssistantConfig,
    /// How long an authenticated API key or an OAuth grant is served from memory, in
    /// milliseconds (0 = never); also how long a revocation made beside other processes waits
    /// for their caches.
    pub(crate) auth_cache_ms: u64,
    /// OAuth 2.1 (`MCP_OAUTH_ENABLED`); `None` when off.
    pub(crate) oauth: Option<breeze_server::oauth::OAuthSettings>,
    /// The alert engine: tick, SMTP relay, webhook policy.
    pub(crate) alerts: breeze_alerts::AlertEngineConfig,
    /// `BREEZE_AUDIT_RETENTION_DAYS`: `None` keeps audit records forever. It settles the
    /// cluster's retention when nothing has yet; after that the stored one governs.
    pub(crate) audit_retention_days: Option<u32>,
    /// Whether `BREEZE_AUDIT_RETENTION_DAYS` was set (not the default 90).
    pub(crate) audit_retention_explicit: bool,
    /// `BREEZE_AUDIT_ARCHIVE_DIR`.
    pub(crate) audit_archive_dir: PathBuf,
    /// `BREEZE_PDF_FONT`: `None` probes the well-known font paths.
    pub(crate) pdf_font: Option<PathBuf>,
    /// `BREEZE_ADVISORY_FEEDS`, `BREEZE_ADVISORY_REFRESH_HOURS`, `BREEZE_ADVISORY_MAX_MB`.
    pub(crate) advisory_feeds: breeze_server::advisory_feeds::AdvisoryFeedsConfig,
    /// `BREEZE_AUDIT_SYNCHRONOUS_COMMIT` (PostgreSQL).
    pub(crate) audit_synchronous_commit: bool,
    /// `BREEZE_AUDIT_JOURNAL_DIR` (PostgreSQL); `None` when off.
    pub(crate) audit_journal_dir: Option<PathBuf>,
    /// `BREEZE_METRICS_ADDR` and `BREEZE_METRICS_TOKEN`.
    pub(crate) metrics: breeze_server::metrics::MetricsAccess,
    /// `BREEZE_SHUTDOWN_DELAY_SECONDS`.
    pub(crate) shutdown_delay: std::time::Duration,
    /// `OTEL_EXPORTER_OTLP_*`: `None` when traces are off.
    pub(crate) traces: Option<crate::trace_settings::TraceSettings>,
    /// `TOOL_SOURCES_*`.
    pub(crate) tool_sources: ToolSourceSettings,
    /// One line per setting read under another name (the specification's), for the operator.
    pub(crate) notices: Vec<String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("listen", &self.listen)
            .field(
                "database_url",
                &breeze_store::redact_url(&self.database_url),
            )
            .field(
                "redis_url",
                &self.redis_url.as_deref().map(breeze_store::redact_url),
            )
            .field("environment", &self.environment)
            .field("public_url", &self.public_url)
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// Reads the process environment (the one sanctioned place).
pub(crate) fn process_env() -> BTreeMap<String, String> {
    #[allow(clippy::disallowed_methods)] // this module is where settings are read
    std::env::vars().collect()
}

/// The home directory (`HOME`), under which agents keep their skills; `None` when unset or
/// empty.
pub(crate) fn home_dir(env: &BTreeMap<String, String>) -> Option<std::path::PathBuf> {
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::PathBuf::from)
}

/// One raw value and where it came from, for error messages.
struct Raw<'a> {
    value: Option<&'a str>,
    origin: String,
}

fn pick<'a>(
    flag: &'a Option<String>,
    flag_name: &str,
    env: &'a BTreeMap<String, String>,
    var: &str,
) -> Raw<'a> {
    match flag {
        Some(v) => Raw {
            value: Some(v.as_str()),
            origin: format!("--{flag_name}"),
        },
        None => Raw {
            value: env.get(var).map(String::as_str),
            origin: var.to_owned(),
        },
    }
}

impl Settings {
    /// Validates `env` and `flags` into settings, or says which setting is wrong.
    pub(crate) fn load(
        env: &BTreeMap<String, String>,
        flags: &SettingFlags,
    ) -> anyhow::Result<Settings> {
        check_unknown(env)?;
        let (env, mut notices) = resolve_aliases(env)?;
        let env = &env;

        let listen = pick(&flags.listen, "listen", env, "BREEZE_LISTEN");
        let listen: SocketAddr = match listen.value {
            None => SocketAddr::from(([127, 0, 0, 1], 3000)),
            Some(v) => v.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "invalid {}: {v:?} is not an address such as 127.0.0.1:3000",
                    listen.origin
                )
            })?,
        };

        let environment = environment(env, flags, &mut notices)?;

        let data_dir = pick(&flags.data_dir, "data-dir", env, "BREEZE_DATA_DIR");
        let data_dir = match data_dir.value.map(str::trim) {
            None => PathBuf::from("./breeze-data"),
            Some("") => bail!("invalid {}: empty path", data_dir.origin),
            Some(v) => PathBuf::from(v),
        };

        let db = pick(&flags.database_url, "database-url", env, "DATABASE_URL");
        let database_url = match db.value.map(str::trim) {
            None => format!("sqlite://{}", data_dir.join("breeze.db").display()),
            Some(v)
                if v.starts_with("sqlite:")
                    || v.starts_with("postgres://")
                    || v.starts_with("postgresql://") =>
            {
                v.to_owned()
            }
            Some(v) => bail!(
                "invalid {}: {:?} (expected sqlite://path or postgres://user@host/db)",
                db.origin,
                breeze_store::redact_url(v)
            ),
        };

        let redis = pick(&flags.redis_url, "redis-url", env, "REDIS_URL");
        // Parsed by the code that later opens it (without connecting), so a malformed Sentinel
        // list is named here, before anything starts.
        let redis_url = match redis.value.map(str::trim) {
            None | Some("") => None,
            Some(v) => {
                match breeze_limits::RedisConnection::open(v, std::time::Duration::from_secs(1)) {
                    Ok(_) => Some(v.to_owned()),
                    Err(why) => bail!(
                        "invalid {}: {:?}: {} (expected redis://host:port, or \
                     redis+sentinel://host:port[,host:port…]/service for Redis Sentinel)",
                        redis.origin,
                        breeze_store::redact_url(v),
                        why.trim_start_matches("invalid REDIS_URL: ")
                    ),
                }
            }
        };

        let redis_prefix = env
            .get("BREEZE_REDIS_PREFIX")
            .map_or("breeze:", |v| v.trim());
        if redis_prefix.is_empty()
            || redis_prefix.len() > 64
            || !redis_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-' | '.'))
        {
            bail!(
                "invalid BREEZE_REDIS_PREFIX: {redis_prefix:?} (1 to 64 of letters, digits, ':', '_', '-', '.')"
            );
        }
        let redis_prefix = redis_prefix.to_owned();

        let public = pick(&flags.public_url, "public-url", env, "BREEZE_PUBLIC_URL");
        let public_url = match public.value.map(str::trim) {
            None if environment == Environment::Production => {
                bail!(
                    "BREEZE_PUBLIC_URL is required in production (BREEZE_ENV or NODE_ENV=production): the URL clients use"
                )
            }
            None => format!("http://{listen}"),
            Some(v)
                if (v.starts_with("http://") || v.starts_with("https://"))
                    && v.len() > "https://".len()
                    && !v.contains(char::is_whitespace) =>
            {
                v.trim_end_matches('/').to_owned()
            }
            Some(v) => bail!(
                "invalid {}: {v:?} (expected http(s)://host[:port])",
                public.origin
            ),
        };

        let log_filter = env
            .get("BREEZE_LOG")
            .map_or("info", |v| v.trim())
            .to_owned();
        tracing_subscriber::EnvFilter::try_new(&log_filter)
            .map_err(|e| anyhow::anyhow!("invalid BREEZE_LOG: {log_filter:?}: {e}"))?;

        let format = pick(&flags.log_format, "log-format", env, "BREEZE_LOG_FORMAT");
        let log_format = match format.value.map(str::trim) {
            None | Some("pretty") => LogFormat::Pretty,
            Some("json") => LogFormat::Json,
            Some(v) => bail!("invalid {}: {v:?} (expected pretty or json)", format.origin),
        };

        let auth_cache_ms = match env.get("BREEZE_AUTH_CACHE_MS").map(|v| v.trim()) {
            None | Some("") => 1000,
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n <= 60_000 => n,
                _ => bail!("invalid BREEZE_AUTH_CACHE_MS: {v:?} (expected 0 to 60000)"),
            },
        };
        let mut oauth = oauth_settings(env, environment == Environment::Production, &public_url)?;
        if let Some(o) = &mut oauth {
            // One setting for both caches: a revocation waits out the longer of them (the
            // store's credential fence), so they must not differ.
            o.config.cache_ttl = chrono::Duration::milliseconds(i64::try_from(auth_cache_ms)?);
        }
        let alerts = alert_settings(env, environment == Environment::Production)?;
        let audit_retention_explicit = env
            .get("BREEZE_AUDIT_RETENTION_DAYS")
            .is_some_and(|v| !v.trim().is_empty());
        let audit_retention_days = match env.get("BREEZE_AUDIT_RETENTION_DAYS").map(|v| v.trim()) {
            None | Some("") => Some(90),
            Some(v) => match v.parse::<u32>() {
                Ok(0) => None,
                Ok(n) if n <= 36_500 => Some(n),
                _ => bail!(
                    "invalid BREEZE_AUDIT_RETENTION_DAYS: {v:?} (expected 0 to 36500; 0 keeps forever)"
                ),
            },
        };
        let audit_archive_dir = match env.get("BREEZE_AUDIT_ARCHIVE_DIR").map(|v| v.trim()) {
            None | Some("") => data_dir.join("audit-archive"),
            Some(v) => PathBuf::from(v),
        };
        let audit_journal_dir = match env.get("BREEZE_AUDIT_JOURNAL_DIR").map(|v| v.trim()) {
            None | Some("") => Some(data_dir.join("audit-journal")),
            Some(v) if v.eq_ignore_ascii_case("off") => None,
            Some(v) => Some(PathBuf::from(v)),
        };
        let pdf_font = match env.get("BREEZE_PDF_FONT").map(|v| v.trim()) {
            None | Some("") => None,
            Some(v) => Some(PathBuf::from(v)),
        };
        let shutdown_delay = match env.get("BREEZE_SHUTDOWN_DELAY_SECONDS").map(|v| v.trim()) {
            None | Some("") if environment == Environment::Production => 5,
            None | Some("") => 0,
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n <= 300 => n,
                _ => bail!(
                    "invalid BREEZE_SHUTDOWN_DELAY_SECONDS: {v:?} (expected 0 to 300 seconds)"
                ),
            },
        };
        let shutdown_delay = std::time::Duration::from_secs(shutdown_delay);
        let metrics = breeze_server::metrics::MetricsAccess {
            addr: match env.get("BREEZE_METRICS_ADDR").map(|v| v.trim()) {
                None | Some("") => None,
                Some(v) => Some(v.parse::<SocketAddr>().map_err(|_| {
                    anyhow::anyhow!(
                        "invalid BREEZE_METRICS_ADDR: {v:?} is not an address such as 127.0.0.1:9464"
                    )
                })?),
            },
            token: match env.get("BREEZE_METRICS_TOKEN").map(|v| v.trim()) {
                None | Some("") => None,
                Some(v) if v.len() >= 16 && v.bytes().all(|b| b.is_ascii_graphic()) => {
                    Some(v.to_owned())
                }
                Some(_) => bail!(
                    "invalid BREEZE_METRICS_TOKEN: expected 16 or more printable characters, no spaces"
                ),
            },
        };
        if metrics.addr.is_some_and(|a| a == listen) {
            bail!("invalid BREEZE_METRICS_ADDR: it is BREEZE_LISTEN's address");
        }
        Ok(Settings {
            notices,
            traces: crate::trace_settings::TraceSettings::load(env)?,
            tool_sources: ToolSourceSettings::load(env)?,
            audit_retention_days,
            audit_retention_explicit,
            audit_archive_dir,
            pdf_font,
            advisory_feeds: advisory_feeds(env)?,
            audit_synchronous_commit: boolean(env, "BREEZE_AUDIT_SYNCHRONOUS_COMMIT", true)?,
            audit_journal_dir,
            metrics,
            shutdown_delay,
            oauth,
            alerts,
            listen,
            database_url,
            redis_url,
            redis_prefix,
            environment,
            public_url,
            data_dir,
            log_filter,
            log_format,
            mcp: {
                let mcp = McpSettings::load(env)?;
                if !mcp.tool_rate_limits && environment == Environment::Production {
                    bail!(
                        "MCP_TOOL_RATE_LIMITS=false is refused in production: the tools' rate limits protect devices and upstreams"
                    );
                }
                mcp
            },
            demo_agent: boolean(env, "BREEZE_DEMO_AGENT", true)?,
            enroll_rate_per_minute: number(env, "BREEZE_ENROLL_RATE_PER_MINUTE", 10u32)?,
            trusted_proxies: breeze_server::client_addr::TrustedProxies::parse(
                env.get("BREEZE_TRUSTED_PROXIES").map_or("", String::as_str),
            )
            .map_err(|e| anyhow::anyhow!("invalid BREEZE_TRUSTED_PROXIES: {e}"))?,
            approval_webhook_url: match env.get("BREEZE_APPROVAL_WEBHOOK_URL").map(|v| v.trim()) {
                None | Some("") => None,
                Some(v) if v.starts_with("http://") || v.starts_with("https://") => {
                    Some(v.to_owned())
                }
                Some(v) => {
                    bail!("invalid BREEZE_APPROVAL_WEBHOOK_URL: {v:?} (expected an http(s) URL)")
                }
            },
            approval_wait_secs: match env.get("MCP_APPROVAL_WAIT_SECONDS").map(|v| v.trim()) {
                None | Some("") => breeze_pipeline::approvals::DEFAULT_WAIT_SECS,
                Some(v) => match v.parse::<u64>() {
                    Ok(n) if n <= 300 => n,
                    _ => bail!("invalid MCP_APPROVAL_WAIT_SECONDS: {v:?} (expected 0 to 300)"),
                },
            },
            auth_cache_ms,
            assistant: assistant_settings(env)?,
            metrics_retention: breeze_store::MetricsRetention {
                raw: chrono::Duration::days(
                    number(env, "BREEZE_METRICS_RAW_DAYS", 7i64)?.min(36_500),
                ),
                hourly: chrono::Duration::days(
                    number(env, "BREEZE_METRICS_HOURLY_DAYS", 90i64)?.min(36_500),
                ),
                daily: chrono::Duration::days(
                    number(env, "BREEZE_METRICS_DAILY_DAYS", 730i64)?.min(36_500),
                ),
            },
        })
    }

    pub(crate) fn production(&self) -> bool {
        self.environment == Environment::Production
    }
}

/// The deployment mode: `--env` or `BREEZE_ENV`, and `NODE_ENV`, the specification's
/// production switch. `NODE_ENV=production` alone means production (said in a notice); any other
/// `NODE_ENV` value means development. When both are set they must agree, or Breeze refuses to
/// start: a server configured by the specification's instructions must not run without the
/// production guards, nor one configured for production be weakened by a stray `NODE_ENV`.
fn environment(
    env: &BTreeMap<String, String>,
    flags: &SettingFlags,
    notices: &mut Vec<String>,
) -> anyhow::Result<Environment> {
    let breeze = pick(&flags.environment, "env", env, "BREEZE_ENV");
    let own = match breeze.value.map(str::trim) {
        None => None,
        Some("development") => Some(Environment::Development),
        Some("production") => Some(Environment::Production),
        Some(v) => bail!(
            "invalid {}: {v:?} (expected development or production)",
            breeze.origin
        ),
    };
    let node = env
        .get("NODE_ENV")
        .map(|v| v.trim())
        .filter(|v| !v.is_empty());
    let from_node = node.map(|v| {
        if v == "production" {
            Environment::Production
        } else {
            Environment::Development
        }
    });
    match (own, from_node) {
        (Some(a), Some(b)) if a != b => bail!(
            "{}={} and NODE_ENV={} disagree: NODE_ENV=production is the specification's production switch and Breeze reads it as BREEZE_ENV=production; make them agree or unset one",
            breeze.origin.trim_start_matches("--"),
            breeze.value.unwrap_or_default().trim(),
            node.unwrap_or_default()
        ),
        (Some(a), _) => Ok(a),
        (None, Some(Environment::Production)) => {
            notices.push(
                "NODE_ENV=production is read as BREEZE_ENV=production (the production guards are on)"
                    .into(),
            );
            Ok(Environment::Production)
        }
        (None, _) => Ok(Environment::Development),
    }
}

fn http_url(env: &BTreeMap<String, String>, var: &str) -> anyhow::Result<Option<String>> {
    match env.get(var).map(|v| v.trim()) {
        None | Some("") => Ok(None),
        Some(v)
            if (v.starts_with("http://") || v.starts_with("https://"))
                && v.len() > "https://".len()
                && !v.contains(char::is_whitespace) =>
        {
            Ok(Some(v.trim_end_matches('/').to_owned()))
        }
        Some(v) => bail!("invalid {var}: {v:?} (expected an http(s) URL)"),
    }
}

/// The OAuth settings, when `MCP_OAUTH_ENABLED`. In production the signing key and cookie
/// secret are required, and registration needs a posture flag; in development a missing key
/// or secret is made up for this process (tokens then die with it).
fn oauth_settings(
    env: &BTreeMap<String, String>,
    production: bool,
    public_url: &str,
) -> anyhow::Result<Option<breeze_server::oauth::OAuthSettings>> {
    use rand::RngCore;
    if !boolean(env, "MCP_OAUTH_ENABLED", false)? {
        return Ok(None);
    }
    let text = |var: &str| env.get(var).map(|v| v.trim()).filter(|v| !v.is_empty());
    let key = match text("OAUTH_JWKS_PRIVATE_JWK") {
        Some(jwk) => breeze_oauth::SigningKey::from_jwk(jwk)
            .map_err(|e| anyhow::anyhow!("invalid OAUTH_JWKS_PRIVATE_JWK: {e}"))?,
        None if production => bail!(
            "OAUTH_JWKS_PRIVATE_JWK is required when MCP_OAUTH_ENABLED=true in production (an OKP/Ed25519 private JWK)"
        ),
        None => {
            let mut seed = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut seed);
            breeze_oauth::SigningKey::from_seed(&seed)
                .map_err(|e| anyhow::anyhow!("cannot make a signing key: {e}"))?
        }
    };
    if let Some(public) = text("OAUTH_JWKS_PUBLIC_JWK")
        && !key.matches_public_jwk(public)
    {
        bail!("invalid OAUTH_JWKS_PUBLIC_JWK: it is not the public key of OAUTH_JWKS_PRIVATE_JWK");
    }
    let cookie_secret = match text("OAUTH_COOKIE_SECRET") {
        Some(s) if s.len() >= 32 => s.as_bytes().to_vec(),
        Some(_) => bail!("invalid OAUTH_COOKIE_SECRET: use at least 32 characters"),
        None if production => {
            bail!("OAUTH_COOKIE_SECRET is required when MCP_OAUTH_ENABLED=true in production")
        }
        None => {
            let mut secret = vec![0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut secret);
            secret
        }
    };
    let dcr = breeze_server::oauth::DcrPolicy {
        enabled: boolean(env, "OAUTH_DCR_ENABLED", false)?,
        require_iat: boolean(env, "OAUTH_DCR_REQUIRE_IAT", false)?,
        allow_anonymous: boolean(env, "OAUTH_DCR_ALLOW_ANONYMOUS", false)?,
    };
    if dcr.require_iat && dcr.allow_anonymous {
        bail!("OAUTH_DCR_REQUIRE_IAT and OAUTH_DCR_ALLOW_ANONYMOUS contradict each other; set one");
    }
    if production && dcr.enabled && !dcr.require_iat && !dcr.allow_anonymous {
        bail!(
            "OAUTH_DCR_ENABLED in production needs OAUTH_DCR_REQUIRE_IAT or OAUTH_DCR_ALLOW_ANONYMOUS (anonymous registration is what Claude.ai and ChatGPT need)"
        );
    }
    let origin = url_origin(public_url);
    let issuer = http_url(env, "OAUTH_ISSUER")?.unwrap_or(origin);
    let resource =
        http_url(env, "OAUTH_RESOURCE_URL")?.unwrap_or_else(|| format!("{public_url}/mcp"));
    let mut settings =
        breeze_server::oauth::OAuthSettings::development(&issuer, key, cookie_secret);
    settings.config = breeze_oauth::OAuthConfig::new(&issuer, &resource);
    settings.config.cimd = boolean(env, "OAUTH_CIMD_ENABLED", true)?;
    settings.config.ignore_software_id = boolean(env, "OAUTH_DCR_IGNORE_SOFTWARE_ID", false)?;
    settings.dcr = dcr;
    settings.consent_url_base = http_url(env, "OAUTH_CONSENT_URL_BASE")?;
    Ok(Some(settings))
}

/// `scheme://host[:port]` of `url` (what it is when it has no path).
fn url_origin(url: &str) -> String {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(i) => url[..after + i].to_owned(),
        None => url.to_owned(),
    }
}

/// The alert engine's settings: its tick, the SMTP relay (all or nothing), the webhook policy.
fn alert_settings(
    env: &BTreeMap<String, String>,
    production: bool,
) -> anyhow::Result<breeze_alerts::AlertEngineConfig> {
    use breeze_alerts::{SmtpConfig, SmtpSecurity};
    let text = |var: &str| {
        env.get(var)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let smtp = match text("BREEZE_SMTP_HOST") {
        None => None,
        Some(host) => {
            let security = match text("BREEZE_SMTP_SECURITY").as_deref() {
                None | Some("starttls") => SmtpSecurity::StartTls,
                Some("tls") => SmtpSecurity::Tls,
                Some("none") => SmtpSecurity::None,
                Some(v) => {
                    bail!("invalid BREEZE_SMTP_SECURITY: {v:?} (expected starttls, tls or none)")
                }
            };
            let default_port = match security {
                SmtpSecurity::StartTls => 587,
                SmtpSecurity::Tls => 465,
                SmtpSecurity::None => 25,
            };
            let Some(from) = text("BREEZE_SMTP_FROM") else {
                bail!("BREEZE_SMTP_FROM is required with BREEZE_SMTP_HOST");
            };
            Some(SmtpConfig {
                host,
                port: number(env, "BREEZE_SMTP_PORT", default_port)?,
                security,
                from,
                username: text("BREEZE_SMTP_USERNAME"),
                password: text("BREEZE_SMTP_PASSWORD"),
            })
        }
    };
    Ok(breeze_alerts::AlertEngineConfig {
        tick: std::time::Duration::from_secs(number(env, "BREEZE_ALERT_TICK_SECONDS", 30u64)?),
        notify: breeze_alerts::NotifyConfig {
            smtp,
            allow_private_targets: boolean(env, "BREEZE_WEBHOOK_ALLOW_PRIVATE", !production)?,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// Refuses `BREEZE_*` variables Breeze does not know: a typo must not silently fall back to a
/// default.
fn check_unknown(env: &BTreeMap<String, String>) -> anyhow::Result<()> {
    for name in env
        .keys()
        .filter(|k| CHECKED_PREFIXES.iter().any(|p| k.starts_with(p)))
    {
        if KNOWN_SETTINGS.iter().any(|(known, _)| known == name) {
            continue;
        }
        let closest = KNOWN_SETTINGS
            .iter()
            .map(|(known, _)| (edit_distance(name, known), *known))
            .min()
            .filter(|(d, _)| *d <= 3);
        let hint = closest
            .map(|(_, k)| format!(" (did you mean {k}?)"))
            .unwrap_or_default();
        let known: Vec<&str> = KNOWN_SETTINGS.iter().map(|(k, _)| *k).collect();
        bail!(
            "unknown setting {name}{hint}; known settings: {}",
            known.join(", ")
        );
    }
    Ok(())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(vars: &[(&str, &str)]) -> anyhow::Result<Settings> {
        load_with(vars, &SettingFlags::default())
    }

    #[test]
    fn assistant_settings_name_what_is_missing_and_hide_the_key() {
        let s = load(&[]).unwrap();
        assert!(
            s.assistant.provider.is_none(),
            "no provider until configured"
        );
        assert_eq!(s.assistant.approval_timeout.as_secs(), 300);
        let s = load(&[
            ("BREEZE_AI_PROVIDER", "anthropic"),
            ("BREEZE_AI_API_KEY", "sk-ant-very-secret"),
            ("BREEZE_AI_PRICING", "llama3=0/0"),
            ("BREEZE_AI_TEMPERATURE", "0.2"),
        ])
        .unwrap();
        let p = s.assistant.provider.as_ref().unwrap();
        assert_eq!(p.model, "claude-sonnet-4-5-20250929");
        assert_eq!(p.base_url, "https://api.anthropic.com");
        assert_eq!(
            s.assistant.pricing.cost_micro_cents("llama3", 9, 9),
            Some(0)
        );
        assert!(!format!("{:?}", s.assistant).contains("sk-ant-very-secret"));
        let local = load(&[
            ("BREEZE_AI_PROVIDER", "openai"),
            ("BREEZE_AI_MODEL", "llama3"),
            ("BREEZE_AI_BASE_URL", "http://127.0.0.1:11434/v1/"),
        ])
        .unwrap();
        let p = local.assistant.provider.unwrap();
        assert_eq!(
            (p.base_url.as_str(), p.api_key),
            ("http://127.0.0.1:11434/v1", None)
        );
        for (vars, says) in [
            (
                &[("BREEZE_AI_PROVIDER", "anthropic")][..],
                "BREEZE_AI_API_KEY is required",
            ),
            (
                &[("BREEZE_AI_PROVIDER", "openai")][..],
                "BREEZE_AI_MODEL is required",
            ),
            (
                &[("BREEZE_AI_PROVIDER", "gemini")][..],
                "invalid BREEZE_AI_PROVIDER",
            ),
            (&[("BREEZE_AI_MODEL", "x")][..], "BREEZE_AI_PROVIDER is not"),
            (
                &[("BREEZE_AI_APPROVAL_TIMEOUT_SECONDS", "301")][..],
                "1 to 300",
            ),
            (&[("BREEZE_AI_PRICING", "x=1")][..], "BREEZE_AI_PRICING"),
        ] {
            let e = err(vars);
            assert!(e.contains(says), "{vars:?}: {e}");
        }
    }

    #[test]
    fn alert_settings() {
        let s = load(&[]).unwrap();
        assert!(s.alerts.notify.smtp.is_none());
        assert!(s.alerts.notify.allow_private_targets, "development");
        assert_eq!(s.alerts.tick, std::time::Duration::from_secs(30));
        let s = load(&[
            ("BREEZE_SMTP_HOST", "mail.example.com"),
            ("BREEZE_SMTP_FROM", "Breeze <a@example.com>"),
            ("BREEZE_SMTP_SECURITY", "tls"),
            ("BREEZE_SMTP_PASSWORD", "hunter2"),
            ("BREEZE_ALERT_TICK_SECONDS", "10"),
        ])
        .unwrap();
        let smtp = s.alerts.notify.smtp.clone().unwrap();
        assert_eq!((smtp.host.as_str(), smtp.port), ("mail.example.com", 465));
        assert!(
            !format!("{smtp:?}").contains("hunter2"),
            "the password is never shown"
        );
        assert_eq!(s.alerts.tick, std::time::Duration::from_secs(10));
        let err = load(&[("BREEZE_SMTP_HOST", "mail.example.com")]).unwrap_err();
        assert!(err.to_string().contains("BREEZE_SMTP_FROM"), "{err}");
        let err = load(&[
            ("BREEZE_SMTP_HOST", "m"),
            ("BREEZE_SMTP_FROM", "a@b.c"),
            ("BREEZE_SMTP_SECURITY", "ssl3"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("BREEZE_SMTP_SECURITY"), "{err}");
        let prod = load(&[
            ("BREEZE_ENV", "production"),
            ("BREEZE_PUBLIC_URL", "https://rmm.example.com"),
        ])
        .unwrap();
        assert!(
            !prod.alerts.notify.allow_private_targets,
            "production refuses private webhooks"
        );
    }

    fn load_with(vars: &[(&str, &str)], flags: &SettingFlags) -> anyhow::Result<Settings> {
        let env = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::load(&env, flags)
    }

    fn err(vars: &[(&str, &str)]) -> String {
        load(vars).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let s = load(&[("PATH", "/usr/bin"), ("HOME", "/root")]).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:3000");
        assert_eq!(s.database_url, "sqlite://./breeze-data/breeze.db");
        assert_eq!(s.public_url, "http://127.0.0.1:3000");
        assert_eq!(
            (s.environment, s.log_format, s.redis_url),
            (Environment::Development, LogFormat::Pretty, None)
        );
        // A Tier 3 call answers pending before the 60 s request timeout of common clients.
        assert_eq!(s.approval_wait_secs, 45);
        let s = load(&[("MCP_APPROVAL_WAIT_SECONDS", "300")]).unwrap();
        assert_eq!(s.approval_wait_secs, 300);
    }

    /// Every environment variable the specification (`breeze-*.md`) names, with a value it
    /// accepts and what Breeze does with it. Checked against the specification's own text when
    /// `shared/spec/` sits beside the repository (as for developers and CI).
    const SPEC_SETTINGS: &[(&str, &str, SpecName)] = &[
        ("NODE_ENV", "production", SpecName::Notice),
        ("REDIS_URL", "redis://127.0.0.1:6379", SpecName::Honoured),
        ("MCP_EXECUTE_TOOL_ALLOWLIST", "*", SpecName::Honoured),
        ("MCP_REQUIRE_EXECUTE_ADMIN", "false", SpecName::Honoured),
        ("MCP_MAX_SSE_SESSIONS_PER_KEY", "6", SpecName::Notice),
        ("MCP_SSE_RATE_LIMIT_PER_MINUTE", "31", SpecName::Honoured),
        (
            "MCP_MESSAGE_RATE_LIMIT_PER_MINUTE",
            "121",
            SpecName::Honoured,
        ),
        ("MCP_MESSAGE_MAX_BODY_BYTES", "65537", SpecName::Honoured),
        ("MCP_SESSION_TTL_SECONDS", "660", SpecName::Honoured),
        ("MCP_OAUTH_ENABLED", "true", SpecName::Honoured),
        (
            "OAUTH_ISSUER",
            "https://rmm.example.com",
            SpecName::Honoured,
        ),
        (
            "OAUTH_RESOURCE_URL",
            "https://rmm.example.com/mcp",
            SpecName::Honoured,
        ),
        ("OAUTH_JWKS_PRIVATE_JWK", "", SpecName::Honoured),
        ("OAUTH_JWKS_PUBLIC_JWK", "", SpecName::Honoured),
        (
            "OAUTH_COOKIE_SECRET",
            "0123456789abcdef0123456789abcdef",
            SpecName::Honoured,
        ),
        ("OAUTH_DCR_ENABLED", "true", SpecName::Honoured),
        ("OAUTH_DCR_REQUIRE_IAT", "false", SpecName::Honoured),
        ("OAUTH_DCR_ALLOW_ANONYMOUS", "true", SpecName::Honoured),
        (
            "OAUTH_CONSENT_URL_BASE",
            "https://app.example.com",
            SpecName::Honoured,
        ),
        (
            "TOOL_SOURCES_ALLOW_PRIVATE_EGRESS",
            "true",
            SpecName::Honoured,
        ),
    ];

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum SpecName {
        /// Read under its own name.
        Honoured,
        /// Read, and said in a one-line notice (an alias, or a switch read as Breeze's own).
        Notice,
    }

    #[test]
    fn every_setting_the_specification_names_is_honoured_or_aliased() {
        for (name, value, how) in SPEC_SETTINGS {
            let mut vars = vec![(*name, *value)];
            if *name == "NODE_ENV" {
                vars.push(("BREEZE_PUBLIC_URL", "https://rmm.example.com"));
            }
            let settings = load(&vars).unwrap_or_else(|e| panic!("{name}={value}: {e:#}"));
            let noticed = settings.notices.iter().any(|n| n.contains(name));
            assert_eq!(
                noticed,
                *how == SpecName::Notice,
                "{name}: notices {:?}",
                settings.notices
            );
            assert!(
                KNOWN_SETTINGS.iter().any(|(k, _)| k == name),
                "{name} is listed among the settings"
            );
        }
        // What each one changes.
        let s = load(&[("MCP_SESSION_TTL_SECONDS", "660")]).unwrap();
        assert_eq!(s.mcp.session_ttl, std::time::Duration::from_secs(660));
        let s = load(&[("MCP_MAX_SSE_SESSIONS_PER_KEY", "6")]).unwrap();
        assert_eq!(s.mcp.max_sessions_per_key, 6);
        assert!(
            err(&[
                ("MCP_MAX_SSE_SESSIONS_PER_KEY", "6"),
                ("MCP_MAX_SESSIONS_PER_KEY", "7")
            ])
            .contains("disagree")
        );
        // The list above covers the specification's tables and the variables its text names.
        let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/spec");
        let Ok(dir) = std::fs::read_dir(&spec) else {
            // A clone without the specification beside it (CI's) checks the list alone.
            eprintln!(
                "{}: not found, so the list was not cross-checked against it",
                spec.display()
            );
            return;
        };
        let mut named = std::collections::BTreeSet::new();
        for entry in dir.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if !file.starts_with("breeze-") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for line in text.lines() {
                // Table rows (`NAME<TAB>default<TAB>…`) and `NAME=value` in the prose.
                let row = line.split('\t').next().unwrap_or_default();
                let is_name = |w: &str| {
                    w.len() > 3
                        && w.contains('_')
                        && w.chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                };
                if line.contains('\t') && is_name(row) {
                    named.insert(row.to_owned());
                }
                for (i, _) in line.match_indices('=') {
                    let before = &line[..i];
                    let word = before
                        .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or_default();
                    if is_name(word) {
                        named.insert(word.to_owned());
                    }
                }
            }
        }
        assert!(named.contains("MCP_SESSION_TTL_SECONDS"), "{named:?}");
        for name in named {
            assert!(
                SPEC_SETTINGS.iter().any(|(n, _, _)| *n == name),
                "the specification names {name}: add it to SPEC_SETTINGS and honour or alias it"
            );
        }
    }

    #[test]
    fn node_env_production_is_production_and_must_agree() {
        let s = load(&[
            ("NODE_ENV", "production"),
            ("BREEZE_PUBLIC_URL", "https://rmm.example.com"),
        ])
        .unwrap();
        assert!(s.production(), "the production guards are on");
        assert!(err(&[("NODE_ENV", "production")]).contains("BREEZE_PUBLIC_URL is required"));
        for (breeze, node) in [("development", "production"), ("production", "development")] {
            let e = err(&[
                ("BREEZE_ENV", breeze),
                ("NODE_ENV", node),
                ("BREEZE_PUBLIC_URL", "https://rmm.example.com"),
            ]);
            assert!(e.contains("disagree"), "{e}");
        }
        let s = load(&[
            ("BREEZE_ENV", "production"),
            ("NODE_ENV", "production"),
            ("BREEZE_PUBLIC_URL", "https://rmm.example.com"),
        ])
        .unwrap();
        assert!(s.production() && s.notices.is_empty());
        assert!(!load(&[("NODE_ENV", "test")]).unwrap().production());
    }

    #[test]
    fn flags_beat_the_environment() {
        let flags = SettingFlags {
            listen: Some("0.0.0.0:8080".into()),
            ..Default::default()
        };
        let s = load_with(&[("BREEZE_LISTEN", "127.0.0.1:9999")], &flags).unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:8080");
        let flags = SettingFlags {
            listen: Some("nope".into()),
            ..Default::default()
        };
        assert!(
            load_with(&[], &flags)
                .unwrap_err()
                .to_string()
                .contains("invalid --listen")
        );
    }

    #[test]
    fn invalid_values_name_the_setting() {
        assert!(err(&[("BREEZE_LISTEN", "localhost")]).starts_with("invalid BREEZE_LISTEN"));
        assert!(err(&[("BREEZE_ENV", "prod")]).starts_with("invalid BREEZE_ENV"));
        assert!(
            err(&[("DATABASE_URL", "mysql://u:secret@h/db")]).starts_with("invalid DATABASE_URL")
        );
        assert!(
            !err(&[("DATABASE_URL", "mysql://u:secret@h/db")]).contains("secret"),
            "passwords are redacted"
        );
        assert!(err(&[("REDIS_URL", "localhost:6379")]).starts_with("invalid REDIS_URL"));
        for bad in [
            "redis+sentinel://u:secret@/breeze",
            "redis+sentinel://u:secret@10.0.0.1:26379",
            "redis://u:secret@h:port/0",
        ] {
            let e = err(&[("REDIS_URL", bad)]);
            assert!(e.starts_with("invalid REDIS_URL"), "{bad}: {e}");
            assert!(!e.contains("secret"), "{bad}: {e}");
        }
        let sentinel = "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/breeze";
        assert_eq!(
            load(&[("REDIS_URL", sentinel)])
                .unwrap()
                .redis_url
                .as_deref(),
            Some(sentinel)
        );
        assert!(
            err(&[("BREEZE_PUBLIC_URL", "rmm.example.com")])
                .starts_with("invalid BREEZE_PUBLIC_URL")
        );
        assert!(err(&[("BREEZE_LOG_FORMAT", "xml")]).starts_with("invalid BREEZE_LOG_FORMAT"));
        assert!(err(&[("BREEZE_LOG", "info,[[[")]).starts_with("invalid BREEZE_LOG"));
        assert!(err(&[("BREEZE_REDIS_PREFIX", "a b")]).starts_with("invalid BREEZE_REDIS_PREFIX"));
    }

    #[test]
    fn advisory_feeds_are_http_urls_checked_every_1_to_720_hours() {
        let s = load(&[]).unwrap();
        assert!(s.advisory_feeds.urls.is_empty(), "no feed by default");
        let s = load(&[
            (
                "BREEZE_ADVISORY_FEEDS",
                "https://osv-vulnerabilities.storage.googleapis.com/Debian/all.zip, \
                 http://mirror.lan/Alpine/all.zip,https://osv-vulnerabilities.storage.googleapis.com/Debian/all.zip",
            ),
            ("BREEZE_ADVISORY_REFRESH_HOURS", "6"),
            ("BREEZE_ADVISORY_MAX_MB", "10"),
        ])
        .unwrap();
        assert_eq!(
            s.advisory_feeds.urls.len(),
            2,
            "{:?}",
            s.advisory_feeds.urls
        );
        assert_eq!(
            s.advisory_feeds.every,
            std::time::Duration::from_secs(6 * 3600)
        );
        assert_eq!(s.advisory_feeds.max_bytes, 10 * 1024 * 1024);
        for (name, value, says) in [
            (
                "BREEZE_ADVISORY_FEEDS",
                "ftp://x/all.zip",
                "not an http(s) URL",
            ),
            (
                "BREEZE_ADVISORY_FEEDS",
                "Debian/all.zip",
                "not an http(s) URL",
            ),
            ("BREEZE_ADVISORY_REFRESH_HOURS", "721", "1 to 720"),
            ("BREEZE_ADVISORY_REFRESH_HOURS", "0", "positive"),
        ] {
            let e = format!("{:#}", load(&[(name, value)]).err().unwrap());
            assert!(e.contains(name) && e.contains(says), "{name}={value}: {e}");
        }
    }

    #[test]
    fn unknown_breeze_settings_refuse_to_start() {
        let e = err(&[("BREEZE_LISTN", "127.0.0.1:1")]);
        assert!(
            e.starts_with("unknown setting BREEZE_LISTN (did you mean BREEZE_LISTEN?)"),
            "{e}"
        );
        assert!(
            err(&[("BREEZE_FROBNICATE", "1")]).starts_with("unknown setting BREEZE_FROBNICATE;")
        );
    }

    #[test]
    fn mcp_settings() {
        let s = load(&[]).unwrap();
        assert_eq!(
            (
                s.mcp.max_sessions_per_key,
                s.mcp.max_sessions_per_org,
                s.mcp.max_sessions,
                s.mcp.max_body_bytes
            ),
            (5, 25, 100, 65_536)
        );
        assert!(s.mcp.require_execute_admin);
        assert_eq!(s.mcp.catalog, breeze_server::catalog::CatalogMode::Full);
        assert_eq!(s.mcp.discover_bytes, 8192);
        let s = load(&[
            ("BREEZE_MCP_CATALOG", "Consolidated"),
            ("BREEZE_MCP_DISCOVER_BYTES", "2048"),
        ])
        .unwrap();
        assert_eq!(
            s.mcp.catalog,
            breeze_server::catalog::CatalogMode::Consolidated
        );
        assert_eq!(s.mcp.discover_bytes, 2048);
        let e = err(&[("BREEZE_MCP_CATALOG", "compact")]);
        assert!(
            e.starts_with("invalid BREEZE_MCP_CATALOG") && e.contains("full, consolidated"),
            "{e}"
        );
        assert!(
            err(&[("BREEZE_MCP_DISCOVER_BYTES", "100")])
                .starts_with("invalid BREEZE_MCP_DISCOVER_BYTES")
        );
        assert_eq!(
            s.mcp.max_items, 1000,
            "BREEZE_MCP_MAX_ITEMS defaults to 1000"
        );
        assert_eq!(
            load(&[("BREEZE_MCP_MAX_ITEMS", "25")])
                .unwrap()
                .mcp
                .max_items,
            25
        );
        assert!(err(&[("BREEZE_MCP_MAX_ITEMS", "0")]).starts_with("invalid BREEZE_MCP_MAX_ITEMS"));
        let s = load(&[
            ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "100000"),
            ("MCP_REQUIRE_EXECUTE_ADMIN", "false"),
            ("MCP_MAX_SESSIONS_PER_ORG", "7"),
        ])
        .unwrap();
        assert_eq!(s.mcp.message_rate_per_minute, 100_000);
        assert_eq!(s.mcp.max_sessions_per_org, 7);
        assert!(!s.mcp.require_execute_admin);
        assert!(
            err(&[("MCP_MAX_SESSIONS_PER_KEY", "0")])
                .starts_with("invalid MCP_MAX_SESSIONS_PER_KEY")
        );
        assert!(
            err(&[("MCP_MESSAGE_MAX_BODY_BYTES", "lots")])
                .starts_with("invalid MCP_MESSAGE_MAX_BODY_BYTES")
        );
        assert!(
            err(&[("MCP_REQUIRE_EXECUTE_ADMIN", "maybe")])
                .starts_with("invalid MCP_REQUIRE_EXECUTE_ADMIN")
        );
        assert!(
            err(&[("MCP_MAX_SESSION_PER_KEY", "3")])
                .contains("did you mean MCP_MAX_SESSIONS_PER_KEY?")
        );
    }

    #[test]
    fn response_budget_setting() {
        assert_eq!(
            load(&[]).unwrap().mcp.max_response_bytes,
            0,
            "off by default"
        );
        let s = load(&[("BREEZE_MCP_MAX_RESPONSE_BYTES", "65536")]).unwrap();
        assert_eq!(s.mcp.max_response_bytes, 65_536);
        assert_eq!(
            load(&[("BREEZE_MCP_MAX_RESPONSE_BYTES", "0")])
                .unwrap()
                .mcp
                .max_response_bytes,
            0
        );
        assert!(
            err(&[("BREEZE_MCP_MAX_RESPONSE_BYTES", "-1")])
                .starts_with("invalid BREEZE_MCP_MAX_RESPONSE_BYTES")
        );
        assert!(
            err(&[("BREEZE_MCP_MAX_RESPONSE_BYTE", "1")])
                .contains("did you mean BREEZE_MCP_MAX_RESPONSE_BYTES?")
        );
        let config = crate::commands::server_config_for_test(&s);
        assert_eq!(config.max_response_bytes, 65_536, "flows into the server");
    }

    #[test]
    fn auth_cache_setting() {
        assert_eq!(load(&[]).unwrap().auth_cache_ms, 1000);
        assert_eq!(
            load(&[("BREEZE_AUTH_CACHE_MS", "0")])
                .unwrap()
                .auth_cache_ms,
            0
        );
        let oauth = load(&[
            ("BREEZE_AUTH_CACHE_MS", "250"),
            ("MCP_OAUTH_ENABLED", "true"),
        ])
        .unwrap()
        .oauth
        .unwrap();
        assert_eq!(
            oauth.config.cache_ttl,
            chrono::Duration::milliseconds(250),
            "the OAuth grant cache follows it too"
        );
        for bad in ["-1", "60001", "1s"] {
            assert!(
                err(&[("BREEZE_AUTH_CACHE_MS", bad)]).starts_with("invalid BREEZE_AUTH_CACHE_MS"),
                "{bad}"
            );
        }
    }

    #[test]
    fn oauth_is_off_by_default_and_production_needs_its_secrets() {
        assert!(load(&[]).unwrap().oauth.is_none());
        let dev = load(&[("MCP_OAUTH_ENABLED", "true")]).unwrap();
        let o = dev.oauth.unwrap();
        assert_eq!(o.config.issuer, "http://127.0.0.1:3000");
        assert_eq!(o.config.resource, "http://127.0.0.1:3000/mcp");
        assert!(!o.dcr.enabled);
        let prod = [
            ("BREEZE_ENV", "production"),
            ("BREEZE_PUBLIC_URL", "https://rmm.example.com"),
            ("MCP_OAUTH_ENABLED", "true"),
        ];
        assert!(err(&prod).contains("OAUTH_JWKS_PRIVATE_JWK is required"));
        let jwk = breeze_oauth::SigningKey::private_jwk(&[3; 32]).unwrap();
        let mut with_key = prod.to_vec();
        with_key.push(("OAUTH_JWKS_PRIVATE_JWK", &jwk));
        assert!(err(&with_key).contains("OAUTH_COOKIE_SECRET is required"));
        with_key.push(("OAUTH_COOKIE_SECRET", "0123456789abcdef0123456789abcdef"));
        let s = load(&with_key).unwrap().oauth.unwrap();
        assert_eq!(s.config.resource, "https://rmm.example.com/mcp");
        let mut dcr = with_key.clone();
        dcr.push(("OAUTH_DCR_ENABLED", "true"));
        assert!(err(&dcr).contains("needs OAUTH_DCR_REQUIRE_IAT or OAUTH_DCR_ALLOW_ANONYMOUS"));
        dcr.push(("OAUTH_DCR_ALLOW_ANONYMOUS", "true"));
        assert!(load(&dcr).unwrap().oauth.unwrap().dcr.allow_anonymous);
        let mut short = prod.to_vec();
        short.push(("OAUTH_JWKS_PRIVATE_JWK", &jwk));
        short.push(("OAUTH_COOKIE_SECRET", "short"));
        assert!(err(&short).contains("at least 32 characters"));
        assert!(
            err(&[
                ("MCP_OAUTH_ENABLED", "true"),
                ("OAUTH_JWKS_PRIVATE_JWK", "{}")
            ])
            .starts_with("invalid OAUTH_JWKS_PRIVATE_JWK")
        );
        assert!(err(&[("OAUTH_ISSUR", "x")]).contains("did you mean OAUTH_ISSUER?"));
    }

    #[test]
    fn production_needs_a_public_url() {
        assert!(err(&[("BREEZE_ENV", "production")]).contains("BREEZE_PUBLIC_URL is required"));
        let s = load(&[
            ("BREEZE_ENV", "production"),
            ("BREEZE_PUBLIC_URL", "https://rmm.example.com/"),
        ])
        .unwrap();
        assert!(s.production());
        assert_eq!(s.public_url, "https://rmm.example.com");
    }

    #[test]
    fn tool_rate_limits_stay_on_in_production() {
        assert!(load(&[]).unwrap().mcp.tool_rate_limits);
        assert!(
            !load(&[("MCP_TOOL_RATE_LIMITS", "false")])
                .unwrap()
                .mcp
                .tool_rate_limits
        );
        let e = err(&[
            ("BREEZE_ENV", "production"),
            ("BREEZE_PUBLIC_URL", "https://rmm.example.com"),
            ("MCP_TOOL_RATE_LIMITS", "false"),
        ]);
        assert!(
            e.contains("MCP_TOOL_RATE_LIMITS=false is refused in production"),
            "{e}"
        );
    }

    #[test]
    fn data_dir_moves_the_default_database() {
        let s = load(&[("BREEZE_DATA_DIR", "/var/lib/breeze")]).unwrap();
        assert_eq!(s.database_url, "sqlite:///var/lib/breeze/breeze.db");
        let s = load(&[
            ("BREEZE_DATA_DIR", "/x"),
            ("DATABASE_URL", "postgres://db/breeze"),
        ])
        .unwrap();
        assert_eq!(s.database_url, "postgres://db/breeze");
        assert_eq!(
            s.audit_journal_dir.as_deref(),
            Some(std::path::Path::new("/x/audit-journal"))
        );
    }

    #[test]
    fn the_audit_journal_can_move_or_be_turned_off() {
        let s = load(&[("BREEZE_AUDIT_JOURNAL_DIR", "/j")]).unwrap();
        assert_eq!(
            s.audit_journal_dir.as_deref(),
            Some(std::path::Path::new("/j"))
        );
        let s = load(&[("BREEZE_AUDIT_JOURNAL_DIR", "OFF")]).unwrap();
        assert_eq!(s.audit_journal_dir, None);
    }

    #[test]
    fn tool_source_settings() {
        let s = load(&[]).unwrap();
        assert!(s.tool_sources.key.is_none());
        assert!(
            !s.tool_sources.egress.allow_private,
            "private egress is off by default"
        );
        let key = breeze_sources::vault::Vault::generate_key().unwrap();
        let s = load(&[
            ("TOOL_SOURCES_KEY", key.as_str()),
            ("TOOL_SOURCES_ALLOW_PRIVATE_EGRESS", "true"),
        ])
        .unwrap();
        assert!(s.tool_sources.key.is_some() && s.tool_sources.egress.allow_private);
        // `breeze sources add` reads the credential from the environment: a known setting.
        assert!(load(&[("BREEZE_SOURCE_CREDENTIAL", r#"{"method":"none"}"#)]).is_ok());
        assert!(
            !format!("{:?}", s.tool_sources).contains(&key),
            "the key is never shown"
        );
        for (var, value) in [
            ("TOOL_SOURCES_KEY", "c2hvcnQ="),
            ("TOOL_SOURCES_ALLOW_PRIVATE_EGRESS", "perhaps"),
            ("TOOL_SOURCES_EXTRA_ROOTS", "/nonexistent/roots.pem"),
        ] {
            assert!(err(&[(var, value)]).contains(var), "{var}={value}");
        }
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = err(&[("TOOL_SOURCES_EXTRA_ROOTS", junk.to_str().unwrap())]);
        assert!(e.contains("TOOL_SOURCES_EXTRA_ROOTS"), "{e}");
    }
}
