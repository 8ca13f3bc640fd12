//! The device gateway from the agent's side of the wire: enrollment, device-token
//! authentication, the HTTP fallbacks, and a command's round trip over a real WebSocket —
//! a tool call waits while a scripted agent answers. (The real `breeze-agent` binary is
//! exercised end to end in `crates/agent/tests`.)
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::time::Duration;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_agent_proto::{AgentFrame, CommandKind, CommandOutcome, CommandResult, ServerFrame};
use breeze_auth::CreateEnrollmentKey;
use breeze_core::DeviceStatus;
use breeze_store::testing::Ctx;
use common::{World, err_msg, send, world};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

fn post_json(path: &str, bearer: Option<&str>, body: &Value) -> Request<Body> {
    let mut b = Request::post(path).header("content-type", "application/json");
    if let Some(t) = bearer {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    b.body(Body::from(body.to_string())).unwrap()
}

fn mcp_call(key: &str, tool: &str, args: Value) -> Request<Body> {
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", key)
        .body(Body::from(
            json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": { "name": tool, "arguments": args } })
            .to_string(),
        ))
        .unwrap()
}

async fn enrollment_key(w: &World, max_uses: Option<u32>) -> String {
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let (secret, _) = w
        .state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: w.org_a,
                site_id: site,
                name: "rollout".into(),
                max_uses,
                expires_at: w.state.clock.now() + chrono::Duration::hours(1),
                created_by: "test".into(),
            },
            common::audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    secret.expose().to_owned()
}

fn enroll_body(key: &str, machine: &str) -> Value {
    json!({
        "enrollmentKey": key, "hostname": "agent-host", "machineId": machine,
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12",
                "kernel": "6.1", "arch": "x86_64" },
        "agentVersion": "0.1.0",
    })
}

async fn enroll(w: &World, key: &str, machine: &str) -> (String, String) {
    let r = send(
        &w.app,
        post_json("/api/v1/agents/enroll", None, &enroll_body(key, machine)),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    (
        r.body["deviceId"].as_str().unwrap().to_owned(),
        r.body["token"].as_str().unwrap().to_owned(),
    )
}

async fn enrollment_and_device_tokens(cx: Ctx) {
    let w = world(&cx).await;
    let key = enrollment_key(&w, Some(1)).await;
    let (device, token) = enroll(&w, &key, "machine-1").await;
    assert!(token.starts_with("brz_") && token.len() == 47);

    // One use only; bad keys read the same as used-up ones.
    for bad in [key.as_str(), "brz_nope", &format!("brz_{}", "x".repeat(43))] {
        let r = send(
            &w.app,
            post_json("/api/v1/agents/enroll", None, &enroll_body(bad, "m2")),
        )
        .await;
        assert_eq!(
            (r.status, err_msg(&r)),
            (
                StatusCode::UNAUTHORIZED,
                "Invalid, expired or used-up enrollment key"
            )
        );
    }

    // The token authenticates the HTTP fallbacks; nothing else does.
    let hb = json!({ "agentVersion": "0.1.1", "uptimeSecs": 42, "pendingReboot": false,
                     "loggedInUsers": [{ "username": "alice", "terminal": "pts/0" }] });
    let r = send(
        &w.app,
        post_json("/api/v1/agents/heartbeat", Some(&token), &hb),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["commands"], json!([]));
    assert_eq!(r.body["config"]["heartbeatIntervalSecs"], 60);
    for bad in [None, Some("brz_short"), Some(w.read.as_str())] {
        let r = send(&w.app, post_json("/api/v1/agents/heartbeat", bad, &hb)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad:?}");
    }
    // An API key cannot act as an agent, and a device token is not an API key.
    let r = send(&w.app, mcp_call(&token, "query_devices", json!({}))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // Inventory refreshes the device; metrics feed analyze_metrics.
    let inv = json!({
        "collectedAt": w.state.clock.now(), "hostname": "renamed-host",
        "os": { "family": "linux", "name": "Ubuntu", "version": "24.04", "kernel": "6.8", "arch": "x86_64" },
        "cpu": { "model": "Test CPU", "physicalCores": 2, "logicalCores": 4 },
        "memoryTotalBytes": 8_000_000_000u64, "disks": [], "interfaces": [],
    });
    let r = send(
        &w.app,
        post_json("/api/v1/agents/inventory", Some(&token), &inv),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    let now = w.state.clock.now();
    let sample = |mins: i64, cpu: f64| {
        json!({
            "at": now - chrono::Duration::minutes(mins), "cpuPercent": cpu, "ramPercent": 40.0,
            "ramUsedBytes": 1, "disks": [{ "mount": "/", "usedPercent": 71.5 }],
            "network": [{ "interface": "eth0", "rxBytes": 10, "txBytes": 5 }], "processCount": 90,
        })
    };
    let batch = json!({ "samples": [sample(20, 10.0), sample(10, 30.0)] });
    let r = send(
        &w.app,
        post_json("/api/v1/agents/metrics", Some(&token), &batch),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);

    let r = send(
        &w.app,
        mcp_call(&w.read, "analyze_metrics", json!({ "deviceId": device })),
    )
    .await;
    let out = &r.body["result"]["structuredContent"];
    assert_eq!(out["hostname"], "renamed-host", "{}", r.body);
    assert_eq!(out["dataPoints"], 2);
    assert_eq!(out["cpu"]["avg"], 20.0);
    assert_eq!(out["cpu"]["current"], 30.0);
    assert_eq!(out["disk"]["max"], 71.5);
    let r = send(&w.app, mcp_call(&w.read, "get_active_users", json!({}))).await;
    let out = &r.body["result"]["structuredContent"];
    assert_eq!(out["totalActiveSessions"], 1, "{}", r.body);
    assert_eq!(out["devices"][0]["safeToReboot"], false);

    // Another organization's key sees none of it.
    let r = send(
        &w.app,
        mcp_call(
            &w.other_org_key,
            "analyze_metrics",
            json!({ "deviceId": device }),
        ),
    )
    .await;
    assert_eq!(
        r.body["result"]["structuredContent"]["error"]["message"],
        "Device not found or access denied"
    );

    // Rotation: the old token works until the new one is used, then never again.
    let r = send(
        &w.app,
        post_json("/api/v1/agents/token/rotate", Some(&token), &json!({})),
    )
    .await;
    let new = r.body["token"].as_str().unwrap().to_owned();
    let r = send(
        &w.app,
        post_json("/api/v1/agents/heartbeat", Some(&token), &hb),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(
        &w.app,
        post_json("/api/v1/agents/heartbeat", Some(&new), &hb),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(
        &w.app,
        post_json("/api/v1/agents/heartbeat", Some(&token), &hb),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
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

async fn commands_round_trip_over_the_socket(cx: Ctx) {
    let w = world(&cx).await;
    let key = enrollment_key(&w, None).await;
    let (device, token) = enroll(&w, &key, "machine-ws").await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let breeze = breeze_server::Breeze::new(w.state.clone());
    tokio::spawn(breeze_server::serve(
        listener,
        breeze,
        std::future::pending(),
    ));

    // Without a token the upgrade is refused.
    let url = format!("ws://{addr}/api/v1/agents/ws");
    let err = tokio_tungstenite::connect_async(&url).await.unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");

    let mut req = url.as_str().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let ServerFrame::Welcome { device_id, config } = next_frame(&mut ws).await else {
        panic!("the first frame is the welcome")
    };
    assert_eq!(device_id.to_string(), device);
    assert_eq!(config.metrics_interval_secs, 30);
    // The effective configuration policy follows the welcome (none assigned: no overrides).
    let ServerFrame::Policy(policy) = next_frame(&mut ws).await else {
        panic!("the second frame is the configuration policy")
    };
    assert_eq!(policy.metrics_interval_secs, None);
    assert!(policy.features.is_empty());

    // A Tier 2 command: the call waits while the agent works, then returns its answer.
    let app = w.app.clone();
    let write = w.write.clone();
    let dev = device.clone();
    let call = tokio::spawn(async move {
        send(
            &app,
            mcp_call(
                &write,
                "manage_services",
                json!({ "deviceId": dev, "action": "list" }),
            ),
        )
        .await
    });
    let ServerFrame::Command(cmd) = next_frame(&mut ws).await else {
        panic!("a command")
    };
    assert_eq!(cmd.kind, CommandKind::ListServices);
    send_frame(&mut ws, &AgentFrame::CommandStarted { command_id: cmd.id }).await;
    let result = |stdout: &str| CommandResult {
        command_id: cmd.id,
        status: CommandOutcome::Completed,
        exit_code: Some(0),
        stdout: stdout.into(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        result: Some(json!({ "processes": [{ "pid": 1, "name": "init" }] })),
        error: None,
        started_at: w.state.clock.now(),
        finished_at: w.state.clock.now(),
    };
    send_frame(&mut ws, &AgentFrame::CommandResult(result("first"))).await;
    // A duplicate result is ignored: the first one stands.
    send_frame(&mut ws, &AgentFrame::CommandResult(result("second"))).await;
    let r = call.await.unwrap();
    let out = &r.body["result"]["structuredContent"];
    assert_eq!(out["status"], "completed", "{}", r.body);
    assert_eq!(out["result"]["processes"][0]["name"], "init");
    assert_eq!(out["stdout"], "first");
    let stored = w
        .store
        .org(w.org_a)
        .commands()
        .get_command(cmd.id)
        .await
        .unwrap();
    assert_eq!(stored.stdout.as_deref(), Some("first"));
    assert!(stored.started_at.is_some() && stored.completed_at.is_some());

    // A command that ran and failed is a tool error carrying the device's reason, not a
    // result a client or model could read as success.
    let app = w.app.clone();
    let write = w.write.clone();
    let dev = device.clone();
    let call = tokio::spawn(async move {
        send(
            &app,
            mcp_call(
                &write,
                "manage_services",
                json!({ "deviceId": dev, "action": "list" }),
            ),
        )
        .await
    });
    // The first command's result was acknowledged once stored; the next command follows.
    let cmd = loop {
        match next_frame(&mut ws).await {
            ServerFrame::ResultAck { .. } => continue,
            ServerFrame::Command(cmd) => break cmd,
            other => panic!("a command, got {other:?}"),
        }
    };
    send_frame(&mut ws, &AgentFrame::CommandStarted { command_id: cmd.id }).await;
    let reason = "System has not been booted with systemd as init system (PID 1)";
    send_frame(
        &mut ws,
        &AgentFrame::CommandResult(CommandResult {
            command_id: cmd.id,
            status: CommandOutcome::Failed,
            exit_code: Some(1),
            stdout: String::new(),
            stderr: reason.into(),
            stdout_truncated: false,
            stderr_truncated: false,
            result: None,
            error: Some(reason.into()),
            started_at: w.state.clock.now(),
            finished_at: w.state.clock.now(),
        }),
    )
    .await;
    let r = call.await.unwrap();
    assert_eq!(r.body["result"]["isError"], true, "{}", r.body);
    let message = r.body["result"]["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(reason) && message.contains("agent-host"),
        "{message}"
    );

    // Heartbeats and metrics arrive over the socket too.
    send_frame(
        &mut ws,
        &AgentFrame::Heartbeat(breeze_agent_proto::Heartbeat {
            agent_version: "9.9.9".into(),
            uptime_secs: 1,
            pending_reboot: true,
            logged_in_users: vec![],
            running_commands: vec![],
            applied_policy: None,
        }),
    )
    .await;
    let id = device.parse().unwrap();
    for _ in 0..100 {
        if w.store
            .org(w.org_a)
            .devices()
            .get_device(id)
            .await
            .unwrap()
            .agent_version
            .as_deref()
            == Some("9.9.9")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        w.store
            .org(w.org_a)
            .devices()
            .get_device(id)
            .await
            .unwrap()
            .agent_version
            .as_deref(),
        Some("9.9.9")
    );

    // An offline device is a clear error, and nothing is queued for it.
    drop(ws);
    w.store
        .raw_execute("UPDATE devices SET status = 'offline' WHERE hostname = 'agent-host'")
        .await
        .unwrap();
    let r = send(
        &w.app,
        mcp_call(
            &w.write,
            "manage_services",
            json!({ "deviceId": device, "action": "list" }),
        ),
    )
    .await;
    let msg = r.body["result"]["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains("is not online (status: offline"), "{msg}");
    assert_eq!(
        w.store
            .org(w.org_a)
            .commands()
            .list_commands(id, 10)
            .await
            .unwrap()
            .len(),
        2,
        "the two commands above, nothing for the offline device"
    );
    assert_eq!(
        w.store
            .org(w.org_a)
            .devices()
            .get_device(id)
            .await
            .unwrap()
            .status,
        DeviceStatus::Offline
    );
}

async fn admins_manage_enrollment_keys_and_scripts(cx: Ctx) {
    let w = world(&cx).await;
    // API keys cannot mint enrollment keys.
    let r = send(
        &w.app,
        Request::post("/api/v1/orgs/org-a/enrollment-keys")
            .header("content-type", "application/json")
            .header("x-api-key", &w.write)
            .body(Body::from(
                json!({ "site_id": Uuid::nil(), "name": "x" }).to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);

    // A signed-in administrator can.
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
    let with_cookie = |method: &str, uri: &str, body: Value| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .header(header::COOKIE, &cookie)
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let r = send(
        &w.app,
        with_cookie(
            "POST",
            "/api/v1/orgs/org-a/enrollment-keys",
            json!({ "site_id": site, "name": "laptops", "max_uses": 5, "expires_in_hours": 2 }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let key = r.body["key"].as_str().unwrap().to_owned();
    let key_id = r.body["id"].as_str().unwrap().to_owned();
    let r = send(
        &w.app,
        with_cookie(
            "POST",
            "/api/v1/orgs/org-a/enrollment-keys",
            json!({ "site_id": site, "name": "x", "expires_in_hours": 9999 }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).contains("expires_in_hours"));
    // A site of another organization is not this organization's.
    let b_site = w.store.org(w.org_b).tenancy().list_sites().await.unwrap()[0].id;
    let r = send(
        &w.app,
        with_cookie(
            "POST",
            "/api/v1/orgs/org-a/enrollment-keys",
            json!({ "site_id": b_site, "name": "x" }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = send(
        &w.app,
        with_cookie("GET", "/api/v1/orgs/org-a/enrollment-keys", json!({})),
    )
    .await;
    let listed = r.body["enrollment_keys"].to_string();
    assert!(
        listed.contains("laptops") && !listed.contains(&key),
        "secrets are never listed"
    );
    let r = send(
        &w.app,
        with_cookie(
            "DELETE",
            &format!("/api/v1/orgs/org-a/enrollment-keys/{key_id}"),
            json!({}),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(
        &w.app,
        post_json("/api/v1/agents/enroll", None, &enroll_body(&key, "m")),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "a revoked key enrolls nothing"
    );

    // Scripts: add, list (also as the breeze://scripts resource), show, remove.
    let r = send(
        &w.app,
        with_cookie(
            "POST",
            "/api/v1/orgs/org-a/scripts",
            json!({
                "name": "Disk report", "language": "bash", "category": "diagnostics",
                "body": "df -h \"$1\"", "parameters": [{ "name": "mount", "required": true }]
            }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = send(
        &w.app,
        with_cookie(
            "POST",
            "/api/v1/orgs/org-a/scripts",
            json!({
                "name": "Bad", "language": "cobol", "body": "x"
            }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).contains("unknown script language \"cobol\""));
    let r = send(
        &w.app,
        with_cookie(
            "GET",
            "/api/v1/orgs/org-a/scripts?category=diagnostics",
            json!({}),
        ),
    )
    .await;
    assert_eq!(r.body["scripts"][0]["name"], "Disk report");
    let r = send(
        &w.app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("x-api-key", &w.read)
            .body(Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "resources/read",
            "params": { "uri": "breeze://scripts" } })
                .to_string(),
            ))
            .unwrap(),
    )
    .await;
    let text = r.body["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(text.contains("Disk report"), "{text}");
    let r = send(
        &w.app,
        with_cookie("GET", "/api/v1/orgs/org-a/scripts/Disk%20report", json!({})),
    )
    .await;
    assert_eq!(r.body["body"], "df -h \"$1\"");
    let r = send(
        &w.app,
        with_cookie("GET", "/api/v1/orgs/org-b/scripts/Disk%20report", json!({})),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = send(
        &w.app,
        with_cookie(
            "DELETE",
            "/api/v1/orgs/org-a/scripts/Disk%20report",
            json!({}),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
}

/// Enrollment is rate-limited per client address: the attempt past the limit is a 429 with
/// Retry-After, whether or not the key is good.
async fn enrollment_is_rate_limited_per_address(cx: Ctx) {
    let w = world(&cx).await;
    let app = common::build(
        &w,
        |c| c.enroll_rate_per_minute = 3,
        std::sync::Arc::new(breeze_limits::MemoryLimiter::new()),
    );
    let key = enrollment_key(&w, None).await;
    for i in 0..3 {
        let r = send(
            &app,
            post_json("/api/v1/agents/enroll", None, &enroll_body("brz_bad", "m")),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let r = send(
        &app,
        post_json("/api/v1/agents/enroll", None, &enroll_body(&key, "m")),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert!(err_msg(&r).contains("Too many enrollment attempts"));
    assert!(r.headers.contains_key("retry-after"));
}

/// A session cookie for the administrator (`admin@p.test`).
async fn admin_cookie(w: &World) -> String {
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
    let cookie = login.headers.get(header::SET_COOKIE).unwrap();
    cookie
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// The takeover attack over the agent API: a key of another site of the organization and the
/// victim's machine id. The attacker gets a new device flagged as a possible clone (REST
/// listing, dashboard) and the victim's socket stays; only the administrator's one-time
/// re-enroll token re-enrolls the victim device, which closes the socket opened with its old
/// token at once and retires that token.
async fn an_enrollment_key_never_takes_over_a_device(cx: Ctx) {
    let w = world(&cx).await;
    let o = w.store.org(w.org_a);
    let branch = o
        .tenancy()
        .create_site("Branch Office", "UTC", common::audit("site.create"))
        .await
        .unwrap();
    let hq_key = enrollment_key(&w, None).await;
    let (victim, victim_token) = enroll(&w, &hq_key, "victim-machine").await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(breeze_server::serve(
        listener,
        breeze_server::Breeze::new(w.state.clone()),
        std::future::pending(),
    ));
    let url = format!("ws://{addr}/api/v1/agents/ws");
    let socket = |token: String| {
        let url = url.clone();
        async move {
            let mut req = url.as_str().into_client_request().unwrap();
            req.headers_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
            tokio_tungstenite::connect_async(req).await.unwrap().0
        }
    };
    let mut victim_ws = socket(victim_token.clone()).await;
    assert!(matches!(
        next_frame(&mut victim_ws).await,
        ServerFrame::Welcome { .. }
    ));

    // The attacker: a Branch Office key, the victim's machine id.
    let (secret, _) = w
        .state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: w.org_a,
                site_id: branch.id,
                name: "branch".into(),
                max_uses: None,
                expires_at: w.state.clock.now() + chrono::Duration::hours(1),
                created_by: "test".into(),
            },
            common::audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let r = send(
        &w.app,
        post_json(
            "/api/v1/agents/enroll",
            None,
            &enroll_body(secret.expose(), "victim-machine"),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let impostor = r.body["deviceId"].as_str().unwrap().to_owned();
    assert_ne!(impostor, victim);
    // Flagged, without naming the device it shares a machine id with: a key holder learns
    // no device's id from an enrollment.
    assert_eq!(r.body["possibleClone"], json!(true), "{}", r.body);
    assert!(!r.body.to_string().contains(&victim), "{}", r.body);
    let impostor_token = r.body["token"].as_str().unwrap().to_owned();
    let mut impostor_ws = socket(impostor_token).await;
    let ServerFrame::Welcome { device_id, .. } = next_frame(&mut impostor_ws).await else {
        panic!("the impostor is welcomed as its own device")
    };
    assert_eq!(device_id.to_string(), impostor);
    // The victim's token still works.
    let hb = json!({ "agentVersion": "0.1.0", "uptimeSecs": 1, "pendingReboot": false,
                     "loggedInUsers": [] });
    let r = send(
        &w.app,
        post_json("/api/v1/agents/heartbeat", Some(&victim_token), &hb),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);

    // Flagged in the REST listing and on the dashboard.
    let r = send(
        &w.app,
        Request::get(format!("/api/v1/orgs/org-a/devices/{impostor}"))
            .header("x-api-key", &w.read)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.body["suspected_clone_of"], json!(victim), "{}", r.body);
    let cookie = admin_cookie(&w).await;
    let page = send(
        &w.app,
        Request::get("/o/org-a/devices")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let html = page.body.as_str().unwrap_or_default().to_owned();
    assert!(html.contains("possible clone"), "{html}");
    let page = send(
        &w.app,
        Request::get(format!("/o/org-a/devices/{impostor}"))
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(
        page.body
            .as_str()
            .unwrap_or_default()
            .contains("Possible clone or impostor")
    );

    // A made-up re-enroll token is refused; an API key cannot mint a real one.
    let mut forged = enroll_body(&hq_key, "victim-machine");
    forged["reenrollToken"] = json!(format!("brz_{}", "A".repeat(43)));
    let r = send(&w.app, post_json("/api/v1/agents/enroll", None, &forged)).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (
            StatusCode::UNAUTHORIZED,
            "Invalid, expired or used re-enroll token"
        )
    );
    let mint = |auth: (&str, &str)| {
        Request::post(format!(
            "/api/v1/orgs/org-a/devices/{victim}/reenroll-token"
        ))
        .header("content-type", "application/json")
        .header(auth.0, auth.1)
        .body(Body::from("{}"))
        .unwrap()
    };
    let r = send(&w.app, mint(("x-api-key", &w.write))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = send(&w.app, mint(("cookie", &cookie))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let token = r.body["token"].as_str().unwrap().to_owned();

    // The administrator's re-enrollment: the victim device, a new token; the socket opened
    // with the old one closes at once, and the old token is refused.
    let mut body = enroll_body(&hq_key, "rebuilt-machine");
    body["reenrollToken"] = json!(token);
    let r = send(&w.app, post_json("/api/v1/agents/enroll", None, &body)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["deviceId"], json!(victim));
    assert_eq!(r.body["reenrolled"], json!(true));
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match victim_ws.next().await {
                None | Some(Err(_)) | Some(Ok(tungstenite::Message::Close(_))) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the socket with the old token closed at once"
    );
    let r = send(
        &w.app,
        post_json("/api/v1/agents/heartbeat", Some(&victim_token), &hb),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // The impostor's own socket is untouched; the token is spent.
    assert!(w.state.gateway.is_connected(impostor.parse().unwrap()));
    let r = send(&w.app, post_json("/api/v1/agents/enroll", None, &body)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

async fn send_text(ws: &mut Socket, v: Value) {
    ws.send(tungstenite::Message::Text(v.to_string().into()))
        .await
        .unwrap();
}

/// The agent socket holds the HTTP channel's limits: a batch past 5,000 samples or a frame past
/// the report body limit stores nothing; samples stamped in year 9999 or far in the past, and
/// values no metric can take (`1e308` percent), are refused over either channel while the
/// good samples beside them are kept.
async fn the_socket_holds_the_http_limits(cx: Ctx) {
    let w = world(&cx).await;
    let key = enrollment_key(&w, None).await;
    let (device, token) = enroll(&w, &key, "machine-limits").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(breeze_server::serve(
        listener,
        breeze_server::Breeze::new(w.state.clone()),
        std::future::pending(),
    ));
    let mut req = format!("ws://{addr}/api/v1/agents/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let stored = || async {
        w.store
            .raw_scalar(
                Some(w.org_a),
                "SELECT COUNT(*) FROM device_metrics WHERE device_id = $1",
                device.parse().unwrap(),
            )
            .await
            .unwrap()
    };
    let now = w.state.clock.now();
    let sample = |at: chrono::DateTime<chrono::Utc>, cpu: f64| {
        json!({
            "at": at, "cpuPercent": cpu, "ramPercent": 40.0, "ramUsedBytes": 1,
            "disks": [{ "mount": "/", "usedPercent": 50.0 }], "network": [], "processCount": 9,
        })
    };
    let frame = |samples: Vec<Value>| json!({ "type": "metrics", "samples": samples });
    // 5,001 samples over the socket: refused like over HTTP.
    let many: Vec<Value> = (0..5_001)
        .map(|i| sample(now - chrono::Duration::seconds(i), 1.0))
        .collect();
    send_text(&mut ws, frame(many.clone())).await;
    let r = send(
        &w.app,
        post_json(
            "/api/v1/agents/metrics",
            Some(&token),
            &json!({ "samples": many }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).contains("at most 5000 samples"), "{}", r.body);
    // A frame over the report limit (padded past 1 MiB with a long mount name list).
    let padded: Vec<Value> = (0..4_000)
        .map(|i| {
            let mut s = sample(now - chrono::Duration::seconds(i), 1.0);
            s["disks"] = json!([{ "mount": "/".repeat(250), "usedPercent": 1.0 }]);
            s
        })
        .collect();
    let padded = frame(padded);
    assert!(padded.to_string().len() > 1024 * 1024);
    send_text(&mut ws, padded).await;
    // Bad stamps and values beside one good sample, over each channel.
    let mixed = vec![
        sample("9999-01-01T00:00:00Z".parse().unwrap(), 1.0),
        sample(now - chrono::Duration::days(30), 1.0),
        sample(now - chrono::Duration::minutes(1), 1e308),
        sample(now - chrono::Duration::minutes(1), -5.0),
        sample(now - chrono::Duration::minutes(2), 12.5),
    ];
    send_text(&mut ws, frame(mixed.clone())).await;
    // The socket's frames are handled in order: a heartbeat after them marks the end.
    let mark = json!({ "type": "heartbeat", "agentVersion": "7.7.7", "uptimeSecs": 1,
                       "pendingReboot": false, "loggedInUsers": [] });
    send_text(&mut ws, mark).await;
    let id: breeze_core::DeviceId = device.parse().unwrap();
    for _ in 0..200 {
        let v = w.store.org(w.org_a).devices().get_device(id).await.unwrap();
        if v.agent_version.as_deref() == Some("7.7.7") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        stored().await,
        1,
        "only the good sample of the socket's frames"
    );
    let mut later = mixed.clone();
    later[4] = sample(now - chrono::Duration::minutes(3), 20.0);
    let r = send(
        &w.app,
        post_json(
            "/api/v1/agents/metrics",
            Some(&token),
            &json!({ "samples": later }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_eq!(stored().await, 2, "and the good one over HTTP");
    // The newest stored sample is a real one, not the year-9999 stamp.
    let newest = w
        .store
        .raw_strings("SELECT CAST(MAX(at) AS TEXT) FROM device_metrics")
        .await
        .unwrap();
    assert!(!newest[0].starts_with("9999"), "{newest:?}");
}

use uuid::Uuid;

breeze_store::on_both_backends!(
    the_socket_holds_the_http_limits,
    an_enrollment_key_never_takes_over_a_device,
    enrollment_is_rate_limited_per_address,
    enrollment_and_device_tokens,
    commands_round_trip_over_the_socket,
    admins_manage_enrollment_keys_and_scripts,
);
