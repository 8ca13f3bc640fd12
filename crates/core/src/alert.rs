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
/// - `Event`: at least `count` events the device's agent reported within the last
///   `windowMinutes` match — the source and event kind when given (exactly), a severity at or
///   above `minSeverity`, and the message containing `messageContains` when given (ignoring
///   ASCII case). Clear when fewer match in the window, so an alert resolves itself once the
///   window passes without matching events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    Event(EventCondition),
}

/// The longest window an event condition may count over (a day, well inside the events'
/// retention).
pub const MAX_EVENT_WINDOW_MINUTES: u32 = 1440;
/// The most events an event condition may ask for in its window.
pub const MAX_EVENT_COUNT: u32 = 1000;
/// The longest source or event kind an agent reports (and a condition names).
pub const MAX_EVENT_NAME_CHARS: usize = 64;
/// The longest message substring a condition matches on.
pub const MAX_EVENT_PATTERN_CHARS: usize = 200;

/// Which agent-reported events a rule counts; see [`AlertCondition`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventCondition {
    /// The event source, e.g. `log_watch` or `agent`; any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The event kind, e.g. a log watch's name or `command_failed`; any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_kind: Option<String>,
    /// The least severity that counts.
    #[serde(default = "least_severity")]
    pub min_severity: Severity,
    /// A substring of the message (ASCII case ignored); any message when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_contains: Option<String>,
    /// How many matching events within the window breach (at least 1).
    #[serde(default = "one")]
    pub count: u32,
    /// The window, in minutes, counted back from now.
    pub window_minutes: u32,
}

fn least_severity() -> Severity {
    Severity::Info
}

fn one() -> u32 {
    1
}

/// Whether `name` is a valid event source or kind: 1–64 characters of ASCII letters, digits,
/// `_`, `-`, `.` and `:`.
pub fn is_event_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_EVENT_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

impl EventCondition {
    fn validate(&self) -> Result<(), String> {
        for (field, value) in [("source", &self.source), ("eventKind", &self.event_kind)] {
            if let Some(v) = value
                && !is_event_name(v)
            {
                return Err(format!(
                    "{field} {v:?} is not an event name (1-{MAX_EVENT_NAME_CHARS} ASCII letters, \
                     digits, '_', '-', '.', ':')"
                ));
            }
        }
        if let Some(m) = &self.message_contains {
            if m.trim().is_empty() {
                return Err("messageContains cannot be blank (leave it out to match any)".into());
            }
            if m.chars().count() > MAX_EVENT_PATTERN_CHARS {
                return Err(format!(
                    "messageContains is longer than {MAX_EVENT_PATTERN_CHARS} characters"
                ));
            }
        }
        if self.count == 0 || self.count > MAX_EVENT_COUNT {
            return Err(format!(
                "count must lie in 1-{MAX_EVENT_COUNT}, got {}",
                self.count
            ));
        }
        if self.window_minutes == 0 || self.window_minutes > MAX_EVENT_WINDOW_MINUTES {
            return Err(format!(
                "windowMinutes must lie in 1-{MAX_EVENT_WINDOW_MINUTES}, got {}",
                self.window_minutes
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let mut what = String::from("events");
        if let Some(s) = &self.source {
            what.push_str(&format!(" from {s}"));
        }
        if let Some(k) = &self.event_kind {
            what.push_str(&format!(" of kind {k}"));
        }
        if self.min_severity != Severity::Info {
            what.push_str(&format!(" at {} or worse", self.min_severity));
        }
        if let Some(m) = &self.message_contains {
            what.push_str(&format!(" containing {m:?}"));
        }
        format!(
            "{} or more {what} in {} min",
            self.count, self.window_minutes
        )
    }
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
            AlertCondition::Event(ref e) => e.validate(),
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
            AlertCondition::Event(ref e) => e.describe(),
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
        let event: AlertCondition = serde_json::from_value(serde_json::json!({
            "kind": "event", "source": "log_watch", "minSeverity": "high",
            "messageContains": "disk failure", "count": 3, "windowMinutes": 10
        }))
        .unwrap();
        assert!(event.validate().is_ok());
        assert_eq!(
            event.describe(),
            "3 or more events from log_watch at high or worse containing \"disk failure\" in 10 min"
        );
        let AlertCondition::Event(mut e) = event else {
            unreachable!()
        };
        e.count = 0;
        assert!(e.validate().unwrap_err().contains("count"));
        e.count = 1;
        e.source = Some("log watch".into());
        assert!(e.validate().unwrap_err().contains("source"));
        e.source = None;
        e.window_minutes = 2000;
        assert!(e.validate().unwrap_err().contains("windowMinutes"));
        assert!(
            serde_json::from_value::<AlertCondition>(serde_json::json!({
                "kind": "event", "windowMinutes": 5, "sevrity": "high"
            }))
            .is_err(),
            "a misspelled field is refused"
        );
        assert!(
            serde_json::from_value::<AlertCondition>(serde_json::json!({
                "kind": "offline", "minutes": 5, "extra": 1
            }))
            .is_err()
        );
    }
}
