//! Maintenance windows: when a target (the organization, a site, a group, a device) is under
//! maintenance, and the alerts that were suppressed because of it.
//!
//! A window's schedule (`breeze_core::MaintenanceSchedule`) is stored as JSON with its IANA
//! time zone; whether it is open is decided in Rust at the caller's instant (the store's
//! `Clock`). The alert engine asks [`crate::OrgMaintenance::maintenance_covering`] before raising, and a
//! breach it does not raise is kept once per rule, device, window and occurrence in
//! `alert_suppressions` ([`crate::OrgMaintenance::record_suppression`], audited `alert.suppress`), which
//! `manage_alert_rules get` and `manage_maintenance_windows get` show.

use std::collections::{HashMap, HashSet};

use breeze_core::{
    Actor, AuditEvent, DeviceGroupId, DeviceId, MaintenanceSchedule, Occurrence, OrgId, SiteId,
    TargetKind, Timestamp, maintenance::parse_time_zone,
};
use serde::Serialize;
use uuid::Uuid;

use crate::{
    Result, RuleTarget, StoreError,
    alerts::{check_text, target_columns, target_of},
    audit,
    sql::{Arg, Tx, sql},
};

/// The most maintenance windows one organization may keep.
pub const MAX_WINDOWS_PER_ORG: i64 = 200;

/// A maintenance window as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct MaintenanceWindow {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    pub description: Option<String>,
    #[sqlx(try_from = "String")]
    pub target_kind: TargetKind,
    pub target_site_id: Option<SiteId>,
    pub target_group_id: Option<DeviceGroupId>,
    pub target_device_id: Option<DeviceId>,
    /// An IANA name, checked when written.
    pub time_zone: String,
    #[sqlx(json)]
    pub schedule: MaintenanceSchedule,
    pub suppress_alerts: bool,
    pub enabled: bool,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl MaintenanceWindow {
    /// The window's target as one value.
    pub fn target(&self) -> Result<RuleTarget> {
        target_of(
            self.target_kind,
            (
                self.target_site_id,
                self.target_group_id,
                self.target_device_id,
            ),
            || format!("window {}", self.id),
        )
    }

    /// The occurrence open at `t` (never while disabled).
    pub fn open_at(&self, t: Timestamp) -> Option<Occurrence> {
        if !self.enabled {
            return None;
        }
        let tz = parse_time_zone(&self.time_zone).ok()?;
        self.schedule.occurrence_at(tz, t)
    }

    /// The occurrence open at `t` or the next one (within a week for weekly windows).
    pub fn current_or_next(&self, t: Timestamp) -> Option<Occurrence> {
        let tz = parse_time_zone(&self.time_zone).ok()?;
        self.schedule.current_or_next(tz, t)
    }
}

/// A window to create.
#[derive(Debug, Clone)]
pub struct NewWindow {
    pub name: String,
    pub description: Option<String>,
    pub target: RuleTarget,
    pub time_zone: String,
    pub schedule: MaintenanceSchedule,
    pub suppress_alerts: bool,
    pub enabled: bool,
    pub created_by: String,
}

/// Changes to a window; `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct WindowUpdate {
    pub name: Option<String>,
    pub description: Option<String>,
    pub target: Option<RuleTarget>,
    pub time_zone: Option<String>,
    pub schedule: Option<MaintenanceSchedule>,
    pub suppress_alerts: Option<bool>,
    pub enabled: Option<bool>,
}

/// A breach a rule did not raise because its device was in maintenance.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AlertSuppression {
    pub id: Uuid,
    pub rule_id: Uuid,
    pub device_id: DeviceId,
    pub window_id: Uuid,
    pub window_name: String,
    pub occurrence_start: Timestamp,
    pub occurrence_end: Timestamp,
    /// When the engine first held the alert back.
    pub at: Timestamp,
    pub value: Option<f64>,
}

const WINDOW_COLUMNS: &str = "id, org_id, name, description, target_kind, target_site_id, \
    target_group_id, target_device_id, time_zone, schedule, suppress_alerts, enabled, \
    created_by, created_at, updated_at";
const SUPPRESSION_COLUMNS: &str = "id, rule_id, device_id, window_id, window_name, \
    occurrence_start, occurrence_end, at, value";

fn check_window(
    time_zone: &str,
    schedule: &MaintenanceSchedule,
    description: Option<&str>,
) -> Result<()> {
    parse_time_zone(time_zone).map_err(StoreError::Invalid)?;
    schedule.validate().map_err(StoreError::Invalid)?;
    if description.is_some_and(|d| d.chars().count() > crate::alerts::MAX_NOTE_CHARS) {
        return Err(StoreError::Invalid(format!(
            "description is longer than {} characters",
            crate::alerts::MAX_NOTE_CHARS
        )));
    }
    Ok(())
}

impl crate::OrgMaintenance<'_> {
    /// Creates a window after checking its schedule, time zone, and that its target is this
    /// organization's.
    pub async fn create_window(
        &self,
        new: NewWindow,
        audit: AuditEvent,
    ) -> Result<MaintenanceWindow> {
        check_text("name", &new.name, crate::alerts::MAX_NAME_CHARS)?;
        check_window(&new.time_zone, &new.schedule, new.description.as_deref())?;
        self.whole().alerts().check_target(new.target).await?;
        self.whole()
            .check_room(
                "maintenance_windows",
                MAX_WINDOWS_PER_ORG,
                "maintenance windows",
            )
            .await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let (site, group, device) = target_columns(new.target);
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO maintenance_windows ({WINDOW_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, \
             $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(new.description.as_deref())
        .bind(new.target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(new.time_zone.as_str())
        .bind(Arg::json(&new.schedule))
        .bind(new.suppress_alerts)
        .bind(new.enabled)
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| {
            e.conflict_as(|| format!("a maintenance window named {:?} exists", new.name))
        })?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": new.name, "target": new.target, "timeZone": new.time_zone,
            "schedule": new.schedule, "suppressAlerts": new.suppress_alerts,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_window(id).await
    }

    /// One window of this organization.
    pub async fn get_window(&self, id: Uuid) -> Result<MaintenanceWindow> {
        sql(format!(
            "SELECT {WINDOW_COLUMNS} FROM maintenance_windows WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("maintenance window"))
    }

    /// The organization's windows, by name.
    pub async fn list_windows(&self) -> Result<Vec<MaintenanceWindow>> {
        sql(format!(
            "SELECT {WINDOW_COLUMNS} FROM maintenance_windows WHERE org_id = $1 ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Changes a window; the audit record names the fields changed.
    pub async fn update_window(
        &self,
        id: Uuid,
        update: WindowUpdate,
        audit: AuditEvent,
    ) -> Result<MaintenanceWindow> {
        let current = self.get_window(id).await?;
        if let Some(name) = &update.name {
            check_text("name", name, crate::alerts::MAX_NAME_CHARS)?;
        }
        let time_zone = update
            .time_zone
            .clone()
            .unwrap_or(current.time_zone.clone());
        let schedule = update.schedule.clone().unwrap_or(current.schedule.clone());
        check_window(&time_zone, &schedule, update.description.as_deref())?;
        let target = match update.target {
            Some(t) => {
                self.whole().alerts().check_target(t).await?;
                t
            }
            None => current.target()?,
        };
        let name = update.name.clone().unwrap_or(current.name.clone());
        let now = self.store.clock.now();
        let (site, group, device) = target_columns(target);
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE maintenance_windows SET name = $1, description = $2, target_kind = $3, \
             target_site_id = $4, target_group_id = $5, target_device_id = $6, time_zone = $7, \
             schedule = $8, suppress_alerts = $9, enabled = $10, updated_at = $11 \
             WHERE id = $12 AND org_id = $13",
        )
        .bind(name.as_str())
        .bind(
            update
                .description
                .as_deref()
                .or(current.description.as_deref()),
        )
        .bind(target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(time_zone.as_str())
        .bind(Arg::json(&schedule))
        .bind(update.suppress_alerts.unwrap_or(current.suppress_alerts))
        .bind(update.enabled.unwrap_or(current.enabled))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a maintenance window named {name:?} exists")))?;
        if n == 0 {
            return Err(StoreError::NotFound("maintenance window"));
        }
        let changed = audit::changed_fields([
            ("name", update.name.is_some()),
            ("description", update.description.is_some()),
            ("target", update.target.is_some()),
            ("timeZone", update.time_zone.is_some()),
            ("schedule", update.schedule.is_some()),
            ("suppressAlerts", update.suppress_alerts.is_some()),
            ("enabled", update.enabled.is_some()),
        ]);
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "changed": changed, "schedule": schedule }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_window(id).await
    }

    /// Deletes a window (its suppression records stay, naming it).
    pub async fn delete_window(&self, id: Uuid, audit: AuditEvent) -> Result<MaintenanceWindow> {
        let current = self.get_window(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        audit::delete_row(
            &mut tx,
            self.org,
            "maintenance_windows",
            id,
            "maintenance window",
        )
        .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "name": current.name }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(current)
    }

    /// The windows open at `at` that cover `target`: for a device, those of the organization,
    /// its site, its groups and itself; for a site or group, those of the organization and of
    /// it; for the organization, every open window. Each with its open occurrence.
    pub async fn open_windows(
        &self,
        target: RuleTarget,
        at: Timestamp,
    ) -> Result<Vec<(MaintenanceWindow, Occurrence)>> {
        let (site, groups) = match target {
            RuleTarget::Device(d) => {
                let device = self.whole().devices().get_device(d).await?;
                let groups: HashSet<DeviceGroupId> = self
                    .whole()
                    .tenancy()
                    .groups_of_device(d)
                    .await?
                    .into_iter()
                    .map(|g| g.id)
                    .collect();
                (Some(device.site_id), groups)
            }
            RuleTarget::Site(s) => {
                self.whole().tenancy().get_site(s).await?;
                (Some(s), HashSet::new())
            }
            RuleTarget::Group(g) => {
                self.whole().tenancy().get_group(g).await?;
                (None, HashSet::from([g]))
            }
            RuleTarget::Organization => (None, HashSet::new()),
        };
        let windows = self.list_windows().await?;
        Ok(windows
            .into_iter()
            .filter_map(|w| {
                let occurrence = w.open_at(at)?;
                let covers = match (target, w.target().ok()?) {
                    (RuleTarget::Organization, _) | (_, RuleTarget::Organization) => true,
                    (_, RuleTarget::Site(s)) => site == Some(s),
                    (_, RuleTarget::Group(g)) => groups.contains(&g),
                    (RuleTarget::Device(d), RuleTarget::Device(wd)) => d == wd,
                    (_, RuleTarget::Device(_)) => false,
                };
                covers.then_some((w, occurrence))
            })
            .collect())
    }

    /// Of `devices`, those under a window that is open at `at` and suppresses alerts, each with
    /// one such window and its occurrence. Reads nothing more when no such window is open.
    pub async fn maintenance_covering(
        &self,
        devices: &[DeviceId],
        at: Timestamp,
    ) -> Result<HashMap<DeviceId, (MaintenanceWindow, Occurrence)>> {
        let mut covered = HashMap::new();
        let open = self
            .windows_over(devices, |w| {
                if w.suppress_alerts {
                    w.open_at(at)
                } else {
                    None
                }
            })
            .await?;
        for (window, occurrence, members) in open {
            for d in members {
                covered
                    .entry(d)
                    .or_insert_with(|| (window.clone(), occurrence));
            }
        }
        Ok(covered)
    }

    /// Each of `devices` with the enabled windows that cover it (the organization's, its
    /// site's, its groups' and its own), open or not: what a deployment that runs only in
    /// maintenance windows asks before sending a device's run.
    pub async fn windows_covering(
        &self,
        devices: &[DeviceId],
    ) -> Result<HashMap<DeviceId, Vec<MaintenanceWindow>>> {
        let mut covering: HashMap<DeviceId, Vec<MaintenanceWindow>> =
            devices.iter().map(|d| (*d, Vec::new())).collect();
        for (window, (), members) in self
            .windows_over(devices, |w| w.enabled.then_some(()))
            .await?
        {
            for d in members {
                if let Some(list) = covering.get_mut(&d) {
                    list.push(window.clone());
                }
            }
        }
        Ok(covering)
    }

    /// The one walk behind [`crate::OrgMaintenance::maintenance_covering`] and
    /// [`crate::OrgMaintenance::windows_covering`]: each window of the organization that `select` keeps
    /// (with what `select` made of it, e.g. its open occurrence), with those of `devices` it
    /// covers — its whole organization, its site's devices, its group's members or its one
    /// device. Windows that cover none of `devices` are left out; nothing is read when
    /// `devices` is empty, and one query per kept site or group window otherwise.
    async fn windows_over<T>(
        &self,
        devices: &[DeviceId],
        select: impl Fn(&MaintenanceWindow) -> Option<T>,
    ) -> Result<Vec<(MaintenanceWindow, T, Vec<DeviceId>)>> {
        let mut out = Vec::new();
        if devices.is_empty() {
            return Ok(out);
        }
        for window in self.list_windows().await? {
            let Some(kept) = select(&window) else {
                continue;
            };
            let members: Option<HashSet<DeviceId>> = match window.target()? {
                RuleTarget::Organization => None,
                RuleTarget::Device(d) => Some(HashSet::from([d])),
                RuleTarget::Site(s) => Some(
                    sql("SELECT id FROM devices WHERE org_id = $1 AND site_id = $2")
                        .bind(self.org)
                        .bind(s)
                        .fetch_all::<(DeviceId,)>(self)
                        .await?
                        .into_iter()
                        .map(|(d,)| d)
                        .collect(),
                ),
                RuleTarget::Group(g) => Some(
                    sql("SELECT device_id FROM device_group_members \
                         WHERE org_id = $1 AND group_id = $2")
                    .bind(self.org)
                    .bind(g)
                    .fetch_all::<(DeviceId,)>(self)
                    .await?
                    .into_iter()
                    .map(|(d,)| d)
                    .collect(),
                ),
            };
            let covered: Vec<DeviceId> = devices
                .iter()
                .filter(|d| members.as_ref().is_none_or(|m| m.contains(d)))
                .copied()
                .collect();
            if !covered.is_empty() {
                out.push((window, kept, covered));
            }
        }
        Ok(out)
    }

    /// Records that `rule` did not raise on `device` because of `window`'s `occurrence`: once
    /// per rule, device, window and occurrence, audited (`alert.suppress`) when new. Returns
    /// whether this call recorded it.
    pub async fn record_suppression(
        &self,
        rule: Uuid,
        device: DeviceId,
        window: &MaintenanceWindow,
        occurrence: Occurrence,
        value: Option<f64>,
    ) -> Result<bool> {
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(format!(
            "INSERT INTO alert_suppressions (org_id, {SUPPRESSION_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING"
        ))
        .bind(self.org)
        .bind(id)
        .bind(rule)
        .bind(device)
        .bind(window.id)
        .bind(window.name.as_str())
        .bind(occurrence.starts_at)
        .bind(occurrence.ends_at)
        .bind(now)
        .bind(value)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            drop(tx);
            return Ok(false);
        }
        let audit = AuditEvent::new(suppression_actor(), "alert.suppress", "alert_rule")
            .org(self.org)
            .resource(rule)
            .details(serde_json::json!({
                "deviceId": device, "windowId": window.id, "window": window.name,
                "occurrence": occurrence, "value": value,
            }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The newest suppressions of a rule (`rule`) or under a window (`window`), at most
    /// `limit`.
    pub async fn suppressions(
        &self,
        rule: Option<Uuid>,
        window: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<AlertSuppression>> {
        let mut q = sql(format!(
            "SELECT {SUPPRESSION_COLUMNS} FROM alert_suppressions WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(rule) = rule {
            let p = q.arg(rule);
            q.push(&format!(" AND rule_id = {p}"));
        }
        if let Some(window) = window {
            let p = q.arg(window);
            q.push(&format!(" AND window_id = {p}"));
        }
        let l = q.arg(i64::from(limit.clamp(1, 200)));
        q.push(&format!(" ORDER BY at DESC, id DESC LIMIT {l}"));
        q.fetch_all(self).await
    }
}

/// Who suppresses alerts in audit records: the engine, which consults the windows.
fn suppression_actor() -> Actor {
    crate::alerts::engine_actor()
}
