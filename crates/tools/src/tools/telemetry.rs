//! What agents report, read back: `analyze_metrics` (time series with summaries),
//! `get_active_users` (sessions and reboot safety), `get_user_experience_metrics` (login
//! performance and session behaviour) and `search_agent_logs`. Database reads only; offline
//! devices are fine.

use std::collections::BTreeMap;

use breeze_core::{Permission, Timestamp};
use breeze_store::{AgentLogFilter, Aggregation, MetricPoint, MetricTotals};
use chrono::{DateTime, Duration, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{DEVICE_NOT_FOUND, Level, devices::find_device};
use crate::reach;
use crate::{NoActions, Registry, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<AnalyzeMetrics>();
    r.register::<GetActiveUsers>();
    r.register::<GetUserExperienceMetrics>();
    r.register::<SearchAgentLogs>();
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

// --- analyze_metrics -------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Metric {
    Cpu,
    Ram,
    Disk,
    Network,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum AggregationArg {
    Raw,
    Hourly,
    Daily,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct MetricsInput {
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    /// cpu, ram, disk, network or all (default).
    metric: Option<Metric>,
    /// How far back (1-168 hours, default 24).
    #[schemars(range(min = 1, max = 168))]
    hours_back: Option<u32>,
    /// raw, hourly or daily (default: raw up to 24 hours, else hourly).
    aggregation: Option<AggregationArg>,
}

/// Minimum, maximum, average and latest of a percentage series.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Stats {
    min: f64,
    max: f64,
    avg: f64,
    current: f64,
}

impl Stats {
    /// From the series' totals (`min` of the averages, `max` of the maxima, the
    /// sample-weighted average) and its newest point.
    fn of(totals: &MetricTotals, last: Option<&MetricPoint>, pick: Pick) -> Option<Self> {
        let last = last?;
        let (weighted, min, max, current) = match pick {
            Pick::Cpu => (
                totals.cpu_weighted,
                totals.cpu_min,
                totals.cpu_max,
                last.cpu_avg,
            ),
            Pick::Ram => (
                totals.ram_weighted,
                totals.ram_min,
                totals.ram_max,
                last.ram_avg,
            ),
            Pick::Disk => (
                totals.disk_weighted,
                totals.disk_min,
                totals.disk_max,
                last.disk_avg,
            ),
        };
        Some(Stats {
            min: round2(min),
            max: round2(max.max(0.0)),
            avg: round2(weighted / totals.samples.max(1) as f64),
            current: round2(current),
        })
    }
}

#[derive(Clone, Copy)]
enum Pick {
    Cpu,
    Ram,
    Disk,
}

/// One point of the series. The fields are in alphabetical order, the order the answer has
/// always had (it was a JSON map); a metric not asked for is left out.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Point {
    at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_avg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    net_rx_bytes: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    net_tx_bytes: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ram_avg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ram_max: Option<f64>,
    samples: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MetricsOutput {
    device_id: String,
    hostname: String,
    aggregation: String,
    from: String,
    to: String,
    /// Samples behind the series.
    data_points: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ram: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<Stats>,
    /// Bytes received and sent over the range.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    network: Option<Value>,
    /// The series, oldest first (at most 500 points).
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    points: Vec<Point>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

const MAX_POINTS: u32 = 500;

pub(crate) struct AnalyzeMetrics;

impl Tool for AnalyzeMetrics {
    const NAME: &'static str = "analyze_metrics";
    const TITLE: &'static str = "Analyze metrics";
    const DESCRIPTION: &'static str = "A device's CPU, RAM, disk and network time series with min/max/avg/current summaries, raw or aggregated hourly or daily, up to 168 hours back.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = MetricsInput;
    type Output = MetricsOutput;
    type Reach = (reach::Devices, reach::Telemetry);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        let hours = input.hours_back.unwrap_or(24);
        let aggregation = match input.aggregation {
            Some(AggregationArg::Raw) => Aggregation::Raw,
            Some(AggregationArg::Hourly) => Aggregation::Hourly,
            Some(AggregationArg::Daily) => Aggregation::Daily,
            None if hours <= 24 => Aggregation::Raw,
            None => Aggregation::Hourly,
        };
        let to = cx.now();
        let from = to - Duration::hours(i64::from(hours));
        // The summaries are counted in the database; only the points shown are read out.
        let (totals, points) = cx
            .telemetry()
            .query_metrics_tail(
                &device,
                from,
                to + Duration::seconds(1),
                aggregation,
                MAX_POINTS,
            )
            .await?;
        let metric = input.metric.unwrap_or(Metric::All);
        let wants = |m: Metric| metric == Metric::All || metric == m;
        let (cpu, ram, disk, net) = (
            wants(Metric::Cpu),
            wants(Metric::Ram),
            wants(Metric::Disk),
            wants(Metric::Network),
        );
        let series: Vec<Point> = points
            .iter()
            .map(|p| Point {
                at: p.at.to_rfc3339(),
                samples: p.samples,
                cpu_avg: cpu.then(|| round2(p.cpu_avg)),
                cpu_max: cpu.then(|| round2(p.cpu_max)),
                ram_avg: ram.then(|| round2(p.ram_avg)),
                ram_max: ram.then(|| round2(p.ram_max)),
                disk_max: disk.then(|| round2(p.disk_max)),
                net_rx_bytes: net.then_some(p.net_rx_bytes),
                net_tx_bytes: net.then_some(p.net_tx_bytes),
            })
            .collect();
        let name = match aggregation {
            Aggregation::Raw => "raw",
            Aggregation::Hourly => "hourly",
            Aggregation::Daily => "daily",
        };
        let stats = |wanted: bool, pick: Pick| {
            totals
                .as_ref()
                .filter(|_| wanted)
                .and_then(|t| Stats::of(t, points.last(), pick))
        };
        Ok(MetricsOutput {
            device_id: device.id.to_string(),
            hostname: device.hostname,
            aggregation: name.into(),
            from: from.to_rfc3339(),
            to: to.to_rfc3339(),
            data_points: totals.as_ref().map_or(0, |t| t.samples),
            cpu: stats(cpu, Pick::Cpu),
            ram: stats(ram, Pick::Ram),
            disk: stats(disk, Pick::Disk),
            network: totals
                .as_ref()
                .filter(|_| net)
                .map(|t| json!({ "rxBytes": t.net_rx_bytes, "txBytes": t.net_tx_bytes })),
            message: totals
                .is_none()
                .then(|| "No metrics found for the specified time range".to_owned()),
            points: series,
        })
    }
}

// --- get_active_users ------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ActiveUsersInput {
    /// One device (UUID); all of the organization's when omitted.
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    /// How many devices to list (1-200, default 100).
    #[schemars(range(min = 1, max = 200))]
    limit: Option<u32>,
    /// Sessions idle at least this long (minutes, 1-1440, default 15) do not block a reboot.
    #[schemars(range(min = 1, max = 1440))]
    idle_threshold_minutes: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceSessions {
    device_id: String,
    hostname: String,
    device_status: String,
    active_session_count: usize,
    blocking_session_count: usize,
    /// No session would be interrupted by a reboot (none, or all idle past the threshold).
    safe_to_reboot: bool,
    pending_reboot: bool,
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    sessions: Vec<Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActiveUsersOutput {
    idle_threshold_minutes: u32,
    total_active_sessions: usize,
    total_devices_with_sessions: usize,
    devices: Vec<DeviceSessions>,
}

pub(crate) struct GetActiveUsers;

impl Tool for GetActiveUsers {
    const NAME: &'static str = "get_active_users";
    const TITLE: &'static str = "Get active users";
    const DESCRIPTION: &'static str = "Who is logged in, per device or fleet-wide, from the agents' latest heartbeats, with a reboot-safety signal: a session blocks a reboot unless it has been idle past the threshold.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = ActiveUsersInput;
    type Output = ActiveUsersOutput;
    type Reach = (reach::Agents, reach::Devices);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let only = match &input.device_id {
            Some(id) => Some(find_device(cx, id).await?.id),
            None => None,
        };
        let threshold = input.idle_threshold_minutes.unwrap_or(15);
        let limit = input.limit.unwrap_or(100);
        let mut out = Vec::new();
        for device in cx.agents().signed_in(only, limit).await? {
            let sessions: Vec<Value> = device
                .logged_in_users
                .iter()
                .map(|s| {
                    let idle = s.idle_secs.map(|i| i / 60);
                    json!({
                        "username": s.username,
                        "terminal": s.terminal,
                        "host": s.host,
                        "loginAt": s.login_at.map(|t| t.to_rfc3339()),
                        "idleMinutes": idle,
                        "blocksReboot": idle.is_none_or(|m| m < u64::from(threshold)),
                    })
                })
                .collect();
            let blocking = sessions
                .iter()
                .filter(|s| s["blocksReboot"] == true)
                .count();
            out.push(DeviceSessions {
                device_id: device.device_id.to_string(),
                hostname: device.hostname,
                device_status: device.status.to_string(),
                active_session_count: sessions.len(),
                blocking_session_count: blocking,
                safe_to_reboot: blocking == 0,
                pending_reboot: device.pending_reboot,
                sessions,
            });
        }
        Ok(ActiveUsersOutput {
            idle_threshold_minutes: threshold,
            total_active_sessions: out.iter().map(|d| d.active_session_count).sum(),
            total_devices_with_sessions: out.iter().filter(|d| d.active_session_count > 0).count(),
            devices: out,
        })
    }
}

// --- get_user_experience_metrics -------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExperienceInput {
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    #[schemars(length(min = 1, max = 255))]
    username: Option<String>,
    /// How far back (1-365 days, default 30).
    #[schemars(range(min = 1, max = 365))]
    days_back: Option<u32>,
    /// Sessions to consider (1-500, default 200).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExperienceOutput {
    days_back: u32,
    total_sessions: usize,
    active_sessions: usize,
    /// Average seconds from login to a usable session, and average session length.
    #[schemars(with = "serde_json::Map<String, Value>")]
    averages: Value,
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    per_user: Vec<Value>,
    /// The newest sessions (at most 100).
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    trend: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .filter(|v| v.is_finite() && *v >= 0.0)
        .fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| round2(sum / f64::from(n)))
}

fn duration_secs(login: Timestamp, logout: Option<Timestamp>, now: DateTime<Utc>) -> f64 {
    (logout.unwrap_or(now) - login).num_seconds() as f64
}

pub(crate) struct GetUserExperienceMetrics;

impl Tool for GetUserExperienceMetrics {
    const NAME: &'static str = "get_user_experience_metrics";
    const TITLE: &'static str = "Get user experience metrics";
    const DESCRIPTION: &'static str = "Login performance and session behaviour over time, per device or user, from the sessions agents report: average login duration, session length, per-user figures and the newest sessions.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = ExperienceInput;
    type Output = ExperienceOutput;
    type Reach = (reach::Agents, reach::Devices);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = match &input.device_id {
            Some(id) => Some(find_device(cx, id).await?.id),
            None => None,
        };
        let days = input.days_back.unwrap_or(30);
        let now = cx.now();
        let sessions = cx
            .agents()
            .user_sessions(
                device,
                input.username.as_deref(),
                now - Duration::days(i64::from(days)),
                input.limit.unwrap_or(200),
            )
            .await?;
        let mut per_user: BTreeMap<&str, Vec<&breeze_store::UserSessionRecord>> = BTreeMap::new();
        for s in &sessions {
            per_user.entry(&s.username).or_default().push(s);
        }
        let mut users: Vec<Value> = per_user
            .iter()
            .map(|(name, rows)| {
                json!({
                    "username": name,
                    "sessionCount": rows.len(),
                    "avgLoginPerformanceSeconds": mean(rows.iter().filter_map(|r| r.login_duration_secs)),
                    "avgSessionDurationSeconds": mean(rows.iter().map(|r| duration_secs(r.login_at, r.logout_at, now))),
                })
            })
            .collect();
        users.sort_by_key(|u| std::cmp::Reverse(u["sessionCount"].as_u64().unwrap_or(0)));
        let trend = sessions
            .iter()
            .take(100)
            .map(|s| {
                json!({
                    "deviceId": s.device_id.to_string(),
                    "username": s.username,
                    "loginAt": s.login_at.to_rfc3339(),
                    "logoutAt": s.logout_at.map(|t| t.to_rfc3339()),
                    "loginPerformanceSeconds": s.login_duration_secs,
                    "durationSeconds": duration_secs(s.login_at, s.logout_at, now),
                })
            })
            .collect();
        Ok(ExperienceOutput {
            days_back: days,
            total_sessions: sessions.len(),
            active_sessions: sessions.iter().filter(|s| s.logout_at.is_none()).count(),
            averages: json!({
                "loginPerformanceSeconds": mean(sessions.iter().filter_map(|s| s.login_duration_secs)),
                "sessionDurationSeconds": mean(sessions.iter().map(|s| duration_secs(s.login_at, s.logout_at, now))),
            }),
            per_user: users,
            trend,
            message: sessions
                .is_empty()
                .then(|| "No session data found for the selected filters.".to_owned()),
        })
    }
}

// --- search_agent_logs -----------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LogsInput {
    /// Only these devices (at most 50).
    #[schemars(length(max = 50))]
    device_ids: Option<Vec<String>>,
    /// This level and above.
    level: Option<Level>,
    /// Substring of the agent component (module) that logged.
    #[schemars(length(min = 1, max = 100))]
    component: Option<String>,
    /// RFC 3339 start of the range.
    #[schemars(length(min = 20, max = 40))]
    start_time: Option<String>,
    /// RFC 3339 end of the range.
    #[schemars(length(min = 20, max = 40))]
    end_time: Option<String>,
    /// Case-insensitive text in the message.
    #[schemars(length(min = 1, max = 500))]
    message: Option<String>,
    /// 1-500, default 100.
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LogsOutput {
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    logs: Vec<Value>,
    count: usize,
}

fn time_arg(field: &str, value: Option<&str>) -> Result<Option<Timestamp>, ToolError> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ToolError::invalid(format!("{field}: {v:?} is not an RFC 3339 time")))
        })
        .transpose()
}

pub(crate) struct SearchAgentLogs;

impl Tool for SearchAgentLogs {
    const NAME: &'static str = "search_agent_logs";
    const TITLE: &'static str = "Search agent logs";
    const DESCRIPTION: &'static str = "Search the diagnostic logs agents ship, newest first, by device, minimum level, component, time range and message text. Raise what an agent ships with set_agent_log_level.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = LogsInput;
    type Output = LogsOutput;
    type Reach = (reach::Agents, reach::Devices);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let mut device_ids = Vec::new();
        for id in input.device_ids.iter().flatten() {
            device_ids.push(
                find_device(cx, id)
                    .await
                    .map_err(|_| ToolError::not_found(DEVICE_NOT_FOUND))?
                    .id,
            );
        }
        let filter = AgentLogFilter {
            device_ids,
            min_level: input.level.map(Into::into),
            component: input.component.clone(),
            text: input.message.clone(),
            since: time_arg("startTime", input.start_time.as_deref())?,
            until: time_arg("endTime", input.end_time.as_deref())?,
            limit: input.limit.unwrap_or(100),
        };
        let logs: Vec<Value> = cx
            .agents()
            .search_agent_logs(&filter)
            .await?
            .into_iter()
            .map(|l| {
                json!({
                    "deviceId": l.device_id.to_string(),
                    "timestamp": l.at.to_rfc3339(),
                    "level": l.level,
                    "component": l.target,
                    "message": l.message,
                })
            })
            .collect();
        Ok(LogsOutput {
            count: logs.len(),
            logs,
        })
    }
}
