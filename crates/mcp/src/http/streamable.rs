//! Streamable HTTP: one endpoint; POST carries messages (answered as JSON, or as an SSE stream
//! that ends with the answer when the client accepts one and the handler has something to say
//! before its answer, or always under [`ReplyMode::Stream`]), GET opens the session's
//! server-to-client stream, DELETE ends the session.
//!
//! 2026-07-28 requests are stateless: they name their revision in `_meta`, carry `Mcp-Method`
//! (and `Mcp-Name`) headers that must agree with the body, and never touch a session.

use std::{convert::Infallible, pin::Pin, sync::Arc};

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, request::Parts},
    response::{IntoResponse, Response, sse::Event},
};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    LimitKind, PROTOCOL_HEADER, SESSION_HEADER, accepts_sse, admit, bad_message, json_response,
    observed, rate_limit, read_body, refused, request_id, rpc_error, session_error_response,
    sse_body,
};
use crate::{
    Engine,
    app::{Client, McpApp, Peer, Transport, TransportEvent},
    engine::{CallCtx, ReplyMode},
    jsonrpc::{
        self, HEADER_MISMATCH, INVALID_REQUEST, Incoming, Message, Reply,
        UNSUPPORTED_PROTOCOL_VERSION,
    },
    protocol::{META_PROTOCOL_VERSION, ProtocolVersion},
    session::{Session, SessionKind},
};

/// Returns the refusal `$r` of the authenticated `$client`, logged and recorded.
macro_rules! refuse {
    ($engine:expr, $client:expr, $rid:expr, $r:expr) => {
        return refused(&$engine, &$client, $rid, Transport::StreamableHttp, $r).await
    };
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The revision named by the `MCP-Protocol-Version` header: `Ok(None)` when absent, an error
/// response when unsupported.
fn header_version(headers: &HeaderMap) -> Result<Option<ProtocolVersion>, Response> {
    match headers.get(PROTOCOL_HEADER) {
        None => Ok(None),
        Some(v) => {
            let raw = v.to_str().unwrap_or_default();
            ProtocolVersion::parse(raw).map(Some).ok_or_else(|| {
                rpc_error(
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    &format!(
                        "Unsupported MCP-Protocol-Version {raw:?} (supported: {})",
                        ProtocolVersion::supported_strings().join(", ")
                    ),
                )
            })
        }
    }
}

fn session_not_found() -> Response {
    rpc_error(
        StatusCode::NOT_FOUND,
        super::AUTH_ERROR,
        "Session not found",
    )
}

/// POST: one message or a batch.
pub(crate) async fn post<A: McpApp>(
    State(engine): State<Arc<Engine<A>>>,
    request: Request,
) -> Response {
    // The request taken apart rather than through the `Uri` and `HeaderMap` extractors, which
    // clone what they extract.
    let (Parts { uri, headers, .. }, body) = request.into_parts();
    let rid = request_id(&engine, &headers);
    let client = match admit(
        &engine,
        &headers,
        uri.query(),
        LimitKind::Message,
        rid.as_ref(),
        Transport::StreamableHttp,
    )
    .await
    {
        Ok(c) => c,
        Err(r) => return r,
    };
    let header_version = match header_version(&headers) {
        Ok(v) => v,
        Err(r) => refuse!(engine, client, rid.as_ref(), r),
    };
    let bytes = match read_body(body, &headers, engine.config.max_body_bytes).await {
        Ok(b) => b,
        Err(r) => refuse!(engine, client, rid.as_ref(), r),
    };
    let incoming = jsonrpc::parse(&bytes);
    if let Err(r) = super::screen(&engine, &client, &incoming) {
        refuse!(engine, client, rid.as_ref(), r);
    }
    match incoming {
        Incoming::Single(Err(reply)) => refuse!(engine, client, rid.as_ref(), bad_message(&reply)),
        Incoming::Single(Ok(message)) => {
            single(engine, client, rid, &headers, header_version, message).await
        }
        Incoming::Batch(items) => {
            // The batch's first message was counted on admission; each further one counts too.
            let more = items.len().saturating_sub(1);
            if let Err(r) = rate_limit(&engine, &client, LimitKind::Message, more).await {
                refuse!(engine, client, rid.as_ref(), r);
            }
            // Boxed: held inline, a batch's state would sit in every single message's future.
            Box::pin(batch(engine, client, rid, &headers, header_version, items)).await
        }
    }
}

/// For a request naming a revision in `_meta` (2026-07-28, stateless): that revision, or the
/// error answer when it is not a stateless revision this server speaks.
fn stateless_version(message: &Message) -> Option<Result<ProtocolVersion, Response>> {
    let Message::Request(req) = message else {
        return None;
    };
    let raw = req
        .params
        .as_ref()?
        .get("_meta")?
        .get(META_PROTOCOL_VERSION)?;
    let raw = raw.as_str().unwrap_or_default();
    Some(ProtocolVersion::parse(raw).filter(|v| v.is_stateless()).ok_or_else(|| {
        let message = format!("Unsupported protocol version {raw:?}");
        let body = json!({
            "jsonrpc": "2.0", "id": req.id,
            "error": {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": message,
                "data": { "supported": ProtocolVersion::supported_strings(), "requested": raw }
            }
        });
        super::bad_request(&body, message)
    }))
}

/// Checks `Mcp-Method` / `Mcp-Name` against the body (2026-07-28).
fn check_method_headers(headers: &HeaderMap, message: &Message) -> Result<(), Response> {
    let Message::Request(req) = message else {
        return Ok(());
    };
    let mismatch = |what: &str| {
        let message = format!("Header mismatch: {what}");
        let body = json!({
            "jsonrpc": "2.0", "id": req.id,
            "error": { "code": HEADER_MISMATCH, "message": message }
        });
        super::bad_request(&body, message)
    };
    match header_str(headers, "mcp-method") {
        Some(m) if m == req.method => {}
        Some(m) => {
            return Err(mismatch(&format!(
                "Mcp-Method {m:?} does not match method {:?}",
                req.method
            )));
        }
        None => return Err(mismatch("the Mcp-Method header is required")),
    }
    let named = match req.method.as_str() {
        "tools/call" | "prompts/get" => req.params.as_ref().and_then(|p| p.get("name")),
        "resources/read" => req.params.as_ref().and_then(|p| p.get("uri")),
        _ => None,
    };
    if let Some(name) = named.and_then(Value::as_str) {
        match header_str(headers, "mcp-name") {
            Some(h) if h == name => {}
            Some(h) => return Err(mismatch(&format!("Mcp-Name {h:?} does not match {name:?}"))),
            None => return Err(mismatch("the Mcp-Name header is required")),
        }
    }
    Ok(())
}

async fn single<A: McpApp>(
    engine: Arc<Engine<A>>,
    client: Client<A::Principal>,
    rid: Option<HeaderValue>,
    headers: &HeaderMap,
    header_version: Option<ProtocolVersion>,
    message: Message,
) -> Response {
    // Stateless revision: everything is in the request itself.
    if let Some(version) = stateless_version(&message) {
        let version = match version {
            Ok(v) => v,
            Err(r) => refuse!(engine, client, rid.as_ref(), r),
        };
        if let Err(r) = check_method_headers(headers, &message) {
            refuse!(engine, client, rid.as_ref(), r);
        }
        let sse = accepts_sse(headers);
        return answer(
            engine,
            client,
            rid,
            None,
            version,
            Transport::Stateless,
            message,
            sse,
            Vec::new(),
        )
        .await;
    }

    let is_initialize = matches!(&message, Message::Request(r) if r.method == "initialize");
    if is_initialize {
        if engine.is_draining() {
            refuse!(engine, client, rid.as_ref(), super::draining_response());
        }
        let requested = match &message {
            Message::Request(r) => r
                .params
                .as_ref()
                .and_then(|p| p.get("protocolVersion"))
                .and_then(Value::as_str),
            _ => None,
        };
        let version = ProtocolVersion::negotiate(requested);
        let session = match engine
            .open_session(&client, SessionKind::Streamable, version)
            .await
        {
            Ok((s, None)) => s,
            Ok((s, Some(e))) => {
                super::evicted(
                    &engine,
                    &client,
                    rid.as_ref(),
                    Transport::StreamableHttp,
                    &e,
                )
                .await;
                s
            }
            Err(e) => refuse!(
                engine,
                client,
                rid.as_ref(),
                session_error_response(e, &engine.config.sessions)
            ),
        };
        let id_header = (
            HeaderName::from_static(SESSION_HEADER),
            HeaderValue::from_str(&session.id).unwrap_or(HeaderValue::from_static("")),
        );
        let response = answer(
            engine.clone(),
            client,
            rid,
            Some(session.clone()),
            version,
            Transport::StreamableHttp,
            message,
            false,
            vec![id_header],
        )
        .await;
        if !response.status().is_success() {
            engine.end_session(&session.id).await;
        }
        return response;
    }

    let (session, protocol, transport) = match header_str(headers, SESSION_HEADER) {
        Some(id) => match super::find_session(&engine, id, &client).await {
            Err(r) => refuse!(engine, client, rid.as_ref(), r),
            Ok(Some(s)) => {
                if let Err(r) = super::check_binding(&s, &client) {
                    refuse!(engine, client, rid.as_ref(), r);
                }
                let v = header_version.unwrap_or_else(|| s.protocol());
                (Some(s), v, Transport::StreamableHttp)
            }
            Ok(None) => refuse!(engine, client, rid.as_ref(), session_not_found()),
        },
        None => (
            None,
            header_version.unwrap_or(ProtocolVersion::HEADER_DEFAULT),
            Transport::Stateless,
        ),
    };
    answer(
        engine,
        client,
        rid,
        session,
        protocol,
        transport,
        message,
        accepts_sse(headers),
        Vec::new(),
    )
    .await
}

async fn batch<A: McpApp>(
    engine: Arc<Engine<A>>,
    client: Client<A::Principal>,
    rid: Option<HeaderValue>,
    headers: &HeaderMap,
    header_version: Option<ProtocolVersion>,
    items: Vec<Result<Message, Reply>>,
) -> Response {
    let session = match header_str(headers, SESSION_HEADER) {
        Some(id) => match super::find_session(&engine, id, &client).await {
            Err(r) => refuse!(engine, client, rid.as_ref(), r),
            Ok(Some(s)) => {
                if let Err(r) = super::check_binding(&s, &client) {
                    refuse!(engine, client, rid.as_ref(), r);
                }
                Some(s)
            }
            Ok(None) => refuse!(engine, client, rid.as_ref(), session_not_found()),
        },
        None => None,
    };
    let protocol = header_version
        .or_else(|| session.as_ref().map(|s| s.protocol()))
        .unwrap_or(ProtocolVersion::HEADER_DEFAULT);
    if !protocol.allows_batches() {
        let r = rpc_error(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            &format!(
                "Invalid Request: JSON-RPC batches are not supported in protocol version {protocol}"
            ),
        );
        refuse!(engine, client, rid.as_ref(), r);
    }
    if items
        .iter()
        .any(|m| matches!(m, Ok(Message::Request(r)) if r.method == "initialize"))
    {
        let r = rpc_error(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            "Invalid Request: initialize cannot be batched",
        );
        refuse!(engine, client, rid.as_ref(), r);
    }
    let transport = if session.is_some() {
        Transport::StreamableHttp
    } else {
        Transport::Stateless
    };
    let ctx = CallCtx {
        client,
        session,
        protocol,
        transport,
        peer: Peer::detached(),
        request_id: rid,
    };
    let mut replies = Vec::new();
    for item in items {
        match item {
            Ok(message) => {
                if let Some(reply) = engine.handle(&ctx, message).await {
                    replies.push(reply.to_value());
                }
            }
            Err(reply) => replies.push(reply.to_value()),
        }
    }
    if replies.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    json_response(
        StatusCode::OK,
        Value::Array(replies).to_string().into_bytes(),
        &[],
    )
}

type BoxedReply = Pin<Box<dyn std::future::Future<Output = Option<Reply>> + Send>>;

/// Handles one message and answers: 202 for notifications and responses, JSON for a request —
/// or, when `sse_ok`, an SSE stream if the handler sends something before its answer or the
/// engine is configured with [`ReplyMode::Stream`].
#[allow(clippy::too_many_arguments)]
async fn answer<A: McpApp>(
    engine: Arc<Engine<A>>,
    client: Client<A::Principal>,
    request_id: Option<HeaderValue>,
    session: Option<Arc<Session>>,
    protocol: ProtocolVersion,
    transport: Transport,
    message: Message,
    sse_ok: bool,
    extra: Vec<(HeaderName, HeaderValue)>,
) -> Response {
    let is_request = matches!(message, Message::Request(_));
    // Only a request's answer may be preceded by messages on an SSE stream.
    let (peer, rx) = if is_request && sse_ok {
        let (tx, rx) = mpsc::channel::<Value>(32);
        (Peer::channel(tx, session.clone()), Some(rx))
    } else {
        (Peer::detached(), None)
    };
    let (mode, keepalive) = (engine.config.replies, engine.config.keepalive);
    let ctx = CallCtx {
        client,
        session,
        protocol,
        transport,
        peer,
        request_id,
    };
    // Boxed on every path: the engine's future is most of a request's state, and held inline
    // it would be copied with every future that contains it (axum boxes the handler's).
    let mut fut: BoxedReply = Box::pin(async move { engine.handle(&ctx, message).await });
    if !is_request {
        fut.await;
        return StatusCode::ACCEPTED.into_response();
    }
    let Some(mut rx) = rx else {
        return match fut.await {
            Some(reply) => json_response(reply_status(protocol, &reply), reply.to_bytes(), &extra),
            None => StatusCode::ACCEPTED.into_response(),
        };
    };
    if mode == ReplyMode::Stream {
        return sse_response(stream_with_final(rx, fut), keepalive, &extra);
    }
    tokio::select! {
        biased;
        reply = &mut fut => match reply {
            // Nothing was said before the answer: a plain JSON body is cheapest.
            Some(reply) if rx.is_empty() => json_response(reply_status(protocol, &reply), reply.to_bytes(), &extra),
            Some(reply) => sse_response(stream_with_final(rx, Box::pin(futures::future::ready(Some(reply)))), keepalive, &extra),
            None => StatusCode::ACCEPTED.into_response(),
        },
        Some(first) = rx.recv() => {
            let head = futures::stream::once(async move { first.to_string() });
            sse_response(head.chain(stream_with_final(rx, fut)), keepalive, &extra)
        }
    }
}

/// The HTTP status of a JSON reply: 200, except that 2026-07-28 answers a method the server
/// does not implement with 404 (its JSON-RPC body tells it apart from a server with no MCP
/// endpoint there).
fn reply_status(protocol: ProtocolVersion, reply: &Reply) -> StatusCode {
    match &reply.outcome {
        Err(e) if protocol.is_stateless() && e.code == jsonrpc::METHOD_NOT_FOUND => {
            StatusCode::NOT_FOUND
        }
        _ => StatusCode::OK,
    }
}

/// Messages from `rx` as they come, then the final reply once `fut` finishes (after draining
/// whatever was sent before it), each as JSON text.
fn stream_with_final(
    rx: mpsc::Receiver<Value>,
    fut: BoxedReply,
) -> impl Stream<Item = String> + Send {
    enum St {
        Running(mpsc::Receiver<Value>, BoxedReply),
        Draining(mpsc::Receiver<Value>, Option<Reply>),
        Done,
    }
    let last = |reply: Option<Reply>| reply.map(|r| (r.to_json(), St::Done));
    futures::stream::unfold(St::Running(rx, fut), move |state| async move {
        match state {
            St::Running(mut rx, mut fut) => {
                tokio::select! {
                    biased;
                    m = rx.recv() => match m {
                        Some(v) => Some((v.to_string(), St::Running(rx, fut))),
                        None => last(fut.await),
                    },
                    reply = &mut fut => match rx.try_recv() {
                        Ok(v) => Some((v.to_string(), St::Draining(rx, reply))),
                        Err(_) => last(reply),
                    },
                }
            }
            St::Draining(mut rx, reply) => match rx.try_recv() {
                Ok(v) => Some((v.to_string(), St::Draining(rx, reply))),
                Err(_) => last(reply),
            },
            St::Done => None,
        }
    })
}

/// The SSE answer to one POST: its messages as `message` events, kept alive while the handler
/// works, and ended after the last (the final reply).
fn sse_response(
    stream: impl Stream<Item = String> + Send + 'static,
    keepalive: std::time::Duration,
    extra: &[(HeaderName, HeaderValue)],
) -> Response {
    let events =
        stream.map(|text| Ok::<_, Infallible>(Event::default().event("message").data(text)));
    let mut r = sse_body(events, keepalive);
    for (k, v) in extra {
        r.headers_mut().insert(k.clone(), v.clone());
    }
    r
}

/// GET: the session's server-to-client stream, resumable with `Last-Event-ID`.
pub(crate) async fn get<A: McpApp>(
    State(engine): State<Arc<Engine<A>>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let rid = request_id(&engine, &headers);
    let client = match admit(
        &engine,
        &headers,
        uri.query(),
        LimitKind::Stream,
        rid.as_ref(),
        Transport::StreamableHttp,
    )
    .await
    {
        Ok(c) => c,
        Err(r) => return r,
    };
    match header_version(&headers) {
        Ok(Some(v)) if v.is_stateless() => {
            let r = rpc_error(
                StatusCode::METHOD_NOT_ALLOWED,
                INVALID_REQUEST,
                "GET streams do not exist in protocol 2026-07-28",
            );
            refuse!(engine, client, rid.as_ref(), r);
        }
        Err(r) => refuse!(engine, client, rid.as_ref(), r),
        _ => {}
    }
    if !accepts_sse(&headers) {
        let r = rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            INVALID_REQUEST,
            "Not Acceptable: the client must accept text/event-stream",
        );
        refuse!(engine, client, rid.as_ref(), r);
    }
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        refuse!(engine, client, rid.as_ref(), session_header_required());
    };
    let session = match super::find_session(&engine, id, &client).await {
        Ok(Some(s)) => s,
        Ok(None) => refuse!(engine, client, rid.as_ref(), session_not_found()),
        Err(r) => refuse!(engine, client, rid.as_ref(), r),
    };
    let (tx, rx) = mpsc::channel::<(u64, Value)>(64);
    if !session.attach_stream(tx) {
        let r = rpc_error(
            StatusCode::CONFLICT,
            INVALID_REQUEST,
            "Conflict: a stream is already open for this session",
        );
        refuse!(engine, client, rid.as_ref(), r);
    }
    engine.hold_stream(&session.id).await;
    observed(
        &engine,
        &client,
        rid.as_ref(),
        Transport::StreamableHttp,
        &session.id,
        TransportEvent::StreamOpened,
    )
    .await;
    let replay = header_str(&headers, "last-event-id")
        .and_then(|v| v.parse::<u64>().ok())
        .map(|last| session.replay_after(last))
        .unwrap_or_default();
    session_stream(
        session,
        rx,
        replay,
        engine.config.keepalive,
        engine.draining.clone(),
    )
}

/// The SSE body of a session stream: replayed events, then live ones, until the session ends.
pub(crate) fn session_stream(
    session: Arc<Session>,
    rx: mpsc::Receiver<(u64, Value)>,
    replay: Vec<(u64, Value)>,
    keepalive: std::time::Duration,
    draining: tokio_util::sync::CancellationToken,
) -> Response {
    struct Detach(Arc<Session>);
    impl Drop for Detach {
        fn drop(&mut self) {
            self.0.detach_stream();
        }
    }
    let guard = Detach(session.clone());
    let closed = session.closed.clone();
    let live = tokio_stream::wrappers::ReceiverStream::new(rx).take_until(closed.cancelled_owned());
    let events = futures::stream::iter(replay)
        .chain(live)
        .map(move |(id, v)| {
            let _ = &guard;
            Ok::<_, Infallible>(
                Event::default()
                    .event("message")
                    .id(id.to_string())
                    .data(v.to_string()),
            )
        });
    sse_body(super::until_drained(events, draining), keepalive)
}

/// DELETE: ends the session.
pub(crate) async fn delete<A: McpApp>(
    State(engine): State<Arc<Engine<A>>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let rid = request_id(&engine, &headers);
    let client = match admit(
        &engine,
        &headers,
        uri.query(),
        LimitKind::Message,
        rid.as_ref(),
        Transport::StreamableHttp,
    )
    .await
    {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        refuse!(engine, client, rid.as_ref(), session_header_required());
    };
    match super::find_session(&engine, id, &client).await {
        Err(r) => refuse!(engine, client, rid.as_ref(), r),
        Ok(Some(s)) => {
            engine.end_session(&s.id).await;
            observed(
                &engine,
                &client,
                rid.as_ref(),
                Transport::StreamableHttp,
                &s.id,
                TransportEvent::SessionDeleted,
            )
            .await;
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(None) => refuse!(engine, client, rid.as_ref(), session_not_found()),
    }
}

fn session_header_required() -> Response {
    rpc_error(
        StatusCode::BAD_REQUEST,
        INVALID_REQUEST,
        "Mcp-Session-Id header required",
    )
}
