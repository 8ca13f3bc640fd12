//! The HTTP side of the contract: enrollment, token rotation and the fallback endpoints used
//! while the WebSocket is down. Every call but enrollment carries `Authorization: Bearer`.

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use breeze_agent_proto::{
    CommandResult, EnrollRequest, EnrollResponse, EventBatch, Heartbeat, HeartbeatResponse,
    Inventory, LogBatch, MetricsBatch, RotateTokenResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::error::AgentError;

/// Paths of the agent endpoints, relative to the server URL.
pub mod paths {
    pub const ENROLL: &str = "/api/v1/agents/enroll";
    pub const WS: &str = "/api/v1/agents/ws";
    pub const HEARTBEAT: &str = "/api/v1/agents/heartbeat";
    pub const INVENTORY: &str = "/api/v1/agents/inventory";
    pub const METRICS: &str = "/api/v1/agents/metrics";
    pub const LOGS: &str = "/api/v1/agents/logs";
    pub const EVENTS: &str = "/api/v1/agents/events";
    pub const ROTATE: &str = "/api/v1/agents/token/rotate";

    /// `POST /api/v1/agents/commands/{id}/result`.
    pub fn command_result(id: uuid::Uuid) -> String {
        format!("/api/v1/agents/commands/{id}/result")
    }
}

/// The server's URL without a trailing slash, checked to be http(s).
pub fn normalize_server_url(url: &str) -> Result<String, AgentError> {
    let trimmed = url.trim().trim_end_matches('/');
    if trimmed.starts_with("http://") || trimmed.starts_with("https://") {
        Ok(trimmed.to_owned())
    } else {
        Err(AgentError::BadUrl(url.to_owned()))
    }
}

/// The WebSocket URL for a server URL: `http` → `ws`, `https` → `wss`.
pub fn ws_url(server_url: &str) -> Result<String, AgentError> {
    let base = normalize_server_url(server_url)?;
    let ws = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        return Err(AgentError::BadUrl(server_url.to_owned()));
    };
    Ok(format!("{ws}{}", paths::WS))
}

/// A client for one server and one device token.
#[derive(Debug)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: RwLock<String>,
}

impl Api {
    /// A client for `server_url` (http or https) presenting `token`.
    pub fn new(server_url: &str, token: String) -> Result<Api, AgentError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(format!("breeze-agent/{}", crate::AGENT_VERSION))
            .build()
            .map_err(|e| AgentError::Transport(e.to_string()))?;
        Ok(Api {
            http,
            base: normalize_server_url(server_url)?,
            token: RwLock::new(token),
        })
    }

    /// The server URL this client talks to.
    pub fn server_url(&self) -> &str {
        &self.base
    }

    /// The token presented now.
    pub fn token(&self) -> String {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Presents `token` from now on.
    pub fn set_token(&self, token: String) {
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = token;
    }

    /// `POST /api/v1/agents/enroll` (no token: the enrollment key is in the body).
    pub async fn enroll(&self, request: &EnrollRequest) -> Result<EnrollResponse, AgentError> {
        let bytes = self.post(paths::ENROLL, request, false).await?;
        parse(&bytes)
    }

    /// `POST /api/v1/agents/heartbeat`: the answer carries the pending commands.
    pub async fn heartbeat(&self, heartbeat: &Heartbeat) -> Result<HeartbeatResponse, AgentError> {
        let bytes = self.post(paths::HEARTBEAT, heartbeat, true).await?;
        parse(&bytes)
    }

    /// `POST /api/v1/agents/inventory`.
    pub async fn inventory(&self, inventory: &Inventory) -> Result<(), AgentError> {
        self.post(paths::INVENTORY, inventory, true).await.map(drop)
    }

    /// `POST /api/v1/agents/metrics`.
    pub async fn metrics(&self, batch: &MetricsBatch) -> Result<(), AgentError> {
        self.post(paths::METRICS, batch, true).await.map(drop)
    }

    /// `POST /api/v1/agents/logs`.
    pub async fn logs(&self, batch: &LogBatch) -> Result<(), AgentError> {
        self.post(paths::LOGS, batch, true).await.map(drop)
    }

    /// `POST /api/v1/agents/events`.
    pub async fn events(&self, batch: &EventBatch) -> Result<(), AgentError> {
        self.post(paths::EVENTS, batch, true).await.map(drop)
    }

    /// `POST /api/v1/agents/commands/{id}/result`.
    pub async fn command_result(&self, result: &CommandResult) -> Result<(), AgentError> {
        self.post(&paths::command_result(result.command_id), result, true)
            .await
            .map(drop)
    }

    /// `POST /api/v1/agents/token/rotate` with body `{}`.
    pub async fn rotate_token(&self) -> Result<RotateTokenResponse, AgentError> {
        let bytes = self
            .post(paths::ROTATE, &serde_json::json!({}), true)
            .await?;
        parse(&bytes)
    }

    async fn post<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
        bearer: bool,
    ) -> Result<Vec<u8>, AgentError> {
        let body = serde_json::to_vec(body).map_err(|e| AgentError::Transport(e.to_string()))?;
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if bearer {
            request = request.bearer_auth(self.token());
        }
        let response = request
            .send()
            .await
            .map_err(|e| AgentError::Transport(describe_reqwest(&e)))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| AgentError::Transport(describe_reqwest(&e)))?
            .to_vec();
        if status.is_success() {
            return Ok(bytes);
        }
        let (code, message) = error_body(&bytes).unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&bytes);
            let text: String = text.chars().take(300).collect();
            (
                format!("http_{}", status.as_u16()),
                if text.trim().is_empty() {
                    status.to_string()
                } else {
                    text
                },
            )
        });
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(AgentError::Unauthorized(message));
        }
        Err(AgentError::Server {
            status: status.as_u16(),
            code,
            message,
        })
    }
}

/// `{"error":{"code","message"}}` → (code, message).
pub fn error_body(bytes: &[u8]) -> Option<(String, String)> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let error = value.get("error")?;
    let message = error.get("message")?.as_str()?.to_owned();
    let code = error
        .get("code")
        .and_then(|c| c.as_str())
        .unwrap_or("error")
        .to_owned();
    Some((code, message))
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AgentError> {
    serde_json::from_slice(bytes)
        .map_err(|e| AgentError::Transport(format!("unexpected answer from the server: {e}")))
}

fn describe_reqwest(error: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The id in a result path, for logs and tests.
pub fn result_path_id(path: &str) -> Option<Uuid> {
    path.strip_prefix("/api/v1/agents/commands/")?
        .strip_suffix("/result")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            ws_url("http://127.0.0.1:3000/").unwrap(),
            "ws://127.0.0.1:3000/api/v1/agents/ws"
        );
        assert_eq!(
            ws_url("https://rmm.example.com").unwrap(),
            "wss://rmm.example.com/api/v1/agents/ws"
        );
        assert!(ws_url("ftp://x").is_err());
        let id = Uuid::new_v4();
        assert_eq!(result_path_id(&paths::command_result(id)), Some(id));
    }

    #[test]
    fn error_bodies() {
        let body = br#"{"error":{"code":"invalid_key","message":"the enrollment key is unknown"}}"#;
        assert_eq!(
            error_body(body),
            Some((
                "invalid_key".to_owned(),
                "the enrollment key is unknown".to_owned()
            ))
        );
        assert_eq!(error_body(b"nope"), None);
    }
}
