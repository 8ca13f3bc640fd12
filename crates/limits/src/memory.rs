//! The in-process limiter: per key, the requests allowed within the window, counted per
//! millisecond.

use std::{
    collections::{HashMap, VecDeque},
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use futures::future::{BoxFuture, FutureExt};

use crate::{LimiterError, RateDecision, RateLimiter};

const SHARDS: usize = 16;
/// Requests allowed within this long of the first in a key's newest entry share that entry.
const GRAIN: Duration = Duration::from_millis(1);

type Now = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Sliding windows kept in memory, sharded to keep lock contention low.
///
/// A key's window holds one entry per millisecond in which requests were allowed: the
/// count, stamped with the newest of them. So memory per key is bounded by the window's length
/// (at most 60,000 entries for a minute) as well as by the limit, however high the limit is
/// set (a limit of a billion a minute, as benchmarks set, would otherwise keep a timestamp per
/// request: ~45 MB a minute at 50,000 requests a second). An entry leaves the window when its
/// newest request does, up to 1 ms after its oldest would have: the limiter errs on the strict
/// side, and never allows more than `limit` requests in any window. Keys whose window has
/// emptied are dropped as shards are visited.
pub struct MemoryLimiter {
    shards: Vec<Mutex<HashMap<String, Window>>>,
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

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, Window>> {
        &self.shards[usize::try_from(self.hasher.hash_one(key)).unwrap_or(0) % SHARDS]
    }

    /// The decision, synchronously.
    pub fn check_now(&self, key: &str, limit: u32, window: Duration) -> RateDecision {
        self.decide(key, limit, window, true)
    }

    /// The decision, counting the request when `count` and it is allowed.
    fn decide(&self, key: &str, limit: u32, window: Duration, count: bool) -> RateDecision {
        let now = (self.now)();
        let mut map = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Opportunistic clean-up keeps idle keys from piling up.
        if map.len() > 1024 {
            map.retain(|_, w| w.newest().is_some_and(|t| now.duration_since(t) < window));
        }
        let w = map.entry(key.to_owned()).or_default();
        w.expire(now, window);
        if w.count < limit {
            if count {
                w.add(now);
            }
            RateDecision {
                allowed: true,
                retry_after: Duration::ZERO,
                remaining: limit - w.count - u32::from(!count),
            }
        } else {
            let oldest = w.entries.front().map_or(now, |e| e.newest);
            let retry_after = window.saturating_sub(now.duration_since(oldest));
            RateDecision {
                allowed: false,
                retry_after,
                remaining: 0,
            }
        }
    }

    #[cfg(test)]
    fn entries(&self, key: &str) -> usize {
        let map = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(key).map_or(0, |w| w.entries.len())
    }
}

/// One key's allowed requests within the window, oldest first, and their total.
#[derive(Default)]
struct Window {
    entries: VecDeque<Entry>,
    count: u32,
}

/// The requests allowed within one [`GRAIN`] from `first`.
struct Entry {
    first: Instant,
    newest: Instant,
    requests: u32,
}

impl Window {
    fn newest(&self) -> Option<Instant> {
        self.entries.back().map(|e| e.newest)
    }

    /// Drops the entries whose newest request has left the window ending at `now`.
    fn expire(&mut self, now: Instant, window: Duration) {
        while let Some(e) = self.entries.front() {
            if now.duration_since(e.newest) < window {
                break;
            }
            self.count -= e.requests;
            self.entries.pop_front();
        }
    }

    /// Counts a request allowed at `now`, in the newest entry when that began less than
    /// [`GRAIN`] ago.
    fn add(&mut self, now: Instant) {
        self.count += 1;
        if let Some(e) = self.entries.back_mut()
            && now.duration_since(e.first) < GRAIN
        {
            e.newest = now;
            e.requests += 1;
            return;
        }
        self.entries.push_back(Entry {
            first: now,
            newest: now,
            requests: 1,
        });
    }
}

impl RateLimiter for MemoryLimiter {
    fn check<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        let d = self.check_now(key, limit, window);
        async move { Ok(d) }.boxed()
    }

    fn peek<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        let d = self.decide(key, limit, window, false);
        async move { Ok(d) }.boxed()
    }

    fn reset<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), LimiterError>> {
        self.shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        async { Ok(()) }.boxed()
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
        // A peek counts nothing; a reset forgets the key.
        assert!(!l.decide("k", 3, w, false).allowed);
        assert!(l.check_now("p", 2, w).allowed);
        assert!(l.decide("p", 2, w, false).allowed);
        assert!(l.check_now("p", 2, w).allowed);
        assert!(!l.decide("p", 2, w, false).allowed);
        futures::executor::block_on(l.reset("p")).unwrap();
        assert!(l.decide("p", 2, w, false).allowed);
        // Other keys are independent.
        assert!(l.check_now("other", 3, w).allowed);
    }

    #[test]
    fn requests_within_a_millisecond_share_one_entry() {
        let (l, t) = limiter();
        let w = Duration::from_secs(60);
        // A million requests 100 ns apart (0.1 s): one entry per millisecond, not per request.
        for _ in 0..1_000_000 {
            assert!(l.check_now("k", u32::MAX, w).allowed);
            *t.lock().unwrap() += Duration::from_nanos(100);
        }
        assert_eq!(l.entries("k"), 100);
        // Each request is still counted.
        assert_eq!(
            l.check_now("k", u32::MAX, w).remaining,
            u32::MAX - 1_000_001
        );
    }

    #[test]
    fn a_shared_entry_leaves_the_window_with_its_newest_request() {
        let (l, t) = limiter();
        let w = Duration::from_millis(10);
        let start = *t.lock().unwrap();
        let at = |us: u64| *t.lock().unwrap() = start + Duration::from_micros(us);
        assert!(l.check_now("k", 2, w).allowed);
        at(500);
        assert!(l.check_now("k", 2, w).allowed);
        // At 10 ms the first request has left an exact window, the second not: still full.
        at(10_000);
        let d = l.check_now("k", 2, w);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Duration::from_micros(500));
        // Once the second has left too, both are gone.
        at(10_500);
        let d = l.check_now("k", 2, w);
        assert!(d.allowed);
        assert_eq!(d.remaining, 1);
    }

    #[test]
    fn no_window_ever_holds_more_than_the_limit() {
        let (l, t) = limiter();
        let w = Duration::from_millis(20);
        let limit = 7;
        let mut allowed: Vec<Instant> = Vec::new();
        // Requests at uneven steps of 0.1–0.9 ms for 200 ms.
        for i in 0..400u64 {
            let now = *t.lock().unwrap();
            if l.check_now("k", limit, w).allowed {
                allowed.push(now);
            }
            *t.lock().unwrap() += Duration::from_micros(100 + (i * 37) % 800);
        }
        for (i, &from) in allowed.iter().enumerate() {
            let within = allowed[i..].iter().filter(|&&x| x - from < w).count();
            assert!(
                within <= limit as usize,
                "{within} requests within {w:?} of {from:?}"
            );
        }
        // The window is not refusing everything either.
        assert!(allowed.len() > 50, "{}", allowed.len());
    }

    #[test]
    fn retry_after_rounds_up() {
        let d = RateDecision {
            allowed: false,
            retry_after: Duration::from_millis(1200),
            remaining: 0,
        };
        assert_eq!(d.retry_after_secs(), 2);
        let d = RateDecision {
            allowed: false,
            retry_after: Duration::ZERO,
            remaining: 0,
        };
        assert_eq!(d.retry_after_secs(), 1);
    }
}
