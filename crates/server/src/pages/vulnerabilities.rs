//! Vulnerability exposure in the console.
//!
//! `GET /o/{org}/vulnerabilities` sums the organization's exposure up by severity and lists
//! the advisories affecting it with their affected device counts (tabs per severity);
//! `GET /o/{org}/vulnerabilities/{id}` shows one advisory or CVE with the devices it affects,
//! their installed and fixed-in versions, and what upgrade fixes them;
//! `GET /o/{org}/devices/{id}/vulnerabilities` lists one device's. The device page shows the
//! most severe few. Reading is what `GET /orgs/{org}/vulnerabilities` declares; the rows are
//! the exposure the store keeps current (nothing is computed per view).

use std::collections::BTreeMap;

use axum::{
    Router,
    extract::{Path, Query, State},
    http::Method,
    response::Response,
    routing::get,
};
use breeze_core::DeviceId;
use breeze_store::{ExposureFinding, SEVERITIES};
use serde::Deserialize;

use super::kit::{self, Cell, Page, Part, Table, route_operation, when};
use super::{Layout, PageError, Section, SignedIn, render};
use crate::{AppState, authz::OrgScope};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/vulnerabilities", get(list))
        .route("/o/{org}/vulnerabilities/{id}", get(advisory))
        .route("/o/{org}/devices/{id}/vulnerabilities", get(device))
}

/// The hint every view carries: how the fix is scheduled.
const FIX_NOTE: &str = "Schedule the fix with patches (manage_patches install) or a deployment \
    (manage_deployments): both install on devices, Tier 3, so an AI client's request waits for \
    a person's approval.";

async fn read_scope(state: &AppState, who: &SignedIn, org: &str) -> Result<OrgScope, PageError> {
    Ok(who
        .scope(
            state,
            org,
            route_operation(&Method::GET, "/orgs/{org}/vulnerabilities"),
        )
        .await?)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListQuery {
    severity: String,
}

fn severity_cell(s: &str) -> Cell {
    Cell {
        text: s.to_owned(),
        badge: format!("sev-{s}"),
        ..Cell::default()
    }
}

fn score(s: Option<f64>) -> String {
    s.map_or_else(|| "—".to_owned(), |s| format!("{s:.1}"))
}

async fn list(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let slug = scope.org.slug.clone();
    let severity = SEVERITIES
        .iter()
        .find(|s| **s == q.severity.trim())
        .copied();
    let v = scope.store(&state).vulnerabilities();
    let summary = v.summary().await?;
    let advisories = v.exposed_advisories(severity, 0, 200).await?;

    let mut by_sev = Table::new(
        "severity-summary",
        "Exposure by severity",
        &["Severity", "Devices", "Advisories", "Findings"],
        "No device is exposed to a loaded advisory.",
    );
    for c in &summary.by_severity {
        by_sev.row(
            format!("sev-{}", c.severity),
            vec![
                severity_cell(&c.severity),
                Cell::text(c.devices.to_string()),
                Cell::text(c.advisories.to_string()),
                Cell::text(c.findings.to_string()),
            ],
        );
    }
    let mut t = Table::new(
        "advisories",
        "Advisories affecting this organization",
        &[
            "Advisory",
            "CVEs",
            "Severity",
            "CVSS",
            "Devices",
            "Fix available on",
            "Summary",
        ],
        "No advisory affects a device here.",
    );
    for a in advisories {
        let id = a.advisory.id.clone();
        t.row(
            format!("adv-{}", row_id(&id)),
            vec![
                Cell::link(
                    id.clone(),
                    format!("/o/{slug}/vulnerabilities/{}", path_id(&id)),
                ),
                Cell::text(a.cves.join(", ")),
                severity_cell(&a.advisory.severity),
                Cell::text(score(a.advisory.cvss_score)),
                Cell::text(a.devices.to_string()),
                Cell::text(format!("{} of {}", a.fixable_devices, a.devices)),
                Cell::text(a.advisory.summary),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Vulnerabilities,
        "Vulnerabilities",
    )
    .await?;
    let mut page = Page::new(l, "Vulnerabilities");
    let mut pairs: Vec<(String, &'static str)> = vec![("/vulnerabilities".to_owned(), "All")];
    for (s, label) in SEVERITIES
        .iter()
        .zip(["Critical", "High", "Medium", "Low", "Unknown"])
    {
        pairs.push((format!("/vulnerabilities?severity={s}"), label));
    }
    let current = match severity {
        Some(s) => format!("/vulnerabilities?severity={s}"),
        None => "/vulnerabilities".to_owned(),
    };
    let refs: Vec<(&str, &'static str)> = pairs.iter().map(|(a, b)| (a.as_str(), *b)).collect();
    page.tabs = kit::tabs(&slug, &refs, &current);
    page.tabs_label = "Severity".into();
    page.intro = format!(
        "Installed packages matched against OSV advisories, kept current as inventories \
         change and advisories are imported. {FIX_NOTE}"
    );
    page.parts.push(
        Part::new("summary", "Summary")
            .fact("Devices exposed", summary.devices_exposed.to_string())
            .fact("Advisories", summary.advisories.to_string())
            .fact(
                "Findings with a fix",
                format!("{} of {}", summary.fixable_findings, summary.findings),
            )
            .table(by_sev),
    );
    page.parts.push(Part::new("list", "Advisories").table(t));
    render(&page)
}

/// An advisory id as a path segment (`RLSA-2023:5453` keeps its colon, which paths allow).
fn path_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._:~".contains(c) {
                c.to_string()
            } else {
                format!("%{:02X}", c as u32 & 0xff)
            }
        })
        .collect()
}

/// An advisory id as an element id.
fn row_id(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// "Fixed by upgrading P to ≥ V" per package, the highest fixed-in version of its findings.
fn fixes(findings: &[ExposureFinding]) -> Vec<String> {
    let mut best: BTreeMap<&str, &str> = BTreeMap::new();
    for f in findings {
        if let Some(v) = f.fixed_in.as_deref() {
            let e = best.entry(&f.package).or_insert(v);
            if breeze_core::pkgversion::VersionOrder::Dpkg.compare(v, e)
                == std::cmp::Ordering::Greater
            {
                *e = v;
            }
        }
    }
    best.into_iter()
        .map(|(p, v)| format!("fixed by upgrading {p} to ≥ {v}"))
        .collect()
}

async fn advisory(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let slug = scope.org.slug.clone();
    let v = scope.store(&state).vulnerabilities();
    let findings = v
        .findings_for(&id, 1000)
        .await
        .map_err(kit::store_err("advisory"))?;
    let detail = v.get_advisory(&id).await.ok();
    let mut t = Table::new(
        "affected-devices",
        "Affected devices",
        &[
            "Device",
            "Advisory",
            "Package",
            "Installed",
            "Fixed in",
            "First seen",
        ],
        "No device here is affected.",
    );
    for f in &findings {
        t.row(
            format!(
                "finding-{}-{}-{}",
                f.device_id,
                row_id(&f.advisory_id),
                row_id(&f.package)
            ),
            vec![
                Cell::link(
                    f.hostname.clone(),
                    format!("/o/{slug}/devices/{}/vulnerabilities", f.device_id),
                ),
                Cell::link(
                    f.advisory_id.clone(),
                    format!("/o/{slug}/vulnerabilities/{}", path_id(&f.advisory_id)),
                ),
                Cell::mono(f.package.clone()),
                Cell::mono(f.installed.clone()),
                Cell::mono(f.fixed_in.clone().unwrap_or_else(|| "not fixed yet".into())),
                Cell::text(when(f.found_at)),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Vulnerabilities,
        &id,
    )
    .await?;
    let mut page = Page::new(l, &id);
    page.back = Some((
        format!("/o/{slug}/vulnerabilities"),
        "Vulnerabilities".into(),
    ));
    page.intro = FIX_NOTE.into();
    let mut about = Part::new("advisory", "Advisory");
    if let Some(d) = &detail {
        about = about
            .fact("Severity", d.advisory.severity.clone())
            .fact("CVSS", score(d.advisory.cvss_score))
            .fact("CVEs", d.cves.join(", "))
            .fact("Summary", d.advisory.summary.clone())
            .fact("Published", kit::when_opt(d.advisory.published))
            .fact("Modified", when(d.advisory.modified));
    } else {
        about = about.note(format!(
            "{id} is a CVE; the advisories naming it are listed below."
        ));
    }
    let fixes = fixes(&findings);
    if !fixes.is_empty() {
        about = about.fact("Fix", fixes.join("; "));
    }
    page.parts.push(about);
    page.parts.push(Part::new("devices", "Devices").table(t));
    render(&page)
}

async fn device(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let slug = scope.org.slug.clone();
    let device_id = DeviceId(kit::uuid(&id, "device")?);
    let store = scope.store(&state);
    let device = store
        .devices()
        .get_device(device_id)
        .await
        .map_err(kit::store_err("device"))?;
    let findings = store
        .vulnerabilities()
        .device_findings(device_id)
        .await
        .map_err(kit::store_err("device"))?;
    let t = findings_table(&slug, &findings);
    let title = format!("{} vulnerabilities", device.hostname);
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Devices, &title).await?;
    let mut page = Page::new(l, &title);
    page.back = Some((
        format!("/o/{slug}/devices/{device_id}"),
        device.hostname.clone(),
    ));
    page.intro = FIX_NOTE.into();
    let mut part = Part::new("device-vulnerabilities", "Advisories");
    for f in fixes(&findings) {
        part = part.fact("Fix", f);
    }
    page.parts.push(part.table(t));
    render(&page)
}

/// A device's findings as a table (the device page shows the first few).
pub(crate) fn findings_table(slug: &str, findings: &[ExposureFinding]) -> Table {
    let mut t = Table::new(
        "device-findings",
        "Vulnerabilities",
        &[
            "Advisory",
            "CVEs",
            "Severity",
            "CVSS",
            "Package",
            "Installed",
            "Fixed in",
        ],
        "No loaded advisory affects this device's packages.",
    );
    for f in findings {
        t.row(
            format!("dv-{}-{}", row_id(&f.advisory_id), row_id(&f.package)),
            vec![
                Cell::link(
                    f.advisory_id.clone(),
                    format!("/o/{slug}/vulnerabilities/{}", path_id(&f.advisory_id)),
                ),
                Cell::text(f.cve_list().join(", ")),
                severity_cell(&f.severity),
                Cell::text(score(f.cvss_score)),
                Cell::mono(f.package.clone()),
                Cell::mono(f.installed.clone()),
                Cell::mono(f.fixed_in.clone().unwrap_or_else(|| "not fixed yet".into())),
            ],
        );
    }
    t
}
