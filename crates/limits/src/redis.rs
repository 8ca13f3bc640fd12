//! The Redis limiter: an exact sliding window, shared by every instance.
//!
//! Each decision is one Lua script run atomically in Redis: drop the entries older than the
//! window, count, and add this request only when under the limit. Time is Redis's own clock
//! (`TIME`), so instances with skewed clocks agree. Any failure of the [`RedisConnection`] or a
//! reply slower than its timeout is [`LimiterError::Unavailable`], and the caller fails closed
//! or open.

use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use redis::Script;

use crate::{LimiterError, RateDecision, RateLimiter, RedisConnection};

const SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  if ARGV[4] == 'peek' then
    return {1, 0, limit - count}
  end
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, 0, limit - count - 1}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local retry = tonumber(oldest[2]) + window - now
if retry < 0 then retry = 0 end
return {0, retry, 0}
";

/// Sliding windows in Redis.
pub struct RedisLimiter {
    redis: RedisConnection,
    script: Script,
    prefix: String,
}

impl RedisLimiter {
    /// A limiter on the Redis at `url` (`redis://host:port/db`). Does not connect yet; an
    /// invalid URL is an error now.
    pub fn new(url: &str, prefix: &str) -> Result<Self, LimiterError> {
        Ok(Self {
            redis: RedisConnection::open(url, Duration::from_millis(500))
                .map_err(LimiterError::Unavailable)?,
            script: Script::new(SCRIPT),
            prefix: prefix.to_owned(),
        })
    }

    async fn decide(
        &self,
        key: &str,
        limit: u32,
        window: Duration,
        count: bool,
    ) -> Result<RateDecision, LimiterError> {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
        let member = uuid::Uuid::now_v7().to_string();
        let mut invocation = self.script.key(format!("{}{key}", self.prefix));
        invocation
            .arg(window_ms)
            .arg(limit)
            .arg(member)
            .arg(if count { "count" } else { "peek" });
        let invocation = &invocation;
        let (allowed, retry_ms, remaining): (i64, i64, i64) = self
            .redis
            .run(|mut c| async move { invocation.invoke_async(&mut c).await })
            .await
            .map_err(LimiterError::Unavailable)?;
        Ok(RateDecision {
            allowed: allowed == 1,
            retry_after: Duration::from_millis(u64::try_from(retry_ms).unwrap_or(0)),
            remaining: u32::try_from(remaining).unwrap_or(0),
        })
    }
}

impl RateLimiter for RedisLimiter {
    fn check<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        self.decide(key, limit, window, true).boxed()
    }

    fn peek<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        self.decide(key, limit, window, false).boxed()
    }

    fn reset<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), LimiterError>> {
        let key = format!("{}{key}", self.prefix);
        async move {
            let key = &key;
            self.redis
                .run(|mut c| async move {
                    redis::cmd("DEL").arg(key).query_async::<i64>(&mut c).await
                })
                .await
                .map(|_| ())
                .map_err(LimiterError::Unavailable)
        }
        .boxed()
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis_url() -> String {
        #[allow(clippy::disallowed_methods)] // test-harness setting
        std::env::var("BREEZE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
    }

    #[tokio::test]
    async fn exact_window_in_redis() {
        let prefix = format!("breeze-test:{}:", uuid::Uuid::now_v7());
        let l = RedisLimiter::new(&redis_url(), &prefix).unwrap();
        let w = Duration::from_secs(60);
        for i in 0..3u32 {
            let d = l
                .check("k", 3, w)
                .await
                .expect("Redis at BREEZE_TEST_REDIS_URL (default 127.0.0.1:6379)");
            assert!(d.allowed);
            assert_eq!(d.remaining, 2 - i);
        }
        let d = l.check("k", 3, w).await.unwrap();
        assert!(!d.allowed);
        assert!(
            d.retry_after > Duration::from_secs(58) && d.retry_after <= w,
            "{:?}",
            d.retry_after
        );
        assert!(l.check("other", 3, w).await.unwrap().allowed);
        // A peek counts nothing; a reset forgets the key.
        assert!(!l.peek("k", 3, w).await.unwrap().allowed);
        assert!(l.peek("p", 1, w).await.unwrap().allowed);
        assert!(l.check("p", 1, w).await.unwrap().allowed);
        assert!(!l.peek("p", 1, w).await.unwrap().allowed);
        l.reset("p").await.unwrap();
        assert!(l.check("p", 1, w).await.unwrap().allowed);
        // Windows slide: with a short window the first request leaves it.
        let short = Duration::from_millis(300);
        assert!(l.check("s", 1, short).await.unwrap().allowed);
        assert!(!l.check("s", 1, short).await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert!(l.check("s", 1, short).await.unwrap().allowed);
    }

    #[tokio::test]
    async fn two_instances_share_windows() {
        let prefix = format!("breeze-test:{}:", uuid::Uuid::now_v7());
        let a = RedisLimiter::new(&redis_url(), &prefix).unwrap();
        let b = RedisLimiter::new(&redis_url(), &prefix).unwrap();
        let w = Duration::from_secs(60);
        assert!(a.check("k", 2, w).await.unwrap().allowed);
        assert!(b.check("k", 2, w).await.unwrap().allowed);
        assert!(!a.check("k", 2, w).await.unwrap().allowed);
        assert!(!b.check("k", 2, w).await.unwrap().allowed);
    }

    #[tokio::test]
    async fn an_unreachable_redis_is_unavailable_not_allowed() {
        let l = RedisLimiter::new("redis://127.0.0.1:1", "x:").unwrap();
        let err = l.check("k", 1, Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(err, LimiterError::Unavailable(_)));
        assert!(RedisLimiter::new("not a url", "x:").is_err());
    }
}
