//! Reporting vocabulary: what a report holds (its kind), how it is written (its format), the
//! state of one generation, and the filters a definition keeps. Pure data; the store reads the
//! rows and writes the output.

use serde::{Deserialize, Serialize};

use crate::{DeviceStatus, OsFamily, Severity, SiteId, string_enum};

string_enum! {
    /// What a report holds.
    pub enum ReportKind: "report kind" {
        /// Every device of the organization (or those the filters keep): identity, site,
        /// status, OS, agent version, last seen, tags.
        DeviceInventory = "device_inventory",
        /// The alerts raised in the period, with their state and who acknowledged or resolved
        /// them.
        AlertHistory = "alert_history",
        /// The organization's audit records in the period.
        AuditActivity = "audit_activity",
        /// Each device's last patch scan: when, how many updates are available (security
        /// ones apart), whether a reboot is pending, and the scan's error if it failed.
        PatchStatus = "patch_status",
        /// Each device's status against each compliance policy that covers it, and when it was
        /// last evaluated.
        ComplianceStatus = "compliance_status",
    }
}

string_enum! {
    /// How a report is written.
    pub enum ReportFormat: "report format" {
        /// One JSON array of objects (camelCase keys).
        Json = "json",
        /// RFC 4180 CSV with a header row.
        Csv = "csv",
        /// A PDF 1.4 table, A4 landscape (the header on every page).
        Pdf = "pdf",
    }
}

string_enum! {
    /// Where one generation of a report is.
    pub enum ReportStatus: "report status" {
        Running = "running",
        Completed = "completed",
        Failed = "failed",
    }
}

/// The longest period (in hours) an alert or audit report may cover: one year.
pub const MAX_REPORT_HOURS: u32 = 8_760;
/// The period an alert or audit report covers when none is given: one week.
pub const DEFAULT_REPORT_HOURS: u32 = 168;

/// What a report keeps. Device filters apply to inventory, patch and compliance reports,
/// `severity` to alert history, `since_hours` (back from the generation) to alert history and
/// audit activity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportFilters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeviceStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_type: Option<OsFamily>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_id: Option<SiteId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_hours: Option<u32>,
}

impl ReportFilters {
    /// Checks the filters make sense for `kind`, naming the first that does not.
    pub fn validate(&self, kind: ReportKind) -> Result<(), String> {
        if let Some(h) = self.since_hours
            && (h == 0 || h > MAX_REPORT_HOURS)
        {
            return Err(format!(
                "sinceHours must be 1 to {MAX_REPORT_HOURS}, not {h}"
            ));
        }
        let device = self.status.is_some() || self.os_type.is_some() || self.site_id.is_some();
        match kind {
            ReportKind::DeviceInventory
                if self.severity.is_some() || self.since_hours.is_some() =>
            {
                Err("a device inventory takes status, osType and siteId filters only".into())
            }
            ReportKind::AlertHistory if device => {
                Err("an alert history takes severity and sinceHours filters only".into())
            }
            ReportKind::AuditActivity if device || self.severity.is_some() => {
                Err("an audit activity report takes the sinceHours filter only".into())
            }
            ReportKind::PatchStatus | ReportKind::ComplianceStatus
                if self.severity.is_some() || self.since_hours.is_some() =>
            {
                Err(format!(
                    "a {kind} report takes status, osType and siteId filters only"
                ))
            }
            _ => Ok(()),
        }
    }

    /// The period covered, in hours (the default when none is set).
    pub fn hours(&self) -> u32 {
        self.since_hours.unwrap_or(DEFAULT_REPORT_HOURS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_against_the_kind() {
        let inventory = ReportFilters {
            status: Some(DeviceStatus::Online),
            ..Default::default()
        };
        assert!(inventory.validate(ReportKind::DeviceInventory).is_ok());
        assert!(inventory.validate(ReportKind::AlertHistory).is_err());
        assert!(inventory.validate(ReportKind::AuditActivity).is_err());
        let period = ReportFilters {
            since_hours: Some(24),
            ..Default::default()
        };
        assert!(period.validate(ReportKind::DeviceInventory).is_err());
        assert!(period.validate(ReportKind::AuditActivity).is_ok());
        for bad in [0, MAX_REPORT_HOURS + 1] {
            let f = ReportFilters {
                since_hours: Some(bad),
                ..Default::default()
            };
            assert!(f.validate(ReportKind::AlertHistory).is_err());
        }
        assert_eq!(ReportFilters::default().hours(), DEFAULT_REPORT_HOURS);
        assert!(
            serde_json::from_str::<ReportFilters>(r#"{"hostname":"x"}"#).is_err(),
            "unknown filters are refused"
        );
    }
}
