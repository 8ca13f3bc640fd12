//! A stored credential as it stands now, as a [`Caller`]: for calls nobody is making at this
//! moment, which must be judged as their author would be judged today. The two named ways to
//! act like this — [`standing_worker`] (an automation, deployment or remediation running as
//! its owner) and [`approval_release`] (an approved Tier 3 call run after a person decided) —
//! share one check, [`credential_now`]: an API key must exist in the organization and be
//! neither revoked nor expired; an OAuth grant must be active and for the organization; an AI
//! chat session must still exist and be its person's (it is released only for them); the
//! user must still hold a role there (whose permissions are the caller's), and for a release
//! be the one who asked. Anything else is void, with the reason.

use breeze_core::{Actor, Caller, Clock, Credential, OrgId, ScopeSet, UserId};
use breeze_store::{ApprovalRecord, Store, StoreError};

/// Why a credential cannot act.
#[derive(Debug, thiserror::Error)]
pub enum StandingError {
    /// The credential or its user may no longer act: the reason, for a person to read, worded
    /// to follow "the " ("API key was revoked") or "the requesting ".
    #[error("{0}")]
    Void(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn void(why: impl Into<String>) -> StandingError {
    StandingError::Void(why.into())
}

/// The caller a worker acts as: the stored credential `acting` (an `api_key:…` or
/// `oauth_grant:…` actor) in `org`, as it stands now.
pub async fn standing_worker(
    store: &Store,
    org: OrgId,
    acting: &Actor,
) -> Result<Caller, StandingError> {
    let credential = Caller::credential_of(acting).ok_or_else(|| {
        void(format!(
            "actor {acting} is neither an API key nor an OAuth grant"
        ))
    })?;
    credential_now(store, store.clock().as_ref(), org, credential, None).await
}

/// The caller an approved request runs as: its requesting credential and user, as they stand
/// now.
pub async fn approval_release(store: &Store, r: &ApprovalRecord) -> Result<Caller, StandingError> {
    let credential = match (r.api_key_id, r.oauth_grant_id, r.ai_session_id) {
        (Some(key), _, _) => Credential::ApiKey(key),
        (None, Some(grant), _) => Credential::OAuthGrant(grant),
        (None, None, Some(session)) => Credential::AiChat(session),
        (None, None, None) => {
            return Err(void("API key, OAuth grant or chat session was deleted"));
        }
    };
    let clock = store.clock().clone();
    credential_now(
        store,
        clock.as_ref(),
        r.org_id,
        credential,
        Some(r.requester_user_id),
    )
    .await
}

/// The one check of a stored credential (see the module docs). `requester`: the user the
/// credential must still act for.
pub async fn credential_now(
    store: &Store,
    clock: &dyn Clock,
    org: OrgId,
    credential: Credential,
    requester: Option<UserId>,
) -> Result<Caller, StandingError> {
    let (user, scopes) = match credential {
        Credential::ApiKey(id) => {
            let key = match store.org(org).api_keys().get_api_key(id).await {
                Ok(k) => k,
                Err(StoreError::NotFound(_)) => return Err(void("API key was deleted")),
                Err(e) => return Err(e.into()),
            };
            if key.revoked_at.is_some() {
                return Err(void("API key was revoked"));
            }
            if !key.is_active(clock.now()) {
                return Err(void("API key has expired"));
            }
            (key.user_id, key.scopes)
        }
        Credential::OAuthGrant(id) => {
            let Some((grant, _)) = store.find_oauth_grant(id).await? else {
                return Err(void("OAuth grant was deleted"));
            };
            if !grant.is_active() {
                return Err(void("OAuth client's grant was revoked"));
            }
            if grant.org_id != org {
                return Err(void("OAuth grant is for another organization"));
            }
            (grant.user_id, ScopeSet::from_oauth(&grant.scopes))
        }
        Credential::AiChat(session) => {
            // A chat acts only for its owner: released only for the person who asked, and
            // only while the session exists (deleting it voids its pending calls).
            let Some(owner) = requester else {
                return Err(void("chat session acts only for its own person"));
            };
            match store.org(org).ai().get_session(owner, session).await {
                Ok(s) => (s.user_id, ScopeSet::everything()),
                Err(StoreError::NotFound(_)) => return Err(void("chat session was deleted")),
                Err(e) => return Err(e.into()),
            }
        }
        Credential::Session => return Err(not_stored()),
    };
    if requester.is_some_and(|r| r != user) {
        return Err(void("credential now acts for someone else"));
    }
    let Some(access) = store.org_access(user, org).await? else {
        return Err(void(
            "user is disabled or no longer holds a role in the organization",
        ));
    };
    let permissions = Some(access.permissions);
    Ok(match credential {
        Credential::ApiKey(key) => Caller::api_key(key, org, user, scopes, permissions),
        Credential::OAuthGrant(grant) => Caller::oauth_grant(grant, org, user, scopes, permissions),
        Credential::AiChat(session) => Caller::ai_chat(session, user, org, permissions),
        Credential::Session => return Err(not_stored()),
    })
}

fn not_stored() -> StandingError {
    void("dashboard session is not a stored credential; it acts only while its person does")
}
