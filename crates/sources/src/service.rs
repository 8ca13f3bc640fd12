//! The operations every door (REST, CLI, pages, the pipeline) shares: creating a source (its
//! URLs checked, its credential sealed), discovering its tools (and merging them into what is
//! known), and calling one of its tools with its stored credential, audited.
//!
//! The door authorizes first and then hands over the owner it may act as ([`Owner`]): an
//! organization's narrowed handle, or — only for a caller allowed to manage partner-wide
//! policies — the partner's. Nothing here checks permissions.

use std::{sync::Arc, time::Duration};

use breeze_core::{
    AuditEvent, Clock, OrgId, Tier,
    tool_source::{Discovered, Known, Slug, SourceKind, SourceState, merge, split_address},
};
use breeze_store::{
    DiscoveryRecord, NewToolSource, OrgToolSources, PartnerToolSources, SourceChange, SourceOwner,
    SourceTool, Store, StoreError, ToolChange, ToolSource, ToolSwitch,
};
use serde_json::{Value, json};
use url::Url;
use uuid::Uuid;

use crate::{
    auth::{AuthError, Authorizer},
    egress::{self, Egress, EgressError},
    mcp, openapi,
    vault::{Credential, Vault, VaultError},
};

/// Why an operation on a source failed.
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    #[error("tool sources need TOOL_SOURCES_KEY (32 random bytes in base64) to keep credentials")]
    NoKey,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Vault(#[from] VaultError),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Egress(#[from] EgressError),
    #[error(transparent)]
    Auth(#[from] AuthError),
}

/// Whose sources an operation acts on: decided by the door after authorization.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    Organization(OrgToolSources<'a>),
    /// Partner-wide: only for a caller who may manage partner-wide policies.
    Partner(PartnerToolSources<'a>),
}

impl<'a> Owner<'a> {
    /// The owner a stored source names, with the store's authority: for the CLI (which acts
    /// with the database's authority) and the discovery worker (which runs what a door already
    /// authorized). A door acting for a person builds its `Owner` after its own checks.
    pub fn of(store: &'a Store, owner: SourceOwner) -> Self {
        match owner {
            SourceOwner::Organization(o) => Owner::Organization(store.org(o).tool_sources()),
            SourceOwner::Partner(p) => Owner::Partner(store.partner_tool_sources(p)),
        }
    }
}

/// A change to a source as a person asked for it. `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct Edit {
    pub display_name: Option<String>,
    /// `false`: the source is disabled (none of its tools can be called); `true`: active again.
    pub enabled: Option<bool>,
    pub offer_to_mcp: Option<bool>,
    /// The authentication method the person chose; `None`: unchanged.
    pub auth_method: Option<String>,
    /// A new credential; `None` ("left blank") keeps the stored one, which is allowed only
    /// while the method is unchanged.
    pub credential: Option<Credential>,
}

/// The authentication methods a source may use, as [`Credential::method`] names them.
pub const AUTH_METHODS: [&str; 5] = [
    "none",
    "bearer",
    "api_key_header",
    "basic",
    "oauth2_client_credentials",
];

/// A tier a person may give an external tool: 1, 2 or 3 (Tier 4 is Breeze's "never").
pub fn tier_from_number(n: u8) -> Result<Tier, SourcesError> {
    match n {
        1 => Ok(Tier::T1),
        2 => Ok(Tier::T2),
        3 => Ok(Tier::T3),
        _ => Err(SourcesError::Invalid(format!(
            "an external tool's tier is 1, 2 or 3, not {n}"
        ))),
    }
}

fn check_credential(c: &Credential) -> Result<(), SourcesError> {
    if let Credential::ApiKeyHeader { header, .. } = c
        && reqwest13::header::HeaderName::from_bytes(header.as_bytes()).is_err()
    {
        return Err(SourcesError::Invalid(format!(
            "{header:?} is not a valid header name"
        )));
    }
    Ok(())
}

macro_rules! on_owner {
    ($owner:expr, $h:ident => $e:expr) => {
        match $owner {
            Owner::Organization($h) => $e,
            Owner::Partner($h) => $e,
        }
    };
}

/// A source to add, as a person entered it.
#[derive(Debug, Clone)]
pub struct NewSource {
    pub display_name: String,
    /// `None`: derived from the display name.
    pub slug: Option<String>,
    pub kind: SourceKind,
    pub url: String,
    pub document_url: Option<String>,
    pub credential: Credential,
    pub offer_to_mcp: bool,
}

/// What a discovery found.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    pub tools: usize,
    pub skipped: usize,
    pub review_needed: usize,
    pub warnings: Vec<String>,
}

/// An upstream call's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The upstream's answer: an MCP `CallToolResult`, or `{status, body}` for OpenAPI.
    pub result: Value,
    /// The upstream called it an error (MCP `isError`, or an HTTP status ≥ 400).
    pub is_error: bool,
    /// The HTTP status of an OpenAPI call.
    pub status: Option<u16>,
    pub duration: Duration,
}

/// Why a call of an external tool did not reach, or failed at, the upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallFailure {
    #[error("no external tool is named {0}")]
    Unknown(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("the upstream call failed: {0}")]
    Upstream(String),
}

/// Tool Sources' services. Cheap to clone.
#[derive(Clone)]
pub struct Sources {
    store: Store,
    vault: Option<Vault>,
    egress: Egress,
    auth: Authorizer,
    sessions: mcp::Sessions,
    clock: Arc<dyn Clock>,
    call_timeout: Duration,
    discovery_timeout: Duration,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").finish_non_exhaustive()
    }
}

impl Sources {
    /// `vault` is `None` when no key is set: sources can then be listed, not created or called.
    pub fn new(store: Store, vault: Option<Vault>, egress: Egress, clock: Arc<dyn Clock>) -> Self {
        Self {
            auth: Authorizer::new(egress.clone(), clock.clone()),
            sessions: mcp::Sessions::default(),
            store,
            vault,
            egress,
            clock,
            call_timeout: egress::CALL_TIMEOUT,
            discovery_timeout: egress::DISCOVERY_TIMEOUT,
        }
    }

    /// These services with other timeouts (tests).
    #[must_use]
    pub fn with_timeouts(mut self, call: Duration, discovery: Duration) -> Self {
        self.call_timeout = call;
        self.discovery_timeout = discovery;
        self
    }

    fn vault(&self) -> Result<&Vault, SourcesError> {
        self.vault.as_ref().ok_or(SourcesError::NoKey)
    }

    /// Adds a source: slug checked (or derived), URLs held to the egress rules, credential
    /// sealed for the new id, and its first discovery queued (a worker runs it).
    pub async fn create(
        &self,
        owner: Owner<'_>,
        new: NewSource,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<ToolSource, SourcesError> {
        let vault = self.vault()?;
        let slug = match &new.slug {
            Some(s) => Slug::parse(s),
            None => Slug::derive(&new.display_name),
        }
        .map_err(|e| SourcesError::Invalid(e.to_string()))?;
        let url = self.egress.check_url(&new.url)?;
        let document_url = match (new.kind, &new.document_url) {
            (SourceKind::OpenApi, Some(d)) => Some(self.egress.check_url(d)?.to_string()),
            (SourceKind::OpenApi, None) => {
                return Err(SourcesError::Invalid(
                    "an OpenAPI source needs the document's URL".into(),
                ));
            }
            (SourceKind::Mcp, _) => None,
        };
        check_credential(&new.credential)?;
        let id = Uuid::now_v7();
        let record = NewToolSource {
            id,
            slug,
            display_name: new.display_name,
            kind: new.kind,
            url: url.to_string(),
            document_url,
            auth_method: new.credential.method().to_owned(),
            credential: vault.seal(&new.credential, &id.to_string())?,
            offer_to_mcp: new.offer_to_mcp,
            created_by: created_by.to_owned(),
        };
        Ok(on_owner!(owner, h => h.create_tool_source(record, audit).await)?)
    }

    /// Discovers a source's tools now and stores the outcome: the merged tools, or the
    /// reason it failed (the source goes to error; its tools stay as they were).
    pub async fn discover(
        &self,
        owner: Owner<'_>,
        id: Uuid,
        audit: AuditEvent,
    ) -> Result<Result<Discovery, String>, SourcesError> {
        let source = on_owner!(owner, h => h.own_tool_source(id).await)?;
        let sealed = on_owner!(owner, h => h.own_sealed_credential(id).await)?;
        let credential = self.vault()?.open(&sealed, &id.to_string())?;
        let known = on_owner!(owner, h => h.own_source_tools(id).await)?;
        let found = self.find(&source, &credential).await;
        let record = found.map(|(discovered, skipped, warnings)| {
            let tools = merge(&source.slug, known, discovered);
            DiscoveryRecord {
                tools,
                skipped,
                warnings,
            }
        });
        let summary = record.as_ref().map_err(Clone::clone).map(|r| Discovery {
            tools: r.tools.iter().filter(|t| !t.removed).count(),
            skipped: r.skipped.as_array().map_or(0, Vec::len),
            review_needed: r.tools.iter().filter(|t| t.review_needed).count(),
            warnings: r.warnings.clone(),
        });
        on_owner!(owner, h => h.record_discovery(id, record, audit).await)?;
        Ok(summary)
    }

    /// The sources organization `org` sees: its own and its partner's, by slug.
    pub async fn list(&self, org: OrgId) -> Result<Vec<ToolSource>, SourcesError> {
        Ok(self.store.org(org).tool_sources().tool_sources().await?)
    }

    /// A source `org` sees, by id; `NotFound` for another organization's.
    pub async fn get(&self, org: OrgId, id: Uuid) -> Result<ToolSource, SourcesError> {
        Ok(self.store.org(org).tool_sources().tool_source(id).await?)
    }

    /// A source `org` sees, by slug (its own before its partner's).
    pub async fn by_slug(&self, org: OrgId, slug: &str) -> Result<ToolSource, SourcesError> {
        self.list(org)
            .await?
            .into_iter()
            .filter(|s| s.slug.as_str() == slug)
            .min_by_key(|s| matches!(s.owner, SourceOwner::Partner(_)))
            .ok_or(SourcesError::Store(StoreError::NotFound("tool source")))
    }

    /// The tools of a source `org` sees, in name order.
    pub async fn tools(&self, org: OrgId, id: Uuid) -> Result<Vec<Known>, SourcesError> {
        Ok(self.store.org(org).tool_sources().source_tools(id).await?)
    }

    /// Changes a source: its name, whether it is enabled or offered to MCP clients, its
    /// credential. A credential left out keeps the stored one only while the method stays the
    /// same; switching methods needs the new credential (the old one means nothing to it).
    pub async fn edit(
        &self,
        owner: Owner<'_>,
        id: Uuid,
        edit: Edit,
        audit: AuditEvent,
    ) -> Result<ToolSource, SourcesError> {
        let before = on_owner!(owner, h => h.own_tool_source(id).await)?;
        if let Some(m) = &edit.auth_method
            && !AUTH_METHODS.contains(&m.as_str())
        {
            return Err(SourcesError::Invalid(format!(
                "unknown authentication method {m:?}: one of {}",
                AUTH_METHODS.join(", ")
            )));
        }
        let auth_method_and_credential = match (&edit.auth_method, &edit.credential) {
            (Some(m), Some(c)) if m != c.method() => {
                return Err(SourcesError::Invalid(format!(
                    "the credential given is {}, not {m}",
                    c.method()
                )));
            }
            (_, Some(c)) => {
                check_credential(c)?;
                Some((
                    c.method().to_owned(),
                    self.vault()?.seal(c, &id.to_string())?,
                ))
            }
            (Some(m), None) if *m != before.auth_method => {
                return Err(SourcesError::Invalid(format!(
                    "switching from {} to {m} needs the new credential; a blank one is kept only \
                     while the method is unchanged",
                    before.auth_method
                )));
            }
            (_, None) => None,
        };
        let change = SourceChange {
            display_name: edit.display_name,
            state: edit.enabled.map(|on| {
                if on {
                    SourceState::Active
                } else {
                    SourceState::Disabled
                }
            }),
            offer_to_mcp: edit.offer_to_mcp,
            auth_method_and_credential,
        };
        Ok(on_owner!(owner, h => h.change_tool_source(id, change, audit).await)?)
    }

    /// Deletes a source and its tools.
    pub async fn delete(
        &self,
        owner: Owner<'_>,
        id: Uuid,
        audit: AuditEvent,
    ) -> Result<(), SourcesError> {
        Ok(on_owner!(owner, h => h.delete_tool_source(id, audit).await)?)
    }

    /// Queues a discovery ("Re-discover"): the discovery worker runs it soon after; nothing
    /// polls the upstream.
    pub async fn queue_discovery(
        &self,
        owner: Owner<'_>,
        id: Uuid,
        audit: AuditEvent,
    ) -> Result<ToolSource, SourcesError> {
        Ok(on_owner!(owner, h => h.queue_discovery(id, audit).await)?)
    }

    /// Enables or disables one tool, or sets its tier (which clears "review needed").
    pub async fn change_tool(
        &self,
        owner: Owner<'_>,
        id: Uuid,
        name: &str,
        change: ToolChange,
        audit: AuditEvent,
    ) -> Result<Known, SourcesError> {
        Ok(on_owner!(owner, h => h.change_source_tool(id, name, change, audit).await)?)
    }

    /// "Enable all reads" or "Disable all": how many tools changed.
    pub async fn switch_tools(
        &self,
        owner: Owner<'_>,
        id: Uuid,
        switch: ToolSwitch,
        audit: AuditEvent,
    ) -> Result<u64, SourcesError> {
        Ok(on_owner!(owner, h => h.switch_source_tools(id, switch, audit).await)?)
    }

    /// The "Test" action on the tool `name` of source `id` as `org` sees it (see
    /// [`Sources::test_call`]).
    pub async fn test_tool(
        &self,
        org: OrgId,
        id: Uuid,
        name: &str,
        args: Value,
        audit: AuditEvent,
    ) -> Result<CallResult, CallFailure> {
        // Another organization's source is as unknown as a missing one.
        let failed = |e: SourcesError| match e {
            SourcesError::Store(StoreError::NotFound(what)) => CallFailure::Unknown(what.into()),
            e => CallFailure::Unavailable(e.to_string()),
        };
        let source = self.get(org, id).await.map_err(failed)?;
        let tool = self
            .tools(org, id)
            .await
            .map_err(failed)?
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| CallFailure::Unknown(format!("{}{}{name}", source.slug, "__")))?;
        self.test_call(org, &SourceTool { source, tool }, args, audit)
            .await
    }

    /// Runs up to `limit` queued discoveries whose time has come, each claimed first (so one
    /// instance of a cluster runs each), one after the other; a discovery that fails leaves
    /// its source in error with the reason. Returns how many ran. `lease`: how long a claimed
    /// discovery is held before another worker may take it again (longer than a discovery).
    pub async fn run_queued(
        &self,
        limit: i64,
        lease: Duration,
        audit: impl Fn() -> AuditEvent,
    ) -> Result<usize, SourcesError> {
        let now = self.clock.now();
        let until = now
            + chrono::Duration::from_std(lease).unwrap_or_else(|_| chrono::Duration::minutes(5));
        let mut ran = 0;
        for source in self
            .store
            .cross_org()
            .queued_discoveries(now, limit)
            .await?
        {
            let Some(seen) = source.discovery_queued_at else {
                continue;
            };
            if !self
                .store
                .cross_org()
                .claim_discovery(source.id, seen, until)
                .await?
            {
                continue;
            }
            ran += 1;
            let owner = Owner::of(&self.store, source.owner);
            if let Err(e) = self.discover(owner, source.id, audit()).await {
                // Nothing recorded (no key, store down): the lease runs out and it is taken again.
                tracing::warn!(source = %source.id, error = %e, "a queued discovery failed");
            }
        }
        Ok(ran)
    }

    /// What the upstream offers: tools, skipped operations, warnings; or why it failed.
    async fn find(
        &self,
        source: &ToolSource,
        credential: &Credential,
    ) -> Result<(Vec<Discovered>, Value, Vec<String>), String> {
        let base = Url::parse(&source.url).map_err(|e| e.to_string())?;
        let sid = source.id.to_string();
        match source.kind {
            SourceKind::Mcp => {
                let headers = self
                    .auth
                    .headers_for(&sid, &base, &base, credential)
                    .await
                    .map_err(|e| e.to_string())?;
                let tools = mcp::discover(&self.egress, &base, headers, self.discovery_timeout)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok((tools, json!([]), Vec::new()))
            }
            SourceKind::OpenApi => {
                let doc_url = source
                    .document_url
                    .as_deref()
                    .ok_or("the source has no document URL")?;
                let doc_url = self.egress.check_url(doc_url).map_err(|e| e.to_string())?;
                // The credential goes with the document only on the API's own origin.
                let headers = self
                    .auth
                    .headers_for(&sid, &base, &doc_url, credential)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut request = self
                    .egress
                    .client()
                    .get(doc_url)
                    .timeout(self.discovery_timeout)
                    .header("accept", "application/json");
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|e| egress::http_error(&e).to_string())?;
                egress::refuse_redirect(&response).map_err(|e| e.to_string())?;
                let status = response.status();
                if !status.is_success() {
                    return Err(format!("the document URL answered {status}"));
                }
                let body = egress::read_capped(response, openapi::MAX_DOCUMENT)
                    .await
                    .map_err(|e| e.to_string())?;
                let import = openapi::import(&body, &base).map_err(|e| e.to_string())?;
                let skipped = serde_json::to_value(&import.skipped).unwrap_or_else(|_| json!([]));
                Ok((import.tools, skipped, import.warnings))
            }
        }
    }

    /// The external tool `address` (`<slug>__<name>`) as organization `org` sees it, whatever
    /// its state; `None` when there is none.
    pub async fn find_tool(
        &self,
        org: OrgId,
        address: &str,
    ) -> Result<Option<SourceTool>, StoreError> {
        let Some((slug, name)) = split_address(address) else {
            return Ok(None);
        };
        match self
            .store
            .org(org)
            .tool_sources()
            .source_tool(&slug, name)
            .await
        {
            Ok(t) => Ok(Some(t)),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Why `t` cannot be called now, if it cannot: its source not active, the tool disabled,
    /// removed upstream or unaddressable.
    pub fn unavailable(t: &SourceTool) -> Option<String> {
        if t.source.state != SourceState::Active {
            return Some(format!(
                "the source {} is {}",
                t.source.slug,
                t.source.state.as_str()
            ));
        }
        if !t.tool.enabled {
            return Some(format!("{} is not enabled", t.tool.name));
        }
        t.tool.can_enable().err()
    }

    /// Calls the external tool `t` for organization `org` with `args` (already validated and
    /// cleared by the guard), with its source's stored credential, and audits the call: source,
    /// tool, definition hash, duration, outcome.
    pub async fn call(
        &self,
        org: OrgId,
        t: &SourceTool,
        args: Value,
        audit: AuditEvent,
    ) -> Result<CallResult, CallFailure> {
        if let Some(why) = Self::unavailable(t) {
            return Err(CallFailure::Unavailable(why));
        }
        let started = std::time::Instant::now();
        let outcome = self.call_upstream(org, t, args).await;
        let duration = started.elapsed();
        let (outcome_text, status) = match &outcome {
            Ok(r) if r.is_error => ("upstream_error", r.status),
            Ok(r) => ("ok", r.status),
            Err(_) => ("failed", None),
        };
        let details = json!({
            "source": t.source.slug, "sourceId": t.source.id, "tool": t.tool.name,
            "definitionHash": t.tool.definition_hash,
            "durationMs": u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            "outcome": outcome_text, "upstreamStatus": status,
            "error": outcome.as_ref().err().map(ToString::to_string),
        });
        let record = audit.org(org).resource(t.source.id).details(details);
        if let Err(e) = self.store.org(org).audit().append_audit(record).await {
            tracing::warn!(error = %e, "the audit record of an external call could not be written");
        }
        outcome.map(|mut r| {
            r.duration = duration;
            r
        })
    }

    /// The "Test" action: a real call of a Tier 1 tool with `args`, enabled or not (to try it
    /// before enabling it), by a person the door authorized to manage the source. Any other
    /// tier is refused: a test must not change anything upstream. Audited like any call.
    pub async fn test_call(
        &self,
        org: OrgId,
        t: &SourceTool,
        args: Value,
        audit: AuditEvent,
    ) -> Result<CallResult, CallFailure> {
        if t.tool.tier != breeze_core::Tier::T1 {
            return Err(CallFailure::Unavailable(format!(
                "only Tier 1 tools can be test-called; {} is Tier {}",
                t.tool.name,
                t.tool.tier.number()
            )));
        }
        let mut enabled = t.clone();
        enabled.tool.enabled = true;
        self.call(org, &enabled, args, audit).await
    }

    async fn call_upstream(
        &self,
        org: OrgId,
        t: &SourceTool,
        args: Value,
    ) -> Result<CallResult, CallFailure> {
        let fail = |e: &dyn std::fmt::Display| CallFailure::Upstream(e.to_string());
        let vault = self.vault().map_err(|e| fail(&e))?;
        let sealed = self
            .store
            .org(org)
            .tool_sources()
            .sealed_credential(t.source.id)
            .await
            .map_err(|e| fail(&e))?;
        let credential = vault
            .open(&sealed, &t.source.id.to_string())
            .map_err(|e| fail(&e))?;
        let base = Url::parse(&t.source.url).map_err(|e| fail(&e))?;
        let headers = self
            .auth
            .headers_for(&t.source.id.to_string(), &base, &base, &credential)
            .await
            .map_err(|e| fail(&e))?;
        match t.source.kind {
            SourceKind::Mcp => {
                // One session per source and organization: whatever an upstream keeps per
                // session stays with the organization that made it.
                let key = format!("{}/{org}", t.source.id);
                let a = self
                    .sessions
                    .call(
                        &key,
                        &self.egress,
                        &base,
                        headers,
                        &t.tool.name,
                        args,
                        self.call_timeout,
                    )
                    .await
                    .map_err(|e| fail(&e))?;
                Ok(CallResult {
                    result: a.result,
                    is_error: a.is_error,
                    status: None,
                    duration: Duration::ZERO,
                })
            }
            SourceKind::OpenApi => {
                let plan: openapi::Plan = serde_json::from_value(t.tool.call_plan.clone())
                    .map_err(|e| fail(&format!("the stored call plan is unreadable: {e}")))?;
                let r = openapi::call(
                    &self.egress,
                    &base,
                    headers,
                    &plan,
                    &args,
                    self.call_timeout,
                )
                .await
                .map_err(|e| fail(&e))?;
                Ok(CallResult {
                    is_error: r.status >= 400,
                    status: Some(r.status),
                    result: json!({"status": r.status, "body": r.body}),
                    duration: Duration::ZERO,
                })
            }
        }
    }

    /// The clock discovery and calls read.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

/// The known tools of a source that a person can still enable, for "enable all reads".
pub fn enableable_reads(tools: &[Known]) -> Vec<&Known> {
    tools
        .iter()
        .filter(|t| t.tier == breeze_core::Tier::T1 && t.can_enable().is_ok())
        .collect()
}

/// The owner a store row names, for messages.
pub fn owner_label(owner: SourceOwner) -> &'static str {
    match owner {
        SourceOwner::Organization(_) => "organization",
        SourceOwner::Partner(_) => "all organizations",
    }
}
