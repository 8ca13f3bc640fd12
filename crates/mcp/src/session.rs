//! Sessions: created by `initialize` (Streamable HTTP) or by opening the legacy SSE stream,
//! bound to the credential that created them, capped server-wide, per tenant and per
//! credential (one pool for both transports), and dropped after an idle TTL.
//!
//! Most clients never end a session (no DELETE: the TypeScript SDK's `close()`, the Inspector,
//! Claude Code), so a cap that only refused would lock a credential out after a few
//! connections until the idle TTL. At the per-credential or per-tenant cap, creating a session
//! therefore ends the least recently used *idle* session in that scope instead — one with no
//! call in flight, preferring one with no open stream — and refuses only when every one is
//! busy. An open stream alone does not keep a session: clients hold one open for as long as
//! they run (an editor window each), so counting it as busy would refuse the sixth window of
//! five idle ones. That holds for a legacy SSE session too, which lives exactly as long as its
//! stream: it goes last, but it goes, and its stream ends with it. At the server-wide cap,
//! the least recently used idle session of the tenant holding the most sessions ends: a few
//! tenants filling the server cannot lock out the next one, whichever transport they hold
//! their sessions on, and the creation is refused only when every session has a call in
//! flight.
//!
//! A session never authenticates anything: every request authenticates on its own, and a
//! session is found only when the request's credential owns it — otherwise it does not exist.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    jsonrpc::{ErrorObject, Id},
    protocol::ProtocolVersion,
    relay::{Note, Outbox},
};

/// A session as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: Arc<str>,
    pub owner: Arc<str>,
    pub tenant: Arc<str>,
    pub kind: SessionKind,
    pub protocol: ProtocolVersion,
    pub binding: Option<Arc<str>>,
    /// The instance that created it.
    pub holder: Arc<str>,
    /// The instance holding its server-to-client stream, if one is open.
    pub stream: Option<Arc<str>>,
    /// The extensions its `initialize` negotiated, so that an instance adopting the session
    /// serves its client as the one that created it would.
    pub extensions: crate::app::Extensions,
}

/// Which transport created a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    Streamable,
    LegacySse,
}

/// Events kept for `Last-Event-ID` replay on the standalone stream.
const REPLAY_EVENTS: usize = 64;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One session. Small on purpose: an idle session is a few hundred bytes.
pub struct Session {
    pub id: Arc<str>,
    pub owner: Arc<str>,
    /// The owner's tenant (see [`crate::Client::tenant`]).
    pub tenant: Arc<str>,
    pub kind: SessionKind,
    protocol: Mutex<ProtocolVersion>,
    /// The creating request's [`crate::Client::binding`].
    binding: Mutex<Option<Arc<str>>>,
    /// The client's name as its `initialize` gave it (`clientInfo.name`), when it did.
    client_name: Mutex<Option<Arc<str>>>,
    /// The extensions its `initialize` negotiated (in a cluster, also in the session's record,
    /// whence an instance adopting it takes them).
    extensions: Mutex<crate::app::Extensions>,
    /// Milliseconds since the registry's epoch of the last request.
    last_active: AtomicU64,
    /// The order of creation: of sessions last used within the same millisecond, the older
    /// counts as less recently used.
    seq: u64,
    /// The server-to-client stream (legacy SSE, or Streamable HTTP GET), when open.
    stream: Mutex<Option<mpsc::Sender<(u64, Value)>>>,
    next_event_id: AtomicU64,
    replay: Mutex<VecDeque<(u64, Value)>>,
    inflight: Mutex<HashMap<Id, CancellationToken>>,
    pending: Mutex<HashMap<Id, oneshot::Sender<Result<Value, ErrorObject>>>>,
    next_request_id: AtomicU64,
    /// The prefix of the ids of requests to the client: in a cluster it names this instance,
    /// so an answer posted to another instance is sent back here.
    request_prefix: Arc<str>,
    /// In a cluster, where messages for the session's own stream go while this instance holds
    /// no stream for it: the instance that does.
    relay: Mutex<Option<Relay>>,
    /// Whether this instance adopted the session from the cluster rather than creating it
    /// (cleared when this instance records it again after Redis lost it: see
    /// [`SessionRegistry::claim_adopted`]).
    adopted: AtomicBool,
    /// Cancelled when the session ends: streams close, in-flight calls stop.
    pub closed: CancellationToken,
}

/// The instance holding a session's stream, and the way to it.
#[derive(Clone)]
struct Relay {
    to: Arc<str>,
    outbox: Outbox,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Session {
    fn new(
        id: Arc<str>,
        owner: Arc<str>,
        tenant: Arc<str>,
        kind: SessionKind,
        (now_ms, seq): (u64, u64),
        request_prefix: Arc<str>,
        adopted: bool,
    ) -> Self {
        Self {
            id,
            owner,
            tenant,
            kind,
            protocol: Mutex::new(ProtocolVersion::HEADER_DEFAULT),
            binding: Mutex::new(None),
            client_name: Mutex::new(None),
            extensions: Mutex::new(crate::app::Extensions::default()),
            last_active: AtomicU64::new(now_ms),
            seq,
            stream: Mutex::new(None),
            next_event_id: AtomicU64::new(1),
            replay: Mutex::new(VecDeque::new()),
            inflight: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_request_id: AtomicU64::new(1),
            request_prefix,
            relay: Mutex::new(None),
            adopted: AtomicBool::new(adopted),
            closed: CancellationToken::new(),
        }
    }

    /// Sends what this instance writes to the session's own stream, while it holds none, to
    /// instance `to` (`None`: keep it here, for a stream opened later).
    pub(crate) fn relay_to(&self, to: Option<(Arc<str>, Outbox)>) {
        *lock(&self.relay) = to.map(|(to, outbox)| Relay { to, outbox });
    }

    /// Whether the session came from another instance of the cluster.
    pub fn is_adopted(&self) -> bool {
        self.adopted.load(Ordering::Relaxed)
    }

    /// The revision negotiated by `initialize` (2025-03-26 until then).
    pub fn protocol(&self) -> ProtocolVersion {
        *lock(&self.protocol)
    }

    pub fn set_protocol(&self, v: ProtocolVersion) {
        *lock(&self.protocol) = v;
    }

    /// The client's self-declared name (`initialize`'s `clientInfo.name`), when known.
    pub fn client_name(&self) -> Option<Arc<str>> {
        lock(&self.client_name).clone()
    }

    pub fn set_client_name(&self, name: Option<Arc<str>>) {
        *lock(&self.client_name) = name;
    }

    /// The extensions negotiated by `initialize` (none before).
    pub fn extensions(&self) -> crate::app::Extensions {
        lock(&self.extensions).clone()
    }

    pub fn set_extensions(&self, extensions: crate::app::Extensions) {
        *lock(&self.extensions) = extensions;
    }

    /// Keeps the creating request's binding (see [`crate::Client::binding`]).
    pub fn bind(&self, binding: Option<Arc<str>>) {
        *lock(&self.binding) = binding;
    }

    /// The binding the session was created with.
    pub fn binding(&self) -> Option<Arc<str>> {
        lock(&self.binding).clone()
    }

    /// Attaches the server-to-client stream. Returns false when one is already attached.
    pub fn attach_stream(&self, tx: mpsc::Sender<(u64, Value)>) -> bool {
        let mut s = lock(&self.stream);
        if s.as_ref().is_some_and(|t| !t.is_closed()) {
            return false;
        }
        *s = Some(tx);
        true
    }

    pub fn detach_stream(&self) {
        *lock(&self.stream) = None;
    }

    /// Sends a message on the session's stream, keeping it for replay. Returns false when no
    /// stream is attached (the message is still kept for a resuming client).
    pub async fn send(&self, message: Value) -> bool {
        let id = self.next_event_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut r = lock(&self.replay);
            if r.len() == REPLAY_EVENTS {
                r.pop_front();
            }
            r.push_back((id, message.clone()));
        }
        let tx = lock(&self.stream).clone().filter(|t| !t.is_closed());
        if let Some(tx) = tx {
            return tx.send((id, message)).await.is_ok();
        }
        let relay = lock(&self.relay).clone();
        match relay {
            // Sent in order with everything else this instance relays.
            Some(r) => r.outbox.post(
                Some(r.to),
                Note::Deliver {
                    session: self.id.to_string(),
                    message,
                },
            ),
            None => false,
        }
    }

    /// Kept events after `last_event_id`, for a resuming stream.
    pub fn replay_after(&self, last_event_id: u64) -> Vec<(u64, Value)> {
        lock(&self.replay)
            .iter()
            .filter(|(id, _)| *id > last_event_id)
            .cloned()
            .collect()
    }

    /// Registers an in-flight request so `notifications/cancelled` can stop it.
    pub fn track(&self, id: &Id, token: CancellationToken) {
        lock(&self.inflight).insert(id.clone(), token);
    }

    pub fn untrack(&self, id: &Id) {
        lock(&self.inflight).remove(id);
    }

    /// Cancels an in-flight request. Returns whether it was running.
    pub fn cancel(&self, id: &Id) -> bool {
        lock(&self.inflight)
            .remove(id)
            .map(|t| t.cancel())
            .is_some()
    }

    /// Whether the session may be ended to make room: no request in flight (an open stream,
    /// which clients keep for as long as they run, does not count; see the module docs).
    fn is_idle(&self) -> bool {
        lock(&self.inflight).is_empty()
    }

    /// Whether the session holds an open server-to-client stream.
    fn has_stream(&self) -> bool {
        lock(&self.stream).as_ref().is_some_and(|t| !t.is_closed())
    }

    /// Whether the cluster must keep hearing of the session although nobody used it: a
    /// request in flight, or a legacy SSE stream (the session lives exactly as long as it).
    fn is_held(&self) -> bool {
        !self.is_idle() || (self.kind == SessionKind::LegacySse && self.has_stream())
    }

    /// Reserves an id for a request to the client and the channel its answer arrives on.
    pub fn expect_response(&self) -> (Id, oneshot::Receiver<Result<Value, ErrorObject>>) {
        let n = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let id = Id::String(format!("{}{n}", self.request_prefix));
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), tx);
        (id, rx)
    }

    pub fn forget_response(&self, id: &Id) {
        lock(&self.pending).remove(id);
    }

    /// How many requests to the client await an answer.
    #[cfg(test)]
    pub(crate) fn awaiting_answers(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Whether a request this instance sent awaits the answer `id`.
    pub(crate) fn awaits(&self, id: &Id) -> bool {
        lock(&self.pending).contains_key(id)
    }

    /// Delivers the client's answer to a request we sent. Returns false for unknown ids.
    pub fn resolve_response(&self, id: &Id, outcome: Result<Value, ErrorObject>) -> bool {
        match lock(&self.pending).remove(id) {
            Some(tx) => tx.send(outcome).is_ok(),
            None => false,
        }
    }
}

/// Which cap a session could not be created within (every session in its scope was busy),
/// or made room in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionLimit {
    #[error("Too many active MCP sessions")]
    ServerWide,
    #[error("Too many active MCP sessions for this organization")]
    PerTenant,
    #[error("Too many active MCP sessions for this API key")]
    PerKey,
}

impl SessionLimit {
    /// The setting that sets this cap.
    pub fn setting(self) -> &'static str {
        match self {
            SessionLimit::ServerWide => "MCP_MAX_SESSIONS",
            SessionLimit::PerTenant => "MCP_MAX_SESSIONS_PER_ORG",
            SessionLimit::PerKey => "MCP_MAX_SESSIONS_PER_KEY",
        }
    }

    /// The cap's value in `limits`.
    pub fn value(self, limits: &SessionLimits) -> usize {
        match self {
            SessionLimit::ServerWide => limits.max_total,
            SessionLimit::PerTenant => limits.max_per_tenant,
            SessionLimit::PerKey => limits.max_per_key,
        }
    }

    /// The refusal a client reads: which cap, its value, the setting, and what to do.
    pub fn refusal(self, limits: &SessionLimits) -> String {
        format!(
            "{self}: {} at most ({}), and every one has a call in flight; end a session \
             (DELETE /mcp with its Mcp-Session-Id) or raise {}",
            self.value(limits),
            self.setting(),
            self.setting()
        )
    }

    /// A short name for records and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionLimit::ServerWide => "server",
            SessionLimit::PerTenant => "tenant",
            SessionLimit::PerKey => "key",
        }
    }
}

/// Why no session could be created or found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// Every session in the full scope is busy.
    #[error("{0}")]
    Full(SessionLimit),
    /// The cluster's session store cannot answer (see [`crate::cluster`]).
    #[error("session store unavailable: {0}")]
    Unavailable(String),
}

/// How long a refused client is asked to wait (`Retry-After`) when every session in the full
/// scope is busy: a busy session frees up when its call ends or its stream closes, which the
/// server cannot foresee.
pub const BUSY_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Session caps and lifetime.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Sessions in this process, all tenants together (in a cluster, in every instance: see
    /// [`crate::cluster`]; so are the other two caps).
    pub max_total: usize,
    /// Sessions of one tenant (all its credentials), so one cannot starve the others.
    pub max_per_tenant: usize,
    pub max_per_key: usize,
    pub idle_ttl: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_total: 100,
            max_per_tenant: 25,
            max_per_key: 5,
            idle_ttl: Duration::from_secs(30 * 60),
        }
    }
}

/// A session as an instance reports it to the cluster: alive, and unused for `idle_for`
/// (zero while a call is in flight).
#[derive(Debug, Clone)]
pub struct Activity {
    pub id: Arc<str>,
    pub owner: Arc<str>,
    pub tenant: Arc<str>,
    pub idle_for: Duration,
}

/// A session ended to make room for a new one.
#[derive(Debug, Clone)]
pub struct Evicted {
    pub id: Arc<str>,
    /// The credential that owned it.
    pub owner: Arc<str>,
    /// The cap that was reached.
    pub cap: SessionLimit,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<Arc<str>, Arc<Session>>,
    per_key: HashMap<Arc<str>, usize>,
    per_tenant: HashMap<Arc<str>, usize>,
    /// Sessions created so far.
    created: u64,
}

/// Counts one more in `map[k]`.
fn increment(map: &mut HashMap<Arc<str>, usize>, k: &Arc<str>) {
    *map.entry(k.clone()).or_insert(0) += 1;
}

/// Counts one less in `map[k]`, forgetting `k` at zero.
fn decrement(map: &mut HashMap<Arc<str>, usize>, k: &str) {
    if let Some(c) = map.get_mut(k) {
        *c -= 1;
        if *c == 0 {
            map.remove(k);
        }
    }
}

impl Inner {
    fn count(map: &HashMap<Arc<str>, usize>, k: &str) -> usize {
        map.get(k).copied().unwrap_or(0)
    }

    fn take(&mut self, id: &str) -> Option<Arc<Session>> {
        let s = self.sessions.remove(id)?;
        decrement(&mut self.per_key, &s.owner);
        decrement(&mut self.per_tenant, &s.tenant);
        Some(s)
    }
}

/// A new session's id: 128 random bits.
pub(crate) fn new_session_id() -> Arc<str> {
    uuid::Uuid::new_v4().simple().to_string().into()
}

/// What [`SessionRegistry::lookup`] found.
pub(crate) enum Lookup {
    /// The caller's own session.
    Mine(Arc<Session>),
    /// A session held here for another key: answered like a missing one.
    Foreign,
    /// No session of that id here (another instance may hold it).
    Missing,
}

/// All live sessions.
pub struct SessionRegistry {
    inner: Mutex<Inner>,
    limits: SessionLimits,
    epoch: Instant,
    /// See [`Session::request_prefix`].
    request_prefix: Arc<str>,
}

impl SessionRegistry {
    pub fn new(limits: SessionLimits) -> Self {
        Self::for_instance(limits, None)
    }

    /// The registry of one instance of a cluster, named `instance`.
    pub(crate) fn for_instance(limits: SessionLimits, instance: Option<&str>) -> Self {
        let request_prefix = match instance {
            Some(i) => format!("srv-{i}-").into(),
            None => "srv-".into(),
        };
        Self {
            inner: Mutex::new(Inner::default()),
            limits,
            epoch: Instant::now(),
            request_prefix,
        }
    }

    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Creates a session owned by `owner` of `tenant`, within the caps: at a full cap, the
    /// least recently used idle session in its scope is ended first (see the module docs) and
    /// returned, for the client to record. `Err` names the cap when every session in its scope
    /// is busy.
    pub fn create(
        &self,
        owner: &Arc<str>,
        tenant: &Arc<str>,
        kind: SessionKind,
    ) -> Result<(Arc<Session>, Option<Evicted>), SessionLimit> {
        let mut inner = lock(&self.inner);
        let cap = if Inner::count(&inner.per_key, owner) >= self.limits.max_per_key {
            Some(SessionLimit::PerKey)
        } else if Inner::count(&inner.per_tenant, tenant) >= self.limits.max_per_tenant {
            Some(SessionLimit::PerTenant)
        } else if inner.sessions.len() >= self.limits.max_total {
            Some(SessionLimit::ServerWide)
        } else {
            None
        };
        let evicted = match cap {
            None => None,
            Some(cap) => {
                // The tenant's sessions for its own cap, the credential's for its own; at the
                // server-wide cap, the tenant holding the most sessions (of those with an idle
                // one) gives up its least recently used idle session. Sessions without a stream
                // go first, then the least recently used.
                let lru = |s: &&Arc<Session>| {
                    std::cmp::Reverse((
                        s.has_stream(),
                        s.last_active.load(Ordering::Relaxed),
                        s.seq,
                    ))
                };
                let idle = inner.sessions.values().filter(|s| s.is_idle());
                let victim = match cap {
                    SessionLimit::PerTenant => idle.filter(|s| s.tenant == *tenant).max_by_key(lru),
                    SessionLimit::PerKey => idle.filter(|s| s.owner == *owner).max_by_key(lru),
                    SessionLimit::ServerWide => {
                        idle.max_by_key(|s| (Inner::count(&inner.per_tenant, &s.tenant), lru(s)))
                    }
                }
                .map(|s| s.id.clone())
                .ok_or(cap)?;
                let session = inner.take(&victim).ok_or(cap)?;
                // One session less in every scope it counted in, the full one included; a
                // second cap can still be full only when the caps were lowered meanwhile.
                if Inner::count(&inner.per_key, owner) >= self.limits.max_per_key
                    || Inner::count(&inner.per_tenant, tenant) >= self.limits.max_per_tenant
                    || inner.sessions.len() >= self.limits.max_total
                {
                    inner.sessions.insert(session.id.clone(), session.clone());
                    increment(&mut inner.per_key, &session.owner);
                    increment(&mut inner.per_tenant, &session.tenant);
                    return Err(cap);
                }
                session.closed.cancel();
                Some(Evicted {
                    id: session.id.clone(),
                    owner: session.owner.clone(),
                    cap,
                })
            }
        };
        let session = self.add(&mut inner, new_session_id(), owner, tenant, kind, false);
        Ok((session, evicted))
    }

    fn add(
        &self,
        inner: &mut Inner,
        id: Arc<str>,
        owner: &Arc<str>,
        tenant: &Arc<str>,
        kind: SessionKind,
        adopted: bool,
    ) -> Arc<Session> {
        inner.created += 1;
        let session = Arc::new(Session::new(
            id.clone(),
            owner.clone(),
            tenant.clone(),
            kind,
            (self.now_ms(), inner.created),
            self.request_prefix.clone(),
            adopted,
        ));
        inner.sessions.insert(id, session.clone());
        increment(&mut inner.per_key, owner);
        increment(&mut inner.per_tenant, tenant);
        session
    }

    /// Adds a session the cluster already admitted (see [`crate::cluster`]): its caps were
    /// decided cluster-wide, so this instance's are not applied. `adopted` when another
    /// instance created it.
    pub(crate) fn insert(
        &self,
        id: Arc<str>,
        owner: &Arc<str>,
        tenant: &Arc<str>,
        kind: SessionKind,
        adopted: bool,
    ) -> Arc<Session> {
        let mut inner = lock(&self.inner);
        // Two requests adopting the same session at once share one copy.
        if let Some(s) = inner.sessions.get(&id) {
            return s.clone();
        }
        self.add(&mut inner, id, owner, tenant, kind, adopted)
    }

    /// Marks `session` active now.
    pub(crate) fn touch(&self, session: &Session) {
        session.last_active.store(self.now_ms(), Ordering::Relaxed);
    }

    /// The session `id` whoever owns it, for messages from the cluster.
    pub(crate) fn local(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.inner).sessions.get(id).cloned()
    }

    /// Ends every session adopted from another instance: after missing the cluster's messages
    /// for a while, this instance no longer knows whether they still exist; the next request
    /// adopts a live one again.
    pub(crate) fn drop_adopted(&self) -> usize {
        let adopted: Vec<Arc<str>> = lock(&self.inner)
            .sessions
            .values()
            .filter(|s| s.is_adopted())
            .map(|s| s.id.clone())
            .collect();
        adopted.iter().filter(|id| self.remove(id)).count()
    }

    /// Makes every session adopted from another instance this instance's own, to record again:
    /// after Redis lost every record, the instance that created a session may be gone, and a
    /// copy is all that is left of it.
    pub(crate) fn claim_adopted(&self) -> usize {
        lock(&self.inner)
            .sessions
            .values()
            .filter(|s| s.adopted.swap(false, Ordering::Relaxed))
            .count()
    }

    /// Sessions used since `since` (milliseconds on this registry's clock, see
    /// [`SessionRegistry::now`]) or held now (a call in flight, a legacy SSE stream): the ones
    /// whose activity the cluster must hear of.
    pub(crate) fn active_since(&self, since: u64) -> Vec<Activity> {
        let now = self.now_ms();
        lock(&self.inner)
            .sessions
            .values()
            .filter_map(|s| {
                let last = s.last_active.load(Ordering::Relaxed);
                (last >= since || s.is_held()).then(|| Activity {
                    id: s.id.clone(),
                    owner: s.owner.clone(),
                    tenant: s.tenant.clone(),
                    idle_for: if s.is_idle() {
                        Duration::from_millis(now.saturating_sub(last))
                    } else {
                        Duration::ZERO
                    },
                })
            })
            .collect()
    }

    /// The records of the sessions this instance created (not adopted), as `instance`.
    pub(crate) fn own_records(&self, instance: &Arc<str>) -> Vec<SessionRecord> {
        lock(&self.inner)
            .sessions
            .values()
            .filter(|s| !s.is_adopted())
            .map(|s| SessionRecord {
                id: s.id.clone(),
                owner: s.owner.clone(),
                tenant: s.tenant.clone(),
                kind: s.kind,
                protocol: s.protocol(),
                binding: s.binding(),
                holder: instance.clone(),
                stream: lock(&s.stream)
                    .as_ref()
                    .is_some_and(|t| !t.is_closed())
                    .then(|| instance.clone()),
                extensions: s.extensions(),
            })
            .collect()
    }

    /// Milliseconds since this registry started.
    pub(crate) fn now(&self) -> u64 {
        self.now_ms()
    }

    /// Session `id` as `owner` asks for it, in one look at the registry: `owner`'s (marked
    /// active), someone else's, or not held here.
    pub(crate) fn lookup(&self, id: &str, owner: &str) -> Lookup {
        let inner = lock(&self.inner);
        match inner.sessions.get(id) {
            Some(s) if &*s.owner == owner => {
                s.last_active.store(self.now_ms(), Ordering::Relaxed);
                Lookup::Mine(s.clone())
            }
            Some(_) => Lookup::Foreign,
            None => Lookup::Missing,
        }
    }

    /// The session `id` if `owner` owns it; marks it active. Foreign and unknown sessions
    /// are equally `None`.
    pub fn get(&self, id: &str, owner: &str) -> Option<Arc<Session>> {
        let inner = lock(&self.inner);
        let s = inner
            .sessions
            .get(id)
            .filter(|s| &*s.owner == owner)?
            .clone();
        s.last_active.store(self.now_ms(), Ordering::Relaxed);
        Some(s)
    }

    /// Ends a session. Returns whether it existed.
    pub fn remove(&self, id: &str) -> bool {
        let removed = lock(&self.inner).take(id);
        match removed {
            Some(s) => {
                s.closed.cancel();
                true
            }
            None => false,
        }
    }

    /// Ends every session idle for longer than the TTL. Returns how many.
    pub fn sweep(&self) -> usize {
        let now = self.now_ms();
        let ttl = u64::try_from(self.limits.idle_ttl.as_millis()).unwrap_or(u64::MAX);
        let stale: Vec<Arc<str>> = lock(&self.inner)
            .sessions
            .values()
            .filter(|s| now.saturating_sub(s.last_active.load(Ordering::Relaxed)) > ttl)
            .map(|s| s.id.clone())
            .collect();
        stale.iter().filter(|id| self.remove(id)).count()
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        lock(&self.inner).sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Arc<str> {
        k.into()
    }

    fn limits(max_total: usize, max_per_tenant: usize, max_per_key: usize) -> SessionLimits {
        SessionLimits {
            max_total,
            max_per_tenant,
            max_per_key,
            idle_ttl: Duration::from_secs(60),
        }
    }

    /// A session of `owner` in tenant `t`, created without ending another.
    fn open(r: &SessionRegistry, owner: &str, t: &str, kind: SessionKind) -> Arc<Session> {
        let (s, evicted) = r.create(&key(owner), &key(t), kind).unwrap();
        assert!(evicted.is_none(), "{:?} ended", evicted.map(|e| e.id));
        s
    }

    /// Makes `s` busy with an open stream; the receiver keeps it open.
    fn stream(s: &Session) -> mpsc::Receiver<(u64, Value)> {
        let (tx, rx) = mpsc::channel(1);
        assert!(s.attach_stream(tx));
        rx
    }

    #[test]
    fn caps_and_ownership() {
        let r = SessionRegistry::new(limits(3, 3, 2));
        let a1 = open(&r, "a", "t", SessionKind::Streamable);
        a1.track(&Id::Number(1), CancellationToken::new());
        let a2 = open(&r, "a", "t", SessionKind::Streamable);
        a2.track(&Id::Number(1), CancellationToken::new());
        assert_eq!(
            r.create(&key("a"), &key("t"), SessionKind::LegacySse)
                .unwrap_err(),
            SessionLimit::PerKey,
            "both busy: refused"
        );
        open(&r, "b", "u", SessionKind::LegacySse).track(&Id::Number(1), CancellationToken::new());
        assert_eq!(
            r.create(&key("c"), &key("v"), SessionKind::Streamable)
                .unwrap_err(),
            SessionLimit::ServerWide,
            "every session is busy: refused"
        );
        assert!(r.get(&a1.id, "a").is_some());
        assert!(
            r.get(&a1.id, "b").is_none(),
            "another credential cannot see it"
        );
        assert!(r.remove(&a1.id));
        assert!(a1.closed.is_cancelled());
        assert!(
            r.create(&key("a"), &key("t"), SessionKind::Streamable)
                .is_ok(),
            "a slot freed"
        );
        assert_eq!(
            SessionLimit::PerKey.to_string(),
            "Too many active MCP sessions for this API key"
        );
    }

    /// Four tenants filling the server-wide cap cannot lock a fifth out: the least recently
    /// used idle session of the tenant holding the most ends; only when every session is busy
    /// is the fifth refused.
    #[test]
    fn at_the_server_cap_the_largest_tenant_gives_way() {
        let r = SessionRegistry::new(limits(6, 3, 3));
        let big_oldest = open(&r, "a", "big", SessionKind::Streamable);
        let big = [
            open(&r, "a", "big", SessionKind::Streamable),
            open(&r, "b", "big", SessionKind::Streamable),
        ];
        let small = open(&r, "c", "small", SessionKind::Streamable);
        let others = [
            open(&r, "d", "other", SessionKind::Streamable),
            open(&r, "e", "third", SessionKind::Streamable),
        ];
        let (_, evicted) = r
            .create(&key("f"), &key("fifth"), SessionKind::Streamable)
            .unwrap();
        let evicted = evicted.expect("room made");
        assert_eq!(
            evicted.id, big_oldest.id,
            "the largest tenant's oldest idle"
        );
        assert_eq!(evicted.cap, SessionLimit::ServerWide);
        // With `big`'s sessions busy (a call in flight each), the tenants with an idle one hold one each: the least
        // recently used of those ends.
        big.iter()
            .for_each(|s| s.track(&Id::Number(1), CancellationToken::new()));
        let (_, evicted) = r
            .create(&key("g"), &key("sixth"), SessionKind::Streamable)
            .unwrap();
        assert_eq!(
            evicted.unwrap().id,
            small.id,
            "big is busy: the oldest idle of the rest"
        );
        // Every session busy: refused.
        others
            .iter()
            .for_each(|s| s.track(&Id::Number(1), CancellationToken::new()));
        let busy: Vec<_> = r
            .inner
            .lock()
            .unwrap()
            .sessions
            .values()
            .filter(|s| s.is_idle())
            .cloned()
            .collect();
        busy.iter()
            .for_each(|s| s.track(&Id::Number(1), CancellationToken::new()));
        assert_eq!(
            r.create(&key("h"), &key("seventh"), SessionKind::Streamable)
                .unwrap_err(),
            SessionLimit::ServerWide
        );
    }

    #[test]
    fn at_the_key_cap_the_least_recently_used_idle_session_ends() {
        let r = SessionRegistry::new(limits(100, 100, 3));
        let oldest = open(&r, "a", "t", SessionKind::Streamable);
        let streaming = open(&r, "a", "t", SessionKind::Streamable);
        let _rx = stream(&streaming);
        let newer = open(&r, "a", "t", SessionKind::Streamable);
        std::thread::sleep(Duration::from_millis(2));
        // Used since: `oldest` is now the most recently used idle one.
        assert!(r.get(&oldest.id, "a").is_some());
        let (fresh, evicted) = r
            .create(&key("a"), &key("t"), SessionKind::Streamable)
            .unwrap();
        let evicted = evicted.expect("one ended");
        assert_eq!(
            evicted.id, newer.id,
            "the least recently used of those without a stream"
        );
        assert_eq!(evicted.cap, SessionLimit::PerKey);
        assert!(newer.closed.is_cancelled());
        assert!(r.get(&newer.id, "a").is_none());
        assert_eq!(r.len(), 3);

        // A call in flight keeps a session; an open stream, legacy or not, only makes it go
        // after those without one.
        fresh.track(&Id::Number(7), CancellationToken::new());
        let (legacy, evicted) = r
            .create(&key("a"), &key("t"), SessionKind::LegacySse)
            .unwrap();
        let _legacy_stream = stream(&legacy);
        assert_eq!(evicted.unwrap().id, oldest.id);
        // Left: a session with only its GET stream open, one with a call, a legacy stream.
        // The least recently used of the two streams makes room (a client keeps its stream
        // for as long as it runs, so it alone says nothing about use).
        let (newest, evicted) = r
            .create(&key("a"), &key("t"), SessionKind::Streamable)
            .unwrap();
        assert_eq!(evicted.unwrap().id, streaming.id);
        assert!(streaming.closed.is_cancelled(), "its stream ends with it");
        newest.track(&Id::Number(1), CancellationToken::new());
        let (_, evicted) = r
            .create(&key("a"), &key("t"), SessionKind::Streamable)
            .unwrap();
        assert_eq!(evicted.unwrap().id, legacy.id, "a legacy stream too");
        assert!(legacy.closed.is_cancelled(), "its stream ends with it");
        fresh.untrack(&Id::Number(7));
        let (_, evicted) = r
            .create(&key("a"), &key("t"), SessionKind::Streamable)
            .unwrap();
        assert_eq!(evicted.unwrap().id, fresh.id);
    }

    /// Four tenants holding the server-wide cap in legacy SSE streams (the transport of older
    /// clients, where the session lives as long as its stream) cannot lock a fifth out either.
    #[test]
    fn at_the_server_cap_legacy_streams_give_way_too() {
        let r = SessionRegistry::new(limits(4, 2, 2));
        let mut streams = Vec::new();
        let mut sessions = Vec::new();
        for t in ["t1", "t1", "t2", "t3"] {
            let s = open(&r, t, t, SessionKind::LegacySse);
            streams.push(stream(&s));
            sessions.push(s);
            std::thread::sleep(Duration::from_millis(2));
        }
        let (_, evicted) = r
            .create(&key("t5"), &key("t5"), SessionKind::Streamable)
            .unwrap();
        let evicted = evicted.expect("room made");
        assert_eq!(
            (evicted.id.clone(), evicted.cap),
            (sessions[0].id.clone(), SessionLimit::ServerWide),
            "the largest tenant's least recently used stream"
        );
        assert!(sessions[0].closed.is_cancelled());
        // A stream with a call in flight is busy: with every other one busy, refused.
        for s in &sessions[1..] {
            s.track(&Id::Number(1), CancellationToken::new());
        }
        assert!(r.get(&evicted.id, "t1").is_none());
        let t5: Vec<_> = r
            .inner
            .lock()
            .unwrap()
            .sessions
            .values()
            .filter(|s| &*s.tenant == "t5")
            .cloned()
            .collect();
        t5[0].track(&Id::Number(1), CancellationToken::new());
        assert_eq!(
            r.create(&key("t6"), &key("t6"), SessionKind::LegacySse)
                .unwrap_err(),
            SessionLimit::ServerWide
        );
    }

    #[test]
    fn when_every_session_is_busy_the_refusal_names_the_cap_and_its_setting() {
        let r = SessionRegistry::new(limits(100, 100, 2));
        for _ in 0..2 {
            open(&r, "a", "t", SessionKind::Streamable)
                .track(&Id::Number(1), CancellationToken::new());
        }
        let cap = r
            .create(&key("a"), &key("t"), SessionKind::Streamable)
            .unwrap_err();
        let refusal = cap.refusal(&r.limits());
        assert!(
            refusal.starts_with("Too many active MCP sessions for this API key: 2 at most")
                && refusal.contains("MCP_MAX_SESSIONS_PER_KEY"),
            "{refusal}"
        );
    }

    #[test]
    fn one_tenant_cannot_fill_the_server() {
        let r = SessionRegistry::new(limits(6, 3, 2));
        let t1 = open(&r, "k1", "t", SessionKind::Streamable);
        let _busy = stream(&t1);
        for owner in ["k1", "k2"] {
            let s = r.create(&key(owner), &key("t"), SessionKind::Streamable);
            if owner == "k2" {
                let (s, _) = s.unwrap();
                let _ = stream(&s);
                s.track(&Id::Number(1), CancellationToken::new());
            }
        }
        // Tenant t holds three (its cap); its third key ends the least recently used idle one
        // of the tenant, whoever's.
        let (_, evicted) = r
            .create(&key("k3"), &key("t"), SessionKind::Streamable)
            .unwrap();
        let evicted = evicted.unwrap();
        assert_eq!(evicted.cap, SessionLimit::PerTenant);
        assert_eq!(&*evicted.owner, "k1");
        // Other tenants still have room.
        open(&r, "x", "u", SessionKind::Streamable);
        open(&r, "y", "v", SessionKind::Streamable);
        assert_eq!(r.len(), 5);
    }

    #[test]
    fn idle_sessions_are_swept() {
        let r = SessionRegistry::new(SessionLimits {
            idle_ttl: Duration::ZERO,
            ..limits(10, 10, 10)
        });
        let s = open(&r, "a", "t", SessionKind::Streamable);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(r.sweep(), 1);
        assert!(r.get(&s.id, "a").is_none());
        assert!(r.is_empty());
    }

    #[tokio::test]
    async fn replay_keeps_the_latest_events() {
        let r = SessionRegistry::new(SessionLimits::default());
        let s = open(&r, "a", "t", SessionKind::Streamable);
        for i in 0..70 {
            assert!(!s.send(serde_json::json!(i)).await, "no stream attached");
        }
        let kept = s.replay_after(0);
        assert_eq!(kept.len(), REPLAY_EVENTS);
        assert_eq!(kept.last().unwrap().0, 70);
        assert_eq!(s.replay_after(68).len(), 2);
    }
}
