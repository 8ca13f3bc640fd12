//! Dynamic device groups' filters: conditions over a device's fields, tags and inventory, and
//! what they mean.
//!
//! A filter is data (stored as JSON with the group); [`GroupFilter::validate`] checks each
//! condition's operator and value against its field, and [`GroupFilter::matches`] decides one
//! device from its [`DeviceFacts`] at an instant (for `lastSeenMinutes`). Text comparisons are
//! case-insensitive; `matches` is a glob (`*` any run, `?` one character) over the whole value.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Device, Timestamp};

/// The most conditions one filter may hold.
pub const MAX_CONDITIONS: usize = 20;
/// The most values of one `in` condition.
pub const MAX_IN_VALUES: usize = 100;
/// The longest text value.
pub const MAX_VALUE_CHARS: usize = 255;

/// All conditions must hold, or any one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchMode {
    #[default]
    All,
    Any,
}

/// What a condition looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FilterField {
    /// The OS family: linux, windows, macos, other.
    Os,
    OsName,
    OsVersion,
    Hostname,
    /// The site's id.
    Site,
    /// online, offline, maintenance.
    Status,
    AgentVersion,
    /// Any of the device's tags.
    Tag,
    /// Any installed package's name (from the latest inventory).
    Package,
    /// Minutes since the device was last seen (never seen: no value).
    LastSeenMinutes,
    /// Free space of the fullest disk, percent (from the latest inventory).
    DiskFreePercent,
}

impl FilterField {
    /// Whether the field holds a number (compared with gt, lt) rather than text.
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            FilterField::LastSeenMinutes | FilterField::DiskFreePercent
        )
    }

    /// Whether deciding it needs the device's inventory.
    pub fn needs_inventory(self) -> bool {
        matches!(self, FilterField::Package | FilterField::DiskFreePercent)
    }
}

/// How a condition compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FilterOp {
    Eq,
    Ne,
    Contains,
    StartsWith,
    /// A glob over the whole value.
    Matches,
    /// Equal to one of a list.
    In,
    Gt,
    Lt,
}

/// One condition: `field op value`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterCondition {
    pub field: FilterField,
    pub op: FilterOp,
    pub value: Value,
}

/// A dynamic group's filter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupFilter {
    #[serde(default, rename = "match")]
    pub mode: MatchMode,
    pub conditions: Vec<FilterCondition>,
}

/// What a filter is decided on for one device.
#[derive(Debug, Clone, Copy)]
pub struct DeviceFacts<'a> {
    pub device: &'a Device,
    /// Installed package names (empty without an inventory).
    pub packages: &'a [String],
    pub disk_free_percent: Option<f64>,
}

impl GroupFilter {
    /// Whether the filter's answer changes as time passes with no write to the device
    /// (`lastSeenMinutes`): such groups are re-evaluated periodically.
    pub fn depends_on_time(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.field == FilterField::LastSeenMinutes)
    }

    /// Checks every condition's operator and value against its field.
    pub fn validate(&self) -> Result<(), String> {
        if self.conditions.is_empty() {
            return Err("a filter needs at least one condition".into());
        }
        if self.conditions.len() > MAX_CONDITIONS {
            return Err(format!(
                "a filter holds at most {MAX_CONDITIONS} conditions"
            ));
        }
        for (i, c) in self.conditions.iter().enumerate() {
            c.validate().map_err(|e| format!("conditions[{i}]: {e}"))?;
        }
        Ok(())
    }

    /// Whether any condition needs the inventory (packages, disks).
    pub fn needs_inventory(&self) -> bool {
        self.conditions.iter().any(|c| c.field.needs_inventory())
    }

    /// Whether the device matches at `now`.
    pub fn matches(&self, facts: &DeviceFacts<'_>, now: Timestamp) -> bool {
        let mut each = self.conditions.iter().map(|c| c.matches(facts, now));
        match self.mode {
            MatchMode::All => each.all(|b| b),
            MatchMode::Any => each.any(|b| b),
        }
    }
}

fn text_value(v: &Value) -> Result<&str, String> {
    let s = v.as_str().ok_or("the value must be a string")?;
    if s.is_empty() || s.chars().count() > MAX_VALUE_CHARS {
        return Err(format!("the value must be 1-{MAX_VALUE_CHARS} characters"));
    }
    Ok(s)
}

impl FilterCondition {
    fn validate(&self) -> Result<(), String> {
        if self.field.is_numeric() {
            if !matches!(self.op, FilterOp::Gt | FilterOp::Lt) {
                return Err(format!("{:?} compares with gt or lt", self.field));
            }
            let n = self.value.as_f64().ok_or("the value must be a number")?;
            if !n.is_finite() || n < 0.0 {
                return Err("the value must be a non-negative number".into());
            }
            return Ok(());
        }
        match self.op {
            FilterOp::Gt | FilterOp::Lt => {
                Err(format!("{:?} is text: gt and lt do not apply", self.field))
            }
            FilterOp::In => {
                let list = self.value.as_array().ok_or("in takes a list of strings")?;
                if list.is_empty() || list.len() > MAX_IN_VALUES {
                    return Err(format!("in takes 1-{MAX_IN_VALUES} values"));
                }
                list.iter().try_for_each(|v| text_value(v).map(drop))
            }
            _ => text_value(&self.value).map(drop),
        }
    }

    fn matches(&self, facts: &DeviceFacts<'_>, now: Timestamp) -> bool {
        let d = facts.device;
        if self.field.is_numeric() {
            let Some(threshold) = self.value.as_f64() else {
                return false;
            };
            let value = match self.field {
                FilterField::LastSeenMinutes => d
                    .last_seen_at
                    .map(|t| (now - t).num_seconds() as f64 / 60.0),
                _ => facts.disk_free_percent,
            };
            return value.is_some_and(|v| match self.op {
                FilterOp::Gt => v > threshold,
                FilterOp::Lt => v < threshold,
                _ => false,
            });
        }
        let site = d.site_id.to_string();
        let single = |v: &str| -> Vec<String> { vec![v.to_owned()] };
        let values: Vec<String> = match self.field {
            FilterField::Os => single(d.os_family.as_str()),
            FilterField::OsName => single(&d.os_name),
            FilterField::OsVersion => single(&d.os_version),
            FilterField::Hostname => single(&d.hostname),
            FilterField::Site => single(&site),
            FilterField::Status => single(d.status.as_str()),
            FilterField::AgentVersion => d.agent_version.iter().cloned().collect(),
            FilterField::Tag => d.tags.clone(),
            FilterField::Package => facts.packages.to_vec(),
            FilterField::LastSeenMinutes | FilterField::DiskFreePercent => Vec::new(),
        };
        let has = |pred: &dyn Fn(&str) -> bool| values.iter().any(|v| pred(&v.to_lowercase()));
        let want = self.value.as_str().unwrap_or("").to_lowercase();
        match self.op {
            FilterOp::Eq => has(&|v| v == want),
            // "Not equal" of a many-valued field: none of its values is equal.
            FilterOp::Ne => !has(&|v| v == want),
            FilterOp::Contains => has(&|v| v.contains(&want)),
            FilterOp::StartsWith => has(&|v| v.starts_with(&want)),
            FilterOp::Matches => has(&|v| glob(&want, v)),
            FilterOp::In => {
                let list: Vec<String> = self
                    .value
                    .as_array()
                    .map(|l| {
                        l.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_lowercase)
                            .collect()
                    })
                    .unwrap_or_default();
                has(&|v| list.iter().any(|w| w == v))
            }
            FilterOp::Gt | FilterOp::Lt => false,
        }
    }
}

/// Whether `text` matches the glob `pattern` (`*` any run, `?` one character), whole.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn device() -> Device {
        Device {
            id: crate::DeviceId::new(),
            org_id: crate::OrgId::new(),
            site_id: crate::SiteId(uuid::Uuid::nil()),
            hostname: "Web-01".into(),
            os_family: crate::OsFamily::Linux,
            os_name: "Debian GNU/Linux".into(),
            os_version: "12.5".into(),
            status: crate::DeviceStatus::Online,
            agent_version: Some("0.3.1".into()),
            last_seen_at: Some("2026-01-01T11:50:00Z".parse().unwrap()),
            tags: vec!["prod".into(), "web_tier".into()],
            created_at: "2025-01-01T00:00:00Z".parse().unwrap(),
            suspected_clone_of: None,
        }
    }

    /// Each field with each operator that applies to it, matching and not.
    #[test]
    fn every_field_and_operator() {
        let d = device();
        let packages = vec!["openssl".to_owned(), "nginx-core".to_owned()];
        let facts = DeviceFacts {
            device: &d,
            packages: &packages,
            disk_free_percent: Some(12.5),
        };
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let nil = uuid::Uuid::nil().to_string();
        let text = |v: &str| serde_json::json!(v);
        #[rustfmt::skip]
        let rows: Vec<(FilterField, FilterOp, Value, bool)> = vec![
            (FilterField::Os, FilterOp::Eq, text("linux"), true),
            (FilterField::Os, FilterOp::Eq, text("windows"), false),
            (FilterField::Os, FilterOp::Ne, text("windows"), true),
            (FilterField::Os, FilterOp::In, serde_json::json!(["macos", "LINUX"]), true),
            (FilterField::Os, FilterOp::In, serde_json::json!(["macos"]), false),
            (FilterField::OsName, FilterOp::Contains, text("gnu"), true),
            (FilterField::OsName, FilterOp::StartsWith, text("debian"), true),
            (FilterField::OsName, FilterOp::StartsWith, text("ubuntu"), false),
            (FilterField::OsVersion, FilterOp::Matches, text("12.*"), true),
            (FilterField::OsVersion, FilterOp::Matches, text("11.*"), false),
            (FilterField::Hostname, FilterOp::Matches, text("web-??"), true),
            (FilterField::Hostname, FilterOp::Matches, text("web-?"), false),
            (FilterField::Hostname, FilterOp::Eq, text("WEB-01"), true),
            (FilterField::Hostname, FilterOp::Contains, text("db"), false),
            (FilterField::Site, FilterOp::Eq, text(&nil), true),
            (FilterField::Site, FilterOp::Ne, text(&nil), false),
            (FilterField::Status, FilterOp::Eq, text("online"), true),
            (FilterField::Status, FilterOp::In, serde_json::json!(["offline", "maintenance"]), false),
            (FilterField::AgentVersion, FilterOp::StartsWith, text("0.3"), true),
            (FilterField::AgentVersion, FilterOp::Eq, text("0.2.0"), false),
            (FilterField::Tag, FilterOp::Eq, text("prod"), true),
            (FilterField::Tag, FilterOp::Eq, text("staging"), false),
            (FilterField::Tag, FilterOp::Ne, text("prod"), false),
            (FilterField::Tag, FilterOp::Ne, text("staging"), true),
            (FilterField::Tag, FilterOp::StartsWith, text("web"), true),
            (FilterField::Package, FilterOp::Eq, text("openssl"), true),
            (FilterField::Package, FilterOp::Matches, text("nginx*"), true),
            (FilterField::Package, FilterOp::Contains, text("apache"), false),
            (FilterField::Package, FilterOp::Ne, text("telnetd"), true),
            (FilterField::LastSeenMinutes, FilterOp::Gt, serde_json::json!(5), true),
            (FilterField::LastSeenMinutes, FilterOp::Lt, serde_json::json!(5), false),
            (FilterField::LastSeenMinutes, FilterOp::Lt, serde_json::json!(15), true),
            (FilterField::DiskFreePercent, FilterOp::Lt, serde_json::json!(20), true),
            (FilterField::DiskFreePercent, FilterOp::Gt, serde_json::json!(20), false),
        ];
        for (field, op, value, expected) in rows {
            let f = GroupFilter {
                mode: MatchMode::All,
                conditions: vec![FilterCondition {
                    field,
                    op,
                    value: value.clone(),
                }],
            };
            f.validate().unwrap();
            assert_eq!(f.matches(&facts, now), expected, "{field:?} {op:?} {value}");
        }
        // Without an inventory or a last-seen time, numeric conditions hold for no device.
        let mut never = device();
        never.last_seen_at = None;
        let bare = DeviceFacts {
            device: &never,
            packages: &[],
            disk_free_percent: None,
        };
        for field in [FilterField::LastSeenMinutes, FilterField::DiskFreePercent] {
            for op in [FilterOp::Gt, FilterOp::Lt] {
                let f = GroupFilter {
                    mode: MatchMode::All,
                    conditions: vec![FilterCondition {
                        field,
                        op,
                        value: serde_json::json!(0),
                    }],
                };
                assert!(!f.matches(&bare, now), "{field:?} {op:?}");
            }
        }
        // all / any.
        let two = |mode| GroupFilter {
            mode,
            conditions: vec![
                FilterCondition {
                    field: FilterField::Os,
                    op: FilterOp::Eq,
                    value: text("linux"),
                },
                FilterCondition {
                    field: FilterField::Tag,
                    op: FilterOp::Eq,
                    value: text("db"),
                },
            ],
        };
        assert!(!two(MatchMode::All).matches(&facts, now));
        assert!(two(MatchMode::Any).matches(&facts, now));
    }

    #[test]
    fn invalid_filters_are_refused() {
        let one = |field, op, value: Value| GroupFilter {
            mode: MatchMode::All,
            conditions: vec![FilterCondition { field, op, value }],
        };
        for f in [
            one(FilterField::Hostname, FilterOp::Gt, serde_json::json!("a")),
            one(
                FilterField::DiskFreePercent,
                FilterOp::Eq,
                serde_json::json!(5),
            ),
            one(
                FilterField::DiskFreePercent,
                FilterOp::Lt,
                serde_json::json!("5"),
            ),
            one(
                FilterField::LastSeenMinutes,
                FilterOp::Gt,
                serde_json::json!(-1),
            ),
            one(FilterField::Tag, FilterOp::Eq, serde_json::json!("")),
            one(
                FilterField::Tag,
                FilterOp::Eq,
                serde_json::json!("x".repeat(256)),
            ),
            one(FilterField::Os, FilterOp::In, serde_json::json!([])),
            one(FilterField::Os, FilterOp::In, serde_json::json!("linux")),
            one(FilterField::Os, FilterOp::Eq, serde_json::json!(["linux"])),
            GroupFilter {
                mode: MatchMode::Any,
                conditions: vec![],
            },
        ] {
            assert!(f.validate().is_err(), "{f:?}");
        }
        let many = GroupFilter {
            mode: MatchMode::All,
            conditions: vec![
                FilterCondition {
                    field: FilterField::Tag,
                    op: FilterOp::Eq,
                    value: serde_json::json!("x"),
                };
                MAX_CONDITIONS + 1
            ],
        };
        assert!(many.validate().is_err());
    }

    #[test]
    fn globs_match_whole_values() {
        assert!(glob("web-*", "web-01"));
        assert!(glob("*-0?", "db-01"));
        assert!(!glob("web-*", "db-web-01"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }
}
