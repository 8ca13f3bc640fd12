//! MCP sources: discovery (initialize, every `tools/list` page) and calls, over Streamable
//! HTTP with rmcp's client, whose HTTP client is the egress guard's ([`Egress::client`]), so
//! every rule there — https, public addresses per connection, no redirects, no proxy — holds
//! for every request rmcp makes. Bounded: the whole operation by a timeout, each JSON answer
//! and SSE event by a size, the listing by a page and tool count (a server that lists without
//! end fails, it does not hang or fill memory).
//!
//! Calls run in upstream sessions kept open between calls ([`Sessions`]): one
//! `initialize` handshake per organization, source and credential instead of one per call,
//! which would triple the round trips every external call adds. A session the upstream forgot
//! (HTTP 404) is reopened and the refused request sent again: a 404 means it was not
//! processed, so nothing runs twice. A session whose transport failed is dropped, so the next
//! call starts a fresh one.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    RoleClient, ServiceError, ServiceExt,
    model::{CallToolRequestParams, PaginatedRequestParams},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use url::Url;

use crate::{
    auth::Headers,
    egress::{self, Egress},
    model::{Discovered, Hints, proposed_tier_mcp},
};

/// The most tools one source may list; over it, discovery fails whole.
pub const MAX_TOOLS: usize = 2_000;
/// The most `tools/list` pages read.
pub const MAX_PAGES: usize = 200;

/// Why discovery or a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error("{0}")]
    Egress(#[from] egress::EgressError),
    #[error("the MCP session could not start: {0}")]
    Initialize(String),
    #[error("tools/list failed: {0}")]
    List(String),
    #[error("the server lists more than {MAX_TOOLS} tools; nothing was imported")]
    TooManyTools,
    #[error("the server's tool list did not end after {MAX_PAGES} pages; nothing was imported")]
    TooManyPages,
    #[error("the server lists the tool {0:?} twice")]
    Duplicate(String),
    #[error("the call failed: {0}")]
    Call(String),
    #[error("the source did not answer within {0:?}")]
    Timeout(Duration),
}

fn transport(
    egress: &Egress,
    url: &Url,
    headers: Headers,
    max_answer: usize,
) -> StreamableHttpClientTransport<reqwest13::Client> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    config.custom_headers = headers.into_iter().collect::<HashMap<_, _>>();
    config.max_json_response_size = max_answer;
    config.max_sse_event_size = max_answer;
    config.max_error_response_size = 16 * 1024;
    // A 404 for our session means the upstream did not process the request: rmcp opens a new
    // session with the same handshake and sends that request once more.
    config.reinit_on_expired_session = true;
    StreamableHttpClientTransport::with_client(egress.client().clone(), config)
}

/// Every tool the MCP server at `url` lists, with the tier its annotations propose, within
/// `timeout` (normally [`egress::DISCOVERY_TIMEOUT`]).
pub async fn discover(
    egress: &Egress,
    url: &Url,
    headers: Headers,
    timeout: Duration,
) -> Result<Vec<Discovered>, McpError> {
    egress.check_url(url.as_str())?;
    let work = async {
        let client =
            ().serve(transport(egress, url, headers, egress::MAX_LIST_PAGE))
                .await
                .map_err(|e| McpError::Initialize(e.to_string()))?;
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let page = client
                .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                .await
                .map_err(|e| McpError::List(e.to_string()))?;
            tools.extend(page.tools);
            if tools.len() > MAX_TOOLS {
                return Err(McpError::TooManyTools);
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                let _ = client.cancel().await;
                return Ok(tools);
            }
        }
        Err(McpError::TooManyPages)
    };
    let tools = tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| McpError::Timeout(timeout))??;
    let mut seen = std::collections::BTreeSet::new();
    tools
        .into_iter()
        .map(|t| {
            if !seen.insert(t.name.to_string()) {
                return Err(McpError::Duplicate(t.name.to_string()));
            }
            let hints = t.annotations.as_ref().map_or(Hints::default(), |a| Hints {
                read_only: a.read_only_hint,
                destructive: a.destructive_hint,
            });
            Ok(Discovered {
                name: t.name.to_string(),
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*t.input_schema).clone()),
                output_schema: t.output_schema.map(|s| Value::Object((*s).clone())),
                annotations: t
                    .annotations
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok())
                    .unwrap_or(Value::Null),
                proposed_tier: proposed_tier_mcp(hints),
                call_plan: Value::Null,
            })
        })
        .collect()
}

/// What an upstream call answered: its `CallToolResult` as JSON, and whether the upstream
/// called it an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub result: Value,
    pub is_error: bool,
}

/// How long an unused upstream session stays open.
pub const SESSION_IDLE: Duration = Duration::from_secs(300);
/// The most upstream sessions kept open; past it the least recently used is closed.
pub const MAX_SESSIONS: usize = 512;

type Client = RunningService<RoleClient, ()>;

struct Pooled {
    /// A hash of the URL and headers the session was opened with: a rotated credential or a
    /// moved source opens a new session rather than reusing one opened with the old.
    fingerprint: [u8; 32],
    client: Arc<Client>,
    last_used: Instant,
}

/// The upstream sessions of MCP sources, kept open between calls. Cheap to clone; clones
/// share the sessions.
///
/// A session is keyed by the caller's choice of scope (the service uses organization and
/// source, so whatever state an upstream keeps per session never crosses organizations) and
/// bound to the URL and headers it was opened with.
#[derive(Clone)]
pub struct Sessions {
    open: Arc<Mutex<HashMap<String, Pooled>>>,
    idle: Duration,
    max: usize,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new(SESSION_IDLE, MAX_SESSIONS)
    }
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("open", &self.len())
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// Sessions unused for `idle` are closed, and at most `max` are kept.
    pub fn new(idle: Duration, max: usize) -> Self {
        Self {
            open: Arc::default(),
            idle,
            max: max.max(1),
        }
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pooled>> {
        // A panic while the map was held leaves no half-made entry: every change is one
        // insert or remove.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The open session of `key` opened with `fingerprint`, if it is still alive; closes
    /// idle ones on the way.
    fn take(&self, key: &str, fingerprint: &[u8; 32]) -> Option<Arc<Client>> {
        let now = Instant::now();
        let mut open = self.lock();
        open.retain(|_, p| now.duration_since(p.last_used) < self.idle && !p.client.is_closed());
        let p = open.get_mut(key)?;
        if &p.fingerprint != fingerprint {
            open.remove(key);
            return None;
        }
        p.last_used = now;
        Some(p.client.clone())
    }

    /// Keeps `client` as `key`'s session, unless a concurrent call kept one first (then that
    /// one is answered and `client` is closed when its call ends).
    fn keep(&self, key: &str, fingerprint: [u8; 32], client: Arc<Client>) -> Arc<Client> {
        let mut open = self.lock();
        if let Some(p) = open.get(key)
            && p.fingerprint == fingerprint
            && !p.client.is_closed()
        {
            return p.client.clone();
        }
        if open.len() >= self.max
            && !open.contains_key(key)
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, p)| p.last_used)
                .map(|(k, _)| k.clone())
        {
            open.remove(&oldest);
        }
        open.insert(
            key.to_owned(),
            Pooled {
                fingerprint,
                client: client.clone(),
                last_used: Instant::now(),
            },
        );
        client
    }

    fn drop_session(&self, key: &str, client: &Arc<Client>) {
        let mut open = self.lock();
        if open
            .get(key)
            .is_some_and(|p| Arc::ptr_eq(&p.client, client))
        {
            open.remove(key);
        }
    }

    /// Calls `name` with `arguments` on the server at `url`, in `key`'s session (opened if
    /// there is none), within `timeout`, which covers opening it.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        key: &str,
        egress: &Egress,
        url: &Url,
        headers: Headers,
        name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<Answer, McpError> {
        egress.check_url(url.as_str())?;
        let arguments = match arguments {
            Value::Object(m) => Some(m),
            Value::Null => None,
            other => {
                return Err(McpError::Call(format!(
                    "arguments must be an object, not {other}"
                )));
            }
        };
        let fingerprint = fingerprint(url, &headers);
        let work = async {
            let client = match self.take(key, &fingerprint) {
                Some(c) => c,
                None => {
                    let c =
                        ().serve(transport(egress, url, headers, egress::MAX_CALL_RESPONSE))
                            .await
                            .map_err(|e| McpError::Initialize(e.to_string()))?;
                    self.keep(key, fingerprint, Arc::new(c))
                }
            };
            let mut params = CallToolRequestParams::new(name.to_owned());
            params.arguments = arguments;
            let result = match client.call_tool(params).await {
                Ok(r) => r,
                Err(e) => {
                    // The upstream's JSON-RPC error leaves the session sound; any other
                    // failure is the transport's, and the session is not trusted again.
                    if !matches!(e, ServiceError::McpError(_)) {
                        self.drop_session(key, &client);
                    }
                    return Err(McpError::Call(e.to_string()));
                }
            };
            let is_error = result.is_error == Some(true);
            let value =
                serde_json::to_value(&result).unwrap_or_else(|e| json!({"error": e.to_string()}));
            Ok(Answer {
                result: value,
                is_error,
            })
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| McpError::Timeout(timeout))?
    }
}

/// A hash of where and how a session was opened; headers carry the credential, so only the
/// hash is kept beside the session.
fn fingerprint(url: &Url, headers: &Headers) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(url.as_str().as_bytes());
    for (name, value) in headers {
        h.update([0]);
        h.update(name.as_str().as_bytes());
        h.update([0]);
        h.update(value.as_bytes());
    }
    h.finalize().into()
}
