//! The principal cache: recently authenticated API keys, so that a request for a key seen a
//! moment ago needs no database round trip.
//!
//! Invariants:
//!
//! - **Keyed by the SHA-256 of the presented key**, never by the plaintext. An entry holds
//!   what builds a [`Caller`], the stored hash (still compared in constant time on
//!   every hit), `expires_at` and `last_used_at`, the store's credentials generation it was
//!   read at and the instant (from the injected clock) it was read.
//! - **A change made in this process is seen by the very next request.** An entry is served
//!   only while its generation equals [`Store::credentials_generation`], which every store
//!   method that changes what a key authenticates as moves on after committing. The caller
//!   reads the generation *before* the database, so a change that commits while the query runs
//!   leaves the entry with an old generation, never served.
//! - **A change made by another process is seen within the ttl**
//!   ([`AuthSettings::cache_ttl`], 1 s by default; zero turns the cache off). Such a change
//!   (the `breeze keys revoke` CLI on the same SQLite file, another instance on PostgreSQL)
//!   does not move this process's generation, so an entry is served only while
//!   `0 <= now - read_at < ttl`. A clock that went backwards makes the age negative: the entry
//!   is not served, so a clock step cannot stretch the ttl. That process does not answer
//!   before then: a change that takes access away waits out the ttl after its commit
//!   ([`StoreOptions::credential_fence`]), so when it returns no cache serves the old key.
//! - **Expiry is honoured from the cache**: the caller checks the record's `is_active(now)` on
//!   every hit (the one rule, [`ApiKeyRecord::is_active`]).
//! - **Only keys that authenticated are cached.** Unknown, revoked or expired keys never are,
//!   so a spray of random keys cannot fill memory; a stale or inactive entry is dropped when
//!   met.
//! - **Bounded**: at [`CAPACITY`] entries, inserting a new key drops every entry (the simplest
//!   bound; each dropped key costs one database read, as without a cache). Filling it takes
//!   that many *valid* keys within one ttl.
//! - **The lock is held for the map operation only**, never across an `.await`. An entry is
//!   self-contained (its generation and read instant travel with it), so re-inserting an
//!   entry read earlier can only make it expire sooner, never revive it.
//!
//! [`Caller`]: breeze_core::Caller
//! [`Store::credentials_generation`]: breeze_store::Store::credentials_generation
//! [`AuthSettings::cache_ttl`]: crate::AuthSettings::cache_ttl
//! [`StoreOptions::credential_fence`]: breeze_store::StoreOptions::credential_fence

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use breeze_core::{Caller, PermissionSet, Timestamp};
use breeze_store::ApiKeyRecord;
use chrono::Duration;
use subtle::ConstantTimeEq;

/// Most entries the cache holds; inserting one more key clears it.
/// How long after it was read a cached key may still be served while the store cannot be read
/// ([`CallerCache::get_stale`]).
pub(crate) const STALE_IF_ERROR: Duration = Duration::minutes(5);

pub(crate) const CAPACITY: usize = 10_000;

/// An API key as read from the database, with when and at which generation it was read.
#[derive(Clone)]
pub(crate) struct CachedKey {
    /// The stored key; its hash is compared in constant time with the presented key's, and
    /// its activity checked, on every use.
    pub(crate) record: ApiKeyRecord,
    permissions: Option<PermissionSet>,
    /// The store's credentials generation read before the database was asked.
    generation: u64,
    /// The clock's time when it was read.
    read_at: Timestamp,
}

impl CachedKey {
    /// A key just read from the database; `generation` and `read_at` were taken before the
    /// query.
    pub(crate) fn read(
        record: ApiKeyRecord,
        permissions: Option<PermissionSet>,
        generation: u64,
        read_at: Timestamp,
    ) -> Self {
        Self {
            record,
            permissions,
            generation,
            read_at,
        }
    }

    /// Whether the stored hash equals `presented`, in constant time.
    pub(crate) fn matches(&self, presented: &[u8; 32]) -> bool {
        bool::from(self.record.key_hash.as_slice().ct_eq(&presented[..]))
    }

    /// The caller this key authenticates as.
    pub(crate) fn caller(&self) -> Caller {
        let r = &self.record;
        Caller::api_key(r.id, r.org_id, r.user_id, r.scopes, self.permissions)
    }

    /// Whether this entry may be served at `now` when the store is at `generation`.
    fn fresh(&self, generation: u64, now: Timestamp, ttl: Duration) -> bool {
        let age = now - self.read_at;
        self.generation == generation && age >= Duration::zero() && age < ttl
    }
}

/// Recently authenticated keys by the SHA-256 of the presented key. Shared by clones of the
/// [`AuthService`](crate::AuthService) through an `Arc`. Entries are shared too, so a hit
/// copies a pointer rather than the key's record (its strings and scopes).
pub(crate) struct CallerCache {
    ttl: Duration,
    entries: Mutex<HashMap<[u8; 32], Arc<CachedKey>>>,
}

impl CallerCache {
    /// A cache serving entries for `ttl`; zero or less turns it off.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn enabled(&self) -> bool {
        self.ttl > Duration::zero()
    }

    /// The map, for one operation. Every entry is self-contained, so a panic elsewhere while
    /// the lock was held cannot leave one that is wrongly served.
    fn map(&self) -> MutexGuard<'_, HashMap<[u8; 32], Arc<CachedKey>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry for `hash` if it may be served at `now` with the store at `generation`. An
    /// entry of an older generation is dropped; one past its ttl stays until replaced, for
    /// [`CallerCache::get_stale`].
    pub(crate) fn get(
        &self,
        hash: &[u8; 32],
        generation: u64,
        now: Timestamp,
    ) -> Option<Arc<CachedKey>> {
        if !self.enabled() {
            return None;
        }
        let mut map = self.map();
        let entry = map.get(hash)?;
        if entry.generation != generation {
            map.remove(hash);
            return None;
        }
        entry
            .fresh(generation, now, self.ttl)
            .then(|| entry.clone())
    }

    /// The entry for `hash` past its ttl but read less than [`STALE_IF_ERROR`] ago, with no
    /// credential change through this store since: what a request is served from while the
    /// store cannot be read at all (a database outage), so reads answered from memory keep
    /// working. Nothing that writes can succeed then anyway.
    pub(crate) fn get_stale(
        &self,
        hash: &[u8; 32],
        generation: u64,
        now: Timestamp,
    ) -> Option<Arc<CachedKey>> {
        if !self.enabled() {
            return None;
        }
        let map = self.map();
        let entry = map.get(hash)?;
        entry
            .fresh(generation, now, STALE_IF_ERROR)
            .then(|| entry.clone())
    }

    /// Remembers `entry`, a key that just authenticated, under `hash`. At [`CAPACITY`] a new
    /// key clears the cache first.
    pub(crate) fn insert(&self, hash: [u8; 32], entry: Arc<CachedKey>) {
        if !self.enabled() {
            return;
        }
        let mut map = self.map();
        if map.len() >= CAPACITY && !map.contains_key(&hash) {
            map.clear();
        }
        map.insert(hash, entry);
    }

    /// Forgets `hash` (its key was refused).
    pub(crate) fn remove(&self, hash: &[u8; 32]) {
        if self.enabled() {
            self.map().remove(hash);
        }
    }

    /// How many entries there are.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use breeze_core::{ApiKeyId, OrgId, ScopeSet, UserId};
    use chrono::{TimeZone, Utc};

    use super::*;

    fn t0() -> Timestamp {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
    }

    fn entry(generation: u64, read_at: Timestamp) -> Arc<CachedKey> {
        let record = ApiKeyRecord {
            id: ApiKeyId::new(),
            org_id: OrgId::new(),
            user_id: UserId::new(),
            name: "k".into(),
            key_hash: vec![1; 32],
            key_prefix: "brz_AAAA".into(),
            scopes: ScopeSet::parse_list("ai:read").unwrap(),
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
            created_at: t0(),
        };
        Arc::new(CachedKey::read(record, None, generation, read_at))
    }

    #[test]
    fn entries_are_served_within_the_ttl_at_their_generation_only() {
        let cache = CallerCache::new(Duration::seconds(1));
        cache.insert([1; 32], entry(3, t0()));
        assert!(cache.get(&[1; 32], 3, t0()).is_some());
        assert!(
            cache
                .get(&[1; 32], 3, t0() + Duration::milliseconds(999))
                .is_some()
        );
        assert!(cache.get(&[2; 32], 3, t0()).is_none(), "another key");
        assert!(cache.get(&[1; 32], 4, t0()).is_none(), "another generation");
        assert_eq!(
            cache.len(),
            0,
            "an entry of an older generation is dropped when met"
        );

        cache.insert([1; 32], entry(3, t0()));
        let later = t0() + Duration::seconds(1);
        assert!(cache.get(&[1; 32], 3, later).is_none());
        // While the store cannot be read, the entry past its ttl still serves for a while, but
        // never across a credential change.
        assert!(cache.get_stale(&[1; 32], 3, later).is_some());
        assert!(
            cache
                .get_stale(&[1; 32], 3, t0() + STALE_IF_ERROR)
                .is_none()
        );
        assert!(cache.get_stale(&[1; 32], 4, later).is_none());
        cache.insert([1; 32], entry(3, t0()));
        assert!(
            cache
                .get(&[1; 32], 3, t0() - Duration::seconds(1))
                .is_none(),
            "a clock that went backwards does not stretch the ttl"
        );
    }

    #[test]
    fn a_zero_ttl_caches_nothing() {
        let cache = CallerCache::new(Duration::zero());
        cache.insert([1; 32], entry(0, t0()));
        assert_eq!(cache.len(), 0);
        assert!(cache.get(&[1; 32], 0, t0()).is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = CallerCache::new(Duration::seconds(1));
        for i in 0..CAPACITY {
            let mut hash = [0u8; 32];
            hash[..8].copy_from_slice(&(i as u64).to_le_bytes());
            cache.insert(hash, entry(0, t0()));
        }
        assert_eq!(cache.len(), CAPACITY);
        // Refreshing a present key keeps everything; a new one clears the rest.
        cache.insert([0; 32], entry(0, t0()));
        assert_eq!(cache.len(), CAPACITY);
        cache.insert([0xff; 32], entry(0, t0()));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_stored_hash_is_what_matches() {
        let e = entry(0, t0());
        assert!(e.matches(&[1; 32]) && !e.matches(&[2; 32]));
    }
}
