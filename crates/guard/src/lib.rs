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
//!    approval (`breeze-pipeline`'s durable approval requests) before the handler runs.
//!
//! The verdict is the only key to a handler: a [`Cleared`] call (or an [`AwaitingApproval`] one,
//! once a person approved it) is what `breeze-tools` demands to run a tool, and it carries the
//! organization and actor the guard cleared, so a handler acts for nobody else. Neither can be
//! made outside this crate. The guard knows tools only through [`Guarded`], which
//! `breeze_tools::ToolSpec` implements, so it sits below the tools in the dependency graph.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use breeze_core::{
    Actor, ActorType, ApiKeyId, ApiKeyPrincipal, Clock, GrantId, OrgId, Permission, PermissionSet,
    Scope, ScopeSet, Tier, UserId, rbac,
};
use breeze_limits::RateLimiter;
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
    /// An approval was presented for a call that needs none (its tier changed).
    #[error("Tool \"{tool}\" no longer needs an approval at this tier; nothing was run")]
    NotApprovable { tool: String },
}

/// A per-tool sliding-window limit, counted per user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub max: u32,
    pub window_secs: u64,
}

/// What the guard must know of a tool to decide a call of it. `breeze_tools::ToolSpec`
/// implements it from the tool's declaration.
pub trait Guarded {
    /// The tool's name.
    fn name(&self) -> &'static str;
    /// The tier of a call with `args`.
    fn tier_for(&self, args: &Value) -> Tier;
    /// The lowest tier any call can have: what a caller needs to see the tool listed.
    fn lowest_tier(&self) -> Tier;
    /// The permission a call with `args` needs.
    fn permission_for(&self, args: &Value) -> Permission;
    /// The per-user limit, if the tool has one.
    fn rate_limit(&self) -> Option<RateLimit>;
}

/// Who is calling, in one organization: the credential's scopes, the user it acts for and
/// what that user may do there. Every front door (MCP, and later the AI chat and Tool Sources)
/// describes its caller this way.
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    /// The one organization the call can reach.
    pub org: OrgId,
    /// Who the audit trail names: the API key, the OAuth grant, or the signed-in user.
    pub actor: Actor,
    /// The API key the call came with, if any (an approval names it, and is void once it is
    /// revoked).
    pub key: Option<ApiKeyId>,
    /// The OAuth grant whose access token the call came with, if any (an approval names it,
    /// and is void once it is revoked).
    pub grant: Option<GrantId>,
    pub user: UserId,
    pub scopes: &'a ScopeSet,
    /// The user's permissions in the organization; `None` when the user holds no role there.
    pub permissions: Option<PermissionSet>,
}

impl<'a> Caller<'a> {
    /// An API key's caller: its organization, its user's permissions there, its scopes.
    pub fn api_key(p: &'a ApiKeyPrincipal) -> Self {
        Self {
            org: p.org_id,
            actor: Actor::new(ActorType::ApiKey, p.key_id),
            key: Some(p.key_id),
            grant: None,
            user: p.user_id,
            scopes: &p.scopes,
            permissions: p.permissions,
        }
    }
}

/// A call the guard allowed to run now: the only way to a tool's handler. It names the tool,
/// the organization and the actor it was cleared for; fields are private, so only the guard
/// makes one.
#[derive(Debug)]
pub struct Cleared {
    tool: &'static str,
    tier: Tier,
    org: OrgId,
    actor: Actor,
}

impl Cleared {
    /// The tool this call may run, and nothing else.
    pub fn tool(&self) -> &'static str {
        self.tool
    }

    /// The call's effective tier.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// The organization the call acts in.
    pub fn org(&self) -> OrgId {
        self.org
    }

    /// Who acts.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }
}

/// A Tier 3 call that passed every check but a person's approval. Its tool's precheck may run
/// (through [`AwaitingApproval::cleared_for_precheck`]); the handler only after
/// [`AwaitingApproval::approved`].
#[derive(Debug)]
#[must_use = "a Tier 3 call must not run before a person approves it"]
pub struct AwaitingApproval(Cleared);

impl AwaitingApproval {
    /// The tool, organization and actor, for the approval request and the precheck. Borrowing
    /// it does not clear the call: `breeze-tools` runs only the precheck with it.
    pub fn cleared_for_precheck(&self) -> &Cleared {
        &self.0
    }

    /// A person approved the call: it may run. Only the approval workflow
    /// (`breeze-pipeline::approvals`) calls this, after a recorded approval.
    pub fn approved(self) -> Cleared {
        self.0
    }
}

/// What the guard allows a call to do.
#[derive(Debug)]
#[must_use = "a Tier 3 call must not run before a person approves it"]
pub enum Clearance {
    /// Run now.
    Run(Cleared),
    /// Tier 3: everything else passed; a person must approve before it runs.
    NeedsApproval(AwaitingApproval),
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

    /// Whether `scopes` pass the scope check for a call of `tier` (never for Tier 4): what a
    /// consolidated catalog's meta-tools are listed by.
    pub fn reaches_tier(&self, scopes: &ScopeSet, tier: Tier) -> bool {
        tier < Tier::T4 && reaches(scopes, tier, &self.config).is_ok()
    }

    /// Whether `tools/list` shows `tool` to a key with `scopes`: when at least one of its calls
    /// (its lowest-tier action) could pass the scope check.
    pub fn visible(&self, scopes: &ScopeSet, tool: &impl Guarded) -> bool {
        let tier = tool.lowest_tier();
        tier < Tier::T4 && reaches(scopes, tier, &self.config).is_ok()
    }

    /// Decides a call of `tool` with `args`. Counts the call against the tool's rate limit only
    /// once scope and permission allow it.
    pub async fn check(
        &self,
        caller: &Caller<'_>,
        tool: &impl Guarded,
        args: &Value,
    ) -> Result<Clearance, Refusal> {
        let tier = self.authorize(caller, tool, args)?;
        if let Some(limit) = tool.rate_limit() {
            let key = format!("tool:{}:{}", caller.user, tool.name());
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
                        tool: tool.name().to_owned(),
                        retry_at: retry_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        retry_after: d.retry_after,
                    });
                }
                Err(_) if self.config.production => return Err(Refusal::LimiterUnavailable),
                Err(_) => {}
            }
        }
        self.allowlisted(tool, tier)?;
        Ok(clearance(caller, tool, tier))
    }

    /// Decides again, for an approved Tier 3 call about to run, whether its requester may still
    /// make it: scope, role and allowlist as they are now (the rate limit counted the call when
    /// it was requested). Anything else than "awaiting approval" refuses.
    pub fn recheck_approved(
        &self,
        caller: &Caller<'_>,
        tool: &impl Guarded,
        args: &Value,
    ) -> Result<AwaitingApproval, Refusal> {
        match self.check_uncounted(caller, tool, args)? {
            Clearance::NeedsApproval(a) => Ok(a),
            Clearance::Run(_) => Err(Refusal::NotApprovable {
                tool: tool.name().to_owned(),
            }),
        }
    }

    /// Decides a call as [`check`](Self::check) does — scope, role, allowlist — without
    /// counting it against the tool's rate limit. For a batch (`breeze-pipeline::batch`): its
    /// preview, which runs nothing, and the items of an approved batch, each of which was
    /// counted when the batch was requested.
    pub fn check_uncounted(
        &self,
        caller: &Caller<'_>,
        tool: &impl Guarded,
        args: &Value,
    ) -> Result<Clearance, Refusal> {
        let tier = self.authorize(caller, tool, args)?;
        self.allowlisted(tool, tier)?;
        Ok(clearance(caller, tool, tier))
    }

    /// Tier 4, scope and RBAC; the call's tier when they allow it.
    fn authorize(
        &self,
        caller: &Caller<'_>,
        tool: &impl Guarded,
        args: &Value,
    ) -> Result<Tier, Refusal> {
        let tier = tool.tier_for(args);
        if tier == Tier::T4 {
            return Err(Refusal::Blocked {
                tool: tool.name().to_owned(),
            });
        }
        reaches(caller.scopes, tier, &self.config).map_err(|(scope, production_admin)| {
            Refusal::MissingScope {
                tool: tool.name().to_owned(),
                scope,
                production_admin,
            }
        })?;
        let granted = caller.permissions.ok_or(Refusal::NoRole)?;
        rbac::check(granted, tool.permission_for(args))
            .map_err(|d| Refusal::MissingPermission(d.0))?;
        Ok(tier)
    }

    fn allowlisted(&self, tool: &impl Guarded, tier: Tier) -> Result<(), Refusal> {
        if tier >= Tier::T3 && self.config.production && !self.config.allowlist.allows(tool.name())
        {
            return Err(Refusal::NotAllowlisted {
                tool: tool.name().to_owned(),
            });
        }
        Ok(())
    }
}

fn clearance(caller: &Caller<'_>, tool: &impl Guarded, tier: Tier) -> Clearance {
    let cleared = Cleared {
        tool: tool.name(),
        tier,
        org: caller.org,
        actor: caller.actor.clone(),
    };
    if tier == Tier::T3 {
        Clearance::NeedsApproval(AwaitingApproval(cleared))
    } else {
        Clearance::Run(cleared)
    }
}

#[cfg(test)]
mod tests {
    //! The verdict's own guarantees; the decisions over the whole registry are tested in
    //! `breeze-pipeline`, where tools and guard meet.

    use breeze_core::{ManualClock, PermissionSet};
    use breeze_limits::MemoryLimiter;
    use serde_json::json;

    use super::*;

    /// A tool with a Tier 1 `list` and a Tier 3 `delete`.
    struct Fake;

    impl Guarded for Fake {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn tier_for(&self, args: &Value) -> Tier {
            if args["action"] == "list" {
                Tier::T1
            } else {
                Tier::T3
            }
        }
        fn lowest_tier(&self) -> Tier {
            Tier::T1
        }
        fn permission_for(&self, _: &Value) -> Permission {
            Permission::DevicesRead
        }
        fn rate_limit(&self) -> Option<RateLimit> {
            None
        }
    }

    fn guard() -> Guard {
        let clock = ManualClock::new(chrono::DateTime::UNIX_EPOCH);
        Guard::new(
            GuardConfig::default(),
            Arc::new(MemoryLimiter::new()),
            Arc::new(clock),
        )
    }

    #[tokio::test]
    async fn the_verdict_carries_the_callers_org_actor_and_tool() {
        let scopes = ScopeSet::parse_list("ai:execute").unwrap();
        let user = UserId::new();
        let caller = Caller {
            org: OrgId::new(),
            actor: Actor::new(ActorType::User, user),
            key: None,
            grant: None,
            user,
            scopes: &scopes,
            permissions: Some(PermissionSet::all()),
        };
        let g = guard();
        let Ok(Clearance::Run(cleared)) = g.check(&caller, &Fake, &json!({"action": "list"})).await
        else {
            panic!("a Tier 1 call runs");
        };
        assert_eq!(
            (
                cleared.tool(),
                cleared.org(),
                cleared.actor(),
                cleared.tier()
            ),
            ("fake", caller.org, &caller.actor, Tier::T1)
        );
        let Ok(Clearance::NeedsApproval(awaiting)) =
            g.check(&caller, &Fake, &json!({"action": "delete"})).await
        else {
            panic!("a Tier 3 call awaits approval");
        };
        assert_eq!(awaiting.cleared_for_precheck().org(), caller.org);
        assert_eq!(awaiting.approved().tier(), Tier::T3);
        // An approval for a call that is no longer Tier 3 is refused, not run.
        assert_eq!(
            g.recheck_approved(&caller, &Fake, &json!({"action": "list"}))
                .map(|_| ())
                .unwrap_err(),
            Refusal::NotApprovable {
                tool: "fake".into()
            }
        );
    }
}
