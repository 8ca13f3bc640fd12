//! Configuration policies, compliance and automations in the console.
//!
//! `GET /o/{org}/policies` lists configuration policies (the organization's and its
//! partner's) with their settings, and their assignments through the hierarchy (partner,
//! organization, site, group, device; priority decides among equals);
//! `GET /o/{org}/devices/{id}/configuration` shows a device's effective configuration, each
//! value with the policy and assignment it comes from, and what its agent last reported.
//! `GET /o/{org}/compliance` shows each compliance policy's counts and the devices that drift
//! (failed rules, in words), and `POST …/compliance/evaluate` is `manage_policies evaluate`
//! through the pipeline. `GET /o/{org}/automations` lists automations with their trigger,
//! action, target and next run.
//!
//! Pages are judged by the read the matching tool declares (`list_configuration_policies`,
//! `get_effective_configuration`, `manage_policies list`, `manage_automations list`).

use axum::{
    Router,
    extract::{Path, Query, State},
    response::Response,
    routing::{get, post},
};
use breeze_core::{ComplianceState, ConfigLevel, DeviceId};
use serde::Deserialize;
use serde_json::json;

use super::device_actions::Outcome;
use super::kit::{
    self, Cell, Page, Part, RowForm, Table, run_and_return, target_name, when, when_opt,
};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{AppState, authz::OrgScope, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/policies", get(policies))
        .route("/o/{org}/devices/{id}/configuration", get(effective))
        .route("/o/{org}/compliance", get(compliance))
        .route("/o/{org}/compliance/evaluate", post(evaluate))
        .route("/o/{org}/automations", get(automations))
}

const TABS: &[(&str, &str)] = &[
    ("/policies", "Configuration"),
    ("/compliance", "Compliance"),
    ("/automations", "Automations"),
];

fn page(l: Layout, heading: &str, slug: &str, current: &str, o: Outcome) -> Page {
    let mut p = Page::new(l, heading).outcome(o);
    p.tabs = kit::tabs(slug, TABS, current);
    p.tabs_label = "Policies".into();
    p
}

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

/// An assignment's target, named.
async fn level_target(
    state: &AppState,
    scope: &OrgScope,
    level: ConfigLevel,
    id: uuid::Uuid,
) -> String {
    let store = scope.store(state);
    match level {
        ConfigLevel::Partner => "the partner (every organization)".to_owned(),
        ConfigLevel::Organization => "this organization".to_owned(),
        ConfigLevel::Site => {
            target_name(
                store,
                Some(breeze_store::RuleTarget::Site(breeze_core::SiteId(id))),
            )
            .await
        }
        ConfigLevel::DeviceGroup => {
            target_name(
                store,
                Some(breeze_store::RuleTarget::Group(breeze_core::DeviceGroupId(
                    id,
                ))),
            )
            .await
        }
        ConfigLevel::Device => {
            target_name(store, Some(breeze_store::RuleTarget::Device(DeviceId(id)))).await
        }
    }
}

async fn policies(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "list_configuration_policies", "").await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let list = store.config_policies().list_config_policies(None).await?;
    let mut pt = Table::new(
        "config-policies",
        "Configuration policies",
        &["Policy", "Owner", "Status", "Settings", "Updated"],
        "No configuration policy. AI clients and people create them with apply_configuration_policy.",
    );
    for p in &list {
        let settings: Vec<&str> = p.settings.keys().map(|f| f.as_str()).collect();
        pt.row(
            format!("policy-{}", p.id),
            vec![
                Cell::text(p.name.clone()),
                Cell::text(match p.owner {
                    breeze_store::PolicyOwner::Organization(_) => "this organization",
                    breeze_store::PolicyOwner::Partner(_) => "partner",
                }),
                Cell::status(p.status.as_str()),
                Cell::text(settings.join(", "))
                    .with_detail(serde_json::to_string_pretty(&p.settings).unwrap_or_default()),
                Cell::text(when(p.updated_at)),
            ],
        );
    }
    let mut at = Table::new(
        "assignments",
        "Assignments",
        &["Policy", "Level", "Applies to", "Priority", "Since"],
        "No assignment: no policy applies to any device.",
    );
    for a in store.config_policies().list_config_assignments().await? {
        let name = list
            .iter()
            .find(|p| p.id == a.policy_id)
            .map_or_else(|| a.policy_id.to_string(), |p| p.name.clone());
        at.row(
            format!("assignment-{}", a.id),
            vec![
                Cell::text(name),
                Cell::text(a.level.as_str().replace('_', " ")),
                Cell::text(level_target(&state, &scope, a.level, a.target_id).await),
                Cell::text(a.priority.to_string()),
                Cell::text(when(a.created_at)),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Policies,
        "Configuration policies",
    )
    .await?;
    let mut p = page(l, "Configuration policies", &slug, "/policies", o);
    p.intro = "A device takes each setting from the most specific assignment that covers it \
               (device, then group, site, organization, partner); a device page links to its \
               effective configuration."
        .into();
    p.parts.push(Part::new("policy-list", "Policies").table(pt));
    p.parts
        .push(Part::new("assignment-list", "Assignments through the hierarchy").table(at));
    render(&p)
}

async fn effective(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "get_effective_configuration", "").await?;
    let slug = scope.org.slug.clone();
    let device = DeviceId(kit::uuid(&id, "Device")?);
    let store = scope.store(&state);
    let d = store
        .devices()
        .get_device(device)
        .await
        .map_err(kit::store_err("Device"))?;
    let eff = store
        .config_policies()
        .effective_configuration(device)
        .await
        .map_err(kit::store_err("Device"))?;
    let mut t = Table::new(
        "effective",
        "Effective configuration",
        &["Feature", "Setting", "Value", "From"],
        "No policy applies to this device: it runs with the agent's defaults.",
    );
    for (feature, fields) in &eff {
        for (field, v) in fields {
            t.row(
                String::new(),
                vec![
                    Cell::text(feature.as_str()),
                    Cell::mono(field.clone()),
                    Cell::mono(v.value.to_string()),
                    Cell::text(format!(
                        "{} ({}, priority {})",
                        v.source.policy_name,
                        v.source.level.replace('_', " "),
                        v.source.priority
                    )),
                ],
            );
        }
    }
    let mut reported = Part::new("reported", "Reported by the agent");
    match store.config_policies().config_report(device).await? {
        Some(r) => {
            reported = reported
                .fact("Reported", when(r.reported_at))
                .fact("Revision", r.revision.unwrap_or_else(|| "—".into()));
            reported.pre = serde_json::to_string_pretty(&r.applied).unwrap_or_default();
        }
        None => reported.note = "The agent has not reported its applied configuration yet.".into(),
    }
    let title = format!("Configuration of {}", d.hostname);
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Policies, &title).await?;
    let mut p = page(l, &title, &slug, "/policies", Outcome::default());
    p.back = Some((format!("/o/{slug}/devices/{}", d.id), d.hostname.clone()));
    p.parts
        .push(Part::new("effective-part", "Effective configuration").table(t));
    p.parts.push(reported);
    render(&p)
}

async fn compliance(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "manage_policies", "compliance_status").await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let can_evaluate = allowed(
        &state,
        &scope,
        tool_operation(&state, "manage_policies", "evaluate"),
    );
    let policies = store.compliance().list_compliance_policies().await?;
    let summary = store.compliance().compliance_summary().await?;
    let mut headers = vec![
        "Policy",
        "Covers",
        "Enforcement",
        "Compliant",
        "Drifting",
        "Unknown",
        "Last evaluated",
    ];
    if can_evaluate {
        headers.push("Actions");
    }
    let mut pt = Table::new(
        "compliance-policies",
        "Compliance policies",
        &headers,
        "No compliance policy. AI clients and people create them with manage_policies.",
    )
    .csrf(&who.csrf);
    for p in &policies {
        let s = summary.iter().find(|s| s.policy_id == p.id);
        let mut cells = vec![
            Cell::text(if p.active {
                p.name.clone()
            } else {
                format!("{} (inactive)", p.name)
            }),
            Cell::text(target_name(store, p.target().ok()).await),
            Cell::text(p.enforcement.as_str()),
            Cell::text(s.map_or(0, |s| s.compliant).to_string()),
            Cell::text(s.map_or(0, |s| s.non_compliant).to_string()),
            Cell::text(s.map_or(0, |s| s.unknown).to_string()),
            Cell::text(when_opt(p.last_evaluated_at)),
        ];
        if can_evaluate {
            cells.push(Cell::forms(vec![
                RowForm::new(
                    format!("/o/{slug}/compliance/evaluate"),
                    "Evaluate now",
                    format!("Evaluate {} now", p.name),
                )
                .field("policy", p.id.to_string()),
            ]));
        }
        pt.row(format!("cpolicy-{}", p.id), cells);
    }
    let drifting = store
        .compliance()
        .compliance_statuses(None, None, Some(ComplianceState::NonCompliant), 200)
        .await?;
    let mut dt = Table::new(
        "drift",
        "Devices out of compliance",
        &["Device", "Policy", "Status", "Failed rules", "Since"],
        "No device drifts from its policies.",
    );
    for s in &drifting {
        let policy = policies
            .iter()
            .find(|p| p.id == s.policy_id)
            .map_or_else(|| s.policy_id.to_string(), |p| p.name.clone());
        let failed: Vec<String> = s
            .results
            .iter()
            .filter(|r| r.passed == Some(false))
            .map(|r| format!("rule {}: {}", r.rule + 1, r.detail))
            .collect();
        dt.row(
            String::new(),
            vec![
                Cell::link(
                    s.hostname.clone(),
                    format!("/o/{slug}/devices/{}", s.device_id),
                ),
                Cell::text(policy),
                Cell::status(s.status.as_str()),
                Cell::text(failed.join("; ")),
                Cell::text(when(s.changed_at)),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Policies,
        "Compliance",
    )
    .await?;
    let mut p = page(l, "Compliance", &slug, "/compliance", o);
    p.parts
        .push(Part::new("compliance-summary", "Policies").table(pt));
    p.parts.push(Part::new("drift-part", "Drift").table(dt));
    render(&p)
}

#[derive(Debug, Deserialize)]
struct EvaluateForm {
    policy: String,
}

async fn evaluate(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<EvaluateForm>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &f.who, &org, "manage_policies", "evaluate").await?;
    let id = kit::uuid(&f.form.policy, "Policy")?;
    scope
        .store(&state)
        .compliance()
        .get_compliance_policy(id)
        .await
        .map_err(kit::store_err("Policy"))?;
    let to = format!("/o/{}/compliance", scope.org.slug);
    Ok(run_and_return(
        &state,
        &scope,
        "manage_policies",
        json!({ "action": "evaluate", "policyId": id.to_string(), "waitSeconds": 0 }),
        request_id,
        &to,
    )
    .await)
}

async fn automations(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "manage_automations", "list").await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let mut t = Table::new(
        "automations",
        "Automations",
        &["Automation", "State", "When", "Does", "On", "Next run"],
        "No automation. AI clients and people create them with manage_automations.",
    );
    for a in store.automations().list_automations().await? {
        let trigger = match a.trigger_kind {
            breeze_core::AutomationTrigger::Schedule => format!(
                "schedule {} ({})",
                a.cron.clone().unwrap_or_default(),
                a.time_zone
            ),
            breeze_core::AutomationTrigger::Alert => match &a.alert_min_severity {
                Some(s) => format!("an alert of severity {s} or above"),
                None => "an alert of its rule".to_owned(),
            },
            breeze_core::AutomationTrigger::Manual => "when run".to_owned(),
        };
        t.row(
            format!("automation-{}", a.id),
            vec![
                Cell::text(a.name.clone()),
                Cell::status(if a.enabled { "active" } else { "disabled" }),
                Cell::text(trigger),
                Cell::text(a.action_kind.as_str().replace('_', " ")),
                Cell::text(target_name(store, a.target().ok()).await),
                Cell::text(when_opt(a.next_run_at)),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Policies,
        "Automations",
    )
    .await?;
    let mut p = page(l, "Automations", &slug, "/automations", o);
    p.intro =
        "Scripts an automation runs go through run_script's Tier 3 rules as its owner.".into();
    p.parts
        .push(Part::new("automation-list", "Automations").table(t));
    render(&p)
}
