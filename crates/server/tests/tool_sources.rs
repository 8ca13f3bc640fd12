//! Tool sources over Breeze's own MCP endpoint, on both backends: the enabled tools of a
//! source offered to MCP clients appear in `tools/list` for keys whose scopes and role allow
//! them, and are called through the pipeline against a local upstream; another
//! organization's key sees and calls none of them; a source no longer offered disappears from
//! both.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_core::tool_source::SourceKind;
use breeze_limits::MemoryLimiter;
use breeze_server::{ToolSourcesConfig, tool_sources::DiscoveryWorker, workers::Worker};
use breeze_sources::{
    service::{NewSource, Owner, Sources},
    testing::{McpServer, TestCa, tool},
    vault::{Credential, Vault},
};
use breeze_store::{SourceChange, ToolChange, testing::Ctx};
use common::{
    Reply, audit, browser,
    browser::{html, location},
    build, err_msg, send, world,
};
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
    let Fixture {
        w,
        app,
        upstream,
        url,
        sources,
        _ca,
        ..
    } = fixture(
        &cx,
        McpServer::new(vec![
            tool("lookup", "finds an asset", true),
            tool("wipe", "deletes an asset", false),
            tool("idle", "never enabled", true),
        ]),
    )
    .await;
    let owner = Owner::Organization(w.store.org(w.org_a).tool_sources());
    let source = sources
        .create(
            owner,
            NewSource {
                display_name: "Docs".into(),
                slug: None,
                kind: SourceKind::Mcp,
                url,
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

// ---------------------------------------------------------------------------------------------
// REST: /api/v1/orgs/{org}/tool-sources…

/// A world whose application calls sources through the test CA and `upstream`, with the
/// service and a discovery worker over the same store and key.
struct Fixture {
    w: common::World,
    app: Router,
    upstream: Arc<McpServer>,
    url: String,
    sources: Sources,
    worker: Arc<DiscoveryWorker>,
    _ca: TestCa,
}

const SECRET: &str = "s3cret";

async fn fixture(cx: &Ctx, upstream: Arc<McpServer>) -> Fixture {
    let w = world(cx).await;
    let ca = TestCa::new();
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
    Fixture {
        w,
        app,
        upstream,
        url: format!("https://localhost:{}/mcp", addr.port()),
        worker: Arc::new(DiscoveryWorker::new(sources.clone())),
        sources,
        _ca: ca,
    }
}

/// The REST tests' fixture: an upstream requiring `Bearer s3cret`.
async fn rest(cx: &Ctx) -> Fixture {
    fixture(
        cx,
        McpServer::requiring(
            vec![
                tool("lookup", "finds an asset", true),
                tool("wipe", "deletes an asset", false),
                tool("idle", "soon gone", true),
            ],
            "authorization",
            &format!("Bearer {SECRET}"),
        ),
    )
    .await
}

/// How a REST request authenticates.
#[derive(Clone, Copy)]
enum As<'a> {
    Key(&'a str),
    Cookie(&'a str),
}

async fn call(app: &Router, who: As<'_>, method: &str, uri: &str, body: Option<Value>) -> Reply {
    let mut b = Request::builder().method(method).uri(uri);
    b = match who {
        As::Key(k) => b.header("x-api-key", k),
        As::Cookie(c) => b
            .header(header::COOKIE, c)
            .header(header::ORIGIN, "http://127.0.0.1:3000"),
    };
    let body = match body {
        Some(v) => {
            b = b.header(header::CONTENT_TYPE, "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let r = send(app, b.body(body).unwrap()).await;
    assert!(
        !r.body.to_string().contains(SECRET),
        "a credential came back: {} {uri}: {}",
        method,
        r.body
    );
    r
}

async fn login(app: &Router, email: &str) -> String {
    browser::sign_in(app, email).await.cookie
}

fn new_source(url: &str, slug: &str) -> Value {
    json!({
        "displayName": format!("Docs {slug}"), "slug": slug, "kind": "mcp", "url": url,
        "credential": {"method": "bearer", "token": SECRET},
    })
}

/// Runs every queued discovery now (what the server's worker does on its tick).
async fn run_queue(r: &Fixture) -> usize {
    r.worker.tick().await.unwrap()
}

fn tool_of<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {tools}"))
}

async fn rest_manages_a_source_from_creation_to_deletion(cx: Ctx) {
    let r = rest(&cx).await;
    let admin = login(&r.app, "admin@p.test").await;
    let me = As::Cookie(&admin);
    let base = format!("/api/v1/orgs/{}/tool-sources", r.w.org_a);

    // Created: queued for discovery, no tools yet, no warning (one organization).
    let c = call(&r.app, me, "POST", &base, Some(new_source(&r.url, "docs"))).await;
    assert_eq!(c.status, StatusCode::CREATED, "{}", c.body);
    assert!(c.body["warning"].is_null());
    assert!(!c.body["discoveryQueuedAt"].is_null(), "{}", c.body);
    assert_eq!(c.body["authMethod"], "bearer");
    let id = c.body["id"].as_str().unwrap().to_owned();
    let one = format!("{base}/{id}");
    let dup = call(&r.app, me, "POST", &base, Some(new_source(&r.url, "docs"))).await;
    assert_eq!(
        dup.status,
        StatusCode::CONFLICT,
        "slug unique: {}",
        dup.body
    );
    for bad in [
        json!({"displayName": "X", "slug": "Bad_Slug", "kind": "mcp", "url": r.url}),
        json!({"displayName": "X", "kind": "mcp", "url": "http://example.com/mcp"}),
        json!({"displayName": "X", "kind": "openapi", "url": r.url}),
    ] {
        let b = call(&r.app, me, "POST", &base, Some(bad.clone())).await;
        assert_eq!(b.status, StatusCode::BAD_REQUEST, "{bad}: {}", b.body);
    }

    // Discovery by the worker: tools disabled with their proposed tiers.
    assert_eq!(run_queue(&r).await, 1);
    assert_eq!(run_queue(&r).await, 0, "ran once, queue empty");
    let d = call(&r.app, me, "GET", &one, None).await;
    assert_eq!(d.status, StatusCode::OK);
    assert_eq!(d.body["state"], "active", "{}", d.body);
    assert!(d.body["discoveryQueuedAt"].is_null());
    let tools = call(&r.app, me, "GET", &format!("{one}/tools"), None)
        .await
        .body;
    assert_eq!(tools.as_array().unwrap().len(), 3);
    for t in tools.as_array().unwrap() {
        assert_eq!(t["enabled"], false, "{t}");
    }
    assert_eq!(tool_of(&tools, "lookup")["proposedTier"], 1);
    assert_eq!(tool_of(&tools, "wipe")["proposedTier"], 3);
    assert_eq!(tool_of(&tools, "lookup")["address"], "docs__lookup");

    // Enable all reads; set a tier; the test call (Tier 1 only).
    let e = call(&r.app, me, "POST", &format!("{one}/enable-reads"), None).await;
    assert_eq!(e.body["changed"], 2, "{}", e.body);
    let t = call(
        &r.app,
        me,
        "PATCH",
        &format!("{one}/tools/wipe"),
        Some(json!({"tier": 2})),
    )
    .await;
    assert_eq!(
        (t.body["tier"].clone(), t.body["tierSet"].clone()),
        (json!(2), json!(true))
    );
    let bad_tier = call(
        &r.app,
        me,
        "PATCH",
        &format!("{one}/tools/wipe"),
        Some(json!({"tier": 4})),
    )
    .await;
    assert_eq!(bad_tier.status, StatusCode::BAD_REQUEST);
    let test = call(
        &r.app,
        me,
        "POST",
        &format!("{one}/tools/lookup/test"),
        Some(json!({"arguments": {"q": "printer"}})),
    )
    .await;
    assert_eq!(test.status, StatusCode::OK, "{}", test.body);
    assert_eq!(
        test.body["result"]["structuredContent"],
        json!({"tool": "lookup", "arguments": {"q": "printer"}})
    );
    assert!(test.body["durationMs"].is_u64());
    let test = call(
        &r.app,
        me,
        "POST",
        &format!("{one}/tools/wipe/test"),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        test.status,
        StatusCode::CONFLICT,
        "Tier 2 is not test-called: {}",
        test.body
    );
    let test = call(
        &r.app,
        me,
        "POST",
        &format!("{one}/tools/nope/test"),
        Some(json!({})),
    )
    .await;
    assert_eq!(test.status, StatusCode::NOT_FOUND);

    // Upstream changes: a description (review needed), a tool gone, a name Breeze cannot route.
    {
        let mut tools = r.upstream.tools.lock().unwrap();
        *tools = vec![
            tool("lookup", "finds an asset, and more", true),
            tool("wipe", "deletes an asset", false),
            tool("bad name", "unroutable", true),
        ];
    }
    let q = call(&r.app, me, "POST", &format!("{one}/discover"), None).await;
    assert_eq!(q.status, StatusCode::ACCEPTED, "{}", q.body);
    assert!(!q.body["discoveryQueuedAt"].is_null());
    assert_eq!(run_queue(&r).await, 1);
    let tools = call(&r.app, me, "GET", &format!("{one}/tools"), None)
        .await
        .body;
    let lookup = tool_of(&tools, "lookup");
    assert_eq!(
        (
            lookup["reviewNeeded"].clone(),
            lookup["enabled"].clone(),
            lookup["tier"].clone()
        ),
        (json!(true), json!(true), json!(1)),
        "keeps working at its tier: {lookup}"
    );
    assert_eq!(tool_of(&tools, "wipe")["reviewNeeded"], false);
    assert_eq!(
        tool_of(&tools, "wipe")["tier"],
        2,
        "the person's tier sticks"
    );
    let idle = tool_of(&tools, "idle");
    assert_eq!(
        (idle["removed"].clone(), idle["enabled"].clone()),
        (json!(true), json!(false))
    );
    assert!(tool_of(&tools, "bad name")["unusable"].is_string());
    for name in ["idle", "bad%20name"] {
        let en = call(
            &r.app,
            me,
            "PATCH",
            &format!("{one}/tools/{name}"),
            Some(json!({"enabled": true})),
        )
        .await;
        assert_eq!(en.status, StatusCode::BAD_REQUEST, "{name}: {}", en.body);
    }
    // Toggling keeps the flag; setting the tier clears it.
    for on in [false, true] {
        call(
            &r.app,
            me,
            "PATCH",
            &format!("{one}/tools/lookup"),
            Some(json!({"enabled": on})),
        )
        .await;
    }
    let tools = call(&r.app, me, "GET", &format!("{one}/tools"), None)
        .await
        .body;
    assert_eq!(tool_of(&tools, "lookup")["reviewNeeded"], true);
    let set = call(
        &r.app,
        me,
        "PATCH",
        &format!("{one}/tools/lookup"),
        Some(json!({"tier": 1})),
    )
    .await;
    assert_eq!(set.body["reviewNeeded"], false, "{}", set.body);

    // Edits: a blank credential is kept while the method is unchanged…
    let ed = call(
        &r.app,
        me,
        "PATCH",
        &one,
        Some(json!({"displayName": "Docs two", "authMethod": "bearer"})),
    )
    .await;
    assert_eq!(ed.status, StatusCode::OK, "{}", ed.body);
    assert_eq!(ed.body["displayName"], "Docs two");
    call(&r.app, me, "POST", &format!("{one}/discover"), None).await;
    run_queue(&r).await;
    assert_eq!(
        call(&r.app, me, "GET", &one, None).await.body["state"],
        "active"
    );
    // …switching methods needs the new one…
    for body in [
        json!({"authMethod": "basic"}),
        json!({"authMethod": "none"}),
    ] {
        let sw = call(&r.app, me, "PATCH", &one, Some(body.clone())).await;
        assert_eq!(sw.status, StatusCode::BAD_REQUEST, "{body}: {}", sw.body);
        assert!(
            err_msg(&sw).contains("needs the new credential"),
            "{}",
            sw.body
        );
    }
    let mismatch = call(
        &r.app,
        me,
        "PATCH",
        &one,
        Some(json!({"authMethod": "basic", "credential": {"method": "bearer", "token": "x"}})),
    )
    .await;
    assert_eq!(mismatch.status, StatusCode::BAD_REQUEST);
    // …and a new credential replaces it (a wrong one puts the source in error).
    let wrong = call(
        &r.app,
        me,
        "PATCH",
        &one,
        Some(json!({"credential": {"method": "bearer", "token": "wrong"}})),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::OK, "{}", wrong.body);
    call(&r.app, me, "POST", &format!("{one}/discover"), None).await;
    run_queue(&r).await;
    let d = call(&r.app, me, "GET", &one, None).await.body;
    assert_eq!(d["state"], "error", "{d}");
    assert!(d["error"].as_str().unwrap().contains("401"), "{d}");
    assert_eq!(
        tool_of(&d["tools"], "lookup")["enabled"],
        true,
        "tools stay as they were"
    );

    // Disable and enable the source; disable all tools; delete.
    let off = call(&r.app, me, "PATCH", &one, Some(json!({"enabled": false}))).await;
    assert_eq!(off.body["state"], "disabled");
    let on = call(&r.app, me, "PATCH", &one, Some(json!({"enabled": true}))).await;
    assert_eq!(on.body["state"], "active");
    // Enabled: `lookup` only (`idle` went when it was removed upstream).
    let all = call(&r.app, me, "POST", &format!("{one}/disable-all"), None).await;
    assert_eq!(all.body["changed"], 1, "{}", all.body);
    let list = call(&r.app, me, "GET", &base, None).await;
    assert_eq!(list.body.as_array().unwrap().len(), 1);
    let del = call(&r.app, me, "DELETE", &one, None).await;
    assert_eq!(del.status, StatusCode::NO_CONTENT, "{}", del.body);
    assert_eq!(
        call(&r.app, me, "GET", &one, None).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(call(&r.app, me, "GET", &base, None).await.body, json!([]));
}

async fn rest_keeps_sources_to_their_organization_and_grants(cx: Ctx) {
    let r = rest(&cx).await;
    let admin = login(&r.app, "admin@p.test").await;
    let viewer = login(&r.app, "viewer@p.test").await;
    let a = format!("/api/v1/orgs/{}/tool-sources", r.w.org_a);
    let b = format!("/api/v1/orgs/{}/tool-sources", r.w.org_b);
    let c = call(
        &r.app,
        As::Cookie(&admin),
        "POST",
        &a,
        Some(new_source(&r.url, "docs")),
    )
    .await;
    let id = c.body["id"].as_str().unwrap().to_owned();
    run_queue(&r).await;

    // Another organization: every route answers 404 for A's source, even to a person who
    // holds a role in both, and B's list does not show it.
    let routes = [
        ("GET", String::new(), None),
        ("PATCH", String::new(), Some(json!({"displayName": "mine"}))),
        ("DELETE", String::new(), None),
        ("POST", "/discover".to_owned(), None),
        ("GET", "/tools".to_owned(), None),
        ("POST", "/enable-reads".to_owned(), None),
        ("POST", "/disable-all".to_owned(), None),
        (
            "PATCH",
            "/tools/lookup".to_owned(),
            Some(json!({"enabled": true})),
        ),
        (
            "POST",
            "/tools/lookup/test".to_owned(),
            Some(json!({"arguments": {}})),
        ),
    ];
    for (method, tail, body) in &routes {
        let uri = format!("{b}/{id}{tail}");
        let x = call(&r.app, As::Cookie(&admin), method, &uri, body.clone()).await;
        assert_eq!(
            x.status,
            StatusCode::NOT_FOUND,
            "{method} {uri}: {}",
            x.body
        );
        let x = call(
            &r.app,
            As::Key(&r.w.other_org_key),
            method,
            &uri,
            body.clone(),
        )
        .await;
        assert!(
            matches!(x.status, StatusCode::NOT_FOUND | StatusCode::FORBIDDEN),
            "{method} {uri}: {}",
            x.body
        );
        let x = call(
            &r.app,
            As::Key(&r.w.other_org_key),
            method,
            &format!("{a}/{id}{tail}"),
            body.clone(),
        )
        .await;
        assert_eq!(
            x.status,
            StatusCode::NOT_FOUND,
            "B's key on A's path: {}",
            x.body
        );
    }
    assert_eq!(
        call(&r.app, As::Cookie(&admin), "GET", &b, None).await.body,
        json!([])
    );
    assert!(
        r.upstream.calls.lock().unwrap().is_empty(),
        "no test call reached it"
    );
    let still = call(
        &r.app,
        As::Cookie(&admin),
        "GET",
        &format!("{a}/{id}"),
        None,
    )
    .await;
    assert_eq!(still.body["displayName"], "Docs docs");

    // Read and write are separate grants: Read Only reads, changes nothing.
    assert_eq!(
        call(&r.app, As::Cookie(&viewer), "GET", &a, None)
            .await
            .status,
        StatusCode::OK
    );
    for (method, tail, body) in &routes[1..] {
        if *method == "GET" {
            continue;
        }
        let x = call(
            &r.app,
            As::Cookie(&viewer),
            method,
            &format!("{a}/{id}{tail}"),
            body.clone(),
        )
        .await;
        assert_eq!(
            x.status,
            StatusCode::FORBIDDEN,
            "viewer {method} {tail}: {}",
            x.body
        );
    }
    let x = call(
        &r.app,
        As::Cookie(&viewer),
        "POST",
        &a,
        Some(new_source(&r.url, "mine")),
    )
    .await;
    assert_eq!(x.status, StatusCode::FORBIDDEN);
    // Keys: ai:read lists, cannot create; ai:write creates for its organization.
    assert_eq!(
        call(&r.app, As::Key(&r.w.read), "GET", &a, None)
            .await
            .status,
        StatusCode::OK
    );
    let x = call(
        &r.app,
        As::Key(&r.w.read),
        "POST",
        &a,
        Some(new_source(&r.url, "k1")),
    )
    .await;
    assert_eq!(x.status, StatusCode::FORBIDDEN);
    let x = call(
        &r.app,
        As::Key(&r.w.write),
        "POST",
        &a,
        Some(new_source(&r.url, "k2")),
    )
    .await;
    assert_eq!(x.status, StatusCode::CREATED, "{}", x.body);

    // Partner-wide: refused to a key, and to a person without a partner-wide role holding
    // partner_policies.manage (an Administrator in every organization is not enough).
    let mut wide = new_source(&r.url, "everyone");
    wide["availability"] = json!("all_organizations");
    let x = call(&r.app, As::Key(&r.w.write), "POST", &a, Some(wide.clone())).await;
    assert_eq!(x.status, StatusCode::FORBIDDEN, "{}", x.body);
    let x = call(&r.app, As::Cookie(&admin), "POST", &a, Some(wide.clone())).await;
    assert_eq!(x.status, StatusCode::FORBIDDEN, "{}", x.body);
    assert!(err_msg(&x).contains("partner_policies.manage"));
    let partner =
        r.w.store
            .org(r.w.org_a)
            .tenancy()
            .organization()
            .await
            .unwrap()
            .partner_id;
    let role = r.w.store.find_role(partner, "Administrator").await.unwrap();
    r.w.store
        .assign_partner_role(r.w.admin, role.id, audit("r"))
        .await
        .unwrap();
    let admin = login(&r.app, "admin@p.test").await;
    let x = call(&r.app, As::Cookie(&admin), "POST", &a, Some(wide)).await;
    assert_eq!(x.status, StatusCode::CREATED, "{}", x.body);
    assert!(
        x.body["warning"]
            .as_str()
            .unwrap()
            .contains("every organization")
    );
    assert_eq!(x.body["owner"]["level"], "partner");
    let wide_id = x.body["id"].as_str().unwrap().to_owned();
    // Every organization sees it; only the partner-wide manager changes it.
    let listed = call(&r.app, As::Cookie(&admin), "GET", &b, None).await.body;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == wide_id.as_str()),
        "{listed}"
    );
    let x = call(
        &r.app,
        As::Key(&r.w.write),
        "PATCH",
        &format!("{a}/{wide_id}"),
        Some(json!({"displayName": "x"})),
    )
    .await;
    assert_eq!(x.status, StatusCode::FORBIDDEN, "{}", x.body);
    let x = call(
        &r.app,
        As::Key(&r.w.write),
        "POST",
        &format!("{a}/{wide_id}/discover"),
        None,
    )
    .await;
    assert_eq!(x.status, StatusCode::FORBIDDEN, "{}", x.body);
    let x = call(
        &r.app,
        As::Cookie(&admin),
        "POST",
        &format!("{b}/{wide_id}/discover"),
        None,
    )
    .await;
    assert_eq!(x.status, StatusCode::ACCEPTED, "{}", x.body);
    assert_eq!(
        run_queue(&r).await,
        2,
        "the key's source and the partner-wide one"
    );
    let tools = call(
        &r.app,
        As::Key(&r.w.read),
        "GET",
        &format!("{a}/{wide_id}/tools"),
        None,
    )
    .await;
    assert_eq!(tools.body.as_array().unwrap().len(), 3, "{}", tools.body);
}

breeze_store::on_both_backends!(
    offered_external_tools_are_listed_and_called_over_mcp,
    rest_manages_a_source_from_creation_to_deletion,
    rest_keeps_sources_to_their_organization_and_grants,
    pages_add_a_source_and_manage_its_tools,
    pages_keep_a_source_to_its_organization,
);

// ---------------------------------------------------------------------------------------------
// Pages: AI → Tool sources.

/// A page as the signed-in browser gets it; no page ever shows the credential.
async fn page(app: &Router, uri: &str, cookie: &str) -> Reply {
    let r = browser::get(app, uri, cookie).await;
    assert!(
        !r.body.to_string().contains(SECRET),
        "{uri} shows the credential"
    );
    r
}

/// A form posted from our origin; no answer ever shows the credential.
async fn post(app: &Router, uri: &str, cookie: &str, form: &[(&str, &str)]) -> Reply {
    let r = browser::post_form(app, uri, cookie, form).await;
    assert!(
        !r.body.to_string().contains(SECRET),
        "{uri} shows the credential"
    );
    r
}

/// A signed-in browser: its session cookie and CSRF token.
async fn signed_in(app: &Router, email: &str) -> (String, String) {
    let b = browser::sign_in(app, email).await;
    (b.cookie, b.csrf)
}

async fn pages_add_a_source_and_manage_its_tools(cx: Ctx) {
    let r = rest(&cx).await;
    let (cookie, csrf) = signed_in(&r.app, "admin@p.test").await;
    let list = page(&r.app, "/o/org-a/ai/tool-sources", &cookie).await;
    assert!(html(&list).contains("No tool sources yet"));
    assert!(
        html(&list).contains("Tool sources</a>"),
        "in the navigation"
    );
    let new = page(&r.app, "/o/org-a/ai/tool-sources/new", &cookie).await;
    assert_eq!(new.status, StatusCode::OK);
    assert!(
        html(&new).contains("/assets/sources."),
        "the slug preview script"
    );
    assert!(!html(&new).contains("<script>"), "no inline script");

    // A bearer source with its secret left blank is refused on the form.
    let form = |token: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("display_name", "Docs Hub!".to_owned()),
            ("slug", String::new()),
            ("kind", "mcp".to_owned()),
            ("url", r.url.clone()),
            ("auth_method", "bearer".to_owned()),
            ("token", token.to_owned()),
            ("availability", "organization".to_owned()),
        ]
    };
    let as_refs = |v: &Vec<(&'static str, String)>| -> Vec<(&'static str, String)> { v.clone() };
    let blank = as_refs(&form(""));
    let blank: Vec<(&str, &str)> = blank.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let x = post(&r.app, "/o/org-a/ai/tool-sources", &cookie, &blank).await;
    assert_eq!(x.status, StatusCode::BAD_REQUEST);
    assert!(html(&x).contains("enter the credential"), "{}", x.body);
    let good = form(SECRET);
    let good: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let x = post(&r.app, "/o/org-a/ai/tool-sources", &cookie, &good).await;
    assert_eq!(x.status, StatusCode::SEE_OTHER, "{}", x.body);
    let at = location(&x);
    let detail = at.split('?').next().unwrap().to_owned();
    let s = page(&r.app, at, &cookie).await;
    assert!(
        html(&s).contains("<code>docshub</code>"),
        "slug derived from the name"
    );
    assert!(html(&s).contains("discovery queued"));
    run_queue(&r).await;

    // Tools arrive disabled with their proposed tiers.
    let s = page(&r.app, &detail, &cookie).await;
    let body = html(&s);
    assert!(
        body.contains("docshub__lookup") && body.contains("docshub__wipe"),
        "{body}"
    );
    assert_eq!(body.matches(">Enable</button>").count(), 3, "all disabled");
    // Enable all reads, set a tier, test-call a read.
    let x = post(
        &r.app,
        &format!("{detail}/enable-reads"),
        &cookie,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(x.status, StatusCode::SEE_OTHER);
    let x = post(
        &r.app,
        &format!("{detail}/tools/wipe"),
        &cookie,
        &[("csrf", &csrf), ("tier", "2")],
    )
    .await;
    assert_eq!(x.status, StatusCode::SEE_OTHER, "{}", x.body);
    let s = page(&r.app, &detail, &cookie).await;
    assert_eq!(
        html(&s).matches(">Disable</button>").count(),
        2,
        "{}",
        s.body
    );
    assert!(html(&s).contains("set by a person"));
    let x = post(
        &r.app,
        &format!("{detail}/tools/lookup/test"),
        &cookie,
        &[("csrf", &csrf), ("arguments", "{\"q\": \"printer\"}")],
    )
    .await;
    assert_eq!(x.status, StatusCode::OK);
    assert!(
        html(&x).contains("id=\"test-raw\"") && html(&x).contains("printer"),
        "{}",
        x.body
    );
    assert!(html(&x).contains("id=\"test-duration\""));
    let x = post(
        &r.app,
        &format!("{detail}/tools/lookup/test"),
        &cookie,
        &[("csrf", &csrf), ("arguments", "[1]")],
    )
    .await;
    assert!(html(&x).contains("must be a JSON object"));

    // The upstream changes; re-discover; review needed, removed upstream.
    *r.upstream.tools.lock().unwrap() = vec![
        tool("lookup", "finds an asset, and more", true),
        tool("wipe", "deletes an asset", false),
    ];
    let x = post(
        &r.app,
        &format!("{detail}/discover"),
        &cookie,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(x.status, StatusCode::SEE_OTHER);
    run_queue(&r).await;
    let s = page(&r.app, &detail, &cookie).await;
    assert!(html(&s).contains("review needed"), "{}", s.body);
    assert!(html(&s).contains("removed upstream"));

    // CSRF: a post without the token (or with another) changes nothing.
    for form in [vec![], vec![("csrf", "forged")]] {
        let x = post(&r.app, &format!("{detail}/disable-all"), &cookie, &form).await;
        assert_eq!(x.status, StatusCode::FORBIDDEN, "{}", x.body);
    }
    let s = page(&r.app, &detail, &cookie).await;
    assert_eq!(
        html(&s).matches(">Disable</button>").count(),
        1,
        "`lookup` still enabled (`idle` went with its removal upstream)"
    );

    // A blank credential is kept while the method stays; switching needs the new one.
    let x = post(
        &r.app,
        &format!("{detail}/edit"),
        &cookie,
        &[
            ("csrf", &csrf),
            ("display_name", "Docs Hub 2"),
            ("auth_method", "bearer"),
            ("token", ""),
        ],
    )
    .await;
    assert_eq!(x.status, StatusCode::SEE_OTHER, "{}", x.body);
    let x = post(
        &r.app,
        &format!("{detail}/edit"),
        &cookie,
        &[
            ("csrf", &csrf),
            ("auth_method", "basic"),
            ("username", "u"),
            ("password", ""),
        ],
    )
    .await;
    assert_eq!(x.status, StatusCode::BAD_REQUEST);
    assert!(html(&x).contains("needs the new credential"), "{}", x.body);

    // Disable all; delete.
    let x = post(
        &r.app,
        &format!("{detail}/disable-all"),
        &cookie,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(x.status, StatusCode::SEE_OTHER);
    let x = post(
        &r.app,
        &format!("{detail}/delete"),
        &cookie,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(x.status, StatusCode::SEE_OTHER);
    assert_eq!(
        page(&r.app, &detail, &cookie).await.status,
        StatusCode::NOT_FOUND
    );
}

async fn pages_keep_a_source_to_its_organization(cx: Ctx) {
    let r = rest(&cx).await;
    let (cookie, csrf) = signed_in(&r.app, "admin@p.test").await;
    let c = call(
        &r.app,
        As::Cookie(&cookie),
        "POST",
        &format!("/api/v1/orgs/{}/tool-sources", r.w.org_a),
        Some(new_source(&r.url, "docs")),
    )
    .await;
    let id = c.body["id"].as_str().unwrap().to_owned();
    run_queue(&r).await;
    // Organization B's pages and forms with A's source: 404, and nothing changes.
    let other = format!("/o/org-b/ai/tool-sources/{id}");
    assert_eq!(
        page(&r.app, &other, &cookie).await.status,
        StatusCode::NOT_FOUND
    );
    for (tail, form) in [
        (
            "/edit",
            vec![("display_name", "mine"), ("state", "disabled")],
        ),
        ("/discover", vec![]),
        ("/delete", vec![]),
        ("/enable-reads", vec![]),
        ("/disable-all", vec![]),
        ("/tools/lookup", vec![("enabled", "true")]),
        ("/tools/lookup/test", vec![("arguments", "{}")]),
    ] {
        let mut all = vec![("csrf", csrf.as_str())];
        all.extend(form);
        let x = post(&r.app, &format!("{other}{tail}"), &cookie, &all).await;
        assert_eq!(x.status, StatusCode::NOT_FOUND, "{tail}: {}", x.body);
    }
    let list = page(&r.app, "/o/org-b/ai/tool-sources", &cookie).await;
    assert!(!html(&list).contains(&id));
    assert!(r.upstream.calls.lock().unwrap().is_empty());
    let mine = page(&r.app, &format!("/o/org-a/ai/tool-sources/{id}"), &cookie).await;
    assert!(html(&mine).contains("Docs docs") && html(&mine).contains(">active<"));
    assert_eq!(html(&mine).matches(">Enable</button>").count(), 3);

    // Read Only sees the page, and its forms are refused.
    let (viewer, vcsrf) = signed_in(&r.app, "viewer@p.test").await;
    let mine = format!("/o/org-a/ai/tool-sources/{id}");
    assert_eq!(page(&r.app, &mine, &viewer).await.status, StatusCode::OK);
    let x = post(
        &r.app,
        &format!("{mine}/enable-reads"),
        &viewer,
        &[("csrf", &vcsrf)],
    )
    .await;
    assert_eq!(x.status, StatusCode::FORBIDDEN);
    assert_eq!(
        page(&r.app, "/o/org-a/ai/tool-sources/new", &viewer)
            .await
            .status,
        StatusCode::FORBIDDEN
    );
}
