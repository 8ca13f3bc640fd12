//! The guard's decisions, table-driven over the whole registry (the guard knows tools only
//! through `Guarded`, so these tests live where both meet).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;

use breeze_core::{
    ApiKeyId, Caller, ManualClock, OrgId, Permission, PermissionSet, ScopeSet, Tier, UserId,
};
use breeze_guard::{Allowlist, Clearance, Guard, GuardConfig, Refusal};
use breeze_limits::MemoryLimiter;
use serde_json::{Value, json};

/// A verdict as comparable data: `Ok(Some(tier))` runs now, `Ok(None)` awaits approval.
trait Verdict {
    fn v(self) -> Result<Option<Tier>, Refusal>;
}

impl Verdict for Result<Clearance, Refusal> {
    fn v(self) -> Result<Option<Tier>, Refusal> {
        match self {
            Ok(Clearance::Run(c)) => Ok(Some(c.tier())),
            Ok(Clearance::NeedsApproval(_)) => Ok(None),
            Err(r) => Err(r),
        }
    }
}

fn caller(scopes: &ScopeSet, permissions: Option<PermissionSet>) -> Caller {
    Caller::api_key(
        ApiKeyId::new(),
        OrgId::new(),
        UserId::new(),
        *scopes,
        permissions,
    )
}

fn scopes(list: &str) -> ScopeSet {
    ScopeSet::parse_list(list).unwrap()
}

fn guard(config: GuardConfig) -> Guard {
    let clock = ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .into(),
    );
    Guard::new(config, Arc::new(MemoryLimiter::new()), Arc::new(clock))
}

fn admin(scopes: &ScopeSet) -> Caller {
    caller(scopes, Some(PermissionSet::all()))
}

#[tokio::test]
async fn scope_hierarchy_and_spec_wording() {
    let registry = breeze_tools::all();
    let groups = registry.get("manage_groups").unwrap();
    let set_ctx = registry.get("set_device_context").unwrap();
    let g = guard(GuardConfig::default());
    let (read, write, exec) = (scopes("ai:read"), scopes("ai:write"), scopes("ai:execute"));

    assert!(g.visible(read, groups));
    assert!(!g.visible(read, set_ctx));
    assert!(
        g.visible(write, set_ctx) && g.visible(exec, set_ctx) && g.visible(scopes("*"), set_ctx)
    );

    let err = g
        .check(&admin(&read), set_ctx, &json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Tool \"set_device_context\" requires ai:write scope"
    );
    assert_eq!(
        g.check(&admin(&read), groups, &json!({"action": "list"}))
            .await
            .v(),
        Ok(Some(Tier::T1))
    );
    let err = g
        .check(&admin(&read), groups, &json!({"action": "add_devices"}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Tool \"manage_groups\" requires ai:write scope"
    );
    let rw = scopes("ai:read,ai:write");
    let err = g
        .check(&admin(&rw), groups, &json!({"action": "delete"}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Tool \"manage_groups\" requires ai:execute scope"
    );
    assert_eq!(
        g.check(&admin(&exec), groups, &json!({"action": "delete"}))
            .await
            .v(),
        Ok(None)
    );
}

#[tokio::test]
async fn production_requires_execute_admin_and_the_allowlist() {
    let registry = breeze_tools::all();
    let groups = registry.get("manage_groups").unwrap();
    let create = json!({"action": "create", "name": "x"});
    let prod = |allowlist: &str| {
        guard(GuardConfig {
            production: true,
            require_execute_admin: true,
            allowlist: Allowlist::parse(allowlist),
            ..GuardConfig::default()
        })
    };
    let (exec, admin_scope) = (scopes("ai:execute"), scopes("ai:execute_admin"));

    let err = prod("*")
        .check(&admin(&exec), groups, &create)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Tool \"manage_groups\" requires ai:execute_admin scope in production"
    );
    for setting in ["", " , ", "execute_command,run_script"] {
        let err = prod(setting)
            .check(&admin(&admin_scope), groups, &create)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tool \"manage_groups\" is not in MCP_EXECUTE_TOOL_ALLOWLIST for production",
            "{setting:?}"
        );
    }
    for setting in ["*", "manage_groups", " run_script , manage_groups "] {
        assert_eq!(
            prod(setting)
                .check(&admin(&admin_scope), groups, &create)
                .await
                .v(),
            Ok(None),
            "{setting:?}"
        );
    }
    // Tier 1 and 2 calls need no allowlist; development ignores it and execute_admin.
    assert!(
        prod("")
            .check(&admin(&admin_scope), groups, &json!({"action": "list"}))
            .await
            .is_ok()
    );
    let dev = guard(GuardConfig {
        production: false,
        require_execute_admin: true,
        allowlist: Allowlist::None,
        ..GuardConfig::default()
    });
    assert_eq!(
        dev.check(&admin(&exec), groups, &create).await.v(),
        Ok(None)
    );
}

#[tokio::test]
async fn rbac_uses_the_tool_or_action_permission() {
    let registry = breeze_tools::all();
    let g = guard(GuardConfig::default());
    let all = scopes("*");
    let read_only = PermissionSet::from_iter([Permission::DevicesRead, Permission::AuditRead]);
    let viewer = caller(&all, Some(read_only));
    let groups = registry.get("manage_groups").unwrap();
    assert!(
        g.check(&viewer, groups, &json!({"action": "list"}))
            .await
            .is_ok()
    );
    let err = g
        .check(&viewer, groups, &json!({"action": "add_devices"}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Insufficient permissions: requires devices.write"
    );
    let audit = registry.get("query_audit_log").unwrap();
    assert!(g.check(&viewer, audit, &json!({})).await.is_ok());
    let nobody = caller(&all, Some(PermissionSet::EMPTY));
    assert_eq!(
        g.check(&nobody, audit, &json!({})).await.v(),
        Err(Refusal::MissingPermission(Permission::AuditRead))
    );
    let roleless = caller(&all, None);
    assert_eq!(
        g.check(&roleless, audit, &json!({})).await.v(),
        Err(Refusal::NoRole)
    );
}

#[tokio::test]
async fn per_tool_limits_hold_exactly_at_the_boundary() {
    boundary(Arc::new(MemoryLimiter::new())).await;
}

/// The same boundary with the limiter instances share: one atomic Redis script per decision.
#[tokio::test]
async fn per_tool_limits_hold_exactly_at_the_boundary_on_redis() {
    #[allow(clippy::disallowed_methods)] // test configuration
    let url =
        std::env::var("BREEZE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("breeze:test:guard:{}:", uuid::Uuid::new_v4());
    let limiter = breeze_limits::RedisLimiter::new(&url, &prefix).unwrap();
    boundary(Arc::new(limiter)).await;
}

async fn boundary(limiter: Arc<dyn breeze_limits::RateLimiter>) {
    let registry = breeze_tools::all();
    let set_ctx = registry.get("set_device_context").unwrap();
    let limit = set_ctx.rate_limit.unwrap();
    assert_eq!(
        (limit.max, limit.window_secs),
        (20, 300),
        "the specification's table"
    );
    let clock = ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .into(),
    );
    let g = Guard::new(GuardConfig::default(), limiter.clone(), Arc::new(clock));
    let rw = scopes("ai:write");
    let me = admin(&rw);
    for n in 1..=20 {
        assert!(
            g.check(&me, set_ctx, &json!({})).await.is_ok(),
            "call {n} is within the limit"
        );
    }
    let err = g.check(&me, set_ctx, &json!({})).await.unwrap_err();
    assert!(
        err.to_string().starts_with(
            "Tool rate limit exceeded for set_device_context. Try again at 2026-11-30T12:0"
        ),
        "{err}"
    );
    // Per user, and per tool.
    assert!(g.check(&admin(&rw), set_ctx, &json!({})).await.is_ok());
    let resolve = registry.get("resolve_device_context").unwrap();
    assert!(g.check(&me, resolve, &json!({})).await.is_ok());
    // MCP_TOOL_RATE_LIMITS=false (development only) counts nothing.
    let unlimited = Guard::new(
        GuardConfig {
            tool_rate_limits: false,
            ..GuardConfig::default()
        },
        limiter.clone(),
        Arc::new(ManualClock::new(
            chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
                .unwrap()
                .into(),
        )),
    );
    for n in 1..=25 {
        assert!(
            unlimited.check(&me, set_ctx, &json!({})).await.is_ok(),
            "call {n} with the tools' limits off"
        );
    }
    // Refusals by scope or permission are not counted.
    let query = registry.get("query_devices").unwrap();
    assert!(
        query.rate_limit.is_none(),
        "tools without an entry have no limit"
    );
}

/// Every tool and action, under every combination of scopes: `tools/list` agrees with
/// `tools/call` refusals, and every call names its permission.
#[tokio::test]
async fn listing_agrees_with_calls_for_every_scope_combination() {
    let registry = breeze_tools::all();
    let g = guard(GuardConfig::default());
    let combos = [
        "ai:read",
        "ai:write",
        "ai:execute",
        "ai:execute_admin",
        "*",
        "ai:read,ai:write",
        "ai:read,ai:execute",
    ];
    for combo in combos {
        let s = scopes(combo);
        for spec in registry.iter() {
            let base_args: Value = json!({});
            let calls: Vec<Value> = if spec.actions.is_empty() {
                vec![base_args]
            } else {
                spec.actions
                    .iter()
                    .map(|a| json!({ spec.action_key: a.name }))
                    .collect()
            };
            let listed = g.visible(s, spec);
            let mut some_call_passes_scope = false;
            for args in calls {
                let outcome = g.check(&admin(&s), spec, &args).await;
                let scope_refused = matches!(outcome, Err(Refusal::MissingScope { .. }));
                some_call_passes_scope |= !scope_refused;
                if !listed {
                    assert!(
                        scope_refused,
                        "{combo}: {} {args} is hidden but callable",
                        spec.name
                    );
                }
                let _ = spec.permission_for(&args);
            }
            assert_eq!(
                listed, some_call_passes_scope,
                "{combo}: {} is listed exactly when one of its calls passes the scope check",
                spec.name
            );
        }
    }
}
