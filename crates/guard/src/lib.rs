//! The guard: the one place that decides whether a tool call may run.
//!
//! Every front door (MCP now; the AI chat and Tool Sources later) asks [`Guard::check`] before a
//! handler runs, and shows [`Guard::visible`] tools only. The pipeline, in the specification's
//! order, each step refusing with an error that names what is missing:
//!
//! 1. **Scope** for the call's effective tier (the named action's tier; for a call naming no
//!    action or an unknown one the tool's highest, fail closed): Tier 1
//!    needs `ai:read`, Tier 2 `ai:write`, Tier 3 `ai:execute` — and `ai:execute_admin` in
//!    production when required. `ai:execute` implies `ai:write` implies `ai:read`; `*` grants
//!    all. Tier 4 is always refused.
//! 2. **RBAC**: the acting user's role in the organization must hold the tool's (or the
//!    action's) permission, decided by `breeze_core::rbac::check`.
//! 3. **Per-tool rate limit**, per user, exact sliding window (the limiter is shared with the
//!    transport limits: memory or Redis). A limiter that cannot decide refuses in production.
//! 4. **Production allowlist** for Tier 3+: `MCP_EXECUTE_TOOL_ALLOWLIST`.
//! 5. **Approval** for Tier 3: [`Clearance::NeedsApproval`] — the caller must get a person's
//!    approval (breeze-server's durable approval requests) before the handler runs.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use breeze_core::{Clock, Permission, PermissionSet, Scope, ScopeSet, UserId, rbac};
use breeze_limits::RateLimiter;
use breeze_tools::{Tier, ToolSpec};
use serde_json::Value;

/// Which Tier 3+ tools production allows (`MCP_EXECUTE_TOOL_ALLOWLIST`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Allowlist {
    /// Unset or empty: none.
    #[default]
    None,
    /// `*`: every tool.
    All,
    Only(BTreeSet<String>),
}

impl Allowlist {
    /// Parses the comma-separated setting.
    pub fn parse(setting: &str) -> Self {
        let names: BTreeSet<String> = setting
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if names.contains("*") {
            Allowlist::All
        } else if names.is_empty() {
            Allowlist::None
        } else {
            Allowlist::Only(names)
        }
    }

    fn allows(&self, tool: &str) -> bool {
        match self {
            Allowlist::None => false,
            Allowlist::All => true,
            Allowlist::Only(names) => names.contains(tool),
        }
    }
}

/// Deployment facts the guard needs.
#[derive(Debug, Clone, Default)]
pub struct GuardConfig {
    pub production: bool,
    /// `MCP_REQUIRE_EXECUTE_ADMIN` (default true; only matters in production).
    pub require_execute_admin: bool,
    /// `MCP_EXECUTE_TOOL_ALLOWLIST` (only matters in production).
    pub allowlist: Allowlist,
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
    /// The acting user holds no role in the organization.
    #[error("Insufficient permissions: the API key's user has no role in this organization")]
    NoRole,
    /// The acting user's role lacks the permission.
    #[error("Insufficient permissions: requires {0}")]
    MissingPermission(Permission),
    /// The per-tool limit is reached.
    #[error("Tool rate limit exceeded for {tool}. Try again at {retry_at}")]
    RateLimited {
        tool: String,
        retry_at: String,
        retry_after: Duration,
    },
    /// The rate limiter could not decide and production fails closed.
    #[error("Unable to verify rate limits")]
    LimiterUnavailable,
    /// Production runs only allowlisted Tier 3+ tools.
    #[error("Tool \"{tool}\" is not in MCP_EXECUTE_TOOL_ALLOWLIST for production")]
    NotAllowlisted { tool: String },
    /// Tier 4: never.
    #[error("Tool \"{tool}\" is blocked")]
    Blocked { tool: String },
}

/// What the guard allows a call to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a Tier 3 call must not run before a person approves it"]
pub enum Clearance {
    /// Run now, at this tier.
    Run(Tier),
    /// Tier 3: everything else passed; a person must approve before it runs.
    NeedsApproval,
}

/// Who is calling: the key's scopes and what its user may do in the key's organization.
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    pub scopes: &'a ScopeSet,
    pub user: UserId,
    /// The user's permissions in the organization; `None` when the user holds no role there.
    pub permissions: Option<PermissionSet>,
}

/// The guard pipeline.
#[derive(Clone)]
pub struct Guard {
    config: GuardConfig,
    limiter: Arc<dyn RateLimiter>,
    clock: Arc<dyn Clock>,
}

/// Whether `scopes` reach `tier` (the hierarchy `*` ⊃ execute_admin ⊃ execute ⊃ write ⊃ read).
fn reaches(scopes: &ScopeSet, tier: Tier, config: &GuardConfig) -> Result<(), (Scope, bool)> {
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
    pub fn new(config: GuardConfig, limiter: Arc<dyn RateLimiter>, clock: Arc<dyn Clock>) -> Self {
        Self {
            config,
            limiter,
            clock,
        }
    }

    /// Whether `scopes` allow reading at all (resources, streams): any `ai:*` scope or `*`.
    pub fn reaches_read(scopes: &ScopeSet) -> bool {
        reaches(scopes, Tier::T1, &GuardConfig::default()).is_ok()
    }

    /// Whether `tools/list` shows `spec` to a key with `scopes`: when at least one of its calls
    /// (its lowest-tier action) could pass the scope check.
    pub fn visible(&self, scopes: &ScopeSet, spec: &ToolSpec) -> bool {
        let tier = spec.lowest_tier();
        tier < Tier::T4 && reaches(scopes, tier, &self.config).is_ok()
    }

    /// Decides a call of `spec` with `args`; returns the effective tier when allowed. Counts the
    /// call against the tool's rate limit only once scope and permission allow it.
    pub async fn check(
        &self,
        caller: &Caller<'_>,
        spec: &ToolSpec,
        args: &Value,
    ) -> Result<Clearance, Refusal> {
        let tier = spec.effective_tier(args);
        if tier == Tier::T4 {
            return Err(Refusal::Blocked {
                tool: spec.name.to_owned(),
            });
        }
        reaches(caller.scopes, tier, &self.config).map_err(|(scope, production_admin)| {
            Refusal::MissingScope {
                tool: spec.name.to_owned(),
                scope,
                production_admin,
            }
        })?;
        let granted = caller.permissions.ok_or(Refusal::NoRole)?;
        rbac::check(granted, spec.permission_for(args))
            .map_err(|d| Refusal::MissingPermission(d.0))?;
        if let Some(limit) = spec.rate_limit {
            let key = format!("tool:{}:{}", caller.user, spec.name);
            match self
                .limiter
                .check(&key, limit.max, Duration::from_secs(limit.window_secs))
                .await
            {
                Ok(d) if d.allowed => {}
                Ok(d) => {
                    let retry_at = self.clock.now()
                        + chrono::Duration::from_std(d.retry_after)
                            .unwrap_or(chrono::Duration::zero());
                    return Err(Refusal::RateLimited {
                        tool: spec.name.to_owned(),
                        retry_at: retry_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        retry_after: d.retry_after,
                    });
                }
                Err(_) if self.config.production => return Err(Refusal::LimiterUnavailable),
                Err(_) => {}
            }
        }
        if tier >= Tier::T3 && self.config.production && !self.config.allowlist.allows(spec.name) {
            return Err(Refusal::NotAllowlisted {
                tool: spec.name.to_owned(),
            });
        }
        if tier == Tier::T3 {
            return Ok(Clearance::NeedsApproval);
        }
        Ok(Clearance::Run(tier))
    }
}

#[cfg(test)]
mod tests;
