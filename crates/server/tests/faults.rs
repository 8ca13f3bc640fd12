//! Faults that must lose nothing, reproduced on real sockets.
//!
//! **The agent channel**, with a scripted agent: a TCP proxy
//! between agent and server that stops forwarding but keeps both connections open (a
//! half-open socket: a partitioned network, a NAT that dropped its state), on PostgreSQL so
//! that two instances share the cluster bus.
//!
//! - The agent gives up on the frozen socket and connects to the other instance: the first
//!   instance drops its stale socket at once (the new socket is announced on the bus), and a
//!   command queued through it reaches the agent on its current socket.
//! - Nobody reconnects: the server drops the silent socket after its silence limit, and the
//!   command pushed on it goes back to pending, to be delivered on the next socket.
//! - The agent comes back after the command's deadline with its result: the result is stored
//!   (completed late, output kept) and acknowledged, idempotently.
//!
//! **A drain** (SIGTERM) while a Tier 3 call waits for a person: the call answers
//! `pending_approval` before its connection closes.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{body::Body, http::Request};
use breeze_agent_proto::{CommandKind, ServerFrame};
use breeze_auth::{AuthService, AuthSettings, CreateEnrollmentKey};
use breeze_core::{CommandStatus, DeviceId};
use breeze_gateway::GatewayConfig;
use breeze_limits::MemoryLimiter;
use breeze_server::{AppState, Breeze};
use breeze_store::{Backend, NewCommand, Store, testing};
use common::{World, audit, send, world};
use futures::StreamExt;
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};
use uuid::Uuid;

const METRICS_TOKEN: &str = "metrics-token-for-faults";

/// The value of the sample `series` in `state`'s `/metrics` now.
async fn metric(state: &AppState, series: &str) -> Option<f64> {
    let r = send(
        &breeze_server::app(Breeze::new(state.clone())),
        Request::get("/metrics")
            .header("authorization", format!("Bearer {METRICS_TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let text = r.body.as_str().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A TCP proxy to one upstream that can be frozen: from then on it forwards nothing either
/// way and closes nothing.
struct Proxy {
    addr: SocketAddr,
    frozen: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (frozen, _) = watch::channel(false);
        let watch = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, watch.subscribe()));
                tokio::spawn(pump(sr, cw, watch.subscribe()));
            }
        });
        Proxy { addr, frozen }
    }

    fn freeze(&self) {
        self.frozen.send_replace(true);
    }
}

/// Copies `from` to `to` until either closes; once frozen, bytes read are swallowed and both
/// halves stay open for good.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if *frozen.borrow() {
            // Hold both halves: the peers see an open connection that carries nothing.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// An instance over `store` (sharing `w`'s clock) with `gateway` settings, serving on a
/// socket of its own.
async fn instance(w: &World, store: Store, gateway: GatewayConfig) -> (AppState, SocketAddr) {
    let mut config = (*w.state.config).clone();
    config.gateway = gateway;
    config.metrics.token = Some(METRICS_TOKEN.into());
    let state = AppState::new(
        store.clone(),
        AuthService::new(
            store.clone(),
            w.state.clock.clone(),
            AuthSettings::default(),
        ),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(breeze_server::serve(
        listener,
        Breeze::new(state.clone()),
        std::future::pending(),
    ));
    (state, addr)
}

/// Enrolls an agent in organization A: its device and token.
async fn enroll(w: &World) -> (DeviceId, String) {
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let (key, _) = w
        .state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: w.org_a,
                site_id: site,
                name: "faults".into(),
                max_uses: None,
                expires_at: w.state.clock.now() + chrono::Duration::hours(1),
                created_by: "test".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let body = json!({
        "enrollmentKey": key.expose(), "hostname": "partitioned", "machineId": "m-1",
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12",
                "kernel": "6.1", "arch": "x86_64" },
        "agentVersion": "0.1.0",
    });
    let r = send(
        &w.app,
        Request::post("/api/v1/agents/enroll")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let device = DeviceId(r.body["deviceId"].as_str().unwrap().parse().unwrap());
    (device, r.body["token"].as_str().unwrap().to_owned())
}

/// Opens the agent socket at `addr` and reads the welcome.
async fn agent_socket(addr: SocketAddr, token: &str) -> Socket {
    let mut req = format!("ws://{addr}/api/v1/agents/ws")
        .as_str()
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    // The welcome is queued before the socket is registered: it comes first, whatever else
    // (the policy, commands) follows.
    assert!(matches!(
        next_frame(&mut ws, Duration::from_secs(10)).await,
        Some(ServerFrame::Welcome { .. })
    ));
    ws
}

/// The next frame from the server within `patience` (pings are answered by the library).
async fn next_frame(ws: &mut Socket, patience: Duration) -> Option<ServerFrame> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next()).await.ok()??;
        if let Ok(tungstenite::Message::Text(t)) = msg {
            return Some(serde_json::from_str(t.as_str()).unwrap());
        }
    }
}

/// The next command frame within `patience`.
async fn next_command(ws: &mut Socket, patience: Duration) -> Option<Uuid> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_frame(ws, left).await? {
            ServerFrame::Command(c) => return Some(c.id),
            _ => continue,
        }
    }
}

fn list_services(device: DeviceId) -> NewCommand {
    NewCommand {
        device_id: device,
        kind: CommandKind::ListServices,
        timeout_secs: 60,
        output_cap_bytes: 1024,
        queue_ttl: chrono::Duration::seconds(75),
        script: None,
        created_by: "test".into(),
    }
}

/// Waits up to `secs` for `check`, failing the test naming `what`.
async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The partition of the fault run: A's socket goes half-open, the agent reconnects to B. A
/// must let go of its socket at once (not after a silence limit: here that is ten minutes),
/// and a command queued through A, before or after A heard of the move, must reach the agent
/// on B's socket.
async fn a_socket_the_agent_left_for_another_instance_is_dropped_at_once(cx: testing::Ctx) {
    let w = world(&cx).await;
    let (device, token) = enroll(&w).await;
    let patient = GatewayConfig {
        silence_limit: Duration::from_secs(600),
        ..GatewayConfig::default()
    };
    let store_b = w.store.reopen().await.unwrap();
    let (a, a_addr) = instance(&w, w.store.clone(), patient.clone()).await;
    let (b, b_addr) = instance(&w, store_b.clone(), patient).await;
    w.store.bus_listening().await;
    store_b.bus_listening().await;

    let proxy = Proxy::start(a_addr).await;
    let _stale = agent_socket(proxy.addr, &token).await;
    assert!(a.gateway.is_connected(device));
    proxy.freeze();

    // Queued while the agent is away: handed out when it connects to B.
    let early = a
        .gateway
        .org(w.org_a)
        .submit(list_services(device), audit("device.command"))
        .await
        .unwrap();
    let mut current = agent_socket(b_addr, &token).await;
    let mut received = Vec::new();
    // Queued through A right after the agent reached B, racing A's hearing of it.
    let late = a
        .gateway
        .org(w.org_a)
        .submit(list_services(device), audit("device.command"))
        .await
        .unwrap();
    while received.len() < 2 {
        let Some(id) = next_command(&mut current, Duration::from_secs(10)).await else {
            break;
        };
        if !received.contains(&id) {
            received.push(id);
        }
    }
    assert!(
        received.contains(&early.id) && received.contains(&late.id),
        "both commands reach the agent on its current socket (got {received:?}, expected {} and {})",
        early.id,
        late.id
    );
    eventually(5, "A to drop the socket the agent left", || async {
        !a.gateway.is_connected(device)
    })
    .await;
    assert!(b.gateway.is_connected(device));
    assert_eq!(a.gateway.moved_sockets(), 1);
    // What an operator sees of it: per instance, its sockets and the ones that moved away;
    // the database's health as last probed, and the audit journal's backlog.
    assert_eq!(metric(&a, "breeze_agents_connected").await, Some(0.0));
    assert_eq!(metric(&b, "breeze_agents_connected").await, Some(1.0));
    assert_eq!(
        metric(&a, "breeze_agent_sockets_moved_total").await,
        Some(1.0)
    );
    assert_eq!(metric(&a, "breeze_db_up").await, Some(1.0));
    assert!(
        metric(&a, "breeze_audit_journal_backlog_records")
            .await
            .is_some()
    );

    // Later commands through A go to B's socket too.
    let after = a
        .gateway
        .org(w.org_a)
        .submit(list_services(device), audit("device.command"))
        .await
        .unwrap();
    // (A repeated delivery of an earlier command may come first: the agent runs an id once.)
    loop {
        let next = next_command(&mut current, Duration::from_secs(10)).await;
        assert!(
            next.is_some_and(|id| id == after.id || received.contains(&id)),
            "a command queued through A after the move reaches B's socket: {next:?}"
        );
        if next == Some(after.id) {
            break;
        }
    }
}

/// No other socket: the server notices the silence itself, within its limit and a ping, and
/// the command it pushed into the dead socket goes back to pending, then out on the agent's
/// next socket.
async fn a_silent_socket_is_dropped_and_its_commands_requeued(cx: testing::Ctx) {
    let w = world(&cx).await;
    let (device, token) = enroll(&w).await;
    let quick = GatewayConfig {
        ping_interval: Duration::from_millis(200),
        silence_limit: Duration::from_secs(1),
        ..GatewayConfig::default()
    };
    let (a, a_addr) = instance(&w, w.store.clone(), quick).await;
    let proxy = Proxy::start(a_addr).await;
    let _stale = agent_socket(proxy.addr, &token).await;
    proxy.freeze();

    let cmd = a
        .gateway
        .org(w.org_a)
        .submit(list_services(device), audit("device.command"))
        .await
        .unwrap();
    let org = w.store.org(w.org_a).commands();
    assert_eq!(
        org.get_command(cmd.id).await.unwrap().status,
        CommandStatus::Sent,
        "pushed on the socket the server still believes in"
    );
    eventually(10, "the silent socket to be dropped", || async {
        !a.gateway.is_connected(device)
    })
    .await;
    eventually(5, "the command to go back to pending", || async {
        org.get_command(cmd.id).await.unwrap().status == CommandStatus::Pending
    })
    .await;

    let mut current = agent_socket(a_addr, &token).await;
    assert_eq!(
        next_command(&mut current, Duration::from_secs(10)).await,
        Some(cmd.id)
    );
    assert_eq!(
        org.get_command(cmd.id).await.unwrap().status,
        CommandStatus::Sent
    );
}

async fn send_result(ws: &mut Socket, result: &breeze_agent_proto::CommandResult) {
    use futures::SinkExt;
    ws.send(tungstenite::Message::Text(
        serde_json::to_string(&breeze_agent_proto::AgentFrame::CommandResult(
            result.clone(),
        ))
        .unwrap()
        .into(),
    ))
    .await
    .unwrap();
}

/// The next acknowledgement within `patience`.
async fn next_ack(ws: &mut Socket, patience: Duration) -> Option<Uuid> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_frame(ws, left).await? {
            ServerFrame::ResultAck { command_id } => return Some(command_id),
            _ => continue,
        }
    }
}

/// A command that ran, whose result arrives after the sweeper timed it out (the agent was
/// cut off, then came back): the result is stored — completed late, output kept — and
/// acknowledged; the same result again changes nothing and is acknowledged again.
async fn a_result_after_the_deadline_is_kept_as_completed_late(cx: testing::Ctx) {
    let w = world(&cx).await;
    let (device, token) = enroll(&w).await;
    let (a, a_addr) = instance(&w, w.store.clone(), GatewayConfig::default()).await;
    let mut ws = agent_socket(a_addr, &token).await;
    let cmd = a
        .gateway
        .org(w.org_a)
        .submit(list_services(device), audit("device.command"))
        .await
        .unwrap();
    assert_eq!(
        next_command(&mut ws, Duration::from_secs(10)).await,
        Some(cmd.id)
    );
    let started = w.state.clock.now();
    cx.clock.advance(chrono::Duration::minutes(5));
    a.gateway.sweep(false).await.unwrap();
    let org = w.store.org(w.org_a).commands();
    assert_eq!(
        org.get_command(cmd.id).await.unwrap().status,
        CommandStatus::TimedOut
    );

    let result = |stdout: &str| breeze_agent_proto::CommandResult {
        command_id: cmd.id,
        status: breeze_agent_proto::CommandOutcome::Completed,
        exit_code: Some(0),
        stdout: stdout.into(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        result: None,
        error: None,
        started_at: started,
        finished_at: w.state.clock.now(),
    };
    send_result(&mut ws, &result("sshd running")).await;
    assert_eq!(
        next_ack(&mut ws, Duration::from_secs(10)).await,
        Some(cmd.id),
        "the result is acknowledged once stored"
    );
    let stored = org.get_command(cmd.id).await.unwrap();
    assert_eq!(stored.status, CommandStatus::Completed);
    assert!(stored.completed_late);
    assert_eq!(stored.stdout.as_deref(), Some("sshd running"));
    assert_eq!(stored.exit_code, Some(0));
    assert_eq!(stored.error, None);

    // Sent again (the acknowledgement was lost): stored once, acknowledged again.
    send_result(&mut ws, &result("a second run?")).await;
    assert_eq!(
        next_ack(&mut ws, Duration::from_secs(10)).await,
        Some(cmd.id)
    );
    let again = org.get_command(cmd.id).await.unwrap();
    assert_eq!(again.stdout.as_deref(), Some("sshd running"));
    assert_eq!(again.completed_at, stored.completed_at);
}

/// Sends `body` as a POST to `path` at `addr` over a connection of its own (closed after the
/// answer) and returns the raw answer: status line, headers and body.
async fn raw_post(addr: SocketAddr, path: &str, key: &str, body: &serde_json::Value) -> String {
    let body = body.to_string();
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {key}\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// SIGTERM while a Tier 3 call waits for a person (the wait here is two minutes, longer than
/// the 30 s drain): the call answers `pending_approval` with its request at once, before its
/// connection closes, and the request stays pending for a person to decide.
async fn a_drain_answers_calls_waiting_for_approval_as_pending(cx: testing::Ctx) {
    let w = world(&cx).await;
    let (key, _) = w
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
            audit("api_key.create"),
        )
        .await
        .unwrap();
    let mut config = (*w.state.config).clone();
    config.approvals.wait = Duration::from_secs(120);
    let state = AppState::new(
        w.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(breeze_server::serve(
        listener,
        Breeze::new(state),
        async move {
            let _ = stopped.await;
        },
    ));

    let key = key.expose().to_owned();
    let call = tokio::spawn(async move {
        raw_post(
            addr,
            "/mcp",
            &key,
            &json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                     "params": { "name": "manage_groups",
                                 "arguments": { "action": "create", "name": "Drained" },
                                 "_meta": { "progressToken": "p1" } } }),
        )
        .await
    });
    let org = w.store.org(w.org_a).approvals();
    eventually(10, "the call to wait for its approval", || async {
        !org.list_approvals(true, 10).await.unwrap().is_empty()
    })
    .await;
    let request = org.list_approvals(true, 10).await.unwrap()[0].id;

    let _ = stop.send(());
    let answer = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the waiting call is answered as the drain begins, not cut off at its end")
        .unwrap();
    assert!(
        answer.contains("pending_approval") && answer.contains(&request.to_string()),
        "the call answers pending_approval with its request: {answer}"
    );
    assert_eq!(
        org.get_approval(request).await.unwrap().status.as_str(),
        "pending",
        "the request stays pending for a person, to be followed with get_approval_status"
    );
    tokio::time::timeout(Duration::from_secs(35), served)
        .await
        .expect("the drain ends")
        .unwrap()
        .unwrap();
}

mod cluster {
    #[tokio::test]
    async fn a_socket_the_agent_left_for_another_instance_is_dropped_at_once() {
        super::testing::run(super::Backend::Postgres, |cx| {
            Box::pin(super::a_socket_the_agent_left_for_another_instance_is_dropped_at_once(cx))
        })
        .await;
    }
}

breeze_store::on_both_backends!(
    a_silent_socket_is_dropped_and_its_commands_requeued,
    a_result_after_the_deadline_is_kept_as_completed_late,
    a_drain_answers_calls_waiting_for_approval_as_pending,
);
