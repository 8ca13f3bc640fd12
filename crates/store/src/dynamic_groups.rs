//! Dynamic device groups: a group with a filter (`breeze_core::GroupFilter`) has as members
//! exactly the devices the filter matches, recomputed when the filter is set and when a device's
//! inventory or status changes; every membership change is logged (`group_membership_log`).
//!
//! A filter is decided in Rust over the organization's devices (one query) and, when it asks
//! about packages or disks, their latest inventories (one more); the difference with the
//! current members is written in one transaction with the log rows and one audit record.

use std::collections::{HashMap, HashSet};

use breeze_agent_proto::Inventory;
use breeze_core::{
    Actor, AuditEvent, Device, DeviceFacts, DeviceGroupId, DeviceId, GroupFilter, OrgId, Timestamp,
};
use serde::Serialize;
use uuid::Uuid;

use crate::{
    CrossOrg, Result, Store, StoreError, audit,
    devices::DEVICE_COLUMNS,
    sql::{Arg, Tx, sql},
};

/// Who recomputes groups in logs and audit records.
pub fn groups_actor() -> Actor {
    Actor::system("dynamic-groups")
}

/// Who re-evaluates time-dependent groups as time passes (membership log and audit).
pub fn groups_clock_actor() -> Actor {
    Actor::system("dynamic-groups-clock")
}

/// The reason logged for a change made by the periodic re-evaluation.
pub const TIME_REEVALUATION: &str = "time re-evaluation: lastSeenMinutes moved on";

/// One membership change.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct MembershipChange {
    pub id: Uuid,
    pub group_id: DeviceGroupId,
    pub device_id: DeviceId,
    /// `added` or `removed`.
    pub change: String,
    pub actor: String,
    pub reason: String,
    pub at: Timestamp,
}

/// What a recomputation changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recomputed {
    pub added: Vec<DeviceId>,
    pub removed: Vec<DeviceId>,
}

/// The inventory facts a filter may ask about.
struct InventoryFacts {
    packages: Vec<String>,
    disk_free_percent: Option<f64>,
}

fn inventory_facts(inv: &Inventory) -> InventoryFacts {
    let disk_free_percent = inv
        .disks
        .iter()
        .filter(|d| d.total_bytes > 0)
        .map(|d| d.available_bytes as f64 * 100.0 / d.total_bytes as f64)
        .min_by(f64::total_cmp);
    InventoryFacts {
        packages: inv
            .packages
            .iter()
            .flatten()
            .map(|p| p.name.clone())
            .collect(),
        disk_free_percent,
    }
}

impl crate::OrgDynamicGroups<'_> {
    /// The filter of a dynamic group, `None` for a static one.
    pub async fn group_filter(&self, group: DeviceGroupId) -> Result<Option<GroupFilter>> {
        let raw: Option<(sqlx::types::Json<GroupFilter>,)> =
            sql("SELECT filter FROM device_group_filters WHERE group_id = $1 AND org_id = $2")
                .bind(group)
                .bind(self.org)
                .fetch_optional(self)
                .await?;
        Ok(raw.map(|(f,)| f.0))
    }

    /// Every dynamic group's filter.
    pub async fn group_filters(&self) -> Result<HashMap<DeviceGroupId, GroupFilter>> {
        let rows: Vec<(DeviceGroupId, sqlx::types::Json<GroupFilter>)> =
            sql("SELECT group_id, filter FROM device_group_filters WHERE org_id = $1")
                .bind(self.org)
                .fetch_all(self)
                .await?;
        Ok(rows.into_iter().map(|(g, f)| (g, f.0)).collect())
    }

    /// The devices `filter` matches now (all of them, by hostname), deciding at most the
    /// devices listed in `only` when given.
    async fn matching(&self, filter: &GroupFilter, only: Option<DeviceId>) -> Result<Vec<Device>> {
        let now = self.store.clock.now();
        let mut q = sql(format!(
            "SELECT {DEVICE_COLUMNS} FROM devices d WHERE d.org_id = $1"
        ))
        .bind(self.org);
        if let Some(d) = only {
            let p = q.arg(d);
            q.push(&format!(" AND d.id = {p}"));
        }
        q.push(" ORDER BY d.hostname, d.id");
        let devices: Vec<Device> = q.fetch_all(self).await?;
        let mut inventories: HashMap<DeviceId, InventoryFacts> = HashMap::new();
        if filter.needs_inventory() {
            let mut q = sql("SELECT device_id, inventory FROM device_state \
                 WHERE org_id = $1 AND inventory IS NOT NULL")
            .bind(self.org);
            if let Some(d) = only {
                let p = q.arg(d);
                q.push(&format!(" AND device_id = {p}"));
            }
            let rows: Vec<(DeviceId, sqlx::types::Json<Inventory>)> = q.fetch_all(self).await?;
            inventories = rows
                .into_iter()
                .map(|(d, inv)| (d, inventory_facts(&inv.0)))
                .collect();
        }
        Ok(devices
            .into_iter()
            .filter(|d| {
                let inv = inventories.get(&d.id);
                let facts = DeviceFacts {
                    device: d,
                    packages: inv.map_or(&[], |i| i.packages.as_slice()),
                    disk_free_percent: inv.and_then(|i| i.disk_free_percent),
                };
                filter.matches(&facts, now)
            })
            .collect())
    }

    /// The devices a filter would hold now, without saving anything.
    pub async fn preview_filter(&self, filter: &GroupFilter) -> Result<Vec<Device>> {
        filter.validate().map_err(StoreError::Invalid)?;
        self.matching(filter, None).await
    }

    /// Makes a group dynamic with `filter` (or changes its filter) and recomputes its
    /// members, audited with the filter.
    pub async fn set_group_filter(
        &self,
        group: DeviceGroupId,
        filter: &GroupFilter,
        actor: &Actor,
        audit: AuditEvent,
    ) -> Result<Recomputed> {
        filter.validate().map_err(StoreError::Invalid)?;
        self.whole().tenancy().get_group(group).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO device_group_filters (group_id, org_id, filter, updated_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (group_id) DO UPDATE SET \
             filter = excluded.filter, updated_at = excluded.updated_at",
        )
        .bind(group)
        .bind(self.org)
        .bind(Arg::json(filter))
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(self.org)
            .resource(group)
            .details(serde_json::json!({ "filter": filter }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.recompute_group(group, filter, None, actor, "filter changed")
            .await
    }

    /// Brings a dynamic group's members in line with its filter — for every device, or only
    /// `device` — logging each change as `actor` with `reason`.
    async fn recompute_group(
        &self,
        group: DeviceGroupId,
        filter: &GroupFilter,
        device: Option<DeviceId>,
        actor: &Actor,
        reason: &str,
    ) -> Result<Recomputed> {
        let wanted: HashSet<DeviceId> = self
            .matching(filter, device)
            .await?
            .into_iter()
            .map(|d| d.id)
            .collect();
        let mut q =
            sql("SELECT device_id FROM device_group_members WHERE org_id = $1 AND group_id = $2")
                .bind(self.org)
                .bind(group);
        if let Some(d) = device {
            let p = q.arg(d);
            q.push(&format!(" AND device_id = {p}"));
        }
        let current: HashSet<DeviceId> = q
            .fetch_all::<(DeviceId,)>(self)
            .await?
            .into_iter()
            .map(|(d,)| d)
            .collect();
        let mut changes = Recomputed {
            added: wanted.difference(&current).copied().collect(),
            removed: current.difference(&wanted).copied().collect(),
        };
        if changes.added.is_empty() && changes.removed.is_empty() {
            return Ok(changes);
        }
        changes.added.sort_unstable();
        changes.removed.sort_unstable();
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        for chunk in changes.added.chunks(200) {
            let mut q =
                sql("INSERT INTO device_group_members (group_id, device_id, org_id) VALUES ");
            for (i, d) in chunk.iter().enumerate() {
                if i > 0 {
                    q.push(", ");
                }
                q.push_row([Arg::from(group), Arg::from(*d), Arg::from(self.org)]);
            }
            q.push(" ON CONFLICT (group_id, device_id) DO NOTHING");
            q.execute(&mut tx).await?;
        }
        for d in &changes.removed {
            sql("DELETE FROM device_group_members WHERE group_id = $1 AND device_id = $2 AND org_id = $3")
                .bind(group)
                .bind(*d)
                .bind(self.org)
                .execute(&mut tx)
                .await?;
        }
        let rows = changes
            .added
            .iter()
            .map(|d| (d, "added"))
            .chain(changes.removed.iter().map(|d| (d, "removed")));
        let all: Vec<(&DeviceId, &str)> = rows.collect();
        for chunk in all.chunks(200) {
            let mut q = sql("INSERT INTO group_membership_log \
                 (id, org_id, group_id, device_id, change, actor, reason, at) VALUES ");
            for (i, (d, change)) in chunk.iter().enumerate() {
                if i > 0 {
                    q.push(", ");
                }
                q.push_row([
                    Arg::from(Uuid::now_v7()),
                    Arg::from(self.org),
                    Arg::from(group),
                    Arg::from(**d),
                    Arg::from(*change),
                    Arg::from(actor.to_string()),
                    Arg::from(reason),
                    Arg::from(now),
                ]);
            }
            q.execute(&mut tx).await?;
        }
        let audit = AuditEvent::new(actor.clone(), "device_group.recompute", "device_group")
            .org(self.org)
            .resource(group)
            .details(serde_json::json!({
                "reason": reason, "added": changes.added.len(), "removed": changes.removed.len(),
            }));
        audit::insert(&mut tx, &audit, now).await?;
        let committed = tx.commit().await;
        self.store.devices_changed(self.org);
        committed.map(|()| changes)
    }

    /// Recomputes every dynamic group of the organization, for one device (after its inventory
    /// or status changed) or for all. Returns the changes per group.
    pub async fn recompute_dynamic_groups(
        &self,
        device: Option<DeviceId>,
        reason: &str,
    ) -> Result<Vec<(DeviceGroupId, Recomputed)>> {
        let filters: Vec<(DeviceGroupId, sqlx::types::Json<GroupFilter>)> = sql(
            "SELECT group_id, filter FROM device_group_filters WHERE org_id = $1 ORDER BY group_id",
        )
        .bind(self.org)
        .fetch_all(self)
        .await?;
        let mut out = Vec::new();
        for (group, filter) in filters {
            let changes = self
                .recompute_group(group, &filter.0, device, &groups_actor(), reason)
                .await?;
            if !changes.added.is_empty() || !changes.removed.is_empty() {
                out.push((group, changes));
            }
        }
        Ok(out)
    }

    /// Logs a membership change made by hand (add_devices, remove_devices).
    pub async fn log_membership(
        &self,
        group: DeviceGroupId,
        device: DeviceId,
        added: bool,
        actor: &Actor,
        reason: &str,
    ) -> Result<()> {
        sql("INSERT INTO group_membership_log \
             (id, org_id, group_id, device_id, change, actor, reason, at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
        .bind(Uuid::now_v7())
        .bind(self.org)
        .bind(group)
        .bind(device)
        .bind(if added { "added" } else { "removed" })
        .bind(actor.to_string())
        .bind(reason)
        .bind(self.store.clock.now())
        .execute(self)
        .await
        .map(drop)
    }

    /// A group's membership changes, newest first, at most `limit` (1-200).
    pub async fn membership_log(
        &self,
        group: DeviceGroupId,
        limit: u32,
    ) -> Result<Vec<MembershipChange>> {
        self.whole().tenancy().get_group(group).await?;
        sql(
            "SELECT id, group_id, device_id, change, actor, reason, at FROM group_membership_log \
             WHERE org_id = $1 AND group_id = $2 ORDER BY at DESC, id DESC LIMIT $3",
        )
        .bind(self.org)
        .bind(group)
        .bind(i64::from(limit.clamp(1, 200)))
        .fetch_all(self)
        .await
    }
}

impl Store {
    /// After a device's inventory or status changed: recomputes the dynamic groups of its
    /// organization for it. Best effort — a failure is logged, never the caller's.
    pub(crate) async fn device_facts_changed(&self, org: OrgId, device: DeviceId, reason: &str) {
        if let Err(e) = self
            .org(org)
            .dynamic_groups()
            .recompute_dynamic_groups(Some(device), reason)
            .await
        {
            tracing::warn!(device = %device, error = %e, "dynamic group recompute failed");
        }
    }
}

impl CrossOrg<'_> {
    /// Re-evaluates every organization's dynamic groups whose filter depends on time
    /// ([`GroupFilter::depends_on_time`]), for all their devices, logging each change as
    /// [`groups_clock_actor`] with [`TIME_REEVALUATION`]. A group that fails is logged and
    /// skipped. Returns the groups changed with their changes. The caller holds the
    /// cluster-wide lease (`claim_scheduled_run`).
    pub async fn reevaluate_time_dependent_groups(
        &self,
    ) -> Result<Vec<(OrgId, DeviceGroupId, Recomputed)>> {
        let filters: Vec<(OrgId, DeviceGroupId, sqlx::types::Json<GroupFilter>)> = sql(
            "SELECT org_id, group_id, filter FROM device_group_filters ORDER BY org_id, group_id",
        )
        .fetch_all(self)
        .await?;
        let mut out = Vec::new();
        for (org, group, filter) in filters {
            if !filter.0.depends_on_time() {
                continue;
            }
            match self
                .store
                .org(org)
                .dynamic_groups()
                .recompute_group(
                    group,
                    &filter.0,
                    None,
                    &groups_clock_actor(),
                    TIME_REEVALUATION,
                )
                .await
            {
                Ok(changes) if !changes.added.is_empty() || !changes.removed.is_empty() => {
                    out.push((org, group, changes));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(%group, error = %e, "dynamic group re-evaluation failed"),
            }
        }
        Ok(out)
    }
}
