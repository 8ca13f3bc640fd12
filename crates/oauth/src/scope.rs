//! OAuth scopes: `mcp:read`, `mcp:write` and `mcp:execute` reach Tiers 1, 2 and 3 (the same
//! model as the `ai:*` API-key scopes); `openid` and `offline_access` are accepted and grant
//! nothing by themselves (refresh tokens are always issued).

use breeze_core::{Scope, ScopeSet};

/// The scopes a protected resource advertises (RFC 9728) and challenges with.
pub const RESOURCE_SCOPES: [&str; 3] = ["mcp:read", "mcp:write", "mcp:execute"];

/// Every scope the authorization server knows (RFC 8414 `scopes_supported`).
pub const ALL_SCOPES: [&str; 5] = [
    "mcp:read",
    "mcp:write",
    "mcp:execute",
    "openid",
    "offline_access",
];

/// The scopes granted when a request names none.
pub const DEFAULT_SCOPES: [&str; 1] = ["mcp:read"];

/// Parses a space-separated scope parameter into known scopes, sorted and without duplicates.
/// An empty or absent parameter is the default; an unknown scope is refused by name.
pub fn parse(scope: Option<&str>) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for s in scope
        .unwrap_or_default()
        .split(' ')
        .filter(|s| !s.is_empty())
    {
        if !ALL_SCOPES.contains(&s) {
            return Err(format!(
                "unknown scope {s:?}; known: {}",
                ALL_SCOPES.join(" ")
            ));
        }
        out.push(s.to_owned());
    }
    if out.is_empty() {
        out = DEFAULT_SCOPES.iter().map(|s| (*s).to_owned()).collect();
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The tiers `scopes` reach, as the guard's scope set.
pub fn tier_scopes(scopes: &[String]) -> ScopeSet {
    ScopeSet::from_oauth(scopes)
}

/// The OAuth scope that reaches guard scope `scope`, if any.
pub fn oauth_name(scope: Scope) -> Option<&'static str> {
    match scope {
        Scope::AiRead => Some("mcp:read"),
        Scope::AiWrite => Some("mcp:write"),
        Scope::AiExecute | Scope::AiExecuteAdmin => Some("mcp:execute"),
        Scope::All => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_and_maps() {
        assert_eq!(parse(None).unwrap(), ["mcp:read"]);
        assert_eq!(
            parse(Some("mcp:write mcp:read  mcp:read offline_access")).unwrap(),
            ["mcp:read", "mcp:write", "offline_access"]
        );
        assert!(
            parse(Some("mcp:read ai:execute"))
                .unwrap_err()
                .contains("ai:execute")
        );
        let s = tier_scopes(&parse(Some("mcp:read mcp:execute openid")).unwrap());
        assert_eq!(s.to_string(), "ai:read,ai:execute");
    }
}
