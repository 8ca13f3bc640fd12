//! Managed devices and their status.

use serde::Serialize;

use crate::{DeviceId, OrgId, SiteId, Timestamp, string_enum};

string_enum! {
    /// Whether a device's agent is reachable.
    pub enum DeviceStatus: "device status" {
        Online = "online",
        Offline = "offline",
        /// Deliberately taken out of monitoring for a while.
        Maintenance = "maintenance",
    }
}

string_enum! {
    /// Where a device command is in its life: it moves forward only, from pending (queued) to
    /// sent, running and one of the final states.
    pub enum CommandStatus: "command status" {
        /// Queued; no agent has it yet.
        Pending = "pending",
        /// Handed to the agent's socket or heartbeat.
        Sent = "sent",
        /// The agent started it.
        Running = "running",
        Completed = "completed",
        Failed = "failed",
        /// Past its deadline, queued or running.
        TimedOut = "timed_out",
        Cancelled = "cancelled",
    }
}

impl CommandStatus {
    /// Whether the command reached a final state.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            CommandStatus::Pending | CommandStatus::Sent | CommandStatus::Running
        )
    }
}

/// What a device's agent reported in one batch: the gateway announces it, the alert engine
/// evaluates the rules such a batch can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TelemetryKind {
    /// A metrics batch: the metric rules.
    Metrics,
    /// An events batch: the event rules.
    Events,
}

string_enum! {
    /// The operating system family a device runs.
    pub enum OsFamily: "OS family" {
        Linux = "linux",
        Windows = "windows",
        Macos = "macos",
        Other = "other",
    }
}

/// A machine with (eventually) a Breeze agent on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct Device {
    pub id: DeviceId,
    pub org_id: OrgId,
    pub site_id: SiteId,
    pub hostname: String,
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "String"))]
    pub os_family: OsFamily,
    pub os_name: String,
    pub os_version: String,
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "String"))]
    pub status: DeviceStatus,
    pub agent_version: Option<String>,
    pub last_seen_at: Option<Timestamp>,
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub tags: Vec<String>,
    pub created_at: Timestamp,
    /// Set when this device enrolled with the machine id of an existing device and without
    /// proof of being it (a re-enroll token or that device's token): a possible clone or
    /// impostor of that device, kept apart from it.
    pub suspected_clone_of: Option<DeviceId>,
}
