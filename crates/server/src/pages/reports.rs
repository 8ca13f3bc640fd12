//! Reports in the console: `GET /o/{org}/reports` lists report definitions and the latest
//! runs with their downloads (the REST route `GET /api/v1/orgs/{org}/reports/{run}/download`,
//! the session cookie being a REST credential); `POST …/reports/run` runs a definition now, or
//! a one-off report of a kind and format, as `generate_report generate` through the pipeline.
//! The page is judged by `generate_report list`, the button by `generate`.
//!
//! Schedules: `POST …/reports/schedules` puts a definition on a schedule (daily, weekly or
//! monthly at a time of day, in UTC or one of the organization's sites' time zones, writing a
//! format), and `POST …/reports/schedules/{id}/delete` takes it off; both are held to the
//! operation of `generate_report create` (managing definitions) and audited
//! (`report_schedule.create` / `.delete`). The schedule records the person as its owner: the
//! server's worker ([`crate::report_schedules`]) makes each occurrence's `generate_report`
//! generate call as them, through the pipeline, and its run is listed here with its download.

use axum::{
    Router,
    extract::{Path, Query, State},
    response::Response,
    routing::{get, post},
};
use breeze_core::{ReportFormat, ReportKind, ReportStatus};
use breeze_store::{NewReportSchedule, ReportCadence};
use serde::Deserialize;
use serde_json::json;

use super::device_actions::Outcome;
use super::kit::{
    Cell, Field, Form, Opt, Page, Part, RowForm, Table, back_to, run_and_return, when, when_opt,
};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{AppState, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/reports", get(reports))
        .route("/o/{org}/reports/run", post(run))
        .route("/o/{org}/reports/schedules", post(create_schedule))
        .route(
            "/o/{org}/reports/schedules/{id}/delete",
            post(delete_schedule),
        )
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
    let can_schedule = allowed(&state, &scope, schedule_operation(&state));
    let definitions = store.reports().list_reports().await?;
    let mut dt = Table::new(
        "definitions",
        "Report definitions",
        &headers,
        "No saved report. Run one below, or save one with generate_report create.",
    )
    .csrf(&who.csrf);
    for d in &definitions {
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
        .push(schedules_part(&state, &scope, &who.csrf, &definitions, can_schedule).await?);
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

/// What creating or deleting a schedule is held to: managing report definitions.
fn schedule_operation(state: &AppState) -> breeze_core::Operation {
    tool_operation(state, "generate_report", "create")
}

/// The time zones a schedule is offered in: UTC and the organization's sites' zones.
async fn time_zones(
    state: &AppState,
    scope: &crate::authz::OrgScope,
) -> Result<Vec<String>, PageError> {
    let mut zones: Vec<String> = scope
        .store(state)
        .tenancy()
        .list_sites()
        .await?
        .into_iter()
        .map(|s| s.timezone)
        .filter(|z| z != "UTC")
        .collect();
    zones.sort();
    zones.dedup();
    zones.insert(0, "UTC".to_owned());
    Ok(zones)
}

/// The schedules part: each schedule, when it runs next and what its last occurrence came
/// to (with the run's download), and the form that adds one.
async fn schedules_part(
    state: &AppState,
    scope: &crate::authz::OrgScope,
    csrf: &str,
    definitions: &[breeze_store::ReportDefinition],
    can_schedule: bool,
) -> Result<Part, PageError> {
    let slug = scope.org.slug.clone();
    let store = scope.store(state);
    let mut headers = vec!["Report", "Schedule", "Format", "Next run", "Last run"];
    if can_schedule {
        headers.push("Actions");
    }
    let mut st = Table::new(
        "schedules",
        "Report schedules",
        &headers,
        "No report runs on a schedule.",
    )
    .csrf(csrf);
    for s in store.reports().list_report_schedules().await? {
        let name = definitions
            .iter()
            .find(|d| d.id == s.report_id)
            .map_or_else(|| "a deleted report".to_owned(), |d| d.name.clone());
        let last = match (&s.last_status, s.last_run_id) {
            (None, _) => Cell::text("not yet"),
            (Some(status), Some(run)) => Cell::link(
                format!("{} {}", status.replace('_', " "), when_opt(s.last_run_at)),
                format!("/api/v1/orgs/{slug}/reports/{run}/download"),
            ),
            (Some(status), None) => Cell::text(format!(
                "{} {}",
                status.replace('_', " "),
                when_opt(s.last_run_at)
            ))
            .with_detail(s.last_message.clone().unwrap_or_default()),
        };
        let mut cells = vec![
            Cell::text(name.clone()),
            Cell::text(s.describe()),
            Cell::text(s.format.as_str().to_uppercase()),
            Cell::text(when_opt(s.next_run_at)),
            last,
        ];
        if can_schedule {
            cells.push(Cell::forms(vec![
                RowForm::new(
                    format!("/o/{slug}/reports/schedules/{}/delete", s.id),
                    "Delete",
                    format!("Delete the schedule of {name}"),
                )
                .danger("Delete this schedule? Its past runs stay."),
            ]));
        }
        st.row(format!("schedule-{}", s.id), cells);
    }
    let mut part = Part::new("schedule-list", "Schedules").table(st);
    if can_schedule && !definitions.is_empty() {
        let zones = time_zones(state, scope).await?;
        part = part.form(
            Form::new(
                "new-schedule",
                "Run a report on a schedule",
                format!("/o/{slug}/reports/schedules"),
                "Add schedule",
            )
            .field(
                Field::new("select", "report", "Report").options(
                    definitions
                        .iter()
                        .map(|d| Opt::new(d.id.to_string(), d.name.clone(), false))
                        .collect(),
                ),
            )
            .field(Field::new("select", "cadence", "Every").options(vec![
                Opt::new("daily", "Day", true),
                Opt::new("weekly", "Week", false),
                Opt::new("monthly", "Month", false),
            ]))
            .field(
                Field::new("select", "weekday", "On (weekly)").options(
                    breeze_store::WEEKDAYS
                        .iter()
                        .enumerate()
                        .map(|(i, d)| Opt::new(i.to_string(), *d, i == 1))
                        .collect(),
                ),
            )
            .field(
                Field::new("number", "month_day", "Day of the month (monthly)")
                    .value("1")
                    .help("1 to 28, so every month has it."),
            )
            .field(Field::new("time", "at", "At").value("07:00").required())
            .field(
                Field::new("select", "time_zone", "Time zone").options(
                    zones
                        .iter()
                        .enumerate()
                        .map(|(i, z)| Opt::new(z.clone(), z.clone(), i == 0))
                        .collect(),
                ),
            )
            .field(
                Field::new("select", "format", "Format").options(
                    [ReportFormat::Pdf, ReportFormat::Csv, ReportFormat::Json]
                        .iter()
                        .map(|f| Opt::new(f.as_str(), f.as_str().to_uppercase(), false))
                        .collect(),
                ),
            ),
        );
    }
    Ok(part)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ScheduleForm {
    report: String,
    cadence: String,
    weekday: String,
    month_day: String,
    at: String,
    time_zone: String,
    format: String,
}

impl ScheduleForm {
    /// The schedule the form asks for, or what is wrong with it (worded for a person).
    fn read(&self) -> Result<(ReportCadence, u32, ReportFormat), String> {
        let day = |raw: &str| raw.trim().parse::<i64>().ok();
        let cadence = match self.cadence.as_str() {
            "daily" => ReportCadence::from_parts("daily", None),
            "weekly" => ReportCadence::from_parts("weekly", day(&self.weekday)),
            "monthly" => ReportCadence::from_parts("monthly", day(&self.month_day)),
            other => {
                return Err(format!("Every: choose day, week or month, not {other:?}."));
            }
        }
        .map_err(|e| format!("Schedule: {}.", e.to_string().trim_end_matches('.')))?;
        let at = self
            .at
            .trim()
            .split_once(':')
            .and_then(|(h, m)| Some((h.parse::<u32>().ok()?, m.get(..2)?.parse::<u32>().ok()?)))
            .filter(|(h, m)| *h < 24 && *m < 60)
            .map(|(h, m)| h * 60 + m)
            .ok_or_else(|| format!("At: {:?} is not a time of day (HH:MM).", self.at))?;
        let format: ReportFormat = self
            .format
            .parse()
            .map_err(|e: breeze_core::ParseError| format!("Format: {e}."))?;
        Ok((cadence, at, format))
    }
}

async fn create_schedule(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<ScheduleForm>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(&state, &org, schedule_operation(&state))
        .await?;
    let to = format!("/o/{}/reports", scope.org.slug);
    // Another organization's definition is not found, like a page.
    let report = super::kit::uuid(&f.form.report, "Report")?;
    let definition = scope
        .store(&state)
        .reports()
        .get_report(report)
        .await
        .map_err(super::kit::store_err("Report"))?;
    let (cadence, at_minute, format) = match f.form.read() {
        Ok(x) => x,
        Err(e) => return Ok(back_to(&to, false, &e)),
    };
    let time_zone = match f.form.time_zone.trim() {
        "" => "UTC".to_owned(),
        z => z.to_owned(),
    };
    let audit = breeze_core::AuditEvent::new(
        scope.caller.actor(),
        "report_schedule.create",
        "report_schedule",
    )
    .request(request_id);
    let created = scope
        .store(&state)
        .reports()
        .create_report_schedule(
            NewReportSchedule {
                report_id: definition.id,
                cadence,
                at_minute,
                time_zone,
                format,
                owner_actor: scope.caller.actor().to_string(),
            },
            audit,
        )
        .await;
    Ok(match created {
        Ok(s) => back_to(
            &to,
            true,
            &format!(
                "{} runs {}; next at {}.",
                definition.name,
                s.describe(),
                when_opt(s.next_run_at)
            ),
        ),
        Err(breeze_store::StoreError::Invalid(m) | breeze_store::StoreError::Conflict(m)) => {
            back_to(&to, false, &m)
        }
        Err(e) => return Err(e.into()),
    })
}

async fn delete_schedule(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(&state, &org, schedule_operation(&state))
        .await?;
    let id = super::kit::uuid(&id, "Schedule")?;
    let audit = breeze_core::AuditEvent::new(
        scope.caller.actor(),
        "report_schedule.delete",
        "report_schedule",
    )
    .request(request_id);
    let s = scope
        .store(&state)
        .reports()
        .delete_report_schedule(id, audit)
        .await
        .map_err(super::kit::store_err("Schedule"))?;
    Ok(back_to(
        &format!("/o/{}/reports", scope.org.slug),
        true,
        &format!(
            "The schedule ({}) is deleted; its past runs stay.",
            s.describe()
        ),
    ))
}
