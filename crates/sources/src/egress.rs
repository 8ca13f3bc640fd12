//! Egress: the only way Breeze reaches a tool source, and the rules an attacker who controls a
//! source's URL, its DNS or its answers will try to get around.
//!
//! - **https only**, no credentials in the URL ([`Egress::check_url`]).
//! - **Public addresses only**, decided on the addresses a host name resolves to, by the
//!   resolver the HTTP client connects through ([`GuardedResolver`]): every new connection
//!   resolves again and is judged again, so a second DNS answer pointing inside (rebinding)
//!   is refused at the connection it would have made. If any address of an answer is not
//!   public the whole answer is refused, so no fallback picks the private one. An IP literal
//!   never reaches a resolver, so [`Egress::check_url`] judges it. Loopback, private, link-local
//!   (metadata at 169.254.169.254), CGNAT, unique-local and the other special ranges are refused
//!   ([`breeze_core::net::is_public`]) unless `TOOL_SOURCES_ALLOW_PRIVATE_EGRESS=true`.
//! - **No redirects**: the client follows none, and [`refuse_redirect`] turns a 3xx into an
//!   error, so no credential or body is forwarded to a location nobody approved.
//! - **No proxy from the environment**: `HTTPS_PROXY` would route around the address check.
//! - **Bounded**: a connect timeout, a per-request timeout chosen by the caller (calls and
//!   discovery differ), and answers read only up to a cap ([`read_capped`]).
//! - **Trusted roots**: the web PKI (webpki-roots) plus the roots named by a setting, which is
//!   how tests reach local https servers with a test CA rather than a weakened default.
//!
//! One client (one connection pool) serves every source; a slow source holds only its own
//! requests, each bounded by its timeout.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, future::BoxFuture};
use reqwest13 as reqwest;
use rustls::pki_types::{CertificateDer, pem::PemObject};
use url::{Host, Url};

pub use breeze_core::net::is_public;

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one tool call may take end to end.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a whole discovery may take.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest answer of one call read from a source.
pub const MAX_CALL_RESPONSE: usize = 4 * 1024 * 1024;
/// The largest OpenAPI document read.
pub const MAX_DOCUMENT: usize = 5 * 1024 * 1024;
/// The largest MCP `tools/list` page read.
pub const MAX_LIST_PAGE: usize = 8 * 1024 * 1024;

/// Why a request to a source was not made, or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error("{0:?} is not a URL: {1}")]
    NotAUrl(String, String),
    #[error("only https URLs may be reached ({0})")]
    NotHttps(String),
    #[error("a source URL may not carry a user name or password")]
    UserInfo,
    #[error("the URL has no host")]
    NoHost,
    #[error(
        "{host} resolves to {addr}, a private, loopback, link-local or otherwise non-public address; set TOOL_SOURCES_ALLOW_PRIVATE_EGRESS=true on a self-hosted deployment to allow it"
    )]
    PrivateAddress { host: String, addr: IpAddr },
    #[error("{host} could not be resolved: {why}")]
    Resolve { host: String, why: String },
    #[error(
        "the source answered with a redirect ({status}{location}); redirects are never followed"
    )]
    Redirect { status: u16, location: String },
    #[error("the answer is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the source did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the request failed: {0}")]
    Http(String),
    #[error("the extra trusted roots could not be read: {0}")]
    Roots(String),
}

/// The egress settings.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// `TOOL_SOURCES_ALLOW_PRIVATE_EGRESS`: reach private and loopback addresses too.
    pub allow_private: bool,
    /// PEM text of extra trusted root certificates (`TOOL_SOURCES_EXTRA_ROOTS` names the file).
    pub extra_roots_pem: Option<Vec<u8>>,
}

/// Looks a host name up. The system resolver by default; tests inject answers (rebinding).
pub trait Lookup: Send + Sync + 'static {
    fn lookup(&self, host: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// The resolver every connection goes through: looks the name up, then refuses the answer if
/// any address is not public (unless private egress is allowed).
#[derive(Clone)]
pub struct GuardedResolver {
    lookup: Arc<dyn Lookup>,
    allow_private: bool,
}

impl GuardedResolver {
    /// The addresses `host` may be connected to.
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, EgressError> {
        let addrs =
            self.lookup
                .lookup(host.to_owned())
                .await
                .map_err(|e| EgressError::Resolve {
                    host: host.to_owned(),
                    why: e.to_string(),
                })?;
        if addrs.is_empty() {
            return Err(EgressError::Resolve {
                host: host.to_owned(),
                why: "no addresses".into(),
            });
        }
        if !self.allow_private
            && let Some(bad) = addrs.iter().find(|a| !is_public(**a))
        {
            tracing::warn!(host, addr = %bad, "tool source egress refused a non-public address");
            return Err(EgressError::PrivateAddress {
                host: host.to_owned(),
                addr: *bad,
            });
        }
        Ok(addrs)
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = this
                .resolve(&host)
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })?;
            let addrs: reqwest::dns::Addrs =
                Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// The egress guard and its HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct Egress {
    client: reqwest::Client,
    allow_private: bool,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// The guard with the system resolver.
    pub fn new(config: &EgressConfig) -> Result<Self, EgressError> {
        Self::with_lookup(config, Arc::new(SystemLookup))
    }

    /// The guard with `lookup` answering host names.
    pub fn with_lookup(
        config: &EgressConfig,
        lookup: Arc<dyn Lookup>,
    ) -> Result<Self, EgressError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(pem) = &config.extra_roots_pem {
            let mut n = 0;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| EgressError::Roots(e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| EgressError::Roots(e.to_string()))?;
                n += 1;
            }
            if n == 0 {
                return Err(EgressError::Roots("no certificate in the file".into()));
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| EgressError::Http(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let resolver = GuardedResolver {
            lookup,
            allow_private: config.allow_private,
        };
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(resolver)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("Breeze-ToolSources/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| EgressError::Http(e.to_string()))?;
        Ok(Self {
            client,
            allow_private: config.allow_private,
        })
    }

    /// The guarded client: https only, no redirects, no proxy, every connection's addresses
    /// judged. Give every request a timeout.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Checks a URL before anything is sent to it: https, a host, no user info, and an IP
    /// literal host must be public (a literal never reaches the resolver).
    pub fn check_url(&self, text: &str) -> Result<Url, EgressError> {
        let url = Url::parse(text).map_err(|e| EgressError::NotAUrl(text.into(), e.to_string()))?;
        if url.scheme() != "https" {
            return Err(EgressError::NotHttps(url.scheme().to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressError::UserInfo);
        }
        let literal = match url.host() {
            None => return Err(EgressError::NoHost),
            Some(Host::Domain(_)) => None,
            Some(Host::Ipv4(a)) => Some(IpAddr::V4(a)),
            Some(Host::Ipv6(a)) => Some(IpAddr::V6(a)),
        };
        if let Some(addr) = literal
            && !self.allow_private
            && !is_public(addr)
        {
            return Err(EgressError::PrivateAddress {
                host: url.host_str().unwrap_or_default().to_owned(),
                addr,
            });
        }
        Ok(url)
    }
}

/// Whether `a` and `b` share an origin (scheme, host, port): the only case where a credential
/// meant for `a` may go to `b`.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.origin() == b.origin()
}

/// A 3xx answer as an error (nothing is followed); any other answer passes.
pub fn refuse_redirect(response: &reqwest::Response) -> Result<(), EgressError> {
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(|l| format!(" to {}", l.chars().take(200).collect::<String>()))
            .unwrap_or_default();
        return Err(EgressError::Redirect {
            status: status.as_u16(),
            location,
        });
    }
    Ok(())
}

/// Reads an answer's body, failing as soon as it passes `limit` bytes (a declared length over
/// it fails before reading anything).
pub async fn read_capped(
    response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, EgressError> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(EgressError::TooLarge { limit });
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| http_error(&e))?;
        if body.len() + chunk.len() > limit {
            return Err(EgressError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A client error as an egress error, naming the egress rule when one refused the connection.
pub fn http_error(e: &reqwest::Error) -> EgressError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(egress) = s.downcast_ref::<EgressError>() {
            return egress.clone();
        }
        source = s.source();
    }
    if e.is_timeout() {
        return EgressError::Timeout(CALL_TIMEOUT);
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    EgressError::Http(text)
}
