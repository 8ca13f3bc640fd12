//! The live query pages. `GET /o/{org}/live-queries`: pick a question (with its parameters)
//! and a target (the organization, a site, a group or one device), `Prepare` shows how many
//! devices the target covers, how many are online and the rows to expect (nothing sent);
//! `Run` starts the query in the background and opens its page. `GET
//! /o/{org}/live-queries/{id}`: the query's counts and rows, reloaded through
//! `/o/{org}/live-queries/{id}/rows` whenever the organization's event stream says answers
//! arrived (`livequeries`); `/o/{org}/live-queries/{id}/export.csv` has every row. The same
//! operation as `run_live_query` (Tier 1, `devices.read`), through `breeze_domain::live_queries`.

use askama::Template;
use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use breeze_agent_proto::livequery::{CATALOGUE, Question};
use breeze_core::DeviceId;
use breeze_domain::live_queries::{LiveTarget, Prepared, RunLimits};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Layout, PageError, Section, SignedForm, SignedIn, render, render_status};
use crate::extract::RequestId;
use crate::{AppState, routes::live_queries::service_for};

/// Devices whose rows the page shows (the CSV has all).
const PAGE_DEVICES: u32 = 100;
/// Rows the page shows at most.
const PAGE_ROWS: usize = 500;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/live-queries", get(show).post(submit))
        .route("/o/{org}/live-queries/{id}", get(query_page))
        .route("/o/{org}/live-queries/{id}/rows", get(rows_fragment))
        .route("/o/{org}/live-queries/{id}/export.csv", get(export))
}

fn operation(state: &AppState) -> breeze_core::Operation {
    super::tool_operation(state, "run_live_query", "run")
}

struct Choice {
    value: String,
    label: String,
    selected: bool,
}

struct Listed {
    id: String,
    question: String,
    status: String,
    when: String,
    answered: i64,
    targeted: i64,
    rows: i64,
}

struct Summary {
    targeted: usize,
    online: usize,
    estimated: u64,
    offline: Vec<String>,
    unsupported: Vec<String>,
}

/// The form as typed.
#[derive(Default, Clone)]
struct Form {
    question: String,
    name: String,
    pattern: String,
    port: String,
    state: String,
    hash: bool,
    target: String,
    site: String,
    group: String,
    device: String,
}

#[derive(Template)]
#[template(path = "live_queries.html")]
struct ListPage {
    l: Layout,
    f: Form,
    questions: Vec<Choice>,
    targets: Vec<Choice>,
    sites: Vec<Choice>,
    groups: Vec<Choice>,
    summary: Option<Summary>,
    error: String,
    queries: Vec<Listed>,
}

async fn list_page(
    state: &AppState,
    who: &SignedIn,
    scope: &crate::authz::OrgScope,
    f: Form,
    summary: Option<Summary>,
    error: String,
) -> Result<Response, PageError> {
    let org = scope.store(state);
    let pick = |value: String, label: String, current: &str| Choice {
        selected: value == current,
        value,
        label,
    };
    let questions = CATALOGUE
        .iter()
        .map(|q| pick(q.name.into(), q.title.into(), &f.question))
        .collect();
    let targets = [
        ("organization", "The whole organization"),
        ("site", "A site"),
        ("group", "A device group"),
        ("device", "One device"),
    ]
    .into_iter()
    .map(|(v, l)| pick(v.into(), l.into(), &f.target))
    .collect();
    let sites = org
        .tenancy()
        .list_sites()
        .await?
        .into_iter()
        .map(|s| pick(s.id.to_string(), s.name, &f.site))
        .collect();
    let groups = org
        .tenancy()
        .list_groups()
        .await?
        .into_iter()
        .map(|g| pick(g.id.to_string(), g.name, &f.group))
        .collect();
    let now = state.store.clock().now();
    let queries = service_for(state, scope.org.id)
        .list(None, 20)
        .await
        .map_err(domain)?
        .into_iter()
        .map(|(q, c)| Listed {
            id: q.id.to_string(),
            question: describe(&q.question),
            status: q.status(now).to_owned(),
            when: q.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            answered: c.answered,
            targeted: q.devices_targeted,
            rows: c.rows,
        })
        .collect();
    let l = Layout::for_user(
        state,
        who,
        Some(&scope.org),
        Section::LiveQueries,
        "Live query",
    )
    .await?;
    let status = if error.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    render_status(
        status,
        &ListPage {
            l,
            f,
            questions,
            targets,
            sites,
            groups,
            summary,
            error,
            queries,
        },
    )
}

fn domain(e: breeze_domain::Error) -> PageError {
    let breeze_domain::Error::Store(e) = e;
    e.into()
}

/// `processes (name=ssh)`.
fn describe(question: &Value) -> String {
    let name = question["question"].as_str().unwrap_or("?");
    let params: Vec<String> = question
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| k.as_str() != "question")
                .map(|(k, v)| match v {
                    Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect()
        })
        .unwrap_or_default();
    if params.is_empty() {
        name.to_owned()
    } else {
        format!("{name} ({})", params.join(", "))
    }
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, operation(&state)).await?;
    let f = Form {
        question: "processes".into(),
        target: "organization".into(),
        ..Form::default()
    };
    list_page(&state, &who, &scope, f, None, String::new()).await
}

fn form_of(fields: &[(String, String)]) -> (Form, String) {
    let mut f = Form::default();
    let mut step = String::new();
    for (k, v) in fields {
        let v = v.trim().to_owned();
        match k.as_str() {
            "question" => f.question = v,
            "name" => f.name = v,
            "pattern" => f.pattern = v,
            "port" => f.port = v,
            "state" => f.state = v,
            "hash" => f.hash = v == "1",
            "target" => f.target = v,
            "site" => f.site = v,
            "group" => f.group = v,
            "device" => f.device = v,
            "step" => step = v,
            _ => {}
        }
    }
    (f, step)
}

/// The question and target a form names, or what is wrong with it.
fn parse(f: &Form) -> Result<(Question, LiveTarget), String> {
    let mut q = json!({ "question": f.question });
    let spec = breeze_agent_proto::livequery::spec(&f.question)
        .ok_or_else(|| format!("unknown question {:?}", f.question))?;
    for p in spec.parameters {
        match p.name {
            "name" if !f.name.is_empty() => q["name"] = json!(f.name),
            "pattern" => q["pattern"] = json!(f.pattern),
            "state" if !f.state.is_empty() => q["state"] = json!(f.state),
            "hash" => q["hash"] = json!(f.hash),
            "port" if !f.port.is_empty() => {
                let port: u16 = f
                    .port
                    .parse()
                    .map_err(|_| format!("port: {:?} is not a port number", f.port))?;
                q["port"] = json!(port);
            }
            _ => {}
        }
    }
    let question: Question = serde_json::from_value(q).map_err(|e| format!("question: {e}"))?;
    question.validate()?;
    let id = |raw: &str, what: &str| {
        Uuid::parse_str(raw).map_err(|_| format!("choose a {what} (an id like 0190…)"))
    };
    let target = match f.target.as_str() {
        "site" => LiveTarget::Site {
            site_id: breeze_core::SiteId(id(&f.site, "site")?),
        },
        "group" => LiveTarget::Group {
            group_id: breeze_core::DeviceGroupId(id(&f.group, "group")?),
        },
        "device" => LiveTarget::Devices {
            device_ids: vec![DeviceId(id(&f.device, "device")?)],
        },
        _ => LiveTarget::Organization,
    };
    Ok((question, target))
}

fn names(devices: &[breeze_domain::live_queries::TargetDevice]) -> Vec<String> {
    devices.iter().map(|d| d.hostname.clone()).collect()
}

async fn submit(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    form: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let who = form.who;
    let scope = who.scope(&state, &org, operation(&state)).await?;
    let (f, step) = form_of(&form.form);
    let (question, target) = match parse(&f) {
        Ok(p) => p,
        Err(e) => return list_page(&state, &who, &scope, f, None, e).await,
    };
    let limits = RunLimits::default();
    let prepared: Prepared = match service_for(&state, scope.org.id)
        .prepare(question, target)
        .await
    {
        Ok(p) => p,
        Err(breeze_domain::Error::Store(breeze_store::StoreError::NotFound(what))) => {
            let e = format!("{what} not found");
            return list_page(&state, &who, &scope, f, None, e).await;
        }
        Err(breeze_domain::Error::Store(breeze_store::StoreError::Invalid(e))) => {
            return list_page(&state, &who, &scope, f, None, e).await;
        }
        Err(e) => return Err(domain(e)),
    };
    if step != "run" {
        let summary = Summary {
            targeted: prepared.targeted(),
            online: prepared.online.len(),
            estimated: prepared.estimated_rows(&limits),
            offline: names(&prepared.offline),
            unsupported: names(&prepared.unsupported),
        };
        return list_page(&state, &who, &scope, f, Some(summary), String::new()).await;
    }
    // The run goes on after this answer; its page follows the answers as they are stored.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let org_id = scope.org.id;
    let actor = scope.caller.actor();
    let task_state = state.clone();
    tokio::spawn(async move {
        let svc = service_for(&task_state, org_id);
        let run = svc.run(
            prepared,
            limits,
            &actor,
            request_id,
            |q| {
                let _ = tx.send(q.id);
            },
            |_, _| {},
        );
        if let Err(e) = run.await {
            tracing::warn!(org = %org_id, error = %e, "a live query started from the dashboard failed");
        }
    });
    match rx.await {
        Ok(id) => {
            Ok(Redirect::to(&format!("/o/{}/live-queries/{id}", scope.org.slug)).into_response())
        }
        Err(_) => {
            list_page(
                &state,
                &who,
                &scope,
                f,
                None,
                "The query could not be started; try again.".into(),
            )
            .await
        }
    }
}

struct RowView {
    hostname: String,
    cells: Vec<String>,
}

struct DeviceLine {
    hostname: String,
    status: String,
    rows: i64,
    cap: String,
    error: String,
}

#[derive(Template)]
#[template(path = "live_query_rows.html")]
struct RowsFragment {
    org_slug: String,
    id: String,
    status: String,
    targeted: i64,
    online: i64,
    answered: i64,
    failed: i64,
    timed_out: i64,
    offline: i64,
    total_rows: i64,
    query_cap: String,
    columns: Vec<String>,
    rows: Vec<RowView>,
    rows_cut: bool,
    devices: Vec<DeviceLine>,
}

#[derive(Template)]
#[template(path = "live_query.html")]
struct QueryPage {
    l: Layout,
    question: String,
    created: String,
    id: String,
    /// The rows fragment, rendered (escaped) by its own template.
    rows_html: String,
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(" "),
        other => other.to_string(),
    }
}

async fn fragment(
    state: &AppState,
    scope: &crate::authz::OrgScope,
    id: &str,
) -> Result<(RowsFragment, breeze_store::LiveQueryRecord), PageError> {
    let id = Uuid::parse_str(id)
        .map_err(|_| PageError::Api(crate::ApiError::not_found("live query not found")))?;
    let svc = service_for(state, scope.org.id);
    let (q, c) = svc.get(id).await.map_err(domain)?;
    let page = svc.results(id, None, PAGE_DEVICES).await.map_err(domain)?;
    let spec = q.question["question"]
        .as_str()
        .and_then(breeze_agent_proto::livequery::spec);
    let columns: Vec<String> = spec
        .map(|s| s.columns.iter().map(|c| c.name.to_owned()).collect())
        .unwrap_or_default();
    let mut rows = Vec::new();
    let mut rows_cut = false;
    let mut devices = Vec::new();
    for (a, hostname) in &page {
        for row in &a.rows {
            if rows.len() >= PAGE_ROWS {
                rows_cut = true;
                break;
            }
            rows.push(RowView {
                hostname: hostname.clone(),
                cells: columns.iter().map(|c| cell(&row[c.as_str()])).collect(),
            });
        }
        if a.status != "answered" || a.cap.is_some() {
            devices.push(DeviceLine {
                hostname: hostname.clone(),
                status: a.status.clone(),
                rows: a.row_count,
                cap: a.cap.clone().unwrap_or_default(),
                error: a.error.clone().unwrap_or_default(),
            });
        }
    }
    rows_cut |= page.len() as u32 == PAGE_DEVICES;
    let now = state.store.clock().now();
    Ok((
        RowsFragment {
            org_slug: scope.org.slug.clone(),
            id: q.id.to_string(),
            status: q.status(now).to_owned(),
            targeted: q.devices_targeted,
            online: q.devices_online,
            answered: c.answered,
            failed: c.failed,
            timed_out: c.timed_out,
            offline: c.offline,
            total_rows: c.rows,
            query_cap: q.query_cap.clone().unwrap_or_default(),
            columns,
            rows,
            rows_cut,
            devices,
        },
        q,
    ))
}

async fn query_page(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, operation(&state)).await?;
    let (r, q) = fragment(&state, &scope, &id).await?;
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::LiveQueries,
        "Live query",
    )
    .await?;
    render(&QueryPage {
        l,
        question: describe(&q.question),
        created: q.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        id: r.id.clone(),
        rows_html: r.render()?,
    })
}

async fn rows_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, operation(&state)).await?;
    let (r, _) = fragment(&state, &scope, &id).await?;
    render(&r)
}

/// Every row of the query as CSV: the device, its part's status and cap, then the question's
/// columns.
async fn export(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, operation(&state)).await?;
    let id = Uuid::parse_str(&id)
        .map_err(|_| PageError::Api(crate::ApiError::not_found("live query not found")))?;
    let svc = service_for(&state, scope.org.id);
    let (q, _) = svc.get(id).await.map_err(domain)?;
    let columns: Vec<&str> = q.question["question"]
        .as_str()
        .and_then(breeze_agent_proto::livequery::spec)
        .map(|s| s.columns.iter().map(|c| c.name).collect())
        .unwrap_or_default();
    let mut out = String::new();
    let header: Vec<&str> = ["deviceId", "hostname", "status", "cap", "error"]
        .into_iter()
        .chain(columns.iter().copied())
        .collect();
    super::audit::csv_row(&mut out, &header);
    let mut after = None;
    loop {
        let page = svc.results(id, after, 500).await.map_err(domain)?;
        for (a, hostname) in &page {
            let device = a.device_id.to_string();
            let lead = [
                device.as_str(),
                hostname.as_str(),
                a.status.as_str(),
                a.cap.as_deref().unwrap_or(""),
                a.error.as_deref().unwrap_or(""),
            ];
            if a.rows.is_empty() {
                let empty = vec![""; columns.len()];
                let line: Vec<&str> = lead.iter().copied().chain(empty).collect();
                super::audit::csv_row(&mut out, &line);
            }
            for row in &a.rows {
                let cells: Vec<String> = columns.iter().map(|c| cell(&row[*c])).collect();
                let line: Vec<&str> = lead
                    .iter()
                    .copied()
                    .chain(cells.iter().map(String::as_str))
                    .collect();
                super::audit::csv_row(&mut out, &line);
            }
        }
        if page.len() < 500 {
            break;
        }
        after = page.last().map(|(a, _)| a.device_id);
    }
    let mut resp = out.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"live-query-{id}.csv\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}
