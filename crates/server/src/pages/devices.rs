//! Devices: the organization's fleet, and one device's page.
//!
//! `GET /o/{org}/devices` lists devices from the store's in-memory device directory (search by
//! hostname, filter by status, OS and site, 50 to a page), so 10,000 devices list as fast as
//! ten. `GET /o/{org}/devices/{id}` shows a device: facts, hardware and inventory, CPU /
//! memory / disk charts over an hour, a day or a week (server-side SVG from the metric
//! rollups: raw samples for an hour or a day, hourly rollups for a week; at most
//! [`MAX_POINTS`] points, averaged when there are more), context notes, recent commands with
//! their output, the pending approvals that name it, and its tickets. Live updates
//! (`events`): `…/charts` is the charts alone, which htmx reloads on the `metrics` event;
//! `…/{id}/status` (the status badge) and `/o/{org}/devices/rows?…` (the list's count, rows
//! and pager for the same query) are reloaded on the `devices` event. Needs `devices.read`, like the REST routes.

use std::fmt::Write as _;

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
    routing::get,
};
use breeze_core::{
    Device, DeviceId, DeviceStatus, Operation, OsFamily, Permission, SiteId, Timestamp,
};
use breeze_store::{Aggregation, DeviceFilter, MetricPoint};
use chrono::Duration;
use serde::Deserialize;

use super::device_actions::{Outcome, Panel};
use super::{Layout, PageError, Section, SignedIn, render, render_status};
use crate::{ApiError, AppState};

/// Devices per list page.
const PAGE: u32 = 50;
/// Most points one chart draws.
pub(crate) const MAX_POINTS: usize = 240;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/devices", get(list))
        .route("/o/{org}/devices/rows", get(rows_fragment))
        .route("/o/{org}/devices/{id}", get(show))
        .route("/o/{org}/devices/{id}/status", get(status_fragment))
        .route("/o/{org}/devices/{id}/charts", get(charts_fragment))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListQuery {
    search: String,
    status: String,
    os: String,
    site: String,
    page: String,
}

struct Row {
    id: String,
    hostname: String,
    /// The device this one may be a clone or impostor of (empty when none).
    clone_of: String,
    status: &'static str,
    os: String,
    site: String,
    last_seen: String,
    agent: String,
    /// Unresolved alerts (shown when the person may read alerts).
    alerts: i64,
    /// Updates available, and how many are security updates.
    updates: i64,
    security_updates: i64,
}

struct Choice {
    value: String,
    label: String,
    selected: bool,
}

/// The part of the list page that live updates reload: the count, the rows and the pager.
struct Results {
    org_slug: String,
    /// The page's own query string, so a reload shows the same page of the same filter.
    query: String,
    rows: Vec<Row>,
    /// Whether the person may read alerts (the alerts column).
    alerts_visible: bool,
    /// Whether rows have a checkbox for the bulk actions (the person may take one).
    selectable: bool,
    total: u64,
    from: u64,
    to: u64,
    prev: String,
    next: String,
}

#[derive(Template)]
#[template(path = "devices.html")]
struct ListPage {
    l: Layout,
    search: String,
    statuses: Vec<Choice>,
    oses: Vec<Choice>,
    sites: Vec<Choice>,
    r: Results,
    error: String,
    panel: Panel,
    outcome: Outcome,
}

/// `GET /o/{org}/devices/rows?…`: the results alone, which the list reloads on the live
/// `devices` event (a device came online, went offline, was added).
#[derive(Template)]
#[template(path = "devices_rows.html")]
struct RowsFragment {
    r: Results,
}

fn ago(now: Timestamp, t: Option<Timestamp>) -> String {
    let Some(t) = t else {
        return "never".to_owned();
    };
    let s = (now - t).num_seconds().max(0);
    match s {
        0..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86400 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}

/// A list request read and answered: the filter's choices, the results and any problem with
/// the query (then no rows, and the page answers 400).
struct Listing {
    search: String,
    query: ListQuery,
    sites: Vec<breeze_core::Site>,
    results: Results,
    problems: Vec<String>,
}

async fn listing(
    state: &AppState,
    scope: &crate::authz::OrgScope,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Listing, PageError> {
    let store = scope.store(state);
    let (q, mut problems) = match q {
        Ok(Query(q)) => (q, Vec::new()),
        Err(e) => (ListQuery::default(), vec![e.body_text()]),
    };
    let mut filter = DeviceFilter::default();
    match q.status.trim() {
        "" => {}
        s => match s.parse::<DeviceStatus>() {
            Ok(v) => filter.status = Some(v),
            Err(e) => problems.push(e.to_string()),
        },
    }
    match q.os.trim() {
        "" => {}
        s => match s.parse::<OsFamily>() {
            Ok(v) => filter.os_family = Some(v),
            Err(e) => problems.push(e.to_string()),
        },
    }
    let sites = store.tenancy().list_sites().await?;
    match q.site.trim() {
        "" => {}
        s => match s.parse::<SiteId>() {
            // A site of another organization matches no device: the directory filters by org.
            Ok(v) if sites.iter().any(|x| x.id == v) => filter.site_id = Some(v),
            _ => problems.push(format!("no site {s:?} in this organization")),
        },
    }
    let search = q.search.trim().to_owned();
    if search.chars().count() > 100 {
        problems.push("search: at most 100 characters".to_owned());
    } else if !search.is_empty() {
        filter.search = Some(search.clone());
    }
    let page = match q.page.trim() {
        "" => 1,
        p => match p.parse::<u32>() {
            Ok(n) if (1..=100_000).contains(&n) => n,
            _ => {
                problems.push(format!("page {p:?} is not a page number"));
                1
            }
        },
    };
    let now = state.clock.now();
    let (mut rows, mut total) = (Vec::new(), 0);
    let alerts_visible = super::allowed(
        state,
        scope,
        super::tool_operation(state, "manage_alerts", "list"),
    );
    if problems.is_empty() {
        let result = store
            .devices()
            .device_page(&filter, PAGE, (page - 1) * PAGE)
            .await?;
        total = result.total();
        // The page's devices' alert and update counts: one grouped query each.
        let ids: Vec<DeviceId> = result.iter().map(|(d, _)| d.id).collect();
        let alerts = if alerts_visible {
            store.alerts().unresolved_counts(&ids).await?
        } else {
            std::collections::HashMap::new()
        };
        let updates = store.patches().available_counts(&ids).await?;
        rows = result
            .iter()
            .map(|(d, site)| {
                let (n, sec) = updates.get(&d.id).copied().unwrap_or((0, 0));
                Row {
                    id: d.id.to_string(),
                    hostname: d.hostname.clone(),
                    clone_of: d
                        .suspected_clone_of
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                    status: d.status.as_str(),
                    os: format!("{} {}", d.os_name, d.os_version),
                    site: site.to_owned(),
                    last_seen: ago(now, d.last_seen_at),
                    agent: d.agent_version.clone().unwrap_or_default(),
                    alerts: alerts.get(&d.id).copied().unwrap_or(0),
                    updates: n,
                    security_updates: sec,
                }
            })
            .collect();
    }
    let from = u64::from((page - 1) * PAGE);
    let link = |p: u32| {
        let pairs: Vec<(&str, String)> = [
            ("search", search.clone()),
            ("status", q.status.trim().to_owned()),
            ("os", q.os.trim().to_owned()),
            ("site", q.site.trim().to_owned()),
            ("page", p.to_string()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect();
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    };
    let results = Results {
        org_slug: scope.org.slug.clone(),
        query: if problems.is_empty() {
            link(page)
        } else {
            String::new()
        },
        from: if total == 0 { 0 } else { from + 1 },
        to: from + rows.len() as u64,
        prev: if page > 1 {
            link(page - 1)
        } else {
            String::new()
        },
        next: if from + (rows.len() as u64) < total {
            link(page + 1)
        } else {
            String::new()
        },
        rows,
        alerts_visible,
        selectable: Panel::offers_any(state, scope),
        total,
    };
    Ok(Listing {
        search,
        query: q,
        sites,
        results,
        problems,
    })
}

fn list_status(problems: &[String]) -> StatusCode {
    if problems.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

async fn list(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
    outcome: Result<Query<Outcome>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let panel = Panel::load(&state, &scope, &who.csrf, None).await?;
    let outcome = outcome.map(|Query(o)| o.trimmed()).unwrap_or_default();
    let Listing {
        search,
        query: q,
        sites,
        results,
        problems,
    } = listing(&state, &scope, q).await?;
    let choices = |all: Vec<(String, String)>, current: &str| {
        all.into_iter()
            .map(|(value, label)| Choice {
                selected: value == current,
                value,
                label,
            })
            .collect()
    };
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Devices, "Devices").await?;
    render_status(
        list_status(&problems),
        &ListPage {
            l,
            statuses: choices(
                DeviceStatus::ALL
                    .iter()
                    .map(|s| (s.as_str().to_owned(), s.as_str().to_owned()))
                    .collect(),
                q.status.trim(),
            ),
            oses: choices(
                OsFamily::ALL
                    .iter()
                    .map(|s| (s.as_str().to_owned(), s.as_str().to_owned()))
                    .collect(),
                q.os.trim(),
            ),
            sites: choices(
                sites
                    .iter()
                    .map(|s| (s.id.to_string(), s.name.clone()))
                    .collect(),
                q.site.trim(),
            ),
            search,
            r: results,
            error: problems.join("; "),
            panel,
            outcome,
        },
    )
}

async fn rows_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let listing = listing(&state, &scope, q).await?;
    render_status(
        list_status(&listing.problems),
        &RowsFragment { r: listing.results },
    )
}

/// A chart window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    Hour,
    Day,
    Week,
}

impl Window {
    fn parse(s: &str) -> Result<Self, PageError> {
        match s {
            "" | "hour" => Ok(Window::Hour),
            "day" => Ok(Window::Day),
            "week" => Ok(Window::Week),
            other => Err(PageError::bad_request(format!(
                "window {other:?}: choose hour, day or week"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
        }
    }

    fn span(self) -> Duration {
        match self {
            Window::Hour => Duration::hours(1),
            Window::Day => Duration::days(1),
            Window::Week => Duration::days(7),
        }
    }

    fn aggregation(self) -> Aggregation {
        match self {
            Window::Hour | Window::Day => Aggregation::Raw,
            Window::Week => Aggregation::Hourly,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WindowQuery {
    window: String,
}

/// One chart: its title, latest value and SVG.
pub(crate) struct Chart {
    id: &'static str,
    title: &'static str,
    latest: String,
    /// Generated here from numbers only (no stored text), so it is rendered unescaped.
    svg: String,
    points: usize,
}

struct WindowLink {
    name: &'static str,
    href: String,
    active: bool,
}

#[derive(Template)]
#[template(path = "device_charts.html")]
struct ChartsFragment {
    charts: Vec<Chart>,
    windows: Vec<WindowLink>,
}

/// `points` averaged into at most [`MAX_POINTS`] buckets, in order.
fn thin(points: Vec<MetricPoint>) -> Vec<MetricPoint> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let per = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(per)
        .filter_map(|c| {
            let n = c.len() as f64;
            let mut p = c.last()?.clone();
            p.cpu_avg = c.iter().map(|x| x.cpu_avg).sum::<f64>() / n;
            p.ram_avg = c.iter().map(|x| x.ram_avg).sum::<f64>() / n;
            p.disk_avg = c.iter().map(|x| x.disk_avg).sum::<f64>() / n;
            Some(p)
        })
        .collect()
}

/// A 0–100 % line chart of `values` over [`since`, `until`] as SVG.
pub(crate) fn svg_chart(
    title: &str,
    since: Timestamp,
    until: Timestamp,
    values: &[(Timestamp, f64)],
) -> String {
    const W: f64 = 600.0;
    const H: f64 = 160.0;
    const LEFT: f64 = 34.0;
    const TOP: f64 = 8.0;
    const BOTTOM: f64 = 20.0;
    let plot_w = W - LEFT - 6.0;
    let plot_h = H - TOP - BOTTOM;
    let span = (until - since).num_milliseconds().max(1) as f64;
    let x = |t: Timestamp| {
        LEFT + plot_w * ((t - since).num_milliseconds() as f64 / span).clamp(0.0, 1.0)
    };
    let y = |v: f64| TOP + plot_h * (1.0 - (v.clamp(0.0, 100.0) / 100.0));
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"chart\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{title}: {} points\" xmlns=\"http://www.w3.org/2000/svg\">",
        values.len()
    );
    for pct in [0.0, 50.0, 100.0] {
        let yy = y(pct);
        let _ = write!(
            s,
            "<line class=\"grid-line\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\"/>\
             <text class=\"axis-label\" x=\"2\" y=\"{:.1}\">{pct}%</text>",
            W - 6.0,
            yy + 4.0
        );
    }
    let fmt = if until - since > Duration::days(2) {
        "%m-%d"
    } else {
        "%H:%M"
    };
    for (i, t) in [since, since + (until - since) / 2, until]
        .into_iter()
        .enumerate()
    {
        let anchor = ["start", "middle", "end"][i];
        let _ = write!(
            s,
            "<text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
            x(t),
            H - 4.0,
            t.format(fmt)
        );
    }
    if !values.is_empty() {
        let line: Vec<String> = values
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
            .collect();
        let (first_x, last_x) = (x(values[0].0), x(values[values.len() - 1].0));
        let base = y(0.0);
        let _ = write!(
            s,
            "<polygon class=\"area\" points=\"{first_x:.1},{base:.1} {} {last_x:.1},{base:.1}\"/>\
             <polyline class=\"series\" points=\"{}\"/>",
            line.join(" "),
            line.join(" ")
        );
        if values.len() == 1 {
            let (t, v) = values[0];
            let _ = write!(
                s,
                "<circle class=\"series\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\"/>",
                x(t),
                y(v)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// A chart's id, title, and the value it draws from a point.
type Series = (&'static str, &'static str, fn(&MetricPoint) -> f64);

async fn charts(
    state: &AppState,
    store: breeze_store::OrgStore<'_>,
    device: &Device,
    window: Window,
) -> Result<Vec<Chart>, PageError> {
    let until = state.clock.now() + Duration::seconds(1);
    let since = until - window.span();
    let points = thin(
        store
            .telemetry()
            .query_metrics(device, since, until, window.aggregation())
            .await?,
    );
    let series: [Series; 3] = [
        ("cpu", "CPU", |p| p.cpu_avg),
        ("memory", "Memory", |p| p.ram_avg),
        ("disk", "Disk", |p| p.disk_avg),
    ];
    Ok(series
        .into_iter()
        .map(|(id, title, f)| {
            let values: Vec<(Timestamp, f64)> = points.iter().map(|p| (p.at, f(p))).collect();
            Chart {
                id,
                title,
                latest: values
                    .last()
                    .map_or_else(|| "no data".to_owned(), |(_, v)| format!("{v:.1} %")),
                svg: svg_chart(title, since, until, &values),
                points: values.len(),
            }
        })
        .collect())
}

fn windows(org: &str, device: &str, current: Window) -> Vec<WindowLink> {
    [Window::Hour, Window::Day, Window::Week]
        .into_iter()
        .map(|w| WindowLink {
            name: w.name(),
            href: format!("/o/{org}/devices/{device}?window={}", w.name()),
            active: w == current,
        })
        .collect()
}

fn device_id(s: &str) -> Result<DeviceId, PageError> {
    s.parse()
        .map_err(|_| PageError::from(ApiError::not_found("device not found")))
}

async fn charts_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(q): Query<WindowQuery>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let window = Window::parse(q.window.trim())?;
    let store = scope.store(&state);
    let device = store.devices().get_device(device_id(&id)?).await?;
    render(&ChartsFragment {
        charts: charts(&state, store, &device, window).await?,
        windows: windows(&scope.org.slug, &id, window),
    })
}

/// The device's status badge alone, which its page reloads on the live `devices` event.
#[derive(Template)]
#[template(path = "device_status.html")]
struct StatusFragment {
    status: &'static str,
}

async fn status_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let device = scope
        .store(&state)
        .devices()
        .get_device(device_id(&id)?)
        .await?;
    render(&StatusFragment {
        status: device.status.as_str(),
    })
}

struct Fact {
    name: &'static str,
    value: String,
}

struct Note {
    kind: String,
    summary: String,
    state: &'static str,
    by: String,
    when: String,
}

struct CommandView {
    id: String,
    kind: String,
    status: String,
    by: String,
    when: String,
    exit: String,
    output: String,
}

struct PendingView {
    id: String,
    description: String,
    tool: String,
}

#[derive(Template)]
#[template(path = "device.html")]
struct DevicePage {
    l: Layout,
    hostname: String,
    /// The device this one may be a clone or impostor of (empty when none).
    clone_of: String,
    status: &'static str,
    facts: Vec<Fact>,
    hardware: Vec<Fact>,
    disks: Vec<Fact>,
    interfaces: Vec<Fact>,
    packages: usize,
    inventory_raw: String,
    charts: Vec<Chart>,
    windows: Vec<WindowLink>,
    window: &'static str,
    org_slug: String,
    device_id: String,
    notes: Vec<Note>,
    commands: Vec<CommandView>,
    pending: Vec<PendingView>,
    panel: Panel,
    outcome: Outcome,
    /// The most severe vulnerabilities (see `vulnerabilities.rs`), and how many there are.
    vulns: super::kit::Table,
    vulns_total: usize,
    /// Its tickets, when the person may list tickets.
    tickets: Option<super::kit::Table>,
}

/// Vulnerabilities the device page shows before linking to the full list.
const DEVICE_PAGE_VULNS: usize = 10;

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(q): Query<WindowQuery>,
    Query(outcome): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let window = Window::parse(q.window.trim())?;
    let device_id = device_id(&id)?;
    let store = scope.store(&state);
    let device = store.devices().get_device(device_id).await?;
    let now = state.clock.now();
    let site = store
        .tenancy()
        .get_site(device.site_id)
        .await
        .map(|s| s.name)
        .unwrap_or_default();
    let dstate = store.agents().device_state(device_id).await?;
    let mut facts = vec![
        Fact {
            name: "Status",
            value: device.status.as_str().to_owned(),
        },
        Fact {
            name: "Operating system",
            value: format!(
                "{} {} ({})",
                device.os_name,
                device.os_version,
                device.os_family.as_str()
            ),
        },
        Fact {
            name: "Site",
            value: site,
        },
        Fact {
            name: "Last seen",
            value: ago(now, device.last_seen_at),
        },
        Fact {
            name: "Agent",
            value: device.agent_version.clone().unwrap_or_else(|| "—".into()),
        },
        Fact {
            name: "Tags",
            value: device.tags.join(", "),
        },
        Fact {
            name: "Device id",
            value: device.id.to_string(),
        },
    ];
    let (mut hardware, mut disks, mut interfaces) = (Vec::new(), Vec::new(), Vec::new());
    let mut packages = 0;
    let mut inventory_raw = String::new();
    if let Some(s) = &dstate {
        if let Some(up) = s.uptime_secs {
            facts.push(Fact {
                name: "Uptime",
                value: format!("{} h {} min", up / 3600, up % 3600 / 60),
            });
        }
        if s.pending_reboot {
            facts.push(Fact {
                name: "Reboot",
                value: "pending".into(),
            });
        }
        let users: Vec<String> = s
            .logged_in_users
            .iter()
            .map(|u| u.username.clone())
            .collect();
        if !users.is_empty() {
            facts.push(Fact {
                name: "Signed-in users",
                value: users.join(", "),
            });
        }
    }
    let parsed = store.agents().inventory(device_id).await?;
    if let Some(p) = parsed.as_deref() {
        packages = p.package_count().unwrap_or(0);
        match (&p.inventory, &p.unparsed) {
            (Some(inv), _) => {
                hardware = vec![
                    Fact {
                        name: "CPU",
                        value: format!(
                            "{} ({} cores, {} threads)",
                            inv.cpu.model, inv.cpu.physical_cores, inv.cpu.logical_cores
                        ),
                    },
                    Fact {
                        name: "Memory",
                        value: gib(inv.memory_total_bytes),
                    },
                    Fact {
                        name: "Kernel",
                        value: format!("{} {}", inv.os.kernel, inv.os.arch),
                    },
                    Fact {
                        name: "Inventory from",
                        value: ago(now, Some(inv.collected_at)),
                    },
                ];
                disks = inv
                    .disks
                    .iter()
                    .map(|d| Fact {
                        name: "Disk",
                        value: format!(
                            "{} ({}): {} free of {}",
                            d.mount,
                            d.filesystem,
                            gib(d.available_bytes),
                            gib(d.total_bytes)
                        ),
                    })
                    .collect();
                interfaces = inv
                    .interfaces
                    .iter()
                    .map(|i| Fact {
                        name: "Interface",
                        value: format!(
                            "{}{}: {}",
                            i.name,
                            i.mac
                                .as_ref()
                                .map(|m| format!(" ({m})"))
                                .unwrap_or_default(),
                            i.addresses.join(", ")
                        ),
                    })
                    .collect();
            }
            (None, Some(raw)) => {
                inventory_raw = serde_json::to_string_pretty(raw).unwrap_or_default();
            }
            (None, None) => {}
        }
    }
    let notes = store
        .context()
        .device_context(device_id, true)
        .await?
        .into_iter()
        .take(20)
        .map(|c| Note {
            state: c.state(now),
            kind: c.context_type,
            summary: c.summary,
            by: c.created_by,
            when: c.created_at.format("%Y-%m-%d %H:%M").to_string(),
        })
        .collect();
    let commands = store
        .commands()
        .list_commands(device_id, 20)
        .await?
        .into_iter()
        .map(|c| {
            let mut output = String::new();
            if let Some(o) = &c.stdout {
                output.push_str(o);
            }
            if let Some(e) = c.stderr.as_deref().filter(|e| !e.is_empty()) {
                let _ = write!(output, "\n[stderr]\n{e}");
            }
            if let Some(e) = &c.error {
                let _ = write!(output, "\n[error] {e}");
            }
            if output.is_empty()
                && let Some(r) = &c.result
            {
                output = serde_json::to_string_pretty(r).unwrap_or_default();
            }
            // A page shows the first 8 KiB; the rest is in the REST API.
            if output.len() > 8192 {
                let mut cut = 8192;
                while !output.is_char_boundary(cut) {
                    cut -= 1;
                }
                output.truncate(cut);
                output.push_str("\n… (truncated here; the full output is in the API)");
            }
            CommandView {
                id: c.id.to_string(),
                kind: c.script_name.clone().unwrap_or(c.kind),
                status: c.status.as_str().to_owned(),
                by: c.created_by,
                when: c.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                exit: c.exit_code.map(|e| e.to_string()).unwrap_or_default(),
                output: output.trim().to_owned(),
            }
        })
        .collect();
    let needle = device_id.to_string();
    let pending = state
        .store
        .org(scope.org.id)
        .approvals()
        .pending_approvals()
        .await?
        .into_iter()
        .filter(|r| r.arguments.to_string().contains(&needle))
        .map(|r| PendingView {
            id: r.id.to_string(),
            description: r.description,
            tool: match r.action {
                Some(a) => format!("{}.{a}", r.tool),
                None => r.tool,
            },
        })
        .collect();
    let charts = charts(&state, store, &device, window).await?;
    let panel = Panel::load(&state, &scope, &who.csrf, Some(device_id)).await?;
    let findings = store.vulnerabilities().device_findings(device_id).await?;
    let vulns_total = findings.len();
    let vulns = super::vulnerabilities::findings_table(
        &scope.org.slug,
        &findings[..vulns_total.min(DEVICE_PAGE_VULNS)],
    );
    let tickets = super::billing::linked_tickets(
        &state,
        &scope,
        super::billing::TicketsOf::Device(device_id),
    )
    .await?;
    let mut l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Devices,
        &device.hostname,
    )
    .await?;
    l.chat_about(&format!("device={device_id}"));
    render(&DevicePage {
        l,
        hostname: device.hostname.clone(),
        clone_of: device
            .suspected_clone_of
            .map(|c| c.to_string())
            .unwrap_or_default(),
        status: device.status.as_str(),
        facts,
        hardware,
        disks,
        interfaces,
        packages,
        inventory_raw,
        charts,
        windows: windows(&scope.org.slug, &id, window),
        window: window.name(),
        org_slug: scope.org.slug.clone(),
        device_id: device.id.to_string(),
        notes,
        commands,
        pending,
        panel,
        outcome: outcome.trimmed(),
        vulns,
        vulns_total,
        tickets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_chart_is_plain_svg_of_its_points() {
        let t0 = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
        let t1 = t0 + Duration::hours(1);
        let svg = svg_chart(
            "CPU",
            t0,
            t1,
            &[(t0, 0.0), (t0 + Duration::minutes(30), 50.0), (t1, 150.0)],
        );
        assert!(svg.starts_with("<svg class=\"chart\"") && svg.ends_with("</svg>"));
        assert!(svg.contains("aria-label=\"CPU: 3 points\""));
        // Left edge at 0 %, middle at 50 %, the right edge clamped to 100 %.
        assert!(
            svg.contains("points=\"34.0,140.0 314.0,74.0 594.0,8.0\""),
            "{svg}"
        );
        assert!(svg.contains(">10:00<") && svg.contains(">11:00<"));
        let empty = svg_chart("CPU", t0, t1, &[]);
        assert!(!empty.contains("polyline"));
        assert!(!svg.contains("style"));
    }

    #[test]
    fn long_series_are_averaged_down() {
        let t0 = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let points: Vec<MetricPoint> = (0..2880)
            .map(|i| MetricPoint {
                at: t0 + Duration::seconds(30 * i),
                samples: 1,
                cpu_avg: if i % 2 == 0 { 0.0 } else { 100.0 },
                cpu_max: 0.0,
                ram_avg: 40.0,
                ram_max: 0.0,
                disk_avg: 10.0,
                disk_max: 0.0,
                net_rx_bytes: 0,
                net_tx_bytes: 0,
                process_avg: 0.0,
            })
            .collect();
        let thinned = thin(points);
        assert_eq!(thinned.len(), MAX_POINTS);
        assert!(thinned.iter().all(|p| (p.cpu_avg - 50.0).abs() < 1e-9));
        assert_eq!(
            thinned.last().unwrap().at,
            t0 + Duration::seconds(30 * 2879)
        );
    }
}
