//! OAuth 2.1 as stored: clients (registered or fetched metadata documents), authorization codes,
//! grants and refresh tokens. Secrets — codes and refresh tokens — are stored as SHA-256 only;
//! the caller hashes and compares.
//!
//! Everything that must happen once is a conditional update inside one transaction, so several
//! instances on one PostgreSQL agree: a code is redeemed by exactly one exchange (a second one
//! learns which grant the first created, to revoke it), a refresh token is rotated by exactly
//! one request, and a grant is revoked once.
//!
//! A grant's refresh tokens form a chain through `parent_hash`:
//!
//! ```text
//! current ──refresh──▶ rotated (its successor is now current)
//! rotated ──refresh within the retry window, successor never used──▶ the successor is
//!          discarded and a new successor issued (a client that lost the response retries)
//! rotated (outside the window, or successor used) | discarded ──refresh──▶ reuse: the whole
//!          grant is revoked (RFC 9700 §4.14.2)
//! ```
//!
//! Grants belong to a user and an organization; they are listed and revoked through the user
//! (every statement carries `user_id = $n`), and a user's grants all die with a password change.

use breeze_core::{
    Actor, ActorType, AuditEvent, AuditResult, GrantId, GrantStatus, OrgId, PermissionSet,
    Timestamp, UserId,
};
use chrono::Duration;
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::types::Json;

use crate::{
    Result, Store, StoreError, audit,
    sql::{Arg, Tx, sql},
};

/// How a client came to be known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthClientKind {
    /// Registered through Dynamic Client Registration (RFC 7591).
    Dcr,
    /// A client ID metadata document fetched from the `client_id` URL.
    Cimd,
}

impl OAuthClientKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Dcr => "dcr",
            Self::Cimd => "cimd",
        }
    }
}

/// A client to store.
#[derive(Debug, Clone)]
pub struct NewOAuthClient {
    pub client_id: String,
    pub kind: OAuthClientKind,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    /// The registration response (DCR) or the validated document (CIMD).
    pub metadata: Value,
    /// DCR: when the stale-client sweep may remove it; CIMD: when to fetch it again.
    pub expires_at: Timestamp,
}

/// A stored client.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct OAuthClientRecord {
    pub client_id: String,
    /// `dcr` or `cimd`.
    pub kind: String,
    pub client_name: String,
    #[sqlx(json)]
    pub redirect_uris: Vec<String>,
    #[sqlx(json)]
    pub metadata: Value,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
    pub expires_at: Timestamp,
}

const CLIENT_COLUMNS: &str =
    "client_id, kind, client_name, redirect_uris, metadata, created_at, last_used_at, expires_at";

/// An authorization code to store: everything the consent decided, bound to the client's
/// redirect URI, PKCE challenge and resource.
#[derive(Debug, Clone)]
pub struct NewOAuthCode {
    pub code_hash: [u8; 32],
    pub client_id: String,
    pub org_id: OrgId,
    pub user_id: UserId,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: String,
    pub scopes: Vec<String>,
    pub expires_at: Timestamp,
}

/// A stored authorization code.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OAuthCodeRecord {
    pub code_hash: Vec<u8>,
    pub client_id: String,
    pub org_id: OrgId,
    pub user_id: UserId,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: String,
    #[sqlx(json)]
    pub scopes: Vec<String>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub used_at: Option<Timestamp>,
    pub grant_id: Option<GrantId>,
}

const CODE_COLUMNS: &str = "code_hash, client_id, org_id, user_id, redirect_uri, code_challenge, \
    resource, scopes, created_at, expires_at, used_at, grant_id";

/// A stored grant: one user's consent for one client in one organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct OAuthGrantRecord {
    pub id: GrantId,
    pub org_id: OrgId,
    pub user_id: UserId,
    pub client_id: String,
    pub client_name: String,
    #[sqlx(json)]
    pub scopes: Vec<String>,
    pub resource: String,
    pub status: GrantStatus,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    pub revoke_reason: Option<String>,
}

impl OAuthGrantRecord {
    /// Whether tokens of this grant may still be used.
    pub fn is_active(&self) -> bool {
        self.status == GrantStatus::Active
    }
}

const GRANT_COLUMNS: &str = "id, org_id, user_id, client_id, client_name, scopes, resource, \
    status, created_at, last_used_at, revoked_at, revoke_reason";

/// A refresh token to issue: its hash and expiry.
#[derive(Debug, Clone)]
pub struct NewRefreshToken {
    pub token_hash: [u8; 32],
    pub expires_at: Timestamp,
}

/// What redeeming a code did.
#[derive(Debug, Clone, PartialEq)]
pub enum Redeemed {
    /// The code was fresh: this grant was created with the refresh token.
    Issued(Box<OAuthGrantRecord>),
    /// The code had already been redeemed (a replay); the grant it created, if any, has been
    /// revoked by this call.
    Replayed { grant_id: Option<GrantId> },
}

/// What presenting a refresh token did.
#[derive(Debug, Clone, PartialEq)]
pub enum Refreshed {
    /// The current token: rotated, the new one issued.
    Rotated(Box<OAuthGrantRecord>),
    /// The previous token, again within the retry window before its successor was used: the
    /// successor was discarded and the new one issued.
    Retried(Box<OAuthGrantRecord>),
    /// An older or discarded token, or the previous one outside the window: the grant has been
    /// revoked.
    Reused { grant_id: GrantId },
    /// Unknown, expired, of a revoked grant or of another client: refused, nothing changed.
    Invalid(&'static str),
}

/// Revokes every active grant of `user` inside `tx`; returns how many.
pub(crate) async fn revoke_user_grants_in(
    tx: &mut Tx,
    user: UserId,
    reason: &str,
    now: Timestamp,
) -> Result<u64> {
    sql(
        "UPDATE oauth_grants SET status = 'revoked', revoked_at = $1, revoke_reason = $2 \
         WHERE user_id = $3 AND status = 'active'",
    )
    .bind(now)
    .bind(reason)
    .bind(user)
    .execute(tx)
    .await
}

/// Revokes grant `id` inside `tx` if active; returns whether it changed.
async fn revoke_grant_in(tx: &mut Tx, id: GrantId, reason: &str, now: Timestamp) -> Result<bool> {
    let n = sql(
        "UPDATE oauth_grants SET status = 'revoked', revoked_at = $1, revoke_reason = $2 \
                 WHERE id = $3 AND status = 'active'",
    )
    .bind(now)
    .bind(reason)
    .bind(id)
    .execute(tx)
    .await?;
    Ok(n > 0)
}

async fn grant_in(tx: &mut Tx, id: GrantId) -> Result<Option<OAuthGrantRecord>> {
    sql(format!(
        "SELECT {GRANT_COLUMNS} FROM oauth_grants WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(tx)
    .await
}

fn grant_actor(id: GrantId) -> Actor {
    Actor::new(ActorType::OauthGrant, id)
}

impl Store {
    /// Stores a registered client, auditing the registration.
    pub async fn insert_oauth_client(
        &self,
        new: NewOAuthClient,
        audit: AuditEvent,
    ) -> Result<OAuthClientRecord> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        sql(format!(
            "INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(&new.client_id)
        .bind(new.kind.as_str())
        .bind(&new.client_name)
        .bind(Arg::json(&new.redirect_uris))
        .bind(Arg::json(&new.metadata))
        .bind(now)
        .bind(None::<Timestamp>)
        .bind(new.expires_at)
        .execute(&mut tx)
        .await?;
        audit::insert(&mut tx, &audit.resource(&new.client_id), now).await?;
        tx.commit().await?;
        self.get_oauth_client(&new.client_id)
            .await?
            .ok_or(StoreError::NotFound("OAuth client"))
    }

    /// Stores (or refreshes) a fetched client ID metadata document.
    pub async fn upsert_cimd_client(&self, new: NewOAuthClient) -> Result<()> {
        sql(format!(
            "INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (client_id) DO UPDATE SET client_name = excluded.client_name, \
             redirect_uris = excluded.redirect_uris, metadata = excluded.metadata, \
             expires_at = excluded.expires_at"
        ))
        .bind(&new.client_id)
        .bind(OAuthClientKind::Cimd.as_str())
        .bind(&new.client_name)
        .bind(Arg::json(&new.redirect_uris))
        .bind(Arg::json(&new.metadata))
        .bind(self.clock.now())
        .bind(None::<Timestamp>)
        .bind(new.expires_at)
        .execute(self)
        .await?;
        Ok(())
    }

    /// The client with this id, whatever its expiry.
    pub async fn get_oauth_client(&self, client_id: &str) -> Result<Option<OAuthClientRecord>> {
        sql(format!(
            "SELECT {CLIENT_COLUMNS} FROM oauth_clients WHERE client_id = $1"
        ))
        .bind(client_id)
        .fetch_optional(self)
        .await
    }

    /// Records that a registered client was used, pushing its stale date to `expires_at`.
    pub async fn touch_oauth_client(&self, client_id: &str, expires_at: Timestamp) -> Result<()> {
        sql(
            "UPDATE oauth_clients SET last_used_at = $1, expires_at = $2 \
             WHERE client_id = $3 AND kind = 'dcr'",
        )
        .bind(self.clock.now())
        .bind(expires_at)
        .bind(client_id)
        .execute(self)
        .await?;
        Ok(())
    }

    /// The stale-client sweep: removes registered clients past their date that hold no active
    /// grant, expired cached documents, expired codes and refresh tokens. Returns how many
    /// clients went.
    pub async fn sweep_oauth(&self) -> Result<u64> {
        let now = self.clock.now();
        let clients = sql("DELETE FROM oauth_clients WHERE expires_at <= $1 AND NOT EXISTS \
                           (SELECT 1 FROM oauth_grants g WHERE g.client_id = oauth_clients.client_id \
                            AND g.status = 'active')")
        .bind(now)
        .execute(self)
        .await?;
        sql("DELETE FROM oauth_codes WHERE expires_at <= $1")
            .bind(now - Duration::days(1))
            .execute(self)
            .await?;
        sql("DELETE FROM oauth_refresh_tokens WHERE expires_at <= $1")
            .bind(now)
            .execute(self)
            .await?;
        Ok(clients)
    }

    /// Stores an authorization code.
    pub async fn insert_oauth_code(&self, new: NewOAuthCode) -> Result<()> {
        sql(format!(
            "INSERT INTO oauth_codes ({CODE_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        ))
        .bind(&new.code_hash[..])
        .bind(&new.client_id)
        .bind(new.org_id)
        .bind(new.user_id)
        .bind(&new.redirect_uri)
        .bind(&new.code_challenge)
        .bind(&new.resource)
        .bind(Arg::json(&new.scopes))
        .bind(self.clock.now())
        .bind(new.expires_at)
        .bind(None::<Timestamp>)
        .bind(None::<GrantId>)
        .execute(self)
        .await?;
        Ok(())
    }

    /// The code whose secret hashes to `hash`, used or not.
    pub async fn find_oauth_code(&self, hash: &[u8; 32]) -> Result<Option<OAuthCodeRecord>> {
        sql(format!(
            "SELECT {CODE_COLUMNS} FROM oauth_codes WHERE code_hash = $1"
        ))
        .bind(&hash[..])
        .fetch_optional(self)
        .await
    }

    /// Redeems code `code` (found by [`Store::find_oauth_code`] and checked by the caller):
    /// marks it used and creates its grant with the first refresh token, audited, in one
    /// transaction. If another exchange redeemed it first, this is a replay: the grant that
    /// exchange created is revoked (with its tokens) and audited.
    pub async fn redeem_oauth_code(
        &self,
        code: &OAuthCodeRecord,
        client_name: &str,
        refresh: NewRefreshToken,
        request_id: Option<String>,
    ) -> Result<Redeemed> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let claimed =
            sql("UPDATE oauth_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL")
                .bind(now)
                .bind(&code.code_hash[..])
                .execute(&mut tx)
                .await?;
        if claimed == 0 {
            let grant_id: Option<(Option<GrantId>,)> =
                sql("SELECT grant_id FROM oauth_codes WHERE code_hash = $1")
                    .bind(&code.code_hash[..])
                    .fetch_optional(&mut tx)
                    .await?;
            let grant_id = grant_id.and_then(|r| r.0);
            if let Some(id) = grant_id
                && revoke_grant_in(&mut tx, id, "code_replay", now).await?
            {
                let event = AuditEvent::new(grant_actor(id), "oauth.grant.revoke", "oauth_grant")
                    .org(code.org_id)
                    .resource(id)
                    .details(json!({ "reason": "code_replay", "client_id": code.client_id }))
                    .failed(AuditResult::Denied, "authorization code replayed")
                    .request(request_id);
                audit::insert(&mut tx, &event, now).await?;
            }
            tx.commit().await?;
            self.credentials_changed().await;
            return Ok(Redeemed::Replayed { grant_id });
        }
        let id = GrantId::new();
        sql(format!(
            "INSERT INTO oauth_grants ({GRANT_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $9, NULL, NULL)"
        ))
        .bind(id)
        .bind(code.org_id)
        .bind(code.user_id)
        .bind(&code.client_id)
        .bind(client_name)
        .bind(Arg::json(&code.scopes))
        .bind(&code.resource)
        .bind(now)
        .bind(now)
        .execute(&mut tx)
        .await?;
        sql("UPDATE oauth_codes SET grant_id = $1 WHERE code_hash = $2")
            .bind(id)
            .bind(&code.code_hash[..])
            .execute(&mut tx)
            .await?;
        insert_refresh(&mut tx, id, None, &refresh, now).await?;
        let event = AuditEvent::new(
            Actor::new(ActorType::User, code.user_id),
            "oauth.grant.create",
            "oauth_grant",
        )
        .org(code.org_id)
        .resource(id)
        .details(json!({
            "client_id": code.client_id,
            "client_name": client_name,
            "scopes": code.scopes,
            "resource": code.resource,
        }))
        .request(request_id);
        audit::insert(&mut tx, &event, now).await?;
        let grant = grant_in(&mut tx, id)
            .await?
            .ok_or(StoreError::NotFound("OAuth grant"))?;
        tx.commit().await?;
        Ok(Redeemed::Issued(Box::new(grant)))
    }

    /// Presents refresh token `hash` for `client_id`: rotates it (issuing `next`), allows one
    /// retry of the previous token within `retry_window` while its successor is unused, and
    /// revokes the grant on any other reuse. Audited either way.
    pub async fn refresh_oauth_token(
        &self,
        hash: &[u8; 32],
        client_id: &str,
        next: NewRefreshToken,
        retry_window: Duration,
        request_id: Option<String>,
    ) -> Result<Refreshed> {
        #[derive(sqlx::FromRow)]
        struct Row {
            grant_id: GrantId,
            expires_at: Timestamp,
            rotated_at: Option<Timestamp>,
            discarded_at: Option<Timestamp>,
        }
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        // The common case first, and as the transaction's first statement a write: on SQLite a
        // transaction that reads before it writes cannot wait for the write lock (it fails
        // busy at once), while one that starts by writing waits its turn.
        let rotated = sql("UPDATE oauth_refresh_tokens SET rotated_at = $1 \
                           WHERE token_hash = $2 AND rotated_at IS NULL AND discarded_at IS NULL \
                           AND expires_at > $1 AND grant_id IN (SELECT id FROM oauth_grants \
                           WHERE status = 'active' AND client_id = $3)")
        .bind(now)
        .bind(&hash[..])
        .bind(client_id)
        .execute(&mut tx)
        .await?;
        let row: Option<Row> = sql("SELECT grant_id, expires_at, rotated_at, discarded_at \
             FROM oauth_refresh_tokens WHERE token_hash = $1")
        .bind(&hash[..])
        .fetch_optional(&mut tx)
        .await?;
        let Some(row) = row else {
            return Ok(Refreshed::Invalid("unknown refresh token"));
        };
        let Some(grant) = grant_in(&mut tx, row.grant_id).await? else {
            return Ok(Refreshed::Invalid("unknown refresh token"));
        };
        if grant.client_id != client_id {
            return Ok(Refreshed::Invalid(
                "the refresh token was issued to another client",
            ));
        }
        if !grant.is_active() {
            return Ok(Refreshed::Invalid("the grant was revoked"));
        }
        // Disabling a user revokes their grants; a disabled user's refresh is refused whatever
        // (dropping the transaction undoes the rotation above).
        let disabled: bool = sql("SELECT disabled FROM users WHERE id = $1")
            .bind(grant.user_id)
            .fetch_scalar(&mut tx)
            .await?;
        if disabled {
            return Ok(Refreshed::Invalid("the user is disabled"));
        }
        if row.expires_at <= now {
            return Ok(Refreshed::Invalid("the refresh token expired"));
        }
        let event = |action: &str| {
            AuditEvent::new(grant_actor(grant.id), action, "oauth_grant")
                .org(grant.org_id)
                .resource(grant.id)
                .request(request_id.clone())
        };
        let mut outcome = None;
        if rotated > 0 {
            outcome = Some(Refreshed::Rotated(Box::new(grant.clone())));
        } else if row.discarded_at.is_none()
            && let Some(rotated_at) = row.rotated_at
            && now - rotated_at <= retry_window
        {
            // The previous token again: the client lost the answer. Its successor may be
            // replaced only while nobody has used it.
            let discarded = sql("UPDATE oauth_refresh_tokens SET discarded_at = $1 \
                 WHERE parent_hash = $2 AND rotated_at IS NULL AND discarded_at IS NULL")
            .bind(now)
            .bind(&hash[..])
            .execute(&mut tx)
            .await?;
            if discarded > 0 {
                outcome = Some(Refreshed::Retried(Box::new(grant.clone())));
            }
        }
        let Some(outcome) = outcome else {
            revoke_grant_in(&mut tx, grant.id, "refresh_token_reuse", now).await?;
            let e = event("oauth.grant.revoke")
                .details(json!({ "reason": "refresh_token_reuse", "client_id": client_id }))
                .failed(AuditResult::Denied, "a refresh token was reused");
            audit::insert(&mut tx, &e, now).await?;
            tx.commit().await?;
            self.credentials_changed().await;
            return Ok(Refreshed::Reused { grant_id: grant.id });
        };
        insert_refresh(&mut tx, grant.id, Some(&hash[..]), &next, now).await?;
        sql("UPDATE oauth_grants SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(grant.id)
            .execute(&mut tx)
            .await?;
        let retried = matches!(outcome, Refreshed::Retried(_));
        let e = event("oauth.token.refresh")
            .details(json!({ "client_id": client_id, "retry": retried }));
        audit::insert(&mut tx, &e, now).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// The grant a refresh token belongs to, whatever its state.
    pub async fn find_refresh_token_grant(&self, hash: &[u8; 32]) -> Result<Option<GrantId>> {
        let row: Option<(GrantId,)> =
            sql("SELECT grant_id FROM oauth_refresh_tokens WHERE token_hash = $1")
                .bind(&hash[..])
                .fetch_optional(self)
                .await?;
        Ok(row.map(|r| r.0))
    }

    /// Grant `id` with the permissions its user holds in the grant's organization now (`None`
    /// when the user is disabled or holds no role there) — what a bearer token needs, in one
    /// query.
    pub async fn find_oauth_grant(
        &self,
        id: GrantId,
    ) -> Result<Option<(OAuthGrantRecord, Option<PermissionSet>)>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            grant: OAuthGrantRecord,
            permissions: Option<Json<PermissionSet>>,
        }
        let row: Option<Row> = sql(
            "SELECT g.id, g.org_id, g.user_id, g.client_id, g.client_name, g.scopes, g.resource, \
             g.status, g.created_at, g.last_used_at, g.revoked_at, g.revoke_reason, r.permissions \
             FROM oauth_grants g \
             LEFT JOIN users u ON u.id = g.user_id AND NOT u.disabled \
             LEFT JOIN organizations o ON o.id = g.org_id AND o.partner_id = u.partner_id \
             LEFT JOIN user_org_roles uor ON uor.user_id = u.id AND uor.org_id = o.id \
             LEFT JOIN roles r ON r.id = uor.role_id AND r.partner_id = u.partner_id \
             WHERE g.id = $1",
        )
        .bind(id)
        .fetch_optional(self)
        .await?;
        Ok(row.map(|r| (r.grant, r.permissions.map(|p| p.0))))
    }

    /// Records that grant `id` was used at `now`, unless recorded less than `min_interval` ago.
    pub async fn touch_oauth_grant(
        &self,
        id: GrantId,
        now: Timestamp,
        min_interval: Duration,
    ) -> Result<bool> {
        let n = sql("UPDATE oauth_grants SET last_used_at = $1 \
                     WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3)")
        .bind(now)
        .bind(id)
        .bind(now - min_interval)
        .execute(self)
        .await?;
        Ok(n > 0)
    }

    /// Revokes grant `id` (any owner: the token endpoint's revocation, a reported approval),
    /// auditing `audit` only when it changed. Returns whether it changed.
    pub async fn revoke_oauth_grant(
        &self,
        id: GrantId,
        reason: &str,
        audit: AuditEvent,
    ) -> Result<bool> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let changed = revoke_grant_in(&mut tx, id, reason, now).await;
        let changed = match changed {
            Ok(true) => {
                let org: Option<(OrgId,)> = sql("SELECT org_id FROM oauth_grants WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut tx)
                    .await?;
                let mut event = audit.resource(id);
                if let Some((org,)) = org {
                    event = event.org(org);
                }
                audit::insert(&mut tx, &event, now).await?;
                tx.commit().await?;
                true
            }
            Ok(false) => false,
            Err(e) => return Err(e),
        };
        self.credentials_changed().await;
        Ok(changed)
    }

    /// Revokes every active grant of client `client_id` (a client the user reported); returns
    /// how many.
    pub async fn revoke_client_oauth_grants(
        &self,
        client_id: &str,
        reason: &str,
        audit: AuditEvent,
    ) -> Result<u64> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let n = sql(
            "UPDATE oauth_grants SET status = 'revoked', revoked_at = $1, revoke_reason = $2 \
                     WHERE client_id = $3 AND status = 'active'",
        )
        .bind(now)
        .bind(reason)
        .bind(client_id)
        .execute(&mut tx)
        .await?;
        if n > 0 {
            let event = audit
                .resource(client_id)
                .details(json!({ "grants": n, "reason": reason }));
            audit::insert(&mut tx, &event, now).await?;
        }
        tx.commit().await?;
        self.credentials_changed().await;
        Ok(n)
    }

    /// The grants of `user`, newest first.
    pub async fn user_oauth_grants(&self, user: UserId) -> Result<Vec<OAuthGrantRecord>> {
        sql(format!(
            "SELECT {GRANT_COLUMNS} FROM oauth_grants WHERE user_id = $1 \
             ORDER BY created_at DESC, id DESC"
        ))
        .bind(user)
        .fetch_all(self)
        .await
    }

    /// Grant `id` of `user`; another user's grant is `NotFound` like a missing one.
    pub async fn user_oauth_grant(&self, user: UserId, id: GrantId) -> Result<OAuthGrantRecord> {
        sql(format!(
            "SELECT {GRANT_COLUMNS} FROM oauth_grants WHERE id = $1 AND user_id = $2"
        ))
        .bind(id)
        .bind(user)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("OAuth grant"))
    }

    /// Revokes grant `id` of `user` (audited when it changed) and returns it as it is now.
    pub async fn revoke_user_oauth_grant(
        &self,
        user: UserId,
        id: GrantId,
        audit: AuditEvent,
    ) -> Result<OAuthGrantRecord> {
        let grant = self.user_oauth_grant(user, id).await?;
        if grant.is_active() {
            self.revoke_oauth_grant(id, "revoked_by_user", audit.org(grant.org_id))
                .await?;
        }
        self.user_oauth_grant(user, id).await
    }

    /// Revokes every active grant of `user` ("sign out everywhere"); returns how many.
    pub async fn revoke_user_oauth_grants(
        &self,
        user: UserId,
        reason: &str,
        audit: AuditEvent,
    ) -> Result<u64> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let n = revoke_user_grants_in(&mut tx, user, reason, now).await?;
        if n > 0 {
            let event = audit
                .resource(user)
                .details(json!({ "grants": n, "reason": reason }));
            audit::insert(&mut tx, &event, now).await?;
        }
        tx.commit().await?;
        self.credentials_changed().await;
        Ok(n)
    }
}

async fn insert_refresh(
    tx: &mut Tx,
    grant: GrantId,
    parent: Option<&[u8]>,
    token: &NewRefreshToken,
    now: Timestamp,
) -> Result<()> {
    sql("INSERT INTO oauth_refresh_tokens \
         (token_hash, grant_id, parent_hash, created_at, expires_at, rotated_at, discarded_at) \
         VALUES ($1, $2, $3, $4, $5, NULL, NULL)")
    .bind(&token.token_hash[..])
    .bind(grant)
    .bind(parent)
    .bind(now)
    .bind(token.expires_at)
    .execute(tx)
    .await?;
    Ok(())
}
