//! One connection to Redis shared by every caller of an instance: made on first use, remade
//! after a failure, and every command bounded by a timeout. The rate limiter and the MCP
//! session cluster both talk to Redis through it.
//!
//! The Redis is either one address (`redis://host:port/db`) or the primary that Redis Sentinel
//! names for a service (`redis+sentinel://host:port,host:port/service/db`). With Sentinel the
//! primary is looked up again whenever a connection is made, so after a failover the next
//! command reaches the promoted replica: a connection that fails, or a write answered
//! `READONLY` by a primary that was demoted, is dropped and the command tried once more on a
//! connection to whatever the sentinels name now.

use std::time::Duration;

use redis::{
    Client, IntoConnectionInfo, RedisError,
    aio::ConnectionManager,
    sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType},
};
use tokio::sync::Mutex;

/// The scheme of a `REDIS_URL` that names Redis Sentinel nodes rather than a Redis.
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// A lazily made, self-repairing connection to one Redis.
pub struct RedisConnection {
    target: Target,
    conn: Mutex<Option<ConnectionManager>>,
    timeout: Duration,
}

/// Where the Redis is.
enum Target {
    Direct(Client),
    /// The primary the sentinels name for a service; looked up on every new connection.
    Sentinel(Mutex<SentinelClient>),
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("sentinel", &matches!(self.target, Target::Sentinel(_)))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// A connection to the Redis at `url` (`redis://host:port/db`, or
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]` for the primary
    /// Sentinel names, the credentials and database being the Redis servers'), each command
    /// given `timeout`. Does not connect yet; an invalid URL is an error now, naming `REDIS_URL`.
    pub fn open(url: &str, timeout: Duration) -> Result<Self, String> {
        let target = match url.strip_prefix(SENTINEL_SCHEME) {
            Some(rest) => Target::Sentinel(Mutex::new(sentinel_client(rest)?)),
            None => {
                Target::Direct(Client::open(url).map_err(|e| format!("invalid REDIS_URL: {e}"))?)
            }
        };
        Ok(Self {
            target,
            conn: Mutex::new(None),
            timeout,
        })
    }

    /// A client of the Redis to use now, for connections of another kind (pub/sub): with
    /// Sentinel, the primary the sentinels name at this moment.
    pub async fn client(&self) -> Result<Client, String> {
        match &self.target {
            Target::Direct(client) => Ok(client.clone()),
            Target::Sentinel(sentinel) => tokio::time::timeout(self.timeout, async {
                sentinel.lock().await.async_get_client().await
            })
            .await
            .map_err(|_| "Redis Sentinel did not name a primary in time".to_owned())?
            .map_err(|e| format!("Redis Sentinel named no reachable primary: {e}")),
        }
    }

    async fn connection(&self) -> Result<ConnectionManager, String> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let client = self.client().await?;
        let c = tokio::time::timeout(self.timeout, ConnectionManager::new(client))
            .await
            .map_err(|_| "Redis connection timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs `f` on the connection within the timeout. A connection that fails (Redis
    /// restarted, or a primary demoted by a failover) is dropped and `f` tried once more on a
    /// new one, so the first command after Redis comes back succeeds; a timeout is not
    /// retried. The error says what went wrong.
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T, String>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let conn = self.connection().await?;
            match tokio::time::timeout(self.timeout, f(conn)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => {
                    *self.conn.lock().await = None;
                    if attempt == 2 || !connection_lost(&e) {
                        return Err(e.to_string());
                    }
                }
                Err(_) => {
                    *self.conn.lock().await = None;
                    return Err("Redis did not answer in time".to_owned());
                }
            }
        }
    }
}

/// Whether `e` says the connection no longer reaches a usable primary: it dropped, or the
/// server it reaches is now a replica.
fn connection_lost(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.code() == Some("READONLY")
}

/// The sentinel client of a `redis+sentinel://` URL (`rest` is what follows the scheme).
fn sentinel_client(rest: &str) -> Result<SentinelClient, String> {
    let invalid = |why: &str| {
        format!(
            "invalid REDIS_URL: {why} (expected \
             {SENTINEL_SCHEME}[user:password@]host:port[,host:port…]/service[/db])"
        )
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let service = segments
        .next()
        .ok_or_else(|| invalid("no service name after the sentinels"))?;
    let db = segments.next();
    if segments.next().is_some() {
        return Err(invalid(
            "more than a service name and a database in the path",
        ));
    }
    let sentinels: Vec<String> = hosts
        .split(',')
        .map(|h| {
            if h.is_empty() || !h.contains(':') {
                Err(invalid(&format!("sentinel {h:?} is not host:port")))
            } else {
                Ok(format!("redis://{h}"))
            }
        })
        .collect::<Result<_, _>>()?;
    // The Redis servers' credentials and database, read as a plain Redis URL would be.
    let node = format!(
        "redis://{}localhost/{}",
        userinfo.map(|u| format!("{u}@")).unwrap_or_default(),
        db.unwrap_or("0")
    );
    let node = node
        .into_connection_info()
        .map_err(|e| invalid(&format!("credentials or database: {e}")))?;
    SentinelClient::build(
        sentinels,
        service.to_owned(),
        Some(
            SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(node.redis_settings().clone()),
        ),
        SentinelServerType::Master,
    )
    .map_err(|e| invalid(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(url: &str) -> String {
        RedisConnection::open(url, Duration::from_secs(1))
            .err()
            .unwrap_or_default()
    }

    #[test]
    fn sentinel_urls_are_read_or_refused_by_name() {
        for ok in [
            "redis+sentinel://127.0.0.1:26379/mymaster",
            "redis+sentinel://a:26379,b:26379,c:26379/mymaster/2",
            "redis+sentinel://:secret@a:26379/mymaster",
            "redis://127.0.0.1:6379/0",
        ] {
            assert_eq!(refusal(ok), "", "{ok}");
        }
        for (bad, says) in [
            ("redis+sentinel://a:26379", "no service name"),
            ("redis+sentinel://a:26379/", "no service name"),
            ("redis+sentinel://a/mymaster", "is not host:port"),
            ("redis+sentinel://a:1,,b:2/mymaster", "is not host:port"),
            (
                "redis+sentinel://a:1/mymaster/0/x",
                "more than a service name",
            ),
            (
                "redis+sentinel://a:1/mymaster/zero",
                "credentials or database",
            ),
        ] {
            let e = refusal(bad);
            assert!(e.starts_with("invalid REDIS_URL: "), "{bad}: {e}");
            assert!(e.contains(says), "{bad}: {e}");
            assert!(
                e.contains(SENTINEL_SCHEME),
                "{bad} names the expected form: {e}"
            );
        }
    }
}
