//! Breeze as an MCP application: API-key and OAuth bearer-token authentication (a token acts
//! exactly as a key of its grant's user would, through the same guard and pipeline), the
//! scope-filtered catalogue, tool calls translated to and from the call pipeline (`breeze-pipeline`, which owns the guard,
//! validation, approval and the handler), resources, prompts, and an audit record for every
//! request.

use std::{collections::HashMap, sync::Arc};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use breeze_auth::AuthError;
use breeze_core::{AuditEvent, AuditResult, OrgId, Tier};
use breeze_guard::{Guard, Refusal};
use breeze_mcp::{
    Client, Cx, HttpError, McpApp, RequestRecord, TransportEvent, TransportRecord,
    jsonrpc::{ErrorObject, codes},
    model::{
        CallToolResult, Content, GetPromptResult, PromptArgument, PromptDef, PromptMessage,
        ResourceContents, ResourceDef, ResourceTemplateDef, ServerInfo, SharedJson,
        ToolAnnotations, ToolAnnotationsWithTitle, ToolDef, shared_json,
    },
};
use breeze_pipeline::{CallOutcome, errors::refusal_error, pending_answer, raw};
use breeze_tools::{
    CallOptions, ErrorCode, RawOutput, ToolError, ToolSpec, listed_meta, prompts, resources,
    tool_meta,
};
use serde_json::{Map, Value, json};

use crate::{
    AppState,
    audit_writer::{AuditWriter, RefusalSampler, Sampled},
    catalog::{self, Catalog, CatalogMode, Connected, Consolidated, MetaTool},
    oauth::OAuthSettings,
    views,
};

/// A `WWW-Authenticate: Bearer` challenge (RFC 6750 §3, RFC 9728 §5.1): where the resource
/// metadata is, the scope to ask for, and the error if the request carried a token.
fn challenge(o: &OAuthSettings, error: Option<(&str, &str)>, scope: &str) -> HeaderValue {
    let mut v = String::from("Bearer realm=\"breeze\"");
    if let Some((code, description)) = error {
        v.push_str(&format!(
            ", error=\"{code}\", error_description=\"{description}\""
        ));
    }
    v.push_str(&format!(
        ", resource_metadata=\"{}\", scope=\"{scope}\"",
        o.resource_metadata_url()
    ));
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

/// The server's name in `initialize`.
pub const SERVER_NAME: &str = "breeze-rmm";

const INSTRUCTIONS: &str = "You are connected to Breeze, a multi-tenant remote monitoring and management (RMM) platform for managed service providers. \
Data is organized as Partner → Organization → Site → Device Group → Device; this connection reaches exactly one organization, and nothing outside it. \
Work read-before-write: resolve the device or target first (query_devices, get_device_details, get_device_context), echo the target and its organization back before any change, and change one target at a time unless asked for a fleet-wide action. \
Tools are tiered: Tier 1 reads, Tier 2 makes low-risk changes, Tier 3 is destructive and needs a human's approval. If Breeze refuses a call, report the reason instead of retrying. Never invent data. \
Any tool also takes a batch in place of its arguments: {\"items\": [{\"clientRef\": \"a\", \"input\": {...the tool's arguments...}}], \"mode\": \"preview\" or \"commit\", \"atomicity\": \"best_effort\" (default) or \"atomic\" (one item only)}; every item is checked before any runs, preview runs nothing, and a Tier 3 commit is one approval for all items. \
Guided prompts: breeze-fleet-triage, breeze-device-investigate, breeze-patch-remediate, breeze-incident-kickoff, breeze-turnkey-setup.";

/// Drives `work` to completion, passing each progress report it sends on `rx` to the client.
async fn forwarding_progress<T>(
    cx: &Cx<Connected>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<breeze_tools::ProgressReport>,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return out,
            Some(p) = rx.recv() => cx.progress(p.progress, p.total, p.message.as_deref()).await,
        }
    }
}

/// A successful call: the output as structured content, and as JSON text for text-only clients.
fn tool_result(output: RawOutput, meta: Option<SharedJson>) -> CallToolResult {
    CallToolResult {
        content: vec![Content::text(output.get())],
        structured_content: Some(output),
        is_error: false,
        meta,
    }
}

/// The MCP application.
pub struct BreezeMcp {
    state: AppState,
    audit: AuditWriter,
    identity: Value,
    /// Each tool's `_meta` (its tiers and the server's identity), written once.
    metas: HashMap<&'static str, SharedJson>,
    /// Rate-limited refusals: the first per key and window recorded, the others counted.
    refusals: RefusalSampler<(breeze_core::Credential, breeze_core::UserId, OrgId)>,
    /// The catalog of a connection that chooses none, and its binding text (shared, so the
    /// common case allocates nothing per request).
    default_catalog: (Arc<Catalog>, Arc<str>),
    /// The consolidated catalog's version and cursor key.
    consolidated: Consolidated,
    /// The meta-tools' definitions, written once.
    meta_defs: Vec<(MetaTool, ToolDef)>,
}

impl BreezeMcp {
    /// Whether the recorded request changed nothing: every method but `tools/call`, and a call
    /// of a tool (or meta-tool) whose every action only reads.
    fn changes_nothing(&self, method: &str, target: Option<&str>) -> bool {
        if method != "tools/call" {
            return true;
        }
        target.is_some_and(|name| match self.state.pipeline.registry().get(name) {
            Some(spec) => spec.hints.read_only,
            None => MetaTool::from_name(name).is_some_and(MetaTool::read_only),
        })
    }

    pub fn new(state: AppState, audit: AuditWriter) -> Self {
        let mut identity = json!({ "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") });
        if let Some(revision) = option_env!("BREEZE_REVISION") {
            identity["revision"] = json!(revision);
        }
        let metas = state
            .pipeline
            .registry()
            .iter()
            .filter_map(|spec| {
                let meta = shared_json(&tool_meta(spec, &identity)).ok()?;
                Some((spec.name, meta))
            })
            .collect();
        let config = state.config.catalog;
        let default = Catalog {
            mode: config.default_mode,
            toolsets: None,
        };
        let binding = Arc::from(default.binding());
        let consolidated = Consolidated::new(state.pipeline.registry(), config.discover_bytes);
        let meta_defs = MetaTool::ALL.iter().map(|m| (*m, meta_def(*m))).collect();
        Self {
            state,
            audit,
            identity,
            metas,
            refusals: RefusalSampler::default(),
            default_catalog: (Arc::new(default), binding),
            consolidated,
            meta_defs,
        }
    }

    /// The consolidated catalog's version (a hash of every operation's schemas).
    pub fn catalog_version(&self) -> &str {
        self.consolidated.version()
    }

    fn tool_def(&self, spec: &ToolSpec) -> ToolDef {
        ToolDef {
            name: spec.name.to_owned(),
            title: Some(spec.title.to_owned()),
            description: spec.description.to_owned(),
            input_schema: spec.listed_input_schema.clone(),
            output_schema: Some(spec.listed_output_schema.clone()),
            annotations: Some(ToolAnnotationsWithTitle {
                title: Some(spec.title.to_owned()),
                hints: ToolAnnotations {
                    read_only_hint: spec.hints.read_only,
                    destructive_hint: spec.hints.destructive,
                    idempotent_hint: spec.hints.idempotent,
                    open_world_hint: spec.hints.open_world,
                },
            }),
            meta: Some(listed_meta(spec)),
        }
    }

    fn require_read(principal: &Connected) -> Result<(), ErrorObject> {
        if Guard::reaches_read(principal.caller.scopes()) {
            Ok(())
        } else {
            let e = ToolError {
                required_scopes: vec![breeze_core::Scope::AiRead],
                granted_scopes: principal.caller.scopes().iter().collect(),
                ..ToolError::new(
                    ErrorCode::InsufficientScope,
                    "API key missing required scope: ai:read",
                )
            };
            Err(ErrorObject::new(codes::UNAUTHORIZED, e.message.clone()).with_data(error_data(&e)))
        }
    }

    /// The permission model for `resources/read`, as for a tool: reading a resource is a
    /// Tier 1 operation needing the resource's permission (`require_read` checked the scope);
    /// the key's user must hold a role with it in the organization (a disabled user holds
    /// none). Refused with the guard's words and error code.
    fn require_role_for(&self, principal: &Connected, uri: &str) -> Result<(), ErrorObject> {
        let refuse = |r: Refusal| {
            let e = refusal_error(&r, principal.caller.scopes());
            ErrorObject::new(codes::INTERNAL_ERROR, e.message.clone()).with_data(error_data(&e))
        };
        let caller = &principal.caller;
        if caller.permissions().is_none() {
            return Err(refuse(Refusal::NoRole));
        }
        let Some(needed) = resources::permission_for(uri) else {
            return Ok(());
        };
        let op = breeze_core::Operation::read(needed);
        match breeze_core::authz::authorize(caller, op, self.state.scope_policy()) {
            Ok(_) => Ok(()),
            Err(breeze_core::Denied::MissingPermission(p)) => {
                Err(refuse(Refusal::MissingPermission(p)))
            }
            Err(_) => Err(refuse(Refusal::NoRole)),
        }
    }

    /// The `breeze://server` document for this request.
    fn server_document(&self, cx: &Cx<Connected>) -> Value {
        let mut doc = self.identity.clone();
        doc["transport"] = json!(cx.transport.as_str());
        doc["protocolVersion"] = json!(cx.protocol.as_str());
        doc["protocolVersions"] = json!(breeze_mcp::ProtocolVersion::supported_strings());
        doc
    }
}

/// A failed call: the error envelope as structured content, and the same JSON as text.
fn tool_error_result(e: &ToolError, meta: Option<SharedJson>) -> CallToolResult {
    error_envelope_result(raw(&e.to_structured()), meta)
}

/// An error result whose envelope is already JSON text (a replayed error).
fn error_envelope_result(envelope: RawOutput, meta: Option<SharedJson>) -> CallToolResult {
    CallToolResult {
        content: vec![Content::text(envelope.get())],
        structured_content: Some(envelope),
        is_error: true,
        meta,
    }
}

/// The `data` of a JSON-RPC error that refuses a call: the structured error, as a tool error
/// result would carry it (`code`, `message`, `retryable`, `hint`, …).
fn error_data(e: &ToolError) -> Value {
    e.to_structured()["error"].take()
}

/// The answer to a read whose audit record could not be written: withheld, as retryable.
fn unrecorded_read() -> ErrorObject {
    let mut e = ToolError::new(
        ErrorCode::Internal,
        "The audit log cannot be written right now, so this read was not answered; nothing \
         was changed",
    )
    .hint("Retry shortly: the server answers again once its database is back (/readyz 200).");
    e.retryable = true;
    ErrorObject::new(codes::SERVER_ERROR, e.message.clone()).with_data(error_data(&e))
}

/// The `operation` and `input` of a `breeze_read` / `breeze_write` / `breeze_execute` call.
fn meta_input(tool: &str, arguments: Value) -> Result<(String, Value), ToolError> {
    let Value::Object(mut m) = arguments else {
        return Err(ToolError::invalid(format!(
            "{tool} takes {{\"operation\": name, \"input\": {{...}}}}"
        )));
    };
    let operation = match m.remove("operation") {
        Some(Value::String(s)) => s,
        _ => {
            return Err(ToolError::invalid(format!(
                "operation: required, the operation's name (see breeze_discover); {tool} takes {{\"operation\": name, \"input\": {{...}}}}"
            )));
        }
    };
    let input = match m.remove("input") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(ToolError::invalid("input: expected an object")),
    };
    if let Some(extra) = m.keys().next() {
        return Err(ToolError::invalid(format!(
            "unknown argument {extra:?} ({tool} takes operation and input)"
        )));
    }
    Ok((operation, input))
}

/// A meta-tool's definition.
fn meta_def(m: MetaTool) -> ToolDef {
    let read_only = m.read_only();
    ToolDef {
        name: m.name().to_owned(),
        title: Some(m.title().to_owned()),
        description: m.description().to_owned(),
        input_schema: m.input_schema(),
        output_schema: Some(m.output_schema()),
        annotations: Some(ToolAnnotationsWithTitle {
            title: Some(m.title().to_owned()),
            hints: ToolAnnotations {
                read_only_hint: read_only,
                destructive_hint: !read_only,
                idempotent_hint: read_only,
                open_world_hint: m == MetaTool::Execute,
            },
        }),
        meta: None,
    }
}

fn auth_http_error(e: AuthError) -> HttpError {
    match e {
        AuthError::Store(inner) => {
            tracing::error!(error = %inner, "API key lookup failed");
            HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service temporarily unavailable",
            )
        }
        other => HttpError::new(StatusCode::UNAUTHORIZED, other.to_string()).header(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("X-API-Key"),
        ),
    }
}

impl McpApp for BreezeMcp {
    type Principal = Connected;

    async fn authenticate(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Client<Connected>, HttpError> {
        // Written straight into the `Arc`s (one allocation each).
        let (caller, key): (_, Arc<str>) = match (headers.get("x-api-key"), &self.state.oauth) {
            (Some(v), _) => {
                let key = v
                    .to_str()
                    .map_err(|_| auth_http_error(AuthError::InvalidApiKeyFormat))?;
                let caller = self
                    .state
                    .auth
                    .authenticate_api_key(Some(key))
                    .await
                    .map_err(auth_http_error)?;
                // A key's sessions are the key's.
                let id = caller.api_key_id().map_or(uuid::Uuid::nil(), |k| k.0);
                let key = Arc::from(&*id.hyphenated().encode_lower(&mut [0; 36]));
                (caller, key)
            }
            (None, Some(oauth)) => {
                // A token's sessions belong to its client acting for its user in its
                // organization, not to one grant: a scope step-up or a re-authorization makes
                // a new grant, and the client's session carries on (every request still
                // authenticates its own token).
                let bearer = self.authenticate_bearer(oauth, headers).await?;
                let c = &bearer.caller;
                let key = format!("oauth:{}:{}:{}", c.user(), c.org(), bearer.client_id);
                (bearer.caller, Arc::from(key))
            }
            (None, None) if headers.contains_key(header::AUTHORIZATION) => {
                return Err(HttpError::new(
                    StatusCode::UNAUTHORIZED,
                    "Bearer tokens are not accepted: OAuth is not enabled on this server; send X-API-Key",
                )
                .header(header::WWW_AUTHENTICATE, HeaderValue::from_static("X-API-Key")));
            }
            (None, None) => {
                return Err(auth_http_error(AuthError::MissingApiKey));
            }
        };
        let tenant = Arc::from(&*caller.org().0.hyphenated().encode_lower(&mut [0; 36]));
        let chosen = catalog::choose(
            self.state.pipeline.registry(),
            self.state.config.catalog.default_mode,
            headers,
            query,
        )
        .map_err(|m| HttpError::new(StatusCode::BAD_REQUEST, m))?;
        let (catalog, binding) = match chosen {
            None => self.default_catalog.clone(),
            Some(c) => {
                let binding = Arc::from(c.binding());
                (Arc::new(c), binding)
            }
        };
        Ok(Client {
            principal: Connected { caller, catalog },
            key,
            tenant,
            binding: Some(binding),
        })
    }

    fn authorize_stream(&self, client: &Client<Connected>) -> Result<(), HttpError> {
        if Guard::reaches_read(client.principal.caller.scopes()) {
            return Ok(());
        }
        match (
            client.principal.caller.credential(),
            &self.state.config.oauth,
        ) {
            (breeze_core::Credential::OAuthGrant(_), Some(o)) => Err(HttpError::new(
                StatusCode::FORBIDDEN,
                "access token missing required scope: mcp:read",
            )
            .header(
                header::WWW_AUTHENTICATE,
                challenge(
                    o,
                    Some(("insufficient_scope", "the token lacks mcp:read")),
                    "mcp:read",
                ),
            )),
            _ => Err(HttpError::new(
                StatusCode::FORBIDDEN,
                "API key missing required scope: ai:read",
            )),
        }
    }

    /// The MCP authorization spec's scope challenge (2025-11-25, "Scope Challenge Handling"):
    /// a `tools/call` made with an access token whose scopes do not reach the call's tier is
    /// refused at the HTTP level — 403, `WWW-Authenticate: Bearer error="insufficient_scope"`
    /// naming the token's scopes plus the one needed — so the client can ask the user for more
    /// and retry. API keys (and a token that already holds the scope but is refused for another
    /// reason, such as production's `ai:execute_admin`) get the JSON-RPC refusal as before.
    fn screen(
        &self,
        client: &Client<Connected>,
        request: &breeze_mcp::jsonrpc::Request,
    ) -> Result<(), HttpError> {
        let p = &client.principal;
        let (breeze_core::Credential::OAuthGrant(_), Some(settings)) =
            (p.caller.credential(), &self.state.config.oauth)
        else {
            return Ok(());
        };
        if request.method != "tools/call" {
            return Ok(());
        }
        let params = request.params.as_ref();
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return Ok(());
        };
        let Some(tier) = self.call_tier(p, name, params.and_then(|p| p.get("arguments"))) else {
            return Ok(());
        };
        if tier == Tier::T4
            || self
                .state
                .pipeline
                .guard()
                .reaches_tier(p.caller.scopes(), tier)
        {
            return Ok(());
        }
        let Some(needed) = breeze_oauth::scope::oauth_name(tier.scope()) else {
            return Ok(());
        };
        let mut held: Vec<&str> = p
            .caller
            .scopes()
            .iter()
            .filter_map(breeze_oauth::scope::oauth_name)
            .collect();
        if held.contains(&needed) {
            return Ok(());
        }
        held.push(needed);
        // In the resource's own order: mcp:read, mcp:write, mcp:execute.
        let scope: Vec<&str> = breeze_oauth::scope::RESOURCE_SCOPES
            .into_iter()
            .filter(|s| held.contains(s))
            .collect();
        let description = format!("{name} needs {needed}");
        Err(HttpError::new(
            StatusCode::FORBIDDEN,
            format!(
                "access token missing required scope: {needed} (tool {name} is Tier {})",
                tier.number()
            ),
        )
        .header(
            header::WWW_AUTHENTICATE,
            challenge(
                settings,
                Some(("insufficient_scope", &description)),
                &scope.join(" "),
            ),
        ))
    }

    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            revision: option_env!("BREEZE_REVISION").map(str::to_owned),
            title: Some("Breeze RMM".into()),
        }
    }

    fn instructions(&self) -> Option<String> {
        Some(INSTRUCTIONS.into())
    }

    fn extensions(&self) -> Map<String, Value> {
        Map::from_iter([(views::UI_EXTENSION.to_owned(), views::capability())])
    }

    async fn list_tools(&self, cx: &Cx<Connected>) -> Result<Vec<ToolDef>, ErrorObject> {
        let p = &cx.client.principal;
        if p.catalog.mode == CatalogMode::Consolidated {
            return Ok(self
                .meta_defs
                .iter()
                .filter(|(m, _)| self.reaches_meta(p, *m))
                .map(|(_, d)| d.clone())
                .collect());
        }
        let mut defs: Vec<ToolDef> = self
            .state
            .pipeline
            .visible(&p.caller)
            .filter(|t| p.catalog.admits(t))
            .map(|t| self.tool_def(t))
            .collect();
        if p.catalog.admits_external() {
            defs.extend(
                self.state
                    .pipeline
                    .visible_external(&p.caller)
                    .await
                    .into_iter()
                    .map(external_def),
            );
        }
        if views::negotiated(&cx.extensions) {
            for def in &mut defs {
                if let (Some(view), Some(Value::Object(meta))) =
                    (views::for_tool(&def.name), def.meta.as_mut())
                {
                    meta.insert("ui".into(), json!({ "resourceUri": view.uri }));
                }
            }
        }
        Ok(defs)
    }

    async fn call_tool(
        &self,
        cx: Cx<Connected>,
        name: String,
        arguments: Value,
    ) -> Result<CallToolResult, ErrorObject> {
        let catalog = cx.client.principal.catalog.clone();
        if catalog.mode == CatalogMode::Consolidated {
            return Box::pin(self.call_meta(cx, name, arguments)).await;
        }
        // Outside the chosen toolsets a tool does not exist for this connection. A name the
        // registry lacks may be an external tool's (`<slug>__<name>`): the pipeline decides
        // whether this caller's organization has it, enabled and offered.
        let admitted = match self.state.pipeline.registry().get(&name) {
            Some(t) => catalog.admits(t),
            None => {
                catalog.admits_external()
                    && breeze_core::tool_source::split_address(&name).is_some()
                    && self
                        .state
                        .pipeline
                        .offered_to_mcp(&cx.client.principal.caller, &name)
                        .await
            }
        };
        if !admitted {
            return Err(ErrorObject::invalid_params(format!("Unknown tool: {name}")));
        }
        self.run(cx, &name, arguments).await
    }

    async fn list_resources(&self, cx: &Cx<Connected>) -> Result<Vec<ResourceDef>, ErrorObject> {
        Self::require_read(&cx.client.principal)?;
        let mut listed: Vec<ResourceDef> = resources::RESOURCES
            .iter()
            .map(|r| ResourceDef {
                uri: r.uri.into(),
                name: r.name.into(),
                title: Some(r.title.into()),
                description: Some(r.description.into()),
                mime_type: Some("application/json".into()),
                meta: None,
            })
            .collect();
        if views::negotiated(&cx.extensions) {
            listed.extend(views::VIEWS.iter().map(|v| ResourceDef {
                uri: v.uri.into(),
                name: v.name.into(),
                title: Some(v.title.into()),
                description: Some(v.description.into()),
                mime_type: Some(views::VIEW_MIME.into()),
                meta: Some(views::resource_meta()),
            }));
        }
        Ok(listed)
    }

    async fn list_resource_templates(
        &self,
        cx: &Cx<Connected>,
    ) -> Result<Vec<ResourceTemplateDef>, ErrorObject> {
        Self::require_read(&cx.client.principal)?;
        let t = resources::DEVICE_TEMPLATE;
        Ok(vec![ResourceTemplateDef {
            uri_template: t.uri.into(),
            name: t.name.into(),
            title: Some(t.title.into()),
            description: Some(t.description.into()),
            mime_type: Some("application/json".into()),
        }])
    }

    async fn read_resource(
        &self,
        cx: Cx<Connected>,
        uri: String,
    ) -> Result<Vec<ResourceContents>, ErrorObject> {
        Self::require_read(&cx.client.principal)?;
        // A view exists only for a client that negotiated the extension.
        if let Some(view) = views::by_uri(&uri).filter(|_| views::negotiated(&cx.extensions)) {
            let html = view.html(&self.state.config.public_url);
            return Ok(vec![
                ResourceContents::text(uri, views::VIEW_MIME, html)
                    .with_meta(views::resource_meta()),
            ]);
        }
        self.require_role_for(&cx.client.principal, &uri)?;
        let org = self.state.store.org(cx.client.principal.caller.org());
        let doc = resources::read(&org, &uri, &self.server_document(&cx))
            .await
            .map_err(|e| match e {
                resources::ResourceError::Store(inner) if inner.is_retryable() => {
                    tracing::warn!(error = %inner, "resource read found the database unavailable");
                    ErrorObject::new(
                        codes::SERVER_ERROR,
                        "Service temporarily unavailable; retry shortly",
                    )
                }
                resources::ResourceError::Store(inner) => {
                    tracing::error!(error = %inner, "resource read failed");
                    ErrorObject::internal("Internal error")
                }
                other => ErrorObject::invalid_params(other.to_string()),
            })?;
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        Ok(vec![ResourceContents::text(uri, "application/json", text)])
    }

    async fn list_prompts(&self, _cx: &Cx<Connected>) -> Result<Vec<PromptDef>, ErrorObject> {
        Ok(prompts::PROMPTS
            .iter()
            .map(|p| PromptDef {
                name: p.name.into(),
                title: Some(p.title.into()),
                description: Some(p.description.into()),
                arguments: p
                    .arguments
                    .iter()
                    .map(|a| PromptArgument {
                        name: a.name.into(),
                        description: Some(a.description.into()),
                        required: a.required,
                    })
                    .collect(),
            })
            .collect())
    }

    async fn get_prompt(
        &self,
        _cx: Cx<Connected>,
        name: String,
        arguments: Map<String, Value>,
    ) -> Result<GetPromptResult, ErrorObject> {
        let (description, text) = prompts::render(&name, &arguments)
            .map_err(|e| ErrorObject::invalid_params(e.to_string()))?;
        Ok(GetPromptResult {
            description: Some(description.into()),
            messages: vec![PromptMessage {
                role: "user",
                content: Content::text(text),
            }],
        })
    }

    async fn record(&self, r: RequestRecord<'_, Connected>) -> Result<(), ErrorObject> {
        let p = &r.client.principal;
        // Only what the record's columns do not already say: the action names the method
        // (`tools/call` is `mcp.tools.call`) and the resource id its tool, URI or prompt. Every
        // MCP message writes a record, and its bytes are paid three times over (the
        // write-ahead log, the checkpoint, the disk), so nothing in it is written twice.
        let mut details = Map::new();
        if r.method.contains('.') {
            // A dot would make the action ambiguous; keep the method as it came.
            details.insert("method".into(), json!(r.method));
        }
        if let Some(s) = r.session_id {
            details.insert("session_id".into(), json!(s));
        }
        details.insert("transport".into(), json!(r.transport.as_str()));
        details.insert("protocol_version".into(), json!(r.protocol.as_str()));
        let mut event = AuditEvent::new(
            p.caller.actor(),
            &format!("mcp.{}", r.method.replace('/', ".")),
            "mcp",
        )
        .org(p.caller.org())
        .details(Value::Object(details));
        if let Some(t) = r.target {
            event = event.resource(t);
        }
        if let Err(message) = r.outcome {
            event = event.failed(AuditResult::Failure, message);
        }
        event.request_id = r.request_id.map(str::to_owned);
        if self.audit.write(event, r.in_flight <= 1).await
            || !self.changes_nothing(r.method, r.target)
        {
            return Ok(());
        }
        // A read answered without its record would leave no trace of what was read (the
        // database is down: the device directory still answers from memory). A change already
        // made is answered all the same; its record is in the error log.
        Err(unrecorded_read())
    }

    /// Refusals (rate-limited ones sampled: see `audit_writer`), sessions ended to make room,
    /// DELETEs and streams opened.
    async fn record_transport(&self, r: TransportRecord<'_, Connected>) {
        let p = &r.client.principal;
        let mut details = Map::new();
        details.insert("transport".into(), json!(r.transport.as_str()));
        if let Some(s) = r.session_id {
            details.insert("session_id".into(), json!(s));
        }
        let (action, failure) = match r.event {
            TransportEvent::Refused {
                status,
                message,
                rate_limited,
            } => {
                if rate_limited {
                    let now = self.state.clock.now();
                    match self.refusals.sample(
                        &r.client.key,
                        now,
                        (p.caller.credential(), p.caller.user(), p.caller.org()),
                    ) {
                        Sampled::Counted => return,
                        Sampled::Record { unrecorded_before } if unrecorded_before > 0 => {
                            details.insert("unrecorded_before".into(), json!(unrecorded_before));
                        }
                        Sampled::Record { .. } => {}
                    }
                    details.insert("rate_limited".into(), json!(true));
                }
                details.insert("status".into(), json!(status.as_u16()));
                let result = match status {
                    StatusCode::UNAUTHORIZED
                    | StatusCode::FORBIDDEN
                    | StatusCode::TOO_MANY_REQUESTS
                    | StatusCode::SERVICE_UNAVAILABLE => AuditResult::Denied,
                    _ => AuditResult::Failure,
                };
                ("mcp.refused", Some((result, message)))
            }
            TransportEvent::SessionEvicted {
                session_id,
                owner,
                cap,
            } => {
                details.insert(
                    "reason".into(),
                    json!(format!("{} session cap", cap.as_str())),
                );
                details.insert("owner_key".into(), json!(owner));
                details.insert("session_id".into(), json!(session_id));
                ("mcp.session.evicted", None)
            }
            TransportEvent::SessionDeleted => ("mcp.session.delete", None),
            TransportEvent::StreamOpened => ("mcp.stream.open", None),
        };
        let mut event = AuditEvent::new(p.caller.actor(), action, "mcp")
            .org(p.caller.org())
            .details(Value::Object(details))
            .request(r.request_id.map(str::to_owned));
        if let Some(s) = r.session_id {
            event = event.resource(s);
        }
        if let Some((result, message)) = failure {
            event = event.failed(result, message);
        }
        self.audit.write(event, false).await;
    }

    /// Writes the counts of rate-limited refusals whose window has passed.
    async fn tick(&self) {
        self.write_refusal_counts().await;
    }
}

impl BreezeMcp {
    /// Authenticates `Authorization: Bearer <access token>`; a missing or refused token is a
    /// 401 whose challenge points the client at the protected-resource metadata.
    async fn authenticate_bearer(
        &self,
        oauth: &breeze_oauth::OAuth,
        headers: &HeaderMap,
    ) -> Result<breeze_oauth::Bearer, HttpError> {
        let Some(settings) = &self.state.config.oauth else {
            return Err(HttpError::new(StatusCode::UNAUTHORIZED, "not signed in"));
        };
        let refuse = |error: Option<(&str, &str)>, message: &str| {
            let scope = breeze_oauth::scope::RESOURCE_SCOPES.join(" ");
            HttpError::new(StatusCode::UNAUTHORIZED, message)
                .header(header::WWW_AUTHENTICATE, challenge(settings, error, &scope))
        };
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(refuse(
                None,
                "Authentication required: sign in with OAuth (Authorization: Bearer) or send X-API-Key",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            return Err(refuse(
                Some(("invalid_request", "expected Authorization: Bearer <token>")),
                "expected Authorization: Bearer <access token>",
            ));
        };
        oauth.authenticate_bearer(token).await.map_err(|e| match e {
            breeze_oauth::BearerError::Invalid => refuse(
                Some((
                    "invalid_token",
                    "the access token is invalid, expired or revoked",
                )),
                "Invalid access token",
            ),
            breeze_oauth::BearerError::Store(inner) => {
                tracing::error!(error = %inner, "grant lookup failed");
                HttpError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Service temporarily unavailable",
                )
            }
        })
    }

    /// The tier a `tools/call` of `name` with `arguments` is judged at, as the guard will judge
    /// it (a batch: its costliest item); `None` for a tool this connection does not have.
    fn call_tier(&self, p: &Connected, name: &str, arguments: Option<&Value>) -> Option<Tier> {
        if p.catalog.mode == CatalogMode::Consolidated {
            return MetaTool::from_name(name).map(MetaTool::tier);
        }
        let spec = self
            .state
            .pipeline
            .registry()
            .get(name)
            .filter(|t| p.catalog.admits(t))?;
        let empty = Value::Object(Map::new());
        let args = arguments.unwrap_or(&empty);
        if breeze_pipeline::envelope::is_batch(args) {
            let items = args.get("items").and_then(Value::as_array)?;
            return items
                .iter()
                .map(|i| spec.effective_tier(i.get("input").unwrap_or(&empty)))
                .max();
        }
        Some(spec.effective_tier(args))
    }

    /// Whether `p`'s scopes reach meta-tool `m` (listing and calling agree on this).
    fn reaches_meta(&self, p: &Connected, m: MetaTool) -> bool {
        self.state
            .pipeline
            .guard()
            .reaches_tier(p.caller.scopes(), m.tier())
    }

    /// Runs `name` through the pipeline and turns its outcome into an MCP answer.
    async fn run(
        &self,
        cx: Cx<Connected>,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ErrorObject> {
        let started = std::time::Instant::now();
        let caller = cx.client.principal.caller.clone();
        let mut options = CallOptions {
            request_id: cx.request_id.as_ref().map(ToString::to_string),
            ..CallOptions::default()
        };
        // Kept on a Tier 3 call's approval request, for the person deciding.
        options.approval.client = cx.client_name.as_deref().map(str::to_owned);
        // Progress goes nowhere without the client's token: no channel then.
        let outcome = if cx.progress_token.is_some() {
            let (progress_tx, progress_rx) = tokio::sync::mpsc::unbounded_channel();
            options.progress = Some(progress_tx);
            let call = self
                .state
                .pipeline
                .call(&caller, name, arguments, options, &cx.cancel);
            // Boxed: held inline, this rarer path's state would sit in every call's future.
            forwarding_progress(&cx, progress_rx, Box::pin(call)).await
        } else {
            self.state
                .pipeline
                .call(&caller, name, arguments, options, &cx.cancel)
                .await
        };
        self.state
            .metrics
            .tool_call(name, &outcome, started.elapsed());
        let meta = || self.metas.get(name).cloned();
        match outcome {
            CallOutcome::Output(output) => Ok(tool_result(output, meta())),
            CallOutcome::Failed(e) => Ok(tool_error_result(&e, meta())),
            CallOutcome::ReplayedError(envelope) => Ok(error_envelope_result(envelope, meta())),
            CallOutcome::Pending(r) => Ok(tool_result(raw(&pending_answer(&r)), meta())),
            CallOutcome::Batch { answer, is_error } => Ok(CallToolResult {
                is_error,
                ..tool_result(answer, meta())
            }),
            CallOutcome::UnknownTool => {
                Err(ErrorObject::invalid_params(format!("Unknown tool: {name}")))
            }
            CallOutcome::Refused(r) => {
                let e = refusal_error(&r, cx.client.principal.caller.scopes());
                // The specification answers scope, permission and rate-limit refusals as
                // JSON-RPC errors; their `data` carries the structured error.
                let code = match r {
                    Refusal::MissingScope { .. }
                    | Refusal::NoRole
                    | Refusal::MissingPermission(_)
                    | Refusal::PersonOnly { .. }
                    | Refusal::NotAllowlisted { .. } => codes::INTERNAL_ERROR,
                    Refusal::RateLimited { .. } | Refusal::LimiterUnavailable => {
                        codes::SERVER_ERROR
                    }
                    Refusal::Blocked { .. } | Refusal::NotApprovable { .. } => {
                        return Ok(tool_error_result(&e, meta()));
                    }
                };
                Err(ErrorObject::new(code, e.message.clone()).with_data(error_data(&e)))
            }
        }
    }

    /// A call in the consolidated catalog: a meta-tool the key's scopes reach (otherwise
    /// refused as the guard refuses a tool), discover and describe answered here, and read /
    /// write / execute run through [`run`](Self::run) — the same pipeline as a direct call —
    /// once the operation is known to the connection's catalog and its call's class matches.
    async fn call_meta(
        &self,
        cx: Cx<Connected>,
        name: String,
        arguments: Value,
    ) -> Result<CallToolResult, ErrorObject> {
        let Some(meta_tool) = MetaTool::from_name(&name) else {
            return Err(ErrorObject::invalid_params(format!("Unknown tool: {name}")));
        };
        let p = &cx.client.principal;
        if !self.reaches_meta(p, meta_tool) {
            let refusal = Refusal::MissingScope {
                tool: name.clone(),
                scope: meta_tool.tier().scope(),
                production_admin: false,
            };
            let e = refusal_error(&refusal, p.caller.scopes());
            return Err(ErrorObject::new(codes::INTERNAL_ERROR, e.message.clone())
                .with_data(error_data(&e)));
        }
        let pipeline = &self.state.pipeline;
        let (guard, registry) = (pipeline.guard(), pipeline.registry());
        let answered = |r: Result<Value, ToolError>| match r {
            Ok(v) => Ok(tool_result(raw(&v), None)),
            Err(e) => Ok(tool_error_result(&e, None)),
        };
        let Some(class) = meta_tool.class() else {
            return answered(if meta_tool == MetaTool::Discover {
                self.consolidated.discover(
                    guard,
                    registry,
                    &p.catalog,
                    p.caller.scopes(),
                    &arguments,
                )
            } else {
                Consolidated::describe(guard, registry, &p.catalog, p.caller.scopes(), &arguments)
            });
        };
        let (operation, input) = match meta_input(&name, arguments) {
            Ok(v) => v,
            Err(e) => return answered(Err(e)),
        };
        let Some(spec) = registry.get(&operation).filter(|s| p.catalog.admits(s)) else {
            return answered(Err(catalog::unknown_operation(&operation)));
        };
        let needed = catalog::call_class(spec, &input);
        if needed != class {
            return answered(Err(catalog::effect_mismatch(&operation, meta_tool, needed)));
        }
        self.run(cx, &operation, input).await
    }

    /// Writes one `mcp.refused.count` record per key whose sampling window has passed with
    /// refusals counted but not recorded (see `audit_writer`).
    pub async fn write_refusal_counts(&self) {
        for (started, count, (credential, user, org_id)) in
            self.refusals.due(self.state.clock.now())
        {
            let event = AuditEvent::new(credential.actor(user), "mcp.refused.count", "mcp")
                .org(org_id)
                .details(json!({
                    "rate_limited": true,
                    "count": count,
                    "window_start": started,
                    "window_seconds": crate::audit_writer::SAMPLE_WINDOW.num_seconds(),
                }))
                .failed(
                    AuditResult::Denied,
                    format!("{count} more requests refused: Rate limit exceeded"),
                );
            self.audit.write(event, false).await;
        }
    }
}

/// An external tool as `tools/list` shows it: Breeze's own hints from the tier an
/// administrator set, never the upstream's claims.
fn external_def(t: breeze_pipeline::ExternalListing) -> ToolDef {
    ToolDef {
        title: Some(t.title.clone()),
        annotations: Some(ToolAnnotationsWithTitle {
            title: Some(t.title),
            hints: ToolAnnotations {
                read_only_hint: t.tier == breeze_core::Tier::T1,
                destructive_hint: t.tier >= breeze_core::Tier::T3,
                idempotent_hint: false,
                open_world_hint: true,
            },
        }),
        name: t.name,
        description: t.description,
        input_schema: t.input_schema,
        output_schema: t.output_schema,
        meta: None,
    }
}
