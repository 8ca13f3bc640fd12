//! `generate_report`: report definitions (list, get, create, update, delete), generation now,
//! the history of runs, and a run's data (summary, a short preview and its download path).
//!
//! Kinds: device inventory, alert history, audit activity, patch status and compliance status;
//! formats JSON, CSV and PDF. The output is never put
//! in the reply: the store streams it into stored chunks and the reply names
//! `GET /api/v1/orgs/{org}/reports/{runId}/download`, which serves it chunk by chunk.
//!
//! Reading (list, get, history, data) and generating need `audit.read`, the permission that
//! covers the widest content a report may hold (audit activity; every built-in role holding it
//! also reads devices and alerts). Generating is Tier 2: it stores an artifact. Changing
//! definitions is Tier 2 with `devices.write`. Another organization's definition, run or site
//! is "not found", like a missing one.

use breeze_core::{
    AuditEvent, DeviceStatus, OsFamily, Permission, ReportFilters, ReportFormat, ReportKind,
};
use breeze_store::{NewReport, ReportDefinition, ReportRequest, ReportRun, ReportUpdate};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::args::{SeverityArg, uuid_or_missing};
use crate::reach::{self, Reach};
use crate::{RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GenerateReport>();
}

const REPORT_NOT_FOUND: &str = "Report not found or access denied";
const RUN_NOT_FOUND: &str = "Report run not found or access denied";

/// The most characters of output `data` shows.
const PREVIEW_CHARS: usize = 1_500;
/// Runs `history` and `get` list by default.
const DEFAULT_HISTORY: u32 = 20;

crate::actions! {
    // What `generate_report` does: reads are Tier 1; generating stores an artifact and changing
    // definitions changes configuration, both Tier 2.
    pub(crate) enum ReportAction {
        List = "list" => (T1, Read, AuditRead),
        Get = "get" => (T1, Read, AuditRead),
        History = "history" => (T1, Read, AuditRead),
        Data = "data" => (T1, Read, AuditRead),
        Generate = "generate" => (T2, Create, AuditRead),
        Create = "create" => (T2, Create, DevicesWrite),
        Update = "update" => (T2, Update, DevicesWrite),
        Delete = "delete" => (T2, Delete, DevicesWrite),
    }
}

/// What a report holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReportTypeArg {
    DeviceInventory,
    AlertHistory,
    AuditActivity,
    // Plain comments, not docs: a documented variant would turn the listed enum into a oneOf.
    // Each device's last patch scan: available and security updates, pending reboot.
    PatchStatus,
    // Each device's status against each compliance policy covering it.
    ComplianceStatus,
}

impl ReportTypeArg {
    fn kind(self) -> Result<ReportKind, ToolError> {
        Ok(match self {
            ReportTypeArg::DeviceInventory => ReportKind::DeviceInventory,
            ReportTypeArg::AlertHistory => ReportKind::AlertHistory,
            ReportTypeArg::AuditActivity => ReportKind::AuditActivity,
            ReportTypeArg::PatchStatus => ReportKind::PatchStatus,
            ReportTypeArg::ComplianceStatus => ReportKind::ComplianceStatus,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FormatArg {
    Json,
    Csv,
    Pdf,
}

impl From<FormatArg> for ReportFormat {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Json => ReportFormat::Json,
            FormatArg::Csv => ReportFormat::Csv,
            FormatArg::Pdf => ReportFormat::Pdf,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DeviceStatusArg {
    Online,
    Offline,
    Maintenance,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OsArg {
    Windows,
    Macos,
    Linux,
}

/// What the report keeps: status, osType, siteId for device_inventory, patch_status and
/// compliance_status; severity and sinceHours (default 168) for alert_history; sinceHours for
/// audit_activity.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct FiltersArg {
    status: Option<DeviceStatusArg>,
    os_type: Option<OsArg>,
    #[schemars(length(min = 36, max = 36))]
    site_id: Option<String>,
    severity: Option<SeverityArg>,
    #[schemars(range(min = 1, max = 8760))]
    since_hours: Option<u32>,
}

impl FiltersArg {
    fn resolve(&self) -> Result<ReportFilters, ToolError> {
        Ok(ReportFilters {
            status: self.status.map(|s| match s {
                DeviceStatusArg::Online => DeviceStatus::Online,
                DeviceStatusArg::Offline => DeviceStatus::Offline,
                DeviceStatusArg::Maintenance => DeviceStatus::Maintenance,
            }),
            os_type: self.os_type.map(|o| match o {
                OsArg::Windows => OsFamily::Windows,
                OsArg::Macos => OsFamily::Macos,
                OsArg::Linux => OsFamily::Linux,
            }),
            site_id: self
                .site_id
                .as_deref()
                .map(|s| {
                    Uuid::parse_str(s)
                        .map(breeze_core::SiteId)
                        .map_err(|_| ToolError::not_found("Site not found or access denied"))
                })
                .transpose()?,
            severity: self.severity.map(Into::into),
            since_hours: self.since_hours,
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ReportsInput {
    action: ReportAction,
    /// A definition: get, update, delete; generate (its settings, overridden by any given);
    /// history (optional).
    #[schemars(length(min = 36, max = 36))]
    report_id: Option<String>,
    /// data: a run from generate or history.
    #[schemars(length(min = 36, max = 36))]
    run_id: Option<String>,
    /// create (required), update; generate without reportId (optional).
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(max = 2000))]
    description: Option<String>,
    /// create (required); generate without reportId (required).
    report_type: Option<ReportTypeArg>,
    /// Default json.
    format: Option<FormatArg>,
    filters: Option<FiltersArg>,
    /// history: how many runs (1-100, default 20).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

impl ReportsInput {
    fn filters(&self) -> Result<Option<ReportFilters>, ToolError> {
        self.filters.as_ref().map(FiltersArg::resolve).transpose()
    }

    fn report_id(&self) -> Result<Uuid, ToolError> {
        uuid_or_missing(self.report_id.as_deref(), "reportId", REPORT_NOT_FOUND)
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct DefinitionView {
    id: String,
    name: String,
    description: Option<String>,
    report_type: String,
    format: String,
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    filters: serde_json::Value,
    created_by: String,
    updated_at: String,
}

impl From<ReportDefinition> for DefinitionView {
    fn from(d: ReportDefinition) -> Self {
        Self {
            id: d.id.to_string(),
            filters: serde_json::to_value(&d.filters).unwrap_or_default(),
            name: d.name,
            description: d.description,
            report_type: d.kind.to_string(),
            format: d.format.to_string(),
            created_by: d.created_by,
            updated_at: d.updated_at.to_rfc3339(),
        }
    }
}

/// One generation: its summary and where to download it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RunView {
    id: String,
    /// The definition it was generated from (none when ad hoc).
    report_id: Option<String>,
    name: String,
    report_type: String,
    format: String,
    /// running, completed or failed.
    status: String,
    rows: i64,
    bytes: i64,
    /// The run stopped at its cap (1,000,000 rows or 512 MiB); its last row says so.
    truncated: bool,
    error: Option<String>,
    requested_by: String,
    started_at: String,
    finished_at: Option<String>,
    duration_ms: Option<i64>,
    /// GET with the same credentials (X-API-Key or session) while completed.
    download_path: Option<String>,
}

impl RunView {
    fn new(r: ReportRun) -> Self {
        let download_path = (r.status == breeze_core::ReportStatus::Completed)
            .then(|| format!("/api/v1/orgs/{}/reports/{}/download", r.org_id, r.id));
        Self {
            id: r.id.to_string(),
            report_id: r.definition_id.map(|d| d.to_string()),
            report_type: r.kind.to_string(),
            format: r.format.to_string(),
            status: r.status.to_string(),
            rows: r.row_count,
            bytes: r.byte_count,
            truncated: r.truncated,
            duration_ms: r.finished_at.map(|f| (f - r.started_at).num_milliseconds()),
            finished_at: r.finished_at.map(|f| f.to_rfc3339()),
            started_at: r.started_at.to_rfc3339(),
            name: r.name,
            error: r.error,
            requested_by: r.requested_by,
            download_path,
        }
    }
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReportsOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    reports: Option<Vec<DefinitionView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<DefinitionView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runs: Option<Vec<RunView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<RunView>,
    /// data: the start of the output (at most 1,500 characters); download for the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    preview: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn report_missing(e: breeze_store::StoreError) -> ToolError {
    match e {
        breeze_store::StoreError::NotFound("report") => ToolError::not_found(REPORT_NOT_FOUND),
        breeze_store::StoreError::NotFound("report run") => ToolError::not_found(RUN_NOT_FOUND),
        breeze_store::StoreError::NotFound("site") => {
            ToolError::not_found("Site not found or access denied")
        }
        other => other.into(),
    }
}

fn audit<R: Reach>(cx: &ToolCx<'_, R>, action: &str) -> AuditEvent {
    AuditEvent::new(cx.actor.clone(), action, "report").request(cx.request_id.clone())
}

/// The start of a text, cut at a character boundary.
fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

pub(crate) struct GenerateReport;

impl Tool for GenerateReport {
    const NAME: &'static str = "generate_report";
    const TITLE: &'static str = "Generate reports";
    const DESCRIPTION: &'static str = "Reports of device inventory, alert history, audit activity, patch status or compliance status as JSON, CSV or PDF. action=list|get (definitions), history (runs), data (a run's summary, preview and downloadPath) read; generate (reportId and/or reportType, format, filters: Tier 2), create|update|delete definitions (Tier 2). Output is downloaded, never returned whole.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::AuditRead;
    const RATE_LIMIT: Option<RateLimit> = per(10, 300);
    type Actions = ReportAction;
    type Input = ReportsInput;
    type Output = Rendered<ReportsOutput>;
    type Reach = reach::Reports;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            ReportAction::List => {
                let reports: Vec<DefinitionView> = cx
                    .reports()
                    .list_reports()
                    .await?
                    .into_iter()
                    .map(Into::into)
                    .collect();
                Rendered::of(&ReportsOutput {
                    showing: Some(reports.len()),
                    reports: Some(reports),
                    ..Default::default()
                })
            }
            ReportAction::Get => {
                let id = input.report_id()?;
                let report = cx.reports().get_report(id).await.map_err(report_missing)?;
                let runs = cx.reports().report_runs(Some(id), DEFAULT_HISTORY).await?;
                Rendered::of(&ReportsOutput {
                    report: Some(report.into()),
                    runs: Some(runs.into_iter().map(RunView::new).collect()),
                    ..Default::default()
                })
            }
            ReportAction::History => {
                let definition = match input.report_id {
                    Some(_) => Some(input.report_id()?),
                    None => None,
                };
                let runs: Vec<RunView> = cx
                    .reports()
                    .report_runs(definition, input.limit.unwrap_or(DEFAULT_HISTORY))
                    .await?
                    .into_iter()
                    .map(RunView::new)
                    .collect();
                Rendered::of(&ReportsOutput {
                    showing: Some(runs.len()),
                    runs: Some(runs),
                    ..Default::default()
                })
            }
            ReportAction::Data => {
                let id = uuid_or_missing(input.run_id.as_deref(), "runId", RUN_NOT_FOUND)?;
                let run = cx
                    .reports()
                    .get_report_run(id)
                    .await
                    .map_err(report_missing)?;
                // A PDF has no text to preview: its download is the way to read it.
                let first = match run.format {
                    ReportFormat::Pdf => None,
                    _ => cx.reports().report_chunk(id, 0).await?,
                };
                Rendered::of(&ReportsOutput {
                    preview: first.as_deref().map(preview),
                    run: Some(RunView::new(run)),
                    ..Default::default()
                })
            }
            ReportAction::Generate => {
                let request = match (&input.report_id, input.report_type) {
                    // A definition's settings; what the call gives besides overrides them.
                    (Some(_), t) => {
                        let def = cx
                            .reports()
                            .get_report(input.report_id()?)
                            .await
                            .map_err(report_missing)?;
                        let mut request = ReportRequest::from(&def);
                        if let Some(t) = t {
                            request.kind = t.kind()?;
                        }
                        if let Some(f) = input.format {
                            request.format = f.into();
                        }
                        if let Some(filters) = input.filters()? {
                            request.filters = filters;
                        }
                        if let Some(name) = &input.name {
                            request.name.clone_from(name);
                        }
                        request
                    }
                    (None, Some(t)) => {
                        let kind = t.kind()?;
                        ReportRequest {
                            definition_id: None,
                            name: input.name.clone().unwrap_or_else(|| kind.to_string()),
                            kind,
                            format: input.format.map_or(ReportFormat::Json, Into::into),
                            filters: input.filters()?.unwrap_or_default(),
                        }
                    }
                    (None, None) => {
                        return Err(ToolError::invalid("generate needs reportId or reportType"));
                    }
                };
                let run = cx
                    .reports()
                    .generate_report(
                        request,
                        breeze_store::Requester {
                            by: &cx.actor.to_string(),
                            person: Some(cx.user),
                        },
                        audit(cx, "report.generate"),
                    )
                    .await
                    .map_err(report_missing)?;
                Rendered::of(&ReportsOutput {
                    message: Some(format!(
                        "generated {} rows ({} bytes); download it from downloadPath",
                        run.row_count, run.byte_count
                    )),
                    run: Some(RunView::new(run)),
                    ..Default::default()
                })
            }
            ReportAction::Create => {
                let name = input
                    .name
                    .clone()
                    .ok_or_else(|| ToolError::invalid("name is required for create"))?;
                let kind = input
                    .report_type
                    .ok_or_else(|| ToolError::invalid("reportType is required for create"))?
                    .kind()?;
                let new = NewReport {
                    name,
                    description: input.description.clone(),
                    kind,
                    format: input.format.map_or(ReportFormat::Json, Into::into),
                    filters: input.filters()?.unwrap_or_default(),
                    created_by: cx.actor.to_string(),
                };
                let report = cx
                    .reports()
                    .create_report(new, audit(cx, "report.create"))
                    .await
                    .map_err(report_missing)?;
                Rendered::of(&ReportsOutput {
                    message: Some(format!("created report {}", report.name)),
                    report: Some(report.into()),
                    ..Default::default()
                })
            }
            ReportAction::Update => {
                let id = input.report_id()?;
                let update = ReportUpdate {
                    name: input.name.clone(),
                    description: input.description.clone(),
                    kind: input.report_type.map(ReportTypeArg::kind).transpose()?,
                    format: input.format.map(Into::into),
                    filters: input.filters()?,
                };
                let report = cx
                    .reports()
                    .update_report(id, update, audit(cx, "report.update"))
                    .await
                    .map_err(report_missing)?;
                Rendered::of(&ReportsOutput {
                    message: Some("report updated".into()),
                    report: Some(report.into()),
                    ..Default::default()
                })
            }
            ReportAction::Delete => {
                let id = input.report_id()?;
                let report = cx
                    .reports()
                    .delete_report(id, audit(cx, "report.delete"))
                    .await
                    .map_err(report_missing)?;
                Rendered::of(&ReportsOutput {
                    message: Some(format!(
                        "report {} deleted; its runs stay in the history",
                        report.name
                    )),
                    ..Default::default()
                })
            }
        }
    }
}
