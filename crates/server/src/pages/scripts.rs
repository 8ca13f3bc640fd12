//! The script library in the console.
//!
//! `GET /o/{org}/scripts` lists the library (search by name or description);
//! `GET /o/{org}/scripts/new` and `GET /o/{org}/scripts/{id}` open the editor (a plain
//! textarea with line numbers drawn by CSS, parameters one a line), posted back to the same
//! URL; `POST …/{id}/delete` removes one. A script's page runs it on chosen devices or a group
//! through `POST /o/{org}/devices/act` (`run_script` through the pipeline, so Tier 3's
//! approval rule applies as for an MCP client) and lists its executions with their output;
//! `GET /o/{org}/scripts/executions` lists every script's.
//!
//! Reading is what `GET /orgs/{org}/scripts` declares, a change what `POST` declares: the
//! store's `create_script` / `update_script` / `delete_script`, each with its audit record,
//! the same the REST routes and the CLI write.

use std::fmt::Write as _;

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::Method,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use breeze_core::{AuditEvent, DeviceId};
use breeze_store::{CommandRecord, DeviceFilter, NewScript, ScriptParameter};
use serde::Deserialize;
use uuid::Uuid;

use super::device_actions::Outcome;
use super::kit::{self, Cell, Page, Part, Table, route_operation, when};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{AppState, authz::OrgScope, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/scripts", get(library))
        .route("/o/{org}/scripts/executions", get(executions))
        .route("/o/{org}/scripts/new", get(new_script).post(create))
        .route("/o/{org}/scripts/{id}", get(edit).post(save))
        .route("/o/{org}/scripts/{id}/delete", post(delete))
}

const TABS: &[(&str, &str)] = &[
    ("/scripts", "Library"),
    ("/scripts/executions", "Executions"),
];

/// How many devices the run form offers by name.
const RUN_CHOICES: u32 = 200;

async fn read_scope(state: &AppState, who: &SignedIn, org: &str) -> Result<OrgScope, PageError> {
    Ok(who
        .scope(
            state,
            org,
            route_operation(&Method::GET, "/orgs/{org}/scripts"),
        )
        .await?)
}

async fn write_scope(state: &AppState, who: &SignedIn, org: &str) -> Result<OrgScope, PageError> {
    Ok(who
        .scope(
            state,
            org,
            route_operation(&Method::POST, "/orgs/{org}/scripts"),
        )
        .await?)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LibraryQuery {
    search: String,
    done: String,
    failed: String,
}

async fn library(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<LibraryQuery>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let slug = scope.org.slug.clone();
    let search = q.search.trim();
    let scripts = scope
        .store(&state)
        .scripts()
        .list_scripts(None, (!search.is_empty()).then_some(search))
        .await?;
    let mut t = Table::new(
        "scripts",
        "Scripts",
        &["Script", "Language", "Category", "Parameters", "Updated"],
        if search.is_empty() {
            "The library has no script yet."
        } else {
            "No script matches."
        },
    );
    for s in scripts {
        let params = s
            .parameters
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        t.row(
            format!("script-{}", s.id),
            vec![
                Cell::link(s.name, format!("/o/{slug}/scripts/{}", s.id)),
                Cell::text(s.language),
                Cell::text(s.category),
                Cell::text(if params.is_empty() {
                    "—".into()
                } else {
                    params
                }),
                Cell::text(when(s.updated_at)),
            ],
        );
    }
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Scripts, "Scripts").await?;
    let can_write = allowed(
        &state,
        &scope,
        route_operation(&Method::POST, "/orgs/{org}/scripts"),
    );
    let mut page = Page::new(l, "Scripts").tabbed(&slug, "Scripts", TABS, "/scripts");
    page.intro = "Library scripts run on devices through run_script: Tier 3, so a run asked by \
                  an AI client waits for a person's approval."
        .into();
    page = page.outcome(Outcome {
        done: q.done,
        failed: q.failed,
    });
    if can_write {
        page.primary = Some((
            format!("/o/{slug}/scripts/new"),
            "New script".into(),
            "new-script".into(),
        ));
    }
    page.search = Some(search.to_owned());
    page.parts.push(Part::new("library", "Library").table(t));
    render(&page)
}

/// Executions (script commands) as a table with their output.
async fn executions_table(
    state: &AppState,
    scope: &OrgScope,
    script: Option<Uuid>,
) -> Result<Table, PageError> {
    let store = scope.store(state);
    let runs = store.commands().script_executions(script, 100).await?;
    let ids: Vec<DeviceId> = runs.iter().map(|c| c.device_id).collect();
    let names = store.devices().hostnames(&ids).await?;
    let slug = &scope.org.slug;
    let mut t = Table::new(
        "executions",
        "Executions",
        &["Script", "Device", "Status", "Exit", "By", "Started"],
        "No script has run yet.",
    );
    for c in runs {
        let host = names
            .get(&c.device_id)
            .cloned()
            .unwrap_or_else(|| c.device_id.to_string());
        let output = output_of(&c);
        t.row(
            format!("run-{}", c.id),
            vec![
                match c.script_id {
                    Some(id) => Cell::link(
                        c.script_name.clone().unwrap_or_default(),
                        format!("/o/{slug}/scripts/{id}"),
                    ),
                    None => Cell::text(c.script_name.clone().unwrap_or_default()),
                },
                Cell::link(host, format!("/o/{slug}/devices/{}", c.device_id)),
                Cell::status(c.status.as_str()).with_detail(output),
                Cell::text(c.exit_code.map_or_else(|| "—".into(), |e| e.to_string())),
                Cell::text(c.created_by.clone()),
                Cell::text(when(c.created_at)),
            ],
        );
    }
    Ok(t)
}

/// A command's output as a page shows it (the first 8 KiB; the rest is in the REST API).
pub(crate) fn output_of(c: &CommandRecord) -> String {
    let mut output = c.stdout.clone().unwrap_or_default();
    if let Some(e) = c.stderr.as_deref().filter(|e| !e.is_empty()) {
        let _ = write!(output, "\n[stderr]\n{e}");
    }
    if let Some(e) = &c.error {
        let _ = write!(output, "\n[error] {e}");
    }
    if output.len() > 8192 {
        let mut cut = 8192;
        while !output.is_char_boundary(cut) {
            cut -= 1;
        }
        output.truncate(cut);
        output.push_str("\n… (truncated here; the full output is in the API)");
    }
    output.trim().to_owned()
}

async fn executions(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let t = executions_table(&state, &scope, None).await?;
    let slug = scope.org.slug.clone();
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Scripts,
        "Script executions",
    )
    .await?;
    let mut page =
        Page::new(l, "Script executions").tabbed(&slug, "Scripts", TABS, "/scripts/executions");
    page.parts.push(
        Part::new("runs", "Latest runs")
            .note("The latest 100 runs of library scripts on every device, newest first.")
            .table(t),
    );
    render(&page)
}

/// A choice in a select.
struct Pick {
    value: String,
    label: String,
    selected: bool,
}

/// The editor (and, for a saved script, its run form and executions).
#[derive(Template)]
#[template(path = "script.html")]
struct ScriptPage {
    l: Layout,
    /// Empty for a new script.
    id: String,
    name: String,
    description: String,
    category: String,
    languages: Vec<Pick>,
    body: String,
    /// Line numbers for the editor's gutter.
    lines: Vec<usize>,
    parameters: String,
    param_names: String,
    can_write: bool,
    can_run: bool,
    devices: Vec<Pick>,
    groups: Vec<Pick>,
    runs: Option<Table>,
    notice: String,
    error: String,
}

/// Parameters as the editor shows them: one a line, `name`, `name=default`, `name!` for a
/// required one, a description after `#`.
fn parameters_text(ps: &[ScriptParameter]) -> String {
    ps.iter()
        .map(|p| {
            let mut line = p.name.clone();
            if p.required {
                line.push('!');
            }
            if let Some(d) = &p.default {
                let _ = write!(line, "={d}");
            }
            if !p.description.is_empty() {
                let _ = write!(line, " # {}", p.description);
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The editor's parameter lines as declarations, or what is wrong with a line.
fn parse_parameters(text: &str) -> Result<Vec<ScriptParameter>, String> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let (decl, description) = match line.split_once('#') {
            Some((d, rest)) => (d.trim(), rest.trim().to_owned()),
            None => (line, String::new()),
        };
        let (name, default) = match decl.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_owned())),
            None => (decl, None),
        };
        let (name, required) = match name.strip_suffix('!') {
            Some(n) => (n.trim(), true),
            None => (name, false),
        };
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(format!(
                "Parameters, line {}: {raw:?} needs a name of letters, digits, _ or - \
                 (name, name=default, name! for a required one, # description).",
                n + 1
            ));
        }
        out.push(ScriptParameter {
            name: name.to_owned(),
            description,
            required,
            default,
        });
    }
    Ok(out)
}

fn languages(current: &str) -> Vec<Pick> {
    breeze_store::SCRIPT_LANGUAGES
        .iter()
        .map(|l| Pick {
            value: (*l).to_owned(),
            label: (*l).to_owned(),
            selected: *l == current,
        })
        .collect()
}

fn line_numbers(body: &str) -> Vec<usize> {
    // A few more than the body has, so lines typed at the end are numbered too.
    (1..=body.lines().count().max(1) + 30).collect()
}

async fn new_script(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = write_scope(&state, &who, &org).await?;
    let body = "#!/bin/bash\nset -eu\n".to_owned();
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Scripts,
        "New script",
    )
    .await?;
    render(&ScriptPage {
        l,
        id: String::new(),
        name: String::new(),
        description: String::new(),
        category: "general".into(),
        languages: languages("bash"),
        lines: line_numbers(&body),
        body,
        parameters: String::new(),
        param_names: String::new(),
        can_write: true,
        can_run: false,
        devices: Vec::new(),
        groups: Vec::new(),
        runs: None,
        notice: String::new(),
        error: String::new(),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ScriptForm {
    name: String,
    description: String,
    language: String,
    category: String,
    body: String,
    parameters: String,
}

impl ScriptForm {
    /// The script to store, or what is wrong.
    fn script(&self, by: String) -> Result<NewScript, String> {
        Ok(NewScript {
            name: self.name.trim().to_owned(),
            description: self.description.trim().to_owned(),
            language: self.language.clone(),
            category: match self.category.trim() {
                "" => "general".to_owned(),
                c => c.to_owned(),
            },
            // Browsers post CRLF line ends; scripts run on Unix shells.
            body: self.body.replace("\r\n", "\n"),
            parameters: parse_parameters(&self.parameters)?,
            created_by: by,
        })
    }
}

/// The editor shown again with the person's input and what was wrong.
async fn form_again(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    id: Option<Uuid>,
    f: &ScriptForm,
    error: String,
) -> Result<Response, PageError> {
    let l = Layout::for_user(state, who, Some(&scope.org), Section::Scripts, "Script").await?;
    let body = f.body.replace("\r\n", "\n");
    super::render_status(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        &ScriptPage {
            l,
            id: id.map(|i| i.to_string()).unwrap_or_default(),
            name: f.name.clone(),
            description: f.description.clone(),
            category: f.category.clone(),
            languages: languages(&f.language),
            lines: line_numbers(&body),
            body,
            parameters: f.parameters.clone(),
            param_names: String::new(),
            can_write: true,
            can_run: false,
            devices: Vec::new(),
            groups: Vec::new(),
            runs: None,
            notice: String::new(),
            error,
        },
    )
}

async fn create(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<ScriptForm>,
) -> Result<Response, PageError> {
    let scope = write_scope(&state, &f.who, &org).await?;
    let new = match f.form.script(scope.caller.actor().to_string()) {
        Ok(n) => n,
        Err(e) => return form_again(&state, &f.who, &scope, None, &f.form, e).await,
    };
    let audit =
        AuditEvent::new(scope.caller.actor(), "script.create", "script").request(request_id);
    match scope
        .store(&state)
        .scripts()
        .create_script(new, audit)
        .await
    {
        Ok(s) => Ok(kit::back_to(
            &format!("/o/{}/scripts/{}", scope.org.slug, s.id),
            true,
            &format!("Added {} to the library.", s.name),
        )),
        Err(breeze_store::StoreError::Invalid(m) | breeze_store::StoreError::Conflict(m)) => {
            form_again(&state, &f.who, &scope, None, &f.form, capitalized(&m)).await
        }
        Err(e) => Err(e.into()),
    }
}

fn capitalized(m: &str) -> String {
    let mut s = m.to_owned();
    if let Some(first) = s.get(..1) {
        s.replace_range(..1, &first.to_uppercase());
    }
    if !s.ends_with('.') {
        s.push('.');
    }
    s
}

async fn edit(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let id = kit::uuid(&id, "Script")?;
    let store = scope.store(&state);
    let s = store
        .scripts()
        .get_script(id)
        .await
        .map_err(kit::store_err("Script"))?;
    let can_write = allowed(
        &state,
        &scope,
        route_operation(&Method::POST, "/orgs/{org}/scripts"),
    );
    let can_run = allowed(&state, &scope, tool_operation(&state, "run_script", ""));
    let (mut devices, mut groups) = (Vec::new(), Vec::new());
    if can_run {
        let (list, _) = store
            .devices()
            .list_devices(&DeviceFilter::default(), RUN_CHOICES, 0)
            .await?;
        devices = list
            .into_iter()
            .map(|d| Pick {
                label: format!("{} ({})", d.hostname, d.status.as_str()),
                value: d.id.to_string(),
                selected: false,
            })
            .collect();
        groups = store
            .tenancy()
            .list_groups()
            .await?
            .into_iter()
            .map(|g| Pick {
                value: g.id.to_string(),
                label: g.name,
                selected: false,
            })
            .collect();
    }
    let runs = Some(executions_table(&state, &scope, Some(id)).await?);
    let o = o.trimmed();
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Scripts, &s.name).await?;
    render(&ScriptPage {
        l,
        id: s.id.to_string(),
        languages: languages(&s.language),
        lines: line_numbers(&s.body),
        parameters: parameters_text(&s.parameters),
        param_names: s
            .parameters
            .iter()
            .map(|p| {
                if p.required {
                    format!("{}=… (required)", p.name)
                } else {
                    format!("{}=…", p.name)
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
        name: s.name,
        description: s.description,
        category: s.category,
        body: s.body,
        can_write,
        can_run,
        devices,
        groups,
        runs,
        notice: o.done,
        error: o.failed,
    })
}

async fn save(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<ScriptForm>,
) -> Result<Response, PageError> {
    let scope = write_scope(&state, &f.who, &org).await?;
    let id = kit::uuid(&id, "Script")?;
    let scripts = scope.store(&state).scripts();
    scripts
        .get_script(id)
        .await
        .map_err(kit::store_err("Script"))?;
    let new = match f.form.script(scope.caller.actor().to_string()) {
        Ok(n) => n,
        Err(e) => return form_again(&state, &f.who, &scope, Some(id), &f.form, e).await,
    };
    let audit =
        AuditEvent::new(scope.caller.actor(), "script.update", "script").request(request_id);
    match scripts.update_script(id, new, audit).await {
        Ok(s) => Ok(kit::back_to(
            &format!("/o/{}/scripts/{}", scope.org.slug, s.id),
            true,
            &format!("Saved {}.", s.name),
        )),
        Err(breeze_store::StoreError::Invalid(m) | breeze_store::StoreError::Conflict(m)) => {
            form_again(&state, &f.who, &scope, Some(id), &f.form, capitalized(&m)).await
        }
        Err(breeze_store::StoreError::NotFound(_)) => Err(kit::not_found("Script")),
        Err(e) => Err(e.into()),
    }
}

async fn delete(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(
            &state,
            &org,
            route_operation(&Method::DELETE, "/orgs/{org}/scripts/{id}"),
        )
        .await?;
    let id = kit::uuid(&id, "Script")?;
    let audit =
        AuditEvent::new(scope.caller.actor(), "script.delete", "script").request(request_id);
    scope
        .store(&state)
        .scripts()
        .delete_script(id, audit)
        .await
        .map_err(kit::store_err("Script"))?;
    Ok(Redirect::to(&format!(
        "/o/{}/scripts?done=Removed+the+script.",
        scope.org.slug
    ))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::{parameters_text, parse_parameters};

    #[test]
    fn parameter_lines_round_trip_and_name_a_bad_line() {
        let ps = parse_parameters("path=/var # where to look\nlimit!\n\nverbose").unwrap();
        assert_eq!(ps.len(), 3);
        assert_eq!(ps[0].name, "path");
        assert_eq!(ps[0].default.as_deref(), Some("/var"));
        assert_eq!(ps[0].description, "where to look");
        assert!(ps[1].required && ps[1].default.is_none());
        assert!(!ps[2].required);
        assert_eq!(parse_parameters(&parameters_text(&ps)).unwrap(), ps);
        let e = parse_parameters("ok\nbad name=1").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        assert!(parse_parameters("=x").is_err());
    }
}
