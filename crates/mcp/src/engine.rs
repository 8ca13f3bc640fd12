//! The protocol engine: turns parsed JSON-RPC messages into calls on the [`McpApp`] and
//! answers, whatever transport carried them.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::http::{HeaderName, HeaderValue};
use breeze_limits::RateLimiter;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    app::{Client, Cx, Extensions, McpApp, Peer, RequestRecord, Transport},
    cluster::{Heard, Note, SessionCluster},
    jsonrpc::{ErrorObject, Id, Message, Notification, Payload, Reply, Request},
    protocol::ProtocolVersion,
    session::{
        Evicted, Lookup, Session, SessionError, SessionKind, SessionLimits, SessionRecord,
        SessionRegistry, new_session_id,
    },
};

/// How long a relayed stream message may wait for room in its client's stream (see
/// [`Engine::apply`]).
const DELIVER_PATIENCE: Duration = Duration::from_secs(2);

/// JSON-RPC error code for a request the client cancelled.
pub const REQUEST_CANCELLED: i32 = crate::jsonrpc::codes::REQUEST_CANCELLED;

/// How a Streamable HTTP request is answered when the client accepts both
/// `application/json` and `text/event-stream` (the specification allows either).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReplyMode {
    /// A plain JSON body, unless the handler sends something (progress, a log message, a
    /// request to the client) before its answer: then an SSE stream that ends with the answer.
    #[default]
    Adaptive,
    /// Always an SSE stream that ends with the answer (`initialize` is still answered with
    /// JSON).
    Stream,
}

/// Engine settings. Defaults are the specification's.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub sessions: SessionLimits,
    /// SSE connections per credential per minute (`MCP_SSE_RATE_LIMIT_PER_MINUTE`).
    pub sse_rate_per_minute: u32,
    /// JSON-RPC messages per credential per minute (`MCP_MESSAGE_RATE_LIMIT_PER_MINUTE`).
    pub message_rate_per_minute: u32,
    /// Largest accepted request body (`MCP_MESSAGE_MAX_BODY_BYTES`).
    pub max_body_bytes: usize,
    /// Interval of `ping` events on open streams.
    pub keepalive: Duration,
    /// Public base URL, for the absolute `endpoint` URL of the legacy SSE transport.
    pub public_base_url: String,
    /// Origins allowed to call (exact `scheme://host[:port]`); the public URL's origin is
    /// always allowed.
    pub allowed_origins: Vec<String>,
    /// Allow `http://localhost…` and `http://127.0.0.1…` origins (development).
    pub allow_localhost_origins: bool,
    /// Refuse requests (503) when the rate limiter cannot decide (production).
    pub fail_closed: bool,
    /// JSON or SSE answers on Streamable HTTP.
    pub replies: ReplyMode,
    /// The header naming each HTTP request's id (set by a layer in front of the engine, or by
    /// the client), for records and log lines.
    pub request_id_header: Option<HeaderName>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            sessions: SessionLimits::default(),
            sse_rate_per_minute: 30,
            message_rate_per_minute: 120,
            max_body_bytes: 65_536,
            keepalive: Duration::from_secs(30),
            public_base_url: "http://127.0.0.1:3000".into(),
            allowed_origins: Vec::new(),
            allow_localhost_origins: true,
            fail_closed: false,
            replies: ReplyMode::Adaptive,
            request_id_header: Some(HeaderName::from_static("x-request-id")),
        }
    }
}

/// The engine: an application, its sessions, its limits.
pub struct Engine<A: McpApp> {
    pub(crate) app: Arc<A>,
    pub(crate) sessions: SessionRegistry,
    pub(crate) config: EngineConfig,
    pub(crate) limiter: Arc<dyn RateLimiter>,
    /// The other instances' sessions, when there are other instances.
    pub(crate) cluster: Option<Arc<SessionCluster>>,
    /// Requests being handled (for [`RequestRecord::in_flight`]).
    in_flight: AtomicUsize,
    /// Cancelled by [`Engine::drain`]: the instance is shutting down.
    pub(crate) draining: CancellationToken,
}

/// The per-message context a transport builds.
pub(crate) struct CallCtx<P> {
    pub(crate) client: Client<P>,
    pub(crate) session: Option<Arc<Session>>,
    pub(crate) protocol: ProtocolVersion,
    pub(crate) transport: Transport,
    pub(crate) peer: Peer,
    /// The HTTP request's id (see [`EngineConfig::request_id_header`]).
    pub(crate) request_id: Option<HeaderValue>,
}

/// A request id header's text (ids that are not visible ASCII are left out).
pub(crate) fn id_text(v: Option<&HeaderValue>) -> Option<&str> {
    v.and_then(|v| v.to_str().ok())
}

fn param_str<'a>(params: Option<&'a Value>, key: &str) -> Option<&'a str> {
    params.and_then(|p| p.get(key)).and_then(Value::as_str)
}

impl<A: McpApp> Engine<A> {
    /// An engine serving `app`.
    pub fn new(app: Arc<A>, config: EngineConfig, limiter: Arc<dyn RateLimiter>) -> Arc<Self> {
        Self::build(app, config, limiter, None)
    }

    /// An engine serving `app` as one instance of `cluster`: sessions and their caps are
    /// shared with every other instance (see [`crate::cluster`]).
    pub fn in_cluster(
        app: Arc<A>,
        config: EngineConfig,
        limiter: Arc<dyn RateLimiter>,
        cluster: Arc<SessionCluster>,
    ) -> Arc<Self> {
        Self::build(app, config, limiter, Some(cluster))
    }

    fn build(
        app: Arc<A>,
        config: EngineConfig,
        limiter: Arc<dyn RateLimiter>,
        cluster: Option<Arc<SessionCluster>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            app,
            sessions: SessionRegistry::for_instance(
                config.sessions,
                cluster.as_ref().map(|c| &**c.instance()),
            ),
            config,
            limiter,
            cluster,
            in_flight: AtomicUsize::new(0),
            draining: CancellationToken::new(),
        })
    }

    /// Starts draining for shutdown: new sessions are refused (503 with `Retry-After`, so a
    /// client retries, through a load balancer on another instance), and every open SSE stream
    /// ends with a `retry:` hint, so its client reconnects. Calls in flight go on.
    pub fn drain(&self) {
        self.draining.cancel();
    }

    /// Whether [`Engine::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Sessions live on this instance, and what the cluster (when there is one) has cost.
    pub fn session_stats(&self) -> (usize, Option<crate::cluster::ClusterStats>) {
        (
            self.sessions.len(),
            self.cluster.as_ref().map(|c| c.stats()),
        )
    }

    /// The live sessions.
    pub fn sessions(&self) -> &SessionRegistry {
        &self.sessions
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn app(&self) -> &Arc<A> {
        &self.app
    }

    /// Creates a session for `client` within the caps (cluster-wide in a cluster): at a full
    /// cap the least recently used idle session in its scope ends to make room (returned, for
    /// the caller to record).
    pub(crate) async fn open_session<P>(
        &self,
        client: &Client<P>,
        kind: SessionKind,
        protocol: ProtocolVersion,
    ) -> Result<(Arc<Session>, Option<Evicted>), SessionError> {
        let Some(cluster) = &self.cluster else {
            let (session, evicted) = self
                .sessions
                .create(&client.key, &client.tenant, kind)
                .map_err(SessionError::Full)?;
            session.set_protocol(protocol);
            session.bind(client.binding.clone());
            return Ok((session, evicted));
        };
        let me = cluster.instance().clone();
        let record = SessionRecord {
            id: new_session_id(),
            owner: client.key.clone(),
            tenant: client.tenant.clone(),
            kind,
            protocol,
            binding: client.binding.clone(),
            holder: me.clone(),
            // The legacy transport's stream opens with its session.
            stream: (kind == SessionKind::LegacySse).then_some(me),
            // None before `initialize`, which records them (see `dispatch_tree`).
            extensions: Extensions::default(),
        };
        let evicted = cluster.open(&record, &self.config.sessions).await?;
        if let Some(e) = &evicted {
            self.sessions.remove(&e.id);
        }
        let session = self
            .sessions
            .insert(record.id, &record.owner, &record.tenant, kind, false);
        session.set_protocol(protocol);
        session.bind(record.binding);
        Ok((session, evicted))
    }

    /// The session `id` if `client` owns it: this instance's, or in a cluster one another
    /// instance created, adopted here. Foreign and unknown sessions are equally `None`.
    pub(crate) async fn find_session<P>(
        &self,
        id: &str,
        client: &Client<P>,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        match self.sessions.lookup(id, &client.key) {
            Lookup::Mine(session) => return Ok(Some(session)),
            Lookup::Foreign => return Ok(None),
            Lookup::Missing => {}
        }
        let Some(cluster) = &self.cluster else {
            return Ok(None);
        };
        let Some(record) = cluster.find(id).await? else {
            // Just after Redis lost its records, the instance holding this session may not
            // have recorded it again yet: "retry", not "gone".
            if cluster.recovering().await? {
                return Err(SessionError::Unavailable(
                    "the session store is recovering after a restart; retry".into(),
                ));
            }
            return Ok(None);
        };
        if record.owner != client.key {
            return Ok(None);
        }
        let session = self.sessions.insert(
            record.id.clone(),
            &record.owner,
            &record.tenant,
            record.kind,
            true,
        );
        session.set_protocol(record.protocol);
        session.bind(record.binding.clone());
        session.set_extensions(record.extensions.clone());
        if let Some(at) = record.stream.filter(|at| at != cluster.instance()) {
            session.relay_to(Some((at, cluster.outbox().clone())));
        }
        Ok(self.sessions.get(&session.id, &client.key))
    }

    /// Ends session `id`, here and (in a cluster) everywhere.
    pub(crate) async fn end_session(&self, id: &str) {
        self.sessions.remove(id);
        self.end_in_cluster(id).await;
    }

    /// Ends session `id` on the other instances of its cluster (if any); this one has already
    /// let it go.
    pub(crate) async fn end_in_cluster(&self, id: &str) {
        if let Some(cluster) = &self.cluster
            && let Err(e) = cluster.close(id).await
        {
            // Its record expires after the idle TTL.
            tracing::warn!(session_id = id, error = %e, "could not end an MCP session in the cluster");
        }
    }

    /// Resolves once this instance hears the rest of its cluster (at once without one).
    pub async fn cluster_ready(&self) {
        if let Some(c) = &self.cluster {
            c.subscribed().await;
        }
    }

    /// Tells the cluster this instance now holds session `id`'s stream.
    pub(crate) async fn hold_stream(&self, id: &str) {
        if let Some(cluster) = &self.cluster
            && let Err(e) = cluster.hold_stream(id).await
        {
            tracing::warn!(session_id = id, error = %e, "could not record an MCP stream in the cluster");
        }
    }

    /// Sends the client's answer to a request this instance did not send to the instance
    /// that did (named in the id). Returns whether it went.
    fn forward_answer(
        &self,
        session: &Session,
        id: &Id,
        outcome: Result<Value, ErrorObject>,
    ) -> bool {
        let Some(cluster) = &self.cluster else {
            return false;
        };
        let Id::String(text) = id else { return false };
        let Some((instance, _)) = text
            .strip_prefix("srv-")
            .and_then(|rest| rest.rsplit_once('-'))
        else {
            return false;
        };
        if instance == &**cluster.instance() {
            return false;
        }
        cluster.outbox().post(
            Some(instance.into()),
            Note::Answer {
                session: session.id.to_string(),
                id: id.clone(),
                outcome,
            },
        )
    }

    /// Applies what another instance said.
    async fn apply(&self, heard: Heard) {
        let me = self.cluster.as_ref().map(|c| c.instance().clone());
        let note = match heard {
            Heard::Note(n) => n,
            Heard::Resync => {
                let Some(cluster) = &self.cluster else { return };
                // Redis lost every record (restarted empty): a copy adopted here may be all
                // that is left of a session whose creator is gone, so it is recorded again as
                // this instance's. Otherwise only the messages sent meanwhile were missed: an
                // adopted copy may have ended elsewhere, and the next request adopts it again.
                let (claimed, dropped) = match cluster.records_were_lost().await {
                    Ok(true) => (self.sessions.claim_adopted(), 0),
                    Ok(false) | Err(_) => (0, self.sessions.drop_adopted()),
                };
                let own = self.sessions.own_records(cluster.instance());
                let restored = cluster.restore(&own, self.config.sessions.idle_ttl).await;
                match restored {
                    Ok(()) => tracing::info!(
                        claimed,
                        dropped,
                        restored = own.len(),
                        "resubscribed to the session cluster"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not record this instance's MCP sessions again");
                    }
                }
                return;
            }
        };
        match note {
            Note::Deliver { session, message } => {
                if let Some(s) = self.sessions.local(&session) {
                    self.sessions.touch(&s);
                    // Notes are applied in order, one at a time: a client that stopped reading
                    // its stream may hold the others up this long, no longer.
                    let sent = tokio::time::timeout(DELIVER_PATIENCE, s.send(message)).await;
                    if sent.is_err() {
                        tracing::warn!(session_id = %s.id, "a relayed message was dropped: the client is not reading its stream");
                    }
                }
            }
            Note::Answer {
                session,
                id,
                outcome,
            } => {
                if let Some(s) = self.sessions.local(&session) {
                    s.resolve_response(&id, outcome);
                }
            }
            Note::Cancel { session, id } => {
                if let Some(s) = self.sessions.local(&session) {
                    s.cancel(&id);
                }
            }
            Note::End { session } => {
                self.sessions.remove(&session);
            }
            Note::Stream { session, at } => {
                if let (Some(s), Some(cluster)) = (self.sessions.local(&session), &self.cluster) {
                    let relay = (me.as_deref() != Some(at.as_str()))
                        .then(|| (Arc::from(at), cluster.outbox().clone()));
                    s.relay_to(relay);
                }
            }
        }
    }

    /// In a cluster: publishes what this instance posts, applies what the others say, and
    /// reports this instance's active sessions every [`crate::cluster::REFRESH_EVERY`].
    fn spawn_cluster_tasks(self: &Arc<Self>, stop: &CancellationToken) {
        let Some(cluster) = self.cluster.clone() else {
            return;
        };
        cluster.spawn_publisher(stop.clone());
        let mut heard = cluster.subscribe(stop.clone());
        let engine = Arc::clone(self);
        tokio::spawn(async move {
            while let Some(h) = heard.recv().await {
                engine.apply(h).await;
            }
        });
        let engine = Arc::clone(self);
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(crate::cluster::REFRESH_EVERY);
            let mut since = 0;
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = tick.tick() => {
                        let now = engine.sessions.now();
                        let active = engine.sessions.active_since(since);
                        if active.is_empty() {
                            since = now;
                            continue;
                        }
                        match cluster.refresh(&active, engine.config.sessions.idle_ttl).await {
                            Ok(()) => since = now,
                            Err(e) => tracing::warn!(error = %e, "could not report MCP sessions to the cluster"),
                        }
                    }
                }
            }
        });
    }

    /// Sweeps idle sessions once a minute until `stop` is cancelled (and, in a cluster, keeps
    /// this instance in it).
    pub fn spawn_sweeper(self: &Arc<Self>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        self.spawn_cluster_tasks(&stop);
        let engine = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = tick.tick() => {
                        let n = engine.sessions.sweep();
                        if n > 0 {
                            tracing::info!(swept = n, "ended idle MCP sessions");
                        }
                        engine.app.tick().await;
                    }
                }
            }
        })
    }

    /// Handles one message. Requests get a reply; notifications and responses do not.
    pub(crate) async fn handle(
        &self,
        ctx: &CallCtx<A::Principal>,
        message: Message,
    ) -> Option<Reply> {
        match message {
            Message::Request(req) => self.handle_request(ctx, req).await,
            Message::Notification(n) => {
                let _counted = InFlight::enter(&self.in_flight);
                self.handle_notification(ctx, &n);
                self.record_message(ctx, &n.method, Ok(())).await;
                None
            }
            Message::Response(r) => {
                let _counted = InFlight::enter(&self.in_flight);
                let awaited = ctx.session.as_ref().is_some_and(|s| {
                    // The answer travels to the instance that asked, when another did.
                    if s.awaits(&r.id) {
                        s.resolve_response(&r.id, r.outcome)
                    } else {
                        self.forward_answer(s, &r.id, r.outcome)
                    }
                });
                let outcome = if awaited {
                    Ok(())
                } else {
                    Err(format!("no request awaits the answer {}", r.id))
                };
                self.record_message(ctx, "response", outcome).await;
                None
            }
        }
    }

    /// Records a notification or a response from the client (every message is audited).
    async fn record_message(
        &self,
        ctx: &CallCtx<A::Principal>,
        method: &str,
        outcome: Result<(), String>,
    ) {
        let request_id = id_text(ctx.request_id.as_ref());
        if let Err(e) = &outcome {
            tracing::info!(request_id, method, error = %e, "MCP message failed");
        }
        // A message has no answer to withhold.
        let _ = self
            .app
            .record(RequestRecord {
                client: &ctx.client,
                method,
                target: None,
                session_id: ctx.session.as_ref().map(|s| &*s.id),
                transport: ctx.transport,
                protocol: ctx.protocol,
                outcome,
                in_flight: self.in_flight.load(Ordering::Relaxed),
                request_id,
            })
            .await;
    }

    fn handle_notification(&self, ctx: &CallCtx<A::Principal>, n: &Notification) {
        if n.method == "notifications/cancelled" {
            let id = n.params.as_ref().and_then(|p| p.get("requestId")).cloned();
            if let (Some(session), Some(id)) = (
                &ctx.session,
                id.and_then(|v| serde_json::from_value::<Id>(v).ok()),
            ) && !session.cancel(&id)
                && let Some(cluster) = &self.cluster
            {
                // Running on another instance, perhaps.
                cluster.outbox().post(
                    None,
                    Note::Cancel {
                        session: session.id.to_string(),
                        id,
                    },
                );
            }
        }
        // notifications/initialized and others need no action.
    }

    /// Handles a request: its reply, or nothing when the request was cancelled (by
    /// `notifications/cancelled` or its session's end) — the receiver of a cancellation does
    /// not answer the cancelled request. It is recorded either way.
    async fn handle_request(&self, ctx: &CallCtx<A::Principal>, mut req: Request) -> Option<Reply> {
        let _counted = InFlight::enter(&self.in_flight);
        // A tool's arguments are moved into its call rather than copied.
        let arguments = if req.method == "tools/call" {
            req.params
                .as_mut()
                .and_then(Value::as_object_mut)
                .and_then(|p| p.remove("arguments"))
        } else {
            None
        };
        let cancel = match &ctx.session {
            Some(s) => s.closed.child_token(),
            None => CancellationToken::new(),
        };
        // Registered for `notifications/cancelled`, and unregistered however the request ends
        // (including when the transport drops it because the client went away).
        let tracked = ctx.session.as_deref().map(|s| {
            s.track(&req.id, cancel.clone());
            Untrack(s, &req.id)
        });
        let params = req.params.as_ref();
        let progress_token = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let client_name = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(crate::protocol::META_CLIENT_INFO))
            .and_then(client_info_name)
            .or_else(|| ctx.session.as_ref().and_then(|s| s.client_name()));
        let extensions = match params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(crate::protocol::META_CLIENT_CAPABILITIES))
        {
            // 2026-07-28: each request declares its own capabilities.
            Some(caps) if ctx.protocol.is_stateless() => {
                Extensions::negotiate(caps.get("extensions"), &self.app.extensions())
            }
            _ => ctx
                .session
                .as_ref()
                .map(|s| s.extensions())
                .unwrap_or_default(),
        };
        let cx = Cx {
            client: ctx.client.clone(),
            protocol: ctx.protocol,
            transport: ctx.transport,
            session_id: ctx.session.as_ref().map(|s| s.id.clone()),
            client_name,
            extensions,
            request_id: Some(req.id.clone()),
            progress_token,
            cancel: cancel.clone(),
            peer: ctx.peer.clone(),
        };
        let target = match req.method.as_str() {
            "tools/call" | "prompts/get" => param_str(params, "name"),
            "resources/read" => param_str(params, "uri"),
            _ => None,
        };
        let outcome = tokio::select! {
            r = self.dispatch(cx, ctx.session.as_deref(), &req, arguments) => r,
            () = cancel.cancelled() => Err(ErrorObject::new(REQUEST_CANCELLED, "Request cancelled")),
        };
        drop(tracked);
        // Read once the request can no longer be cancelled: a cancellation that raced with the
        // answer still means the client will not want it.
        let cancelled = cancel.is_cancelled();
        let (outcome, recorded) = match outcome {
            Ok(Answer {
                payload,
                tool_error,
            }) => (Ok(payload), tool_error.map_or(Ok(()), Err)),
            Err(e) => {
                let message = e.message.clone();
                (Err(e), Err(message))
            }
        };
        let request_id = id_text(ctx.request_id.as_ref());
        if let Err(e) = &recorded {
            // A failed request (a protocol error or a tool error) leaves one line at the
            // default level, with the HTTP request's id.
            tracing::info!(request_id, method = %req.method, target, error = %e, "MCP request failed");
        }
        let kept = self
            .app
            .record(RequestRecord {
                client: &ctx.client,
                method: &req.method,
                target,
                session_id: ctx.session.as_ref().map(|s| &*s.id),
                transport: ctx.transport,
                protocol: ctx.protocol,
                outcome: recorded,
                in_flight: self.in_flight.load(Ordering::Relaxed),
                request_id,
            })
            .await;
        if cancelled {
            return None;
        }
        let outcome = match kept {
            Ok(()) if ctx.protocol.is_stateless() => {
                outcome.map(|payload| complete_result(&req.method, payload))
            }
            Ok(()) => outcome,
            Err(withheld) => Err(withheld),
        };
        Some(Reply {
            id: Some(req.id),
            outcome,
        })
    }

    /// Answers `req`; a `tools/call`'s `arguments` come apart from it (see `handle_request`).
    async fn dispatch(
        &self,
        cx: Cx<A::Principal>,
        session: Option<&Session>,
        req: &Request,
        arguments: Option<Value>,
    ) -> Result<Answer, ErrorObject> {
        let params = req.params.as_ref();
        if req.method == "tools/call" {
            let name = param_str(params, "name")
                .ok_or_else(|| ErrorObject::invalid_params("Missing required parameter: name"))?
                .to_owned();
            let arguments = match arguments {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(v @ Value::Object(_)) => v,
                Some(_) => {
                    return Err(ErrorObject::invalid_params("arguments must be an object"));
                }
            };
            let result = self.app.call_tool(cx, name, arguments).await?;
            // Written once, straight from the typed result; the audit gets the error's text.
            return Ok(Answer {
                tool_error: result.error_text(),
                payload: Payload::Json(result.to_json_bytes()),
            });
        }
        // Boxed: the other methods' states (resources/read's above all) would otherwise sit in
        // every tools/call's future.
        Box::pin(self.dispatch_tree(cx, session, req))
            .await
            .map(|v| Answer {
                payload: Payload::Tree(v),
                tool_error: None,
            })
    }

    /// `subscriptions/listen` (2026-07-28): this server sends no change notifications (its
    /// capabilities say so), so the stream is acknowledged with an empty filter and then held
    /// open, kept alive, until the client closes it; when the instance shuts down the
    /// subscription ends with its graceful-closure result. A client that cannot take a stream
    /// (it did not accept `text/event-stream`) is told so.
    async fn listen(&self, cx: &Cx<A::Principal>, id: &Id) -> Result<Value, ErrorObject> {
        const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
        if !cx.peer.can_notify() {
            return Err(ErrorObject::new(
                crate::jsonrpc::codes::INVALID_REQUEST,
                "subscriptions/listen answers with an SSE stream: send Accept: text/event-stream",
            ));
        }
        let meta = json!({ SUBSCRIPTION_ID: id });
        cx.peer
            .notify(
                "notifications/subscriptions/acknowledged",
                json!({ "_meta": meta, "notifications": {} }),
            )
            .await;
        tokio::select! {
            () = self.draining.cancelled() => {}
            () = cx.cancel.cancelled() => {}
        }
        Ok(json!({ "_meta": meta }))
    }

    /// Every method but `tools/call`: small results, built as trees.
    async fn dispatch_tree(
        &self,
        cx: Cx<A::Principal>,
        session: Option<&Session>,
        req: &Request,
    ) -> Result<Value, ErrorObject> {
        let params = req.params.as_ref();
        match req.method.as_str() {
            // 2026-07-28 removed these (the revision has no handshake, no keep-alive request
            // and no server-side log level).
            "initialize" | "ping" | "logging/setLevel" if cx.protocol.is_stateless() => {
                Err(ErrorObject::method_not_found(&req.method))
            }
            "subscriptions/listen" if cx.protocol.is_stateless() => self.listen(&cx, &req.id).await,
            "initialize" => {
                let version = ProtocolVersion::negotiate(param_str(params, "protocolVersion"));
                let supported = self.app.extensions();
                let extensions = Extensions::negotiate(
                    params
                        .and_then(|p| p.get("capabilities"))
                        .and_then(|c| c.get("extensions")),
                    &supported,
                );
                if let Some(s) = session {
                    // Recorded before the answer leaves, so the client's next request finds
                    // them on whichever instance it reaches. Without Redis the session still
                    // works here; elsewhere its client would see no extension, as a client
                    // that declared none.
                    if let Some(cluster) = &self.cluster
                        && !extensions.is_empty()
                        && let Err(e) = cluster.set_extensions(&s.id, &extensions).await
                    {
                        tracing::warn!(session_id = &*s.id, error = %e, "could not record an MCP session's extensions in the cluster");
                    }
                    s.set_extensions(extensions.clone());
                    s.set_protocol(version);
                    s.set_client_name(
                        params
                            .and_then(|p| p.get("clientInfo"))
                            .and_then(client_info_name),
                    );
                }
                let mut result = Map::new();
                result.insert("protocolVersion".into(), json!(version.as_str()));
                result.insert(
                    "capabilities".into(),
                    with_extensions(self.app.capabilities(), &supported, extensions.ids()),
                );
                result.insert("serverInfo".into(), to_json(&self.app.server_info()));
                if let Some(i) = self.app.instructions() {
                    result.insert("instructions".into(), json!(i));
                }
                Ok(Value::Object(result))
            }
            "server/discover" => {
                let mut result = Map::new();
                result.insert(
                    "supportedVersions".into(),
                    json!(ProtocolVersion::supported_strings()),
                );
                // Discovery tells every extension the server supports.
                let supported = self.app.extensions();
                result.insert(
                    "capabilities".into(),
                    with_extensions(
                        self.app.capabilities(),
                        &supported,
                        supported.keys().map(String::as_str),
                    ),
                );
                result.insert("serverInfo".into(), to_json(&self.app.server_info()));
                if let Some(i) = self.app.instructions() {
                    result.insert("instructions".into(), json!(i));
                }
                Ok(Value::Object(result))
            }
            "ping" => Ok(json!({})),
            "tools/list" => {
                let tools = self.app.list_tools(&cx).await?;
                Ok(json!({ "tools": tools }))
            }
            "resources/list" => {
                let resources = self.app.list_resources(&cx).await?;
                Ok(json!({ "resources": resources }))
            }
            "resources/templates/list" => {
                let templates = self.app.list_resource_templates(&cx).await?;
                Ok(json!({ "resourceTemplates": templates }))
            }
            "resources/read" => {
                let uri = param_str(params, "uri")
                    .ok_or_else(|| ErrorObject::invalid_params("Missing required parameter: uri"))?
                    .to_owned();
                let contents = self.app.read_resource(cx, uri).await?;
                Ok(json!({ "contents": contents }))
            }
            "prompts/list" => {
                let prompts = self.app.list_prompts(&cx).await?;
                Ok(json!({ "prompts": prompts }))
            }
            "prompts/get" => {
                let name = param_str(params, "name")
                    .ok_or_else(|| ErrorObject::invalid_params("Missing required parameter: name"))?
                    .to_owned();
                let arguments = match params.and_then(|p| p.get("arguments")) {
                    None | Some(Value::Null) => Map::new(),
                    Some(Value::Object(m)) => m.clone(),
                    Some(_) => {
                        return Err(ErrorObject::invalid_params("arguments must be an object"));
                    }
                };
                let result = self.app.get_prompt(cx, name, arguments).await?;
                Ok(to_json(&result))
            }
            other => match self
                .app
                .extension(cx, other.to_owned(), req.params.clone())
                .await
            {
                Some(r) => r,
                None => Err(ErrorObject::method_not_found(other)),
            },
        }
    }
}

/// How long a client may reuse a 2026-07-28 list (or `server/discover`) result before asking
/// again (`ttlMs`). The catalog changes when an administrator edits a tool source or a key's
/// scopes, rarely within a minute; resources are live readings and are never fresh.
pub const LIST_TTL_MS: u64 = 60_000;

/// The methods whose 2026-07-28 results carry caching hints (`ttlMs`, `cacheScope`).
pub const CACHEABLE_METHODS: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// A 2026-07-28 result as that revision's schema has it: every result says `resultType`
/// (`"complete"`: this server never asks for more input), and cacheable results carry `ttlMs`
/// and `cacheScope`. The scope is `"private"` on every one: lists are filtered by the caller's
/// scopes and organization, and readings are the caller's own.
fn complete_result(method: &str, payload: Payload) -> Payload {
    const RESULT_TYPE: &[u8] = br#""resultType":"complete","#;
    match payload {
        Payload::Tree(Value::Object(mut map)) => {
            map.insert("resultType".into(), json!("complete"));
            if CACHEABLE_METHODS.contains(&method) {
                let ttl = if method == "resources/read" {
                    0
                } else {
                    LIST_TTL_MS
                };
                map.insert("ttlMs".into(), json!(ttl));
                map.insert("cacheScope".into(), json!("private"));
            }
            Payload::Tree(Value::Object(map))
        }
        // Written JSON is a `tools/call` result, always an object: the field goes first.
        Payload::Json(mut bytes) if bytes.first() == Some(&b'{') => {
            let tail = if bytes.get(1) == Some(&b'}') {
                &RESULT_TYPE[..RESULT_TYPE.len() - 1]
            } else {
                RESULT_TYPE
            };
            bytes.splice(1..1, tail.iter().copied());
            Payload::Json(bytes)
        }
        other => other,
    }
}

/// Unregisters an in-flight request from its session when dropped.
struct Untrack<'a>(&'a Session, &'a Id);

impl Drop for Untrack<'_> {
    fn drop(&mut self) {
        self.0.untrack(self.1);
    }
}

/// Counts a request in [`Engine::in_flight`] until dropped (however the request ends).
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A method's answer, and for a tool error the text the audit record keeps.
struct Answer {
    payload: Payload,
    tool_error: Option<String>,
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// `capabilities` with an `extensions` object naming `ids` with the server's settings for each
/// (`capabilities` unchanged when `ids` is empty).
fn with_extensions<'a>(
    mut capabilities: Value,
    supported: &Map<String, Value>,
    ids: impl Iterator<Item = &'a str>,
) -> Value {
    let named: Map<String, Value> = ids
        .filter_map(|id| Some((id.to_owned(), supported.get(id)?.clone())))
        .collect();
    if !named.is_empty()
        && let Some(c) = capabilities.as_object_mut()
    {
        c.insert("extensions".into(), Value::Object(named));
    }
    capabilities
}

/// A `clientInfo` object's `name`: trimmed, at most 100 characters, control characters
/// dropped (it is shown to people as the client's own claim).
fn client_info_name(info: &Value) -> Option<Arc<str>> {
    let name: String = info
        .get("name")?
        .as_str()?
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect();
    let name = name.trim();
    (!name.is_empty()).then(|| Arc::from(name))
}
