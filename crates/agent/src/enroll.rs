//! Enrollment and token rotation.

use std::path::Path;

use breeze_agent_proto::{EnrollRequest, Heartbeat};
use breeze_core::Clock;

use crate::api::Api;
use crate::config::{AgentFile, redact};
use crate::error::AgentError;
use crate::system;

/// The enrollment request describing this machine.
pub fn enroll_request(enrollment_key: &str) -> EnrollRequest {
    EnrollRequest {
        enrollment_key: enrollment_key.to_owned(),
        hostname: system::hostname(),
        machine_id: system::machine_id(),
        os: system::os_info(),
        agent_version: crate::AGENT_VERSION.to_owned(),
    }
}

/// Enrolls with `server` using `key`, writes the config file at `config_path`, then sends the
/// first inventory (best effort: a failure there is logged, not returned).
pub async fn enroll(
    server: &str,
    key: &str,
    config_path: &Path,
    clock: &dyn Clock,
) -> Result<AgentFile, AgentError> {
    let api = Api::new(server, String::new())?;
    let response = api.enroll(&enroll_request(key)).await?;
    let file = AgentFile {
        server_url: api.server_url().to_owned(),
        device_id: response.device_id,
        org_id: response.org_id,
        site_id: response.site_id,
        token: response.token,
        config: response.config,
        state_dir: None,
        patching: None,
        log_watches: Vec::new(),
    };
    file.save(config_path)?;
    tracing::info!(device_id = %file.device_id, config = %config_path.display(), "enrolled");
    api.set_token(file.token.clone());
    let inventory = system::inventory::collect(clock);
    if let Err(e) = api.inventory(&inventory).await {
        tracing::warn!(error = %e, "enrolled, but the first inventory could not be sent; it will be sent when the agent runs");
    }
    Ok(file)
}

/// Rotates the device token: asks for a new one, writes it to the config file atomically
/// before using it, then confirms it with one heartbeat (the server retires the old token on
/// the new one's first use).
pub async fn rotate_token(config_path: &Path) -> Result<AgentFile, AgentError> {
    let mut file = AgentFile::load(config_path)?;
    let api = Api::new(&file.server_url, file.token.clone())?;
    let response = api.rotate_token().await?;
    file.token = response.token;
    file.save(config_path)?;
    tracing::info!(token = %redact(&file.token), "new device token saved");
    api.set_token(file.token.clone());
    let heartbeat = Heartbeat {
        agent_version: crate::AGENT_VERSION.to_owned(),
        uptime_secs: system::heartbeat::uptime_secs(),
        pending_reboot: system::heartbeat::pending_reboot(),
        logged_in_users: system::heartbeat::logged_in_users(),
        running_commands: Vec::new(),
        applied_policy: None,
    };
    if let Err(e) = api.heartbeat(&heartbeat).await {
        tracing::warn!(error = %e, "the new token is saved but its first use failed; the agent will use it on its next connection");
    }
    Ok(file)
}
