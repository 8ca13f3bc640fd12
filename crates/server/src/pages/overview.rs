//! `GET /o/{org}`: an organization's overview — what needs a person now, and the fleet at a
//! glance: devices online and offline (live), those offline longest, unresolved alerts by
//! severity, pending approvals, patch compliance (loaded after the page), the fleet's security
//! posture score, and the devices busiest on CPU, memory and disk over the last 15 minutes. Every figure links to its filtered list.
//!
//! Each figure is one bounded query (counts from the in-memory device directory, a grouped
//! count of alerts, the newest posture snapshot per device, a top-5 over recent samples), and
//! each comes from the same store call the tool reading it uses. A figure the person's role
//! may not read (alerts without `alerts.read`) is left out.

use askama::Template;
use axum::{
    Router,
    extract::{Path, State},
    response::Response,
    routing::get,
};
use breeze_core::{DeviceId, DeviceStatus, Metric, Operation, Permission};
use breeze_store::DeviceFilter;

use super::{Layout, PageError, Section, SignedIn, allowed, render, tool_operation};
use crate::AppState;

/// How many devices each list shows.
const TOP: u32 = 5;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}", get(show))
        .route("/o/{org}/overview/fleet", get(fleet_fragment))
        .route("/o/{org}/overview/patches", get(patches_fragment))
}

/// Patch compliance, computed by `manage_patches compliance`'s own code: heavy at a large
/// fleet, so the overview loads it after the page (`hx-trigger="load"`).
#[derive(Template)]
#[template(path = "overview_patches.html")]
struct PatchesFragment {
    p: breeze_tools::FleetPatchCompliance,
    percent: String,
}

async fn patches_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_patches", "compliance"),
        )
        .await?;
    let store = scope.store(&state);
    let p = breeze_tools::fleet_patch_compliance(
        store.devices(),
        store.patches(),
        store.config_policies(),
        state.clock.now(),
    )
    .await
    .map_err(|e| PageError::from(crate::ApiError::internal(format!("patch compliance: {e}"))))?;
    render(&PatchesFragment {
        percent: format!("{:.0}", p.compliance_percent),
        p,
    })
}

struct Named {
    id: String,
    hostname: String,
    detail: String,
}

struct SeverityCount {
    severity: &'static str,
    count: i64,
}

struct Top {
    title: &'static str,
    metric: &'static str,
    devices: Vec<Named>,
}

/// The live part: device counts (reloaded on the `devices` event).
struct Fleet {
    org_slug: String,
    devices: u64,
    online: u64,
    offline: u64,
}

#[derive(Template)]
#[template(path = "overview_fleet.html")]
struct FleetFragment {
    f: Fleet,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct Overview {
    l: Layout,
    f: Fleet,
    offline_longest: Vec<Named>,
    pending: usize,
    alerts_visible: bool,
    alerts: Vec<SeverityCount>,
    unresolved: i64,
    posture_score: String,
    posture_devices: usize,
    tops: Vec<Top>,
    mcp_url: String,
}

async fn fleet(state: &AppState, scope: &crate::authz::OrgScope) -> Result<Fleet, PageError> {
    let store = scope.store(state);
    let count = |status: Option<DeviceStatus>| {
        let filter = DeviceFilter {
            status,
            ..DeviceFilter::default()
        };
        async move {
            store
                .devices()
                .device_page(&filter, 0, 0)
                .await
                .map(|p| p.total())
        }
    };
    Ok(Fleet {
        org_slug: scope.org.slug.clone(),
        devices: count(None).await?,
        online: count(Some(DeviceStatus::Online)).await?,
        offline: count(Some(DeviceStatus::Offline)).await?,
    })
}

fn ago(now: breeze_core::Timestamp, t: Option<breeze_core::Timestamp>) -> String {
    let Some(t) = t else {
        return "never seen".to_owned();
    };
    let s = (now - t).num_seconds().max(0);
    match s {
        0..3600 => format!("{} min", s / 60),
        3600..172_800 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86400),
    }
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let store = scope.store(&state);
    let now = state.clock.now();
    let fleet = fleet(&state, &scope).await?;
    let offline_longest = store
        .devices()
        .offline_longest(TOP)
        .await?
        .into_iter()
        .map(|d| Named {
            id: d.id.to_string(),
            detail: ago(now, d.last_seen_at),
            hostname: d.hostname,
        })
        .collect();
    let pending = store.approvals().pending_approvals().await?.len();
    let alerts_visible = allowed(
        &state,
        &scope,
        tool_operation(&state, "manage_alert_rules", "summary"),
    );
    let (alerts, unresolved) = if alerts_visible {
        let s = store.alerts().alert_summary().await?;
        (
            s.unresolved_by_severity
                .iter()
                .map(|(sev, n)| SeverityCount {
                    severity: sev.as_str(),
                    count: *n,
                })
                .collect(),
            s.open + s.acknowledged,
        )
    } else {
        (Vec::new(), 0)
    };
    // The fleet score as get_security_posture gives it: the average of each device's newest.
    let postures = store.security().latest_postures().await?;
    let posture_score = if postures.is_empty() {
        String::new()
    } else {
        let sum: i64 = postures.iter().map(|p| p.score).sum();
        (sum / postures.len() as i64).to_string()
    };
    let since = now - chrono::Duration::minutes(15);
    let mut raw_tops = Vec::new();
    for (title, metric, m) in [
        ("CPU", "cpu", Metric::Cpu),
        ("Memory", "memory", Metric::Memory),
        ("Disk", "disk", Metric::Disk),
    ] {
        raw_tops.push((
            title,
            metric,
            store.telemetry().top_devices(m, since, TOP).await?,
        ));
    }
    let ids: Vec<DeviceId> = raw_tops
        .iter()
        .flat_map(|(_, _, v)| v.iter().map(|(d, _)| *d))
        .collect();
    let names = store.devices().hostnames(&ids).await?;
    let tops = raw_tops
        .into_iter()
        .map(|(title, metric, v)| Top {
            title,
            metric,
            devices: v
                .into_iter()
                .map(|(d, value)| Named {
                    id: d.to_string(),
                    hostname: names.get(&d).cloned().unwrap_or_default(),
                    detail: format!("{value:.0}%"),
                })
                .collect(),
        })
        .collect();
    let mut l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Home,
        &scope.org.name,
    )
    .await?;
    l.chat_about("context=overview");
    render(&Overview {
        l,
        f: fleet,
        offline_longest,
        pending,
        alerts_visible,
        alerts,
        unresolved,
        posture_devices: postures.len(),
        posture_score,
        tops,
        mcp_url: super::mcp_url(&state),
    })
}

/// `GET /o/{org}/overview/fleet`: the device counts alone (the live part).
async fn fleet_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    render(&FleetFragment {
        f: fleet(&state, &scope).await?,
    })
}
