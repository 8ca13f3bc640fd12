//! Tool sources over REST (`/api/v1/orgs/{org}/tool-sources…`): everything `breeze sources`
//! does — add, list, read, edit (credential rule included), enable or disable, delete,
//! re-discover (queued), list tools, set a tool's tier, enable or disable one, enable all
//! reads, disable all, and the Tier 1 test call.
//!
//! Reading needs `external_tools.read`, changing `external_tools.write` (declared in
//! `authz::ORG_ROUTES`); a partner-wide source is changed only by a person whose partner-wide
//! role holds `partner_policies.manage` (`authz::partner_wide`), checked here at the door
//! before the service is handed the partner's handle. Credentials are never returned. The
//! handlers only translate: `breeze_sources::service::Sources` does the work, as for the CLI.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::{get, patch, post},
};
use breeze_core::{AuditEvent, tool_source::Known};
use breeze_sources::{
    service::{Edit, NewSource, Owner, Sources, tier_from_number},
    vault::Credential,
};
use breeze_store::{SourceOwner, ToolChange, ToolSource, ToolSwitch};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    ApiError, AppState,
    authz::{OrgScope, partner_wide},
    extract::{Json as JsonBody, RequestId},
};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/tool-sources", get(list).post(create))
        .route(
            "/orgs/{org}/tool-sources/{source}",
            get(show).patch(edit).delete(remove),
        )
        .route("/orgs/{org}/tool-sources/{source}/discover", post(discover))
        .route("/orgs/{org}/tool-sources/{source}/tools", get(tools))
        .route(
            "/orgs/{org}/tool-sources/{source}/enable-reads",
            post(enable_reads),
        )
        .route(
            "/orgs/{org}/tool-sources/{source}/disable-all",
            post(disable_all),
        )
        .route(
            "/orgs/{org}/tool-sources/{source}/tools/{tool}",
            patch(change_tool),
        )
        .route(
            "/orgs/{org}/tool-sources/{source}/tools/{tool}/test",
            post(test),
        )
}

/// The services, or 503 when the server's egress settings left them off.
pub(crate) fn sources(state: &AppState) -> Result<&Sources, ApiError> {
    state.pipeline.sources().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "tool_sources_unavailable",
            "tool sources are off on this server (its egress settings failed; see its log)",
        )
    })
}

/// The owner the caller may change `source` as: its organization's handle, or — after the
/// partner-wide check — the partner's.
pub(crate) async fn owner_for<'a>(
    state: &'a AppState,
    scope: &OrgScope,
    source: &ToolSource,
) -> Result<Owner<'a>, ApiError> {
    match source.owner {
        SourceOwner::Organization(o) if o == scope.org.id => {
            Ok(Owner::Organization(state.store.org(o).tool_sources()))
        }
        SourceOwner::Organization(_) => Err(ApiError::not_found("tool source not found")),
        SourceOwner::Partner(_) => {
            let p = partner_wide(state, scope).await?;
            Ok(Owner::Partner(state.store.partner_tool_sources(p)))
        }
    }
}

/// A source id from the path; a malformed one is as unknown as another organization's.
pub(crate) fn source_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found("tool source not found"))
}

fn audit(scope: &OrgScope, action: &str, request_id: Option<String>) -> AuditEvent {
    AuditEvent::new(scope.caller.actor(), action, "tool_source").request(request_id)
}

/// A tool as the API shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolView {
    name: String,
    /// `<slug>__<name>`, the name it is listed and called by.
    address: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    annotations: Value,
    definition_hash: String,
    proposed_tier: u8,
    tier: u8,
    tier_set: bool,
    enabled: bool,
    review_needed: bool,
    removed: bool,
    unusable: Option<String>,
}

impl ToolView {
    pub(crate) fn new(slug: &str, t: Known) -> Self {
        Self {
            address: format!("{slug}__{}", t.name),
            name: t.name,
            description: t.description,
            input_schema: t.input_schema,
            output_schema: t.output_schema,
            annotations: t.annotations,
            definition_hash: t.definition_hash,
            proposed_tier: t.proposed_tier.number(),
            tier: t.tier.number(),
            tier_set: t.tier_set,
            enabled: t.enabled,
            review_needed: t.review_needed,
            removed: t.removed,
            unusable: t.unusable,
        }
    }
}

async fn list(
    State(state): State<AppState>,
    scope: OrgScope,
) -> Result<Json<Vec<ToolSource>>, ApiError> {
    Ok(Json(sources(&state)?.list(scope.org.id).await?))
}

/// Who a new source serves.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Availability {
    /// This organization only.
    #[default]
    Organization,
    /// Every organization of the partner.
    AllOrganizations,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Create {
    display_name: String,
    slug: Option<String>,
    kind: breeze_core::tool_source::SourceKind,
    url: String,
    document_url: Option<String>,
    #[serde(default)]
    credential: Option<Credential>,
    #[serde(default)]
    availability: Availability,
    #[serde(default)]
    offer_to_mcp: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Created {
    #[serde(flatten)]
    source: ToolSource,
    /// For a partner-wide source: one credential serves every organization's assistant.
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<&'static str>,
}

/// The warning a partner-wide source's creation carries.
pub(crate) const PARTNER_WIDE_WARNING: &str = "This source is available to all organizations: \
     its one credential serves every organization's assistant, so everything it can reach is \
     reachable from each of them.";

async fn create(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    JsonBody(req): JsonBody<Create>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let owner = match req.availability {
        Availability::Organization => {
            Owner::Organization(state.store.org(scope.org.id).tool_sources())
        }
        Availability::AllOrganizations => {
            let p = partner_wide(&state, &scope).await?;
            Owner::Partner(state.store.partner_tool_sources(p))
        }
    };
    let new = NewSource {
        display_name: req.display_name,
        slug: req.slug.filter(|s| !s.is_empty()),
        kind: req.kind,
        url: req.url,
        document_url: req.document_url.filter(|s| !s.is_empty()),
        credential: req.credential.unwrap_or(Credential::None),
        offer_to_mcp: req.offer_to_mcp,
    };
    let created_by = scope.caller.actor().to_string();
    let source = sources(&state)?
        .create(
            owner,
            new,
            &created_by,
            audit(&scope, "tool_source.create", request_id),
        )
        .await?;
    let warning = matches!(source.owner, SourceOwner::Partner(_)).then_some(PARTNER_WIDE_WARNING);
    Ok((StatusCode::CREATED, Json(Created { source, warning })))
}

#[derive(Serialize)]
struct Detail {
    #[serde(flatten)]
    source: ToolSource,
    tools: Vec<ToolView>,
}

async fn show(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, source)): Path<(String, String)>,
) -> Result<Json<Detail>, ApiError> {
    let s = sources(&state)?;
    let source = s.get(scope.org.id, source_id(&source)?).await?;
    let tools = s.tools(scope.org.id, source.id).await?;
    let slug = source.slug.to_string();
    Ok(Json(Detail {
        source,
        tools: tools.into_iter().map(|t| ToolView::new(&slug, t)).collect(),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EditBody {
    display_name: Option<String>,
    enabled: Option<bool>,
    offer_to_mcp: Option<bool>,
    auth_method: Option<String>,
    credential: Option<Credential>,
}

async fn edit(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, source)): Path<(String, String)>,
    JsonBody(req): JsonBody<EditBody>,
) -> Result<Json<ToolSource>, ApiError> {
    let s = sources(&state)?;
    let source = s.get(scope.org.id, source_id(&source)?).await?;
    let owner = owner_for(&state, &scope, &source).await?;
    let edit = Edit {
        display_name: req.display_name,
        enabled: req.enabled,
        offer_to_mcp: req.offer_to_mcp,
        auth_method: req.auth_method,
        credential: req.credential,
    };
    let audit = audit(&scope, "tool_source.update", request_id);
    Ok(Json(s.edit(owner, source.id, edit, audit).await?))
}

async fn remove(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, source)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let s = sources(&state)?;
    let source = s.get(scope.org.id, source_id(&source)?).await?;
    let owner = owner_for(&state, &scope, &source).await?;
    s.delete(
        owner,
        source.id,
        audit(&scope, "tool_source.delete", request_id),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `202 Accepted`: the discovery is queued; the source shows `discoveryQueuedAt` until it ran.
async fn discover(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, source)): Path<(String, String)>,
) -> Result<(StatusCode, Json<ToolSource>), ApiError> {
    let s = sources(&state)?;
    let source = s.get(scope.org.id, source_id(&source)?).await?;
    let owner = owner_for(&state, &scope, &source).await?;
    let audit = audit(&scope, "tool_source.discover", request_id);
    let queued = s.queue_discovery(owner, source.id, audit).await?;
    Ok((StatusCode::ACCEPTED, Json(queued)))
}

async fn tools(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, source)): Path<(String, String)>,
) -> Result<Json<Vec<ToolView>>, ApiError> {
    let s = sources(&state)?;
    let source = s.get(scope.org.id, source_id(&source)?).await?;
    let slug = source.slug.to_string();
    let tools = s.tools(scope.org.id, source.id).await?;
    Ok(Json(
        tools.into_iter().map(|t| ToolView::new(&slug, t)).collect(),
    ))
}

#[derive(Serialize)]
struct Switched {
    changed: u64,
}

async fn switch(
    state: &AppState,
    scope: &OrgScope,
    request_id: Option<String>,
    source: &str,
    switch: ToolSwitch,
) -> Result<Json<Switched>, ApiError> {
    let s = sources(state)?;
    let source = s.get(scope.org.id, source_id(source)?).await?;
    let owner = owner_for(state, scope, &source).await?;
    let audit = audit(scope, "tool_source.tools_switch", request_id);
    let changed = s.switch_tools(owner, source.id, switch, audit).await?;
    Ok(Json(Switched { changed }))
}

async fn enable_reads(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, source)): Path<(String, String)>,
) -> Result<Json<Switched>, ApiError> {
    switch(&state, &scope, request_id, &source, ToolSwitch::EnableReads).await
}

async fn disable_all(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, source)): Path<(String, String)>,
) -> Result<Json<Switched>, ApiError> {
    switch(&state, &scope, request_id, &source, ToolSwitch::DisableAll).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolBody {
    enabled: Option<bool>,
    /// 1, 2 or 3; setting it (even to the same tier) clears "review needed".
    tier: Option<u8>,
}

async fn change_tool(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, source, tool)): Path<(String, String, String)>,
    JsonBody(req): JsonBody<ToolBody>,
) -> Result<Json<ToolView>, ApiError> {
    let s = sources(&state)?;
    let source = s.get(scope.org.id, source_id(&source)?).await?;
    let owner = owner_for(&state, &scope, &source).await?;
    let change = ToolChange {
        enabled: req.enabled,
        tier: req.tier.map(tier_from_number).transpose()?,
    };
    let audit = audit(&scope, "tool_source.tool_change", request_id);
    let t = s
        .change_tool(owner, source.id, &tool, change, audit)
        .await?;
    Ok(Json(ToolView::new(source.slug.as_str(), t)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TestBody {
    #[serde(default = "empty_object")]
    arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Tested {
    /// The upstream's raw answer.
    result: Value,
    /// The upstream called it an error.
    is_error: bool,
    /// The HTTP status of an OpenAPI call.
    status: Option<u16>,
    duration_ms: u64,
}

/// The Tier 1 test call: a real call with the source's credential, enabled or not.
async fn test(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, source, tool)): Path<(String, String, String)>,
    JsonBody(req): JsonBody<TestBody>,
) -> Result<Json<Tested>, ApiError> {
    if !req.arguments.is_object() {
        return Err(ApiError::bad_request("arguments must be a JSON object"));
    }
    let s = sources(&state)?;
    let id = source_id(&source)?;
    let audit = AuditEvent::new(scope.caller.actor(), "external_tool.test", "tool_source")
        .request(request_id);
    let r = s
        .test_tool(scope.org.id, id, &tool, req.arguments, audit)
        .await?;
    Ok(Json(Tested {
        result: r.result,
        is_error: r.is_error,
        status: r.status,
        duration_ms: u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
    }))
}
