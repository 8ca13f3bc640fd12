//! Batches through the whole pipeline, on both backends: preview then commit; an invalid or a
//! refused item runs nothing; best effort reports each item; atomic is refused for several
//! items; the envelope's rules (mode required, no mixing, unique clientRefs,
//! BREEZE_MCP_MAX_ITEMS); the rate limit counts every item; a Tier 3 batch is one approval
//! request listing every item, and once approved every item runs once. Also that the envelope
//! is described once, in the server's instructions, and in no tool's listed schema.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_auth::CreateApiKey;
use breeze_core::{Scope, ScopeSet};
use breeze_limits::MemoryLimiter;
use breeze_store::testing::Ctx;
use common::{World, audit, build, send, world};
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

fn rpc(key: &str, method: &str, params: Value) -> Request<Body> {
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", key)
        .body(Body::from(
            json!({ "jsonrpc": "2.0", "id": 3, "method": method, "params": params }).to_string(),
        ))
        .unwrap()
}

/// The JSON-RPC message of a reply that may be SSE-framed.
fn message(reply: &common::Reply) -> Value {
    match &reply.body {
        Value::String(text) => text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v.get("result").is_some() || v.get("error").is_some())
            .unwrap_or_else(|| panic!("no answer in {text}")),
        other => other.clone(),
    }
}

/// `tools/call` of `tool` with `args`: the result (`isError`, `structuredContent`).
async fn call(app: &Router, key: &str, tool: &str, args: Value) -> Value {
    let reply = send(
        app,
        rpc(
            key,
            "tools/call",
            json!({ "name": tool, "arguments": args }),
        ),
    )
    .await;
    let m = message(&reply);
    assert!(m.get("error").is_none(), "{tool}: {m}");
    m["result"].clone()
}

fn items(list: &[(&str, Value)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(r, input)| json!({ "clientRef": r, "input": input }))
            .collect(),
    )
}

async fn group(w: &World, name: &str) -> String {
    w.store
        .org(w.org_a)
        .tenancy()
        .create_group(name, None, None, audit("group.create"))
        .await
        .unwrap()
        .id
        .to_string()
}

async fn members(w: &World, group: &str) -> usize {
    w.store
        .org(w.org_a)
        .devices()
        .group_members(group.parse().unwrap())
        .await
        .unwrap()
        .len()
}

async fn groups_named(w: &World, prefix: &str) -> usize {
    w.store
        .org(w.org_a)
        .tenancy()
        .list_groups()
        .await
        .unwrap()
        .iter()
        .filter(|g| g.name.starts_with(prefix))
        .count()
}

async fn approvals(w: &World) -> Vec<breeze_store::ApprovalRecord> {
    w.store
        .org(w.org_a)
        .approvals()
        .list_approvals(false, 50)
        .await
        .unwrap()
}

/// A preview runs nothing and says what each item would do; the commit then runs them all.
async fn preview_then_commit(cx: Ctx) {
    let w = world(&cx).await;
    let g = group(&w, "Web").await;
    let batch = |mode: &str| {
        json!({
            "mode": mode,
            "items": items(&[
                ("list", json!({ "action": "list" })),
                ("add", json!({ "action": "add_devices", "groupId": g, "deviceIds": [w.a_device] })),
            ]),
        })
    };
    let r = call(&w.app, &w.write, "manage_groups", batch("preview")).await;
    let s = &r["structuredContent"];
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(s["outcome"], "previewed", "{s}");
    assert_eq!(s["atomicity"], "best_effort", "defaulted");
    assert_eq!(s["items"][0]["status"], "would_run");
    assert_eq!(s["items"][0]["tier"], 1);
    assert_eq!(s["items"][1]["tier"], 2);
    assert_eq!(s["items"][1]["needsApproval"], false);
    assert_eq!(s["counts"]["wouldRun"], 2);
    assert_eq!(members(&w, &g).await, 0, "a preview runs nothing");

    let r = call(&w.app, &w.write, "manage_groups", batch("commit")).await;
    let s = &r["structuredContent"];
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(s["outcome"], "completed", "{s}");
    assert_eq!(s["counts"]["ok"], 2);
    assert_eq!(s["items"][0]["clientRef"], "list");
    assert_eq!(s["items"][0]["output"]["groups"][0]["name"], "Web");
    assert_eq!(s["items"][1]["status"], "ok");
    assert_eq!(s["items"][1]["output"]["changed"], 1);
    assert_eq!(members(&w, &g).await, 1);

    // A Tier 3 item's preview: it needs approval, its precheck ran, nothing was requested.
    let key = exec_key(&w).await;
    let preview = json!({ "mode": "preview", "items": items(&[
        ("scan", json!({ "deviceId": w.a_device, "commandType": "list_processes" })),
        ("gone", json!({ "deviceId": w.b_device, "commandType": "list_processes" })),
    ]) });
    let r = call(&w.app, &key, "execute_command", preview).await;
    let s = &r["structuredContent"];
    assert_eq!(s["items"][0]["tier"], 3, "{s}");
    assert_eq!(s["items"][0]["needsApproval"], true);
    assert!(s["items"][0]["precheck"].is_object(), "{s}");
    // Another organization's device: the precheck refuses it, so the commit would too.
    assert_eq!(s["items"][1]["status"], "rejected", "{s}");
    assert_eq!(s["items"][1]["error"]["code"], "NOT_FOUND");
    assert_eq!(s["outcome"], "rejected");
    assert_eq!(r["isError"], true);
    assert!(approvals(&w).await.is_empty(), "a preview asks nobody");
}

/// One invalid item and nothing runs: no group is created, no approval is requested; every
/// item's outcome is listed.
async fn an_invalid_item_runs_nothing(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let args = json!({ "mode": "commit", "items": items(&[
        ("a", json!({ "action": "create", "name": "Batch-A" })),
        ("b", json!({ "action": "create", "name": 17 })),
        ("c", json!({ "action": "create", "name": "Batch-C" })),
    ]) });
    let r = call(&w.app, &key, "manage_groups", args).await;
    let s = &r["structuredContent"];
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(s["outcome"], "rejected");
    assert_eq!(s["items"][0]["status"], "not_run");
    assert_eq!(s["items"][1]["status"], "rejected");
    assert_eq!(s["items"][1]["error"]["code"], "INVALID_ARGUMENT");
    assert!(
        s["items"][1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("name"),
        "{s}"
    );
    assert_eq!(s["items"][2]["status"], "not_run");
    assert_eq!(s["counts"]["rejected"], 1);
    assert_eq!(s["counts"]["notRun"], 2);
    assert_eq!(groups_named(&w, "Batch-").await, 0);
    assert!(approvals(&w).await.is_empty(), "nobody was asked");

    // Tier 2: a valid membership change beside an invalid one does not happen either.
    let g = group(&w, "Web").await;
    let args = json!({ "mode": "commit", "items": items(&[
        ("ok", json!({ "action": "add_devices", "groupId": g, "deviceIds": [w.a_device] })),
        ("bad", json!({ "action": "add_devices", "groupId": g, "deviceIds": "not-a-list" })),
    ]) });
    let r = call(&w.app, &w.write, "manage_groups", args).await;
    assert_eq!(r["structuredContent"]["items"][1]["status"], "rejected");
    assert_eq!(members(&w, &g).await, 0);
}

/// An item the key's scopes do not reach refuses the whole batch before anything runs.
async fn a_refused_item_runs_nothing(cx: Ctx) {
    let w = world(&cx).await;
    let g = group(&w, "Web").await;
    let args = json!({ "mode": "commit", "items": items(&[
        ("add", json!({ "action": "add_devices", "groupId": g, "deviceIds": [w.a_device] })),
        ("del", json!({ "action": "delete", "groupId": g })),
    ]) });
    let r = call(&w.app, &w.write, "manage_groups", args).await;
    let s = &r["structuredContent"];
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(s["items"][0]["status"], "not_run");
    assert_eq!(s["items"][1]["status"], "rejected");
    assert_eq!(s["items"][1]["error"]["code"], "INSUFFICIENT_SCOPE");
    assert_eq!(s["items"][1]["error"]["requiredScopes"][0], "ai:execute");
    assert_eq!(members(&w, &g).await, 0, "the Tier 2 item did not run");
    assert!(approvals(&w).await.is_empty());
}

/// Best effort: every item runs; one fails with its own error, the other's change stands.
async fn best_effort_reports_each_item(cx: Ctx) {
    let w = world(&cx).await;
    let g = group(&w, "Web").await;
    let unknown = "0190c0de-0000-7000-8000-000000000000";
    let args = json!({ "mode": "commit", "atomicity": "best_effort", "items": items(&[
        ("missing", json!({ "action": "add_devices", "groupId": unknown, "deviceIds": [w.a_device] })),
        ("present", json!({ "action": "add_devices", "groupId": g, "deviceIds": [w.a_device] })),
    ]) });
    let r = call(&w.app, &w.write, "manage_groups", args).await;
    let s = &r["structuredContent"];
    assert_ne!(r["isError"], true, "one item succeeded: {r}");
    assert_eq!(s["outcome"], "completed");
    assert_eq!(s["items"][0]["status"], "error");
    assert_eq!(s["items"][0]["error"]["code"], "NOT_FOUND");
    assert_eq!(s["items"][1]["status"], "ok");
    assert_eq!(
        (s["counts"]["ok"].clone(), s["counts"]["error"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(members(&w, &g).await, 1);
}

/// The envelope's rules, each refused before anything runs: atomic with several items
/// (ATOMICITY_UNSUPPORTED; one item is honoured), mode missing, items mixed with the tool's
/// arguments, a repeated clientRef, no items, more than BREEZE_MCP_MAX_ITEMS.
async fn envelope_rules(cx: Ctx) {
    let w = world(&cx).await;
    let g = group(&w, "Web").await;
    let add = json!({ "action": "add_devices", "groupId": g, "deviceIds": [w.a_device] });
    let two = items(&[("a", add.clone()), ("b", json!({ "action": "list" }))]);
    let refused = |r: &Value, code: &str, words: &str| {
        assert_eq!(r["isError"], true, "{r}");
        let e = &r["structuredContent"]["error"];
        assert_eq!(e["code"], code, "{r}");
        assert!(
            e["message"].as_str().unwrap().contains(words),
            "{words}: {e}"
        );
    };
    let r = call(
        &w.app,
        &w.write,
        "manage_groups",
        json!({ "mode": "commit", "atomicity": "atomic", "items": two }),
    )
    .await;
    refused(&r, "ATOMICITY_UNSUPPORTED", "atomically");
    let r = call(
        &w.app,
        &w.write,
        "manage_groups",
        json!({ "mode": "preview", "atomicity": "atomic", "items": two }),
    )
    .await;
    refused(&r, "ATOMICITY_UNSUPPORTED", "atomically");
    let r = call(&w.app, &w.write, "manage_groups", json!({ "items": two })).await;
    refused(&r, "INVALID_ARGUMENT", "mode is required");
    let r = call(
        &w.app,
        &w.write,
        "manage_groups",
        json!({ "mode": "commit", "action": "list", "items": two }),
    )
    .await;
    refused(&r, "INVALID_ARGUMENT", "mixed");
    let r = call(
        &w.app,
        &w.write,
        "manage_groups",
        json!({ "mode": "commit", "items": items(&[("a", add.clone()), ("a", add.clone())]) }),
    )
    .await;
    refused(&r, "INVALID_ARGUMENT", "not unique");
    let r = call(
        &w.app,
        &w.write,
        "manage_groups",
        json!({ "mode": "commit", "items": [] }),
    )
    .await;
    refused(&r, "INVALID_ARGUMENT", "empty");
    assert_eq!(members(&w, &g).await, 0, "nothing ran");

    let small = build(
        &w,
        |c| c.max_batch_items = 2,
        Arc::new(MemoryLimiter::new()),
    );
    let three = items(&[
        ("a", json!({ "action": "list" })),
        ("b", json!({ "action": "list" })),
        ("c", json!({ "action": "list" })),
    ]);
    let r = call(
        &small,
        &w.write,
        "manage_groups",
        json!({ "mode": "preview", "items": three }),
    )
    .await;
    refused(&r, "INVALID_ARGUMENT", "BREEZE_MCP_MAX_ITEMS");

    // Atomic with one item: one call is as atomic as the tool is; it runs.
    let r = call(
        &w.app,
        &w.write,
        "manage_groups",
        json!({ "mode": "commit", "atomicity": "atomic", "items": items(&[("a", add)]) }),
    )
    .await;
    assert_eq!(r["structuredContent"]["items"][0]["status"], "ok", "{r}");
    assert_eq!(members(&w, &g).await, 1);
}

/// The per-tool limit counts every item: manage_groups allows 20 calls per 5 minutes, so a
/// commit of 21 items is refused whole, and a preview (which runs nothing) counts nothing.
async fn the_rate_limit_counts_every_item(cx: Ctx) {
    let w = world(&cx).await;
    let list: Vec<(String, Value)> = (0..21)
        .map(|i| (format!("i{i}"), json!({ "action": "list" })))
        .collect();
    let list: Vec<(&str, Value)> = list.iter().map(|(r, v)| (r.as_str(), v.clone())).collect();
    for _ in 0..3 {
        let r = call(
            &w.app,
            &w.write,
            "manage_groups",
            json!({ "mode": "preview", "items": items(&list) }),
        )
        .await;
        assert_eq!(r["structuredContent"]["outcome"], "previewed", "{r}");
    }
    let r = call(
        &w.app,
        &w.write,
        "manage_groups",
        json!({ "mode": "commit", "items": items(&list) }),
    )
    .await;
    let s = &r["structuredContent"];
    assert_eq!(s["outcome"], "rejected", "{s}");
    assert_eq!(s["items"][20]["status"], "rejected");
    assert_eq!(s["items"][20]["error"]["code"], "RATE_LIMITED");
    assert_eq!(s["items"][0]["status"], "not_run");
}

/// A Tier 3 batch is one approval request that lists every item; approved, every item runs
/// once and the stored result is the batch's answer.
async fn a_tier_3_batch_is_one_approval(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let args = json!({ "mode": "commit", "items": items(&[
        ("k1", json!({ "action": "create", "name": "Kiosk-1" })),
        ("look", json!({ "action": "list" })),
        ("k2", json!({ "action": "create", "name": "Kiosk-2" })),
    ]) });
    let app = w.app.clone();
    let waiting = tokio::spawn(async move { call(&app, &key, "manage_groups", args).await });
    let mut pending = Vec::new();
    for _ in 0..200 {
        pending = w
            .store
            .org(w.org_a)
            .approvals()
            .list_approvals(true, 10)
            .await
            .unwrap();
        if !pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(pending.len(), 1, "one request for the whole batch");
    let record = &pending[0];
    assert_eq!(record.tool, "manage_groups");
    assert_eq!(record.tier, 3);
    assert_eq!(record.arguments["items"].as_array().unwrap().len(), 3);
    for r in ["k1", "look", "k2", "Kiosk-1", "Kiosk-2"] {
        assert!(
            record.description.contains(r),
            "{r}: {}",
            record.description
        );
    }
    assert_eq!(
        groups_named(&w, "Kiosk-").await,
        0,
        "nothing before approval"
    );

    let login = send(
        &w.app,
        Request::post("/api/v1/auth/login")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({ "email": "admin@p.test", "password": common::PASSWORD }).to_string(),
            ))
            .unwrap(),
    )
    .await;
    let cookie = login
        .headers
        .get(header::SET_COOKIE)
        .unwrap()
        .to_str()
        .unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let r = send(
        &w.app,
        Request::post(format!("/api/v1/approvals/{}/approve", record.id))
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = waiting.await.unwrap();
    let s = &r["structuredContent"];
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(s["outcome"], "completed", "{s}");
    assert_eq!(s["counts"]["ok"], 3);
    assert_eq!(s["items"][0]["output"]["group"]["name"], "Kiosk-1");
    assert_eq!(s["items"][2]["output"]["group"]["name"], "Kiosk-2");
    assert_eq!(groups_named(&w, "Kiosk-").await, 2, "each item ran once");
    let all = approvals(&w).await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].status.as_str(), "completed");
    assert_eq!(all[0].result.as_ref().unwrap()["counts"]["ok"], 3);
    assert!(
        !w.store.claim_approval(record.id).await.unwrap(),
        "runs once"
    );
    assert_eq!(groups_named(&w, "Kiosk-").await, 2);
}

/// The envelope is described once: `initialize`'s instructions name it, no tool's listed
/// input schema repeats it, and each tool's required fields are at the top level of its
/// listing. Prints the size of `tools/list` for an execute key.
#[allow(clippy::print_stdout)] // the measurement is part of the report (`--nocapture`)
async fn the_envelope_is_described_once(cx: Ctx) {
    let w = world(&cx).await;
    let key = exec_key(&w).await;
    let init = json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": { "name": "batches", "version": "1" }
    });
    let reply = send(&w.app, rpc(&key, "initialize", init)).await;
    let instructions = message(&reply)["result"]["instructions"]
        .as_str()
        .unwrap()
        .to_owned();
    for word in ["\"items\"", "\"clientRef\"", "\"mode\"", "\"atomicity\""] {
        assert!(instructions.contains(word), "instructions name {word}");
    }
    let reply = send(&w.app, rpc(&key, "tools/list", json!({}))).await;
    let listed = message(&reply);
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(!tools.is_empty());
    let registry = breeze_tools::all();
    for t in tools {
        let schema = &t["inputSchema"];
        assert!(
            schema["properties"].get("mode").is_none() && schema.get("else").is_none(),
            "{}: the envelope is listed again",
            t["name"]
        );
        let own = &registry
            .get(t["name"].as_str().unwrap())
            .unwrap()
            .input_schema;
        assert_eq!(schema.get("required"), own.get("required"), "{}", t["name"]);
    }
    let bytes = serde_json::to_vec(&listed).unwrap().len();
    println!(
        "tools/list for an execute key: {bytes} bytes, {} tools, {} bytes a tool",
        tools.len(),
        bytes / tools.len()
    );
}

breeze_store::on_both_backends!(
    preview_then_commit,
    an_invalid_item_runs_nothing,
    a_refused_item_runs_nothing,
    best_effort_reports_each_item,
    envelope_rules,
    the_rate_limit_counts_every_item,
    a_tier_3_batch_is_one_approval,
    the_envelope_is_described_once,
);
