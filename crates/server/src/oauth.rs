//! OAuth 2.1 settings and the server's half of `breeze-oauth`: the HTTP fetcher of client ID
//! metadata documents under the egress guard, and the `WWW-Authenticate` challenges the MCP
//! endpoints answer with.
//!
//! The fetcher resolves the host itself, refuses unless every address is public
//! (`breeze_oauth::egress::is_public`), then connects to the address it checked (so a second
//! DNS answer cannot point elsewhere), over https only, following no redirect, reading at most
//! 5 KB for at most 10 s.

use std::net::SocketAddr;

use breeze_oauth::{
    FetchFuture, FetchedDocument, MetadataFetcher, OAuthConfig, SigningKey,
    egress::{FETCH_TIMEOUT, MAX_DOCUMENT_BYTES, is_public},
};

/// Dynamic Client Registration posture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DcrPolicy {
    /// `OAUTH_DCR_ENABLED`: `/oauth/reg` is served.
    pub enabled: bool,
    /// `OAUTH_DCR_REQUIRE_IAT`: a registration must carry an initial access token — a Breeze
    /// API key as `Authorization: Bearer brz_…`.
    pub require_iat: bool,
    /// `OAUTH_DCR_ALLOW_ANONYMOUS`: anyone may register (Claude.ai, ChatGPT).
    pub allow_anonymous: bool,
}

/// OAuth 2.1 settings (`MCP_OAUTH_ENABLED` and the `OAUTH_*` variables).
#[derive(Clone)]
pub struct OAuthSettings {
    pub config: OAuthConfig,
    /// `OAUTH_JWKS_PRIVATE_JWK`, or a key of this process alone in development.
    pub key: SigningKey,
    /// `OAUTH_COOKIE_SECRET`: keys the consent form's CSRF tokens.
    pub cookie_secret: Vec<u8>,
    pub dcr: DcrPolicy,
    /// `OAUTH_CONSENT_URL_BASE`: the origin of the sign-in page, if not this server's.
    pub consent_url_base: Option<String>,
    /// Registrations allowed per client address per minute.
    pub register_per_minute: u32,
}

impl std::fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("config", &self.config)
            .field("key", &self.key)
            .field("cookie_secret", &"(set)")
            .field("dcr", &self.dcr)
            .field("consent_url_base", &self.consent_url_base)
            .field("register_per_minute", &self.register_per_minute)
            .finish()
    }
}

impl OAuthSettings {
    /// Development settings for a server at `public_url` (issuer its origin, resource
    /// `<public_url>/mcp`, anonymous registration), signing with `key`.
    pub fn development(public_url: &str, key: SigningKey, cookie_secret: Vec<u8>) -> Self {
        let origin = public_url.trim_end_matches('/');
        Self {
            config: OAuthConfig::new(origin, &format!("{origin}/mcp")),
            key,
            cookie_secret,
            dcr: DcrPolicy {
                enabled: true,
                require_iat: false,
                allow_anonymous: true,
            },
            consent_url_base: None,
            register_per_minute: 30,
        }
    }

    /// The protected-resource metadata URL of the resource (RFC 9728 §3.1: the well-known
    /// path with the resource's path appended).
    pub fn resource_metadata_url(&self) -> String {
        resource_metadata_url(&self.config.resource)
    }
}

/// `https://host/.well-known/oauth-protected-resource/<path of resource>`.
pub fn resource_metadata_url(resource: &str) -> String {
    match url::Url::parse(resource) {
        Ok(u) => {
            let origin = u.origin().ascii_serialization();
            let path = u.path().trim_end_matches('/');
            format!("{origin}/.well-known/oauth-protected-resource{path}")
        }
        Err(_) => format!("{resource}/.well-known/oauth-protected-resource"),
    }
}

/// Fetches client ID metadata documents with reqwest under the egress guard.
#[derive(Debug, Default)]
pub struct HttpFetcher;

impl MetadataFetcher for HttpFetcher {
    fn fetch<'a>(&'a self, url: &'a url::Url) -> FetchFuture<'a> {
        Box::pin(async move {
            if url.scheme() != "https" {
                return Err("only https is fetched".to_owned());
            }
            let host = url.host_str().ok_or("no host")?.to_owned();
            let port = url.port_or_known_default().unwrap_or(443);
            let addrs: Vec<SocketAddr> = tokio::time::timeout(
                FETCH_TIMEOUT,
                tokio::net::lookup_host((host.as_str(), port)),
            )
            .await
            .map_err(|_| "name resolution timed out".to_owned())?
            .map_err(|e| format!("name resolution failed: {e}"))?
            .collect();
            let Some(first) = addrs.first().copied() else {
                return Err("the name has no address".to_owned());
            };
            if addrs.iter().any(|a| !is_public(a.ip())) {
                return Err("the name resolves to a non-public address".to_owned());
            }
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(FETCH_TIMEOUT)
                .https_only(true)
                .resolve(&host, first)
                .build()
                .map_err(|e| e.to_string())?;
            let mut response = client
                .get(url.as_str())
                .header(reqwest::header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let max_age = response
                .headers()
                .get(reqwest::header::CACHE_CONTROL)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    v.split(',')
                        .filter_map(|d| d.trim().strip_prefix("max-age="))
                        .find_map(|n| n.parse().ok())
                });
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                body.extend_from_slice(&chunk);
                if body.len() > MAX_DOCUMENT_BYTES {
                    return Err("the document is larger than 5 KB".to_owned());
                }
            }
            Ok(FetchedDocument {
                status,
                body,
                max_age,
            })
        })
    }
}
