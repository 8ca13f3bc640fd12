//! Patches, staged deployments and maintenance windows in the console.
//!
//! `GET /o/{org}/patches` lists pending updates by package (with the organization-wide
//! decision and Approve / Decline buttons) and `?view=device` by device; `POST …/patches/decide`
//! is `manage_patches` `approve` / `decline` through the pipeline; the device view's "Install
//! now" (`POST …/patches/install`) is `manage_patches install` of a device's approved updates,
//! the call an AI client makes (Tier 3: the guard's approval rule applies as it does there).
//! `GET /o/{org}/deployments`
//! lists deployments with each one's progress; `GET …/deployments/{id}` shows one with every
//! device's state, reloading itself every few seconds (`…/{id}/devices`, a fragment) while it
//! runs, and `POST …/{id}/control` is `manage_deployments` `start` / `pause` / `resume` /
//! `cancel`. `GET /o/{org}/maintenance` lists maintenance windows by when they next open.
//!
//! Each page is judged by the operation its tool's read action declares, each button by its
//! own action's, and every change is the tool call itself ([`super::actions::run`]).

use axum::{
    Router,
    extract::{Path, Query, State},
    response::Response,
    routing::{get, post},
};
use breeze_core::{DeploymentStatus, DeviceId};
use breeze_store::{Deployment, PatchFilter, Payload, RuleTarget};
use serde::Deserialize;
use serde_json::json;

use super::device_actions::Outcome;
use super::kit::{
    self, Cell, Fragment, Page, Part, RowForm, Table, run_and_return, target_name, when, when_opt,
};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{AppState, authz::OrgScope, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/patches", get(patches))
        .route("/o/{org}/patches/decide", post(decide))
        .route("/o/{org}/patches/install", post(install))
        .route("/o/{org}/deployments", get(deployments))
        .route("/o/{org}/deployments/{id}", get(deployment))
        .route("/o/{org}/deployments/{id}/devices", get(deployment_devices))
        .route("/o/{org}/deployments/{id}/control", post(control))
        .route("/o/{org}/maintenance", get(maintenance))
}

const TABS: &[(&str, &str)] = &[
    ("/patches", "By package"),
    ("/patches?view=device", "By device"),
    ("/deployments", "Deployments"),
    ("/maintenance", "Maintenance windows"),
];

/// The most pending updates one page reads.
const PATCH_ROWS: u32 = 500;

async fn scope_for(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    tool: &str,
    action: &str,
) -> Result<OrgScope, PageError> {
    Ok(who
        .scope(state, org, tool_operation(state, tool, action))
        .await?)
}

fn page(l: Layout, heading: &str, slug: &str, current: &str, o: Outcome) -> Page {
    Page::new(l, heading)
        .outcome(o)
        .tabbed(slug, "Patches and deployments", TABS, current)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PatchQuery {
    view: String,
    search: String,
    done: String,
    failed: String,
}

async fn patches(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<PatchQuery>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "manage_patches", "list").await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let search = q.search.trim().to_owned();
    let list = store
        .patches()
        .list_device_patches(&PatchFilter {
            search: (!search.is_empty()).then(|| search.clone()),
            limit: PATCH_ROWS,
            ..PatchFilter::default()
        })
        .await?;
    let ids: Vec<DeviceId> = list.iter().map(|p| p.device_id).collect();
    let names = store.devices().hostnames(&ids).await?;
    let decisions = store.patches().list_patch_approvals().await?;
    // The organization-wide decision on a package (any version), as the tool's `approve`
    // without a configuration policy records it.
    let decision_of = |name: &str| {
        decisions
            .iter()
            .find(|d| d.policy_id.is_none() && d.package_name == name)
            .map_or("undecided", |d| d.decision.as_str())
    };
    let by_device = q.view == "device";
    let can_decide = allowed(
        &state,
        &scope,
        tool_operation(&state, "manage_patches", "approve"),
    );
    let csrf = who.csrf.clone();
    let mut part;
    let mut install_part = None;
    if by_device {
        let mut t = Table::new(
            "patches-by-device",
            "Pending updates by device",
            &[
                "Device",
                "Package",
                "Installed",
                "Available",
                "Security",
                "Decision",
            ],
            "No pending update: every scanned device is up to date.",
        );
        for p in &list {
            let host = names
                .get(&p.device_id)
                .cloned()
                .unwrap_or_else(|| p.device_id.to_string());
            t.row(
                String::new(),
                vec![
                    Cell::link(host, format!("/o/{slug}/devices/{}", p.device_id)),
                    Cell::mono(p.name.clone()),
                    Cell::text(p.installed_version.clone().unwrap_or_else(|| "—".into())),
                    Cell::text(p.available_version.clone()),
                    security_cell(p.security, p.severity.as_deref()),
                    Cell::status(decision_of(&p.name)),
                ],
            );
        }
        part = Part::new("pending", "Pending updates by device").table(t);
        install_part = installable(&state, &scope, &who.csrf, &list, &names, &decision_of);
    } else {
        // Packages in name order, with how many devices wait for each.
        let mut packages: Vec<(String, usize, bool, String, Vec<String>)> = Vec::new();
        for p in &list {
            match packages.iter_mut().find(|x| x.0 == p.name) {
                Some(x) => {
                    x.1 += 1;
                    x.2 |= p.security;
                    if !x.4.contains(&p.available_version) {
                        x.4.push(p.available_version.clone());
                    }
                }
                None => packages.push((
                    p.name.clone(),
                    1,
                    p.security,
                    p.severity.clone().unwrap_or_default(),
                    vec![p.available_version.clone()],
                )),
            }
        }
        packages.sort_by(|a, b| a.0.cmp(&b.0));
        let mut headers = vec!["Package", "Devices", "Available", "Security", "Decision"];
        if can_decide {
            headers.push("Actions");
        }
        let mut t = Table::new(
            "patches-by-package",
            "Pending updates by package",
            &headers,
            "No pending update: every scanned device is up to date.",
        )
        .csrf(&csrf);
        for (name, devices, security, severity, versions) in packages {
            let decision = decision_of(&name);
            let mut cells = vec![
                Cell::mono(name.clone()),
                Cell::text(devices.to_string()),
                Cell::text(versions.join(", ")),
                security_cell(
                    security,
                    (!severity.is_empty()).then_some(severity.as_str()),
                ),
                Cell::status(decision),
            ];
            if can_decide {
                let action = format!("/o/{slug}/patches/decide");
                let mut forms = Vec::new();
                if decision != "approved" {
                    forms.push(
                        RowForm::new(action.clone(), "Approve", format!("Approve {name}"))
                            .field("decision", "approve")
                            .field("package", name.clone()),
                    );
                }
                if decision != "declined" {
                    forms.push(
                        RowForm::new(action, "Decline", format!("Decline {name}"))
                            .field("decision", "decline")
                            .field("package", name.clone())
                            .danger(""),
                    );
                }
                cells.push(Cell::forms(forms));
            }
            t.row(format!("package-{name}"), cells);
        }
        part = Part::new("pending", "Pending updates by package").table(t);
    }
    if list.len() == PATCH_ROWS as usize {
        part.note = format!(
            "Showing the first {PATCH_ROWS} pending updates; search for a package to narrow."
        );
    } else {
        part.note = "Approving a package lets install jobs and maintenance windows install it \
                     (manage_patches install); declining keeps it off every device."
            .into();
    }
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Patches, "Patches").await?;
    let mut p = page(
        l,
        "Patches",
        &slug,
        if by_device {
            "/patches?view=device"
        } else {
            "/patches"
        },
        Outcome {
            done: q.done,
            failed: q.failed,
        },
    );
    p.search = Some(search);
    p.parts.push(part);
    p.parts.extend(install_part);
    render(&p)
}

/// The devices with approved pending updates, each with "Install now" for whoever may
/// `manage_patches install`; `None` when nobody waits for an approved update.
fn installable(
    state: &AppState,
    scope: &OrgScope,
    csrf: &str,
    list: &[breeze_store::DevicePatch],
    names: &std::collections::HashMap<DeviceId, String>,
    decision_of: &dyn Fn(&str) -> &'static str,
) -> Option<Part> {
    let mut waiting: Vec<(DeviceId, String, Vec<&str>)> = Vec::new();
    for p in list.iter().filter(|p| decision_of(&p.name) == "approved") {
        match waiting.iter_mut().find(|w| w.0 == p.device_id) {
            Some(w) => w.2.push(&p.name),
            None => {
                let host = names
                    .get(&p.device_id)
                    .cloned()
                    .unwrap_or_else(|| p.device_id.to_string());
                waiting.push((p.device_id, host, vec![&p.name]));
            }
        }
    }
    if waiting.is_empty() {
        return None;
    }
    let slug = &scope.org.slug;
    let can_install = allowed(
        state,
        scope,
        tool_operation(state, "manage_patches", "install"),
    );
    let mut headers = vec!["Device", "Approved updates"];
    if can_install {
        headers.push("Actions");
    }
    let mut t = Table::new(
        "installable",
        "Approved updates waiting",
        &headers,
        "No approved update waits.",
    )
    .csrf(csrf);
    for (id, host, packages) in waiting {
        let mut cells = vec![
            Cell::link(host.clone(), format!("/o/{slug}/devices/{id}")),
            Cell::text(packages.join(", ")),
        ];
        if can_install {
            cells.push(Cell::forms(vec![
                RowForm::new(
                    format!("/o/{slug}/patches/install"),
                    "Install now",
                    format!("Install approved updates on {host} now"),
                )
                .field("device", id.to_string()),
            ]));
        }
        t.row(format!("install-{id}"), cells);
    }
    Some(
        Part::new("install", "Install approved updates")
            .note(
                "Installs every approved pending update on the device now, without a reboot \
                 (manage_patches install); its progress shows on the device's page.",
            )
            .table(t),
    )
}

#[derive(Debug, Deserialize)]
struct InstallForm {
    device: String,
}

/// `POST /o/{org}/patches/install`: `manage_patches install` of one device's approved updates,
/// now, through the pipeline.
async fn install(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<InstallForm>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &f.who, &org, "manage_patches", "install").await?;
    let device = DeviceId(kit::uuid(&f.form.device, "Device")?);
    // Another organization's device is "not found" before anything is sent.
    scope
        .store(&state)
        .devices()
        .get_device(device)
        .await
        .map_err(kit::store_err("Device"))?;
    let to = format!("/o/{}/patches?view=device", scope.org.slug);
    Ok(run_and_return(
        &state,
        &scope,
        "manage_patches",
        json!({ "action": "install", "deviceIds": [device.to_string()], "when": "now" }),
        request_id,
        &to,
    )
    .await)
}

fn security_cell(security: bool, severity: Option<&str>) -> Cell {
    match (security, severity) {
        (true, Some(s)) => Cell {
            text: format!("security · {s}"),
            badge: "s-failed".into(),
            ..Cell::default()
        },
        (true, None) => Cell {
            text: "security".into(),
            badge: "s-failed".into(),
            ..Cell::default()
        },
        (false, s) => Cell::text(s.unwrap_or("—")),
    }
}

#[derive(Debug, Deserialize)]
struct DecideForm {
    decision: String,
    package: String,
}

async fn decide(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<DecideForm>,
) -> Result<Response, PageError> {
    let action = match f.form.decision.as_str() {
        "approve" => "approve",
        "decline" => "decline",
        _ => "no such action",
    };
    let scope = scope_for(&state, &f.who, &org, "manage_patches", action).await?;
    let package = f.form.package.trim();
    if package.is_empty() {
        return Err(PageError::bad_request("Name the package."));
    }
    let to = format!("/o/{}/patches", scope.org.slug);
    Ok(run_and_return(
        &state,
        &scope,
        "manage_patches",
        json!({ "action": action, "packageName": package }),
        request_id,
        &to,
    )
    .await)
}

/// A deployment's target, named.
async fn deployment_target(state: &AppState, scope: &OrgScope, d: &Deployment) -> String {
    let t = match (d.target_site_id, d.target_group_id, d.target_device_id) {
        (Some(s), _, _) => Some(RuleTarget::Site(s)),
        (_, Some(g), _) => Some(RuleTarget::Group(g)),
        (_, _, Some(dev)) => Some(RuleTarget::Device(dev)),
        _ => Some(RuleTarget::Organization),
    };
    target_name(scope.store(state), t).await
}

/// What a deployment runs, in words: a script by its library name (while it is there).
async fn payload_text(state: &AppState, scope: &OrgScope, p: &Payload) -> String {
    match p {
        Payload::Script { script_id, .. } => {
            match scope.store(state).scripts().get_script(*script_id).await {
                Ok(s) => format!("script {}", s.name),
                Err(_) => format!("script {script_id}"),
            }
        }
        Payload::Package { name, action } => format!("{action:?} {name}").to_lowercase(),
    }
}

async fn deployments(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "manage_deployments", "list").await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let list = store.deployments().list_deployments(None, 100).await?;
    let mut t = Table::new(
        "deployments",
        "Deployments",
        &[
            "Deployment",
            "Payload",
            "Target",
            "Status",
            "Progress",
            "Started",
        ],
        "No deployment yet. AI clients and people create them with manage_deployments.",
    );
    for d in &list {
        let tallies = store.deployments().deployment_tallies(d).await?;
        t.row(
            format!("deployment-{}", d.id),
            vec![
                Cell::link(d.name.clone(), format!("/o/{slug}/deployments/{}", d.id)),
                Cell::text(payload_text(&state, &scope, &d.payload).await),
                Cell::text(deployment_target(&state, &scope, d).await),
                Cell::status(d.status.as_str()),
                Cell::text(progress(&tallies, d)),
                Cell::text(when_opt(d.started_at)),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Patches,
        "Deployments",
    )
    .await?;
    let mut p = page(l, "Deployments", &slug, "/deployments", o);
    p.parts.push(
        Part::new("all-deployments", "Staged deployments")
            .note("Each device's run goes through run_script's or manage_patches install's Tier 3 approval as the deployment's owner.")
            .table(t),
    );
    render(&p)
}

/// "ring 2 of 3 · 7 succeeded, 1 failed, 4 pending".
fn progress(tallies: &[breeze_core::deployment::RingTally], d: &Deployment) -> String {
    let (mut ok, mut failed, mut pending, mut running, mut skipped) = (0, 0, 0, 0, 0);
    for t in tallies {
        ok += t.succeeded;
        failed += t.failed;
        pending += t.pending;
        running += t.running;
        skipped += t.skipped;
    }
    let mut s = format!(
        "ring {} of {} · {ok} succeeded",
        (d.current_ring + 1).max(1),
        d.rings.len().max(1)
    );
    for (n, what) in [
        (running, "running"),
        (failed, "failed"),
        (pending, "pending"),
        (skipped, "skipped"),
    ] {
        if n > 0 {
            s.push_str(&format!(", {n} {what}"));
        }
    }
    s
}

async fn devices_table(
    state: &AppState,
    scope: &OrgScope,
    d: &Deployment,
) -> Result<Table, PageError> {
    let slug = &scope.org.slug;
    let rows = scope
        .store(state)
        .deployments()
        .deployment_devices(d.id, None, None)
        .await?;
    let mut t = Table::new(
        "deployment-devices",
        "Devices",
        &["Device", "Ring", "Status", "Exit", "Finished"],
        "No device in this deployment.",
    );
    for x in rows {
        let mut detail = x.output.clone().unwrap_or_default();
        if let Some(e) = &x.error {
            detail.push_str(&format!("\n[error] {e}"));
        }
        if let Some(r) = &x.deferred_reason {
            detail.push_str(&format!("\n[deferred] {r}"));
        }
        t.row(
            format!("dd-{}", x.device_id),
            vec![
                Cell::link(
                    x.hostname.clone(),
                    format!("/o/{slug}/devices/{}", x.device_id),
                ),
                Cell::text(x.ring.to_string()),
                Cell::status(x.status.as_str()).with_detail(detail.trim().to_owned()),
                Cell::text(x.exit_code.map_or_else(|| "—".into(), |e| e.to_string())),
                Cell::text(when_opt(x.finished_at)),
            ],
        );
    }
    Ok(t)
}

async fn find_deployment(
    state: &AppState,
    scope: &OrgScope,
    id: &str,
) -> Result<Deployment, PageError> {
    let id = kit::uuid(id, "Deployment")?;
    scope
        .store(state)
        .deployments()
        .get_deployment(id)
        .await
        .map_err(kit::store_err("Deployment"))
}

async fn deployment(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "manage_deployments", "get").await?;
    let d = find_deployment(&state, &scope, &id).await?;
    let slug = scope.org.slug.clone();
    let tallies = scope
        .store(&state)
        .deployments()
        .deployment_tallies(&d)
        .await?;
    let mut summary = Part::new("summary", "Summary")
        .fact("Status", d.status.as_str())
        .fact("Payload", payload_text(&state, &scope, &d.payload).await)
        .fact("Target", deployment_target(&state, &scope, &d).await)
        .fact("Progress", progress(&tallies, &d))
        .fact("Failure ceiling", format!("{} %", d.max_failure_percent))
        .fact("Owner", d.owner_actor.clone())
        .fact("Created", when(d.created_at));
    if let Some(r) = &d.pause_reason {
        summary = summary.fact("Paused because", r.clone());
    }
    let controls: &[(&str, &str)] = match d.status {
        DeploymentStatus::Draft => &[("start", "Start")],
        DeploymentStatus::Running => &[("pause", "Pause"), ("cancel", "Cancel")],
        DeploymentStatus::Paused => &[("resume", "Resume"), ("cancel", "Cancel")],
        _ => &[],
    };
    let mut forms = Vec::new();
    for (action, label) in controls {
        if allowed(
            &state,
            &scope,
            tool_operation(&state, "manage_deployments", action),
        ) {
            let mut f = RowForm::new(
                format!("/o/{slug}/deployments/{}/control", d.id),
                label,
                String::new(),
            )
            .field("action", *action);
            if *action == "cancel" {
                f = f.danger("Cancel this deployment? Devices not reached yet are skipped.");
            }
            forms.push(f);
        }
    }
    if !forms.is_empty() {
        let mut t = Table::new("controls", "Control", &["Control"], "").csrf(&who.csrf);
        t.row(String::new(), vec![Cell::forms(forms)]);
        summary = summary.table(t);
    }
    let mut devices =
        Part::new("devices", "Devices").table(devices_table(&state, &scope, &d).await?);
    if !d.status.is_final() {
        devices.poll = format!("/o/{slug}/deployments/{}/devices", d.id);
        devices.note = "Updates every few seconds while the deployment is under way.".into();
    }
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Patches, &d.name).await?;
    let mut p = page(l, &d.name, &slug, "/deployments", o);
    p.back = Some((format!("/o/{slug}/deployments"), "Deployments".into()));
    p.parts.push(summary);
    p.parts.push(devices);
    render(&p)
}

/// The devices table alone, for the page's live reload.
async fn deployment_devices(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "manage_deployments", "device_status").await?;
    let d = find_deployment(&state, &scope, &id).await?;
    render(&Fragment {
        t: devices_table(&state, &scope, &d).await?,
    })
}

#[derive(Debug, Deserialize)]
struct ControlForm {
    action: String,
}

async fn control(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<ControlForm>,
) -> Result<Response, PageError> {
    let action = match f.form.action.as_str() {
        a @ ("start" | "pause" | "resume" | "cancel") => a,
        _ => "no such action",
    };
    let scope = scope_for(&state, &f.who, &org, "manage_deployments", action).await?;
    let d = find_deployment(&state, &scope, &id).await?;
    let to = format!("/o/{}/deployments/{}", scope.org.slug, d.id);
    Ok(run_and_return(
        &state,
        &scope,
        "manage_deployments",
        json!({ "action": action, "deploymentId": d.id.to_string() }),
        request_id,
        &to,
    )
    .await)
}

async fn maintenance(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "manage_maintenance_windows", "list").await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let now = state.clock.now();
    let mut windows = store.maintenance().list_windows().await?;
    // Open ones first, then by when they next open; disabled and past ones last.
    windows.sort_by_key(|w| {
        let next = if w.enabled {
            w.current_or_next(now)
        } else {
            None
        };
        (next.is_none(), next.map(|n| n.starts_at), w.name.clone())
    });
    let mut t = Table::new(
        "windows",
        "Maintenance windows",
        &["Window", "Covers", "Schedule", "State", "Next", "Alerts"],
        "No maintenance window. Open one from a device's page, or with manage_maintenance_windows.",
    );
    for w in &windows {
        let open = w.open_at(now);
        let next = if w.enabled {
            w.current_or_next(now)
        } else {
            None
        };
        let state_cell = match (w.enabled, open) {
            (false, _) => Cell::status("disabled"),
            (true, Some(_)) => Cell {
                text: "open now".into(),
                badge: "s-maintenance".into(),
                ..Cell::default()
            },
            (true, None) if next.is_some() => Cell::status("pending"),
            (true, None) => Cell::status("expired"),
        };
        t.row(
            format!("window-{}", w.id),
            vec![
                Cell::text(w.name.clone()),
                Cell::text(target_name(store, w.target().ok()).await),
                Cell::text(schedule_text(&w.schedule, &w.time_zone)),
                state_cell,
                Cell::text(match next {
                    Some(n) if n.contains(now) => format!("until {}", when(n.ends_at)),
                    Some(n) => format!("{} → {}", when(n.starts_at), when(n.ends_at)),
                    None => "—".into(),
                }),
                Cell::text(if w.suppress_alerts {
                    "held back"
                } else {
                    "shown"
                }),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Patches,
        "Maintenance windows",
    )
    .await?;
    let mut p = page(l, "Maintenance windows", &slug, "/maintenance", o);
    p.parts
        .push(next_days(store, &windows, now, CALENDAR_DAYS).await);
    p.parts.push(
        Part::new("calendar", "Upcoming")
            .note("Open windows first, then by when each next opens (times in UTC).")
            .table(t),
    );
    render(&p)
}

fn schedule_text(s: &breeze_core::MaintenanceSchedule, tz: &str) -> String {
    match s {
        breeze_core::MaintenanceSchedule::Once { starts_at, ends_at } => {
            format!("once, {} → {}", when(*starts_at), when(*ends_at))
        }
        breeze_core::MaintenanceSchedule::Weekly {
            days,
            start_time,
            duration_minutes,
        } => {
            let days: Vec<String> = days.iter().map(|d| format!("{d:?}")).collect();
            format!(
                "weekly {} at {} {tz} for {} min",
                days.join(", "),
                start_time.format("%H:%M"),
                duration_minutes
            )
        }
    }
}

/// How many days the maintenance calendar shows, today included.
const CALENDAR_DAYS: i64 = 14;
/// The most occurrences the calendar lists (a bound on the page, not a limit reached in
/// practice: an organization keeps few windows).
const CALENDAR_MAX_ROWS: usize = 500;

/// The calendar-like list: each of the next `days` days (UTC, today first) with the
/// occurrences of enabled windows that start on it — recurring windows expanded, one open now
/// listed on today — in order of start. A day without one says so.
async fn next_days(
    store: breeze_store::OrgStore<'_>,
    windows: &[breeze_store::MaintenanceWindow],
    now: breeze_core::Timestamp,
    days: i64,
) -> Part {
    let today = now.date_naive();
    let from = now;
    let to = today
        .checked_add_signed(chrono::Duration::days(days))
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map_or(now, |d| d.and_utc());
    let mut all: Vec<(breeze_core::Occurrence, &breeze_store::MaintenanceWindow)> = windows
        .iter()
        .filter(|w| w.enabled)
        .filter_map(|w| {
            Some((
                w,
                breeze_core::maintenance::parse_time_zone(&w.time_zone).ok()?,
            ))
        })
        .flat_map(|(w, tz)| {
            w.schedule
                .occurrences_between(tz, from, to)
                .into_iter()
                .map(move |o| (o, w))
        })
        .collect();
    all.sort_by_key(|(o, w)| (o.starts_at, w.name.clone()));
    all.truncate(CALENDAR_MAX_ROWS);
    let mut names = std::collections::HashMap::new();
    for (_, w) in &all {
        if let std::collections::hash_map::Entry::Vacant(e) = names.entry(w.id) {
            e.insert(target_name(store, w.target().ok()).await);
        }
    }
    let mut part = Part::new("next-days", "Next 14 days").note(
        "Every opening of an enabled window, recurring ones expanded, by the day it starts \
         (times in UTC).",
    );
    for offset in 0..days {
        let Some(day) = today.checked_add_signed(chrono::Duration::days(offset)) else {
            break;
        };
        let label = match offset {
            0 => format!("Today, {}", day.format("%a %-d %b")),
            1 => format!("Tomorrow, {}", day.format("%a %-d %b")),
            _ => day.format("%A %-d %B").to_string(),
        };
        let mut t = Table::new(
            &format!("day-{}", day.format("%Y-%m-%d")),
            &label,
            &["Time", "Window", "Covers", "Alerts"],
            "No window.",
        )
        .heading(label.clone());
        for (o, w) in &all {
            // An occurrence open since before today is listed on today.
            let starts_on = o.starts_at.date_naive().max(today);
            if starts_on != day {
                continue;
            }
            let time = if o.starts_at <= now {
                format!("open now, until {}", short(o.ends_at, day))
            } else {
                format!(
                    "{} → {}",
                    o.starts_at.format("%H:%M"),
                    short(o.ends_at, day)
                )
            };
            t.row(
                format!("occurrence-{}-{}", w.id, o.starts_at.timestamp()),
                vec![
                    Cell::text(time),
                    Cell::text(w.name.clone()),
                    Cell::text(names.get(&w.id).cloned().unwrap_or_default()),
                    Cell::text(if w.suppress_alerts {
                        "held back"
                    } else {
                        "shown"
                    }),
                ],
            );
        }
        part = part.table(t);
    }
    part
}

/// An end time as the calendar shows it: the time alone on the same day, else the date too.
fn short(t: breeze_core::Timestamp, day: chrono::NaiveDate) -> String {
    if t.date_naive() == day {
        t.format("%H:%M").to_string()
    } else {
        t.format("%a %-d %b %H:%M").to_string()
    }
}
