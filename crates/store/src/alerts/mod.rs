//! Alerts, alert rules, notification channels, and the evaluation of a rule's condition over
//! the stored samples and device states.
//!
//! Every change (a rule created, updated or deleted; an alert raised, acknowledged, resolved;
//! a notification delivered or failed) is written with its audit record in one transaction, and
//! every change to an alert also as an `alert_events` row, which is the history shown with the
//! alert. At most one unresolved alert exists per rule and device: a partial unique index makes
//! a second insert a no-op, whoever races.

use breeze_core::{
    Actor, AlertCondition, AlertStatus, AuditEvent, ChannelKind, Comparison, DeviceGroupId,
    DeviceId, Metric, OrgId, Severity, SiteId, TargetKind, Timestamp,
};
use chrono::Duration;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    CrossOrg, Result, StoreError, audit,
    sql::{Arg, Sql, Tx, sql},
};

mod channels;
mod lifecycle;
mod observe;

/// Samples may be this far apart and still count as covering a condition's duration: agents
/// send one every 30–60 s, so one lost sample does not stop a rule from firing.
pub const SAMPLE_GAP: Duration = Duration::seconds(120);

/// The most rules one organization may keep (each is evaluated every engine tick).
pub const MAX_RULES_PER_ORG: i64 = 200;

/// The most notification channels one rule may name.
pub const MAX_RULE_CHANNELS: usize = 10;

/// The longest cooldown a rule may ask for (a week).
pub const MAX_COOLDOWN_MINUTES: u32 = 10_080;

/// The longest a person may suppress an alert for (30 days).
pub const MAX_SUPPRESS_MINUTES: u32 = 43_200;

/// The largest page of alerts one listing returns.
pub const MAX_ALERT_PAGE: u32 = 200;

/// The longest rule or channel name, and the longest note on an alert.
pub const MAX_NAME_CHARS: usize = 255;
/// The longest rule description or alert note.
pub const MAX_NOTE_CHARS: usize = 2000;

/// Who the engine acts as in audit records and alert histories.
pub fn engine_actor() -> Actor {
    Actor::system("alert-engine")
}

/// What a rule watches, as the tools and the engine see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum RuleTarget {
    Organization,
    Site(SiteId),
    Group(DeviceGroupId),
    Device(DeviceId),
}

impl RuleTarget {
    pub(crate) fn kind(self) -> TargetKind {
        match self {
            RuleTarget::Organization => TargetKind::Organization,
            RuleTarget::Site(_) => TargetKind::Site,
            RuleTarget::Group(_) => TargetKind::Group,
            RuleTarget::Device(_) => TargetKind::Device,
        }
    }
}

/// A rule: a condition, what it watches, how loud and where it notifies.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AlertRule {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    pub description: Option<String>,
    #[sqlx(try_from = "String")]
    pub severity: Severity,
    pub enabled: bool,
    #[sqlx(json)]
    pub condition: AlertCondition,
    #[sqlx(try_from = "String")]
    pub target_kind: TargetKind,
    pub target_site_id: Option<SiteId>,
    pub target_group_id: Option<DeviceGroupId>,
    pub target_device_id: Option<DeviceId>,
    pub cooldown_minutes: i64,
    pub auto_resolve: bool,
    #[sqlx(json)]
    pub channel_ids: Vec<Uuid>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub deleted_at: Option<Timestamp>,
}

impl AlertRule {
    /// The rule's target as one value.
    pub fn target(&self) -> Result<RuleTarget> {
        target_of(
            self.target_kind,
            (
                self.target_site_id,
                self.target_group_id,
                self.target_device_id,
            ),
            || format!("rule {}", self.id),
        )
    }
}

/// A rule to create.
#[derive(Debug, Clone)]
pub struct NewRule {
    pub name: String,
    pub description: Option<String>,
    pub severity: Severity,
    pub enabled: bool,
    pub condition: AlertCondition,
    pub target: RuleTarget,
    pub cooldown_minutes: u32,
    pub auto_resolve: bool,
    pub channel_ids: Vec<Uuid>,
    pub created_by: String,
}

/// Changes to a rule; `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct RuleUpdate {
    pub name: Option<String>,
    pub description: Option<String>,
    pub severity: Option<Severity>,
    pub enabled: Option<bool>,
    pub condition: Option<AlertCondition>,
    pub target: Option<RuleTarget>,
    pub cooldown_minutes: Option<u32>,
    pub auto_resolve: Option<bool>,
    pub channel_ids: Option<Vec<Uuid>>,
}

/// One alert: a rule's condition held on a device.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Alert {
    pub id: Uuid,
    pub org_id: OrgId,
    pub rule_id: Uuid,
    pub device_id: DeviceId,
    #[sqlx(try_from = "String")]
    pub severity: Severity,
    #[sqlx(try_from = "String")]
    pub status: AlertStatus,
    pub title: String,
    pub message: String,
    /// The observed value that raised it.
    pub value: Option<f64>,
    pub triggered_at: Timestamp,
    pub acknowledged_at: Option<Timestamp>,
    pub acknowledged_by: Option<String>,
    pub resolved_at: Option<Timestamp>,
    pub resolved_by: Option<String>,
    /// Suppressed by a person: resolved, and its rule raises nothing on the device until then.
    pub suppressed_until: Option<Timestamp>,
}

/// One entry of an alert's history.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AlertEvent {
    pub id: Uuid,
    pub alert_id: Uuid,
    pub at: Timestamp,
    /// `raised`, `acknowledged`, `resolved`, `suppressed`, `auto_resolved`, `notified`,
    /// `notify_failed`.
    pub kind: String,
    pub actor: String,
    pub note: Option<String>,
    #[sqlx(json(nullable))]
    pub details: Option<Value>,
}

/// A place notifications go.
#[derive(Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct NotificationChannel {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub kind: ChannelKind,
    /// Email: `{"to": [...]}`; webhook: `{"url": "..."}`; in-app: `{}`.
    #[sqlx(json)]
    pub config: Value,
    /// The webhook's signing secret; never serialized, never in `Debug`.
    #[serde(skip)]
    pub secret: Option<String>,
    pub enabled: bool,
    pub created_at: Timestamp,
}

impl std::fmt::Debug for NotificationChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotificationChannel")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("config", &self.config)
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// A channel to create.
#[derive(Clone)]
pub struct NewChannel {
    pub name: String,
    pub kind: ChannelKind,
    pub config: Value,
    pub secret: Option<String>,
}

/// Which alerts a listing returns.
#[derive(Debug, Clone, Default)]
pub struct AlertFilter {
    pub status: Option<AlertStatus>,
    /// Unresolved (open or acknowledged) only; combined with `status` it narrows further.
    pub unresolved: bool,
    pub severity: Option<Severity>,
    pub device: Option<DeviceId>,
    pub rule: Option<Uuid>,
    /// Triggered at or after.
    pub since: Option<Timestamp>,
    /// Triggered before.
    pub until: Option<Timestamp>,
}

/// Where the next page of alerts starts: the last alert of the previous page (newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertCursor {
    pub triggered_at: Timestamp,
    pub id: Uuid,
}

impl AlertCursor {
    /// The opaque string form handed to clients.
    pub fn encode(&self) -> String {
        use base64::Engine as _;
        let raw = format!("{}|{}", self.triggered_at.to_rfc3339(), self.id);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    /// Parses [`AlertCursor::encode`]'s output.
    pub fn decode(s: &str) -> Result<Self> {
        use base64::Engine as _;
        let bad = || StoreError::Invalid("invalid cursor".to_owned());
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| bad())?;
        let raw = String::from_utf8(raw).map_err(|_| bad())?;
        let (ts, id) = raw.split_once('|').ok_or_else(bad)?;
        Ok(Self {
            triggered_at: ts.parse().map_err(|_| bad())?,
            id: id.parse().map_err(|_| bad())?,
        })
    }
}

/// One page of alerts, newest first.
#[derive(Debug, Clone)]
pub struct AlertPage {
    pub alerts: Vec<Alert>,
    pub next_cursor: Option<AlertCursor>,
}

/// Counts of alerts by status and, for unresolved ones, by severity.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertSummary {
    pub open: i64,
    pub acknowledged: i64,
    pub resolved: i64,
    /// Unresolved alerts per severity (every severity listed, zero included).
    pub unresolved_by_severity: Vec<(Severity, i64)>,
    pub rules: i64,
    pub enabled_rules: i64,
}

/// What a rule's condition looks like on one device now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Observed {
    /// The condition holds.
    Breaching,
    /// The condition does not hold.
    Clear,
    /// Neither: the breach has not lasted the duration yet, the newest sample is older than
    /// [`SAMPLE_GAP`], or (offline rules) the device is in maintenance or offline for less
    /// than the rule's minutes.
    Unknown,
}

/// A rule's condition on one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    pub device_id: DeviceId,
    pub state: Observed,
    /// The average over the duration (a level or a rate), the minutes offline, or the events
    /// matching in the window.
    pub value: Option<f64>,
    /// Samples (or matching events) the decision rests on (0 for offline rules).
    pub samples: i64,
}

const RULE_COLUMNS: &str = "id, org_id, name, description, severity, enabled, condition, \
    target_kind, target_site_id, target_group_id, target_device_id, cooldown_minutes, \
    auto_resolve, channel_ids, created_by, created_at, updated_at, deleted_at";
pub(crate) const ALERT_COLUMNS: &str = "id, org_id, rule_id, device_id, severity, status, title, message, \
    value, triggered_at, acknowledged_at, acknowledged_by, resolved_at, resolved_by, suppressed_until";
const CHANNEL_COLUMNS: &str = "id, org_id, name, kind, config, secret, enabled, created_at";

pub(crate) fn check_text(field: &str, value: &str, max: usize) -> Result<()> {
    if value.trim().is_empty() {
        return Err(StoreError::Invalid(format!("{field} cannot be empty")));
    }
    if value.chars().count() > max {
        return Err(StoreError::Invalid(format!(
            "{field} is longer than {max} characters"
        )));
    }
    Ok(())
}

fn check_note(note: Option<&str>) -> Result<()> {
    match note {
        Some(n) if n.chars().count() > MAX_NOTE_CHARS => Err(StoreError::Invalid(format!(
            "note is longer than {MAX_NOTE_CHARS} characters"
        ))),
        _ => Ok(()),
    }
}

/// The SQL expression of a level metric over `device_metrics`.
fn level_expr(metric: Metric) -> &'static str {
    match metric {
        Metric::Cpu => "cpu_percent",
        Metric::Memory => "ram_percent",
        Metric::Disk => "disk_percent",
        Metric::DiskFree => "(100.0 - disk_percent)",
        Metric::NetworkIn => "net_rx_bytes",
        Metric::NetworkOut => "net_tx_bytes",
    }
}

/// Appends ` AND {column} IN (the target's devices)` to `q` (`$1` is the organization).
fn push_target(q: &mut Sql, column: &str, target: RuleTarget) {
    match target {
        RuleTarget::Organization => {}
        RuleTarget::Site(site) => {
            let p = q.arg(site);
            q.push(&format!(
                " AND {column} IN (SELECT id FROM devices WHERE org_id = $1 AND site_id = {p})"
            ));
        }
        RuleTarget::Group(group) => {
            let p = q.arg(group);
            q.push(&format!(
                " AND {column} IN (SELECT device_id FROM device_group_members \
                 WHERE org_id = $1 AND group_id = {p})"
            ));
        }
        RuleTarget::Device(device) => {
            let p = q.arg(device);
            q.push(&format!(" AND {column} = {p}"));
        }
    }
}

/// Appends ` AND {column} IN (devices)` when the evaluation is for some devices only.
fn push_only(q: &mut Sql, column: &str, only: Option<&[DeviceId]>) {
    if let Some(devices) = only {
        let list: Vec<String> = devices.iter().map(|d| q.arg(*d)).collect();
        q.push(&format!(" AND {column} IN ({})", list.join(", ")));
    }
}

#[derive(sqlx::FromRow)]
struct LevelRow {
    device_id: DeviceId,
    samples: i64,
    breach_start: Option<Timestamp>,
    last_ok: Option<Timestamp>,
    newest: Timestamp,
    average: f64,
}

#[derive(sqlx::FromRow)]
struct RateRow {
    device_id: DeviceId,
    samples: i64,
    first_at: Timestamp,
    total: f64,
}

#[derive(sqlx::FromRow)]
struct PresenceRow {
    id: DeviceId,
    #[sqlx(try_from = "String")]
    status: breeze_core::DeviceStatus,
    last_seen_at: Option<Timestamp>,
}

impl CrossOrg<'_> {
    /// Enabled, undeleted rules of every organization with ids after `after`, by id, at most
    /// `limit`: the engine's walk over the rules, a bounded slice per tick.
    pub async fn alert_rules_after(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<AlertRule>> {
        let mut q = sql(format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE enabled = $1 AND deleted_at IS NULL"
        ))
        .bind(true);
        if let Some(after) = after {
            let p = q.arg(after);
            q.push(&format!(" AND id > {p}"));
        }
        let l = q.arg(i64::from(limit));
        q.push(&format!(" ORDER BY id LIMIT {l}"));
        q.fetch_all(self).await
    }
}

impl crate::OrgAlerts<'_> {
    // ---- rules -----------------------------------------------------------------------------

    /// The target exists in this organization (another's is `NotFound`, like a missing one).
    pub(crate) async fn check_target(&self, target: RuleTarget) -> Result<()> {
        match target {
            RuleTarget::Organization => Ok(()),
            RuleTarget::Site(s) => self.whole().tenancy().get_site(s).await.map(drop),
            RuleTarget::Group(g) => self.whole().tenancy().get_group(g).await.map(drop),
            RuleTarget::Device(d) => self.whole().devices().get_device(d).await.map(drop),
        }
    }

    async fn check_channels(&self, ids: &[Uuid]) -> Result<()> {
        if ids.len() > MAX_RULE_CHANNELS {
            return Err(StoreError::Invalid(format!(
                "a rule may notify at most {MAX_RULE_CHANNELS} channels"
            )));
        }
        for id in ids {
            self.get_channel(*id).await?;
        }
        Ok(())
    }

    fn check_rule_fields(
        condition: &AlertCondition,
        cooldown: u32,
        description: Option<&str>,
    ) -> Result<()> {
        condition.validate().map_err(StoreError::Invalid)?;
        if cooldown > MAX_COOLDOWN_MINUTES {
            return Err(StoreError::Invalid(format!(
                "cooldownMinutes is over the maximum of {MAX_COOLDOWN_MINUTES}"
            )));
        }
        if description.is_some_and(|d| d.chars().count() > MAX_NOTE_CHARS) {
            return Err(StoreError::Invalid(format!(
                "description is longer than {MAX_NOTE_CHARS} characters"
            )));
        }
        Ok(())
    }

    /// Creates a rule after checking its condition, that its target and channels are this
    /// organization's, and the organization's rule count.
    pub async fn create_rule(&self, new: NewRule, audit: AuditEvent) -> Result<AlertRule> {
        check_text("name", &new.name, MAX_NAME_CHARS)?;
        Self::check_rule_fields(
            &new.condition,
            new.cooldown_minutes,
            new.description.as_deref(),
        )?;
        self.check_target(new.target).await?;
        let mut channels = new.channel_ids.clone();
        channels.sort_unstable();
        channels.dedup();
        self.check_channels(&channels).await?;
        let count =
            sql("SELECT COUNT(*) FROM alert_rules WHERE org_id = $1 AND deleted_at IS NULL")
                .bind(self.org)
                .fetch_scalar::<i64>(self)
                .await?;
        if count >= MAX_RULES_PER_ORG {
            return Err(StoreError::Conflict(format!(
                "the organization already has {MAX_RULES_PER_ORG} alert rules"
            )));
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let (site, group, device) = target_columns(new.target);
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO alert_rules ({RULE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(new.description.as_deref())
        .bind(new.severity.as_str())
        .bind(new.enabled)
        .bind(Arg::json(&new.condition))
        .bind(new.target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(i64::from(new.cooldown_minutes))
        .bind(new.auto_resolve)
        .bind(Arg::json(&channels))
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(now)
        .bind(None::<Timestamp>)
        .execute(&mut tx)
        .await
        .map_err(|e| {
            e.conflict_as(|| format!("an alert rule named {:?} already exists", new.name))
        })?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": new.name, "severity": new.severity, "condition": new.condition,
            "target": new.target,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_rule(id).await
    }

    /// One rule of this organization that is not deleted.
    pub async fn get_rule(&self, id: Uuid) -> Result<AlertRule> {
        sql(format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE id = $1 AND org_id = $2 \
             AND deleted_at IS NULL"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("alert rule"))
    }

    /// The rules in use, by name.
    pub async fn list_rules(&self) -> Result<Vec<AlertRule>> {
        sql(format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE org_id = $1 AND deleted_at IS NULL \
             ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Changes a rule; the audit record holds the fields changed.
    pub async fn update_rule(
        &self,
        id: Uuid,
        update: RuleUpdate,
        audit: AuditEvent,
    ) -> Result<AlertRule> {
        let current = self.get_rule(id).await?;
        if let Some(name) = &update.name {
            check_text("name", name, MAX_NAME_CHARS)?;
        }
        let condition = update
            .condition
            .clone()
            .unwrap_or(current.condition.clone());
        let cooldown = match update.cooldown_minutes {
            Some(c) => c,
            None => u32::try_from(current.cooldown_minutes).unwrap_or(MAX_COOLDOWN_MINUTES),
        };
        Self::check_rule_fields(&condition, cooldown, update.description.as_deref())?;
        let target = match update.target {
            Some(t) => {
                self.check_target(t).await?;
                t
            }
            None => current.target()?,
        };
        let channels = match &update.channel_ids {
            Some(ids) => {
                let mut ids = ids.clone();
                ids.sort_unstable();
                ids.dedup();
                self.check_channels(&ids).await?;
                ids
            }
            None => current.channel_ids.clone(),
        };
        let name = update.name.clone().unwrap_or(current.name.clone());
        let now = self.store.clock.now();
        let (site, group, device) = target_columns(target);
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE alert_rules SET name = $1, description = $2, severity = $3, enabled = $4, \
             condition = $5, target_kind = $6, target_site_id = $7, target_group_id = $8, \
             target_device_id = $9, cooldown_minutes = $10, auto_resolve = $11, \
             channel_ids = $12, updated_at = $13 \
             WHERE id = $14 AND org_id = $15 AND deleted_at IS NULL",
        )
        .bind(name.as_str())
        .bind(
            update
                .description
                .as_deref()
                .or(current.description.as_deref()),
        )
        .bind(update.severity.unwrap_or(current.severity).as_str())
        .bind(update.enabled.unwrap_or(current.enabled))
        .bind(Arg::json(&condition))
        .bind(target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(i64::from(cooldown))
        .bind(update.auto_resolve.unwrap_or(current.auto_resolve))
        .bind(Arg::json(&channels))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("an alert rule named {name:?} already exists")))?;
        if n == 0 {
            return Err(StoreError::NotFound("alert rule"));
        }
        let changed = audit::changed_fields([
            ("name", update.name.is_some()),
            ("description", update.description.is_some()),
            ("severity", update.severity.is_some()),
            ("enabled", update.enabled.is_some()),
            ("condition", update.condition.is_some()),
            ("target", update.target.is_some()),
            ("cooldownMinutes", update.cooldown_minutes.is_some()),
            ("autoResolve", update.auto_resolve.is_some()),
            ("channelIds", update.channel_ids.is_some()),
        ]);
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "changed": changed, "condition": condition }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_rule(id).await
    }

    /// Deletes a rule (softly: its alerts keep naming it) and resolves its unresolved alerts,
    /// each with a history entry, in one transaction with the audit record.
    pub async fn delete_rule(&self, id: Uuid, actor: &Actor, audit: AuditEvent) -> Result<u64> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("UPDATE alert_rules SET deleted_at = $1, enabled = $2 \
             WHERE id = $3 AND org_id = $4 AND deleted_at IS NULL")
        .bind(now)
        .bind(false)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Err(StoreError::NotFound("alert rule"));
        }
        let open: Vec<(Uuid,)> = sql(
            "UPDATE alerts SET status = 'resolved', resolved_at = $1, resolved_by = $2 \
             WHERE org_id = $3 AND rule_id = $4 AND status <> 'resolved' RETURNING id",
        )
        .bind(now)
        .bind(actor.to_string())
        .bind(self.org)
        .bind(id)
        .fetch_all(&mut tx)
        .await?;
        for (alert,) in &open {
            insert_event(
                &mut tx,
                self.org,
                *alert,
                now,
                "resolved",
                actor,
                Some("the rule was deleted"),
                None,
            )
            .await?;
        }
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "alertsResolved": open.len() }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(open.len() as u64)
    }

    // ---- reading alerts --------------------------------------------------------------------

    /// One alert of this organization.
    pub async fn get_alert(&self, id: Uuid) -> Result<Alert> {
        sql(format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("alert"))
    }

    /// An alert's history, oldest first.
    pub async fn alert_events(&self, alert: Uuid) -> Result<Vec<AlertEvent>> {
        sql(
            "SELECT id, alert_id, at, kind, actor, note, details FROM alert_events \
             WHERE org_id = $1 AND alert_id = $2 ORDER BY at, id",
        )
        .bind(self.org)
        .bind(alert)
        .fetch_all(self)
        .await
    }

    /// Alerts matching `filter`, newest first, `limit` per page (1–[`MAX_ALERT_PAGE`]),
    /// starting after `after`.
    pub async fn list_alerts(
        &self,
        filter: &AlertFilter,
        after: Option<AlertCursor>,
        limit: u32,
    ) -> Result<AlertPage> {
        let limit = limit.clamp(1, MAX_ALERT_PAGE);
        let mut q = sql(format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(status) = filter.status {
            let p = q.arg(status.as_str());
            q.push(&format!(" AND status = {p}"));
        }
        if filter.unresolved {
            q.push(" AND status <> 'resolved'");
        }
        if let Some(severity) = filter.severity {
            let p = q.arg(severity.as_str());
            q.push(&format!(" AND severity = {p}"));
        }
        if let Some(device) = filter.device {
            let p = q.arg(device);
            q.push(&format!(" AND device_id = {p}"));
        }
        if let Some(rule) = filter.rule {
            let p = q.arg(rule);
            q.push(&format!(" AND rule_id = {p}"));
        }
        if let Some(since) = filter.since {
            let p = q.arg(since);
            q.push(&format!(" AND triggered_at >= {p}"));
        }
        // Resuming, the cursor is the upper bound (see `Sql::push_keyset`).
        if let Some(until) = filter.until.filter(|_| after.is_none()) {
            let p = q.arg(until);
            q.push(&format!(" AND triggered_at < {p}"));
        }
        if let Some(c) = after {
            q.push_keyset("triggered_at", c.triggered_at, "id", c.id, true);
        }
        let fetch = q.arg(i64::from(limit) + 1);
        q.push(&format!(
            " ORDER BY triggered_at DESC, id DESC LIMIT {fetch}"
        ));
        let mut alerts: Vec<Alert> = q.fetch_all(self).await?;
        let more = alerts.len() > limit as usize;
        alerts.truncate(limit as usize);
        let next_cursor = if more {
            alerts.last().map(|a| AlertCursor {
                triggered_at: a.triggered_at,
                id: a.id,
            })
        } else {
            None
        };
        Ok(AlertPage {
            alerts,
            next_cursor,
        })
    }

    /// How many unresolved alerts each of `devices` has (at most 200 devices; those with none
    /// are absent), in one query: the device list's column.
    pub async fn unresolved_counts(
        &self,
        devices: &[DeviceId],
    ) -> Result<std::collections::HashMap<DeviceId, i64>> {
        if devices.is_empty() || devices.len() > 200 {
            return Ok(std::collections::HashMap::new());
        }
        let mut q = sql("SELECT device_id, COUNT(*) FROM alerts WHERE org_id = $1 \
             AND status <> 'resolved'")
        .bind(self.org);
        push_only(&mut q, "device_id", Some(devices));
        q.push(" GROUP BY device_id");
        let rows: Vec<(DeviceId, i64)> = q.fetch_all(self).await?;
        Ok(rows.into_iter().collect())
    }

    /// What the unresolved alerts look like, cheaply: per status, how many and the newest
    /// one's time. Any alert raised, acknowledged or resolved changes it; the dashboard's live
    /// updates poll it.
    pub async fn unresolved_signature(&self) -> Result<Vec<(String, i64, Option<Timestamp>)>> {
        sql(
            "SELECT status, COUNT(*), MAX(triggered_at) FROM alerts WHERE org_id = $1 \
             AND status <> 'resolved' GROUP BY status ORDER BY status",
        )
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Counts by status, unresolved counts by severity, and the rules in use.
    pub async fn alert_summary(&self) -> Result<AlertSummary> {
        let rows: Vec<(String, String, i64)> = sql(
            "SELECT status, severity, COUNT(*) FROM alerts WHERE org_id = $1 \
             GROUP BY status, severity",
        )
        .bind(self.org)
        .fetch_all(self)
        .await?;
        let mut s = AlertSummary {
            unresolved_by_severity: Severity::ALL.iter().rev().map(|s| (*s, 0)).collect(),
            ..AlertSummary::default()
        };
        for (status, severity, n) in rows {
            match status.parse::<AlertStatus>() {
                Ok(AlertStatus::Open) => s.open += n,
                Ok(AlertStatus::Acknowledged) => s.acknowledged += n,
                Ok(AlertStatus::Resolved) => {
                    s.resolved += n;
                    continue;
                }
                Err(e) => return Err(StoreError::Corrupt(e.to_string())),
            }
            if let Some(entry) = s
                .unresolved_by_severity
                .iter_mut()
                .find(|(sev, _)| sev.as_str() == severity)
            {
                entry.1 += n;
            }
        }
        let (rules, enabled): (i64, i64) = sql(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN enabled THEN 1 ELSE 0 END), 0) \
             FROM alert_rules WHERE org_id = $1 AND deleted_at IS NULL",
        )
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .unwrap_or((0, 0));
        s.rules = rules;
        s.enabled_rules = enabled;
        Ok(s)
    }
}

/// A row's target from its columns (the inverse of [`target_columns`]); `row` names the row
/// when the id its kind needs is missing.
pub(crate) fn target_of(
    kind: TargetKind,
    (site, group, device): (Option<SiteId>, Option<DeviceGroupId>, Option<DeviceId>),
    row: impl Fn() -> String,
) -> Result<RuleTarget> {
    let missing = || StoreError::Corrupt(format!("{} has no target id", row()));
    Ok(match kind {
        TargetKind::Organization => RuleTarget::Organization,
        TargetKind::Site => RuleTarget::Site(site.ok_or_else(missing)?),
        TargetKind::Group => RuleTarget::Group(group.ok_or_else(missing)?),
        TargetKind::Device => RuleTarget::Device(device.ok_or_else(missing)?),
    })
}

pub(crate) fn target_columns(
    target: RuleTarget,
) -> (Option<SiteId>, Option<DeviceGroupId>, Option<DeviceId>) {
    match target {
        RuleTarget::Organization => (None, None, None),
        RuleTarget::Site(s) => (Some(s), None, None),
        RuleTarget::Group(g) => (None, Some(g), None),
        RuleTarget::Device(d) => (None, None, Some(d)),
    }
}

fn merge_note(details: Value, note: &str) -> Value {
    match details {
        Value::Object(mut map) => {
            map.insert("note".into(), Value::String(note.to_owned()));
            Value::Object(map)
        }
        _ => serde_json::json!({ "note": note }),
    }
}

#[allow(clippy::too_many_arguments)] // one row's columns
async fn insert_event(
    tx: &mut Tx,
    org: OrgId,
    alert: Uuid,
    at: Timestamp,
    kind: &str,
    actor: &Actor,
    note: Option<&str>,
    details: Option<&Value>,
) -> Result<()> {
    sql(
        "INSERT INTO alert_events (id, org_id, alert_id, at, kind, actor, note, details) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(Uuid::now_v7())
    .bind(org)
    .bind(alert)
    .bind(at)
    .bind(kind)
    .bind(actor.to_string())
    .bind(note)
    .bind(details.map_or(Arg::Json(None), Arg::json))
    .execute(tx)
    .await
    .map(drop)
}
