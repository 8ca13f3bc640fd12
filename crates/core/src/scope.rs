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

/// A set of scopes: a bit per [`Scope`], so a set is `Copy` and a caller carries its own
/// without an allocation. Iterates in declaration order; serializes as the list of names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "Vec<Scope>", into = "Vec<Scope>")]
pub struct ScopeSet(u8);

impl ScopeSet {
    /// No scope at all.
    pub const EMPTY: Self = Self(0);

    const fn bit(scope: Scope) -> u8 {
        1 << (scope as u8)
    }

    /// Builds a set from any scopes, dropping duplicates.
    pub fn new(scopes: impl IntoIterator<Item = Scope>) -> Self {
        Self(scopes.into_iter().fold(0, |bits, s| bits | Self::bit(s)))
    }

    /// Every scope: what a person acting in the dashboard holds (a person is not narrowed by
    /// scopes, only by their role).
    pub fn everything() -> Self {
        Self::new([Scope::All])
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
        self.0 & (Self::bit(scope) | Self::bit(Scope::All)) != 0
    }

    /// The scopes, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        let bits = self.0;
        Scope::ALL
            .iter()
            .copied()
            .filter(move |s| bits & Self::bit(*s) != 0)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The scopes both sets hold (the wildcard in one reaches everything the other holds).
    #[must_use]
    pub fn intersect(self, other: Self) -> Self {
        let widen = |s: Self| {
            if s.grants(Scope::All) { u8::MAX } else { s.0 }
        };
        Self(widen(self) & widen(other) & (self.0 | other.0))
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
        s.iter().collect()
    }
}

impl From<Vec<Scope>> for ScopeSet {
    fn from(v: Vec<Scope>) -> Self {
        Self::new(v)
    }
}

impl std::fmt::Display for ScopeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.iter().map(Scope::as_str).collect();
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

    #[test]
    fn intersection_keeps_what_both_grant() {
        let all = ScopeSet::everything();
        let rw = ScopeSet::parse_list("ai:read,ai:write").unwrap();
        let rx = ScopeSet::parse_list("ai:read,ai:execute").unwrap();
        assert_eq!(rw.intersect(all), rw);
        assert_eq!(all.intersect(rw), rw);
        assert_eq!(rw.intersect(rx).to_string(), "ai:read");
        assert!(rw.intersect(ScopeSet::EMPTY).is_empty());
    }
}
