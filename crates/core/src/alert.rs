//! Alerting vocabulary: severities, alert states, notification channel kinds, rule targets and
//! the conditions a rule watches.
//!
//! A condition is data (stored as JSON with the rule); what it means is stated here, next to
//! its validation, and the store evaluates it over the stored samples.

use serde::{Deserialize, Serialize};

use crate::string_enum;

string_enum! {
    /// How bad an alert is, least to most.
    pub enum Severity: "severity" {
        Info = "info",
        Low = "low",
        Medium = "medium",
        High = "high",
        Critical = "critical",
    }
}

string_enum! {
    /// Where an alert is in its life: open, acknowledged by someone, resolved (by someone or
    /// because its condition cleared). Only a resolved alert lets its rule raise another for the
    /// same device.
    pub enum AlertStatus: "alert status" {
        Open = "open",
        Acknowledged = "acknowledged",
        Resolved = "resolved",
    }
}

string_enum! {
    /// How a notification channel delivers.
    pub enum ChannelKind: "channel kind" {
        /// Mail through the server's SMTP relay to the channel's recipients.
        Email = "email",
        /// An HTTP POST of the alert, signed with the channel's secret (HMAC-SHA256).
        Webhook = "webhook",
        /// Recorded on the alert for the dashboard and tools to show; nothing leaves the server.
        InApp = "in_app",
    }
}

string_enum! {
    /// What a rule watches: every device of the organization, of one site, of one group, or one
    /// device.
    pub enum TargetKind: "target kind" {
        Organization = "organization",
        Site = "site",
        Group = "group",
        Device = "device",
    }
}

/// A measured quantity of a device's metric samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// CPU use, percent.
    Cpu,
    /// Memory use, percent.
    Memory,
    /// Use of the fullest disk, percent.
    Disk,
    /// Free space of the fullest disk, percent (100 − `Disk`).
    DiskFree,
    /// Bytes received per second, all interfaces, averaged over the duration.
    NetworkIn,
    /// Bytes sent per second, all interfaces, averaged over the duration.
    NetworkOut,
}

impl Metric {
    /// Whether the metric is a percentage (its threshold must lie in 0–100).
    pub fn is_percent(self) -> bool {
        !matches!(self, Metric::NetworkIn | Metric::NetworkOut)
    }

    /// Whether the metric is a rate averaged over the whole duration rather than a level every
    /// sample must pass.
    pub fn is_rate(self) -> bool {
        !self.is_percent()
    }
}

/// Which side of the threshold breaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparison {
    Above,
    Below,
}

impl Comparison {
    /// Whether `value` breaches `threshold`.
    pub fn breaches(self, value: f64, threshold: f64) -> bool {
        match self {
            Comparison::Above => value > threshold,
            Comparison::Below => value < threshold,
        }
    }
}

/// The longest duration a condition may ask for (a day): samples are kept raw for a week.
pub const MAX_CONDITION_MINUTES: u32 = 1440;

/// The longest offline period a rule may wait for (30 days).
pub const MAX_OFFLINE_MINUTES: u32 = 43_200;

/// What a rule watches on each targeted device.
///
/// - `Metric`, a level (`cpu`, `memory`, `disk`, `disk_free`): breaching when a sample at or
///   before `duration_minutes` ago breached and every sample since did, and the newest sample
///   is recent (within the store's sampling gap, two minutes) — "CPU above 90 % for 5 minutes";
///   with a duration of 0, when the newest sample breaches. Clear when the newest sample does
///   not breach.
/// - `Metric`, a rate (`network_in`, `network_out`): the bytes of the samples of the duration
///   divided by its seconds, once the samples cover the duration; clear when that average
///   does not breach.
/// - `Offline`: the device is offline and was last seen at least `minutes` ago (or never).
///   It clears when the device is back online.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AlertCondition {
    #[serde(rename_all = "camelCase")]
    Metric {
        metric: Metric,
        comparison: Comparison,
        threshold: f64,
        duration_minutes: u32,
    },
    Offline {
        minutes: u32,
    },
}

impl AlertCondition {
    /// Checks the condition's numbers; the error says which is wrong.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            AlertCondition::Metric {
                metric,
                threshold,
                duration_minutes,
                ..
            } => {
                if !threshold.is_finite() {
                    return Err("threshold must be a finite number".into());
                }
                if metric.is_percent() && !(0.0..=100.0).contains(&threshold) {
                    return Err(format!("threshold {threshold} is not a percentage (0-100)"));
                }
                if metric.is_rate() && threshold < 0.0 {
                    return Err("a rate threshold cannot be negative".into());
                }
                if metric.is_rate() && duration_minutes == 0 {
                    return Err("a network rate needs a duration of at least 1 minute".into());
                }
                if duration_minutes > MAX_CONDITION_MINUTES {
                    return Err(format!(
                        "durationMinutes {duration_minutes} is over the maximum of {MAX_CONDITION_MINUTES}"
                    ));
                }
                Ok(())
            }
            AlertCondition::Offline { minutes } => {
                if minutes == 0 || minutes > MAX_OFFLINE_MINUTES {
                    return Err(format!(
                        "minutes must lie in 1-{MAX_OFFLINE_MINUTES}, got {minutes}"
                    ));
                }
                Ok(())
            }
        }
    }

    /// A one-line statement of the condition, e.g. "cpu above 90 for 5 min".
    pub fn describe(&self) -> String {
        match *self {
            AlertCondition::Metric {
                metric,
                comparison,
                threshold,
                duration_minutes,
            } => {
                let metric = serde_json::to_value(metric)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let comparison = match comparison {
                    Comparison::Above => "above",
                    Comparison::Below => "below",
                };
                let unit = if metric.starts_with("network") {
                    " B/s"
                } else {
                    " %"
                };
                if duration_minutes == 0 {
                    format!("{metric} {comparison} {threshold}{unit}")
                } else {
                    format!("{metric} {comparison} {threshold}{unit} for {duration_minutes} min")
                }
            }
            AlertCondition::Offline { minutes } => format!("offline for {minutes} min"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_round_trip_and_validate() {
        let c: AlertCondition = serde_json::from_value(serde_json::json!({
            "kind": "metric", "metric": "cpu", "comparison": "above", "threshold": 90.0,
            "durationMinutes": 5
        }))
        .unwrap();
        assert_eq!(c.describe(), "cpu above 90 % for 5 min");
        assert!(c.validate().is_ok());
        let bad = AlertCondition::Metric {
            metric: Metric::Cpu,
            comparison: Comparison::Above,
            threshold: 190.0,
            duration_minutes: 5,
        };
        assert!(bad.validate().unwrap_err().contains("percentage"));
        let nan = AlertCondition::Metric {
            metric: Metric::NetworkIn,
            comparison: Comparison::Above,
            threshold: f64::NAN,
            duration_minutes: 5,
        };
        assert!(nan.validate().is_err());
        assert!(AlertCondition::Offline { minutes: 0 }.validate().is_err());
        assert!(
            serde_json::from_value::<AlertCondition>(serde_json::json!({
                "kind": "offline", "minutes": 5, "extra": 1
            }))
            .is_err()
        );
    }
}
