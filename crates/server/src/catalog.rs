//! Catalog modes: what `tools/list` shows a connection, and the consolidated catalog's
//! meta-tools.
//!
//! - `full`: every tool the key's scopes reach, as separate MCP tools.
//! - `consolidated`: five meta-tools instead — `breeze_discover` (byte-budgeted pages of
//!   operations, with opaque cursors), `breeze_describe` (1 to 3 complete schemas) and
//!   `breeze_read` / `breeze_write` / `breeze_execute`, which run an operation through the same
//!   `Pipeline::call` as a direct call.
//! - toolsets (`?toolsets=devices,scripts`) narrow either mode to the chosen domains (the
//!   registry's `ToolSpec::domain`).
//!
//! The choice comes from the connection URL's query (`?catalog=`, `?toolsets=`), else the
//! `X-Breeze-Catalog` / `X-Breeze-Toolsets` headers, else the server's `BREEZE_MCP_CATALOG`.
//! It is carried in [`Connected`] and, as text, in the engine's `Client::binding`: a session
//! keeps the choice its `initialize` made, and a request on it that asks for another is refused
//! (400) — a client changes catalogs by opening a new session.
//!
//! A cursor is `offset | filter hash | catalog version | MAC` in hex: bound to the filters (and
//! the key's scopes and the connection's catalog) and to the registry's version, and signed with
//! a key derived from that version, so a cursor reused under other filters or from an older
//! catalog, or altered, is `INVALID_CURSOR`, while every instance of a cluster takes the
//! cursors of the others.

use std::sync::Arc;

use breeze_core::{Caller, ScopeSet, Tier};
use breeze_guard::Guard;
use breeze_tools::{Effect, ErrorCode, Registry, ToolError, ToolSpec, contract};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The header choosing the catalog mode (the `?catalog=` query parameter wins over it).
pub const CATALOG_HEADER: &str = "x-breeze-catalog";
/// The header choosing toolsets (the `?toolsets=` query parameter wins over it).
pub const TOOLSETS_HEADER: &str = "x-breeze-toolsets";
/// The default page budget of `breeze_discover`, in bytes of `structuredContent`.
pub const DEFAULT_DISCOVER_BYTES: usize = 8192;
/// The smallest page budget accepted: room for the envelope and a few entries.
pub const MIN_DISCOVER_BYTES: usize = 1024;
/// `breeze_describe` takes at most this many operations per call.
pub const DESCRIBE_MAX: usize = 3;

/// How a connection's tools are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatalogMode {
    /// Every tool the key reaches, one MCP tool each.
    #[default]
    Full,
    /// The meta-tools only; operations are discovered and run through them.
    Consolidated,
}

impl CatalogMode {
    /// The values a client or setting may name.
    pub const VALID: &'static str = "full, consolidated";

    pub fn as_str(self) -> &'static str {
        match self {
            CatalogMode::Full => "full",
            CatalogMode::Consolidated => "consolidated",
        }
    }

    /// Parses `full` or `consolidated` (any case); the error names the valid values.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "full" => Ok(CatalogMode::Full),
            "consolidated" => Ok(CatalogMode::Consolidated),
            other => Err(format!(
                "unknown catalog {other:?} (valid: {})",
                CatalogMode::VALID
            )),
        }
    }
}

/// The server's catalog settings.
#[derive(Debug, Clone, Copy)]
pub struct CatalogConfig {
    /// `BREEZE_MCP_CATALOG`: the mode of a connection that chooses none.
    pub default_mode: CatalogMode,
    /// `BREEZE_MCP_DISCOVER_BYTES`: the most bytes of one `breeze_discover` page.
    pub discover_bytes: usize,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            default_mode: CatalogMode::Full,
            discover_bytes: DEFAULT_DISCOVER_BYTES,
        }
    }
}

/// One connection's catalog: its mode and, when chosen, its toolsets (domains, sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    pub mode: CatalogMode,
    pub toolsets: Option<Vec<&'static str>>,
}

impl Catalog {
    /// Whether the catalog holds `spec` (its domain is among the toolsets, if any were chosen).
    pub fn admits(&self, spec: &ToolSpec) -> bool {
        self.toolsets
            .as_ref()
            .is_none_or(|t| t.contains(&spec.domain))
    }

    /// Whether the catalog holds external tools (Tool Sources offered to MCP clients): only
    /// the full catalog with no toolsets chosen (a toolset names Breeze's own domains).
    pub fn admits_external(&self) -> bool {
        self.mode != CatalogMode::Consolidated && self.toolsets.is_none()
    }

    /// The canonical text of the choice: the session binding, and part of a cursor's filters.
    pub fn binding(&self) -> String {
        match &self.toolsets {
            None => format!("catalog={}", self.mode.as_str()),
            Some(t) => format!("catalog={};toolsets={}", self.mode.as_str(), t.join(",")),
        }
    }
}

/// An MCP connection as the engine carries it (`breeze_mcp::Client`'s principal): the
/// [`Caller`] its credential authenticated as, and the catalog the connection chose.
#[derive(Debug, Clone)]
pub struct Connected {
    pub caller: Caller,
    pub catalog: Arc<Catalog>,
}

/// The value of `name` in a query string (the first one), form-decoded (`+` is a space; a
/// malformed escape stays as written).
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Chooses a connection's catalog from the query (`catalog`, `toolsets`), else the headers,
/// else `default`. `Ok(None)`: nothing was chosen (the default applies). The error is the 400's
/// message: it names the valid values.
pub fn choose(
    registry: &Registry,
    default: CatalogMode,
    headers: &axum::http::HeaderMap,
    query: Option<&str>,
) -> Result<Option<Catalog>, String> {
    let header = |name: &str| -> Result<Option<String>, String> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|s| Some(s.to_owned()))
                .map_err(|_| format!("the {name} header is not text")),
        }
    };
    let mode = query_param(query, "catalog").or(header(CATALOG_HEADER)?);
    let toolsets = query_param(query, "toolsets").or(header(TOOLSETS_HEADER)?);
    if mode.is_none() && toolsets.is_none() {
        return Ok(None);
    }
    let mode = match mode {
        Some(m) => CatalogMode::parse(&m)?,
        None => default,
    };
    let toolsets = match toolsets.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(list) => {
            let domains = registry.domains();
            let mut chosen = Vec::new();
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let Some(d) = domains.iter().find(|d| **d == name) else {
                    return Err(format!(
                        "unknown toolset {name:?} (valid: {})",
                        domains.join(", ")
                    ));
                };
                chosen.push(*d);
            }
            chosen.sort_unstable();
            chosen.dedup();
            Some(chosen)
        }
    };
    Ok(Some(Catalog { mode, toolsets }))
}

/// Which meta-tool runs a call: what the call can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpClass {
    /// Tier 1 reads.
    Read,
    /// Tier 2, or a change that runs nothing on a device.
    Write,
    /// Tier 3, or anything that runs on a device.
    Execute,
}

impl OpClass {
    pub const ALL: [OpClass; 3] = [OpClass::Read, OpClass::Write, OpClass::Execute];

    fn of(tier: Tier, effects: &[Effect]) -> Self {
        if tier >= Tier::T3 || effects.contains(&Effect::Execute) {
            OpClass::Execute
        } else if tier == Tier::T2 || effects.iter().any(|e| *e != Effect::Read) {
            OpClass::Write
        } else {
            OpClass::Read
        }
    }

    /// The meta-tool that runs calls of this class.
    pub fn meta_tool(self) -> MetaTool {
        match self {
            OpClass::Read => MetaTool::Read,
            OpClass::Write => MetaTool::Write,
            OpClass::Execute => MetaTool::Execute,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OpClass::Read => "read",
            OpClass::Write => "write",
            OpClass::Execute => "execute",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        OpClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// The classes of `spec`'s calls: one per action (or the tool's own, without actions).
pub fn classes_of(spec: &ToolSpec) -> Vec<OpClass> {
    let mut c: Vec<OpClass> = if spec.actions.is_empty() {
        vec![OpClass::of(spec.tier, &spec.effects)]
    } else {
        spec.actions
            .iter()
            .map(|a| OpClass::of(a.tier, &[a.effect]))
            .collect()
    };
    c.sort_unstable();
    c.dedup();
    c
}

/// The class of one call: its action's; for a call naming no known action, the tool's highest
/// (fail closed: validation refuses such a call anyway).
pub fn call_class(spec: &ToolSpec, input: &Value) -> OpClass {
    match spec.action(input) {
        Some(a) => OpClass::of(a.tier, &[a.effect]),
        None => classes_of(spec)
            .into_iter()
            .max()
            .unwrap_or(OpClass::Execute),
    }
}

/// The consolidated catalog's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaTool {
    Discover,
    Describe,
    Read,
    Write,
    Execute,
}

impl MetaTool {
    pub const ALL: [MetaTool; 5] = [
        MetaTool::Discover,
        MetaTool::Describe,
        MetaTool::Read,
        MetaTool::Write,
        MetaTool::Execute,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MetaTool::Discover => "breeze_discover",
            MetaTool::Describe => "breeze_describe",
            MetaTool::Read => "breeze_read",
            MetaTool::Write => "breeze_write",
            MetaTool::Execute => "breeze_execute",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        MetaTool::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether it only reads: the operations a read meta-tool runs are reads (a write through
    /// it is refused as `TOOL_EFFECT_MISMATCH`).
    pub fn read_only(self) -> bool {
        matches!(
            self,
            MetaTool::Discover | MetaTool::Describe | MetaTool::Read
        )
    }

    /// The tier a key must reach to see and call it (`ai:read`, `ai:write`, `ai:execute`).
    pub fn tier(self) -> Tier {
        match self {
            MetaTool::Discover | MetaTool::Describe | MetaTool::Read => Tier::T1,
            MetaTool::Write => Tier::T2,
            MetaTool::Execute => Tier::T3,
        }
    }

    /// The class of operations it runs (`None` for discover and describe).
    pub fn class(self) -> Option<OpClass> {
        match self {
            MetaTool::Read => Some(OpClass::Read),
            MetaTool::Write => Some(OpClass::Write),
            MetaTool::Execute => Some(OpClass::Execute),
            MetaTool::Discover | MetaTool::Describe => None,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            MetaTool::Discover => "Discover operations",
            MetaTool::Describe => "Describe operations",
            MetaTool::Read => "Run a read operation",
            MetaTool::Write => "Run a write operation",
            MetaTool::Execute => "Run an execute operation",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            MetaTool::Discover => {
                "Lists Breeze operations in pages (name, title, one-line summary, domain, tiers, and which of breeze_read / breeze_write / breeze_execute runs each). Filter with query (words in the name or description), domain, effect (read|write|execute) or tier (1-3); pass nextCursor back unchanged with the same filters for the next page. Lists only what this key's scopes could call; roles and approvals are decided at call time."
            }
            MetaTool::Describe => {
                "Returns the complete input and output schemas, tiers and actions of 1 to 3 operations named by breeze_discover. Describe an operation before calling it."
            }
            MetaTool::Read => {
                "Runs a read-only operation (Tier 1): {\"operation\": name, \"input\": {...its input schema...}}. The result is the operation's own."
            }
            MetaTool::Write => {
                "Runs a low-risk change (Tier 2, or a change that runs nothing on a device): {\"operation\": name, \"input\": {...}}. Same checks, limits and audit as calling the operation directly."
            }
            MetaTool::Execute => {
                "Runs a Tier 3 or device-executing operation: {\"operation\": name, \"input\": {...}}. Tier 3 waits for a person's approval exactly as a direct call does."
            }
        }
    }

    pub fn input_schema(self) -> Value {
        match self {
            MetaTool::Discover => json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "query": { "type": "string", "description": "Words to find in an operation's name, title or description." },
                    "domain": { "type": "string", "description": "Only operations of this domain (e.g. devices, scripts)." },
                    "effect": { "type": "string", "enum": ["read", "write", "execute"], "description": "Only operations runnable with this meta-tool." },
                    "tier": { "type": "integer", "minimum": 1, "maximum": 3, "description": "Only operations with a call of this tier." },
                    "cursor": { "type": "string", "description": "nextCursor of the previous page, with the same filters." }
                }
            }),
            MetaTool::Describe => json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["operations"],
                "properties": {
                    "operations": {
                        "type": "array", "minItems": 1, "maxItems": DESCRIBE_MAX, "uniqueItems": true,
                        "items": { "type": "string" },
                        "description": "1 to 3 operation names."
                    }
                }
            }),
            MetaTool::Read | MetaTool::Write | MetaTool::Execute => json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["operation"],
                "properties": {
                    "operation": { "type": "string", "description": "The operation's name (breeze_discover)." },
                    "input": { "type": "object", "description": "The operation's arguments, as breeze_describe's inputSchema says." }
                }
            }),
        }
    }

    /// Every `structuredContent` it can answer with (both official SDKs validate error results
    /// too).
    pub fn output_schema(self) -> Value {
        let success = match self {
            MetaTool::Discover => json!({
                "type": "object",
                "required": ["operations", "total", "catalogVersion", "note"],
                "properties": {
                    "operations": { "type": "array", "items": {
                        "type": "object",
                        "required": ["name", "title", "summary", "domain", "tiers", "metaTools"],
                        "properties": {
                            "name": { "type": "string" }, "title": { "type": "string" },
                            "summary": { "type": "string" }, "domain": { "type": "string" },
                            "tiers": { "type": "array", "items": { "type": "integer" } },
                            "metaTools": { "type": "array", "items": { "type": "string" } }
                        }
                    } },
                    "total": { "type": "integer", "description": "Operations matching the filters, over all pages." },
                    "catalogVersion": { "type": "string" },
                    "nextCursor": { "type": "string" },
                    "note": { "type": "string" }
                }
            }),
            MetaTool::Describe => json!({
                "type": "object",
                "required": ["operations"],
                "properties": {
                    "operations": { "type": "array", "items": {
                        "type": "object",
                        "required": ["name", "title", "description", "domain", "tier", "metaTools", "inputSchema", "outputSchema"],
                        "properties": {
                            "name": { "type": "string" }, "title": { "type": "string" },
                            "description": { "type": "string" }, "domain": { "type": "string" },
                            "tier": { "type": "integer" },
                            "actions": { "type": "array", "items": { "type": "object" } },
                            "metaTools": { "type": "array", "items": { "type": "string" } },
                            "inputSchema": { "type": "object" }, "outputSchema": { "type": "object" }
                        }
                    } }
                }
            }),
            // The operation's own output, error envelope or pending-approval answer: each is
            // an object, and breeze_describe gives the operation's exact schema.
            MetaTool::Read | MetaTool::Write | MetaTool::Execute => {
                return json!({
                    "type": "object",
                    "description": "The operation's own structuredContent (its outputSchema in breeze_describe), its error envelope, or a pending-approval answer."
                });
            }
        };
        json!({ "type": "object", "anyOf": [success, contract::error_envelope_schema()] })
    }
}

/// The filters of one `breeze_discover` call.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DiscoverFilters {
    pub query: Option<String>,
    pub domain: Option<String>,
    pub effect: Option<OpClass>,
    pub tier: Option<u8>,
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidArgument, message)
}

impl DiscoverFilters {
    /// Reads the filters and the cursor from `breeze_discover`'s arguments.
    pub fn parse(registry: &Registry, args: &Value) -> Result<(Self, Option<String>), ToolError> {
        let obj = match args {
            Value::Object(m) => m,
            Value::Null => &Map::new(),
            _ => return Err(invalid("breeze_discover takes an object of filters")),
        };
        let mut f = DiscoverFilters::default();
        let mut cursor = None;
        for (k, v) in obj {
            let text = || {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(format!("{k}: expected a string")))
            };
            match k.as_str() {
                "query" => f.query = Some(text()?.to_lowercase()).filter(|q| !q.trim().is_empty()),
                "domain" => {
                    let d = text()?;
                    let domains = registry.domains();
                    if !domains.contains(&d.as_str()) {
                        return Err(invalid(format!(
                            "domain: unknown domain {d:?} (valid: {})",
                            domains.join(", ")
                        )));
                    }
                    f.domain = Some(d);
                }
                "effect" => {
                    f.effect =
                        Some(OpClass::parse(&text()?).ok_or_else(|| {
                            invalid("effect: expected one of read, write, execute")
                        })?);
                }
                "tier" => match v.as_u64() {
                    Some(t @ 1..=3) => f.tier = u8::try_from(t).ok(),
                    _ => return Err(invalid("tier: expected 1, 2 or 3")),
                },
                "cursor" => cursor = Some(text()?),
                other => {
                    return Err(invalid(format!(
                        "unknown filter {other:?} (filters: query, domain, effect, tier, cursor)"
                    )));
                }
            }
        }
        Ok((f, cursor))
    }

    fn canonical(&self) -> String {
        json!([
            self.query,
            self.domain,
            self.effect.map(OpClass::as_str),
            self.tier
        ])
        .to_string()
    }
}

/// One operation as `breeze_discover` lists it.
fn entry(spec: &ToolSpec, classes: &[OpClass]) -> Value {
    let mut tiers: Vec<u8> = if spec.actions.is_empty() {
        vec![spec.tier.number()]
    } else {
        spec.actions.iter().map(|a| a.tier.number()).collect()
    };
    tiers.sort_unstable();
    tiers.dedup();
    json!({
        "name": spec.name,
        "title": spec.title,
        "summary": summary(spec.description),
        "domain": spec.domain,
        "tiers": tiers,
        "metaTools": classes.iter().map(|c| c.meta_tool().name()).collect::<Vec<_>>(),
    })
}

/// A description's first sentence, at most 160 characters (cut at a character boundary).
fn summary(description: &str) -> String {
    let first = description
        .split_inclusive(". ")
        .next()
        .unwrap_or(description)
        .lines()
        .next()
        .unwrap_or_default()
        .trim();
    match first.char_indices().nth(157) {
        Some((i, _)) => format!("{}...", &first[..i]),
        None => first.to_owned(),
    }
}

/// What consolidated listings share: the guard (for scope reach), the catalog's version and
/// the cursor key.
pub struct Consolidated {
    version: String,
    mac_key: [u8; 32],
    discover_bytes: usize,
}

const NOTE: &str = "Lists the operations this key's scopes could call; roles, limits and approvals are decided when an operation is called. Use breeze_describe for schemas.";

impl Consolidated {
    pub fn new(registry: &Registry, discover_bytes: usize) -> Self {
        let mut h = Sha256::new();
        for spec in registry.iter() {
            h.update(spec.name.as_bytes());
            h.update([0]);
            h.update(spec.description.as_bytes());
            h.update(spec.input_schema.to_string().as_bytes());
            h.update(spec.output_schema.to_string().as_bytes());
            for a in spec.actions {
                h.update(format!("{}:{}:{:?};", a.name, a.tier.number(), a.effect).as_bytes());
            }
        }
        let version = hex(&h.finalize()[..8]);
        // Every instance of the same build derives the same key, so a cursor one instance of a
        // cluster made is taken by the next (clients are balanced per request). It is no
        // secret and need not be: a cursor only carries an offset into a listing that is
        // recomputed, and checked against the filters and scopes, on every page; the MAC makes
        // an altered or foreign cursor fail cleanly instead of paging from a wrong offset.
        let mac_key: [u8; 32] = Sha256::new()
            .chain_update(b"breeze_discover cursor\0")
            .chain_update(version.as_bytes())
            .finalize()
            .into();
        Self {
            version,
            mac_key,
            discover_bytes: discover_bytes.max(MIN_DISCOVER_BYTES),
        }
    }

    /// The catalog's version: a hash of every operation's name, description, schemas and
    /// actions.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The operations of `catalog` a key with `scopes` could call through the meta-tools it
    /// holds, with the classes it can run each in, in name order.
    pub fn operations<'a>(
        guard: &'a Guard,
        registry: &'a Registry,
        catalog: &'a Catalog,
        scopes: ScopeSet,
    ) -> impl Iterator<Item = (&'a ToolSpec, Vec<OpClass>)> + 'a {
        registry.iter().filter_map(move |spec| {
            if !catalog.admits(spec) || !guard.visible(scopes, spec) {
                return None;
            }
            let classes: Vec<OpClass> = classes_of(spec)
                .into_iter()
                .filter(|c| guard.reaches_tier(scopes, c.meta_tool().tier()))
                .collect();
            (!classes.is_empty()).then_some((spec, classes))
        })
    }

    fn mac(&self, payload: &[u8]) -> [u8; 16] {
        // HMAC-SHA-256, truncated to 128 bits.
        let mut ipad = [0x36u8; 64];
        let mut opad = [0x5cu8; 64];
        for (i, k) in self.mac_key.iter().enumerate() {
            ipad[i] ^= k;
            opad[i] ^= k;
        }
        let inner = Sha256::new()
            .chain_update(ipad)
            .chain_update(payload)
            .finalize();
        let outer = Sha256::new()
            .chain_update(opad)
            .chain_update(inner)
            .finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&outer[..16]);
        out
    }

    fn filter_hash(filters: &DiscoverFilters, catalog: &Catalog, scopes: ScopeSet) -> [u8; 8] {
        let d = Sha256::new()
            .chain_update(filters.canonical())
            .chain_update([0])
            .chain_update(catalog.binding())
            .chain_update([0])
            .chain_update(scopes.to_string())
            .finalize();
        let mut out = [0u8; 8];
        out.copy_from_slice(&d[..8]);
        out
    }

    fn cursor(&self, offset: u32, filter: [u8; 8]) -> String {
        let mut payload = Vec::with_capacity(36);
        payload.extend_from_slice(&offset.to_be_bytes());
        payload.extend_from_slice(&filter);
        payload.extend_from_slice(self.version.as_bytes().get(..8).unwrap_or_default());
        let mac = self.mac(&payload);
        payload.extend_from_slice(&mac);
        hex(&payload)
    }

    fn open_cursor(&self, cursor: &str, filter: [u8; 8]) -> Result<usize, ToolError> {
        let bad = |why: &str| {
            ToolError::new(
                ErrorCode::InvalidCursor,
                format!("invalid cursor: {why}"),
            )
            .hint("Start breeze_discover again without a cursor, and pass each nextCursor back unchanged with the same filters.")
        };
        let bytes = unhex(cursor).ok_or_else(|| bad("not a cursor this server made"))?;
        if bytes.len() != 36 {
            return Err(bad("not a cursor this server made"));
        }
        let (payload, mac) = bytes.split_at(20);
        // Constant-time enough: a mismatch anywhere fails the same way.
        let expected = self.mac(payload);
        if expected
            .iter()
            .zip(mac)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            != 0
        {
            return Err(bad("not a cursor this server made (or it was altered)"));
        }
        if payload[12..20] != *self.version.as_bytes().get(..8).unwrap_or_default() {
            return Err(bad("the catalog changed since this cursor was made"));
        }
        if payload[4..12] != filter {
            return Err(bad("it was made for other filters"));
        }
        let offset = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        usize::try_from(offset).map_err(|_| bad("out of range"))
    }

    /// One page of `breeze_discover`: whole entries whose `structuredContent` stays within the
    /// budget (at least one entry per page, whatever the budget).
    pub fn discover(
        &self,
        guard: &Guard,
        registry: &Registry,
        catalog: &Catalog,
        scopes: ScopeSet,
        args: &Value,
    ) -> Result<Value, ToolError> {
        let (filters, cursor) = DiscoverFilters::parse(registry, args)?;
        let filter = Self::filter_hash(&filters, catalog, scopes);
        let start = match &cursor {
            Some(c) => self.open_cursor(c, filter)?,
            None => 0,
        };
        let matching: Vec<Value> = Self::operations(guard, registry, catalog, scopes)
            .filter(|(spec, classes)| {
                filters.domain.as_deref().is_none_or(|d| spec.domain == d)
                    && filters.effect.is_none_or(|e| classes.contains(&e))
                    && filters.tier.is_none_or(|t| {
                        if spec.actions.is_empty() {
                            spec.tier.number() == t
                        } else {
                            spec.actions.iter().any(|a| a.tier.number() == t)
                        }
                    })
                    && filters.query.as_deref().is_none_or(|q| {
                        q.split_whitespace().all(|w| {
                            spec.name.contains(w)
                                || spec.title.to_lowercase().contains(w)
                                || spec.description.to_lowercase().contains(w)
                        })
                    })
            })
            .map(|(spec, classes)| entry(spec, &classes))
            .collect();
        let total = matching.len();
        if start > total {
            return Err(ToolError::new(
                ErrorCode::InvalidCursor,
                "invalid cursor: past the end of the listing",
            ));
        }
        // The envelope with a cursor of full length, so the page fits whichever it gets.
        let placeholder = self.cursor(0, filter);
        let base = json!({
            "operations": [],
            "total": total,
            "catalogVersion": self.version,
            "nextCursor": placeholder,
            "note": NOTE,
        })
        .to_string()
        .len();
        let mut used = base;
        let mut page = Vec::new();
        for e in &matching[start..] {
            let len = e.to_string().len() + usize::from(!page.is_empty());
            if !page.is_empty() && used + len > self.discover_bytes {
                break;
            }
            used += len;
            page.push(e.clone());
        }
        let next = start + page.len();
        let mut out = json!({
            "operations": page,
            "total": total,
            "catalogVersion": self.version,
            "note": NOTE,
        });
        if next < total {
            out["nextCursor"] = json!(self.cursor(u32::try_from(next).unwrap_or(u32::MAX), filter));
        }
        Ok(out)
    }

    /// `breeze_describe`: 1 to 3 operations' complete schemas, tiers and actions.
    pub fn describe(
        guard: &Guard,
        registry: &Registry,
        catalog: &Catalog,
        scopes: ScopeSet,
        args: &Value,
    ) -> Result<Value, ToolError> {
        let names: Vec<&str> = match args.get("operations").and_then(Value::as_array) {
            Some(a) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| invalid("operations: expected operation names (strings)"))
                })
                .collect::<Result<_, _>>()?,
            None => return Err(invalid("operations: required, 1 to 3 operation names")),
        };
        if names.is_empty() || names.len() > DESCRIBE_MAX {
            return Err(invalid(format!(
                "operations: breeze_describe takes 1 to {DESCRIBE_MAX} names, got {}; describe the others in another call",
                names.len()
            )));
        }
        if let Some(extra) = args
            .as_object()
            .and_then(|m| m.keys().find(|k| *k != "operations"))
        {
            return Err(invalid(format!(
                "unknown argument {extra:?} (breeze_describe takes operations)"
            )));
        }
        let mut out = Vec::new();
        for name in names {
            let Some((spec, classes)) =
                Self::operations(guard, registry, catalog, scopes).find(|(s, _)| s.name == name)
            else {
                return Err(unknown_operation(name));
            };
            let actions: Vec<Value> = spec
                .actions
                .iter()
                .map(|a| {
                    json!({
                        "name": a.name,
                        "tier": a.tier.number(),
                        "effect": format!("{:?}", a.effect).to_lowercase(),
                        "permission": a.permission.to_string(),
                        "metaTool": OpClass::of(a.tier, &[a.effect]).meta_tool().name(),
                    })
                })
                .collect();
            let mut op = json!({
                "name": spec.name,
                "title": spec.title,
                "description": spec.description,
                "domain": spec.domain,
                "tier": spec.tier.number(),
                "metaTools": classes.iter().map(|c| c.meta_tool().name()).collect::<Vec<_>>(),
                "inputSchema": spec.input_schema,
                "outputSchema": spec.output_schema,
            });
            if !actions.is_empty() {
                op["actions"] = json!(actions);
                op["actionKey"] = json!(spec.action_key);
            }
            out.push(op);
        }
        Ok(json!({ "operations": out }))
    }
}

/// `UNKNOWN_OPERATION` for `name`.
pub fn unknown_operation(name: &str) -> ToolError {
    ToolError::new(
        ErrorCode::UnknownOperation,
        format!("Unknown operation: {name}"),
    )
    .hint("Find operation names with breeze_discover; do not guess them.")
}

/// `TOOL_EFFECT_MISMATCH`: `name` called through `used`, whose calls of this kind `right` runs.
pub fn effect_mismatch(name: &str, used: MetaTool, right: OpClass) -> ToolError {
    ToolError::new(
        ErrorCode::ToolEffectMismatch,
        format!(
            "{name} with this input is a {} call: run it with {}, not {}",
            right.as_str(),
            right.meta_tool().name(),
            used.name()
        ),
    )
    .hint(format!(
        "Call {} with the same operation and input.",
        right.meta_tool().name()
    ))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_decoded() {
        assert_eq!(
            query_param(
                Some("a=1&toolsets=devices%2Cscripts&catalog=full"),
                "toolsets"
            )
            .as_deref(),
            Some("devices,scripts")
        );
        assert_eq!(query_param(Some("catalog"), "catalog").as_deref(), Some(""));
        assert_eq!(query_param(None, "catalog"), None);
        assert_eq!(query_param(Some("q=a+b%2"), "q").as_deref(), Some("a b%2"));
        assert_eq!(
            query_param(Some("c%61talog=x"), "catalog").as_deref(),
            Some("x")
        );
    }

    #[test]
    fn summaries_are_one_short_line() {
        assert_eq!(summary("Lists devices. Filter by site."), "Lists devices.");
        let long = "x".repeat(500);
        assert_eq!(summary(&long).chars().count(), 160);
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
