//! The in-process limiter: per key, the instants of the requests allowed within the window.

use std::{
    collections::{HashMap, VecDeque},
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use futures::future::{BoxFuture, FutureExt};

use crate::{Decision, LimiterError, RateLimiter};

const SHARDS: usize = 16;

type Now = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Exact sliding windows kept in memory, sharded to keep lock contention low. Memory per key is
/// at most `limit` instants; keys whose window has emptied are dropped as shards are visited.
pub struct MemoryLimiter {
    shards: Vec<Mutex<HashMap<String, VecDeque<Instant>>>>,
    hasher: RandomState,
    now: Now,
}

impl Default for MemoryLimiter {
    fn default() -> Self {
        Self::with_clock(Arc::new(Instant::now))
    }
}

impl MemoryLimiter {
    /// A limiter on the monotonic clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// A limiter reading time from `now` (tests move it).
    pub fn with_clock(now: Now) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            now,
        }
    }

    /// The decision, synchronously.
    pub fn check_now(&self, key: &str, limit: u32, window: Duration) -> Decision {
        let now = (self.now)();
        let shard = &self.shards[usize::try_from(self.hasher.hash_one(key)).unwrap_or(0) % SHARDS];
        let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
        // Opportunistic clean-up keeps idle keys from piling up.
        if map.len() > 1024 {
            map.retain(|_, q| q.back().is_some_and(|t| now.duration_since(*t) < window));
        }
        let q = map.entry(key.to_owned()).or_default();
        while q.front().is_some_and(|t| now.duration_since(*t) >= window) {
            q.pop_front();
        }
        let count = u32::try_from(q.len()).unwrap_or(u32::MAX);
        if count < limit {
            q.push_back(now);
            Decision {
                allowed: true,
                retry_after: Duration::ZERO,
                remaining: limit - count - 1,
            }
        } else {
            let oldest = q.front().copied().unwrap_or(now);
            let retry_after = window.saturating_sub(now.duration_since(oldest));
            Decision {
                allowed: false,
                retry_after,
                remaining: 0,
            }
        }
    }
}

impl RateLimiter for MemoryLimiter {
    fn check<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<Decision, LimiterError>> {
        let d = self.check_now(key, limit, window);
        async move { Ok(d) }.boxed()
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter() -> (MemoryLimiter, Arc<Mutex<Instant>>) {
        let t = Arc::new(Mutex::new(Instant::now()));
        let t2 = t.clone();
        (
            MemoryLimiter::with_clock(Arc::new(move || *t2.lock().unwrap())),
            t,
        )
    }

    #[test]
    fn the_window_slides_exactly() {
        let (l, t) = limiter();
        let w = Duration::from_secs(60);
        for i in 0..3 {
            let d = l.check_now("k", 3, w);
            assert!(d.allowed);
            assert_eq!(d.remaining, 2 - i);
            *t.lock().unwrap() += Duration::from_secs(10);
        }
        // At t=30s: three in the window (0, 10, 20).
        let d = l.check_now("k", 3, w);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Duration::from_secs(30));
        assert_eq!(d.retry_after_secs(), 30);
        // Refusals are not counted: at t=60s only the first request has left the window.
        *t.lock().unwrap() += Duration::from_secs(30);
        assert!(l.check_now("k", 3, w).allowed);
        assert!(!l.check_now("k", 3, w).allowed);
        // Other keys are independent.
        assert!(l.check_now("other", 3, w).allowed);
    }

    #[test]
    fn retry_after_rounds_up() {
        let d = Decision {
            allowed: false,
            retry_after: Duration::from_millis(1200),
            remaining: 0,
        };
        assert_eq!(d.retry_after_secs(), 2);
        let d = Decision {
            allowed: false,
            retry_after: Duration::ZERO,
            remaining: 0,
        };
        assert_eq!(d.retry_after_secs(), 1);
    }
}
