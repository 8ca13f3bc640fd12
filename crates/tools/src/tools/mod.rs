//! The tools, one module per domain; each exposes `register`, called in [`crate::all`].

pub(crate) mod agent;
pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod context;
pub(crate) mod devices;
pub(crate) mod disk;
mod dispatch;
pub(crate) mod groups;
pub(crate) mod scripts;
pub(crate) mod telemetry;

/// A device id argument, with the error every tool gives for a missing or foreign device.
pub(crate) const DEVICE_NOT_FOUND: &str = "Device not found or access denied";

/// Parses a UUID argument already validated as a string.
pub(crate) fn parse_uuid(field: &str, value: &str) -> Result<uuid::Uuid, crate::ToolError> {
    uuid::Uuid::parse_str(value)
        .map_err(|_| crate::ToolError::invalid(format!("{field}: {value:?} is not a UUID")))
}
