//! Tools that act on a device through its agent: `execute_command` (typed system commands —
//! processes, services, files, system logs, a reboot; arbitrary code runs only as a library script through
//! `run_script`), `manage_services`, `file_operations`, `network_discovery` and
//! `set_agent_log_level`.

use breeze_agent_proto::{
    CommandKind, ContentEncoding, DiscoveryMode, ProcessSort, ServiceActionKind,
};
use breeze_core::{Device, Permission};
use schemars::JsonSchema;
use serde::Deserialize;

use super::Level;
use super::device_command::{
    CommandView, RunOptions, online_device, require_completed, run, safe_path,
};
use crate::reach::{self, Reach};
use crate::{Effect, NoActions, Pin, RateLimit, Registry, Tier, Tool, ToolCx, ToolError, per};

/// An input naming one device and the command to run there.
trait DeviceCommand {
    fn device_id(&self) -> &str;
    /// The command, or why the arguments do not make one.
    fn kind(&self) -> Result<CommandKind, ToolError>;
}

/// The command `input` asks for and its device, once that is the caller's and online: one
/// function, so a call that runs now and one that waits for approval are checked alike.
async fn target<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &impl DeviceCommand,
) -> Result<(Device, CommandKind), ToolError> {
    let kind = input.kind()?;
    Ok((online_device(cx, input.device_id()).await?, kind))
}

pub(crate) fn register(r: &mut Registry) {
    r.register::<ExecuteCommand>();
    r.register::<FileOperations>();
    r.register::<ManageServices>();
    r.register::<NetworkDiscovery>();
    r.register::<SetAgentLogLevel>();
}

// --- execute_command -------------------------------------------------------------------------

crate::actions! {
    // The command types of `execute_command`. The specification's tool table gives
    // execute_command Tier 3 with no per-action breakdown: every command type needs ai:execute
    // and a person's approval, reads included. The effects still differ (and so the hints).
    pub(crate) enum CommandType {
        ListProcesses = "list_processes" => (T3, Read, DevicesExecute),
        KillProcess = "kill_process" => (T3, Execute, DevicesExecute),
        ListServices = "list_services" => (T3, Read, DevicesExecute),
        StartService = "start_service" => (T3, Execute, DevicesExecute),
        StopService = "stop_service" => (T3, Execute, DevicesExecute),
        RestartService = "restart_service" => (T3, Execute, DevicesExecute),
        FileList = "file_list" => (T3, Read, DevicesExecute),
        FileRead = "file_read" => (T3, Read, DevicesExecute),
        EventLogsList = "event_logs_list" => (T3, Read, DevicesExecute),
        EventLogsQuery = "event_logs_query" => (T3, Read, DevicesExecute),
        Reboot = "reboot" => (T3, Execute, DevicesExecute),
    }
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CommandPayload {
    /// list_processes: how many (default 50).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u32>,
    /// list_processes: cpu (default) or memory.
    sort_by: Option<SortBy>,
    /// kill_process: the process id.
    pid: Option<u32>,
    /// kill_process: SIGKILL instead of SIGTERM.
    force: Option<bool>,
    /// *_service: the unit name.
    #[schemars(length(min = 1, max = 255))]
    service_name: Option<String>,
    /// file_*: an absolute path.
    #[schemars(length(min = 1, max = 4096))]
    path: Option<String>,
    /// file_read: byte cap (default 65536).
    #[schemars(range(min = 1, max = 1_048_576))]
    max_bytes: Option<u64>,
    /// event_logs_query: case-insensitive text to look for.
    #[schemars(length(min = 1, max = 500))]
    pattern: Option<String>,
    /// event_logs_query: only this systemd unit.
    #[schemars(length(min = 1, max = 255))]
    unit: Option<String>,
    /// event_logs_*: minutes back (default 60).
    #[schemars(range(min = 1, max = 10_080))]
    since_minutes: Option<u32>,
    /// reboot: minutes of notice (0-1440, default 1).
    delay_minutes: Option<u32>,
    /// reboot: even with users logged in (else deferred).
    reboot_with_users: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum SortBy {
    Cpu,
    Memory,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExecuteInput {
    /// The device (UUID).
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    command_type: CommandType,
    /// Arguments of the command type (see each field).
    payload: Option<CommandPayload>,
}

pub(crate) struct ExecuteCommand;

fn required<T>(value: Option<T>, field: &str, what: &str) -> Result<T, ToolError> {
    value.ok_or_else(|| ToolError::invalid(format!("payload.{field} is required for {what}")))
}

impl DeviceCommand for ExecuteInput {
    fn device_id(&self) -> &str {
        &self.device_id
    }

    fn kind(&self) -> Result<CommandKind, ToolError> {
        let empty = CommandPayload::default();
        let p = self.payload.as_ref().unwrap_or(&empty);
        let service = |action| -> Result<CommandKind, ToolError> {
            Ok(CommandKind::ServiceAction {
                name: required(p.service_name.clone(), "serviceName", "service commands")?,
                action,
            })
        };
        let path = || -> Result<String, ToolError> {
            let path = required(p.path.clone(), "path", "file commands")?;
            safe_path("payload.path", &path)?;
            Ok(path)
        };
        Ok(match self.command_type {
            CommandType::ListProcesses => CommandKind::ListProcesses {
                sort_by: match p.sort_by {
                    Some(SortBy::Memory) => ProcessSort::Memory,
                    _ => ProcessSort::Cpu,
                },
                limit: p.limit.unwrap_or(50),
            },
            CommandType::KillProcess => CommandKind::KillProcess {
                pid: required(p.pid, "pid", "kill_process")?,
                force: p.force.unwrap_or(false),
            },
            CommandType::ListServices => CommandKind::ListServices,
            CommandType::StartService => service(ServiceActionKind::Start)?,
            CommandType::StopService => service(ServiceActionKind::Stop)?,
            CommandType::RestartService => service(ServiceActionKind::Restart)?,
            CommandType::FileList => CommandKind::FileList { path: path()? },
            CommandType::FileRead => CommandKind::FileRead {
                path: path()?,
                max_bytes: p.max_bytes.unwrap_or(65_536),
            },
            CommandType::EventLogsList => CommandKind::QueryLogs {
                pattern: None,
                unit: None,
                since_minutes: p.since_minutes.unwrap_or(60),
                limit: 100,
            },
            CommandType::EventLogsQuery => CommandKind::QueryLogs {
                pattern: p.pattern.clone(),
                unit: p.unit.clone(),
                since_minutes: p.since_minutes.unwrap_or(60),
                limit: p.limit.unwrap_or(200),
            },
            CommandType::Reboot => CommandKind::Reboot {
                delay_minutes: match p.delay_minutes.unwrap_or(1) {
                    d @ 0..=1440 => d,
                    d => {
                        return Err(ToolError::invalid(format!(
                            "payload.delayMinutes must be 0 to 1440, not {d}"
                        )));
                    }
                },
                with_users: p.reboot_with_users.unwrap_or(false),
            },
        })
    }
}

impl Tool for ExecuteCommand {
    const NAME: &'static str = "execute_command";
    const TITLE: &'static str = "Execute a system command";
    const DESCRIPTION: &'static str = "Run a typed system command (commandType, its arguments in payload) on a device through its agent. Every command type is Tier 3: it needs ai:execute and a person's approval. Arbitrary code runs only as a library script through run_script. Waits up to 30 seconds for the result.";
    const TIER: Tier = Tier::T3;
    const PERMISSION: Permission = Permission::DevicesExecute;
    const RATE_LIMIT: Option<RateLimit> = per(10, 300);
    const ACTION_KEY: &'static str = "commandType";
    type Actions = CommandType;
    type Input = ExecuteInput;
    type Output = CommandView;
    type Reach = (reach::Commands, reach::Devices, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let (device, kind) = target(cx, &input).await?;
        // A command that ran and failed is the call's failure, with the device's reason.
        require_completed(run(cx, &device, kind, RunOptions::new(25, 30)).await?)
    }

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        target(cx, input).await.map(|_| None)
    }
}

// --- manage_services -------------------------------------------------------------------------

crate::actions! {
    // What `manage_services` does: listing is Tier 2, changing a service's state Tier 3.
    pub(crate) enum ServiceAction {
        List = "list" => (T2, Read, ServicesManage),
        Start = "start" => (T3, Execute, ServicesManage),
        Stop = "stop" => (T3, Execute, ServicesManage),
        Restart = "restart" => (T3, Execute, ServicesManage),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ServicesInput {
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    action: ServiceAction,
    /// The service (systemd unit) name; required for start, stop and restart.
    #[schemars(length(min = 1, max = 255))]
    service_name: Option<String>,
}

pub(crate) struct ManageServices;

impl Tool for ManageServices {
    const NAME: &'static str = "manage_services";
    const TITLE: &'static str = "Manage services";
    const DESCRIPTION: &'static str = "List (Tier 2), start, stop or restart (Tier 3) system services on a device. Waits up to 30 seconds for the agent's answer.";
    const TIER: Tier = Tier::T3;
    const PERMISSION: Permission = Permission::ServicesManage;
    const RATE_LIMIT: Option<RateLimit> = per(10, 300);
    type Actions = ServiceAction;
    type Input = ServicesInput;
    type Output = CommandView;
    type Reach = (reach::Commands, reach::Devices, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let (device, kind) = target(cx, &input).await?;
        // A command that ran and failed is the call's failure, with the device's reason.
        require_completed(run(cx, &device, kind, RunOptions::new(25, 30)).await?)
    }

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        target(cx, input).await.map(|_| None)
    }
}

impl DeviceCommand for ServicesInput {
    fn device_id(&self) -> &str {
        &self.device_id
    }

    fn kind(&self) -> Result<CommandKind, ToolError> {
        Ok(match self.action {
            ServiceAction::List => CommandKind::ListServices,
            other => CommandKind::ServiceAction {
                name: self.service_name.clone().ok_or_else(|| {
                    ToolError::invalid("serviceName is required for start/stop/restart actions")
                })?,
                action: match other {
                    ServiceAction::Start => ServiceActionKind::Start,
                    ServiceAction::Stop => ServiceActionKind::Stop,
                    _ => ServiceActionKind::Restart,
                },
            },
        })
    }
}

// --- file_operations -------------------------------------------------------------------------

crate::actions! {
    // What `file_operations` does: list and read are Tier 1, every change Tier 3.
    pub(crate) enum FileAction {
        List = "list" => (T1, Read, FilesRead),
        Read = "read" => (T1, Read, FilesRead),
        Write = "write" => (T3, Update, FilesWrite),
        Delete = "delete" => (T3, Delete, FilesWrite),
        Mkdir = "mkdir" => (T3, Create, FilesWrite),
        Rename = "rename" => (T3, Update, FilesWrite),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Encoding {
    Utf8,
    Base64,
}

/// Largest content `write` accepts.
const MAX_WRITE_CHARS: usize = 1_000_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct FilesInput {
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    action: FileAction,
    /// An absolute path.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// write: the content (at most 1,000,000 characters).
    #[schemars(length(max = 1_000_000))]
    content: Option<String>,
    /// write: utf8 (default) or base64.
    encoding: Option<Encoding>,
    /// rename: the new path.
    #[schemars(length(min = 1, max = 4096))]
    new_path: Option<String>,
    /// delete: also delete a non-empty directory.
    recursive: Option<bool>,
    /// read: at most this many bytes (default 65536, max 1048576).
    #[schemars(range(min = 1, max = 1_048_576))]
    max_bytes: Option<u64>,
}

pub(crate) struct FileOperations;

impl Tool for FileOperations {
    const NAME: &'static str = "file_operations";
    const TITLE: &'static str = "File operations";
    const DESCRIPTION: &'static str = "Files on a device: list and read (Tier 1); write, delete, mkdir and rename (Tier 3). Paths are absolute; credentials and kernel interfaces are off limits.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::FilesRead;
    const RATE_LIMIT: Option<RateLimit> = per(20, 300);
    type Actions = FileAction;
    type Input = FilesInput;
    type Output = CommandView;
    type Reach = (reach::Commands, reach::Devices, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let (device, kind) = target(cx, &input).await?;
        require_completed(run(cx, &device, kind, RunOptions::new(25, 30)).await?)
    }

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        target(cx, input).await.map(|_| None)
    }
}

impl DeviceCommand for FilesInput {
    fn device_id(&self) -> &str {
        &self.device_id
    }

    fn kind(&self) -> Result<CommandKind, ToolError> {
        safe_path("path", &self.path)?;
        let path = self.path.clone();
        let kind = match self.action {
            FileAction::List => CommandKind::FileList { path },
            FileAction::Read => CommandKind::FileRead {
                path,
                max_bytes: self.max_bytes.unwrap_or(65_536),
            },
            FileAction::Write => {
                let content = self
                    .content
                    .clone()
                    .ok_or_else(|| ToolError::invalid("content is required for write"))?;
                if content.chars().count() > MAX_WRITE_CHARS {
                    return Err(ToolError::invalid(format!(
                        "content: at most {MAX_WRITE_CHARS} characters"
                    )));
                }
                // Stored text cannot hold U+0000 (it would arrive as U+FFFD): bytes like that
                // travel base64-encoded, and arrive exactly.
                if self.encoding != Some(Encoding::Base64) && content.contains('\0') {
                    return Err(ToolError::invalid(
                        "content holds U+0000, which text cannot carry: send the bytes \
                         base64-encoded with encoding: base64",
                    ));
                }
                CommandKind::FileWrite {
                    path,
                    content,
                    encoding: match self.encoding {
                        Some(Encoding::Base64) => ContentEncoding::Base64,
                        _ => ContentEncoding::Utf8,
                    },
                }
            }
            FileAction::Delete => CommandKind::FileDelete {
                path,
                recursive: self.recursive.unwrap_or(false),
            },
            FileAction::Mkdir => CommandKind::FileMkdir { path },
            FileAction::Rename => {
                let to = self
                    .new_path
                    .clone()
                    .ok_or_else(|| ToolError::invalid("newPath is required for rename"))?;
                safe_path("newPath", &to)?;
                CommandKind::FileRename { from: path, to }
            }
        };
        Ok(kind)
    }
}

// --- network_discovery -----------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ScanType {
    #[default]
    Ping,
    Arp,
    Full,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DiscoveryInput {
    /// The device to scan from.
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    /// IPv4 network in CIDR form, /22 or smaller (default: the device's own network).
    #[schemars(
        length(min = 9, max = 18),
        regex(pattern = r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")
    )]
    subnet: Option<String>,
    /// ping (default), arp, or full (both plus common open ports).
    scan_type: Option<ScanType>,
}

pub(crate) struct NetworkDiscovery;

impl Tool for NetworkDiscovery {
    const NAME: &'static str = "network_discovery";
    const TITLE: &'static str = "Network discovery";
    const DESCRIPTION: &'static str = "Scan a network from a device: ping sweep, ARP table, or full (both plus common open ports). Reports progress while it runs; waits up to 2 minutes.";
    const TIER: Tier = Tier::T3;
    const PERMISSION: Permission = Permission::DevicesExecute;
    const RATE_LIMIT: Option<RateLimit> = per(2, 600);
    const EFFECTS: &'static [Effect] = &[Effect::Execute];
    type Actions = NoActions;
    type Input = DiscoveryInput;
    type Output = CommandView;
    type Reach = (reach::Commands, reach::Devices, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let (device, kind) = target(cx, &input).await?;
        require_completed(run(cx, &device, kind, RunOptions::new(110, 120)).await?)
    }

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        target(cx, input).await.map(|_| None)
    }
}

impl DeviceCommand for DiscoveryInput {
    fn device_id(&self) -> &str {
        &self.device_id
    }

    fn kind(&self) -> Result<CommandKind, ToolError> {
        if let Some(subnet) = &self.subnet {
            let prefix: u8 = subnet
                .rsplit('/')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if !(22..=32).contains(&prefix) {
                return Err(ToolError::invalid(format!(
                    "subnet: {subnet} is too large; scan a /22 (1,024 addresses) or smaller"
                )));
            }
        }
        let mode = match self.scan_type.unwrap_or_default() {
            ScanType::Ping => DiscoveryMode::Ping,
            ScanType::Arp => DiscoveryMode::Arp,
            ScanType::Full => DiscoveryMode::Full,
        };
        Ok(CommandKind::NetworkDiscovery {
            mode,
            cidr: self.subnet.clone(),
        })
    }
}

// --- set_agent_log_level ---------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LogLevelInput {
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    level: Level,
    /// How long before the agent reverts by itself (1-1440, default 60).
    #[schemars(range(min = 1, max = 1440))]
    duration_minutes: Option<u32>,
}

pub(crate) struct SetAgentLogLevel;

impl Tool for SetAgentLogLevel {
    const NAME: &'static str = "set_agent_log_level";
    const TITLE: &'static str = "Set agent log level";
    const DESCRIPTION: &'static str = "Temporarily change which agent log lines are shipped, for troubleshooting; the agent reverts by itself after durationMinutes (default 60). Search the shipped lines with search_agent_logs.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::DevicesExecute;
    // No per-tool limit: the specification's rate-limit table has no row for this tool.
    const EFFECTS: &'static [Effect] = &[Effect::Update];
    type Actions = NoActions;
    type Input = LogLevelInput;
    type Output = CommandView;
    type Reach = (reach::Commands, reach::Devices, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = online_device(cx, &input.device_id).await?;
        let minutes = input.duration_minutes.unwrap_or(60);
        let kind = CommandKind::SetLogLevel {
            level: input.level.into(),
            duration_minutes: minutes,
        };
        let mut opts = RunOptions::new(15, 10);
        opts.audit_action = "device.log_level";
        let mut view = require_completed(run(cx, &device, kind, opts).await?)?;
        if !view.completed() && view.message.is_some() {
            view = queue_note(view);
        }
        let level = serde_json::to_value(input.level).unwrap_or_default();
        view.message.get_or_insert_with(|| {
            format!(
                "Log level set to {} for {minutes} minutes on {}",
                level.as_str().unwrap_or("?"),
                device.hostname
            )
        });
        Ok(view)
    }
}

fn queue_note(mut view: CommandView) -> CommandView {
    view.message = Some(format!(
        "Queued for {}; the agent applies it when it picks the command up",
        view.hostname
    ));
    view
}
