//! Sessions shared by every instance of a cluster, through Redis.
//!
//! Behind a load balancer with no affinity, each request of a session may reach any instance.
//! The cluster keeps, per session, a record (owner, tenant, transport, revision, binding, the
//! extensions its `initialize` negotiated, the instance that created it and the one holding its
//! server-to-client stream) and the session's
//! last activity in three sorted sets — all sessions, per credential, per tenant — so the caps
//! are counted cluster-wide. An instance that receives a request for a session it does not
//! hold finds the record, checks the owner, and adopts the session (a local copy); what must
//! reach another instance travels as a note on Redis pub/sub:
//!
//! - a message for a session's own stream (a legacy SSE reply, a Streamable HTTP GET-stream
//!   event) goes to the instance holding the stream, through one ordered outbox per instance,
//!   so replies arrive in the order they were sent;
//! - the client's answer to a request the server sent (sampling, elicitation) goes to the
//!   instance that sent it, named in the request's id (`srv-<instance>-<n>`);
//! - `notifications/cancelled` and a session's end go to every instance.
//!
//! Activity reaches Redis once a second per instance ([`SessionCluster::refresh`]), not per
//! request, so the hot path makes no Redis round trip for a session it holds. Each report
//! carries how long the session has gone unused (zero with a call in flight), and a session's
//! score only moves forward: it counts as idle for the caps' least-recently-used rule once it
//! has gone unused for [`IDLE_AFTER`] on every instance. Sessions with a call in flight or a
//! legacy SSE stream open are reported every second, so they stay alive whatever their age
//! (a held stream's score never falls more than half the idle TTL behind); a record not
//! refreshed for the idle TTL expires; an instance that dies leaves its sessions to expire
//! that way. Redis keeps nothing on disk in the reference deployment: after it restarts, each
//! instance records the sessions it holds again as soon as its subscription is back — the ones
//! it created, and the copies it adopted, whose creator may be gone (a generation id in Redis
//! tells a restart from a lost connection). Until then, for [`RECOVERY_GRACE`], a session Redis
//! does not know is answered with 503 (retry), not 404.
//!
//! Redis is the only place another instance's sessions are known: when it cannot answer, what
//! needs it (a new session, a session held elsewhere) is refused with 503 whatever the
//! environment, and a session this instance holds keeps working.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use breeze_limits::RedisConnection;
use futures::StreamExt;
use redis::{Script, aio::ConnectionManager};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) use crate::relay::{Heard, Note};
use crate::{
    app::Extensions,
    protocol::ProtocolVersion,
    relay::{Addressed, Outbox},
    session::{
        Activity, Evicted, SessionError, SessionKind, SessionLimit, SessionLimits, SessionRecord,
    },
};

/// How long a session must go unreported before the caps may end it to make room.
pub const IDLE_AFTER: Duration = Duration::from_secs(3);

/// How often an instance reports its sessions' activity.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Counts the caps, ends the least recently used idle session in the full scope if one must
/// make room, and records the new session. Keys: record, all, per credential, per tenant.
const OPEN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[9])
for i = 2, 4 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - ttl) end
local cap, scope = '', nil
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[11]) then cap, scope = 'key', KEYS[3]
elseif redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[12]) then cap, scope = 'tenant', KEYS[4]
elseif redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[13]) then cap, scope = 'server', KEYS[2]
end
local victim, victim_owner = '', ''
if cap == 'server' then
  -- The tenant holding the most sessions (of those with an idle one) gives up its least
  -- recently used idle session: oldest first, so the first seen of the largest tenant wins.
  local idle = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[10]))
  local counts, most = {}, -1
  for _, id in ipairs(idle) do
    local tenant = redis.call('HGET', ARGV[14] .. 's:' .. id, 'tenant')
    if tenant then
      if counts[tenant] == nil then
        counts[tenant] = redis.call('ZCARD', ARGV[14] .. 'tenant:' .. tenant)
      end
      if counts[tenant] > most then victim, most = id, counts[tenant] end
    end
  end
  if victim == '' then return {cap, '', ''} end
elseif scope then
  local v = redis.call('ZRANGEBYSCORE', scope, '-inf', now - tonumber(ARGV[10]), 'LIMIT', 0, 1)
  if #v == 0 then return {cap, '', ''} end
  victim = v[1]
end
if victim ~= '' then
  local vk = ARGV[14] .. 's:' .. victim
  local f = redis.call('HMGET', vk, 'owner', 'tenant')
  redis.call('ZREM', KEYS[2], victim)
  redis.call('ZREM', scope, victim)
  if f[1] then redis.call('ZREM', ARGV[14] .. 'key:' .. f[1], victim); victim_owner = f[1] end
  if f[2] then redis.call('ZREM', ARGV[14] .. 'tenant:' .. f[2], victim) end
  redis.call('DEL', vk)
end
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'tenant', ARGV[3], 'kind', ARGV[4],
  'protocol', ARGV[5], 'holder', ARGV[7])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'binding', ARGV[6]) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'stream', ARGV[8]) end
redis.call('PEXPIRE', KEYS[1], ttl)
for i = 2, 4 do
  redis.call('ZADD', KEYS[i], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {cap, victim, victim_owner}
";

/// Marks sessions active as of how long each has gone unused (never further back than half the
/// idle TTL, so a held session stays counted), if they still exist, and keeps their records and
/// the sets they are counted in alive. ARGV: prefix, ttl, then id, owner, tenant, unused
/// milliseconds for each session.
const REFRESH: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p, ttl = ARGV[1], tonumber(ARGV[2])
for i = 3, #ARGV, 4 do
  local id = ARGV[i]
  if redis.call('PEXPIRE', p .. 's:' .. id, ttl) == 1 then
    local score = now - math.min(tonumber(ARGV[i + 3]), math.floor(ttl / 2))
    for _, set in ipairs({p .. 'all', p .. 'key:' .. ARGV[i + 1], p .. 'tenant:' .. ARGV[i + 2]}) do
      redis.call('ZADD', set, 'XX', 'GT', score, id)
      redis.call('PEXPIRE', set, ttl)
    end
  end
end
return 0
";

/// Records sessions again after Redis lost them (a restart), without counting the caps: they
/// exist already. ARGV: prefix, ttl, then id, owner, tenant, kind, protocol, binding, holder,
/// stream, extensions for each session ('' for none).
const RESTORE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p, ttl = ARGV[1], tonumber(ARGV[2])
for i = 3, #ARGV, 9 do
  local id, key = ARGV[i], p .. 's:' .. ARGV[i]
  redis.call('HSET', key, 'owner', ARGV[i + 1], 'tenant', ARGV[i + 2], 'kind', ARGV[i + 3],
    'protocol', ARGV[i + 4], 'holder', ARGV[i + 6])
  if ARGV[i + 5] ~= '' then redis.call('HSET', key, 'binding', ARGV[i + 5]) end
  if ARGV[i + 7] ~= '' then redis.call('HSET', key, 'stream', ARGV[i + 7]) end
  if ARGV[i + 8] ~= '' then redis.call('HSET', key, 'extensions', ARGV[i + 8]) end
  redis.call('PEXPIRE', key, ttl)
  for _, set in ipairs({p .. 'all', p .. 'key:' .. ARGV[i + 1], p .. 'tenant:' .. ARGV[i + 2]}) do
    redis.call('ZADD', set, 'NX', now, id)
    redis.call('PEXPIRE', set, ttl)
  end
end
return 0
";

/// Sets a session record's `extensions`, if the record still exists (a field written to an
/// expired record would make a partial one, without expiry). Keys: record. ARGV: the JSON.
const SET_EXTENSIONS: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HSET', KEYS[1], 'extensions', ARGV[1])
end
return 0
";

/// Removes a session's record and its place in the caps. ARGV: prefix, id.
const CLOSE: &str = r"
local p, id = ARGV[1], ARGV[2]
local f = redis.call('HMGET', p .. 's:' .. id, 'owner', 'tenant')
redis.call('ZREM', p .. 'all', id)
if f[1] then redis.call('ZREM', p .. 'key:' .. f[1], id) end
if f[2] then redis.call('ZREM', p .. 'tenant:' .. f[2], id) end
return redis.call('DEL', p .. 's:' .. id)
";

/// The generation of the cluster's records: an id written once by whichever instance finds it
/// missing. A generation that changed (or vanished) means Redis lost every record (a restart
/// without persistence, a flush); the instance that finds so marks the cluster as recovering
/// for [`RECOVERY_GRACE`]. Keys: the generation, the recovering mark. ARGV: a new id, the id
/// this instance saw last ('' for none), the grace in milliseconds. Answers the generation.
const GENERATION: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1])
end
local id = redis.call('GET', KEYS[1])
if ARGV[2] ~= '' and ARGV[2] ~= id then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
end
return id
";

/// Whether the cluster is recovering from lost records: no generation yet (no instance has
/// noticed the loss), or the mark one set. Keys: as [`GENERATION`].
const RECOVERING: &str = r"
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
return 0
";

/// How long after an instance finds that Redis lost its records a session Redis does not know
/// is answered as "recovering" (503, retry) rather than as missing (404): the time every
/// instance needs to notice, subscribe again and record what it holds.
pub const RECOVERY_GRACE: Duration = Duration::from_secs(5);

/// What this instance has asked of Redis and heard from the others, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Commands and scripts sent to Redis (a retry on a new connection counts once).
    pub redis_round_trips: u64,
    /// Of those, the ones that failed or timed out.
    pub redis_failures: u64,
    /// Notes published to other instances.
    pub notes_sent: u64,
    /// Notes heard from the cluster (this instance's own broadcasts included).
    pub notes_received: u64,
}

#[derive(Default)]
struct Counters {
    round_trips: AtomicU64,
    failures: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
}

/// This instance's view of the cluster's sessions in Redis.
pub struct SessionCluster {
    redis: RedisConnection,
    prefix: String,
    instance: Arc<str>,
    open: Script,
    refresh: Script,
    restore: Script,
    close: Script,
    generation: Script,
    recovering: Script,
    /// The generation of the records this instance last saw (see [`GENERATION`]).
    seen_generation: std::sync::Mutex<Option<String>>,
    outbox: Outbox,
    counters: Counters,
    /// True while this instance's subscription is up.
    subscribed: tokio::sync::watch::Sender<bool>,
    outbox_rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<Addressed>>>,
}

impl std::fmt::Debug for SessionCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCluster")
            .field("prefix", &self.prefix)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl SessionCluster {
    /// The cluster on the Redis at `url`, keys under `prefix`. Does not connect yet; an invalid
    /// URL is an error now. The instance gets a random name.
    pub fn new(url: &str, prefix: &str) -> Result<Self, SessionError> {
        let redis = RedisConnection::open(url, Duration::from_millis(500))
            .map_err(SessionError::Unavailable)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let instance = uuid::Uuid::new_v4().simple().to_string();
        Ok(Self {
            redis,
            prefix: prefix.to_owned(),
            instance: instance[..12].into(),
            open: Script::new(OPEN),
            refresh: Script::new(REFRESH),
            restore: Script::new(RESTORE),
            close: Script::new(CLOSE),
            generation: Script::new(GENERATION),
            recovering: Script::new(RECOVERING),
            seen_generation: std::sync::Mutex::new(None),
            outbox: Outbox(tx),
            counters: Counters::default(),
            subscribed: tokio::sync::watch::Sender::new(false),
            outbox_rx: std::sync::Mutex::new(Some(rx)),
        })
    }

    /// This instance's name in the cluster.
    pub fn instance(&self) -> &Arc<str> {
        &self.instance
    }

    /// Counts so far.
    pub fn stats(&self) -> ClusterStats {
        let c = &self.counters;
        ClusterStats {
            redis_round_trips: c.round_trips.load(Ordering::Relaxed),
            redis_failures: c.failures.load(Ordering::Relaxed),
            notes_sent: c.sent.load(Ordering::Relaxed),
            notes_received: c.received.load(Ordering::Relaxed),
        }
    }

    /// Resolves once this instance hears the cluster (its subscription is up): notes published
    /// before then do not reach it.
    pub async fn subscribed(&self) {
        let mut rx = self.subscribed.subscribe();
        let _ = rx.wait_for(|up| *up).await;
    }

    pub(crate) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    fn channel(&self, to: Option<&str>) -> String {
        match to {
            Some(i) => format!("{}i:{i}", self.prefix),
            None => format!("{}all", self.prefix),
        }
    }

    fn record_key(&self, id: &str) -> String {
        format!("{}s:{id}", self.prefix)
    }

    /// Runs `f` on the shared connection (see [`RedisConnection::run`]), counted.
    async fn run<T, F, Fut>(&self, f: F) -> Result<T, SessionError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.counters.round_trips.fetch_add(1, Ordering::Relaxed);
        self.redis.run(f).await.map_err(|e| {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
            SessionError::Unavailable(e)
        })
    }

    /// Admits `record` within the cluster-wide `limits`: at a full cap the least recently used
    /// idle session in its scope ends (returned, already removed from the cluster; its copies
    /// end when they hear of it); `Full` when none is idle.
    pub async fn open(
        &self,
        record: &SessionRecord,
        limits: &SessionLimits,
    ) -> Result<Option<Evicted>, SessionError> {
        let p = &self.prefix;
        let mut inv = self.open.prepare_invoke();
        inv.key(self.record_key(&record.id))
            .key(format!("{p}all"))
            .key(format!("{p}key:{}", record.owner))
            .key(format!("{p}tenant:{}", record.tenant))
            .arg(&*record.id)
            .arg(&*record.owner)
            .arg(&*record.tenant)
            .arg(kind_str(record.kind))
            .arg(record.protocol.as_str())
            .arg(record.binding.as_deref().unwrap_or(""))
            .arg(&*record.holder)
            .arg(record.stream.as_deref().unwrap_or(""))
            .arg(millis(limits.idle_ttl))
            .arg(millis(IDLE_AFTER))
            .arg(limits.max_per_key)
            .arg(limits.max_per_tenant)
            .arg(limits.max_total)
            .arg(p);
        let inv = &inv;
        let (cap, victim, owner): (String, String, String) = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        let cap = match cap.as_str() {
            "" => None,
            "key" => Some(SessionLimit::PerKey),
            "tenant" => Some(SessionLimit::PerTenant),
            _ => Some(SessionLimit::ServerWide),
        };
        match (cap, victim.is_empty()) {
            (None, _) => Ok(None),
            (Some(cap), true) => Err(SessionError::Full(cap)),
            (Some(cap), false) => {
                self.outbox.post(
                    None,
                    Note::End {
                        session: victim.clone(),
                    },
                );
                Ok(Some(Evicted {
                    id: victim.into(),
                    owner: owner.into(),
                    cap,
                }))
            }
        }
    }

    /// The record of session `id`, whoever owns it.
    pub async fn find(&self, id: &str) -> Result<Option<SessionRecord>, SessionError> {
        let key = &self.record_key(id);
        let fields: std::collections::HashMap<String, String> = self
            .run(|mut c| async move {
                redis::cmd("HGETALL")
                    .arg(key)
                    .query_async::<std::collections::HashMap<String, String>>(&mut c)
                    .await
            })
            .await?;
        let get = |k: &str| fields.get(k).map(|v| Arc::<str>::from(v.as_str()));
        let (Some(owner), Some(tenant), Some(holder)) =
            (get("owner"), get("tenant"), get("holder"))
        else {
            return Ok(None);
        };
        let kind = match fields.get("kind").map(String::as_str) {
            Some("legacy") => SessionKind::LegacySse,
            _ => SessionKind::Streamable,
        };
        let protocol = fields
            .get("protocol")
            .and_then(|v| ProtocolVersion::parse(v))
            .unwrap_or(ProtocolVersion::HEADER_DEFAULT);
        Ok(Some(SessionRecord {
            id: id.into(),
            owner,
            tenant,
            kind,
            protocol,
            binding: get("binding"),
            holder,
            stream: get("stream"),
            extensions: fields
                .get("extensions")
                .map_or_else(Extensions::default, |v| Extensions::from_record(v)),
        }))
    }

    /// Ends session `id` everywhere: its record goes, and every copy ends.
    pub async fn close(&self, id: &str) -> Result<(), SessionError> {
        let mut inv = self.close.prepare_invoke();
        inv.arg(&self.prefix).arg(id);
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
            .await?;
        self.outbox.post(
            None,
            Note::End {
                session: id.to_owned(),
            },
        );
        Ok(())
    }

    /// Records the extensions session `id`'s `initialize` negotiated, for any instance that
    /// adopts it. A session whose record has expired is left alone (no record is made).
    pub async fn set_extensions(
        &self,
        id: &str,
        extensions: &Extensions,
    ) -> Result<(), SessionError> {
        let script = Script::new(SET_EXTENSIONS);
        let mut inv = script.prepare_invoke();
        inv.key(self.record_key(id)).arg(extensions.to_record());
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
            .await?;
        Ok(())
    }

    /// Records that this instance now holds session `id`'s stream, and tells the others.
    pub async fn hold_stream(&self, id: &str) -> Result<(), SessionError> {
        let (key, me) = (&self.record_key(id), &*self.instance);
        self.run(|mut c| async move {
            redis::cmd("HSET")
                .arg(key)
                .arg("stream")
                .arg(me)
                .query_async::<i64>(&mut c)
                .await
        })
        .await?;
        self.outbox.post(
            None,
            Note::Stream {
                session: id.to_owned(),
                at: self.instance.to_string(),
            },
        );
        Ok(())
    }

    /// Records `sessions`' activity and keeps their records alive.
    pub async fn refresh(&self, sessions: &[Activity], ttl: Duration) -> Result<(), SessionError> {
        for chunk in sessions.chunks(300) {
            let mut inv = self.refresh.prepare_invoke();
            inv.arg(&self.prefix).arg(millis(ttl));
            for s in chunk {
                inv.arg(&*s.id)
                    .arg(&*s.owner)
                    .arg(&*s.tenant)
                    .arg(millis(s.idle_for));
            }
            let inv = &inv;
            self.run(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
                .await?;
        }
        Ok(())
    }

    /// Whether Redis lost every record since this instance last looked (the generation
    /// changed or vanished; the cluster is then marked as recovering); false the first time.
    pub(crate) async fn records_were_lost(&self) -> Result<bool, SessionError> {
        let seen = self
            .seen_generation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let fresh = uuid::Uuid::new_v4().simple().to_string();
        let mut inv = self.generation.prepare_invoke();
        inv.key(self.generation_keys())
            .arg(&fresh)
            .arg(seen.as_deref().unwrap_or(""))
            .arg(millis(RECOVERY_GRACE));
        let inv = &inv;
        let now: String = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        let lost = seen.is_some_and(|s| s != now);
        *self
            .seen_generation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(now);
        Ok(lost)
    }

    /// Whether a session Redis does not know may still be recorded again by the instance that
    /// holds it (see [`RECOVERING`]).
    pub(crate) async fn recovering(&self) -> Result<bool, SessionError> {
        let mut inv = self.recovering.prepare_invoke();
        inv.key(self.generation_keys());
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await
    }

    fn generation_keys(&self) -> Vec<String> {
        vec![
            format!("{}generation", self.prefix),
            format!("{}recovering", self.prefix),
        ]
    }

    /// Records this instance's own sessions again, after a resubscription: Redis may have
    /// restarted empty (and when it did, the copies it adopted too: see the module docs).
    pub async fn restore(
        &self,
        records: &[SessionRecord],
        ttl: Duration,
    ) -> Result<(), SessionError> {
        for chunk in records.chunks(100) {
            let mut inv = self.restore.prepare_invoke();
            inv.arg(&self.prefix).arg(millis(ttl));
            for r in chunk {
                inv.arg(&*r.id)
                    .arg(&*r.owner)
                    .arg(&*r.tenant)
                    .arg(kind_str(r.kind))
                    .arg(r.protocol.as_str())
                    .arg(r.binding.as_deref().unwrap_or(""))
                    .arg(&*r.holder)
                    .arg(r.stream.as_deref().unwrap_or(""))
                    .arg(r.extensions.to_record());
            }
            let inv = &inv;
            self.run(|mut c| async move { inv.invoke_async::<i64>(&mut c).await })
                .await?;
        }
        Ok(())
    }

    /// Publishes the outbox in order until `stop`. A note Redis cannot take (see
    /// [`SessionCluster::run`]) is dropped with a log line: what waited for it ends by its own
    /// timeout or the client's.
    pub(crate) fn spawn_publisher(self: &Arc<Self>, stop: CancellationToken) {
        let Some(mut rx) = self
            .outbox_rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let cluster = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let (to, note) = tokio::select! {
                    () = stop.cancelled() => break,
                    n = rx.recv() => match n { Some(n) => n, None => break },
                };
                let channel = cluster.channel(to.as_deref());
                let payload = match serde_json::to_string(&note) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!(error = %e, "could not encode a cluster note");
                        continue;
                    }
                };
                let (ch, body) = (&channel, &payload);
                let sent = cluster
                    .run(|mut c| async move {
                        redis::cmd("PUBLISH")
                            .arg(ch)
                            .arg(body)
                            .query_async::<i64>(&mut c)
                            .await
                    })
                    .await;
                match sent {
                    Ok(_) => {
                        cluster.counters.sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => tracing::warn!(error = %e, channel, "a cluster note was lost"),
                }
            }
        });
    }

    /// Follows this instance's channel and the broadcast one until `stop`, resubscribing after
    /// a failure (and then saying [`Heard::Resync`]).
    pub(crate) fn subscribe(self: &Arc<Self>, stop: CancellationToken) -> mpsc::Receiver<Heard> {
        let (tx, rx) = mpsc::channel(1024);
        let cluster = Arc::clone(self);
        tokio::spawn(async move {
            let mut first = true;
            while !stop.is_cancelled() {
                // Asked each time: with Sentinel, the primary may have changed.
                let pubsub = match cluster.redis.client().await {
                    Ok(client) => client.get_async_pubsub().await.map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                };
                let mut pubsub = match pubsub {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot subscribe to the session cluster; retrying");
                        tokio::select! {
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep(Duration::from_millis(500)) => continue,
                        }
                    }
                };
                let channels = [
                    cluster.channel(Some(&cluster.instance)),
                    cluster.channel(None),
                ];
                if let Err(e) = pubsub.subscribe(&channels).await {
                    tracing::warn!(error = %e, "cannot subscribe to the session cluster; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                if first {
                    // The generation the records start from, so a later loss shows.
                    if let Err(e) = cluster.records_were_lost().await {
                        tracing::warn!(error = %e, "cannot read the session cluster's generation");
                    }
                } else if tx.send(Heard::Resync).await.is_err() {
                    return;
                }
                first = false;
                cluster.subscribed.send_replace(true);
                let mut messages = pubsub.into_on_message();
                loop {
                    let msg = tokio::select! {
                        () = stop.cancelled() => return,
                        m = messages.next() => m,
                    };
                    let Some(msg) = msg else { break };
                    cluster.counters.received.fetch_add(1, Ordering::Relaxed);
                    match serde_json::from_slice::<Note>(msg.get_payload_bytes()) {
                        Ok(note) => {
                            if tx.send(Heard::Note(note)).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "an unreadable cluster note"),
                    }
                }
                cluster.subscribed.send_replace(false);
                tracing::warn!("lost the session cluster's subscription; resubscribing");
            }
        });
        rx
    }
}

fn kind_str(kind: SessionKind) -> &'static str {
    match kind {
        SessionKind::Streamable => "streamable",
        SessionKind::LegacySse => "legacy",
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
