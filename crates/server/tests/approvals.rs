//! Step-up approvals through the whole pipeline: a Tier 3 MCP call waits for a person, who
//! approves (it runs once), denies, lets it expire, or reports it (the key is revoked); four-eyes
//! refuses self-approval; a changed definition refuses; a decision cannot be made twice; the
//! pending answer and `get_approval_status`; the webhook; the wait's circuit breaker.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{sync::Arc, time::Duration};

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
    w.state.approvals.spawn_resumer(stop.clone());
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

breeze_store::on_both_backends!(
    approve_runs_once_and_only_once,
    deny_expire_and_report,
    four_eyes_and_permissions,
    pending_answers_status_tool_and_pinning,
    the_wait_has_a_circuit_breaker,
);
