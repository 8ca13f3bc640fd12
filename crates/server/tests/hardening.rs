//! Attacks on the edge, each written as the test that it fails: resources read past RBAC,
//! NUL bytes the database refuses, a locked or read-only database, oversized bodies, missing
//! security headers and cross-site cookie requests.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{Request, StatusCode},
};
use breeze_auth::{AuthService, AuthSettings, CreateApiKey, password};
use breeze_core::{Scope, ScopeSet, UserId};
use breeze_limits::MemoryLimiter;
use breeze_server::{AppState, Breeze, ServerConfig};
use breeze_store::{
    Backend, NewUser, Store, StoreOptions,
    testing::{Ctx, store_url},
};
use common::{PASSWORD, World, audit, err_msg, send, world};
use serde_json::{Value, json};

fn mcp(key: &str, body: &Value) -> Request<Body> {
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", key)
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn rpc(id: i64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// A new user of org A holding the Read Only role there, and an `ai:read` key of theirs.
async fn reader_key(w: &World, cx: &Ctx, email: &str) -> (UserId, String) {
    let s = &w.store;
    let org = s.org(w.org_a).tenancy().organization().await.unwrap();
    let user = s
        .create_user(
            NewUser {
                partner_id: org.partner_id,
                org_id: Some(w.org_a),
                email: email.into(),
                name: "R".into(),
                password_hash: password::hash(common::PASSWORD).unwrap(),
            },
            audit("u"),
        )
        .await
        .unwrap();
    let role = s.find_role(org.partner_id, "Read Only").await.unwrap();
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
        scopes: ScopeSet::new([Scope::AiRead]),
        expires_at: None,
    };
    let key = auth
        .create_api_key(req, audit("k"))
        .await
        .unwrap()
        .0
        .expose()
        .to_owned();
    (user.id, key)
}

/// The URIs of organization data: every one must pass RBAC.
fn data_uris(w: &World) -> Vec<String> {
    vec![
        "breeze://devices".into(),
        format!("breeze://devices/{}", w.a_device),
        "breeze://scripts".into(),
        "breeze://alerts".into(),
        "breeze://automations".into(),
    ]
}

/// A uuid as both backends' SQL literal of its stored form.
fn id_literal(w: &World, id: uuid::Uuid) -> String {
    match w.store.backend() {
        breeze_store::Backend::Sqlite => format!("X'{}'", id.simple()),
        breeze_store::Backend::Postgres => format!("'{id}'"),
    }
}

async fn read_resource(w: &World, key: &str, uri: &str) -> common::Reply {
    send(
        &w.app,
        mcp(key, &rpc(1, "resources/read", json!({ "uri": uri }))),
    )
    .await
}

async fn resources_refuse_a_disabled_user_and_a_lost_role(cx: Ctx) {
    let w = world(&cx).await;
    let (disabled, disabled_key) = reader_key(&w, &cx, "gone@p.test").await;
    let (demoted, demoted_key) = reader_key(&w, &cx, "demoted@p.test").await;
    let (_, reader) = reader_key(&w, &cx, "reader@p.test").await;
    for uri in data_uris(&w) {
        let r = read_resource(&w, &reader, &uri).await;
        assert!(
            r.body["result"]["contents"][0]["text"].is_string(),
            "{uri}: {}",
            r.body
        );
    }

    w.store
        .raw_execute(&format!(
            "UPDATE users SET disabled = TRUE WHERE id = {}",
            id_literal(&w, disabled.0)
        ))
        .await
        .unwrap();
    w.store
        .raw_execute(&format!(
            "DELETE FROM user_org_roles WHERE user_id = {}",
            id_literal(&w, demoted.0)
        ))
        .await
        .unwrap();
    // The keys above were used before: let their cached principals expire.
    cx.clock.advance(chrono::Duration::seconds(5));

    for key in [&disabled_key, &demoted_key] {
        for uri in data_uris(&w)
            .iter()
            .map(String::as_str)
            .chain(["breeze://server"])
        {
            let r = read_resource(&w, key, uri).await;
            assert_eq!(r.body["result"], Value::Null, "{uri} was read: {}", r.body);
            assert_eq!(
                err_msg(&r),
                "Insufficient permissions: the API key's user has no role in this organization",
                "{uri}"
            );
        }
        // Tools refuse them the same way.
        let r = send(
            &w.app,
            mcp(
                key,
                &rpc(
                    2,
                    "tools/call",
                    json!({ "name": "query_devices", "arguments": {} }),
                ),
            ),
        )
        .await;
        assert_eq!(
            err_msg(&r),
            "Insufficient permissions: the API key's user has no role in this organization"
        );
    }
}

async fn resources_need_their_permission(cx: Ctx) {
    let w = world(&cx).await;
    let (_, key) = reader_key(&w, &cx, "narrow@p.test").await;
    // The Read Only role of this partner keeps only the audit log.
    w.store
        .raw_execute("UPDATE roles SET permissions = '[\"audit.read\"]' WHERE name = 'Read Only'")
        .await
        .unwrap();
    cx.clock.advance(chrono::Duration::seconds(5));
    for (uri, needed) in [
        ("breeze://devices".to_owned(), "devices.read"),
        (format!("breeze://devices/{}", w.a_device), "devices.read"),
        ("breeze://scripts".to_owned(), "scripts.read"),
        ("breeze://alerts".to_owned(), "alerts.read"),
    ] {
        let r = read_resource(&w, &key, &uri).await;
        assert_eq!(
            err_msg(&r),
            format!("Insufficient permissions: requires {needed}"),
            "{uri}"
        );
    }
    let r = read_resource(&w, &key, "breeze://server").await;
    assert!(
        r.body["result"]["contents"][0]["text"].is_string(),
        "{}",
        r.body
    );
}

/// A hostile client's NUL in a tool name or URI is audited (as U+FFFD): PostgreSQL refused
/// the record, so such probes left no trace.
async fn requests_with_nul_are_audited(cx: Ctx) {
    let w = world(&cx).await;
    let calls = [
        rpc(
            1,
            "tools/call",
            json!({ "name": "query\u{0}devices", "arguments": {} }),
        ),
        rpc(
            2,
            "resources/read",
            json!({ "uri": "breeze://devices\u{0}" }),
        ),
    ];
    for call in &calls {
        let r = send(&w.app, mcp(&w.read, call)).await;
        assert!(r.body["error"].is_object(), "{}", r.body);
    }
    w.store.flush_audit().await;
    let page = w
        .store
        .org(w.org_a)
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some("mcp.".into()),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    let targets: Vec<Option<&str>> = page
        .records
        .iter()
        .map(|r| r.event.resource_id.as_deref())
        .collect();
    for target in ["query\u{FFFD}devices", "breeze://devices\u{FFFD}"] {
        assert!(
            targets.contains(&Some(target)),
            "{target} not audited: {targets:?}"
        );
    }
}

/// Options to open `cx`'s database a second time, as another process would.
async fn same_database(cx: &Ctx) -> StoreOptions {
    match &cx.dir {
        Some(dir) => StoreOptions::new(format!("sqlite://{}", dir.join("breeze.db").display())),
        None => {
            // The harness runs each case in a schema of its own; ask the database which.
            let rows = cx
                .store
                .raw_dump("(SELECT current_schema() AS s)")
                .await
                .unwrap();
            let row: Value = serde_json::from_str(&rows[0]).unwrap();
            StoreOptions {
                pg_schema: Some(row["s"].as_str().unwrap().to_owned()),
                max_connections: 5,
                ..StoreOptions::new(store_url())
            }
        }
    }
}

fn login_request(email: &str) -> Request<Body> {
    Request::post("/api/v1/auth/login")
        .header("content-type", "application/json")
        .body(Body::from(
            json!({ "email": email, "password": PASSWORD }).to_string(),
        ))
        .unwrap()
}

fn readyz() -> Request<Body> {
    Request::get("/readyz").body(Body::empty()).unwrap()
}

/// Bounds a request that would otherwise wait on a lock for as long as it is held (the bug),
/// so that the test fails instead of hanging.
async fn bounded(app: &axum::Router, req: Request<Body>) -> common::Reply {
    tokio::time::timeout(Duration::from_secs(60), send(app, req))
        .await
        .expect("the request waited on the lock past any timeout")
}

/// Another connection holds the write lock (SQLite) or a table lock (PostgreSQL): sign-in and
/// writes answer 503 retryable (REST) and a retryable tool error (MCP) once the lock timeout
/// passes, rather than an internal error; readiness says the database cannot write.
async fn a_locked_database_answers_unavailable_and_retryable(cx: Ctx) {
    let options = StoreOptions {
        lock_timeout: Duration::from_millis(300),
        ..same_database(&cx).await
    };
    let store = Store::connect(&options, Arc::new(cx.clock.clone()))
        .await
        .unwrap();
    let w = world(&Ctx {
        store,
        clock: cx.clock.clone(),
        dir: cx.dir.clone(),
    })
    .await;
    // A key's first use stamps it; do that before the lock.
    let r = send(&w.app, mcp(&w.write, &rpc(1, "tools/list", json!({})))).await;
    assert!(r.body["result"]["tools"].is_array(), "{}", r.body);

    let held = match cx.store.backend() {
        Backend::Sqlite => cx.store.raw_hold(&["BEGIN IMMEDIATE"]).await,
        Backend::Postgres => {
            cx.store
                .raw_hold(&[
                    "BEGIN",
                    "LOCK TABLE device_context, user_sessions, scripts IN ACCESS EXCLUSIVE MODE",
                ])
                .await
        }
    }
    .unwrap();

    let r = bounded(&w.app, login_request("admin@p.test")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "unavailable");
    assert_eq!(r.body["error"]["retryable"], true);
    assert_eq!(r.headers["retry-after"], "1");

    let set = rpc(
        2,
        "tools/call",
        json!({ "name": "set_device_context", "arguments": { "deviceId": w.a_device, "contextType": "quirk", "summary": "fan noise" } }),
    );
    let r = bounded(&w.app, mcp(&w.write, &set)).await;
    assert_eq!(r.body["result"]["isError"], true, "{}", r.body);
    let error = &r.body["result"]["structuredContent"]["error"];
    assert_eq!(error["retryable"], true, "{}", r.body);
    assert_eq!(error["code"], "UPSTREAM_ERROR", "{}", r.body);

    match cx.store.backend() {
        // SQLite readers never wait for the writer; a database that cannot write is not ready.
        Backend::Sqlite => {
            let r = bounded(&w.app, readyz()).await;
            assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
        }
        // A PostgreSQL table lock stops readers too: the resource says so, retryably.
        Backend::Postgres => {
            let read = rpc(3, "resources/read", json!({ "uri": "breeze://scripts" }));
            let r = bounded(&w.app, mcp(&w.write, &read)).await;
            assert_eq!(r.body["error"]["code"], -32000, "{}", r.body);
            assert_eq!(
                err_msg(&r),
                "Service temporarily unavailable; retry shortly"
            );
        }
    }

    held.release().await;
    let r = send(&w.app, login_request("admin@p.test")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = send(&w.app, mcp(&w.write, &set)).await;
    assert_eq!(r.body["result"]["isError"], Value::Null, "{}", r.body);
    let r = send(&w.app, readyz()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

/// A shutting-down instance is not ready (its load balancer takes it out) while it still serves.
async fn readyz_reports_a_shutdown(cx: Ctx) {
    let w = world(&cx).await;
    assert_eq!(send(&w.app, readyz()).await.status, StatusCode::OK);
    w.state
        .shutting_down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let r = send(&w.app, readyz()).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    let r = send(
        &w.app,
        Request::get("/healthz").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "still alive and serving");
}

/// A database that answers but cannot write is not ready: every request writes its audit record.
async fn readyz_reports_a_database_that_cannot_write(cx: Ctx) {
    let w = world(&cx).await;
    let r = send(&w.app, readyz()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let options = same_database(&cx).await;
    let options = match cx.store.backend() {
        Backend::Sqlite => StoreOptions {
            url: format!("{}?mode=ro", options.url),
            ..options
        },
        Backend::Postgres => StoreOptions {
            url: format!(
                "{}?options=-c%20default_transaction_read_only%3Don",
                options.url
            ),
            ..options
        },
    };
    let read_only = Store::connect(&options, Arc::new(cx.clock.clone()))
        .await
        .unwrap();
    read_only.ping().await.unwrap();
    let clock: Arc<dyn breeze_core::Clock> = Arc::new(cx.clock.clone());
    let state = AppState::new(
        read_only.clone(),
        breeze_auth::AuthService::new(read_only.clone(), clock.clone(), AuthSettings::default()),
        clock,
        ServerConfig::development("http://127.0.0.1:3000"),
        Arc::new(MemoryLimiter::new()),
    );
    let app = breeze_server::app(Breeze::new(state));
    let r = send(&app, readyz()).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    // Writes there are refused as unavailable, not as internal errors.
    let r = send(&app, login_request("admin@p.test")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    read_only.close().await;
}

/// Signs `email` in; returns the `name=value` of the session cookie.
async fn sign_in(w: &World, email: &str) -> String {
    let r = send(&w.app, login_request(email)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let cookie = r.headers["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

/// A JSON request signed in by `cookie`, from the dashboard's own origin.
fn with_cookie(method: &str, path: &str, cookie: &str, body: String) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("cookie", cookie)
        .header("origin", "http://127.0.0.1:3000")
        .body(Body::from(body))
        .unwrap()
}

/// REST bodies are capped at 64 KiB unless an endpoint needs more (a script's creation takes
/// up to 1 MiB); the 413 states the limit that applied. A megabyte to sign in or name a key
/// was accepted.
async fn rest_bodies_are_limited_per_endpoint(cx: Ctx) {
    let w = world(&cx).await;
    let big_login = json!({ "email": "admin@p.test", "password": "x".repeat(100 * 1024) });
    let r = send(
        &w.app,
        Request::post("/api/v1/auth/login")
            .header("content-type", "application/json")
            .body(Body::from(big_login.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
    assert_eq!(err_msg(&r), "Request body exceeds 65536 bytes");

    let cookie = sign_in(&w, "admin@p.test").await;
    let key = json!({ "name": "k".repeat(70 * 1024), "scopes": ["ai:read"] }).to_string();
    let r = send(
        &w.app,
        with_cookie("POST", "/api/v1/orgs/org-a/api-keys", &cookie, key),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);

    // A script near the store's 256 KiB limit fits its endpoint's larger limit…
    let script =
        |body: String| json!({ "name": "Big", "language": "bash", "body": body }).to_string();
    let r = send(
        &w.app,
        with_cookie(
            "POST",
            "/api/v1/orgs/org-a/scripts",
            &cookie,
            script("echo \"x\"\n".repeat(20 * 1024)),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // …and a body past that limit is refused with it named.
    let r = send(
        &w.app,
        with_cookie(
            "POST",
            "/api/v1/orgs/org-a/scripts",
            &cookie,
            script("\n".repeat(600 * 1024)),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
    assert_eq!(err_msg(&r), "Request body exceeds 1048576 bytes");
}

/// Every response says `nosniff`; those carrying a session, a secret or tenant data say
/// `no-store`.
async fn responses_carry_security_headers(cx: Ctx) {
    let w = world(&cx).await;
    let login = send(&w.app, login_request("admin@p.test")).await;
    let cookie = login.headers["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let key = json!({ "name": "k", "scopes": ["ai:read"] }).to_string();
    let created = send(
        &w.app,
        with_cookie("POST", "/api/v1/orgs/org-a/api-keys", &cookie, key),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let me = send(
        &w.app,
        with_cookie("GET", "/api/v1/auth/me", &cookie, String::new()),
    )
    .await;
    let mcp_reply = send(&w.app, mcp(&w.read, &rpc(1, "tools/list", json!({})))).await;
    let others = [
        send(&w.app, readyz()).await,
        send(
            &w.app,
            Request::get("/nowhere").body(Body::empty()).unwrap(),
        )
        .await,
        send(
            &w.app,
            Request::get("/api/v1/orgs").body(Body::empty()).unwrap(),
        )
        .await,
    ];
    for (what, r) in [
        ("sign-in", &login),
        ("a new key", &created),
        ("me", &me),
        ("mcp", &mcp_reply),
    ]
    .into_iter()
    .chain(others.iter().map(|r| ("other", r)))
    {
        assert_eq!(r.headers["x-content-type-options"], "nosniff", "{what}");
        assert_eq!(r.headers["cache-control"], "no-store", "{what}");
    }
}

/// A page on another site cannot use a signed-in administrator's cookie to change anything
/// (mint a key, sign out, sign in as someone else): SameSite is not the only wall.
async fn cookie_requests_from_another_origin_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    let cookie = sign_in(&w, "admin@p.test").await;
    let key = || json!({ "name": "csrf", "scopes": ["ai:read"] }).to_string();
    let foreign = |name: &'static str, value: &'static str| {
        let mut req = with_cookie("POST", "/api/v1/orgs/org-a/api-keys", &cookie, key());
        req.headers_mut().remove("origin");
        req.headers_mut().insert(name, value.parse().unwrap());
        req
    };
    for (name, value) in [
        ("origin", "https://evil.example"),
        ("origin", "null"),
        ("origin", "http://127.0.0.1:3000.evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("referer", "https://evil.example/page"),
    ] {
        let r = send(&w.app, foreign(name, value)).await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "{name}: {value}: {}",
            r.body
        );
        assert!(
            err_msg(&r).starts_with("cross-origin request refused"),
            "{}",
            r.body
        );
    }
    let r = send(
        &w.app,
        with_cookie("GET", "/api/v1/orgs/org-a/api-keys", &cookie, String::new()),
    )
    .await;
    assert!(
        !r.body.to_string().contains("csrf"),
        "a key was minted: {}",
        r.body
    );
    // Sign-out and sign-in from another origin are refused too; the session stays.
    for path in ["/api/v1/auth/logout", "/api/v1/auth/login"] {
        let body = json!({ "email": "viewer@p.test", "password": PASSWORD }).to_string();
        let mut req = with_cookie("POST", path, &cookie, body);
        req.headers_mut()
            .insert("origin", "https://evil.example".parse().unwrap());
        let r = send(&w.app, req).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.body);
        assert!(r.headers.get("set-cookie").is_none(), "{path}");
    }
    // The dashboard's own origin (default port spelled or not), and clients that are no
    // browser (no Origin, no Referer), still work; so does an API key from anywhere.
    for origin in ["http://127.0.0.1:3000", "HTTP://127.0.0.1:3000"] {
        let mut req = with_cookie("POST", "/api/v1/orgs/org-a/api-keys", &cookie, key());
        req.headers_mut().insert("origin", origin.parse().unwrap());
        let r = send(&w.app, req).await;
        assert_eq!(r.status, StatusCode::CREATED, "{origin}: {}", r.body);
    }
    let mut req = with_cookie("POST", "/api/v1/orgs/org-a/api-keys", &cookie, key());
    req.headers_mut().remove("origin");
    assert_eq!(send(&w.app, req).await.status, StatusCode::CREATED);
    let r = send(
        &w.app,
        Request::get("/api/v1/orgs/org-a/devices")
            .header("x-api-key", &w.read)
            .header("origin", "https://evil.example")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = send(
        &w.app,
        with_cookie("GET", "/api/v1/auth/me", &cookie, String::new()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "still signed in: {}", r.body);
}

/// An agent's result over the socket that meets a locked database is stored once the lock is
/// gone: the agent counts it delivered and never sends it again, so it was lost and the
/// command timed out.
async fn a_socket_result_survives_a_locked_database(cx: Ctx) {
    use breeze_agent_proto::{AgentFrame, CommandOutcome, CommandResult, ServerFrame};
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

    let options = StoreOptions {
        lock_timeout: Duration::from_millis(300),
        ..same_database(&cx).await
    };
    let store = Store::connect(&options, Arc::new(cx.clock.clone()))
        .await
        .unwrap();
    let w = world(&Ctx {
        store,
        clock: cx.clock.clone(),
        dir: cx.dir.clone(),
    })
    .await;
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let (secret, _) = w
        .state
        .auth
        .create_enrollment_key(
            breeze_auth::CreateEnrollmentKey {
                org_id: w.org_a,
                site_id: site,
                name: "k".into(),
                max_uses: None,
                expires_at: w.state.clock.now() + chrono::Duration::hours(1),
                created_by: "test".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let enroll = json!({
        "enrollmentKey": secret.expose(), "hostname": "agent-host", "machineId": "m-lock",
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12",
                "kernel": "6.1", "arch": "x86_64" },
        "agentVersion": "0.1.0",
    });
    let r = send(
        &w.app,
        Request::post("/api/v1/agents/enroll")
            .header("content-type", "application/json")
            .body(Body::from(enroll.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let device: breeze_core::DeviceId = serde_json::from_value(r.body["deviceId"].clone()).unwrap();
    let token = r.body["token"].as_str().unwrap().to_owned();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(breeze_server::serve(
        listener,
        Breeze::new(w.state.clone()),
        std::future::pending(),
    ));
    let mut req = format!("ws://{addr}/api/v1/agents/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let mut next_frame = async || loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame within 10 s")
            .unwrap()
            .unwrap();
        if let tungstenite::Message::Text(t) = msg {
            return serde_json::from_str::<ServerFrame>(t.as_str()).unwrap();
        }
    };
    assert!(matches!(next_frame().await, ServerFrame::Welcome { .. }));
    assert!(matches!(next_frame().await, ServerFrame::Policy(_)));

    let cmd = w
        .store
        .org(w.org_a)
        .commands()
        .create_command(
            breeze_store::NewCommand {
                device_id: device,
                kind: breeze_agent_proto::CommandKind::ListProcesses {
                    sort_by: breeze_agent_proto::ProcessSort::Cpu,
                    limit: 3,
                },
                timeout_secs: 600,
                output_cap_bytes: 1024,
                queue_ttl: chrono::Duration::minutes(10),
                script: None,
                created_by: "test".into(),
            },
            audit("command.create"),
        )
        .await
        .unwrap();
    let held = match cx.store.backend() {
        Backend::Sqlite => cx.store.raw_hold(&["BEGIN IMMEDIATE"]).await,
        Backend::Postgres => {
            cx.store
                .raw_hold(&[
                    "BEGIN",
                    "LOCK TABLE device_commands IN ACCESS EXCLUSIVE MODE",
                ])
                .await
        }
    }
    .unwrap();
    let result = CommandResult {
        command_id: cmd.id,
        status: CommandOutcome::Completed,
        exit_code: Some(0),
        stdout: "done".into(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        result: Some(json!({ "processes": [] })),
        error: None,
        started_at: w.state.clock.now(),
        finished_at: w.state.clock.now(),
    };
    ws.send(tungstenite::Message::Text(
        serde_json::to_string(&AgentFrame::CommandResult(result))
            .unwrap()
            .into(),
    ))
    .await
    .unwrap();
    // Let the first attempt meet the lock (it gives up after the 300 ms lock timeout).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    held.release().await;
    let mut status = breeze_core::CommandStatus::Pending;
    for _ in 0..300 {
        status = w
            .store
            .org(w.org_a)
            .commands()
            .get_command(cmd.id)
            .await
            .unwrap()
            .status;
        if status == breeze_core::CommandStatus::Completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status,
        breeze_core::CommandStatus::Completed,
        "the result was lost"
    );
    let stored = w
        .store
        .org(w.org_a)
        .commands()
        .get_command(cmd.id)
        .await
        .unwrap();
    assert_eq!(stored.stdout.as_deref(), Some("done"));
}

breeze_store::on_both_backends!(
    resources_refuse_a_disabled_user_and_a_lost_role,
    resources_need_their_permission,
    requests_with_nul_are_audited,
    a_locked_database_answers_unavailable_and_retryable,
    readyz_reports_a_database_that_cannot_write,
    readyz_reports_a_shutdown,
    rest_bodies_are_limited_per_endpoint,
    responses_carry_security_headers,
    cookie_requests_from_another_origin_are_refused,
    a_socket_result_survives_a_locked_database,
);
