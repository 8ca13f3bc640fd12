//! Operations: `GET /metrics` (off unless configured, token-protected on the main listener, a
//! scrape that parses and counters that move) and request ids (honoured, echoed, generated).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{collections::HashMap, sync::Arc};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use breeze_limits::MemoryLimiter;
use breeze_store::testing::Ctx;
use common::{build, send, world};
use serde_json::{Value, json};

const TOKEN: &str = "metrics-token-0123456789";

fn mcp_call(key: &str, id: i64, tool: &str) -> Request<Body> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": {} }
    });
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("x-api-key", key)
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn scrape(bearer: Option<&str>) -> Request<Body> {
    scrape_accepting(bearer, None)
}

fn scrape_accepting(bearer: Option<&str>, accept: Option<&str>) -> Request<Body> {
    let mut r = Request::get("/metrics");
    if let Some(t) = bearer {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    if let Some(a) = accept {
        r = r.header("accept", a);
    }
    r.body(Body::empty()).unwrap()
}

/// What Prometheus sends: OpenMetrics first, the text format as a fallback.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Parses an OpenMetrics exposition strictly enough to catch a malformed one (see
/// [`parse_text`]), and it ends with `# EOF`.
fn parse(text: &str) -> HashMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "no EOF marker: {text}");
    parse_text(text)
}

/// Parses a Prometheus text 0.0.4 exposition: no `# EOF` or `# UNIT`, and each sample's own
/// name (a counter's `foo_total`, a histogram's family name plus `_bucket`, `_sum`, `_count`)
/// has a TYPE.
fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT "),
        "{text}"
    );
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            if kind == "counter" {
                assert!(
                    name.ends_with("_total"),
                    "a counter TYPE names its samples: {line}"
                );
            }
        }
    }
    parse_text(text)
}

/// Every sample line is `name{labels} value` with a number and every family has a TYPE.
/// Returns each sample by its `name{labels}` text.
fn parse_text(text: &str) -> HashMap<String, f64> {
    let mut typed = Vec::new();
    let mut samples = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.push(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad name in {line:?}"
        );
        assert!(
            typed.iter().any(|t| name.starts_with(t.as_str())),
            "{name} has no TYPE"
        );
        if let Some(labels) = series.strip_prefix(name) {
            assert!(
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')),
                "bad labels in {line:?}"
            );
        }
        samples.insert(series.to_owned(), value);
    }
    samples
}

async fn scrape_ok(app: &Router) -> HashMap<String, f64> {
    let r = send(app, scrape_accepting(Some(TOKEN), Some(PROMETHEUS_ACCEPT))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    parse(r.body.as_str().unwrap())
}

/// Without an `Accept` naming OpenMetrics, a scrape is the Prometheus text format 0.0.4 (what
/// every scraper reads); Prometheus, which asks for OpenMetrics first, gets OpenMetrics. Both
/// hold the same samples.
async fn metrics_answer_the_format_accept_asks_for(cx: Ctx) {
    let w = world(&cx).await;
    let app = build(
        &w,
        |c| c.metrics.token = Some(TOKEN.into()),
        Arc::new(MemoryLimiter::new()),
    );
    for accept in [
        None,
        Some("text/plain"),
        Some("*/*"),
        Some("application/json"),
    ] {
        let r = send(&app, scrape_accepting(Some(TOKEN), accept)).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(
            r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        let samples = parse_prometheus(r.body.as_str().unwrap());
        assert!(
            samples
                .keys()
                .any(|k| k.starts_with("breeze_mcp_tool_calls_total"))
        );
    }
    let om = scrape_ok(&app).await;
    let r = send(
        &app,
        scrape_accepting(Some(TOKEN), Some("application/openmetrics-text")),
    )
    .await;
    assert!(r.body.as_str().unwrap().ends_with("# EOF\n"));
    let text = send(&app, scrape(Some(TOKEN))).await;
    let text = parse_prometheus(text.body.as_str().unwrap());
    let names = |m: &HashMap<String, f64>| {
        let mut n: Vec<String> = m
            .keys()
            .filter(|k| !k.starts_with("breeze_http_requests_total"))
            .cloned()
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&om), names(&text), "the same samples either way");
}

fn get(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

/// Off by default (404); with a token, only to that token (401 otherwise, in constant time);
/// the scrape parses and its counters move with MCP calls, refusals and limiter decisions.
async fn metrics_are_token_protected_and_count(cx: Ctx) {
    let w = world(&cx).await;
    let r = send(&w.app, scrape(Some(TOKEN))).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "off unless configured");

    let app = build(
        &w,
        |c| c.metrics.token = Some(TOKEN.into()),
        Arc::new(MemoryLimiter::new()),
    );
    for bad in [
        None,
        Some("wrong"),
        Some("metrics-token-012345678"),
        Some(""),
    ] {
        let r = send(&app, scrape(bad)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad:?}");
        assert_eq!(r.headers["www-authenticate"], "Bearer");
    }
    let before = scrape_ok(&app).await;
    let ok = r#"breeze_mcp_tool_calls_total{tool="query_devices",outcome="ok"}"#;
    let refused = r#"breeze_guard_refusals_total{reason="missing_scope"}"#;
    assert_eq!(get(&before, ok), 0.0, "every tool is listed from the start");
    assert!(before.contains_key(ok));

    for id in 0..3 {
        let r = send(&app, mcp_call(&w.read, id, "query_devices")).await;
        assert!(r.body["result"].is_object(), "{}", r.body);
    }
    // A write tool with a read-only key: the guard refuses.
    let r = send(&app, mcp_call(&w.read, 9, "set_device_context")).await;
    assert!(r.body["error"].is_object(), "{}", r.body);

    let after = scrape_ok(&app).await;
    assert_eq!(get(&after, ok), 3.0);
    assert_eq!(get(&after, refused) - get(&before, refused), 1.0);
    let calls_200 = r#"breeze_http_requests_total{route="/mcp",method="POST",status="200"}"#;
    assert_eq!(
        get(&after, calls_200) - get(&before, calls_200),
        4.0,
        "{after:#?}"
    );
    assert!(
        get(
            &after,
            r#"breeze_mcp_tool_call_seconds_count{tool="query_devices"}"#
        ) == 3.0,
        "the latency histogram counts too"
    );
    let allowed: f64 = after
        .iter()
        .filter(|(k, _)| {
            k.starts_with("breeze_rate_limit_decisions_total") && k.contains("allowed")
        })
        .map(|(_, v)| v)
        .sum();
    assert!(allowed >= 4.0, "the transport limits decided: {after:#?}");
    assert_eq!(get(&after, "breeze_agents_connected"), 0.0);
    assert!(get(&after, "breeze_db_pool_connections") >= 1.0);
    assert_eq!(get(&after, "breeze_mcp_sessions"), 0.0, "stateless calls");
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": { "name": "t", "version": "1" } } });
    let r = send(
        &app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-api-key", &w.read)
            .body(Body::from(init.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(get(&scrape_ok(&app).await, "breeze_mcp_sessions"), 1.0);
    let scrapes = r#"breeze_http_requests_total{route="/metrics",method="GET",status="200"}"#;
    assert_eq!(get(&after, scrapes), 1.0, "the scrape before");
}

/// A request's id is the client's `X-Request-Id` when it sent one, echoed back; otherwise a
/// new one, also returned.
async fn request_ids_are_honoured_and_echoed(cx: Ctx) {
    let w = world(&cx).await;
    let r = send(
        &w.app,
        Request::get("/healthz")
            .header("x-request-id", "trace-abc-123")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.headers["x-request-id"], "trace-abc-123");
    let r = send(
        &w.app,
        Request::get("/healthz").body(Body::empty()).unwrap(),
    )
    .await;
    let id = r.headers["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    let _: Value = r.body;
    // An id too long or with other characters (it goes into every log line and the audit
    // record) is replaced by a new one.
    for unfit in [
        "x".repeat(129),
        "a b".into(),
        "\"quoted\"".into(),
        "a;b".into(),
    ] {
        let r = send(
            &w.app,
            Request::get("/healthz")
                .header("x-request-id", unfit.as_str())
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        let id = r.headers["x-request-id"].to_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{unfit:?} kept as {id}");
    }
    let longest = "a".repeat(128);
    let r = send(
        &w.app,
        Request::get("/healthz")
            .header("x-request-id", longest.as_str())
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.headers["x-request-id"], longest.as_str());
}

/// A draining instance refuses new MCP sessions on both transports with 503 and
/// `Retry-After`, and still answers requests that need no new session.
async fn a_draining_instance_takes_no_new_sessions(cx: Ctx) {
    let w = world(&cx).await;
    let breeze = breeze_server::Breeze::new(w.state.clone());
    breeze.mcp.drain();
    assert!(breeze.mcp.is_draining());
    let app = breeze_server::app(breeze);
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "t", "version": "1" } }
    });
    let r = send(
        &app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("x-api-key", &w.read)
            .body(Body::from(init.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.headers["retry-after"], "1");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down")
    );
    let r = send(
        &app,
        Request::get("/api/v1/mcp/sse")
            .header("x-api-key", &w.read)
            .header("accept", "text/event-stream")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let r = send(&app, mcp_call(&w.read, 2, "query_devices")).await;
    assert!(r.body["result"].is_object(), "{}", r.body);
}

breeze_store::on_both_backends!(
    metrics_answer_the_format_accept_asks_for,
    metrics_are_token_protected_and_count,
    request_ids_are_honoured_and_echoed,
    a_draining_instance_takes_no_new_sessions
);
