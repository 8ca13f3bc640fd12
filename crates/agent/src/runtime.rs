//! `breeze-agent run`: the socket, the HTTP fallback, the timers and running received commands.
//!
//! One outbound WebSocket to `/api/v1/agents/ws` carries everything while it is up. It is
//! considered down when the upgrade fails, a read or write fails, the server closes it, or
//! nothing (not even a pong to our pings every 20 s) arrived for 60 s. While it is down,
//! heartbeats go to `POST /api/v1/agents/heartbeat` (whose answer hands out pending
//! commands), inventory, metrics and logs to their HTTP endpoints, and command results to
//! `POST /api/v1/agents/commands/{id}/result`. Results that could not be delivered wait in a
//! bounded outbox (and in the journal) and are retried on every heartbeat.
//!
//! A result written to the socket is not yet delivered: the server answers
//! `ServerFrame::ResultAck` once it stored it. Until then the result stays undelivered in the
//! journal and is sent again on every new socket (whichever instance it reaches; storing is
//! idempotent by command id), and again on the socket after [`RESEND_UNACKED_AFTER`]. A
//! result posted over HTTP is acknowledged by the 2xx answer.
//!
//! Events (`AgentFrame::Events`: watched log lines from [`crate::logwatch`], and the agent's
//! own — `agent_started` at every start, `command_failed` / `script_failed` when a command
//! fails or times out) wait in a bounded queue ([`EVENT_QUEUE_CAPACITY`], the oldest dropped
//! first) and go out within about a second, over the socket or `POST /api/v1/agents/events`.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use breeze_agent_proto::{
    AgentConfig, AgentEvent, AgentFrame, AppliedPolicy, Command, CommandKind, CommandOutcome,
    CommandResult, EVENT_SOURCE_AGENT, EventBatch, EventSeverity, Heartbeat, Inventory, LogBatch,
    MAX_EVENT_BATCH, MAX_FRAME_BYTES, MetricsBatch, PolicyConfig, ServerFrame,
};
use breeze_core::Clock;
use futures::{SinkExt, StreamExt};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::api::{Api, ws_url};
use crate::backoff::{Backoff, STABLE_AFTER};
use crate::config::{AgentFile, create_private_dir};
use crate::error::AgentError;
use crate::exec::{self, Executor, Progress};
use crate::journal::{Begin, Journal};
use crate::logship::LogControl;
use crate::system::{self, metrics::MetricsBuffer, metrics::Sampler};

/// Results kept for retry while nothing can deliver them.
pub const OUTBOX_CAPACITY: usize = 1_000;
/// Events kept while nothing can deliver them (the oldest go first).
pub const EVENT_QUEUE_CAPACITY: usize = 1_000;
/// How long a failed event delivery waits before the next try.
const EVENT_RETRY_AFTER: Duration = Duration::from_secs(5);
/// A result written to the socket and not acknowledged this long after is sent again.
pub const RESEND_UNACKED_AFTER: Duration = Duration::from_secs(120);
/// Ping interval on the socket.
const PING_EVERY: Duration = Duration::from_secs(20);
/// Silence after which the socket is considered dead.
const DEAD_AFTER: Duration = Duration::from_secs(60);
/// Log batches go out every minute, or sooner at this many entries.
const LOG_BATCH_EVERY: Duration = Duration::from_secs(60);
const LOG_BATCH_AT: usize = 100;
/// Patch scans on the agent's own schedule: every day unless the `patch` policy says
/// otherwise (never more often than every 5 minutes); the first one shortly after start.
const DEFAULT_PATCH_SCAN_MINUTES: u32 = 24 * 60;
const MIN_PATCH_SCAN_MINUTES: u32 = 5;
const FIRST_PATCH_SCAN_AFTER: Duration = Duration::from_secs(10);
/// Delay before the first heartbeat, so the socket has a moment to come up.
const FIRST_HEARTBEAT_AFTER: Duration = Duration::from_secs(3);
/// How long a refused token has to be replaced before the agent gives up: a refusal this long
/// after the first one, with nothing accepted in between and no new token in the config file
/// (`rotate-token` writes it before the old one stops working), stops the agent.
const REFUSED_GRACE: Duration = Duration::from_secs(5);

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The running agent's shared state.
pub struct Agent {
    config_path: PathBuf,
    file: Mutex<AgentFile>,
    api: Api,
    clock: Arc<dyn Clock>,
    journal: Journal,
    executor: Executor,
    logs: Arc<LogControl>,
    config_tx: watch::Sender<AgentConfig>,
    /// The configuration policy last received (none yet after a start: the server sends it
    /// after the welcome and with an HTTP heartbeat whose reported revision is not current).
    policy_tx: watch::Sender<Option<PolicyConfig>>,
    socket: Mutex<Option<mpsc::Sender<AgentFrame>>>,
    running: Mutex<HashMap<Uuid, CancellationToken>>,
    outbox: Mutex<VecDeque<CommandResult>>,
    /// Results written to a socket that the server has not acknowledged yet, with when (the
    /// results themselves are in the journal).
    unacked: Mutex<HashMap<Uuid, Instant>>,
    metrics: Mutex<MetricsBuffer>,
    events: Mutex<VecDeque<AgentEvent>>,
    events_ready: Notify,
    inventory_now: Notify,
    /// The first refusal of the token since a request was last accepted.
    refused_since: Mutex<Option<Instant>>,
    /// Why the agent stopped for good: the server refuses its token.
    refused_for_good: Mutex<Option<String>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("config_path", &self.config_path)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the agent from the config file at `config_path` until `shutdown` fires. File and disk
/// commands may not reach the config file, the state directory nor anything in `protect`.
pub async fn run(
    config_path: &Path,
    protect: &[PathBuf],
    clock: Arc<dyn Clock>,
    logs: Arc<LogControl>,
    shutdown: CancellationToken,
) -> Result<(), AgentError> {
    let agent = Agent::start(config_path, protect, clock, logs, shutdown.clone())?;
    tracing::info!(
        device_id = %lock(&agent.file).device_id,
        server = agent.api.server_url(),
        "agent running"
    );
    agent.emit(AgentEvent {
        at: agent.clock.now(),
        source: EVENT_SOURCE_AGENT.to_owned(),
        kind: "agent_started".to_owned(),
        severity: EventSeverity::Info,
        message: format!("breeze-agent {} started", crate::AGENT_VERSION),
        attributes: [("version".to_owned(), crate::AGENT_VERSION.to_owned())].into(),
    });
    let tasks = vec![
        tokio::spawn(agent.clone().connection_loop()),
        tokio::spawn(agent.clone().heartbeat_loop()),
        tokio::spawn(agent.clone().metrics_loop()),
        tokio::spawn(agent.clone().inventory_loop()),
        tokio::spawn(agent.clone().log_loop()),
        tokio::spawn(agent.clone().maintenance_loop()),
        tokio::spawn(agent.clone().patch_loop()),
        tokio::spawn(agent.clone().event_loop()),
        tokio::spawn(agent.clone().log_watch_loop()),
    ];
    shutdown.cancelled().await;
    tracing::info!("stopping");
    agent.stop_running_commands().await;
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    if let Some(message) = lock(&agent.refused_for_good).take() {
        return Err(AgentError::TokenRefused(message));
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), agent.flush_outbox()).await;
    Ok(())
}

impl Agent {
    /// Loads the config file and opens the journal (recovering interrupted commands).
    pub fn start(
        config_path: &Path,
        protect: &[PathBuf],
        clock: Arc<dyn Clock>,
        logs: Arc<LogControl>,
        shutdown: CancellationToken,
    ) -> Result<Arc<Agent>, AgentError> {
        let file = AgentFile::load(config_path)?;
        let state_dir = file.state_dir_for(config_path);
        create_private_dir(&state_dir)?;
        let journal = Journal::open(&state_dir.join("journal"), clock.clone())?;
        let pruned = journal.prune();
        if pruned > 0 {
            tracing::debug!(pruned, "old journal entries removed");
        }
        let recovered = journal.recover();
        if !recovered.is_empty() {
            tracing::info!(
                count = recovered.len(),
                "results from before the restart are waiting to be delivered"
            );
        }
        let api = Api::new(&file.server_url, file.token.clone())?;
        let (config_tx, _) = watch::channel(file.config);
        let (policy_tx, _) = watch::channel(None);
        let mut own = vec![config_path.to_path_buf()];
        own.extend_from_slice(protect);
        // The config file's temporary siblings while it is being rewritten (config::write_atomic).
        let temporaries = match (config_path.parent(), config_path.file_name()) {
            (Some(dir), Some(name)) => {
                let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
                vec![format!(
                    "{}/.{}.*.tmp",
                    dir.display(),
                    name.to_string_lossy()
                )]
            }
            _ => Vec::new(),
        };
        let executor = Executor::new(&state_dir, clock.clone(), logs.clone())
            .protecting(&own, &temporaries)
            .patching(file.patching.clone().unwrap_or_default());
        Ok(Arc::new(Agent {
            config_path: config_path.to_path_buf(),
            file: Mutex::new(file),
            api,
            clock,
            journal,
            executor,
            logs,
            config_tx,
            policy_tx,
            socket: Mutex::new(None),
            running: Mutex::new(HashMap::new()),
            outbox: Mutex::new(recovered.into_iter().collect()),
            unacked: Mutex::new(HashMap::new()),
            metrics: Mutex::new(MetricsBuffer::new(system::metrics::DEFAULT_BUFFER_SAMPLES)),
            events: Mutex::new(VecDeque::new()),
            events_ready: Notify::new(),
            inventory_now: Notify::new(),
            refused_since: Mutex::new(None),
            refused_for_good: Mutex::new(None),
            shutdown,
        }))
    }

    fn config(&self) -> AgentConfig {
        *self.config_tx.borrow()
    }

    fn apply_config(&self, config: AgentConfig) {
        if self.config() == config {
            return;
        }
        tracing::info!(?config, "new settings from the server");
        self.config_tx.send_replace(config);
        let mut file = lock(&self.file);
        file.config = config;
        if let Err(e) = file.save(&self.config_path) {
            tracing::warn!(error = %e, "could not save the new settings");
        }
    }

    /// The metric interval in effect: the policy's, else the server's agent settings.
    fn metrics_interval_secs(&self) -> u32 {
        let policy = self
            .policy_tx
            .borrow()
            .as_ref()
            .and_then(|p| p.metrics_interval_secs);
        policy.unwrap_or(self.config().metrics_interval_secs)
    }

    /// The inventory interval in effect: the policy's, else the server's agent settings.
    fn inventory_interval_secs(&self) -> u32 {
        let policy = self
            .policy_tx
            .borrow()
            .as_ref()
            .and_then(|p| p.inventory_interval_secs);
        policy.unwrap_or(self.config().inventory_interval_secs)
    }

    /// What is in effect of the configuration policy, as heartbeats report it.
    pub fn applied_policy(&self) -> AppliedPolicy {
        AppliedPolicy {
            revision: self.policy_tx.borrow().as_ref().map(|p| p.revision.clone()),
            metrics_interval_secs: self.metrics_interval_secs(),
            inventory_interval_secs: self.inventory_interval_secs(),
            log_level: self.logs.base(),
            patch_scan_interval_minutes: Some(self.patch_scan_interval_minutes()),
        }
    }

    /// The patch scan interval in effect: the policy's `patch.scanIntervalMinutes`, else daily.
    fn patch_scan_interval_minutes(&self) -> u32 {
        self.policy_tx
            .borrow()
            .as_ref()
            .and_then(|p| p.features.get("patch"))
            .and_then(|f| f.get("scanIntervalMinutes"))
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v >= MIN_PATCH_SCAN_MINUTES)
            .unwrap_or(DEFAULT_PATCH_SCAN_MINUTES)
    }

    /// Applies a configuration policy: intervals (the loops wake and re-time themselves) and
    /// the shipped log level; then reports what is in effect with a heartbeat at once. The
    /// policy changes no files and runs nothing, so the protected paths are not involved.
    fn apply_policy(self: &Arc<Self>, policy: PolicyConfig) {
        if self.policy_tx.borrow().as_ref() == Some(&policy) {
            return;
        }
        tracing::info!(
            revision = %policy.revision,
            metrics_interval_secs = ?policy.metrics_interval_secs,
            inventory_interval_secs = ?policy.inventory_interval_secs,
            log_level = ?policy.log_level,
            "configuration policy from the server"
        );
        self.logs.set_base(policy.log_level);
        self.policy_tx.send_replace(Some(policy));
        let this = self.clone();
        tokio::spawn(async move { this.send_heartbeat().await });
    }

    /// After a 401: picks up a token another process (`rotate-token`) wrote to the file.
    fn reload_token(&self) -> bool {
        match AgentFile::load(&self.config_path) {
            Ok(disk) if disk.token != self.api.token() => {
                tracing::info!("using the device token found in the config file");
                self.api.set_token(disk.token.clone());
                lock(&self.file).token = disk.token;
                true
            }
            _ => false,
        }
    }

    fn socket_sender(&self) -> Option<mpsc::Sender<AgentFrame>> {
        lock(&self.socket).clone()
    }

    /// Queues a frame on the socket; gives it back when the socket is down.
    async fn send_frame(&self, frame: AgentFrame) -> Result<(), AgentFrame> {
        match self.socket_sender() {
            Some(tx) => tx.send(frame).await.map_err(|e| e.0),
            None => Err(frame),
        }
    }

    fn note_http_error(&self, what: &str, error: &AgentError) {
        if let AgentError::Unauthorized(message) = error {
            tracing::error!(error = %error, "{what} refused: the device token is not accepted");
            self.token_refused(message);
        } else {
            tracing::debug!(error = %error, "{what} over HTTP failed");
        }
    }

    /// The server accepted the token.
    fn token_accepted(&self) {
        *lock(&self.refused_since) = None;
    }

    /// The server refused the token (401). A new token in the config file is used at once;
    /// otherwise a refusal [`REFUSED_GRACE`] after the first, with nothing accepted between,
    /// stops the agent for good (`run` returns [`AgentError::TokenRefused`]) instead of
    /// retrying forever: the device was re-enrolled, or its token revoked or rotated away.
    fn token_refused(&self, message: &str) {
        if self.reload_token() {
            self.token_accepted();
            return;
        }
        let mut since = lock(&self.refused_since);
        match *since {
            None => *since = Some(Instant::now()),
            Some(first) if first.elapsed() >= REFUSED_GRACE => {
                drop(since);
                tracing::error!(
                    %message,
                    "the server refuses this device's token: the device was re-enrolled \
                     (possibly by another machine), or its token was revoked or rotated away. \
                     Enroll again with `breeze-agent enroll --server … --key …`, adding \
                     `--reenroll-token` from an administrator to stay the same device. Stopping; \
                     exit status {}",
                    crate::EXIT_TOKEN_REFUSED
                );
                lock(&self.refused_for_good).get_or_insert_with(|| message.to_owned());
                self.shutdown.cancel();
            }
            Some(_) => {}
        }
    }

    // -----------------------------------------------------------------------------------------
    // The socket
    // -----------------------------------------------------------------------------------------

    async fn connect(&self) -> Result<Socket, AgentError> {
        let url = ws_url(self.api.server_url())?;
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| AgentError::Transport(e.to_string()))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", self.api.token()))
            .map_err(|_| AgentError::Unauthorized("the token has invalid characters".into()))?;
        request
            .headers_mut()
            .insert(tungstenite::http::header::AUTHORIZATION, bearer);
        request.headers_mut().insert(
            tungstenite::http::header::USER_AGENT,
            HeaderValue::from_static(concat!("breeze-agent/", env!("CARGO_PKG_VERSION"))),
        );
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_FRAME_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES));
        let attempt =
            tokio_tungstenite::connect_async_tls_with_config(request, Some(config), false, None);
        match tokio::time::timeout(Duration::from_secs(30), attempt).await {
            Ok(Ok((ws, _))) => Ok(ws),
            Ok(Err(tungstenite::Error::Http(response))) => {
                let status = response.status().as_u16();
                let body = response.body().clone().unwrap_or_default();
                let (code, message) = crate::api::error_body(&body)
                    .unwrap_or_else(|| (format!("http_{status}"), format!("HTTP {status}")));
                if status == 401 {
                    Err(AgentError::Unauthorized(message))
                } else {
                    Err(AgentError::Server {
                        status,
                        code,
                        message,
                    })
                }
            }
            Ok(Err(e)) => Err(AgentError::Transport(e.to_string())),
            Err(_) => Err(AgentError::Transport(
                "timed out opening the WebSocket".into(),
            )),
        }
    }

    async fn connection_loop(self: Arc<Self>) {
        let mut backoff = Backoff::new();
        let mut failures = 0u32;
        while !self.shutdown.is_cancelled() {
            match self.connect().await {
                Ok(ws) => {
                    failures = 0;
                    self.token_accepted();
                    tracing::info!("connected to the device gateway");
                    let since = Instant::now();
                    self.session(ws).await;
                    if since.elapsed() >= STABLE_AFTER {
                        backoff.reset();
                    }
                    if !self.shutdown.is_cancelled() {
                        tracing::warn!(
                            "disconnected from the device gateway; using HTTP until the socket is back"
                        );
                    }
                }
                Err(AgentError::Unauthorized(message)) => {
                    tracing::error!(%message, "the device gateway refused the device token (401); it may have been rotated or revoked");
                    self.token_refused(&message);
                    // One more try once the grace has passed (a new token may be written
                    // meanwhile); a second refusal then stops the agent.
                    tokio::select! {
                        () = tokio::time::sleep(REFUSED_GRACE) => {}
                        () = self.shutdown.cancelled() => break,
                    }
                    continue;
                }
                Err(e) => {
                    // Warn once per outage; the retries after that are debug noise.
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(error = %e, "cannot open the WebSocket; retrying with backoff, HTTP meanwhile");
                    } else {
                        tracing::debug!(error = %e, failures, "cannot open the WebSocket");
                    }
                }
            }
            let delay = backoff.next_delay();
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.cancelled() => break,
            }
        }
    }

    async fn session(self: &Arc<Self>, ws: Socket) {
        let (mut sink, mut stream) = ws.split();
        let (tx, mut rx) = mpsc::channel::<AgentFrame>(256);
        *lock(&self.socket) = Some(tx);
        // What waited for the socket goes first: results never sent, then those sent on an
        // earlier socket that no server acknowledged (it may have died before storing them).
        let this = self.clone();
        tokio::spawn(async move {
            this.flush_outbox().await;
            this.resend_unacked(Duration::ZERO).await;
            this.send_heartbeat().await;
            this.flush_metrics(true).await;
        });
        let mut last_seen = Instant::now();
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        loop {
            tokio::select! {
                frame = rx.recv() => {
                    let Some(frame) = frame else { break };
                    let result_id = match &frame {
                        AgentFrame::CommandResult(r) => Some(r.command_id),
                        _ => None,
                    };
                    let text = match serde_json::to_string(&frame) {
                        Ok(t) => t,
                        Err(e) => {
                            tracing::error!(error = %e, "could not encode a frame");
                            continue;
                        }
                    };
                    if let Err(e) = sink.send(Message::Text(text.into())).await {
                        tracing::debug!(error = %e, "socket write failed");
                        self.requeue(frame);
                        break;
                    }
                    if let Some(id) = result_id {
                        lock(&self.unacked).insert(id, Instant::now());
                    }
                }
                msg = stream.next() => {
                    last_seen = Instant::now();
                    match msg {
                        Some(Ok(Message::Text(text))) => {
                            match serde_json::from_str::<ServerFrame>(text.as_str()) {
                                Ok(frame) => self.handle_frame(frame),
                                Err(e) => tracing::warn!(error = %e, "unreadable frame from the server"),
                            }
                        }
                        Some(Ok(Message::Ping(payload))) => {
                            if sink.send(Message::Pong(payload)).await.is_err() {
                                break;
                            }
                        }
                        Some(Ok(Message::Close(_))) | None => break,
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "socket read failed");
                            break;
                        }
                    }
                }
                _ = ping.tick() => {
                    if last_seen.elapsed() > DEAD_AFTER {
                        tracing::warn!("no answer from the device gateway for 60 s; reconnecting");
                        break;
                    }
                    if sink.send(Message::Ping(Vec::new().into())).await.is_err() {
                        break;
                    }
                }
                () = self.shutdown.cancelled() => {
                    // Give the last frames (results of cancelled commands) a moment.
                    let deadline = Instant::now() + Duration::from_secs(2);
                    while let Ok(Some(frame)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                        if let Ok(text) = serde_json::to_string(&frame) {
                            if sink.send(Message::Text(text.into())).await.is_err() {
                                self.requeue(frame);
                                break;
                            }
                            if let AgentFrame::CommandResult(r) = &frame {
                                lock(&self.unacked).insert(r.command_id, Instant::now());
                            }
                        }
                    }
                    let _ = sink.send(Message::Close(None)).await;
                    break;
                }
            }
        }
        *lock(&self.socket) = None;
        rx.close();
        while let Ok(frame) = rx.try_recv() {
            self.requeue(frame);
        }
    }

    /// A frame the socket could not take goes back where it came from.
    fn requeue(&self, frame: AgentFrame) {
        match frame {
            AgentFrame::CommandResult(result) => self.push_outbox(result),
            AgentFrame::Metrics(batch) => lock(&self.metrics).restore(batch.samples),
            AgentFrame::Logs(batch) => self.logs.restore(batch.entries),
            AgentFrame::Events(batch) => self.restore_events(batch.events),
            _ => {}
        }
    }

    fn handle_frame(self: &Arc<Self>, frame: ServerFrame) {
        match frame {
            ServerFrame::Welcome { device_id, config } => {
                tracing::debug!(%device_id, "welcome");
                self.apply_config(config);
            }
            ServerFrame::Command(command) => {
                let this = self.clone();
                tokio::spawn(async move { this.run_command(command).await });
            }
            ServerFrame::Cancel { command_id } => match lock(&self.running).get(&command_id) {
                Some(token) => {
                    tracing::info!(%command_id, "cancelling");
                    token.cancel();
                }
                None => tracing::debug!(%command_id, "cancel for a command that is not running"),
            },
            ServerFrame::Config(config) => self.apply_config(config),
            ServerFrame::CollectInventory => self.inventory_now.notify_one(),
            ServerFrame::Policy(policy) => self.apply_policy(policy),
            ServerFrame::ResultAck { command_id } => {
                lock(&self.unacked).remove(&command_id);
                self.journal.mark_delivered(command_id);
            }
        }
    }

    /// Sends again the results written to a socket at least `older_than` ago that no server
    /// acknowledged.
    async fn resend_unacked(&self, older_than: Duration) {
        let due: Vec<Uuid> = lock(&self.unacked)
            .iter()
            .filter(|(_, at)| at.elapsed() >= older_than)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            match self.journal.unacknowledged(id) {
                Some(result) => {
                    tracing::debug!(command_id = %id, "sending an unacknowledged result again");
                    self.deliver(result).await;
                }
                // Acknowledged meanwhile, or pruned.
                None => {
                    lock(&self.unacked).remove(&id);
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Commands
    // -----------------------------------------------------------------------------------------

    /// Runs a delivered command at most once; a repeated delivery re-sends the stored result.
    pub async fn run_command(self: &Arc<Self>, command: Command) {
        let id = command.id;
        match self.journal.begin(id) {
            Ok(Begin::Running) => {
                tracing::debug!(command_id = %id, "already running; repeated delivery ignored");
            }
            Ok(Begin::Done(result)) => {
                tracing::debug!(command_id = %id, "already finished; sending the stored result again");
                self.deliver(*result).await;
            }
            Err(e) => {
                tracing::error!(command_id = %id, error = %e, "cannot record the command; not running it");
                let now = self.clock.now();
                let result = exec::failed(
                    id,
                    now,
                    now,
                    format!("the agent could not record the command before running it: {e}"),
                );
                self.deliver(result).await;
            }
            Ok(Begin::Run) => {
                let token = self.shutdown.child_token();
                lock(&self.running).insert(id, token.clone());
                let _ = self
                    .send_frame(AgentFrame::CommandStarted { command_id: id })
                    .await;
                let this = self.clone();
                let progress: Progress = Arc::new(move |p| {
                    if let Some(tx) = this.socket_sender() {
                        let _ = tx.try_send(AgentFrame::CommandProgress(p));
                    }
                });
                let result = self.executor.run(&command, token, progress).await;
                lock(&self.running).remove(&id);
                if let Err(e) = self.journal.finish(&result) {
                    tracing::error!(command_id = %id, error = %e, "could not store the command's result");
                }
                if matches!(command.kind, CommandKind::CollectInventory)
                    && result.status == CommandOutcome::Completed
                    && let Some(inventory) = result
                        .result
                        .clone()
                        .and_then(|v| serde_json::from_value::<Inventory>(v).ok())
                {
                    self.send_inventory(inventory).await;
                }
                tracing::info!(command_id = %id, status = ?result.status, "command finished");
                if matches!(
                    result.status,
                    CommandOutcome::Failed | CommandOutcome::TimedOut
                ) {
                    self.emit(failure_event(&command, &result));
                }
                self.deliver(result).await;
            }
        }
    }

    /// Sends a result over the socket, else HTTP, else keeps it in the outbox.
    async fn deliver(&self, result: CommandResult) {
        let result = match self.send_frame(AgentFrame::CommandResult(result)).await {
            Ok(()) => return,
            Err(AgentFrame::CommandResult(result)) => result,
            Err(_) => return,
        };
        match self.api.command_result(&result).await {
            Ok(()) => {
                lock(&self.unacked).remove(&result.command_id);
                self.journal.mark_delivered(result.command_id);
            }
            Err(e) => {
                self.note_http_error("sending a command result", &e);
                self.push_outbox(result);
            }
        }
    }

    fn push_outbox(&self, result: CommandResult) {
        let mut outbox = lock(&self.outbox);
        if outbox.iter().any(|r| r.command_id == result.command_id) {
            return;
        }
        if outbox.len() >= OUTBOX_CAPACITY
            && let Some(dropped) = outbox.pop_front()
        {
            tracing::error!(command_id = %dropped.command_id, "result outbox full; the oldest undelivered result is dropped from memory (it stays in the journal and is sent again after a restart)");
        }
        outbox.push_back(result);
    }

    async fn flush_outbox(&self) {
        let pending: Vec<CommandResult> = lock(&self.outbox).drain(..).collect();
        for result in pending {
            self.deliver(result).await;
        }
    }

    async fn stop_running_commands(&self) {
        let tokens: Vec<CancellationToken> = lock(&self.running).values().cloned().collect();
        for token in &tokens {
            token.cancel();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !lock(&self.running).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // -----------------------------------------------------------------------------------------
    // Heartbeat, metrics, inventory, logs
    // -----------------------------------------------------------------------------------------

    fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            agent_version: crate::AGENT_VERSION.to_owned(),
            uptime_secs: system::heartbeat::uptime_secs(),
            pending_reboot: system::heartbeat::pending_reboot(),
            logged_in_users: system::heartbeat::logged_in_users(),
            running_commands: self.journal.running(),
            applied_policy: Some(self.applied_policy()),
        }
    }

    async fn send_heartbeat(self: &Arc<Self>) {
        let heartbeat = self.heartbeat();
        let Err(AgentFrame::Heartbeat(heartbeat)) =
            self.send_frame(AgentFrame::Heartbeat(heartbeat)).await
        else {
            return;
        };
        match self.api.heartbeat(&heartbeat).await {
            Ok(response) => {
                self.token_accepted();
                if let Some(config) = response.config {
                    self.apply_config(config);
                }
                if let Some(policy) = response.policy {
                    self.apply_policy(policy);
                }
                for command in response.commands {
                    let this = self.clone();
                    tokio::spawn(async move { this.run_command(command).await });
                }
            }
            Err(e) => self.note_http_error("heartbeat", &e),
        }
    }

    async fn heartbeat_loop(self: Arc<Self>) {
        let mut config_rx = self.config_tx.subscribe();
        // The first one soon after start (over the socket if it came up, else over HTTP, which
        // also fetches the commands that waited for this device).
        tokio::select! {
            () = tokio::time::sleep(FIRST_HEARTBEAT_AFTER) => {}
            () = self.shutdown.cancelled() => return,
        }
        self.send_heartbeat().await;
        self.flush_outbox().await;
        loop {
            let every =
                Duration::from_secs(u64::from(self.config().heartbeat_interval_secs.max(5)));
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = config_rx.changed() => continue,
                () = self.shutdown.cancelled() => return,
            }
            self.send_heartbeat().await;
            self.flush_metrics(true).await;
            self.flush_outbox().await;
            self.resend_unacked(RESEND_UNACKED_AFTER).await;
        }
    }

    /// Sends buffered samples: all of them when `all`, else full batches only.
    async fn flush_metrics(&self, all: bool) {
        let batch_size = self.config().metrics_batch_size.max(1) as usize;
        loop {
            let samples = {
                let mut buffer = lock(&self.metrics);
                if buffer.is_empty() || (!all && buffer.len() < batch_size) {
                    return;
                }
                buffer.take(batch_size.max(if all { 100 } else { 0 }))
            };
            let batch = MetricsBatch { samples };
            let batch = match self.send_frame(AgentFrame::Metrics(batch)).await {
                Ok(()) => continue,
                Err(AgentFrame::Metrics(batch)) => batch,
                Err(_) => return,
            };
            if let Err(e) = self.api.metrics(&batch).await {
                self.note_http_error("metrics", &e);
                lock(&self.metrics).restore(batch.samples);
                return;
            }
        }
    }

    async fn metrics_loop(self: Arc<Self>) {
        let sampler = Arc::new(Mutex::new(
            tokio::task::spawn_blocking(Sampler::new)
                .await
                .unwrap_or_default(),
        ));
        // The first sample goes out a few seconds after start, on its own, so a freshly
        // enrolled machine shows live metrics at once; later ones are batched.
        let mut first = true;
        let mut policy_rx = self.policy_tx.subscribe();
        let mut since = Instant::now();
        loop {
            let every = if first {
                Duration::from_secs(5)
            } else {
                Duration::from_secs(u64::from(self.metrics_interval_secs().max(1)))
            }
            .max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
            // A new interval re-times the wait from the last sample.
            tokio::select! {
                () = tokio::time::sleep_until(since + every) => {}
                _ = policy_rx.changed() => continue,
                () = self.shutdown.cancelled() => return,
            }
            since = Instant::now();
            let sampler = sampler.clone();
            let clock = self.clock.clone();
            let sample =
                tokio::task::spawn_blocking(move || lock(&sampler).sample(clock.as_ref())).await;
            if let Ok(sample) = sample {
                lock(&self.metrics).push(sample);
            }
            self.flush_metrics(first).await;
            first = false;
        }
    }

    async fn send_inventory(&self, inventory: Inventory) {
        let inventory = match self
            .send_frame(AgentFrame::Inventory(Box::new(inventory)))
            .await
        {
            Ok(()) => return,
            Err(AgentFrame::Inventory(inventory)) => inventory,
            Err(_) => return,
        };
        if let Err(e) = self.api.inventory(&inventory).await {
            self.note_http_error("inventory", &e);
        }
    }

    async fn inventory_loop(self: Arc<Self>) {
        // The first one once the socket had a moment to come up.
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            () = self.shutdown.cancelled() => return,
        }
        loop {
            let clock = self.clock.clone();
            if let Ok(inventory) =
                tokio::task::spawn_blocking(move || system::inventory::collect(clock.as_ref()))
                    .await
            {
                self.send_inventory(inventory).await;
            }
            let mut policy_rx = self.policy_tx.subscribe();
            let since = Instant::now();
            loop {
                let every = Duration::from_secs(u64::from(self.inventory_interval_secs().max(60)));
                tokio::select! {
                    () = tokio::time::sleep_until(since + every) => break,
                    () = self.inventory_now.notified() => break,
                    changed = policy_rx.changed() => if changed.is_err() { break },
                    () = self.shutdown.cancelled() => return,
                }
            }
        }
    }

    /// Scans for patches on the policy's interval and sends the report with an inventory.
    /// A machine without a supported package manager scans nothing (logged once at debug).
    async fn patch_loop(self: Arc<Self>) {
        tokio::select! {
            () = tokio::time::sleep(FIRST_PATCH_SCAN_AFTER) => {}
            () = self.shutdown.cancelled() => return,
        }
        loop {
            let config = lock(&self.file).patching.clone().unwrap_or_default();
            let clock = self.clock.clone();
            let scanned = tokio::task::spawn_blocking(move || {
                let pm = exec::patches::PackageManager::detect(&config)?;
                let users = system::heartbeat::logged_in_users()
                    .into_iter()
                    .map(|u| u.username)
                    .collect();
                let report = pm.scan(clock.as_ref(), users)?;
                let mut inventory = system::inventory::collect(clock.as_ref());
                inventory.patches = Some(report);
                Ok::<_, String>(inventory)
            })
            .await;
            match scanned {
                Ok(Ok(inventory)) => self.send_inventory(inventory).await,
                Ok(Err(e)) => tracing::debug!(error = %e, "no patch scan"),
                Err(e) => tracing::warn!(error = %e, "the patch scan panicked"),
            }
            let mut policy_rx = self.policy_tx.subscribe();
            let since = Instant::now();
            loop {
                let every = Duration::from_secs(u64::from(self.patch_scan_interval_minutes()) * 60);
                tokio::select! {
                    () = tokio::time::sleep_until(since + every) => break,
                    changed = policy_rx.changed() => if changed.is_err() { break },
                    () = self.shutdown.cancelled() => return,
                }
            }
        }
    }

    async fn log_loop(self: Arc<Self>) {
        let mut last = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
                () = self.shutdown.cancelled() => return,
            }
            let due = self.logs.len() >= LOG_BATCH_AT
                || (last.elapsed() >= LOG_BATCH_EVERY && !self.logs.is_empty());
            if !due {
                continue;
            }
            last = Instant::now();
            let entries = self.logs.take(500);
            let batch = match self
                .send_frame(AgentFrame::Logs(LogBatch { entries }))
                .await
            {
                Ok(()) => continue,
                Err(AgentFrame::Logs(batch)) => batch,
                Err(_) => continue,
            };
            if let Err(e) = self.api.logs(&batch).await {
                tracing::debug!(error = %e, "log batch over HTTP failed");
                self.logs.restore(batch.entries);
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Events
    // -----------------------------------------------------------------------------------------

    /// Queues an event for the server; past [`EVENT_QUEUE_CAPACITY`] the oldest is dropped.
    pub fn emit(&self, event: AgentEvent) {
        let mut queue = lock(&self.events);
        if queue.len() >= EVENT_QUEUE_CAPACITY {
            queue.pop_front();
            tracing::warn!("event queue full; the oldest undelivered event is dropped");
        }
        queue.push_back(event);
        drop(queue);
        self.events_ready.notify_one();
    }

    /// Puts events that could not be delivered back in front, oldest first, within capacity.
    fn restore_events(&self, events: Vec<AgentEvent>) {
        let mut queue = lock(&self.events);
        for event in events.into_iter().rev() {
            if queue.len() >= EVENT_QUEUE_CAPACITY {
                break;
            }
            queue.push_front(event);
        }
    }

    /// Sends queued events in batches; `false` when a batch could not be delivered (it is
    /// back in the queue).
    async fn flush_events(&self) -> bool {
        loop {
            let events: Vec<AgentEvent> = {
                let mut queue = lock(&self.events);
                let n = queue.len().min(MAX_EVENT_BATCH);
                queue.drain(..n).collect()
            };
            if events.is_empty() {
                return true;
            }
            let batch = match self
                .send_frame(AgentFrame::Events(EventBatch { events }))
                .await
            {
                Ok(()) => continue,
                Err(AgentFrame::Events(batch)) => batch,
                Err(_) => return true,
            };
            if let Err(e) = self.api.events(&batch).await {
                self.note_http_error("events", &e);
                self.restore_events(batch.events);
                return false;
            }
        }
    }

    async fn event_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = self.events_ready.notified() => {}
                () = self.shutdown.cancelled() => return,
            }
            if !self.flush_events().await {
                tokio::select! {
                    () = tokio::time::sleep(EVENT_RETRY_AFTER) => {}
                    () = self.shutdown.cancelled() => return,
                }
                self.events_ready.notify_one();
            }
        }
    }

    /// Tails the config file's log watches (an invalid one is logged and left out).
    async fn log_watch_loop(self: Arc<Self>) {
        let watches = lock(&self.file).log_watches.clone();
        if let Err(e) = crate::logwatch::validate_all(&watches) {
            tracing::error!(error = %e, "the config file's logWatches are not valid; no log is watched");
            return;
        }
        if watches.is_empty() {
            return;
        }
        tracing::info!(count = watches.len(), "watching log files");
        let mut watchers: Vec<crate::logwatch::Watcher> = watches
            .into_iter()
            .map(crate::logwatch::Watcher::new)
            .collect();
        loop {
            let clock = self.clock.clone();
            let polled = tokio::task::spawn_blocking(move || {
                let now = Instant::now().into_std();
                let events: Vec<AgentEvent> = watchers
                    .iter_mut()
                    .flat_map(|w| w.poll(clock.as_ref(), now))
                    .collect();
                (watchers, events)
            })
            .await;
            let events;
            (watchers, events) = match polled {
                Ok(done) => done,
                Err(e) => {
                    tracing::error!(error = %e, "the log watch panicked; no log is watched");
                    return;
                }
            };
            for event in events {
                self.emit(event);
            }
            tokio::select! {
                () = tokio::time::sleep(crate::logwatch::POLL_EVERY) => {}
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    async fn maintenance_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(6 * 3600)) => {}
                () = self.shutdown.cancelled() => return,
            }
            let pruned = self.journal.prune();
            tracing::debug!(pruned, "journal pruned");
        }
    }
}

/// The agent's own event for a command that failed or timed out.
fn failure_event(command: &Command, result: &CommandResult) -> AgentEvent {
    let what = serde_json::to_value(&command.kind)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "command".to_owned());
    let kind = if matches!(command.kind, CommandKind::Script { .. }) {
        "script_failed"
    } else {
        "command_failed"
    };
    let outcome = match result.status {
        CommandOutcome::TimedOut => "timed out",
        _ => "failed",
    };
    let why = match (&result.error, result.exit_code) {
        (Some(e), _) => format!(": {e}"),
        (None, Some(code)) => format!(" with exit code {code}"),
        (None, None) => String::new(),
    };
    let mut attributes = std::collections::BTreeMap::new();
    attributes.insert("commandId".to_owned(), command.id.to_string());
    attributes.insert("command".to_owned(), what.clone());
    if let Some(code) = result.exit_code {
        attributes.insert("exitCode".to_owned(), code.to_string());
    }
    AgentEvent {
        at: result.finished_at,
        source: EVENT_SOURCE_AGENT.to_owned(),
        kind: kind.to_owned(),
        severity: EventSeverity::Medium,
        message: format!("{what} {outcome}{why}"),
        attributes,
    }
}
