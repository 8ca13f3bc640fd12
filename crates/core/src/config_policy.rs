//! Configuration policies: typed feature settings and their resolution through the hierarchy.
//!
//! A policy carries settings for some feature types ([`FeatureType`]); an assignment attaches
//! it at one level of the hierarchy ([`ConfigLevel`]: partner, organization, site, device
//! group, device) with a priority. A device's effective configuration is resolved *per
//! setting* (each top-level field of a feature's settings): among the assignments that cover
//! the device and whose policy sets that field, the one on the nearest level wins, then the
//! highest priority, then the oldest assignment (smallest UUIDv7). Every effective value names
//! its source ([`Source`]). Everything here is pure: the store loads the candidates, this
//! module decides.
//!
//! Settings are typed ([`MonitoringSettings`], [`AgentLogSettings`], [`PatchSettings`],
//! [`MaintenanceSettings`], [`MonitoredServicesSettings`]) and checked by
//! [`validate_feature`], whose errors name the bad field (`monitoring.metricIntervalSeconds:
//! …`). Every field is optional, so a policy may set one interval and leave the rest to
//! policies farther up.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::string_enum;

string_enum! {
    /// Where an assignment attaches, farthest first (the derived order is nearness).
    pub enum ConfigLevel: "configuration level" {
        Partner = "partner",
        Organization = "organization",
        Site = "site",
        DeviceGroup = "device_group",
        Device = "device",
    }
}

string_enum! {
    /// What a policy can configure.
    pub enum FeatureType: "feature type" {
        /// Metric and inventory intervals (the agent applies them).
        Monitoring = "monitoring",
        /// The agent's shipped log level (the agent applies it).
        AgentLog = "agent_log",
        /// Patch approval, schedule and reboot settings.
        Patch = "patch",
        /// The maintenance schedule and what it suppresses.
        Maintenance = "maintenance",
        /// Services the agent watches.
        MonitoredServices = "monitored_services",
    }
}

string_enum! {
    /// A configuration policy's state; only active policies' assignments resolve.
    pub enum PolicyStatus: "policy status" {
        Active = "active",
        Inactive = "inactive",
    }
}

/// Bounds of the monitoring intervals, in seconds.
pub const METRIC_INTERVAL_SECS: (u32, u32) = (5, 3600);
pub const INVENTORY_INTERVAL_SECS: (u32, u32) = (60, 86_400);
/// The most services one policy monitors.
pub const MAX_MONITORED_SERVICES: usize = 50;

/// `monitoring`: how often the agent samples metrics and collects inventory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MonitoringSettings {
    /// Seconds between metric samples (5–3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 3600))]
    pub metric_interval_seconds: Option<u32>,
    /// Seconds between inventory collections (60–86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 86400))]
    pub inventory_interval_seconds: Option<u32>,
}

/// A log level as policies name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogLevelSetting {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// `agent_log`: the level the agent ships its own logs at.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentLogSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<LogLevelSetting>,
}

/// Patch severities a policy may auto-approve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PatchSeverity {
    Critical,
    Important,
    Moderate,
    Low,
}

/// How often patches install.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PatchFrequency {
    Daily,
    Weekly,
    Monthly,
}

/// What happens after patches that want a reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RebootPolicy {
    Never,
    IfRequired,
    Always,
}

/// `patch`: approval, schedule and reboot handling.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve_severities: Option<Vec<PatchSeverity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_frequency: Option<PatchFrequency>,
    /// Local time HH:MM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_policy: Option<RebootPolicy>,
    /// Minutes a logged-in user is warned before a reboot (0–1440).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1440))]
    pub reboot_delay_minutes: Option<u32>,
    /// Minutes between the agent's own patch scans (5–10080; default daily).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 10080))]
    pub scan_interval_minutes: Option<u32>,
}

/// How a maintenance schedule recurs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Recurrence {
    Daily,
    Weekly,
    Monthly,
}

/// `maintenance`: the recurring window and what it holds back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<Recurrence>,
    /// Local start time HH:MM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// 1–24.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 24))]
    pub duration_hours: Option<u32>,
    /// IANA zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppress_alerts: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppress_patching: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_if_pending: Option<bool>,
}

/// One service the agent watches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MonitoredService {
    /// The unit name, e.g. `sshd.service` (1–200 characters).
    pub name: String,
    /// Restart it when it is found stopped.
    #[serde(default)]
    pub restart_on_failure: bool,
}

/// `monitored_services`: the services the agent watches (the list replaces, never merges).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MonitoredServicesSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<MonitoredService>>,
}

/// Settings that failed to parse or validate; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{feature}.{field}: {message}")]
pub struct SettingsError {
    pub feature: FeatureType,
    /// The field's path inside the feature's settings (`.` for the settings themselves).
    pub field: String,
    pub message: String,
}

fn err(feature: FeatureType, field: &str, message: impl Into<String>) -> SettingsError {
    SettingsError {
        feature,
        field: field.to_owned(),
        message: message.into(),
    }
}

fn in_range(
    feature: FeatureType,
    field: &str,
    value: Option<u32>,
    (min, max): (u32, u32),
) -> Result<(), SettingsError> {
    match value {
        Some(v) if v < min || v > max => Err(err(
            feature,
            field,
            format!("{v} is not between {min} and {max}"),
        )),
        _ => Ok(()),
    }
}

fn hhmm(feature: FeatureType, field: &str, value: Option<&str>) -> Result<(), SettingsError> {
    match value {
        Some(v) => crate::maintenance::parse_hhmm(v)
            .map(|_| ())
            .map_err(|e| err(feature, field, e)),
        None => Ok(()),
    }
}

fn parse<T: serde::de::DeserializeOwned>(
    feature: FeatureType,
    settings: &Value,
) -> Result<T, SettingsError> {
    if !settings.is_object() {
        return Err(err(feature, ".", "settings must be a JSON object"));
    }
    serde_path_to_error::deserialize(settings).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde names an unknown field itself; point at the object holding it.
        err(feature, &path, inner)
    })
}

fn to_map<T: Serialize>(value: &T) -> Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// Parses and checks one feature's settings, answering them normalized (as the typed struct
/// serializes them, unset fields left out). At least one field must be set.
pub fn validate_feature(
    feature: FeatureType,
    settings: &Value,
) -> Result<Map<String, Value>, SettingsError> {
    let map = match feature {
        FeatureType::Monitoring => {
            let s: MonitoringSettings = parse(feature, settings)?;
            in_range(
                feature,
                "metricIntervalSeconds",
                s.metric_interval_seconds,
                METRIC_INTERVAL_SECS,
            )?;
            in_range(
                feature,
                "inventoryIntervalSeconds",
                s.inventory_interval_seconds,
                INVENTORY_INTERVAL_SECS,
            )?;
            to_map(&s)
        }
        FeatureType::AgentLog => to_map(&parse::<AgentLogSettings>(feature, settings)?),
        FeatureType::Patch => {
            let s: PatchSettings = parse(feature, settings)?;
            hhmm(feature, "scheduleTime", s.schedule_time.as_deref())?;
            in_range(
                feature,
                "rebootDelayMinutes",
                s.reboot_delay_minutes,
                (0, 1440),
            )?;
            in_range(
                feature,
                "scanIntervalMinutes",
                s.scan_interval_minutes,
                (5, 10080),
            )?;
            to_map(&s)
        }
        FeatureType::Maintenance => {
            let s: MaintenanceSettings = parse(feature, settings)?;
            hhmm(feature, "startTime", s.start_time.as_deref())?;
            in_range(feature, "durationHours", s.duration_hours, (1, 24))?;
            if let Some(tz) = &s.time_zone {
                crate::maintenance::parse_time_zone(tz).map_err(|e| err(feature, "timeZone", e))?;
            }
            to_map(&s)
        }
        FeatureType::MonitoredServices => {
            let s: MonitoredServicesSettings = parse(feature, settings)?;
            if let Some(services) = &s.services {
                if services.len() > MAX_MONITORED_SERVICES {
                    return Err(err(
                        feature,
                        "services",
                        format!("at most {MAX_MONITORED_SERVICES} services"),
                    ));
                }
                for (i, svc) in services.iter().enumerate() {
                    let n = svc.name.chars().count();
                    let clean = svc
                        .name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "@._-:".contains(c));
                    if n == 0 || n > 200 || !clean {
                        return Err(err(
                            feature,
                            &format!("services[{i}].name"),
                            "1–200 characters of letters, digits and @._-:",
                        ));
                    }
                }
            }
            to_map(&s)
        }
    };
    if map.is_empty() {
        return Err(err(feature, ".", "sets nothing; give at least one field"));
    }
    Ok(map)
}

/// The JSON schema of a feature's settings (for documentation and clients).
pub fn feature_schema(feature: FeatureType) -> Value {
    let schema = match feature {
        FeatureType::Monitoring => schemars::schema_for!(MonitoringSettings),
        FeatureType::AgentLog => schemars::schema_for!(AgentLogSettings),
        FeatureType::Patch => schemars::schema_for!(PatchSettings),
        FeatureType::Maintenance => schemars::schema_for!(MaintenanceSettings),
        FeatureType::MonitoredServices => schemars::schema_for!(MonitoredServicesSettings),
    };
    schema.to_value()
}

/// A policy's settings: feature type → the fields it sets (validated).
pub type PolicySettings = BTreeMap<FeatureType, Map<String, Value>>;

/// Where a device sits in the hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePlace {
    pub device: Uuid,
    pub site: Uuid,
    pub groups: Vec<Uuid>,
    pub org: Uuid,
    pub partner: Uuid,
}

impl DevicePlace {
    /// Whether an assignment at `level` on `target` covers this device.
    pub fn covers(&self, level: ConfigLevel, target: Uuid) -> bool {
        match level {
            ConfigLevel::Device => self.device == target,
            ConfigLevel::DeviceGroup => self.groups.contains(&target),
            ConfigLevel::Site => self.site == target,
            ConfigLevel::Organization => self.org == target,
            ConfigLevel::Partner => self.partner == target,
        }
    }
}

/// Which assignment an effective value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    pub assignment_id: Uuid,
    pub policy_id: Uuid,
    pub policy_name: String,
    pub level: String,
    pub target_id: Uuid,
    pub priority: i32,
}

/// One assignment that may apply, with its policy's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub assignment_id: Uuid,
    pub policy_id: Uuid,
    pub policy_name: String,
    pub level: ConfigLevel,
    pub target_id: Uuid,
    pub priority: i32,
    pub settings: std::sync::Arc<PolicySettings>,
}

impl Candidate {
    fn source(&self) -> Source {
        Source {
            assignment_id: self.assignment_id,
            policy_id: self.policy_id,
            policy_name: self.policy_name.clone(),
            level: self.level.as_str().to_owned(),
            target_id: self.target_id,
            priority: self.priority,
        }
    }

    /// The precedence key: nearer level, then higher priority, then the older assignment.
    fn rank(&self) -> (ConfigLevel, i32, std::cmp::Reverse<Uuid>) {
        (
            self.level,
            self.priority,
            std::cmp::Reverse(self.assignment_id),
        )
    }
}

/// One effective setting and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveValue {
    pub value: Value,
    pub source: Source,
}

/// A device's effective configuration: feature → field → value with its source.
pub type Effective = BTreeMap<FeatureType, BTreeMap<String, EffectiveValue>>;

/// Resolves the effective configuration from the candidates that cover one device (callers
/// filter with [`DevicePlace::covers`]; [`resolve_for`] does both).
pub fn resolve(candidates: &[&Candidate]) -> Effective {
    let mut best: BTreeMap<(FeatureType, &str), &Candidate> = BTreeMap::new();
    for c in candidates {
        for (feature, fields) in c.settings.iter() {
            for field in fields.keys() {
                let slot = best.entry((*feature, field.as_str())).or_insert(c);
                if c.rank() > slot.rank() {
                    *slot = c;
                }
            }
        }
    }
    let mut out = Effective::new();
    for ((feature, field), c) in best {
        let value = c
            .settings
            .get(&feature)
            .and_then(|f| f.get(field))
            .cloned()
            .unwrap_or(Value::Null);
        out.entry(feature).or_default().insert(
            field.to_owned(),
            EffectiveValue {
                value,
                source: c.source(),
            },
        );
    }
    out
}

/// The effective configuration of the device at `place` among `candidates`.
pub fn resolve_for(place: &DevicePlace, candidates: &[Candidate]) -> Effective {
    let covering: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| place.covers(c.level, c.target_id))
        .collect();
    resolve(&covering)
}

/// The merged settings of one feature (field → value), without sources.
pub fn feature_values(effective: &Effective, feature: FeatureType) -> Map<String, Value> {
    effective
        .get(&feature)
        .map(|fields| {
            fields
                .iter()
                .map(|(k, v)| (k.clone(), v.value.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// How one setting would change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingChange {
    pub feature: FeatureType,
    pub field: String,
    pub before: Option<EffectiveValue>,
    pub after: Option<EffectiveValue>,
}

/// The settings whose value or source differs between `before` and `after`.
pub fn diff(before: &Effective, after: &Effective) -> Vec<SettingChange> {
    let mut keys: Vec<(FeatureType, &String)> = Vec::new();
    for (f, fields) in before.iter().chain(after.iter()) {
        for k in fields.keys() {
            if !keys.contains(&(*f, k)) {
                keys.push((*f, k));
            }
        }
    }
    keys.sort();
    keys.into_iter()
        .filter_map(|(f, k)| {
            let b = before.get(&f).and_then(|m| m.get(k));
            let a = after.get(&f).and_then(|m| m.get(k));
            (b != a).then(|| SettingChange {
                feature: f,
                field: k.clone(),
                before: b.cloned(),
                after: a.cloned(),
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a panic is the failure report
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn errors_name_the_field() {
        let e = validate_feature(
            FeatureType::Monitoring,
            &json!({"metricIntervalSeconds": 2}),
        )
        .unwrap_err();
        assert_eq!(e.field, "metricIntervalSeconds");
        assert!(
            e.to_string()
                .starts_with("monitoring.metricIntervalSeconds:")
        );
        let e = validate_feature(
            FeatureType::Monitoring,
            &json!({"metricIntervalSeconds": "fast"}),
        )
        .unwrap_err();
        assert_eq!(e.field, "metricIntervalSeconds", "{e}");
        let e = validate_feature(FeatureType::AgentLog, &json!({"level": "loud"})).unwrap_err();
        assert_eq!(e.field, "level", "{e}");
        let e =
            validate_feature(FeatureType::Patch, &json!({"scheduleTime": "25:00"})).unwrap_err();
        assert_eq!(e.field, "scheduleTime");
        let e = validate_feature(FeatureType::Maintenance, &json!({"timeZone": "Mars/Base"}))
            .unwrap_err();
        assert_eq!(e.field, "timeZone");
        let e = validate_feature(
            FeatureType::MonitoredServices,
            &json!({"services": [{"name": "ok.service"}, {"name": "bad name"}]}),
        )
        .unwrap_err();
        assert_eq!(e.field, "services[1].name");
        let e = validate_feature(FeatureType::AgentLog, &json!({"colour": 1})).unwrap_err();
        assert!(e.message.contains("colour"), "{e}");
        assert!(validate_feature(FeatureType::AgentLog, &json!({})).is_err());
        assert!(validate_feature(FeatureType::AgentLog, &json!([1])).is_err());
        let ok = validate_feature(FeatureType::AgentLog, &json!({"level": "debug"})).unwrap();
        assert_eq!(Value::Object(ok), json!({"level": "debug"}));
        for f in FeatureType::ALL {
            assert_eq!(feature_schema(*f)["type"], "object");
        }
    }

    // ---- the property: random hierarchies, priorities and removals ----

    const FIELDS: [(FeatureType, &str); 3] = [
        (FeatureType::Monitoring, "metricIntervalSeconds"),
        (FeatureType::Monitoring, "inventoryIntervalSeconds"),
        (FeatureType::AgentLog, "level"),
    ];

    #[derive(Debug, Clone)]
    struct World {
        places: Vec<DevicePlace>,
        sites: Vec<Uuid>,
        groups: Vec<Uuid>,
        org: Uuid,
        partner: Uuid,
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn world(shape: &[(usize, Vec<bool>)]) -> World {
        let sites: Vec<Uuid> = (0..3).map(|i| id(100 + i)).collect();
        let groups: Vec<Uuid> = (0..3).map(|i| id(200 + i)).collect();
        let places = shape
            .iter()
            .enumerate()
            .map(|(i, (site, member))| DevicePlace {
                device: id(300 + i as u128),
                site: sites[site % sites.len()],
                groups: groups
                    .iter()
                    .zip(member)
                    .filter(|(_, m)| **m)
                    .map(|(g, _)| *g)
                    .collect(),
                org: id(1),
                partner: id(2),
            })
            .collect();
        World {
            places,
            sites,
            groups,
            org: id(1),
            partner: id(2),
        }
    }

    type Spec = (u8, usize, i32, Vec<Option<u32>>);

    fn candidate(w: &World, n: usize, (level, target, priority, values): &Spec) -> Candidate {
        let level = ConfigLevel::ALL[*level as usize % 5];
        let target_id = match level {
            ConfigLevel::Partner => w.partner,
            ConfigLevel::Organization => w.org,
            ConfigLevel::Site => w.sites[target % w.sites.len()],
            ConfigLevel::DeviceGroup => w.groups[target % w.groups.len()],
            ConfigLevel::Device => w.places[target % w.places.len()].device,
        };
        let mut settings = PolicySettings::new();
        for ((feature, field), v) in FIELDS.iter().zip(values) {
            if let Some(v) = v {
                settings
                    .entry(*feature)
                    .or_default()
                    .insert((*field).to_owned(), json!(v));
            }
        }
        // Assignment ids in a shuffled order so the tie-break is exercised.
        let assignment_id = id(10_000 + ((n as u128 * 7919) % 1000));
        Candidate {
            assignment_id,
            policy_id: id(5_000 + n as u128),
            policy_name: format!("p{n}"),
            level,
            target_id,
            priority: *priority,
            settings: Arc::new(settings),
        }
    }

    /// The rule, written independently: nearest level first, then the highest priority, then
    /// the oldest assignment — the first in that order that sets the field wins.
    fn expected(place: &DevicePlace, cands: &[Candidate], f: FeatureType, k: &str) -> Option<Uuid> {
        let mut covering: Vec<&Candidate> = cands
            .iter()
            .filter(|c| place.covers(c.level, c.target_id))
            .filter(|c| c.settings.get(&f).is_some_and(|m| m.contains_key(k)))
            .collect();
        covering.sort_by(|a, b| {
            b.level
                .cmp(&a.level)
                .then(b.priority.cmp(&a.priority))
                .then(a.assignment_id.cmp(&b.assignment_id))
        });
        covering.first().map(|c| c.assignment_id)
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            0u8..5,
            0usize..6,
            -2i32..3,
            proptest::collection::vec(proptest::option::of(5u32..100), 3),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn nearest_level_then_priority_wins_and_preview_equals_apply(
            shape in proptest::collection::vec((0usize..3, proptest::collection::vec(any::<bool>(), 3)), 1..6),
            specs in proptest::collection::vec(spec(), 0..12),
            removals in proptest::collection::vec(any::<bool>(), 12),
            added in spec(),
        ) {
            let w = world(&shape);
            let mut cands: Vec<Candidate> =
                specs.iter().enumerate().map(|(n, s)| candidate(&w, n, s)).collect();
            // Removals: drop some assignments.
            let mut i = 0;
            cands.retain(|_| { i += 1; !removals[i - 1] });
            for place in &w.places {
                let eff = resolve_for(place, &cands);
                for (f, k) in FIELDS {
                    let got = eff.get(&f).and_then(|m| m.get(k)).map(|v| v.source.assignment_id);
                    prop_assert_eq!(got, expected(place, &cands, f, k));
                }
            }
            // Preview (a diff over a hypothetical list) equals apply (the list changed, then
            // resolved), for an addition and for removing each assignment.
            let new = candidate(&w, 99, &added);
            for place in &w.places {
                let before = resolve_for(place, &cands);
                let mut with = cands.clone();
                with.push(new.clone());
                let preview = diff(&before, &resolve_for(place, &with));
                let mut applied = before.clone();
                for ch in &preview {
                    let m = applied.entry(ch.feature).or_default();
                    match &ch.after {
                        Some(v) => { m.insert(ch.field.clone(), v.clone()); }
                        None => { m.remove(&ch.field); }
                    }
                }
                applied.retain(|_, m| !m.is_empty());
                prop_assert_eq!(&applied, &resolve_for(place, &with));
                for gone in 0..cands.len() {
                    let mut without = cands.clone();
                    without.remove(gone);
                    let preview = diff(&before, &resolve_for(place, &without));
                    let changed = !preview.is_empty();
                    prop_assert_eq!(changed, before != resolve_for(place, &without));
                }
            }
        }
    }
}
