//! The guard: the one place that decides whether a tool call may run.
//!
//! Every front door (MCP now; the AI chat and Tool Sources later) asks [`Guard::check`] before a
//! handler runs, and shows [`Guard::visible`] tools only. The pipeline, in the specification's
//! order, each step refusing with an error that names what is missing:
//!
//! 1. **Scope and role**: the call's operation — the effective tier (the named action's; for a
//!    call naming no action or an unknown one the tool's highest, fail closed) and the
//!    action's permission — decided by [`breeze_core::authz::authorize`], the one permission
//!    model REST and the dashboard consult too: Tier 4 never, scope for the tier
//!    (`ai:execute_admin` for Tier 3 in production when required), the user's role holds
//!    the permission.
//! 3. **Per-tool rate limit**, per user, exact sliding window (the limiter is shared with the
//!    transport limits: memory or Redis). A limiter that cannot decide refuses in production.
//! 4. **Production allowlist** for Tier 3+: `MCP_EXECUTE_TOOL_ALLOWLIST`.
//! 5. **Approval** for Tier 3: [`Clearance::NeedsApproval`] — the caller must get a person's
//!    approval (`breeze-pipeline`'s durable approval requests) before the handler runs.
//!
//! The verdict is the only key to a handler: a [`Cleared`] call is what `breeze-tools` demands
//! to run a tool, consumed by the run. It is bound to the tool, the action and a keyed digest
//! of the arguments it cleared, and carries the organization and actor, so a handler acts for
//! nobody else and on nothing else. A Tier 3 call is an [`AwaitingApproval`] until
//! [`Guard::release`] turns it into a `Cleared` against a person's approval of that very call.
//! Neither can be made outside this crate. The guard knows tools only through [`Guarded`],
//! which `breeze_tools::ToolSpec` implements, so it sits below the tools in the dependency
//! graph.

use std::{
    borrow::Cow,
    collections::BTreeSet,
    hash::{BuildHasher, Hash, Hasher, RandomState},
    sync::Arc,
    time::Duration,
};

use breeze_core::{
    Actor, Caller, Clock, Denied, Operation, OrgId, Permission, Scope, ScopePolicy, ScopeSet, Tier,
    UserId, Verdict, authz,
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

/// Deployment facts the guard needs. The default is development with every tool's rate limit.
#[derive(Debug, Clone)]
pub struct GuardConfig {
    pub production: bool,
    /// `MCP_REQUIRE_EXECUTE_ADMIN` (default true; only matters in production).
    pub require_execute_admin: bool,
    /// `MCP_TOOL_RATE_LIMITS`: whether a tool's own per-user rate limit is counted (the
    /// settings refuse turning it off in production).
    pub tool_rate_limits: bool,
    /// `MCP_EXECUTE_TOOL_ALLOWLIST` (only matters in production).
    pub allowlist: Allowlist,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            production: false,
            require_execute_admin: false,
            tool_rate_limits: true,
            allowlist: Allowlist::default(),
        }
    }
}

impl GuardConfig {
    /// The scope rule the permission model applies.
    pub fn scope_policy(&self) -> ScopePolicy {
        ScopePolicy {
            production: self.production,
            require_execute_admin: self.require_execute_admin,
        }
    }
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
    /// Only a person may exercise the permission, never a credential acting for one.
    #[error(
        "Tool \"{tool}\" needs {permission}, which only a person signed in to the dashboard exercises"
    )]
    PersonOnly {
        tool: String,
        permission: Permission,
    },
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
    fn name(&self) -> &str;
    /// The name as a clearance keeps it: a built-in tool's borrowed (no allocation per call),
    /// an external tool's (`<slug>__<name>`, known only at run time) owned.
    fn clearance_name(&self) -> Cow<'static, str> {
        Cow::Owned(self.name().to_owned())
    }
    /// The tier of a call with `args`.
    fn tier_for(&self, args: &Value) -> Tier;
    /// The action a call with `args` names, when the tool has actions and it is one of them.
    fn action_for(&self, args: &Value) -> Option<&'static str>;
    /// The lowest tier any call can have: what a caller needs to see the tool listed.
    fn lowest_tier(&self) -> Tier;
    /// The permission a call with `args` needs.
    fn permission_for(&self, args: &Value) -> Permission;
    /// The per-user limit, if the tool has one.
    fn rate_limit(&self) -> Option<RateLimit>;
}

/// A call the guard allowed to run: the only way to a tool's handler, consumed by the run. It
/// names the tool, action, organization and actor it was cleared for, and is bound to the
/// arguments it cleared by a digest under keys of its own ([`Cleared::binds`]), so it can run
/// nothing else. Fields are private: only the guard makes one.
#[derive(Debug)]
pub struct Cleared {
    tool: Cow<'static, str>,
    action: Option<&'static str>,
    tier: Tier,
    org: OrgId,
    actor: Actor,
    /// The person the actor acts for (a key's creator, a grant's user, the signed-in user).
    user: UserId,
    binding: Binding,
    approval: Option<String>,
}

/// A digest of cleared arguments under keys drawn for this clearance: a caller that does not
/// hold the keys cannot make other arguments match it.
#[derive(Debug)]
struct Binding {
    keys: RandomState,
    digest: u64,
}

impl Binding {
    fn of(args: &Value) -> Self {
        let keys = RandomState::new();
        let digest = digest(&keys, args);
        Self { keys, digest }
    }

    fn holds(&self, args: &Value) -> bool {
        digest(&self.keys, args) == self.digest
    }
}

fn digest(keys: &RandomState, args: &Value) -> u64 {
    fn walk(v: &Value, h: &mut impl Hasher) {
        match v {
            Value::Null => h.write_u8(0),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => (2u8, n).hash(h),
            Value::String(s) => (3u8, s).hash(h),
            Value::Array(items) => {
                (4u8, items.len()).hash(h);
                items.iter().for_each(|i| walk(i, h));
            }
            Value::Object(m) => {
                (5u8, m.len()).hash(h);
                for (k, v) in m {
                    k.hash(h);
                    walk(v, h);
                }
            }
        }
    }
    let mut h = keys.build_hasher();
    walk(args, &mut h);
    h.finish()
}

impl Cleared {
    /// The tool this call may run, and nothing else.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The action it was cleared as (`None`: a tool without actions).
    pub fn action(&self) -> Option<&'static str> {
        self.action
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

    /// The person the actor acts for: whose running timer, whose comments.
    pub fn user(&self) -> UserId {
        self.user
    }

    /// The approval request a person granted, for a released Tier 3 call.
    pub fn approval(&self) -> Option<&str> {
        self.approval.as_deref()
    }

    /// Whether this clearance is for calling `tool` with `args`: the same tool, the same
    /// action and the same arguments it cleared.
    pub fn binds(&self, tool: &impl Guarded, args: &Value) -> bool {
        self.tool == tool.name() && self.action == tool.action_for(args) && self.binding.holds(args)
    }
}

/// A Tier 3 call that passed every check but a person's approval. Its tool's precheck may run
/// (through [`AwaitingApproval::cleared_for_precheck`]); the handler only once
/// [`Guard::release`] turned it into a [`Cleared`] against an approval of this very call.
#[derive(Debug)]
#[must_use = "a Tier 3 call must not run before a person approves it"]
pub struct AwaitingApproval(Cleared);

impl AwaitingApproval {
    /// The tool, organization and actor, for the approval request and the precheck. Borrowing
    /// it does not clear the call: `breeze-tools` runs only the precheck with it.
    pub fn cleared_for_precheck(&self) -> &Cleared {
        &self.0
    }
}

/// A person's approval of one call, as the approval workflow read it from its durable record:
/// what [`Guard::release`] checks against the call it releases.
#[derive(Debug, Clone)]
pub struct Approval<'a> {
    /// The approval request's id.
    pub id: String,
    /// The tool the request was for.
    pub tool: &'a str,
    /// The organization the request was made in.
    pub org: OrgId,
    /// The arguments a person saw and approved (for a batch: the one item's input).
    pub arguments: &'a Value,
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

impl Guard {
    pub fn new(config: GuardConfig, limiter: Arc<dyn RateLimiter>, clock: Arc<dyn Clock>) -> Self {
        Self {
            config,
            limiter,
            clock,
        }
    }

    /// The scope rule this guard applies (the deployment's).
    pub fn scope_policy(&self) -> ScopePolicy {
        self.config.scope_policy()
    }

    /// Whether `scopes` allow reading at all (resources, streams): any `ai:*` scope or `*`.
    pub fn reaches_read(scopes: ScopeSet) -> bool {
        authz::reaches(scopes, Tier::T1, ScopePolicy::default()).is_ok()
    }

    /// Whether `scopes` pass the scope check for a call of `tier` (never for Tier 4): what a
    /// consolidated catalog's meta-tools are listed by.
    pub fn reaches_tier(&self, scopes: ScopeSet, tier: Tier) -> bool {
        authz::reaches(scopes, tier, self.config.scope_policy()).is_ok()
    }

    /// Whether `tools/list` shows `tool` to a key with `scopes`: when at least one of its calls
    /// (its lowest-tier action) could pass the scope check.
    pub fn visible(&self, scopes: ScopeSet, tool: &impl Guarded) -> bool {
        self.reaches_tier(scopes, tool.lowest_tier())
    }

    /// Decides a call of `tool` with `args`. Counts the call against the tool's rate limit only
    /// once scope and permission allow it.
    pub async fn check(
        &self,
        caller: &Caller,
        tool: &impl Guarded,
        args: &Value,
    ) -> Result<Clearance, Refusal> {
        let (tier, verdict) = self.authorize(caller, tool, args)?;
        if let Some(limit) = tool.rate_limit().filter(|_| self.config.tool_rate_limits) {
            let key = format!("tool:{}:{}", caller.user(), tool.name());
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
        Ok(clearance(caller, tool, (tier, verdict), args))
    }

    /// Decides again, for an approved Tier 3 call about to run, whether its requester may still
    /// make it: scope, role and allowlist as they are now (the rate limit counted the call when
    /// it was requested). Anything else than "awaiting approval" refuses.
    pub fn recheck_approved(
        &self,
        caller: &Caller,
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
        caller: &Caller,
        tool: &impl Guarded,
        args: &Value,
    ) -> Result<Clearance, Refusal> {
        let (tier, verdict) = self.authorize(caller, tool, args)?;
        self.allowlisted(tool, tier)?;
        Ok(clearance(caller, tool, (tier, verdict), args))
    }

    /// Releases an approved Tier 3 call: the [`Cleared`] that runs it, when `approval` is a
    /// person's approval of exactly this call — the same tool, organization and arguments.
    /// Anything else is refused and runs nothing.
    pub fn release(
        &self,
        awaiting: AwaitingApproval,
        approval: Approval<'_>,
    ) -> Result<Cleared, Refusal> {
        let mut cleared = awaiting.0;
        let matches = *cleared.tool == *approval.tool
            && cleared.org == approval.org
            && cleared.binding.holds(approval.arguments);
        if !matches {
            return Err(Refusal::NotApprovable {
                tool: cleared.tool.into_owned(),
            });
        }
        cleared.approval = Some(approval.id);
        Ok(cleared)
    }

    /// The permission model's decision on the call's operation; the call's tier and whether it
    /// needs a person's approval when it allows it.
    fn authorize(
        &self,
        caller: &Caller,
        tool: &impl Guarded,
        args: &Value,
    ) -> Result<(Tier, Verdict), Refusal> {
        let op = Operation {
            tier: tool.tier_for(args),
            permission: tool.permission_for(args),
        };
        let name = || tool.name().to_owned();
        match authz::authorize(caller, op, self.config.scope_policy()) {
            Ok(verdict) => Ok((op.tier, verdict)),
            Err(Denied::Blocked) => Err(Refusal::Blocked { tool: name() }),
            Err(Denied::MissingScope { scope, production }) => Err(Refusal::MissingScope {
                tool: name(),
                scope,
                production_admin: production,
            }),
            Err(Denied::PersonOnly(permission)) => Err(Refusal::PersonOnly {
                tool: name(),
                permission,
            }),
            Err(Denied::NoRole) => Err(Refusal::NoRole),
            Err(Denied::MissingPermission(p)) => Err(Refusal::MissingPermission(p)),
        }
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

fn clearance(
    caller: &Caller,
    tool: &impl Guarded,
    (tier, verdict): (Tier, Verdict),
    args: &Value,
) -> Clearance {
    let cleared = Cleared {
        tool: tool.clearance_name(),
        action: tool.action_for(args),
        tier,
        org: caller.org(),
        actor: caller.actor(),
        user: caller.user(),
        binding: Binding::of(args),
        approval: None,
    };
    if verdict == Verdict::NeedsApproval {
        Clearance::NeedsApproval(AwaitingApproval(cleared))
    } else {
        Clearance::Run(cleared)
    }
}

#[cfg(test)]
mod tests {
    //! The verdict's own guarantees; the decisions over the whole registry are tested in
    //! `breeze-pipeline`, where tools and guard meet.

    use breeze_core::{ApiKeyId, ManualClock, PermissionSet, UserId};
    use breeze_limits::MemoryLimiter;
    use serde_json::json;

    use super::*;

    /// A tool with a Tier 1 `list` and a Tier 3 `delete`.
    struct Fake;

    impl Guarded for Fake {
        fn name(&self) -> &str {
            "fake"
        }
        fn tier_for(&self, args: &Value) -> Tier {
            if args["action"] == "list" {
                Tier::T1
            } else {
                Tier::T3
            }
        }
        fn action_for(&self, args: &Value) -> Option<&'static str> {
            match args["action"].as_str() {
                Some("list") => Some("list"),
                Some("delete") => Some("delete"),
                _ => None,
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

    fn caller() -> Caller {
        let scopes = ScopeSet::parse_list("ai:execute").unwrap();
        let perms = Some(PermissionSet::all());
        Caller::api_key(ApiKeyId::new(), OrgId::new(), UserId::new(), scopes, perms)
    }

    #[tokio::test]
    async fn the_verdict_carries_the_callers_org_actor_and_tool() {
        let caller = caller();
        let g = guard();
        let Ok(Clearance::Run(cleared)) = g.check(&caller, &Fake, &json!({"action": "list"})).await
        else {
            panic!("a Tier 1 call runs");
        };
        assert_eq!(
            (
                cleared.tool(),
                cleared.action(),
                cleared.org(),
                cleared.actor(),
                cleared.tier()
            ),
            (
                "fake",
                Some("list"),
                caller.org(),
                &caller.actor(),
                Tier::T1
            )
        );
        let delete = json!({"action": "delete", "id": 1});
        let Ok(Clearance::NeedsApproval(awaiting)) = g.check(&caller, &Fake, &delete).await else {
            panic!("a Tier 3 call awaits approval");
        };
        assert_eq!(awaiting.cleared_for_precheck().org(), caller.org());
        let approval = |arguments| Approval {
            id: "a1".into(),
            tool: "fake",
            org: caller.org(),
            arguments,
        };
        let released = g.release(awaiting, approval(&delete)).unwrap();
        assert_eq!(
            (released.tier(), released.approval()),
            (Tier::T3, Some("a1"))
        );
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

    #[tokio::test]
    async fn a_clearance_runs_only_the_arguments_it_cleared() {
        let caller = caller();
        let g = guard();
        let list = json!({"action": "list", "filter": {"os": "linux", "limit": 5}});
        let Ok(Clearance::Run(cleared)) = g.check(&caller, &Fake, &list).await else {
            panic!("a Tier 1 call runs");
        };
        assert!(cleared.binds(&Fake, &list));
        for other in [
            json!({"action": "list", "filter": {"os": "linux", "limit": 6}}),
            json!({"action": "list", "filter": {"os": "linux"}}),
            json!({"action": "list"}),
            json!({"action": "delete", "filter": {"os": "linux", "limit": 5}}),
        ] {
            assert!(!cleared.binds(&Fake, &other), "{other} must not be bound");
        }
        // An approval of other arguments releases nothing.
        let delete = json!({"action": "delete", "id": 1});
        let Ok(Clearance::NeedsApproval(awaiting)) = g.check(&caller, &Fake, &delete).await else {
            panic!("a Tier 3 call awaits approval");
        };
        let wider = json!({"action": "delete", "id": 2});
        let approval = Approval {
            id: "a1".into(),
            tool: "fake",
            org: caller.org(),
            arguments: &wider,
        };
        assert_eq!(
            g.release(awaiting, approval).unwrap_err(),
            Refusal::NotApprovable {
                tool: "fake".into()
            }
        );
    }
}
