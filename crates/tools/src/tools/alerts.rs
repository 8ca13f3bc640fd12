//! `manage_alerts` (list, get, acknowledge, resolve, suppress) and `manage_alert_rules` (list,
//! get, create, update, delete, test, list_channels, summary).
//!
//! Reads are Tier 1; acknowledging, resolving, suppressing, creating and updating Tier 2;
//! deleting a rule Tier 3. Every change goes through `breeze_domain::alerts` (as the
//! dashboard's do) and is written with its audit record and, on an alert, a history entry that
//! `get` shows. Rule targets, channels, alerts and rules of another organization are "not
//! found", like missing ones (the store only reaches this organization's rows).

use breeze_core::{
    AlertCondition, AlertStatus, Comparison, DeviceId, EventCondition, Metric, Permission, Severity,
};
use breeze_domain::alerts::{AlertDesk, AlertMove};
use breeze_store::{
    Alert, AlertCursor, AlertEvent, AlertFilter, AlertRule, DeviceEvent, NewRule,
    NotificationChannel, Observed, RuleTarget, RuleUpdate, StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{
    args::{SeverityArg, TargetArg, time_arg, uuid_or_missing},
    parse_uuid,
};
use crate::reach::{self, Reach};
use crate::{Pin, RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManageAlerts>();
    r.register::<ManageAlertRules>();
}

const ALERT_NOT_FOUND: &str = "Alert not found or access denied";
const RULE_NOT_FOUND: &str = "Alert rule not found or access denied";

/// The most observations `test` lists (the counts cover every device).
const MAX_TEST_DEVICES: usize = 100;

// ---- manage_alerts ---------------------------------------------------------------------------

crate::actions! {
    // What `manage_alerts` does: reading is Tier 1, acknowledging, resolving and suppressing
    // Tier 2.
    pub(crate) enum AlertAction {
        List = "list" => (T1, Read, AlertsRead),
        Get = "get" => (T1, Read, AlertsRead),
        Acknowledge = "acknowledge" => (T2, Update, AlertsManage),
        Resolve = "resolve" => (T2, Update, AlertsManage),
        Suppress = "suppress" => (T2, Update, AlertsManage),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StatusArg {
    // open or acknowledged
    Active,
    Open,
    Acknowledged,
    Resolved,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AlertsInput {
    action: AlertAction,
    /// get, acknowledge, resolve, suppress.
    #[schemars(length(min = 36, max = 36))]
    alert_id: Option<String>,
    /// list filters: status, severity, deviceId, ruleId, startTime, endTime (RFC 3339).
    status: Option<StatusArg>,
    severity: Option<SeverityArg>,
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    #[schemars(length(min = 36, max = 36))]
    rule_id: Option<String>,
    #[schemars(length(max = 40))]
    start_time: Option<String>,
    #[schemars(length(max = 40))]
    end_time: Option<String>,
    /// default 25.
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
    /// The last page's nextCursor.
    #[schemars(length(max = 200))]
    cursor: Option<String>,
    /// acknowledge, resolve, suppress: kept on the alert.
    #[schemars(length(max = 2000))]
    note: Option<String>,
    /// suppress: for how long the rule raises nothing more on the device (default 240).
    #[schemars(range(min = 1, max = 43200))]
    suppress_minutes: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AlertHistoryEntry {
    at: String,
    kind: String,
    actor: String,
    note: Option<String>,
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    details: Option<Value>,
}

impl From<AlertEvent> for AlertHistoryEntry {
    fn from(e: AlertEvent) -> Self {
        Self {
            at: e.at.to_rfc3339(),
            kind: e.kind,
            actor: e.actor,
            note: e.note,
            details: e.details,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AlertView {
    id: String,
    rule_id: String,
    device_id: String,
    severity: String,
    status: String,
    title: String,
    message: String,
    value: Option<f64>,
    triggered_at: String,
    acknowledged_at: Option<String>,
    acknowledged_by: Option<String>,
    resolved_at: Option<String>,
    resolved_by: Option<String>,
    /// Suppressed: its rule raises nothing on the device until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    suppressed_until: Option<String>,
    /// get, acknowledge, resolve, suppress: what happened to the alert, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<Vec<AlertHistoryEntry>>,
    /// get, acknowledge, resolve, on an event rule's alert: the newest events (at most 10)
    /// that raised it, as they were then.
    #[serde(skip_serializing_if = "Option::is_none")]
    triggering_events: Option<Vec<EventView>>,
}

/// An event a device's agent reported.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct EventView {
    at: String,
    source: String,
    kind: String,
    severity: String,
    message: String,
    #[schemars(with = "serde_json::Map<String, Value>")]
    attributes: std::collections::BTreeMap<String, String>,
}

impl From<DeviceEvent> for EventView {
    fn from(e: DeviceEvent) -> Self {
        Self {
            at: e.at.to_rfc3339(),
            source: e.source,
            kind: e.kind,
            severity: e.severity.to_string(),
            message: e.message,
            attributes: e.attributes,
        }
    }
}

impl From<Alert> for AlertView {
    fn from(a: Alert) -> Self {
        Self {
            id: a.id.to_string(),
            rule_id: a.rule_id.to_string(),
            device_id: a.device_id.to_string(),
            severity: a.severity.to_string(),
            status: a.status.to_string(),
            title: a.title,
            message: a.message,
            value: a.value,
            triggered_at: a.triggered_at.to_rfc3339(),
            acknowledged_at: a.acknowledged_at.map(|t| t.to_rfc3339()),
            acknowledged_by: a.acknowledged_by,
            resolved_at: a.resolved_at.map(|t| t.to_rfc3339()),
            resolved_by: a.resolved_by,
            suppressed_until: a.suppressed_until.map(|t| t.to_rfc3339()),
            history: None,
            triggering_events: None,
        }
    }
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AlertsOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    alerts: Option<Vec<AlertView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alert: Option<AlertView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn alert_missing(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("alert") => ToolError::not_found(ALERT_NOT_FOUND),
        other => other.into(),
    }
}

async fn alert_with_history<R: Reach>(
    cx: &ToolCx<'_, R>,
    alert: Alert,
) -> Result<AlertView, ToolError> {
    let history = cx.alerts().alert_events(alert.id).await?;
    let events = cx.telemetry().alert_trigger_events(alert.id).await?;
    let mut view = AlertView::from(alert);
    view.history = Some(history.into_iter().map(AlertHistoryEntry::from).collect());
    if !events.is_empty() {
        view.triggering_events = Some(events.into_iter().map(EventView::from).collect());
    }
    Ok(view)
}

pub(crate) struct ManageAlerts;

impl Tool for ManageAlerts {
    const NAME: &'static str = "manage_alerts";
    const TITLE: &'static str = "Manage alerts";
    const DESCRIPTION: &'static str = "Alerts raised by alert rules. action=list (filtered, paged)|get (with history and an event rule's triggering events) read; acknowledge|resolve|suppress (resolve and hold the rule back on that device for suppressMinutes) (Tier 2) with an optional note.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::AlertsRead;
    type Actions = AlertAction;
    type Input = AlertsInput;
    type Output = Rendered<AlertsOutput>;
    type Reach = (reach::Alerts, reach::Telemetry);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            AlertAction::List => {
                let (status, unresolved) = match input.status {
                    None => (None, false),
                    Some(StatusArg::Active) => (None, true),
                    Some(StatusArg::Open) => (Some(AlertStatus::Open), false),
                    Some(StatusArg::Acknowledged) => (Some(AlertStatus::Acknowledged), false),
                    Some(StatusArg::Resolved) => (Some(AlertStatus::Resolved), false),
                };
                let filter = AlertFilter {
                    status,
                    unresolved,
                    severity: input.severity.map(Severity::from),
                    device: input
                        .device_id
                        .as_deref()
                        .map(|d| parse_uuid("deviceId", d).map(DeviceId))
                        .transpose()?,
                    rule: input
                        .rule_id
                        .as_deref()
                        .map(|r| parse_uuid("ruleId", r))
                        .transpose()?,
                    since: time_arg("startTime", input.start_time.as_deref())?,
                    until: time_arg("endTime", input.end_time.as_deref())?,
                };
                let after = input
                    .cursor
                    .as_deref()
                    .map(AlertCursor::decode)
                    .transpose()
                    .map_err(|_| ToolError::invalid("cursor is not one this listing returned"))?;
                let page = cx
                    .alerts()
                    .list_alerts(&filter, after, input.limit.unwrap_or(25).clamp(1, 100))
                    .await?;
                let alerts: Vec<AlertView> = page.alerts.into_iter().map(AlertView::from).collect();
                Rendered::of(&AlertsOutput {
                    showing: Some(alerts.len()),
                    alerts: Some(alerts),
                    next_cursor: page.next_cursor.map(|c| c.encode()),
                    ..Default::default()
                })
            }
            AlertAction::Get => {
                let id = uuid_or_missing(input.alert_id.as_deref(), "alertId", ALERT_NOT_FOUND)?;
                let alert = cx.alerts().get_alert(id).await.map_err(alert_missing)?;
                Rendered::of(&AlertsOutput {
                    alert: Some(alert_with_history(cx, alert).await?),
                    ..Default::default()
                })
            }
            AlertAction::Acknowledge | AlertAction::Resolve | AlertAction::Suppress => {
                let id = uuid_or_missing(input.alert_id.as_deref(), "alertId", ALERT_NOT_FOUND)?;
                let m = match input.action {
                    AlertAction::Acknowledge => AlertMove::Acknowledge,
                    AlertAction::Resolve => AlertMove::Resolve,
                    _ => AlertMove::Suppress {
                        until: cx.now()
                            + chrono::Duration::minutes(i64::from(
                                input.suppress_minutes.unwrap_or(240),
                            )),
                    },
                };
                let alert = desk(cx)
                    .apply(id, m, input.note.as_deref())
                    .await
                    .map_err(domain_alert_missing)?;
                Rendered::of(&AlertsOutput {
                    message: Some(format!("alert {}", m.done())),
                    alert: Some(alert_with_history(cx, alert).await?),
                    ..Default::default()
                })
            }
        }
    }
}

/// The alert desk for this call: its organization's alerts, as its actor.
fn desk<'a, R: Reach>(cx: &'a ToolCx<'_, R>) -> AlertDesk<'a> {
    AlertDesk::new(cx.alerts(), cx.actor.clone(), cx.request_id.clone())
}

fn domain_alert_missing(e: breeze_domain::Error) -> ToolError {
    let breeze_domain::Error::Store(e) = e;
    alert_missing(e)
}

fn domain_rule_missing(e: breeze_domain::Error) -> ToolError {
    let breeze_domain::Error::Store(e) = e;
    rule_missing(e)
}

// ---- manage_alert_rules ----------------------------------------------------------------------

crate::actions! {
    // What `manage_alert_rules` does: reading and testing are Tier 1, creating and updating
    // Tier 2, deleting Tier 3.
    pub(crate) enum RuleAction {
        List = "list" => (T1, Read, AlertsRead),
        Get = "get" => (T1, Read, AlertsRead),
        Create = "create" => (T2, Create, AlertsManage),
        Update = "update" => (T2, Update, AlertsManage),
        Delete = "delete" => (T3, Delete, AlertsManage),
        Test = "test" => (T1, Read, AlertsRead),
        ListChannels = "list_channels" => (T1, Read, AlertsRead),
        Summary = "summary" => (T1, Read, AlertsRead),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MetricArg {
    Cpu,
    Memory,
    Disk,
    DiskFree,
    NetworkIn,
    NetworkOut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ComparisonArg {
    Above,
    Below,
}

// What the rule watches on each device.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ConditionArg {
    // A metric past a threshold for a duration (every sample breaches; network rates are
    // averaged over it).
    #[serde(rename_all = "camelCase")]
    Metric {
        metric: MetricArg,
        comparison: ComparisonArg,
        /// Percent; bytes/s for network.
        #[schemars(range(min = 0.0, max = 1e12))]
        threshold: f64,
        /// 0 = the newest sample.
        #[schemars(range(min = 0, max = 1440))]
        duration_minutes: u32,
    },
    // Offline for at least `minutes`.
    Offline {
        #[schemars(range(min = 1, max = 43200))]
        minutes: u32,
    },
    // At least `count` matching events the device's agent reported within the last
    // `windowMinutes`; clears (and auto-resolves) once fewer match in the window.
    #[serde(rename_all = "camelCase")]
    Event {
        /// log_watch (a watched log file's matching line) or agent (the agent's own:
        /// agent_started, command_failed, script_failed); any source when absent.
        #[schemars(length(min = 1, max = 64))]
        source: Option<String>,
        /// The event kind: a log watch's name, or one of the agent's own kinds; any when
        /// absent.
        #[schemars(length(min = 1, max = 64))]
        event_kind: Option<String>,
        /// The least severity that counts (default info: all).
        min_severity: Option<SeverityArg>,
        /// A substring of the message, ASCII case ignored.
        #[schemars(length(min = 1, max = 200))]
        message_contains: Option<String>,
        /// Matching events that breach (default 1).
        #[schemars(range(min = 1, max = 1000))]
        count: Option<u32>,
        /// Required: the window counted back from now.
        #[schemars(range(min = 1, max = 1440))]
        window_minutes: Option<u32>,
    },
}

impl ConditionArg {
    /// The stored condition; an event condition without its window is refused by name.
    fn into_condition(self) -> Result<AlertCondition, ToolError> {
        Ok(match self {
            ConditionArg::Metric {
                metric,
                comparison,
                threshold,
                duration_minutes,
            } => AlertCondition::Metric {
                metric: match metric {
                    MetricArg::Cpu => Metric::Cpu,
                    MetricArg::Memory => Metric::Memory,
                    MetricArg::Disk => Metric::Disk,
                    MetricArg::DiskFree => Metric::DiskFree,
                    MetricArg::NetworkIn => Metric::NetworkIn,
                    MetricArg::NetworkOut => Metric::NetworkOut,
                },
                comparison: match comparison {
                    ComparisonArg::Above => Comparison::Above,
                    ComparisonArg::Below => Comparison::Below,
                },
                threshold,
                duration_minutes,
            },
            ConditionArg::Offline { minutes } => AlertCondition::Offline { minutes },
            ConditionArg::Event {
                source,
                event_kind,
                min_severity,
                message_contains,
                count,
                window_minutes,
            } => AlertCondition::Event(EventCondition {
                source,
                event_kind,
                min_severity: min_severity.map_or(Severity::Info, Severity::from),
                message_contains,
                count: count.unwrap_or(1),
                window_minutes: window_minutes.ok_or_else(|| {
                    ToolError::invalid(
                        "condition.windowMinutes is required for an event condition (1-1440)",
                    )
                })?,
            }),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RulesInput {
    action: RuleAction,
    /// get, update, delete, test (else a draft).
    #[schemars(length(min = 36, max = 36))]
    rule_id: Option<String>,
    /// create (required), update.
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(max = 2000))]
    description: Option<String>,
    /// default medium.
    severity: Option<SeverityArg>,
    enabled: Option<bool>,
    /// create (required), update, test.
    condition: Option<ConditionArg>,
    /// default organization.
    target: Option<TargetArg>,
    /// Minutes after a resolve before re-raising on the device (15).
    #[schemars(range(min = 0, max = 10080))]
    cooldown_minutes: Option<u32>,
    /// Resolve when clear (default true).
    auto_resolve: Option<bool>,
    /// From list_channels.
    #[schemars(length(max = 10))]
    channel_ids: Option<Vec<String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RuleView {
    id: String,
    name: String,
    description: Option<String>,
    severity: String,
    enabled: bool,
    /// The condition as stored (kind metric, offline or event).
    #[schemars(with = "serde_json::Map<String, Value>")]
    condition: Value,
    /// The condition in words, e.g. "cpu above 90 % for 5 min".
    summary: String,
    target_type: String,
    target_id: Option<String>,
    cooldown_minutes: i64,
    auto_resolve: bool,
    channel_ids: Vec<String>,
    created_by: String,
    created_at: String,
    updated_at: String,
}

impl From<AlertRule> for RuleView {
    fn from(r: AlertRule) -> Self {
        let target_id = r
            .target_site_id
            .map(|s| s.to_string())
            .or(r.target_group_id.map(|g| g.to_string()))
            .or(r.target_device_id.map(|d| d.to_string()));
        Self {
            id: r.id.to_string(),
            summary: r.condition.describe(),
            condition: serde_json::to_value(&r.condition).unwrap_or_default(),
            name: r.name,
            description: r.description,
            severity: r.severity.to_string(),
            enabled: r.enabled,
            target_type: r.target_kind.to_string(),
            target_id,
            cooldown_minutes: r.cooldown_minutes,
            auto_resolve: r.auto_resolve,
            channel_ids: r.channel_ids.iter().map(Uuid::to_string).collect(),
            created_by: r.created_by,
            created_at: r.created_at.to_rfc3339(),
            updated_at: r.updated_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ChannelView {
    id: String,
    name: String,
    /// email, webhook or in_app.
    kind: String,
    enabled: bool,
    /// Email: the recipients; webhook: the host it posts to (never the secret).
    target: Option<String>,
}

impl From<NotificationChannel> for ChannelView {
    fn from(c: NotificationChannel) -> Self {
        let target = match c.kind {
            breeze_core::ChannelKind::Email => {
                c.config.get("to").and_then(Value::as_array).map(|to| {
                    to.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
            }
            breeze_core::ChannelKind::Webhook => c
                .config
                .get("url")
                .and_then(Value::as_str)
                .and_then(webhook_host),
            breeze_core::ChannelKind::InApp => None,
        };
        Self {
            id: c.id.to_string(),
            name: c.name,
            kind: c.kind.to_string(),
            enabled: c.enabled,
            target,
        }
    }
}

/// The host of an http(s) URL (a webhook's query may carry a token: it is not shown).
fn webhook_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    Some(authority.rsplit('@').next()?.to_owned())
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ObservationView {
    device_id: String,
    /// breaching, clear, or unknown (not long enough yet, or no recent samples).
    state: String,
    value: Option<f64>,
    samples: i64,
    /// Whether the engine would raise an alert now (breaching, no unresolved alert of the rule
    /// on the device). The cooldown is not considered.
    would_raise: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct TestView {
    /// The condition tested, in words.
    condition: String,
    breaching: usize,
    clear: usize,
    unknown: usize,
    /// Up to 100 devices, breaching first.
    devices: Vec<ObservationView>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SummaryView {
    open: i64,
    acknowledged: i64,
    resolved: i64,
    /// Unresolved alerts per severity, most severe first.
    #[schemars(with = "serde_json::Map<String, Value>")]
    unresolved_by_severity: Value,
    rules: i64,
    enabled_rules: i64,
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RulesOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<Vec<RuleView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<RuleView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channels: Option<Vec<ChannelView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    test: Option<TestView>,
    /// get: the newest alerts held back by maintenance windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    suppressions: Option<Vec<super::maintenance::SuppressionView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<SummaryView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn rule_id(input: &RulesInput) -> Result<Uuid, ToolError> {
    uuid_or_missing(input.rule_id.as_deref(), "ruleId", RULE_NOT_FOUND)
}

fn rule_missing(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("alert rule") => ToolError::not_found(RULE_NOT_FOUND),
        other => other.into(),
    }
}

fn channel_ids(raw: Option<&[String]>) -> Result<Option<Vec<Uuid>>, ToolError> {
    raw.map(|ids| {
        ids.iter()
            .map(|id| {
                Uuid::parse_str(id).map_err(|_| {
                    ToolError::not_found("notification channel not found or access denied")
                })
            })
            .collect()
    })
    .transpose()
}

pub(crate) struct ManageAlertRules;

impl Tool for ManageAlertRules {
    const NAME: &'static str = "manage_alert_rules";
    const TITLE: &'static str = "Manage alert rules";
    const DESCRIPTION: &'static str = "Alert rules: a metric above/below a threshold for a duration, offline for N minutes, or N agent-reported events (watched log lines, agent failures) matching source/kind/severity/text within a window, on a target, with severity, cooldown, auto-resolve and channels. action=list|get|test (raises nothing)|list_channels|summary read; create|update (Tier 2); delete (Tier 3).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::AlertsRead;
    const RATE_LIMIT: Option<RateLimit> = per(15, 300);
    type Actions = RuleAction;
    type Input = RulesInput;
    type Output = Rendered<RulesOutput>;
    type Reach = (
        reach::Alerts,
        reach::Devices,
        reach::Maintenance,
        reach::Tenancy,
    );

    /// The rule a delete names exists in the organization.
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        if input.action == RuleAction::Delete {
            cx.alerts()
                .get_rule(rule_id(input)?)
                .await
                .map_err(rule_missing)?;
        }
        Ok(None)
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            RuleAction::List => {
                let rules: Vec<RuleView> = cx
                    .alerts()
                    .list_rules()
                    .await?
                    .into_iter()
                    .map(RuleView::from)
                    .collect();
                Rendered::of(&RulesOutput {
                    showing: Some(rules.len()),
                    rules: Some(rules),
                    ..Default::default()
                })
            }
            RuleAction::Get => {
                let rule = cx
                    .alerts()
                    .get_rule(rule_id(&input)?)
                    .await
                    .map_err(rule_missing)?;
                let suppressions = cx
                    .maintenance()
                    .suppressions(Some(rule.id), None, 20)
                    .await?;
                Rendered::of(&RulesOutput {
                    rule: Some(rule.into()),
                    suppressions: Some(suppressions.into_iter().map(Into::into).collect()),
                    ..Default::default()
                })
            }
            RuleAction::Create => {
                let name = input
                    .name
                    .clone()
                    .ok_or_else(|| ToolError::invalid("name is required for create"))?;
                let condition = input
                    .condition
                    .clone()
                    .ok_or_else(|| ToolError::invalid("condition is required for create"))?;
                let target = input
                    .target
                    .as_ref()
                    .map(TargetArg::resolve)
                    .transpose()?
                    .unwrap_or(RuleTarget::Organization);
                let new = NewRule {
                    name,
                    description: input.description.clone(),
                    severity: input.severity.map_or(Severity::Medium, Severity::from),
                    enabled: input.enabled.unwrap_or(true),
                    condition: condition.into_condition()?,
                    target,
                    cooldown_minutes: input.cooldown_minutes.unwrap_or(15),
                    auto_resolve: input.auto_resolve.unwrap_or(true),
                    channel_ids: channel_ids(input.channel_ids.as_deref())?.unwrap_or_default(),
                    created_by: cx.actor.to_string(),
                };
                let rule = desk(cx)
                    .create_rule(new)
                    .await
                    .map_err(|breeze_domain::Error::Store(e)| ToolError::from(e))?;
                Rendered::of(&RulesOutput {
                    message: Some(format!("created alert rule {}", rule.name)),
                    rule: Some(rule.into()),
                    ..Default::default()
                })
            }
            RuleAction::Update => {
                let id = rule_id(&input)?;
                let update = RuleUpdate {
                    name: input.name.clone(),
                    description: input.description.clone(),
                    severity: input.severity.map(Severity::from),
                    enabled: input.enabled,
                    condition: input
                        .condition
                        .clone()
                        .map(ConditionArg::into_condition)
                        .transpose()?,
                    target: input.target.as_ref().map(TargetArg::resolve).transpose()?,
                    cooldown_minutes: input.cooldown_minutes,
                    auto_resolve: input.auto_resolve,
                    channel_ids: channel_ids(input.channel_ids.as_deref())?,
                };
                let rule = desk(cx)
                    .update_rule(id, update)
                    .await
                    .map_err(domain_rule_missing)?;
                Rendered::of(&RulesOutput {
                    message: Some("alert rule updated".into()),
                    rule: Some(rule.into()),
                    ..Default::default()
                })
            }
            RuleAction::Delete => {
                let id = rule_id(&input)?;
                let resolved = desk(cx)
                    .delete_rule(id)
                    .await
                    .map_err(domain_rule_missing)?;
                Rendered::of(&RulesOutput {
                    message: Some(format!(
                        "alert rule deleted; {resolved} unresolved alert(s) resolved"
                    )),
                    ..Default::default()
                })
            }
            RuleAction::Test => Rendered::of(&RulesOutput {
                test: Some(test_rule(cx, &input).await?),
                ..Default::default()
            }),
            RuleAction::ListChannels => {
                let channels: Vec<ChannelView> = cx
                    .alerts()
                    .list_channels()
                    .await?
                    .into_iter()
                    .map(ChannelView::from)
                    .collect();
                Rendered::of(&RulesOutput {
                    showing: Some(channels.len()),
                    channels: Some(channels),
                    ..Default::default()
                })
            }
            RuleAction::Summary => {
                let s = cx.alerts().alert_summary().await?;
                let by_severity: serde_json::Map<String, Value> = s
                    .unresolved_by_severity
                    .iter()
                    .map(|(sev, n)| (sev.to_string(), Value::from(*n)))
                    .collect();
                Rendered::of(&RulesOutput {
                    summary: Some(SummaryView {
                        open: s.open,
                        acknowledged: s.acknowledged,
                        resolved: s.resolved,
                        unresolved_by_severity: Value::Object(by_severity),
                        rules: s.rules,
                        enabled_rules: s.enabled_rules,
                    }),
                    ..Default::default()
                })
            }
        }
    }
}

/// Evaluates a stored rule, a stored rule with changes, or a draft (condition and target) over
/// the current data, the way the engine would, and writes nothing.
async fn test_rule<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &RulesInput,
) -> Result<TestView, ToolError> {
    let stored = match input.rule_id.as_deref() {
        Some(_) => Some(
            cx.alerts()
                .get_rule(rule_id(input)?)
                .await
                .map_err(rule_missing)?,
        ),
        None => None,
    };
    let condition: AlertCondition = match (&input.condition, &stored) {
        (Some(c), _) => c.clone().into_condition()?,
        (None, Some(rule)) => rule.condition.clone(),
        (None, None) => {
            return Err(ToolError::invalid(
                "test needs ruleId, or a condition to try as a draft",
            ));
        }
    };
    condition.validate().map_err(ToolError::invalid)?;
    let target = match (&input.target, &stored) {
        (Some(t), _) => t.resolve()?,
        (None, Some(rule)) => rule.target()?,
        (None, None) => RuleTarget::Organization,
    };
    // A draft is observed through a rule value that is never stored; its target is checked
    // like a stored one's, so another organization's device is "not found" here too.
    match target {
        RuleTarget::Organization => {}
        RuleTarget::Site(s) => drop(cx.tenancy().get_site(s).await?),
        RuleTarget::Group(g) => drop(cx.tenancy().get_group(g).await?),
        RuleTarget::Device(d) => drop(cx.devices().get_device(d).await?),
    }
    let now = cx.now();
    let mut rule = stored.clone().unwrap_or_else(|| AlertRule {
        id: Uuid::nil(),
        org_id: cx.org_id(),
        name: "draft".into(),
        description: None,
        severity: Severity::Medium,
        enabled: true,
        condition: condition.clone(),
        target_kind: breeze_core::TargetKind::Organization,
        target_site_id: None,
        target_group_id: None,
        target_device_id: None,
        cooldown_minutes: 0,
        auto_resolve: true,
        channel_ids: vec![],
        created_by: cx.actor.to_string(),
        created_at: now,
        updated_at: now,
        deleted_at: None,
    });
    rule.condition = condition.clone();
    (
        rule.target_kind,
        rule.target_site_id,
        rule.target_group_id,
        rule.target_device_id,
    ) = match target {
        RuleTarget::Organization => (breeze_core::TargetKind::Organization, None, None, None),
        RuleTarget::Site(s) => (breeze_core::TargetKind::Site, Some(s), None, None),
        RuleTarget::Group(g) => (breeze_core::TargetKind::Group, None, Some(g), None),
        RuleTarget::Device(d) => (breeze_core::TargetKind::Device, None, None, Some(d)),
    };
    let mut observations = cx.alerts().observe_rule(&rule).await?;
    let open: Vec<DeviceId> = match &stored {
        Some(r) => cx
            .alerts()
            .unresolved_alerts_of_rule(r.id)
            .await?
            .into_iter()
            .map(|a| a.device_id)
            .collect(),
        None => Vec::new(),
    };
    let count = |s: Observed| observations.iter().filter(|o| o.state == s).count();
    let (breaching, clear, unknown) = (
        count(Observed::Breaching),
        count(Observed::Clear),
        count(Observed::Unknown),
    );
    observations.sort_by_key(|o| match o.state {
        Observed::Breaching => 0,
        Observed::Unknown => 1,
        Observed::Clear => 2,
    });
    let devices = observations
        .into_iter()
        .take(MAX_TEST_DEVICES)
        .map(|o| ObservationView {
            device_id: o.device_id.to_string(),
            state: match o.state {
                Observed::Breaching => "breaching",
                Observed::Clear => "clear",
                Observed::Unknown => "unknown",
            }
            .into(),
            value: o.value,
            samples: o.samples,
            would_raise: o.state == Observed::Breaching && !open.contains(&o.device_id),
        })
        .collect();
    Ok(TestView {
        condition: condition.describe(),
        breaching,
        clear,
        unknown,
        devices,
    })
}
