//! Users, roles, role assignments per organization, and dashboard sessions.

use breeze_core::{
    AuditEvent, OrgId, Organization, PartnerId, PermissionSet, Role, RoleId, SessionId, Timestamp,
    User, UserId, UserKind, rbac::OrgAccess,
};
use sqlx::types::Json;
use uuid::Uuid;

use crate::{
    Result, Store, StoreError, audit,
    sql::{Arg, Tx, sql},
};

const USER_COLUMNS: &str =
    "id, partner_id, org_id, email, name, password_hash, disabled, created_at, last_login_at";

/// The rows `(u, o, r)`: an enabled user `u`, an organization `o` of its partner, and the role
/// `r` it holds there — its own in `o` if any, else its partner-wide role (partner-level users
/// only). Every role and organization is checked to be the user's partner's.
const REACH: &str = "users u \
     JOIN organizations o ON o.partner_id = u.partner_id \
     LEFT JOIN user_org_roles uor ON uor.user_id = u.id AND uor.org_id = o.id \
     LEFT JOIN user_partner_roles upr ON upr.user_id = u.id AND u.org_id IS NULL \
     JOIN roles r ON r.id = COALESCE(uor.role_id, upr.role_id) AND r.partner_id = u.partner_id \
     AND NOT u.disabled";

/// A user to create. The password arrives already hashed (argon2, by breeze-auth).
#[derive(Debug, Clone)]
pub struct NewUser {
    pub partner_id: PartnerId,
    /// `None` for a partner-level user.
    pub org_id: Option<OrgId>,
    pub email: String,
    pub name: String,
    pub password_hash: String,
}

/// A user together with the password hash, for sign-in only.
#[derive(Debug, Clone)]
pub struct UserWithSecret {
    pub user: User,
    pub password_hash: String,
}

#[derive(sqlx::FromRow)]
struct UserRow {
    id: Uuid,
    partner_id: Uuid,
    org_id: Option<Uuid>,
    email: String,
    name: String,
    password_hash: String,
    disabled: bool,
    created_at: Timestamp,
    last_login_at: Option<Timestamp>,
}

impl From<UserRow> for UserWithSecret {
    fn from(r: UserRow) -> Self {
        UserWithSecret {
            user: User {
                id: UserId(r.id),
                partner_id: PartnerId(r.partner_id),
                kind: match r.org_id {
                    Some(org) => UserKind::Organization { org_id: OrgId(org) },
                    None => UserKind::Partner,
                },
                email: r.email,
                name: r.name,
                disabled: r.disabled,
                created_at: r.created_at,
                last_login_at: r.last_login_at,
            },
            password_hash: r.password_hash,
        }
    }
}

#[derive(sqlx::FromRow)]
struct RoleRow {
    id: Uuid,
    partner_id: Uuid,
    name: String,
    description: String,
    permissions: Json<PermissionSet>,
    builtin: bool,
}

impl From<RoleRow> for Role {
    fn from(r: RoleRow) -> Self {
        Role {
            id: RoleId(r.id),
            partner_id: PartnerId(r.partner_id),
            name: r.name,
            description: r.description,
            permissions: r.permissions.0,
            builtin: r.builtin,
        }
    }
}

/// Normalizes an email address for storage and lookup.
fn normalize_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    match email.split_once('@') {
        Some((local, domain))
            if !local.is_empty() && domain.contains('.') && !email.contains(' ') =>
        {
            Ok(email)
        }
        _ => Err(StoreError::Invalid(format!(
            "invalid email address {email:?}"
        ))),
    }
}

pub(crate) async fn insert_builtin_roles(tx: &mut Tx, partner: PartnerId) -> Result<()> {
    for (name, description, permissions) in breeze_core::rbac::builtin_roles() {
        sql(
            "INSERT INTO roles (id, partner_id, name, description, permissions, builtin) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(RoleId::new())
        .bind(partner)
        .bind(name)
        .bind(description)
        .bind(Arg::json(&permissions))
        .bind(true)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

impl Store {
    /// Creates a user. An organization-level user's organization must belong to its partner.
    pub async fn create_user(&self, new: NewUser, audit: AuditEvent) -> Result<User> {
        let email = normalize_email(&new.email)?;
        if let Some(org) = new.org_id {
            self.org_of_partner(new.partner_id, org).await?;
        }
        let now = self.clock.now();
        let id = UserId::new();
        let mut tx = Tx::begin(&self.pool).await?;
        sql(format!(
            "INSERT INTO users ({USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(id)
        .bind(new.partner_id)
        .bind(new.org_id)
        .bind(&email)
        .bind(&new.name)
        .bind(&new.password_hash)
        .bind(false)
        .bind(now)
        .bind(None::<Timestamp>)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a user with email {email:?} already exists")))?;
        let mut audit = audit.resource(id);
        if let Some(org) = new.org_id {
            audit = audit.org(org);
        }
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_user(id).await
    }

    /// One user.
    pub async fn get_user(&self, id: UserId) -> Result<User> {
        sql(format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional::<UserRow>(self)
            .await?
            .map(|r| UserWithSecret::from(r).user)
            .ok_or(StoreError::NotFound("user"))
    }

    /// The user with this email (any case), with the password hash, for sign-in.
    pub async fn find_user_for_login(&self, email: &str) -> Result<Option<UserWithSecret>> {
        let Ok(email) = normalize_email(email) else {
            return Ok(None);
        };
        Ok(
            sql(format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1"))
                .bind(email)
                .fetch_optional::<UserRow>(self)
                .await?
                .map(UserWithSecret::from),
        )
    }

    /// Replaces a user's password hash, ends all of the user's sessions and revokes the user's
    /// OAuth grants (so every token an AI client holds for the user dies with the old password).
    pub async fn set_password_hash(
        &self,
        user: UserId,
        password_hash: &str,
        audit: AuditEvent,
    ) -> Result<()> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let n = sql("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(password_hash)
            .bind(user)
            .execute(&mut tx)
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound("user"));
        }
        sql("DELETE FROM user_sessions WHERE user_id = $1")
            .bind(user)
            .execute(&mut tx)
            .await?;
        crate::oauth::revoke_user_grants_in(&mut tx, user, "password_changed", now).await?;
        audit::insert(&mut tx, &audit.resource(user), now).await?;
        tx.commit().await?;
        self.credentials_changed().await;
        Ok(())
    }

    /// Disables or re-enables `user`, audited (`audit`, with what it ended). Disabling ends
    /// every session and revokes every active OAuth grant of the user (each token an AI client
    /// holds dies with it), in the same transaction; re-enabling restores none of them: the
    /// user signs in again and AI clients are authorized again. Returns (sessions ended,
    /// grants revoked), zeros when re-enabling or when nothing changed.
    pub async fn set_user_disabled(
        &self,
        user: UserId,
        disabled: bool,
        audit: AuditEvent,
    ) -> Result<(u64, u64)> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let changed = sql("UPDATE users SET disabled = $1 WHERE id = $2 AND disabled <> $1")
            .bind(disabled)
            .bind(user)
            .execute(&mut tx)
            .await?;
        if changed == 0 {
            drop(tx);
            self.get_user(user).await?;
            return Ok((0, 0));
        }
        let (sessions, grants) = if disabled {
            let sessions = sql("DELETE FROM user_sessions WHERE user_id = $1")
                .bind(user)
                .execute(&mut tx)
                .await?;
            let grants =
                crate::oauth::revoke_user_grants_in(&mut tx, user, "user_disabled", now).await?;
            (sessions, grants)
        } else {
            (0, 0)
        };
        let audit = audit.resource(user).details(serde_json::json!({
            "disabled": disabled, "sessions_ended": sessions, "grants_revoked": grants,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.credentials_changed().await;
        Ok((sessions, grants))
    }

    /// "Sign out everywhere": ends every session of `user` and revokes every active OAuth grant
    /// of theirs (each token an AI client holds dies with it), audited as one `audit` record
    /// naming both counts, in one transaction. Returns (sessions ended, grants revoked).
    pub async fn sign_out_everywhere(&self, user: UserId, audit: AuditEvent) -> Result<(u64, u64)> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let sessions = sql("DELETE FROM user_sessions WHERE user_id = $1")
            .bind(user)
            .execute(&mut tx)
            .await?;
        let grants =
            crate::oauth::revoke_user_grants_in(&mut tx, user, "signed_out_everywhere", now)
                .await?;
        let audit = audit
            .resource(user)
            .details(serde_json::json!({ "sessions": sessions, "grants": grants }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.credentials_changed().await;
        Ok((sessions, grants))
    }

    /// Records a successful sign-in.
    pub async fn record_login(&self, user: UserId) -> Result<()> {
        sql("UPDATE users SET last_login_at = $1 WHERE id = $2")
            .bind(self.clock.now())
            .bind(user)
            .execute(self)
            .await
            .map(drop)
    }

    /// The roles of a partner, by name.
    pub async fn list_roles(&self, partner: PartnerId) -> Result<Vec<Role>> {
        Ok(sql(
            "SELECT id, partner_id, name, description, permissions, builtin FROM roles \
                WHERE partner_id = $1 ORDER BY name",
        )
        .bind(partner)
        .fetch_all::<RoleRow>(self)
        .await?
        .into_iter()
        .map(Role::from)
        .collect())
    }

    /// A role of `partner` by id or (case-insensitive) name.
    pub async fn find_role(&self, partner: PartnerId, id_or_name: &str) -> Result<Role> {
        let wanted = id_or_name.to_lowercase();
        self.list_roles(partner)
            .await?
            .into_iter()
            .find(|r| r.id.to_string() == wanted || r.name.to_lowercase() == wanted)
            .ok_or(StoreError::NotFound("role"))
    }

    async fn org_of_partner(&self, partner: PartnerId, org: OrgId) -> Result<()> {
        let found: Option<(Uuid,)> =
            sql("SELECT id FROM organizations WHERE id = $1 AND partner_id = $2")
                .bind(org)
                .bind(partner)
                .fetch_optional(self)
                .await?;
        found.map(drop).ok_or(StoreError::NotFound("organization"))
    }

    /// `NotFound("role")` unless `role` is one of `partner`'s.
    async fn role_of_partner(&self, partner: PartnerId, role: RoleId) -> Result<()> {
        if self.list_roles(partner).await?.iter().any(|r| r.id == role) {
            Ok(())
        } else {
            Err(StoreError::NotFound("role"))
        }
    }

    /// Gives `user` the role `role` in organization `org`, replacing any role it held there.
    /// The organization and role must belong to the user's partner, and an
    /// organization-level user can hold a role only in its own organization. Moves the
    /// credentials generation on: the user's keys now act with the new role.
    pub async fn assign_role(
        &self,
        user: UserId,
        org: OrgId,
        role: RoleId,
        audit: AuditEvent,
    ) -> Result<()> {
        let u = self.get_user(user).await?;
        self.org_of_partner(u.partner_id, org).await?;
        if let UserKind::Organization { org_id } = u.kind
            && org_id != org
        {
            return Err(StoreError::Invalid(
                "an organization-level user can only hold a role in its own organization".into(),
            ));
        }
        self.role_of_partner(u.partner_id, role).await?;
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        sql(
            "INSERT INTO user_org_roles (user_id, org_id, role_id) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id, org_id) DO UPDATE SET role_id = excluded.role_id",
        )
        .bind(user)
        .bind(org)
        .bind(role)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(org)
            .resource(user)
            .details(serde_json::json!({ "role_id": role }));
        audit::insert(&mut tx, &audit, now).await?;
        let committed = tx.commit().await;
        self.credentials_changed().await;
        committed
    }

    /// Gives partner-level `user` the role `role` across its partner (a partner admin): the
    /// role then applies in every organization of the partner, present and future, except
    /// where the user holds a role of its own in an organization ([`Store::assign_role`]),
    /// which wins there. Replaces any partner-wide role it held. The role must be the user's
    /// partner's, and an organization-level user cannot hold one. Moves the credentials
    /// generation on.
    pub async fn assign_partner_role(
        &self,
        user: UserId,
        role: RoleId,
        audit: AuditEvent,
    ) -> Result<()> {
        let u = self.get_user(user).await?;
        if let UserKind::Organization { .. } = u.kind {
            return Err(StoreError::Invalid(
                "an organization-level user cannot hold a partner-wide role".into(),
            ));
        }
        self.role_of_partner(u.partner_id, role).await?;
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        sql(
            "INSERT INTO user_partner_roles (user_id, role_id, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id) DO UPDATE SET role_id = excluded.role_id",
        )
        .bind(user)
        .bind(role)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .resource(user)
            .details(serde_json::json!({ "role_id": role, "partner_wide": true }));
        audit::insert(&mut tx, &audit, now).await?;
        let committed = tx.commit().await;
        self.credentials_changed().await;
        committed
    }

    /// Takes `user`'s partner-wide role away (its per-organization roles stay). Returns whether
    /// it held one; audited when it did. Moves the credentials generation on.
    pub async fn remove_partner_role(&self, user: UserId, audit: AuditEvent) -> Result<bool> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let removed = sql("DELETE FROM user_partner_roles WHERE user_id = $1")
            .bind(user)
            .execute(&mut tx)
            .await?;
        if removed > 0 {
            audit::insert(&mut tx, &audit.resource(user), now).await?;
        }
        let committed = tx.commit().await;
        self.credentials_changed().await;
        committed.map(|()| removed > 0)
    }

    /// What `user` may do in `org`: `None` when the user is disabled or holds no role there.
    /// The role is the user's own in `org`, else its partner-wide role when `org` is its
    /// partner's ([`Store::assign_partner_role`]). Feed the result to [`OrgAccess::require`].
    pub async fn org_access(&self, user: UserId, org: OrgId) -> Result<Option<OrgAccess>> {
        let row: Option<(Uuid, Json<PermissionSet>)> = sql(format!(
            "SELECT r.id, r.permissions FROM {REACH} WHERE u.id = $1 AND o.id = $2"
        ))
        .bind(user)
        .bind(org)
        .fetch_optional(self)
        .await?;
        Ok(row.map(|(role, perms)| OrgAccess {
            user_id: user,
            org_id: org,
            role_id: RoleId(role),
            permissions: perms.0,
        }))
    }

    /// The permissions of `user`'s partner-wide role: `None` for an organization-level or
    /// disabled user, or a partner-level one without a partner-wide role. What a person may do
    /// to everything the partner shares (partner-wide tool sources) is judged on this, never on
    /// a role in one organization.
    pub async fn partner_permissions(&self, user: UserId) -> Result<Option<PermissionSet>> {
        let row: Option<(Json<PermissionSet>,)> = sql("SELECT r.permissions FROM users u \
             JOIN user_partner_roles upr ON upr.user_id = u.id \
             JOIN roles r ON r.id = upr.role_id AND r.partner_id = u.partner_id \
             WHERE u.id = $1 AND u.org_id IS NULL AND NOT u.disabled")
        .bind(user)
        .fetch_optional(self)
        .await?;
        Ok(row.map(|(p,)| p.0))
    }

    /// The organizations `user` holds a role in (its own, or through its partner-wide role),
    /// by name, with the role's name.
    pub async fn user_organizations(&self, user: UserId) -> Result<Vec<(Organization, String)>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            org: Organization,
            role_name: String,
        }
        let rows: Vec<Row> = sql(format!(
            "SELECT o.id, o.partner_id, o.name, o.slug, o.created_at, r.name AS role_name \
             FROM {REACH} WHERE u.id = $1 ORDER BY o.name, o.id"
        ))
        .bind(user)
        .fetch_all(self)
        .await?;
        Ok(rows.into_iter().map(|r| (r.org, r.role_name)).collect())
    }

    /// The people who reach organization `org` (a role in it, or a partner-wide role), by
    /// name: (user, name, email, role name, whether the role is partner-wide).
    pub async fn organization_people(
        &self,
        org: OrgId,
    ) -> Result<Vec<(UserId, String, String, String, bool)>> {
        let rows: Vec<(UserId, String, String, String, bool)> = sql(format!(
            "SELECT u.id, u.name, u.email, r.name, uor.role_id IS NULL \
             FROM {REACH} WHERE o.id = $1 ORDER BY u.name, u.email, u.id"
        ))
        .bind(org)
        .fetch_all(self)
        .await?;
        Ok(rows)
    }

    /// Stores a dashboard session whose cookie hashes to `token_hash`.
    pub async fn create_session(
        &self,
        user: UserId,
        token_hash: &[u8],
        expires_at: Timestamp,
    ) -> Result<SessionId> {
        let id = SessionId::new();
        sql(
            "INSERT INTO user_sessions (id, token_hash, user_id, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(token_hash)
        .bind(user)
        .bind(self.clock.now())
        .bind(expires_at)
        .execute(self)
        .await?;
        Ok(id)
    }

    /// The session for `token_hash` and its (enabled) user, unless it has expired.
    pub async fn find_session(
        &self,
        token_hash: &[u8],
    ) -> Result<Option<(SessionId, Vec<u8>, User)>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            session_id: Uuid,
            token_hash: Vec<u8>,
            #[sqlx(flatten)]
            user: UserRow,
        }
        let row: Option<Row> = sql(
            "SELECT s.id AS session_id, s.token_hash, u.id, u.partner_id, u.org_id, u.email, u.name, \
             u.password_hash, u.disabled, u.created_at, u.last_login_at \
             FROM user_sessions s JOIN users u ON u.id = s.user_id \
             WHERE s.token_hash = $1 AND s.expires_at > $2 AND NOT u.disabled",
        )
        .bind(token_hash)
        .bind(self.clock.now())
        .fetch_optional(self)
        .await?;
        Ok(row.map(|r| {
            (
                SessionId(r.session_id),
                r.token_hash,
                UserWithSecret::from(r.user).user,
            )
        }))
    }

    /// Ends a session. Returns whether it existed.
    pub async fn delete_session(&self, token_hash: &[u8]) -> Result<bool> {
        let n = sql("DELETE FROM user_sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute(self)
            .await?;
        Ok(n > 0)
    }

    /// Deletes expired sessions; returns how many.
    pub async fn purge_expired_sessions(&self) -> Result<u64> {
        sql("DELETE FROM user_sessions WHERE expires_at <= $1")
            .bind(self.clock.now())
            .execute(self)
            .await
    }
}
