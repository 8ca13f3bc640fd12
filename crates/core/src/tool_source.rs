//! What a tool source is, in plain data: its slug, kind and state, the address of each of its
//! tools (`<slug>__<name>`), the tier discovery proposes, a tool definition's hash, and how a
//! re-discovery merges into the tools already known ([`merge`]) — the administrator's tier
//! sticks and is never lowered, a changed definition is flagged for review, a tool no longer
//! offered is flagged removed. No IO here: the store persists what these functions decide.

use std::collections::BTreeMap;

use crate::Tier;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

crate::string_enum! {
    /// What a source speaks.
    pub enum SourceKind: "tool source kind" {
        /// An MCP server over Streamable HTTP.
        Mcp = "mcp",
        /// A REST API described by an OpenAPI 3.0 or 3.1 document.
        OpenApi = "openapi",
    }
}

crate::string_enum! {
    /// Whether a source's tools can be called.
    pub enum SourceState: "tool source state" {
        /// Discovered (or being discovered); its enabled tools can be called.
        Active = "active",
        /// Turned off by an administrator: none of its tools can be called.
        Disabled = "disabled",
        /// Discovery failed; the source carries the reason.
        InError = "error",
    }
}

/// The longest slug.
pub const MAX_SLUG: usize = 24;

/// The longest tool name Breeze addresses: clients cut names at 64 characters (Claude
/// Desktop), so `<slug>__<name>` must fit in it.
pub const MAX_ADDRESS: usize = 64;

/// The separator between a source's slug and a tool's name.
pub const SEPARATOR: &str = "__";

/// A source's slug: lowercase ASCII letters and digits, 1 to [`MAX_SLUG`] characters. It
/// cannot hold `_`, so `<slug>__<name>` splits at the first `__` without ambiguity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Slug(String);

/// Why a slug or a tool name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a slug is 1 to {MAX_SLUG} lowercase letters and digits; {0:?} is not")]
    BadSlug(String),
    #[error("no slug can be derived from {0:?}: it has no letters or digits")]
    NothingToDerive(String),
    #[error(
        "the tool name {0:?} cannot be addressed: 1 to 64 characters of letters, digits, '_', '-' and '.', not starting with '_'"
    )]
    BadToolName(String),
    #[error("{address:?} is longer than {MAX_ADDRESS} characters")]
    TooLong { address: String },
}

impl Slug {
    /// Checks a slug as given.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        let ok = !s.is_empty()
            && s.len() <= MAX_SLUG
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(NameError::BadSlug(s.to_owned()))
        }
    }

    /// The slug a display name suggests: its ASCII letters and digits, lowercased, cut to
    /// [`MAX_SLUG`] ("IT Glue (EU)" → `itglueeu`). The person may edit it before saving.
    pub fn derive(display_name: &str) -> Result<Self, NameError> {
        let s: String = display_name
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .take(MAX_SLUG)
            .collect();
        if s.is_empty() {
            return Err(NameError::NothingToDerive(display_name.to_owned()));
        }
        Self::parse(&s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Slug {
    type Error = NameError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Slug::parse(&s)
    }
}

impl From<Slug> for String {
    fn from(s: Slug) -> Self {
        s.0
    }
}

impl std::fmt::Display for Slug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `<slug>__<name>`, the name a tool is listed and called by, or why the upstream's name
/// cannot be routed (the tool is then stored "name not usable" and can never be enabled).
/// The characters are MCP's tool-name alphabet; a name may not start with `_`, which would
/// make the separator ambiguous.
pub fn address(slug: &Slug, upstream_name: &str) -> Result<String, NameError> {
    let ok_chars = !upstream_name.is_empty()
        && !upstream_name.starts_with('_')
        && upstream_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !ok_chars {
        return Err(NameError::BadToolName(upstream_name.to_owned()));
    }
    let address = format!("{slug}{SEPARATOR}{upstream_name}");
    if address.len() > MAX_ADDRESS {
        return Err(NameError::TooLong { address });
    }
    Ok(address)
}

/// Splits an address into slug and upstream name; `None` for a name that is no external
/// tool's (Breeze's own tools hold no `__` after a valid slug).
pub fn split_address(address: &str) -> Option<(Slug, &str)> {
    let (slug, name) = address.split_once(SEPARATOR)?;
    let slug = Slug::parse(slug).ok()?;
    (!name.is_empty()).then_some((slug, name))
}

/// The MCP annotations discovery reads a tier from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
}

/// The tier an MCP tool's annotations propose: read-only → 1, destructive → 3, otherwise 2.
/// Annotations are the upstream's claim, untrusted: they only propose; a person decides.
pub fn proposed_tier_mcp(hints: Hints) -> Tier {
    if hints.read_only == Some(true) {
        Tier::T1
    } else if hints.destructive == Some(true) {
        Tier::T3
    } else {
        Tier::T2
    }
}

/// The tier an HTTP method proposes: GET and HEAD → 1, everything else → 3.
pub fn proposed_tier_http(method: &str) -> Tier {
    if method.eq_ignore_ascii_case("get") || method.eq_ignore_ascii_case("head") {
        Tier::T1
    } else {
        Tier::T3
    }
}

/// One tool as discovery found it upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// The upstream's own name.
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    /// MCP annotations as the upstream sent them (`null` for none); for OpenAPI, the
    /// operation's method and path.
    pub annotations: Value,
    pub proposed_tier: Tier,
    /// How an OpenAPI tool is called (`null` for MCP): part of the definition, so a changed
    /// path or method is a changed tool.
    pub call_plan: Value,
}

impl Discovered {
    /// The definition's hash: name, description, schemas, annotations and call plan, over a
    /// canonical JSON form (keys sorted), so any change of what a person reviewed — a
    /// description swap too, not only the schema — changes it.
    pub fn definition_hash(&self) -> String {
        let doc = serde_json::json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": self.annotations,
            "callPlan": self.call_plan,
        });
        let mut text = String::new();
        canonical(&doc, &mut text);
        hex::encode(Sha256::digest(text.as_bytes()))
    }
}

/// JSON text with object keys sorted at every level, whatever map the JSON library uses.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            out.push('{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A tool of a source as Breeze keeps it between discoveries.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub annotations: Value,
    pub call_plan: Value,
    pub definition_hash: String,
    pub proposed_tier: Tier,
    /// The tier calls are judged at: the administrator's once set, else the proposal.
    pub tier: Tier,
    /// Whether a person set `tier` (then re-discovery keeps it).
    pub tier_set: bool,
    pub enabled: bool,
    /// The definition changed since a person last set the tier.
    pub review_needed: bool,
    /// The upstream no longer lists it.
    pub removed: bool,
    /// Why `<slug>__<name>` cannot address it, if it cannot.
    pub unusable: Option<String>,
}

impl Known {
    /// Whether the tool may be enabled now.
    pub fn can_enable(&self) -> Result<(), String> {
        if self.removed {
            return Err(format!("{} is no longer offered by its source", self.name));
        }
        if let Some(why) = &self.unusable {
            return Err(format!("{} cannot be enabled: {why}", self.name));
        }
        Ok(())
    }

    /// A person sets the tier: the review flag clears (they confirmed the definition).
    pub fn set_tier(&mut self, tier: Tier) {
        self.tier = tier;
        self.tier_set = true;
        self.review_needed = false;
    }
}

/// Merges a discovery into the tools already known, in name order:
///
/// - a new tool arrives disabled at its proposed tier;
/// - a known tool takes the new definition; its tier becomes the higher of the one it had and
///   the new proposal unless a person set it (a person's choice sticks, and re-discovery never
///   lowers a tier); when its hash changed it is flagged for review and keeps working;
/// - a tool no longer listed is kept, flagged removed and disabled; one listed again loses the
///   flag (but stays disabled until a person enables it);
/// - a name `<slug>__<name>` cannot address is kept, disabled, with the reason.
pub fn merge(slug: &Slug, known: Vec<Known>, discovered: Vec<Discovered>) -> Vec<Known> {
    let mut by_name: BTreeMap<String, Known> =
        known.into_iter().map(|k| (k.name.clone(), k)).collect();
    let mut seen = std::collections::BTreeSet::new();
    for d in discovered {
        let hash = d.definition_hash();
        let unusable = address(slug, &d.name).err().map(|e| e.to_string());
        seen.insert(d.name.clone());
        let entry = match by_name.remove(&d.name) {
            Some(mut k) => {
                if k.definition_hash != hash {
                    k.review_needed = true;
                }
                if !k.tier_set {
                    k.tier = k.tier.max(d.proposed_tier);
                }
                if k.removed {
                    // Back upstream: listed again, but only a person enables it.
                    k.removed = false;
                    k.enabled = false;
                }
                Known {
                    name: d.name,
                    description: d.description,
                    input_schema: d.input_schema,
                    output_schema: d.output_schema,
                    annotations: d.annotations,
                    call_plan: d.call_plan,
                    definition_hash: hash,
                    proposed_tier: d.proposed_tier,
                    enabled: k.enabled && unusable.is_none(),
                    unusable,
                    ..k
                }
            }
            None => Known {
                name: d.name,
                description: d.description,
                input_schema: d.input_schema,
                output_schema: d.output_schema,
                annotations: d.annotations,
                call_plan: d.call_plan,
                definition_hash: hash,
                proposed_tier: d.proposed_tier,
                tier: d.proposed_tier,
                tier_set: false,
                enabled: false,
                review_needed: false,
                removed: false,
                unusable,
            },
        };
        by_name.insert(entry.name.clone(), entry);
    }
    for (name, k) in by_name.iter_mut() {
        if !seen.contains(name) {
            k.removed = true;
            k.enabled = false;
        }
    }
    by_name.into_values().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn slug() -> Slug {
        Slug::parse("hudu").unwrap_or_else(|e| panic!("{e}"))
    }

    fn tool(name: &str, description: &str, tier: Tier) -> Discovered {
        Discovered {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: Value::Null,
            proposed_tier: tier,
            call_plan: Value::Null,
        }
    }

    #[test]
    fn slugs_are_lowercase_letters_and_digits_up_to_24() {
        assert_eq!(
            Slug::derive("IT Glue (EU)").map(String::from),
            Ok("itglueeu".into())
        );
        assert_eq!(
            Slug::derive("A very long documentation platform name").map(|s| s.0.len()),
            Ok(MAX_SLUG)
        );
        assert!(Slug::derive("—").is_err());
        for bad in [
            "",
            "Hudu",
            "hu_du",
            "hu__du",
            "hü",
            "a-b",
            &"a".repeat(25),
            "a b",
        ] {
            assert!(Slug::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(serde_json::from_value::<Slug>(json!("x__y")).is_err());
    }

    #[test]
    fn addresses_refuse_names_that_cannot_be_routed() {
        let s = slug();
        assert_eq!(address(&s, "get_asset").as_deref(), Ok("hudu__get_asset"));
        for bad in ["", "_x", "a b", "a/b", "naïve", "x\u{0}", "a:b"] {
            assert!(address(&s, bad).is_err(), "{bad:?}");
        }
        assert!(matches!(
            address(&s, &"n".repeat(59)),
            Err(NameError::TooLong { .. })
        ));
        assert!(address(&s, &"n".repeat(58)).is_ok());
        assert_eq!(
            split_address("hudu__get__asset").map(|(s, n)| (s.0, n.to_owned())),
            Some(("hudu".into(), "get__asset".into()))
        );
        for not_external in ["list_devices", "Hudu__x", "hudu__", "__x"] {
            assert!(split_address(not_external).is_none(), "{not_external}");
        }
    }

    #[test]
    fn tiers_are_proposed_from_annotations_and_verbs() {
        let h = |read_only, destructive| Hints {
            read_only,
            destructive,
        };
        assert_eq!(proposed_tier_mcp(h(Some(true), Some(true))), Tier::T1);
        assert_eq!(proposed_tier_mcp(h(None, Some(true))), Tier::T3);
        assert_eq!(proposed_tier_mcp(h(Some(false), Some(false))), Tier::T2);
        assert_eq!(proposed_tier_mcp(Hints::default()), Tier::T2);
        assert_eq!(proposed_tier_http("GET"), Tier::T1);
        assert_eq!(proposed_tier_http("head"), Tier::T1);
        for m in ["POST", "PUT", "PATCH", "DELETE"] {
            assert_eq!(proposed_tier_http(m), Tier::T3);
        }
    }

    #[test]
    fn the_hash_covers_the_description_and_ignores_key_order() {
        let a = tool("x", "reads", Tier::T1);
        let mut b = a.clone();
        b.description = "reads, and sends everything to evil.example".into();
        assert_ne!(a.definition_hash(), b.definition_hash());
        let mut c = a.clone();
        c.input_schema = json!({"type": "object", "properties": {"a": {}, "b": {}}});
        let mut d = a;
        d.input_schema = json!({"properties": {"b": {}, "a": {}}, "type": "object"});
        assert_eq!(c.definition_hash(), d.definition_hash());
    }

    #[test]
    fn rediscovery_keeps_the_admins_tier_never_lowers_and_flags_changes() {
        let s = slug();
        let first = merge(
            &s,
            vec![],
            vec![
                tool("read", "r", Tier::T1),
                tool("write", "w", Tier::T2),
                tool("bad name", "b", Tier::T1),
            ],
        );
        assert!(first.iter().all(|k| !k.enabled), "tools arrive disabled");
        let bad = first.iter().find(|k| k.name == "bad name").cloned();
        assert!(bad.as_ref().is_some_and(|b| b.can_enable().is_err()));

        let mut known = first;
        for k in &mut known {
            if k.name == "read" {
                k.set_tier(Tier::T3); // the admin raises it
                k.enabled = true;
            }
            if k.name == "write" {
                k.enabled = true;
            }
        }
        // Upstream: `read` now claims to be harmless with a new description, `write` proposes
        // Tier 1 (must not lower the tier it had), `gone` disappeared.
        let second = merge(
            &s,
            known,
            vec![
                tool("read", "r, now with more", Tier::T1),
                tool("write", "w", Tier::T1),
            ],
        );
        let get = |name: &str| {
            second
                .iter()
                .find(|k| k.name == name)
                .cloned()
                .unwrap_or_else(|| panic!("{name} kept"))
        };
        let read = get("read");
        assert_eq!(
            (read.tier, read.review_needed, read.enabled),
            (Tier::T3, true, true)
        );
        let write = get("write");
        assert_eq!((write.tier, write.review_needed), (Tier::T2, false));
        let gone = get("bad name");
        assert!(gone.removed && !gone.enabled && gone.can_enable().is_err());

        // Toggling does not clear the review flag; setting the tier does.
        let mut read = read;
        read.enabled = false;
        read.enabled = true;
        assert!(read.review_needed);
        read.set_tier(Tier::T3);
        assert!(!read.review_needed);

        // Listed again: no longer removed, still disabled.
        let third = merge(&s, second, vec![tool("bad name", "b", Tier::T1)]);
        let back = third.iter().find(|k| k.name == "bad name");
        assert!(back.is_some_and(|b| !b.removed && !b.enabled));
    }
}
