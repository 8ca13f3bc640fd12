//! A stored credential as it stands now, as a [`Caller`]: for calls nobody is making at this
//! moment — an approved call run later, an automation's script run — that must be judged as
//! their author would be judged today. An API key must exist in the organization, be neither
//! revoked nor expired; an OAuth grant must be active and for the organization; its user must
//! still hold a role there (whose permissions are the caller's). Anything else is void.

use breeze_core::{
    Actor, ActorType, ApiKeyId, Clock, GrantId, OrgId, PermissionSet, ScopeSet, UserId,
};
use breeze_guard::Caller;
use breeze_store::{Store, StoreError};

/// Why a credential cannot act.
#[derive(Debug, thiserror::Error)]
pub enum StandingError {
    /// The credential or its user may no longer act (the reason, for a person to read).
    #[error("{0}")]
    Void(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A credential's scopes and its user's permissions, now.
#[derive(Debug, Clone)]
pub struct Standing {
    pub org: OrgId,
    pub actor: Actor,
    pub key: Option<ApiKeyId>,
    pub grant: Option<GrantId>,
    pub user: UserId,
    pub scopes: ScopeSet,
    pub permissions: PermissionSet,
}

impl Standing {
    /// The caller this credential is.
    pub fn caller(&self) -> Caller<'_> {
        Caller {
            org: self.org,
            actor: self.actor.clone(),
            key: self.key,
            grant: self.grant,
            user: self.user,
            scopes: &self.scopes,
            permissions: Some(self.permissions),
        }
    }
}

fn void(why: impl Into<String>) -> StandingError {
    StandingError::Void(why.into())
}

/// How `actor` (an `api_key:…` or `oauth_grant:…` actor) stands in `org` now.
pub async fn standing(
    store: &Store,
    clock: &dyn Clock,
    org: OrgId,
    actor: &Actor,
) -> Result<Standing, StandingError> {
    let id: uuid::Uuid = actor
        .id
        .parse()
        .map_err(|_| void(format!("{actor} is not a credential")))?;
    let (key, grant, user, scopes) = match actor.kind {
        ActorType::ApiKey => {
            let key = match store.org(org).get_api_key(ApiKeyId(id)).await {
                Ok(k) => k,
                Err(StoreError::NotFound(_)) => return Err(void("the API key was deleted")),
                Err(e) => return Err(e.into()),
            };
            if key.revoked_at.is_some() {
                return Err(void("the API key was revoked"));
            }
            if !key.is_active(clock.now()) {
                return Err(void("the API key has expired"));
            }
            (Some(key.id), None, key.user_id, key.scopes)
        }
        ActorType::OauthGrant => {
            let Some((grant, _)) = store.find_oauth_grant(GrantId(id)).await? else {
                return Err(void("the OAuth grant was deleted"));
            };
            if !grant.is_active() {
                return Err(void("the OAuth client's grant was revoked"));
            }
            if grant.org_id != org {
                return Err(void("the OAuth grant is for another organization"));
            }
            let scopes = ScopeSet::from_oauth(&grant.scopes);
            (None, Some(grant.id), grant.user_id, scopes)
        }
        _ => {
            return Err(void(format!(
                "{actor} is neither an API key nor an OAuth grant"
            )));
        }
    };
    let Some(access) = store.org_access(user, org).await? else {
        return Err(void(
            "its user is disabled or no longer holds a role in the organization",
        ));
    };
    Ok(Standing {
        org,
        actor: actor.clone(),
        key,
        grant,
        user,
        scopes,
        permissions: access.permissions,
    })
}
