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
        reenroll_token: None,
        device_token: None,
    }
}

/// Enrolls with `server` using `key`, writes the config file at `config_path`, then sends the
/// first inventory (best effort: a failure there is logged, not returned).
///
/// An enrollment key alone never makes this machine an existing device. It re-enrolls the
/// device it already is when `reenroll_token` (an administrator's one-time token for that
/// device) is given, or when a config file for the same server is at `config_path` (its
/// device token is the proof). Otherwise a machine whose id a device of the organization
/// already carries becomes a new device, flagged as a possible clone; that is logged.
pub async fn enroll(
    server: &str,
    key: &str,
    config_path: &Path,
    clock: &dyn Clock,
    reenroll_token: Option<&str>,
) -> Result<AgentFile, AgentError> {
    let api = Api::new(server, String::new())?;
    let mut request = enroll_request(key);
    request.reenroll_token = reenroll_token.map(str::to_owned);
    request.device_token = AgentFile::load(config_path)
        .ok()
        .filter(|f| f.server_url == api.server_url())
        .map(|f| f.token);
    let response = api.enroll(&request).await?;
    if response.possible_clone {
        tracing::warn!(
            device_id = %response.device_id,
            "a device with this machine's id is already enrolled; this machine was enrolled as a \
             new device, flagged as a possible clone. To make it that device instead, ask an \
             administrator for a re-enroll token and enroll with --reenroll-token"
        );
    } else if response.reenrolled {
        tracing::info!(device_id = %response.device_id, "re-enrolled as the existing device");
    }
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
