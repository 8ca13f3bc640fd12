//! The agent-facing API: enrollment, the WebSocket channel and its HTTP fallbacks (heartbeat,
//! inventory, metrics, logs, events, command results), and token rotation. The wire types are
//! `breeze-agent-proto`'s; everything an agent reports goes to the [`breeze_gateway::Gateway`].

use std::time::Duration;

use axum::{
    Json, Router,
    extract::{
        Path, State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code},
    },
    http::StatusCode,
    response::Response,
    routing::{get, post},
};
use breeze_agent_proto::{
    AgentFrame, CommandResult, EnrollRequest, EnrollResponse, EventBatch, Heartbeat,
    HeartbeatResponse, Inventory, LogBatch, MAX_FRAME_BYTES, MetricsBatch, RotateTokenResponse,
};
use breeze_auth::{DevicePrincipal, Enrollment};
use breeze_core::OsFamily;
use uuid::Uuid;

use crate::{
    ApiError, AppState,
    extract::{AgentAuth, ClientAddr, Json as JsonBody},
};

/// Waits before each new attempt to store a command result the database could not take
/// (about two minutes in all). The agent keeps the result until it is acknowledged and sends
/// it again on its next socket; retrying here stores it sooner, without waiting for that.
const RESULT_RETRIES: [Duration; 7] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
    Duration::from_secs(30),
    Duration::from_secs(60),
];

/// Stores a result that met an unavailable database again, in the background, until it is
/// stored, the database refuses it for good, or [`RESULT_RETRIES`] run out.
fn retry_result(state: &AppState, agent: &DevicePrincipal, result: CommandResult) {
    let (gateway, device, org) = (state.gateway.clone(), agent.device_id, agent.org_id);
    tokio::spawn(async move {
        let id = result.command_id;
        for wait in RESULT_RETRIES {
            tokio::time::sleep(wait).await;
            match gateway
                .handle(device, org, AgentFrame::CommandResult(result.clone()))
                .await
            {
                Ok(()) => return,
                Err(breeze_gateway::GatewayError::Store(e)) if e.is_retryable() => {
                    tracing::warn!(command = %id, error = %e, "command result still not stored; retrying");
                }
                Err(e) => {
                    tracing::error!(command = %id, error = %e, "command result cannot be stored");
                    return;
                }
            }
        }
        tracing::error!(command = %id, "command result not stored after retries; the command will time out");
    });
}

/// Read and write buffer of one agent socket.
const SOCKET_BUFFER_BYTES: usize = 8 * 1024;

/// Body limit of the batch reports, as large as such a frame may be on the socket.
const REPORT_BODY_BYTES: usize = breeze_agent_proto::MAX_REPORT_BYTES;

pub(crate) fn router() -> Router<AppState> {
    let small = Router::new()
        .route("/agents/enroll", post(enroll))
        .route("/agents/ws", get(socket))
        .route("/agents/heartbeat", post(heartbeat))
        .route("/agents/token/rotate", post(rotate));
    let reports = Router::new()
        .route("/agents/inventory", post(inventory))
        .route("/agents/metrics", post(metrics))
        .route("/agents/logs", post(logs))
        .route("/agents/events", post(events));
    // A command's result may be as large over HTTP as over the socket (file contents in
    // base64, two streams of output as escaped JSON).
    let results = Router::new().route("/agents/commands/{id}/result", post(result));
    small
        .merge(crate::body_limit(reports, REPORT_BODY_BYTES))
        .merge(crate::body_limit(
            results,
            breeze_agent_proto::MAX_FRAME_BYTES,
        ))
}

async fn enroll(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    JsonBody(req): JsonBody<EnrollRequest>,
) -> Result<(StatusCode, Json<EnrollResponse>), ApiError> {
    let who = breeze_limits::address_key(addr);
    let limit = state.config.enroll_rate_per_minute;
    match state
        .limiter
        .check(&format!("enroll:{who}"), limit, Duration::from_secs(60))
        .await
    {
        Ok(d) if !d.allowed => {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "Too many enrollment attempts from this address (limit {limit} per minute)"
                ),
            )
            .retry_after(d.retry_after_secs()));
        }
        Ok(_) => {}
        Err(e) if state.config.production => {
            return Err(ApiError::unavailable(format!("enrollment limiter: {e}")));
        }
        Err(e) => tracing::warn!(error = %e, "enrollment limiter unavailable; allowing"),
    }
    let (enrolled, token) = state
        .auth
        .enroll_device(
            &req.enrollment_key,
            Enrollment {
                hostname: req.hostname,
                machine_id: req.machine_id,
                os_family: req.os.family.parse().unwrap_or(OsFamily::Other),
                os_name: req.os.name,
                os_version: req.os.version,
                agent_version: req.agent_version,
                reenroll_token: req.reenroll_token,
                device_token: req.device_token,
            },
        )
        .await?;
    let device = &enrolled.device;
    if let Some(of) = enrolled.suspected_clone_of {
        tracing::warn!(device = %device.id, hostname = %device.hostname, suspected_clone_of = %of,
            "a machine enrolled with the machine id of an existing device and no proof of being it: a new device, flagged");
    } else {
        tracing::info!(device = %device.id, hostname = %device.hostname, reenrolled = enrolled.reenrolled, "agent enrolled");
    }
    Ok((
        StatusCode::CREATED,
        Json(EnrollResponse {
            device_id: device.id.0,
            org_id: device.org_id.0,
            site_id: device.site_id.0,
            token: token.expose().to_owned(),
            config: state.gateway.agent_config(),
            reenrolled: enrolled.reenrolled,
            possible_clone: enrolled.suspected_clone_of.is_some(),
        }),
    ))
}

async fn socket(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
    ws: WebSocketUpgrade,
) -> Response {
    // Small buffers: at fleet scale the per-socket default (128 KiB each way) is most of the
    // server's memory; frames larger than a buffer still arrive whole.
    ws.max_message_size(MAX_FRAME_BYTES)
        .read_buffer_size(SOCKET_BUFFER_BYTES)
        .write_buffer_size(SOCKET_BUFFER_BYTES)
        .on_upgrade(move |socket| run_socket(state, agent, socket))
}

/// Whether the frame `text` says it is a command result, read without building the frame: the
/// rest of the text is skipped, not parsed into samples or records.
fn names_a_command_result(text: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Tag<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    serde_json::from_str::<Tag<'_>>(text).is_ok_and(|t| t.kind == COMMAND_RESULT_TAG)
}

/// [`AgentFrame::CommandResult`]'s `type` (checked against the serializer in a test).
const COMMAND_RESULT_TAG: &str = "commandResult";

async fn run_socket(state: AppState, agent: DevicePrincipal, mut socket: WebSocket) {
    let mut registration = match state
        .gateway
        .connect(agent.device_id, agent.org_id, agent.token_hash)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(device = %agent.device_id, error = %e, "could not register an agent socket");
            return;
        }
    };
    tracing::info!(device = %agent.device_id, "agent connected");
    // Pings keep proxies from closing an idle socket; silence past the limit means the
    // connection is dead even though writes still succeed (they land in kernel buffers), and
    // a write that blocks that long (the peer reads nothing) means the same.
    let silence_limit = state.gateway.silence_limit();
    let mut ping = tokio::time::interval(state.gateway.ping_interval());
    ping.tick().await;
    let mut last_heard = tokio::time::Instant::now();
    loop {
        tokio::select! {
            frame = registration.outbox.recv() => {
                // None: a newer socket for the same device replaced this one, or the token
                // this one was opened with is no longer the device's.
                let Some(frame) = frame else {
                    let _ = socket.send(Message::Close(Some(CloseFrame {
                        code: close_code::POLICY,
                        reason: "replaced by a newer connection, or the device token changed".into(),
                    }))).await;
                    break;
                };
                let text = match serde_json::to_string(&frame) {
                    Ok(t) => t,
                    Err(e) => { tracing::error!(error = %e, "unserialisable frame"); continue; }
                };
                match tokio::time::timeout(silence_limit, socket.send(Message::Text(text.into()))).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break,
                    Err(_) => {
                        tracing::warn!(device = %agent.device_id, "agent socket took no frame for {} s; dropping it", silence_limit.as_secs());
                        break;
                    }
                }
            }
            msg = socket.recv() => {
                let Some(Ok(msg)) = msg else { break };
                last_heard = tokio::time::Instant::now();
                let text = match msg {
                    Message::Text(t) => t,
                    Message::Close(_) => break,
                    _ => continue,
                };
                // A report is held to the HTTP body limit; only a command result may be as
                // large as a frame. Told from its type alone, before anything is built of it.
                if text.len() > REPORT_BODY_BYTES && !names_a_command_result(text.as_str()) {
                    tracing::warn!(device = %agent.device_id, bytes = text.len(),
                        "refused an agent report larger than {REPORT_BODY_BYTES} bytes");
                    continue;
                }
                match serde_json::from_str::<AgentFrame>(text.as_str()) {
                    Ok(frame) => {
                        // A result the database could not take is retried here; it is
                        // acknowledged (by the gateway) only once stored.
                        let result = match &frame {
                            AgentFrame::CommandResult(r) => Some(r.clone()),
                            _ => None,
                        };
                        match state.gateway.handle(agent.device_id, agent.org_id, frame).await {
                            Ok(()) => {}
                            Err(breeze_gateway::GatewayError::Store(e)) if e.is_retryable() && result.is_some() => {
                                tracing::warn!(device = %agent.device_id, error = %e, "database unavailable for a command result; retrying");
                                if let Some(result) = result {
                                    retry_result(&state, &agent, result);
                                }
                            }
                            Err(e) => tracing::warn!(device = %agent.device_id, error = %e, "could not store an agent report"),
                        }
                    }
                    Err(e) => tracing::warn!(device = %agent.device_id, error = %e, "malformed agent frame"),
                }
            }
            () = state.gateway.closing() => {
                let _ = socket.send(Message::Close(None)).await;
                break;
            }
            _ = ping.tick() => {
                if last_heard.elapsed() > silence_limit {
                    tracing::warn!(device = %agent.device_id, "nothing from the agent for {} s; dropping its socket as dead", silence_limit.as_secs());
                    break;
                }
                let sent = tokio::time::timeout(silence_limit, socket.send(Message::Ping(Vec::new().into()))).await;
                if !matches!(sent, Ok(Ok(()))) {
                    break;
                }
            }
        }
    }
    tracing::info!(device = %agent.device_id, "agent disconnected");
}

async fn heartbeat(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
    JsonBody(hb): JsonBody<Heartbeat>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    Ok(Json(
        state
            .gateway
            .http_heartbeat(agent.device_id, agent.org_id, hb)
            .await?,
    ))
}

async fn report(
    state: &AppState,
    agent: DevicePrincipal,
    frame: AgentFrame,
) -> Result<StatusCode, ApiError> {
    state
        .gateway
        .handle(agent.device_id, agent.org_id, frame)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn inventory(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
    JsonBody(inv): JsonBody<Inventory>,
) -> Result<StatusCode, ApiError> {
    report(&state, agent, AgentFrame::Inventory(Box::new(inv))).await
}

// Batch limits and sample checks are the gateway's, the same over the socket.

async fn metrics(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
    JsonBody(batch): JsonBody<MetricsBatch>,
) -> Result<StatusCode, ApiError> {
    report(&state, agent, AgentFrame::Metrics(batch)).await
}

async fn logs(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
    JsonBody(batch): JsonBody<LogBatch>,
) -> Result<StatusCode, ApiError> {
    report(&state, agent, AgentFrame::Logs(batch)).await
}

async fn events(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
    JsonBody(batch): JsonBody<EventBatch>,
) -> Result<StatusCode, ApiError> {
    report(&state, agent, AgentFrame::Events(batch)).await
}

async fn result(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
    Path(id): Path<Uuid>,
    JsonBody(result): JsonBody<CommandResult>,
) -> Result<StatusCode, ApiError> {
    if result.command_id != id {
        return Err(ApiError::bad_request(
            "the result's commandId does not match the URL",
        ));
    }
    report(&state, agent, AgentFrame::CommandResult(result)).await
}

async fn rotate(
    State(state): State<AppState>,
    AgentAuth(agent): AgentAuth,
) -> Result<Json<RotateTokenResponse>, ApiError> {
    let token = state.auth.rotate_device_token(agent.device_id).await?;
    Ok(Json(RotateTokenResponse {
        token: token.expose().to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_told_a_command_result_by_its_type_alone() {
        let result = serde_json::json!({ "type": COMMAND_RESULT_TAG,
            "commandId": uuid::Uuid::nil(), "status": "completed", "stdout": "x",
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z" });
        assert!(matches!(
            serde_json::from_value::<AgentFrame>(result.clone()),
            Ok(AgentFrame::CommandResult(_))
        ));
        assert!(names_a_command_result(&result.to_string()));
        let big = serde_json::json!({ "type": "metrics", "samples": vec![serde_json::json!({
            "at": "2026-01-01T00:00:00Z", "cpuPercent": 1.0 }); 30_000] });
        assert!(!names_a_command_result(&big.to_string()));
        assert!(!names_a_command_result("{\"samples\": []}"));
        assert!(!names_a_command_result("not json"));
    }
}
