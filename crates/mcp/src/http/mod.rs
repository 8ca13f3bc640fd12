//! HTTP transports over axum: Streamable HTTP (`/mcp`, `/api/v1/mcp`) and the legacy HTTP+SSE
//! pair (`/api/v1/mcp/sse`, `/api/v1/mcp/message`), with the checks every request passes —
//! origin, authentication, the per-credential rate limit, the body limit — in that order.
//! Every message of a batch counts against the rate limit, not the batch once.
//!
//! Every refusal leaves one log line with the request's id (info; warn for 5xx), and every
//! refusal of an authenticated request is also handed to [`McpApp::record_transport`]
//! (`refused`), as are the requests that carry no JSON-RPC request (DELETE, streams opened)
//! and sessions ended to make room: with the engine's own [`crate::RequestRecord`]s, every
//! authenticated request is observed once.

mod legacy;
mod streamable;
#[cfg(test)]
mod streamable_tests;

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    Router,
    body::{Body, Bytes},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use crate::{
    Engine,
    app::{Client, HttpError, McpApp, Transport, TransportEvent, TransportRecord},
    engine::id_text,
    jsonrpc::Reply,
    session::{BUSY_RETRY_AFTER, Evicted, Session, SessionError, SessionLimit, SessionLimits},
};

/// The header carrying the session id on Streamable HTTP.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The header carrying the negotiated revision on Streamable HTTP.
pub const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// Where the transports are mounted.
#[derive(Debug, Clone)]
pub struct Routes {
    pub streamable: Vec<&'static str>,
    pub legacy_sse: &'static str,
    pub legacy_message: &'static str,
}

impl Default for Routes {
    fn default() -> Self {
        Self {
            streamable: vec!["/mcp", "/api/v1/mcp"],
            legacy_sse: "/api/v1/mcp/sse",
            legacy_message: "/api/v1/mcp/message",
        }
    }
}

/// The MCP routes for `engine`.
pub fn router<A: McpApp>(engine: Arc<Engine<A>>, routes: &Routes) -> Router {
    let mut r = Router::new();
    for path in &routes.streamable {
        let endpoint = || {
            post(streamable::post::<A>)
                .get(streamable::get::<A>)
                .delete(streamable::delete::<A>)
        };
        // Clients and their users write the endpoint with a trailing slash as often as
        // without: both are the endpoint.
        r = r
            .route(path, endpoint())
            .route(&format!("{path}/"), endpoint());
    }
    r.route(routes.legacy_sse, get(legacy::open::<A>))
        .route(routes.legacy_message, post(legacy::message::<A>))
        .with_state(engine)
}

/// Why a request was refused, kept on the refusal's response for its record and log line.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    message: String,
    rate_limited: bool,
}

/// A JSON-RPC error sent as an HTTP response (transport-level refusals).
pub(crate) fn rpc_error(status: StatusCode, code: i32, message: &str) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": Value::Null, "error": { "code": code, "message": message } });
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    response.extensions_mut().insert(Refusal {
        message: message.to_owned(),
        rate_limited: false,
    });
    response
}

/// A JSON-RPC error reply (a message that could not be parsed or is not valid) as a 400.
pub(crate) fn bad_message(reply: &Reply) -> Response {
    let mut response = json_response(StatusCode::BAD_REQUEST, reply.to_bytes(), &[]);
    if let Err(e) = &reply.outcome {
        response.extensions_mut().insert(Refusal {
            message: e.message.clone(),
            rate_limited: false,
        });
    }
    response
}

/// A 400 carrying a JSON-RPC error `body` whose message is `message`.
pub(crate) fn bad_request(body: &Value, message: String) -> Response {
    let mut response = json_response(StatusCode::BAD_REQUEST, body.to_string().into_bytes(), &[]);
    response.extensions_mut().insert(Refusal {
        message,
        rate_limited: false,
    });
    response
}

/// The request's id (see [`crate::EngineConfig::request_id_header`]).
pub(crate) fn request_id<A: McpApp>(
    engine: &Engine<A>,
    headers: &HeaderMap,
) -> Option<HeaderValue> {
    let name = engine.config.request_id_header.as_ref()?;
    headers.get(name).cloned()
}

/// The refusal's log line: one per refused request, at the default level.
fn log_refusal(request_id: Option<&HeaderValue>, response: &Response) {
    let status = response.status();
    let reason = response.extensions().get::<Refusal>().map_or_else(
        || status.canonical_reason().unwrap_or(""),
        |r| r.message.as_str(),
    );
    let request_id = id_text(request_id);
    if status.is_server_error() {
        tracing::warn!(
            request_id,
            status = status.as_u16(),
            reason,
            "MCP request refused"
        );
    } else {
        tracing::info!(
            request_id,
            status = status.as_u16(),
            reason,
            "MCP request refused"
        );
    }
}

/// Logs and records the refusal of an authenticated request, and returns it.
pub(crate) async fn refused<A: McpApp>(
    engine: &Engine<A>,
    client: &Client<A::Principal>,
    request_id: Option<&HeaderValue>,
    transport: Transport,
    response: Response,
) -> Response {
    log_refusal(request_id, &response);
    let status = response.status();
    let (message, rate_limited) = response.extensions().get::<Refusal>().map_or_else(
        || (status.canonical_reason().unwrap_or(""), false),
        |r| (r.message.as_str(), r.rate_limited),
    );
    engine
        .app
        .record_transport(TransportRecord {
            client,
            event: TransportEvent::Refused {
                status,
                message,
                rate_limited,
            },
            session_id: None,
            transport,
            request_id: id_text(request_id),
        })
        .await;
    response
}

/// Records a successful request that carried no JSON-RPC request (DELETE, a stream opened).
pub(crate) async fn observed<A: McpApp>(
    engine: &Engine<A>,
    client: &Client<A::Principal>,
    request_id: Option<&HeaderValue>,
    transport: Transport,
    session_id: &str,
    event: TransportEvent<'_>,
) {
    engine
        .app
        .record_transport(TransportRecord {
            client,
            event,
            session_id: Some(session_id),
            transport,
            request_id: id_text(request_id),
        })
        .await;
}

/// Logs and records a session ended to make room for the client's new one.
pub(crate) async fn evicted<A: McpApp>(
    engine: &Engine<A>,
    client: &Client<A::Principal>,
    request_id: Option<&HeaderValue>,
    transport: Transport,
    evicted: &Evicted,
) {
    tracing::info!(
        request_id = id_text(request_id),
        session_id = %evicted.id,
        cap = evicted.cap.as_str(),
        "ended the least recently used idle MCP session to make room"
    );
    engine
        .app
        .record_transport(TransportRecord {
            client,
            event: TransportEvent::SessionEvicted {
                session_id: &evicted.id,
                owner: &evicted.owner,
                cap: evicted.cap,
            },
            session_id: Some(&evicted.id),
            transport,
            request_id: id_text(request_id),
        })
        .await;
}

/// The answer when no session could be made room for: every one in the full scope is busy.
pub(crate) fn session_limit_response(limit: SessionLimit, limits: &SessionLimits) -> Response {
    let status = match limit {
        SessionLimit::ServerWide => StatusCode::SERVICE_UNAVAILABLE,
        SessionLimit::PerTenant | SessionLimit::PerKey => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut response = rpc_error(status, SERVER_ERROR, &limit.refusal(limits));
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(BUSY_RETRY_AFTER.as_secs()),
    );
    response
}

/// The answer when no session could be created or looked up: a full cap, or the cluster's
/// session store out of reach (503 whatever the environment: sessions live there).
pub(crate) fn session_error_response(e: SessionError, limits: &SessionLimits) -> Response {
    match e {
        SessionError::Full(limit) => session_limit_response(limit, limits),
        SessionError::Unavailable(why) => {
            tracing::error!(error = %why, "MCP session store unavailable; refusing");
            let mut response = rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                SERVER_ERROR,
                "Service temporarily unavailable: the session store cannot be reached",
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

/// The session `id` of `client` (see [`Engine::find_session`]); a store that cannot answer is
/// the ready refusal.
pub(crate) async fn find_session<A: McpApp>(
    engine: &Engine<A>,
    id: &str,
    client: &Client<A::Principal>,
) -> Result<Option<Arc<Session>>, Response> {
    engine
        .find_session(id, client)
        .await
        .map_err(|e| session_error_response(e, &engine.config.sessions))
}

/// The answer to a new session while the instance drains for shutdown: 503, retry at once
/// (elsewhere, behind a load balancer).
pub(crate) fn draining_response() -> Response {
    let mut response = rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        SERVER_ERROR,
        "this server is shutting down; retry",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// How soon a client whose stream ended at shutdown should reconnect (the SSE `retry:` field).
pub(crate) const SHUTDOWN_RETRY: Duration = Duration::from_millis(500);

/// `events` until `draining` is cancelled, then one event carrying only `retry:` (the reconnect
/// hint of the SSE specification) and the end of the stream.
pub(crate) fn until_drained<S>(
    events: S,
    draining: tokio_util::sync::CancellationToken,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    let hint = draining.clone();
    events.take_until(draining.cancelled_owned()).chain(
        futures::stream::once(async move { hint.is_cancelled() }).filter_map(
            |drained| async move {
                drained.then(|| {
                    Ok(Event::default()
                        .retry(SHUTDOWN_RETRY)
                        .comment("shutting down"))
                })
            },
        ),
    )
}

/// JSON-RPC code for transport refusals (rate limits, caps, availability).
pub(crate) const SERVER_ERROR: i32 = crate::jsonrpc::codes::SERVER_ERROR;
/// JSON-RPC code for authentication refusals.
pub(crate) const AUTH_ERROR: i32 = crate::jsonrpc::codes::UNAUTHORIZED;

impl HttpError {
    pub(crate) fn into_response(self) -> Response {
        self.into_refusal(false)
    }

    fn into_refusal(self, rate_limited: bool) -> Response {
        let code = match self.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => AUTH_ERROR,
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST => {
                crate::jsonrpc::INVALID_REQUEST
            }
            _ => SERVER_ERROR,
        };
        let mut response = rpc_error(self.status, code, &self.message);
        if let Some(r) = response.extensions_mut().get_mut::<Refusal>() {
            r.rate_limited = rate_limited;
        }
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

/// The checks before a body is read: origin, authentication, the stream permission (for
/// streams), the rate limit of `kind`. Every refusal is logged; those of an authenticated
/// client are recorded too.
pub(crate) async fn admit<A: McpApp>(
    engine: &Engine<A>,
    headers: &HeaderMap,
    query: Option<&str>,
    kind: LimitKind,
    request_id: Option<&HeaderValue>,
    transport: Transport,
) -> Result<Client<A::Principal>, Response> {
    let unauthenticated = |e: HttpError| {
        let response = e.into_response();
        log_refusal(request_id, &response);
        response
    };
    check_origin(&engine.config, headers).map_err(unauthenticated)?;
    let client = engine
        .app
        .authenticate(headers, query)
        .await
        .map_err(unauthenticated)?;
    let checked = match kind {
        LimitKind::Stream => engine
            .app
            .authorize_stream(&client)
            .map_err(HttpError::into_response),
        LimitKind::Message => Ok(()),
    };
    let checked = match checked {
        Ok(()) => rate_limit(engine, &client, kind, 1).await,
        Err(r) => Err(r),
    };
    match checked {
        Ok(()) => Ok(client),
        Err(r) => Err(refused(engine, &client, request_id, transport, r).await),
    }
}

/// The application's [`McpApp::screen`] of every request in a POST's body, before any is
/// dispatched: its first refusal refuses the whole POST.
pub(crate) fn screen<A: McpApp>(
    engine: &Engine<A>,
    client: &Client<A::Principal>,
    incoming: &crate::jsonrpc::Incoming,
) -> Result<(), Response> {
    use crate::jsonrpc::{Incoming, Message};
    let requests: Vec<&crate::jsonrpc::Request> = match incoming {
        Incoming::Single(Ok(Message::Request(r))) => vec![r],
        Incoming::Batch(items) => items
            .iter()
            .filter_map(|m| match m {
                Ok(Message::Request(r)) => Some(r),
                _ => None,
            })
            .collect(),
        Incoming::Single(_) => Vec::new(),
    };
    for r in requests {
        engine
            .app
            .screen(client, r)
            .map_err(HttpError::into_response)?;
    }
    Ok(())
}

/// A request on `session` must make the choice the session was created with (see
/// [`Client::binding`]): refused with 400 otherwise, naming both.
pub(crate) fn check_binding<P>(session: &Session, client: &Client<P>) -> Result<(), Response> {
    let kept = session.binding();
    if kept == client.binding {
        return Ok(());
    }
    let name = |b: &Option<Arc<str>>| b.as_deref().unwrap_or("none").to_owned();
    Err(rpc_error(
        StatusCode::BAD_REQUEST,
        crate::jsonrpc::INVALID_REQUEST,
        &format!(
            "This session was opened with {}; this request asks for {}. A session keeps what its initialize chose: send the same choice on every request of the session, or open a new session",
            name(&kept),
            name(&client.binding)
        ),
    ))
}

/// Which transport limit a request counts against.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LimitKind {
    Stream,
    Message,
}

/// Counts `n` messages (or stream openings) against the client's limit of `kind`, one check
/// each: a batch stops at its first refused message (so at most the limit's worth of checks),
/// and is refused whole. The messages counted before that stay counted: they were sent.
pub(crate) async fn rate_limit<A: McpApp>(
    engine: &Engine<A>,
    client: &Client<A::Principal>,
    kind: LimitKind,
    n: usize,
) -> Result<(), Response> {
    let (bucket, limit) = match kind {
        LimitKind::Stream => ("sse", engine.config.sse_rate_per_minute),
        LimitKind::Message => ("msg", engine.config.message_rate_per_minute),
    };
    let key = format!("mcp:{bucket}:{}", client.key);
    for _ in 0..n {
        match engine
            .limiter
            .check(&key, limit, Duration::from_secs(60))
            .await
        {
            Ok(d) if d.allowed => {}
            Ok(d) => {
                return Err(
                    HttpError::new(StatusCode::TOO_MANY_REQUESTS, "Rate limit exceeded")
                        .header(header::RETRY_AFTER, HeaderValue::from(d.retry_after_secs()))
                        .into_refusal(true),
                );
            }
            Err(e) if engine.config.fail_closed => {
                tracing::error!(error = %e, "rate limiter unavailable; refusing (fail closed)");
                return Err(HttpError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Service temporarily unavailable",
                )
                .into_response());
            }
            Err(e) => {
                tracing::warn!(error = %e, "rate limiter unavailable; allowing (development)");
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Refuses browser origins that are not allowed (DNS-rebinding protection). Requests without
/// an `Origin` header (non-browser clients) pass.
fn check_origin(config: &crate::EngineConfig, headers: &HeaderMap) -> Result<(), HttpError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or_default().trim_end_matches('/');
    let public = origin_of(&config.public_base_url);
    let allowed = origin == public
        || config
            .allowed_origins
            .iter()
            .any(|o| o.trim_end_matches('/') == origin)
        || (config.allow_localhost_origins && is_localhost_origin(origin));
    if allowed {
        Ok(())
    } else {
        Err(HttpError::new(
            StatusCode::FORBIDDEN,
            format!("Origin {origin:?} is not allowed"),
        ))
    }
}

fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

fn is_localhost_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = rest.rsplit_once(':').map_or(rest, |(h, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            rest
        }
    });
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// Reads a body of at most `limit` bytes; a larger one is refused before parsing.
pub(crate) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, Response> {
    let too_large = || {
        rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            crate::jsonrpc::INVALID_REQUEST,
            &format!(
                "Request body too large: the limit is {limit} bytes (MCP_MESSAGE_MAX_BODY_BYTES)"
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large())
}

/// Whether the client accepts a `text/event-stream` answer.
pub(crate) fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// A JSON response with the given extra headers.
pub(crate) fn json_response(
    status: StatusCode,
    body: Vec<u8>,
    extra: &[(HeaderName, HeaderValue)],
) -> Response {
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    for (k, v) in extra {
        r.headers_mut().insert(k.clone(), v.clone());
    }
    r
}

/// An SSE response with keep-alive events; the headers ask proxies not to buffer it, since a
/// buffered stream delays requests to the client until the stream ends.
pub(crate) fn sse_body(
    events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
    keepalive: Duration,
) -> Response {
    let mut r = Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(keepalive)
                .event(Event::default().event("ping").data("")),
        )
        .into_response();
    let headers = r.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_origins() {
        for ok in [
            "http://localhost",
            "http://localhost:6274",
            "http://127.0.0.1:3000",
            "http://[::1]:80",
        ] {
            assert!(is_localhost_origin(ok), "{ok}");
        }
        for bad in [
            "http://localhost.evil.com",
            "http://evil.com",
            "null",
            "http://127.0.0.1.nip.io:3000",
        ] {
            assert!(!is_localhost_origin(bad), "{bad}");
        }
        assert_eq!(
            origin_of("https://rmm.example.com/base"),
            "https://rmm.example.com"
        );
    }
}
