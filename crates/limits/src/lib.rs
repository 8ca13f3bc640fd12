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

/// The key a per-address limit counts a client under: an IPv4 address as it is, an IPv6
/// address by its /64 (the smallest block one subscriber is given: counting each /128 would let
/// a client rotate through its 2^64 addresses), `unknown` without one (a test's router).
pub fn address_key(addr: Option<std::net::IpAddr>) -> String {
    use std::net::IpAddr;
    match addr.map(|a| a.to_canonical()) {
        None => "unknown".to_owned(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

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

#[cfg(test)]
mod address_tests {
    use super::address_key;

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let key = |a: &str| address_key(Some(a.parse().unwrap()));
        assert_eq!(key("203.0.113.7"), "203.0.113.7");
        assert_eq!(
            key("::ffff:203.0.113.7"),
            "203.0.113.7",
            "mapped IPv4 is IPv4"
        );
        assert_eq!(key("2001:db8:1:2::1"), "2001:db8:1:2::/64");
        assert_eq!(
            key("2001:db8:1:2:ffff:ffff:ffff:ffff"),
            key("2001:db8:1:2::1")
        );
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
        assert_eq!(address_key(None), "unknown");
    }
}
