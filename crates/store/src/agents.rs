//! Agents as the store sees them: site-scoped enrollment keys, device credentials (token hashes
//! with two-phase rotation), the latest heartbeat and inventory, user sessions derived from
//! heartbeats, and the agent's shipped logs.
//!
//! Enrollment and token lookups are not organization-scoped (the caller is a machine holding a
//! secret, not a user); everything they return carries the organization, and every later query
//! goes through [`OrgStore`](crate::OrgStore) or is keyed by the authenticated device.

use breeze_agent_proto::{Heartbeat, Inventory, LogEntry, UserSession};
use breeze_core::{AuditEvent, Device, DeviceId, OrgId, OsFamily, SiteId, Timestamp};
use chrono::Duration;
use serde::Serialize;
use uuid::Uuid;

use crate::{
    CrossOrg, Result, Store, StoreError, audit,
    sql::{Arg, Sql, Tx, escape_like, sql},
};

const KEY_COLUMNS: &str = "id, org_id, site_id, name, key_prefix, max_uses, uses, expires_at, \
    revoked_at, created_by, created_at";

/// A site-scoped enrollment key as stored (its secret is never stored, only its SHA-256).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct EnrollmentKeyRecord {
    pub id: Uuid,
    pub org_id: OrgId,
    pub site_id: SiteId,
    pub name: String,
    pub key_prefix: String,
    pub max_uses: Option<i64>,
    pub uses: i64,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    pub created_by: String,
    pub created_at: Timestamp,
}

/// An enrollment key to store.
#[derive(Debug, Clone)]
pub struct NewEnrollmentKey {
    pub site_id: SiteId,
    pub name: String,
    pub key_hash: [u8; 32],
    pub key_prefix: String,
    pub max_uses: Option<u32>,
    pub expires_at: Timestamp,
    pub created_by: String,
}

/// What an enrolling machine says about itself.
#[derive(Debug, Clone)]
pub struct EnrollDevice {
    pub hostname: String,
    pub machine_id: Option<String>,
    pub os_family: OsFamily,
    pub os_name: String,
    pub os_version: String,
    pub agent_version: String,
    /// SHA-256 of the device token the caller generated and hands to the agent.
    pub token_hash: [u8; 32],
    /// Proof of being an existing device, to re-enroll it.
    pub proof: Option<ReenrollProof>,
}

/// What proves an enrolling machine is an existing device (only the SHA-256 of the secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReenrollProof {
    /// A one-time re-enroll token an administrator issued for the device.
    ReenrollToken([u8; 32]),
    /// The device's current token (the agent re-enrolling itself).
    DeviceToken([u8; 32]),
}

impl ReenrollProof {
    fn name(self) -> &'static str {
        match self {
            ReenrollProof::ReenrollToken(_) => "reenroll_token",
            ReenrollProof::DeviceToken(_) => "device_token",
        }
    }
}

/// The outcome of an enrollment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrolled {
    pub device: Device,
    /// The enrollment key that was used.
    pub key_id: Uuid,
    /// An existing device, proven, got the new token.
    pub reenrolled: bool,
    /// A new device that carries the machine id of this existing one, with no proof of being
    /// it: a possible clone or impostor.
    pub suspected_clone_of: Option<DeviceId>,
}

/// A re-enroll token that is unknown, spent, expired, or of another organization.
pub const INVALID_REENROLL_TOKEN: &str = "Invalid, expired or used re-enroll token";

/// A device token's owner, as found by its hash.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeviceCredential {
    pub device_id: DeviceId,
    pub org_id: OrgId,
    pub site_id: SiteId,
    pub token_hash: Vec<u8>,
    pub pending_token_hash: Option<Vec<u8>>,
    pub revoked_at: Option<Timestamp>,
}

/// Why an enrollment key was not accepted. All of them read the same to the caller.
pub const INVALID_ENROLLMENT_KEY: &str = "Invalid, expired or used-up enrollment key";

/// The latest heartbeat of a device, and when its inventory was reported (the inventory
/// itself: [`OrgAgents::inventory`](crate::OrgAgents::inventory)).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DeviceState {
    pub device_id: DeviceId,
    pub heartbeat_at: Option<Timestamp>,
    pub uptime_secs: Option<i64>,
    pub pending_reboot: bool,
    #[sqlx(json)]
    pub logged_in_users: Vec<UserSession>,
    pub inventory_at: Option<Timestamp>,
}

/// A device row joined with its state, which may be missing.
#[derive(sqlx::FromRow)]
struct StateRow {
    id: DeviceId,
    state_of: Option<DeviceId>,
    heartbeat_at: Option<Timestamp>,
    uptime_secs: Option<i64>,
    pending_reboot: Option<bool>,
    #[sqlx(json(nullable))]
    logged_in_users: Option<Vec<UserSession>>,
    inventory_at: Option<Timestamp>,
}

impl StateRow {
    fn into_state(self) -> Option<DeviceState> {
        self.state_of?;
        Some(DeviceState {
            device_id: self.id,
            heartbeat_at: self.heartbeat_at,
            uptime_secs: self.uptime_secs,
            pending_reboot: self.pending_reboot.unwrap_or(false),
            logged_in_users: self.logged_in_users.unwrap_or_default(),
            inventory_at: self.inventory_at,
        })
    }
}

/// Who is signed in on a device, from its latest heartbeat, with the device's name and status.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DeviceSessions {
    pub device_id: DeviceId,
    pub hostname: String,
    #[sqlx(try_from = "String")]
    pub status: breeze_core::DeviceStatus,
    pub pending_reboot: bool,
    #[sqlx(json)]
    pub logged_in_users: Vec<UserSession>,
}

/// A user session on a device, opened when a heartbeat first lists it and closed when one
/// no longer does.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct UserSessionRecord {
    pub id: Uuid,
    pub device_id: DeviceId,
    pub username: String,
    pub terminal: Option<String>,
    pub host: Option<String>,
    pub login_at: Timestamp,
    pub logout_at: Option<Timestamp>,
    pub login_duration_secs: Option<f64>,
}

/// A shipped agent log line.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AgentLogRecord {
    pub device_id: DeviceId,
    pub at: Timestamp,
    pub level: String,
    pub target: String,
    pub message: String,
}

/// Narrows an agent log search.
#[derive(Debug, Clone, Default)]
pub struct AgentLogFilter {
    /// Only these devices (all of the organization's when empty).
    pub device_ids: Vec<DeviceId>,
    /// This level and above.
    pub min_level: Option<breeze_agent_proto::LogLevel>,
    /// Substring of the logging module.
    pub component: Option<String>,
    /// Case-insensitive substring of the message.
    pub text: Option<String>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub limit: u32,
}

fn level_str(level: breeze_agent_proto::LogLevel) -> &'static str {
    use breeze_agent_proto::LogLevel::*;
    match level {
        Trace => "trace",
        Debug => "debug",
        Info => "info",
        Warn => "warn",
        Error => "error",
    }
}

impl crate::OrgAgents<'_> {
    /// Stores an enrollment key for a site of this organization, audited.
    pub async fn create_enrollment_key(
        &self,
        new: NewEnrollmentKey,
        audit: AuditEvent,
    ) -> Result<EnrollmentKeyRecord> {
        if new.name.trim().is_empty() {
            return Err(StoreError::Invalid("an enrollment key needs a name".into()));
        }
        self.whole().tenancy().get_site(new.site_id).await?;
        let now = self.store.clock.now();
        if new.expires_at <= now {
            return Err(StoreError::Invalid(
                "an enrollment key must expire in the future".into(),
            ));
        }
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO enrollment_keys (id, org_id, site_id, name, key_hash, key_prefix, \
             max_uses, uses, expires_at, revoked_at, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, NULL, $9, $10)",
        )
        .bind(id)
        .bind(self.org)
        .bind(new.site_id)
        .bind(new.name.trim())
        .bind(&new.key_hash[..])
        .bind(&new.key_prefix)
        .bind(new.max_uses.map(i64::from))
        .bind(new.expires_at)
        .bind(&new.created_by)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": new.name.trim(), "site_id": new.site_id,
            "max_uses": new.max_uses, "expires_at": new.expires_at,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_enrollment_key(id).await
    }

    /// One enrollment key of this organization.
    pub async fn get_enrollment_key(&self, id: Uuid) -> Result<EnrollmentKeyRecord> {
        sql(format!(
            "SELECT {KEY_COLUMNS} FROM enrollment_keys WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("enrollment key"))
    }

    /// This organization's enrollment keys, newest first.
    pub async fn list_enrollment_keys(&self) -> Result<Vec<EnrollmentKeyRecord>> {
        sql(format!(
            "SELECT {KEY_COLUMNS} FROM enrollment_keys WHERE org_id = $1 \
             ORDER BY created_at DESC, id DESC"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Revokes an enrollment key; devices it enrolled keep working.
    pub async fn revoke_enrollment_key(
        &self,
        id: Uuid,
        audit: AuditEvent,
    ) -> Result<EnrollmentKeyRecord> {
        self.whole()
            .stamp_once("enrollment_keys", "revoked_at", id, audit)
            .await?;
        self.get_enrollment_key(id).await
    }

    /// Stores a one-time re-enroll token (its SHA-256) for a device of this organization that
    /// has an agent, replacing any earlier one, audited. The next enrollment presenting it
    /// re-enrolls the device itself (see [`Store::enroll_device`]) and spends it.
    pub async fn issue_reenroll_token(
        &self,
        device: DeviceId,
        hash: &[u8; 32],
        expires_at: Timestamp,
        audit: AuditEvent,
    ) -> Result<()> {
        self.whole().devices().get_device(device).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE device_credentials SET reenroll_token_hash = $1, reenroll_expires_at = $2 \
             WHERE device_id = $3 AND org_id = $4 AND revoked_at IS NULL",
        )
        .bind(&hash[..])
        .bind(expires_at)
        .bind(device)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Err(StoreError::NotFound("device agent"));
        }
        let audit = audit
            .org(self.org)
            .resource(device)
            .details(serde_json::json!({ "expires_at": expires_at }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await
    }

    /// The latest heartbeat of a device of this organization (`None` before the agent's first
    /// report); a device of another organization is not found.
    pub async fn device_state(&self, device: DeviceId) -> Result<Option<DeviceState>> {
        // One round trip: the device row says whether it exists here, the state may be absent.
        let row: Option<StateRow> = sql(
            "SELECT d.id, s.device_id AS state_of, s.heartbeat_at, s.uptime_secs, \
             s.pending_reboot, s.logged_in_users, s.inventory_at FROM devices d \
             LEFT JOIN device_state s ON s.device_id = d.id AND s.org_id = d.org_id \
             WHERE d.id = $1 AND d.org_id = $2",
        )
        .bind(device)
        .bind(self.org)
        .fetch_optional(self)
        .await?;
        row.map(StateRow::into_state)
            .ok_or(StoreError::NotFound("device"))
    }

    /// Devices of this organization with someone signed in (or just `only`, signed in or
    /// not), by device id, at most `limit`.
    pub async fn signed_in(
        &self,
        only: Option<DeviceId>,
        limit: u32,
    ) -> Result<Vec<DeviceSessions>> {
        self.signed_in_query(only, limit).fetch_all(self).await
    }

    fn signed_in_query(&self, only: Option<DeviceId>, limit: u32) -> Sql {
        let mut q = sql(
            "SELECT s.device_id, d.hostname, d.status, s.pending_reboot, s.logged_in_users \
             FROM device_state s JOIN devices d ON d.id = s.device_id AND d.org_id = s.org_id \
             WHERE s.org_id = $1",
        )
        .bind(self.org);
        match only {
            Some(d) => {
                let p = q.arg(d);
                q.push(&format!(" AND s.device_id = {p}"));
            }
            // Heartbeats store an empty list as `[]` (the column's default too); the partial
            // index `device_state_signed_in` (migration 0049) has this very condition.
            None => q.push(" AND s.logged_in_users <> '[]'"),
        }
        let p = q.arg(i64::from(limit));
        q.push(&format!(" ORDER BY s.device_id LIMIT {p}"));
        q
    }

    /// The plan of the fleet-wide [`Self::signed_in`] listing, for a test to hold it to its
    /// partial index.
    #[cfg(feature = "testing")]
    pub async fn explain_signed_in(&self) -> Result<String> {
        self.signed_in_query(None, 100).explain(self).await
    }

    /// User sessions of this organization since `since`, newest first, optionally for one
    /// device and/or one user.
    pub async fn user_sessions(
        &self,
        device: Option<DeviceId>,
        username: Option<&str>,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<UserSessionRecord>> {
        self.user_sessions_query(device, username, since, limit)
            .fetch_all(self)
            .await
    }

    fn user_sessions_query(
        &self,
        device: Option<DeviceId>,
        username: Option<&str>,
        since: Timestamp,
        limit: u32,
    ) -> Sql {
        let mut q = sql(
            "SELECT id, device_id, username, terminal, host, login_at, logout_at, \
             login_duration_secs FROM device_user_sessions WHERE org_id = $1 \
             AND (logout_at IS NULL OR logout_at >= $2)",
        )
        .bind(self.org)
        .bind(since);
        if let Some(d) = device {
            let p = q.arg(d);
            q.push(&format!(" AND device_id = {p}"));
        }
        if let Some(u) = username {
            let p = q.arg(u);
            q.push(&format!(" AND username = {p}"));
        }
        let p = q.arg(i64::from(limit));
        q.push(&format!(" ORDER BY login_at DESC, id DESC LIMIT {p}"));
        q
    }

    /// The plan of the fleet-wide [`Self::user_sessions`] listing, for a test to hold it to
    /// its index.
    #[cfg(feature = "testing")]
    pub async fn explain_user_sessions(&self, since: Timestamp) -> Result<String> {
        self.user_sessions_query(None, None, since, 25)
            .explain(self)
            .await
    }

    /// Agent log lines of this organization, newest first.
    pub async fn search_agent_logs(&self, f: &AgentLogFilter) -> Result<Vec<AgentLogRecord>> {
        let mut q =
            sql("SELECT device_id, at, level, target, message FROM agent_logs WHERE org_id = $1")
                .bind(self.org);
        if !f.device_ids.is_empty() {
            let ids: Vec<String> = f.device_ids.iter().map(|d| q.arg(*d)).collect();
            q.push(&format!(" AND device_id IN ({})", ids.join(", ")));
        }
        if let Some(min) = f.min_level {
            use breeze_agent_proto::LogLevel::*;
            let levels: Vec<String> = [Trace, Debug, Info, Warn, Error]
                .into_iter()
                .filter(|l| *l >= min)
                .map(|l| q.arg(level_str(l)))
                .collect();
            q.push(&format!(" AND level IN ({})", levels.join(", ")));
        }
        if let Some(c) = &f.component {
            let p = q.arg(format!("%{}%", escape_like(c)));
            q.push(&format!(" AND target LIKE {p} ESCAPE '\\'"));
        }
        if let Some(t) = &f.text {
            let p = q.arg(format!("%{}%", escape_like(&t.to_lowercase())));
            q.push(&format!(" AND LOWER(message) LIKE {p} ESCAPE '\\'"));
        }
        if let Some(s) = f.since {
            let p = q.arg(s);
            q.push(&format!(" AND at >= {p}"));
        }
        if let Some(u) = f.until {
            let p = q.arg(u);
            q.push(&format!(" AND at < {p}"));
        }
        let p = q.arg(i64::from(f.limit));
        q.push(&format!(" ORDER BY at DESC LIMIT {p}"));
        q.fetch_all(self).await
    }
}

impl Store {
    /// Enrolls a machine with an enrollment key whose SHA-256 is `key_hash`: counts a use of the
    /// key (refusing revoked, expired and used-up keys) and audits the enrollment, all in one
    /// transaction.
    ///
    /// An enrollment key never rebinds an existing device. With proof of being a device of the
    /// key's organization (`new.proof`: a one-time re-enroll token an administrator issued for
    /// it, or its current token) that device is re-enrolled with the new token, and every
    /// socket opened with its old one closes. Without proof, a machine id that a device of the
    /// organization already carries makes a new device flagged as a possible clone or
    /// impostor of it ([`Enrolled::suspected_clone_of`]); any other machine makes a new device.
    pub async fn enroll_device(&self, key_hash: &[u8; 32], new: EnrollDevice) -> Result<Enrolled> {
        #[derive(sqlx::FromRow)]
        struct Key {
            id: Uuid,
            org_id: OrgId,
            site_id: SiteId,
        }
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        // Counting the use is the transaction's first statement: on SQLite a transaction that
        // reads first and writes later can fail with "database is locked" when another writer
        // committed in between (a WAL snapshot cannot be upgraded). On PostgreSQL it holds the
        // key's row until commit, which serializes enrollments with one key (~230/s measured).
        let key: Key = sql(
            "UPDATE enrollment_keys SET uses = uses + 1 WHERE key_hash = $1 \
             AND revoked_at IS NULL AND expires_at > $2 \
             AND (max_uses IS NULL OR uses < max_uses) RETURNING id, org_id, site_id",
        )
        .bind(&key_hash[..])
        .bind(now)
        .fetch_optional(&mut tx)
        .await?
        .ok_or_else(|| StoreError::Invalid(INVALID_ENROLLMENT_KEY.into()))?;

        // The device the caller proves to be, if any.
        let proven: Option<DeviceId> = match new.proof {
            Some(ReenrollProof::ReenrollToken(hash)) => {
                // One use: the re-enrollment below clears it.
                let found = sql(
                    "SELECT device_id FROM device_credentials WHERE reenroll_token_hash = $1 \
                     AND org_id = $2 AND reenroll_expires_at > $3 AND revoked_at IS NULL",
                )
                .bind(&hash[..])
                .bind(key.org_id)
                .bind(now)
                .fetch_optional::<(DeviceId,)>(&mut tx)
                .await?
                .map(|r| r.0);
                Some(found.ok_or_else(|| StoreError::Invalid(INVALID_REENROLL_TOKEN.into()))?)
            }
            Some(ReenrollProof::DeviceToken(hash)) => sql(
                "SELECT device_id FROM device_credentials WHERE token_hash = $1 \
                 AND org_id = $2 AND revoked_at IS NULL",
            )
            .bind(&hash[..])
            .bind(key.org_id)
            .fetch_optional::<(DeviceId,)>(&mut tx)
            .await?
            .map(|r| r.0),
            None => None,
        };
        // Without proof, a device of the organization already carrying this machine id is the
        // one the new device may be a clone or impostor of (the first enrolled).
        let namesake: Option<DeviceId> = match (&new.machine_id, proven) {
            (Some(mid), None) => sql(
                "SELECT c.device_id FROM device_credentials c JOIN devices d \
                 ON d.id = c.device_id AND d.org_id = c.org_id \
                 WHERE c.org_id = $1 AND c.machine_id = $2 AND c.revoked_at IS NULL \
                 ORDER BY (d.suspected_clone_of IS NULL) DESC, c.enrolled_at, c.device_id \
                 LIMIT 1",
            )
            .bind(key.org_id)
            .bind(mid)
            .fetch_optional::<(DeviceId,)>(&mut tx)
            .await?
            .map(|r| r.0),
            _ => None,
        };
        let device_id = match proven {
            Some(id) => {
                sql(
                    "UPDATE devices SET hostname = $1, os_family = $2, os_name = $3, \
                     os_version = $4, agent_version = $5, status = 'online', last_seen_at = $6 \
                     WHERE id = $7 AND org_id = $8",
                )
                .bind(&new.hostname)
                .bind(new.os_family.as_str())
                .bind(&new.os_name)
                .bind(&new.os_version)
                .bind(&new.agent_version)
                .bind(now)
                .bind(id)
                .bind(key.org_id)
                .execute(&mut tx)
                .await?;
                sql(
                    "UPDATE device_credentials SET token_hash = $1, pending_token_hash = NULL, \
                     reenroll_token_hash = NULL, reenroll_expires_at = NULL, \
                     machine_id = COALESCE($2, machine_id), enrollment_key_id = $3, \
                     rotated_at = $4 WHERE device_id = $5 AND org_id = $6",
                )
                .bind(&new.token_hash[..])
                .bind(new.machine_id.as_deref())
                .bind(key.id)
                .bind(now)
                .bind(id)
                .bind(key.org_id)
                .execute(&mut tx)
                .await?;
                id
            }
            None => {
                let id = DeviceId::new();
                sql(
                    "INSERT INTO devices (id, org_id, site_id, hostname, os_family, os_name, \
                     os_version, status, agent_version, last_seen_at, tags, created_at, \
                     suspected_clone_of) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 'online', $8, $9, '[]', $10, $11)",
                )
                .bind(id)
                .bind(key.org_id)
                .bind(key.site_id)
                .bind(&new.hostname)
                .bind(new.os_family.as_str())
                .bind(&new.os_name)
                .bind(&new.os_version)
                .bind(&new.agent_version)
                .bind(now)
                .bind(now)
                .bind(namesake)
                .execute(&mut tx)
                .await?;
                sql(
                    "INSERT INTO device_credentials (device_id, org_id, token_hash, \
                     pending_token_hash, machine_id, enrollment_key_id, enrolled_at) \
                     VALUES ($1, $2, $3, NULL, $4, $5, $6)",
                )
                .bind(id)
                .bind(key.org_id)
                .bind(&new.token_hash[..])
                .bind(new.machine_id.as_deref())
                .bind(key.id)
                .bind(now)
                .execute(&mut tx)
                .await?;
                id
            }
        };
        let (action, details) = match (proven, namesake) {
            (Some(_), _) => (
                "device.reenroll",
                serde_json::json!({
                    "hostname": new.hostname, "enrollment_key_id": key.id,
                    "proof": new.proof.map(|p| p.name()),
                }),
            ),
            (None, Some(of)) => (
                "device.enroll_suspected_clone",
                serde_json::json!({
                    "hostname": new.hostname, "enrollment_key_id": key.id,
                    "site_id": key.site_id, "suspected_clone_of": of,
                }),
            ),
            (None, None) => (
                "device.enroll",
                serde_json::json!({
                    "hostname": new.hostname, "enrollment_key_id": key.id,
                    "site_id": key.site_id,
                }),
            ),
        };
        let event = AuditEvent::new(
            breeze_core::Actor::system("agent-enrollment"),
            action,
            "device",
        )
        .org(key.org_id)
        .resource(device_id)
        .details(details);
        audit::insert(&mut tx, &event, now).await?;
        let committed = tx.commit().await;
        self.devices_changed(key.org_id);
        committed?;
        if proven.is_some() {
            self.device_credential_changed(device_id).await;
        }
        let org = self.org(key.org_id);
        if let Some(of) = namesake
            && let Err(e) = org
                .alerts()
                .raise_suspected_clone_alert(device_id, of)
                .await
        {
            tracing::warn!(device = %device_id, error = %e, "could not raise the suspected-clone alert");
        }
        Ok(Enrolled {
            device: org.devices().get_device(device_id).await?,
            key_id: key.id,
            reenrolled: proven.is_some(),
            suspected_clone_of: namesake,
        })
    }

    /// Whether `hash` is a token `device` may still use (its current or staged one, not
    /// revoked): a socket opened with any other closes.
    pub async fn device_token_valid(&self, device: DeviceId, hash: &[u8; 32]) -> Result<bool> {
        let n: i64 = sql(
            "SELECT COUNT(*) FROM device_credentials WHERE device_id = $1 \
             AND revoked_at IS NULL AND (token_hash = $2 OR pending_token_hash = $2)",
        )
        .bind(device)
        .bind(&hash[..])
        .fetch_scalar(self)
        .await?;
        Ok(n > 0)
    }

    /// The credential whose current or pending token hashes to `hash`. A match on the pending
    /// token completes a rotation: it becomes the current token and the old one stops working.
    pub async fn find_device_credential(
        &self,
        hash: &[u8; 32],
    ) -> Result<Option<DeviceCredential>> {
        const COLS: &str = "c.device_id, c.org_id, d.site_id, c.token_hash, \
            c.pending_token_hash, c.revoked_at";
        let found: Option<DeviceCredential> = sql(format!(
            "SELECT {COLS} FROM device_credentials c JOIN devices d ON d.id = c.device_id \
             WHERE c.token_hash = $1 OR c.pending_token_hash = $1"
        ))
        .bind(&hash[..])
        .fetch_optional(self)
        .await?;
        match found {
            Some(c) if c.pending_token_hash.as_deref() == Some(&hash[..]) => {
                sql(
                    "UPDATE device_credentials SET token_hash = pending_token_hash, \
                     pending_token_hash = NULL, rotated_at = $1 \
                     WHERE device_id = $2 AND pending_token_hash = $3",
                )
                .bind(self.clock.now())
                .bind(c.device_id)
                .bind(&hash[..])
                .execute(self)
                .await?;
                // The old token stopped working: sockets opened with it close.
                self.device_credential_changed(c.device_id).await;
                Ok(Some(DeviceCredential {
                    token_hash: hash.to_vec(),
                    pending_token_hash: None,
                    ..c
                }))
            }
            other => Ok(other),
        }
    }

    /// Stages `new_hash` as the device's next token; the current one keeps working until the
    /// agent first authenticates with the new one.
    pub async fn stage_device_token(&self, device: DeviceId, new_hash: &[u8; 32]) -> Result<()> {
        let n = sql("UPDATE device_credentials SET pending_token_hash = $1 \
                     WHERE device_id = $2 AND revoked_at IS NULL")
        .bind(&new_hash[..])
        .bind(device)
        .execute(self)
        .await?;
        if n == 0 {
            return Err(StoreError::NotFound("device credential"));
        }
        Ok(())
    }

    /// Records a heartbeat: the device is online, its state is replaced, and user sessions are
    /// opened for newly listed users and closed for ones no longer listed.
    pub async fn record_heartbeat(
        &self,
        device: DeviceId,
        org: OrgId,
        hb: &Heartbeat,
    ) -> Result<()> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        // A device in maintenance stays there; any other comes online. The usual case (already
        // online or in maintenance) is one statement; an offline device coming online is a
        // status change, which device listings must show at once (see `directory`).
        let present = sql("UPDATE devices SET last_seen_at = $1, agent_version = $2 \
             WHERE id = $3 AND org_id = $4 AND status <> 'offline'")
        .bind(now)
        .bind(&hb.agent_version)
        .bind(device)
        .bind(org)
        .execute(&mut tx)
        .await?;
        let came_online = present == 0
            && sql(
                "UPDATE devices SET last_seen_at = $1, agent_version = $2, status = 'online' \
                 WHERE id = $3 AND org_id = $4 AND status = 'offline'",
            )
            .bind(now)
            .bind(&hb.agent_version)
            .bind(device)
            .bind(org)
            .execute(&mut tx)
            .await?
                > 0;
        sql(
            "INSERT INTO device_state (device_id, org_id, heartbeat_at, uptime_secs, \
             pending_reboot, logged_in_users) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (device_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, \
             uptime_secs = excluded.uptime_secs, pending_reboot = excluded.pending_reboot, \
             logged_in_users = excluded.logged_in_users",
        )
        .bind(device)
        .bind(org)
        .bind(now)
        .bind(i64::try_from(hb.uptime_secs).unwrap_or(i64::MAX))
        .bind(hb.pending_reboot)
        .bind(Arg::json(&hb.logged_in_users))
        .execute(&mut tx)
        .await?;

        // Sessions: match open rows to the listed users by (username, terminal, host).
        let open: Vec<UserSessionRecord> = sql(
            "SELECT id, device_id, username, terminal, host, login_at, logout_at, \
             login_duration_secs FROM device_user_sessions \
             WHERE device_id = $1 AND org_id = $2 AND logout_at IS NULL",
        )
        .bind(device)
        .bind(org)
        .fetch_all(&mut tx)
        .await?;
        let same = |r: &UserSessionRecord, s: &UserSession| {
            r.username == s.username && r.terminal == s.terminal && r.host == s.host
        };
        for row in &open {
            if !hb.logged_in_users.iter().any(|s| same(row, s)) {
                sql("UPDATE device_user_sessions SET logout_at = $1 WHERE id = $2")
                    .bind(now)
                    .bind(row.id)
                    .execute(&mut tx)
                    .await?;
            }
        }
        for s in &hb.logged_in_users {
            if !open.iter().any(|row| same(row, s)) {
                sql("INSERT INTO device_user_sessions (id, org_id, device_id, username, terminal, host, \
                     login_at, logout_at, login_duration_secs) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8)")
                .bind(Uuid::now_v7())
                .bind(org)
                .bind(device)
                .bind(&s.username)
                .bind(s.terminal.as_deref())
                .bind(s.host.as_deref())
                .bind(s.login_at.unwrap_or(now))
                .bind(s.login_duration_secs)
                .execute(&mut tx)
                .await?;
            }
        }
        let committed = tx.commit().await;
        if came_online {
            self.devices_changed(org);
            if committed.is_ok() {
                self.device_facts_changed(org, device, "status: online")
                    .await;
            }
        } else {
            self.presence_changed(org);
        }
        committed
    }

    /// Stores an inventory report and refreshes the device's hostname and OS from it.
    pub async fn record_inventory(
        &self,
        device: DeviceId,
        org: OrgId,
        inv: &Inventory,
    ) -> Result<()> {
        let now = self.clock.now();
        let family = inv.os.family.parse::<OsFamily>().unwrap_or(OsFamily::Other);
        let mut tx = Tx::begin(&self.pool).await?;
        // Only an actual change touches the row (and the device listings).
        let renamed = sql(
            "UPDATE devices SET hostname = $1, os_family = $2, os_name = $3, os_version = $4 \
             WHERE id = $5 AND org_id = $6 AND (hostname <> $1 OR os_family <> $2 \
             OR os_name <> $3 OR os_version <> $4)",
        )
        .bind(&inv.hostname)
        .bind(family.as_str())
        .bind(&inv.os.name)
        .bind(&inv.os.version)
        .bind(device)
        .bind(org)
        .execute(&mut tx)
        .await?;
        sql(
            "INSERT INTO device_state (device_id, org_id, inventory, inventory_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (device_id) DO UPDATE SET \
             inventory = excluded.inventory, inventory_at = excluded.inventory_at",
        )
        .bind(device)
        .bind(org)
        .bind(Arg::json(inv))
        .bind(now)
        .execute(&mut tx)
        .await?;
        let committed = tx.commit().await;
        // A clock that does not move would stamp the new report like the cached one.
        self.inventories.forget(device);
        if renamed > 0 {
            self.devices_changed(org);
        }
        if committed.is_ok() {
            self.device_facts_changed(org, device, "inventory").await;
            self.compliance_inventory_changed(org, device).await;
            self.vulnerabilities_inventory_changed(org, device).await;
        }
        committed
    }

    /// Stores shipped agent log lines.
    pub async fn insert_agent_logs(
        &self,
        device: DeviceId,
        org: OrgId,
        entries: &[LogEntry],
    ) -> Result<()> {
        let mut tx = Tx::begin(&self.pool).await?;
        for e in entries {
            sql(
                "INSERT INTO agent_logs (id, org_id, device_id, at, level, target, message) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(Uuid::now_v7())
            .bind(org)
            .bind(device)
            .bind(e.at)
            .bind(level_str(e.level))
            .bind(&e.target)
            .bind(&e.message)
            .execute(&mut tx)
            .await?;
        }
        tx.commit().await
    }

    /// Deletes agent logs older than `before`.
    pub async fn prune_agent_logs(&self, before: Timestamp) -> Result<u64> {
        sql("DELETE FROM agent_logs WHERE at < $1")
            .bind(before)
            .execute(self)
            .await
    }
}

/// The alert rule under which suspected clones are raised, created in an organization the
/// first time one enrolls (an administrator may disable it; the device flag stays).
pub const SUSPECTED_CLONE_RULE: &str = "Possible cloned or impostor device";

impl crate::OrgAlerts<'_> {
    /// Raises the alert for a device that enrolled with the machine id of device `of` and no
    /// proof of being it, with a device event that says so (under [`SUSPECTED_CLONE_RULE`]).
    pub async fn raise_suspected_clone_alert(
        &self,
        device: DeviceId,
        of: DeviceId,
    ) -> Result<Option<crate::Alert>> {
        let rule = match self
            .list_rules()
            .await?
            .into_iter()
            .find(|r| r.name == SUSPECTED_CLONE_RULE)
        {
            Some(rule) => rule,
            None => {
                let actor = breeze_core::Actor::system("agent-enrollment");
                let condition = breeze_core::AlertCondition::Event(breeze_core::EventCondition {
                    source: Some(CLONE_EVENT_SOURCE.into()),
                    event_kind: Some(CLONE_EVENT_KIND.into()),
                    min_severity: breeze_core::Severity::High,
                    message_contains: None,
                    count: 1,
                    window_minutes: breeze_core::alert::MAX_EVENT_WINDOW_MINUTES,
                });
                self.create_rule(
                    crate::NewRule {
                        name: SUSPECTED_CLONE_RULE.into(),
                        description: Some(
                            "A device enrolled with the machine id of an existing device, \
                             without a re-enroll token or that device's token: a cloned \
                             machine, or someone posing as the device."
                                .into(),
                        ),
                        severity: breeze_core::Severity::High,
                        enabled: true,
                        condition,
                        target: crate::RuleTarget::Organization,
                        cooldown_minutes: 0,
                        auto_resolve: false,
                        channel_ids: Vec::new(),
                        created_by: actor.to_string(),
                    },
                    AuditEvent::new(actor, "alert_rule.create", "alert_rule"),
                )
                .await?
            }
        };
        let original = self.whole().devices().get_device(of).await?;
        let event = breeze_agent_proto::AgentEvent {
            at: self.store.clock.now(),
            source: CLONE_EVENT_SOURCE.into(),
            kind: CLONE_EVENT_KIND.into(),
            severity: breeze_agent_proto::EventSeverity::High,
            message: format!(
                "enrolled with the machine id of device {of} ({}) without proof of being it",
                original.hostname
            ),
            attributes: [("suspectedCloneOf".to_owned(), of.to_string())].into(),
        };
        self.store
            .insert_device_events(device, self.org, std::slice::from_ref(&event))
            .await?;
        if !rule.enabled {
            return Ok(None);
        }
        let stored = self.whole().telemetry().device_events(device, 1).await?;
        self.raise_alert_on(&rule, device, None, &stored).await
    }
}

/// The device event that records a suspected clone (source and kind).
pub const CLONE_EVENT_SOURCE: &str = "breeze";
pub const CLONE_EVENT_KIND: &str = "possible_clone";

impl CrossOrg<'_> {
    /// Marks agent-managed devices whose last heartbeat is older than `stale_after` offline;
    /// returns them. Devices in maintenance and devices without an agent are left alone.
    pub async fn mark_stale_devices_offline(&self, stale_after: Duration) -> Result<Vec<DeviceId>> {
        let cutoff = self.store.clock.now() - stale_after;
        let rows: Vec<(DeviceId, OrgId)> = sql(
            "UPDATE devices SET status = 'offline' WHERE status = 'online' \
             AND last_seen_at < $1 \
             AND id IN (SELECT device_id FROM device_credentials) RETURNING id, org_id",
        )
        .bind(cutoff)
        .fetch_all(self)
        .await?;
        let orgs: std::collections::HashSet<OrgId> = rows.iter().map(|r| r.1).collect();
        for org in orgs {
            self.store.devices_changed(org);
        }
        for (device, org) in &rows {
            self.store
                .device_facts_changed(*org, *device, "status: offline")
                .await;
        }
        Ok(rows.into_iter().map(|r| r.0).collect())
    }
}
