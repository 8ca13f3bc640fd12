//! The guard in front of client-metadata fetches: `GET /oauth/auth?client_id=https://…` makes
//! the server fetch a URL before anyone signs in, so who asks may not make it fetch at will.
//!
//! [`GuardedFetcher`] wraps the real fetcher: every outcome, a document or a refusal, is
//! remembered for [`CACHE_FOR`] in a map of at most [`CACHE_ENTRIES`] URLs (the oldest goes
//! first), and a fetch that is not remembered counts against a per-address limit (the address
//! of the request that asked, set around the call with [`asking_from`]) and a server-wide
//! one. A refused fetch says only that it was refused; what failed is logged, never echoed.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use breeze_limits::RateLimiter;
use breeze_oauth::{FetchFuture, FetchedDocument, MetadataFetcher};

/// How long an outcome, good or bad, is served without fetching again.
pub(crate) const CACHE_FOR: Duration = Duration::from_secs(300);
/// The most URLs remembered at once.
pub(crate) const CACHE_ENTRIES: usize = 1024;
/// Fetches per client address per minute (a person authorizes a client once or twice).
pub(crate) const FETCHES_PER_ADDRESS: u32 = 10;
/// Fetches per minute, server-wide.
pub(crate) const FETCHES_PER_SERVER: u32 = 60;

tokio::task_local! {
    static ASKING: Option<IpAddr>;
}

/// Runs `f` with fetches counted against `addr` (the request's client address).
pub(crate) async fn asking_from<F: Future>(addr: Option<IpAddr>, f: F) -> F::Output {
    ASKING.scope(addr, f).await
}

type Outcome = Result<FetchedDocument, String>;

/// A [`MetadataFetcher`] with a bounded cache of outcomes and rate limits on real fetches.
pub(crate) struct GuardedFetcher {
    inner: Arc<dyn MetadataFetcher>,
    limiter: Arc<dyn RateLimiter>,
    cache: Mutex<HashMap<String, (Instant, Outcome)>>,
}

impl GuardedFetcher {
    pub(crate) fn new(inner: Arc<dyn MetadataFetcher>, limiter: Arc<dyn RateLimiter>) -> Self {
        Self {
            inner,
            limiter,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn remembered(&self, url: &str) -> Option<Outcome> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache
            .get(url)
            .filter(|(at, _)| at.elapsed() < CACHE_FOR)
            .map(|(_, outcome)| outcome.clone())
    }

    fn remember(&self, url: &str, outcome: &Outcome) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_ENTRIES && !cache.contains_key(url) {
            cache.retain(|_, (at, _)| at.elapsed() < CACHE_FOR);
            if cache.len() >= CACHE_ENTRIES
                && let Some(oldest) = cache
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                cache.remove(&oldest);
            }
        }
        cache.insert(url.to_owned(), (Instant::now(), outcome.clone()));
    }

    /// Whether a real fetch may go out now for the asking address and the server.
    async fn allowed(&self) -> bool {
        let addr = breeze_limits::address_key(ASKING.try_with(|a| *a).ok().flatten());
        let minute = Duration::from_secs(60);
        for (key, limit) in [
            (format!("cimd-fetch:{addr}"), FETCHES_PER_ADDRESS),
            ("cimd-fetch:*".to_owned(), FETCHES_PER_SERVER),
        ] {
            match self.limiter.check(&key, limit, minute).await {
                Ok(d) if d.allowed => {}
                Ok(_) => {
                    tracing::warn!(%key, "client metadata fetch refused: rate limit");
                    return false;
                }
                // An unfetched document is only a refused authorization: fail closed.
                Err(e) => {
                    tracing::warn!(error = %e, "client metadata fetch limiter unavailable");
                    return false;
                }
            }
        }
        true
    }
}

impl MetadataFetcher for GuardedFetcher {
    fn fetch<'a>(&'a self, url: &'a url::Url) -> FetchFuture<'a> {
        Box::pin(async move {
            if let Some(outcome) = self.remembered(url.as_str()) {
                return outcome;
            }
            if !self.allowed().await {
                return Err("too many client metadata fetches; try again later".to_owned());
            }
            let outcome = self.inner.fetch(url).await;
            if let Err(e) = &outcome {
                tracing::info!(url = %url, error = %e, "client metadata document not fetched");
            }
            self.remember(url.as_str(), &outcome);
            outcome
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    struct Counting(AtomicU32);

    impl MetadataFetcher for Counting {
        fn fetch<'a>(&'a self, url: &'a url::Url) -> FetchFuture<'a> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let fails = url.path().contains("bad");
            Box::pin(async move {
                if fails {
                    Err("name resolution failed: secret detail".to_owned())
                } else {
                    Ok(FetchedDocument {
                        status: 200,
                        body: b"{}".to_vec(),
                        max_age: None,
                    })
                }
            })
        }
    }

    /// The attack: one address asks the server to fetch ever new URLs. Each outcome is
    /// fetched once and remembered (negative ones too), the address runs out after
    /// [`FETCHES_PER_ADDRESS`], the cache stays bounded, and others still get theirs.
    #[tokio::test]
    async fn fetches_are_cached_bounded_and_rate_limited() {
        let inner = Arc::new(Counting(AtomicU32::new(0)));
        let guard =
            GuardedFetcher::new(inner.clone(), Arc::new(breeze_limits::MemoryLimiter::new()));
        let attacker = Some("203.0.113.9".parse().unwrap());
        let url = |s: &str| url::Url::parse(&format!("https://h.example/{s}")).unwrap();
        for _ in 0..5 {
            asking_from(attacker, guard.fetch(&url("good")))
                .await
                .unwrap();
            asking_from(attacker, guard.fetch(&url("bad")))
                .await
                .unwrap_err();
        }
        assert_eq!(inner.0.load(Ordering::SeqCst), 2, "each fetched once");
        let mut refused = 0;
        for i in 0..20 {
            if let Err(e) = asking_from(attacker, guard.fetch(&url(&format!("n{i}")))).await {
                assert!(e.contains("too many"), "{e}");
                refused += 1;
            }
        }
        assert_eq!(refused, 20 - (FETCHES_PER_ADDRESS - 2));
        let other = Some("198.51.100.7".parse().unwrap());
        asking_from(other, guard.fetch(&url("other")))
            .await
            .unwrap();

        // Bounded: filling past the cap evicts the oldest.
        for i in 0..CACHE_ENTRIES + 10 {
            guard.remember(&format!("https://x/{i}"), &Err("x".into()));
        }
        assert_eq!(guard.cache.lock().unwrap().len(), CACHE_ENTRIES);
    }
}
