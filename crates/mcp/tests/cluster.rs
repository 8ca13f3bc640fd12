//! Two engines sharing sessions through a real Redis (`BREEZE_TEST_REDIS_URL`, default
//! 127.0.0.1:6379): each request of a session may land on either, as behind a load balancer
//! with no affinity.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

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
    http::{HeaderMap, Request, StatusCode, header},
    response::Response,
};
use breeze_limits::MemoryLimiter;
use breeze_mcp::{
    Client, Cx, Engine, EngineConfig, HttpError, McpApp,
    cluster::SessionCluster,
    http::{Routes, router},
    jsonrpc::ErrorObject,
    model::{CallToolResult, GetPromptResult, ResourceContents, ServerInfo, ToolDef},
    session::SessionLimits,
};
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The one extension the app supports.
const UI: &str = "io.modelcontextprotocol/ui";

/// The app behind both engines: the credential is the `x-key` header.
#[derive(Default)]
struct App {
    /// Calls of `wait` started.
    waiting: AtomicUsize,
    /// Calls of `wait` that ended (they end only by cancellation).
    cancelled: AtomicUsize,
}

impl McpApp for App {
    type Principal = ();

    async fn authenticate(
        &self,
        headers: &HeaderMap,
        _query: Option<&str>,
    ) -> Result<Client<()>, HttpError> {
        let key = headers
            .get("x-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("k1");
        // `tenant/key` names a tenant; a bare key is tenant `t`'s.
        Ok(Client {
            principal: (),
            key: key.into(),
            tenant: key.split_once('/').map_or("t", |(t, _)| t).into(),
            binding: None,
        })
    }

    fn extensions(&self) -> Map<String, Value> {
        Map::from_iter([(
            UI.to_owned(),
            json!({ "mimeTypes": ["text/html;profile=mcp-app"] }),
        )])
    }

    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "cluster-test".into(),
            version: "0".into(),
            revision: None,
            title: None,
        }
    }

    async fn list_tools(&self, _cx: &Cx<()>) -> Result<Vec<ToolDef>, ErrorObject> {
        Ok(Vec::new())
    }

    async fn call_tool(
        &self,
        cx: Cx<()>,
        name: String,
        arguments: Value,
    ) -> Result<CallToolResult, ErrorObject> {
        match name.as_str() {
            "echo" => Ok(CallToolResult::text(arguments.to_string())),
            // The extensions in force for this request, with the client's settings.
            "extensions" => Ok(CallToolResult::text(
                json!({
                    "ids": cx.extensions.ids().collect::<Vec<_>>(),
                    "ui": cx.extensions.get(UI),
                })
                .to_string(),
            )),
            "announce" => {
                // A message tied to no request: it travels on the session's own stream.
                if let Some(peer) = cx.peer.standalone() {
                    peer.notify(
                        "notifications/message",
                        json!({ "level": "info", "data": arguments }),
                    )
                    .await;
                }
                Ok(CallToolResult::text("announced"))
            }
            "wait" => {
                /// Counts the call's end, whether the engine drops it or it sees the
                /// cancellation first.
                struct Ended<'a>(&'a AtomicUsize);
                impl Drop for Ended<'_> {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let _ended = Ended(&self.cancelled);
                cx.cancel.cancelled().await;
                Ok(CallToolResult::text("cancelled"))
            }
            "ask" => {
                let answer = cx
                    .peer
                    .request("sampling/createMessage", json!({ "messages": [] }))
                    .await?;
                let text = answer.pointer("/content/text").and_then(Value::as_str);
                Ok(CallToolResult::text(format!(
                    "answer: {}",
                    text.unwrap_or("")
                )))
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

    async fn record(&self, _record: breeze_mcp::RequestRecord<'_, ()>) -> Result<(), ErrorObject> {
        Ok(())
    }
}

#[allow(clippy::disallowed_methods)] // test-harness setting
fn redis_url() -> String {
    std::env::var("BREEZE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// One instance: its engine (cluster tasks running until the test ends) and its routes.
struct Instance {
    engine: Arc<Engine<App>>,
    routes: Router,
}

/// `n` instances of one cluster under a fresh key prefix.
async fn cluster(n: usize, sessions: SessionLimits, stop: &CancellationToken) -> Vec<Instance> {
    let prefix = format!("breeze:test:mcp:{}:", uuid::Uuid::new_v4().simple());
    let mut nodes = Vec::new();
    for _ in 0..n {
        let node = instance(&redis_url(), &prefix, sessions, stop);
        tokio::time::timeout(Duration::from_secs(5), node.engine.cluster_ready())
            .await
            .expect("subscribed to the cluster within 5 s");
        nodes.push(node);
    }
    nodes
}

fn instance(
    url: &str,
    prefix: &str,
    sessions: SessionLimits,
    stop: &CancellationToken,
) -> Instance {
    let cluster = Arc::new(SessionCluster::new(url, prefix).unwrap());
    let config = EngineConfig {
        sessions,
        message_rate_per_minute: 10_000,
        sse_rate_per_minute: 10_000,
        ..EngineConfig::default()
    };
    let engine = Engine::in_cluster(
        Arc::new(App::default()),
        config,
        Arc::new(MemoryLimiter::new()),
        cluster,
    );
    engine.spawn_sweeper(stop.clone());
    let routes = router(engine.clone(), &Routes::default());
    Instance { engine, routes }
}

async fn send(routes: &Router, request: Request<Body>) -> Response {
    routes.clone().oneshot(request).await.unwrap()
}

fn post(session: Option<&str>, key: &str, body: &Value) -> Request<Body> {
    let mut r = Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("x-key", key);
    if let Some(id) = session {
        r = r
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-11-25");
    }
    r.body(Body::from(body.to_string())).unwrap()
}

fn initialize_body() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": { "sampling": {} },
            "clientInfo": { "name": "t", "version": "1" }
        }
    })
}

/// Opens a Streamable HTTP session on `at` for `key`.
async fn initialize(at: &Instance, key: &str) -> Result<String, Response> {
    initialize_declaring(at, key, None).await
}

/// Opens a session whose client declares `extensions` in its capabilities.
async fn initialize_declaring(
    at: &Instance,
    key: &str,
    extensions: Option<Value>,
) -> Result<String, Response> {
    let mut body = initialize_body();
    if let Some(e) = extensions {
        body["params"]["capabilities"]["extensions"] = e;
    }
    let r = send(&at.routes, post(None, key, &body)).await;
    if r.status() != StatusCode::OK {
        return Err(r);
    }
    Ok(r.headers()["mcp-session-id"].to_str().unwrap().to_owned())
}

fn call(id: i64, tool: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": arguments }
    })
}

async fn body_json(r: Response) -> Value {
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// The next `data:` JSON of an SSE body (skipping keep-alives and other lines).
struct SseReader {
    body: axum::body::BodyDataStream,
    buffer: String,
}

impl SseReader {
    fn new(r: Response) -> Self {
        Self {
            body: r.into_body().into_data_stream(),
            buffer: String::new(),
        }
    }

    /// The next event as (event name, data), within five seconds.
    async fn next(&mut self) -> (String, String) {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..end + 2).collect();
                    let mut name = String::from("message");
                    let mut data = String::new();
                    for line in event.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            name = v.trim().to_owned();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.trim_start());
                        }
                    }
                    if !data.is_empty() {
                        return (name, data);
                    }
                    continue;
                }
                let chunk = self.body.next().await.expect("stream ended").unwrap();
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .expect("an SSE event within 5 s")
    }

    /// Whether the stream ends within `patience` (whatever it sends meanwhile).
    async fn ends_within(&mut self, patience: Duration) -> bool {
        tokio::time::timeout(patience, async {
            while let Some(chunk) = self.body.next().await {
                if chunk.is_err() {
                    break;
                }
            }
        })
        .await
        .is_ok()
    }

    async fn next_json(&mut self) -> Value {
        let (_, data) = self.next().await;
        serde_json::from_str(&data).unwrap()
    }
}

/// Retries `check` for up to two seconds: news travels between instances asynchronously.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_for(Duration::from_secs(2), what, check).await;
}

async fn eventually_for<F, Fut>(patience: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within {patience:?}");
}

#[tokio::test]
async fn a_session_opened_on_one_instance_is_served_by_another() {
    let stop = CancellationToken::new();
    let nodes = cluster(2, SessionLimits::default(), &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let id = initialize(a, "k1").await.unwrap();

    let r = send(
        &b.routes,
        post(Some(&id), "k1", &call(1, "echo", json!({"x": 1}))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let reply = body_json(r).await;
    assert_eq!(
        reply["result"]["content"][0]["text"], r#"{"x":1}"#,
        "{reply}"
    );
    assert_eq!(
        b.engine.sessions().len(),
        1,
        "b adopted the session from the cluster"
    );
    let (live, stats) = b.engine.session_stats();
    assert_eq!(live, 1);
    assert!(
        stats.unwrap().redis_round_trips >= 1,
        "the lookup is counted"
    );

    // Another credential cannot use it, on either instance: it does not exist for them.
    for at in [a, b] {
        let r = send(
            &at.routes,
            post(Some(&id), "k2", &call(2, "echo", json!({}))),
        )
        .await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
    let unknown = "0123456789abcdef0123456789abcdef";
    let r = send(
        &b.routes,
        post(Some(unknown), "k1", &call(3, "echo", json!({}))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // Ended through b, it ends on a too.
    let r = send(
        &b.routes,
        Request::delete("/mcp")
            .header("x-key", "k1")
            .header("mcp-session-id", &id)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    eventually("a hears of the end", || async {
        a.engine.sessions().is_empty()
    })
    .await;
    let r = send(
        &a.routes,
        post(Some(&id), "k1", &call(4, "echo", json!({}))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    stop.cancel();
}

/// The extensions a client's `initialize` agreed travel in the session's record: whichever
/// instance a later request reaches serves them, with the client's settings, and a session
/// that declared none has none anywhere.
#[tokio::test]
async fn negotiated_extensions_follow_the_session_to_every_instance() {
    let stop = CancellationToken::new();
    let nodes = cluster(3, SessionLimits::default(), &stop).await;
    let declared = json!({
        UI: { "mimeTypes": ["text/html;profile=mcp-app"] },
        "io.example/unsupported": {},
    });
    let with = initialize_declaring(&nodes[0], "k1", Some(declared))
        .await
        .unwrap();
    let without = initialize(&nodes[0], "k1").await.unwrap();
    let in_force = |at: &Instance, id: &str, n: i64| {
        let (routes, id) = (at.routes.clone(), id.to_owned());
        async move {
            let r = send(
                &routes,
                post(Some(&id), "k1", &call(n, "extensions", json!({}))),
            )
            .await;
            assert_eq!(r.status(), StatusCode::OK);
            let reply = body_json(r).await;
            serde_json::from_str::<Value>(reply["result"]["content"][0]["text"].as_str().unwrap())
                .unwrap()
        }
    };
    for (n, at) in nodes.iter().enumerate() {
        let n = n as i64;
        assert_eq!(
            in_force(at, &with, 2 * n).await,
            json!({ "ids": [UI], "ui": { "mimeTypes": ["text/html;profile=mcp-app"] } }),
            "instance {n}"
        );
        assert_eq!(
            in_force(at, &without, 2 * n + 1).await,
            json!({ "ids": [], "ui": null }),
            "instance {n}"
        );
    }
    assert_eq!(
        nodes[2].engine.sessions().len(),
        2,
        "adopted from the cluster"
    );
    stop.cancel();
}

/// Opens a legacy SSE session on `at` as `key`: its stream, and the path its messages go to.
async fn open_legacy(at: &Instance, key: &str) -> (SseReader, String) {
    let stream = send(
        &at.routes,
        Request::get("/api/v1/mcp/sse")
            .header("x-key", key)
            .header(header::ACCEPT, "text/event-stream")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(stream.status(), StatusCode::OK);
    let mut events = SseReader::new(stream);
    let (name, endpoint) = events.next().await;
    assert_eq!(name, "endpoint");
    let path = endpoint
        .split_once("/api/")
        .map(|(_, p)| format!("/api/{p}"))
        .unwrap();
    (events, path)
}

#[tokio::test]
async fn legacy_replies_reach_the_stream_wherever_the_post_lands() {
    let stop = CancellationToken::new();
    let nodes = cluster(2, SessionLimits::default(), &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let (mut events, path) = open_legacy(a, "k1").await;

    // Every message goes to b, and a mix to a: the replies come back on a's stream in order.
    let mut messages = vec![initialize_body()];
    messages.extend((1..=20).map(|i| call(i, "echo", json!({ "n": i }))));
    for (i, m) in messages.iter().enumerate() {
        let at = if i % 3 == 2 { a } else { b };
        let r = send(
            &at.routes,
            Request::post(path.as_str())
                .header(header::CONTENT_TYPE, "application/json")
                .header("x-key", "k1")
                .body(Body::from(m.to_string()))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        // Each reply before the next message, as a client awaiting its answers would.
        let reply = events.next_json().await;
        assert_eq!(reply["id"], m["id"], "{reply}");
    }

    // Another credential's POST for the session is refused on b as on a.
    let r = send(
        &b.routes,
        Request::post(path.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-key", "k2")
            .body(Body::from(call(99, "echo", json!({})).to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // The stream's end ends the session everywhere.
    drop(events);
    eventually("the session ends on both", || async {
        a.engine.sessions().is_empty() && b.engine.sessions().is_empty()
    })
    .await;
    stop.cancel();
}

#[tokio::test]
async fn the_get_stream_receives_what_another_instance_sends_on_it() {
    let stop = CancellationToken::new();
    let nodes = cluster(2, SessionLimits::default(), &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let id = initialize(a, "k1").await.unwrap();
    // b adopts the session before a opens its GET stream: the news of the stream must reach b.
    let r = send(
        &b.routes,
        post(Some(&id), "k1", &call(1, "echo", json!({}))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let stream = send(
        &a.routes,
        Request::get("/mcp")
            .header("x-key", "k1")
            .header("mcp-session-id", &id)
            .header("mcp-protocol-version", "2025-11-25")
            .header(header::ACCEPT, "text/event-stream")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(stream.status(), StatusCode::OK);
    let mut events = SseReader::new(stream);
    // The news that a holds the stream travels to b asynchronously.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = send(
        &b.routes,
        post(Some(&id), "k1", &call(2, "announce", json!({ "n": 7 }))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let note = events.next_json().await;
    assert_eq!(note["method"], "notifications/message", "{note}");
    assert_eq!(note["params"]["data"]["n"], 7);
    stop.cancel();
}

#[tokio::test]
async fn a_cancellation_reaches_the_call_on_another_instance() {
    let stop = CancellationToken::new();
    let nodes = cluster(2, SessionLimits::default(), &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let id = initialize(a, "k1").await.unwrap();
    let running = {
        let (routes, id) = (a.routes.clone(), id.clone());
        tokio::spawn(async move {
            send(&routes, post(Some(&id), "k1", &call(7, "wait", json!({})))).await
        })
    };
    eventually("the call runs on a", || async {
        a.engine.app().waiting.load(Ordering::SeqCst) == 1
    })
    .await;
    let cancel = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 7, "reason": "user" }
    });
    let r = send(&b.routes, post(Some(&id), "k1", &cancel)).await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    eventually("the call on a is cancelled", || async {
        a.engine.app().cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the cancelled call's request ends");
    stop.cancel();
}

#[tokio::test]
async fn the_answer_to_a_server_request_reaches_the_instance_that_asked() {
    let stop = CancellationToken::new();
    let nodes = cluster(2, SessionLimits::default(), &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let id = initialize(a, "k1").await.unwrap();
    let r = send(&a.routes, post(Some(&id), "k1", &call(5, "ask", json!({})))).await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut events = SseReader::new(r);
    let request = events.next_json().await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let answer = json!({
        "jsonrpc": "2.0", "id": request["id"],
        "result": { "role": "assistant", "content": { "type": "text", "text": "hi" }, "model": "m" }
    });
    let r = send(&b.routes, post(Some(&id), "k1", &answer)).await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let reply = events.next_json().await;
    assert_eq!(reply["id"], 5);
    assert_eq!(
        reply["result"]["content"][0]["text"], "answer: hi",
        "{reply}"
    );
    stop.cancel();
}

#[tokio::test]
async fn session_caps_count_every_instance() {
    let stop = CancellationToken::new();
    let limits = SessionLimits {
        max_per_key: 2,
        ..SessionLimits::default()
    };
    let nodes = cluster(2, limits, &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let first = initialize(a, "k1").await.unwrap();
    let second = initialize(b, "k1").await.unwrap();
    // Both were used just now: neither may be ended to make room.
    let refused = initialize(a, "k1").await.unwrap_err();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    // Another credential has its own cap.
    initialize(b, "k2").await.unwrap();

    // Once idle, the least recently used one ends for a new session, on whichever instance.
    let idle = breeze_mcp::cluster::IDLE_AFTER + Duration::from_millis(300);
    tokio::time::sleep(idle).await;
    let r = send(
        &a.routes,
        post(Some(&second), "k1", &call(1, "echo", json!({}))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    tokio::time::sleep(breeze_mcp::cluster::REFRESH_EVERY * 2).await;
    initialize(b, "k1")
        .await
        .expect("the idle session made room");
    eventually("the first session ends on a", || async {
        send(
            &a.routes,
            post(Some(&first), "k1", &call(2, "echo", json!({}))),
        )
        .await
        .status()
            == StatusCode::NOT_FOUND
    })
    .await;
    let r = send(
        &b.routes,
        post(Some(&second), "k1", &call(3, "echo", json!({}))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK, "the recently used one stays");
    stop.cancel();
}

/// Four tenants fill the cluster-wide cap; a fifth still gets a session: the least recently
/// used idle session of the tenant holding the most ends, on whichever instance. When every
/// session is busy, the fifth is refused.
#[tokio::test]
async fn at_the_cluster_cap_the_largest_tenant_gives_way() {
    let stop = CancellationToken::new();
    let limits = SessionLimits {
        max_total: 5,
        max_per_tenant: 3,
        max_per_key: 3,
        ..SessionLimits::default()
    };
    let nodes = cluster(2, limits, &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let big_oldest = initialize(a, "big/k").await.unwrap();
    let big_newer = initialize(b, "big/k").await.unwrap();
    let small = initialize(a, "small/k").await.unwrap();
    let other = initialize(b, "other/k").await.unwrap();
    let fifth = initialize(a, "fifth/k").await.unwrap();
    // Full, and everything was used just now: refused.
    let refused = initialize(b, "sixth/k").await.unwrap_err();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);

    // All idle (activity reaches Redis up to a refresh late): the largest tenant's least
    // recently used session makes room.
    let idle = breeze_mcp::cluster::IDLE_AFTER
        + breeze_mcp::cluster::REFRESH_EVERY * 2
        + Duration::from_millis(300);
    tokio::time::sleep(idle).await;
    initialize(b, "sixth/k")
        .await
        .expect("room made at the server-wide cap");
    let alive = |at: &Instance, id: &str, key: &str| {
        let (routes, id, key) = (at.routes.clone(), id.to_owned(), key.to_owned());
        async move {
            send(&routes, post(Some(&id), &key, &call(9, "echo", json!({}))))
                .await
                .status()
                == StatusCode::OK
        }
    };
    // One of `big`'s two ends (which one depends on when each instance last reported it);
    // every other tenant keeps its session.
    eventually("one of the largest tenant's sessions ends", || async {
        !alive(a, &big_oldest, "big/k").await || !alive(b, &big_newer, "big/k").await
    })
    .await;
    assert!(
        alive(a, &big_oldest, "big/k").await || alive(b, &big_newer, "big/k").await,
        "only one of them"
    );
    for (at, id, key) in [
        (a, &small, "small/k"),
        (b, &other, "other/k"),
        (a, &fifth, "fifth/k"),
    ] {
        assert!(alive(at, id, key).await, "{key}'s session stays");
    }
    stop.cancel();
}

/// Tenants holding the cluster's cap in legacy SSE streams (older clients, whose session lives
/// as long as its stream) cannot lock another tenant out: once unused, the largest tenant's
/// least recently used stream makes room, and ends.
#[tokio::test]
async fn at_the_cluster_cap_legacy_streams_give_way_too() {
    let stop = CancellationToken::new();
    let limits = SessionLimits {
        max_total: 3,
        max_per_tenant: 3,
        max_per_key: 3,
        ..SessionLimits::default()
    };
    let nodes = cluster(2, limits, &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let (mut big_a, _) = open_legacy(a, "big/k").await;
    let (mut big_b, _) = open_legacy(b, "big/k").await;
    let (mut small, _) = open_legacy(a, "small/k").await;
    let refused = initialize(b, "new/k").await.unwrap_err();
    assert_eq!(
        refused.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "every stream was used just now"
    );

    // Unused for longer than IDLE_AFTER, though each instance reports its streams every
    // second to keep them alive.
    let idle = breeze_mcp::cluster::IDLE_AFTER
        + breeze_mcp::cluster::REFRESH_EVERY * 2
        + Duration::from_millis(300);
    tokio::time::sleep(idle).await;
    initialize(b, "new/k")
        .await
        .expect("room made at the server-wide cap");
    let (ended_a, ended_b) = tokio::join!(
        big_a.ends_within(Duration::from_secs(3)),
        big_b.ends_within(Duration::from_secs(3))
    );
    assert!(
        ended_a ^ ended_b,
        "exactly one of the largest tenant's streams ends: {ended_a} {ended_b}"
    );
    assert!(
        !small.ends_within(Duration::from_millis(500)).await,
        "the other tenant keeps its stream"
    );
    stop.cancel();
}

#[tokio::test]
async fn without_redis_sessions_are_refused_not_made_local() {
    let stop = CancellationToken::new();
    let down = instance("redis://127.0.0.1:1", "x:", SessionLimits::default(), &stop);
    let refused = initialize(&down, "k1").await.unwrap_err();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    assert!(down.engine.sessions().is_empty());
    let r = send(
        &down.routes,
        post(
            Some("0123456789abcdef0123456789abcdef"),
            "k1",
            &call(1, "echo", json!({})),
        ),
    )
    .await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Stateless requests need no session and still work.
    let stateless = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "echo", "arguments": {} }
    });
    let r = send(&down.routes, post(None, "k1", &stateless)).await;
    assert_eq!(r.status(), StatusCode::OK);
    stop.cancel();
}

/// A Redis of the test's own on a free port (Debian's `redis-server`), to stop and restart.
struct PrivateRedis {
    port: u16,
    child: std::process::Child,
}

impl PrivateRedis {
    fn start(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    /// A Redis on `port` started with `args` (`--replicaof …`, or a sentinel's configuration
    /// file and `--sentinel`) after the test's own.
    fn start_with(port: u16, args: &[&str]) -> Self {
        let mut child = std::process::Command::new("redis-server")
            .args(args)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (Debian's redis-server package) on PATH");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self { port, child };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not listen on {port}");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test]
async fn a_redis_restart_loses_no_session_and_recovers_by_itself() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut redis = PrivateRedis::start(port);
    let stop = CancellationToken::new();
    let limits = SessionLimits::default();
    let a = instance(&redis.url(), "r:", limits, &stop);
    let b = instance(&redis.url(), "r:", limits, &stop);
    let ui = json!({ UI: { "mimeTypes": ["text/html;profile=mcp-app"] } });
    let id = initialize_declaring(&a, "k1", Some(ui.clone()))
        .await
        .unwrap();
    let used = |at: &Instance, n: i64| {
        let (routes, id) = (at.routes.clone(), id.clone());
        async move {
            send(&routes, post(Some(&id), "k1", &call(n, "echo", json!({}))))
                .await
                .status()
        }
    };
    assert_eq!(used(&b, 1).await, StatusCode::OK);

    redis.stop();
    let refused = initialize(&a, "k1").await.unwrap_err();
    assert_eq!(
        refused.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "fails closed"
    );
    assert_eq!(
        used(&a, 2).await,
        StatusCode::OK,
        "a session held here still works"
    );

    // Back, empty: a's session is recorded again once a has resubscribed, so an instance that
    // never saw it (c) can serve it, and new sessions open again.
    let redis = PrivateRedis::start(port);
    let c = instance(&redis.url(), "r:", limits, &stop);
    eventually_for(Duration::from_secs(10), "c serves a's session", || async {
        used(&c, 3).await == StatusCode::OK
    })
    .await;
    // With the extensions its `initialize` agreed: a recorded them again with the session.
    let r = send(
        &c.routes,
        post(Some(&id), "k1", &call(5, "extensions", json!({}))),
    )
    .await;
    let reply = body_json(r).await;
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap()["ui"],
        ui[UI],
        "{reply}"
    );
    assert_eq!(used(&b, 4).await, StatusCode::OK);
    initialize(&b, "k1").await.expect("new sessions open again");
    stop.cancel();
}

/// A session whose creator is gone (killed: nothing of it is left but the record) survives
/// Redis restarting empty through the copy another instance adopted: that instance records it
/// again as its own. In the moment before it has, an instance that never saw the session
/// answers "retry" (503), not "gone" (404).
#[tokio::test]
async fn a_session_whose_creator_died_survives_a_redis_restart() {
    let port = free_port();
    let mut redis = PrivateRedis::start(port);
    let (stop, stop_a) = (CancellationToken::new(), CancellationToken::new());
    let limits = SessionLimits::default();
    let a = instance(&redis.url(), "d:", limits, &stop_a);
    let b = instance(&redis.url(), "d:", limits, &stop);
    let id = initialize(&a, "k1").await.unwrap();
    let used = |at: &Instance, n: i64| {
        let (routes, id) = (at.routes.clone(), id.clone());
        async move {
            send(&routes, post(Some(&id), "k1", &call(n, "echo", json!({}))))
                .await
                .status()
        }
    };
    assert_eq!(used(&b, 1).await, StatusCode::OK, "b adopts it");
    stop_a.cancel();
    drop(a);

    redis.stop();
    let redis = PrivateRedis::start(port);
    // An instance that never saw the session, asked before b has recorded it again (c starts
    // with the restart; b needs up to half a second to subscribe again).
    let c = instance(&redis.url(), "d:", limits, &stop);
    let early = used(&c, 2).await;
    assert!(
        early == StatusCode::OK || early == StatusCode::SERVICE_UNAVAILABLE,
        "retry or served, never gone: {early}"
    );
    eventually_for(Duration::from_secs(10), "c serves the session", || async {
        used(&c, 3).await == StatusCode::OK
    })
    .await;
    assert_eq!(used(&b, 4).await, StatusCode::OK);
    // Past the grace, an unknown session is gone again.
    tokio::time::sleep(breeze_mcp::cluster::RECOVERY_GRACE).await;
    let r = send(
        &c.routes,
        post(
            Some("0123456789abcdef0123456789abcdef"),
            "k1",
            &call(5, "echo", json!({})),
        ),
    )
    .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    drop(redis);
    stop.cancel();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `redis-cli -p port args…`, its answer as text.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli (Debian's redis-tools package) on PATH");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A primary, its replica and a sentinel watching them: the primary killed (SIGKILL) under load
/// is replaced by the replica within seconds, and nothing is lost but what could not be
/// answered while there was no primary (refused with 503, never an empty or wrong answer).
#[tokio::test]
async fn a_sentinel_failover_under_load_loses_no_session() {
    let (p, r, s) = (free_port(), free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("breeze-sentinel-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    // Replication passes a snapshot through the working directory: the test's own.
    let at = ["--dir", dir.to_str().unwrap()];
    let mut primary = PrivateRedis::start_with(p, &at);
    let replica_of = ["--replicaof", "127.0.0.1", &p.to_string()];
    let _replica = PrivateRedis::start_with(r, &[&at[..], &replica_of[..]].concat());
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "dir {}\nsentinel monitor svc 127.0.0.1 {p} 1\n\
             sentinel down-after-milliseconds svc 1000\nsentinel failover-timeout svc 5000\n",
            dir.display()
        ),
    )
    .unwrap();
    let _sentinel = PrivateRedis::start_with(s, &[conf.to_str().unwrap(), "--sentinel"]);
    eventually_for(Duration::from_secs(10), "the replica follows", || async {
        redis_cli(r, &["info", "replication"]).contains("master_link_status:up")
    })
    .await;
    eventually_for(
        Duration::from_secs(10),
        "the sentinel sees the replica",
        || async { redis_cli(s, &["sentinel", "replicas", "svc"]).contains(&r.to_string()) },
    )
    .await;

    let url = format!("redis+sentinel://127.0.0.1:{s}/svc");
    let stop = CancellationToken::new();
    let limits = SessionLimits::default();
    let a = instance(&url, "f:", limits, &stop);
    let b = instance(&url, "f:", limits, &stop);
    tokio::time::timeout(Duration::from_secs(5), async {
        a.engine.cluster_ready().await;
        b.engine.cluster_ready().await;
    })
    .await
    .expect("both subscribed through the sentinel's primary");
    let mut sessions = Vec::new();
    for i in 0..8 {
        let at = if i % 2 == 0 { &a } else { &b };
        match initialize(at, &format!("k{i}")).await {
            Ok(id) => sessions.push(id),
            Err(r) => panic!("{}: {}", r.status(), body_json(r).await),
        }
    }
    // Replicated before the primary dies (WAIT: the replica acknowledged every write).
    assert_eq!(redis_cli(p, &["wait", "1", "2000"]).trim(), "1");

    // Load: every session used in turn through both instances until told to stop.
    let load_stop = CancellationToken::new();
    let load = {
        let (a, b) = (a.routes.clone(), b.routes.clone());
        let (sessions, load_stop) = (sessions.clone(), load_stop.clone());
        tokio::spawn(async move {
            let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
            let mut opened = std::collections::BTreeMap::<u16, usize>::new();
            let mut n = 100;
            while !load_stop.is_cancelled() {
                for (i, id) in sessions.iter().enumerate() {
                    let routes = if (i + n as usize).is_multiple_of(2) {
                        &a
                    } else {
                        &b
                    };
                    let key = format!("k{i}");
                    let r = send(routes, post(Some(id), &key, &call(n, "echo", json!({})))).await;
                    let status = r.status().as_u16();
                    if status == 200 {
                        let reply = body_json(r).await;
                        assert_eq!(
                            reply["id"], n,
                            "every answer is to its own request: {reply}"
                        );
                    }
                    *statuses.entry(status).or_default() += 1;
                    n += 1;
                }
                // And a session opened and ended, which needs the primary each time.
                let routes = if n % 2 == 0 { &a } else { &b };
                let r = send(routes, post(None, "churn", &initialize_body())).await;
                let status = r.status().as_u16();
                if status == 503 {
                    assert!(
                        r.headers().contains_key(header::RETRY_AFTER),
                        "503 says when"
                    );
                }
                *opened.entry(status).or_default() += 1;
                if status == 200 {
                    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
                    let end = Request::delete("/mcp")
                        .header("x-key", "churn")
                        .header("mcp-session-id", id)
                        .body(Body::empty())
                        .unwrap();
                    send(routes, end).await;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (statuses, opened)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    primary.stop();
    eventually_for(
        Duration::from_secs(20),
        "the replica is promoted",
        || async { redis_cli(r, &["role"]).starts_with("master") },
    )
    .await;
    eventually_for(
        Duration::from_secs(10),
        "new sessions open again",
        || async { initialize(&a, "k1").await.is_ok() && initialize(&b, "k1").await.is_ok() },
    )
    .await;
    // Past the failover the load runs clean.
    tokio::time::sleep(Duration::from_millis(500)).await;
    load_stop.cancel();
    let (during, opened) = load.await.unwrap();
    let after = {
        let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
        for (i, id) in sessions.iter().enumerate() {
            let routes = if i % 2 == 0 { &b.routes } else { &a.routes };
            let r = send(
                routes,
                post(Some(id), &format!("k{i}"), &call(1, "echo", json!({}))),
            )
            .await;
            *statuses.entry(r.status().as_u16()).or_default() += 1;
        }
        statuses
    };
    eprintln!(
        "sentinel failover: calls under load {during:?}, sessions opened under load {opened:?}, \
         calls after {after:?}"
    );
    assert!(
        during.keys().all(|s| *s == 200 || *s == 503),
        "only answers or 503 while there was no primary: {during:?}"
    );
    assert!(
        opened.keys().all(|s| *s == 200 || *s == 503),
        "only sessions or 503 while there was no primary: {opened:?}"
    );
    assert_eq!(
        after,
        [(200, sessions.len())].into(),
        "every session survived"
    );
    // An instance that never saw them finds every session in the promoted primary (once the
    // sentinel, which has just taken the replica up as the primary, vouches for it).
    let c = instance(&url, "f:", limits, &stop);
    for (i, id) in sessions.iter().enumerate() {
        let (routes, key) = (c.routes.clone(), format!("k{i}"));
        eventually_for(
            Duration::from_secs(5),
            "a new instance serves the session",
            || {
                let (routes, key) = (routes.clone(), key.clone());
                async move {
                    let r = send(&routes, post(Some(id), &key, &call(1, "echo", json!({})))).await;
                    match r.status() {
                        StatusCode::OK => true,
                        StatusCode::SERVICE_UNAVAILABLE => false,
                        other => panic!("session {i} from a new instance: {other}"),
                    }
                }
            },
        )
        .await;
    }
    stop.cancel();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_session_in_use_stays_counted_past_the_idle_ttl() {
    let stop = CancellationToken::new();
    let limits = SessionLimits {
        max_per_key: 1,
        idle_ttl: Duration::from_secs(4),
        ..SessionLimits::default()
    };
    let nodes = cluster(2, limits, &stop).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let id = initialize(a, "k1").await.unwrap();
    // Used every half second for longer than the idle TTL, on both instances.
    for n in 0..14 {
        let at = if n % 2 == 0 { a } else { b };
        let r = send(
            &at.routes,
            post(Some(&id), "k1", &call(n, "echo", json!({}))),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK, "call {n}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let refused = initialize(b, "k1").await.unwrap_err();
    assert_eq!(
        refused.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the busy session still fills the key's cap"
    );
    stop.cancel();
}
