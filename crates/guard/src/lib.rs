//! The guard: the one place that decides whether a tool call may run.
//!
//! Every front door (MCP now; the AI chat and Tool Sources later) asks [`Guard::check`] before a
//! handler runs, and shows [`Guard::visible`] tools only. The pipeline, in the specification's
//! order:
//!
//! 1. **Scope** for the call's effective tier (base tier raised by the action table): Tier 1
//!    needs `ai:read`, Tier 2 `ai:write`, Tier 3 `ai:execute` — and `ai:execute_admin` in
//!    production when required. `ai:execute` implies `ai:write` implies `ai:read`; `*` grants all.
//! 2. Action-level escalation is part of the effective tier; Tier 4 is always refused.
//! 3. RBAC, per-tool rate limits, the production allowlist and durable human approval are the
//!    next steps of this pipeline. Until approvals exist, a Tier 3 call is refused here as
//!    needing approval — fail closed.

use breeze_core::{Scope, ScopeSet};
use breeze_tools::{Tier, ToolSpec};
use serde_json::Value;

/// Deployment facts the guard needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardConfig {
    pub production: bool,
    /// `MCP_REQUIRE_EXECUTE_ADMIN` (default true; only matters in production).
    pub require_execute_admin: bool,
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The key lacks the scope for the effective tier. Worded as the specification words it.
    #[error("Tool \"{tool}\" requires {scope} scope{suffix}", suffix = if *.production_admin { " in production" } else { "" })]
    MissingScope {
        tool: String,
        scope: Scope,
        production_admin: bool,
    },
    /// Tier 3: a human must approve first.
    #[error("Tool \"{tool}\"{action} is Tier 3 and requires human approval, which is not available over MCP yet", action = .action.as_ref().map(|a| format!(" action \"{a}\"")).unwrap_or_default())]
    ApprovalRequired {
        tool: String,
        action: Option<String>,
    },
    /// Tier 4: never.
    #[error("Tool \"{tool}\" is blocked")]
    Blocked { tool: String },
}

/// The guard pipeline.
#[derive(Debug, Clone, Copy, Default)]
pub struct Guard {
    config: GuardConfig,
}

/// Whether `scopes` reach `tier` (the hierarchy `*` ⊃ execute_admin ⊃ execute ⊃ write ⊃ read).
fn reaches(scopes: &ScopeSet, tier: Tier, config: GuardConfig) -> Result<(), (Scope, bool)> {
    let has = |s: Scope| scopes.grants(s);
    let admin = has(Scope::AiExecuteAdmin);
    let execute = admin || has(Scope::AiExecute);
    let write = execute || has(Scope::AiWrite);
    let read = write || has(Scope::AiRead);
    match tier {
        Tier::T1 if read => Ok(()),
        Tier::T1 => Err((Scope::AiRead, false)),
        Tier::T2 if write => Ok(()),
        Tier::T2 => Err((Scope::AiWrite, false)),
        Tier::T3 | Tier::T4 if config.production && config.require_execute_admin => {
            if admin {
                Ok(())
            } else {
                Err((Scope::AiExecuteAdmin, true))
            }
        }
        Tier::T3 | Tier::T4 if execute => Ok(()),
        Tier::T3 | Tier::T4 => Err((Scope::AiExecute, false)),
    }
}

impl Guard {
    pub fn new(config: GuardConfig) -> Self {
        Self { config }
    }

    /// Whether `scopes` allow reading at all (resources, streams): any `ai:*` scope or `*`.
    pub fn reaches_read(scopes: &ScopeSet) -> bool {
        reaches(scopes, Tier::T1, GuardConfig::default()).is_ok()
    }

    /// Whether `tools/list` shows `spec` to a key with `scopes` (by the tool's base tier).
    pub fn visible(&self, scopes: &ScopeSet, spec: &ToolSpec) -> bool {
        spec.tier < Tier::T4 && reaches(scopes, spec.tier, self.config).is_ok()
    }

    /// Decides a call of `spec` with `args`; returns the effective tier when allowed.
    pub fn check(&self, scopes: &ScopeSet, spec: &ToolSpec, args: &Value) -> Result<Tier, Refusal> {
        let tier = spec.effective_tier(args);
        if tier == Tier::T4 {
            return Err(Refusal::Blocked {
                tool: spec.name.to_owned(),
            });
        }
        reaches(scopes, tier, self.config).map_err(|(scope, production_admin)| {
            Refusal::MissingScope {
                tool: spec.name.to_owned(),
                scope,
                production_admin,
            }
        })?;
        if tier == Tier::T3 {
            return Err(Refusal::ApprovalRequired {
                tool: spec.name.to_owned(),
                action: spec.action(args).map(|a| a.name.to_owned()),
            });
        }
        Ok(tier)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scopes(list: &str) -> ScopeSet {
        ScopeSet::parse_list(list).unwrap()
    }

    #[test]
    fn scope_hierarchy_and_spec_wording() {
        let registry = breeze_tools::all();
        let groups = registry.get("manage_groups").unwrap();
        let set_ctx = registry.get("set_device_context").unwrap();
        let g = Guard::default();

        assert!(g.visible(&scopes("ai:read"), groups));
        assert!(!g.visible(&scopes("ai:read"), set_ctx));
        assert!(g.visible(&scopes("ai:write"), set_ctx));
        assert!(g.visible(&scopes("ai:execute"), set_ctx));
        assert!(g.visible(&scopes("*"), set_ctx));

        let err = g
            .check(&scopes("ai:read"), set_ctx, &json!({}))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tool \"set_device_context\" requires ai:write scope"
        );
        assert_eq!(
            g.check(&scopes("ai:read"), groups, &json!({"action": "list"})),
            Ok(Tier::T1)
        );
        let err = g
            .check(
                &scopes("ai:read"),
                groups,
                &json!({"action": "add_devices"}),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tool \"manage_groups\" requires ai:write scope"
        );
        let err = g
            .check(
                &scopes("ai:read,ai:write"),
                groups,
                &json!({"action": "delete"}),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tool \"manage_groups\" requires ai:execute scope"
        );
        let err = g
            .check(&scopes("ai:execute"), groups, &json!({"action": "delete"}))
            .unwrap_err();
        assert!(matches!(err, Refusal::ApprovalRequired { .. }), "{err}");
        assert!(err.to_string().contains("action \"delete\""));
    }

    #[test]
    fn production_requires_execute_admin_for_tier_3() {
        let registry = breeze_tools::all();
        let groups = registry.get("manage_groups").unwrap();
        let g = Guard::new(GuardConfig {
            production: true,
            require_execute_admin: true,
        });
        let err = g
            .check(&scopes("ai:execute"), groups, &json!({"action": "create"}))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tool \"manage_groups\" requires ai:execute_admin scope in production"
        );
        let relaxed = Guard::new(GuardConfig {
            production: true,
            require_execute_admin: false,
        });
        assert!(matches!(
            relaxed.check(&scopes("ai:execute"), groups, &json!({"action": "create"})),
            Err(Refusal::ApprovalRequired { .. })
        ));
        let dev = Guard::new(GuardConfig {
            production: false,
            require_execute_admin: true,
        });
        assert!(matches!(
            dev.check(&scopes("ai:execute"), groups, &json!({"action": "create"})),
            Err(Refusal::ApprovalRequired { .. })
        ));
    }
}
