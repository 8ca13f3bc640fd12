//! The caller: who is acting, in which one organization, with what credential, scopes and
//! permissions. Every door (MCP, REST, the dashboard, the workers that act as a stored
//! credential, an approved call released later) describes whoever acts as a [`Caller`], and
//! [`crate::authz::authorize`] is the one decision over it.
//!
//! Fields are private and a `Caller` is made only by a named constructor, one per way of
//! coming to act: [`Caller::api_key`], [`Caller::oauth_grant`], [`Caller::dashboard_session`],
//! [`Caller::ai_chat`].
//! A credential that acts while nobody is calling (a worker running as an automation's owner,
//! an approved call released after a person decided) is rebuilt as it stands now by
//! `breeze-pipeline`'s `standing` module, which checks the stored credential and then uses the
//! same constructors; there is no other way to assemble one.

use crate::{
    Actor, ActorType, AiSessionId, ApiKeyId, GrantId, OrgId, PermissionSet, ScopeSet, UserId,
};

/// What a caller presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credential {
    /// An API key (`brz_…`).
    ApiKey(ApiKeyId),
    /// An OAuth grant's access token: a client acting for the user who consented.
    OAuthGrant(GrantId),
    /// A person signed in to the dashboard.
    Session,
    /// The AI assistant in one chat session, acting for the signed-in person who owns it.
    AiChat(AiSessionId),
}

impl Credential {
    /// Who the audit trail names for this credential acting for `user`: the API key, the
    /// OAuth grant, or the signed-in user.
    pub fn actor(self, user: UserId) -> Actor {
        match self {
            Credential::ApiKey(k) => Actor::new(ActorType::ApiKey, k),
            Credential::OAuthGrant(g) => Actor::new(ActorType::OauthGrant, g),
            Credential::Session => Actor::new(ActorType::User, user),
            Credential::AiChat(s) => Actor::new(ActorType::AiChat, s),
        }
    }
}

/// Who is acting, in one organization. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    org: OrgId,
    user: UserId,
    credential: Credential,
    scopes: ScopeSet,
    permissions: Option<PermissionSet>,
}

impl Caller {
    /// An API key: bound to its organization, acting as the user who created it, with that
    /// user's `permissions` there (`None`: disabled, or no role there).
    pub fn api_key(
        key: ApiKeyId,
        org: OrgId,
        user: UserId,
        scopes: ScopeSet,
        permissions: Option<PermissionSet>,
    ) -> Self {
        Self {
            org,
            user,
            credential: Credential::ApiKey(key),
            scopes,
            permissions,
        }
    }

    /// An OAuth grant's bearer, in the one organization chosen at consent, acting as the
    /// consenting user. `scopes` are the token's `mcp:*` scopes as the tiers they reach.
    pub fn oauth_grant(
        grant: GrantId,
        org: OrgId,
        user: UserId,
        scopes: ScopeSet,
        permissions: Option<PermissionSet>,
    ) -> Self {
        Self {
            org,
            user,
            credential: Credential::OAuthGrant(grant),
            scopes,
            permissions,
        }
    }

    /// A person signed in to the dashboard, acting in `org` with their role's permissions
    /// there. A person holds every scope: only their role narrows them.
    pub fn dashboard_session(user: UserId, org: OrgId, permissions: Option<PermissionSet>) -> Self {
        Self {
            org,
            user,
            credential: Credential::Session,
            scopes: ScopeSet::everything(),
            permissions,
        }
    }

    /// The AI assistant in chat session `session`, acting for its owner `user` in `org` with
    /// the owner's role there. It holds every scope (only the role narrows it, as for the
    /// person) but is not the person: a Tier 3 call waits for a person's approval, and
    /// personal permissions (keys, users, settings) are refused, so a model's text can never
    /// act as the person unchecked.
    pub fn ai_chat(
        session: AiSessionId,
        user: UserId,
        org: OrgId,
        permissions: Option<PermissionSet>,
    ) -> Self {
        Self {
            org,
            user,
            credential: Credential::AiChat(session),
            scopes: ScopeSet::everything(),
            permissions,
        }
    }

    /// The one organization this caller can reach.
    pub fn org(&self) -> OrgId {
        self.org
    }

    /// The user whose role applies.
    pub fn user(&self) -> UserId {
        self.user
    }

    /// What the caller presented.
    pub fn credential(&self) -> Credential {
        self.credential
    }

    /// The credential's scopes.
    pub fn scopes(&self) -> ScopeSet {
        self.scopes
    }

    /// The user's permissions in the organization; `None` when the user holds no role there.
    pub fn permissions(&self) -> Option<PermissionSet> {
        self.permissions
    }

    /// The API key the caller came with, if any (an approval names it, and is void once the
    /// key is revoked).
    pub fn api_key_id(&self) -> Option<ApiKeyId> {
        match self.credential {
            Credential::ApiKey(k) => Some(k),
            _ => None,
        }
    }

    /// The OAuth grant the caller came with, if any.
    pub fn grant_id(&self) -> Option<GrantId> {
        match self.credential {
            Credential::OAuthGrant(g) => Some(g),
            _ => None,
        }
    }

    /// The chat session the caller acts in, if it is the AI assistant.
    pub fn ai_session_id(&self) -> Option<AiSessionId> {
        match self.credential {
            Credential::AiChat(s) => Some(s),
            _ => None,
        }
    }

    /// Whether a person is acting directly (a dashboard session), not a credential on their
    /// behalf.
    pub fn is_person(&self) -> bool {
        self.credential == Credential::Session
    }

    /// Who the audit trail names: the API key, the OAuth grant, or the signed-in user.
    pub fn actor(&self) -> Actor {
        self.credential.actor(self.user)
    }

    /// The credential an actor names, for one stored as `api_key:…` or `oauth_grant:…`:
    /// what a worker or an approval rebuilds as it stands now. `None` for any other actor.
    pub fn credential_of(actor: &Actor) -> Option<Credential> {
        let id: uuid::Uuid = actor.id.parse().ok()?;
        match actor.kind {
            ActorType::ApiKey => Some(Credential::ApiKey(ApiKeyId(id))),
            ActorType::OauthGrant => Some(Credential::OAuthGrant(GrantId(id))),
            // A chat acts only while its person's turn runs (or an approved call of it is
            // released): never as a worker's stored credential.
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scope;

    #[test]
    fn each_constructor_names_its_actor() {
        let (org, user, key, grant) =
            (OrgId::new(), UserId::new(), ApiKeyId::new(), GrantId::new());
        let read = ScopeSet::new([Scope::AiRead]);
        let k = Caller::api_key(key, org, user, read, None);
        assert_eq!(k.actor(), Actor::new(ActorType::ApiKey, key));
        assert_eq!(
            (k.api_key_id(), k.grant_id(), k.is_person()),
            (Some(key), None, false)
        );
        let g = Caller::oauth_grant(grant, org, user, read, None);
        assert_eq!(g.actor(), Actor::new(ActorType::OauthGrant, grant));
        assert_eq!(
            Caller::credential_of(&g.actor()),
            Some(Credential::OAuthGrant(grant))
        );
        let s = Caller::dashboard_session(user, org, Some(PermissionSet::all()));
        assert_eq!(s.actor(), Actor::new(ActorType::User, user));
        assert!(s.is_person() && s.scopes().grants(Scope::AiExecuteAdmin));
        assert_eq!(Caller::credential_of(&s.actor()), None);
        let chat = AiSessionId::new();
        let c = Caller::ai_chat(chat, user, org, Some(PermissionSet::all()));
        assert_eq!(c.actor(), Actor::new(ActorType::AiChat, chat));
        assert_eq!(c.ai_session_id(), Some(chat));
        assert!(
            !c.is_person(),
            "the assistant is not the person it acts for"
        );
        assert_eq!(Caller::credential_of(&c.actor()), None);
    }
}
