//! The tools, one module per domain; each exposes `register`, called in [`crate::all`].

pub(crate) mod agent;
pub(crate) mod alerts;
pub(crate) mod approvals;
mod args;
pub(crate) mod audit;
pub(crate) mod automations;
pub(crate) mod catalog;
pub(crate) mod config_policies;
pub(crate) mod context;
pub(crate) mod contracts;
pub(crate) mod deployments;
mod device_command;
pub(crate) mod devices;
pub(crate) mod disk;
pub(crate) mod distributor;
pub(crate) mod groups;
pub(crate) mod invoices;
mod ledger;
pub(crate) mod live_queries;
pub(crate) mod maintenance;
pub(crate) mod patches;
pub(crate) mod policies;
pub(crate) mod quotes;
pub(crate) mod reports;
pub(crate) mod scripts;
pub(crate) mod security;
pub(crate) mod telemetry;
pub(crate) mod tickets;
pub(crate) mod vulnerabilities;

/// A device id argument, with the error every tool gives for a missing or foreign device.
pub(crate) const DEVICE_NOT_FOUND: &str = "Device not found or access denied";

/// Parses a UUID argument already validated as a string.
pub(crate) fn parse_uuid(field: &str, value: &str) -> Result<uuid::Uuid, crate::ToolError> {
    uuid::Uuid::parse_str(value)
        .map_err(|_| crate::ToolError::invalid(format!("{field}: {value:?} is not a UUID")))
}

/// An agent log level as tools accept it (trace is not offered).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl From<Level> for breeze_agent_proto::LogLevel {
    fn from(l: Level) -> Self {
        match l {
            Level::Debug => Self::Debug,
            Level::Info => Self::Info,
            Level::Warn => Self::Warn,
            Level::Error => Self::Error,
        }
    }
}
