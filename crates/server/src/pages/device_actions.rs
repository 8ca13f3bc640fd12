//! Acting on devices from the console: one handler, `POST /o/{org}/devices/act`, for the device
//! page's buttons (one `id`) and the device list's selection (many `id`s, at most
//! [`MAX_SELECTED`]).
//!
//! Every action is a tool call through the pipeline ([`super::actions::run`]), the very call an
//! MCP client makes, so the guard decides it by the tool action's declaration, Tier 3 follows
//! its approval rule, and the tool writes its audit record:
//!
//! | `action` | tool call |
//! |---|---|
//! | `run_script` (`script`, optional `params` as `name=value` lines) | `run_script` (ten devices a call) |
//! | `service_start` / `service_stop` / `service_restart` (`service`) | `manage_services` per device |
//! | `security_scan` | `security_scan` `scan` |
//! | `patch_scan` | `manage_patches` `scan` |
//! | `add_to_group` / `remove_from_group` (`group`) | `manage_groups` `add_devices` / `remove_devices` |
//! | `maintenance` (`hours`) | `manage_maintenance_windows` `create`: a window on the device from now |
//! | `reboot` (`delay` minutes, `with_users`) | `execute_command` `reboot` per device (Tier 3) |
//!
//! Instead of `id`s a post may name `target_group`: the group's members now (at most
//! [`MAX_SELECTED`]), as the scripts page's "run on a group" does.
//!
//! The post is first held to the operation that tool action declares (a person without it is
//! refused before anything is parsed), and each call is judged again by the guard.

use std::collections::BTreeMap;

use axum::{
    Router,
    extract::{Path, State},
    response::{IntoResponse, Redirect, Response},
    routing::post,
};
use breeze_core::Operation;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{PageError, SignedForm, actions::run, tool_operation};
use crate::{ApiError, AppState, extract::RequestId};

/// The most devices one post names.
pub(crate) const MAX_SELECTED: usize = 100;

/// The most hours a maintenance window opened from the console lasts.
pub(crate) const MAX_MAINTENANCE_HOURS: u32 = 72;

/// The longest a reboot from the console is announced ahead (the tool's own bound).
pub(crate) const MAX_REBOOT_DELAY_MINUTES: u32 = 1440;

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/o/{org}/devices/act", post(act))
}

/// A console action: the tool and tool action it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceAction {
    RunScript,
    Service(&'static str),
    SecurityScan,
    PatchScan,
    AddToGroup,
    RemoveFromGroup,
    Maintenance,
    Reboot,
}

impl DeviceAction {
    /// The action a form names; `None` for anything else.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "run_script" => Self::RunScript,
            "service_start" => Self::Service("start"),
            "service_stop" => Self::Service("stop"),
            "service_restart" => Self::Service("restart"),
            "security_scan" => Self::SecurityScan,
            "patch_scan" => Self::PatchScan,
            "add_to_group" => Self::AddToGroup,
            "remove_from_group" => Self::RemoveFromGroup,
            "maintenance" => Self::Maintenance,
            "reboot" => Self::Reboot,
            _ => return None,
        })
    }

    /// The tool and its action (empty for a tool without actions).
    pub(crate) fn tool(self) -> (&'static str, &'static str) {
        match self {
            Self::RunScript => ("run_script", ""),
            Self::Service(a) => ("manage_services", a),
            Self::SecurityScan => ("security_scan", "scan"),
            Self::PatchScan => ("manage_patches", "scan"),
            Self::AddToGroup => ("manage_groups", "add_devices"),
            Self::RemoveFromGroup => ("manage_groups", "remove_devices"),
            Self::Maintenance => ("manage_maintenance_windows", "create"),
            Self::Reboot => ("execute_command", "reboot"),
        }
    }

    /// The operation the tool action declares: what the post is held to.
    pub(crate) fn operation(self, state: &AppState) -> Operation {
        let (tool, action) = self.tool();
        tool_operation(state, tool, action)
    }

    /// How many devices one call of the tool takes.
    fn per_call(self) -> usize {
        match self {
            Self::RunScript => 10,
            Self::SecurityScan | Self::PatchScan => 50,
            Self::AddToGroup | Self::RemoveFromGroup => MAX_SELECTED,
            Self::Service(_) | Self::Maintenance | Self::Reboot => 1,
        }
    }
}

/// The posted form, as typed.
struct ActForm {
    action: String,
    ids: Vec<String>,
    script: String,
    params: String,
    service: String,
    group: String,
    target_group: String,
    hours: String,
    delay: String,
    with_users: bool,
    back: String,
}

impl ActForm {
    fn read(pairs: &[(String, String)]) -> Self {
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map_or("", |(_, v)| v.as_str())
                .trim()
                .to_owned()
        };
        ActForm {
            action: field("action"),
            ids: pairs
                .iter()
                .filter(|(k, _)| k == "id")
                .map(|(_, v)| v.trim().to_owned())
                .collect(),
            script: field("script"),
            params: field("params"),
            service: field("service"),
            group: field("group"),
            target_group: field("target_group"),
            hours: field("hours"),
            delay: field("delay"),
            with_users: !field("with_users").is_empty(),
            back: field("back"),
        }
    }
}

/// `name=value` lines as a script's parameters.
fn parameters(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!(
                "Parameters: {line:?} is not name=value (one parameter a line)."
            ));
        };
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(out)
}

/// The arguments of the tool call for `devices`, or what is wrong with the form.
fn arguments(
    state: &AppState,
    a: DeviceAction,
    f: &ActForm,
    devices: &[String],
    hostnames: &BTreeMap<String, String>,
) -> Result<Value, String> {
    let id_of = |field: &str, v: &str| {
        Uuid::parse_str(v)
            .map(|u| u.to_string())
            .map_err(|_| format!("Choose a {field}."))
    };
    Ok(match a {
        DeviceAction::RunScript => {
            let mut args = json!({
                "scriptId": id_of("script", &f.script)?,
                "deviceIds": devices,
            });
            let params = parameters(&f.params)?;
            if !params.is_empty() {
                args["parameters"] = json!(params);
            }
            args
        }
        DeviceAction::Service(action) => {
            if f.service.is_empty() {
                return Err("Name the service.".to_owned());
            }
            json!({ "deviceId": devices[0], "action": action, "serviceName": f.service })
        }
        DeviceAction::SecurityScan | DeviceAction::PatchScan => {
            json!({ "action": "scan", "deviceIds": devices })
        }
        DeviceAction::AddToGroup | DeviceAction::RemoveFromGroup => json!({
            "action": a.tool().1,
            "groupId": id_of("group", &f.group)?,
            "deviceIds": devices,
        }),
        DeviceAction::Maintenance => {
            let hours: u32 = match f.hours.as_str() {
                "" => 2,
                h => h
                    .parse()
                    .ok()
                    .filter(|h| (1..=MAX_MAINTENANCE_HOURS).contains(h))
                    .ok_or_else(|| format!("Maintenance: 1 to {MAX_MAINTENANCE_HOURS} hours."))?,
            };
            let now = state.clock.now();
            let end = now + chrono::Duration::hours(i64::from(hours));
            let host = hostnames.get(&devices[0]).map_or("device", String::as_str);
            json!({
                "action": "create",
                "name": format!("Maintenance mode: {host}"),
                "description": "Opened from the console: alerts on this device are held back until it ends.",
                "target": { "type": "device", "deviceId": devices[0] },
                "schedule": {
                    "kind": "once",
                    "startTime": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    "endTime": end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                },
                "suppressAlerts": true,
            })
        }
        DeviceAction::Reboot => {
            let delay: u32 = match f.delay.as_str() {
                "" => 1,
                d => d
                    .parse()
                    .ok()
                    .filter(|d| *d <= MAX_REBOOT_DELAY_MINUTES)
                    .ok_or_else(|| {
                        format!("Reboot: a delay of 0 to {MAX_REBOOT_DELAY_MINUTES} minutes.")
                    })?,
            };
            json!({
                "deviceId": devices[0],
                "commandType": "reboot",
                "payload": { "delayMinutes": delay, "rebootWithUsers": f.with_users },
            })
        }
    })
}

/// `POST /o/{org}/devices/act`.
async fn act(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let form = ActForm::read(&f.form);
    // An unknown action is judged as nothing may do it (tool_operation fails closed).
    let action = DeviceAction::parse(&form.action);
    let op = action.map_or_else(|| tool_operation(&state, "", ""), |a| a.operation(&state));
    let scope = f.who.scope(&state, &org, op).await?;
    let Some(action) = action else {
        return Err(PageError::bad_request("Unknown action."));
    };
    let slug = scope.org.slug.clone();
    let back = match super::safe_next(&form.back) {
        "/" => format!("/o/{slug}/devices"),
        ok => ok.to_owned(),
    };
    let to = |ok: bool, message: &str| {
        let sep = if back.contains('?') { '&' } else { '?' };
        let key = if ok { "done" } else { "failed" };
        let q = serde_urlencoded::to_string([(key, message)]).unwrap_or_default();
        Redirect::to(&format!("{back}{sep}{q}")).into_response()
    };
    let mut form = form;
    if form.ids.is_empty() && !form.target_group.is_empty() {
        // A group of another organization is "not found", like a device.
        let group = Uuid::parse_str(&form.target_group)
            .map(breeze_core::DeviceGroupId)
            .map_err(|_| PageError::from(ApiError::not_found("Group not found")))?;
        let members = scope
            .store(&state)
            .devices()
            .group_members(group)
            .await
            .map_err(|e| match e {
                breeze_store::StoreError::NotFound(_) => {
                    PageError::from(ApiError::not_found("Group not found"))
                }
                other => other.into(),
            })?;
        if members.is_empty() {
            return Ok(to(false, "That group has no device."));
        }
        form.ids = members.iter().map(|d| d.id.to_string()).collect();
    }
    if form.ids.is_empty() {
        return Ok(to(false, "Select at least one device."));
    }
    if form.ids.len() > MAX_SELECTED {
        return Ok(to(
            false,
            &format!("At most {MAX_SELECTED} devices at once."),
        ));
    }
    // Every id must be a device of this organization: another's is "not found", like a page.
    let mut ids = Vec::with_capacity(form.ids.len());
    for id in &form.ids {
        let id = Uuid::parse_str(id)
            .map_err(|_| PageError::from(ApiError::not_found("Device not found")))?;
        ids.push(breeze_core::DeviceId(id));
    }
    ids.sort_unstable_by_key(|d| d.0);
    ids.dedup();
    let names = scope.store(&state).devices().hostnames(&ids).await?;
    if names.len() != ids.len() {
        return Err(ApiError::not_found("Device not found").into());
    }
    let hostnames: BTreeMap<String, String> =
        names.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let devices: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let (tool, _) = action.tool();
    let mut all_ok = true;
    let mut messages: Vec<String> = Vec::new();
    for (n, chunk) in devices.chunks(action.per_call()).enumerate() {
        let args = match arguments(&state, action, &form, chunk, &hostnames) {
            Ok(a) => a,
            Err(e) => return Ok(to(false, &e)),
        };
        // One request id per call, so each tool call is its own idempotent request.
        let rid = request_id.as_ref().map(|r| format!("{r}-{n}"));
        let ran = run(&state, &scope, tool, args, rid).await;
        all_ok &= ran.ok;
        let label = if action.per_call() == 1 && devices.len() > 1 {
            format!(
                "{}: {}",
                hostnames.get(&chunk[0]).map_or("device", String::as_str),
                ran.message
            )
        } else {
            ran.message
        };
        messages.push(label);
    }
    messages.dedup();
    let mut message = messages.join(" ");
    if message.chars().count() > 600 {
        message = message.chars().take(600).collect::<String>() + "…";
    }
    Ok(to(all_ok, &message))
}

/// A choice in a select: value and label.
pub(crate) struct Pick {
    pub(crate) value: String,
    pub(crate) label: String,
}

/// What a page offers for acting on devices: the choices its forms need, and which actions the
/// person may take (by the tool actions' declarations: no right, no button).
pub(crate) struct Panel {
    pub(crate) csrf: String,
    pub(crate) scripts: Vec<Pick>,
    pub(crate) groups: Vec<Pick>,
    /// The groups the device is in (the device page only).
    pub(crate) member_of: Vec<Pick>,
    pub(crate) can_script: bool,
    pub(crate) can_service: bool,
    pub(crate) can_scan: bool,
    pub(crate) can_patch_scan: bool,
    pub(crate) can_group: bool,
    pub(crate) can_maintenance: bool,
    pub(crate) can_reboot: bool,
}

impl Panel {
    /// The panel for `scope`'s person, for one device or (`None`) a selection.
    pub(crate) async fn load(
        state: &AppState,
        scope: &crate::authz::OrgScope,
        csrf: &str,
        device: Option<breeze_core::DeviceId>,
    ) -> Result<Panel, PageError> {
        let may = |a: DeviceAction| super::allowed(state, scope, a.operation(state));
        let store = scope.store(state);
        let mut p = Panel {
            csrf: csrf.to_owned(),
            scripts: Vec::new(),
            groups: Vec::new(),
            member_of: Vec::new(),
            can_script: may(DeviceAction::RunScript),
            can_service: may(DeviceAction::Service("restart")),
            can_scan: may(DeviceAction::SecurityScan),
            can_patch_scan: may(DeviceAction::PatchScan),
            can_group: may(DeviceAction::AddToGroup),
            can_maintenance: may(DeviceAction::Maintenance),
            can_reboot: may(DeviceAction::Reboot),
        };
        if p.can_script {
            p.scripts = store
                .scripts()
                .list_scripts(None, None)
                .await?
                .into_iter()
                .map(|s| Pick {
                    value: s.id.to_string(),
                    label: s.name,
                })
                .collect();
        }
        if p.can_group {
            p.groups = store
                .tenancy()
                .list_groups()
                .await?
                .into_iter()
                .map(|g| Pick {
                    value: g.id.to_string(),
                    label: g.name,
                })
                .collect();
            if let Some(d) = device {
                p.member_of = store
                    .tenancy()
                    .groups_of_device(d)
                    .await?
                    .into_iter()
                    .map(|g| Pick {
                        value: g.id.to_string(),
                        label: g.name,
                    })
                    .collect();
            }
        }
        Ok(p)
    }

    /// Whether `scope`'s person may take any device action (without loading the choices).
    pub(crate) fn offers_any(state: &AppState, scope: &crate::authz::OrgScope) -> bool {
        [
            DeviceAction::RunScript,
            DeviceAction::Service("restart"),
            DeviceAction::SecurityScan,
            DeviceAction::PatchScan,
            DeviceAction::AddToGroup,
            DeviceAction::Maintenance,
            DeviceAction::Reboot,
        ]
        .into_iter()
        .any(|a| super::allowed(state, scope, a.operation(state)))
    }

    /// Whether any action is offered.
    pub(crate) fn any(&self) -> bool {
        self.can_script
            || self.can_service
            || self.can_scan
            || self.can_patch_scan
            || self.can_group
            || self.can_maintenance
            || self.can_reboot
    }
}

/// The outcome of the last action, shown at the top of the page it returned to.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct Outcome {
    pub(crate) done: String,
    pub(crate) failed: String,
}

impl Outcome {
    /// Bounded, as a page shows them.
    pub(crate) fn trimmed(self) -> Outcome {
        Outcome {
            done: self.done.chars().take(700).collect(),
            failed: self.failed.chars().take(700).collect(),
        }
    }
}
