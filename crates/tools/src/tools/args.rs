//! Arguments several tools share, and how they are read: a severity, the devices a rule,
//! window or policy targets, an id that must name something, a time. Kept apart from any one
//! tool so the tools that share them do not depend on one another.

use breeze_core::{DeviceGroupId, DeviceId, Severity, SiteId, Timestamp};
use breeze_store::RuleTarget;
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use crate::ToolError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SeverityArg {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl From<SeverityArg> for Severity {
    fn from(s: SeverityArg) -> Self {
        match s {
            SeverityArg::Info => Severity::Info,
            SeverityArg::Low => Severity::Low,
            SeverityArg::Medium => Severity::Medium,
            SeverityArg::High => Severity::High,
            SeverityArg::Critical => Severity::Critical,
        }
    }
}

pub(crate) fn uuid_or_missing(
    raw: Option<&str>,
    field: &str,
    missing: &str,
) -> Result<Uuid, ToolError> {
    let raw =
        raw.ok_or_else(|| ToolError::invalid(format!("{field} is required for this action")))?;
    Uuid::parse_str(raw).map_err(|_| ToolError::not_found(missing))
}

pub(crate) fn time_arg(field: &str, raw: Option<&str>) -> Result<Option<Timestamp>, ToolError> {
    raw.map(|t| {
        chrono::DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|_| ToolError::invalid(format!("{field}: {t:?} is not an RFC 3339 time")))
    })
    .transpose()
}

// Which devices a rule or maintenance window covers.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum TargetArg {
    Organization,
    #[serde(rename_all = "camelCase")]
    Site {
        #[schemars(length(min = 36, max = 36))]
        site_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Group {
        #[schemars(length(min = 36, max = 36))]
        group_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Device {
        #[schemars(length(min = 36, max = 36))]
        device_id: String,
    },
}

impl TargetArg {
    /// The target; an id that is not a UUID names nothing here, like another organization's.
    pub(crate) fn resolve(&self) -> Result<RuleTarget, ToolError> {
        let id = |raw: &str, what: &str| {
            Uuid::parse_str(raw)
                .map_err(|_| ToolError::not_found(format!("{what} not found or access denied")))
        };
        Ok(match self {
            TargetArg::Organization => RuleTarget::Organization,
            TargetArg::Site { site_id } => RuleTarget::Site(SiteId(id(site_id, "site")?)),
            TargetArg::Group { group_id } => {
                RuleTarget::Group(DeviceGroupId(id(group_id, "device group")?))
            }
            TargetArg::Device { device_id } => {
                RuleTarget::Device(DeviceId(id(device_id, "device")?))
            }
        })
    }
}
