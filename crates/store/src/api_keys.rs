//! API keys as stored: only the SHA-256 of the secret, never the secret itself.

use breeze_core::{ApiKeyId, AuditEvent, OrgId, PermissionSet, ScopeSet, Timestamp, UserId};
use chrono::Duration;
use serde::Serialize;
use sqlx::types::Json;

use crate::{
    Result, Store, StoreError, audit,
    sql::{Arg, Tx, sql},
};

const KEY_COLUMNS: &str = "id, org_id, user_id, name, key_hash, key_prefix, scopes, expires_at, \
    revoked_at, last_used_at, created_at";

/// A key to store. The caller generated the secret and keeps it; only its hash comes here.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub org_id: OrgId,
    /// The creating user; the key acts with this user's permissions in `org_id`.
    pub user_id: UserId,
    pub name: String,
    pub key_hash: [u8; 32],
    /// The first characters of the secret, for recognising a key in a list.
    pub key_prefix: String,
    pub scopes: ScopeSet,
    pub expires_at: Option<Timestamp>,
}

/// A stored API key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApiKeyRecord {
    pub id: ApiKeyId,
    pub org_id: OrgId,
    pub user_id: UserId,
    pub name: String,
    #[serde(skip)]
    pub key_hash: Vec<u8>,
    pub key_prefix: String,
    #[sqlx(json)]
    pub scopes: ScopeSet,
    pub expires_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    pub last_used_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

impl ApiKeyRecord {
    /// Whether the key may authenticate at `now`: not revoked and not expired.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|exp| now < exp)
    }
}

impl Store {
    /// Stores a new key and audits its creation in the same transaction.
    pub async fn insert_api_key(&self, new: NewApiKey, audit: AuditEvent) -> Result<ApiKeyRecord> {
        if new.name.trim().is_empty() {
            return Err(StoreError::Invalid("an API key needs a name".into()));
        }
        if new.scopes.is_empty() {
            return Err(StoreError::Invalid(
                "an API key needs at least one scope".into(),
            ));
        }
        let now = self.clock.now();
        let id = ApiKeyId::new();
        let mut tx = Tx::begin(&self.pool).await?;
        sql(format!(
            "INSERT INTO api_keys ({KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(id)
        .bind(new.org_id)
        .bind(new.user_id)
        .bind(new.name.trim())
        .bind(&new.key_hash[..])
        .bind(&new.key_prefix)
        .bind(Arg::json(&new.scopes))
        .bind(new.expires_at)
        .bind(None::<Timestamp>)
        .bind(None::<Timestamp>)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(new.org_id)
            .resource(id)
            .details(serde_json::json!({
                "name": new.name.trim(),
                "scopes": new.scopes,
                "expires_at": new.expires_at,
                "user_id": new.user_id,
            }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.org(new.org_id).api_keys().get_api_key(id).await
    }

    /// The key whose secret hashes to `hash`, whatever its state, with the permissions its user
    /// holds in the key's organization (`None` when the user is disabled or holds no role
    /// there) — one query, since every authenticated call needs both. The caller compares the
    /// returned hash in constant time and checks [`ApiKeyRecord::is_active`].
    pub async fn find_api_key_by_hash(
        &self,
        hash: &[u8; 32],
    ) -> Result<Option<(ApiKeyRecord, Option<PermissionSet>)>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            key: ApiKeyRecord,
            permissions: Option<Json<PermissionSet>>,
        }
        let row: Option<Row> = sql(
            "SELECT k.id, k.org_id, k.user_id, k.name, k.key_hash, k.key_prefix, k.scopes, \
             k.expires_at, k.revoked_at, k.last_used_at, k.created_at, r.permissions \
             FROM api_keys k \
             LEFT JOIN users u ON u.id = k.user_id AND NOT u.disabled \
             LEFT JOIN organizations o ON o.id = k.org_id AND o.partner_id = u.partner_id \
             LEFT JOIN user_org_roles uor ON uor.user_id = u.id AND uor.org_id = o.id \
             LEFT JOIN roles r ON r.id = uor.role_id AND r.partner_id = u.partner_id \
             WHERE k.key_hash = $1",
        )
        .bind(&hash[..])
        .fetch_optional(self)
        .await?;
        Ok(row.map(|r| (r.key, r.permissions.map(|p| p.0))))
    }

    /// Records that key `id` was used at `now`, unless that was already recorded less than
    /// `min_interval` ago. Returns whether a write happened.
    pub async fn touch_api_key(
        &self,
        id: ApiKeyId,
        now: Timestamp,
        min_interval: Duration,
    ) -> Result<bool> {
        let n = sql("UPDATE api_keys SET last_used_at = $1 \
                     WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3)")
        .bind(now)
        .bind(id)
        .bind(now - min_interval)
        .execute(self)
        .await?;
        Ok(n > 0)
    }
}

impl crate::OrgApiKeys<'_> {
    /// The keys of this organization, newest first.
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        sql(format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE org_id = $1 ORDER BY created_at DESC, id DESC"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// One key of this organization.
    pub async fn get_api_key(&self, id: ApiKeyId) -> Result<ApiKeyRecord> {
        sql(format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("API key"))
    }

    /// Revokes a key at once. Revoking a revoked key changes nothing and writes no audit record.
    /// Moves the credentials generation on, so cached principals are re-read.
    pub async fn revoke_api_key(&self, id: ApiKeyId, audit: AuditEvent) -> Result<ApiKeyRecord> {
        let stamped = self
            .whole()
            .stamp_once("api_keys", "revoked_at", id.0, audit)
            .await;
        self.store.credentials_changed().await;
        stamped?;
        self.get_api_key(id).await
    }
}
