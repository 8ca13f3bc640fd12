//! `manage_maintenance_windows`: list, get, active_now (which windows are open for a device,
//! site, group or the organization), create, update, delete.
//!
//! Reads are Tier 1, creating and updating Tier 2, deleting Tier 3 (the spec's "1/2/3"). A
//! window's `schedule` is one-off (`startTime`/`endTime`) or weekly (`days`, local time `at`,
//! `durationMinutes`) in an IANA `timeZone`; while one that suppresses alerts is open, the
//! alert engine raises nothing on the devices it covers and records the suppression on the
//! rule. Another organization's window, site, group or device is "not found", like a missing
//! one (the store only reaches this organization's rows).

use breeze_core::{
    AuditEvent, DayOfWeek, MaintenanceSchedule, Occurrence, Permission,
    maintenance::{parse_hhmm, parse_time_zone},
};
use breeze_store::{AlertSuppression, MaintenanceWindow, NewWindow, RuleTarget, WindowUpdate};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::args::{TargetArg, time_arg, uuid_or_missing};
use crate::reach;
use crate::{Pin, RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManageMaintenanceWindows>();
}

const WINDOW_NOT_FOUND: &str = "Maintenance window not found or access denied";

/// The most suppressions `get` lists.
const MAX_LISTED_SUPPRESSIONS: u32 = 20;

crate::actions! {
    // What `manage_maintenance_windows` does: reads are Tier 1, creating and updating Tier 2,
    // deleting Tier 3.
    pub(crate) enum WindowAction {
        List = "list" => (T1, Read, DevicesRead),
        Get = "get" => (T1, Read, DevicesRead),
        ActiveNow = "active_now" => (T1, Read, DevicesRead),
        Create = "create" => (T2, Create, DevicesWrite),
        Update = "update" => (T2, Update, DevicesWrite),
        Delete = "delete" => (T3, Delete, DevicesWrite),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DayArg {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl From<DayArg> for DayOfWeek {
    fn from(d: DayArg) -> Self {
        match d {
            DayArg::Mon => DayOfWeek::Mon,
            DayArg::Tue => DayOfWeek::Tue,
            DayArg::Wed => DayOfWeek::Wed,
            DayArg::Thu => DayOfWeek::Thu,
            DayArg::Fri => DayOfWeek::Fri,
            DayArg::Sat => DayOfWeek::Sat,
            DayArg::Sun => DayOfWeek::Sun,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct WindowsInput {
    action: WindowAction,
    /// get, update, delete.
    #[schemars(length(min = 36, max = 36))]
    window_id: Option<String>,
    /// create (required), update.
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(max = 2000))]
    description: Option<String>,
    /// create (default organization), update; active_now: what to check (default: all).
    target: Option<TargetArg>,
    /// IANA zone of startTime (default UTC).
    #[schemars(length(min = 1, max = 64))]
    time_zone: Option<String>,
    /// create (required), update: when it is open.
    schedule: Option<ScheduleArg>,
    /// Hold back alerts on covered devices (default true).
    suppress_alerts: Option<bool>,
    /// default true.
    enabled: Option<bool>,
}

/// When a window is open.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ScheduleArg {
    /// Once, from startTime until endTime (RFC 3339).
    #[serde(rename_all = "camelCase")]
    Once {
        #[schemars(length(max = 40))]
        start_time: String,
        #[schemars(length(max = 40))]
        end_time: String,
    },
    /// Every week on `days` at the local time `at` (HH:MM) for durationMinutes.
    #[serde(rename_all = "camelCase")]
    Weekly {
        #[schemars(length(min = 1, max = 7))]
        days: Vec<DayArg>,
        #[schemars(length(min = 5, max = 5))]
        at: String,
        #[schemars(range(min = 1, max = 10080))]
        duration_minutes: u32,
    },
}

impl ScheduleArg {
    fn resolve(&self) -> Result<MaintenanceSchedule, ToolError> {
        Ok(match self {
            ScheduleArg::Once {
                start_time,
                end_time,
            } => {
                let (Some(starts_at), Some(ends_at)) = (
                    time_arg("startTime", Some(start_time))?,
                    time_arg("endTime", Some(end_time))?,
                ) else {
                    return Err(ToolError::invalid("a one-off window needs both times"));
                };
                MaintenanceSchedule::Once { starts_at, ends_at }
            }
            ScheduleArg::Weekly {
                days,
                at,
                duration_minutes,
            } => MaintenanceSchedule::Weekly {
                days: days.iter().copied().map(DayOfWeek::from).collect(),
                start_time: parse_hhmm(at).map_err(|e| ToolError::invalid(format!("at: {e}")))?,
                duration_minutes: *duration_minutes,
            },
        })
    }
}

impl WindowsInput {
    fn schedule(&self) -> Result<Option<MaintenanceSchedule>, ToolError> {
        self.schedule.as_ref().map(ScheduleArg::resolve).transpose()
    }

    fn time_zone(&self) -> Result<Option<String>, ToolError> {
        self.time_zone
            .as_deref()
            .map(|tz| {
                parse_time_zone(tz)
                    .map(|_| tz.to_owned())
                    .map_err(|e| ToolError::invalid(format!("timeZone: {e}")))
            })
            .transpose()
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct OccurrenceView {
    starts_at: String,
    ends_at: String,
}

impl From<Occurrence> for OccurrenceView {
    fn from(o: Occurrence) -> Self {
        Self {
            starts_at: o.starts_at.to_rfc3339(),
            ends_at: o.ends_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WindowView {
    id: String,
    name: String,
    description: Option<String>,
    target_type: String,
    target_id: Option<String>,
    time_zone: String,
    /// kind once (startsAt, endsAt) or weekly (days, startTime, durationMinutes).
    #[schemars(with = "serde_json::Map<String, Value>")]
    schedule: Value,
    suppress_alerts: bool,
    enabled: bool,
    open_now: bool,
    /// The open occurrence, else the next one (none after a one-off window).
    occurrence: Option<OccurrenceView>,
    created_by: String,
    updated_at: String,
}

impl WindowView {
    fn new(w: MaintenanceWindow, now: breeze_core::Timestamp) -> Self {
        let target_id = w
            .target_site_id
            .map(|s| s.to_string())
            .or(w.target_group_id.map(|g| g.to_string()))
            .or(w.target_device_id.map(|d| d.to_string()));
        Self {
            id: w.id.to_string(),
            open_now: w.open_at(now).is_some(),
            occurrence: w.current_or_next(now).map(OccurrenceView::from),
            schedule: serde_json::to_value(&w.schedule).unwrap_or_default(),
            name: w.name,
            description: w.description,
            target_type: w.target_kind.to_string(),
            target_id,
            time_zone: w.time_zone,
            suppress_alerts: w.suppress_alerts,
            enabled: w.enabled,
            created_by: w.created_by,
            updated_at: w.updated_at.to_rfc3339(),
        }
    }
}

/// A breach held back by a window.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuppressionView {
    rule_id: String,
    device_id: String,
    window_id: String,
    window_name: String,
    at: String,
    value: Option<f64>,
}

impl From<AlertSuppression> for SuppressionView {
    fn from(s: AlertSuppression) -> Self {
        Self {
            rule_id: s.rule_id.to_string(),
            device_id: s.device_id.to_string(),
            window_id: s.window_id.to_string(),
            window_name: s.window_name,
            at: s.at.to_rfc3339(),
            value: s.value,
        }
    }
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WindowsOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    windows: Option<Vec<WindowView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<WindowView>,
    /// get: the newest alerts it held back.
    #[serde(skip_serializing_if = "Option::is_none")]
    suppressions: Option<Vec<SuppressionView>>,
    /// active_now: whether the target is under maintenance.
    #[serde(skip_serializing_if = "Option::is_none")]
    in_maintenance: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn window_id(input: &WindowsInput) -> Result<Uuid, ToolError> {
    uuid_or_missing(input.window_id.as_deref(), "windowId", WINDOW_NOT_FOUND)
}

fn window_missing(e: breeze_store::StoreError) -> ToolError {
    match e {
        breeze_store::StoreError::NotFound("maintenance window") => {
            ToolError::not_found(WINDOW_NOT_FOUND)
        }
        other => other.into(),
    }
}

pub(crate) struct ManageMaintenanceWindows;

impl Tool for ManageMaintenanceWindows {
    const NAME: &'static str = "manage_maintenance_windows";
    const TITLE: &'static str = "Manage maintenance windows";
    const DESCRIPTION: &'static str = "Maintenance windows: while open, alerts on the devices they cover (organization, site, group or device) are held back and recorded. schedule: once (startTime, endTime) or weekly (days, local time at, durationMinutes) in timeZone. action=list|get|active_now read; create|update (Tier 2); delete (Tier 3).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(15, 300);
    type Actions = WindowAction;
    type Input = WindowsInput;
    type Output = Rendered<WindowsOutput>;
    type Reach = reach::Maintenance;

    /// The window a delete names exists in the organization.
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        if input.action == WindowAction::Delete {
            cx.maintenance()
                .get_window(window_id(input)?)
                .await
                .map_err(window_missing)?;
        }
        Ok(None)
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let now = cx.now();
        match input.action {
            WindowAction::List => {
                let windows: Vec<WindowView> = cx
                    .maintenance()
                    .list_windows()
                    .await?
                    .into_iter()
                    .map(|w| WindowView::new(w, now))
                    .collect();
                Rendered::of(&WindowsOutput {
                    showing: Some(windows.len()),
                    windows: Some(windows),
                    ..Default::default()
                })
            }
            WindowAction::Get => {
                let id = window_id(&input)?;
                let window = cx
                    .maintenance()
                    .get_window(id)
                    .await
                    .map_err(window_missing)?;
                let suppressions = cx
                    .maintenance()
                    .suppressions(None, Some(id), MAX_LISTED_SUPPRESSIONS)
                    .await?;
                Rendered::of(&WindowsOutput {
                    window: Some(WindowView::new(window, now)),
                    suppressions: Some(suppressions.into_iter().map(Into::into).collect()),
                    ..Default::default()
                })
            }
            WindowAction::ActiveNow => {
                let target = input
                    .target
                    .as_ref()
                    .map(TargetArg::resolve)
                    .transpose()?
                    .unwrap_or(RuleTarget::Organization);
                let open = cx.maintenance().open_windows(target, now).await?;
                let windows: Vec<WindowView> = open
                    .into_iter()
                    .map(|(w, _)| WindowView::new(w, now))
                    .collect();
                Rendered::of(&WindowsOutput {
                    in_maintenance: Some(!windows.is_empty()),
                    showing: Some(windows.len()),
                    windows: Some(windows),
                    ..Default::default()
                })
            }
            WindowAction::Create => {
                let name = input
                    .name
                    .clone()
                    .ok_or_else(|| ToolError::invalid("name is required for create"))?;
                let schedule = input
                    .schedule()?
                    .ok_or_else(|| ToolError::invalid("schedule is required for create"))?;
                let new = NewWindow {
                    name,
                    description: input.description.clone(),
                    target: input
                        .target
                        .as_ref()
                        .map(TargetArg::resolve)
                        .transpose()?
                        .unwrap_or(RuleTarget::Organization),
                    time_zone: input.time_zone()?.unwrap_or_else(|| "UTC".to_owned()),
                    schedule,
                    suppress_alerts: input.suppress_alerts.unwrap_or(true),
                    enabled: input.enabled.unwrap_or(true),
                    created_by: cx.actor.to_string(),
                };
                let audit = AuditEvent::new(
                    cx.actor.clone(),
                    "maintenance_window.create",
                    "maintenance_window",
                )
                .request(cx.request_id.clone());
                let window = cx.maintenance().create_window(new, audit).await?;
                Rendered::of(&WindowsOutput {
                    message: Some(format!("created maintenance window {}", window.name)),
                    window: Some(WindowView::new(window, now)),
                    ..Default::default()
                })
            }
            WindowAction::Update => {
                let id = window_id(&input)?;
                let update = WindowUpdate {
                    name: input.name.clone(),
                    description: input.description.clone(),
                    target: input.target.as_ref().map(TargetArg::resolve).transpose()?,
                    time_zone: input.time_zone()?,
                    schedule: input.schedule()?,
                    suppress_alerts: input.suppress_alerts,
                    enabled: input.enabled,
                };
                let audit = AuditEvent::new(
                    cx.actor.clone(),
                    "maintenance_window.update",
                    "maintenance_window",
                )
                .request(cx.request_id.clone());
                let window = cx
                    .maintenance()
                    .update_window(id, update, audit)
                    .await
                    .map_err(window_missing)?;
                Rendered::of(&WindowsOutput {
                    message: Some("maintenance window updated".into()),
                    window: Some(WindowView::new(window, now)),
                    ..Default::default()
                })
            }
            WindowAction::Delete => {
                let id = window_id(&input)?;
                let audit = AuditEvent::new(
                    cx.actor.clone(),
                    "maintenance_window.delete",
                    "maintenance_window",
                )
                .request(cx.request_id.clone());
                let window = cx
                    .maintenance()
                    .delete_window(id, audit)
                    .await
                    .map_err(window_missing)?;
                Rendered::of(&WindowsOutput {
                    message: Some(format!("maintenance window {} deleted", window.name)),
                    ..Default::default()
                })
            }
        }
    }
}
