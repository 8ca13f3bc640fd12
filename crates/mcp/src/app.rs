//! The seam between the engine and an application: [`McpApp`] supplies authentication, the
//! catalogue and the handlers; the engine supplies everything protocol. The engine hands each
//! handler a [`Cx`]: who is calling, on which revision, and a [`Peer`] to talk back on the
//! current stream (progress, log messages, requests to the client).

use std::{future::Future, sync::Arc};

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    jsonrpc::{ErrorObject, Id, outgoing},
    model::{
        CallToolResult, GetPromptResult, PromptDef, ResourceContents, ResourceDef,
        ResourceTemplateDef, ServerInfo, ToolDef,
    },
    protocol::ProtocolVersion,
    session::{Session, SessionLimit},
};

/// An authenticated client.
#[derive(Debug, Clone)]
pub struct Client<P> {
    /// The application's principal (opaque to the engine).
    pub principal: P,
    /// A stable id of the credential: sessions are bound to it and limits counted by it.
    pub key: Arc<str>,
    /// A stable id of the tenant the credential belongs to (whatever the application calls
    /// one): sessions are capped per tenant as well, so one cannot starve the others.
    pub tenant: Arc<str>,
    /// What the request chose that a session keeps for its whole life, in the application's
    /// own words (e.g. a catalog): `None` when the application has no such choice. A session
    /// remembers its creating request's binding (`initialize`, or the legacy stream's GET);
    /// a later request on the session whose binding differs is refused with 400, never
    /// silently switched — a client changes its choice by opening a new session.
    pub binding: Option<Arc<str>>,
}

/// The protocol extensions in force for a request (the `extensions` capability): those the
/// client declared (in `initialize`, or on 2026-07-28 in the request's
/// `io.modelcontextprotocol/clientCapabilities`) that the application supports
/// ([`McpApp::extensions`]), each with the settings the client declared for it. Empty for a
/// client that declared none: such a client must see exactly what it would without them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extensions(Option<Arc<Map<String, Value>>>);

impl Extensions {
    /// Those of `declared` (the client's `extensions` object) that `supported` names.
    pub fn negotiate(declared: Option<&Value>, supported: &Map<String, Value>) -> Self {
        let Some(declared) = declared.and_then(Value::as_object) else {
            return Self::default();
        };
        let agreed: Map<String, Value> = declared
            .iter()
            .filter(|(id, _)| supported.contains_key(*id))
            .map(|(id, settings)| (id.clone(), settings.clone()))
            .collect();
        if agreed.is_empty() {
            Self::default()
        } else {
            Self(Some(Arc::new(agreed)))
        }
    }

    /// The client's settings for extension `id`, when it is in force.
    pub fn get(&self, id: &str) -> Option<&Value> {
        self.0.as_deref().and_then(|m| m.get(id))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The ids in force.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.0.iter().flat_map(|m| m.keys().map(String::as_str))
    }

    /// As a cluster's session record keeps them: the agreed object as JSON, `""` for none.
    pub(crate) fn to_record(&self) -> String {
        self.0.as_deref().map_or_else(String::new, |m| {
            serde_json::to_string(m).unwrap_or_default()
        })
    }

    /// Read back from a session record; anything but a non-empty JSON object is none.
    pub(crate) fn from_record(s: &str) -> Self {
        match serde_json::from_str::<Map<String, Value>>(s) {
            Ok(m) if !m.is_empty() => Self(Some(Arc::new(m))),
            _ => Self::default(),
        }
    }
}

/// An HTTP-level refusal (authentication, limits, origin).
#[derive(Debug, Clone)]
pub struct HttpError {
    pub status: StatusCode,
    pub message: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl HttpError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    #[must_use]
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// How a request reached the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    StreamableHttp,
    LegacySse,
    /// A request with no session (legacy POST without `sessionId`, or a sessionless POST).
    Stateless,
    Stdio,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::StreamableHttp => "streamable_http",
            Transport::LegacySse => "legacy_sse",
            Transport::Stateless => "stateless_http",
            Transport::Stdio => "stdio",
        }
    }
}

/// Where a [`Peer`]'s messages go.
#[derive(Clone)]
enum Outbound {
    /// Nowhere: the answer is a plain JSON body.
    None,
    /// The SSE stream answering this request.
    Channel(mpsc::Sender<Value>),
    /// The session's own stream (legacy SSE).
    Session(Arc<Session>),
}

/// Talks back to the client on the stream the current request is answered on.
#[derive(Clone)]
pub struct Peer {
    out: Outbound,
    session: Option<Arc<Session>>,
}

impl Peer {
    /// A peer writing to the stream that answers this request.
    pub(crate) fn channel(tx: mpsc::Sender<Value>, session: Option<Arc<Session>>) -> Self {
        Self {
            out: Outbound::Channel(tx),
            session,
        }
    }

    /// A peer writing to the session's own stream.
    pub(crate) fn session_stream(session: Arc<Session>) -> Self {
        Self {
            out: Outbound::Session(session.clone()),
            session: Some(session),
        }
    }

    /// A peer that can say nothing (the reply is a plain JSON body).
    pub fn detached() -> Self {
        Self {
            out: Outbound::None,
            session: None,
        }
    }

    /// Whether notifications can reach the client.
    pub fn can_notify(&self) -> bool {
        !matches!(self.out, Outbound::None)
    }

    async fn send(&self, message: Value) -> bool {
        match &self.out {
            Outbound::None => false,
            Outbound::Channel(tx) => tx.send(message).await.is_ok(),
            Outbound::Session(s) => s.send(message).await,
        }
    }

    /// Sends a notification; silently dropped when no stream can carry it.
    pub async fn notify(&self, method: &str, params: Value) {
        self.send(outgoing(None, method, params)).await;
    }

    /// Sends a request to the client and waits for its answer (sampling, elicitation). Needs a
    /// session and a stream.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ErrorObject> {
        let Some(session) = self.session.as_ref().filter(|_| self.can_notify()) else {
            return Err(ErrorObject::internal(format!(
                "cannot send {method} to the client: it needs a session and a streamed (text/event-stream) reply"
            )));
        };
        let (id, rx): (Id, oneshot::Receiver<Result<Value, ErrorObject>>) =
            session.expect_response();
        // Forgets the pending answer however this ends, including when the client stops
        // waiting (the client dropped the stream and the handler with it).
        let _pending = ForgetOnDrop(session, &id);
        if !self.send(outgoing(Some(&id), method, params)).await {
            return Err(ErrorObject::internal("the client stream closed"));
        }
        rx.await.unwrap_or_else(|_| {
            Err(ErrorObject::internal(
                "the session ended before the client answered",
            ))
        })
    }

    /// A peer on the session's own server-to-client stream (the Streamable HTTP GET stream, or
    /// the legacy SSE stream), for messages tied to no request, such as
    /// `notifications/resources/updated` long after the subscribing request was answered.
    /// What it sends while no such stream is open is kept for a resuming client (a bounded
    /// number of events) and otherwise lost. `None` without a session.
    pub fn standalone(&self) -> Option<Peer> {
        self.session.clone().map(Peer::session_stream)
    }

    /// Resolves when the session ends (never, without a session): the moment to stop
    /// background work done for it.
    pub async fn session_ended(&self) {
        match &self.session {
            Some(s) => s.closed.cancelled().await,
            None => std::future::pending().await,
        }
    }
}

/// Removes a pending request to the client from its session when dropped.
struct ForgetOnDrop<'a>(&'a Session, &'a Id);

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.forget_response(self.1);
    }
}

/// Everything a handler knows about the request it serves.
#[derive(Clone)]
pub struct Cx<P> {
    pub client: Client<P>,
    pub protocol: ProtocolVersion,
    pub transport: Transport,
    pub session_id: Option<Arc<str>>,
    /// The client's self-declared name (`clientInfo.name`: its session's `initialize`, or on
    /// 2026-07-28 the request's own `_meta`), when it gave one. Shown to people, never trusted.
    pub client_name: Option<Arc<str>>,
    /// The extensions negotiated for this request (see [`Extensions`]).
    pub extensions: Extensions,
    pub request_id: Option<Id>,
    /// From `params._meta.progressToken`, when the client asked for progress.
    pub progress_token: Option<Value>,
    /// Cancelled when the client sends `notifications/cancelled` or goes away.
    pub cancel: CancellationToken,
    pub peer: Peer,
}

impl<P> Cx<P> {
    /// Reports progress, when the client asked for it.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut p = Map::new();
        p.insert("progressToken".into(), token.clone());
        p.insert("progress".into(), json!(progress));
        if let Some(t) = total {
            p.insert("total".into(), json!(t));
        }
        if let Some(m) = message {
            p.insert("message".into(), json!(m));
        }
        self.peer
            .notify("notifications/progress", Value::Object(p))
            .await;
    }

    /// Sends a `notifications/message` log entry.
    pub async fn log(&self, level: &str, data: Value) {
        self.peer
            .notify(
                "notifications/message",
                json!({ "level": level, "data": data }),
            )
            .await;
    }
}

/// What the engine tells the application about each JSON-RPC request it answered, for audit.
#[derive(Debug, Clone)]
pub struct RequestRecord<'a, P> {
    pub client: &'a Client<P>,
    pub method: &'a str,
    /// The tool, resource URI or prompt the request named.
    pub target: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub transport: Transport,
    pub protocol: ProtocolVersion,
    /// `Err` with the message for protocol errors and tool errors alike.
    pub outcome: Result<(), String>,
    /// Requests the engine is handling as this one is recorded, this one included: 1 when it
    /// is alone (an application may then write its record straight away rather than wait to
    /// share the write with others).
    pub in_flight: usize,
    /// The HTTP request's id (the `EngineConfig::request_id_header`), when it has one.
    pub request_id: Option<&'a str>,
}

/// What became of an authenticated HTTP request besides the JSON-RPC requests the engine
/// answered (those are [`RequestRecord`]s).
#[derive(Debug, Clone, Copy)]
pub enum TransportEvent<'a> {
    /// Refused before the engine answered it (limits, body, parse, session, headers).
    Refused {
        status: StatusCode,
        message: &'a str,
        /// Beyond a per-credential rate limit (an application may sample these).
        rate_limited: bool,
    },
    /// A session of the client's credential (or, at the tenant cap, of its tenant) ended to
    /// make room for the one this request opens.
    SessionEvicted {
        session_id: &'a str,
        /// The credential that held it.
        owner: &'a str,
        cap: SessionLimit,
    },
    /// DELETE ended the request's session.
    SessionDeleted,
    /// A server-to-client stream opened (the legacy SSE stream opens its session too).
    StreamOpened,
}

/// An authenticated HTTP request's [`TransportEvent`], for audit.
#[derive(Debug, Clone)]
pub struct TransportRecord<'a, P> {
    pub client: &'a Client<P>,
    pub event: TransportEvent<'a>,
    pub session_id: Option<&'a str>,
    pub transport: Transport,
    pub request_id: Option<&'a str>,
}

/// An application served by the engine. All methods see an authenticated [`Cx`].
pub trait McpApp: Send + Sync + 'static {
    /// Who is calling, as the application understands it.
    type Principal: Clone + Send + Sync + 'static;

    /// Authenticates a request from its headers; `query` is the request URI's query string
    /// (without `?`), for choices a client makes in its connection URL (see
    /// [`Client::binding`]). An unknown choice is refused here, with a 400 naming valid values.
    fn authenticate(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> impl Future<Output = Result<Client<Self::Principal>, HttpError>> + Send;

    /// Whether the client may open a server-to-client stream.
    fn authorize_stream(&self, _caller: &Client<Self::Principal>) -> Result<(), HttpError> {
        Ok(())
    }

    /// A look at each JSON-RPC request of a POST before any is dispatched: an `Err` refuses the
    /// whole HTTP request with its status and headers, as authentication would (e.g. a bearer
    /// token lacking the scope a `tools/call` needs: 403 with the OAuth scope challenge, so the
    /// client can step up and retry). Lets everything through by default.
    fn screen(
        &self,
        _client: &Client<Self::Principal>,
        _request: &crate::jsonrpc::Request,
    ) -> Result<(), HttpError> {
        Ok(())
    }

    fn server_info(&self) -> ServerInfo;

    fn instructions(&self) -> Option<String> {
        None
    }

    /// The `capabilities` object of `initialize`.
    fn capabilities(&self) -> Value {
        json!({
            "tools": { "listChanged": false },
            "resources": { "subscribe": false, "listChanged": false },
            "prompts": { "listChanged": false },
        })
    }

    /// The protocol extensions the application supports, by id, each with the settings it
    /// advertises in `capabilities.extensions` to a client that declared the same id (e.g.
    /// `io.modelcontextprotocol/ui`). A client that declared none sees no `extensions`.
    fn extensions(&self) -> Map<String, Value> {
        Map::new()
    }

    fn list_tools(
        &self,
        cx: &Cx<Self::Principal>,
    ) -> impl Future<Output = Result<Vec<ToolDef>, ErrorObject>> + Send;

    fn call_tool(
        &self,
        cx: Cx<Self::Principal>,
        name: String,
        arguments: Value,
    ) -> impl Future<Output = Result<CallToolResult, ErrorObject>> + Send;

    fn list_resources(
        &self,
        _cx: &Cx<Self::Principal>,
    ) -> impl Future<Output = Result<Vec<ResourceDef>, ErrorObject>> + Send {
        async { Ok(Vec::new()) }
    }

    fn list_resource_templates(
        &self,
        _cx: &Cx<Self::Principal>,
    ) -> impl Future<Output = Result<Vec<ResourceTemplateDef>, ErrorObject>> + Send {
        async { Ok(Vec::new()) }
    }

    fn read_resource(
        &self,
        cx: Cx<Self::Principal>,
        uri: String,
    ) -> impl Future<Output = Result<Vec<ResourceContents>, ErrorObject>> + Send;

    fn list_prompts(
        &self,
        _cx: &Cx<Self::Principal>,
    ) -> impl Future<Output = Result<Vec<PromptDef>, ErrorObject>> + Send {
        async { Ok(Vec::new()) }
    }

    fn get_prompt(
        &self,
        cx: Cx<Self::Principal>,
        name: String,
        arguments: Map<String, Value>,
    ) -> impl Future<Output = Result<GetPromptResult, ErrorObject>> + Send;

    /// Methods the engine does not know (e.g. `logging/setLevel`, `completion/complete`).
    /// `None` answers "method not found".
    fn extension(
        &self,
        _cx: Cx<Self::Principal>,
        _method: String,
        _params: Option<Value>,
    ) -> impl Future<Output = Option<Result<Value, ErrorObject>>> + Send {
        async { None }
    }

    /// Observes every answered request (audit). Awaited before the answer is sent, so a
    /// record the application accepts is never lost after the client saw the answer.
    ///
    /// `Err` withholds the answer: the client gets that error instead. For an application
    /// whose record could not be kept, for a request that changed nothing (a read answered
    /// without its audit record would leave no trace). The engine ignores it for messages
    /// that have no answer (notifications, the client's responses).
    fn record(
        &self,
        record: RequestRecord<'_, Self::Principal>,
    ) -> impl Future<Output = Result<(), ErrorObject>> + Send;

    /// Observes what became of every authenticated HTTP request that no [`RequestRecord`]
    /// covers (refusals, sessions ended, streams opened). Awaited before the answer is sent.
    fn record_transport(
        &self,
        _record: TransportRecord<'_, Self::Principal>,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Called once a minute by [`crate::Engine::spawn_sweeper`] (to flush what the application
    /// keeps between requests, such as counts of sampled records).
    fn tick(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::session::{SessionKind, SessionLimits, SessionRegistry};

    #[tokio::test]
    async fn the_standalone_peer_writes_to_the_session_stream() {
        let registry = SessionRegistry::new(SessionLimits::default());
        let (session, _) = registry
            .create(&Arc::from("k"), &Arc::from("t"), SessionKind::Streamable)
            .unwrap();
        let (stream_tx, mut stream_rx) = mpsc::channel(4);
        assert!(session.attach_stream(stream_tx));
        let (post_tx, mut post_rx) = mpsc::channel(4);
        let peer = Peer::channel(post_tx, Some(session.clone()));

        let standalone = peer
            .standalone()
            .expect("a session has a stream of its own");
        standalone
            .notify(
                "notifications/resources/updated",
                json!({ "uri": "test://x" }),
            )
            .await;
        let (_, message) = stream_rx.try_recv().unwrap();
        assert_eq!(message["method"], "notifications/resources/updated");
        assert!(post_rx.try_recv().is_err(), "not on the request's stream");
        assert!(Peer::detached().standalone().is_none());

        // `session_ended` resolves when the session does, and not before.
        let ended = tokio::time::timeout(Duration::from_millis(20), standalone.session_ended());
        assert!(ended.await.is_err());
        registry.remove(&session.id);
        tokio::time::timeout(Duration::from_secs(1), standalone.session_ended())
            .await
            .expect("the session ended");
    }
}
