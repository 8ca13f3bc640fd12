//! One connection to Redis shared by every caller of an instance: made on first use, remade
//! after a failure, and every command bounded by a timeout. The rate limiter and the MCP
//! session cluster both talk to Redis through it.

use std::time::Duration;

use redis::{Client, aio::ConnectionManager};
use tokio::sync::Mutex;

/// A lazily made, self-repairing connection to one Redis.
pub struct RedisConnection {
    client: Client,
    conn: Mutex<Option<ConnectionManager>>,
    timeout: Duration,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// A connection to the Redis at `url` (`redis://host:port/db`), each command given
    /// `timeout`. Does not connect yet; an invalid URL is an error now, naming `REDIS_URL`.
    pub fn open(url: &str, timeout: Duration) -> Result<Self, String> {
        let client = Client::open(url).map_err(|e| format!("invalid REDIS_URL: {e}"))?;
        Ok(Self {
            client,
            conn: Mutex::new(None),
            timeout,
        })
    }

    /// The client, for connections of another kind (pub/sub).
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn connection(&self) -> Result<ConnectionManager, String> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = tokio::time::timeout(self.timeout, ConnectionManager::new(self.client.clone()))
            .await
            .map_err(|_| "Redis connection timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs `f` on the connection within the timeout. A connection that fails (Redis
    /// restarted) is dropped and `f` tried once more on a new one, so the first command after
    /// Redis comes back succeeds; a timeout is not retried. The error says what went wrong.
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
                    if attempt == 2 || !(e.is_io_error() || e.is_connection_dropped()) {
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
