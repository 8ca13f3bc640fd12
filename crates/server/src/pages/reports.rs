//! Reports in the console: `GET /o/{org}/reports` lists report definitions and the latest
//! runs with their downloads (the REST route `GET /api/v1/orgs/{org}/reports/{run}/download`,
//! the session cookie being a REST credential); `POST …/reports/run` runs a definition now, or
//! a one-off report of a kind and format, as `generate_report generate` through the pipeline.
//! The page is judged by `generate_report list`, the button by `generate`.

use axum::{
    Router,
    extract::{Path, Query, State},
    response::Response,
    routing::{get, post},
};
use breeze_core::{ReportFormat, ReportKind, ReportStatus};
use serde::Deserialize;
use serde_json::json;

use super::device_actions::Outcome;
use super::kit::{Cell, Field, Form, Opt, Page, Part, RowForm, Table, run_and_return, when};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{AppState, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/reports", get(reports))
        .route("/o/{org}/reports/run", post(run))
}

async fn reports(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "generate_report", "list"),
        )
        .await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let can_run = allowed(
        &state,
        &scope,
        tool_operation(&state, "generate_report", "generate"),
    );
    let mut headers = vec!["Report", "Kind", "Format", "Updated"];
    if can_run {
        headers.push("Actions");
    }
    let mut dt = Table::new(
        "definitions",
        "Report definitions",
        &headers,
        "No saved report. Run one below, or save one with generate_report create.",
    )
    .csrf(&who.csrf);
    for d in store.reports().list_reports().await? {
        let mut cells = vec![
            Cell::text(d.name.clone()),
            Cell::text(d.kind.as_str().replace('_', " ")),
            Cell::text(d.format.as_str()),
            Cell::text(when(d.updated_at)),
        ];
        if can_run {
            cells.push(Cell::forms(vec![
                RowForm::new(
                    format!("/o/{slug}/reports/run"),
                    "Run now",
                    format!("Run {} now", d.name),
                )
                .field("report", d.id.to_string()),
            ]));
        }
        dt.row(format!("definition-{}", d.id), cells);
    }
    let mut rt = Table::new(
        "runs",
        "Latest runs",
        &["Report", "Kind", "Status", "Rows", "Started", "Download"],
        "No report has run yet.",
    );
    for r in store.reports().report_runs(None, 50).await? {
        let download = if r.status == ReportStatus::Completed {
            Cell::link(
                format!(
                    "{} ({} KB)",
                    r.format.as_str().to_uppercase(),
                    (r.byte_count + 1023) / 1024
                ),
                format!("/api/v1/orgs/{slug}/reports/{}/download", r.id),
            )
        } else {
            Cell::text(r.error.clone().unwrap_or_else(|| "—".into()))
        };
        rt.row(
            format!("run-{}", r.id),
            vec![
                Cell::text(r.name.clone()),
                Cell::text(r.kind.as_str().replace('_', " ")),
                Cell::status(r.status.as_str()),
                Cell::text(if r.truncated {
                    format!("{} (truncated)", r.row_count)
                } else {
                    r.row_count.to_string()
                }),
                Cell::text(when(r.started_at)),
                download,
            ],
        );
    }
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Reports, "Reports").await?;
    let mut p = Page::new(l, "Reports").outcome(o);
    p.intro = "Reports of the device inventory, alert history, audit activity, patch status or \
               compliance status, as CSV, PDF or JSON."
        .into();
    let mut defs = Part::new("definition-list", "Definitions").table(dt);
    if can_run {
        defs = defs.form(
            Form::new(
                "new-run",
                "Run a report now",
                format!("/o/{slug}/reports/run"),
                "Run report",
            )
            .field(
                Field::new("select", "kind", "Kind").options(
                    ReportKind::ALL
                        .iter()
                        .map(|k| Opt::new(k.as_str(), k.as_str().replace('_', " "), false))
                        .collect(),
                ),
            )
            .field(
                Field::new("select", "format", "Format").options(
                    ReportFormat::ALL
                        .iter()
                        .map(|f| {
                            Opt::new(
                                f.as_str(),
                                f.as_str().to_uppercase(),
                                *f == ReportFormat::Csv,
                            )
                        })
                        .collect(),
                ),
            ),
        );
    }
    p.parts.push(defs);
    p.parts
        .push(Part::new("run-list", "Runs and downloads").table(rt));
    render(&p)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunForm {
    report: String,
    kind: String,
    format: String,
}

async fn run(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<RunForm>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(
            &state,
            &org,
            tool_operation(&state, "generate_report", "generate"),
        )
        .await?;
    let to = format!("/o/{}/reports", scope.org.slug);
    let mut args = json!({ "action": "generate" });
    if !f.form.report.is_empty() {
        let id = super::kit::uuid(&f.form.report, "Report")?;
        scope
            .store(&state)
            .reports()
            .get_report(id)
            .await
            .map_err(super::kit::store_err("Report"))?;
        args["reportId"] = json!(id.to_string());
    } else {
        let kind: ReportKind = f
            .form
            .kind
            .parse()
            .map_err(|e: breeze_core::ParseError| PageError::bad_request(e.to_string()))?;
        let format: ReportFormat = f
            .form
            .format
            .parse()
            .map_err(|e: breeze_core::ParseError| PageError::bad_request(e.to_string()))?;
        args["reportType"] = json!(kind.as_str());
        args["format"] = json!(format.as_str());
    }
    Ok(run_and_return(&state, &scope, "generate_report", args, request_id, &to).await)
}
