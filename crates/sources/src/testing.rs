//! Local upstreams for tests (feature `testing`): a certificate authority made per test, an
//! https server on a loopback port serving any axum router with it, and MCP servers — a
//! well-behaved one and a hostile one — written as plain JSON-RPC handlers so that a test can
//! make them misbehave exactly. Tests reach them through an [`Egress`] that trusts the test
//! CA and allows private egress, never through a weakened default.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use hyper_util::{rt::TokioExecutor, server::conn::auto, service::TowerToHyperService};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::egress::{Egress, EgressConfig};

/// A certificate authority of one test, and a server certificate it signed for `localhost`
/// and 127.0.0.1.
pub struct TestCa {
    pub ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

impl TestCa {
    pub fn new() -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "Breeze test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("ca");
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("params")
            .signed_by(&leaf_key, &ca_cert, &ca_key)
            .expect("leaf");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .expect("server config");
        Self {
            ca_pem: ca_cert.pem(),
            server: Arc::new(server),
        }
    }

    /// An egress that trusts this CA and reaches loopback (as
    /// `TOOL_SOURCES_ALLOW_PRIVATE_EGRESS=true` with `TOOL_SOURCES_EXTRA_ROOTS` would).
    pub fn egress(&self) -> Egress {
        Egress::new(&self.config(true)).expect("egress")
    }

    /// The egress settings naming this CA.
    pub fn config(&self, allow_private: bool) -> EgressConfig {
        EgressConfig {
            allow_private,
            extra_roots_pem: Some(self.ca_pem.clone().into_bytes()),
        }
    }

    /// Serves `router` over https on a loopback port until the test ends. With
    /// `keep_alive: false` every answer closes its connection (each request connects anew).
    pub async fn serve(&self, router: Router, keep_alive: bool) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let acceptor = tokio_rustls::TlsAcceptor::from(self.server.clone());
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, router) = (acceptor.clone(), router.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    builder.http1().keep_alive(keep_alive);
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let _ = builder
                        .serve_connection(io, TowerToHyperService::new(router))
                        .await;
                });
            }
        });
        addr
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

/// How the test MCP server behaves.
#[derive(Debug, Clone, PartialEq)]
pub enum Behavior {
    /// Lists `tools` in pages of `page`, answers calls by echoing their arguments.
    WellBehaved,
    /// Answers every POST with a redirect to its own `/mcp`.
    Redirect,
    /// Answers `tools/list` with this many bytes of JSON (streamed).
    Huge(usize),
    /// Never answers `tools/list` or `tools/call`.
    Hang,
    /// Answers `tools/list` with text that is no JSON-RPC.
    InvalidJsonRpc,
    /// Lists a cursor that never ends.
    EndlessCursor,
}

/// What a test MCP server is and saw.
pub struct McpServer {
    pub tools: Mutex<Vec<Value>>,
    pub page: usize,
    pub behavior: Mutex<Behavior>,
    /// The `Authorization` (or `x-api-key`) value it demands, if any.
    pub require: Option<(String, String)>,
    /// Requests to `/mcp`, and calls of tools, it received.
    pub hits: AtomicUsize,
    pub calls: Mutex<Vec<(String, Value)>>,
    /// Every header set it received, to prove what was (not) sent.
    pub headers: Mutex<Vec<HeaderMap>>,
    /// `initialize` handshakes it answered; each opened a session.
    pub initializes: AtomicUsize,
    /// The sessions it knows; a request naming another is answered 404, as the spec says.
    pub sessions: Mutex<std::collections::HashSet<String>>,
}

impl McpServer {
    pub fn new(tools: Vec<Value>) -> Arc<Self> {
        Arc::new(Self {
            tools: Mutex::new(tools),
            page: 2,
            behavior: Mutex::new(Behavior::WellBehaved),
            require: None,
            hits: AtomicUsize::new(0),
            calls: Mutex::new(Vec::new()),
            headers: Mutex::new(Vec::new()),
            initializes: AtomicUsize::new(0),
            sessions: Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// Forgets every session, as a restarted server would.
    pub fn forget_sessions(&self) {
        self.sessions.lock().expect("lock").clear();
    }

    pub fn requiring(tools: Vec<Value>, header: &str, value: &str) -> Arc<Self> {
        let mut s = Self::new(tools);
        if let Some(s) = Arc::get_mut(&mut s) {
            s.require = Some((header.to_owned(), value.to_owned()));
        }
        s
    }

    pub fn set(&self, b: Behavior) {
        *self.behavior.lock().expect("lock") = b;
    }

    /// The router: `POST /mcp` (JSON-RPC), `POST /token` (OAuth2 client credentials for
    /// `client:secret`), `POST /elsewhere` (counts, for redirect tests).
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route(
                "/mcp",
                post(mcp).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
            )
            .route("/token", post(token))
            .with_state(self.clone())
    }
}

/// A tool definition as `tools/list` carries it.
pub fn tool(name: &str, description: &str, read_only: bool) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "annotations": {"readOnlyHint": read_only, "destructiveHint": !read_only},
    })
}

async fn token(headers: HeaderMap) -> Response {
    // client:secret
    let ok = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some("Basic Y2xpZW50OnNlY3JldA==");
    if !ok {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    Json(json!({"access_token": "minted-token", "token_type": "Bearer", "expires_in": 3600}))
        .into_response()
}

fn reply(id: &Value, result: Value) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

async fn mcp(State(s): State<Arc<McpServer>>, headers: HeaderMap, body: String) -> Response {
    s.hits.fetch_add(1, Ordering::SeqCst);
    s.headers.lock().expect("lock").push(headers.clone());
    if let Some((name, value)) = &s.require {
        let got = headers.get(name.as_str()).and_then(|v| v.to_str().ok());
        if got != Some(value.as_str()) {
            return (StatusCode::UNAUTHORIZED, "unauthorized").into_response();
        }
    }
    let behavior = s.behavior.lock().expect("lock").clone();
    if behavior == Behavior::Redirect {
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, "https://localhost/elsewhere")],
        )
            .into_response();
    }
    let Ok(msg) = serde_json::from_str::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let id = msg["id"].clone();
    let method = msg["method"].as_str().unwrap_or_default();
    if method != "initialize"
        && let Some(session) = headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
        && !s.sessions.lock().expect("lock").contains(session)
    {
        return (StatusCode::NOT_FOUND, "no such session").into_response();
    }
    match method {
        "initialize" => {
            let n = s.initializes.fetch_add(1, Ordering::SeqCst);
            let session = format!("session-{n}");
            s.sessions.lock().expect("lock").insert(session.clone());
            let mut r = reply(
                &id,
                json!({
                    "protocolVersion": msg["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "test-upstream", "version": "1"},
                }),
            );
            if let Ok(v) = session.parse() {
                r.headers_mut().insert("mcp-session-id", v);
            }
            r
        }
        "notifications/initialized" | "notifications/cancelled" => {
            StatusCode::ACCEPTED.into_response()
        }
        "tools/list" => match behavior {
            Behavior::Huge(bytes) => huge(&id, bytes),
            Behavior::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                StatusCode::OK.into_response()
            }
            Behavior::InvalidJsonRpc => (
                [(header::CONTENT_TYPE, "application/json")],
                "{\"hello\": \"not json-rpc\"}",
            )
                .into_response(),
            Behavior::EndlessCursor => {
                let n: u64 = msg["params"]["cursor"]
                    .as_str()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                reply(
                    &id,
                    json!({"tools": [], "nextCursor": (n + 1).to_string()}),
                )
            }
            _ => {
                let tools = s.tools.lock().expect("lock").clone();
                let start: usize = msg["params"]["cursor"]
                    .as_str()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let end = (start + s.page).min(tools.len());
                let mut result = json!({"tools": tools.get(start..end).unwrap_or_default()});
                if end < tools.len() {
                    result["nextCursor"] = json!(end.to_string());
                }
                reply(&id, result)
            }
        },
        "tools/call" => {
            if behavior == Behavior::Hang {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            let name = msg["params"]["name"].as_str().unwrap_or_default().to_owned();
            let args = msg["params"]["arguments"].clone();
            s.calls.lock().expect("lock").push((name.clone(), args.clone()));
            if name == "fails" {
                return reply(
                    &id,
                    json!({"content": [{"type": "text", "text": "upstream says no"}], "isError": true}),
                );
            }
            reply(
                &id,
                json!({
                    "content": [{"type": "text", "text": format!("{name} ran")}],
                    "structuredContent": {"tool": name, "arguments": args},
                }),
            )
        }
        _ => Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}))
            .into_response(),
    }
}

/// A `tools/list` answer of about `bytes` bytes, streamed in 64 KiB chunks.
fn huge(id: &Value, bytes: usize) -> Response {
    let head = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"tools\":[],\"pad\":\"");
    let chunk = "x".repeat(64 * 1024);
    let n = bytes / chunk.len();
    let parts = std::iter::once(head)
        .chain(std::iter::repeat_n(chunk, n))
        .chain(std::iter::once("\"}}".to_owned()))
        .map(Ok::<_, std::io::Error>);
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(futures::stream::iter(parts)),
    )
        .into_response()
}
