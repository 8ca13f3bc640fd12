//! The MCP server in-process: authentication, limits, sessions, protocol rules, the tool
//! contract and the audit trail — every limit and error the specification names.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use breeze_auth::{AuthService, AuthSettings, CreateApiKey, password};
use breeze_core::{Scope, ScopeSet};
use breeze_limits::{LimiterError, MemoryLimiter, RateDecision, RateLimiter};
use breeze_store::{AuditFilter, NewUser, testing::Ctx};
use common::{Reply, World, audit, build, err_msg, send, world};
use futures::future::{BoxFuture, FutureExt};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn post(path: &str, key: Option<&str>, body: &Value, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::post(path).header("content-type", "application/json");
    if let Some(k) = key {
        b = b.header("x-api-key", k);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

fn rpc(id: i64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

fn init(version: &str) -> Value {
    rpc(
        1,
        "initialize",
        json!({ "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "test", "version": "1" } }),
    )
}

async fn initialize(app: &Router, key: &str) -> String {
    let r = send(app, post("/mcp", Some(key), &init("2025-06-18"), &[])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

async fn authentication_failures_are_401s(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let list = rpc(1, "tools/list", json!({}));
    for path in ["/mcp", "/api/v1/mcp", "/api/v1/mcp/message"] {
        let r = send(&app, post(path, None, &list, &[])).await;
        assert_eq!(
            (r.status, err_msg(&r)),
            (StatusCode::UNAUTHORIZED, "Missing X-API-Key header"),
            "{path}"
        );
        let r = send(&app, post(path, Some("sk-live-123"), &list, &[])).await;
        assert_eq!(
            (r.status, err_msg(&r)),
            (StatusCode::UNAUTHORIZED, "Invalid API key format"),
            "{path}"
        );
        let r = send(
            &app,
            post(path, Some(&format!("brz_{}", "A".repeat(43))), &list, &[]),
        )
        .await;
        assert_eq!(
            (r.status, err_msg(&r)),
            (StatusCode::UNAUTHORIZED, "Invalid API key"),
            "{path}"
        );
    }
    let r = send(
        &app,
        post("/mcp", None, &list, &[("authorization", "Bearer abc")]),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(err_msg(&r).contains("OAuth is not enabled"));
    let r = send(
        &app,
        Request::get("/api/v1/mcp/sse").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::UNAUTHORIZED, "Missing X-API-Key header")
    );
    assert_eq!(r.headers.get("www-authenticate").unwrap(), "X-API-Key");
}

async fn large_bodies_are_refused_before_parsing(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let big = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping", "params": { "pad": "x".repeat(70_000) } });
    for path in ["/mcp", "/api/v1/mcp/message"] {
        let r = send(&app, post(path, Some(&w.read), &big, &[])).await;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert!(
            err_msg(&r).contains("65536 bytes (MCP_MESSAGE_MAX_BODY_BYTES)"),
            "{}",
            r.body
        );
    }
    // The limit is a setting.
    let app = build(
        &w,
        |c| c.mcp.max_body_bytes = 100_000,
        Arc::new(MemoryLimiter::new()),
    );
    assert_eq!(
        send(&app, post("/mcp", Some(&w.read), &big, &[]))
            .await
            .status,
        StatusCode::OK
    );
}

/// At a full cap, per key or server-wide, a new session ends the least recently used one with
/// no call in flight — a legacy SSE stream too, which then ends — instead of refusing (the
/// refusal when every session is busy is the registry's own test).
async fn session_caps_per_key_and_server_wide(cx: Ctx) {
    let w = world(&cx).await;
    let app = build(
        &w,
        |c| {
            c.mcp.sessions.max_per_key = 2;
            c.mcp.sessions.max_total = 3;
        },
        Arc::new(MemoryLimiter::new()),
    );
    let legacy = |key: String| {
        let app = app.clone();
        async move {
            let get = Request::get("/api/v1/mcp/sse")
                .header("x-api-key", key)
                .body(Body::empty())
                .unwrap();
            app.oneshot(get).await.unwrap()
        }
    };
    // Whether a legacy stream ends within two seconds.
    let ends = |r: axum::response::Response| async move {
        tokio::time::timeout(Duration::from_secs(2), r.into_body().collect())
            .await
            .is_ok()
    };
    let first = legacy(w.read.clone()).await;
    assert_eq!(first.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = legacy(w.read.clone()).await;
    assert_eq!(second.status(), StatusCode::OK);
    // The key's third session ends its least recently used: the first stream.
    let r = send(&app, post("/mcp", Some(&w.read), &init("2025-06-18"), &[])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    assert!(
        ends(first).await,
        "the first legacy stream ends with its session"
    );
    // Server-wide: the organization holds three (the cap); another organization's first
    // session ends one of them rather than being refused — one without a stream first.
    let third = legacy(w.write.clone()).await;
    assert_eq!(third.status(), StatusCode::OK);
    let r = send(
        &app,
        post("/mcp", Some(&w.other_org_key), &init("2025-06-18"), &[]),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let list = rpc(2, "tools/list", json!({}));
    let r = send(
        &app,
        post("/mcp", Some(&w.read), &list, &[("mcp-session-id", &sid)]),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "the stream-less session ended"
    );
    let second_open =
        tokio::time::timeout(Duration::from_millis(300), second.into_body().collect())
            .await
            .is_err();
    assert!(second_open, "the streams stay");
}

async fn a_session_belongs_to_its_key(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let sid = initialize(&app, &w.read).await;
    let list = rpc(2, "tools/list", json!({}));
    let ok = send(
        &app,
        post("/mcp", Some(&w.read), &list, &[("mcp-session-id", &sid)]),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    // Another key (even of the same organization) gets exactly what an unknown session gets.
    let theirs = send(
        &app,
        post("/mcp", Some(&w.write), &list, &[("mcp-session-id", &sid)]),
    )
    .await;
    let unknown = send(
        &app,
        post(
            "/mcp",
            Some(&w.write),
            &list,
            &[("mcp-session-id", "0123456789abcdef")],
        ),
    )
    .await;
    assert_eq!(
        (theirs.status, theirs.body.clone()),
        (unknown.status, unknown.body.clone())
    );
    assert_eq!(
        (theirs.status, err_msg(&theirs)),
        (StatusCode::NOT_FOUND, "Session not found")
    );
    let del = |key: &str| {
        Request::delete("/mcp")
            .header("x-api-key", key)
            .header("mcp-session-id", &sid)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&app, del(&w.write)).await.status,
        StatusCode::NOT_FOUND
    );
    let msg = post(
        &format!("/api/v1/mcp/message?sessionId={sid}"),
        Some(&w.write),
        &list,
        &[],
    );
    assert_eq!(send(&app, msg).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        send(&app, del(&w.read)).await.status,
        StatusCode::NO_CONTENT
    );
    let gone = send(
        &app,
        post("/mcp", Some(&w.read), &list, &[("mcp-session-id", &sid)]),
    )
    .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

async fn message_rate_limit_answers_429_with_retry_after(cx: Ctx) {
    let w = world(&cx).await;
    let app = build(
        &w,
        |c| c.mcp.message_rate_per_minute = 3,
        Arc::new(MemoryLimiter::new()),
    );
    let ping = rpc(1, "ping", json!({}));
    for _ in 0..3 {
        assert_eq!(
            send(&app, post("/mcp", Some(&w.read), &ping, &[]))
                .await
                .status,
            StatusCode::OK
        );
    }
    let r = send(&app, post("/mcp", Some(&w.read), &ping, &[])).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::TOO_MANY_REQUESTS, "Rate limit exceeded")
    );
    let retry: u64 = r
        .headers
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Per key: another key is unaffected.
    assert_eq!(
        send(&app, post("/mcp", Some(&w.write), &ping, &[]))
            .await
            .status,
        StatusCode::OK
    );
    // Stream connections have their own limit.
    let app = build(
        &w,
        |c| c.mcp.sse_rate_per_minute = 1,
        Arc::new(MemoryLimiter::new()),
    );
    let open = || {
        Request::get("/api/v1/mcp/sse")
            .header("x-api-key", &w.read)
            .body(Body::empty())
            .unwrap()
    };
    let first = app.clone().oneshot(open()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = send(&app, open()).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(second.headers.contains_key("retry-after"));
}

/// A limiter whose backend is down.
struct BrokenLimiter;

impl RateLimiter for BrokenLimiter {
    fn check<'a>(
        &'a self,
        _: &'a str,
        _: u32,
        _: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        async { Err(LimiterError::Unavailable("connection refused".into())) }.boxed()
    }
    fn backend(&self) -> &'static str {
        "broken"
    }
}

async fn production_fails_closed_when_the_limiter_is_down(cx: Ctx) {
    let w = world(&cx).await;
    let ping = rpc(1, "ping", json!({}));
    let prod = build(&w, |c| c.production = true, Arc::new(BrokenLimiter));
    let r = send(&prod, post("/mcp", Some(&w.read), &ping, &[])).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Service temporarily unavailable"
        )
    );
    assert!(
        r.headers.contains_key(axum::http::header::RETRY_AFTER),
        "a 503 says when to retry: {:?}",
        r.headers
    );
    let dev = build(&w, |_| {}, Arc::new(BrokenLimiter));
    assert_eq!(
        send(&dev, post("/mcp", Some(&w.read), &ping, &[]))
            .await
            .status,
        StatusCode::OK
    );
}

async fn protocol_rules(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    // Negotiation: echo supported revisions, else the latest.
    for (asked, got) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let r = send(&app, post("/mcp", Some(&w.read), &init(asked), &[])).await;
        assert_eq!(r.body["result"]["protocolVersion"], got);
        assert_eq!(r.body["result"]["serverInfo"]["name"], "breeze-rmm");
        assert!(
            r.body["result"]["instructions"]
                .as_str()
                .unwrap()
                .contains("Partner → Organization → Site → Device Group → Device")
        );
        let sid = r
            .headers
            .get("mcp-session-id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        send(
            &app,
            Request::delete("/mcp")
                .header("x-api-key", &w.read)
                .header("mcp-session-id", sid)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    }
    let ping = rpc(7, "ping", json!({}));
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &ping,
            &[("mcp-protocol-version", "1999-01-01")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).contains("Unsupported MCP-Protocol-Version"));

    // Batches exist only in 2025-03-26 (the header's default).
    let batch = json!([rpc(1, "ping", json!({})), rpc(2, "tools/list", json!({})), { "jsonrpc": "2.0", "method": "notifications/initialized" }]);
    let r = send(&app, post("/mcp", Some(&w.read), &batch, &[])).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body.as_array().unwrap().len(),
        2,
        "two replies, none for the notification"
    );
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &batch,
            &[("mcp-protocol-version", "2025-06-18")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // JSON-RPC errors.
    let r = send(
        &app,
        Request::post("/mcp")
            .header("x-api-key", &w.read)
            .body(Body::from("{not json"))
            .unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(-32700))
    );
    assert_eq!(r.body["id"], Value::Null);
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &json!({ "jsonrpc": "1.0", "id": 3, "method": "ping" }),
            &[],
        ),
    )
    .await;
    assert_eq!(
        (r.body["error"]["code"].as_i64(), r.body["id"].as_i64()),
        (Some(-32600), Some(3))
    );
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &rpc(4, "tools/explode", json!({})),
            &[],
        ),
    )
    .await;
    assert_eq!(r.body["error"]["code"], -32601);
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &rpc(5, "tools/call", json!({ "name": "format_c_drive" })),
            &[],
        ),
    )
    .await;
    assert_eq!(
        (r.body["error"]["code"].as_i64(), err_msg(&r)),
        (Some(-32602), "Unknown tool: format_c_drive")
    );
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);

    // Origins: foreign browsers are refused, localhost is allowed in development.
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &ping,
            &[("origin", "http://evil.example.com")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &ping,
            &[("origin", "http://localhost:6274")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

async fn stateless_2026_07_28_requests(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let meta = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28" });
    let discover = rpc(1, "server/discover", json!({ "_meta": meta }));
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &discover,
            &[("mcp-method", "server/discover")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.body["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    assert!(
        r.headers.get("mcp-session-id").is_none(),
        "stateless: no session"
    );
    let call = rpc(
        2,
        "tools/call",
        json!({ "name": "query_devices", "arguments": {}, "_meta": meta }),
    );
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &call,
            &[("mcp-method", "tools/call"), ("mcp-name", "query_devices")],
        ),
    )
    .await;
    assert_eq!(r.body["result"]["structuredContent"]["total"], 1);
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &call,
            &[("mcp-method", "tools/list"), ("mcp-name", "query_devices")],
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(-32020))
    );
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &call,
            &[("mcp-method", "tools/call")],
        ),
    )
    .await;
    assert_eq!(
        r.body["error"]["code"], -32020,
        "Mcp-Name is required for tools/call"
    );
    let old = rpc(
        3,
        "ping",
        json!({ "_meta": { "io.modelcontextprotocol/protocolVersion": "2031-01-01" } }),
    );
    let r = send(
        &app,
        post("/mcp", Some(&w.read), &old, &[("mcp-method", "ping")]),
    )
    .await;
    assert_eq!(r.body["error"]["code"], -32022);
    assert_eq!(r.body["error"]["data"]["requested"], "2031-01-01");
}

/// Every 2026-07-28 result says `resultType`, and the cacheable ones carry `ttlMs` and
/// `cacheScope` (the revision's schema requires both; the Python SDK 2.x rejects results
/// without them). `.ci/clients.sh` checks each method's result against the schema itself.
async fn every_2026_07_28_result_is_complete_per_its_schema(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "test", "version": "1" },
    });
    let call = |method: &'static str, mut params: Value, name: Option<String>| {
        let app = app.clone();
        let key = w.read.clone();
        params["_meta"] = meta.clone();
        async move {
            let body = rpc(7, method, params);
            let mut headers = vec![("mcp-method", method.to_owned())];
            if let Some(n) = name {
                headers.push(("mcp-name", n));
            }
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            send(&app, post("/mcp", Some(&key), &body, &headers)).await
        }
    };
    let resources = call("resources/list", json!({}), None).await;
    let uri = resources.body["result"]["resources"][0]["uri"]
        .as_str()
        .expect("the demo world lists a resource")
        .to_owned();
    let prompts = call("prompts/list", json!({}), None).await;
    let prompt = prompts.body["result"]["prompts"][0]["name"]
        .as_str()
        .expect("a prompt is listed")
        .to_owned();
    let cases = [
        ("server/discover", json!({}), None, true),
        ("tools/list", json!({}), None, true),
        ("prompts/list", json!({}), None, true),
        ("resources/list", json!({}), None, true),
        ("resources/templates/list", json!({}), None, true),
        (
            "resources/read",
            json!({ "uri": uri }),
            Some(uri.clone()),
            true,
        ),
        (
            "prompts/get",
            json!({ "name": prompt }),
            Some(prompt.clone()),
            false,
        ),
        (
            "tools/call",
            json!({ "name": "query_devices", "arguments": {} }),
            Some("query_devices".to_owned()),
            false,
        ),
        (
            "tools/call",
            json!({ "name": "query_devices", "arguments": { "limit": "many" } }),
            Some("query_devices".to_owned()),
            false,
        ),
    ];
    for (method, params, name, cacheable) in cases {
        let r = call(method, params, name).await;
        assert_eq!(r.status, StatusCode::OK, "{method}: {}", r.body);
        let result = &r.body["result"];
        assert_eq!(result["resultType"], "complete", "{method}: {result}");
        if cacheable {
            assert!(
                result["ttlMs"].as_u64().is_some(),
                "{method}: ttlMs in {result}"
            );
            assert_eq!(result["cacheScope"], "private", "{method}");
        } else {
            assert!(result.get("ttlMs").is_none(), "{method}: not cacheable");
        }
    }
    // Removed in 2026-07-28, and a method the server does not implement: 404, -32601.
    for method in ["ping", "logging/setLevel", "completion/complete"] {
        let r = call(method, json!({}), None).await;
        assert_eq!(
            (r.status, r.body["error"]["code"].as_i64()),
            (StatusCode::NOT_FOUND, Some(-32601)),
            "{method}: {}",
            r.body
        );
    }
}

async fn scopes_filter_the_catalogue_and_calls(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let names = |r: &Reply| -> Vec<String> {
        r.body["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let read = send(
        &app,
        post("/mcp", Some(&w.read), &rpc(1, "tools/list", json!({})), &[]),
    )
    .await;
    let write = send(
        &app,
        post(
            "/mcp",
            Some(&w.write),
            &rpc(1, "tools/list", json!({})),
            &[],
        ),
    )
    .await;
    assert!(!names(&read).contains(&"set_device_context".to_owned()));
    assert!(names(&write).contains(&"set_device_context".to_owned()));
    let mut sorted = names(&write);
    sorted.sort();
    assert_eq!(names(&write), sorted, "deterministic order");
    let tool = &write.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "query_devices")
        .unwrap()
        .clone();
    assert_eq!(tool["annotations"]["readOnlyHint"], true);
    assert_eq!(tool["_meta"]["breeze/tier"], 1);
    assert_eq!(tool["outputSchema"]["type"], "object");

    let set = rpc(
        2,
        "tools/call",
        json!({ "name": "set_device_context", "arguments": { "deviceId": w.a_device, "contextType": "quirk", "summary": "needs two reboots" } }),
    );
    let r = send(&app, post("/mcp", Some(&w.read), &set, &[])).await;
    assert_eq!(
        (r.body["error"]["code"].as_i64(), err_msg(&r)),
        (
            Some(-32603),
            "Tool \"set_device_context\" requires ai:write scope"
        )
    );
    // The JSON-RPC error carries the structured error in `data`.
    let data = &r.body["error"]["data"];
    assert_eq!(data["code"], "INSUFFICIENT_SCOPE", "{}", r.body);
    assert_eq!(data["message"], r.body["error"]["message"]);
    assert_eq!(data["retryable"], false);
    assert!(
        data["hint"].as_str().unwrap().contains("ai:write"),
        "{data}"
    );
    assert_eq!(data["requiredScopes"], json!(["ai:write"]));
    assert_eq!(data["grantedScopes"], json!(["ai:read"]));
    let r = send(&app, post("/mcp", Some(&w.write), &set, &[])).await;
    assert_eq!(
        r.body["result"]["structuredContent"]["state"], "active",
        "{}",
        r.body
    );
    // A call's result carries the tool's tier, as its listing does, and the server identity,
    // which the listing leaves to `initialize` (every entry would repeat it).
    let listed = write.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "set_device_context")
        .unwrap()["_meta"]
        .clone();
    assert_eq!(listed, json!({ "breeze/tier": 2 }));
    let meta = &r.body["result"]["_meta"];
    assert_eq!(meta["breeze/tier"], 2);
    assert_eq!(meta["breeze/server"]["name"], "breeze-rmm");
    let del = rpc(
        3,
        "tools/call",
        json!({ "name": "manage_groups", "arguments": { "action": "delete", "groupId": w.a_device } }),
    );
    let r = send(&app, post("/mcp", Some(&w.write), &del, &[])).await;
    assert_eq!(
        err_msg(&r),
        "Tool \"manage_groups\" requires ai:execute scope"
    );
}

async fn tool_errors_are_structured(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let call = |args: Value| {
        rpc(
            1,
            "tools/call",
            json!({ "name": "get_device_details", "arguments": args }),
        )
    };
    let r = send(&app, post("/mcp", Some(&w.read), &call(json!({})), &[])).await;
    let result = &r.body["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["structuredContent"]["error"]["code"],
        "INVALID_ARGUMENT"
    );
    assert!(
        result["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deviceId")
    );
    // Another organization's device is "not found or access denied", like a missing one.
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &call(json!({ "deviceId": w.b_device })),
            &[],
        ),
    )
    .await;
    assert_eq!(
        r.body["result"]["structuredContent"]["error"]["message"],
        "Device not found or access denied"
    );
    assert_eq!(
        r.body["result"]["structuredContent"]["error"]["code"],
        "NOT_FOUND"
    );
    let text: Value =
        serde_json::from_str(r.body["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        text, r.body["result"]["structuredContent"],
        "text-only clients see the same structured error"
    );
    assert_eq!(
        text["error"]["message"],
        "Device not found or access denied"
    );
    assert!(
        text["error"]["hint"].is_string(),
        "every error has a hint: {text}"
    );
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &call(json!({ "deviceId": w.a_device })),
            &[],
        ),
    )
    .await;
    assert_eq!(
        r.body["result"]["structuredContent"]["device"]["id"],
        w.a_device.as_str()
    );
}

/// Every key of a JSON document, at any depth.
fn keys_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.push(k.clone());
                keys_of(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| keys_of(v, out)),
        _ => {}
    }
}

/// get_device_details is what the specification says (hardware, interfaces, disks with usage,
/// OS and kernel, uptime, users, the latest metrics; packages counted, not dumped), and the
/// `breeze://devices/{id}` resource is the same document, camelCase throughout.
async fn device_details_carry_what_the_agent_reported(cx: Ctx) {
    let w = world(&cx).await;
    let device: breeze_core::DeviceId = w.a_device.parse().unwrap();
    let now = w.state.clock.now();
    let inventory: breeze_agent_proto::Inventory = serde_json::from_value(json!({
        "collectedAt": now, "hostname": "web-01", "bootTime": now - chrono::Duration::hours(5),
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12", "kernel": "6.1.0-18-amd64", "arch": "x86_64" },
        "cpu": { "model": "Xeon E-2388G", "physicalCores": 8, "logicalCores": 16 },
        "memoryTotalBytes": 34_359_738_368u64,
        "disks": [{ "mount": "/", "filesystem": "ext4", "totalBytes": 1000, "availableBytes": 250 }],
        "interfaces": [{ "name": "eth0", "mac": "52:54:00:12:34:56", "addresses": ["10.0.0.5/24"] }],
        "packages": (0..3000).map(|i| json!({ "name": format!("pkg{i}"), "version": "1.0" })).collect::<Vec<_>>(),
    }))
    .unwrap();
    w.store
        .record_inventory(device, w.org_a, &inventory)
        .await
        .unwrap();
    let hb: breeze_agent_proto::Heartbeat = serde_json::from_value(json!({
        "agentVersion": "1.2.3", "uptimeSecs": 18_000, "pendingReboot": true,
        "loggedInUsers": [{ "username": "alice", "terminal": "pts/0", "host": "10.0.0.9" }],
    }))
    .unwrap();
    w.store
        .record_heartbeat(device, w.org_a, &hb)
        .await
        .unwrap();
    let sample = |mins: i64, cpu: f64| -> breeze_agent_proto::MetricSample {
        serde_json::from_value(json!({
            "at": now - chrono::Duration::minutes(mins), "cpuPercent": cpu, "ramPercent": 61.5,
            "ramUsedBytes": 1u64 << 33, "disks": [{ "mount": "/", "usedPercent": 75.0 }],
            "network": [{ "interface": "eth0", "rxBytes": 1000, "txBytes": 200 }], "processCount": 212,
        }))
        .unwrap()
    };
    w.store
        .insert_metrics(device, w.org_a, &[sample(2, 10.0), sample(1, 42.0)])
        .await
        .unwrap();
    // A compliance policy the device fails one rule of, and a patch scan with one update.
    let policy = w
        .store
        .org(w.org_a)
        .compliance()
        .create_compliance_policy(
            breeze_store::NewCompliancePolicy {
                name: "baseline".into(),
                description: None,
                rules: vec![
                    breeze_core::ComplianceRule::PackageInstalled {
                        name: "pkg1".into(),
                    },
                    breeze_core::ComplianceRule::PackageInstalled {
                        name: "breeze-absent-package".into(),
                    },
                ],
                target: breeze_store::RuleTarget::Device(device),
                enforcement: breeze_core::PolicyEnforcement::Monitor,
                remediation_script: None,
                remediation_parameters: Default::default(),
                active: true,
                owner_actor: "system:test".into(),
                evaluate_every_minutes: 60,
            },
            audit("compliance_policy.create"),
        )
        .await
        .unwrap();
    w.store
        .org(w.org_a)
        .compliance()
        .evaluate_policy_inventory(&policy, None)
        .await
        .unwrap();
    let scan = breeze_agent_proto::PatchScanReport {
        manager: "apt".into(),
        scanned_at: now,
        patches: vec![breeze_agent_proto::AvailablePatch {
            name: "openssl".into(),
            installed_version: Some("3.0.14".into()),
            available_version: "3.0.15".into(),
            arch: None,
            source: None,
            security: true,
            severity: None,
            advisory: None,
        }],
        reboot_required: false,
        logged_in_users: Vec::new(),
    };
    w.store
        .record_patch_scan(device, w.org_a, &scan)
        .await
        .unwrap();
    // Six commands: the details carry the newest five, with their status and never their
    // arguments or output.
    let mut queued = Vec::new();
    for _ in 0..6 {
        let c = w
            .store
            .org(w.org_a)
            .commands()
            .create_command(
                breeze_store::NewCommand {
                    device_id: device,
                    kind: breeze_agent_proto::CommandKind::ListServices,
                    timeout_secs: 60,
                    output_cap_bytes: 1024,
                    queue_ttl: chrono::Duration::seconds(75),
                    script: None,
                    created_by: "user:test".into(),
                },
                audit("command.create"),
            )
            .await
            .unwrap();
        queued.push(c.id.to_string());
    }

    let call = rpc(
        1,
        "tools/call",
        json!({ "name": "get_device_details", "arguments": { "deviceId": w.a_device } }),
    );
    let r = send(&w.app, post("/mcp", Some(&w.read), &call, &[])).await;
    let d = &r.body["result"]["structuredContent"];
    assert_eq!(d["device"]["hostname"], "web-01", "{}", r.body);
    assert_eq!(d["hardware"]["cpuModel"], "Xeon E-2388G");
    assert_eq!(d["hardware"]["logicalCores"], 16);
    assert_eq!(d["hardware"]["memoryTotalBytes"], 34_359_738_368u64);
    assert_eq!(d["os"]["kernel"], "6.1.0-18-amd64");
    assert_eq!(d["os"]["arch"], "x86_64");
    assert_eq!(d["disks"][0]["usedBytes"], 750);
    assert_eq!(d["disks"][0]["usedPercent"], 75.0);
    assert_eq!(d["networkInterfaces"][0]["addresses"][0], "10.0.0.5/24");
    assert_eq!(d["uptimeSecs"], 18_000);
    assert_eq!(d["pendingReboot"], true);
    assert_eq!(d["loggedInUsers"][0]["username"], "alice");
    assert_eq!(d["latestMetrics"]["cpuPercent"], 42.0, "the newest sample");
    assert_eq!(d["latestMetrics"]["diskPercent"], 75.0);
    assert_eq!(d["installedPackageCount"], 3000);
    assert_eq!(d["activeContext"], 0);
    let commands = d["recentCommands"].as_array().unwrap();
    let ids: Vec<&str> = commands.iter().map(|c| c["id"].as_str().unwrap()).collect();
    let newest: Vec<&str> = queued.iter().rev().take(5).map(String::as_str).collect();
    assert_eq!(ids, newest, "the newest five, newest first");
    assert_eq!(commands[0]["kind"], "list_services");
    assert_eq!(commands[0]["status"], "pending");
    assert!(
        commands[0].get("script").is_none(),
        "no library script: {}",
        commands[0]
    );
    assert!(commands[0].get("payload").is_none() && commands[0].get("stdout").is_none());
    assert!(
        !r.body.to_string().contains("pkg2999"),
        "packages are counted, never listed"
    );

    let read = rpc(
        2,
        "resources/read",
        json!({ "uri": format!("breeze://devices/{}", w.a_device) }),
    );
    let r = send(&w.app, post("/mcp", Some(&w.read), &read, &[])).await;
    let mut doc: Value =
        serde_json::from_str(r.body["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    // The resource adds the security posture (null before any scan), compliance and pending
    // patches to the tool's document.
    let posture = doc.as_object_mut().unwrap().remove("securityPosture");
    assert_eq!(posture, Some(Value::Null), "no scan yet");
    // And the device's standing against each compliance policy, and its pending patches.
    let compliance = doc.as_object_mut().unwrap().remove("compliance").unwrap();
    assert_eq!(compliance.as_array().unwrap().len(), 1, "{compliance}");
    assert_eq!(compliance[0]["policyName"], "baseline", "{compliance}");
    assert_eq!(compliance[0]["status"], "non_compliant", "{compliance}");
    assert_eq!(compliance[0]["failingRules"], 1, "{compliance}");
    let patches = doc
        .as_object_mut()
        .unwrap()
        .remove("pendingPatches")
        .unwrap();
    assert_eq!(patches["count"], 1, "{patches}");
    assert_eq!(patches["securityCount"], 1, "{patches}");
    assert_eq!(patches["packages"][0]["name"], "openssl", "{patches}");
    assert_eq!(
        patches["packages"][0]["availableVersion"], "3.0.15",
        "{patches}"
    );
    assert_eq!(
        &doc, d,
        "the resource is the tool's document plus posture, compliance and patches"
    );
    let mut keys = Vec::new();
    keys_of(&doc, &mut keys);
    let snake: Vec<&String> = keys.iter().filter(|k| k.contains('_')).collect();
    assert!(snake.is_empty(), "snake_case keys: {snake:?}");

    // A device whose agent never reported: the same shape, empty.
    let r = send(
        &w.app,
        post(
            "/mcp",
            Some(&w.other_org_key),
            &rpc(
                3,
                "tools/call",
                json!({ "name": "get_device_details", "arguments": { "deviceId": w.b_device } }),
            ),
            &[],
        ),
    )
    .await;
    let d = &r.body["result"]["structuredContent"];
    assert_eq!(d["hardware"], Value::Null, "{}", r.body);
    assert_eq!(
        d["recentCommands"],
        json!([]),
        "a device never sent a command"
    );
    assert_eq!(d["disks"], json!([]));
    assert_eq!(d["latestMetrics"], Value::Null);

    // The packages themselves: get_device_software pages through them.
    let software = |id: i64, key: &str, args: Value| {
        let (app, key) = (w.app.clone(), key.to_owned());
        async move {
            let call = rpc(
                id,
                "tools/call",
                json!({ "name": "get_device_software", "arguments": args }),
            );
            send(&app, post("/mcp", Some(&key), &call, &[])).await.body["result"].clone()
        }
    };
    let r = software(4, &w.read, json!({ "deviceId": w.a_device })).await;
    let s = &r["structuredContent"];
    assert_eq!(s["total"], 3000, "{r}");
    assert_eq!(s["listed"], true);
    assert_eq!(s["packages"].as_array().unwrap().len(), 50, "50 by default");
    assert_eq!(
        s["packages"][0],
        json!({ "name": "pkg0", "version": "1.0" })
    );
    let next = s["nextCursor"].as_str().unwrap().to_owned();
    let r = software(
        5,
        &w.read,
        json!({ "deviceId": w.a_device, "cursor": next, "limit": 200 }),
    )
    .await;
    let s = &r["structuredContent"];
    assert_eq!(s["packages"].as_array().unwrap().len(), 200);
    assert_eq!(
        s["packages"][0]["name"], "pkg1042",
        "after pkg1041, by name"
    );
    let r = software(
        6,
        &w.read,
        json!({ "deviceId": w.a_device, "name": "PKG299" }),
    )
    .await;
    let s = &r["structuredContent"];
    assert_eq!(s["total"], 11, "pkg299 and pkg2990..pkg2999: {r}");
    assert!(s.get("nextCursor").is_none());
    let r = software(7, &w.read, json!({ "deviceId": w.a_device, "limit": 201 })).await;
    assert_eq!(r["structuredContent"]["error"]["code"], "INVALID_ARGUMENT");
    let r = software(
        8,
        &w.read,
        json!({ "deviceId": w.a_device, "cursor": "forged" }),
    )
    .await;
    assert_eq!(r["isError"], true);
    assert_eq!(
        r["structuredContent"]["error"]["code"], "INVALID_ARGUMENT",
        "{r}"
    );
    assert!(
        r["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cursor"),
        "{r}"
    );
    // Another organization's device is not found, like a missing one.
    let r = software(9, &w.read, json!({ "deviceId": w.b_device })).await;
    assert_eq!(r["structuredContent"]["error"]["code"], "NOT_FOUND", "{r}");
    let r = software(10, &w.other_org_key, json!({ "deviceId": w.b_device })).await;
    assert_eq!(r["structuredContent"]["listed"], false, "{r}");
}

async fn resources_and_prompts(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let read = |uri: &str| rpc(1, "resources/read", json!({ "uri": uri }));
    let r = send(
        &app,
        post("/mcp", Some(&w.read), &read("breeze://devices"), &[]),
    )
    .await;
    let devices: Value =
        serde_json::from_str(r.body["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(devices.as_array().unwrap().len(), 1);
    assert_eq!(devices[0]["id"], w.a_device.as_str());
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &read(&format!("breeze://devices/{}", w.b_device)),
            &[],
        ),
    )
    .await;
    assert_eq!(r.body["error"]["code"], -32602);
    assert!(err_msg(&r).starts_with("Device not found"));
    let r = send(
        &app,
        post("/mcp", Some(&w.read), &read("breeze://alerts"), &[]),
    )
    .await;
    assert_eq!(r.body["result"]["contents"][0]["text"], "[]");
    let r = send(
        &app,
        post("/mcp", Some(&w.read), &read("file:///etc/passwd"), &[]),
    )
    .await;
    assert_eq!(err_msg(&r), "Unknown resource URI: file:///etc/passwd");
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &rpc(1, "resources/templates/list", json!({})),
            &[],
        ),
    )
    .await;
    assert_eq!(
        r.body["result"]["resourceTemplates"][0]["uriTemplate"],
        "breeze://devices/{id}"
    );

    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &rpc(1, "prompts/list", json!({})),
            &[],
        ),
    )
    .await;
    assert_eq!(r.body["result"]["prompts"].as_array().unwrap().len(), 5);
    let get = |args: Value| {
        rpc(
            1,
            "prompts/get",
            json!({ "name": "breeze-incident-kickoff", "arguments": args }),
        )
    };
    let r = send(&app, post("/mcp", Some(&w.read), &get(json!({})), &[])).await;
    assert_eq!(
        err_msg(&r),
        "Missing required argument \"summary\" for prompt breeze-incident-kickoff"
    );
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &get(json!({ "summary": "VPN down" })),
            &[],
        ),
    )
    .await;
    assert!(
        r.body["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("VPN down")
    );
}

/// Organization A's audit records whose action is `action` (or starts with it, ending in `.`).
async fn org_a_audit(w: &World, action: &str) -> breeze_store::AuditPage {
    w.store
        .org(w.org_a)
        .audit()
        .query_audit(
            &AuditFilter {
                action: Some(action.into()),
                ..Default::default()
            },
            None,
            50,
        )
        .await
        .unwrap()
}

async fn every_request_is_audited(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let sid = initialize(&app, &w.read).await;
    send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &rpc(2, "tools/list", json!({})),
            &[("mcp-session-id", &sid)],
        ),
    )
    .await;
    send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &rpc(
                3,
                "tools/call",
                json!({ "name": "query_devices", "arguments": {} }),
            ),
            &[],
        ),
    )
    .await;
    send(
        &app,
        post(
            "/mcp",
            Some(&w.read),
            &rpc(
                4,
                "tools/call",
                json!({ "name": "set_device_context", "arguments": {} }),
            ),
            &[],
        ),
    )
    .await;
    let page = org_a_audit(&w, "mcp.").await;
    let rows: Vec<(String, Option<String>, String, Value)> = page
        .records
        .iter()
        .rev()
        .map(|r| {
            (
                r.event.action.clone(),
                r.event.resource_id.clone(),
                r.event.result.to_string(),
                r.event.details.clone(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_eq!(rows[0].0, "mcp.initialize");
    assert!(rows[0].3["session_id"].is_string(), "{:?}", rows[0].3);
    // The action and the resource id say the method and the tool; the details do not repeat them.
    assert_eq!(rows[0].3.get("method"), None);
    assert_eq!(rows[1].0, "mcp.tools.list");
    assert_eq!(rows[2].0, "mcp.tools.call");
    assert_eq!(
        (rows[2].1.as_deref(), rows[2].2.as_str()),
        (Some("query_devices"), "success")
    );
    assert_eq!(rows[2].3.get("session_id"), None);
    assert_eq!(rows[2].3.get("tool"), None);
    assert_eq!(rows[2].3["transport"], "stateless_http");
    assert_eq!(rows[3].2, "failure");
    let failed = page
        .records
        .iter()
        .find(|r| r.event.resource_id.as_deref() == Some("set_device_context"))
        .unwrap();
    assert_eq!(
        failed.event.error_message.as_deref(),
        Some("Tool \"set_device_context\" requires ai:write scope")
    );
    assert_eq!(failed.event.actor.kind, breeze_core::ActorType::ApiKey);

    // A method with a dot could not be told from the action (`a.b/c` and `a/b/c` are both
    // `mcp.a.b.c`), so its record keeps the method as sent.
    send(
        &app,
        post("/mcp", Some(&w.read), &rpc(5, "x.y/z", json!({})), &[]),
    )
    .await;
    let page = org_a_audit(&w, "mcp.x.y.z").await;
    assert_eq!(page.records.len(), 1, "{:?}", page.records);
    assert_eq!(page.records[0].event.details["method"], "x.y/z");
}

/// A read whose request record cannot be written is not answered (it would leave no trace),
/// and says so as retryable; a change is answered all the same (it happened; its record is in
/// the error log). PostgreSQL: there a record the table refuses is unwritten at once (SQLite
/// journals it and moves it later).
async fn reads_without_an_audit_record_are_withheld_changes_are_not(cx: Ctx) {
    if cx.store.backend() == breeze_store::Backend::Sqlite {
        return;
    }
    let w = world(&cx).await;
    // Request records (mcp.*) are refused from now on; a change's own record is not.
    w.store
        .raw_execute(
            "CREATE FUNCTION refuse_request_records() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF NEW.action LIKE 'mcp.%' THEN RAISE EXCEPTION 'refused for the test'; \
             END IF; RETURN NEW; END $$",
        )
        .await
        .unwrap();
    w.store
        .raw_execute(
            "CREATE TRIGGER refuse_request_records BEFORE INSERT ON audit_log \
             FOR EACH ROW EXECUTE FUNCTION refuse_request_records()",
        )
        .await
        .unwrap();
    let call = |id: i64, name: &str, arguments: Value| {
        rpc(
            id,
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
    };

    for (key, body) in [
        (&w.read, call(1, "query_devices", json!({}))),
        (&w.read, rpc(2, "tools/list", json!({}))),
    ] {
        let r = send(&w.app, post("/mcp", Some(key), &body, &[])).await;
        assert!(r.body.get("result").is_none(), "{}", r.body);
        assert_eq!(r.body["error"]["data"]["retryable"], true, "{}", r.body);
        assert!(
            err_msg(&r).contains("audit log cannot be written"),
            "{}",
            r.body
        );
    }

    let note = json!({ "deviceId": w.a_device, "contextType": "quirk", "summary": "fan noise" });
    let r = send(
        &w.app,
        post(
            "/mcp",
            Some(&w.write),
            &call(3, "set_device_context", note),
            &[],
        ),
    )
    .await;
    assert_eq!(
        r.body["result"]["structuredContent"]["summary"], "fan noise",
        "{}",
        r.body
    );
    let stored = w
        .store
        .raw_strings("SELECT summary FROM device_context")
        .await
        .unwrap();
    assert_eq!(stored, ["fan noise"]);
}

/// Reads SSE events from a streaming body until `want` events arrived.
async fn sse_events(body: &mut Body, want: usize) -> Vec<(String, String)> {
    let mut buf = String::new();
    let mut events = Vec::new();
    while events.len() < want {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an SSE event in time")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buf.push_str(&String::from_utf8_lossy(&data));
        }
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut event = ("message".to_owned(), String::new());
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event:") {
                    event.0 = e.trim().to_owned();
                } else if let Some(d) = line.strip_prefix("data:") {
                    event.1.push_str(d.trim_start());
                }
            }
            if !block.trim().is_empty() && !block.starts_with(':') {
                events.push(event);
            }
        }
    }
    events
}

async fn legacy_sse_round_trip(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let res = app
        .clone()
        .oneshot(
            Request::get("/api/v1/mcp/sse")
                .header("x-api-key", &w.read)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = res.into_body();
    let first = sse_events(&mut body, 1).await;
    assert_eq!(first[0].0, "endpoint");
    let endpoint = first[0].1.clone();
    assert!(
        endpoint.starts_with("http://127.0.0.1:3000/api/v1/mcp/message?sessionId="),
        "{endpoint}"
    );
    let path = endpoint.trim_start_matches("http://127.0.0.1:3000");

    let r = send(&app, post(path, Some(&w.read), &init("2024-11-05"), &[])).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = send(
        &app,
        post(
            path,
            Some(&w.read),
            &rpc(
                2,
                "tools/call",
                json!({ "name": "query_devices", "arguments": {} }),
            ),
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let events = sse_events(&mut body, 2).await;
    let mut replies: Vec<Value> = events
        .iter()
        .map(|(kind, data)| {
            assert_eq!(kind, "message");
            serde_json::from_str(data).unwrap()
        })
        .collect();
    // Two POSTs, handled concurrently: replies are matched by id, not by order.
    replies.sort_by_key(|r| r["id"].as_i64());
    assert_eq!(replies[0]["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(replies[1]["result"]["structuredContent"]["total"], 1);

    // Without a sessionId the reply comes back inline.
    let r = send(
        &app,
        post(
            "/api/v1/mcp/message",
            Some(&w.read),
            &rpc(3, "ping", json!({})),
            &[],
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.body["result"].clone()),
        (StatusCode::OK, json!({}))
    );
    // Closing the stream ends the session.
    drop(body);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = send(
        &app,
        post(path, Some(&w.read), &rpc(4, "ping", json!({})), &[]),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

async fn streams_send_keepalive_pings(cx: Ctx) {
    let w = world(&cx).await;
    let app = build(
        &w,
        |c| c.mcp.keepalive = Duration::from_millis(100),
        Arc::new(MemoryLimiter::new()),
    );
    let res = app
        .clone()
        .oneshot(
            Request::get("/api/v1/mcp/sse")
                .header("x-api-key", &w.read)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let mut body = res.into_body();
    let events = sse_events(&mut body, 3).await;
    assert_eq!(events[0].0, "endpoint");
    assert_eq!(
        (events[1].0.as_str(), events[2].0.as_str()),
        ("ping", "ping")
    );
}

async fn streamable_get_stream_needs_its_session(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let sid = initialize(&app, &w.read).await;
    let get = |key: &str, sid: &str| {
        Request::get("/mcp")
            .header("x-api-key", key)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", sid)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&app, get(&w.write, &sid)).await.status,
        StatusCode::NOT_FOUND
    );
    let open = app.clone().oneshot(get(&w.read, &sid)).await.unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    assert_eq!(
        send(&app, get(&w.read, &sid)).await.status,
        StatusCode::CONFLICT,
        "one stream per session"
    );
}

async fn redis_limits_answer_429_and_fail_closed(cx: Ctx) {
    let w = world(&cx).await;
    #[allow(clippy::disallowed_methods)] // test-harness setting
    let url =
        std::env::var("BREEZE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("breeze-test:{}:", uuid::Uuid::now_v7());
    let redis = Arc::new(breeze_limits::RedisLimiter::new(&url, &prefix).unwrap());
    let app = build(&w, |c| c.mcp.message_rate_per_minute = 2, redis);
    let ping = rpc(1, "ping", json!({}));
    for _ in 0..2 {
        let r = send(&app, post("/mcp", Some(&w.read), &ping, &[])).await;
        assert_eq!(r.status, StatusCode::OK, "Redis at {url}: {}", r.body);
    }
    let r = send(&app, post("/mcp", Some(&w.read), &ping, &[])).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::TOO_MANY_REQUESTS, "Rate limit exceeded")
    );
    assert!(r.headers.contains_key("retry-after"));
    // Production with Redis gone: refuse, do not guess.
    let down = Arc::new(breeze_limits::RedisLimiter::new("redis://127.0.0.1:1", "x:").unwrap());
    let prod = build(&w, |c| c.production = true, down);
    let r = send(&prod, post("/mcp", Some(&w.read), &ping, &[])).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Service temporarily unavailable"
        )
    );
    let r = send(
        &prod,
        Request::get("/api/v1/mcp/sse")
            .header("x-api-key", &w.read)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
}

/// A key of `scopes` in org A for a user holding `role` there.
async fn key_for_role(w: &World, cx: &Ctx, email: &str, role: &str, scopes: &[Scope]) -> String {
    let s = &w.store;
    let org = s.org(w.org_a).tenancy().organization().await.unwrap();
    let user = s
        .create_user(
            NewUser {
                partner_id: org.partner_id,
                org_id: Some(w.org_a),
                email: email.into(),
                name: "V".into(),
                password_hash: password::hash("correct horse battery").unwrap(),
            },
            audit("u"),
        )
        .await
        .unwrap();
    let role = s.find_role(org.partner_id, role).await.unwrap();
    s.assign_role(user.id, w.org_a, role.id, audit("r"))
        .await
        .unwrap();
    let auth = AuthService::new(
        s.clone(),
        Arc::new(cx.clock.clone()),
        AuthSettings::default(),
    );
    let req = CreateApiKey {
        org_id: w.org_a,
        user_id: user.id,
        name: "k".into(),
        scopes: ScopeSet::new(scopes.iter().copied()),
        expires_at: None,
    };
    auth.create_api_key(req, audit("k"))
        .await
        .unwrap()
        .0
        .expose()
        .to_owned()
}

async fn the_guard_refuses_by_role_rate_and_allowlist(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let set = |n: i64| {
        rpc(
            n,
            "tools/call",
            json!({ "name": "set_device_context", "arguments": { "deviceId": w.a_device, "contextType": "quirk", "summary": format!("note {n}") } }),
        )
    };

    // RBAC: a write-scoped key of a Read Only user cannot write.
    let viewer = key_for_role(
        &w,
        &cx,
        "reader@p.test",
        "Read Only",
        &[Scope::AiRead, Scope::AiWrite],
    )
    .await;
    let r = send(&app, post("/mcp", Some(&viewer), &set(1), &[])).await;
    assert_eq!(
        (r.body["error"]["code"].as_i64(), err_msg(&r)),
        (
            Some(-32603),
            "Insufficient permissions: requires devices.write"
        )
    );
    assert_eq!(r.body["error"]["data"]["code"], "FORBIDDEN", "{}", r.body);
    assert!(r.body["error"]["data"]["hint"].is_string());
    let r = send(
        &app,
        post(
            "/mcp",
            Some(&viewer),
            &rpc(
                2,
                "tools/call",
                json!({ "name": "query_devices", "arguments": {} }),
            ),
            &[],
        ),
    )
    .await;
    assert_eq!(
        r.body["result"]["structuredContent"]["total"], 1,
        "reads are allowed"
    );

    // Per-tool limit: set_device_context allows 20 per 5 minutes per user, exactly.
    for n in 1..=20 {
        let r = send(&app, post("/mcp", Some(&w.write), &set(n), &[])).await;
        assert_eq!(
            r.body["result"]["isError"],
            Value::Null,
            "call {n}: {}",
            r.body
        );
    }
    let r = send(&app, post("/mcp", Some(&w.write), &set(21), &[])).await;
    assert_eq!(r.body["error"]["code"], -32000);
    let data = &r.body["error"]["data"];
    assert_eq!(data["code"], "RATE_LIMITED", "{}", r.body);
    assert_eq!(data["retryable"], true);
    assert!(data["retryAfterSeconds"].as_u64().unwrap() >= 1, "{data}");
    assert!(data["hint"].is_string());
    assert!(
        err_msg(&r).starts_with("Tool rate limit exceeded for set_device_context. Try again at "),
        "{}",
        r.body
    );

    // Production: Tier 3 needs the allowlist (then approval).
    let exec = key_for_role(
        &w,
        &cx,
        "ops@p.test",
        "Administrator",
        &[Scope::AiRead, Scope::AiWrite, Scope::AiExecute],
    )
    .await;
    let create = rpc(
        3,
        "tools/call",
        json!({ "name": "manage_groups", "arguments": { "action": "create", "name": "Kiosks" } }),
    );
    let prod = |allow: &str| {
        let allow = breeze_guard::Allowlist::parse(allow);
        build(
            &w,
            move |c| {
                c.production = true;
                c.require_execute_admin = false;
                c.execute_allowlist = allow;
                c.approvals.wait = Duration::ZERO;
            },
            Arc::new(MemoryLimiter::new()),
        )
    };
    let r = send(&prod(""), post("/mcp", Some(&exec), &create, &[])).await;
    assert_eq!(
        err_msg(&r),
        "Tool \"manage_groups\" is not in MCP_EXECUTE_TOOL_ALLOWLIST for production"
    );
    let r = send(
        &prod("manage_groups"),
        post("/mcp", Some(&exec), &create, &[]),
    )
    .await;
    // Allowed through: it becomes an approval request (answered "pending" at once here).
    assert_eq!(
        r.body["result"]["structuredContent"]["status"], "pending_approval",
        "{}",
        r.body
    );

    // Every refusal is in the audit log with its reason.
    let failures = w
        .store
        .org(w.org_a)
        .audit()
        .query_audit(
            &AuditFilter {
                action: Some("mcp.tools.call".into()),
                result: Some(breeze_core::AuditResult::Failure),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    let reasons: Vec<String> = failures
        .records
        .iter()
        .filter_map(|r| r.event.error_message.clone())
        .collect();
    for expected in [
        "Insufficient permissions: requires devices.write",
        "Tool rate limit exceeded for set_device_context",
        "is not in MCP_EXECUTE_TOOL_ALLOWLIST",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(expected)),
            "{expected} not audited: {reasons:?}"
        );
    }
}

/// MCP Apps: a client that declares `io.modelcontextprotocol/ui` gets the extension, the views'
/// resources and `_meta.ui.resourceUri` on their tools; one that does not sees none of it, and
/// cannot read a view.
async fn mcp_apps_views_only_for_clients_that_negotiate_them(cx: Ctx) {
    let w = world(&cx).await;
    let app = w.app.clone();
    let ui =
        json!({ "io.modelcontextprotocol/ui": { "mimeTypes": ["text/html;profile=mcp-app"] } });
    let mut sessions = Vec::new();
    for caps in [json!({ "extensions": ui }), json!({})] {
        let body = rpc(
            1,
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": { "name": "t", "version": "1" } }),
        );
        let r = send(&app, post("/mcp", Some(&w.read), &body, &[])).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let session = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
        sessions.push((session, r.body["result"]["capabilities"].clone()));
    }
    let ask = |session: &str, method: &str, params: Value| {
        let session = session.to_owned();
        let body = rpc(2, method, params);
        let app = app.clone();
        let key = w.read.clone();
        async move {
            let headers = [
                ("mcp-session-id", session.as_str()),
                ("mcp-protocol-version", "2025-11-25"),
            ];
            send(&app, post("/mcp", Some(&key), &body, &headers))
                .await
                .body
        }
    };
    let (with, with_caps) = &sessions[0];
    let (without, without_caps) = &sessions[1];
    assert_eq!(
        with_caps["extensions"],
        json!({ "io.modelcontextprotocol/ui": { "mimeTypes": ["text/html;profile=mcp-app"] } })
    );
    assert!(without_caps.get("extensions").is_none(), "{without_caps}");

    let listed = ask(with, "tools/list", json!({})).await;
    let mut named: Vec<(String, String)> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| {
            Some((
                t["name"].as_str()?.to_owned(),
                t["_meta"]["ui"]["resourceUri"].as_str()?.to_owned(),
            ))
        })
        .collect();
    named.sort();
    assert_eq!(
        named,
        [
            ("analyze_metrics", "ui://breeze/metrics-chart"),
            ("get_approval_status", "ui://breeze/approval-card"),
            ("get_device_details", "ui://breeze/device-card"),
            (
                "get_vulnerability_exposure",
                "ui://breeze/vulnerability-summary"
            ),
            ("query_devices", "ui://breeze/device-table"),
            ("run_live_query", "ui://breeze/live-query"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    let plain = ask(without, "tools/list", json!({})).await;
    assert!(!plain.to_string().contains("resourceUri"));
    assert!(!plain.to_string().contains("ui://"));

    // Every view is served whole to the negotiating client, each naming no outside origin.
    for (view, marker) in [
        ("device-card", "Last commands"),
        ("metrics-chart", "range"),
        ("device-table", "Filter devices"),
        ("approval-card", "Pinned arguments"),
        ("live-query", "\"processes\":{"),
        ("vulnerability-summary", "By severity"),
    ] {
        let read = json!({ "uri": format!("ui://breeze/{view}") });
        let r = ask(with, "resources/read", read.clone()).await;
        let contents = &r["result"]["contents"][0];
        assert_eq!(contents["mimeType"], "text/html;profile=mcp-app", "{view}");
        assert_eq!(contents["uri"], read["uri"]);
        for k in [
            "connectDomains",
            "resourceDomains",
            "frameDomains",
            "baseUriDomains",
        ] {
            assert_eq!(contents["_meta"]["ui"]["csp"][k], json!([]), "{view} {k}");
        }
        let html = contents["text"].as_str().unwrap();
        assert!(html.starts_with("<!doctype html>"), "{view}");
        assert!(
            html.contains(marker),
            "{view} draws its own result: {marker}"
        );
        // The client without the extension cannot read it.
        let r = ask(without, "resources/read", read).await;
        assert!(r.get("error").is_some(), "{view}: {r}");
    }
    let listed = ask(with, "resources/list", json!({})).await;
    assert_eq!(listed.to_string().matches("ui://breeze/").count(), 6);
    let listed = ask(without, "resources/list", json!({})).await;
    assert!(!listed.to_string().contains("ui://"));

    // Results carry no `_meta.ui` either way, and the same structured content: the view draws
    // what every client gets.
    let call =
        json!({ "name": "get_vulnerability_exposure", "arguments": { "action": "summary" } });
    let (a, b) = (
        ask(with, "tools/call", call.clone()).await,
        ask(without, "tools/call", call).await,
    );
    assert_ne!(a["result"]["isError"], json!(true), "{a}");
    assert!(!a.to_string().contains("ui://"), "{a}");
    assert_eq!(
        a["result"]["structuredContent"],
        b["result"]["structuredContent"]
    );
    assert_eq!(a["result"]["content"], b["result"]["content"]);
}

breeze_store::on_both_backends!(
    the_guard_refuses_by_role_rate_and_allowlist,
    redis_limits_answer_429_and_fail_closed,
    authentication_failures_are_401s,
    large_bodies_are_refused_before_parsing,
    session_caps_per_key_and_server_wide,
    a_session_belongs_to_its_key,
    message_rate_limit_answers_429_with_retry_after,
    production_fails_closed_when_the_limiter_is_down,
    protocol_rules,
    stateless_2026_07_28_requests,
    every_2026_07_28_result_is_complete_per_its_schema,
    scopes_filter_the_catalogue_and_calls,
    tool_errors_are_structured,
    resources_and_prompts,
    mcp_apps_views_only_for_clients_that_negotiate_them,
    device_details_carry_what_the_agent_reported,
    every_request_is_audited,
    reads_without_an_audit_record_are_withheld_changes_are_not,
    legacy_sse_round_trip,
    streamable_get_stream_needs_its_session,
    streams_send_keepalive_pings,
);
