//! Streamable HTTP end to end through the router: how answers travel (JSON or an SSE stream
//! that ends with the answer), requests to the client on the POST's stream, and what a
//! request the client abandons leaves behind.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
    response::Response,
};
use breeze_limits::MemoryLimiter;
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tower::ServiceExt;

use super::{Routes, router};
use crate::{
    Client, Cx, Engine, EngineConfig, HttpError, McpApp, Peer, RequestRecord, Transport,
    engine::{CallCtx, ReplyMode},
    jsonrpc::{ErrorObject, Id, Message, Request as RpcRequest},
    model::{CallToolResult, GetPromptResult, ResourceContents, ToolDef},
    protocol::ProtocolVersion,
    session::SessionKind,
};

#[derive(Default)]
struct TestApp {
    /// [`RequestRecord::in_flight`] of the last request recorded.
    last_in_flight: AtomicUsize,
}

impl McpApp for TestApp {
    type Principal = ();

    async fn authenticate(
        &self,
        _headers: &axum::http::HeaderMap,
        query: Option<&str>,
    ) -> Result<Client<()>, HttpError> {
        Ok(Client {
            principal: (),
            key: "test".into(),
            tenant: "test".into(),
            // `choice=…` in the query is the choice, for the binding tests.
            binding: query
                .and_then(|q| q.split('&').find(|p| p.starts_with("choice=")))
                .map(Arc::from),
        })
    }

    fn server_info(&self) -> crate::model::ServerInfo {
        crate::model::ServerInfo {
            name: "test".into(),
            version: "0".into(),
            revision: None,
            title: None,
        }
    }

    fn extensions(&self) -> Map<String, Value> {
        Map::from_iter([("test/ext".to_owned(), json!({ "level": 1 }))])
    }

    async fn list_tools(&self, _cx: &Cx<()>) -> Result<Vec<ToolDef>, ErrorObject> {
        Ok(Vec::new())
    }

    async fn call_tool(
        &self,
        cx: Cx<()>,
        name: String,
        _arguments: Value,
    ) -> Result<CallToolResult, ErrorObject> {
        match name.as_str() {
            "quiet" | "unrecorded" => Ok(CallToolResult::text("ok")),
            // The extensions in force, and the client's settings for ours.
            "extensions" => Ok(CallToolResult::text(format!(
                "{:?} {}",
                cx.extensions.ids().collect::<Vec<_>>(),
                cx.extensions.get("test/ext").cloned().unwrap_or_default()
            ))),
            "chatty" => {
                cx.log("info", json!("working")).await;
                Ok(CallToolResult::text("done"))
            }
            "slow" => {
                cx.progress(1.0, Some(2.0), Some("halfway")).await;
                cx.progress(2.0, Some(2.0), None).await;
                Ok(CallToolResult::text("finished"))
            }
            "ask" => {
                let answer = cx
                    .peer
                    .request(
                        "sampling/createMessage",
                        json!({ "messages": [], "maxTokens": 10 }),
                    )
                    .await?;
                let text = answer
                    .pointer("/content/text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Ok(CallToolResult::text(format!("LLM response: {text}")))
            }
            _ => Err(ErrorObject::invalid_params("unknown tool")),
        }
    }

    async fn read_resource(
        &self,
        _cx: Cx<()>,
        _uri: String,
    ) -> Result<Vec<ResourceContents>, ErrorObject> {
        Err(ErrorObject::invalid_params("no resources"))
    }

    async fn get_prompt(
        &self,
        _cx: Cx<()>,
        _name: String,
        _arguments: Map<String, Value>,
    ) -> Result<GetPromptResult, ErrorObject> {
        Err(ErrorObject::invalid_params("no prompts"))
    }

    async fn record(&self, record: RequestRecord<'_, ()>) -> Result<(), ErrorObject> {
        self.last_in_flight
            .store(record.in_flight, Ordering::Relaxed);
        // The tool named "unrecorded" stands for a request whose record could not be kept.
        if record.target == Some("unrecorded") {
            return Err(ErrorObject::internal("the record could not be kept"));
        }
        Ok(())
    }
}

fn engine(replies: ReplyMode) -> Arc<Engine<TestApp>> {
    let config = EngineConfig {
        replies,
        ..EngineConfig::default()
    };
    Engine::new(
        Arc::new(TestApp::default()),
        config,
        Arc::new(MemoryLimiter::new()),
    )
}

fn app(replies: ReplyMode) -> Router {
    router(engine(replies), &Routes::default())
}

async fn post_with(app: &Router, session: Option<&str>, accept: &str, body: Value) -> Response {
    let mut request = Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, accept);
    if let Some(id) = session {
        request = request
            .header(super::SESSION_HEADER, id)
            .header(super::PROTOCOL_HEADER, "2025-11-25");
    }
    app.clone()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap()
}

async fn post(app: &Router, session: Option<&str>, body: Value) -> Response {
    post_with(app, session, "application/json, text/event-stream", body).await
}

async fn initialize(app: &Router) -> String {
    let response = post(
        app,
        None,
        json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": { "sampling": {} },
                "clientInfo": { "name": "t", "version": "1" }
            }
        }),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "application/json");
    response.headers()[super::SESSION_HEADER]
        .to_str()
        .unwrap()
        .to_owned()
}

fn content_type(response: &Response) -> &str {
    response.headers()[header::CONTENT_TYPE].to_str().unwrap()
}

fn call(id: i64, tool: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool } })
}

/// The JSON messages of an SSE text (its `data:` lines), skipping empty (keep-alive) data.
fn sse_messages(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The whole body, which must end.
async fn body_text(response: Response) -> String {
    let bytes = tokio::time::timeout(Duration::from_secs(5), response.into_body().collect())
        .await
        .expect("the body ends")
        .unwrap()
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Initializes declaring `extensions` (none when `Value::Null`): the session id and the result.
async fn initialize_declaring(app: &Router, extensions: Value) -> (String, Value) {
    let mut capabilities = json!({});
    if !extensions.is_null() {
        capabilities["extensions"] = extensions;
    }
    let response = post(
        app,
        None,
        json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": { "name": "t", "version": "1" }
            }
        }),
    )
    .await;
    let session = response.headers()[super::SESSION_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
    (session, body["result"].clone())
}

#[tokio::test]
async fn an_extension_is_in_force_only_when_both_sides_name_it() {
    let app = app(ReplyMode::Adaptive);
    let text = |body: Value| {
        body["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // Declared with another the server does not know: only the shared one is answered, with
    // the server's settings, and handlers see the client's settings for it.
    let (session, result) = initialize_declaring(
        &app,
        json!({ "test/ext": { "mode": "x" }, "other/ext": {} }),
    )
    .await;
    assert_eq!(
        result["capabilities"]["extensions"],
        json!({ "test/ext": { "level": 1 } })
    );
    assert!(result["capabilities"]["tools"].is_object(), "the rest kept");
    let response = post(&app, Some(&session), call(1, "extensions")).await;
    let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(text(body), r#"["test/ext"] {"mode":"x"}"#);

    // Declared nothing (or only unknown ones): no `extensions`, nothing in force.
    for declared in [Value::Null, json!({ "other/ext": {} }), json!("nonsense")] {
        let (session, result) = initialize_declaring(&app, declared.clone()).await;
        assert!(
            result["capabilities"].get("extensions").is_none(),
            "{declared}: {result}"
        );
        let response = post(&app, Some(&session), call(1, "extensions")).await;
        let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
        assert_eq!(text(body), "[] null", "{declared}");
    }
}

#[tokio::test]
async fn a_record_the_application_could_not_keep_withholds_the_answer() {
    let app = app(ReplyMode::Adaptive);
    let session = initialize(&app).await;
    let response = post(&app, Some(&session), call(1, "unrecorded")).await;
    let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(body["id"], 1);
    assert!(body.get("result").is_none(), "{body}");
    assert_eq!(body["error"]["message"], "the record could not be kept");
    // A record kept: the answer goes out.
    let response = post(&app, Some(&session), call(2, "quiet")).await;
    let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(body["result"]["content"][0]["text"], "ok");
}

#[tokio::test]
async fn adaptive_replies_are_json_unless_the_handler_speaks_first() {
    let app = app(ReplyMode::Adaptive);
    let session = initialize(&app).await;

    let response = post(&app, Some(&session), call(1, "quiet")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "application/json");
    let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(body["result"]["content"][0]["text"], "ok");

    let response = post(&app, Some(&session), call(2, "chatty")).await;
    assert_eq!(content_type(&response), "text/event-stream");
    let messages = sse_messages(&body_text(response).await);
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["method"], "notifications/message");
    assert!(messages[0].get("id").is_none());
    assert_eq!(messages[1]["id"], 2);
    assert_eq!(messages[1]["result"]["content"][0]["text"], "done");
}

#[tokio::test]
async fn stream_mode_answers_with_an_unbuffered_stream_that_ends_with_the_answer() {
    let app = app(ReplyMode::Stream);
    let session = initialize(&app).await;

    let response = post(
        &app,
        Some(&session),
        json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "text/event-stream");
    let headers = response.headers();
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache, no-transform");
    assert_eq!(headers["x-accel-buffering"], "no");
    let text = body_text(response).await;
    assert!(text.starts_with("event: message\n"), "{text:?}");
    assert_eq!(
        sse_messages(&text),
        vec![json!({ "jsonrpc": "2.0", "id": 1, "result": {} })]
    );

    let response = post(&app, Some(&session), call(2, "chatty")).await;
    let messages = sse_messages(&body_text(response).await);
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1]["result"]["content"][0]["text"], "done");

    // A client that accepts only JSON still gets JSON.
    let response = post_with(&app, Some(&session), "application/json", call(3, "quiet")).await;
    assert_eq!(content_type(&response), "application/json");

    // Notifications are still accepted without a body.
    let response = post(
        &app,
        Some(&session),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert!(body_text(response).await.is_empty());
}

#[tokio::test]
async fn requests_to_the_client_travel_on_the_post_stream() {
    for mode in [ReplyMode::Adaptive, ReplyMode::Stream] {
        let app = app(mode);
        let session = initialize(&app).await;
        let response = post(&app, Some(&session), call(5, "ask")).await;
        assert_eq!(content_type(&response), "text/event-stream", "{mode:?}");
        let mut body = response.into_body();

        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the request to the client arrives")
            .unwrap()
            .unwrap();
        let text = String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap();
        let request = sse_messages(&text).remove(0);
        assert_eq!(request["method"], "sampling/createMessage");
        assert!(request["id"].is_string(), "{request}");

        // The client answers with a POST of its own, on the same session.
        let answer = json!({
            "jsonrpc": "2.0", "id": request["id"],
            "result": { "role": "assistant", "model": "m", "content": { "type": "text", "text": "hi" } }
        });
        let accepted = post(&app, Some(&session), answer).await;
        assert_eq!(accepted.status(), StatusCode::ACCEPTED);

        let rest = tokio::time::timeout(Duration::from_secs(5), body.collect())
            .await
            .expect("the stream ends after the answer")
            .unwrap()
            .to_bytes();
        let messages = sse_messages(std::str::from_utf8(&rest).unwrap());
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(messages[0]["id"], 5);
        assert_eq!(
            messages[0]["result"]["content"][0]["text"],
            "LLM response: hi"
        );
    }
}

/// A session and the context of a request on it whose stream is `rx`, as the transport builds
/// them, for driving the engine directly.
fn session_ctx(
    engine: &Engine<TestApp>,
) -> (
    Arc<crate::session::Session>,
    CallCtx<()>,
    mpsc::Receiver<Value>,
) {
    let (session, _) = engine
        .sessions
        .create(
            &Arc::from("test"),
            &Arc::from("test"),
            SessionKind::Streamable,
        )
        .unwrap();
    let (tx, rx) = mpsc::channel(8);
    let ctx = CallCtx {
        client: Client {
            principal: (),
            key: "test".into(),
            tenant: "test".into(),
            binding: None,
        },
        session: Some(session.clone()),
        protocol: ProtocolVersion::V2025_11_25,
        transport: Transport::StreamableHttp,
        peer: Peer::channel(tx, Some(session.clone())),
        request_id: None,
    };
    (session, ctx, rx)
}

#[tokio::test]
async fn an_abandoned_request_leaves_nothing_behind() {
    let engine = engine(ReplyMode::Adaptive);
    let (session, ctx, mut rx) = session_ctx(&engine);
    let message = Message::Request(RpcRequest {
        id: Id::Number(7),
        method: "tools/call".into(),
        params: Some(json!({ "name": "ask" })),
    });
    let quiet = |id| {
        Message::Request(RpcRequest {
            id: Id::Number(id),
            method: "tools/call".into(),
            params: Some(json!({ "name": "quiet" })),
        })
    };
    let in_flight_seen = || engine.app.last_in_flight.load(Ordering::Relaxed);
    let mut handling = Box::pin(engine.handle(&ctx, message));
    let sent = tokio::select! {
        _ = &mut handling => panic!("the tool waits for the client"),
        sent = rx.recv() => sent.unwrap(),
    };
    assert_eq!(sent["method"], "sampling/createMessage");
    engine.handle(&ctx, quiet(8)).await;
    assert_eq!(in_flight_seen(), 2, "a request beside the waiting one");
    // The handler is dropped mid-request, as when the client closes the stream.
    drop(handling);
    engine.handle(&ctx, quiet(9)).await;
    assert_eq!(in_flight_seen(), 1, "the abandoned request still counted");
    assert!(
        !session.cancel(&Id::Number(7)),
        "no longer registered as in flight"
    );
    assert_eq!(
        session.awaiting_answers(),
        0,
        "no longer waiting for the client's answer"
    );
}

#[tokio::test]
async fn notifications_cancelled_stops_the_call_in_flight() {
    let engine = engine(ReplyMode::Adaptive);
    let (_session, ctx, mut rx) = session_ctx(&engine);
    let call = Message::Request(RpcRequest {
        id: Id::Number(9),
        method: "tools/call".into(),
        params: Some(json!({ "name": "ask" })),
    });
    let cancel = Message::Notification(crate::jsonrpc::Notification {
        method: "notifications/cancelled".into(),
        params: Some(json!({ "requestId": 9, "reason": "user pressed stop" })),
    });
    let handling = engine.handle(&ctx, call);
    tokio::pin!(handling);
    // The tool is waiting for the client's answer to its sampling request...
    tokio::select! {
        _ = &mut handling => panic!("the tool waits for the client"),
        sent = rx.recv() => assert_eq!(sent.unwrap()["method"], "sampling/createMessage"),
    }
    // ...when the client cancels the call: it ends, and is not answered (the MCP spec: the
    // receiver of a cancellation does not respond to the cancelled request).
    assert!(engine.handle(&ctx, cancel).await.is_none());
    let reply = tokio::time::timeout(std::time::Duration::from_secs(1), handling)
        .await
        .expect("the cancelled call ends");
    assert!(
        reply.is_none(),
        "a cancelled request is not answered: {reply:?}"
    );
}

#[tokio::test]
async fn progress_notifications_stream_before_the_answer() {
    let app = app(ReplyMode::Adaptive);
    let session = initialize(&app).await;
    let body = json!({
        "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "slow", "arguments": {}, "_meta": { "progressToken": "p-1" } }
    });
    let response = post(&app, Some(&session), body).await;
    assert!(content_type(&response).starts_with("text/event-stream"));
    let messages = sse_messages(&body_text(response).await);
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[0]["method"], "notifications/progress");
    assert_eq!(
        messages[0]["params"],
        json!({ "progressToken": "p-1", "progress": 1.0, "total": 2.0, "message": "halfway" })
    );
    assert_eq!(messages[1]["params"]["progress"], 2.0);
    assert_eq!(messages[2]["id"], 5);
    assert_eq!(messages[2]["result"]["content"][0]["text"], "finished");
    // Without a progress token the same call is a plain JSON answer.
    let quiet = post(&app, Some(&session), json!({
        "jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": { "name": "slow", "arguments": {} }
    }))
    .await;
    assert!(content_type(&quiet).starts_with("application/json"));
}

#[tokio::test]
async fn the_get_stream_resumes_after_last_event_id() {
    let engine = engine(ReplyMode::Adaptive);
    let app = router(engine.clone(), &Routes::default());
    let id = initialize(&app).await;
    let session = engine
        .sessions()
        .get(&id, "test")
        .expect("the session exists");
    // Three server messages while no stream is open: kept for a resuming client.
    for n in 1..=3 {
        session.send(json!({ "jsonrpc": "2.0", "method": "notifications/message", "params": { "n": n } })).await;
    }
    let get = Request::get("/mcp")
        .header(header::ACCEPT, "text/event-stream")
        .header(super::SESSION_HEADER, &id)
        .header("last-event-id", "1")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(get).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut text = String::new();
    while text.matches("\n\n").count() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(2), body.frame())
            .await
            .expect("replayed events")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
    assert!(
        text.contains("id: 2") && text.contains("id: 3") && !text.contains("id: 1\n"),
        "{text}"
    );
    assert!(text.contains("\"n\":2") && text.contains("\"n\":3"));
}

/// POSTs `body` to `path` on `session`.
async fn post_at(app: &Router, path: &str, session: &str, body: &Value) -> Response {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .header(super::SESSION_HEADER, session)
        .header(super::PROTOCOL_HEADER, "2025-11-25");
    app.clone()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_session_keeps_the_binding_of_its_initialize() {
    let app = app(ReplyMode::Adaptive);
    let init = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } }
    });
    let response = app
        .clone()
        .oneshot(
            Request::post("/mcp?choice=a")
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json")
                .body(Body::from(init.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let session = response.headers()[super::SESSION_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    let same = post_at(&app, "/mcp?choice=a", &session, &list).await;
    assert_eq!(same.status(), StatusCode::OK);
    let batch = json!([list]);
    for (path, body) in [
        ("/mcp?choice=b", &list),
        ("/mcp", &list),
        ("/mcp?choice=b", &batch),
    ] {
        let other = post_at(&app, path, &session, body).await;
        assert_eq!(other.status(), StatusCode::BAD_REQUEST, "{path}");
        let text = body_text(other).await;
        assert!(
            text.contains("opened with choice=a") && text.contains("open a new session"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn the_legacy_endpoint_carries_the_streams_query() {
    let app = app(ReplyMode::Adaptive);
    let response = app
        .clone()
        .oneshot(
            Request::get("/api/v1/mcp/sse?choice=a")
                .header(header::ACCEPT, "text/event-stream")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let text = String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap();
    let endpoint = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap()
        .trim()
        .to_owned();
    assert!(endpoint.ends_with("&choice=a"), "{endpoint}");
    let path = endpoint.trim_start_matches("http://localhost:3000");
    let path = &path[path.find("/api").unwrap()..];
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    let send = |path: String| {
        let app = app.clone();
        let list = list.clone();
        async move {
            app.oneshot(
                Request::post(path)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(list.to_string()))
                    .unwrap(),
            )
            .await
            .unwrap()
            .status()
        }
    };
    assert_eq!(send(path.to_owned()).await, StatusCode::ACCEPTED);
    let without = path.trim_end_matches("&choice=a").to_owned();
    assert_eq!(send(without).await, StatusCode::BAD_REQUEST);
    drop(body);
}
