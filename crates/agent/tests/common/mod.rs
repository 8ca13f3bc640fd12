//! The fleet the end-to-end suites start from: a Breeze server on a real socket over a test
//! store, and how they enroll and drive the real `breeze-agent` binary against it.
//!
//! Partner `P` with organizations A (`org`, with site `HQ`) and B (`other_org`); the admin
//! (`admin@p.test`, Administrator in both) holds an `ai:read`/`ai:write` key of A (`api_key`)
//! and a `*` key of each organization (`exec_keys`) for calls through the pipeline, where the
//! admin approves each Tier 3 request as it appears. Agents heartbeat every 5 s and count as
//! offline after 8 s; the automation and deployment workers tick every half second.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::{
    path::Path,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use breeze_auth::{AuthService, AuthSettings, CreateEnrollmentKey, password};
use breeze_core::{Actor, ActorType, AuditEvent, OrgId, SystemClock};
use breeze_gateway::GatewayConfig;
use breeze_limits::{MemoryLimiter, RateLimiter};
use breeze_pipeline::{
    CallOutcome,
    approvals::{DecisionRequest, decide},
};
use breeze_server::{AppState, Breeze, ServerConfig};
use breeze_store::{NewUser, Store};
use breeze_tools::{CallOptions, ProgressReport};
use serde_json::{Value, json};
use tokio::process::Command;

pub(crate) fn audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("test"), action, "test")
}

pub(crate) struct Fleet {
    pub(crate) store: Store,
    pub(crate) state: AppState,
    pub(crate) org: OrgId,
    pub(crate) other_org: OrgId,
    pub(crate) base_url: String,
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) stop: tokio_util::sync::CancellationToken,
    pub(crate) served: tokio::task::JoinHandle<std::io::Result<()>>,
    /// An API key (ai:read, ai:write) of the admin in `org`, for MCP over HTTP.
    pub(crate) api_key: String,
    /// The admin, who approves the Tier 3 calls the tests make.
    pub(crate) admin: breeze_core::User,
    /// Held while a test runs beside others (see e2e.rs: the CPU-load scenario runs alone).
    pub(crate) _beside_others: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
    /// `*` keys of the admin in `org` and `other_org`, for calls through the pipeline.
    pub(crate) exec_keys: [(OrgId, String); 2],
    /// The rate limiter the server was built with (kept for restarts).
    limiter: Arc<dyn RateLimiter>,
}

/// The server's settings for `base_url`: quick heartbeats and offline detection, quick
/// workers.
pub(crate) fn config_for(base_url: &str) -> ServerConfig {
    let mut config = ServerConfig::development(base_url);
    config.gateway = GatewayConfig {
        agent: breeze_agent_proto::AgentConfig {
            heartbeat_interval_secs: 5,
            ..Default::default()
        },
        offline_after: Duration::from_secs(8),
        sweep_interval: Duration::from_secs(1),
        ..Default::default()
    };
    config.automations.tick = Duration::from_millis(500);
    config.deployments.tick = Duration::from_millis(500);
    config
}

/// Serves `state` on `listener` until `stop`.
pub(crate) fn spawn_server(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    tokio::spawn(breeze_server::serve(
        listener,
        Breeze::new(state),
        async move {
            stop.cancelled().await;
        },
    ))
}

impl Fleet {
    /// Stops the server and starts a fresh one (new gateway, nothing in memory) on the same
    /// address, as a restart would.
    pub(crate) async fn restart(&mut self) {
        self.stop.cancel();
        let served = std::mem::replace(&mut self.served, tokio::spawn(async { Ok(()) }));
        let _ = tokio::time::timeout(Duration::from_secs(40), served).await;
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        let clock: Arc<dyn breeze_core::Clock> = Arc::new(SystemClock);
        let auth = AuthService::new(self.store.clone(), clock.clone(), AuthSettings::default());
        self.state = AppState::new(
            self.store.clone(),
            auth,
            clock,
            config_for(&self.base_url),
            self.limiter.clone(),
        );
        self.stop = tokio_util::sync::CancellationToken::new();
        self.served = spawn_server(listener, self.state.clone(), self.stop.clone());
    }

    /// `tools/call` through the whole MCP pipeline over HTTP.
    pub(crate) async fn mcp(&self, tool: &str, args: Value) -> Value {
        let reply: Value = reqwest::Client::new()
            .post(format!("{}/mcp", self.base_url))
            .header("x-api-key", &self.api_key)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": { "name": tool, "arguments": args } })
                .to_string(),
            )
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).unwrap_or(Value::Null))
            .unwrap();
        reply["result"].clone()
    }

    /// The `*` key of `org`.
    pub(crate) fn exec_key(&self, org: OrgId) -> &str {
        &self.exec_keys.iter().find(|(o, _)| *o == org).unwrap().1
    }
}

/// A fleet with default settings and a per-user rate limiter.
pub(crate) async fn server(store: Store) -> Fleet {
    server_with(store, |_| {}, Arc::new(MemoryLimiter::new())).await
}

/// [`server`] with its configuration changed by `tweak` first, and `limiter`.
pub(crate) async fn server_with(
    store: Store,
    tweak: impl FnOnce(&mut ServerConfig),
    limiter: Arc<dyn RateLimiter>,
) -> Fleet {
    let s = &store;
    let p = s.create_partner("P", "p", audit("p")).await.unwrap();
    let org = s
        .create_organization(p.id, "A", "a", audit("o"))
        .await
        .unwrap();
    let other = s
        .create_organization(p.id, "B", "b", audit("o"))
        .await
        .unwrap();
    s.org(org.id)
        .tenancy()
        .create_site("HQ", "UTC", audit("s"))
        .await
        .unwrap();
    let admin = s
        .create_user(
            NewUser {
                partner_id: p.id,
                org_id: None,
                email: "admin@p.test".into(),
                name: "A".into(),
                password_hash: password::hash("correct horse battery").unwrap(),
            },
            audit("u"),
        )
        .await
        .unwrap();
    let role = s.find_role(p.id, "Administrator").await.unwrap();
    for o in [org.id, other.id] {
        s.assign_role(admin.id, o, role.id, audit("r"))
            .await
            .unwrap();
    }

    let clock: Arc<dyn breeze_core::Clock> = Arc::new(SystemClock);
    let auth = AuthService::new(store.clone(), clock.clone(), AuthSettings::default());
    let (secret, _) = auth
        .create_api_key(
            breeze_auth::CreateApiKey {
                org_id: org.id,
                user_id: admin.id,
                name: "e2e".into(),
                scopes: breeze_core::ScopeSet::new([
                    breeze_core::Scope::AiRead,
                    breeze_core::Scope::AiWrite,
                ]),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    let mut exec_keys = Vec::new();
    for o in [org.id, other.id] {
        let (secret, _) = auth
            .create_api_key(
                breeze_auth::CreateApiKey {
                    org_id: o,
                    user_id: admin.id,
                    name: "e2e-execute".into(),
                    scopes: breeze_core::ScopeSet::new([breeze_core::Scope::All]),
                    expires_at: None,
                },
                audit("api_key.create"),
            )
            .await
            .unwrap();
        exec_keys.push((o, secret.expose().to_owned()));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base_url = format!("http://{addr}");
    let mut config = config_for(&base_url);
    tweak(&mut config);
    let state = AppState::new(store.clone(), auth, clock, config, limiter.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let served = spawn_server(listener, state.clone(), stop.clone());
    Fleet {
        store,
        state,
        org: org.id,
        other_org: other.id,
        base_url,
        addr,
        stop,
        served,
        api_key: secret.expose().to_owned(),
        exec_keys: exec_keys.try_into().unwrap(),
        admin,
        _beside_others: None,
        limiter,
    }
}

/// The real agent binary with `args` and its configuration file `config`.
pub(crate) fn agent(args: &[&str], config: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_breeze-agent"));
    c.args(args)
        .arg("--config")
        .arg(config)
        .env("BREEZE_AGENT_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Enrolls the agent of `config` into `f`'s organization A, site HQ.
pub(crate) async fn enroll(f: &Fleet, config: &Path) {
    let site = f.store.org(f.org).tenancy().list_sites().await.unwrap()[0].id;
    let (key, _) = f
        .state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: f.org,
                site_id: site,
                name: "e2e".into(),
                max_uses: Some(1),
                expires_at: f.state.clock.now() + chrono::Duration::minutes(5),
                created_by: "test".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let status = agent(
        &["enroll", "--server", &f.base_url, "--key", key.expose()],
        config,
    )
    .status()
    .await
    .unwrap();
    assert!(status.success(), "breeze-agent enroll failed");
}

/// Waits up to `secs` for `check`, failing the test naming `what`.
pub(crate) async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Approves every pending request of `org` as the admin until aborted.
pub(crate) fn approve_everything(f: &Fleet, org: OrgId) -> tokio::task::JoinHandle<()> {
    let (store, pipeline, admin) = (f.store.clone(), f.state.pipeline.clone(), f.admin.clone());
    tokio::spawn(async move {
        loop {
            if let Ok(pending) = store.org(org).approvals().list_approvals(true, 10).await {
                for r in pending {
                    let request = DecisionRequest {
                        id: r.id,
                        decision: breeze_store::Decision::Approve,
                        reason: None,
                        request_id: None,
                    };
                    let actor = Actor::new(ActorType::User, admin.id);
                    let _ = decide(&store, pipeline.registry(), &admin, actor, request).await;
                    pipeline.approvals().notify_decided();
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Calls a tool through the whole pipeline with the admin's `*` key of `org` (guard,
/// validation, approval — the admin approves each Tier 3 request as it appears — handler),
/// sending progress reports to `progress`.
pub(crate) async fn call_outcome(
    f: &Fleet,
    org: OrgId,
    tool: &str,
    args: Value,
    progress: Option<tokio::sync::mpsc::UnboundedSender<ProgressReport>>,
) -> CallOutcome {
    let principal = f
        .state
        .auth
        .authenticate_api_key(Some(f.exec_key(org)))
        .await
        .unwrap();
    let approver = approve_everything(f, org);
    let options = CallOptions {
        request_id: None,
        progress,
        ..CallOptions::default()
    };
    let outcome = f
        .state
        .pipeline
        .call(
            &principal,
            tool,
            args,
            options,
            &tokio_util::sync::CancellationToken::new(),
        )
        .await;
    approver.abort();
    outcome
}

/// [`call_outcome`] without progress: the output, or the error's message.
pub(crate) async fn call(f: &Fleet, org: OrgId, tool: &str, args: Value) -> Result<Value, String> {
    match call_outcome(f, org, tool, args, None).await {
        CallOutcome::Output(raw) => Ok(serde_json::from_str(raw.get()).unwrap()),
        CallOutcome::Failed(e) => Err(e.message),
        other => panic!("{tool}: {other:?}"),
    }
}
