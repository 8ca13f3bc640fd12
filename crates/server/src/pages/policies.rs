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
//!
//! Changes: `POST /o/{org}/policies` creates a configuration policy and
//! `GET`/`POST …/policies/{id}` edits one of the organization's own, through
//! `breeze_domain::config_policies` (what `breeze config-policies` runs: audited, the covered
//! agents sent their configuration). No tool creates policies, so these are held to the
//! operation of the tool that changes what devices run, `apply_configuration_policy`.
//! `POST …/policies/assign` (`apply_configuration_policy`) assigns a policy to the
//! organization, a site, a group or (from a device's configuration page) a device, and
//! `POST …/policies/assignments/{id}/remove` is `remove_configuration_policy_assignment`.
//! `POST …/automations` creates a scheduled script automation (`manage_automations create`)
//! and `POST …/automations/{id}/switch` enables or disables one; all through the pipeline.

use axum::{
    Router,
    extract::{Path, Query, State},
    response::Response,
    routing::{get, post},
};
use breeze_core::{ComplianceState, ConfigLevel, DeviceId, FeatureType, PolicyStatus};
use breeze_domain::{
    Agents,
    config_policies::{ConfigPolicies, NewPolicy},
};
use breeze_store::ConfigPolicyUpdate;
use serde::Deserialize;
use serde_json::json;

use super::device_actions::Outcome;
use super::kit::{
    self, Cell, Field, Form, Opt, Page, Part, RowForm, Table, run_and_return, target_name, when,
    when_opt,
};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{AppState, authz::OrgScope, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/policies", get(policies).post(create_policy))
        .route("/o/{org}/policies/assign", post(assign))
        .route("/o/{org}/policies/assignments/{id}/remove", post(unassign))
        .route("/o/{org}/policies/{id}", get(policy).post(update_policy))
        .route("/o/{org}/devices/{id}/configuration", get(effective))
        .route("/o/{org}/compliance", get(compliance))
        .route("/o/{org}/compliance/evaluate", post(evaluate))
        .route(
            "/o/{org}/automations",
            get(automations).post(create_automation),
        )
        .route("/o/{org}/automations/{id}/switch", post(switch_automation))
}

const TABS: &[(&str, &str)] = &[
    ("/policies", "Configuration"),
    ("/compliance", "Compliance"),
    ("/automations", "Automations"),
];

fn page(l: Layout, heading: &str, slug: &str, current: &str, o: Outcome) -> Page {
    Page::new(l, heading)
        .outcome(o)
        .tabbed(slug, "Policies", TABS, current)
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
    let can_edit = allowed(&state, &scope, policy_operation(&state));
    let can_assign = allowed(
        &state,
        &scope,
        tool_operation(&state, "apply_configuration_policy", ""),
    );
    let can_remove = allowed(
        &state,
        &scope,
        tool_operation(&state, "remove_configuration_policy_assignment", ""),
    );
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
                match p.owner {
                    // The organization's own policies are edited on their page; partner-wide
                    // ones only with the partner's CLI.
                    breeze_store::PolicyOwner::Organization(_) if can_edit => {
                        Cell::link(p.name.clone(), format!("/o/{slug}/policies/{}", p.id))
                    }
                    _ => Cell::text(p.name.clone()),
                },
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
    let mut headers = vec!["Policy", "Level", "Applies to", "Priority", "Since"];
    if can_remove {
        headers.push("Actions");
    }
    let mut at = Table::new(
        "assignments",
        "Assignments",
        &headers,
        "No assignment: no policy applies to any device.",
    )
    .csrf(&who.csrf);
    for a in store.config_policies().list_config_assignments().await? {
        let name = list
            .iter()
            .find(|p| p.id == a.policy_id)
            .map_or_else(|| a.policy_id.to_string(), |p| p.name.clone());
        let target = level_target(&state, &scope, a.level, a.target_id).await;
        let mut cells = vec![
            Cell::text(name.clone()),
            Cell::text(a.level.as_str().replace('_', " ")),
            Cell::text(target.clone()),
            Cell::text(a.priority.to_string()),
            Cell::text(when(a.created_at)),
        ];
        if can_remove {
            // A partner-wide assignment is the partner's to remove.
            cells.push(Cell::forms(if a.level == ConfigLevel::Partner {
                Vec::new()
            } else {
                vec![
                    RowForm::new(
                        format!("/o/{slug}/policies/assignments/{}/remove", a.id),
                        "Remove",
                        format!("Remove {name} from {target}"),
                    )
                    .danger("Remove this assignment? Its devices fall back to the rest of the hierarchy."),
                ]
            }));
        }
        at.row(format!("assignment-{}", a.id), cells);
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
    let mut policy_part = Part::new("policy-list", "Policies").table(pt);
    if can_edit {
        policy_part = policy_part.form(policy_form(
            "new-policy",
            "New policy",
            format!("/o/{slug}/policies"),
            "Create policy",
            None,
        ));
    }
    p.parts.push(policy_part);
    let mut assignment_part =
        Part::new("assignment-list", "Assignments through the hierarchy").table(at);
    if can_assign && !list.is_empty() {
        let mut targets = vec![Opt::new(
            format!("organization:{}", scope.org.id),
            "This organization",
            true,
        )];
        for site in store.tenancy().list_sites().await? {
            targets.push(Opt::new(
                format!("site:{}", site.id),
                format!("Site {}", site.name),
                false,
            ));
        }
        for g in store.tenancy().list_groups().await? {
            targets.push(Opt::new(
                format!("group:{}", g.id),
                format!("Group {}", g.name),
                false,
            ));
        }
        assignment_part = assignment_part.form(
            assign_form(&slug, &list, targets)
                .field(Field::new("hidden", "back", "").value(format!("/o/{slug}/policies"))),
        );
    }
    p.parts.push(assignment_part);
    render(&p)
}

/// The operation creating or editing a configuration policy is held to: no tool creates one,
/// and a policy changes what devices run as applying one does.
fn policy_operation(state: &AppState) -> breeze_core::Operation {
    tool_operation(state, "apply_configuration_policy", "")
}

/// The form of a policy: new (`current` none) or the policy's values.
fn policy_form(
    id: &str,
    title: &str,
    action: String,
    submit: &str,
    current: Option<&breeze_store::ConfigPolicy>,
) -> Form {
    let status = current.map_or("active", |p| p.status.as_str());
    Form::new(id, title, action, submit)
        .field(
            Field::new("text", "name", "Name")
                .required()
                .value(current.map(|p| p.name.clone()).unwrap_or_default()),
        )
        .field(
            Field::new("text", "description", "Description").value(
                current
                    .and_then(|p| p.description.clone())
                    .unwrap_or_default(),
            ),
        )
        .field(Field::new("select", "status", "Status").options(vec![
            Opt::new("active", "active", status == "active"),
            Opt::new("inactive", "inactive", status == "inactive"),
        ]))
        .field(
            Field::new("textarea", "settings", "Settings (JSON, by feature)")
                .value(
                    current
                        .map(|p| serde_json::to_string_pretty(&p.settings).unwrap_or_default())
                        .unwrap_or_default(),
                )
                .help(
                    "For example {\"monitoring\": {\"metricsIntervalSeconds\": 60}}. Features: \
                     monitoring, agent_log, patch, maintenance, monitored_services.",
                )
                .wide(),
        )
}

/// The assignment form: a policy, a target (`kind:id` options) and a priority.
fn assign_form(slug: &str, list: &[breeze_store::ConfigPolicy], targets: Vec<Opt>) -> Form {
    Form::new(
        "assign-policy",
        "Assign a policy",
        format!("/o/{slug}/policies/assign"),
        "Assign",
    )
    .field(
        Field::new("select", "policy", "Policy").options(
            list.iter()
                .enumerate()
                .map(|(i, p)| Opt::new(p.id.to_string(), p.name.clone(), i == 0))
                .collect(),
        ),
    )
    .field(Field::new("select", "target", "Applies to").options(targets))
    .field(
        Field::new("number", "priority", "Priority")
            .value("0")
            .help("0 to 1000; higher wins on the same level."),
    )
}

/// A form's settings: a JSON object of feature → settings (the store checks each feature's).
fn parse_settings(raw: &str) -> Result<Vec<(FeatureType, serde_json::Value)>, String> {
    if raw.trim().is_empty() {
        return Ok(Vec::new());
    }
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(raw.trim()).map_err(|e| format!("Settings: {e}"))?;
    map.into_iter()
        .map(|(k, v)| {
            k.parse::<FeatureType>()
                .map(|f| (f, v))
                .map_err(|e| format!("Settings: {e}"))
        })
        .collect()
}

/// A domain error as a page: a refusal of the input goes back to the form with its reason,
/// "not found" is a 404.
fn domain_outcome(
    e: breeze_domain::Error,
    to: &str,
    what: &'static str,
) -> Result<Response, PageError> {
    let breeze_domain::Error::Store(e) = e;
    match e {
        breeze_store::StoreError::Invalid(m) | breeze_store::StoreError::Conflict(m) => {
            Ok(kit::back_to(to, false, &m))
        }
        other => Err(kit::store_err(what)(other)),
    }
}

/// The organization's configuration policies as the domain changes them, as the scope's caller.
fn domain<'a>(
    state: &'a AppState,
    scope: &OrgScope,
    request_id: Option<String>,
) -> ConfigPolicies<'a> {
    ConfigPolicies::new(
        state.store.org(scope.org.id).config_policies(),
        Agents::Gateway(state.gateway.org(scope.org.id)),
        scope.caller.actor(),
    )
    .request(request_id)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PolicyForm {
    name: String,
    description: String,
    status: String,
    settings: String,
}

impl PolicyForm {
    fn status(&self) -> Result<PolicyStatus, String> {
        self.status
            .parse::<PolicyStatus>()
            .map_err(|e| format!("Status: {e}"))
    }

    fn description(&self) -> Option<String> {
        let d = self.description.trim();
        (!d.is_empty()).then(|| d.to_owned())
    }
}

async fn create_policy(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<PolicyForm>,
) -> Result<Response, PageError> {
    let scope = f.who.scope(&state, &org, policy_operation(&state)).await?;
    let to = format!("/o/{}/policies", scope.org.slug);
    let name = f.form.name.trim();
    if name.is_empty() {
        return Ok(kit::back_to(&to, false, "Name the policy."));
    }
    let (status, settings) = match (f.form.status(), parse_settings(&f.form.settings)) {
        (Ok(s), Ok(v)) => (s, v),
        (Err(m), _) | (_, Err(m)) => return Ok(kit::back_to(&to, false, &m)),
    };
    let new = NewPolicy {
        name: name.to_owned(),
        description: f.form.description(),
        status,
        settings,
    };
    match domain(&state, &scope, request_id).create(new).await {
        Ok(p) => Ok(kit::back_to(
            &format!("{to}/{}", p.id),
            true,
            &format!("Created the policy {}; assign it to apply it.", p.name),
        )),
        Err(e) => domain_outcome(e, &to, "Policy"),
    }
}

/// One of the organization's own policies (a partner-wide one, or another organization's, is
/// "not found" here).
async fn own_policy(
    state: &AppState,
    scope: &OrgScope,
    raw: &str,
) -> Result<breeze_store::ConfigPolicy, PageError> {
    let id = kit::uuid(raw, "Policy")?;
    scope
        .store(state)
        .config_policies()
        .list_config_policies(None)
        .await?
        .into_iter()
        .find(|p| p.id == id && matches!(p.owner, breeze_store::PolicyOwner::Organization(_)))
        .ok_or_else(|| kit::not_found("Policy"))
}

async fn policy(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &who, &org, "list_configuration_policies", "").await?;
    let slug = scope.org.slug.clone();
    let current = own_policy(&state, &scope, &id).await?;
    let mut about = Part::new("about", "Policy")
        .fact("Status", current.status.as_str())
        .fact("Updated", when(current.updated_at))
        .fact("Created by", current.created_by.clone());
    about.pre = serde_json::to_string_pretty(&current.settings).unwrap_or_default();
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Policies,
        &current.name,
    )
    .await?;
    let mut p = page(l, &current.name, &slug, "/policies", o);
    p.back = Some((
        format!("/o/{slug}/policies"),
        "Configuration policies".into(),
    ));
    p.parts.push(about);
    if allowed(&state, &scope, policy_operation(&state)) {
        p.parts.push(
            Part::new("edit", "Edit the policy")
                .note("Saving sends the new configuration to every device its assignments cover.")
                .form(policy_form(
                    "edit-policy",
                    "",
                    format!("/o/{slug}/policies/{}", current.id),
                    "Save policy",
                    Some(&current),
                )),
        );
    }
    render(&p)
}

async fn update_policy(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<PolicyForm>,
) -> Result<Response, PageError> {
    let scope = f.who.scope(&state, &org, policy_operation(&state)).await?;
    let current = own_policy(&state, &scope, &id).await?;
    let to = format!("/o/{}/policies/{}", scope.org.slug, current.id);
    let name = f.form.name.trim();
    if name.is_empty() {
        return Ok(kit::back_to(&to, false, "Name the policy."));
    }
    let (status, settings) = match (f.form.status(), parse_settings(&f.form.settings)) {
        (Ok(s), Ok(v)) => (s, v),
        (Err(m), _) | (_, Err(m)) => return Ok(kit::back_to(&to, false, &m)),
    };
    let update = ConfigPolicyUpdate {
        name: Some(name.to_owned()),
        description: Some(f.form.description().unwrap_or_default()),
        status: Some(status),
        settings: Some(settings),
    };
    match domain(&state, &scope, request_id)
        .update(current.id, update)
        .await
    {
        Ok(changed) => Ok(kit::back_to(
            &to,
            true,
            &format!(
                "Saved; sent to {} device{}.",
                changed.devices.len(),
                if changed.devices.len() == 1 { "" } else { "s" }
            ),
        )),
        Err(e) => domain_outcome(e, &to, "Policy"),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AssignForm {
    policy: String,
    target: String,
    priority: String,
    back: String,
}

/// `POST /o/{org}/policies/assign`: `apply_configuration_policy` through the pipeline, once
/// the policy (the organization's or its partner's) and the target are known to be this
/// organization's: another organization's ids are "not found", like a page.
async fn assign(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<AssignForm>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &f.who, &org, "apply_configuration_policy", "").await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let policy = kit::uuid(&f.form.policy, "Policy")?;
    if !store
        .config_policies()
        .list_config_policies(None)
        .await?
        .iter()
        .any(|p| p.id == policy)
    {
        return Err(kit::not_found("Policy"));
    }
    let (kind, raw) = f.form.target.split_once(':').unwrap_or(("", ""));
    let target = kit::uuid(raw, "Target")?;
    let level = match kind {
        "organization" if target == scope.org.id.0 => "organization",
        "site" => {
            store
                .tenancy()
                .get_site(breeze_core::SiteId(target))
                .await
                .map_err(kit::store_err("Site"))?;
            "site"
        }
        "group" => {
            store
                .tenancy()
                .get_group(breeze_core::DeviceGroupId(target))
                .await
                .map_err(kit::store_err("Group"))?;
            "device_group"
        }
        "device" => {
            store
                .devices()
                .get_device(DeviceId(target))
                .await
                .map_err(kit::store_err("Device"))?;
            "device"
        }
        _ => return Err(kit::not_found("Target")),
    };
    let priority = match f.form.priority.trim() {
        "" => 0,
        p => match p.parse::<u32>() {
            Ok(p) if p <= 1000 => p,
            _ => {
                return Ok(kit::back_to(
                    &format!("/o/{slug}/policies"),
                    false,
                    "Priority: 0 to 1000.",
                ));
            }
        },
    };
    let to = match super::safe_next(&f.form.back) {
        "/" => format!("/o/{slug}/policies"),
        ok => ok.to_owned(),
    };
    Ok(run_and_return(
        &state,
        &scope,
        "apply_configuration_policy",
        json!({
            "configPolicyId": policy.to_string(),
            "level": level,
            "targetId": target.to_string(),
            "priority": priority,
        }),
        request_id,
        &to,
    )
    .await)
}

/// `POST /o/{org}/policies/assignments/{id}/remove`: `remove_configuration_policy_assignment`
/// through the pipeline, for an assignment of this organization (not the partner's).
async fn unassign(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let scope = scope_for(
        &state,
        &f.who,
        &org,
        "remove_configuration_policy_assignment",
        "",
    )
    .await?;
    let id = kit::uuid(&id, "Assignment")?;
    if !scope
        .store(&state)
        .config_policies()
        .list_config_assignments()
        .await?
        .iter()
        .any(|a| a.id == id && a.level != ConfigLevel::Partner)
    {
        return Err(kit::not_found("Assignment"));
    }
    let to = format!("/o/{}/policies", scope.org.slug);
    Ok(run_and_return(
        &state,
        &scope,
        "remove_configuration_policy_assignment",
        json!({ "assignmentId": id.to_string() }),
        request_id,
        &to,
    )
    .await)
}

async fn effective(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(o): Query<Outcome>,
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
    let mut p = page(l, &title, &slug, "/policies", o);
    p.back = Some((format!("/o/{slug}/devices/{}", d.id), d.hostname.clone()));
    let mut eff_part = Part::new("effective-part", "Effective configuration").table(t);
    let list = store.config_policies().list_config_policies(None).await?;
    if !list.is_empty()
        && allowed(
            &state,
            &scope,
            tool_operation(&state, "apply_configuration_policy", ""),
        )
    {
        eff_part = eff_part.form(
            assign_form(
                &slug,
                &list,
                vec![Opt::new(
                    format!("device:{}", d.id),
                    format!("This device ({})", d.hostname),
                    true,
                )],
            )
            .field(
                Field::new("hidden", "back", "")
                    .value(format!("/o/{slug}/devices/{}/configuration", d.id)),
            ),
        );
    }
    p.parts.push(eff_part);
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
    let can_switch = allowed(
        &state,
        &scope,
        tool_operation(&state, "manage_automations", "enable"),
    );
    let mut headers = vec!["Automation", "State", "When", "Does", "On", "Next run"];
    if can_switch {
        headers.push("Actions");
    }
    let mut t =
        Table::new("automations", "Automations", &headers, "No automation yet.").csrf(&who.csrf);
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
        let mut cells = vec![
            Cell::text(a.name.clone()),
            Cell::status(if a.enabled { "active" } else { "disabled" }),
            Cell::text(trigger),
            Cell::text(a.action_kind.as_str().replace('_', " ")),
            Cell::text(target_name(store, a.target().ok()).await),
            Cell::text(when_opt(a.next_run_at)),
        ];
        if can_switch {
            let (to, label) = if a.enabled {
                ("disable", "Disable")
            } else {
                ("enable", "Enable")
            };
            cells.push(Cell::forms(vec![
                RowForm::new(
                    format!("/o/{slug}/automations/{}/switch", a.id),
                    label,
                    format!("{label} {}", a.name),
                )
                .field("to", to),
            ]));
        }
        t.row(format!("automation-{}", a.id), cells);
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
    let mut part = Part::new("automation-list", "Automations").table(t);
    let scripts = store.scripts().list_scripts(None, None).await?;
    if !scripts.is_empty()
        && allowed(
            &state,
            &scope,
            tool_operation(&state, "manage_automations", "create"),
        )
    {
        let mut targets = vec![Opt::new("organization", "Every device", true)];
        for site in store.tenancy().list_sites().await? {
            targets.push(Opt::new(
                format!("site:{}", site.id),
                format!("Site {}", site.name),
                false,
            ));
        }
        for g in store.tenancy().list_groups().await? {
            targets.push(Opt::new(
                format!("group:{}", g.id),
                format!("Group {}", g.name),
                false,
            ));
        }
        part = part.form(
            Form::new(
                "new-automation",
                "New scheduled script",
                format!("/o/{slug}/automations"),
                "Create automation",
            )
            .field(Field::new("text", "name", "Name").required())
            .field(
                Field::new("select", "script", "Script").options(
                    scripts
                        .iter()
                        .enumerate()
                        .map(|(i, s)| Opt::new(s.id.to_string(), s.name.clone(), i == 0))
                        .collect(),
                ),
            )
            .field(Field::new("select", "target", "On").options(targets))
            .field(
                Field::new("text", "cron", "Schedule (cron)")
                    .required()
                    .value("0 3 * * *")
                    .help("Five fields: minute hour day month weekday."),
            )
            .field(Field::new("text", "time_zone", "Time zone").value("UTC")),
        );
    }
    p.parts.push(part);
    render(&p)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AutomationForm {
    name: String,
    script: String,
    target: String,
    cron: String,
    time_zone: String,
}

/// `POST /o/{org}/automations`: `manage_automations create` through the pipeline, a schedule
/// running a library script on the chosen devices. The script and target must be this
/// organization's ("not found" otherwise); the tool checks the cron and the time zone.
async fn create_automation(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<AutomationForm>,
) -> Result<Response, PageError> {
    let scope = scope_for(&state, &f.who, &org, "manage_automations", "create").await?;
    let store = scope.store(&state);
    let script = kit::uuid(&f.form.script, "Script")?;
    store
        .scripts()
        .get_script(script)
        .await
        .map_err(kit::store_err("Script"))?;
    let target = match f.form.target.split_once(':') {
        None if f.form.target == "organization" => json!({ "type": "organization" }),
        Some(("site", raw)) => {
            let id = breeze_core::SiteId(kit::uuid(raw, "Site")?);
            store
                .tenancy()
                .get_site(id)
                .await
                .map_err(kit::store_err("Site"))?;
            json!({ "type": "site", "siteId": id.to_string() })
        }
        Some(("group", raw)) => {
            let id = breeze_core::DeviceGroupId(kit::uuid(raw, "Group")?);
            store
                .tenancy()
                .get_group(id)
                .await
                .map_err(kit::store_err("Group"))?;
            json!({ "type": "group", "groupId": id.to_string() })
        }
        _ => return Err(kit::not_found("Target")),
    };
    let to = format!("/o/{}/automations", scope.org.slug);
    let tz = match f.form.time_zone.trim() {
        "" => "UTC",
        tz => tz,
    };
    Ok(run_and_return(
        &state,
        &scope,
        "manage_automations",
        json!({
            "action": "create",
            "name": f.form.name.trim(),
            "trigger": { "kind": "schedule", "cron": f.form.cron.trim(), "timeZone": tz },
            "task": { "kind": "run_script", "scriptId": script.to_string() },
            "target": target,
            "enabled": true,
        }),
        request_id,
        &to,
    )
    .await)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SwitchForm {
    to: String,
}

/// `POST /o/{org}/automations/{id}/switch`: `manage_automations enable` or `disable`.
async fn switch_automation(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<SwitchForm>,
) -> Result<Response, PageError> {
    let action = match f.form.to.as_str() {
        "enable" => "enable",
        "disable" => "disable",
        _ => "no such action",
    };
    let scope = scope_for(&state, &f.who, &org, "manage_automations", action).await?;
    let id = kit::uuid(&id, "Automation")?;
    scope
        .store(&state)
        .automations()
        .get_automation(id)
        .await
        .map_err(kit::store_err("Automation"))?;
    let to = format!("/o/{}/automations", scope.org.slug);
    Ok(run_and_return(
        &state,
        &scope,
        "manage_automations",
        json!({ "action": action, "automationId": id.to_string() }),
        request_id,
        &to,
    )
    .await)
}
