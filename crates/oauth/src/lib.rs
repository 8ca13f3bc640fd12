//! OAuth 2.1 for MCP clients: Breeze as the authorization server of its own MCP endpoint.
//!
//! [`OAuth`] holds the flows; it knows no HTTP. The server parses requests into parameter
//! lists and maps [`OAuthError`] to responses (RFC 6749 §5.2 bodies). What it does:
//!
//! - **Clients** ([`client`]): registered through DCR (always public: any requested auth method
//!   is answered `none`), or named by an https URL whose client ID metadata document is fetched
//!   through the server's [`MetadataFetcher`] under the [`egress`] guard and cached in the store
//!   so every instance shares it.
//! - **Authorization** ([`OAuth::authorize`]): the client and redirect URI are checked first —
//!   a bad one is an error page, never a redirect (no open redirect) — then response type,
//!   PKCE (S256 only), resource (RFC 8707, required and equal to ours) and scopes, whose
//!   errors go back to the client. Consent ([`OAuth::issue_code`]) stores a code bound to all
//!   of that and to the user and organization; the redirect carries `iss` (RFC 9207).
//! - **Tokens** ([`OAuth::token`]): a code is redeemed once (a replay revokes the grant the
//!   first exchange created); a refresh token rotates on every use, one retry of the previous
//!   token is allowed within [`OAuthConfig::refresh_retry_window`] while its successor is
//!   unused, and any other reuse revokes the grant. Access tokens are EdDSA JWTs
//!   ([`jwt`]) for our resource only, 30 minutes, naming user, organization, scopes and grant.
//! - **Bearer tokens** ([`OAuth::authenticate_bearer`]): signature, `typ`, `kid`, issuer,
//!   audience and expiry, then the grant's status and the user's permissions now — read from
//!   the store, cached for at most [`OAuthConfig::cache_ttl`] and dropped at once when this
//!   process's store changes credentials (a change elsewhere returns only after that ttl:
//!   the store's credential fence). A verified token is remembered by its SHA-256 so the
//!   hot path costs what an API key's does.
//!
//! Secrets (codes, refresh tokens) are stored as SHA-256 and compared through the hash lookup;
//! the PKCE verifier and CSRF tokens are compared in constant time. Time comes from the `Clock`,
//! randomness from the OS unless [`OAuth::with_rng`] supplies a source.

pub mod client;
pub mod egress;
pub mod jwt;
pub mod metadata;
pub mod pkce;
pub mod redirect;
pub mod scope;

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use breeze_core::{
    Actor, AuditEvent, AuditResult, Caller, Clock, GrantId, OrgId, PermissionSet, ScopeSet,
    Timestamp, UserId,
};
use breeze_store::{
    NewOAuthClient, NewOAuthCode, NewRefreshToken, OAuthClientKind, OAuthGrantRecord, Redeemed,
    Refreshed, Store, StoreError,
};
use chrono::Duration;
use rand::{CryptoRng, RngCore, rngs::OsRng};
use ring::hmac;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use client::{ClientInfo, RegistrationRequest, RegistrationResponse};
pub use jwt::{AccessClaims, JwtError, SigningKey};
pub use metadata::{AuthorizationServerMetadata, ProtectedResourceMetadata};

/// An RFC 6749 / 7591 / 8707 error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthErrorCode {
    InvalidRequest,
    InvalidClient,
    InvalidGrant,
    UnauthorizedClient,
    UnsupportedGrantType,
    UnsupportedResponseType,
    InvalidScope,
    InvalidTarget,
    AccessDenied,
    ConsentRequired,
    InvalidRedirectUri,
    InvalidClientMetadata,
    InvalidToken,
    ServerError,
}

impl OAuthErrorCode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnauthorizedClient => "unauthorized_client",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::UnsupportedResponseType => "unsupported_response_type",
            Self::InvalidScope => "invalid_scope",
            Self::InvalidTarget => "invalid_target",
            Self::AccessDenied => "access_denied",
            Self::ConsentRequired => "consent_required",
            Self::InvalidRedirectUri => "invalid_redirect_uri",
            Self::InvalidClientMetadata => "invalid_client_metadata",
            Self::InvalidToken => "invalid_token",
            Self::ServerError => "server_error",
        }
    }
}

/// Why an OAuth request failed.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// A protocol error: the code and a description for the client.
    #[error("{description}")]
    Protocol {
        code: OAuthErrorCode,
        description: String,
    },
    /// Too many requests; try again after the delay.
    #[error("too many requests; try again in {} seconds", .retry_after.as_secs().max(1))]
    RateLimited { retry_after: std::time::Duration },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OAuthError {
    /// A protocol error with `code`.
    pub fn protocol(code: OAuthErrorCode, description: impl Into<String>) -> Self {
        Self::Protocol {
            code,
            description: description.into(),
        }
    }
}

/// The outcome of an authorization request that cannot proceed.
#[derive(Debug)]
pub enum AuthorizeError {
    /// Shown to the user, never redirected: the client or redirect URI is not trusted.
    Page(OAuthError),
    /// Sent back to the client: the redirect location carrying the error.
    Redirect(String),
}

/// Settings of the authorization server.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// The issuer: this server's origin (`https://api.example.com`), endpoints at its root.
    pub issuer: String,
    /// The protected resource (the MCP endpoint's URL), the only audience tokens are for.
    pub resource: String,
    pub access_ttl: Duration,
    pub refresh_ttl: Duration,
    pub code_ttl: Duration,
    /// How long after a rotation the previous refresh token may be presented once more.
    pub refresh_retry_window: Duration,
    /// How long a registered client unused lives before the stale-client sweep removes it.
    pub client_ttl: Duration,
    /// How long a bearer token's grant status and permissions are served from memory.
    pub cache_ttl: Duration,
    /// Clock skew allowed when checking a token's times, in seconds.
    pub leeway_secs: i64,
    /// Whether https `client_id`s are resolved as metadata documents, and the metadata says
    /// so (`OAUTH_CIMD_ENABLED`).
    pub cimd: bool,
    /// Whether a registration naming a `software_id` is accepted with the field ignored
    /// (`OAUTH_DCR_IGNORE_SOFTWARE_ID`); refused otherwise.
    pub ignore_software_id: bool,
}

impl OAuthConfig {
    /// The defaults for `issuer` and `resource`: 30-minute access tokens, 14-day refresh
    /// tokens, 60-second codes and retry window, 90-day client TTL, 1-second cache.
    pub fn new(issuer: &str, resource: &str) -> Self {
        Self {
            issuer: issuer.trim_end_matches('/').to_owned(),
            resource: canonical_resource(resource).unwrap_or_else(|| resource.to_owned()),
            access_ttl: Duration::minutes(30),
            refresh_ttl: Duration::days(14),
            code_ttl: Duration::seconds(60),
            refresh_retry_window: Duration::seconds(60),
            client_ttl: Duration::days(90),
            cache_ttl: Duration::seconds(1),
            leeway_secs: 30,
            cimd: true,
            ignore_software_id: false,
        }
    }
}

/// The canonical form of a resource URI (MCP 2025-11-25): absolute http(s), lowercase scheme
/// and host, no fragment, no trailing slash. `None` when it is not such a URI.
pub fn canonical_resource(uri: &str) -> Option<String> {
    if uri.contains('#') {
        return None;
    }
    let url = url::Url::parse(uri).ok()?;
    if !matches!(url.scheme(), "https" | "http") || url.host().is_none() {
        return None;
    }
    if !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    let s = url.as_str();
    Some(s.strip_suffix('/').unwrap_or(s).to_owned())
}

/// A fetched client ID metadata document.
#[derive(Debug, Clone)]
pub struct FetchedDocument {
    pub status: u16,
    pub body: Vec<u8>,
    /// `Cache-Control: max-age`, if the response said.
    pub max_age: Option<u64>,
}

/// What a [`MetadataFetcher`] returns.
pub type FetchFuture<'a> =
    Pin<Box<dyn Future<Output = Result<FetchedDocument, String>> + Send + 'a>>;

/// Fetches client ID metadata documents: the server's HTTP client under the [`egress`] guard
/// (https only, public addresses only and connecting to the address checked, no redirects,
/// at most [`egress::MAX_DOCUMENT_BYTES`], [`egress::FETCH_TIMEOUT`]).
pub trait MetadataFetcher: Send + Sync {
    fn fetch<'a>(&'a self, url: &'a url::Url) -> FetchFuture<'a>;
}

/// A fetcher that fetches nothing (metadata documents off).
#[derive(Debug, Default)]
pub struct NoFetcher;

impl MetadataFetcher for NoFetcher {
    fn fetch<'a>(&'a self, _url: &'a url::Url) -> FetchFuture<'a> {
        Box::pin(async { Err("client metadata documents are not fetched here".to_owned()) })
    }
}

/// A random source the service can own.
pub trait SecureRng: RngCore + CryptoRng + Send {}
impl<T: RngCore + CryptoRng + Send> SecureRng for T {}

/// A validated authorization request, ready for consent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizeRequest {
    pub client: ClientInfo,
    /// The redirect URI as requested (a loopback one with its port).
    pub redirect_uri: String,
    pub scopes: Vec<String>,
    pub state: Option<String>,
    pub code_challenge: String,
    pub resource: String,
    pub prompt: Option<String>,
}

impl AuthorizeRequest {
    /// The host the code will be sent to, for the consent page to show (a document's client
    /// may claim any name; the host is what it cannot fake).
    pub fn redirect_host(&self) -> String {
        url::Url::parse(&self.redirect_uri)
            .ok()
            .and_then(|u| {
                u.host_str().map(|h| {
                    u.port()
                        .map_or_else(|| h.to_owned(), |p| format!("{h}:{p}"))
                })
            })
            .unwrap_or_default()
    }

    /// What the consent form's CSRF token is bound to: everything the code will carry.
    fn binding(&self) -> String {
        format!(
            "{}\0{}\0{}\0{}\0{}\0{}",
            self.client.client_id,
            self.redirect_uri,
            self.code_challenge,
            self.resource,
            self.scopes.join(" "),
            self.state.as_deref().unwrap_or_default()
        )
    }
}

/// A token endpoint answer (RFC 6749 §5.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: &'static str,
    pub expires_in: i64,
    pub refresh_token: String,
    pub scope: String,
}

/// An authenticated access token: the caller it acts as, and the client it was issued to.
#[derive(Debug, Clone)]
pub struct Bearer {
    pub caller: Caller,
    pub client_id: String,
}

/// Why a bearer token was refused.
#[derive(Debug, thiserror::Error)]
pub enum BearerError {
    /// Malformed, forged, expired, for another resource, or of a revoked grant: the client must
    /// authorize again.
    #[error("invalid access token")]
    Invalid,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A grant as read, shared by every request of its tokens until it is stale (an `Arc`: a
/// hit costs a reference count, not a copy of the record).
struct CachedGrant {
    grant: OAuthGrantRecord,
    permissions: Option<PermissionSet>,
    read_at: Timestamp,
    generation: u64,
}

/// What a request needs of a verified access token, computed once per token.
struct VerifiedToken {
    /// The whole token: the cache is keyed by its signature, and a hit must be this token.
    token: Box<str>,
    exp: i64,
    client_id: String,
    org_id: OrgId,
    grant_id: GrantId,
    scopes: ScopeSet,
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
///
/// Every Bearer request compares its whole token (~700 bytes) with the cached one, so this
/// goes a word at a time with one optimisation barrier at the end; `subtle`'s slice comparison
/// puts a barrier on every byte, which made it the largest cost a token had over a key.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (words_a, rest_a) = a.as_chunks::<8>();
    let (words_b, rest_b) = b.as_chunks::<8>();
    let mut diff = 0u64;
    for (x, y) in words_a.iter().zip(words_b) {
        diff |= u64::from_ne_bytes(*x) ^ u64::from_ne_bytes(*y);
    }
    for (x, y) in rest_a.iter().zip(rest_b) {
        diff |= u64::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// Verified tokens remembered (by their signature) at most; beyond it the map starts over.
const MAX_CACHED: usize = 10_000;

/// The authorization server. Cheap to clone.
#[derive(Clone)]
pub struct OAuth {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    clock: Arc<dyn Clock>,
    config: OAuthConfig,
    key: SigningKey,
    cookie_key: hmac::Key,
    fetcher: Arc<dyn MetadataFetcher>,
    rng: Mutex<Box<dyn SecureRng>>,
    /// Keyed by the JWT's signature segment, which tells distinct tokens apart without hashing
    /// the whole ~700-byte token on every request (a SHA-256 of it was a measurable share of
    /// a Bearer request); an entry serves only the very token it was verified for.
    tokens: Mutex<HashMap<Box<str>, Arc<VerifiedToken>>>,
    grants: Mutex<HashMap<GrantId, Arc<CachedGrant>>>,
}

fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Reads form or query parameters, refusing any given twice (RFC 6749 §3.1).
pub struct Params<'a>(&'a [(String, String)]);

impl<'a> Params<'a> {
    /// The parameters of a request.
    pub fn new(pairs: &'a [(String, String)]) -> Self {
        Self(pairs)
    }

    /// The parameter's value; an empty one counts as absent.
    pub fn get(&self, name: &str) -> Result<Option<&'a str>, String> {
        let mut found = self.0.iter().filter(|(k, _)| k == name);
        let first = found.next().map(|(_, v)| v.as_str());
        if found.next().is_some() {
            return Err(format!("parameter {name} given more than once"));
        }
        Ok(first.filter(|v| !v.is_empty()))
    }
}

fn invalid_request(m: impl Into<String>) -> OAuthError {
    OAuthError::protocol(OAuthErrorCode::InvalidRequest, m)
}

fn invalid_grant(m: impl Into<String>) -> OAuthError {
    OAuthError::protocol(OAuthErrorCode::InvalidGrant, m)
}

impl OAuth {
    /// The server over `store`, signing with `key`, keying CSRF tokens with `cookie_secret`,
    /// fetching metadata documents with `fetcher`.
    pub fn new(
        store: Store,
        clock: Arc<dyn Clock>,
        config: OAuthConfig,
        key: SigningKey,
        cookie_secret: &[u8],
        fetcher: Arc<dyn MetadataFetcher>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                clock,
                config,
                key,
                cookie_key: hmac::Key::new(hmac::HMAC_SHA256, cookie_secret),
                fetcher,
                rng: Mutex::new(Box::new(OsRng)),
                tokens: Mutex::new(HashMap::new()),
                grants: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The same server drawing codes, tokens and ids from `rng` (tests).
    #[must_use]
    pub fn with_rng(self, rng: impl SecureRng + 'static) -> Self {
        if let Ok(mut r) = self.inner.rng.lock() {
            *r = Box::new(rng);
        }
        self
    }

    pub fn config(&self) -> &OAuthConfig {
        &self.inner.config
    }

    pub fn signing_key(&self) -> &SigningKey {
        &self.inner.key
    }

    /// The store this server keeps its state in.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// `prefix` + 32 random bytes, base64url.
    fn secret(&self, prefix: &str) -> String {
        let mut bytes = [0u8; 32];
        match self.inner.rng.lock() {
            Ok(mut r) => r.fill_bytes(&mut bytes),
            // A poisoned lock only means a panic elsewhere; the OS source is always good.
            Err(_) => OsRng.fill_bytes(&mut bytes),
        }
        format!("{prefix}{}", B64.encode(bytes))
    }

    /// RFC 8414 metadata; `registration` says whether DCR is offered.
    pub fn server_metadata(&self, registration: bool) -> AuthorizationServerMetadata {
        let mut metadata =
            AuthorizationServerMetadata::new(&self.inner.config.issuer, registration);
        metadata.client_id_metadata_document_supported = self.inner.config.cimd;
        metadata
    }

    /// RFC 9728 metadata of our resource.
    pub fn resource_metadata(&self) -> ProtectedResourceMetadata {
        ProtectedResourceMetadata::new(&self.inner.config.resource, &self.inner.config.issuer)
    }

    /// The JWKS document.
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({ "keys": [self.inner.key.public_jwk()] })
    }

    // ----- clients -------------------------------------------------------------------------

    /// The client named `client_id`: a registered one, or (an https URL) its metadata document,
    /// from the store's cache or fetched now.
    pub async fn client(&self, client_id: &str) -> Result<ClientInfo, OAuthError> {
        let unknown = || OAuthError::protocol(OAuthErrorCode::InvalidClient, "unknown client_id");
        let stored = self.inner.store.get_oauth_client(client_id).await?;
        let now = self.now();
        if client_id.starts_with("https://") {
            if !self.inner.config.cimd {
                return Err(OAuthError::protocol(
                    OAuthErrorCode::InvalidClient,
                    "this server does not resolve client ID metadata documents \
                     (OAUTH_CIMD_ENABLED=false): the client must register (DCR) instead",
                ));
            }
            if let Some(c) = stored.filter(|c| c.kind == "cimd" && c.expires_at > now) {
                return Ok(ClientInfo {
                    client_id: c.client_id,
                    client_name: c.client_name,
                    redirect_uris: c.redirect_uris,
                });
            }
            return self.fetch_document(client_id).await;
        }
        match stored {
            Some(c) if c.kind == "dcr" => Ok(ClientInfo {
                client_id: c.client_id,
                client_name: c.client_name,
                redirect_uris: c.redirect_uris,
            }),
            _ => Err(unknown()),
        }
    }

    async fn fetch_document(&self, client_id: &str) -> Result<ClientInfo, OAuthError> {
        let refuse = |m: String| OAuthError::protocol(OAuthErrorCode::InvalidClient, m);
        let url = egress::check_document_url(client_id).map_err(refuse)?;
        // The client shows this text to the person signing in: it says what failed and what to
        // do, never why (what a name resolves to, how a host answered: the server's log has it).
        let doc = self.inner.fetcher.fetch(&url).await.map_err(|e| {
            tracing::debug!(client_id, error = %e, "client metadata document not fetched");
            refuse(format!(
                "this server could not fetch the client ID metadata document at {client_id}. \
                 The server needs outbound HTTPS to the client's site; an administrator \
                 without it can set OAUTH_CIMD_ENABLED=false, and clients then register (DCR)"
            ))
        })?;
        if doc.status != 200 {
            return Err(refuse(format!(
                "the client ID metadata document at {client_id} answered HTTP {} to this \
                 server (redirects are not followed)",
                doc.status
            )));
        }
        let info = client::validate_document(client_id, &doc.body)?;
        // Cached as the response allows, between 5 minutes and a day.
        let max_age = doc.max_age.unwrap_or(3600).clamp(300, 86_400);
        let max_age = i64::try_from(max_age).unwrap_or(3600);
        self.inner
            .store
            .upsert_cimd_client(NewOAuthClient {
                client_id: info.client_id.clone(),
                kind: OAuthClientKind::Cimd,
                client_name: info.client_name.clone(),
                redirect_uris: info.redirect_uris.clone(),
                metadata: serde_json::from_slice(&doc.body).unwrap_or_default(),
                expires_at: self.now() + Duration::seconds(max_age),
            })
            .await?;
        Ok(info)
    }

    /// Registers a client (RFC 7591), always public. A refused registration is audited.
    pub async fn register(
        &self,
        req: &RegistrationRequest,
        actor: Actor,
        request_id: Option<String>,
    ) -> Result<RegistrationResponse, OAuthError> {
        let (name, redirect_uris) =
            match client::validate_registration(req, self.inner.config.ignore_software_id) {
                Ok(v) => v,
                Err(e) => {
                    let event = AuditEvent::new(actor, "oauth.client.register", "oauth_client")
                        .details(serde_json::json!({
                            "client_name": req.client_name,
                            "redirect_uris": req.redirect_uris,
                        }))
                        .failed(AuditResult::Denied, e.to_string())
                        .request(request_id);
                    self.inner.store.append_audit(&event).await?;
                    return Err(e);
                }
            };
        let client_id = self.secret("bzcl_");
        let now = self.now();
        let response = RegistrationResponse {
            client_id: client_id.clone(),
            client_id_issued_at: now.timestamp(),
            client_name: name.clone(),
            redirect_uris: redirect_uris.clone(),
            grant_types: vec!["authorization_code".into(), "refresh_token".into()],
            response_types: vec!["code".into()],
            token_endpoint_auth_method: "none".into(),
        };
        let event = AuditEvent::new(actor, "oauth.client.register", "oauth_client")
            .details(serde_json::json!({
                "client_name": name,
                "redirect_uris": redirect_uris,
                "requested_auth_method": req.token_endpoint_auth_method,
            }))
            .request(request_id);
        self.inner
            .store
            .insert_oauth_client(
                NewOAuthClient {
                    client_id,
                    kind: OAuthClientKind::Dcr,
                    client_name: name,
                    redirect_uris,
                    metadata: serde_json::to_value(&response).unwrap_or_default(),
                    expires_at: now + self.inner.config.client_ttl,
                },
                event,
            )
            .await?;
        Ok(response)
    }

    // ----- authorization -------------------------------------------------------------------

    /// Validates an authorization request's parameters.
    pub async fn authorize(
        &self,
        pairs: &[(String, String)],
    ) -> Result<AuthorizeRequest, AuthorizeError> {
        let p = Params::new(pairs);
        let page = |m: String| AuthorizeError::Page(invalid_request(m));
        let client_id = p
            .get("client_id")
            .map_err(page)?
            .ok_or_else(|| page("client_id is required".into()))?;
        let client = self.client(client_id).await.map_err(AuthorizeError::Page)?;
        let requested = p.get("redirect_uri").map_err(page)?;
        let redirect_uri = match requested {
            Some(r) if client.redirect_for(r).is_some() => r.to_owned(),
            Some(_) => {
                return Err(AuthorizeError::Page(OAuthError::protocol(
                    OAuthErrorCode::InvalidRedirectUri,
                    "redirect_uri is not registered for this client",
                )));
            }
            None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
            None => return Err(page("redirect_uri is required".into())),
        };
        // From here on the client is known and the redirect trusted: errors go back to it.
        let state = p.get("state").ok().flatten().map(str::to_owned);
        let back = |code: OAuthErrorCode, m: &str| {
            AuthorizeError::Redirect(self.error_location(&redirect_uri, code, m, state.as_deref()))
        };
        let one = |name: &str| {
            p.get(name)
                .map_err(|m| back(OAuthErrorCode::InvalidRequest, &m))
        };
        if p.get("state").is_err() {
            return Err(back(
                OAuthErrorCode::InvalidRequest,
                "parameter state given more than once",
            ));
        }
        if state.as_ref().is_some_and(|s| s.len() > 1024) {
            return Err(back(
                OAuthErrorCode::InvalidRequest,
                "state is longer than 1024 characters",
            ));
        }
        match one("response_type")? {
            Some("code") => {}
            Some(_) => {
                return Err(back(
                    OAuthErrorCode::UnsupportedResponseType,
                    "only response_type=code is supported",
                ));
            }
            None => {
                return Err(back(
                    OAuthErrorCode::InvalidRequest,
                    "response_type is required",
                ));
            }
        }
        let challenge = one("code_challenge")?;
        pkce::check_challenge(challenge, one("code_challenge_method")?)
            .map_err(|m| back(OAuthErrorCode::InvalidRequest, m))?;
        let resource = self
            .check_resource(one("resource")?)
            .map_err(|m| back(OAuthErrorCode::InvalidTarget, &m))?;
        let scopes =
            scope::parse(one("scope")?).map_err(|m| back(OAuthErrorCode::InvalidScope, &m))?;
        let prompt = one("prompt")?.map(str::to_owned);
        if prompt.as_deref() == Some("none") {
            return Err(back(
                OAuthErrorCode::ConsentRequired,
                "Breeze asks the user for every grant",
            ));
        }
        Ok(AuthorizeRequest {
            client,
            redirect_uri,
            scopes,
            state,
            code_challenge: challenge.unwrap_or_default().to_owned(),
            resource,
            prompt,
        })
    }

    /// The resource a request names, which must be ours (RFC 8707).
    fn check_resource(&self, resource: Option<&str>) -> Result<String, String> {
        let resource = resource.ok_or("resource is required (RFC 8707)")?;
        let canonical = canonical_resource(resource)
            .ok_or("resource must be an absolute http(s) URI without a fragment")?;
        if canonical != self.inner.config.resource {
            return Err(format!(
                "this server issues tokens only for {}",
                self.inner.config.resource
            ));
        }
        Ok(canonical)
    }

    fn location(&self, redirect_uri: &str, pairs: &[(&str, &str)]) -> String {
        let Ok(mut url) = url::Url::parse(redirect_uri) else {
            return redirect_uri.to_owned();
        };
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in pairs {
                q.append_pair(k, v);
            }
            q.append_pair("iss", &self.inner.config.issuer);
        }
        url.into()
    }

    fn error_location(
        &self,
        redirect_uri: &str,
        code: OAuthErrorCode,
        description: &str,
        state: Option<&str>,
    ) -> String {
        let mut pairs = vec![("error", code.as_str()), ("error_description", description)];
        if let Some(s) = state {
            pairs.push(("state", s));
        }
        self.location(redirect_uri, &pairs)
    }

    /// Where to send the user who declined: `access_denied` at the client's redirect URI. No
    /// grant is created.
    pub fn denied_location(&self, req: &AuthorizeRequest) -> String {
        self.error_location(
            &req.redirect_uri,
            OAuthErrorCode::AccessDenied,
            "the user declined",
            req.state.as_deref(),
        )
    }

    /// The consent form's CSRF token: bound to the signed-in session, the per-browser consent
    /// cookie's nonce and everything the request will grant.
    pub fn csrf_token(&self, session: &str, nonce: &str, req: &AuthorizeRequest) -> String {
        let msg = format!(
            "consent\0{}\0{nonce}\0{}",
            B64.encode(hash(session)),
            req.binding()
        );
        B64.encode(hmac::sign(&self.inner.cookie_key, msg.as_bytes()).as_ref())
    }

    /// Whether `token` is [`csrf_token`](Self::csrf_token) for these inputs (constant time).
    pub fn check_csrf(
        &self,
        token: &str,
        session: &str,
        nonce: &str,
        req: &AuthorizeRequest,
    ) -> bool {
        let Ok(tag) = B64.decode(token) else {
            return false;
        };
        let msg = format!(
            "consent\0{}\0{nonce}\0{}",
            B64.encode(hash(session)),
            req.binding()
        );
        hmac::verify(&self.inner.cookie_key, msg.as_bytes(), &tag).is_ok()
    }

    /// A fresh random nonce (the consent cookie's value).
    pub fn nonce(&self) -> String {
        self.secret("")
    }

    /// The user consented, acting in `org` with `scopes` (a subset of the request's): stores
    /// the code and returns the redirect location carrying it, `state` and `iss`.
    pub async fn issue_code(
        &self,
        req: &AuthorizeRequest,
        user: UserId,
        org: OrgId,
    ) -> Result<String, OAuthError> {
        let code = self.secret("bzac_");
        self.inner
            .store
            .insert_oauth_code(NewOAuthCode {
                code_hash: hash(&code),
                client_id: req.client.client_id.clone(),
                org_id: org,
                user_id: user,
                redirect_uri: req.redirect_uri.clone(),
                code_challenge: req.code_challenge.clone(),
                resource: req.resource.clone(),
                scopes: req.scopes.clone(),
                expires_at: self.now() + self.inner.config.code_ttl,
            })
            .await?;
        let mut pairs = vec![("code", code.as_str())];
        if let Some(s) = &req.state {
            pairs.push(("state", s));
        }
        Ok(self.location(&req.redirect_uri, &pairs))
    }

    // ----- tokens --------------------------------------------------------------------------

    /// The token endpoint: `authorization_code` and `refresh_token` grants.
    pub async fn token(
        &self,
        pairs: &[(String, String)],
        request_id: Option<String>,
    ) -> Result<TokenResponse, OAuthError> {
        let p = Params::new(pairs);
        let get = |n: &str| p.get(n).map_err(invalid_request);
        let client_id = get("client_id")?.ok_or_else(|| {
            OAuthError::protocol(
                OAuthErrorCode::InvalidClient,
                "client_id is required (public clients)",
            )
        })?;
        match get("grant_type")? {
            Some("authorization_code") => {
                let code = get("code")?.ok_or_else(|| invalid_request("code is required"))?;
                self.redeem(
                    client_id,
                    code,
                    get("redirect_uri")?,
                    get("code_verifier")?,
                    get("resource")?,
                    request_id,
                )
                .await
            }
            Some("refresh_token") => {
                let token = get("refresh_token")?
                    .ok_or_else(|| invalid_request("refresh_token is required"))?;
                self.refresh(
                    client_id,
                    token,
                    get("scope")?,
                    get("resource")?,
                    request_id,
                )
                .await
            }
            Some(other) => Err(OAuthError::protocol(
                OAuthErrorCode::UnsupportedGrantType,
                format!("grant_type {other} is not supported"),
            )),
            None => Err(invalid_request("grant_type is required")),
        }
    }

    async fn audit_refusal(
        &self,
        action: &str,
        org: OrgId,
        client_id: &str,
        message: &str,
        request_id: Option<String>,
    ) -> Result<(), OAuthError> {
        let event = AuditEvent::new(Actor::system("oauth"), action, "oauth_client")
            .org(org)
            .resource(client_id)
            .failed(AuditResult::Denied, message)
            .request(request_id);
        self.inner.store.append_audit(&event).await?;
        Ok(())
    }

    async fn redeem(
        &self,
        client_id: &str,
        code: &str,
        redirect_uri: Option<&str>,
        verifier: Option<&str>,
        resource: Option<&str>,
        request_id: Option<String>,
    ) -> Result<TokenResponse, OAuthError> {
        let store = &self.inner.store;
        let Some(record) = store.find_oauth_code(&hash(code)).await? else {
            return Err(invalid_grant("unknown authorization code"));
        };
        let refresh = self.secret("bzrt_");
        let next = NewRefreshToken {
            token_hash: hash(&refresh),
            expires_at: self.now() + self.inner.config.refresh_ttl,
        };
        if record.used_at.is_some() {
            // A replay: whoever redeemed it first, the grant it made is revoked.
            store
                .redeem_oauth_code(&record, "", next, request_id)
                .await?;
            return Err(invalid_grant(
                "authorization code already used; its grant is revoked",
            ));
        }
        if record.expires_at <= self.now() {
            return Err(invalid_grant("authorization code expired"));
        }
        if record.client_id != client_id {
            return Err(invalid_grant(
                "authorization code was issued to another client",
            ));
        }
        if redirect_uri.is_some_and(|r| r != record.redirect_uri) {
            return Err(invalid_grant(
                "redirect_uri differs from the authorization request's",
            ));
        }
        let pkce_ok = verifier.is_some_and(|v| pkce::verify(v, &record.code_challenge));
        if !pkce_ok {
            let m = if verifier.is_some() {
                "PKCE verification failed"
            } else {
                "code_verifier is required"
            };
            self.audit_refusal("oauth.token.pkce", record.org_id, client_id, m, request_id)
                .await?;
            return Err(invalid_grant(m));
        }
        if let Some(r) = resource
            && canonical_resource(r).as_deref() != Some(record.resource.as_str())
        {
            return Err(OAuthError::protocol(
                OAuthErrorCode::InvalidTarget,
                "resource differs from the authorization request's",
            ));
        }
        let client = self.client(client_id).await?;
        match store
            .redeem_oauth_code(&record, &client.client_name, next, request_id)
            .await?
        {
            Redeemed::Issued(grant) => {
                if !client_id.starts_with("https://") {
                    store
                        .touch_oauth_client(client_id, self.now() + self.inner.config.client_ttl)
                        .await?;
                }
                Ok(self.mint(&grant, &grant.scopes, refresh))
            }
            Redeemed::Replayed { .. } => Err(invalid_grant(
                "authorization code already used; its grant is revoked",
            )),
        }
    }

    async fn refresh(
        &self,
        client_id: &str,
        token: &str,
        scope: Option<&str>,
        resource: Option<&str>,
        request_id: Option<String>,
    ) -> Result<TokenResponse, OAuthError> {
        let refresh = self.secret("bzrt_");
        let next = NewRefreshToken {
            token_hash: hash(&refresh),
            expires_at: self.now() + self.inner.config.refresh_ttl,
        };
        let grant = match self
            .inner
            .store
            .refresh_oauth_token(
                &hash(token),
                client_id,
                next,
                self.inner.config.refresh_retry_window,
                request_id,
            )
            .await?
        {
            Refreshed::Rotated(g) | Refreshed::Retried(g) => *g,
            Refreshed::Reused { .. } => {
                return Err(invalid_grant(
                    "refresh token already used; the grant is revoked",
                ));
            }
            Refreshed::Invalid(m) => return Err(invalid_grant(m)),
        };
        if let Some(r) = resource
            && canonical_resource(r).as_deref() != Some(grant.resource.as_str())
        {
            return Err(OAuthError::protocol(
                OAuthErrorCode::InvalidTarget,
                "resource differs from the grant's",
            ));
        }
        // Scopes may narrow, never widen.
        let scopes = match scope {
            None => grant.scopes.clone(),
            Some(s) => {
                let asked = scope::parse(Some(s))
                    .map_err(|m| OAuthError::protocol(OAuthErrorCode::InvalidScope, m))?;
                if let Some(extra) = asked.iter().find(|s| !grant.scopes.contains(s)) {
                    return Err(OAuthError::protocol(
                        OAuthErrorCode::InvalidScope,
                        format!("scope {extra} was not granted"),
                    ));
                }
                asked
            }
        };
        Ok(self.mint(&grant, &scopes, refresh))
    }

    fn mint(&self, grant: &OAuthGrantRecord, scopes: &[String], refresh: String) -> TokenResponse {
        let now = self.now().timestamp();
        let ttl = self.inner.config.access_ttl.num_seconds();
        let claims = AccessClaims {
            iss: self.inner.config.issuer.clone(),
            sub: grant.user_id,
            aud: grant.resource.clone(),
            exp: now + ttl,
            iat: now,
            jti: self.secret(""),
            client_id: grant.client_id.clone(),
            scope: scopes.join(" "),
            org_id: grant.org_id,
            grant_id: grant.id,
        };
        TokenResponse {
            access_token: self.inner.key.sign(&claims),
            token_type: "Bearer",
            expires_in: ttl,
            refresh_token: refresh,
            scope: claims.scope,
        }
    }

    /// Verifies an access token's signature, header, issuer, audience and times.
    pub fn verify(&self, token: &str) -> Result<AccessClaims, JwtError> {
        let c = &self.inner.config;
        self.inner.key.verify(
            token,
            &c.issuer,
            &c.resource,
            self.now().timestamp(),
            c.leeway_secs,
        )
    }

    /// Authenticates `Authorization: Bearer <token>`'s token: a valid access token of an
    /// active grant, acting with its user's permissions in the grant's organization now, and
    /// with no scope the grant does not hold now (a token signed before its grant was narrowed
    /// carries only what both still hold).
    pub async fn authenticate_bearer(&self, token: &str) -> Result<Bearer, BearerError> {
        // A JWS signature segment; anything without one fails verification below.
        let signature = token.rsplit_once('.').map_or("", |(_, s)| s);
        let now = self.now();
        let cached = self
            .inner
            .tokens
            .lock()
            .ok()
            .and_then(|m| m.get(signature).cloned())
            .filter(|v| same_bytes(v.token.as_bytes(), token.as_bytes()));
        let verified = match cached {
            Some(v) if v.exp + self.inner.config.leeway_secs > now.timestamp() => v,
            _ => {
                let c = self.verify(token).map_err(|_| BearerError::Invalid)?;
                let scopes: Vec<String> = c.scope.split(' ').map(str::to_owned).collect();
                let v = Arc::new(VerifiedToken {
                    token: token.into(),
                    exp: c.exp,
                    client_id: c.client_id,
                    org_id: c.org_id,
                    grant_id: c.grant_id,
                    scopes: scope::tier_scopes(&scopes),
                });
                if let Ok(mut m) = self.inner.tokens.lock() {
                    if m.len() >= MAX_CACHED {
                        m.clear();
                    }
                    m.insert(signature.into(), v.clone());
                }
                v
            }
        };
        let cached = self.grant_now(verified.grant_id).await?;
        let grant = &cached.grant;
        if !grant.is_active()
            || grant.client_id != verified.client_id
            || grant.org_id != verified.org_id
        {
            return Err(BearerError::Invalid);
        }
        let scopes = verified
            .scopes
            .intersect(ScopeSet::from_oauth(&grant.scopes));
        Ok(Bearer {
            caller: Caller::oauth_grant(
                grant.id,
                grant.org_id,
                grant.user_id,
                scopes,
                cached.permissions,
            ),
            client_id: grant.client_id.clone(),
        })
    }

    /// Grant `id` and its user's permissions, from memory if read less than `cache_ttl` ago
    /// with no credential change since (through this store, or another server's announced on
    /// the bus).
    async fn grant_now(&self, id: GrantId) -> Result<Arc<CachedGrant>, BearerError> {
        let now = self.now();
        let generation = self.inner.store.credentials_generation();
        let hit = self.inner.grants.lock().ok().and_then(|m| {
            m.get(&id)
                .filter(|c| {
                    c.generation == generation && now - c.read_at < self.inner.config.cache_ttl
                })
                .cloned()
        });
        if let Some(c) = hit {
            return Ok(c);
        }
        let (grant, permissions) = self
            .inner
            .store
            .find_oauth_grant(id)
            .await?
            .ok_or(BearerError::Invalid)?;
        if grant.is_active() {
            self.inner
                .store
                .touch_oauth_grant(id, now, Duration::seconds(60))
                .await?;
        }
        let cached = Arc::new(CachedGrant {
            grant,
            permissions,
            read_at: now,
            generation,
        });
        if let Ok(mut m) = self.inner.grants.lock() {
            if m.len() >= MAX_CACHED {
                m.clear();
            }
            m.insert(id, cached.clone());
        }
        Ok(cached)
    }

    /// The active grant behind a token of either kind, with the token's claims for an access
    /// token. `None` for anything unknown, invalid or revoked.
    async fn grant_of(
        &self,
        token: &str,
    ) -> Result<Option<(OAuthGrantRecord, Option<AccessClaims>)>, OAuthError> {
        if let Ok(claims) = self.verify(token) {
            let g = self.inner.store.find_oauth_grant(claims.grant_id).await?;
            return Ok(g.map(|(g, _)| (g, Some(claims))));
        }
        let Some(id) = self
            .inner
            .store
            .find_refresh_token_grant(&hash(token))
            .await?
        else {
            return Ok(None);
        };
        Ok(self
            .inner
            .store
            .find_oauth_grant(id)
            .await?
            .map(|(g, _)| (g, None)))
    }

    /// RFC 7009 revocation by client `client_id`: revoking either kind of token revokes its
    /// whole grant. Unknown tokens and other clients' tokens change nothing (and the answer is
    /// the same 200).
    pub async fn revoke(
        &self,
        pairs: &[(String, String)],
        request_id: Option<String>,
    ) -> Result<(), OAuthError> {
        let p = Params::new(pairs);
        let token = p
            .get("token")
            .map_err(invalid_request)?
            .ok_or_else(|| invalid_request("token is required"))?;
        let client_id = p
            .get("client_id")
            .map_err(invalid_request)?
            .ok_or_else(|| {
                OAuthError::protocol(OAuthErrorCode::InvalidClient, "client_id is required")
            })?;
        let Some((grant, _)) = self.grant_of(token).await? else {
            return Ok(());
        };
        if grant.client_id != client_id || !grant.is_active() {
            return Ok(());
        }
        let event = AuditEvent::new(
            Actor::new(breeze_core::ActorType::OauthGrant, grant.id),
            "oauth.grant.revoke",
            "oauth_grant",
        )
        .details(serde_json::json!({ "reason": "token_revoked_by_client", "client_id": client_id }))
        .request(request_id);
        self.inner
            .store
            .revoke_oauth_grant(grant.id, "token_revoked_by_client", event)
            .await?;
        Ok(())
    }

    /// RFC 7662 introspection for a caller of organization `org` (the server authenticated
    /// it): the token's facts when it is an active access token of that organization, else
    /// only `{"active": false}`.
    pub async fn introspect(
        &self,
        token: &str,
        org: OrgId,
    ) -> Result<serde_json::Value, OAuthError> {
        let inactive = serde_json::json!({ "active": false });
        let Ok(claims) = self.verify(token) else {
            return Ok(inactive);
        };
        let Some((grant, _)) = self.inner.store.find_oauth_grant(claims.grant_id).await? else {
            return Ok(inactive);
        };
        if !grant.is_active() || grant.org_id != org {
            return Ok(inactive);
        }
        Ok(serde_json::json!({
            "active": true,
            "scope": claims.scope,
            "client_id": claims.client_id,
            "sub": claims.sub,
            "aud": claims.aud,
            "iss": claims.iss,
            "exp": claims.exp,
            "iat": claims.iat,
            "token_type": "Bearer",
            "org_id": claims.org_id,
            "grant_id": claims.grant_id,
        }))
    }
}

/// The lease name of the daily sweep of stale clients, codes and refresh tokens.
pub const SWEEP_JOB: &str = "oauth.sweep";

impl OAuth {
    /// The daily sweep, when due: registered clients unused past their TTL and holding no
    /// active grant, expired cached metadata documents, expired codes and refresh tokens are
    /// removed — once a day by the store's clock across every instance sharing the database
    /// (a lease row, [`Store::claim_scheduled_run`]). Returns how many clients went, `None`
    /// when it was not due; a sweep that removed clients is audited (`oauth.client.sweep`).
    pub async fn sweep_when_due(&self) -> Result<Option<u64>, OAuthError> {
        let store = &self.inner.store;
        if !store
            .claim_scheduled_run(SWEEP_JOB, Duration::days(1))
            .await?
        {
            return Ok(None);
        }
        let removed = store.sweep_oauth().await?;
        if removed > 0 {
            let event =
                AuditEvent::new(Actor::system("oauth"), "oauth.client.sweep", "oauth_client")
                    .details(serde_json::json!({
                        "removed": removed,
                        "client_ttl_days": self.inner.config.client_ttl.num_days(),
                    }));
            store.append_audit(&event).await?;
        }
        Ok(Some(removed))
    }
}

/// The connection state a grant shows the user (the contract's vocabulary).
pub fn connection_state(grant: &OAuthGrantRecord) -> &'static str {
    if grant.is_active() {
        "Connected"
    } else {
        "Revoked"
    }
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    #[test]
    fn same_bytes_compares_every_byte_and_the_lengths() {
        let token: Vec<u8> = (0..=250u8).cycle().take(701).collect();
        assert!(same_bytes(&token, &token.clone()));
        assert!(same_bytes(b"", b""));
        for i in [0, 7, 8, 350, 695, 696, 700] {
            let mut other = token.clone();
            other[i] ^= 0x01;
            assert!(!same_bytes(&token, &other), "a difference at byte {i}");
        }
        assert!(!same_bytes(&token, &token[..700]), "a prefix");
        assert!(!same_bytes(&token[..8], &token[..9]));
    }
}
