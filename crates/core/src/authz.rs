//! The one permission model: whether a [`Caller`] may perform an [`Operation`].
//!
//! Every door consults [`authorize`]: the guard for each tool call (an action's tier and
//! permission), REST routes and dashboard pages (each declares the operation it performs). So
//! a role change, a scope or a production setting means the same thing at every door. The
//! rules, in order, each refusal naming what is missing:
//!
//! 1. **Tier 4** is never allowed.
//! 2. **Personal permissions** (managing API keys, users, settings) are exercised by a person
//!    only: a credential acting for someone (an API key, an OAuth grant) never holds them,
//!    whatever its scopes, so a leaked key cannot mint more keys.
//! 3. **Scope** for the tier: Tier 1 needs `ai:read`, Tier 2 `ai:write`, Tier 3 `ai:execute`
//!    (`ai:execute_admin` in production when [`ScopePolicy::require_execute_admin`]);
//!    `ai:execute` implies `ai:write` implies `ai:read`; `*` grants all. A person holds every
//!    scope.
//! 4. **Role**: the user's role in the organization must hold the permission.
//!
//! An allowed Tier 3 operation by a credential [`Verdict::NeedsApproval`]: a person must
//! approve it before it runs (the pipeline's durable approvals; a door without them refuses).
//! A person acting directly is that person.

use serde::Serialize;

use crate::{Caller, Permission, Scope, ScopeSet, Tier, rbac};

/// What an operation needs: its tier and the permission of the caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Operation {
    pub tier: Tier,
    pub permission: Permission,
}

impl Operation {
    /// A read (Tier 1) needing `permission`.
    pub const fn read(permission: Permission) -> Self {
        Self {
            tier: Tier::T1,
            permission,
        }
    }

    /// A low-risk change (Tier 2) needing `permission`.
    pub const fn write(permission: Permission) -> Self {
        Self {
            tier: Tier::T2,
            permission,
        }
    }

    /// A destructive or code-running operation (Tier 3) needing `permission`.
    pub const fn execute(permission: Permission) -> Self {
        Self {
            tier: Tier::T3,
            permission,
        }
    }
}

/// The deployment's rule for Tier 3 scopes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopePolicy {
    /// `BREEZE_ENV=production`.
    pub production: bool,
    /// `MCP_REQUIRE_EXECUTE_ADMIN` (only matters in production): Tier 3 needs
    /// `ai:execute_admin`.
    pub require_execute_admin: bool,
}

/// What an allowed operation still needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It may run now.
    Allowed,
    /// Tier 3 by a credential: a person must approve it first.
    NeedsApproval,
}

/// Why an operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// Tier 4: never.
    #[error("this operation is blocked")]
    Blocked,
    /// A credential tried what only a person may do.
    #[error("a credential cannot do this ({0}); sign in to the dashboard as a person")]
    PersonOnly(Permission),
    /// The credential lacks the scope for the tier; `production` when only production's rule
    /// asks for it.
    #[error("requires the {scope} scope{}", if *.production { " in production" } else { "" })]
    MissingScope { scope: Scope, production: bool },
    /// The user holds no role in the organization.
    #[error("the user holds no role in this organization")]
    NoRole,
    /// The user's role lacks the permission.
    #[error("requires {0}")]
    MissingPermission(Permission),
}

/// Whether `scopes` reach `tier` (the hierarchy `*` ⊃ execute_admin ⊃ execute ⊃ write ⊃
/// read). Tier 4 is reached by nothing.
pub fn reaches(scopes: ScopeSet, tier: Tier, policy: ScopePolicy) -> Result<(), Denied> {
    let has = |s: Scope| scopes.grants(s);
    let admin = has(Scope::AiExecuteAdmin);
    let execute = admin || has(Scope::AiExecute);
    let write = execute || has(Scope::AiWrite);
    let read = write || has(Scope::AiRead);
    let missing = |scope, production| Err(Denied::MissingScope { scope, production });
    match tier {
        Tier::T1 if read => Ok(()),
        Tier::T1 => missing(Scope::AiRead, false),
        Tier::T2 if write => Ok(()),
        Tier::T2 => missing(Scope::AiWrite, false),
        Tier::T3 if policy.production && policy.require_execute_admin => {
            if admin {
                Ok(())
            } else {
                missing(Scope::AiExecuteAdmin, true)
            }
        }
        Tier::T3 if execute => Ok(()),
        Tier::T3 => missing(Scope::AiExecute, false),
        Tier::T4 => Err(Denied::Blocked),
    }
}

/// The decision: whether `caller` may perform `op` (see the module docs).
pub fn authorize(caller: &Caller, op: Operation, policy: ScopePolicy) -> Result<Verdict, Denied> {
    if op.tier == Tier::T4 {
        return Err(Denied::Blocked);
    }
    if op.permission.is_personal() && !caller.is_person() {
        return Err(Denied::PersonOnly(op.permission));
    }
    reaches(caller.scopes(), op.tier, policy)?;
    let granted = caller.permissions().ok_or(Denied::NoRole)?;
    rbac::check(granted, op.permission).map_err(|d| Denied::MissingPermission(d.0))?;
    Ok(if op.tier == Tier::T3 && !caller.is_person() {
        Verdict::NeedsApproval
    } else {
        Verdict::Allowed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApiKeyId, OrgId, PermissionSet, UserId};

    fn key(scopes: &str, permissions: Option<PermissionSet>) -> Caller {
        let scopes = ScopeSet::parse_list(scopes).unwrap();
        Caller::api_key(
            ApiKeyId::new(),
            OrgId::new(),
            UserId::new(),
            scopes,
            permissions,
        )
    }

    #[test]
    fn each_rule_refuses_with_its_reason() {
        let all = Some(PermissionSet::all());
        let p = ScopePolicy::default();
        let run = Operation::execute(Permission::ScriptsExecute);
        assert_eq!(
            authorize(&key("ai:write", all), run, p),
            Err(Denied::MissingScope {
                scope: Scope::AiExecute,
                production: false
            })
        );
        assert_eq!(
            authorize(&key("ai:execute", all), run, p),
            Ok(Verdict::NeedsApproval)
        );
        let prod = ScopePolicy {
            production: true,
            require_execute_admin: true,
        };
        assert!(matches!(
            authorize(&key("ai:execute", all), run, prod),
            Err(Denied::MissingScope {
                production: true,
                ..
            })
        ));
        assert_eq!(
            authorize(
                &key("*", all),
                Operation::write(Permission::ApikeysManage),
                p
            ),
            Err(Denied::PersonOnly(Permission::ApikeysManage))
        );
        assert_eq!(
            authorize(&key("*", None), Operation::read(Permission::DevicesRead), p),
            Err(Denied::NoRole)
        );
        let read_only = Some(PermissionSet::from_iter([Permission::DevicesRead]));
        assert_eq!(
            authorize(
                &key("*", read_only),
                Operation::write(Permission::DevicesWrite),
                p
            ),
            Err(Denied::MissingPermission(Permission::DevicesWrite))
        );
        let blocked = Operation {
            tier: Tier::T4,
            permission: Permission::DevicesRead,
        };
        assert_eq!(authorize(&key("*", all), blocked, p), Err(Denied::Blocked));
    }

    #[test]
    fn a_person_runs_tier_3_directly_within_their_role() {
        let person =
            Caller::dashboard_session(UserId::new(), OrgId::new(), Some(PermissionSet::all()));
        let p = ScopePolicy {
            production: true,
            require_execute_admin: true,
        };
        let run = Operation::execute(Permission::ScriptsExecute);
        assert_eq!(authorize(&person, run, p), Ok(Verdict::Allowed));
        let keys = Operation::write(Permission::ApikeysManage);
        assert_eq!(authorize(&person, keys, p), Ok(Verdict::Allowed));
    }
}
