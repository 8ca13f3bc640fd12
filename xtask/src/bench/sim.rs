//! Simulated agents for `cargo xtask bench fleet`, speaking the real wire contract
//! (`breeze-agent-proto`): enrollment over HTTP, then one WebSocket per agent carrying a
//! heartbeat every minute and a metrics batch every 30 s (first ones at a random offset so the
//! fleet spreads evenly), and answering each `command` frame at once with `commandStarted` and a
//! small `completed` result (a live query's: one listening port, as the agent's answer). Also the MCP client that times `manage_services list` round trips.
//!
//! Nothing here panics on what the server answers: every failure is counted by kind (an
//! `EMFILE` names itself) and the benchmark reports how far it got.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use breeze_agent_proto::{
    AgentFrame, CommandOutcome, CommandResult, DiskUsageSample, EnrollRequest, EnrollResponse,
    Heartbeat, MetricSample, MetricsBatch, NetworkSample, OsInfo, ServerFrame,
};
use futures::{SinkExt, StreamExt, stream};
use rand::Rng;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_tungstenite::tungstenite::{
    self, Message, client::IntoClientRequest, http::HeaderValue, protocol::WebSocketConfig,
};
use uuid::Uuid;

/// Failures grouped by kind.
pub(super) type Errors = BTreeMap<String, usize>;

/// What the simulated fleet does.
#[derive(Debug, Clone)]
pub(super) struct SimConfig {
    pub(super) base_url: String,
    pub(super) agents: usize,
    pub(super) enrollment_key: String,
    pub(super) enroll_concurrency: usize,
    pub(super) connect_concurrency: usize,
    pub(super) samples_per_batch: usize,
    pub(super) heartbeat_every: Duration,
    pub(super) metrics_every: Duration,
}

/// An enrolled simulated agent.
pub(super) struct Agent {
    pub(super) device_id: Uuid,
    token: String,
}

/// One setup phase (enrollment, socket connection).
#[derive(Debug, Default)]
pub(super) struct Phase {
    pub(super) attempted: usize,
    pub(super) ok: usize,
    pub(super) elapsed: Duration,
    /// Latency of each successful attempt.
    pub(super) latencies: Vec<Duration>,
    pub(super) errors: Errors,
}

impl Phase {
    pub(super) fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Latency percentile (nearest rank) in milliseconds.
pub(super) fn pct_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

fn io_kind(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(24) => "EMFILE (too many open files, simulator side)".into(),
        Some(23) => "ENFILE (system file table full)".into(),
        Some(99) => "EADDRNOTAVAIL (out of local ports)".into(),
        Some(111) => "ECONNREFUSED".into(),
        Some(104) => "ECONNRESET".into(),
        Some(110) => "ETIMEDOUT".into(),
        _ => format!("io {:?}: {e}", e.kind()),
    }
}

/// The most telling kind in an error chain: an OS error when there is one.
fn chain_kind(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io_kind(io);
        }
        cur = err.source();
    }
    e.to_string().chars().take(100).collect()
}

fn ws_kind(e: &tungstenite::Error) -> String {
    match e {
        tungstenite::Error::Io(io) => io_kind(io),
        tungstenite::Error::Http(resp) => format!("HTTP {}", resp.status()),
        other => other.to_string().chars().take(100).collect(),
    }
}

fn bump(errors: &mut Errors, kind: String) {
    *errors.entry(kind).or_default() += 1;
}

/// Enrolls `cfg.agents` agents, `cfg.enroll_concurrency` at a time.
pub(super) async fn enroll(cfg: &SimConfig) -> anyhow::Result<(Vec<Agent>, Phase)> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(cfg.enroll_concurrency)
        .timeout(Duration::from_secs(60))
        .build()?;
    let url = format!("{}/api/v1/agents/enroll", cfg.base_url);
    let start = Instant::now();
    let results: Vec<Result<(Agent, Duration), String>> = stream::iter(0..cfg.agents)
        .map(|i| {
            let http = http.clone();
            let url = url.clone();
            let body = EnrollRequest {
                enrollment_key: cfg.enrollment_key.clone(),
                hostname: format!("sim-agent-{i:05}"),
                machine_id: Some(Uuid::new_v4().simple().to_string()),
                os: OsInfo {
                    family: "linux".into(),
                    name: "Debian GNU/Linux".into(),
                    version: "12".into(),
                    kernel: "6.1.0".into(),
                    arch: "x86_64".into(),
                },
                agent_version: "0.1.0-sim".into(),
                reenroll_token: None,
                device_token: None,
            };
            async move {
                let t = Instant::now();
                let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
                let resp = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| chain_kind(&e))?;
                let status = resp.status();
                let bytes = resp.bytes().await.map_err(|e| chain_kind(&e))?;
                if !status.is_success() {
                    let code = serde_json::from_slice::<serde_json::Value>(&bytes)
                        .ok()
                        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
                        .unwrap_or_default();
                    return Err(format!("HTTP {status} {code}"));
                }
                let r: EnrollResponse = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("bad enrollment answer: {e}"))?;
                Ok((
                    Agent {
                        device_id: r.device_id,
                        token: r.token,
                    },
                    t.elapsed(),
                ))
            }
        })
        .buffer_unordered(cfg.enroll_concurrency.max(1))
        .collect()
        .await;
    let mut phase = Phase {
        attempted: cfg.agents,
        elapsed: start.elapsed(),
        ..Phase::default()
    };
    let mut agents = Vec::with_capacity(cfg.agents);
    for r in results {
        match r {
            Ok((a, lat)) => {
                agents.push(a);
                phase.latencies.push(lat);
            }
            Err(kind) => bump(&mut phase.errors, kind),
        }
    }
    phase.ok = agents.len();
    phase.latencies.sort_unstable();
    Ok((agents, phase))
}

/// Live counters of the running fleet.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) heartbeats: AtomicU64,
    pub(super) metric_batches: AtomicU64,
    pub(super) samples: AtomicU64,
    pub(super) welcomes: AtomicU64,
    pub(super) commands: AtomicU64,
    pub(super) results: AtomicU64,
    pub(super) connected: AtomicU64,
    pub(super) disconnects: Mutex<Errors>,
}

impl Counters {
    fn disconnected(&self, kind: String) {
        self.connected.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut d) = self.disconnects.lock() {
            bump(&mut d, kind);
        }
    }
}

/// A snapshot of the counters, to take differences over the measured window.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Snapshot {
    pub(super) heartbeats: u64,
    pub(super) metric_batches: u64,
    pub(super) samples: u64,
    pub(super) commands: u64,
    pub(super) results: u64,
    pub(super) connected: u64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            heartbeats: self.heartbeats.load(Ordering::Relaxed),
            metric_batches: self.metric_batches.load(Ordering::Relaxed),
            samples: self.samples.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            results: self.results.load(Ordering::Relaxed),
            connected: self.connected.load(Ordering::Relaxed),
        }
    }
}

/// The connected fleet; [`Fleet::stop`] closes every socket.
pub(super) struct Fleet {
    pub(super) counters: Arc<Counters>,
    /// Devices whose socket opened, in connection order.
    pub(super) connected: Vec<Uuid>,
    pub(super) connect: Phase,
    stop: watch::Sender<bool>,
    tasks: tokio::task::JoinSet<()>,
}

impl Fleet {
    /// Closes every socket and waits (at most `grace`) for the agents to finish.
    pub(super) async fn stop(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(grace, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        self.tasks.abort_all();
    }
}

/// Opens one socket per agent, `cfg.connect_concurrency` handshakes at a time; each agent
/// runs until [`Fleet::stop`]. Returns once every agent has connected or failed.
pub(super) async fn connect(cfg: &SimConfig, agents: Vec<Agent>) -> Fleet {
    let counters = Arc::new(Counters::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Result<(Uuid, Duration), String>>();
    let gate = Arc::new(Semaphore::new(cfg.connect_concurrency.max(1)));
    let ws_url = format!(
        "{}/api/v1/agents/ws",
        cfg.base_url.replacen("http://", "ws://", 1)
    );
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    let attempted = agents.len();
    for agent in agents {
        let ctx = AgentCtx {
            counters: counters.clone(),
            stop: stop_rx.clone(),
            samples_per_batch: cfg.samples_per_batch,
            heartbeat_every: cfg.heartbeat_every,
            metrics_every: cfg.metrics_every,
        };
        let gate = gate.clone();
        let done = done_tx.clone();
        let url = ws_url.clone();
        tasks.spawn(async move {
            let (socket, t) = {
                let Ok(_permit) = gate.acquire().await else {
                    return;
                };
                let t = Instant::now();
                (open_socket(&url, &agent.token).await, t)
            };
            match socket {
                Ok(ws) => {
                    ctx.counters.connected.fetch_add(1, Ordering::Relaxed);
                    let _ = done.send(Ok((agent.device_id, t.elapsed())));
                    drop(done);
                    run_agent(ws, ctx).await;
                }
                Err(kind) => {
                    let _ = done.send(Err(kind));
                }
            }
        });
    }
    drop(done_tx);
    let mut phase = Phase {
        attempted,
        ..Phase::default()
    };
    let mut connected = Vec::with_capacity(attempted);
    while let Some(r) = done_rx.recv().await {
        match r {
            Ok((id, lat)) => {
                connected.push(id);
                phase.latencies.push(lat);
            }
            Err(kind) => bump(&mut phase.errors, kind),
        }
    }
    phase.elapsed = start.elapsed();
    phase.ok = connected.len();
    phase.latencies.sort_unstable();
    Fleet {
        counters,
        connected,
        connect: phase,
        stop: stop_tx,
        tasks,
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open_socket(url: &str, token: &str) -> Result<Socket, String> {
    let mut request = url.into_client_request().map_err(|e| ws_kind(&e))?;
    let bearer = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "token is not a header value".to_owned())?;
    request
        .headers_mut()
        .insert(tungstenite::http::header::AUTHORIZATION, bearer);
    // Small buffers: ten thousand sockets in one process.
    let config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0);
    let attempt = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    match tokio::time::timeout(Duration::from_secs(30), attempt).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(e)) => Err(ws_kind(&e)),
        Err(_) => Err("handshake timed out (30 s)".into()),
    }
}

struct AgentCtx {
    counters: Arc<Counters>,
    stop: watch::Receiver<bool>,
    samples_per_batch: usize,
    heartbeat_every: Duration,
    metrics_every: Duration,
}

fn jittered(every: Duration) -> tokio::time::Interval {
    let offset = rand::thread_rng().gen_range(0..every.as_millis().max(1) as u64);
    let mut i = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_millis(offset),
        every,
    );
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    i
}

fn sample() -> MetricSample {
    let mut rng = rand::thread_rng();
    MetricSample {
        at: now(),
        cpu_percent: rng.gen_range(0.0..100.0),
        ram_percent: rng.gen_range(10.0..90.0),
        ram_used_bytes: rng.gen_range(1u64 << 30..8u64 << 30),
        disks: vec![DiskUsageSample {
            mount: "/".into(),
            used_percent: rng.gen_range(10.0..95.0),
        }],
        network: vec![NetworkSample {
            interface: "eth0".into(),
            rx_bytes: rng.gen_range(0..10_000_000),
            tx_bytes: rng.gen_range(0..10_000_000),
        }],
        process_count: rng.gen_range(80..400),
    }
}

fn text(frame: &AgentFrame) -> Result<Message, String> {
    serde_json::to_string(frame)
        .map(|t| Message::Text(t.into()))
        .map_err(|e| e.to_string())
}

async fn run_agent(mut ws: Socket, mut ctx: AgentCtx) {
    let born = Instant::now();
    let mut heartbeat = jittered(ctx.heartbeat_every);
    let mut metrics = jittered(ctx.metrics_every);
    let c = ctx.counters.clone();
    let outcome: Result<(), String> = loop {
        tokio::select! {
            _ = ctx.stop.changed() => {
                let _ = ws.close(None).await;
                break Ok(());
            }
            _ = heartbeat.tick() => {
                let frame = AgentFrame::Heartbeat(Heartbeat {
                    agent_version: "0.1.0-sim".into(),
                    uptime_secs: born.elapsed().as_secs() + 86_400,
                    pending_reboot: false,
                    logged_in_users: vec![],
                    running_commands: vec![],
                    applied_policy: None,
                });
                match text(&frame) {
                    Ok(m) => if let Err(e) = ws.send(m).await { break Err(ws_kind(&e)) },
                    Err(e) => break Err(e),
                }
                c.heartbeats.fetch_add(1, Ordering::Relaxed);
            }
            _ = metrics.tick() => {
                let n = ctx.samples_per_batch.max(1);
                let frame = AgentFrame::Metrics(MetricsBatch { samples: (0..n).map(|_| sample()).collect() });
                match text(&frame) {
                    Ok(m) => if let Err(e) = ws.send(m).await { break Err(ws_kind(&e)) },
                    Err(e) => break Err(e),
                }
                c.metric_batches.fetch_add(1, Ordering::Relaxed);
                c.samples.fetch_add(n as u64, Ordering::Relaxed);
            }
            msg = ws.next() => {
                let msg = match msg {
                    None => break Err("server closed the socket".into()),
                    Some(Err(e)) => break Err(ws_kind(&e)),
                    Some(Ok(m)) => m,
                };
                let body = match msg {
                    Message::Text(t) => t,
                    Message::Close(_) => break Err("server sent close".into()),
                    _ => continue,
                };
                match serde_json::from_str::<ServerFrame>(body.as_str()) {
                    Ok(ServerFrame::Welcome { .. }) => {
                        c.welcomes.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(ServerFrame::Command(cmd)) => {
                        c.commands.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = answer(&mut ws, &cmd).await {
                            break Err(e);
                        }
                        c.results.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => break Err(format!("unreadable server frame: {e}")),
                }
            }
        }
    };
    if let Err(kind) = outcome {
        c.disconnected(kind);
    } else {
        c.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A live query's answer as an agent gives it: one listening port.
fn live_answer(question: &breeze_agent_proto::livequery::Question) -> serde_json::Value {
    let rows = vec![serde_json::json!({
        "protocol": "tcp", "address": "0.0.0.0", "port": 22, "process": "sshd", "pid": 812,
    })];
    let bytes = rows.iter().map(|r| r.to_string().len() as u64).sum();
    serde_json::to_value(breeze_agent_proto::livequery::LiveAnswer {
        question: question.name().to_owned(),
        rows,
        cap: None,
        bytes,
        protected_skipped: 0,
    })
    .unwrap_or_default()
}

async fn answer(ws: &mut Socket, cmd: &breeze_agent_proto::Command) -> Result<(), String> {
    let command_id = cmd.id;
    let started_at = now();
    ws.send(text(&AgentFrame::CommandStarted { command_id })?)
        .await
        .map_err(|e| ws_kind(&e))?;
    let result = AgentFrame::CommandResult(CommandResult {
        command_id,
        status: CommandOutcome::Completed,
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        result: Some(match &cmd.kind {
            breeze_agent_proto::CommandKind::LiveQuery { question, .. } => live_answer(question),
            _ => serde_json::json!({"processes": [{
                "pid": 1, "name": "systemd", "user": "root", "cpuPercent": 0.1,
                "memoryBytes": 12_345_678, "memoryPercent": 0.2, "command": "/sbin/init",
                "startedAt": started_at,
            }]}),
        }),
        error: None,
        started_at,
        finished_at: now(),
    });
    ws.send(text(&result)?).await.map_err(|e| ws_kind(&e))
}

/// `tools/call manage_services list` over stateless MCP POSTs (a Tier 2 agent command;
/// `execute_command` is Tier 3 and waits for a person's approval).
#[derive(Clone)]
pub(super) struct Mcp {
    http: reqwest::Client,
    url: String,
}

impl Mcp {
    pub(super) fn new(base_url: &str) -> anyhow::Result<Mcp> {
        Ok(Mcp {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .tcp_nodelay(true)
                .build()?,
            url: format!("{base_url}/mcp"),
        })
    }

    /// One call; the latency on success, the kind of failure otherwise.
    pub(super) async fn list_services(&self, key: &str, device: Uuid) -> Result<Duration, String> {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "manage_services", "arguments": {
                "deviceId": device, "action": "list"
            }}
        });
        let t = Instant::now();
        let resp = self
            .http
            .post(&self.url)
            .header("x-api-key", key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| chain_kind(&e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| chain_kind(&e))?;
        let elapsed = t.elapsed();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        // JSON, or an SSE stream whose last `data:` line is the answer.
        let json = if text.trim_start().starts_with('{') {
            text.as_str()
        } else {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .rfind(|d| d.contains("\"result\"") || d.contains("\"error\""))
                .unwrap_or("")
        };
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|_| "unreadable reply".to_owned())?;
        if let Some(err) = v.get("error") {
            return Err(format!("JSON-RPC error {}", err["code"]));
        }
        if v["result"]["isError"].as_bool() == Some(true) {
            let msg = v["result"]["content"][0]["text"].as_str().unwrap_or("");
            return Err(format!(
                "tool error: {}",
                msg.chars().take(80).collect::<String>()
            ));
        }
        if v.get("result").is_none() {
            return Err("no result".into());
        }
        Ok(elapsed)
    }
}

/// Round trips of one mode (sequential, or bursts of `concurrency`).
#[derive(Debug, Default)]
pub(super) struct RoundTrips {
    pub(super) concurrency: usize,
    pub(super) latencies: Vec<Duration>,
    pub(super) errors: Errors,
}

/// The command loop: the first half of `window` makes `seq_calls` sequential calls spread
/// evenly, the second half `burst_rounds` bursts of `concurrency` calls at once. Call `i` uses
/// key `i / calls_per_key`: each key belongs to its own user, because `manage_services` is
/// limited per user.
#[allow(clippy::too_many_arguments)]
pub(super) async fn command_loop(
    mcp: Mcp,
    keys: Vec<String>,
    calls_per_key: usize,
    devices: Arc<Vec<Uuid>>,
    window: Duration,
    seq_calls: usize,
    burst_rounds: usize,
    concurrency: usize,
) -> (RoundTrips, RoundTrips) {
    let start = tokio::time::Instant::now();
    let half = window / 2;
    let key_for = |i: usize| keys.get(i / calls_per_key.max(1)).cloned();
    let pick = || {
        let i = rand::thread_rng().gen_range(0..devices.len().max(1));
        devices.get(i).copied()
    };
    let mut seq = RoundTrips {
        concurrency: 1,
        ..RoundTrips::default()
    };
    let mut next = 0usize;
    for i in 0..seq_calls {
        tokio::time::sleep_until(start + half.mul_f64(i as f64 / seq_calls.max(1) as f64)).await;
        let (Some(key), Some(dev)) = (key_for(next), pick()) else {
            break;
        };
        next += 1;
        match mcp.list_services(&key, dev).await {
            Ok(l) => seq.latencies.push(l),
            Err(k) => bump(&mut seq.errors, k),
        }
    }
    let mut burst = RoundTrips {
        concurrency,
        ..RoundTrips::default()
    };
    for r in 0..burst_rounds {
        tokio::time::sleep_until(
            start + half + half.mul_f64(r as f64 / burst_rounds.max(1) as f64),
        )
        .await;
        let mut calls = Vec::with_capacity(concurrency);
        for _ in 0..concurrency {
            let (Some(key), Some(dev)) = (key_for(next), pick()) else {
                break;
            };
            next += 1;
            let mcp = mcp.clone();
            calls.push(async move { mcp.list_services(&key, dev).await });
        }
        for r in futures::future::join_all(calls).await {
            match r {
                Ok(l) => burst.latencies.push(l),
                Err(k) => bump(&mut burst.errors, k),
            }
        }
    }
    seq.latencies.sort_unstable();
    burst.latencies.sort_unstable();
    (seq, burst)
}

/// Wall-clock time: a simulated agent stamps its reports like a real one.
#[allow(clippy::disallowed_methods)] // no Breeze clock out here
pub(super) fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}
