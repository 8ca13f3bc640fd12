//! MCP sessions and refusals end to end: a key that never ends its sessions is not locked out
//! (the least recently used idle one ends to make room), busy sessions are kept (429 with
//! `Retry-After`), one organization cannot take every session, every message of a batch counts
//! against the rate limit, and every authenticated request leaves an audit record and every
//! refused or failed one a log line, both with the request's id.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
    response::Response,
};
use breeze_core::AuditRecord;
use breeze_limits::MemoryLimiter;
use breeze_server::{AppState, Breeze, app};
use breeze_store::{AuditFilter, testing::Ctx};
use common::{World, build, err_msg, send, world};
use serde_json::{Value, json};
use tower::ServiceExt;

fn post(key: &str, body: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", key);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body.to_owned())).unwrap()
}

fn init() -> String {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } }
    })
    .to_string()
}

fn ping(id: i64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "ping" })
}

/// A new session of `key` (never ended with DELETE).
async fn initialize(app: &Router, key: &str) -> String {
    let r = send(app, post(key, &init(), &[])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// Opens the GET stream of `sid`: the session is busy while the response lives.
async fn hold_stream(app: &Router, key: &str, sid: &str) -> Response {
    let get = Request::get("/mcp")
        .header("x-api-key", key)
        .header("mcp-session-id", sid)
        .header("accept", "text/event-stream")
        .body(Body::empty())
        .unwrap();
    let r = app.clone().oneshot(get).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r
}

/// Opens a legacy SSE stream (and its session) for `key`.
async fn legacy_stream(app: &Router, key: &str) -> Response {
    let get = Request::get("/api/v1/mcp/sse")
        .header("x-api-key", key)
        .body(Body::empty())
        .unwrap();
    let r = app.clone().oneshot(get).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r
}

/// Organization A's `mcp.*` audit records, oldest first.
async fn mcp_records(w: &World) -> Vec<AuditRecord> {
    let filter = AuditFilter {
        action: Some("mcp.".into()),
        ..Default::default()
    };
    let mut page = w
        .store
        .org(w.org_a)
        .audit()
        .query_audit(&filter, None, 500)
        .await
        .unwrap();
    page.records.reverse();
    page.records
}

fn with_action<'a>(records: &'a [AuditRecord], action: &str) -> Vec<&'a AuditRecord> {
    records
        .iter()
        .filter(|r| r.event.action == action)
        .collect()
}

fn is_listed(app: &Router, key: &str, sid: &str) -> impl Future<Output = StatusCode> {
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }).to_string();
    let req = post(key, &list, &[("mcp-session-id", sid)]);
    let app = app.clone();
    async move { send(&app, req).await.status }
}

async fn ten_sessions_without_delete_all_open(cx: Ctx) {
    let w = world(&cx).await;
    // Default caps: five sessions per key.
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(initialize(&w.app, &w.read).await);
    }
    // The five newest live; each older one ended when a sixth was made.
    for (i, sid) in ids.iter().enumerate() {
        let want = if i < 5 {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::OK
        };
        assert_eq!(is_listed(&w.app, &w.read, sid).await, want, "session {i}");
    }
    let records = mcp_records(&w).await;
    let evicted = with_action(&records, "mcp.session.evicted");
    let ended: Vec<&str> = evicted
        .iter()
        .map(|r| r.event.resource_id.as_deref().unwrap())
        .collect();
    assert_eq!(
        ended,
        ids[..5].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(evicted[0].event.details["reason"], "key session cap");
    assert_eq!(
        evicted[0].event.details["owner_key"],
        json!(evicted[0].event.actor.id)
    );
}

/// Six editor windows on one key: each client keeps its GET stream open and nothing in
/// flight, so the sixth session ends the oldest one (its stream closes) rather than being
/// refused, and the eviction is audited.
async fn a_session_with_only_its_get_stream_open_makes_room(cx: Ctx) {
    let w = world(&cx).await;
    let mut ids = Vec::new();
    let mut held = Vec::new();
    for _ in 0..5 {
        let sid = initialize(&w.app, &w.read).await;
        held.push(hold_stream(&w.app, &w.read, &sid).await);
        ids.push(sid);
    }
    let sixth = initialize(&w.app, &w.read).await;
    assert_eq!(
        is_listed(&w.app, &w.read, &ids[0]).await,
        StatusCode::NOT_FOUND,
        "the oldest window's session ended"
    );
    for sid in ids[1..].iter().chain([&sixth]) {
        assert_eq!(is_listed(&w.app, &w.read, sid).await, StatusCode::OK);
    }
    // Its stream ends with it.
    let first = held.remove(0);
    let ended = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        http_body_util::BodyExt::collect(first.into_body()),
    )
    .await;
    assert!(ended.is_ok(), "the evicted session's stream closed");
    let records = mcp_records(&w).await;
    let evicted = with_action(&records, "mcp.session.evicted");
    assert_eq!(evicted.len(), 1);
    assert_eq!(
        evicted[0].event.resource_id.as_deref(),
        Some(ids[0].as_str())
    );
    assert_eq!(evicted[0].event.details["reason"], "key session cap");
}

async fn when_every_session_is_busy_the_next_is_refused_with_retry_after(cx: Ctx) {
    let w = world(&cx).await;
    let (exec, _) = w
        .state
        .auth
        .create_api_key(
            breeze_auth::CreateApiKey {
                org_id: w.org_a,
                user_id: w.admin,
                name: "exec".into(),
                scopes: breeze_core::ScopeSet::new([
                    breeze_core::Scope::AiRead,
                    breeze_core::Scope::AiWrite,
                    breeze_core::Scope::AiExecute,
                ]),
                expires_at: None,
            },
            common::audit("api_key.create"),
        )
        .await
        .unwrap();
    let exec = exec.expose().to_owned();
    // The key's five sessions (its cap), each with a call in flight: a Tier 3 call waiting
    // for a person's approval.
    let mut waiting = Vec::new();
    for n in 0..5 {
        let sid = initialize(&w.app, &exec).await;
        let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "manage_groups", "arguments": { "action": "create", "name": format!("busy-{n}") } } });
        let headers = [
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        let (app, req) = (w.app.clone(), post(&exec, &call.to_string(), &headers));
        waiting.push(tokio::spawn(async move { app.oneshot(req).await }));
    }
    let approvals = w.store.org(w.org_a).approvals();
    for _ in 0..400 {
        if approvals.list_approvals(true, 10).await.unwrap().len() == 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(approvals.list_approvals(true, 10).await.unwrap().len(), 5);
    let r = send(&w.app, post(&exec, &init(), &[("x-request-id", "busy-1")])).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    let message = err_msg(&r);
    assert!(
        message.starts_with("Too many active MCP sessions for this API key")
            && message.contains("5 at most")
            && message.contains("MCP_MAX_SESSIONS_PER_KEY"),
        "names the limit and the setting: {message}"
    );
    assert_eq!(r.headers.get("retry-after").unwrap(), "5");
    let records = mcp_records(&w).await;
    let refused = with_action(&records, "mcp.refused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].event.request_id.as_deref(), Some("busy-1"));
    assert_eq!(refused[0].event.details["status"], 429);
    for call in waiting {
        call.abort();
    }
}

async fn one_organization_cannot_take_every_session(cx: Ctx) {
    let w = world(&cx).await;
    let app = build(
        &w,
        |c| {
            c.mcp.sessions.max_per_tenant = 3;
            c.mcp.sessions.max_total = 4;
        },
        Arc::new(MemoryLimiter::new()),
    );
    // Two legacy SSE streams and one session of the read key with its GET stream open: none
    // has a call in flight, so each may give way, the least recently used first.
    let mut held = vec![
        legacy_stream(&app, &w.read).await,
        legacy_stream(&app, &w.write).await,
    ];
    let sid = initialize(&app, &w.read).await;
    held.push(hold_stream(&app, &w.read, &sid).await);
    // Full: the read key's legacy stream (the oldest) gives way, whichever key asks.
    initialize(&app, &w.write).await;
    // A third legacy stream ends the write key's new session, the one without a stream.
    held.push(legacy_stream(&app, &w.write).await);
    // The organization is at its cap, and still takes a new session: the read key's.
    initialize(&app, &w.read).await;
    // Organization B still gets its session.
    initialize(&app, &w.other_org_key).await;
    let records = mcp_records(&w).await;
    let evicted = with_action(&records, "mcp.session.evicted");
    assert_eq!(
        evicted.len(),
        3,
        "the read key's legacy stream, the write key's new session, then the oldest stream"
    );
    assert_eq!(evicted[0].event.details["reason"], "tenant session cap");
    assert_ne!(
        evicted[0].event.details["owner_key"],
        json!(evicted[0].event.actor.id),
        "the read key's session, ended for the write key"
    );
}

async fn every_message_of_a_batch_counts(cx: Ctx) {
    let w = world(&cx).await;
    let app = build(
        &w,
        |c| c.mcp.message_rate_per_minute = 5,
        Arc::new(MemoryLimiter::new()),
    );
    let batch = json!([ping(1), ping(2), ping(3)]).to_string();
    let version = [("mcp-protocol-version", "2025-03-26")];
    let r = send(&app, post(&w.read, &batch, &version)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body.as_array().unwrap().len(), 3);
    // Three of five used: a second batch of three does not fit.
    let r = send(&app, post(&w.read, &batch, &version)).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::TOO_MANY_REQUESTS, "Rate limit exceeded")
    );
    assert!(r.headers.contains_key("retry-after"));
}

/// The application with `limit` messages per minute, and its MCP engine.
fn with_engine(
    w: &World,
    limit: u32,
) -> (
    Router,
    Arc<breeze_mcp::Engine<breeze_server::mcp::BreezeMcp>>,
) {
    let mut config = (*w.state.config).clone();
    config.mcp.message_rate_per_minute = limit;
    let state = AppState::new(
        w.state.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    );
    let breeze = Breeze::new(state);
    let engine = breeze.mcp.clone();
    (app(breeze), engine)
}

async fn every_authenticated_request_is_audited_with_its_request_id(cx: Ctx) {
    let w = world(&cx).await;
    let (app, engine) = with_engine(&w, 2);
    let rid = |id: &'static str| [("x-request-id", id)];
    let r = send(&app, post(&w.read, &ping(1).to_string(), &rid("ok-1"))).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(&app, post(&w.read, "{not json", &rid("bad-body-1"))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Beyond the limit: the first refusal of the window is written in full, the others counted.
    for id in ["limited-1", "limited-2", "limited-3", "limited-4"] {
        let r = send(&app, post(&w.read, &ping(1).to_string(), &rid(id))).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    }
    let records = mcp_records(&w).await;
    let ping_row = with_action(&records, "mcp.ping");
    assert_eq!(ping_row.len(), 1);
    assert_eq!(ping_row[0].event.request_id.as_deref(), Some("ok-1"));
    let refused = with_action(&records, "mcp.refused");
    let ids: Vec<Option<&str>> = refused
        .iter()
        .map(|r| r.event.request_id.as_deref())
        .collect();
    assert_eq!(ids, [Some("bad-body-1"), Some("limited-1")]);
    assert_eq!(refused[0].event.details["status"], 400);
    assert_eq!(refused[0].event.result.to_string(), "failure");
    assert_eq!(refused[1].event.details["rate_limited"], true);
    assert_eq!(refused[1].event.result.to_string(), "denied");
    assert_eq!(
        refused[1].event.error_message.as_deref(),
        Some("Rate limit exceeded")
    );

    // Nothing is written before the window has passed; then the count is.
    engine.app().write_refusal_counts().await;
    assert!(with_action(&mcp_records(&w).await, "mcp.refused.count").is_empty());
    cx.clock.advance(chrono::Duration::seconds(61));
    engine.app().write_refusal_counts().await;
    let records = mcp_records(&w).await;
    let counts = with_action(&records, "mcp.refused.count");
    assert_eq!(counts.len(), 1);
    assert_eq!(counts[0].event.details["count"], 3);
    engine.app().write_refusal_counts().await;
    assert_eq!(
        with_action(&mcp_records(&w).await, "mcp.refused.count").len(),
        1,
        "a count is written once"
    );

    // A DELETE is a request too.
    let sid = initialize(&w.app, &w.read).await;
    let del = Request::delete("/mcp")
        .header("x-api-key", &w.read)
        .header("mcp-session-id", &sid)
        .header("x-request-id", "delete-1")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&w.app, del).await.status, StatusCode::NO_CONTENT);
    let records = mcp_records(&w).await;
    let deleted = with_action(&records, "mcp.session.delete");
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].event.request_id.as_deref(), Some("delete-1"));
    assert_eq!(deleted[0].event.resource_id.as_deref(), Some(sid.as_str()));
}

/// Log lines written while the guard lives, as the default (`info`) level shows them.
fn capture_logs() -> (tracing::subscriber::DefaultGuard, Arc<Mutex<Vec<u8>>>) {
    #[derive(Clone)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Sink(buf.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    (tracing::subscriber::set_default(subscriber), buf)
}

async fn refused_and_failed_requests_leave_a_log_line(cx: Ctx) {
    let w = world(&cx).await;
    let (app, _engine) = with_engine(&w, 1);
    let (_guard, logs) = capture_logs();
    let rid = |id: &'static str| [("x-request-id", id)];
    let ok = send(&app, post(&w.read, &ping(1).to_string(), &rid("log-ok"))).await;
    assert_eq!(ok.status, StatusCode::OK);
    let limited = send(&app, post(&w.read, &ping(1).to_string(), &rid("log-429"))).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    let bad_key = send(
        &app,
        post("brz_nope", &ping(1).to_string(), &rid("log-401")),
    )
    .await;
    assert_eq!(bad_key.status, StatusCode::UNAUTHORIZED);
    let big = "x".repeat(70_000);
    let too_large = send(&w.app, post(&w.read, &big, &rid("log-413"))).await;
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    let call = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": { "name": "set_device_context", "arguments": {} }
    });
    let tool_error = send(&w.app, post(&w.read, &call.to_string(), &rid("log-tool"))).await;
    assert_eq!(tool_error.status, StatusCode::OK);
    drop(_guard);
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let lines = |id: &str| text.lines().filter(|l| l.contains(id)).count();
    for id in ["log-429", "log-401", "log-413", "log-tool"] {
        assert_eq!(lines(id), 1, "{id} in:\n{text}");
    }
    assert_eq!(lines("log-ok"), 0, "a success says nothing:\n{text}");
}

breeze_store::on_both_backends!(
    ten_sessions_without_delete_all_open,
    a_session_with_only_its_get_stream_open_makes_room,
    when_every_session_is_busy_the_next_is_refused_with_retry_after,
    one_organization_cannot_take_every_session,
    every_message_of_a_batch_counts,
    every_authenticated_request_is_audited_with_its_request_id,
    refused_and_failed_requests_leave_a_log_line,
);
