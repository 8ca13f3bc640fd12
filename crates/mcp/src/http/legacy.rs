//! The legacy HTTP+SSE transport (2024-11-05): `GET …/sse` opens a session and its stream,
//! whose first event names the POST URL; `POST …/message?sessionId=…` answers 202 and delivers
//! the reply on that stream. Without `sessionId` the reply comes back inline (stateless).

use std::{convert::Infallible, sync::Arc};

use axum::{
    body::Body,
    extract::{Query, State},
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response, sse::Event},
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{
    LimitKind, admit, bad_message, json_response, observed, rate_limit, read_body, refused,
    request_id, rpc_error, session_error_response, sse_body,
};
use crate::{
    Engine,
    app::{McpApp, Peer, Transport, TransportEvent},
    engine::CallCtx,
    jsonrpc::{self, INVALID_REQUEST, Incoming, Message},
    protocol::ProtocolVersion,
    session::{Session, SessionKind},
};

/// Returns the refusal `$r` of the authenticated `$client`, logged and recorded.
macro_rules! refuse {
    ($engine:expr, $client:expr, $rid:expr, $r:expr) => {
        return refused(&$engine, &$client, $rid, Transport::LegacySse, $r).await
    };
}

/// GET: opens the stream.
pub(crate) async fn open<A: McpApp>(
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
        Transport::LegacySse,
    )
    .await
    {
        Ok(c) => c,
        Err(r) => return r,
    };
    if engine.is_draining() {
        refuse!(engine, client, rid.as_ref(), super::draining_response());
    }
    let session = match engine
        .open_session(
            &client,
            SessionKind::LegacySse,
            ProtocolVersion::V2024_11_05,
        )
        .await
    {
        Ok((s, evicted)) => {
            if let Some(e) = evicted {
                super::evicted(&engine, &client, rid.as_ref(), Transport::LegacySse, &e).await;
            }
            s
        }
        Err(e) => refuse!(
            engine,
            client,
            rid.as_ref(),
            session_error_response(e, &engine.config.sessions)
        ),
    };
    observed(
        &engine,
        &client,
        rid.as_ref(),
        Transport::LegacySse,
        &session.id,
        TransportEvent::StreamOpened,
    )
    .await;
    let (tx, rx) = mpsc::channel::<(u64, Value)>(64);
    session.attach_stream(tx);
    // The stream's own query (the application's choices, see `Client::binding`) rides along
    // on the POST URL, so the client's messages make the same choice as the session.
    let mut endpoint = format!(
        "{}{}?sessionId={}",
        engine.config.public_base_url.trim_end_matches('/'),
        super::Routes::default().legacy_message,
        session.id
    );
    if let Some(q) = uri.query().filter(|q| !q.is_empty()) {
        endpoint.push('&');
        endpoint.push_str(q);
    }

    /// Ends the session when the client goes away (in a cluster, everywhere).
    struct EndOnDrop<A: McpApp>(Arc<Engine<A>>, Arc<Session>);
    impl<A: McpApp> Drop for EndOnDrop<A> {
        fn drop(&mut self) {
            self.0.sessions.remove(&self.1.id);
            if self.0.cluster.is_some()
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                let (engine, id) = (self.0.clone(), self.1.id.clone());
                rt.spawn(async move { engine.end_in_cluster(&id).await });
            }
        }
    }
    let guard = EndOnDrop(engine.clone(), session.clone());
    let first =
        futures::stream::once(async move { Event::default().event("endpoint").data(endpoint) });
    let messages = tokio_stream::wrappers::ReceiverStream::new(rx)
        .take_until(session.closed.clone().cancelled_owned())
        .map(|(_, v)| Event::default().event("message").data(v.to_string()));
    let events = first.chain(messages).map(move |e| {
        let _ = &guard;
        Ok::<_, Infallible>(e)
    });
    sse_body(
        super::until_drained(events, engine.draining.clone()),
        engine.config.keepalive,
    )
}

#[derive(Deserialize)]
pub(crate) struct MessageQuery {
    #[serde(rename = "sessionId")]
    session_id: Option<String>,
}

/// POST: a message for a session (202, reply on the stream) or stateless (reply inline).
pub(crate) async fn message<A: McpApp>(
    State(engine): State<Arc<Engine<A>>>,
    Query(query): Query<MessageQuery>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = request_id(&engine, &headers);
    let client = match admit(
        &engine,
        &headers,
        uri.query(),
        LimitKind::Message,
        rid.as_ref(),
        Transport::LegacySse,
    )
    .await
    {
        Ok(c) => c,
        Err(r) => return r,
    };
    let bytes = match read_body(body, &headers, engine.config.max_body_bytes).await {
        Ok(b) => b,
        Err(r) => refuse!(engine, client, rid.as_ref(), r),
    };
    let incoming = jsonrpc::parse(&bytes);
    if let Err(r) = super::screen(&engine, &client, &incoming) {
        refuse!(engine, client, rid.as_ref(), r);
    }
    if let Incoming::Batch(items) = &incoming {
        // The first message was counted on admission; each further one counts too.
        let more = items.len().saturating_sub(1);
        if let Err(r) = rate_limit(&engine, &client, LimitKind::Message, more).await {
            refuse!(engine, client, rid.as_ref(), r);
        }
    }

    let Some(session_id) = query.session_id.filter(|s| !s.is_empty()) else {
        // Stateless request-response.
        let ctx = CallCtx {
            client,
            session: None,
            protocol: ProtocolVersion::V2024_11_05,
            transport: Transport::Stateless,
            peer: Peer::detached(),
            request_id: rid,
        };
        return match incoming {
            Incoming::Single(Err(reply)) => {
                refuse!(
                    engine,
                    ctx.client,
                    ctx.request_id.as_ref(),
                    bad_message(&reply)
                )
            }
            Incoming::Single(Ok(m)) => match engine.handle(&ctx, m).await {
                Some(reply) => json_response(StatusCode::OK, reply.to_bytes(), &[]),
                None => StatusCode::ACCEPTED.into_response(),
            },
            Incoming::Batch(_) => {
                let r = rpc_error(
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    "Invalid Request: JSON-RPC batches are not supported on this transport",
                );
                refuse!(engine, ctx.client, ctx.request_id.as_ref(), r)
            }
        };
    };
    let session = match super::find_session(&engine, &session_id, &client).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            let r = rpc_error(
                StatusCode::NOT_FOUND,
                super::AUTH_ERROR,
                "Session not found",
            );
            refuse!(engine, client, rid.as_ref(), r);
        }
        Err(r) => refuse!(engine, client, rid.as_ref(), r),
    };
    if let Err(r) = super::check_binding(&session, &client) {
        refuse!(engine, client, rid.as_ref(), r);
    }
    let messages: Vec<Message> = match incoming {
        Incoming::Single(Err(reply)) => refuse!(engine, client, rid.as_ref(), bad_message(&reply)),
        Incoming::Single(Ok(m)) => vec![m],
        Incoming::Batch(items) => {
            if !session.protocol().allows_batches() {
                let r = rpc_error(
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    &format!(
                        "Invalid Request: JSON-RPC batches are not supported in protocol version {}",
                        session.protocol()
                    ),
                );
                refuse!(engine, client, rid.as_ref(), r);
            }
            match items.into_iter().collect::<Result<Vec<_>, _>>() {
                Ok(v) => v,
                Err(reply) => refuse!(engine, client, rid.as_ref(), bad_message(&reply)),
            }
        }
    };
    // Answer now; the replies travel on the session's stream.
    tokio::spawn(async move {
        let ctx = CallCtx {
            client,
            session: Some(session.clone()),
            protocol: session.protocol(),
            transport: Transport::LegacySse,
            peer: Peer::session_stream(session.clone()),
            request_id: rid,
        };
        for m in messages {
            if let Some(reply) = engine.handle(&ctx, m).await {
                session.send(reply.to_value()).await;
            }
        }
    });
    (
        StatusCode::ACCEPTED,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        r#"{"status":"accepted"}"#,
    )
        .into_response()
}
