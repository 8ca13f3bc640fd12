//! The wire contract between `breeze-agent` and the device gateway in `breeze-server`.
//!
//! Everything here is plain serde data; neither side's behaviour lives in this crate, with one
//! exception: [`paths`], the protected-path patterns and their lexical matcher, which both sides
//! must read alike. JSON field names are camelCase, enums are tagged with `"type"`.
//!
//! # Endpoints (all under the server's public URL)
//!
//! | Method and path                         | Auth                      | Body → answer                         |
//! |-----------------------------------------|---------------------------|---------------------------------------|
//! | `POST /api/v1/agents/enroll`            | enrollment key in body    | [`EnrollRequest`] → [`EnrollResponse`] |
//! | `GET  /api/v1/agents/ws` (WebSocket)    | `Authorization: Bearer`   | [`AgentFrame`] up, [`ServerFrame`] down |
//! | `POST /api/v1/agents/heartbeat`         | `Authorization: Bearer`   | [`Heartbeat`] → [`HeartbeatResponse`]  |
//! | `POST /api/v1/agents/inventory`         | `Authorization: Bearer`   | [`Inventory`] → 204                    |
//! | `POST /api/v1/agents/metrics`           | `Authorization: Bearer`   | [`MetricsBatch`] → 204                 |
//! | `POST /api/v1/agents/logs`              | `Authorization: Bearer`   | [`LogBatch`] → 204                     |
//! | `POST /api/v1/agents/events`            | `Authorization: Bearer`   | [`EventBatch`] → 204                   |
//! | `POST /api/v1/agents/commands/{id}/result` | `Authorization: Bearer` | [`CommandResult`] → 204               |
//! | `POST /api/v1/agents/token/rotate`      | `Authorization: Bearer`   | `{}` → [`RotateTokenResponse`]         |
//!
//! The HTTP endpoints are the fallback when the socket is down: a heartbeat over HTTP also hands
//! out the commands still pending for the device. Errors are `{"error":{"code","message"}}`.
//!
//! # Exactly once
//!
//! A [`Command`] may be delivered more than once (pushed on the socket and handed out again by an
//! HTTP heartbeat after a reconnect). The agent runs a command id at most once and answers a
//! repeated delivery with the stored result; the server accepts only the first terminal result
//! for a command id and ignores the rest.
//!
//! A result is the other way round: the agent keeps it (in its journal, across restarts) and
//! sends it again on every new socket until the server answers [`ServerFrame::ResultAck`],
//! which it sends only once the result is stored. Storing is idempotent by command id, and a
//! result that arrives after the server timed the command out still counts (completed late).

pub mod livequery;
pub mod paths;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The agent's device token prefix (the same shape as API keys: `brz_` + 43 base64url chars).
pub const TOKEN_PREFIX: &str = "brz_";

/// Largest WebSocket frame either side accepts (16 MiB).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Largest report other than a command result, over HTTP (its body) or the socket (its frame):
/// an inventory with its software list, [`MAX_REPORT_BATCH`] samples or log lines (1 MiB).
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// Most metrics samples or log lines in one report, over HTTP or the socket.
pub const MAX_REPORT_BATCH: usize = 5_000;

/// How far ahead of the server's clock a sample may be stamped (a little clock skew).
pub const MAX_SAMPLE_AHEAD_SECS: i64 = 300;
/// How far back a sample may be stamped (the raw metrics' retention: an agent sends what it
/// buffered while offline).
pub const MAX_SAMPLE_AGE_SECS: i64 = 7 * 24 * 3600;
/// Most disks or network interfaces in one sample, and the longest mount or interface name.
pub const MAX_SAMPLE_ITEMS: usize = 256;
pub const MAX_SAMPLE_NAME_CHARS: usize = 255;

/// Default cap on captured stdout and stderr, each (1 MiB).
pub const DEFAULT_OUTPUT_CAP_BYTES: u64 = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Enrollment and configuration
// ---------------------------------------------------------------------------------------------

/// `POST /api/v1/agents/enroll`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnrollRequest {
    /// The site-scoped enrollment key an administrator created.
    pub enrollment_key: String,
    pub hostname: String,
    /// A stable machine identifier (`/etc/machine-id` on Linux) when the platform has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<String>,
    pub os: OsInfo,
    pub agent_version: String,
    /// A one-time re-enroll token an administrator issued for the device this machine is:
    /// the enrollment re-enrolls that device (refused when the token is not valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reenroll_token: Option<String>,
    /// The current token of the device this machine is (an agent enrolling again): the
    /// enrollment re-enrolls that device. A token that is not the device's proves nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<String>,
}

/// The answer to a successful enrollment. `token` is shown once; the server keeps its hash.
///
/// An enrollment key never rebinds an existing device: without proof of being one (a
/// re-enroll token, the device's token), a machine whose id a device of the organization
/// already carries enrolls as a new device, flagged as a possible clone or impostor of it
/// (`possible_clone`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnrollResponse {
    pub device_id: Uuid,
    pub org_id: Uuid,
    pub site_id: Uuid,
    pub token: String,
    pub config: AgentConfig,
    /// An existing device was re-enrolled (on proof of being it).
    #[serde(default)]
    pub reenrolled: bool,
    /// This machine shares its machine id with a device already enrolled, so it was enrolled
    /// as a new device flagged as a possible clone. Which device is not said: an enrollment key
    /// must not learn which device carries a machine id, or that one does (administrators see
    /// the link in the dashboard and `query_devices`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub possible_clone: bool,
}

/// Intervals the server sets; the agent applies them on enrollment, in the socket's welcome and
/// whenever a [`ServerFrame::Config`] or heartbeat response carries a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentConfig {
    pub heartbeat_interval_secs: u32,
    pub metrics_interval_secs: u32,
    pub inventory_interval_secs: u32,
    /// Metrics samples sent together (the agent also flushes on every heartbeat).
    pub metrics_batch_size: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            heartbeat_interval_secs: 60,
            metrics_interval_secs: 30,
            inventory_interval_secs: 15 * 60,
            metrics_batch_size: 4,
        }
    }
}

/// `POST /api/v1/agents/token/rotate`: the new token. The old one keeps working until the
/// agent first authenticates with the new one, so a crash between the two loses nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RotateTokenResponse {
    pub token: String,
}

// ---------------------------------------------------------------------------------------------
// The socket
// ---------------------------------------------------------------------------------------------

/// Agent → server frames (JSON text messages).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum AgentFrame {
    Heartbeat(Heartbeat),
    Inventory(Box<Inventory>),
    Metrics(MetricsBatch),
    Logs(LogBatch),
    /// Events the agent observed (a watched log line matched, a command failed, the agent
    /// started). Newer than the other frames: a server that predates it logs an unreadable
    /// frame and keeps the socket, so an agent may send it to any server.
    Events(EventBatch),
    /// The command was accepted and has started (pending/sent → running).
    CommandStarted {
        command_id: Uuid,
    },
    /// Progress of a long command (network discovery, disk scans).
    CommandProgress(CommandProgress),
    CommandResult(CommandResult),
}

/// Server → agent frames (JSON text messages).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum ServerFrame {
    /// First frame after the upgrade.
    Welcome {
        device_id: Uuid,
        config: AgentConfig,
    },
    Command(Command),
    /// Stop a running command; the agent answers with a `cancelled` result.
    Cancel {
        command_id: Uuid,
    },
    Config(AgentConfig),
    /// Ask for a fresh inventory now.
    CollectInventory,
    /// The device's effective configuration policy. Sent after the welcome and whenever it
    /// changes; an agent that predates it logs an unreadable frame and ignores it.
    Policy(PolicyConfig),
    /// The result of `command_id` is stored (or was already): the agent may forget it. Until
    /// this arrives the agent keeps the result and sends it again on every new socket, to
    /// whichever instance; a result posted over HTTP is acknowledged by the 2xx answer.
    ResultAck {
        command_id: Uuid,
    },
}

/// What the configuration policies resolved for this device, as the agent applies it. `None`
/// means no policy sets the value: the agent falls back to [`AgentConfig`] (intervals) and its
/// default shipped level. The agent echoes `revision` and the values in effect in
/// [`Heartbeat::applied_policy`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyConfig {
    /// A digest of the effective settings; equal revisions mean equal configurations.
    pub revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_interval_secs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_interval_secs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    /// Every effective setting by feature type (`monitoring`, `agent_log`, `patch`,
    /// `maintenance`, `monitored_services`), as JSON objects; the agent keeps what it does not
    /// apply itself.
    #[serde(default)]
    pub features: serde_json::Map<String, Value>,
}

/// What the agent has in effect after a [`PolicyConfig`]: the revision it applied and the
/// values it runs with (whatever their source).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedPolicy {
    /// The revision of the last [`PolicyConfig`] applied (`None`: none received yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub metrics_interval_secs: u32,
    pub inventory_interval_secs: u32,
    pub log_level: LogLevel,
    /// The patch scan interval in effect (agents that predate patching send nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_scan_interval_minutes: Option<u32>,
}

// ---------------------------------------------------------------------------------------------
// Heartbeat, inventory, metrics, logs
// ---------------------------------------------------------------------------------------------

/// Sent every `heartbeat_interval_secs`, on the socket or over HTTP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    pub agent_version: String,
    pub uptime_secs: u64,
    pub pending_reboot: bool,
    pub logged_in_users: Vec<UserSession>,
    /// Command ids the agent is running right now.
    #[serde(default)]
    pub running_commands: Vec<Uuid>,
    /// What the agent applied of its configuration policy (agents that predate policies send
    /// nothing here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_policy: Option<AppliedPolicy>,
}

/// A logged-in user session as the OS reports it (utmp on Linux).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserSession {
    pub username: String,
    /// tty, `console`, `ssh`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<String>,
    /// Remote host for remote sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_at: Option<DateTime<Utc>>,
    /// Seconds from login to a usable session, when the platform can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_duration_secs: Option<f64>,
    /// Seconds since the session's last input (the IDLE column of `who -u`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_secs: Option<u64>,
}

/// `POST /api/v1/agents/heartbeat` answer: commands still pending for this device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatResponse {
    pub commands: Vec<Command>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<AgentConfig>,
    /// The effective configuration policy, when the heartbeat's `appliedPolicy` revision is
    /// not the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyConfig>,
}

/// Hardware and software inventory, sent at enrollment and every `inventory_interval_secs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub collected_at: DateTime<Utc>,
    pub hostname: String,
    pub os: OsInfo,
    pub cpu: CpuInfo,
    pub memory_total_bytes: u64,
    pub disks: Vec<DiskInfo>,
    pub interfaces: Vec<NetworkInterface>,
    /// Installed packages where the platform lists them (dpkg, rpm); `None` when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<Vec<Package>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_time: Option<DateTime<Utc>>,
    /// A patch scan made on the agent's own schedule (the `patch` policy's
    /// `scanIntervalMinutes`, else daily); absent when none is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<PatchScanReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OsInfo {
    /// `linux`, `windows` or `macos`.
    pub family: String,
    /// e.g. "Debian GNU/Linux".
    pub name: String,
    /// e.g. "12".
    pub version: String,
    #[serde(default)]
    pub kernel: String,
    /// e.g. "x86_64".
    pub arch: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuInfo {
    pub model: String,
    pub physical_cores: u32,
    pub logical_cores: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskInfo {
    pub mount: String,
    pub filesystem: String,
    pub total_bytes: u64,
    pub available_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Addresses with prefix length, e.g. "192.168.1.5/24".
    pub addresses: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub name: String,
    pub version: String,
    /// The source package it was built from, when it has another name (`openssl` for
    /// `libssl3`; dpkg's `${source:Package}`, the name in rpm's `%{SOURCERPM}`): Debian and
    /// Ubuntu advisories name source packages. Absent from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Samples taken every `metrics_interval_secs`, sent in batches and buffered while offline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricsBatch {
    pub samples: Vec<MetricSample>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricSample {
    pub at: DateTime<Utc>,
    pub cpu_percent: f64,
    pub ram_percent: f64,
    pub ram_used_bytes: u64,
    pub disks: Vec<DiskUsageSample>,
    pub network: Vec<NetworkSample>,
    pub process_count: u32,
}

impl MetricSample {
    /// Why the server refuses this sample, taken at `now` by its clock: stamped outside the
    /// window [`MAX_SAMPLE_AGE_SECS`] back to [`MAX_SAMPLE_AHEAD_SECS`] ahead, a percentage
    /// that is not a number from 0 to 100, a byte count past `i64::MAX`, or too many (or too
    /// long) disks and interfaces. `None` when it is fine.
    pub fn refusal(&self, now: DateTime<Utc>) -> Option<String> {
        let skew = (self.at - now).num_seconds();
        if skew > MAX_SAMPLE_AHEAD_SECS {
            return Some(format!("stamped {skew} s ahead of the server's clock"));
        }
        if -skew > MAX_SAMPLE_AGE_SECS {
            return Some(format!("stamped {} s in the past", -skew));
        }
        let percent = |name: &str, v: f64| {
            (!(v.is_finite() && (0.0..=100.0).contains(&v)))
                .then(|| format!("{name} {v} is not a percentage from 0 to 100"))
        };
        let bytes = |name: &str, v: u64| {
            (i64::try_from(v).is_err()).then(|| format!("{name} {v} is out of range"))
        };
        if self.disks.len() > MAX_SAMPLE_ITEMS || self.network.len() > MAX_SAMPLE_ITEMS {
            return Some(format!(
                "more than {MAX_SAMPLE_ITEMS} disks or network interfaces"
            ));
        }
        if self
            .disks
            .iter()
            .map(|d| &d.mount)
            .chain(self.network.iter().map(|n| &n.interface))
            .any(|name| name.chars().count() > MAX_SAMPLE_NAME_CHARS)
        {
            return Some(format!(
                "a mount or interface name longer than {MAX_SAMPLE_NAME_CHARS} characters"
            ));
        }
        percent("cpuPercent", self.cpu_percent)
            .or_else(|| percent("ramPercent", self.ram_percent))
            .or_else(|| bytes("ramUsedBytes", self.ram_used_bytes))
            .or_else(|| {
                self.disks
                    .iter()
                    .find_map(|d| percent("disks[].usedPercent", d.used_percent))
            })
            .or_else(|| {
                self.network.iter().find_map(|n| {
                    bytes("network[].rxBytes", n.rx_bytes)
                        .or_else(|| bytes("network[].txBytes", n.tx_bytes))
                })
            })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskUsageSample {
    pub mount: String,
    pub used_percent: f64,
}

/// Bytes moved on one interface since the previous sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSample {
    pub interface: String,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// The agent's own log lines at or above its current level, shipped periodically.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogBatch {
    pub entries: Vec<LogEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    pub at: DateTime<Utc>,
    pub level: LogLevel,
    /// The module that logged it, e.g. `breeze_agent::channel`.
    pub target: String,
    pub message: String,
}

/// Largest number of events in one [`EventBatch`] the server accepts.
pub const MAX_EVENT_BATCH: usize = 100;
/// Longest event message the server keeps (longer ones are cut, marked with `…`).
pub const MAX_EVENT_MESSAGE_CHARS: usize = 2000;
/// Most attributes one event carries (the server keeps the first ones by name).
pub const MAX_EVENT_ATTRIBUTES: usize = 16;
/// Longest attribute name and value the server keeps (values longer are cut).
pub const MAX_EVENT_ATTRIBUTE_NAME_CHARS: usize = 64;
pub const MAX_EVENT_ATTRIBUTE_VALUE_CHARS: usize = 256;

/// The event source of a watched log file's matching line ([`AgentEvent::source`]).
pub const EVENT_SOURCE_LOG_WATCH: &str = "log_watch";
/// The event source of the agent's own events: `agent_started`, `command_failed`,
/// `script_failed`.
pub const EVENT_SOURCE_AGENT: &str = "agent";

/// Events the agent observed, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventBatch {
    pub events: Vec<AgentEvent>,
}

/// One thing that happened on the device that alert rules may count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentEvent {
    pub at: DateTime<Utc>,
    /// Where it comes from: [`EVENT_SOURCE_LOG_WATCH`], [`EVENT_SOURCE_AGENT`]. 1–64 ASCII
    /// letters, digits, `_`, `-`, `.`, `:` (the server refuses others).
    pub source: String,
    /// What it is within the source (a log watch's name, `command_failed`, …); same alphabet.
    pub kind: String,
    pub severity: EventSeverity,
    pub message: String,
    /// A few small facts (the file, the command id, an exit code, lines dropped by the rate
    /// limit); see the `MAX_EVENT_ATTRIBUTE*` limits.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub attributes: std::collections::BTreeMap<String, String>,
}

/// How bad an event is, least to most: the same words as alert severities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventSeverity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl EventSeverity {
    pub fn as_str(self) -> &'static str {
        match self {
            EventSeverity::Info => "info",
            EventSeverity::Low => "low",
            EventSeverity::Medium => "medium",
            EventSeverity::High => "high",
            EventSeverity::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// A unit of work for one device. The id is the idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    pub id: Uuid,
    /// The agent kills the work and answers `timed_out` after this long.
    pub timeout_secs: u32,
    /// Cap on captured stdout and on stderr, each; the rest is dropped and flagged truncated.
    pub output_cap_bytes: u64,
    pub kind: CommandKind,
    /// The organization's additions to the protected paths (patterns, see [`paths`]). The
    /// agent refuses file and disk work on these and on its built-in list, whatever else the
    /// command says; an empty list removes nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected_paths: Vec<String>,
}

/// What to run. Typed operations answer with a structured `result`; shell and script commands
/// answer with stdout/stderr/exit code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum CommandKind {
    /// A shell command line.
    Shell { shell: Shell, command: String },
    /// A library script body run by its interpreter with arguments.
    Script {
        interpreter: Interpreter,
        body: String,
        #[serde(default)]
        args: Vec<String>,
    },
    /// Top `limit` processes by CPU or memory. Result: `{"processes":[{pid,name,user,cpuPercent,memoryBytes,memoryPercent,command,startedAt}]}`.
    ListProcesses { sort_by: ProcessSort, limit: u32 },
    /// Result: `{"pid":…,"killed":true}`.
    KillProcess {
        pid: u32,
        #[serde(default)]
        force: bool,
    },
    /// Result: `{"services":[{name,description,loadState,activeState,subState,enabled}]}`.
    ListServices,
    /// Result: `{"name":…,"action":…,"activeState":…}`.
    ServiceAction {
        name: String,
        action: ServiceActionKind,
    },
    /// Result: `{"path":…,"entries":[{name,kind:"file"|"dir"|"symlink"|"other",sizeBytes,modifiedAt,mode}],"protectedOmitted":n}`
    /// (protected entries are left out and counted).
    FileList { path: String },
    /// Result: `{"path":…,"content":…,"encoding":"utf8"|"base64","sizeBytes":…,"truncated":bool}`.
    FileRead { path: String, max_bytes: u64 },
    /// Result: `{"path":…,"bytesWritten":…}`.
    FileWrite {
        path: String,
        content: String,
        #[serde(default)]
        encoding: ContentEncoding,
    },
    /// Result: `{"path":…,"deleted":true}`. Directories need `recursive`.
    FileDelete {
        path: String,
        #[serde(default)]
        recursive: bool,
    },
    /// Result: `{"path":…,"created":true}` (parents created too).
    FileMkdir { path: String },
    /// Result: `{"from":…,"to":…}`.
    FileRename { from: String, to: String },
    /// System log lines (journald where present, else /var/log/syslog|messages).
    /// Result: `{"source":…,"lines":[{at,unit,priority,message}]}`.
    QueryLogs {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pattern: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unit: Option<String>,
        since_minutes: u32,
        limit: u32,
    },
    /// Disk usage under `path`: totals per mount, the largest files and directories, and cleanup
    /// candidates (temp dirs, package caches, old rotated logs, large files) with sizes.
    /// Result: `{"mounts":[…],"largestFiles":[{path,sizeBytes,modifiedAt}],"largestDirectories":[…],"cleanupCandidates":[{path,category,sizeBytes,reason}],"protectedSkipped":n}`
    /// (protected subtrees are not entered nor named).
    DiskScan {
        path: String,
        top_n: u32,
        /// Files at or above this size are listed as large-file candidates.
        large_file_bytes: u64,
    },
    /// Deletes the given paths, each of which must be a cleanup candidate category the agent
    /// recognises (under a temp dir, a cache dir or a rotated log); anything else is skipped with
    /// a reason. Result: `{"deleted":[{path,bytesFreed}],"skipped":[{path,reason}],"bytesFreed":…}`.
    DiskCleanup { paths: Vec<String> },
    /// Ping sweep of `cidr` (max /22), the ARP table, or both plus common open ports.
    /// Progress frames report hosts scanned. Result: `{"hosts":[{ip,mac,hostname,alive,openPorts}]}`.
    NetworkDiscovery {
        mode: DiscoveryMode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cidr: Option<String>,
    },
    /// Temporarily change the shipped log level; it reverts by itself after `duration_minutes`.
    /// Result: `{"level":…,"revertsAt":…}`.
    SetLogLevel {
        level: LogLevel,
        duration_minutes: u32,
    },
    /// Collect and send inventory now. Result: the inventory.
    CollectInventory,
    /// List the updates the package manager (apt or dnf) offers; read-only.
    /// Result: a [`PatchScanReport`].
    PatchScan,
    /// Install (upgrade) the named packages, then handle a reboot per `reboot`: never, only
    /// when the OS asks for one, or always — but not while users are logged in unless
    /// `reboot_with_users`. Result: a [`PatchInstallReport`].
    PatchInstall {
        packages: Vec<String>,
        #[serde(default)]
        reboot: RebootMode,
        #[serde(default)]
        reboot_with_users: bool,
        /// Minutes the reboot is announced before it happens (0: at once).
        #[serde(default)]
        reboot_delay_minutes: u32,
    },
    /// Put the named packages back to an earlier version where the package manager still
    /// offers it (apt: `name=version` with downgrades allowed; dnf: `downgrade`). Result: a
    /// [`PatchInstallReport`].
    PatchRollback {
        packages: Vec<PackageVersion>,
        #[serde(default)]
        reboot: RebootMode,
        #[serde(default)]
        reboot_with_users: bool,
        #[serde(default)]
        reboot_delay_minutes: u32,
    },
    /// Restart the machine: the agent runs its configured reboot command (`patching.rebootCommand`,
    /// default `shutdown -r`) with `+<delayMinutes>` appended, so the reboot is announced and
    /// can still be cancelled on the machine — unless users are logged in and not
    /// `withUsers`, when nothing is run and the answer says who. Result:
    /// `{"reboot":"scheduled"|"deferred_users_logged_in","detail":…,"delayMinutes":…,"loggedInUsers":[…]}`.
    /// Older agents answer it with a failed result ("unknown command").
    Reboot {
        /// Minutes the reboot is announced before it happens (0: at once).
        #[serde(default)]
        delay_minutes: u32,
        /// Reboot even while users are logged in.
        #[serde(default)]
        with_users: bool,
    },
    /// Remove the named installed packages with the package manager (apt: `apt-get remove -y`,
    /// configuration files kept; dnf: `remove -y` without its clean-up of unused
    /// dependencies). The agent refuses the whole removal when apt's simulation or dnf's
    /// `remove --assumeno` summary shows it would also remove a package not named (a
    /// dependent). No reboot.
    /// Result: a [`PatchInstallReport`] whose packages are `removed`, `not_installed` or
    /// `failed`. Older agents answer it with a failed result ("unknown command").
    PackageRemove { packages: Vec<String> },
    /// Read-only Linux security checks (firewall, pending security updates, disk encryption,
    /// SSH configuration, world-writable files under system paths, listening services,
    /// antivirus/EDR presence). Each check is `pass`, `fail` or `unknown` (the agent could not
    /// tell, e.g. unprivileged) with a severity and evidence; files a check flags are listed
    /// with their metadata. Result: `{"checks":[{check,status,severity,title,evidence}],
    /// "flaggedFiles":[{path,reason,check,severity,sha256,mode,uid,gid,sizeBytes}],"privileged":bool}`.
    /// Older agents answer it with a failed result ("unknown command").
    SecurityScan {
        /// Extra directories walked for world-writable files besides the built-in system
        /// paths (bounded walk; protected paths are skipped).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        extra_roots: Vec<String>,
        /// Indicator paths: a file found at one of these is flagged.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        indicator_paths: Vec<String>,
    },
    /// Moves a flagged file into the agent's own quarantine (under its state directory),
    /// recording its original path, mode, owner and sha256; with `delete` the content is then
    /// deleted and only the record stays. Refused on protected paths and on anything but a
    /// regular file, and when `expectedSha256` is given and differs.
    /// Result: `{"quarantineId","originalPath","sha256","mode","uid","gid","sizeBytes","state":"quarantined"|"removed"}`.
    QuarantineFile {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected_sha256: Option<String>,
        #[serde(default)]
        delete: bool,
    },
    /// Puts a quarantined file back at its original path with its mode (and owner when the
    /// agent may). Refused when something is there now or the path became protected.
    /// Result: `{"quarantineId","originalPath","sha256","state":"restored","ownerRestored":bool}`.
    RestoreQuarantined { quarantine_id: String },
    /// Deletes a quarantined file's content; the record stays.
    /// Result: `{"quarantineId","originalPath","state":"removed"}`.
    DeleteQuarantined { quarantine_id: String },
    /// Compliance checks, each answered in the order asked. A check the agent cannot decide
    /// (no systemd, a protected or unreadable path, an unknown platform) answers `passed: null`
    /// with the reason; the command itself still completes. File paths obey the protected
    /// paths like file commands. Result: `{"checks":[{passed,detail}]}` ([`ProbeResult`]).
    /// An agent older than this kind cannot read the frame and the command times out.
    ComplianceCheck { checks: Vec<ComplianceProbe> },
    /// One live-query question ([`livequery`]): read-only, answered from the running system.
    /// `maxRows` and `maxBytes` (0: the defaults) are clamped by the agent to its own maxima;
    /// the file question obeys the protected paths. Result: a [`livequery::LiveAnswer`].
    /// Older agents answer it with a failed result ("unknown command").
    LiveQuery {
        #[serde(flatten)]
        question: livequery::Question,
        #[serde(default)]
        max_rows: u32,
        #[serde(default)]
        max_bytes: u64,
    },
}

/// One agent-side compliance check ([`CommandKind::ComplianceCheck`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ComplianceProbe {
    /// The systemd unit is active.
    ServiceRunning { name: String },
    /// A regular file exists at `path`.
    FilePresent { path: String },
    /// The file's SHA-256 is `sha256` (hex, any case).
    FileSha256 { path: String, sha256: String },
    /// The config file sets `key` to `value` (first uncommented occurrence before a `Match`
    /// block; `key value` or `key=value`; case-insensitive).
    SettingValue {
        path: String,
        key: String,
        value: String,
    },
    /// The root filesystem sits on dm-crypt (LUKS).
    DiskEncrypted,
    /// A host firewall is active.
    FirewallEnabled,
}

impl ComplianceProbe {
    /// The path the check reads, if any.
    pub fn path(&self) -> Option<&str> {
        match self {
            ComplianceProbe::FilePresent { path }
            | ComplianceProbe::FileSha256 { path, .. }
            | ComplianceProbe::SettingValue { path, .. } => Some(path.as_str()),
            _ => None,
        }
    }
}

/// One check's answer in a `ComplianceCheck` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeResult {
    /// True or false; null when the agent cannot tell.
    pub passed: Option<bool>,
    pub detail: String,
}

impl CommandKind {
    /// Whether the command reads or changes files by path (the kinds the protected paths
    /// apply to).
    pub fn touches_paths(&self) -> bool {
        matches!(
            self,
            CommandKind::FileList { .. }
                | CommandKind::FileRead { .. }
                | CommandKind::FileWrite { .. }
                | CommandKind::FileDelete { .. }
                | CommandKind::FileMkdir { .. }
                | CommandKind::FileRename { .. }
                | CommandKind::DiskScan { .. }
                | CommandKind::DiskCleanup { .. }
                | CommandKind::SecurityScan { .. }
                | CommandKind::QuarantineFile { .. }
                | CommandKind::RestoreQuarantined { .. }
                | CommandKind::ComplianceCheck { .. }
        ) || matches!(self, CommandKind::LiveQuery { question, .. } if question.path().is_some())
    }

    /// The paths the command names, for the server's lexical check.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            CommandKind::FileList { path }
            | CommandKind::FileRead { path, .. }
            | CommandKind::FileWrite { path, .. }
            | CommandKind::FileDelete { path, .. }
            | CommandKind::FileMkdir { path }
            | CommandKind::DiskScan { path, .. }
            | CommandKind::QuarantineFile { path, .. } => vec![path.as_str()],
            CommandKind::FileRename { from, to } => vec![from.as_str(), to.as_str()],
            CommandKind::DiskCleanup { paths } => paths.iter().map(String::as_str).collect(),
            CommandKind::SecurityScan {
                extra_roots,
                indicator_paths,
            } => extra_roots
                .iter()
                .chain(indicator_paths)
                .map(String::as_str)
                .collect(),
            CommandKind::ComplianceCheck { checks } => {
                checks.iter().filter_map(ComplianceProbe::path).collect()
            }
            CommandKind::LiveQuery { question, .. } => question.path().into_iter().collect(),
            _ => Vec::new(),
        }
    }
}

/// What a patch install does about a reboot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RebootMode {
    #[default]
    Never,
    IfNeeded,
    Always,
}

/// A package at a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageVersion {
    pub name: String,
    pub version: String,
}

/// One update the package manager offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AvailablePatch {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_version: Option<String>,
    pub available_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Where it comes from (apt suite, dnf repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A security update (apt: from a `-security` suite; dnf: a security advisory).
    #[serde(default)]
    pub security: bool,
    /// The advisory's severity when the package manager gives one (dnf: critical, important,
    /// moderate, low).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advisory: Option<String>,
}

/// What a patch scan found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchScanReport {
    /// `apt` or `dnf`.
    pub manager: String,
    pub scanned_at: DateTime<Utc>,
    pub patches: Vec<AvailablePatch>,
    /// The OS asks for a reboot (`/var/run/reboot-required`).
    #[serde(default)]
    pub reboot_required: bool,
    /// Users logged in at the time: the safety signal against rebooting under them.
    #[serde(default)]
    pub logged_in_users: Vec<String>,
}

/// One package's outcome in an install or rollback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageOutcome {
    pub name: String,
    pub status: breeze_core::PackageStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an install, rollback or removal did, package by package, and about the reboot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchInstallReport {
    pub manager: String,
    pub packages: Vec<PackageOutcome>,
    pub reboot_required: bool,
    /// `not_needed`, `not_requested` (policy never), `deferred_users_logged_in`,
    /// `scheduled`, `failed`.
    pub reboot: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_detail: Option<String>,
    /// The scan made after the change (what is still available).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<PatchScanReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shell {
    Sh,
    Bash,
    Pwsh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpreter {
    Bash,
    Sh,
    Python,
    Powershell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessSort {
    Cpu,
    Memory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceActionKind {
    Start,
    Stop,
    Restart,
    Status,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentEncoding {
    #[default]
    Utf8,
    Base64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscoveryMode {
    Ping,
    Arp,
    Full,
}

/// Progress of a long-running command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandProgress {
    pub command_id: Uuid,
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The terminal outcome of a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandResult {
    pub command_id: Uuid,
    pub status: CommandOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    #[serde(default)]
    pub stdout_truncated: bool,
    #[serde(default)]
    pub stderr_truncated: bool,
    /// Structured answer of typed operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed, in words, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// Terminal command states an agent reports. The server adds `pending`, `sent` and `running`
/// before these, and may itself conclude `timed_out` when no result arrives in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandOutcome {
    Completed,
    Failed,
    TimedOut,
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_tagged_camel_case_json() {
        let frame = ServerFrame::Command(Command {
            id: Uuid::nil(),
            timeout_secs: 30,
            output_cap_bytes: 10,
            kind: CommandKind::ListProcesses {
                sort_by: ProcessSort::Cpu,
                limit: 5,
            },
            protected_paths: Vec::new(),
        });
        let json = serde_json::to_value(&frame).expect("serialises");
        assert_eq!(json["type"], "command");
        assert_eq!(json["timeoutSecs"], 30);
        assert_eq!(json["kind"]["type"], "list_processes");
        assert_eq!(json["kind"]["sortBy"], "cpu");
        let back: ServerFrame = serde_json::from_value(json).expect("round trips");
        assert_eq!(back, frame);

        let up = AgentFrame::CommandStarted {
            command_id: Uuid::nil(),
        };
        let json = serde_json::to_value(&up).expect("serialises");
        assert_eq!(json["type"], "commandStarted");
        assert!(json.get("commandId").is_some());
    }

    /// The event frame's wire shape: `events` with camelCase fields, attributes optional (an
    /// agent may leave them out).
    #[test]
    fn event_frames_are_tagged_and_attributes_optional() {
        let frame: AgentFrame = serde_json::from_value(serde_json::json!({
            "type": "events",
            "events": [{ "at": "2026-01-01T00:00:00Z", "source": "log_watch", "kind": "syslog",
                         "severity": "high", "message": "disk failure" }]
        }))
        .expect("reads");
        let AgentFrame::Events(batch) = &frame else {
            panic!("not an events frame: {frame:?}")
        };
        assert_eq!(batch.events[0].severity, EventSeverity::High);
        assert!(batch.events[0].attributes.is_empty());
        let json = serde_json::to_value(&frame).expect("serialises");
        assert_eq!(json["type"], "events");
        assert!(json["events"][0].get("attributes").is_none());
        assert!(EventSeverity::Critical > EventSeverity::Info);
    }

    /// An agent that predates policies reads heartbeat answers with `policy` (unknown fields
    /// are ignored), and a server reads heartbeats without `appliedPolicy`.
    #[test]
    fn policy_fields_are_backward_compatible() {
        #[derive(Deserialize)]
        #[allow(dead_code)] // the old shape, read for the test
        struct OldResponse {
            commands: Vec<Command>,
        }
        let response = HeartbeatResponse {
            commands: Vec::new(),
            config: None,
            policy: Some(PolicyConfig {
                revision: "r".into(),
                metrics_interval_secs: Some(10),
                inventory_interval_secs: None,
                log_level: Some(LogLevel::Debug),
                features: serde_json::Map::new(),
            }),
        };
        let json = serde_json::to_string(&response).expect("serialises");
        assert!(serde_json::from_str::<OldResponse>(&json).is_ok());
        let hb: Heartbeat = serde_json::from_value(serde_json::json!({
            "agentVersion": "0.1", "uptimeSecs": 1, "pendingReboot": false, "loggedInUsers": []
        }))
        .expect("an old heartbeat reads");
        assert_eq!(hb.applied_policy, None);
        let frame = serde_json::to_value(ServerFrame::Policy(response.policy.expect("set")))
            .expect("serialises");
        assert_eq!(frame["type"], "policy");
        assert_eq!(frame["metricsIntervalSecs"], 10);
    }

    /// The security kinds are tagged like the others and read with their optional fields
    /// left out (a server that sends none of them is unaffected).
    #[test]
    fn security_kinds_round_trip() {
        let kind: CommandKind =
            serde_json::from_value(serde_json::json!({ "type": "security_scan" }))
                .expect("defaults apply");
        assert_eq!(
            kind,
            CommandKind::SecurityScan {
                extra_roots: Vec::new(),
                indicator_paths: Vec::new()
            }
        );
        let q = CommandKind::QuarantineFile {
            path: "/tmp/x".into(),
            expected_sha256: None,
            delete: true,
        };
        let json = serde_json::to_value(&q).expect("serialises");
        assert_eq!(json["type"], "quarantine_file");
        assert!(q.touches_paths());
        assert_eq!(q.paths(), vec!["/tmp/x"]);
        let r: CommandKind = serde_json::from_value(
            serde_json::json!({ "type": "restore_quarantined", "quarantineId": "abc" }),
        )
        .expect("reads");
        assert_eq!(
            r,
            CommandKind::RestoreQuarantined {
                quarantine_id: "abc".into()
            }
        );
    }

    #[test]
    fn outcomes_use_snake_case() {
        assert_eq!(
            serde_json::to_value(CommandOutcome::TimedOut).expect("serialises"),
            "timed_out"
        );
    }
}
