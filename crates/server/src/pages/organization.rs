//! The organization in the console: sites and groups, people and roles, enrollment keys,
//! protected paths.
//!
//! `GET /o/{org}/groups` lists sites and device groups (static or dynamic, with each one's
//! member count), previews a dynamic filter's matches (`?filter=` JSON, the store's
//! `preview_filter`, as `manage_groups preview`), and creates a group through the pipeline
//! (`manage_groups create`, `POST …/groups`); `GET …/groups/{id}` shows a group's filter and
//! members. `GET /o/{org}/people` lists who reaches the organization with which role, and the
//! partner's roles with their permissions. `GET /o/{org}/enrollment` lists enrollment keys;
//! `POST` there makes one (the REST route's operation and `create_enrollment_key`) and shows
//! its secret once inside the one-line command that enrolls a new device, with a Copy button.
//! `POST …/enrollment/{id}/revoke` revokes a key (the REST `DELETE`'s operation and store call).
//! `POST …/groups/{id}` renames a group or edits its dynamic filter (`manage_groups update`
//! through the pipeline; its page previews a filter on the groups page first).
//! `POST …/people/role` gives a person who reaches the organization another role here (the
//! store call `breeze grants` makes), held to `users.manage`; nobody gives a role, or changes
//! the role of someone, holding a permission they lack, and a partner-wide role stays the
//! partner's to change.
//! `GET /o/{org}/channels` lists notification channels (email, webhook, in-app) by the
//! operation of `manage_alert_rules list_channels`; `POST` there adds one (a webhook's signing
//! secret made here and shown once) and `POST …/channels/{id}/delete` removes one, the store
//! calls `breeze channels` makes, held to `manage_alert_rules` `create` and `delete`.
//! `GET /o/{org}/protected-paths` shows the built-in list and the organization's additions,
//! replaced by `POST` (the REST `PUT`'s operation and store call).

use axum::{
    Router,
    extract::{Path, Query, State},
    http::Method,
    response::Response,
    routing::{get, post},
};
use breeze_agent_proto::paths::BUILTIN_PROTECTED;
use breeze_auth::CreateEnrollmentKey;
use breeze_core::{
    AuditEvent, DeviceGroupId, GroupFilter, Operation, Permission, PermissionSet, SiteId,
};
use serde::Deserialize;
use serde_json::json;

use super::device_actions::Outcome;
use super::kit::{
    self, Cell, Field, Form, Opt, Page, Part, RowForm, Table, route_operation, run_and_return, when,
};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{AppState, authz::OrgScope, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/groups", get(groups).post(create_group))
        .route("/o/{org}/groups/{id}", get(group).post(update_group))
        .route("/o/{org}/people", get(people))
        .route("/o/{org}/people/role", post(assign_role))
        .route("/o/{org}/enrollment", get(enrollment).post(create_key))
        .route("/o/{org}/enrollment/{id}/revoke", post(revoke_key))
        .route("/o/{org}/channels", get(channels).post(create_channel))
        .route("/o/{org}/channels/{id}/delete", post(delete_channel))
        .route(
            "/o/{org}/protected-paths",
            get(protected_paths).post(set_protected_paths),
        )
}

const TABS: &[(&str, &str)] = &[
    ("/groups", "Sites and groups"),
    ("/people", "People and roles"),
    ("/enrollment", "Add a device"),
    ("/channels", "Notification channels"),
    ("/protected-paths", "Protected paths"),
];

/// Longest life of an enrollment key made here (30 days), as the REST route allows.
const MAX_KEY_HOURS: i64 = 24 * 30;

fn page(l: Layout, heading: &str, slug: &str, current: &str, o: Outcome) -> Page {
    Page::new(l, heading)
        .outcome(o)
        .tabbed(slug, "Organization", TABS, current)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GroupsQuery {
    filter: String,
    done: String,
    failed: String,
}

async fn groups(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<GroupsQuery>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_groups", "list"),
        )
        .await?;
    let slug = scope.org.slug.clone();
    let store = scope.store(&state);
    let sites = store.tenancy().list_sites().await?;
    let mut st = Table::new(
        "sites",
        "Sites",
        &["Site", "Time zone", "Devices"],
        "No site.",
    );
    for s in &sites {
        let (_, count) = store
            .devices()
            .list_devices(
                &breeze_store::DeviceFilter {
                    site_id: Some(s.id),
                    ..Default::default()
                },
                1,
                0,
            )
            .await?;
        st.row(
            format!("site-{}", s.id),
            vec![
                Cell::text(s.name.clone()),
                Cell::text(s.timezone.clone()),
                Cell::link(
                    count.to_string(),
                    format!("/o/{slug}/devices?site={}", s.id),
                ),
            ],
        );
    }
    let filters = store.dynamic_groups().group_filters().await?;
    let mut gt = Table::new(
        "groups",
        "Groups",
        &["Group", "Kind", "Site", "Members", "Description"],
        "No group yet.",
    );
    for g in store.tenancy().list_groups().await? {
        let members = store.devices().group_members(g.id).await?.len();
        let site = g
            .site_id
            .and_then(|s| sites.iter().find(|x| x.id == s))
            .map_or_else(|| "—".to_owned(), |s| s.name.clone());
        gt.row(
            format!("group-{}", g.id),
            vec![
                Cell::link(g.name.clone(), format!("/o/{slug}/groups/{}", g.id)),
                Cell::text(if filters.contains_key(&g.id) {
                    "dynamic"
                } else {
                    "static"
                }),
                Cell::text(site),
                Cell::text(members.to_string()),
                Cell::text(g.description.clone().unwrap_or_default()),
            ],
        );
    }
    let mut preview = Part::new("preview", "Preview a dynamic filter").note(
        "A filter as JSON: {\"match\": \"all\" or \"any\", \"conditions\": [{\"field\": \"os\", \
         \"op\": \"eq\", \"value\": \"linux\"}]}. Fields: os, osName, osVersion, hostname, site, \
         status, agentVersion, tag, package, lastSeenMinutes, diskFreePercent.",
    );
    let raw = q.filter.trim();
    let mut error = q.failed;
    if !raw.is_empty() {
        match serde_json::from_str::<GroupFilter>(raw) {
            Ok(filter) => match store.dynamic_groups().preview_filter(&filter).await {
                Ok(devices) => {
                    let mut t = Table::new(
                        "matches",
                        "Matching devices",
                        &["Device", "OS", "Status"],
                        "No device matches this filter now.",
                    );
                    for d in devices.iter().take(200) {
                        t.row(
                            String::new(),
                            vec![
                                Cell::link(
                                    d.hostname.clone(),
                                    format!("/o/{slug}/devices/{}", d.id),
                                ),
                                Cell::text(format!("{} {}", d.os_name, d.os_version)),
                                Cell::status(d.status.as_str()),
                            ],
                        );
                    }
                    preview = preview
                        .fact("Matches now", devices.len().to_string())
                        .table(t);
                }
                Err(breeze_store::StoreError::Invalid(m)) => error = format!("Filter: {m}"),
                Err(e) => return Err(e.into()),
            },
            Err(e) => error = format!("Filter: {e}"),
        }
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Organization,
        "Sites and groups",
    )
    .await?;
    let mut p = page(
        l,
        "Sites and groups",
        &slug,
        "/groups",
        Outcome {
            done: q.done,
            failed: String::new(),
        },
    );
    p.error = error.chars().take(700).collect();
    p.parts.push(Part::new("site-list", "Sites").table(st));
    let mut groups_part = Part::new("group-list", "Groups").table(gt);
    if allowed(
        &state,
        &scope,
        tool_operation(&state, "manage_groups", "create"),
    ) {
        groups_part = groups_part.form(
            Form::new("new-group", "New group", format!("/o/{slug}/groups"), "Create group")
                .field(Field::new("text", "name", "Name").required())
                .field(Field::new("text", "description", "Description"))
                .field(
                    Field::new("textarea", "filter", "Dynamic filter (JSON, optional)")
                        .value(raw.to_owned())
                        .help("Leave empty for a static group; devices join from a device's page or the device list.")
                        .wide(),
                ),
        );
    }
    p.parts.push(groups_part);
    preview.forms.push(Form {
        id: "preview-form".into(),
        title: String::new(),
        action: String::new(),
        submit: "Preview".into(),
        fields: vec![
            Field::new("textarea", "filter", "Filter")
                .value(raw.to_owned())
                .wide(),
        ],
        get: true,
    });
    p.parts.push(preview);
    render(&p)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NewGroupForm {
    name: String,
    description: String,
    filter: String,
}

async fn create_group(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<NewGroupForm>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_groups", "create"),
        )
        .await?;
    let to = format!("/o/{}/groups", scope.org.slug);
    let mut args = json!({ "action": "create", "name": f.form.name.trim() });
    if !f.form.description.trim().is_empty() {
        args["description"] = json!(f.form.description.trim());
    }
    if !f.form.filter.trim().is_empty() {
        match serde_json::from_str::<serde_json::Value>(f.form.filter.trim()) {
            Ok(v) => args["filter"] = v,
            Err(e) => return Ok(kit::back_to(&to, false, &format!("Filter: {e}"))),
        }
    }
    Ok(run_and_return(&state, &scope, "manage_groups", args, request_id, &to).await)
}

async fn group(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, tool_operation(&state, "manage_groups", "get"))
        .await?;
    let slug = scope.org.slug.clone();
    let id = DeviceGroupId(kit::uuid(&id, "Group")?);
    let store = scope.store(&state);
    let g = store
        .tenancy()
        .get_group(id)
        .await
        .map_err(kit::store_err("Group"))?;
    let filter = store.dynamic_groups().group_filter(id).await?;
    let members = store.devices().group_members(id).await?;
    let mut t = Table::new(
        "members",
        "Members",
        &["Device", "OS", "Status"],
        "No member.",
    );
    for d in &members {
        t.row(
            format!("member-{}", d.id),
            vec![
                Cell::link(d.hostname.clone(), format!("/o/{slug}/devices/{}", d.id)),
                Cell::text(format!("{} {}", d.os_name, d.os_version)),
                Cell::status(d.status.as_str()),
            ],
        );
    }
    let mut about = Part::new("about", "Group")
        .fact(
            "Kind",
            if filter.is_some() {
                "dynamic"
            } else {
                "static"
            },
        )
        .fact("Members", members.len().to_string())
        .fact("Created", when(g.created_at));
    if let Some(d) = &g.description {
        about = about.fact("Description", d.clone());
    }
    let filter_text = filter
        .as_ref()
        .map(|f| serde_json::to_string_pretty(f).unwrap_or_default())
        .unwrap_or_default();
    about.pre.clone_from(&filter_text);
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Organization,
        &g.name,
    )
    .await?;
    let mut p = page(l, &g.name, &slug, "/groups", o);
    p.back = Some((format!("/o/{slug}/groups"), "Sites and groups".into()));
    p.parts.push(about);
    p.parts.push(Part::new("member-list", "Members").table(t));
    if allowed(
        &state,
        &scope,
        tool_operation(&state, "manage_groups", "update"),
    ) {
        let edit = Part::new("edit", "Edit the group")
            .note(
                "A filter makes the group dynamic: its members become the devices it matches. \
                 Preview a filter first; leave it as it is to keep the members.",
            )
            .form(
                Form::new(
                    "edit-group",
                    "",
                    format!("/o/{slug}/groups/{}", g.id),
                    "Save group",
                )
                .field(
                    Field::new("text", "name", "Name")
                        .required()
                        .value(g.name.clone()),
                )
                .field(
                    Field::new("text", "description", "Description")
                        .value(g.description.clone().unwrap_or_default()),
                )
                .field(
                    Field::new("textarea", "filter", "Dynamic filter (JSON)")
                        .value(filter_text.clone())
                        .wide(),
                ),
            )
            .form(Form {
                id: "edit-preview".into(),
                title: String::new(),
                action: format!("/o/{slug}/groups"),
                submit: "Preview matches".into(),
                fields: vec![
                    Field::new("textarea", "filter", "Filter to preview")
                        .value(filter_text)
                        .wide(),
                ],
                get: true,
            });
        p.parts.push(edit);
    }
    render(&p)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EditGroupForm {
    name: String,
    description: String,
    filter: String,
}

/// `POST /o/{org}/groups/{id}`: `manage_groups update` through the pipeline. An empty filter
/// leaves the group's kind and members as they are (the tool has no "make static").
async fn update_group(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<EditGroupForm>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_groups", "update"),
        )
        .await?;
    let id = DeviceGroupId(kit::uuid(&id, "Group")?);
    // Another organization's group is "not found" before anything is sent.
    scope
        .store(&state)
        .tenancy()
        .get_group(id)
        .await
        .map_err(kit::store_err("Group"))?;
    let to = format!("/o/{}/groups/{id}", scope.org.slug);
    let name = f.form.name.trim();
    if name.is_empty() {
        return Ok(kit::back_to(&to, false, "Name the group."));
    }
    let mut args = json!({
        "action": "update",
        "groupId": id.to_string(),
        "name": name,
        "description": f.form.description.trim(),
    });
    if !f.form.filter.trim().is_empty() {
        match serde_json::from_str::<serde_json::Value>(f.form.filter.trim()) {
            Ok(v) => args["filter"] = v,
            Err(e) => return Ok(kit::back_to(&to, false, &format!("Filter: {e}"))),
        }
    }
    Ok(run_and_return(&state, &scope, "manage_groups", args, request_id, &to).await)
}

/// Who may see the people of an organization: whoever manages its users.
fn people_operation() -> Operation {
    Operation::read(Permission::UsersManage)
}

/// Who may give a role here: whoever manages the organization's users (a change).
fn assign_operation() -> Operation {
    Operation::write(Permission::UsersManage)
}

/// Whether every permission of `role` is among `mine` (a session without a permission set is
/// judged as holding none): nobody hands out more than they hold.
fn within(mine: Option<PermissionSet>, role: PermissionSet) -> bool {
    let mine = mine.unwrap_or_default();
    role.iter().all(|p| mine.contains(p))
}

async fn people(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, people_operation()).await?;
    let slug = scope.org.slug.clone();
    let people = state.store.organization_people(scope.org.id).await?;
    let roles = state.store.list_roles(scope.org.partner_id).await?;
    let mut t = Table::new(
        "people",
        "People",
        &["Name", "Email", "Role", "Through"],
        "Nobody reaches this organization.",
    );
    for (id, name, email, role, partner_wide) in &people {
        t.row(
            format!("person-{id}"),
            vec![
                Cell::text(name.clone()),
                Cell::text(email.clone()),
                Cell::text(role.clone()),
                Cell::text(if *partner_wide {
                    "partner-wide role"
                } else {
                    "this organization"
                }),
            ],
        );
    }
    let mut rt = Table::new(
        "roles",
        "Roles",
        &["Role", "Description", "Permissions"],
        "No role.",
    );
    for r in &roles {
        let perms: Vec<&str> = r.permissions.iter().map(|p| p.as_str()).collect();
        rt.row(
            format!("role-{}", r.id),
            vec![
                Cell::text(if r.builtin {
                    format!("{} (built in)", r.name)
                } else {
                    r.name.clone()
                }),
                Cell::text(r.description.clone()),
                Cell::text(perms.join(", ")),
            ],
        );
    }
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Organization,
        "People and roles",
    )
    .await?;
    let mut p = page(l, "People and roles", &slug, "/people", o);
    p.intro = "People are added with `breeze users` on the server; here they are given a role \
               in this organization."
        .into();
    let mut people_part = Part::new("people-list", "People").table(t);
    if allowed(&state, &scope, assign_operation()) && people.iter().any(|p| !p.4) {
        let mine = scope.caller.permissions();
        people_part = people_part.form(
            Form::new(
                "assign-role",
                "Give a role in this organization",
                format!("/o/{slug}/people/role"),
                "Assign role",
            )
            .field(
                Field::new("select", "user", "Person").options(
                    people
                        .iter()
                        // A partner-wide role is the partner's to change (see `assign_role`).
                        .filter(|p| !p.4)
                        .enumerate()
                        .map(|(i, (id, name, email, _, _))| {
                            Opt::new(id.to_string(), format!("{name} ({email})"), i == 0)
                        })
                        .collect(),
                ),
            )
            .field(
                Field::new("select", "role", "Role").options(
                    roles
                        .iter()
                        // Only roles the assigning person could give (see `assign_role`).
                        .filter(|r| within(mine, r.permissions))
                        .map(|r| Opt::new(r.id.to_string(), r.name.clone(), false))
                        .collect(),
                ),
            ),
        );
    }
    p.parts.push(people_part);
    p.parts.push(Part::new("role-list", "Roles").table(rt));
    render(&p)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RoleForm {
    user: String,
    role: String,
}

/// `POST /o/{org}/people/role`: the person (one who reaches this organization already) holds
/// the role here from now on, replacing the one they held (the store call `breeze grants`
/// makes, audited; their keys act with the new role at once). A person or role outside this
/// organization's reach is "not found"; a role with a permission the assigning person lacks
/// is refused, so nobody raises themselves or anyone else above their own rights.
async fn assign_role(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<RoleForm>,
) -> Result<Response, PageError> {
    let scope = f.who.scope(&state, &org, assign_operation()).await?;
    let user = breeze_core::UserId(kit::uuid(&f.form.user, "Person")?);
    let role = breeze_core::RoleId(kit::uuid(&f.form.role, "Role")?);
    let people = state.store.organization_people(scope.org.id).await?;
    let Some((_, name, _, _, partner_wide)) = people.iter().find(|p| p.0 == user) else {
        return Err(kit::not_found("Person"));
    };
    let to = format!("/o/{}/people", scope.org.slug);
    if *partner_wide {
        // A role here would override the partner-wide one in this organization only, which
        // the partner decides.
        return Ok(kit::back_to(
            &to,
            false,
            &format!(
                "{name} reaches this organization through a partner-wide role; the partner \
                 changes it with `breeze grants`."
            ),
        ));
    }
    let roles = state.store.list_roles(scope.org.partner_id).await?;
    let Some(r) = roles.iter().find(|r| r.id == role) else {
        return Err(kit::not_found("Role"));
    };
    // Nobody changes the role of someone holding more than they do, either.
    let held = state
        .store
        .org_access(user, scope.org.id)
        .await?
        .map(|a| a.permissions)
        .unwrap_or_default();
    if !within(scope.caller.permissions(), r.permissions)
        || !within(scope.caller.permissions(), held)
    {
        return Err(crate::ApiError::forbidden(format!(
            "Either the role {} or {name}'s present role holds permissions you do not have \
             here; only roles within your own are changed.",
            r.name
        ))
        .into());
    }
    let audit =
        AuditEvent::new(scope.caller.actor(), "user.role.assign", "user").request(request_id);
    match state
        .store
        .assign_role(user, scope.org.id, role, audit)
        .await
    {
        Ok(()) => Ok(kit::back_to(
            &to,
            true,
            &format!("{name} now holds the role {} here.", r.name),
        )),
        Err(breeze_store::StoreError::Invalid(m)) => Ok(kit::back_to(&to, false, &m)),
        Err(e) => Err(e.into()),
    }
}

/// The one line that enrolls a new Linux device with `key` and starts its agent.
pub(crate) fn install_command(public_url: &str, key: &str) -> String {
    format!(
        "sudo breeze-agent enroll --server {} --key {key} && sudo systemctl enable --now breeze-agent",
        public_url.trim_end_matches('/')
    )
}

async fn enrollment_page(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    created: Option<(String, String)>,
    o: Outcome,
) -> Result<Response, PageError> {
    let slug = scope.org.slug.clone();
    let store = scope.store(state);
    let sites = store.tenancy().list_sites().await?;
    let now = state.clock.now();
    let can_revoke = allowed(
        state,
        scope,
        route_operation(&Method::DELETE, "/orgs/{org}/enrollment-keys/{id}"),
    );
    let mut headers = vec!["Key", "Site", "Uses", "Expires", "State"];
    if can_revoke {
        headers.push("Actions");
    }
    let mut t = Table::new(
        "keys",
        "Enrollment keys",
        &headers,
        "No enrollment key yet.",
    )
    .csrf(&who.csrf);
    for k in store.agents().list_enrollment_keys().await? {
        let site = sites
            .iter()
            .find(|s| s.id == k.site_id)
            .map_or_else(|| "—".to_owned(), |s| s.name.clone());
        let state_cell = if k.revoked_at.is_some() {
            "revoked"
        } else if k.expires_at <= now || k.max_uses.is_some_and(|m| k.uses >= m) {
            "expired"
        } else {
            "active"
        };
        let mut cells = vec![
            Cell::text(format!("{} ({}…)", k.name, k.key_prefix)),
            Cell::text(site),
            Cell::text(match k.max_uses {
                Some(m) => format!("{} of {m}", k.uses),
                None => k.uses.to_string(),
            }),
            Cell::text(when(k.expires_at)),
            Cell::status(state_cell),
        ];
        if can_revoke {
            // Only a key that could still enroll a device has anything to revoke.
            cells.push(Cell::forms(if state_cell == "active" {
                vec![
                    RowForm::new(
                        format!("/o/{slug}/enrollment/{}/revoke", k.id),
                        "Revoke",
                        format!("Revoke the key {}", k.name),
                    )
                    .danger("Revoke this key? Devices not yet enrolled with it cannot use it."),
                ]
            } else {
                Vec::new()
            }));
        }
        t.row(format!("key-{}", k.id), cells);
    }
    let l = Layout::for_user(
        state,
        who,
        Some(&scope.org),
        Section::Organization,
        "Add a device",
    )
    .await?;
    let mut p = page(l, "Add a device", &slug, "/enrollment", o);
    if let Some((name, secret)) = created {
        let mut part = Part::new("install", "Install command").note(format!(
            "Run this as root on the new Linux device (with breeze-agent and \
                 packaging/breeze-agent.service installed). It holds the key {name}, shown only \
                 now: Breeze keeps its hash."
        ));
        part.copy = install_command(&state.config.public_url, &secret);
        p.parts.push(part);
    }
    let mut keys = Part::new("key-list", "Enrollment keys").table(t);
    if allowed(
        state,
        scope,
        route_operation(&Method::POST, "/orgs/{org}/enrollment-keys"),
    ) {
        keys = keys.form(
            Form::new(
                "new-key",
                "New enrollment key",
                format!("/o/{slug}/enrollment"),
                "Create key and show the command",
            )
            .field(
                Field::new("text", "name", "Name")
                    .required()
                    .value("New devices"),
            )
            .field(
                Field::new("select", "site", "Site").options(
                    sites
                        .iter()
                        .enumerate()
                        .map(|(i, s)| Opt::new(s.id.to_string(), s.name.clone(), i == 0))
                        .collect(),
                ),
            )
            .field(
                Field::new("number", "max_uses", "Most devices")
                    .value("10")
                    .help("Empty: no limit."),
            )
            .field(
                Field::new("number", "hours", "Valid for (hours)")
                    .value("24")
                    .help("1 to 720."),
            ),
        );
    }
    p.parts.push(keys);
    render(&p)
}

async fn enrollment(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            route_operation(&Method::GET, "/orgs/{org}/enrollment-keys"),
        )
        .await?;
    enrollment_page(&state, &who, &scope, None, o).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct KeyForm {
    name: String,
    site: String,
    max_uses: String,
    hours: String,
}

async fn create_key(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<KeyForm>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(
            &state,
            &org,
            route_operation(&Method::POST, "/orgs/{org}/enrollment-keys"),
        )
        .await?;
    let form = f.form;
    let fail = |m: &str| Outcome {
        done: String::new(),
        failed: m.to_owned(),
    };
    let site = match uuid::Uuid::parse_str(form.site.trim()) {
        Ok(s) => SiteId(s),
        Err(_) => {
            return enrollment_page(&state, &f.who, &scope, None, fail("Choose a site.")).await;
        }
    };
    let hours = match form.hours.trim() {
        "" => 24,
        h => match h.parse::<i64>() {
            Ok(h) if (1..=MAX_KEY_HOURS).contains(&h) => h,
            _ => {
                return enrollment_page(
                    &state,
                    &f.who,
                    &scope,
                    None,
                    fail("Valid for: 1 to 720 hours."),
                )
                .await;
            }
        },
    };
    let max_uses = match form.max_uses.trim() {
        "" => None,
        m => match m.parse::<u32>() {
            Ok(m) if m > 0 => Some(m),
            _ => {
                return enrollment_page(
                    &state,
                    &f.who,
                    &scope,
                    None,
                    fail("Most devices: a whole number above 0, or empty."),
                )
                .await;
            }
        },
    };
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "enrollment_key.create",
        "enrollment_key",
    )
    .request(request_id);
    let created = state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: scope.org.id,
                site_id: site,
                name: form.name.trim().to_owned(),
                max_uses,
                expires_at: state.clock.now() + chrono::Duration::hours(hours),
                created_by: scope.caller.actor().to_string(),
            },
            audit,
        )
        .await;
    match created {
        Ok((secret, record)) => {
            let o = Outcome {
                done: format!("Created the key {}.", record.name),
                failed: String::new(),
            };
            enrollment_page(
                &state,
                &f.who,
                &scope,
                Some((record.name, secret.expose().to_owned())),
                o,
            )
            .await
        }
        Err(e) => {
            let api = crate::ApiError::from(e);
            if api.status == axum::http::StatusCode::NOT_FOUND {
                return Err(kit::not_found("Site"));
            }
            Err(api.into())
        }
    }
}

/// `POST /o/{org}/enrollment/{id}/revoke`: the REST `DELETE`'s operation and store call.
/// Devices already enrolled with the key keep their own credentials.
async fn revoke_key(
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
            route_operation(&Method::DELETE, "/orgs/{org}/enrollment-keys/{id}"),
        )
        .await?;
    let id = kit::uuid(&id, "Enrollment key")?;
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "enrollment_key.revoke",
        "enrollment_key",
    )
    .request(request_id);
    let key = scope
        .store(&state)
        .agents()
        .revoke_enrollment_key(id, audit)
        .await
        .map_err(kit::store_err("Enrollment key"))?;
    Ok(kit::back_to(
        &format!("/o/{}/enrollment", scope.org.slug),
        true,
        &format!("Revoked the key {}.", key.name),
    ))
}

async fn protected_paths(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            route_operation(&Method::GET, "/orgs/{org}/protected-paths"),
        )
        .await?;
    let slug = scope.org.slug.clone();
    let additions = scope.store(&state).commands().protected_paths().await?;
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Organization,
        "Protected paths",
    )
    .await?;
    let mut p = page(l, "Protected paths", &slug, "/protected-paths", o);
    p.intro =
        "Agents refuse file and disk commands on these paths whatever the server sends.".into();
    let mut builtin = Part::new("builtin", "Built in (every device)");
    builtin.pre = BUILTIN_PROTECTED.join("\n");
    let mut mine = Part::new("additions", "This organization's additions");
    if additions.is_empty() {
        mine.note = "None yet.".into();
    } else {
        mine.pre = additions.join("\n");
    }
    if allowed(
        &state,
        &scope,
        route_operation(&Method::PUT, "/orgs/{org}/protected-paths"),
    ) {
        mine = mine.form(
            Form::new(
                "paths-form",
                "Change the additions",
                format!("/o/{slug}/protected-paths"),
                "Save",
            )
            .field(
                Field::new("textarea", "additions", "Paths, one a line")
                    .value(additions.join("\n"))
                    .help("Absolute paths or globs (* within a name, ** across directories).")
                    .wide(),
            ),
        );
    }
    p.parts.push(mine);
    p.parts.push(builtin);
    render(&p)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PathsForm {
    additions: String,
}

async fn set_protected_paths(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<PathsForm>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(
            &state,
            &org,
            route_operation(&Method::PUT, "/orgs/{org}/protected-paths"),
        )
        .await?;
    let to = format!("/o/{}/protected-paths", scope.org.slug);
    let list: Vec<String> = f
        .form
        .additions
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "org.protected_paths.set",
        "organization",
    )
    .request(request_id)
    .resource(scope.org.id);
    match scope
        .store(&state)
        .commands()
        .set_protected_paths(&list, audit)
        .await
    {
        Ok(saved) => Ok(kit::back_to(
            &to,
            true,
            &format!("Saved {} protected path(s).", saved.len()),
        )),
        Err(breeze_store::StoreError::Invalid(m)) => Ok(kit::back_to(&to, false, &m)),
        Err(e) => Err(e.into()),
    }
}

async fn channels_page(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    secret: Option<(String, String)>,
    o: Outcome,
) -> Result<Response, PageError> {
    let slug = scope.org.slug.clone();
    let can_delete = allowed(
        state,
        scope,
        tool_operation(state, "manage_alert_rules", "delete"),
    );
    let mut headers = vec!["Channel", "Kind", "Sends to", "State"];
    if can_delete {
        headers.push("Actions");
    }
    let mut t = Table::new(
        "channels",
        "Notification channels",
        &headers,
        "No channel yet: alerts show only in the console.",
    )
    .csrf(&who.csrf);
    for c in scope.store(state).alerts().list_channels().await? {
        let to = match c.kind {
            breeze_core::ChannelKind::Email => c.config["to"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(serde_json::Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default(),
            breeze_core::ChannelKind::Webhook => {
                c.config["url"].as_str().unwrap_or_default().to_owned()
            }
            breeze_core::ChannelKind::InApp => "the console and tools".to_owned(),
        };
        let mut cells = vec![
            Cell::text(c.name.clone()),
            Cell::text(c.kind.as_str().replace('_', "-")),
            Cell::text(to),
            Cell::status(if c.enabled { "active" } else { "disabled" }),
        ];
        if can_delete {
            cells.push(Cell::forms(vec![
                RowForm::new(
                    format!("/o/{slug}/channels/{}/delete", c.id),
                    "Delete",
                    format!("Delete the channel {}", c.name),
                )
                .danger("Delete this channel? Alert rules must no longer name it."),
            ]));
        }
        t.row(format!("channel-{}", c.id), cells);
    }
    let l = Layout::for_user(
        state,
        who,
        Some(&scope.org),
        Section::Organization,
        "Notification channels",
    )
    .await?;
    let mut p = page(l, "Notification channels", &slug, "/channels", o);
    p.intro =
        "Where alert rules tell raised and resolved alerts; a rule names its channels.".into();
    if let Some((name, secret)) = secret {
        let mut part = Part::new("signing-secret", "Signing secret").note(format!(
            "The webhook {name} signs each request with this secret (HMAC-SHA256). Give it to \
             the receiver now: it is not shown again."
        ));
        part.copy = secret;
        p.parts.push(part);
    }
    let mut list = Part::new("channel-list", "Channels").table(t);
    if allowed(
        state,
        scope,
        tool_operation(state, "manage_alert_rules", "create"),
    ) {
        list = list.form(
            Form::new(
                "new-channel",
                "New channel",
                format!("/o/{slug}/channels"),
                "Add channel",
            )
            .field(Field::new("text", "name", "Name").required())
            .field(Field::new("select", "kind", "Kind").options(vec![
                Opt::new("email", "Email", true),
                Opt::new("webhook", "Webhook", false),
                Opt::new("in_app", "In the console", false),
            ]))
            .field(
                Field::new("text", "to", "Email recipients")
                    .help("Email: addresses separated by commas (1 to 20)."),
            )
            .field(
                Field::new("url", "url", "Webhook URL")
                    .help("Webhook: the http(s) address alerts are posted to."),
            ),
        );
    }
    p.parts.push(list);
    render(&p)
}

async fn channels(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(o): Query<Outcome>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_alert_rules", "list_channels"),
        )
        .await?;
    channels_page(&state, &who, &scope, None, o).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChannelForm {
    name: String,
    kind: String,
    to: String,
    url: String,
}

/// `POST /o/{org}/channels`: the store call `breeze channels add` makes, audited as the
/// person. A webhook's signing secret is made here (never typed into a page) and shown once.
async fn create_channel(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<ChannelForm>,
) -> Result<Response, PageError> {
    let scope = f
        .who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_alert_rules", "create"),
        )
        .await?;
    let to = format!("/o/{}/channels", scope.org.slug);
    let kind = match f.form.kind.parse::<breeze_core::ChannelKind>() {
        Ok(k) => k,
        Err(e) => return Ok(kit::back_to(&to, false, &e.to_string())),
    };
    let (config, secret) = match kind {
        breeze_core::ChannelKind::Email => {
            let to: Vec<&str> = f
                .form
                .to
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .collect();
            (json!({ "to": to }), None)
        }
        breeze_core::ChannelKind::Webhook => (
            json!({ "url": f.form.url.trim() }),
            Some(breeze_auth::api_key::random_token(&mut rand::rngs::OsRng)),
        ),
        breeze_core::ChannelKind::InApp => (json!({}), None),
    };
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "notification_channel.create",
        "notification_channel",
    )
    .request(request_id);
    let created = scope
        .store(&state)
        .alerts()
        .create_channel(
            breeze_store::NewChannel {
                name: f.form.name.trim().to_owned(),
                kind,
                config,
                secret: secret.clone(),
            },
            audit,
        )
        .await;
    match created {
        Ok(c) => {
            let o = Outcome {
                done: format!("Added the channel {}.", c.name),
                failed: String::new(),
            };
            channels_page(&state, &f.who, &scope, secret.map(|s| (c.name, s)), o).await
        }
        Err(breeze_store::StoreError::Invalid(m) | breeze_store::StoreError::Conflict(m)) => {
            Ok(kit::back_to(&to, false, &m))
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /o/{org}/channels/{id}/delete`: the store call `breeze channels remove` makes; a
/// channel a rule still names is refused with the rules' names.
async fn delete_channel(
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
            tool_operation(&state, "manage_alert_rules", "delete"),
        )
        .await?;
    let id = kit::uuid(&id, "Channel")?;
    let to = format!("/o/{}/channels", scope.org.slug);
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "notification_channel.delete",
        "notification_channel",
    )
    .request(request_id);
    match scope.store(&state).alerts().delete_channel(id, audit).await {
        Ok(c) => Ok(kit::back_to(
            &to,
            true,
            &format!("Deleted the channel {}.", c.name),
        )),
        Err(breeze_store::StoreError::Conflict(m)) => Ok(kit::back_to(&to, false, &m)),
        Err(e) => Err(kit::store_err("Channel")(e)),
    }
}
