//! Principals: who is making a request, as established by authentication.

use serde::Serialize;

use crate::{Actor, ActorType, ApiKeyId, OrgId, PermissionSet, ScopeSet, User, UserId};

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
