//! Tool sources over Breeze's own MCP endpoint, on both backends: the enabled tools of a
//! source offered to MCP clients appear in `tools/list` for keys whose scopes and role allow
//! them, and are called through the pipeline against a local upstream; another
//! organization's key sees and calls none of them; a source no longer offered disappears from
//! both.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use axum::{Router, body::Body, http::Request};
use breeze_core::tool_source::SourceKind;
use breeze_limits::MemoryLimiter;
use breeze_server::ToolSourcesConfig;
use breeze_sources::{
    service::{NewSource, Owner, Sources},
    testing::{McpServer, TestCa, tool},
    vault::{Credential, Vault},
};
use breeze_store::{SourceChange, ToolChange, testing::Ctx};
use common::{Reply, audit, build, send, world};
use serde_json::{Value, json};

fn request(key: &str, method: &str, params: Value) -> Request<Body> {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("x-api-key", key)
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn names(app: &Router, key: &str) -> Vec<String> {
    let r: Reply = send(app, request(key, "tools/list", json!({}))).await;
    r.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool list: {}", r.body))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

async fn offered_external_tools_are_listed_and_called_over_mcp(cx: Ctx) {
    let w = world(&cx).await;
    let ca = TestCa::new();
    let upstream = McpServer::new(vec![
        tool("lookup", "finds an asset", true),
        tool("wipe", "deletes an asset", false),
        tool("idle", "never enabled", true),
    ]);
    let addr = ca.serve(upstream.router(), true).await;
    let vault = Vault::from_setting(&Vault::generate_key().unwrap()).unwrap();
    let app = build(
        &w,
        |c| {
            c.tool_sources = ToolSourcesConfig {
                key: Some(vault.clone()),
                egress: ca.config(true),
            };
        },
        Arc::new(MemoryLimiter::new()),
    );
    let sources = Sources::new(
        w.store.clone(),
        Some(vault),
        ca.egress(),
        w.state.clock.clone(),
    );
    let owner = Owner::Organization(w.store.org(w.org_a).tool_sources());
    let source = sources
        .create(
            owner,
            NewSource {
                display_name: "Docs".into(),
                slug: None,
                kind: SourceKind::Mcp,
                url: format!("https://localhost:{}/mcp", addr.port()),
                document_url: None,
                credential: Credential::None,
                offer_to_mcp: true,
            },
            "test",
            audit("tool_source.create"),
        )
        .await
        .unwrap();
    sources
        .discover(owner, source.id, audit("tool_source.discover"))
        .await
        .unwrap()
        .unwrap();
    for name in ["lookup", "wipe"] {
        let change = ToolChange {
            enabled: Some(true),
            tier: None,
        };
        w.store
            .org(w.org_a)
            .tool_sources()
            .change_source_tool(source.id, name, change, audit("t"))
            .await
            .unwrap();
    }

    // Listed by tier: the read key sees the Tier 1 tool, not the Tier 3 one; B's key neither.
    let listed = names(&app, &w.read).await;
    assert!(listed.contains(&"docs__lookup".to_owned()), "{listed:?}");
    assert!(
        !listed
            .iter()
            .any(|n| n == "docs__wipe" || n == "docs__idle"),
        "{listed:?}"
    );
    assert!(
        listed.contains(&"query_devices".to_owned()),
        "Breeze's own tools stay"
    );
    let other = names(&app, &w.other_org_key).await;
    assert!(!other.iter().any(|n| n.starts_with("docs__")), "{other:?}");

    // Called through the pipeline, against the upstream.
    let call = |key: &str, name: &str| {
        request(
            key,
            "tools/call",
            json!({"name": name, "arguments": {"q": "printer"}}),
        )
    };
    let r = send(&app, call(&w.read, "docs__lookup")).await;
    assert_eq!(
        r.body["result"]["structuredContent"]["structuredContent"],
        json!({"tool": "lookup", "arguments": {"q": "printer"}}),
        "{}",
        r.body
    );
    let r = send(&app, call(&w.other_org_key, "docs__lookup")).await;
    assert!(
        !r.body["error"].is_null(),
        "another organization: {}",
        r.body
    );
    let r = send(&app, call(&w.read, "docs__wipe")).await;
    assert_eq!(
        r.body["error"]["data"]["code"],
        json!("INSUFFICIENT_SCOPE"),
        "as for Breeze's own Tier 3 tools: {}",
        r.body
    );
    assert_eq!(
        upstream.calls.lock().unwrap().len(),
        1,
        "only the allowed call ran"
    );

    // No longer offered: neither listed nor callable over MCP.
    w.store
        .org(w.org_a)
        .tool_sources()
        .change_tool_source(
            source.id,
            SourceChange {
                offer_to_mcp: Some(false),
                ..SourceChange::default()
            },
            audit("u"),
        )
        .await
        .unwrap();
    assert!(
        !names(&app, &w.read)
            .await
            .iter()
            .any(|n| n.starts_with("docs__"))
    );
    let r = send(&app, call(&w.read, "docs__lookup")).await;
    assert!(!r.body["error"].is_null(), "{}", r.body);
    assert_eq!(upstream.calls.lock().unwrap().len(), 1);
}

breeze_store::on_both_backends!(offered_external_tools_are_listed_and_called_over_mcp);
