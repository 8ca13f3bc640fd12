//! API-key scopes: the coarse grant an AI client holds, checked against a tool's tier.

use serde::{Deserialize, Serialize};

use crate::string_enum;

string_enum! {
    /// One scope on an API key.
    pub enum Scope: "scope" {
        /// Tier 1: read-only fleet data.
        AiRead = "ai:read",
        /// Tier 2: low-risk mutations.
        AiWrite = "ai:write",
        /// Tier 3: commands, scripts and other destructive operations.
        AiExecute = "ai:execute",
        /// Tier 3 in a hardened production deployment.
        AiExecuteAdmin = "ai:execute_admin",
        /// Everything.
        All = "*",
    }
}

/// A set of scopes. Kept sorted and free of duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "Vec<Scope>", into = "Vec<Scope>")]
pub struct ScopeSet(Vec<Scope>);

impl ScopeSet {
    /// Builds a set from any scopes, dropping duplicates.
    pub fn new(scopes: impl IntoIterator<Item = Scope>) -> Self {
        let mut v: Vec<Scope> = scopes.into_iter().collect();
        v.sort();
        v.dedup();
        Self(v)
    }

    /// Parses a comma- or space-separated list such as `ai:read,ai:write`.
    /// An empty list is an error: a key with no scopes can do nothing.
    pub fn parse_list(list: &str) -> Result<Self, crate::ParseError> {
        let scopes = list
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Scope>, _>>()?;
        if scopes.is_empty() {
            return Err(crate::ParseError {
                what: "scope list",
                value: list.to_owned(),
                expected: "one or more of ai:read ai:write ai:execute ai:execute_admin *",
            });
        }
        Ok(Self::new(scopes))
    }

    /// Whether the set holds `scope` itself or the wildcard.
    pub fn grants(&self, scope: Scope) -> bool {
        self.0.contains(&Scope::All) || self.0.contains(&scope)
    }

    /// The scopes, sorted.
    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The tiers OAuth scopes reach: `mcp:read`, `mcp:write` and `mcp:execute` are `ai:read`,
    /// `ai:write` and `ai:execute`; any other scope (`openid`, `offline_access`) reaches none.
    /// The one mapping, shared by bearer tokens and the approvals their calls make.
    pub fn from_oauth<S: AsRef<str>>(scopes: &[S]) -> Self {
        Self::new(scopes.iter().filter_map(|s| match s.as_ref() {
            "mcp:read" => Some(Scope::AiRead),
            "mcp:write" => Some(Scope::AiWrite),
            "mcp:execute" => Some(Scope::AiExecute),
            _ => None,
        }))
    }
}

impl From<ScopeSet> for Vec<Scope> {
    fn from(s: ScopeSet) -> Self {
        s.0
    }
}

impl From<Vec<Scope>> for ScopeSet {
    fn from(v: Vec<Scope>) -> Self {
        Self::new(v)
    }
}

impl std::fmt::Display for ScopeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|s| s.as_str()).collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_names_the_bad_scope() {
        let s = ScopeSet::parse_list("ai:write, ai:read,ai:read").unwrap();
        assert_eq!(s.to_string(), "ai:read,ai:write");
        let err = ScopeSet::parse_list("ai:read,ai:admin").unwrap_err();
        assert_eq!(err.value, "ai:admin");
        assert!(err.to_string().contains("invalid scope"));
        assert!(ScopeSet::parse_list(" , ").is_err());
    }

    #[test]
    fn wildcard_grants_everything() {
        let s = ScopeSet::new([Scope::All]);
        assert!(Scope::ALL.iter().all(|&sc| s.grants(sc)));
        let r = ScopeSet::new([Scope::AiRead]);
        assert!(r.grants(Scope::AiRead) && !r.grants(Scope::AiWrite));
    }
}
