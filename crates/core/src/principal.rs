//! Principals: who is making a request, as established by authentication.

use serde::Serialize;

use crate::{Actor, ActorType, ApiKeyId, GrantId, OrgId, PermissionSet, ScopeSet, User, UserId};

/// An authenticated API key: bound to one organization, acting as the user who created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiKeyPrincipal {
    pub key_id: ApiKeyId,
    pub org_id: OrgId,
    /// The creating user, whose permissions in `org_id` the key acts with.
    pub user_id: UserId,
    pub scopes: ScopeSet,
    /// What the user may do in `org_id`, read with the key itself; `None` when the user is
    /// disabled or holds no role there.
    pub permissions: Option<PermissionSet>,
}

/// An OAuth access token's bearer: a client acting, through one grant, for the user who
/// consented, in the one organization chosen at consent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OAuthPrincipal {
    pub grant_id: GrantId,
    pub client_id: String,
    pub org_id: OrgId,
    /// The consenting user, whose permissions in `org_id` the token acts with.
    pub user_id: UserId,
    /// The token's `mcp:*` scopes as the tiers they reach (`mcp:read` is `ai:read`, …).
    pub scopes: ScopeSet,
    /// What the user may do in `org_id` now; `None` when disabled or holding no role there.
    pub permissions: Option<PermissionSet>,
}

/// Whoever a request acts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Principal {
    /// A person signed in to the dashboard.
    User(User),
    /// An API key (AI clients, scripts).
    ApiKey(ApiKeyPrincipal),
}

impl Principal {
    /// The user whose permissions apply.
    pub fn user_id(&self) -> UserId {
        match self {
            Principal::User(u) => u.id,
            Principal::ApiKey(k) => k.user_id,
        }
    }

    /// The actor to record in the audit log.
    pub fn actor(&self) -> Actor {
        match self {
            Principal::User(u) => Actor::new(ActorType::User, u.id),
            Principal::ApiKey(k) => Actor::new(ActorType::ApiKey, k.key_id),
        }
    }
}
