//! Tool sources as stored: the source (owner, slug, kind, URLs, state, sealed credential,
//! what the last discovery skipped and warned about) and its tools (the merged view of
//! `breeze_core::tool_source::Known`: definition, hash, tiers, switches and flags).
//!
//! A source belongs to one organization or to its partner ([`SourceOwner`]). An organization
//! reads its own sources and its partner's ([`crate::OrgToolSources`], on the tenant pool,
//! where PostgreSQL's `partner_read` policy lets it read its partner's rows and `org_wall`
//! keeps it from writing them) and changes only its own. Partner-wide sources are changed
//! through [`crate::Store::partner_tool_sources`], which a door hands out only after checking the
//! permission to manage partner-wide policies. Every change commits with its audit record. The
//! sealed credential is read by one method only ([`crate::OrgToolSources::sealed_credential`]);
//! no listing carries it.

use breeze_core::{
    AuditEvent, OrgId, PartnerId, Tier, Timestamp,
    tool_source::{Known, Slug, SourceKind, SourceState},
};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    Result, Store, StoreError, audit,
    sql::{Arg, Tx, sql},
};

/// The most sources one owner may have.
pub const MAX_SOURCES: i64 = 100;

const COLUMNS: &str = "id, org_id, partner_id, slug, display_name, kind, url, document_url, \
    state, error, auth_method, offer_to_mcp, warnings, skipped, discovered_at, created_by, \
    created_at, updated_at, discovery_queued_at";

const TOOL_COLUMNS: &str = "name, description, input_schema, output_schema, annotations, \
    call_plan, definition_hash, proposed_tier, tier, tier_set, enabled, review_needed, removed, \
    unusable";

/// Who owns a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "level", content = "id", rename_all = "snake_case")]
pub enum SourceOwner {
    Organization(OrgId),
    /// Every organization of the partner.
    Partner(PartnerId),
}

impl SourceOwner {
    fn columns(self) -> (Option<OrgId>, Option<PartnerId>) {
        match self {
            SourceOwner::Organization(o) => (Some(o), None),
            SourceOwner::Partner(p) => (None, Some(p)),
        }
    }
}

/// A stored source, without its credential.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSource {
    pub id: Uuid,
    pub owner: SourceOwner,
    pub slug: Slug,
    pub display_name: String,
    pub kind: SourceKind,
    /// The MCP endpoint, or the OpenAPI API's base URL (the only origin a credential goes to).
    pub url: String,
    /// The OpenAPI document's URL.
    pub document_url: Option<String>,
    pub state: SourceState,
    /// Why the source is in error.
    pub error: Option<String>,
    pub auth_method: String,
    /// Its enabled tools are listed to MCP clients whose scopes and role allow them.
    pub offer_to_mcp: bool,
    pub warnings: Vec<String>,
    /// Operations the last discovery skipped: `[{method, path, reason}]`.
    pub skipped: Value,
    pub discovered_at: Option<Timestamp>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// A discovery is queued (from this time a worker may take it); `None`: none is.
    pub discovery_queued_at: Option<Timestamp>,
}

#[derive(sqlx::FromRow)]
struct SourceRow {
    id: Uuid,
    org_id: Option<OrgId>,
    partner_id: Option<PartnerId>,
    slug: String,
    display_name: String,
    kind: String,
    url: String,
    document_url: Option<String>,
    state: String,
    error: Option<String>,
    auth_method: String,
    offer_to_mcp: bool,
    #[sqlx(json)]
    warnings: Vec<String>,
    #[sqlx(json)]
    skipped: Value,
    discovered_at: Option<Timestamp>,
    created_by: String,
    created_at: Timestamp,
    updated_at: Timestamp,
    discovery_queued_at: Option<Timestamp>,
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

impl SourceRow {
    fn into_source(self) -> Result<ToolSource> {
        let owner = match (self.org_id, self.partner_id) {
            (Some(o), None) => SourceOwner::Organization(o),
            (None, Some(p)) => SourceOwner::Partner(p),
            _ => return Err(corrupt("a tool source with no single owner")),
        };
        Ok(ToolSource {
            id: self.id,
            owner,
            slug: Slug::parse(&self.slug).map_err(corrupt)?,
            display_name: self.display_name,
            kind: self.kind.parse().map_err(corrupt)?,
            url: self.url,
            document_url: self.document_url,
            state: self.state.parse().map_err(corrupt)?,
            error: self.error,
            auth_method: self.auth_method,
            offer_to_mcp: self.offer_to_mcp,
            warnings: self.warnings,
            skipped: self.skipped,
            discovered_at: self.discovered_at,
            created_by: self.created_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
            discovery_queued_at: self.discovery_queued_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct ToolRow {
    name: String,
    description: String,
    #[sqlx(json)]
    input_schema: Value,
    #[sqlx(json(nullable))]
    output_schema: Option<Value>,
    #[sqlx(json)]
    annotations: Value,
    #[sqlx(json)]
    call_plan: Value,
    definition_hash: String,
    proposed_tier: i16,
    tier: i16,
    tier_set: bool,
    enabled: bool,
    review_needed: bool,
    removed: bool,
    unusable: Option<String>,
}

fn tier(n: i16) -> Result<Tier> {
    match n {
        1 => Ok(Tier::T1),
        2 => Ok(Tier::T2),
        3 => Ok(Tier::T3),
        4 => Ok(Tier::T4),
        _ => Err(corrupt(format!("tier {n}"))),
    }
}

impl ToolRow {
    fn into_known(self) -> Result<Known> {
        Ok(Known {
            name: self.name,
            description: self.description,
            input_schema: self.input_schema,
            output_schema: self.output_schema,
            annotations: self.annotations,
            call_plan: self.call_plan,
            definition_hash: self.definition_hash,
            proposed_tier: tier(self.proposed_tier)?,
            tier: tier(self.tier)?,
            tier_set: self.tier_set,
            enabled: self.enabled,
            review_needed: self.review_needed,
            removed: self.removed,
            unusable: self.unusable,
        })
    }
}

/// A source to add. The id is the caller's: the credential was sealed for it.
#[derive(Debug, Clone)]
pub struct NewToolSource {
    pub id: Uuid,
    pub slug: Slug,
    pub display_name: String,
    pub kind: SourceKind,
    pub url: String,
    pub document_url: Option<String>,
    pub auth_method: String,
    /// The sealed credential (`breeze_sources::vault`).
    pub credential: String,
    pub offer_to_mcp: bool,
    pub created_by: String,
}

/// What one discovery found, merged with what was known.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryRecord {
    pub tools: Vec<Known>,
    pub skipped: Value,
    pub warnings: Vec<String>,
}

/// A change to one tool by a person.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolChange {
    pub enabled: Option<bool>,
    /// Setting the tier also clears "review needed".
    pub tier: Option<Tier>,
}

/// A change to a source by a person. `credential` (sealed) replaces the stored one.
#[derive(Debug, Clone, Default)]
pub struct SourceChange {
    pub display_name: Option<String>,
    pub state: Option<SourceState>,
    pub offer_to_mcp: Option<bool>,
    pub auth_method_and_credential: Option<(String, String)>,
}

fn check_new(new: &NewToolSource) -> Result<()> {
    let name = new.display_name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(StoreError::Invalid(
            "a tool source needs a display name of 1 to 200 characters".into(),
        ));
    }
    if new.url.len() > 2048 || new.document_url.as_ref().is_some_and(|u| u.len() > 2048) {
        return Err(StoreError::Invalid(
            "a URL is longer than 2048 characters".into(),
        ));
    }
    if new.kind == SourceKind::OpenApi && new.document_url.is_none() {
        return Err(StoreError::Invalid(
            "an OpenAPI source needs the document's URL".into(),
        ));
    }
    Ok(())
}

/// The organization whose sources `owner` may collide with on a slug: for an organization,
/// its partner's partner-wide sources; for a partner, every organization's own.
async fn slug_taken(tx: &mut Tx, owner: SourceOwner, slug: &Slug) -> Result<bool> {
    let n = match owner {
        SourceOwner::Organization(o) => sql(
            "SELECT COUNT(*) FROM tool_sources WHERE slug = $1 AND (org_id = $2 OR partner_id = \
                 (SELECT partner_id FROM organizations WHERE id = $2))",
        )
        .bind(slug.as_str())
        .bind(o)
        .fetch_scalar::<i64>(tx)
        .await?,
        SourceOwner::Partner(p) => sql(
            "SELECT COUNT(*) FROM tool_sources WHERE slug = $1 AND (partner_id = $2 OR org_id IN \
                 (SELECT id FROM organizations WHERE partner_id = $2))",
        )
        .bind(slug.as_str())
        .bind(p)
        .fetch_scalar::<i64>(tx)
        .await?,
    };
    Ok(n > 0)
}

async fn insert_source(
    store: &Store,
    owner: SourceOwner,
    new: NewToolSource,
    audit: AuditEvent,
) -> Result<()> {
    check_new(&new)?;
    let (org, partner) = owner.columns();
    let now = store.clock.now();
    let mut tx = Tx::begin(&store.pool).await?;
    let count = sql("SELECT COUNT(*) FROM tool_sources WHERE org_id = $1 OR partner_id = $2")
        .bind(org)
        .bind(partner)
        .fetch_scalar::<i64>(&mut tx)
        .await?;
    if count >= MAX_SOURCES {
        return Err(StoreError::Conflict(format!(
            "the owner already has {MAX_SOURCES} tool sources"
        )));
    }
    let taken = || format!("the slug {:?} is taken", new.slug.as_str());
    if slug_taken(&mut tx, owner, &new.slug).await? {
        return Err(StoreError::Conflict(taken()));
    }
    sql(format!(
        "INSERT INTO tool_sources ({COLUMNS}, credential) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
         'active', NULL, $9, $10, $11, $12, NULL, $13, $14, $14, $14, $15)"
    ))
    .bind(new.id)
    .bind(org)
    .bind(partner)
    .bind(new.slug.as_str())
    .bind(new.display_name.trim())
    .bind(new.kind.as_str())
    .bind(new.url.as_str())
    .bind(new.document_url.as_deref())
    .bind(new.auth_method.as_str())
    .bind(new.offer_to_mcp)
    .bind(Arg::json(&Vec::<String>::new()))
    .bind(Arg::json(&Value::Array(vec![])))
    .bind(new.created_by.as_str())
    .bind(now)
    .bind(new.credential.as_str())
    .execute(&mut tx)
    .await
    .map_err(|e| e.conflict_as(taken))?;
    let mut audit = audit.resource(new.id).details(serde_json::json!({
        "slug": new.slug, "kind": new.kind.as_str(), "url": new.url,
        "documentUrl": new.document_url, "authMethod": new.auth_method,
        "offerToMcp": new.offer_to_mcp, "owner": owner,
    }));
    if let Some(o) = org {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await
}

/// `(clause, arg)` restricting `tool_sources` (or its tools) to `owner`'s rows.
fn owned_by(owner: SourceOwner, n: usize) -> (String, Arg) {
    match owner {
        SourceOwner::Organization(o) => (format!("org_id = ${n}"), o.into()),
        SourceOwner::Partner(p) => (format!("partner_id = ${n}"), p.into()),
    }
}

async fn owned_source(store: &Store, owner: SourceOwner, id: Uuid) -> Result<ToolSource> {
    let (clause, arg) = owned_by(owner, 2);
    sql(format!(
        "SELECT {COLUMNS} FROM tool_sources WHERE id = $1 AND {clause}"
    ))
    .bind(id)
    .bind(arg)
    .fetch_optional::<SourceRow>(store)
    .await?
    .ok_or(StoreError::NotFound("tool source"))?
    .into_source()
}

async fn write_discovery(
    store: &Store,
    owner: SourceOwner,
    id: Uuid,
    found: std::result::Result<DiscoveryRecord, String>,
    audit: AuditEvent,
) -> Result<()> {
    let source = owned_source(store, owner, id).await?;
    let (org, partner) = owner.columns();
    let now = store.clock.now();
    let mut tx = Tx::begin(&store.pool).await?;
    let details = match found {
        Ok(record) => {
            sql("DELETE FROM tool_source_tools WHERE source_id = $1")
                .bind(id)
                .execute(&mut tx)
                .await?;
            for t in &record.tools {
                sql(format!(
                    "INSERT INTO tool_source_tools (source_id, org_id, partner_id, {TOOL_COLUMNS}, \
                     updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
                     $14, $15, $16, $17, $18)"
                ))
                .bind(id)
                .bind(org)
                .bind(partner)
                .bind(t.name.as_str())
                .bind(t.description.as_str())
                .bind(Arg::json(&t.input_schema))
                .bind(Arg::Json(
                    t.output_schema.as_ref().map(crate::sql::json_value),
                ))
                .bind(Arg::json(&t.annotations))
                .bind(Arg::json(&t.call_plan))
                .bind(t.definition_hash.as_str())
                .bind(i64::from(t.proposed_tier.number()))
                .bind(i64::from(t.tier.number()))
                .bind(t.tier_set)
                .bind(t.enabled)
                .bind(t.review_needed)
                .bind(t.removed)
                .bind(t.unusable.as_deref())
                .bind(now)
                .execute(&mut tx)
                .await?;
            }
            // A source in error comes back once discovery succeeds; a disabled one stays so.
            let state = if source.state == SourceState::Disabled {
                SourceState::Disabled
            } else {
                SourceState::Active
            };
            sql(
                "UPDATE tool_sources SET state = $2, error = NULL, warnings = $3, skipped = $4, \
                 discovered_at = $5, updated_at = $5, discovery_queued_at = NULL WHERE id = $1",
            )
            .bind(id)
            .bind(state.as_str())
            .bind(Arg::json(&record.warnings))
            .bind(Arg::json(&record.skipped))
            .bind(now)
            .execute(&mut tx)
            .await?;
            serde_json::json!({
                "slug": source.slug, "outcome": "discovered", "tools": record.tools.len(),
                "skipped": record.skipped.as_array().map_or(0, Vec::len),
                "reviewNeeded": record.tools.iter().filter(|t| t.review_needed).count(),
            })
        }
        Err(reason) => {
            sql(
                "UPDATE tool_sources SET state = 'error', error = $2, updated_at = $3, \
                 discovery_queued_at = NULL WHERE id = $1",
            )
            .bind(id)
            .bind(reason.as_str())
            .bind(now)
            .execute(&mut tx)
            .await?;
            serde_json::json!({"slug": source.slug, "outcome": "failed", "error": reason})
        }
    };
    let mut audit = audit.resource(id).details(details);
    if let Some(o) = org {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await
}

/// The tools of `owner`'s source `id`, read on `target` (an organization's reads on its tenant
/// connection, so row security applies to them too).
async fn owned_tools<'a>(
    target: impl Into<crate::sql::Target<'a>>,
    owner: SourceOwner,
    id: Uuid,
) -> Result<Vec<Known>> {
    let (clause, arg) = owned_by(owner, 2);
    sql(format!(
        "SELECT {TOOL_COLUMNS} FROM tool_source_tools WHERE source_id = $1 AND {clause} ORDER BY name"
    ))
    .bind(id)
    .bind(arg)
    .fetch_all::<ToolRow>(target)
    .await?
    .into_iter()
    .map(ToolRow::into_known)
    .collect()
}

async fn change_tool(
    store: &Store,
    owner: SourceOwner,
    id: Uuid,
    name: &str,
    change: ToolChange,
    audit: AuditEvent,
) -> Result<Known> {
    let source = owned_source(store, owner, id).await?;
    let mut tool = owned_tools(store, owner, id)
        .await?
        .into_iter()
        .find(|t| t.name == name)
        .ok_or(StoreError::NotFound("tool"))?;
    if let Some(t) = change.tier {
        if t == Tier::T4 {
            return Err(StoreError::Invalid(
                "an external tool's tier is 1, 2 or 3".into(),
            ));
        }
        tool.set_tier(t);
    }
    if let Some(enabled) = change.enabled {
        if enabled {
            tool.can_enable().map_err(StoreError::Invalid)?;
        }
        tool.enabled = enabled;
    }
    let now = store.clock.now();
    let mut tx = Tx::begin(&store.pool).await?;
    sql(
        "UPDATE tool_source_tools SET tier = $3, tier_set = $4, enabled = $5, review_needed = $6, \
         updated_at = $7 WHERE source_id = $1 AND name = $2",
    )
    .bind(id)
    .bind(name)
    .bind(i64::from(tool.tier.number()))
    .bind(tool.tier_set)
    .bind(tool.enabled)
    .bind(tool.review_needed)
    .bind(now)
    .execute(&mut tx)
    .await?;
    let mut audit = audit.resource(id).details(serde_json::json!({
        "slug": source.slug, "tool": name, "enabled": tool.enabled, "tier": tool.tier.number(),
        "definitionHash": tool.definition_hash,
    }));
    if let SourceOwner::Organization(o) = owner {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await?;
    Ok(tool)
}

async fn change_source(
    store: &Store,
    owner: SourceOwner,
    id: Uuid,
    change: SourceChange,
    audit: AuditEvent,
) -> Result<ToolSource> {
    let before = owned_source(store, owner, id).await?;
    if let Some(name) = &change.display_name
        && (name.trim().is_empty() || name.chars().count() > 200)
    {
        return Err(StoreError::Invalid(
            "a tool source needs a display name of 1 to 200 characters".into(),
        ));
    }
    if change.state == Some(SourceState::InError) {
        return Err(StoreError::Invalid(
            "only discovery puts a source in error".into(),
        ));
    }
    let now = store.clock.now();
    let mut tx = Tx::begin(&store.pool).await?;
    let (method, credential) = change.auth_method_and_credential.clone().unzip();
    sql(
        "UPDATE tool_sources SET display_name = COALESCE($2, display_name), \
         state = COALESCE($3, state), offer_to_mcp = COALESCE($4, offer_to_mcp), \
         auth_method = COALESCE($5, auth_method), credential = COALESCE($6, credential), \
         updated_at = $7 WHERE id = $1",
    )
    .bind(id)
    .bind(change.display_name.as_deref().map(str::trim))
    .bind(change.state.map(SourceState::as_str))
    .bind(change.offer_to_mcp)
    .bind(method.as_deref())
    .bind(credential.as_deref())
    .bind(now)
    .execute(&mut tx)
    .await?;
    let mut audit = audit.resource(id).details(serde_json::json!({
        "slug": before.slug, "displayName": change.display_name,
        "state": change.state.map(SourceState::as_str), "offerToMcp": change.offer_to_mcp,
        "authMethod": method, "credentialReplaced": credential.is_some(),
    }));
    if let SourceOwner::Organization(o) = owner {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await?;
    owned_source(store, owner, id).await
}

async fn delete_source(
    store: &Store,
    owner: SourceOwner,
    id: Uuid,
    audit: AuditEvent,
) -> Result<()> {
    let source = owned_source(store, owner, id).await?;
    let now = store.clock.now();
    let mut tx = Tx::begin(&store.pool).await?;
    sql("DELETE FROM tool_sources WHERE id = $1")
        .bind(id)
        .execute(&mut tx)
        .await?;
    let mut audit = audit
        .resource(id)
        .details(serde_json::json!({"slug": source.slug}));
    if let SourceOwner::Organization(o) = owner {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await
}

/// Which tools a bulk switch turns on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSwitch {
    /// Every Tier 1 tool that can be enabled (not removed upstream, name usable).
    EnableReads,
    /// Every enabled tool.
    DisableAll,
}

async fn switch_tools(
    store: &Store,
    owner: SourceOwner,
    id: Uuid,
    switch: ToolSwitch,
    audit: AuditEvent,
) -> Result<u64> {
    let source = owned_source(store, owner, id).await?;
    let now = store.clock.now();
    let mut tx = Tx::begin(&store.pool).await?;
    let changed =
        match switch {
            ToolSwitch::EnableReads => sql(
                "UPDATE tool_source_tools SET enabled = $2, updated_at = $3 WHERE source_id = $1 \
                 AND tier = 1 AND NOT removed AND unusable IS NULL AND NOT enabled",
            )
            .bind(id)
            .bind(true)
            .bind(now)
            .execute(&mut tx)
            .await?,
            ToolSwitch::DisableAll => sql(
                "UPDATE tool_source_tools SET enabled = $2, updated_at = $3 WHERE source_id = $1 \
                 AND enabled",
            )
            .bind(id)
            .bind(false)
            .bind(now)
            .execute(&mut tx)
            .await?,
        };
    let mut audit = audit.resource(id).details(serde_json::json!({
        "slug": source.slug,
        "switch": match switch { ToolSwitch::EnableReads => "enable_reads", ToolSwitch::DisableAll => "disable_all" },
        "changed": changed,
    }));
    if let SourceOwner::Organization(o) = owner {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await?;
    Ok(changed)
}

async fn queue_discovery(
    store: &Store,
    owner: SourceOwner,
    id: Uuid,
    audit: AuditEvent,
) -> Result<ToolSource> {
    let source = owned_source(store, owner, id).await?;
    let now = store.clock.now();
    let mut tx = Tx::begin(&store.pool).await?;
    sql("UPDATE tool_sources SET discovery_queued_at = $2, updated_at = $2 WHERE id = $1")
        .bind(id)
        .bind(now)
        .execute(&mut tx)
        .await?;
    let mut audit = audit
        .resource(id)
        .details(serde_json::json!({"slug": source.slug, "outcome": "queued"}));
    if let SourceOwner::Organization(o) = owner {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await?;
    owned_source(store, owner, id).await
}

/// The sources of one partner that every organization of it sees: changed only by whoever may
/// manage partner-wide policies (the door checks, then asks [`Store::partner_tool_sources`]).
#[derive(Debug, Clone, Copy)]
pub struct PartnerToolSources<'a> {
    store: &'a Store,
    partner: PartnerId,
}

impl Store {
    /// The partner's partner-wide sources, to change. Hand it out only to a caller allowed to
    /// manage partner-wide policies.
    pub fn partner_tool_sources(&self, partner: PartnerId) -> PartnerToolSources<'_> {
        PartnerToolSources {
            store: self,
            partner,
        }
    }
}

/// The write methods both owners share, each confined to the owner's rows.
macro_rules! owner_writes {
    ($ty:ty, $owner:expr) => {
        impl $ty {
            /// Adds a source (it starts active, with no tools until discovery runs), audited.
            pub async fn create_tool_source(
                &self,
                new: NewToolSource,
                audit: AuditEvent,
            ) -> Result<ToolSource> {
                let id = new.id;
                insert_source(self.store, $owner(self), new, audit).await?;
                owned_source(self.store, $owner(self), id).await
            }

            /// Stores a discovery's outcome: its merged tools, skips and warnings, or the
            /// reason it failed (the source goes to error, its tools stay as they were).
            pub async fn record_discovery(
                &self,
                id: Uuid,
                found: std::result::Result<DiscoveryRecord, String>,
                audit: AuditEvent,
            ) -> Result<()> {
                write_discovery(self.store, $owner(self), id, found, audit).await
            }

            /// Enables or disables one tool, or sets its tier (clearing "review needed").
            pub async fn change_source_tool(
                &self,
                id: Uuid,
                name: &str,
                change: ToolChange,
                audit: AuditEvent,
            ) -> Result<Known> {
                change_tool(self.store, $owner(self), id, name, change, audit).await
            }

            /// Renames, enables or disables a source, offers it to MCP clients or not, or
            /// replaces its credential.
            pub async fn change_tool_source(
                &self,
                id: Uuid,
                change: SourceChange,
                audit: AuditEvent,
            ) -> Result<ToolSource> {
                change_source(self.store, $owner(self), id, change, audit).await
            }

            /// Turns on every read or off every tool of a source at once (one audit record);
            /// returns how many tools changed.
            pub async fn switch_source_tools(
                &self,
                id: Uuid,
                switch: ToolSwitch,
                audit: AuditEvent,
            ) -> Result<u64> {
                switch_tools(self.store, $owner(self), id, switch, audit).await
            }

            /// Queues a discovery of the source (a worker runs it; Breeze never polls).
            pub async fn queue_discovery(&self, id: Uuid, audit: AuditEvent) -> Result<ToolSource> {
                queue_discovery(self.store, $owner(self), id, audit).await
            }

            /// Deletes a source and its tools.
            pub async fn delete_tool_source(&self, id: Uuid, audit: AuditEvent) -> Result<()> {
                delete_source(self.store, $owner(self), id, audit).await
            }

            /// One of the owner's own sources (not, for an organization, its partner's).
            pub async fn own_tool_source(&self, id: Uuid) -> Result<ToolSource> {
                owned_source(self.store, $owner(self), id).await
            }

            /// The sealed credential of one of the owner's own sources (for discovery).
            pub async fn own_sealed_credential(&self, id: Uuid) -> Result<String> {
                let (clause, arg) = owned_by($owner(self), 2);
                sql(format!(
                    "SELECT credential FROM tool_sources WHERE id = $1 AND {clause}"
                ))
                .bind(id)
                .bind(arg)
                .fetch_optional::<(String,)>(self.store)
                .await?
                .map(|(c,)| c)
                .ok_or(StoreError::NotFound("tool source"))
            }

            /// The tools of one of the owner's own sources, in name order.
            pub async fn own_source_tools(&self, id: Uuid) -> Result<Vec<Known>> {
                owned_tools(self.store, $owner(self), id).await
            }
        }
    };
}

owner_writes!(PartnerToolSources<'_>, |s: &PartnerToolSources<'_>| {
    SourceOwner::Partner(s.partner)
});
owner_writes!(crate::OrgToolSources<'_>, |s: &crate::OrgToolSources<
    '_,
>| {
    SourceOwner::Organization(s.org)
});

/// A callable tool of a source, as a call finds it.
#[derive(Debug, Clone)]
pub struct SourceTool {
    pub source: ToolSource,
    pub tool: Known,
}

impl crate::OrgToolSources<'_> {
    /// The sources this organization sees: its own and its partner's, by slug.
    pub async fn tool_sources(&self) -> Result<Vec<ToolSource>> {
        sql(format!(
            "SELECT {COLUMNS} FROM tool_sources WHERE org_id = $1 OR partner_id = \
             (SELECT partner_id FROM organizations WHERE id = $1) ORDER BY slug"
        ))
        .bind(self.org)
        .fetch_all::<SourceRow>(self)
        .await?
        .into_iter()
        .map(SourceRow::into_source)
        .collect()
    }

    /// A source this organization sees, by id.
    pub async fn tool_source(&self, id: Uuid) -> Result<ToolSource> {
        sql(format!(
            "SELECT {COLUMNS} FROM tool_sources WHERE id = $2 AND (org_id = $1 OR partner_id = \
             (SELECT partner_id FROM organizations WHERE id = $1))"
        ))
        .bind(self.org)
        .bind(id)
        .fetch_optional::<SourceRow>(self)
        .await?
        .ok_or(StoreError::NotFound("tool source"))?
        .into_source()
    }

    /// The tools of a source this organization sees, in name order.
    pub async fn source_tools(&self, id: Uuid) -> Result<Vec<Known>> {
        let source = self.tool_source(id).await?;
        owned_tools(self, source.owner, id).await
    }

    /// The sealed credential of a source this organization sees: for the call path only.
    pub async fn sealed_credential(&self, id: Uuid) -> Result<String> {
        sql(
            "SELECT credential FROM tool_sources WHERE id = $2 AND (org_id = $1 OR partner_id = \
             (SELECT partner_id FROM organizations WHERE id = $1))",
        )
        .bind(self.org)
        .bind(id)
        .fetch_optional::<(String,)>(self)
        .await?
        .map(|(c,)| c)
        .ok_or(StoreError::NotFound("tool source"))
    }

    /// The tool `name` of the source `slug` this organization sees, whatever its state.
    pub async fn source_tool(&self, slug: &Slug, name: &str) -> Result<SourceTool> {
        let source = sql(format!(
            "SELECT {COLUMNS} FROM tool_sources WHERE slug = $2 AND (org_id = $1 OR partner_id = \
             (SELECT partner_id FROM organizations WHERE id = $1)) ORDER BY org_id NULLS LAST LIMIT 1"
        ))
        .bind(self.org)
        .bind(slug.as_str())
        .fetch_optional::<SourceRow>(self)
        .await?
        .ok_or(StoreError::NotFound("tool source"))?
        .into_source()?;
        let tool = owned_tools(self, source.owner, source.id)
            .await?
            .into_iter()
            .find(|t| t.name == name)
            .ok_or(StoreError::NotFound("tool"))?;
        Ok(SourceTool { source, tool })
    }

    /// Every enabled tool of this organization's active sources offered to MCP clients.
    pub async fn offered_tools(&self) -> Result<Vec<SourceTool>> {
        let mut out = Vec::new();
        for source in self.tool_sources().await? {
            if !source.offer_to_mcp || source.state != SourceState::Active {
                continue;
            }
            for tool in owned_tools(self, source.owner, source.id).await? {
                if tool.enabled {
                    out.push(SourceTool {
                        source: source.clone(),
                        tool,
                    });
                }
            }
        }
        Ok(out)
    }
}

impl crate::CrossOrg<'_> {
    /// Whether any organization or partner has a tool source: a production server without
    /// `TOOL_SOURCES_KEY` refuses to start then, since their credentials could not be opened.
    pub async fn tool_sources_exist(&self) -> Result<bool> {
        let n = sql("SELECT COUNT(*) FROM tool_sources")
            .fetch_scalar::<i64>(self.store)
            .await?;
        Ok(n > 0)
    }

    /// Sources whose queued discovery may be taken at `now`, oldest first.
    pub async fn queued_discoveries(&self, now: Timestamp, limit: i64) -> Result<Vec<ToolSource>> {
        sql(format!(
            "SELECT {COLUMNS} FROM tool_sources WHERE discovery_queued_at <= $1 \
             ORDER BY discovery_queued_at LIMIT $2"
        ))
        .bind(now)
        .bind(limit)
        .fetch_all::<SourceRow>(self.store)
        .await?
        .into_iter()
        .map(SourceRow::into_source)
        .collect()
    }

    /// Takes the queued discovery of `source` (as listed, queued at `seen`) until `until`:
    /// `false` when another worker took it first. A discovery that finishes clears the queue;
    /// one cut short is taken again after `until`.
    pub async fn claim_discovery(
        &self,
        source: Uuid,
        seen: Timestamp,
        until: Timestamp,
    ) -> Result<bool> {
        let n = sql(
            "UPDATE tool_sources SET discovery_queued_at = $3 WHERE id = $1 \
             AND discovery_queued_at = $2",
        )
        .bind(source)
        .bind(seen)
        .bind(until)
        .execute(self.store)
        .await?;
        Ok(n == 1)
    }
}
