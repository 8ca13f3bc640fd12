//! AI → Tool sources: the organization's sources (its own and partner-wide ones), adding one
//! (the slug previewed from the display name by `sources.js`, editable until saved), and a
//! source's page — state and error, warnings, the edit form, re-discover, enable or disable,
//! delete, its tools (proposed and effective tier, flags, enable or disable, set the tier,
//! the Tier 1 test call with JSON arguments showing the raw result and its duration), enable
//! all reads, disable all, and the operations discovery skipped.
//!
//! Pages authorize like `/api/v1/orgs/{org}/tool-sources` (reading needs
//! `external_tools.read`, every form `external_tools.write`, a partner-wide source
//! `partner_policies.manage` on a partner-wide role: `routes::tool_sources::owner_for`) and
//! call the same `breeze_sources` service. Another organization's source is 404 on every page
//! and form. Forms are plain posts (CSRF checked by [`SignedForm`]) answered by a redirect to
//! the source's page, or by the page again with the error or the test call's result.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use breeze_core::{
    AuditEvent, Operation, Permission,
    tool_source::{Known, MAX_SLUG, SourceKind},
};
use breeze_sources::{
    service::{Edit, NewSource, Owner, tier_from_number},
    vault::Credential,
};
use breeze_store::{SourceOwner, ToolChange, ToolSource, ToolSwitch};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{Layout, PageError, Section, SignedForm, SignedIn, assets, render_status};
use crate::{
    ApiError, AppState,
    authz::{OrgScope, partner_wide},
    extract::RequestId,
    routes::tool_sources::{PARTNER_WIDE_WARNING, owner_for, source_id, sources},
};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/ai/tool-sources", get(list).post(create))
        .route("/o/{org}/ai/tool-sources/new", get(new_form))
        .route("/o/{org}/ai/tool-sources/{id}", get(detail))
        .route("/o/{org}/ai/tool-sources/{id}/edit", post(edit))
        .route("/o/{org}/ai/tool-sources/{id}/discover", post(discover))
        .route("/o/{org}/ai/tool-sources/{id}/delete", post(delete))
        .route(
            "/o/{org}/ai/tool-sources/{id}/enable-reads",
            post(enable_reads),
        )
        .route(
            "/o/{org}/ai/tool-sources/{id}/disable-all",
            post(disable_all),
        )
        .route(
            "/o/{org}/ai/tool-sources/{id}/tools/{tool}",
            post(change_tool),
        )
        .route(
            "/o/{org}/ai/tool-sources/{id}/tools/{tool}/test",
            post(test),
        )
}

const READ: Operation = Operation::read(Permission::ExternalToolsRead);
const WRITE: Operation = Operation::write(Permission::ExternalToolsWrite);

/// A source in the list.
struct SourceRow {
    id: String,
    slug: String,
    name: String,
    kind: &'static str,
    url: String,
    state: &'static str,
    error: String,
    availability: &'static str,
    queued: bool,
    offered: bool,
}

fn availability(s: &ToolSource) -> &'static str {
    match s.owner {
        SourceOwner::Organization(_) => "This organization",
        SourceOwner::Partner(_) => "All organizations",
    }
}

impl SourceRow {
    fn new(s: &ToolSource) -> Self {
        Self {
            id: s.id.to_string(),
            slug: s.slug.to_string(),
            name: s.display_name.clone(),
            kind: s.kind.as_str(),
            url: s.url.clone(),
            state: s.state.as_str(),
            error: s.error.clone().unwrap_or_default(),
            availability: availability(s),
            queued: s.discovery_queued_at.is_some(),
            offered: s.offer_to_mcp,
        }
    }
}

#[derive(Template)]
#[template(path = "tool_sources.html")]
struct ListPage {
    l: Layout,
    sources: Vec<SourceRow>,
}

async fn list(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, READ).await?;
    let rows = sources(&state)?
        .list(scope.org.id)
        .await
        .map_err(ApiError::from)?
        .iter()
        .map(SourceRow::new)
        .collect();
    let l = layout(&state, &who, &scope, "Tool sources").await?;
    render_status(StatusCode::OK, &ListPage { l, sources: rows })
}

async fn layout(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    title: &str,
) -> Result<Layout, PageError> {
    Layout::for_user(state, who, Some(&scope.org), Section::ToolSources, title).await
}

/// The credential fields of the add and edit forms. Blank secret fields mean "keep the stored
/// credential" when editing.
#[derive(Debug, Default, Deserialize)]
struct CredentialFields {
    #[serde(default)]
    auth_method: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    header_name: String,
    #[serde(default)]
    header_value: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    token_url: String,
    #[serde(default)]
    client_id: String,
    #[serde(default)]
    client_secret: String,
    #[serde(default)]
    scope: String,
}

impl CredentialFields {
    /// The credential the fields give; `None` when the chosen method's secret was left blank.
    fn credential(&self) -> Option<Credential> {
        let f = |s: &str| s.trim().to_owned();
        match self.auth_method.as_str() {
            "none" => Some(Credential::None),
            "bearer" if !self.token.is_empty() => Some(Credential::Bearer {
                token: f(&self.token),
            }),
            "api_key_header" if !self.header_value.is_empty() => Some(Credential::ApiKeyHeader {
                header: f(&self.header_name),
                value: f(&self.header_value),
            }),
            "basic" if !self.password.is_empty() => Some(Credential::Basic {
                username: f(&self.username),
                password: self.password.clone(),
            }),
            "oauth2_client_credentials" if !self.client_secret.is_empty() => {
                Some(Credential::OAuth2ClientCredentials {
                    token_url: f(&self.token_url),
                    client_id: f(&self.client_id),
                    client_secret: f(&self.client_secret),
                    scope: Some(f(&self.scope)).filter(|s| !s.is_empty()),
                })
            }
            _ => None,
        }
    }
}

/// An authentication method in the form's select.
struct MethodChoice {
    value: &'static str,
    label: &'static str,
    selected: bool,
}

fn methods(selected: &str) -> Vec<MethodChoice> {
    [
        ("none", "None"),
        ("bearer", "Bearer token"),
        ("api_key_header", "API key header"),
        ("basic", "Username and password"),
        ("oauth2_client_credentials", "OAuth2 client credentials"),
    ]
    .into_iter()
    .map(|(value, label)| MethodChoice {
        value,
        label,
        selected: value == selected,
    })
    .collect()
}

#[derive(Debug, Default, Deserialize)]
struct CreateForm {
    #[serde(default)]
    display_name: String,
    #[serde(default)]
    slug: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    document_url: String,
    #[serde(default)]
    availability: String,
    #[serde(default)]
    offer_to_mcp: Option<String>,
    #[serde(flatten)]
    credential: CredentialFields,
}

#[derive(Template)]
#[template(path = "tool_source_new.html")]
struct NewPage {
    l: Layout,
    error: String,
    f: CreateForm,
    methods: Vec<MethodChoice>,
    max_slug: usize,
    script: &'static str,
}

async fn new_page(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    status: StatusCode,
    f: CreateForm,
    error: String,
) -> Result<Response, PageError> {
    let l = layout(state, who, scope, "Add a tool source").await?;
    let method = if f.credential.auth_method.is_empty() {
        "none".to_owned()
    } else {
        f.credential.auth_method.clone()
    };
    // Secrets never go back into a page, even the one just typed.
    let f = CreateForm {
        credential: CredentialFields {
            auth_method: method.clone(),
            header_name: f.credential.header_name,
            username: f.credential.username,
            token_url: f.credential.token_url,
            client_id: f.credential.client_id,
            scope: f.credential.scope,
            ..CredentialFields::default()
        },
        ..f
    };
    render_status(
        status,
        &NewPage {
            l,
            error,
            f,
            methods: methods(&method),
            max_slug: MAX_SLUG,
            script: assets::url("sources.js"),
        },
    )
}

async fn new_form(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, WRITE).await?;
    let f = CreateForm {
        kind: "mcp".into(),
        availability: "organization".into(),
        ..CreateForm::default()
    };
    new_page(&state, &who, &scope, StatusCode::OK, f, String::new()).await
}

/// A refusal the person can fix (shown on the form) or not (an error page).
fn fixable(e: &ApiError) -> bool {
    matches!(
        e.status,
        StatusCode::BAD_REQUEST | StatusCode::CONFLICT | StatusCode::FORBIDDEN
    )
}

async fn create(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<CreateForm>,
) -> Result<Response, PageError> {
    let who = f.who;
    let form = f.form;
    let scope = who.scope(&state, &org, WRITE).await?;
    let made = async {
        let kind: SourceKind = form
            .kind
            .parse()
            .map_err(|e: breeze_core::ParseError| ApiError::bad_request(e.to_string()))?;
        let owner = if form.availability == "all_organizations" {
            Owner::Partner(
                state
                    .store
                    .partner_tool_sources(partner_wide(&state, &scope).await?),
            )
        } else {
            Owner::Organization(state.store.org(scope.org.id).tool_sources())
        };
        let credential = form.credential.credential().ok_or_else(|| {
            ApiError::bad_request("enter the credential for the authentication method chosen")
        })?;
        let new = NewSource {
            display_name: form.display_name.clone(),
            slug: Some(form.slug.trim().to_owned()).filter(|s| !s.is_empty()),
            kind,
            url: form.url.trim().to_owned(),
            document_url: Some(form.document_url.trim().to_owned()).filter(|s| !s.is_empty()),
            credential,
            offer_to_mcp: form.offer_to_mcp.is_some(),
        };
        let created_by = scope.caller.actor().to_string();
        let audit = AuditEvent::new(scope.caller.actor(), "tool_source.create", "tool_source")
            .request(request_id);
        sources(&state)?
            .create(owner, new, &created_by, audit)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match made {
        Ok(s) => Ok(Redirect::to(&format!(
            "/o/{}/ai/tool-sources/{}?created=1",
            scope.org.slug, s.id
        ))
        .into_response()),
        Err(e) if fixable(&e) => new_page(&state, &who, &scope, e.status, form, e.message).await,
        Err(e) => Err(e.into()),
    }
}

/// A tool on the source's page.
struct ToolRow {
    name: String,
    address: String,
    description: String,
    proposed_tier: u8,
    tier: u8,
    tier_set: bool,
    enabled: bool,
    review_needed: bool,
    removed: bool,
    unusable: String,
    can_enable: bool,
    /// Only Tier 1 tools can be test-called.
    testable: bool,
    schema: String,
}

impl ToolRow {
    fn new(slug: &str, t: &Known) -> Self {
        Self {
            name: t.name.clone(),
            address: format!("{slug}__{}", t.name),
            description: t.description.clone(),
            proposed_tier: t.proposed_tier.number(),
            tier: t.tier.number(),
            tier_set: t.tier_set,
            enabled: t.enabled,
            review_needed: t.review_needed,
            removed: t.removed,
            unusable: t.unusable.clone().unwrap_or_default(),
            can_enable: t.can_enable().is_ok(),
            testable: t.tier == breeze_core::Tier::T1,
            schema: serde_json::to_string_pretty(&t.input_schema).unwrap_or_default(),
        }
    }
}

/// An operation discovery skipped.
struct Skipped {
    method: String,
    path: String,
    reason: String,
}

fn skipped(v: &Value) -> Vec<Skipped> {
    let text = |x: &Value| x.as_str().map_or_else(|| x.to_string(), str::to_owned);
    v.as_array()
        .map(|items| {
            items
                .iter()
                .map(|s| Skipped {
                    method: text(&s["method"]).to_uppercase(),
                    path: text(&s["path"]),
                    reason: text(&s["reason"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The outcome of a test call, for the page.
#[derive(Default)]
struct Tested {
    tool: String,
    arguments: String,
    result: String,
    is_error: bool,
    status: String,
    duration_ms: u128,
    failure: String,
}

#[derive(Template)]
#[template(path = "tool_source.html")]
struct DetailPage {
    l: Layout,
    s: SourceRow,
    document_url: String,
    auth_method: String,
    methods: Vec<MethodChoice>,
    partner_wide: bool,
    warnings: Vec<String>,
    discovered: String,
    tools: Vec<ToolRow>,
    skipped: Vec<Skipped>,
    notice: String,
    error: String,
    tested: Option<Tested>,
    script: &'static str,
}

/// What the source's page shows besides the source.
#[derive(Default)]
struct Banner {
    notice: String,
    error: String,
    tested: Option<Tested>,
}

async fn detail_page(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    id: Uuid,
    status: StatusCode,
    banner: Banner,
) -> Result<Response, PageError> {
    let s = sources(state)?;
    let source = s.get(scope.org.id, id).await.map_err(ApiError::from)?;
    let tools = s
        .tools(scope.org.id, id)
        .await
        .map_err(ApiError::from)?
        .iter()
        .map(|t| ToolRow::new(source.slug.as_str(), t))
        .collect();
    let l = layout(state, who, scope, &source.display_name).await?;
    render_status(
        status,
        &DetailPage {
            l,
            s: SourceRow::new(&source),
            document_url: source.document_url.clone().unwrap_or_default(),
            auth_method: source.auth_method.clone(),
            methods: methods(&source.auth_method),
            partner_wide: matches!(source.owner, SourceOwner::Partner(_)),
            warnings: source.warnings.clone(),
            discovered: source
                .discovered_at
                .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                .unwrap_or_default(),
            tools,
            skipped: skipped(&source.skipped),
            notice: banner.notice,
            error: banner.error,
            tested: banner.tested,
            script: assets::url("sources.js"),
        },
    )
}

#[derive(Deserialize)]
struct DetailQuery {
    created: Option<String>,
    done: Option<String>,
}

async fn detail(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
    Query(q): Query<DetailQuery>,
) -> Result<Response, PageError> {
    let scope = who.scope(&state, &org, READ).await?;
    let id = source_id(&id)?;
    let source = sources(&state)?
        .get(scope.org.id, id)
        .await
        .map_err(ApiError::from)?;
    let mut banner = Banner::default();
    if q.created.is_some() {
        banner.notice = "Source added; its discovery is queued and runs in a moment.".into();
        if matches!(source.owner, SourceOwner::Partner(_)) {
            banner.error = PARTNER_WIDE_WARNING.into();
        }
    } else if let Some(done) = q.done {
        banner.notice = match done.as_str() {
            "discover" => "Discovery queued: reload in a moment to see the tools.".into(),
            "edit" => "Source saved.".into(),
            "tool" => "Tool saved.".into(),
            "switch" => "Tools switched.".into(),
            _ => String::new(),
        };
    }
    detail_page(&state, &who, &scope, id, StatusCode::OK, banner).await
}

/// A form on a source's page: the scope (write), the source (this organization's or its
/// partner's), and the owner the person may change it as.
async fn acting_on<'a>(
    state: &'a AppState,
    who: &SignedIn,
    org: &str,
    id: &str,
) -> Result<(OrgScope, ToolSource, Owner<'a>), PageError> {
    let scope = who.scope(state, org, WRITE).await?;
    let source = sources(state)?
        .get(scope.org.id, source_id(id)?)
        .await
        .map_err(ApiError::from)?;
    let owner = owner_for(state, &scope, &source).await?;
    Ok((scope, source, owner))
}

/// The page again with `e` when the person can fix it, else the error page.
async fn refused(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    id: Uuid,
    e: ApiError,
) -> Result<Response, PageError> {
    if fixable(&e) {
        let banner = Banner {
            error: e.message,
            ..Banner::default()
        };
        detail_page(state, who, scope, id, e.status, banner).await
    } else {
        Err(e.into())
    }
}

fn back(scope: &OrgScope, id: Uuid, done: &str) -> Response {
    Redirect::to(&format!(
        "/o/{}/ai/tool-sources/{id}?done={done}",
        scope.org.slug
    ))
    .into_response()
}

fn audit(scope: &OrgScope, action: &str, request_id: Option<String>) -> AuditEvent {
    AuditEvent::new(scope.caller.actor(), action, "tool_source").request(request_id)
}

#[derive(Debug, Default, Deserialize)]
struct EditForm {
    #[serde(default)]
    display_name: String,
    /// `active` or `disabled`, from the enable/disable button.
    #[serde(default)]
    state: String,
    /// Present (from the edit form) to say the checkbox below was shown.
    #[serde(default)]
    offer_shown: Option<String>,
    #[serde(default)]
    offer_to_mcp: Option<String>,
    #[serde(flatten)]
    credential: CredentialFields,
}

async fn edit(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<EditForm>,
) -> Result<Response, PageError> {
    let who = f.who;
    let (scope, source, owner) = acting_on(&state, &who, &org, &id).await?;
    let form = f.form;
    let method = Some(form.credential.auth_method.clone()).filter(|m| !m.is_empty());
    let edit = Edit {
        display_name: Some(form.display_name.clone()).filter(|n| !n.trim().is_empty()),
        enabled: match form.state.as_str() {
            "active" => Some(true),
            "disabled" => Some(false),
            _ => None,
        },
        offer_to_mcp: form
            .offer_shown
            .as_ref()
            .map(|_| form.offer_to_mcp.is_some()),
        credential: method.as_ref().and(form.credential.credential()),
        auth_method: method,
    };
    let audit = audit(&scope, "tool_source.update", request_id);
    match sources(&state)?.edit(owner, source.id, edit, audit).await {
        Ok(_) => Ok(back(&scope, source.id, "edit")),
        Err(e) => refused(&state, &who, &scope, source.id, e.into()).await,
    }
}

/// A form with nothing but its CSRF token.
#[derive(Debug, Deserialize)]
struct Empty {}

async fn discover(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Empty>,
) -> Result<Response, PageError> {
    let (scope, source, owner) = acting_on(&state, &f.who, &org, &id).await?;
    let audit = audit(&scope, "tool_source.discover", request_id);
    match sources(&state)?
        .queue_discovery(owner, source.id, audit)
        .await
    {
        Ok(_) => Ok(back(&scope, source.id, "discover")),
        Err(e) => refused(&state, &f.who, &scope, source.id, e.into()).await,
    }
}

async fn delete(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Empty>,
) -> Result<Response, PageError> {
    let (scope, source, owner) = acting_on(&state, &f.who, &org, &id).await?;
    let audit = audit(&scope, "tool_source.delete", request_id);
    match sources(&state)?.delete(owner, source.id, audit).await {
        Ok(()) => {
            Ok(Redirect::to(&format!("/o/{}/ai/tool-sources", scope.org.slug)).into_response())
        }
        Err(e) => refused(&state, &f.who, &scope, source.id, e.into()).await,
    }
}

async fn switch(
    state: &AppState,
    f: SignedForm<Empty>,
    org: &str,
    id: &str,
    request_id: Option<String>,
    switch: ToolSwitch,
) -> Result<Response, PageError> {
    let (scope, source, owner) = acting_on(state, &f.who, org, id).await?;
    let audit = audit(&scope, "tool_source.tools_switch", request_id);
    match sources(state)?
        .switch_tools(owner, source.id, switch, audit)
        .await
    {
        Ok(_) => Ok(back(&scope, source.id, "switch")),
        Err(e) => refused(state, &f.who, &scope, source.id, e.into()).await,
    }
}

async fn enable_reads(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Empty>,
) -> Result<Response, PageError> {
    switch(&state, f, &org, &id, request_id, ToolSwitch::EnableReads).await
}

async fn disable_all(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Empty>,
) -> Result<Response, PageError> {
    switch(&state, f, &org, &id, request_id, ToolSwitch::DisableAll).await
}

#[derive(Debug, Deserialize)]
struct ToolForm {
    /// `true` / `false` from the enable button.
    #[serde(default)]
    enabled: Option<bool>,
    /// 1, 2 or 3 from the tier form.
    #[serde(default)]
    tier: Option<u8>,
}

async fn change_tool(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id, tool)): Path<(String, String, String)>,
    f: SignedForm<ToolForm>,
) -> Result<Response, PageError> {
    let (scope, source, owner) = acting_on(&state, &f.who, &org, &id).await?;
    let changed = async {
        let change = ToolChange {
            enabled: f.form.enabled,
            tier: f.form.tier.map(tier_from_number).transpose()?,
        };
        let audit = audit(&scope, "tool_source.tool_change", request_id);
        sources(&state)?
            .change_tool(owner, source.id, &tool, change, audit)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match changed {
        Ok(_) => Ok(back(&scope, source.id, "tool")),
        Err(e) => refused(&state, &f.who, &scope, source.id, e).await,
    }
}

#[derive(Debug, Deserialize)]
struct TestForm {
    #[serde(default)]
    arguments: String,
}

async fn test(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id, tool)): Path<(String, String, String)>,
    f: SignedForm<TestForm>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = who.scope(&state, &org, WRITE).await?;
    let id = source_id(&id)?;
    // 404 for another organization's source before anything else is looked at.
    sources(&state)?
        .get(scope.org.id, id)
        .await
        .map_err(ApiError::from)?;
    let text = if f.form.arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        f.form.arguments.clone()
    };
    let mut tested = Tested {
        tool: tool.clone(),
        arguments: text.clone(),
        ..Tested::default()
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(args) if args.is_object() => {
            let audit = AuditEvent::new(scope.caller.actor(), "external_tool.test", "tool_source")
                .request(request_id);
            match sources(&state)?
                .test_tool(scope.org.id, id, &tool, args, audit)
                .await
            {
                Ok(r) => {
                    tested.result = serde_json::to_string_pretty(&r.result).unwrap_or_default();
                    tested.is_error = r.is_error;
                    tested.status = r.status.map(|s| s.to_string()).unwrap_or_default();
                    tested.duration_ms = r.duration.as_millis();
                }
                Err(breeze_sources::service::CallFailure::Unknown(_)) => {
                    return Err(ApiError::not_found("tool not found").into());
                }
                Err(e) => tested.failure = e.to_string(),
            }
        }
        _ => {
            tested.failure =
                "The arguments must be a JSON object, like {\"q\": \"printer\"}.".into();
        }
    }
    let banner = Banner {
        tested: Some(tested),
        ..Banner::default()
    };
    detail_page(&state, &who, &scope, id, StatusCode::OK, banner).await
}
