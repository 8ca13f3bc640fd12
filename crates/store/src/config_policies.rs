//! Configuration policies (migration 0023): policies with typed feature settings, their
//! assignments through the hierarchy, and what each device's agent reported as applied.
//!
//! A policy belongs to an organization or to a partner (every organization of the partner
//! sees it, read-only; partner policies are assigned at the partner level only, through
//! [`Store`]). Resolution itself is `breeze_core::config_policy` (pure); this module loads the
//! candidates — the organization's assignments plus its partner's, of active policies only —
//! and where devices sit ([`DevicePlace`]: site, groups, organization, partner), in a few
//! queries whatever the number of devices, so a preview over the whole organization costs
//! what one device's does plus the loop.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use breeze_core::{
    AuditEvent, ConfigLevel, DeviceId, OrgId, PartnerId, PolicyStatus, Timestamp,
    config_policy::{
        Candidate, DevicePlace, Effective, PolicySettings, resolve_for, validate_feature,
    },
};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    Result, Store, StoreError,
    alerts::check_text,
    audit,
    sql::{Arg, Tx, sql},
};

/// The most configuration policies one organization (or partner) may keep.
pub const MAX_CONFIG_POLICIES: i64 = 200;
/// The most assignments one organization (or partner) may keep.
pub const MAX_CONFIG_ASSIGNMENTS: i64 = 1000;
/// Assignment priorities lie in 0..=1000 (higher wins on the same level).
pub const MAX_PRIORITY: i64 = 1000;

/// Who owns a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "id")]
pub enum PolicyOwner {
    Organization(OrgId),
    Partner(PartnerId),
}

/// A configuration policy as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigPolicy {
    pub id: Uuid,
    pub owner: PolicyOwner,
    pub name: String,
    pub description: Option<String>,
    pub status: PolicyStatus,
    pub settings: PolicySettings,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(sqlx::FromRow)]
struct PolicyRow {
    id: Uuid,
    org_id: Option<OrgId>,
    partner_id: Option<PartnerId>,
    name: String,
    description: Option<String>,
    status: PolicyStatus,
    #[sqlx(json)]
    settings: Value,
    created_by: String,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl PolicyRow {
    fn into_policy(self) -> Result<ConfigPolicy> {
        let owner = match (self.org_id, self.partner_id) {
            (Some(o), None) => PolicyOwner::Organization(o),
            (None, Some(p)) => PolicyOwner::Partner(p),
            _ => {
                return Err(StoreError::Corrupt(format!(
                    "policy {} has no owner",
                    self.id
                )));
            }
        };
        let settings: PolicySettings = serde_json::from_value(self.settings)
            .map_err(|e| StoreError::Corrupt(format!("policy {} settings: {e}", self.id)))?;
        Ok(ConfigPolicy {
            id: self.id,
            owner,
            name: self.name,
            description: self.description,
            status: self.status,
            settings,
            created_by: self.created_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// An assignment of a policy to a place in the hierarchy.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigAssignment {
    pub id: Uuid,
    pub policy_id: Uuid,
    pub level: ConfigLevel,
    pub target_id: Uuid,
    pub priority: i32,
    pub created_by: String,
    pub created_at: Timestamp,
}

#[derive(sqlx::FromRow)]
struct AssignmentRow {
    id: Uuid,
    policy_id: Uuid,
    level: String,
    target_id: Uuid,
    priority: i64,
    created_by: String,
    created_at: Timestamp,
}

impl AssignmentRow {
    fn into_assignment(self) -> Result<ConfigAssignment> {
        Ok(ConfigAssignment {
            id: self.id,
            policy_id: self.policy_id,
            level: self
                .level
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
            target_id: self.target_id,
            priority: i32::try_from(self.priority).unwrap_or(0),
            created_by: self.created_by,
            created_at: self.created_at,
        })
    }
}

/// A policy to create.
#[derive(Debug, Clone)]
pub struct NewConfigPolicy {
    pub name: String,
    pub description: Option<String>,
    pub status: PolicyStatus,
    /// Feature type → settings (checked with `validate_feature`; errors name the field).
    pub settings: Vec<(breeze_core::FeatureType, Value)>,
    pub created_by: String,
}

/// Changes to a policy; `None` keeps the value. `settings` replaces every feature.
#[derive(Debug, Clone, Default)]
pub struct ConfigPolicyUpdate {
    pub name: Option<String>,
    pub description: Option<String>,
    pub status: Option<PolicyStatus>,
    pub settings: Option<Vec<(breeze_core::FeatureType, Value)>>,
}

/// An assignment to make.
#[derive(Debug, Clone)]
pub struct NewAssignment {
    pub policy_id: Uuid,
    pub level: ConfigLevel,
    pub target_id: Uuid,
    pub priority: i64,
    pub created_by: String,
}

/// What an agent last reported as applied.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ConfigReport {
    pub device_id: DeviceId,
    pub revision: Option<String>,
    #[sqlx(json)]
    pub applied: Value,
    pub reported_at: Timestamp,
}

/// The most devices [`crate::OrgConfigPolicies::device_places`] names in one statement; more are
/// picked from the whole organization.
const MAX_LISTED_PLACES: usize = 500;

const POLICY_COLUMNS: &str = "id, org_id, partner_id, name, description, status, settings, \
    created_by, created_at, updated_at";
const ASSIGNMENT_COLUMNS: &str =
    "id, policy_id, level, target_id, priority, created_by, created_at";

fn checked_settings(settings: &[(breeze_core::FeatureType, Value)]) -> Result<PolicySettings> {
    let mut out = PolicySettings::new();
    for (feature, value) in settings {
        let map =
            validate_feature(*feature, value).map_err(|e| StoreError::Invalid(e.to_string()))?;
        if out.insert(*feature, map).is_some() {
            return Err(StoreError::Invalid(format!(
                "settings: {feature} is given twice"
            )));
        }
    }
    if out.is_empty() {
        return Err(StoreError::Invalid(
            "settings: a policy configures at least one feature".into(),
        ));
    }
    Ok(out)
}

fn check_description(d: Option<&str>) -> Result<()> {
    if d.is_some_and(|d| d.chars().count() > crate::alerts::MAX_NOTE_CHARS) {
        return Err(StoreError::Invalid(format!(
            "description is longer than {} characters",
            crate::alerts::MAX_NOTE_CHARS
        )));
    }
    Ok(())
}

fn check_priority(priority: i64) -> Result<()> {
    if !(0..=MAX_PRIORITY).contains(&priority) {
        return Err(StoreError::Invalid(format!(
            "priority: {priority} is not between 0 and {MAX_PRIORITY}"
        )));
    }
    Ok(())
}

/// Inserts a policy for `owner` with its audit record.
async fn insert_policy(
    store: &Store,
    owner: PolicyOwner,
    new: NewConfigPolicy,
    audit: AuditEvent,
) -> Result<Uuid> {
    check_text("name", &new.name, crate::alerts::MAX_NAME_CHARS)?;
    check_description(new.description.as_deref())?;
    let settings = checked_settings(&new.settings)?;
    let (org, partner) = match owner {
        PolicyOwner::Organization(o) => (Some(o), None),
        PolicyOwner::Partner(p) => (None, Some(p)),
    };
    let count = sql("SELECT COUNT(*) FROM config_policies WHERE org_id = $1 OR partner_id = $2")
        .bind(org)
        .bind(partner)
        .fetch_scalar::<i64>(store)
        .await?;
    if count >= MAX_CONFIG_POLICIES {
        return Err(StoreError::Conflict(format!(
            "the owner already has {MAX_CONFIG_POLICIES} configuration policies"
        )));
    }
    let now = store.clock.now();
    let id = Uuid::now_v7();
    let mut tx = Tx::begin(&store.pool).await?;
    sql(format!(
        "INSERT INTO config_policies ({POLICY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
         $9, $10)"
    ))
    .bind(id)
    .bind(org)
    .bind(partner)
    .bind(new.name.as_str())
    .bind(new.description.as_deref())
    .bind(new.status.as_str())
    .bind(Arg::json(&settings))
    .bind(new.created_by.as_str())
    .bind(now)
    .bind(now)
    .execute(&mut tx)
    .await
    .map_err(|e| e.conflict_as(|| format!("a configuration policy named {:?} exists", new.name)))?;
    let mut audit = audit.resource(id).details(serde_json::json!({
        "name": new.name, "status": new.status, "settings": settings,
    }));
    if let Some(o) = org {
        audit = audit.org(o);
    }
    audit::insert(&mut tx, &audit, now).await?;
    tx.commit().await?;
    Ok(id)
}

impl Store {
    /// Creates a partner-wide policy (seen by every organization of the partner).
    pub async fn create_partner_config_policy(
        &self,
        partner: PartnerId,
        new: NewConfigPolicy,
        audit: AuditEvent,
    ) -> Result<ConfigPolicy> {
        let id = insert_policy(self, PolicyOwner::Partner(partner), new, audit).await?;
        self.partner_config_policy(partner, id).await
    }

    /// One of the partner's own policies.
    pub async fn partner_config_policy(
        &self,
        partner: PartnerId,
        id: Uuid,
    ) -> Result<ConfigPolicy> {
        sql(format!(
            "SELECT {POLICY_COLUMNS} FROM config_policies WHERE id = $1 AND partner_id = $2"
        ))
        .bind(id)
        .bind(partner)
        .fetch_optional::<PolicyRow>(self)
        .await?
        .ok_or(StoreError::NotFound("configuration policy"))?
        .into_policy()
    }

    /// Assigns a partner's policy at the partner level (every device of every organization of
    /// the partner, below any organization's own assignment).
    pub async fn assign_partner_config_policy(
        &self,
        partner: PartnerId,
        policy: Uuid,
        priority: i64,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<ConfigAssignment> {
        check_priority(priority)?;
        self.partner_config_policy(partner, policy).await?;
        let now = self.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin(&self.pool).await?;
        sql(format!(
            "INSERT INTO config_policy_assignments ({ASSIGNMENT_COLUMNS}, partner_id) VALUES \
             ($1, $2, 'partner', $3, $4, $5, $6, $3)"
        ))
        .bind(id)
        .bind(policy)
        .bind(partner)
        .bind(priority)
        .bind(created_by)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "the policy is already assigned to the partner".into()))?;
        audit::insert(
            &mut tx,
            &audit.resource(id).details(serde_json::json!({
                "policyId": policy, "level": "partner", "targetId": partner, "priority": priority,
            })),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(ConfigAssignment {
            id,
            policy_id: policy,
            level: ConfigLevel::Partner,
            target_id: partner.0,
            priority: i32::try_from(priority).unwrap_or(0),
            created_by: created_by.to_owned(),
            created_at: now,
        })
    }

    /// Records what a device's agent reports as applied; unchanged reports write nothing.
    pub async fn record_config_report(
        &self,
        device: DeviceId,
        org: OrgId,
        revision: Option<&str>,
        applied: &Value,
    ) -> Result<()> {
        let now = self.clock.now();
        let current: Option<ConfigReport> = sql(
            "SELECT device_id, revision, applied, reported_at FROM device_config_reports \
             WHERE device_id = $1 AND org_id = $2",
        )
        .bind(device)
        .bind(org)
        .fetch_optional(self)
        .await?;
        if current
            .as_ref()
            .is_some_and(|c| c.revision.as_deref() == revision && &c.applied == applied)
        {
            return Ok(());
        }
        sql(
            "INSERT INTO device_config_reports (device_id, org_id, revision, applied, reported_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (device_id) DO UPDATE SET \
             revision = excluded.revision, applied = excluded.applied, \
             reported_at = excluded.reported_at",
        )
        .bind(device)
        .bind(org)
        .bind(revision)
        .bind(Arg::json(applied))
        .bind(now)
        .execute(self)
        .await?;
        Ok(())
    }
}

impl crate::OrgConfigPolicies<'_> {
    async fn partner(&self) -> Result<PartnerId> {
        self.whole().tenancy().partner_id().await
    }

    /// Creates one of this organization's policies (settings checked; errors name the field).
    pub async fn create_config_policy(
        &self,
        new: NewConfigPolicy,
        audit: AuditEvent,
    ) -> Result<ConfigPolicy> {
        let id = insert_policy(self.store, PolicyOwner::Organization(self.org), new, audit).await?;
        self.get_config_policy(id).await
    }

    /// A policy this organization sees: its own or its partner's.
    pub async fn get_config_policy(&self, id: Uuid) -> Result<ConfigPolicy> {
        let partner = self.partner().await?;
        sql(format!(
            "SELECT {POLICY_COLUMNS} FROM config_policies WHERE id = $1 AND \
             (org_id = $2 OR partner_id = $3)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(partner)
        .fetch_optional::<PolicyRow>(self)
        .await?
        .ok_or(StoreError::NotFound("configuration policy"))?
        .into_policy()
    }

    /// The policies this organization sees (its own, then its partner's), by name.
    pub async fn list_config_policies(
        &self,
        status: Option<PolicyStatus>,
    ) -> Result<Vec<ConfigPolicy>> {
        let partner = self.partner().await?;
        let rows: Vec<PolicyRow> = sql(format!(
            "SELECT {POLICY_COLUMNS} FROM config_policies WHERE (org_id = $1 OR partner_id = $2) \
             AND ($3 IS NULL OR status = $3) ORDER BY partner_id IS NOT NULL, name, id"
        ))
        .bind(self.org)
        .bind(partner)
        .bind(status.map(PolicyStatus::as_str))
        .fetch_all(self)
        .await?;
        rows.into_iter().map(PolicyRow::into_policy).collect()
    }

    /// Changes one of this organization's own policies (a partner's is read-only here).
    pub async fn update_config_policy(
        &self,
        id: Uuid,
        update: ConfigPolicyUpdate,
        audit: AuditEvent,
    ) -> Result<ConfigPolicy> {
        let current = self.own_policy(id).await?;
        if let Some(n) = &update.name {
            check_text("name", n, crate::alerts::MAX_NAME_CHARS)?;
        }
        check_description(update.description.as_deref())?;
        let settings = match &update.settings {
            Some(s) => checked_settings(s)?,
            None => current.settings.clone(),
        };
        let name = update.name.clone().unwrap_or(current.name.clone());
        let description = update.description.clone().or(current.description.clone());
        let status = update.status.unwrap_or(current.status);
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "UPDATE config_policies SET name = $1, description = $2, status = $3, settings = $4, \
             updated_at = $5 WHERE id = $6 AND org_id = $7",
        )
        .bind(name.as_str())
        .bind(description.as_deref())
        .bind(status.as_str())
        .bind(Arg::json(&settings))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a configuration policy named {name:?} exists")))?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": update.name, "status": update.status,
            "settings": update.settings.as_ref().map(|_| &settings),
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_config_policy(id).await
    }

    /// Deletes one of this organization's own policies with its assignments.
    pub async fn delete_config_policy(&self, id: Uuid, audit: AuditEvent) -> Result<ConfigPolicy> {
        let policy = self.own_policy(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("DELETE FROM config_policy_assignments WHERE policy_id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        sql("DELETE FROM config_policies WHERE id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "name": policy.name }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(policy)
    }

    async fn own_policy(&self, id: Uuid) -> Result<ConfigPolicy> {
        let policy = self.get_config_policy(id).await?;
        if policy.owner != PolicyOwner::Organization(self.org) {
            return Err(StoreError::Invalid(
                "a partner-wide policy is changed by the partner (breeze config-policies)".into(),
            ));
        }
        Ok(policy)
    }

    /// The assignments that reach this organization: its own and its partner's.
    pub async fn list_config_assignments(&self) -> Result<Vec<ConfigAssignment>> {
        let partner = self.partner().await?;
        let rows: Vec<AssignmentRow> = sql(format!(
            "SELECT {ASSIGNMENT_COLUMNS} FROM config_policy_assignments \
             WHERE org_id = $1 OR partner_id = $2 ORDER BY created_at, id"
        ))
        .bind(self.org)
        .bind(partner)
        .fetch_all(self)
        .await?;
        rows.into_iter()
            .map(AssignmentRow::into_assignment)
            .collect()
    }

    /// One assignment this organization may remove (its own).
    pub async fn get_config_assignment(&self, id: Uuid) -> Result<ConfigAssignment> {
        sql(format!(
            "SELECT {ASSIGNMENT_COLUMNS} FROM config_policy_assignments \
             WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional::<AssignmentRow>(self)
        .await?
        .ok_or(StoreError::NotFound("configuration policy assignment"))?
        .into_assignment()
    }

    /// Checks an assignment this organization could make: its own policy, a target of its own
    /// at an organization-side level, a priority in range, no duplicate.
    pub async fn check_new_assignment(&self, new: &NewAssignment) -> Result<ConfigPolicy> {
        check_priority(new.priority)?;
        let policy = self.get_config_policy(new.policy_id).await?;
        if policy.owner != PolicyOwner::Organization(self.org) {
            return Err(StoreError::Invalid(
                "a partner-wide policy is assigned at the partner level by the partner \
                 (breeze config-policies assign --partner)"
                    .into(),
            ));
        }
        match new.level {
            ConfigLevel::Partner => {
                return Err(StoreError::Invalid(
                    "level: partner-wide assignments are made with a partner policy \
                     (breeze config-policies assign --partner)"
                        .into(),
                ));
            }
            ConfigLevel::Organization => {
                if new.target_id != self.org.0 {
                    return Err(StoreError::NotFound("organization"));
                }
            }
            ConfigLevel::Site => {
                self.whole()
                    .tenancy()
                    .get_site(breeze_core::SiteId(new.target_id))
                    .await?;
            }
            ConfigLevel::DeviceGroup => {
                self.whole()
                    .tenancy()
                    .get_group(breeze_core::DeviceGroupId(new.target_id))
                    .await?;
            }
            ConfigLevel::Device => {
                self.whole()
                    .devices()
                    .get_device(DeviceId(new.target_id))
                    .await?;
            }
        }
        let taken = sql(
            "SELECT COUNT(*) FROM config_policy_assignments WHERE policy_id = $1 AND level = $2 \
             AND target_id = $3",
        )
        .bind(new.policy_id)
        .bind(new.level.as_str())
        .bind(new.target_id)
        .fetch_scalar::<i64>(self)
        .await?;
        if taken > 0 {
            return Err(StoreError::Conflict(format!(
                "policy {:?} is already assigned to this {}",
                policy.name, new.level
            )));
        }
        Ok(policy)
    }

    /// Assigns one of this organization's policies (see [`crate::OrgConfigPolicies::check_new_assignment`]).
    pub async fn assign_config_policy(
        &self,
        new: NewAssignment,
        audit: AuditEvent,
    ) -> Result<ConfigAssignment> {
        let policy = self.check_new_assignment(&new).await?;
        self.whole()
            .check_room(
                "config_policy_assignments",
                MAX_CONFIG_ASSIGNMENTS,
                "policy assignments",
            )
            .await?;
        let (site, group, device) = match new.level {
            ConfigLevel::Site => (Some(new.target_id), None, None),
            ConfigLevel::DeviceGroup => (None, Some(new.target_id), None),
            ConfigLevel::Device => (None, None, Some(new.target_id)),
            _ => (None, None, None),
        };
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO config_policy_assignments ({ASSIGNMENT_COLUMNS}, org_id, target_site_id, \
             target_group_id, target_device_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
             $11)"
        ))
        .bind(id)
        .bind(new.policy_id)
        .bind(new.level.as_str())
        .bind(new.target_id)
        .bind(new.priority)
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(self.org)
        .bind(site)
        .bind(group)
        .bind(device)
        .execute(&mut tx)
        .await
        .map_err(|e| {
            e.conflict_as(|| format!("policy {:?} is already assigned there", policy.name))
        })?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "policyId": new.policy_id, "policyName": policy.name, "level": new.level,
            "targetId": new.target_id, "priority": new.priority,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_config_assignment(id).await
    }

    /// Removes one of this organization's assignments.
    pub async fn remove_config_assignment(
        &self,
        id: Uuid,
        audit: AuditEvent,
    ) -> Result<ConfigAssignment> {
        let assignment = self.get_config_assignment(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        audit::delete_row(
            &mut tx,
            self.org,
            "config_policy_assignments",
            id,
            "configuration policy assignment",
        )
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "policyId": assignment.policy_id, "level": assignment.level,
            "targetId": assignment.target_id, "priority": assignment.priority,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(assignment)
    }

    /// Every assignment of an active policy that reaches this organization, with its policy's
    /// settings: what resolution chooses from.
    pub async fn config_candidates(&self) -> Result<Vec<Candidate>> {
        let policies: HashMap<Uuid, ConfigPolicy> = self
            .list_config_policies(Some(PolicyStatus::Active))
            .await?
            .into_iter()
            .map(|p| (p.id, p))
            .collect();
        let mut settings: HashMap<Uuid, Arc<PolicySettings>> = HashMap::new();
        let mut out = Vec::new();
        for a in self.list_config_assignments().await? {
            let Some(p) = policies.get(&a.policy_id) else {
                continue;
            };
            let s = settings
                .entry(p.id)
                .or_insert_with(|| Arc::new(p.settings.clone()))
                .clone();
            out.push(Candidate {
                assignment_id: a.id,
                policy_id: p.id,
                policy_name: p.name.clone(),
                level: a.level,
                target_id: a.target_id,
                priority: a.priority,
                settings: s,
            });
        }
        Ok(out)
    }

    /// Where devices sit: all of the organization's, or the ones named (unknown ids skipped).
    pub async fn device_places(&self, only: Option<&[DeviceId]>) -> Result<Vec<DevicePlace>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            id: Uuid,
            site_id: Uuid,
        }
        #[derive(sqlx::FromRow)]
        struct Member {
            group_id: Uuid,
            device_id: Uuid,
        }
        let partner = self.partner().await?;
        // A few devices are read by id; many (a fleet-wide compliance run names every device)
        // are read as the whole organization and picked from a set.
        let listed = only.filter(|ids| ids.len() <= MAX_LISTED_PLACES);
        let by_id = |select: &str, column: &str| {
            let mut q = sql(select).bind(self.org);
            if let Some(ids) = listed {
                let list: Vec<String> = ids.iter().map(|id| q.arg(*id)).collect();
                if list.is_empty() {
                    q.push(" AND 1 = 0");
                } else {
                    q.push(&format!(" AND {column} IN ({})", list.join(", ")));
                }
            }
            q
        };
        let devices: Vec<Row> = by_id("SELECT id, site_id FROM devices WHERE org_id = $1", "id")
            .fetch_all(self)
            .await?;
        let members: Vec<Member> = by_id(
            "SELECT group_id, device_id FROM device_group_members WHERE org_id = $1",
            "device_id",
        )
        .fetch_all(self)
        .await?;
        let mut groups: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
        for m in members {
            groups.entry(m.device_id).or_default().push(m.group_id);
        }
        let wanted: Option<HashSet<Uuid>> = only
            .filter(|_| listed.is_none())
            .map(|ids| ids.iter().map(|d| d.0).collect());
        let mut places: Vec<DevicePlace> = devices
            .into_iter()
            .filter(|d| wanted.as_ref().is_none_or(|w| w.contains(&d.id)))
            .map(|d| DevicePlace {
                device: d.id,
                site: d.site_id,
                groups: groups.remove(&d.id).unwrap_or_default(),
                org: self.org.0,
                partner: partner.0,
            })
            .collect();
        places.sort_by_key(|p| p.device);
        Ok(places)
    }

    /// One device's effective configuration (NotFound for another organization's device).
    pub async fn effective_configuration(&self, device: DeviceId) -> Result<Effective> {
        let place = self
            .device_places(Some(&[device]))
            .await?
            .pop()
            .ok_or(StoreError::NotFound("device"))?;
        Ok(resolve_for(&place, &self.config_candidates().await?))
    }

    /// What the device's agent last reported as applied, if it reported.
    pub async fn config_report(&self, device: DeviceId) -> Result<Option<ConfigReport>> {
        sql(
            "SELECT device_id, revision, applied, reported_at FROM device_config_reports \
             WHERE device_id = $1 AND org_id = $2",
        )
        .bind(device)
        .bind(self.org)
        .fetch_optional(self)
        .await
    }
}
