//! Rate limiting with a sliding window: a request is allowed when fewer than `limit` requests
//! were allowed for the same key in the last `window` (exactly in Redis; in memory, a request
//! stays counted up to 1 ms longer, see [`MemoryLimiter`]).
//!
//! [`RateLimiter`] is the seam; [`MemoryLimiter`] keeps windows in this process and
//! [`RedisLimiter`] shares them between instances, over a [`RedisConnection`] (which the MCP
//! engine's session cluster uses too). A backend that can fail (Redis) reports [`LimiterError::Unavailable`] and the caller decides whether
//! to fail open or closed.

mod connection;
mod memory;
mod redis;

use std::time::Duration;

use futures::future::BoxFuture;

pub use connection::RedisConnection;
pub use memory::MemoryLimiter;
pub use redis::RedisLimiter;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    /// When refused: how long until the oldest counted request leaves the window.
    pub retry_after: Duration,
    /// Requests still allowed in the current window after this one.
    pub remaining: u32,
}

impl RateDecision {
    /// `retry_after` in whole seconds, rounded up and at least 1, for a `Retry-After` header.
    pub fn retry_after_secs(&self) -> u64 {
        let ms = u64::try_from(self.retry_after.as_millis()).unwrap_or(u64::MAX);
        ms.div_ceil(1000).max(1)
    }
}

/// A limiter backend could not decide.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LimiterError {
    #[error("rate limiter unavailable: {0}")]
    Unavailable(String),
}

/// Sliding-window limiting by key.
pub trait RateLimiter: Send + Sync + 'static {
    /// Counts one request for `key` and says whether it is within `limit` per `window`.
    /// A refused request is not counted.
    fn check<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>>;

    /// The decision `check` would make for `key` now, without counting anything: for limits
    /// that count only some outcomes (sign-in failures), checked before the work. The default
    /// allows everything, for test doubles; the real backends override it.
    fn peek<'a>(
        &'a self,
        _key: &'a str,
        limit: u32,
        _window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        Box::pin(async move {
            Ok(RateDecision {
                allowed: true,
                retry_after: Duration::ZERO,
                remaining: limit,
            })
        })
    }

    /// Forgets what was counted for `key` (a successful sign-in clears its failures). The
    /// default forgets nothing, for test doubles; the real backends override it.
    fn reset<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<(), LimiterError>> {
        Box::pin(async { Ok(()) })
    }

    /// A short name for logs ("memory", "redis").
    fn backend(&self) -> &'static str;
}
