//! Live queries: the catalogue of read-only questions an agent answers from the running system.
//!
//! A live query is one [`Question`] (with its typed parameters) sent to many devices at once as
//! [`crate::CommandKind::LiveQuery`]; each agent answers with rows whose columns are the
//! question's [`QuestionSpec::columns`], as a [`LiveAnswer`]. Nothing here reads file contents
//! back: the file question answers metadata and a SHA-256, never bytes.
//!
//! Limits are enforced by the agent whatever the server asks: it clamps the requested caps to
//! [`MAX_ROWS`], [`MAX_BYTES`] and [`MAX_HASH_BYTES`], stops at the first cap reached and names
//! it in [`LiveAnswer::cap`]. The file question obeys the protected paths like every file
//! command (protected entries are skipped and counted, never named).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Rows one device answers when the query names no cap.
pub const DEFAULT_ROWS: u32 = 1_000;
/// Most rows one device ever answers, whatever the query asks.
pub const MAX_ROWS: u32 = 10_000;
/// Serialized row bytes one device answers when the query names no cap.
pub const DEFAULT_BYTES: u64 = 512 * 1024;
/// Most serialized row bytes one device ever answers.
pub const MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Most file bytes one device hashes for one query (files and executables together).
pub const MAX_HASH_BYTES: u64 = 256 * 1024 * 1024;
/// Largest single file hashed; a larger one is listed without a hash.
pub const MAX_HASH_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Most directory entries the file question visits on one device.
pub const MAX_WALK_ENTRIES: u64 = 100_000;
/// Longest filter text a question accepts.
pub const MAX_FILTER_CHARS: usize = 256;

/// One catalogue question with its parameters (`{"question":"processes","name":"ssh"}`).
/// Every text filter is a case-insensitive substring match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "question",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Question {
    /// Running processes; `hash` adds the SHA-256 of each executable.
    Processes {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default)]
        hash: bool,
    },
    /// Listening TCP and UDP sockets.
    ListeningPorts {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
    },
    /// Installed packages from the system package manager.
    Packages {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Local user accounts (`/etc/passwd`).
    Users {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Local groups and their members (`/etc/group`).
    Groups {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Logged-in sessions.
    Sessions,
    /// Services and their state.
    Services {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// `active`, `inactive`, `failed`, … (the active state, exact).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
    },
    /// Loaded kernel modules.
    KernelModules {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Files matching an absolute path glob (`*` and `?` within a component, `**` any depth),
    /// with size, modification time and SHA-256. Protected paths are skipped.
    Files { pattern: String },
    /// Cron entries and systemd timers.
    ScheduledTasks,
    /// Network interfaces and their addresses.
    Interfaces,
    /// Routing table entries.
    Routes,
}

impl Question {
    /// The catalogue name (`processes`, `files`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Question::Processes { .. } => "processes",
            Question::ListeningPorts { .. } => "listening_ports",
            Question::Packages { .. } => "packages",
            Question::Users { .. } => "users",
            Question::Groups { .. } => "groups",
            Question::Sessions => "sessions",
            Question::Services { .. } => "services",
            Question::KernelModules { .. } => "kernel_modules",
            Question::Files { .. } => "files",
            Question::ScheduledTasks => "scheduled_tasks",
            Question::Interfaces => "interfaces",
            Question::Routes => "routes",
        }
    }

    /// The catalogue entry.
    pub fn spec(&self) -> &'static QuestionSpec {
        let name = self.name();
        CATALOGUE
            .iter()
            .find(|q| q.name == name)
            .unwrap_or(&CATALOGUE[0])
    }

    /// The path the question reads by name (the file question's pattern), for the server's
    /// lexical check.
    pub fn path(&self) -> Option<&str> {
        match self {
            Question::Files { pattern } => Some(pattern.as_str()),
            _ => None,
        }
    }

    /// Checks the parameters before anything is sent: filter lengths, and an absolute file
    /// pattern free of `..` and NUL.
    pub fn validate(&self) -> Result<(), String> {
        let filters: Vec<&String> = match self {
            Question::Processes { name, .. }
            | Question::Packages { name }
            | Question::Users { name }
            | Question::Groups { name }
            | Question::KernelModules { name } => name.iter().collect(),
            Question::Services { name, state } => name.iter().chain(state.iter()).collect(),
            Question::Files { pattern } => {
                if !pattern.starts_with('/') {
                    return Err("the file pattern must be an absolute path".to_owned());
                }
                if pattern.contains('\0') || pattern.split('/').any(|c| c == "..") {
                    return Err("the file pattern may not hold `..` or NUL".to_owned());
                }
                if pattern.len() > crate::paths::MAX_PATH_BYTES {
                    return Err("the file pattern is too long".to_owned());
                }
                Vec::new()
            }
            _ => Vec::new(),
        };
        match filters
            .into_iter()
            .find(|f| f.chars().count() > MAX_FILTER_CHARS)
        {
            Some(_) => Err(format!(
                "a filter may hold at most {MAX_FILTER_CHARS} characters"
            )),
            None => Ok(()),
        }
    }
}

/// A column's type in a question's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    String,
    Integer,
    Number,
    Boolean,
    /// RFC 3339 text.
    Time,
    /// A list of strings.
    StringList,
}

/// One column of a question's rows. Every column may be `null` where the system does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Column {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub kind: ColumnType,
    pub description: &'static str,
}

/// One parameter a question takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Parameter {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub kind: ColumnType,
    pub required: bool,
    pub description: &'static str,
}

/// A catalogue entry: what the question answers, on which systems, and its row schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// Operating systems whose agent answers it (`linux` today).
    pub os: &'static [&'static str],
    pub parameters: &'static [Parameter],
    pub columns: &'static [Column],
    /// A rough rows-per-device figure for the prepare step's estimate.
    pub typical_rows: u32,
}

const fn col(name: &'static str, kind: ColumnType, description: &'static str) -> Column {
    Column {
        name,
        kind,
        description,
    }
}

const fn param(
    name: &'static str,
    kind: ColumnType,
    required: bool,
    description: &'static str,
) -> Parameter {
    Parameter {
        name,
        kind,
        required,
        description,
    }
}

use ColumnType::{Boolean, Integer, Number, String as Text, StringList, Time};

const NAME_FILTER: Parameter = param(
    "name",
    Text,
    false,
    "Case-insensitive substring of the name",
);
const LINUX: &[&str] = &["linux"];

/// Every question, in catalogue order.
pub const CATALOGUE: &[QuestionSpec] = &[
    QuestionSpec {
        name: "processes",
        title: "Running processes",
        description: "Processes with executable path, user, CPU and memory, start time and optionally the executable's SHA-256.",
        os: LINUX,
        parameters: &[
            NAME_FILTER,
            param(
                "hash",
                Boolean,
                false,
                "Add the SHA-256 of each executable (protected paths are not hashed)",
            ),
        ],
        columns: &[
            col("pid", Integer, "Process id"),
            col("name", Text, "Process name"),
            col("path", Text, "Executable path"),
            col("user", Text, "User name"),
            col("cpuPercent", Number, "Share of the whole machine's CPU"),
            col("memoryBytes", Integer, "Resident memory"),
            col("startedAt", Time, "Start time"),
            col("sha256", Text, "SHA-256 of the executable when asked"),
        ],
        typical_rows: 200,
    },
    QuestionSpec {
        name: "listening_ports",
        title: "Listening ports",
        description: "TCP and UDP sockets listening on this machine, with the owning process.",
        os: LINUX,
        parameters: &[param("port", Integer, false, "Only this port")],
        columns: &[
            col("protocol", Text, "tcp, tcp6, udp or udp6"),
            col("address", Text, "Bound address"),
            col("port", Integer, "Port"),
            col("process", Text, "Owning process name"),
            col("pid", Integer, "Owning process id"),
        ],
        typical_rows: 15,
    },
    QuestionSpec {
        name: "packages",
        title: "Installed packages",
        description: "Packages installed through the system package manager (dpkg, rpm or apk).",
        os: LINUX,
        parameters: &[NAME_FILTER],
        columns: &[
            col("name", Text, "Package name"),
            col("version", Text, "Installed version"),
            col("arch", Text, "Architecture"),
            col("source", Text, "Package manager: dpkg, rpm or apk"),
            col(
                "sourcePackage",
                Text,
                "Source package name, where the manager has one",
            ),
        ],
        typical_rows: 600,
    },
    QuestionSpec {
        name: "users",
        title: "Local users",
        description: "Local user accounts from /etc/passwd (no password data).",
        os: LINUX,
        parameters: &[NAME_FILTER],
        columns: &[
            col("name", Text, "User name"),
            col("uid", Integer, "User id"),
            col("gid", Integer, "Primary group id"),
            col("home", Text, "Home directory"),
            col("shell", Text, "Login shell"),
            col("description", Text, "GECOS field"),
        ],
        typical_rows: 30,
    },
    QuestionSpec {
        name: "groups",
        title: "Local groups",
        description: "Local groups from /etc/group and their members.",
        os: LINUX,
        parameters: &[NAME_FILTER],
        columns: &[
            col("name", Text, "Group name"),
            col("gid", Integer, "Group id"),
            col("members", StringList, "Member user names"),
        ],
        typical_rows: 50,
    },
    QuestionSpec {
        name: "sessions",
        title: "Logged-in sessions",
        description: "Users logged in now, with terminal, origin and idle time.",
        os: LINUX,
        parameters: &[],
        columns: &[
            col("user", Text, "User name"),
            col("terminal", Text, "Terminal line"),
            col("host", Text, "Remote host, when remote"),
            col("loginAt", Time, "Login time"),
            col(
                "idleSecs",
                Integer,
                "Seconds since the terminal's last input",
            ),
        ],
        typical_rows: 2,
    },
    QuestionSpec {
        name: "services",
        title: "Services",
        description: "System services (systemd units) and their state.",
        os: LINUX,
        parameters: &[
            NAME_FILTER,
            param(
                "state",
                Text,
                false,
                "Only this active state (active, inactive, failed, …)",
            ),
        ],
        columns: &[
            col("name", Text, "Unit name"),
            col("description", Text, "Description"),
            col("activeState", Text, "active, inactive, failed, …"),
            col("subState", Text, "running, exited, dead, …"),
            col(
                "enabled",
                Boolean,
                "Starts at boot (null when the unit file state is unknown)",
            ),
        ],
        typical_rows: 120,
    },
    QuestionSpec {
        name: "kernel_modules",
        title: "Kernel modules",
        description: "Loaded kernel modules from /proc/modules.",
        os: LINUX,
        parameters: &[NAME_FILTER],
        columns: &[
            col("name", Text, "Module name"),
            col("sizeBytes", Integer, "Size in memory"),
            col("usedBy", StringList, "Modules using it"),
            col("state", Text, "Live, Loading or Unloading"),
        ],
        typical_rows: 80,
    },
    QuestionSpec {
        name: "files",
        title: "Files by path",
        description: "Files matching an absolute path glob with size, modification time and SHA-256; never their contents. Protected paths are skipped; bounded by entries visited, rows and bytes hashed.",
        os: LINUX,
        parameters: &[param(
            "pattern",
            Text,
            true,
            "Absolute glob: * and ? within a component, ** any depth (e.g. /opt/**/*.jar)",
        )],
        columns: &[
            col("path", Text, "Path"),
            col("sizeBytes", Integer, "Size"),
            col("modifiedAt", Time, "Modification time"),
            col("mode", Text, "Permission bits in octal"),
            col("uid", Integer, "Owner user id"),
            col(
                "sha256",
                Text,
                "SHA-256 of the content (null past the hash limits)",
            ),
        ],
        typical_rows: 10,
    },
    QuestionSpec {
        name: "scheduled_tasks",
        title: "Scheduled tasks",
        description: "Cron entries (system crontab, /etc/cron.d, user crontabs) and systemd timers.",
        os: LINUX,
        parameters: &[],
        columns: &[
            col("kind", Text, "cron or systemd_timer"),
            col("source", Text, "File or unit that defines it"),
            col("schedule", Text, "Cron schedule or the timer's next run"),
            col("user", Text, "User it runs as, when known"),
            col("command", Text, "Command or the unit it activates"),
        ],
        typical_rows: 15,
    },
    QuestionSpec {
        name: "interfaces",
        title: "Network interfaces",
        description: "Network interfaces with MAC and addresses.",
        os: LINUX,
        parameters: &[],
        columns: &[
            col("name", Text, "Interface name"),
            col("mac", Text, "MAC address"),
            col("addresses", StringList, "Addresses in CIDR form"),
        ],
        typical_rows: 4,
    },
    QuestionSpec {
        name: "routes",
        title: "Routes",
        description: "IPv4 and IPv6 routing table entries.",
        os: LINUX,
        parameters: &[],
        columns: &[
            col("destination", Text, "Destination in CIDR form"),
            col("gateway", Text, "Next hop, null when on-link"),
            col("interface", Text, "Interface"),
            col("metric", Integer, "Metric"),
        ],
        typical_rows: 6,
    },
];

/// A question's catalogue entry by name.
pub fn spec(name: &str) -> Option<&'static QuestionSpec> {
    CATALOGUE.iter().find(|q| q.name == name)
}

/// Which cap stopped an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cap {
    /// The row cap.
    Rows,
    /// The serialized-bytes cap.
    Bytes,
    /// The bytes-hashed cap (later files listed without a hash).
    HashBytes,
    /// The directory entries the file question may visit.
    WalkEntries,
}

/// One device's answer to a live query (the command's `result`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveAnswer {
    pub question: String,
    /// Objects whose keys are the question's columns.
    pub rows: Vec<Value>,
    /// The cap that stopped the answer, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<Cap>,
    /// Serialized bytes of `rows`.
    pub bytes: u64,
    /// Entries left out because they are protected (the file and process questions).
    #[serde(default)]
    pub protected_skipped: u64,
}

/// The caps an agent applies: the asked ones (0 means the default) clamped to the maxima.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub rows: u32,
    pub bytes: u64,
}

impl Caps {
    /// Clamps `rows` and `bytes` (0: the default) to [`MAX_ROWS`] and [`MAX_BYTES`].
    pub fn clamp(rows: u32, bytes: u64) -> Caps {
        Caps {
            rows: if rows == 0 {
                DEFAULT_ROWS
            } else {
                rows.min(MAX_ROWS)
            },
            bytes: if bytes == 0 {
                DEFAULT_BYTES
            } else {
                bytes.min(MAX_BYTES)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn questions_round_trip_and_name_their_spec() {
        let qs = [
            Question::Processes {
                name: Some("ssh".into()),
                hash: true,
            },
            Question::ListeningPorts { port: Some(22) },
            Question::Packages { name: None },
            Question::Users { name: None },
            Question::Groups { name: None },
            Question::Sessions,
            Question::Services {
                name: None,
                state: Some("failed".into()),
            },
            Question::KernelModules { name: None },
            Question::Files {
                pattern: "/opt/**/*.jar".into(),
            },
            Question::ScheduledTasks,
            Question::Interfaces,
            Question::Routes,
        ];
        assert_eq!(qs.len(), CATALOGUE.len());
        for q in qs {
            let kind = crate::CommandKind::LiveQuery {
                question: q.clone(),
                max_rows: 7,
                max_bytes: 0,
            };
            let wire = serde_json::to_value(&kind).unwrap();
            assert_eq!(wire["type"], "live_query");
            assert_eq!(wire["question"], q.name());
            assert_eq!(wire["maxRows"], 7);
            let back: crate::CommandKind = serde_json::from_value(wire).unwrap();
            assert_eq!(back, kind);
            let v = serde_json::to_value(&q).unwrap();
            assert_eq!(v["question"], q.name());
            assert_eq!(q.spec().name, q.name());
            let back: Question = serde_json::from_value(v).unwrap();
            assert_eq!(back, q);
        }
    }

    #[test]
    fn catalogue_names_are_unique() {
        let mut names: Vec<_> = CATALOGUE.iter().map(|q| q.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CATALOGUE.len());
    }

    #[test]
    fn caps_clamp_to_the_maxima() {
        assert_eq!(Caps::clamp(0, 0).rows, DEFAULT_ROWS);
        assert_eq!(Caps::clamp(u32::MAX, u64::MAX).rows, MAX_ROWS);
        assert_eq!(Caps::clamp(u32::MAX, u64::MAX).bytes, MAX_BYTES);
        assert_eq!(Caps::clamp(5, 10).bytes, 10);
    }

    #[test]
    fn file_patterns_are_validated() {
        let bad = ["relative/*", "/etc/../etc/shadow", "/a\0b"];
        for p in bad {
            assert!(
                Question::Files { pattern: p.into() }.validate().is_err(),
                "{p}"
            );
        }
        assert!(
            Question::Files {
                pattern: "/opt/**/*.jar".into()
            }
            .validate()
            .is_ok()
        );
        let long = "x".repeat(MAX_FILTER_CHARS + 1);
        assert!(Question::Users { name: Some(long) }.validate().is_err());
    }
}
