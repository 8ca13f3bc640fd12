//! The device gateway: the server's side of the agent channel.
//!
//! It knows which agents hold a live socket (in this process), pushes queued commands to
//! them, stores what they report (heartbeats, inventory, metrics, logs, command results) and
//! wakes the tool call waiting for a result. The database is the source of truth: a command
//! is a row before it is a frame, every state change is a forward-only update, and a waiter
//! re-reads the row on a short poll as well as on the in-process wake-up — so a result that
//! arrives over the HTTP fallback, or on another instance, is never missed.
//! [`Gateway::deliver`] is the only place a frame leaves for a device.
//!
//! **Several instances** ([`Gateway::spawn_bus_follower`]): a command queued here for an agent
//! whose socket another instance holds is announced on the store's cluster bus, and that
//! instance claims it (the same forward-only claim as at connection, so exactly once) and
//! pushes it at once; results, starts and cancellations are announced too, so a waiter here
//! wakes as soon as the agent answers there, and a cancellation reaches the agent wherever it
//! is. Progress steps reach only waiters on the instance holding the socket; elsewhere a
//! waiter sees the command's stored states.
//!
//! **Dead sockets.** A connection that stops forwarding without closing (a half-open socket:
//! a NAT or proxy that dropped its state, a partitioned network) looks alive to the writer:
//! writes land in kernel buffers. Two things end such a socket here. The server pings every
//! [`GatewayConfig::ping_interval`] and drops a socket from which nothing (no pong, no ping,
//! no frame) arrived for [`GatewayConfig::silence_limit`]; the agent pings every 20 s, so a
//! live agent is never that quiet. And an agent's new socket is announced on the bus
//! ([`Signal::AgentConnected`]): an instance holding an older socket for that device drops it
//! at once. Whenever a socket goes, the commands pushed on it that the agent has not reported
//! started go back to pending and are offered to whichever instance holds the agent now, so
//! a command is delivered on the agent's current socket or times out with the reason "the
//! device did not pick the command up in time", never left `sent` on a dead socket.
//!
//! Background work ([`Gateway::spawn_sweeper`], once per cluster): commands past their deadline
//! become `timed_out`, devices that missed heartbeats become `offline`, and metrics, agent logs
//! and idempotency records past retention are pruned.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use breeze_agent_proto::{
    AgentConfig, AgentFrame, AppliedPolicy, CommandProgress, HeartbeatResponse, LogLevel,
    MAX_EVENT_BATCH, MAX_REPORT_BATCH, PolicyConfig, ServerFrame,
};
use breeze_core::FeatureType;
use breeze_core::config_policy::{Effective, LogLevelSetting, feature_values};
use breeze_core::{AuditEvent, DeviceId, OrgId, TelemetryKind};
use breeze_store::{CommandRecord, MetricsRetention, NewCommand, Signal, Store, StoreError};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

/// Frames buffered per connected agent before a push counts as failed.
const OUTBOX: usize = 256;

/// The gateway's sweep and its hourly pruning among the cluster's periodic jobs
/// (`Store::claim_scheduled_run`).
const SWEEP_JOB: &str = "gateway.sweep";
const PRUNE_JOB: &str = "gateway.prune";

/// How often the server pings an agent's socket by default.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(15);

/// How long an agent's socket may stay silent before it is dropped, by default: more than two
/// of the agent's 20 s pings and three of the server's.
pub const DEFAULT_SILENCE_LIMIT: Duration = Duration::from_secs(45);

/// Tunables.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// What agents are told to do (intervals).
    pub agent: AgentConfig,
    /// A device with no heartbeat for this long is marked offline.
    pub offline_after: Duration,
    /// How often the sweeper runs.
    pub sweep_interval: Duration,
    /// How often a waiting call re-reads its command from the database.
    pub poll_interval: Duration,
    pub metrics_retention: MetricsRetention,
    /// Agent logs older than this are pruned.
    pub log_retention: chrono::Duration,
    /// How often the server pings an agent's socket.
    pub ping_interval: Duration,
    /// A socket from which nothing arrived for this long is dropped as dead (the agent pings
    /// every 20 s and answers pings, so a live one is never this quiet).
    pub silence_limit: Duration,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        let agent = AgentConfig::default();
        Self {
            offline_after: Duration::from_secs(u64::from(agent.heartbeat_interval_secs) * 3),
            agent,
            sweep_interval: Duration::from_secs(5),
            poll_interval: Duration::from_secs(1),
            metrics_retention: MetricsRetention::default(),
            log_retention: chrono::Duration::days(14),
            ping_interval: DEFAULT_PING_INTERVAL,
            silence_limit: DEFAULT_SILENCE_LIMIT,
        }
    }
}

/// Why a gateway operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a waiting caller sees while a command runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The agent started it.
    Started,
    /// The agent reported progress.
    Step(CommandProgress),
}

struct Connection {
    /// A UUIDv7: a later socket sorts higher, across instances (their clocks agree far more
    /// closely than the agent's one-second minimum between connections).
    id: Uuid,
    org: OrgId,
    /// SHA-256 of the device token the socket was opened with.
    credential: [u8; 32],
    tx: mpsc::Sender<ServerFrame>,
}

#[derive(Default)]
struct Waiter {
    /// Bumped on every change of the command (progress or completion).
    changed: Option<watch::Sender<u64>>,
    progress: Vec<Progress>,
}

struct Inner {
    store: Store,
    config: GatewayConfig,
    connections: Mutex<HashMap<DeviceId, Connection>>,
    waiters: Mutex<HashMap<Uuid, Waiter>>,
    /// Commands of a batch ([`OrgFleet::submit_many`]) whose outcome a [`CommandWatch`] waits for.
    watches: Mutex<HashMap<Uuid, mpsc::UnboundedSender<Finished>>>,
    /// Sockets dropped because another instance holds a newer one for the device.
    moved_sockets: AtomicU64,
    /// Cancelled when the server shuts down: every socket closes so agents reconnect to the
    /// next instance instead of holding on to this one.
    closing: CancellationToken,
    /// Told of every stored metrics or events report (the alert engine's incremental path).
    reports: Mutex<Option<tokio::sync::mpsc::Sender<Reported>>>,
}

/// A report an agent made that was stored: what the alert engine evaluates incrementally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reported {
    pub org: OrgId,
    pub device: DeviceId,
    pub kind: TelemetryKind,
}

/// The gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("connected", &self.connected_count())
            .finish_non_exhaustive()
    }
}

/// What a [`CommandWatch`] hears about one of its commands.
#[derive(Debug, Clone)]
pub enum Finished {
    /// The agent's result was stored here: the command as stored, final.
    Stored(Box<CommandRecord>),
    /// The command changed elsewhere (another instance, the sweeper, a cancellation): read it
    /// again to learn its state.
    Changed(Uuid),
}

/// Hears the outcome of a batch of commands as each arrives ([`OrgFleet::submit_many`]).
/// Dropping it stops listening. A result stored on another instance arrives as
/// [`Finished::Changed`] through the cluster bus; a holder that must not miss one also reads
/// the commands now and then ([`breeze_store::OrgCommands::finished_commands`]).
pub struct CommandWatch {
    gateway: Gateway,
    ids: Vec<Uuid>,
    rx: mpsc::UnboundedReceiver<Finished>,
}

impl CommandWatch {
    /// The next outcome heard; `None` once every command's result was handed over.
    pub async fn recv(&mut self) -> Option<Finished> {
        self.rx.recv().await
    }
}

impl Drop for CommandWatch {
    fn drop(&mut self) {
        let mut watches = lock(&self.gateway.inner.watches);
        for id in &self.ids {
            watches.remove(id);
        }
    }
}

/// A registered socket; dropping it unregisters (unless a newer socket replaced it).
pub struct Registration {
    gateway: Gateway,
    device: DeviceId,
    id: Uuid,
    /// Frames to write to the socket.
    pub outbox: mpsc::Receiver<ServerFrame>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let removed = {
            let mut conns = lock(&self.gateway.inner.connections);
            if conns.get(&self.device).is_some_and(|c| c.id == self.id) {
                conns.remove(&self.device)
            } else {
                None
            }
        };
        // Replaced by a newer socket here: that one claimed what was pending already.
        if removed.is_some() {
            self.gateway.socket_gone(self.device);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain maps behind; keep serving.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Gateway {
    pub fn new(store: Store, config: GatewayConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                config,
                connections: Mutex::new(HashMap::new()),
                waiters: Mutex::new(HashMap::new()),
                watches: Mutex::new(HashMap::new()),
                moved_sockets: AtomicU64::new(0),
                closing: CancellationToken::new(),
                reports: Mutex::new(None),
            }),
        }
    }

    /// Sends every stored metrics or events report to `listener` from now on. A full listener
    /// misses reports (never blocks an agent): the alert engine's tick is the safety net.
    pub fn listen_reports(&self, listener: tokio::sync::mpsc::Sender<Reported>) {
        *lock(&self.inner.reports) = Some(listener);
    }

    fn reported(&self, org: OrgId, device: DeviceId, kind: TelemetryKind) {
        if let Some(tx) = lock(&self.inner.reports).as_ref() {
            let _ = tx.try_send(Reported { org, device, kind });
        }
    }

    /// The agent configuration handed out at enrollment and in the welcome frame.
    pub fn agent_config(&self) -> AgentConfig {
        self.inner.config.agent
    }

    /// Closes every agent socket (at shutdown); agents reconnect with backoff.
    pub fn close_all(&self) {
        self.inner.closing.cancel();
    }

    /// Resolves when [`Gateway::close_all`] was called.
    pub fn closing(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.inner.closing.cancelled()
    }

    /// Whether `device` holds a live socket to this instance.
    pub fn is_connected(&self, device: DeviceId) -> bool {
        lock(&self.inner.connections).contains_key(&device)
    }

    /// How many agents hold a live socket to this instance.
    pub fn connected_count(&self) -> usize {
        lock(&self.inner.connections).len()
    }

    /// How often the server pings an agent's socket ([`GatewayConfig::ping_interval`]).
    pub fn ping_interval(&self) -> Duration {
        self.inner.config.ping_interval
    }

    /// How long a socket may be silent before it is dropped
    /// ([`GatewayConfig::silence_limit`]).
    pub fn silence_limit(&self) -> Duration {
        self.inner.config.silence_limit
    }

    /// How many sockets this instance dropped because the agent had opened a newer one on
    /// another instance.
    pub fn moved_sockets(&self) -> u64 {
        self.inner.moved_sockets.load(Ordering::Relaxed)
    }

    /// A socket of `device` ended here and no newer one replaced it: the commands pushed on
    /// it and not started go back to pending, offered to whoever holds the agent now (this
    /// instance, another one through the bus, or its next connection or HTTP heartbeat).
    fn socket_gone(&self, device: DeviceId) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let gw = self.clone();
        runtime.spawn(async move {
            match gw.inner.store.requeue_sent_commands(device).await {
                Ok(0) => return,
                Ok(n) => tracing::info!(%device, commands = n, "commands on a closed agent socket go back to the queue"),
                Err(e) => {
                    // They stay `sent`; the agent's next connection is handed them again.
                    tracing::warn!(%device, error = %e, "could not requeue the commands of a closed agent socket");
                }
            }
            if gw.is_connected(device) {
                gw.push_pending(device).await;
            } else {
                gw.inner.store.publish(Signal::CommandQueued { device });
            }
        });
    }

    /// Registers a live socket for `device`, opened with the token whose SHA-256 is
    /// `credential`, replacing (and so closing) an older one, queues the welcome frame and
    /// hands out the commands still pending for it.
    pub async fn connect(
        &self,
        device: DeviceId,
        org: OrgId,
        credential: [u8; 32],
    ) -> Result<Registration, GatewayError> {
        let (tx, outbox) = mpsc::channel(OUTBOX);
        let id = Uuid::now_v7();
        // The channel is fresh and larger than one frame: this cannot fail.
        let _ = tx.try_send(ServerFrame::Welcome {
            device_id: device.0,
            config: self.inner.config.agent,
        });
        lock(&self.inner.connections).insert(
            device,
            Connection {
                id,
                org,
                credential,
                tx,
            },
        );
        // An instance still holding an older socket of this agent drops it now.
        self.inner
            .store
            .publish(Signal::AgentConnected { device, socket: id });
        let registration = Registration {
            gateway: self.clone(),
            device,
            id,
            outbox,
        };
        // The effective configuration policy right after the welcome; a failure here is
        // logged, never the connection's.
        match self.policy_for(org, device).await {
            Ok(policy) => {
                self.deliver(device, ServerFrame::Policy(policy));
            }
            Err(e) => tracing::warn!(%device, error = %e, "could not resolve the device's policy"),
        }
        for cmd in self.inner.store.claim_pending_commands(device).await? {
            self.push_claimed(device, &cmd).await;
        }
        Ok(registration)
    }

    /// The device's effective configuration as the agent receives it.
    pub async fn policy_for(
        &self,
        org: OrgId,
        device: DeviceId,
    ) -> Result<PolicyConfig, GatewayError> {
        let effective = self
            .inner
            .store
            .org(org)
            .config_policies()
            .effective_configuration(device)
            .await?;
        Ok(wire_policy(&effective))
    }

    /// Pushes the effective configuration to `devices`: those connected here in the
    /// background, the others through the instances holding their sockets.
    fn push_policies(&self, org: OrgId, devices: Vec<DeviceId>) {
        let elsewhere: Vec<DeviceId> = devices
            .iter()
            .copied()
            .filter(|d| !self.is_connected(*d))
            .collect();
        if !elsewhere.is_empty() {
            self.inner
                .store
                .publish(Signal::policies_changed(org, elsewhere));
        }
        self.push_policies_here(org, Some(devices));
    }

    /// Pushes the effective configuration to those of `devices` (`None`: of the organization's
    /// devices) connected here, in the background (one resolution of the organization's
    /// candidates for all of them).
    fn push_policies_here(&self, org: OrgId, devices: Option<Vec<DeviceId>>) {
        let gw = self.clone();
        tokio::spawn(async move {
            let connected: Vec<DeviceId> = {
                let conns = lock(&gw.inner.connections);
                match devices {
                    Some(devices) => devices
                        .into_iter()
                        .filter(|d| conns.get(d).is_some_and(|c| c.org == org))
                        .collect(),
                    None => conns
                        .iter()
                        .filter(|(_, c)| c.org == org)
                        .map(|(d, _)| *d)
                        .collect(),
                }
            };
            if connected.is_empty() {
                return;
            }
            let o = gw.inner.store.org(org);
            let (places, candidates) = match (
                o.config_policies()
                    .device_places(if connected.len() == 1 {
                        Some(&connected)
                    } else {
                        None
                    })
                    .await,
                o.config_policies().config_candidates().await,
            ) {
                (Ok(p), Ok(c)) => (p, c),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(%org, error = %e, "could not resolve policies to push");
                    return;
                }
            };
            for place in places {
                let device = DeviceId(place.device);
                if connected.contains(&device) {
                    let effective = breeze_core::config_policy::resolve_for(&place, &candidates);
                    gw.deliver(device, ServerFrame::Policy(wire_policy(&effective)));
                }
            }
        });
    }

    /// Closes the socket `device` holds here when the token it was opened with is no longer
    /// one the device accepts (re-enrolled, rotated, revoked, deleted). Dropping the
    /// connection's sender ends the socket's loop, which closes it.
    async fn recheck_credential(&self, device: DeviceId) {
        let Some((id, credential)) = lock(&self.inner.connections)
            .get(&device)
            .map(|c| (c.id, c.credential))
        else {
            return;
        };
        match self
            .inner
            .store
            .device_token_valid(device, &credential)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                let removed = {
                    let mut conns = lock(&self.inner.connections);
                    conns
                        .get(&device)
                        .is_some_and(|c| c.id == id)
                        .then(|| conns.remove(&device))
                        .flatten()
                };
                if removed.is_some() {
                    tracing::warn!(%device, "closed an agent socket: its device token is no longer valid");
                    // What was pushed on it and not started goes to the device's next socket.
                    self.socket_gone(device);
                }
            }
            Err(e) => {
                tracing::warn!(%device, error = %e, "could not check an agent socket's token");
            }
        }
    }

    /// Sends `frame` to `device` if it holds a live socket here. The only way out to agents.
    pub fn deliver(&self, device: DeviceId, frame: ServerFrame) -> bool {
        let tx = lock(&self.inner.connections)
            .get(&device)
            .map(|c| c.tx.clone());
        tx.is_some_and(|tx| tx.try_send(frame).is_ok())
    }

    async fn push_claimed(&self, device: DeviceId, cmd: &CommandRecord) {
        let delivered = match cmd.to_wire() {
            Ok(wire) => self.deliver(device, ServerFrame::Command(wire)),
            Err(e) => {
                tracing::error!(command = %cmd.id, error = %e, "undeliverable command");
                false
            }
        };
        if !delivered && let Err(e) = self.inner.store.requeue_command(cmd.id).await {
            tracing::warn!(command = %cmd.id, error = %e, "could not requeue a command");
        }
    }

    /// The gateway narrowed to one organization: the only way to queue, wait for or cancel a
    /// command, so a holder can reach that organization's devices and no other's.
    pub fn org(&self, org: OrgId) -> OrgFleet<'_> {
        OrgFleet { gateway: self, org }
    }

    /// Queues a command and pushes it at once when the device is connected here; otherwise the
    /// instance holding the device's socket is told to (the bus), and failing that it waits for
    /// the agent's next connection or HTTP heartbeat (until its deadline).
    async fn submit(
        &self,
        org: OrgId,
        new: NewCommand,
        audit: AuditEvent,
    ) -> Result<CommandRecord, GatewayError> {
        let device = new.device_id;
        let cmd = self
            .inner
            .store
            .org(org)
            .commands()
            .create_command(new, audit)
            .await?;
        if !self.is_connected(device) {
            self.inner.store.publish(Signal::CommandQueued { device });
        } else if self.inner.store.mark_command_sent(cmd.id).await? {
            self.push_claimed(device, &cmd).await;
        }
        Ok(cmd)
    }

    /// Queues one command per device in one transaction and pushes those whose agents are
    /// connected here at once (the others through the bus or at their next connection); the
    /// watch is listening before anything is pushed, so no answer is missed.
    async fn submit_many(
        &self,
        org: OrgId,
        news: Vec<NewCommand>,
        audit: AuditEvent,
    ) -> Result<(Vec<CommandRecord>, CommandWatch), GatewayError> {
        let cmds = self
            .inner
            .store
            .org(org)
            .commands()
            .create_commands(news, audit)
            .await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let ids: Vec<Uuid> = cmds.iter().map(|c| c.id).collect();
        {
            let mut watches = lock(&self.inner.watches);
            for id in &ids {
                watches.insert(*id, tx.clone());
            }
        }
        let watch = CommandWatch {
            gateway: self.clone(),
            ids,
            rx,
        };
        let (here, elsewhere): (Vec<&CommandRecord>, Vec<&CommandRecord>) =
            cmds.iter().partition(|c| self.is_connected(c.device_id));
        for c in elsewhere {
            self.inner.store.publish(Signal::CommandQueued {
                device: c.device_id,
            });
        }
        let ids: Vec<Uuid> = here.iter().map(|c| c.id).collect();
        let sent: std::collections::HashSet<Uuid> = self
            .inner
            .store
            .mark_commands_sent(&ids)
            .await?
            .into_iter()
            .collect();
        for c in here.into_iter().filter(|c| sent.contains(&c.id)) {
            self.push_claimed(c.device_id, c).await;
        }
        Ok((cmds, watch))
    }

    /// Claims and pushes every command pending for `device`, when its socket is here.
    async fn push_pending(&self, device: DeviceId) {
        if !self.is_connected(device) {
            return;
        }
        match self.inner.store.claim_pending_commands(device).await {
            Ok(commands) => {
                for cmd in commands {
                    self.push_claimed(device, &cmd).await;
                }
            }
            Err(e) => tracing::warn!(%device, error = %e, "could not claim pending commands"),
        }
    }

    /// Tells the agent that command `id` is cancelled, wherever its socket is, and wakes the
    /// command's waiters here and elsewhere.
    fn command_cancelled(&self, device: DeviceId, id: Uuid) {
        if !self.deliver(device, ServerFrame::Cancel { command_id: id }) {
            self.inner
                .store
                .publish(Signal::CommandCancelled { device, id });
        } else {
            self.inner.store.publish(Signal::CommandChanged { id });
        }
        self.notify(id, None);
    }

    /// Waits until command `id` is final or `wait` passes, calling `on_progress` for each
    /// progress report; returns the command as stored at that point.
    async fn wait(
        &self,
        org: OrgId,
        id: Uuid,
        wait: Duration,
        mut on_progress: impl FnMut(&Progress),
    ) -> Result<CommandRecord, GatewayError> {
        let mut rx = {
            let mut waiters = lock(&self.inner.waiters);
            let w = waiters.entry(id).or_default();
            match &w.changed {
                Some(tx) => tx.subscribe(),
                None => {
                    let (tx, rx) = watch::channel(0);
                    w.changed = Some(tx);
                    rx
                }
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        let mut seen = 0;
        let mut wakeups = true;
        let result = loop {
            let cmd = self.inner.store.org(org).commands().get_command(id).await?;
            let progress: Vec<Progress> = lock(&self.inner.waiters)
                .get(&id)
                .map(|w| w.progress.iter().skip(seen).cloned().collect())
                .unwrap_or_default();
            seen += progress.len();
            progress.iter().for_each(&mut on_progress);
            if cmd.is_terminal() || tokio::time::Instant::now() >= deadline {
                break cmd;
            }
            let next_poll =
                (tokio::time::Instant::now() + self.inner.config.poll_interval).min(deadline);
            tokio::select! {
                changed = rx.changed(), if wakeups => wakeups = changed.is_ok(),
                () = tokio::time::sleep_until(next_poll) => {}
            }
        };
        lock(&self.inner.waiters).remove(&id);
        Ok(result)
    }

    /// Cancels a command that has not finished and tells the agent to stop it.
    async fn cancel(&self, org: OrgId, id: Uuid, reason: &str) -> Result<bool, GatewayError> {
        let cmd = self.inner.store.org(org).commands().get_command(id).await?;
        let cancelled = self
            .inner
            .store
            .org(org)
            .commands()
            .cancel_command(id, reason)
            .await?;
        if cancelled {
            self.command_cancelled(cmd.device_id, id);
        }
        Ok(cancelled)
    }

    fn notify(&self, id: Uuid, progress: Option<Progress>) {
        if progress.is_none()
            && let Some(tx) = lock(&self.inner.watches).get(&id)
        {
            let _ = tx.send(Finished::Changed(id));
        }
        let mut waiters = lock(&self.inner.waiters);
        if let Some(w) = waiters.get_mut(&id) {
            if let Some(p) = progress {
                w.progress.push(p);
            }
            if let Some(tx) = &w.changed {
                tx.send_modify(|n| *n += 1);
            }
        }
    }

    /// Stores what an agent reported on its socket (or through the HTTP fallback), under the
    /// same limits either way: at most [`MAX_REPORT_BATCH`] samples or log lines and
    /// [`MAX_EVENT_BATCH`] events per report, samples within the clock-skew window and their
    /// metrics' ranges (`MetricSample::refusal`; others are dropped), no line stamped ahead.
    pub async fn handle(
        &self,
        device: DeviceId,
        org: OrgId,
        frame: AgentFrame,
    ) -> Result<(), GatewayError> {
        let store = &self.inner.store;
        match frame {
            AgentFrame::Heartbeat(hb) => {
                store.record_heartbeat(device, org, &hb).await?;
                if let Some(applied) = &hb.applied_policy {
                    let json = applied_json(applied);
                    store
                        .record_config_report(device, org, applied.revision.as_deref(), &json)
                        .await?;
                }
            }
            AgentFrame::Inventory(mut inv) => {
                // A patch scan made on the agent's schedule rides along; it is kept apart.
                let patches = inv.patches.take();
                store.record_inventory(device, org, &inv).await?;
                if let Some(report) = patches {
                    store.record_patch_scan(device, org, &report).await?;
                }
            }
            AgentFrame::Metrics(mut batch) => {
                at_most(
                    batch.samples.len(),
                    MAX_REPORT_BATCH,
                    "a metrics batch",
                    "samples",
                )?;
                // A sample outside the clock-skew window or its metric's range is dropped
                // (the agent would only send it again if the batch were refused).
                let now = store.clock().now();
                let mut refused = None;
                batch.samples.retain(|s| match s.refusal(now) {
                    None => true,
                    Some(why) => {
                        refused.get_or_insert(why);
                        false
                    }
                });
                if let Some(why) = refused {
                    tracing::warn!(%device, first = %why, "refused metric samples");
                }
                if !batch.samples.is_empty() {
                    store.insert_metrics(device, org, &batch.samples).await?;
                    self.reported(org, device, TelemetryKind::Metrics);
                }
            }
            AgentFrame::Logs(mut batch) => {
                at_most(
                    batch.entries.len(),
                    MAX_REPORT_BATCH,
                    "a log batch",
                    "entries",
                )?;
                // A line stamped ahead of the server's clock is stamped now.
                let now = store.clock().now();
                for e in &mut batch.entries {
                    e.at = e.at.min(now);
                }
                store.insert_agent_logs(device, org, &batch.entries).await?;
            }
            AgentFrame::Events(batch) => {
                at_most(
                    batch.events.len(),
                    MAX_EVENT_BATCH,
                    "an event batch",
                    "events",
                )?;
                store
                    .insert_device_events(device, org, &batch.events)
                    .await?;
                self.reported(org, device, TelemetryKind::Events);
            }
            AgentFrame::CommandStarted { command_id } => {
                if store.mark_command_running(device, command_id).await? {
                    self.notify(command_id, Some(Progress::Started));
                    store.publish(Signal::CommandChanged { id: command_id });
                }
            }
            AgentFrame::CommandProgress(p) => {
                // Only progress for this device's own open commands counts.
                let id = p.command_id;
                let cmd = store.org(org).commands().get_command(id).await;
                if cmd.is_ok_and(|c| c.device_id == device && !c.is_terminal()) {
                    self.notify(id, Some(Progress::Step(p)));
                }
            }
            AgentFrame::CommandResult(r) => {
                let id = r.command_id;
                let stored = store.complete_command(device, r).await?;
                // Stored now or before (or not this device's to store): the agent may forget it.
                self.deliver(device, ServerFrame::ResultAck { command_id: id });
                if let Some(cmd) = stored {
                    if cmd.completed_late {
                        tracing::info!(command = %id, status = %cmd.status, "a result arrived after the command's deadline; recorded as completed late");
                    }
                    if breeze_store::records_patch_result(&cmd.kind)
                        && let Err(e) = store.record_patch_command(&cmd).await
                    {
                        tracing::warn!(command = %id, error = %e, "could not record a patch result");
                    }
                    let watch = lock(&self.inner.watches).remove(&id);
                    self.notify(id, None);
                    if let Some(tx) = watch {
                        let _ = tx.send(Finished::Stored(Box::new(cmd)));
                    }
                    store.publish(Signal::CommandChanged { id });
                } else {
                    tracing::debug!(command = %id, "ignored a repeated or foreign result");
                }
            }
        }
        Ok(())
    }

    /// The HTTP heartbeat: records it and hands out pending commands.
    pub async fn http_heartbeat(
        &self,
        device: DeviceId,
        org: OrgId,
        hb: breeze_agent_proto::Heartbeat,
    ) -> Result<HeartbeatResponse, GatewayError> {
        let reported = hb.applied_policy.as_ref().and_then(|a| a.revision.clone());
        self.handle(device, org, AgentFrame::Heartbeat(hb)).await?;
        // The policy goes along only when the agent runs another revision.
        let policy = match self.policy_for(org, device).await {
            Ok(p) if Some(&p.revision) != reported.as_ref() => Some(p),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(%device, error = %e, "could not resolve the device's policy");
                None
            }
        };
        let mut commands = Vec::new();
        for cmd in self.inner.store.claim_pending_commands(device).await? {
            match cmd.to_wire() {
                Ok(w) => commands.push(w),
                Err(e) => tracing::error!(command = %cmd.id, error = %e, "undeliverable command"),
            }
        }
        Ok(HeartbeatResponse {
            commands,
            config: Some(self.inner.config.agent),
            policy,
        })
    }

    /// One sweep: time out overdue commands, mark silent devices offline, prune old data.
    pub async fn sweep(&self, prune: bool) -> Result<(), GatewayError> {
        let store = &self.inner.store;
        for cmd in store.cross_org().time_out_commands().await? {
            if breeze_store::records_patch_result(&cmd.kind)
                && let Err(e) = store.record_patch_command(&cmd).await
            {
                tracing::warn!(command = %cmd.id, error = %e, "could not record a patch timeout");
            }
            self.command_cancelled(cmd.device_id, cmd.id);
        }
        let offline_after = chrono::Duration::from_std(self.inner.config.offline_after)
            .unwrap_or(chrono::Duration::minutes(3));
        let gone = store
            .cross_org()
            .mark_stale_devices_offline(offline_after)
            .await?;
        if !gone.is_empty() {
            tracing::info!(
                devices = gone.len(),
                "devices marked offline after missed heartbeats"
            );
        }
        if prune {
            store
                .prune_metrics(self.inner.config.metrics_retention)
                .await?;
            let before = store.clock().now() - self.inner.config.log_retention;
            store.prune_agent_logs(before).await?;
            store
                .prune_device_events(store.clock().now() - breeze_store::EVENT_RETENTION)
                .await?;
            // Write tools' requestIds are replayed for this long (the store's constant).
            store
                .prune_idempotency(store.clock().now() - breeze_store::IDEMPOTENCY_RETENTION)
                .await?;
        }
        Ok(())
    }

    /// Follows the other instances' signals until `stop` ([`breeze_store::Store::follow_bus`]):
    /// claims and pushes commands queued elsewhere for agents connected here, tells them of
    /// cancellations, pushes their policies, and wakes local waiters of commands that changed
    /// elsewhere.
    pub fn spawn_bus_follower(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let gw = self.clone();
        self.inner
            .store
            .follow_bus(stop.cancelled_owned(), move |signal| {
                let gw = gw.clone();
                async move { gw.follow(signal).await }
            })
    }

    async fn follow(&self, signal: Signal) {
        match signal {
            Signal::CommandQueued { device } => self.push_pending(device).await,
            Signal::CommandChanged { id } => self.notify(id, None),
            Signal::CommandCancelled { device, id } => {
                self.deliver(device, ServerFrame::Cancel { command_id: id });
                self.notify(id, None);
            }
            Signal::PoliciesChanged { org, devices } => self.push_policies_here(org, devices),
            Signal::DeviceCredentialChanged { device } => self.recheck_credential(device).await,
            Signal::AgentConnected { device, socket } => self.agent_moved(device, socket),
            Signal::Resync => {
                let (devices, orgs): (Vec<DeviceId>, std::collections::BTreeSet<OrgId>) =
                    lock(&self.inner.connections)
                        .iter()
                        .map(|(d, c)| (*d, c.org))
                        .unzip();
                for device in devices {
                    // A credential change announced meanwhile was missed too.
                    self.recheck_credential(device).await;
                    self.push_pending(device).await;
                }
                // A configuration change announced meanwhile was missed too.
                for org in orgs {
                    self.push_policies_here(org, None);
                }
                let waiting: Vec<Uuid> = lock(&self.inner.waiters).keys().copied().collect();
                for id in waiting {
                    self.notify(id, None);
                }
            }
            Signal::DevicesChanged { .. }
            | Signal::CredentialsChanged
            | Signal::ApprovalDecided => {}
        }
    }

    /// The agent of `device` opened `socket` on another instance: an older socket here is
    /// dead or about to be, so it is closed now rather than swallow what is pushed to it.
    fn agent_moved(&self, device: DeviceId, socket: Uuid) {
        let removed = {
            let mut conns = lock(&self.inner.connections);
            if conns.get(&device).is_some_and(|c| c.id < socket) {
                conns.remove(&device)
            } else {
                None
            }
        };
        // Dropping the connection's sender ends its socket task (the outbox closes).
        if removed.is_some() {
            self.inner.moved_sockets.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%device, "the agent connected to another instance; its socket here is closed");
            self.socket_gone(device);
        }
    }

    /// Runs [`Gateway::sweep`] every `sweep_interval` until `stop` (pruning hourly), once per
    /// cluster: each run is claimed through the store's lease rows
    /// (`Store::claim_scheduled_run`) by one of the servers sharing the database, and the
    /// others skip it.
    pub fn spawn_sweeper(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let gw = self.clone();
        tokio::spawn(async move {
            let interval = gw.inner.config.sweep_interval.max(Duration::from_millis(1));
            let mut tick = tokio::time::interval(interval);
            // A little under the interval, so a tick that fires early does not skip a run.
            let lease = chrono::Duration::from_std(interval - interval / 10)
                .unwrap_or(chrono::Duration::seconds(5));
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let store = &gw.inner.store;
                let claimed = async |job, period| match store.claim_scheduled_run(job, period).await
                {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        tracing::warn!(error = %e, job, "could not claim a gateway job");
                        false
                    }
                };
                if !claimed(SWEEP_JOB, lease).await {
                    continue;
                }
                let prune = claimed(PRUNE_JOB, chrono::Duration::minutes(59)).await;
                if let Err(e) = gw.sweep(prune).await {
                    tracing::warn!(error = %e, "gateway sweep failed");
                }
            }
        })
    }
}

/// The device gateway for one organization ([`Gateway::org`]). A command is created through
/// that organization's `OrgStore`, so its device must be the organization's; waiting and
/// cancelling read the command through the same scope.
#[derive(Clone, Copy)]
pub struct OrgFleet<'a> {
    gateway: &'a Gateway,
    org: OrgId,
}

impl OrgFleet<'_> {
    /// The organization this handle reaches.
    pub fn org_id(&self) -> OrgId {
        self.org
    }

    /// Queues a command for one of the organization's devices and pushes it at once when the
    /// device is connected here; otherwise it waits for the agent's next connection or HTTP
    /// heartbeat (until its deadline).
    pub async fn submit(
        &self,
        new: NewCommand,
        audit: AuditEvent,
    ) -> Result<CommandRecord, GatewayError> {
        let span = tracing::debug_span!(
            "agent.submit",
            device = %new.device_id,
            kind = %breeze_store::kind_tag(&new.kind)
        );
        self.gateway
            .submit(self.org, new, audit)
            .instrument(span)
            .await
    }

    /// Waits until command `id` is final or `wait` passes, calling `on_progress` for each
    /// progress report; returns the command as stored at that point.
    pub async fn wait(
        &self,
        id: Uuid,
        wait: Duration,
        on_progress: impl FnMut(&Progress),
    ) -> Result<CommandRecord, GatewayError> {
        // The agent's round trip as a caller sees it: from here to the command's final state.
        let span =
            tracing::debug_span!("agent.wait", command = %id, status = tracing::field::Empty);
        let record = self
            .gateway
            .wait(self.org, id, wait, on_progress)
            .instrument(span.clone())
            .await;
        if let Ok(r) = &record {
            span.record("status", tracing::field::debug(&r.status));
        }
        record
    }

    /// Cancels a command that has not finished and tells the agent to stop it.
    pub async fn cancel(&self, id: Uuid, reason: &str) -> Result<bool, GatewayError> {
        self.gateway.cancel(self.org, id, reason).await
    }

    /// Queues one command per device (the organization's devices, commands of one kind) in
    /// one transaction with one audit record, pushes them at once to the agents connected,
    /// and returns them with a [`CommandWatch`] that hears each outcome as it arrives.
    pub async fn submit_many(
        &self,
        news: Vec<NewCommand>,
        audit: AuditEvent,
    ) -> Result<(Vec<CommandRecord>, CommandWatch), GatewayError> {
        self.gateway.submit_many(self.org, news, audit).await
    }

    /// Cancels those of `ids` that have not finished and tells their agents to stop them;
    /// returns the ones cancelled.
    pub async fn cancel_many(
        &self,
        ids: &[Uuid],
        reason: &str,
    ) -> Result<Vec<CommandRecord>, GatewayError> {
        let cancelled = self
            .gateway
            .inner
            .store
            .org(self.org)
            .commands()
            .cancel_commands(ids, reason)
            .await?;
        for c in &cancelled {
            self.gateway.command_cancelled(c.device_id, c.id);
        }
        Ok(cancelled)
    }

    /// Sends the effective configuration policy to those of the organization's `devices`
    /// that are connected here, in the background; the others get it when they connect or
    /// through their next HTTP heartbeat.
    pub fn push_policies(&self, devices: Vec<DeviceId>) {
        self.gateway.push_policies(self.org, devices);
    }
}

/// The wire form of an effective configuration: what the agent applies itself, every feature
/// as JSON, and a revision that is a digest of the values (equal values, equal revision,
/// whichever policies they come from).
pub fn wire_policy(effective: &Effective) -> PolicyConfig {
    let monitoring = feature_values(effective, FeatureType::Monitoring);
    let secs = |k: &str| {
        monitoring
            .get(k)
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    let log_level = feature_values(effective, FeatureType::AgentLog)
        .get("level")
        .and_then(|v| serde_json::from_value::<LogLevelSetting>(v.clone()).ok())
        .map(|l| match l {
            LogLevelSetting::Error => LogLevel::Error,
            LogLevelSetting::Warn => LogLevel::Warn,
            LogLevelSetting::Info => LogLevel::Info,
            LogLevelSetting::Debug => LogLevel::Debug,
            LogLevelSetting::Trace => LogLevel::Trace,
        });
    let features: serde_json::Map<String, serde_json::Value> = effective
        .keys()
        .map(|f| {
            (
                f.as_str().to_owned(),
                serde_json::Value::Object(feature_values(effective, *f)),
            )
        })
        .collect();
    PolicyConfig {
        revision: revision(&features),
        metrics_interval_secs: secs("metricIntervalSeconds"),
        inventory_interval_secs: secs("inventoryIntervalSeconds"),
        log_level,
        features,
    }
}

/// A short, stable digest of the effective values (FNV-1a over their canonical JSON: serde
/// maps are sorted). Not a security boundary: only "same or different".
fn revision(features: &serde_json::Map<String, serde_json::Value>) -> String {
    let text = serde_json::Value::Object(features.clone()).to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Refuses a report of more than `max` items, over HTTP and the socket alike.
fn at_most(n: usize, max: usize, what: &str, items: &str) -> Result<(), GatewayError> {
    if n > max {
        return Err(GatewayError::Store(StoreError::Invalid(format!(
            "{what} holds at most {max} {items}"
        ))));
    }
    Ok(())
}

/// The applied report as stored (camelCase JSON).
fn applied_json(applied: &AppliedPolicy) -> serde_json::Value {
    serde_json::to_value(applied).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a panic is the failure report
mod tests {
    use breeze_core::{Actor, ActorType, AuditEvent};
    use breeze_store::{Backend, ClaimOutcome, IDEMPOTENCY_STALE_AFTER, testing};
    use serde_json::json;

    use super::{Gateway, GatewayConfig};

    /// The hourly prune of the sweep removes idempotency records past retention (and the
    /// other sweeps leave them).
    #[tokio::test]
    async fn the_pruning_sweep_forgets_old_request_ids() {
        testing::run(Backend::Sqlite, |cx| async move {
            let s = &cx.store;
            let audit = |a: &str| AuditEvent::new(Actor::system("test"), a, "x");
            let p = s.create_partner("P", "p", audit("p")).await.unwrap();
            let org = s
                .create_organization(p.id, "A", "a", audit("o"))
                .await
                .unwrap()
                .id;
            let actor = Actor::new(ActorType::ApiKey, "k");
            let o = s.org(org).idempotency();
            let claim = || {
                o.claim_request(
                    &actor,
                    "r-1",
                    "create_group",
                    &[1; 32],
                    s.clock().now(),
                    IDEMPOTENCY_STALE_AFTER,
                )
            };
            let ClaimOutcome::Claimed(c) = claim().await.unwrap() else {
                panic!("a first call claims")
            };
            o.complete_request(&c, &json!(1), false, s.clock().now())
                .await
                .unwrap();
            cx.clock.advance(chrono::Duration::hours(25));
            let gw = Gateway::new(s.clone(), GatewayConfig::default());
            gw.sweep(false).await.unwrap();
            assert!(matches!(
                claim().await.unwrap(),
                ClaimOutcome::Replay { .. }
            ));
            gw.sweep(true).await.unwrap();
            assert!(matches!(claim().await.unwrap(), ClaimOutcome::Claimed(_)));
        })
        .await;
    }
}
