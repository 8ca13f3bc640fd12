//! Running a command on a device through the gateway, the way every agent-backed tool does:
//! confirm the device is the caller's and online, queue the command (audited), wait a bounded
//! time while forwarding progress, and describe the outcome — finished, or still running with
//! its id. An offline device is a clear error before anything is queued; nothing ever hangs.

use std::time::Duration;

use breeze_agent_proto::paths::{self, ProtectedSet};
use breeze_agent_proto::{CommandKind, DEFAULT_OUTPUT_CAP_BYTES};
use breeze_core::{AuditEvent, CommandStatus, Device, DeviceStatus};
use breeze_gateway::{GatewayError, Progress};
use breeze_store::{CommandRecord, NewCommand};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::devices::find_device;
use crate::reach::Reach;
use crate::{ErrorCode, ToolCx, ToolError};

/// How long a command may wait for an agent that is online but reconnecting (one heartbeat
/// interval and a margin) before it counts as undelivered.
const QUEUE_TTL_SECS: i64 = 75;

/// How a tool runs its command.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    /// The agent stops the command after this long.
    pub timeout_secs: u32,
    /// The tool call returns after this long even if the command is still running.
    pub wait: Duration,
    pub output_cap_bytes: u64,
    pub script: Option<(Uuid, String)>,
    /// The audit action, e.g. `device.command`.
    pub audit_action: &'static str,
}

impl RunOptions {
    pub(crate) fn new(timeout_secs: u32, wait_secs: u64) -> Self {
        Self {
            timeout_secs,
            wait: Duration::from_secs(wait_secs),
            output_cap_bytes: DEFAULT_OUTPUT_CAP_BYTES,
            script: None,
            audit_action: "device.command",
        }
    }
}

/// What a tool reports about a command.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CommandView {
    pub command_id: String,
    pub device_id: String,
    pub hostname: String,
    /// pending, sent, running (still going when the call returned), completed, failed,
    /// timed_out or cancelled.
    #[schemars(schema_with = "command_status_schema")]
    pub status: CommandStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Whether stdout or stderr was cut at the output cap (always present).
    pub output_truncated: bool,
    /// The structured answer of typed operations.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CommandView {
    pub(crate) fn new(device: &Device, c: CommandRecord) -> Self {
        let message = if !c.is_terminal() {
            Some(format!(
                "The command is still {} on {}; its result will be recorded when it finishes (command id {}).",
                c.status, device.hostname, c.id
            ))
        } else if c.completed_late {
            Some(format!(
                "The command ran on {}, but its result arrived after the command's deadline (command id {}).",
                device.hostname, c.id
            ))
        } else {
            None
        };
        let duration_ms = c
            .started_at
            .zip(c.completed_at)
            .map(|(s, e)| (e - s).num_milliseconds());
        Self {
            command_id: c.id.to_string(),
            device_id: device.id.to_string(),
            hostname: device.hostname.clone(),
            status: c.status,
            exit_code: c.exit_code,
            output_truncated: c.stdout_truncated || c.stderr_truncated,
            stdout: c.stdout.filter(|s| !s.is_empty()),
            stderr: c.stderr.filter(|s| !s.is_empty()),
            result: c.result,
            error: c.error,
            duration_ms,
            message,
        }
    }

    /// Whether the command finished successfully.
    pub(crate) fn completed(&self) -> bool {
        self.status == CommandStatus::Completed
    }
}

/// Every [`CommandStatus`] by its wire name.
fn command_status_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = CommandStatus::ALL.iter().map(|s| s.as_str()).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
}

/// The caller's device, online; otherwise the error a tool returns.
pub(crate) async fn online_device<R: Reach>(
    cx: &ToolCx<'_, R>,
    device_id: &str,
) -> Result<Device, ToolError> {
    let device = find_device(cx, device_id).await?;
    if device.status != DeviceStatus::Online {
        let seen = device
            .last_seen_at
            .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339());
        return Err(ToolError::new(
            ErrorCode::UpstreamError,
            format!(
                "Device {} is not online (status: {}, last seen: {seen}); nothing was sent",
                device.hostname, device.status
            ),
        )
        .hint("try again when the device is back online"));
    }
    Ok(device)
}

pub(crate) fn gateway_error(e: GatewayError) -> ToolError {
    match e {
        GatewayError::Store(s) => s.into(),
    }
}

/// Queues `kind` on `device` and waits as `opts` say.
pub(crate) async fn run<R: Reach>(
    cx: &ToolCx<'_, R>,
    device: &Device,
    kind: CommandKind,
    opts: RunOptions,
) -> Result<CommandView, ToolError> {
    check_org_protected(cx, &kind).await?;
    let audit = AuditEvent::new(cx.actor.clone(), opts.audit_action, "device_command")
        .request(cx.request_id.clone());
    let cmd = cx
        .fleet()
        .submit(
            NewCommand {
                device_id: device.id,
                kind,
                timeout_secs: opts.timeout_secs,
                output_cap_bytes: opts.output_cap_bytes,
                queue_ttl: chrono::Duration::seconds(QUEUE_TTL_SECS),
                script: opts.script,
                created_by: cx.actor.to_string(),
            },
            audit,
        )
        .await
        .map_err(gateway_error)?;
    let done = cx
        .fleet()
        .wait(cmd.id, opts.wait, |p| match p {
            Progress::Started => {
                cx.report(0.0, None, Some(format!("running on {}", device.hostname)));
            }
            Progress::Step(s) => cx.report(s.progress, s.total, s.message.clone()),
        })
        .await
        .map_err(gateway_error)?;
    Ok(CommandView::new(device, done))
}

/// A command's failure as a tool error (for tools whose whole answer is the command's result).
pub(crate) fn require_completed(view: CommandView) -> Result<CommandView, ToolError> {
    match failure(&view) {
        Some(error) => Err(error),
        None => Ok(view),
    }
}

/// The tool error for a command that ended without completing (failed, timed out, cancelled),
/// naming the device's reason; `None` while it runs or once it completed.
pub(crate) fn failure(view: &CommandView) -> Option<ToolError> {
    if view.completed() || !view.status.is_terminal() {
        return None;
    }
    let why = view
        .error
        .clone()
        .or_else(|| view.stderr.clone())
        .unwrap_or_else(|| format!("the command ended {}", view.status));
    let exit = view
        .exit_code
        .map(|c| format!(" (exit code {c})"))
        .unwrap_or_default();
    let mut error = ToolError::new(
        ErrorCode::UpstreamError,
        format!(
            "{} on {}: {why}{exit}; command id {}",
            view.status.as_str().replace('_', " "),
            view.hostname,
            view.command_id
        ),
    )
    .hint("the device ran the command and reported this failure; fix its cause on the device or choose another action");
    // The device answered: trying the same again gets the same answer.
    error.retryable = view.status == breeze_core::CommandStatus::TimedOut;
    Some(error)
}

/// Locations the server refuses besides the protected paths the agent also enforces: kernel
/// interfaces and container state, whole. The agent allows, say, `/proc/cpuinfo`; tools do not
/// ask for it.
const SERVER_BLOCKED: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/var/run",
    "/run/secrets",
    "/var/lib/docker",
];

/// Windows locations refused (the agent's list is for Unix paths).
const WINDOWS_BLOCKED: &[&str] = &["c:\\windows\\system32\\config", "c:\\windows\\sam"];

fn builtin_protected() -> &'static ProtectedSet {
    static SET: std::sync::LazyLock<ProtectedSet> = std::sync::LazyLock::new(ProtectedSet::builtin);
    &SET
}

fn protected(field: &str, path: &str) -> ToolError {
    ToolError::new(
        ErrorCode::Forbidden,
        format!("{field}: {}", paths::protected_message(path)),
    )
}

/// Checks a path argument: at most 4096 characters, no NUL, no `..` component, and, once
/// normalized (`//etc/./shadow` is `/etc/shadow`), not a protected path nor under a location
/// no tool may touch. This is the server's first, lexical wall; the agent checks again on the
/// device, following links, and is the one that cannot be talked around.
pub(crate) fn safe_path(field: &str, path: &str) -> Result<(), ToolError> {
    if path.is_empty() || path.len() > paths::MAX_PATH_BYTES {
        return Err(ToolError::invalid(format!(
            "{field}: must be 1 to 4096 characters"
        )));
    }
    if path.contains('\0') {
        return Err(ToolError::invalid(format!("{field}: contains a NUL byte")));
    }
    if path.split(['/', '\\']).any(|c| c == "..") {
        return Err(ToolError::invalid(format!(
            "{field}: \"..\" components are not allowed; give an absolute path"
        )));
    }
    if path.starts_with('/') {
        let normal = match builtin_protected().check_lexical(path) {
            Ok(normal) => normal,
            Err(paths::LexicalRefusal::Protected) => return Err(protected(field, path)),
            Err(paths::LexicalRefusal::Invalid(e)) => {
                return Err(ToolError::invalid(format!("{field}: {e}")));
            }
        };
        if SERVER_BLOCKED.iter().any(|b| normal.starts_with(b)) {
            return Err(protected(field, path));
        }
        return Ok(());
    }
    let lower = path.to_ascii_lowercase().replace('/', "\\");
    if WINDOWS_BLOCKED
        .iter()
        .any(|b| lower == *b || lower.starts_with(&format!("{b}\\")))
    {
        return Err(protected(field, path));
    }
    Ok(())
}

/// Refuses a command naming a path the organization added to the protected paths (the
/// built-in ones were refused by [`safe_path`] already). The agent gets the same additions
/// with the command and refuses on its own too.
async fn check_org_protected<R: Reach>(
    cx: &ToolCx<'_, R>,
    kind: &CommandKind,
) -> Result<(), ToolError> {
    if !kind.touches_paths() {
        return Ok(());
    }
    let additions = cx.commands().protected_paths().await?;
    if additions.is_empty() {
        return Ok(());
    }
    let set = ProtectedSet::builtin()
        .with_additions(&additions)
        .map_err(|e| ToolError::new(ErrorCode::Internal, e))?;
    for path in kind.paths() {
        if path.starts_with('/') && set.check_lexical(path) == Err(paths::LexicalRefusal::Protected)
        {
            return Err(protected("path", path));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{CommandView, safe_path};

    /// What no pipeline test waits for: a command still running when the call returns (the
    /// wait is 10 s or more), and an error with every optional field, match every
    /// agent-backed tool's outputSchema.
    #[test]
    fn still_running_and_full_errors_match_the_output_schemas() {
        let running = CommandView {
            command_id: uuid::Uuid::nil().to_string(),
            device_id: uuid::Uuid::nil().to_string(),
            hostname: "web-01".into(),
            status: breeze_core::CommandStatus::Running,
            exit_code: None,
            stdout: None,
            stderr: None,
            output_truncated: false,
            result: None,
            error: None,
            duration_ms: None,
            message: Some("The command is still running on web-01".into()),
        };
        let running = serde_json::to_value(&running).unwrap_or_default();
        let mut error = crate::ToolError::new(crate::ErrorCode::Forbidden, "no").hint("ask");
        error.required_scopes = vec![breeze_core::Scope::AiExecute];
        error.granted_scopes = vec![breeze_core::Scope::AiRead];
        let error = error.to_structured();
        let registry = crate::all();
        for name in [
            "execute_command",
            "file_operations",
            "manage_services",
            "network_discovery",
            "set_agent_log_level",
        ] {
            let Some(spec) = registry.get(name) else {
                panic!("{name} is registered")
            };
            let Ok(validator) = jsonschema::validator_for(&spec.output_schema) else {
                panic!("{name}: the output schema compiles")
            };
            for v in [&running, &error] {
                let errors: Vec<String> = validator.iter_errors(v).map(|e| e.to_string()).collect();
                assert!(errors.is_empty(), "{name}: {v} fails: {errors:?}");
            }
        }
    }

    #[test]
    fn paths_are_checked() {
        assert!(safe_path("path", "/var/log/syslog").is_ok());
        assert!(safe_path("path", "C:\\Temp\\x.log").is_ok());
        for bad in [
            "",
            "/var/log/../../etc/shadow",
            "/etc/shadow",
            "/proc/1/environ",
            "/home/alice/.ssh/id_ed25519",
            "/root/.ssh",
            "//etc/shadow",
            "/etc/./shadow",
            "/etc//shadow",
            "//proc/self/environ",
            "/home/alice/.aws/credentials",
            "/etc/breeze-agent/agent.json",
            "a\0b",
            "c:\\windows\\system32\\config\\SAM",
        ] {
            assert!(safe_path("path", bad).is_err(), "{bad:?} accepted");
        }
        let e = safe_path("newPath", "/etc/sudoers").unwrap_err();
        assert!(e.message.starts_with("newPath:"), "{}", e.message);
    }
}
