//! `get_vulnerability_exposure` and `manage_advisories`: which devices OSV advisories affect,
//! read from the exposure the store keeps current (recomputed when an inventory changes or
//! advisories are imported, never by scanning the fleet per question), and the advisories
//! themselves.
//!
//! **Why `import` is Tier 3 with `devices.write`.** Advisories the operator loads (CLI,
//! scheduled refresh) are installation-wide reference data and no tool writes them. A record
//! uploaded here is kept for this organization alone (no tenant can plant an advisory in
//! another's view, nor replace the operator's), so it is not partner-wide data: what it
//! changes is what is recorded about this organization's devices (their exposure), the
//! authority of `devices.write`. It is Tier 3 because an uploaded record steers people and AI
//! clients towards installing packages: a credential's upload waits for a person's approval.

use breeze_core::{DeviceId, Permission, advisory::OsvRecord};
use breeze_store::{AdvisoryRow, ExposedAdvisory, ExposureFinding, SEVERITIES, StoreError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parse_uuid;
use crate::reach;
use crate::{Registry, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetVulnerabilityExposure>();
    r.register::<ManageAdvisories>();
}

crate::actions! {
    // Every action reads the stored exposure.
    pub(crate) enum ExposureAction {
        Summary = "summary" => (T1, Read, DevicesRead),
        Advisories = "advisories" => (T1, Read, DevicesRead),
        Devices = "devices" => (T1, Read, DevicesRead),
        Device = "device" => (T1, Read, DevicesRead),
    }
}

crate::actions! {
    // Reading advisories is Tier 1; an upload is this organization's own, Tier 3 (see the
    // module documentation).
    pub(crate) enum AdvisoryAction {
        List = "list" => (T1, Read, DevicesRead),
        Get = "get" => (T1, Read, DevicesRead),
        Import = "import" => (T3, Create, DevicesWrite),
    }
}

/// The next step, named in every answer.
const FIX_HINT: &str = "To schedule the fix: manage_patches (action=install, the packages and \
    devices listed under fixes) or manage_deployments (action=create, a script that upgrades \
    them); both install on devices, Tier 3, and wait for a person's approval.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExposureInput {
    action: ExposureAction,
    /// devices: an advisory id (DSA-5532-1, USN-6429-1, RLSA-2023:5453) or a CVE id.
    #[schemars(length(min = 1, max = 200))]
    id: Option<String>,
    /// device: the device's id.
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    /// advisories: only this severity (critical, high, medium, low, unknown).
    severity: Option<SeverityInput>,
    /// advisories: rows skipped (default 0).
    #[schemars(range(min = 0, max = 100000))]
    offset: Option<u32>,
    /// advisories, devices: rows answered (advisories 1-200, default 50; devices 1-1000,
    /// default 200).
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<u32>,
}

/// A severity band.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SeverityInput {
    Critical,
    High,
    Medium,
    Low,
    Unknown,
}

impl SeverityInput {
    fn as_str(self) -> &'static str {
        match self {
            SeverityInput::Critical => SEVERITIES[0],
            SeverityInput::High => SEVERITIES[1],
            SeverityInput::Medium => SEVERITIES[2],
            SeverityInput::Low => SEVERITIES[3],
            SeverityInput::Unknown => SEVERITIES[4],
        }
    }
}

/// Exposure at one severity.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SeverityView {
    severity: String,
    devices: i64,
    advisories: i64,
    findings: i64,
}

/// An advisory with the devices it affects here.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AdvisoryView {
    id: String,
    cves: Vec<String>,
    summary: String,
    /// critical, high, medium, low or unknown.
    severity: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cvss_score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cvss_vector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    published: Option<String>,
    modified: String,
    /// operator (loaded for every organization) or organization (uploaded by this one).
    loaded_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    devices: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fixable_devices: Option<i64>,
}

impl AdvisoryView {
    fn of(a: AdvisoryRow) -> Self {
        Self {
            cves: a.cve_list(),
            id: a.id,
            summary: a.summary,
            severity: a.severity,
            cvss_score: a.cvss_score,
            cvss_vector: a.cvss_vector,
            published: a.published.map(|t| t.to_rfc3339()),
            modified: a.modified.to_rfc3339(),
            loaded_by: a.loaded_by,
            devices: None,
            fixable_devices: None,
        }
    }

    fn exposed(e: ExposedAdvisory) -> Self {
        Self {
            devices: Some(e.devices),
            fixable_devices: Some(e.fixable_devices),
            ..Self::of(e.advisory)
        }
    }
}

/// One affected package on one device.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FindingView {
    device_id: String,
    hostname: String,
    advisory_id: String,
    cves: Vec<String>,
    summary: String,
    severity: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cvss_score: Option<f64>,
    package: String,
    installed_version: String,
    /// The lowest version that fixes it; absent when the advisory names none yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    fixed_in: Option<String>,
    first_seen: String,
}

impl FindingView {
    fn of(f: ExposureFinding) -> Self {
        Self {
            cves: f.cve_list(),
            device_id: f.device_id.to_string(),
            hostname: f.hostname,
            advisory_id: f.advisory_id,
            summary: f.summary,
            severity: f.severity,
            cvss_score: f.cvss_score,
            package: f.package,
            installed_version: f.installed,
            fixed_in: f.fixed_in,
            first_seen: f.found_at.to_rfc3339(),
        }
    }
}

/// "Fixed by upgrading `package` to ≥ `version`" on the devices listed.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FixView {
    package: String,
    /// The version to upgrade to at least (the highest fixed-in version among the findings,
    /// so one upgrade fixes every advisory listed for the package).
    upgrade_to_at_least: String,
    device_ids: Vec<String>,
    advisories: Vec<String>,
    /// The sentence: fixed by upgrading P to ≥ V.
    text: String,
}

/// Findings without a fixed version yet.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UnfixedView {
    package: String,
    advisories: Vec<String>,
    devices: usize,
}

fn fixes(findings: &[ExposureFinding]) -> (Vec<FixView>, Vec<UnfixedView>) {
    use std::collections::BTreeMap;
    let mut fixed: BTreeMap<&str, (Vec<&ExposureFinding>, Vec<String>)> = BTreeMap::new();
    let mut unfixed: BTreeMap<&str, (Vec<String>, Vec<DeviceId>)> = BTreeMap::new();
    for f in findings {
        match &f.fixed_in {
            Some(_) => {
                let e = fixed.entry(&f.package).or_default();
                e.0.push(f);
                if !e.1.contains(&f.advisory_id) {
                    e.1.push(f.advisory_id.clone());
                }
            }
            None => {
                let e = unfixed.entry(&f.package).or_default();
                if !e.0.contains(&f.advisory_id) {
                    e.0.push(f.advisory_id.clone());
                }
                if !e.1.contains(&f.device_id) {
                    e.1.push(f.device_id);
                }
            }
        }
    }
    let fixes = fixed
        .into_iter()
        .filter_map(|(package, (rows, advisories))| {
            // One upgrade to the highest fixed-in version fixes every advisory listed.
            let mut best: Option<&str> = None;
            for r in &rows {
                let v = r.fixed_in.as_deref()?;
                best = Some(match best {
                    Some(b) if greater_version(b, v) => b,
                    _ => v,
                });
            }
            let version = best?.to_owned();
            let mut device_ids: Vec<String> =
                rows.iter().map(|r| r.device_id.to_string()).collect();
            device_ids.sort();
            device_ids.dedup();
            Some(FixView {
                text: format!("fixed by upgrading {package} to ≥ {version}"),
                package: package.to_owned(),
                upgrade_to_at_least: version,
                device_ids,
                advisories,
            })
        })
        .collect();
    let unfixed = unfixed
        .into_iter()
        .map(|(package, (advisories, devices))| UnfixedView {
            package: package.to_owned(),
            advisories,
            devices: devices.len(),
        })
        .collect();
    (fixes, unfixed)
}

/// Whether `a` is above `b`: versions of one package across releases of one family compare
/// alike under dpkg, rpm and apk for the common `digits.digits-revision` shapes, so dpkg's
/// ordering (the most permissive) decides.
fn greater_version(a: &str, b: &str) -> bool {
    breeze_core::pkgversion::VersionOrder::Dpkg.compare(a, b) == std::cmp::Ordering::Greater
}

#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExposureOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    by_severity: Option<Vec<SeverityView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    devices_exposed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    findings_total: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fixable_findings: Option<i64>,
    /// summary: the most severe advisories; advisories: the page.
    #[serde(skip_serializing_if = "Option::is_none")]
    advisories: Option<Vec<AdvisoryView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    /// devices, device: each affected package with installed and fixed-in versions.
    #[serde(skip_serializing_if = "Option::is_none")]
    findings: Option<Vec<FindingView>>,
    /// devices, device: fixed by upgrading P to ≥ V, per package.
    #[serde(skip_serializing_if = "Option::is_none")]
    fixes: Option<Vec<FixView>>,
    /// devices, device: packages no fixed version is named for yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    unfixed: Option<Vec<UnfixedView>>,
    /// Where to schedule the fix.
    hint: String,
}

fn store_error(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("device") => ToolError::not_found("Device not found or access denied"),
        StoreError::NotFound("advisory") => {
            ToolError::not_found("Advisory not found (no advisory or CVE with this id is loaded)")
        }
        other => other.into(),
    }
}

fn required<'a>(value: &'a Option<String>, field: &str) -> Result<&'a str, ToolError> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ToolError::invalid(format!("{field} is required for this action")))
}

pub(crate) struct GetVulnerabilityExposure;

impl Tool for GetVulnerabilityExposure {
    const NAME: &'static str = "get_vulnerability_exposure";
    const TITLE: &'static str = "Vulnerability exposure";
    const DESCRIPTION: &'static str = "Which devices OSV advisories (Debian, Ubuntu, Alpine, Rocky, Alma, RHEL) affect, from installed packages, kept current as inventories change. action=summary: devices and advisories by severity and the most severe advisories; advisories: advisories affecting the organization with affected device counts (filter severity); devices: the devices one advisory or CVE (id) affects, with installed and fixed-in versions and \"fixed by upgrading P to >= V\"; device: one device's advisories with severity and CVSS. Every answer names manage_patches / manage_deployments to schedule the fix.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = ExposureAction;
    type Input = ExposureInput;
    type Output = ExposureOutput;
    type Reach = reach::Vulnerabilities;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let v = cx.vulnerabilities();
        let hint = FIX_HINT.to_owned();
        match input.action {
            ExposureAction::Summary => {
                let s = v.summary().await.map_err(store_error)?;
                let top = v
                    .exposed_advisories(None, 0, 10)
                    .await
                    .map_err(store_error)?;
                Ok(ExposureOutput {
                    by_severity: Some(
                        s.by_severity
                            .into_iter()
                            .map(|c| SeverityView {
                                severity: c.severity,
                                devices: c.devices,
                                advisories: c.advisories,
                                findings: c.findings,
                            })
                            .collect(),
                    ),
                    devices_exposed: Some(s.devices_exposed),
                    findings_total: Some(s.findings),
                    fixable_findings: Some(s.fixable_findings),
                    advisories: Some(top.into_iter().map(AdvisoryView::exposed).collect()),
                    hint,
                    ..ExposureOutput::default()
                })
            }
            ExposureAction::Advisories => {
                let rows = v
                    .exposed_advisories(
                        input.severity.map(SeverityInput::as_str),
                        input.offset.unwrap_or(0),
                        input.limit.unwrap_or(50).min(200),
                    )
                    .await
                    .map_err(store_error)?;
                Ok(ExposureOutput {
                    advisories: Some(rows.into_iter().map(AdvisoryView::exposed).collect()),
                    hint,
                    ..ExposureOutput::default()
                })
            }
            ExposureAction::Devices => {
                let id = required(&input.id, "id")?;
                let rows = v
                    .findings_for(id, input.limit.unwrap_or(200))
                    .await
                    .map_err(store_error)?;
                let (fixes, unfixed) = fixes(&rows);
                Ok(ExposureOutput {
                    findings: Some(rows.into_iter().map(FindingView::of).collect()),
                    fixes: Some(fixes),
                    unfixed: Some(unfixed),
                    hint,
                    ..ExposureOutput::default()
                })
            }
            ExposureAction::Device => {
                let raw = required(&input.device_id, "deviceId")?;
                let device = DeviceId(parse_uuid("deviceId", raw)?);
                let rows = v.device_findings(device).await.map_err(store_error)?;
                let (fixes, unfixed) = fixes(&rows);
                Ok(ExposureOutput {
                    device_id: Some(device.to_string()),
                    findings: Some(rows.into_iter().map(FindingView::of).collect()),
                    fixes: Some(fixes),
                    unfixed: Some(unfixed),
                    hint,
                    ..ExposureOutput::default()
                })
            }
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AdvisoryInput {
    action: AdvisoryAction,
    /// get: the advisory's id.
    #[schemars(length(min = 1, max = 200))]
    id: Option<String>,
    /// list: id, CVE or summary containing this text (case-insensitive).
    #[schemars(length(max = 200))]
    query: Option<String>,
    /// list: only this severity.
    severity: Option<SeverityInput>,
    /// list: the last id of the previous page.
    #[schemars(length(max = 200))]
    after: Option<String>,
    /// list: rows answered (1-200, default 50).
    #[schemars(range(min = 1, max = 200))]
    limit: Option<u32>,
    /// import: one OSV record (the osv.dev schema: id, modified, affected[] with
    /// package.ecosystem/name and ECOSYSTEM ranges), kept for this organization only.
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    record: Option<Value>,
}

/// What an import did.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImportView {
    /// added, replaced (a newer modified) or unchanged (the same or an older one).
    outcome: String,
    devices_recomputed: u64,
    findings: u64,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AdvisoryOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    advisories: Option<Vec<AdvisoryView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advisory: Option<AdvisoryView>,
    /// get: the whole OSV record.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    record: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    import: Option<ImportView>,
}

pub(crate) struct ManageAdvisories;

impl Tool for ManageAdvisories {
    const NAME: &'static str = "manage_advisories";
    const TITLE: &'static str = "Security advisories";
    const DESCRIPTION: &'static str = "The OSV security advisories exposure is computed from. action=list (query, severity, paged by after), get (id: the whole record). import (Tier 3, a person approves): one OSV JSON record kept for this organization only, idempotent on id and modified; the organization's devices are recomputed against it. The operator loads the distributions' feeds for everyone with `breeze advisories import`.";
    const TIER: Tier = Tier::T3;
    const PERMISSION: Permission = Permission::DevicesWrite;
    type Actions = AdvisoryAction;
    type Input = AdvisoryInput;
    type Output = AdvisoryOutput;
    type Reach = reach::Vulnerabilities;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let v = cx.vulnerabilities();
        match input.action {
            AdvisoryAction::List => {
                let limit = input.limit.unwrap_or(50).clamp(1, 200);
                let rows = v
                    .list_advisories(
                        input.query.as_deref(),
                        input.severity.map(SeverityInput::as_str),
                        input.after.as_deref(),
                        limit,
                    )
                    .await
                    .map_err(store_error)?;
                let next_after = (rows.len() == limit as usize)
                    .then(|| rows.last().map(|r| r.id.clone()))
                    .flatten();
                Ok(AdvisoryOutput {
                    advisories: Some(rows.into_iter().map(AdvisoryView::of).collect()),
                    next_after,
                    ..AdvisoryOutput::default()
                })
            }
            AdvisoryAction::Get => {
                let id = required(&input.id, "id")?;
                let d = v.get_advisory(id).await.map_err(store_error)?;
                Ok(AdvisoryOutput {
                    record: Some(serde_json::to_value(&d.record).unwrap_or_default()),
                    advisory: Some(AdvisoryView::of(d.advisory)),
                    ..AdvisoryOutput::default()
                })
            }
            AdvisoryAction::Import => {
                let raw = input
                    .record
                    .ok_or_else(|| ToolError::invalid("record is required for this action"))?;
                let record: OsvRecord = serde_json::from_value(raw)
                    .map_err(|e| ToolError::invalid(format!("record: not an OSV record: {e}")))?;
                if record.id.trim().is_empty() {
                    return Err(ToolError::invalid("record.id: must not be empty"));
                }
                let event =
                    breeze_core::AuditEvent::new(cx.actor.clone(), "advisory.import", "advisory")
                        .request(cx.request_id.clone());
                let out = v
                    .import_advisory(record, event)
                    .await
                    .map_err(|e| match e {
                        StoreError::Invalid(m) => ToolError::invalid(format!("record: {m}")),
                        other => store_error(other),
                    })?;
                let outcome = if out.added > 0 {
                    "added"
                } else if out.replaced > 0 {
                    "replaced"
                } else {
                    "unchanged"
                };
                Ok(AdvisoryOutput {
                    import: Some(ImportView {
                        outcome: outcome.to_owned(),
                        devices_recomputed: out.devices_recomputed,
                        findings: out.findings,
                    }),
                    ..AdvisoryOutput::default()
                })
            }
        }
    }
}
