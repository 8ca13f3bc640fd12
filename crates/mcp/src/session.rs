//! Sessions: created by `initialize` (Streamable HTTP) or by opening the legacy SSE stream,
//! bound to the credential that created them, capped server-wide and per credential, and
//! dropped after an idle TTL.
//!
//! A session never authenticates anything: every request authenticates on its own, and a
//! session is found only when the request's credential owns it — otherwise it does not exist.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    jsonrpc::{ErrorObject, Id},
    protocol::ProtocolVersion,
};

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
    pub kind: SessionKind,
    protocol: Mutex<ProtocolVersion>,
    /// Milliseconds since the registry's epoch of the last request.
    last_active: AtomicU64,
    /// The server-to-client stream (legacy SSE, or Streamable HTTP GET), when open.
    stream: Mutex<Option<mpsc::Sender<(u64, Value)>>>,
    next_event_id: AtomicU64,
    replay: Mutex<VecDeque<(u64, Value)>>,
    inflight: Mutex<HashMap<Id, CancellationToken>>,
    pending: Mutex<HashMap<Id, oneshot::Sender<Result<Value, ErrorObject>>>>,
    next_request_id: AtomicU64,
    /// Cancelled when the session ends: streams close, in-flight calls stop.
    pub closed: CancellationToken,
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
    fn new(id: Arc<str>, owner: Arc<str>, kind: SessionKind, now_ms: u64) -> Self {
        Self {
            id,
            owner,
            kind,
            protocol: Mutex::new(ProtocolVersion::HEADER_DEFAULT),
            last_active: AtomicU64::new(now_ms),
            stream: Mutex::new(None),
            next_event_id: AtomicU64::new(1),
            replay: Mutex::new(VecDeque::new()),
            inflight: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_request_id: AtomicU64::new(1),
            closed: CancellationToken::new(),
        }
    }

    /// The revision negotiated by `initialize` (2025-03-26 until then).
    pub fn protocol(&self) -> ProtocolVersion {
        *lock(&self.protocol)
    }

    pub fn set_protocol(&self, v: ProtocolVersion) {
        *lock(&self.protocol) = v;
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
        let tx = lock(&self.stream).clone();
        match tx {
            Some(tx) => tx.send((id, message)).await.is_ok(),
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

    /// Reserves an id for a request to the client and the channel its answer arrives on.
    pub fn expect_response(&self) -> (Id, oneshot::Receiver<Result<Value, ErrorObject>>) {
        let n = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let id = Id::String(format!("srv-{n}"));
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

    /// Delivers the client's answer to a request we sent. Returns false for unknown ids.
    pub fn resolve_response(&self, id: &Id, outcome: Result<Value, ErrorObject>) -> bool {
        match lock(&self.pending).remove(id) {
            Some(tx) => tx.send(outcome).is_ok(),
            None => false,
        }
    }
}

/// Why a session could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionLimit {
    #[error("Too many active MCP sessions")]
    ServerWide,
    #[error("Too many active MCP sessions for this API key")]
    PerKey,
}

/// Session caps and lifetime.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    pub max_total: usize,
    pub max_per_key: usize,
    pub idle_ttl: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_total: 100,
            max_per_key: 5,
            idle_ttl: Duration::from_secs(30 * 60),
        }
    }
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<Arc<str>, Arc<Session>>,
    per_key: HashMap<Arc<str>, usize>,
}

/// All live sessions.
pub struct SessionRegistry {
    inner: Mutex<Inner>,
    limits: SessionLimits,
    epoch: Instant,
}

impl SessionRegistry {
    pub fn new(limits: SessionLimits) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            limits,
            epoch: Instant::now(),
        }
    }

    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Creates a session owned by `owner`, within the caps.
    pub fn create(
        &self,
        owner: &Arc<str>,
        kind: SessionKind,
    ) -> Result<Arc<Session>, SessionLimit> {
        let mut inner = lock(&self.inner);
        if inner.sessions.len() >= self.limits.max_total {
            return Err(SessionLimit::ServerWide);
        }
        let count = inner.per_key.get(owner).copied().unwrap_or(0);
        if count >= self.limits.max_per_key {
            return Err(SessionLimit::PerKey);
        }
        let id: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        let session = Arc::new(Session::new(id.clone(), owner.clone(), kind, self.now_ms()));
        inner.sessions.insert(id, session.clone());
        inner.per_key.insert(owner.clone(), count + 1);
        Ok(session)
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
        let removed = {
            let mut inner = lock(&self.inner);
            let removed = inner.sessions.remove(id);
            if let Some(s) = &removed
                && let Some(c) = inner.per_key.get_mut(&s.owner)
            {
                *c -= 1;
                if *c == 0 {
                    inner.per_key.remove(&s.owner);
                }
            }
            removed
        };
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

    #[test]
    fn caps_and_ownership() {
        let r = SessionRegistry::new(SessionLimits {
            max_total: 3,
            max_per_key: 2,
            idle_ttl: Duration::from_secs(60),
        });
        let a1 = r.create(&key("a"), SessionKind::Streamable).unwrap();
        r.create(&key("a"), SessionKind::Streamable).unwrap();
        assert_eq!(
            r.create(&key("a"), SessionKind::LegacySse).unwrap_err(),
            SessionLimit::PerKey
        );
        r.create(&key("b"), SessionKind::Streamable).unwrap();
        assert_eq!(
            r.create(&key("c"), SessionKind::Streamable).unwrap_err(),
            SessionLimit::ServerWide
        );
        assert!(r.get(&a1.id, "a").is_some());
        assert!(
            r.get(&a1.id, "b").is_none(),
            "another credential cannot see it"
        );
        assert!(r.remove(&a1.id));
        assert!(a1.closed.is_cancelled());
        assert!(
            r.create(&key("a"), SessionKind::Streamable).is_ok(),
            "a slot freed"
        );
        assert_eq!(
            SessionLimit::PerKey.to_string(),
            "Too many active MCP sessions for this API key"
        );
    }

    #[test]
    fn idle_sessions_are_swept() {
        let r = SessionRegistry::new(SessionLimits {
            max_total: 10,
            max_per_key: 10,
            idle_ttl: Duration::ZERO,
        });
        let s = r.create(&key("a"), SessionKind::Streamable).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(r.sweep(), 1);
        assert!(r.get(&s.id, "a").is_none());
        assert!(r.is_empty());
    }

    #[tokio::test]
    async fn replay_keeps_the_latest_events() {
        let r = SessionRegistry::new(SessionLimits::default());
        let s = r.create(&key("a"), SessionKind::Streamable).unwrap();
        for i in 0..70 {
            assert!(!s.send(serde_json::json!(i)).await, "no stream attached");
        }
        let kept = s.replay_after(0);
        assert_eq!(kept.len(), REPLAY_EVENTS);
        assert_eq!(kept.last().unwrap().0, 70);
        assert_eq!(s.replay_after(68).len(), 2);
    }
}
