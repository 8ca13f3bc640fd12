//! The agent's channels against tiny in-test servers: the WebSocket (bearer header, welcome,
//! command → commandStarted → commandResult, a repeated delivery answered from the journal, a
//! result sent again on the next socket until acknowledged)
//! and the HTTP fallback when the upgrade is refused (heartbeat hands out a command, the
//! result is posted to its endpoint).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report
#![allow(clippy::result_large_err)] // tungstenite's handshake callback signature

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use breeze_agent::config::AgentFile;
use breeze_agent::logship::LogControl;
use breeze_agent::runtime;
use breeze_agent_proto::{
    AgentConfig, AgentFrame, Command, CommandKind, CommandOutcome, CommandResult,
    HeartbeatResponse, LogLevel, ServerFrame, Shell,
};
use breeze_core::SystemClock;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const TOKEN: &str = "brz_testtokentesttokentesttokentesttokentestt";

fn write_config(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("etc").join("agent.json");
    AgentFile {
        server_url: format!("http://127.0.0.1:{port}"),
        device_id: Uuid::now_v7(),
        org_id: Uuid::now_v7(),
        site_id: Uuid::now_v7(),
        token: TOKEN.into(),
        config: AgentConfig {
            heartbeat_interval_secs: 5,
            metrics_interval_secs: 1,
            inventory_interval_secs: 3600,
            metrics_batch_size: 2,
        },
        state_dir: None,
        patching: None,
        log_watches: Vec::new(),
    }
    .save(&path)
    .unwrap();
    path
}

fn start_agent(config: PathBuf) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let clock = Arc::new(SystemClock);
    let logs = Arc::new(LogControl::new(clock.clone(), LogLevel::Warn));
    let token = shutdown.clone();
    let handle = tokio::spawn(async move {
        runtime::run(&config, &[], clock, logs, token)
            .await
            .unwrap();
    });
    (shutdown, handle)
}

fn shell_command(line: &str) -> Command {
    Command {
        id: Uuid::now_v7(),
        timeout_secs: 30,
        output_cap_bytes: 4096,
        kind: CommandKind::Shell {
            shell: Shell::Sh,
            command: line.into(),
        },
        protected_paths: Vec::new(),
    }
}

async fn next_frame<S>(ws: &mut S) -> AgentFrame
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("a frame within 20 s")
            .expect("socket open")
            .expect("readable");
        if let Message::Text(text) = msg {
            return serde_json::from_str(text.as_str()).expect("an AgentFrame");
        }
    }
}

#[tokio::test]
async fn websocket_welcome_command_started_result() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), port);
    let (shutdown, agent) = start_agent(config);

    let (stream, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .unwrap()
        .unwrap();
    let seen = Arc::new(Mutex::new((String::new(), String::new())));
    let record = seen.clone();
    let mut ws =
        tokio_tungstenite::accept_hdr_async(stream, move |req: &Request, resp: Response| {
            let auth = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            *record.lock().unwrap() = (req.uri().path().to_owned(), auth);
            Ok(resp)
        })
        .await
        .unwrap();
    {
        let (path, auth) = seen.lock().unwrap().clone();
        assert_eq!(path, "/api/v1/agents/ws");
        assert_eq!(auth, format!("Bearer {TOKEN}"));
    }

    let welcome = ServerFrame::Welcome {
        device_id: Uuid::now_v7(),
        config: AgentConfig::default(),
    };
    ws.send(Message::Text(
        serde_json::to_string(&welcome).unwrap().into(),
    ))
    .await
    .unwrap();
    let marker = dir.path().join("ran");
    let command = shell_command(&format!("echo once >> {}; echo hi", marker.display()));
    let frame = serde_json::to_string(&ServerFrame::Command(command.clone())).unwrap();
    ws.send(Message::Text(frame.clone().into())).await.unwrap();

    let mut started = false;
    let result: CommandResult = loop {
        match next_frame(&mut ws).await {
            AgentFrame::CommandStarted { command_id } if command_id == command.id => {
                started = true;
            }
            AgentFrame::CommandResult(r) if r.command_id == command.id => break r,
            _ => {}
        }
    };
    assert!(started, "commandStarted came before commandResult");
    assert_eq!(result.status, CommandOutcome::Completed);
    assert_eq!(result.stdout, "hi\n");
    assert_eq!(result.exit_code, Some(0));

    // The same command again: the stored result comes back, nothing runs twice.
    ws.send(Message::Text(frame.into())).await.unwrap();
    let again = loop {
        match next_frame(&mut ws).await {
            AgentFrame::CommandStarted { command_id } if command_id == command.id => {
                panic!("a repeated delivery started the command again")
            }
            AgentFrame::CommandResult(r) if r.command_id == command.id => break r,
            _ => {}
        }
    };
    assert_eq!(again, result);
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "once\n");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(15), agent)
        .await
        .expect("the agent stops on shutdown")
        .unwrap();
}

/// Accepts the agent's next socket on `listener` and sends the welcome.
async fn accept_agent(
    listener: &TcpListener,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // The agent's HTTP fallback (events, metrics) knocks too while the socket is down.
    let mut ws = loop {
        let (stream, _) = tokio::time::timeout_at(deadline, listener.accept())
            .await
            .expect("the agent connects within 20 s")
            .unwrap();
        if let Ok(ws) = tokio_tungstenite::accept_async(stream).await {
            break ws;
        }
    };
    let welcome = ServerFrame::Welcome {
        device_id: Uuid::now_v7(),
        config: AgentConfig::default(),
    };
    ws.send(Message::Text(
        serde_json::to_string(&welcome).unwrap().into(),
    ))
    .await
    .unwrap();
    ws
}

/// The next result the agent sends on `ws` within `patience`, if any.
async fn next_result<S>(ws: &mut S, patience: Duration) -> Option<CommandResult>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .ok()??
            .ok()?;
        if let Message::Text(text) = msg
            && let Ok(AgentFrame::CommandResult(r)) = serde_json::from_str(text.as_str())
        {
            return Some(r);
        }
    }
}

/// A result the server read but never acknowledged (it died before storing it) is sent again
/// on the agent's next socket, once, and not after the acknowledgement; the command does not
/// run again.
#[tokio::test]
async fn an_unacknowledged_result_is_sent_again_on_the_next_socket() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), port);
    let (shutdown, agent) = start_agent(config);

    let marker = dir.path().join("ran");
    let command = shell_command(&format!("echo once >> {}; echo hi", marker.display()));
    let mut first = accept_agent(&listener).await;
    first
        .send(Message::Text(
            serde_json::to_string(&ServerFrame::Command(command.clone()))
                .unwrap()
                .into(),
        ))
        .await
        .unwrap();
    let result = next_result(&mut first, Duration::from_secs(20))
        .await
        .expect("the result on the first socket");
    assert_eq!(result.command_id, command.id);
    // The instance dies with the result read and not stored: no acknowledgement.
    drop(first);

    let mut second = accept_agent(&listener).await;
    let again = next_result(&mut second, Duration::from_secs(20))
        .await
        .expect("the unacknowledged result is sent again on the next socket");
    assert_eq!(again, result);
    second
        .send(Message::Text(
            serde_json::to_string(&ServerFrame::ResultAck {
                command_id: command.id,
            })
            .unwrap()
            .into(),
        ))
        .await
        .unwrap();
    // Give the acknowledgement a moment to be read before the socket goes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(second);

    let mut third = accept_agent(&listener).await;
    assert_eq!(
        next_result(&mut third, Duration::from_secs(4)).await,
        None,
        "an acknowledged result is not sent again"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "once\n");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(15), agent)
        .await
        .expect("the agent stops on shutdown")
        .unwrap();
}

#[derive(Clone, Default)]
struct Fallback {
    pending: Arc<Mutex<Vec<Command>>>,
    results: Arc<Mutex<Vec<(Uuid, CommandResult)>>>,
    heartbeats: Arc<Mutex<u32>>,
    bearer_ok: Arc<Mutex<bool>>,
}

#[tokio::test]
async fn http_fallback_when_the_socket_is_refused() {
    let state = Fallback::default();
    let command = shell_command("echo over-http");
    state.pending.lock().unwrap().push(command.clone());
    *state.bearer_ok.lock().unwrap() = true;
    let app = axum::Router::new()
        .route(
            "/api/v1/agents/ws",
            get(|| async {
                (
                    StatusCode::UNAUTHORIZED,
                    Json(serde_json::json!({"error":{"code":"unauthorized","message":"no"}})),
                )
            }),
        )
        .route(
            "/api/v1/agents/heartbeat",
            post(|State(s): State<Fallback>, headers: HeaderMap| async move {
                if headers.get("authorization").and_then(|v| v.to_str().ok())
                    != Some(&format!("Bearer {TOKEN}"))
                {
                    *s.bearer_ok.lock().unwrap() = false;
                }
                *s.heartbeats.lock().unwrap() += 1;
                let commands = std::mem::take(&mut *s.pending.lock().unwrap());
                Json(HeartbeatResponse {
                    commands,
                    config: None,
                    policy: None,
                })
            }),
        )
        .route(
            "/api/v1/agents/commands/{id}/result",
            post(
                |State(s): State<Fallback>,
                 UrlPath(id): UrlPath<Uuid>,
                 Json(result): Json<CommandResult>| async move {
                    s.results.lock().unwrap().push((id, result));
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/api/v1/agents/inventory",
            post(|| async { StatusCode::NO_CONTENT }),
        )
        .route(
            "/api/v1/agents/metrics",
            post(|| async { StatusCode::NO_CONTENT }),
        )
        .route(
            "/api/v1/agents/logs",
            post(|| async { StatusCode::NO_CONTENT }),
        )
        .with_state(state.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), port);
    let (shutdown, agent) = start_agent(config);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if !state.results.lock().unwrap().is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no result over HTTP"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (id, result) = state.results.lock().unwrap()[0].clone();
    assert_eq!(id, command.id);
    assert_eq!(result.status, CommandOutcome::Completed);
    assert_eq!(result.stdout, "over-http\n");
    assert!(*state.heartbeats.lock().unwrap() >= 1);
    assert!(*state.bearer_ok.lock().unwrap());

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(15), agent)
        .await
        .expect("the agent stops on shutdown")
        .unwrap();
}

#[tokio::test]
async fn enrollment_writes_the_config_and_reports_server_errors() {
    use breeze_agent_proto::{EnrollRequest, EnrollResponse};
    let inventories = Arc::new(Mutex::new(0u32));
    let counted = inventories.clone();
    let app = axum::Router::new()
        .route(
            "/api/v1/agents/enroll",
            post(|Json(req): Json<EnrollRequest>| async move {
                if req.enrollment_key != "good" {
                    return (
                        StatusCode::UNAUTHORIZED,
                        Json(serde_json::json!({"error":{"code":"invalid_enrollment_key","message":"the enrollment key is not valid"}})),
                    );
                }
                assert!(!req.hostname.is_empty());
                assert_eq!(req.agent_version, breeze_agent::AGENT_VERSION);
                let response = EnrollResponse {
                    device_id: Uuid::now_v7(),
                    org_id: Uuid::now_v7(),
                    site_id: Uuid::now_v7(),
                    token: TOKEN.into(),
                    config: AgentConfig::default(),
                    reenrolled: false,
                    possible_clone: false,
                };
                (StatusCode::CREATED, Json(serde_json::to_value(response).unwrap()))
            }),
        )
        .route(
            "/api/v1/agents/inventory",
            post(move |headers: HeaderMap| async move {
                assert_eq!(
                    headers.get("authorization").and_then(|v| v.to_str().ok()),
                    Some(format!("Bearer {TOKEN}").as_str())
                );
                *counted.lock().unwrap() += 1;
                StatusCode::NO_CONTENT
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let server = format!("http://127.0.0.1:{port}/");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conf").join("agent.json");

    let err = breeze_agent::enroll::enroll(&server, "bad", &path, &SystemClock, None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("the enrollment key is not valid"),
        "{err}"
    );
    assert!(!path.exists());

    let file = breeze_agent::enroll::enroll(&server, "good", &path, &SystemClock, None)
        .await
        .unwrap();
    assert_eq!(file.token, TOKEN);
    assert_eq!(file.server_url, format!("http://127.0.0.1:{port}"));
    assert_eq!(AgentFile::load(&path).unwrap(), file);
    assert_eq!(*inventories.lock().unwrap(), 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
