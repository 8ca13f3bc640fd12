//! Authentication: API keys, passwords and dashboard sessions.
//!
//! [`AuthService`] turns credentials into principals. It knows nothing of HTTP: the server
//! hands it the raw header or cookie value and maps [`AuthError`] to a response. Time comes
//! from the injected clock; randomness from the OS unless a caller passes its own.
//!
//! API keys that authenticated a moment ago are served from an in-process cache (see
//! the `cache` module): a change made through this process's store is seen by the next
//! request, one made by another process within [`AuthSettings::cache_ttl`] — which that
//! process waits out before its change returns.

pub mod api_key;
mod cache;
mod device;
pub mod password;

use std::sync::Arc;

use breeze_core::{
    Actor, ActorType, AuditEvent, AuditResult, Caller, Clock, OrgId, ScopeSet, Timestamp, User,
    UserId,
};
use breeze_store::{ApiKeyRecord, NewApiKey, Store, StoreError};
use cache::{CachedKey, CallerCache};
use chrono::Duration;
use rand::{CryptoRng, RngCore, rngs::OsRng};
use subtle::ConstantTimeEq;

pub use api_key::{API_KEY_PREFIX, ApiKeySecret};
pub use device::{
    CreateEnrollmentKey, DevicePrincipal, Enrollment, MAX_REENROLL_TOKEN_HOURS,
    REENROLL_TOKEN_HOURS,
};

/// Why a request was not authenticated, or a credential operation refused. The messages are
/// the ones clients see.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("Missing X-API-Key header")]
    MissingApiKey,
    /// Decided from the string alone, before any database query.
    #[error("Invalid API key format")]
    InvalidApiKeyFormat,
    /// Unknown, revoked or expired: deliberately not saying which.
    #[error("Invalid API key")]
    InvalidApiKey,
    #[error("Missing Authorization: Bearer device token")]
    MissingDeviceToken,
    /// Unknown, revoked or malformed: deliberately not saying which.
    #[error("Invalid device token")]
    InvalidDeviceToken,
    /// Unknown, expired, revoked or used up: deliberately not saying which.
    #[error("Invalid, expired or used-up enrollment key")]
    InvalidEnrollmentKey,
    /// Unknown, expired, spent or of another organization: deliberately not saying which.
    #[error("Invalid, expired or used re-enroll token")]
    InvalidReenrollToken,
    #[error("Invalid email or password")]
    InvalidCredentials,
    /// Too many sign-in attempts for this email from this address, or too many failures from
    /// this address; try again after the delay. Says the same whether the account exists.
    #[error("Too many sign-in attempts; try again in {} seconds", .retry_after.as_secs().max(1))]
    TooManyAttempts { retry_after: std::time::Duration },
    /// The attempt limiter could not decide and this deployment fails closed.
    #[error("Service temporarily unavailable")]
    Unavailable,
    #[error("Not signed in")]
    NotSignedIn,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Tunables of [`AuthService`].
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// An API key's `last_used_at` is written at most this often.
    pub last_used_interval: Duration,
    /// How long a dashboard session lasts.
    pub session_ttl: Duration,
    /// Sign-in attempts allowed per (email, client address) within
    /// [`AuthSettings::login_window`]; a successful sign-in clears them.
    pub login_attempts: u32,
    /// Failed sign-ins allowed per client address (whatever the emails) within the window:
    /// one address cannot spray passwords over many accounts.
    pub login_address_failures: u32,
    pub login_window: std::time::Duration,
    /// Refuse sign-ins when the attempt limiter cannot decide (production).
    pub fail_closed: bool,
    /// How long an authenticated API key is served from memory without asking the database:
    /// the longest a revocation or role change made by *another* process (the CLI, another
    /// instance) can go unseen. Changes made through this process's store are seen at once.
    /// Zero turns the cache off.
    pub cache_ttl: Duration,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            last_used_interval: Duration::seconds(60),
            session_ttl: Duration::hours(12),
            login_attempts: 10,
            login_address_failures: 30,
            login_window: std::time::Duration::from_secs(300),
            fail_closed: false,
            cache_ttl: Duration::seconds(1),
        }
    }
}

/// What a new API key should be.
#[derive(Debug, Clone)]
pub struct CreateApiKey {
    pub org_id: OrgId,
    /// The user the key acts as; must hold a role in `org_id`.
    pub user_id: UserId,
    pub name: String,
    pub scopes: ScopeSet,
    pub expires_at: Option<Timestamp>,
}

/// A fresh dashboard session: the cookie value (shown once) and when it expires.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub token: String,
    pub expires_at: Timestamp,
    pub user: User,
}

/// Authenticates principals and issues credentials.
#[derive(Clone)]
pub struct AuthService {
    store: Store,
    clock: Arc<dyn Clock>,
    settings: AuthSettings,
    limiter: Arc<dyn breeze_limits::RateLimiter>,
    /// Recently authenticated API keys; shared by clones.
    cache: Arc<CallerCache>,
}

impl AuthService {
    /// A service over `store`, reading time from `clock`.
    pub fn new(store: Store, clock: Arc<dyn Clock>, settings: AuthSettings) -> Self {
        let limiter = Arc::new(breeze_limits::MemoryLimiter::new());
        let cache = Arc::new(CallerCache::new(settings.cache_ttl));
        Self {
            store,
            clock,
            settings,
            limiter,
            cache,
        }
    }

    /// The same service counting sign-in attempts with `limiter` (shared through Redis when
    /// instances run side by side).
    #[must_use]
    pub fn with_limiter(mut self, limiter: Arc<dyn breeze_limits::RateLimiter>) -> Self {
        self.limiter = limiter;
        self
    }

    /// Authenticates the value of an `X-API-Key` header.
    ///
    /// A missing header and a malformed key are refused before the database is asked. The key's
    /// hash is looked up and compared in constant time; unknown, revoked and expired keys get
    /// the same error. `last_used_at` is written at most once per
    /// [`AuthSettings::last_used_interval`].
    ///
    /// A key that authenticated less than [`AuthSettings::cache_ttl`] ago, with no credential
    /// change through this store since, is served from memory (see the `cache` module);
    /// the hash comparison and the expiry check still run on every request.
    pub async fn authenticate_api_key(&self, header: Option<&str>) -> Result<Caller, AuthError> {
        let raw = header
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .ok_or(AuthError::MissingApiKey)?;
        if !api_key::is_well_formed(raw) {
            return Err(AuthError::InvalidApiKeyFormat);
        }
        let hash = api_key::hash(raw);
        let now = self.clock.now();
        // Read before the database: a change that commits while the query runs moves the
        // generation past the one the entry records, so that entry is never served.
        let generation = self.store.credentials_generation();
        let (mut key, from_cache) = match self.cache.get(&hash, generation, now) {
            Some(key) => (key, true),
            None => match self.store.find_api_key_by_hash(&hash).await {
                Ok(Some((record, permissions))) => (
                    Arc::new(CachedKey::read(record, permissions, generation, now)),
                    false,
                ),
                Ok(None) => return Err(AuthError::InvalidApiKey),
                // The database is unreachable: a key that authenticated within the grace
                // period keeps working for what can be answered without it.
                Err(e) => match self.cache.get_stale(&hash, generation, now) {
                    Some(key) => (key, true),
                    None => return Err(e.into()),
                },
            },
        };
        if !key.matches(&hash) || !key.record.is_active(now) {
            if from_cache {
                self.cache.remove(&hash);
            }
            return Err(AuthError::InvalidApiKey);
        }
        let due = key
            .record
            .last_used_at
            .is_none_or(|t| now - t >= self.settings.last_used_interval);
        if due {
            self.store
                .touch_api_key(key.record.id, now, self.settings.last_used_interval)
                .await?;
            // A copy of a shared entry, once per interval.
            Arc::make_mut(&mut key).record.last_used_at = Some(now);
        }
        if due || !from_cache {
            self.cache.insert(hash, key.clone());
        }
        Ok(key.caller())
    }

    /// Creates an API key and returns its secret — the only time it exists outside the caller's
    /// hands — with the stored record.
    pub async fn create_api_key(
        &self,
        req: CreateApiKey,
        audit: AuditEvent,
    ) -> Result<(ApiKeySecret, ApiKeyRecord), AuthError> {
        self.create_api_key_with(&mut OsRng, req, audit).await
    }

    /// [`AuthService::create_api_key`] with a caller-supplied random source.
    pub async fn create_api_key_with(
        &self,
        rng: &mut (impl RngCore + CryptoRng),
        req: CreateApiKey,
        audit: AuditEvent,
    ) -> Result<(ApiKeySecret, ApiKeyRecord), AuthError> {
        if req.scopes.is_empty() {
            return Err(AuthError::Invalid(
                "an API key needs at least one scope".into(),
            ));
        }
        if req.expires_at.is_some_and(|t| t <= self.clock.now()) {
            return Err(AuthError::Invalid(
                "the expiry must be in the future".into(),
            ));
        }
        if self
            .store
            .org_access(req.user_id, req.org_id)
            .await?
            .is_none()
        {
            return Err(AuthError::Forbidden(
                "the key's user holds no role in that organization, so the key could do nothing"
                    .into(),
            ));
        }
        let secret = ApiKeySecret::generate(rng);
        let record = self
            .store
            .insert_api_key(
                NewApiKey {
                    org_id: req.org_id,
                    user_id: req.user_id,
                    name: req.name,
                    key_hash: api_key::hash(secret.expose()),
                    key_prefix: secret.display_prefix(),
                    scopes: req.scopes,
                    expires_at: req.expires_at,
                },
                audit,
            )
            .await?;
        Ok((secret, record))
    }

    /// Signs a user in with email and password, starting a session. Every attempt is audited;
    /// an unknown email costs the same password-hash work as a wrong password.
    ///
    /// Throttled before any password work, by what the caller controls, never by whether the
    /// account exists: attempts per (email, client address) — a success clears them, so the
    /// owner signing in from elsewhere is never locked out by someone else's guesses — and
    /// failures per client address, over every email.
    pub async fn login(
        &self,
        email: &str,
        password: &str,
        client: Option<std::net::IpAddr>,
        request_id: Option<String>,
    ) -> Result<NewSession, AuthError> {
        let email_key = email.trim().to_lowercase();
        let counted_as = breeze_limits::address_key(client);
        let pair = format!("login:{counted_as}:{email_key}");
        let address = format!("login-failures:{counted_as}");
        let client = client.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        let window = self.settings.login_window;
        let limiter = &self.limiter;
        let decisions = [
            limiter
                .peek(&address, self.settings.login_address_failures, window)
                .await,
            limiter
                .check(&pair, self.settings.login_attempts, window)
                .await,
        ];
        for decided in decisions {
            match decided {
                Ok(d) if d.allowed => {}
                Ok(d) => {
                    return Err(AuthError::TooManyAttempts {
                        retry_after: d.retry_after,
                    });
                }
                Err(e) if self.settings.fail_closed => {
                    tracing::error!(error = %e, "sign-in limiter unavailable; refusing");
                    return Err(AuthError::Unavailable);
                }
                Err(e) => tracing::warn!(error = %e, "sign-in limiter unavailable; allowing"),
            }
        }
        let found = self.store.find_user_for_login(email).await?;
        let verified = match &found {
            Some(u) => password::verify(password, &u.password_hash),
            None => {
                password::burn_equivalent_time(password);
                false
            }
        };
        let user = match found {
            Some(u) if verified && !u.user.disabled => u.user,
            other => {
                let actor = other.as_ref().map_or_else(
                    || Actor::system("anonymous"),
                    |u| Actor::new(ActorType::User, u.user.id),
                );
                let event = AuditEvent::new(actor, "auth.login", "user")
                    .details(serde_json::json!({ "email": email_key, "client": client }))
                    .failed(AuditResult::Failure, "invalid email or password")
                    .request(request_id);
                // A refusal is not counted, so this only counts.
                if let Err(e) = limiter
                    .check(&address, self.settings.login_address_failures, window)
                    .await
                {
                    tracing::warn!(error = %e, "could not count a failed sign-in");
                }
                self.store.append_audit(&event).await?;
                return Err(AuthError::InvalidCredentials);
            }
        };
        // The owner got in: their attempts from this address start again.
        if let Err(e) = limiter.reset(&pair).await {
            tracing::warn!(error = %e, "could not clear the sign-in attempts");
        }
        let token = api_key::random_token(&mut OsRng);
        let expires_at = self.clock.now() + self.settings.session_ttl;
        self.store
            .create_session(user.id, &api_key::hash(&token), expires_at)
            .await?;
        self.store.record_login(user.id).await?;
        let event = AuditEvent::new(Actor::new(ActorType::User, user.id), "auth.login", "user")
            .resource(user.id)
            .request(request_id);
        self.store.append_audit(&event).await?;
        Ok(NewSession {
            token,
            expires_at,
            user,
        })
    }

    /// The user behind a session cookie value.
    pub async fn authenticate_session(&self, token: Option<&str>) -> Result<User, AuthError> {
        let token = token
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::NotSignedIn)?;
        let hash = api_key::hash(token);
        match self.store.find_session(&hash).await? {
            Some((_, stored, user)) if bool::from(stored.as_slice().ct_eq(&hash[..])) => Ok(user),
            _ => Err(AuthError::NotSignedIn),
        }
    }

    /// Ends the session behind a cookie value, if any.
    pub async fn logout(&self, token: &str) -> Result<(), AuthError> {
        self.store.delete_session(&api_key::hash(token)).await?;
        Ok(())
    }
}
