//! Catalog modes end to end, in-process: `full` with toolsets, `consolidated` with its
//! meta-tools (discover pages within the budget, cursors, describe, read / write / execute
//! through the pipeline), selection by query, header and setting, a session keeping its choice,
//! and the size of `tools/list` per key and mode (printed: the bench's numbers).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use breeze_auth::CreateApiKey;
use breeze_core::{Scope, ScopeSet};
use breeze_limits::MemoryLimiter;
use breeze_server::catalog::{CatalogMode, MetaTool, OpClass, classes_of};
use breeze_store::testing::Ctx;
use common::{Reply, World, audit, build, err_msg, send, world};
use serde_json::{Value, json};

fn request(
    path: &str,
    key: &str,
    method: &str,
    params: Value,
    headers: &[(&str, &str)],
) -> Request<Body> {
    let mut b = Request::post(path)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("x-api-key", key);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    b.body(Body::from(body.to_string())).unwrap()
}

async fn list(app: &Router, key: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    send(app, request(path, key, "tools/list", json!({}), headers)).await
}

fn names(r: &Reply) -> Vec<String> {
    r.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool list: {}", r.body))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn call(app: &Router, key: &str, path: &str, tool: &str, args: Value) -> Reply {
    send(
        app,
        request(
            path,
            key,
            "tools/call",
            json!({ "name": tool, "arguments": args }),
            &[],
        ),
    )
    .await
}

/// The result's `structuredContent`; panics on a JSON-RPC error.
fn structured(r: &Reply) -> &Value {
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let result = &r.body["result"];
    assert!(result.is_object(), "not a result: {}", r.body);
    &result["structuredContent"]
}

/// The error code of a tool error result, if the reply is one.
fn tool_error(r: &Reply) -> Option<&str> {
    let result = r.body.get("result")?;
    (result["isError"] == true).then(|| result["structuredContent"]["error"]["code"].as_str())?
}

const C: &str = "/mcp?catalog=consolidated";

async fn exec_key(w: &World) -> String {
    let scopes = ScopeSet::new([Scope::AiRead, Scope::AiWrite, Scope::AiExecute]);
    w.state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: w.org_a,
                user_id: w.admin,
                name: "exec".into(),
                scopes,
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap()
        .0
        .expose()
        .to_owned()
}

/// Every page of `breeze_discover` with `filters`, each checked against `budget`.
async fn walk(app: &Router, key: &str, filters: Value, budget: usize) -> (Vec<Value>, usize) {
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = filters.clone();
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = call(app, key, C, "breeze_discover", args).await;
        let page = structured(&r).clone();
        assert_eq!(tool_error(&r), None, "{}", r.body);
        let text = page.to_string();
        assert!(
            text.len() <= budget,
            "a page of {} bytes exceeds the budget of {budget}",
            text.len()
        );
        let ops = page["operations"].as_array().unwrap();
        assert!(!ops.is_empty(), "an empty page");
        for e in ops {
            for field in ["name", "title", "summary", "domain", "tiers", "metaTools"] {
                assert!(e.get(field).is_some(), "entry without {field}: {e}");
            }
        }
        entries.extend(ops.iter().cloned());
        pages += 1;
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                assert_eq!(page["total"].as_u64().unwrap() as usize, entries.len());
                return (entries, pages);
            }
        }
    }
}

/// An input of `spec` that names an action of `class` (or none, for a tool without actions)
/// and carries a field no tool accepts: it passes the guard and the class check, and is then
/// refused by validation, so nothing runs.
fn probe_input(spec: &breeze_tools::ToolSpec, class: OpClass) -> Option<Value> {
    let mut input = json!({ "zzProbe": true });
    if spec.actions.is_empty() {
        return (classes_of(spec) == [class]).then_some(input);
    }
    let action = spec.actions.iter().find(|a| {
        breeze_server::catalog::call_class(spec, &json!({ spec.action_key: a.name })) == class
    })?;
    input[spec.action_key] = json!(action.name);
    Some(input)
}

/// Listing agrees with calling in the consolidated catalog, for every key and over the whole
/// registry: a meta-tool is listed exactly when calling it is not refused for scope, and an
/// operation is discovered under a meta-tool exactly when that meta-tool runs it.
async fn consolidated_listing_and_calling_agree(cx: Ctx) {
    let w = world(&cx).await;
    let exec = exec_key(&w).await;
    let registry = w.state.pipeline.registry();
    for (label, key) in [("read", &w.read), ("write", &w.write), ("execute", &exec)] {
        let listed: BTreeSet<String> = names(&list(&w.app, key, C, &[]).await)
            .into_iter()
            .collect();
        for m in MetaTool::ALL {
            let r = call(&w.app, key, C, m.name(), json!({})).await;
            let scope_refused = r.body["error"]["message"]
                .as_str()
                .is_some_and(|e| e.contains("scope"));
            assert_eq!(
                listed.contains(m.name()),
                !scope_refused,
                "{label}: {} listed {} but called {}",
                m.name(),
                listed.contains(m.name()),
                r.body
            );
        }
        let (entries, _) = walk(&w.app, key, json!({}), 8192).await;
        let mut seen = BTreeSet::new();
        for e in &entries {
            assert!(
                seen.insert(e["name"].as_str().unwrap().to_owned()),
                "listed twice: {e}"
            );
        }
        for spec in registry.iter() {
            let entry = entries.iter().find(|e| e["name"] == spec.name);
            for class in OpClass::ALL {
                let Some(input) = probe_input(spec, class) else {
                    continue;
                };
                let meta = class.meta_tool().name();
                let discovered = entry
                    .is_some_and(|e| e["metaTools"].as_array().unwrap().contains(&json!(meta)));
                let r = call(
                    &w.app,
                    key,
                    C,
                    meta,
                    json!({ "operation": spec.name, "input": input }),
                )
                .await;
                // Refused by validation, or by the tool's own rate limit (counted only once
                // scope and permission passed, so the probes of one tool can reach it).
                let reached = tool_error(&r) == Some("INVALID_ARGUMENT")
                    || r.body["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Tool rate limit exceeded"));
                assert_eq!(
                    discovered, reached,
                    "{label}: {} via {meta}: discovered {discovered}, call answered {}",
                    spec.name, r.body
                );
            }
        }
    }
}

/// Toolsets narrow the full catalog's listing and calling to the chosen domains; unknown
/// toolsets and catalogs are refused at connect time, naming the valid ones.
async fn toolsets_restrict_listing_and_calling(cx: Ctx) {
    let w = world(&cx).await;
    let exec = exec_key(&w).await;
    let registry = w.state.pipeline.registry();
    let all = names(&list(&w.app, &exec, "/mcp", &[]).await);
    let path = "/mcp?toolsets=devices,scripts";
    let chosen = names(&list(&w.app, &exec, path, &[]).await);
    let expected: Vec<String> = all
        .iter()
        .filter(|n| ["devices", "scripts"].contains(&registry.get(n).unwrap().domain))
        .cloned()
        .collect();
    assert!(!expected.is_empty() && expected.len() < all.len());
    assert_eq!(chosen, expected);
    for name in &all {
        let r = call(&w.app, &exec, path, name, json!({ "zzProbe": true })).await;
        let unknown = r.body["error"]["message"] == format!("Unknown tool: {name}");
        assert_eq!(unknown, !chosen.contains(name), "{name}: {}", r.body);
    }
    let r = call(&w.app, &exec, path, "query_devices", json!({})).await;
    assert_eq!(structured(&r)["devices"][0]["hostname"], "web-01");

    // The same choice by header.
    let by_header = names(
        &list(
            &w.app,
            &exec,
            "/mcp",
            &[("x-breeze-toolsets", "devices,scripts")],
        )
        .await,
    );
    assert_eq!(by_header, expected);

    let r = list(&w.app, &exec, "/mcp?toolsets=devices,printers", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let m = err_msg(&r);
    assert!(
        m.contains("\"printers\"") && m.contains("devices, disk"),
        "{m}"
    );
    let r = list(&w.app, &exec, "/mcp?catalog=compact", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).contains("full, consolidated"), "{}", r.body);
    let r = list(&w.app, &exec, "/mcp", &[("x-breeze-catalog", "everything")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Toolsets narrow the consolidated catalog too.
    let (entries, _) = walk(&w.app, &exec, json!({}), 8192).await;
    let r = call(
        &w.app,
        &exec,
        "/mcp?catalog=consolidated&toolsets=devices",
        "breeze_discover",
        json!({}),
    )
    .await;
    let narrowed = structured(&r)["operations"].as_array().unwrap().clone();
    assert!(narrowed.len() < entries.len());
    assert!(narrowed.iter().all(|e| e["domain"] == "devices"));
    let r = call(
        &w.app,
        &exec,
        "/mcp?catalog=consolidated&toolsets=devices",
        "breeze_read",
        json!({ "operation": "get_fleet_health", "input": {} }),
    )
    .await;
    assert_eq!(tool_error(&r), Some("UNKNOWN_OPERATION"), "{}", r.body);
}

/// Pages stay within `BREEZE_MCP_DISCOVER_BYTES` with whole entries, and walking every page
/// lists every visible operation exactly once, with and without filters.
async fn discover_pages_fit_and_cover_everything(cx: Ctx) {
    let w = world(&cx).await;
    let exec = exec_key(&w).await;
    let full: Vec<String> = names(&list(&w.app, &exec, "/mcp", &[]).await);
    let small = build(
        &w,
        |c| c.catalog.discover_bytes = 1024,
        Arc::new(MemoryLimiter::new()),
    );
    for (app, budget) in [(&w.app, 8192), (&small, 1024)] {
        let (entries, pages) = walk(app, &exec, json!({}), budget).await;
        let walked: Vec<String> = entries
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect();
        // An execute key reaches every class, so discovery lists what the full catalog lists.
        assert_eq!(walked, full, "budget {budget}");
        if budget == 1024 {
            assert!(pages > 2, "a small budget pages: {pages}");
        }
    }
    let (reads, _) = walk(&small, &exec, json!({ "effect": "read" }), 1024).await;
    assert!(reads.iter().all(|e| {
        e["metaTools"]
            .as_array()
            .unwrap()
            .contains(&json!("breeze_read"))
    }));
    let (devices, _) = walk(
        &small,
        &exec,
        json!({ "domain": "devices", "query": "device" }),
        1024,
    )
    .await;
    assert!(!devices.is_empty() && devices.iter().all(|e| e["domain"] == "devices"));
    let r = call(
        &w.app,
        &exec,
        C,
        "breeze_discover",
        json!({ "domain": "printers" }),
    )
    .await;
    assert_eq!(tool_error(&r), Some("INVALID_ARGUMENT"));
}

/// A cursor works only with the filters that made it, on any instance of the same build.
async fn cursors_reject_changed_filters_and_forgeries(cx: Ctx) {
    let w = world(&cx).await;
    let exec = exec_key(&w).await;
    let small = build(
        &w,
        |c| c.catalog.discover_bytes = 1024,
        Arc::new(MemoryLimiter::new()),
    );
    let r = call(&small, &exec, C, "breeze_discover", json!({})).await;
    let cursor = structured(&r)["nextCursor"].as_str().unwrap().to_owned();
    let ok = call(
        &small,
        &exec,
        C,
        "breeze_discover",
        json!({ "cursor": cursor }),
    )
    .await;
    assert_eq!(tool_error(&ok), None, "{}", ok.body);
    let mut flipped = cursor.clone().into_bytes();
    flipped[1] = if flipped[1] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    // Another instance of the same build (a cluster's next, behind a balancer) takes it.
    let other_instance = build(
        &w,
        |c| c.catalog.discover_bytes = 1024,
        Arc::new(MemoryLimiter::new()),
    );
    let r = call(
        &other_instance,
        &exec,
        C,
        "breeze_discover",
        json!({ "cursor": cursor }),
    )
    .await;
    assert_eq!(tool_error(&r), None, "{}", r.body);
    assert_eq!(structured(&r)["operations"], structured(&ok)["operations"]);
    for (app, args) in [
        (&small, json!({ "cursor": cursor, "effect": "read" })),
        (&small, json!({ "cursor": cursor, "query": "device" })),
        (&small, json!({ "cursor": flipped })),
        (&small, json!({ "cursor": "not-a-cursor" })),
        (&small, json!({ "cursor": "" })),
        (&other_instance, json!({ "cursor": flipped })),
    ] {
        let r = call(app, &exec, C, "breeze_discover", args.clone()).await;
        assert_eq!(tool_error(&r), Some("INVALID_CURSOR"), "{args}: {}", r.body);
    }
    // Another key's scopes make another listing: its cursor is not this one's.
    let r = call(
        &small,
        &w.read,
        C,
        "breeze_discover",
        json!({ "cursor": cursor }),
    )
    .await;
    assert_eq!(tool_error(&r), Some("INVALID_CURSOR"), "{}", r.body);
}

/// Describe gives 1 to 3 complete schemas, refuses 4 and unknown names.
async fn describe_one_to_three(cx: Ctx) {
    let w = world(&cx).await;
    let registry = w.state.pipeline.registry();
    let r = call(
        &w.app,
        &w.read,
        C,
        "breeze_describe",
        json!({ "operations": ["query_devices"] }),
    )
    .await;
    let op = &structured(&r)["operations"][0];
    let spec = registry.get("query_devices").unwrap();
    assert_eq!(op["inputSchema"], spec.input_schema);
    assert_eq!(op["outputSchema"], spec.output_schema);
    assert_eq!(op["metaTools"], json!(["breeze_read"]));
    let three = json!({ "operations": ["query_devices", "get_device_details", "manage_groups"] });
    let r = call(&w.app, &w.read, C, "breeze_describe", three).await;
    let ops = structured(&r)["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 3);
    let groups = &ops[2];
    assert!(
        groups["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["metaTool"] == "breeze_execute")
    );
    let four = json!({ "operations": ["query_devices", "get_device_details", "manage_groups", "run_script"] });
    let r = call(&w.app, &w.read, C, "breeze_describe", four).await;
    assert_eq!(tool_error(&r), Some("INVALID_ARGUMENT"), "{}", r.body);
    assert!(
        r.body["result"]["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 to 3")
    );
    let r = call(
        &w.app,
        &w.read,
        C,
        "breeze_describe",
        json!({ "operations": [] }),
    )
    .await;
    assert_eq!(tool_error(&r), Some("INVALID_ARGUMENT"));
    let r = call(
        &w.app,
        &w.read,
        C,
        "breeze_describe",
        json!({ "operations": ["nope"] }),
    )
    .await;
    assert_eq!(tool_error(&r), Some("UNKNOWN_OPERATION"));
}

/// read / write / execute run operations through the same pipeline as a direct call.
async fn meta_tools_run_through_the_pipeline(cx: Ctx) {
    let w = world(&cx).await;
    let exec = exec_key(&w).await;
    let direct = call(&w.app, &w.read, "/mcp", "query_devices", json!({})).await;
    let via = call(
        &w.app,
        &w.read,
        C,
        "breeze_read",
        json!({ "operation": "query_devices", "input": {} }),
    )
    .await;
    assert_eq!(structured(&via)["devices"], structured(&direct)["devices"]);
    assert_eq!(
        via.body["result"]["_meta"]["breeze/tier"], 1,
        "the operation's _meta"
    );

    // A full catalog's tool is not a tool of the consolidated catalog, and the reverse.
    let r = call(&w.app, &w.read, C, "query_devices", json!({})).await;
    assert_eq!(err_msg(&r), "Unknown tool: query_devices");
    let r = call(&w.app, &w.read, "/mcp", "breeze_discover", json!({})).await;
    assert_eq!(err_msg(&r), "Unknown tool: breeze_discover");

    // Effect mismatches name the right meta-tool; unknown operations are refused.
    let create =
        json!({ "operation": "manage_groups", "input": { "action": "create", "name": "G" } });
    let r = call(&w.app, &exec, C, "breeze_read", create.clone()).await;
    assert_eq!(tool_error(&r), Some("TOOL_EFFECT_MISMATCH"), "{}", r.body);
    let m = r.body["result"]["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(m.contains("breeze_execute"), "{m}");
    let r = call(
        &w.app,
        &exec,
        C,
        "breeze_write",
        json!({ "operation": "query_devices" }),
    )
    .await;
    assert_eq!(tool_error(&r), Some("TOOL_EFFECT_MISMATCH"));
    assert!(
        r.body["result"]["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("breeze_read")
    );
    let r = call(
        &w.app,
        &exec,
        C,
        "breeze_read",
        json!({ "operation": "format_disk" }),
    )
    .await;
    assert_eq!(tool_error(&r), Some("UNKNOWN_OPERATION"));
    let r = call(&w.app, &exec, C, "breeze_read", json!({ "input": {} })).await;
    assert_eq!(tool_error(&r), Some("INVALID_ARGUMENT"));

    // A read key has no breeze_write: refused as the guard refuses a tool.
    let r = call(
        &w.app,
        &w.read,
        C,
        "breeze_write",
        json!({ "operation": "set_device_context" }),
    )
    .await;
    assert!(
        err_msg(&r).contains("requires ai:write scope"),
        "{}",
        r.body
    );

    // A Tier 2 write runs through breeze_write.
    let note = json!({ "operation": "set_device_context", "input": { "deviceId": w.a_device, "contextType": "quirk", "summary": "via meta" } });
    let r = call(&w.app, &w.write, C, "breeze_write", note).await;
    assert_eq!(tool_error(&r), None, "{}", r.body);

    // A Tier 3 call through breeze_execute asks for a person's approval like the direct call.
    let app = build(
        &w,
        |c| c.approvals.wait = Duration::ZERO,
        Arc::new(MemoryLimiter::new()),
    );
    let r = call(&app, &exec, C, "breeze_execute", create).await;
    let out = structured(&r);
    assert_eq!(out["status"], "pending_approval", "{}", r.body);
    let pending = w
        .store
        .org(w.org_a)
        .approvals()
        .list_approvals(true, 10)
        .await
        .unwrap();
    assert!(
        pending
            .iter()
            .any(|a| a.id.to_string() == out["approvalId"].as_str().unwrap()
                && a.tool == "manage_groups"),
        "{pending:?}"
    );
}

/// The catalog is chosen by query, header or setting; the query wins over the header; a
/// session keeps its initialize's choice and refuses a request that asks for another.
async fn selection_by_query_header_setting_and_session(cx: Ctx) {
    let w = world(&cx).await;
    let metas = vec!["breeze_discover", "breeze_describe", "breeze_read"];
    assert_eq!(names(&list(&w.app, &w.read, C, &[]).await), metas);
    let h = [("x-breeze-catalog", "consolidated")];
    assert_eq!(names(&list(&w.app, &w.read, "/mcp", &h).await), metas);
    let full = names(&list(&w.app, &w.read, "/mcp", &[]).await);
    assert!(full.contains(&"query_devices".to_owned()));
    assert_eq!(
        names(&list(&w.app, &w.read, "/mcp?catalog=full", &h).await),
        full,
        "the query wins"
    );
    let by_setting = build(
        &w,
        |c| c.catalog.default_mode = CatalogMode::Consolidated,
        Arc::new(MemoryLimiter::new()),
    );
    assert_eq!(names(&list(&by_setting, &w.read, "/mcp", &[]).await), metas);
    assert_eq!(
        names(&list(&by_setting, &w.read, "/mcp?catalog=full", &[]).await),
        full
    );

    // A session keeps its choice.
    let init = json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } });
    let r = send(&w.app, request(C, &w.read, "initialize", init, &[])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let sid = r
        .headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let on_session = |path: &'static str| {
        request(
            path,
            &w.read,
            "tools/list",
            json!({}),
            &[("mcp-session-id", sid.as_str())],
        )
    };
    assert_eq!(names(&send(&w.app, on_session(C)).await), metas);
    for other in [
        "/mcp",
        "/mcp?catalog=full",
        "/mcp?catalog=consolidated&toolsets=devices",
    ] {
        let r = send(&w.app, on_session(other)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{other}: {}", r.body);
        let m = err_msg(&r);
        assert!(
            m.contains("opened with catalog=consolidated") && m.contains("open a new session"),
            "{m}"
        );
    }
}

/// The size of `tools/list` per key and catalog mode (compact JSON of the `result`), printed for
/// the report and held to the contract's limits: the consolidated list ≤ 8 KB for every key, the
/// full list of [`breeze_tools::BUDGETED_CATALOGUE`] ≤ [`breeze_tools::FULL_LISTING_BUDGET`] for an execute key. A longer schema that
/// crosses a limit fails here: trim the listing (see `listed_output_schema`) rather than the
/// limit. `cargo xtask bench sizes` prints the same figures split per tool and part.
#[allow(clippy::print_stdout)] // the numbers are this test's report (`--nocapture`)
async fn catalog_sizes(cx: Ctx) {
    let w = world(&cx).await;
    let exec = exec_key(&w).await;
    for (label, key) in [("read", &w.read), ("write", &w.write), ("execute", &exec)] {
        for (mode, path) in [("full", "/mcp"), ("consolidated", C)] {
            let r = list(&w.app, key, path, &[]).await;
            let bytes = r.body["result"].to_string().len();
            let tools = names(&r).len();
            let aim = match (mode, label) {
                ("consolidated", _) => {
                    assert!(bytes <= 8 * 1024, "consolidated {label}: {bytes} > 8192");
                    " (limit 8192)"
                }
                ("full", "execute") => {
                    assert_eq!(tools, breeze_tools::all().len(), "an execute key lists all");
                    let listed = r.body["result"]["tools"].as_array().unwrap();
                    let contract: Vec<&Value> = listed
                        .iter()
                        .filter(|t| {
                            breeze_tools::BUDGETED_CATALOGUE.contains(&t["name"].as_str().unwrap())
                        })
                        .collect();
                    assert_eq!(contract.len(), breeze_tools::BUDGETED_CATALOGUE.len());
                    let held = json!({ "tools": contract }).to_string().len();
                    println!(
                        "tools/list         full execute key: the {} tools of #22: {held} bytes (limit {})",
                        contract.len(),
                        breeze_tools::FULL_LISTING_BUDGET
                    );
                    assert!(
                        held <= breeze_tools::FULL_LISTING_BUDGET,
                        "#22's catalogue, execute: {held} > {}",
                        breeze_tools::FULL_LISTING_BUDGET
                    );
                    ""
                }
                _ => "",
            };
            println!(
                "tools/list {mode:>12} {label:>7} key: {tools:>2} tools, {bytes:>6} bytes{aim}"
            );
        }
    }
}

breeze_store::on_both_backends!(
    consolidated_listing_and_calling_agree,
    toolsets_restrict_listing_and_calling,
    discover_pages_fit_and_cover_everything,
    cursors_reject_changed_filters_and_forgeries,
    describe_one_to_three,
    meta_tools_run_through_the_pipeline,
    selection_by_query_header_setting_and_session,
    catalog_sizes,
);
