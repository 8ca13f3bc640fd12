//! Staged deployments (migration 0027): a payload (a library script with its parameters, or a
//! package to install through the patch layer) for
//! the devices of a target, in rings, with a failure ceiling and per-ring success thresholds,
//! and each device's part.
//!
//! The devices and their rings are fixed when the deployment is created
//! ([`breeze_core::deployment::assign_rings`]), so what it will touch is known and reviewable
//! before `start`. Every state change — create, start, pause (by a person or by the worker, with
//! the reason), resume, cancel, a ring advancing, the end — is one conditional update written
//! with its audit record in one transaction, so two callers (or instances) never both move the
//! same deployment. The worker's lease is the deployment's own `next_step_at`
//! ([`Store::claim_deployment_step`]): the instance that moves it forward steps the deployment
//! (the technique of automation schedules and compliance evaluations). The store runs nothing:
//! the server's worker runs each ring's payload through the tool pipeline as the owner.

use std::collections::BTreeMap;

use breeze_core::{
    AuditEvent, DeploymentStatus, DeviceGroupId, DeviceId, DeviceRunStatus, OrgId, SiteId,
    TargetKind, Timestamp,
    deployment::{RingMembers, RingTally, assign_rings},
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    CrossOrg, Result, RuleTarget, Store, StoreError,
    alerts::{MAX_NAME_CHARS, MAX_NOTE_CHARS, check_text, target_columns},
    audit,
    scheduled::RowLease,
    sql::{Arg, Tx, sql},
};

/// The most deployments one organization may keep.
pub const MAX_DEPLOYMENTS_PER_ORG: i64 = 500;
/// The most devices one deployment reaches.
pub const MAX_DEPLOYMENT_DEVICES: usize = 500;
/// The most rings one deployment asks for (one more may hold the devices left over).
pub const MAX_RINGS: usize = 10;
/// How long one instance holds a deployment it steps before another may take it over.
pub const STEP_LEASE: chrono::Duration = chrono::Duration::minutes(15);

/// What a deployment does on each device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Payload {
    /// Run library script `script_id` with `parameters` (through `run_script`, Tier 3).
    #[serde(rename_all = "camelCase")]
    Script {
        script_id: Uuid,
        #[serde(default)]
        parameters: BTreeMap<String, String>,
        timeout_seconds: u32,
    },
    /// Install package `name` (the manager's available version) through `manage_patches`
    /// `install`, or remove it through `manage_patches` `remove` (both Tier 3), the agent's
    /// package manager, with no reboot.
    Package {
        name: String,
        /// Absent in deployments made before removal existed: install.
        #[serde(default, skip_serializing_if = "PackageAction::is_install")]
        action: PackageAction,
    },
}

/// What a package deployment does with its package.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PackageAction {
    #[default]
    Install,
    Remove,
}

impl PackageAction {
    pub fn is_install(&self) -> bool {
        *self == PackageAction::Install
    }
}

/// A ring as stored: its name and success threshold (its devices are rows of their own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ring {
    pub name: String,
    /// The least share of the ring's counted devices (all but skipped) that must succeed
    /// before the next ring starts (0–100).
    pub success_percent: u8,
}

/// A ring to create.
#[derive(Debug, Clone)]
pub struct NewRing {
    /// Default `ring N`.
    pub name: Option<String>,
    pub members: NewRingMembers,
    pub success_percent: u8,
}

/// Who is in a ring to create.
#[derive(Debug, Clone)]
pub enum NewRingMembers {
    Devices(Vec<DeviceId>),
    /// The members of this group (those of the target).
    Group(DeviceGroupId),
    /// A cumulative share of the target (1–100).
    Percent(u8),
}

/// A deployment to create.
#[derive(Debug, Clone)]
pub struct NewDeployment {
    pub name: String,
    pub description: Option<String>,
    pub payload: Payload,
    pub target: RuleTarget,
    /// In order; none: one ring of every targeted device.
    pub rings: Vec<NewRing>,
    /// A ring whose failed devices exceed this share of its counted ones pauses it (0–100).
    pub max_failure_percent: u8,
    /// The creating credential (`Actor` text).
    pub owner_actor: String,
    /// Send a device's run only while a maintenance window is open for it.
    pub maintenance_window_only: bool,
    /// With `maintenance_window_only`: only this window counts (else any covering the device).
    pub window_id: Option<Uuid>,
}

/// A deployment as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Deployment {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    pub description: Option<String>,
    #[sqlx(json)]
    pub payload: Payload,
    #[sqlx(try_from = "String")]
    pub target_kind: TargetKind,
    pub target_site_id: Option<SiteId>,
    pub target_group_id: Option<DeviceGroupId>,
    pub target_device_id: Option<DeviceId>,
    #[sqlx(json)]
    pub rings: Vec<Ring>,
    pub max_failure_percent: i64,
    #[sqlx(try_from = "String")]
    pub status: DeploymentStatus,
    /// The ring being rolled out (0-based).
    pub current_ring: i64,
    /// The ring whose failures a person accepted by resuming without a retry.
    pub accepted_ring: Option<i64>,
    /// Why it is paused.
    pub pause_reason: Option<String>,
    /// Whom its runs act as: the creator, then whoever last started or resumed it.
    pub owner_actor: String,
    /// The worker's lease: due while running.
    pub next_step_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// A device's run is sent only while a maintenance window is open for it.
    pub maintenance_window_only: bool,
    /// The one window that counts (`None`: any enabled window covering the device).
    pub window_id: Option<Uuid>,
}

impl Deployment {
    /// The ring being rolled out, when there is one.
    pub fn ring(&self) -> Option<&Ring> {
        usize::try_from(self.current_ring)
            .ok()
            .and_then(|i| self.rings.get(i))
    }

    /// Whether a person accepted the current ring's failures.
    pub fn ring_accepted(&self) -> bool {
        self.accepted_ring == Some(self.current_ring)
    }

    /// The failure ceiling as the gate takes it.
    pub fn max_failure(&self) -> u8 {
        u8::try_from(self.max_failure_percent.clamp(0, 100)).unwrap_or(100)
    }
}

/// One device's part of a deployment.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DeploymentDevice {
    pub deployment_id: Uuid,
    pub device_id: DeviceId,
    pub hostname: String,
    pub ring: i64,
    #[sqlx(try_from = "String")]
    pub status: DeviceRunStatus,
    /// The approval request its run waits or waited for.
    pub approval_id: Option<Uuid>,
    pub command_id: Option<String>,
    /// The patch job installing a package payload.
    pub patch_job_id: Option<Uuid>,
    pub exit_code: Option<i64>,
    /// The first part of the output.
    pub output: Option<String>,
    pub error: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// Why a pending device waits (outside its maintenance window).
    pub deferred_reason: Option<String>,
    /// When its next maintenance window opens, when known.
    pub deferred_until: Option<Timestamp>,
}

/// A pending device held back until its maintenance window opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferral {
    pub device_id: DeviceId,
    pub reason: String,
    /// When its next window opens, when known.
    pub until: Option<Timestamp>,
}

/// What one device's run came to, for the worker to record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceResult {
    pub device_id: DeviceId,
    pub status: Option<DeviceRunStatus>,
    pub approval_id: Option<Uuid>,
    pub command_id: Option<String>,
    /// The patch job installing a package payload (kept when `None`).
    pub patch_job_id: Option<Uuid>,
    pub exit_code: Option<i64>,
    pub output: Option<String>,
    pub error: Option<String>,
}

/// A state change a person asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// draft → running; the caller becomes the owner.
    Start,
    /// running → paused.
    Pause,
    /// paused → running; the caller becomes the owner. With `retry_failed`, the current
    /// ring's failed devices run again; without, its failures are accepted.
    Resume { retry_failed: bool },
    /// draft, running or paused → cancelled; devices not reached are skipped. Runs already
    /// under way on a device are not interrupted: the worker records what they come to.
    Cancel,
}

const DEPLOYMENT_COLUMNS: &str = "id, org_id, name, description, payload, target_kind, \
    target_site_id, target_group_id, target_device_id, rings, max_failure_percent, status, \
    current_ring, accepted_ring, pause_reason, owner_actor, next_step_at, created_at, \
    updated_at, started_at, finished_at, maintenance_window_only, window_id";
const DEVICE_COLUMNS: &str = "x.deployment_id, x.device_id, d.hostname, x.ring, x.status, \
    x.approval_id, x.command_id, x.patch_job_id, x.exit_code, x.output, x.error, x.started_at, x.finished_at, \
    x.deferred_reason, x.deferred_until";

/// The request id the worker's calls for deployment `id` carry (on their approval requests and
/// audit records), so a cancel finds the requests of calls still waiting.
pub fn deployment_request_id(id: Uuid) -> String {
    format!("deployment:{id}")
}

/// The deployment worker, in audit records.
pub fn deployments_actor() -> breeze_core::Actor {
    breeze_core::Actor::system("deployments")
}

fn percent_ok(field: &str, value: u8) -> Result<()> {
    if value > 100 {
        return Err(StoreError::Invalid(format!(
            "{field} must be between 0 and 100"
        )));
    }
    Ok(())
}

fn ring_index(ring: usize) -> i64 {
    i64::try_from(ring).unwrap_or(i64::MAX)
}

impl crate::OrgDeployments<'_> {
    async fn check_deployment(&self, new: &NewDeployment) -> Result<()> {
        check_text("name", &new.name, MAX_NAME_CHARS)?;
        if new
            .description
            .as_deref()
            .is_some_and(|d| d.chars().count() > MAX_NOTE_CHARS)
        {
            return Err(StoreError::Invalid(format!(
                "description is longer than {MAX_NOTE_CHARS} characters"
            )));
        }
        match &new.payload {
            Payload::Script {
                script_id,
                timeout_seconds,
                ..
            } => {
                self.whole().scripts().get_script(*script_id).await?;
                if !(5..=600).contains(timeout_seconds) {
                    return Err(StoreError::Invalid(
                        "timeoutSeconds must be between 5 and 600".into(),
                    ));
                }
            }
            Payload::Package { name, .. } => {
                check_text("payload.name", name, 200)?;
                if name.starts_with('-') || name.chars().any(char::is_whitespace) {
                    return Err(StoreError::Invalid(format!(
                        "payload.name {name:?} is not a package name"
                    )));
                }
            }
        }
        percent_ok("maxFailurePercent", new.max_failure_percent)?;
        match (new.maintenance_window_only, new.window_id) {
            (false, Some(_)) => {
                return Err(StoreError::Invalid(
                    "windowId applies only to a deployment that runs in maintenance windows".into(),
                ));
            }
            (true, Some(w)) => {
                self.whole().maintenance().get_window(w).await?;
            }
            _ => {}
        }
        if new.rings.len() > MAX_RINGS {
            return Err(StoreError::Invalid(format!(
                "a deployment has at most {MAX_RINGS} rings"
            )));
        }
        let mut last_percent = 0;
        for (i, r) in new.rings.iter().enumerate() {
            percent_ok("successPercent", r.success_percent)?;
            if let Some(name) = &r.name {
                check_text(&format!("rings[{i}].name"), name, MAX_NAME_CHARS)?;
            }
            match &r.members {
                NewRingMembers::Percent(p) => {
                    if !(1..=100).contains(p) || *p <= last_percent {
                        return Err(StoreError::Invalid(format!(
                            "rings[{i}].percent must be between 1 and 100 and above the \
                             previous ring's ({last_percent}): percentages count the whole \
                             target, every earlier ring included"
                        )));
                    }
                    last_percent = *p;
                }
                NewRingMembers::Devices(ds) => {
                    if ds.is_empty() || ds.len() > MAX_DEPLOYMENT_DEVICES {
                        return Err(StoreError::Invalid(format!(
                            "rings[{i}].deviceIds must name 1 to {MAX_DEPLOYMENT_DEVICES} devices"
                        )));
                    }
                    for d in ds {
                        self.whole().devices().get_device(*d).await?;
                    }
                }
                NewRingMembers::Group(g) => {
                    self.whole().tenancy().get_group(*g).await?;
                }
            }
        }
        self.whole().alerts().check_target(new.target).await
    }

    /// Creates a deployment (draft) after checking its script, target and rings are valid and
    /// this organization's, and fixes its devices and their rings. Audited `audit`.
    pub async fn create_deployment(
        &self,
        new: NewDeployment,
        audit: AuditEvent,
    ) -> Result<Deployment> {
        self.check_deployment(&new).await?;
        self.whole()
            .check_room("deployments", MAX_DEPLOYMENTS_PER_ORG, "deployments")
            .await?;
        let target = self.whole().compliance().target_devices(new.target).await?;
        if target.is_empty() {
            return Err(StoreError::Invalid(
                "the target has no devices; nothing to deploy to".into(),
            ));
        }
        if target.len() > MAX_DEPLOYMENT_DEVICES {
            return Err(StoreError::Invalid(format!(
                "the target has {} devices; a deployment reaches at most \
                 {MAX_DEPLOYMENT_DEVICES} (narrow it to a site or group)",
                target.len()
            )));
        }
        let mut members = Vec::new();
        for (i, r) in new.rings.iter().enumerate() {
            members.push(match &r.members {
                NewRingMembers::Devices(ds) => {
                    if let Some(d) = ds.iter().find(|d| !target.contains(d)) {
                        return Err(StoreError::Invalid(format!(
                            "rings[{i}]: device {d} is not in the deployment's target"
                        )));
                    }
                    RingMembers::Devices(ds.clone())
                }
                NewRingMembers::Group(g) => RingMembers::Devices(
                    self.whole()
                        .compliance()
                        .target_devices(RuleTarget::Group(*g))
                        .await?,
                ),
                NewRingMembers::Percent(p) => RingMembers::Percent(*p),
            });
        }
        let (assigned, ring_count) = assign_rings(&target, &members);
        let mut rings: Vec<Ring> = new
            .rings
            .iter()
            .enumerate()
            .map(|(i, r)| Ring {
                name: r.name.clone().unwrap_or_else(|| format!("ring {}", i + 1)),
                success_percent: r.success_percent,
            })
            .collect();
        while rings.len() < ring_count {
            rings.push(Ring {
                name: if new.rings.is_empty() {
                    "all".into()
                } else {
                    "remaining".into()
                },
                success_percent: 100 - new.max_failure_percent,
            });
        }
        if let Some(i) = (0..rings.len()).find(|i| !assigned.iter().any(|(_, r)| r == i)) {
            return Err(StoreError::Invalid(format!(
                "rings[{i}] ({}) has no device of the target; drop it or change its members",
                rings[i].name
            )));
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let (site, group, device) = target_columns(new.target);
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO deployments ({DEPLOYMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, \
             $8, $9, $10, $11, 'draft', 0, NULL, NULL, $12, NULL, $13, $13, NULL, NULL, $14, $15)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(new.description.as_deref())
        .bind(Arg::json(&new.payload))
        .bind(new.target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(Arg::json(&rings))
        .bind(i64::from(new.max_failure_percent))
        .bind(new.owner_actor.as_str())
        .bind(now)
        .bind(new.maintenance_window_only)
        .bind(new.window_id)
        .execute(&mut tx)
        .await?;
        for chunk in assigned.chunks(200) {
            let mut q = sql(
                "INSERT INTO deployment_devices (deployment_id, device_id, org_id, ring, status) \
                 VALUES ",
            );
            for (i, (d, ring)) in chunk.iter().enumerate() {
                if i > 0 {
                    q.push(", ");
                }
                q.push_row([
                    Arg::from(id),
                    Arg::from(*d),
                    Arg::from(self.org),
                    Arg::from(ring_index(*ring)),
                    Arg::from("pending"),
                ]);
            }
            q.execute(&mut tx).await?;
        }
        let sizes: Vec<usize> = (0..rings.len())
            .map(|i| assigned.iter().filter(|(_, r)| *r == i).count())
            .collect();
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": new.name, "payload": new.payload, "target": new.target,
            "rings": rings, "ringSizes": sizes, "devices": assigned.len(),
            "maxFailurePercent": new.max_failure_percent,
            "maintenanceWindowOnly": new.maintenance_window_only, "windowId": new.window_id,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_deployment(id).await
    }

    /// One deployment of this organization.
    pub async fn get_deployment(&self, id: Uuid) -> Result<Deployment> {
        sql(format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("deployment"))
    }

    /// This organization's deployments (of one status, or all), newest first, at most
    /// `limit` (1–100).
    pub async fn list_deployments(
        &self,
        status: Option<DeploymentStatus>,
        limit: u32,
    ) -> Result<Vec<Deployment>> {
        let mut q = sql(format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(s) = status {
            let p = q.arg(s.as_str());
            q.push(&format!(" AND status = {p}"));
        }
        let l = q.arg(i64::from(limit.clamp(1, 100)));
        q.push(&format!(" ORDER BY created_at DESC, id DESC LIMIT {l}"));
        q.fetch_all(self).await
    }

    /// A deployment's devices (of one ring and status, or all), by ring then hostname.
    pub async fn deployment_devices(
        &self,
        id: Uuid,
        ring: Option<i64>,
        status: Option<DeviceRunStatus>,
    ) -> Result<Vec<DeploymentDevice>> {
        let mut q = sql(format!(
            "SELECT {DEVICE_COLUMNS} FROM deployment_devices x JOIN devices d \
             ON d.id = x.device_id AND d.org_id = x.org_id \
             WHERE x.deployment_id = $1 AND x.org_id = $2"
        ))
        .bind(id)
        .bind(self.org);
        if let Some(r) = ring {
            let p = q.arg(r);
            q.push(&format!(" AND x.ring = {p}"));
        }
        if let Some(s) = status {
            let p = q.arg(s.as_str());
            q.push(&format!(" AND x.status = {p}"));
        }
        q.push(" ORDER BY x.ring, d.hostname, x.device_id");
        q.fetch_all(self).await
    }

    /// Each ring's tally, in ring order (`rings` long).
    pub async fn deployment_tallies(&self, d: &Deployment) -> Result<Vec<RingTally>> {
        let rows: Vec<(i64, String, i64)> = sql(
            "SELECT ring, status, COUNT(*) FROM deployment_devices WHERE deployment_id = $1 \
             AND org_id = $2 GROUP BY ring, status",
        )
        .bind(d.id)
        .bind(self.org)
        .fetch_all(self)
        .await?;
        let mut tallies = vec![RingTally::default(); d.rings.len()];
        for (ring, status, n) in rows {
            let status: DeviceRunStatus = status
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("{e}")))?;
            if let Some(t) = usize::try_from(ring).ok().and_then(|r| tallies.get_mut(r)) {
                for _ in 0..n {
                    t.add(status);
                }
            }
        }
        Ok(tallies)
    }

    /// Applies a person's `control` as `actor` (the `Actor` text of the caller), audited
    /// `audit` with the fields it changed. Refused (conflict) when the deployment is not in a
    /// state the control applies to.
    pub async fn control_deployment(
        &self,
        id: Uuid,
        control: Control,
        actor: &str,
        audit: AuditEvent,
    ) -> Result<Deployment> {
        let d = self.get_deployment(id).await?;
        let (from, to): (&[DeploymentStatus], DeploymentStatus) = match control {
            Control::Start => (&[DeploymentStatus::Draft], DeploymentStatus::Running),
            Control::Pause => (&[DeploymentStatus::Running], DeploymentStatus::Paused),
            Control::Resume { .. } => (&[DeploymentStatus::Paused], DeploymentStatus::Running),
            Control::Cancel => (
                &[
                    DeploymentStatus::Draft,
                    DeploymentStatus::Running,
                    DeploymentStatus::Paused,
                ],
                DeploymentStatus::Cancelled,
            ),
        };
        if !from.contains(&d.status) {
            return Err(StoreError::Conflict(format!(
                "the deployment is {}; this applies only to a deployment that is {}",
                d.status,
                from.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
        let now = self.store.clock.now();
        let owner_changes = matches!(control, Control::Start | Control::Resume { .. });
        let (accepted, retry) = match control {
            Control::Resume { retry_failed } => (!retry_failed, retry_failed),
            _ => (false, false),
        };
        let reason = match control {
            Control::Pause => Some(format!("paused by {actor}")),
            _ => None,
        };
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("UPDATE deployments SET status = $1, pause_reason = $2, \
             owner_actor = CASE WHEN $3 THEN $4 ELSE owner_actor END, \
             accepted_ring = CASE WHEN $5 THEN current_ring ELSE accepted_ring END, \
             next_step_at = $6, started_at = COALESCE(started_at, $7), finished_at = $8, \
             updated_at = $9 WHERE id = $10 AND org_id = $11 AND status = $12")
        .bind(to.as_str())
        .bind(reason.as_deref())
        .bind(owner_changes)
        .bind(actor)
        .bind(accepted)
        // A cancelled deployment stays due once more: the worker follows the runs already on
        // a device (their approved call was under way) to their end, starting nothing.
        .bind(matches!(to, DeploymentStatus::Running | DeploymentStatus::Cancelled).then_some(now))
        .bind((control == Control::Start).then_some(now))
        .bind(to.is_final().then_some(now))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .bind(d.status.as_str())
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Err(StoreError::Conflict(
                "the deployment changed meanwhile; read it again".into(),
            ));
        }
        let mut retried = 0;
        if retry {
            retried = sql(
                "UPDATE deployment_devices SET status = 'pending', approval_id = NULL, \
                 command_id = NULL, patch_job_id = NULL, exit_code = NULL, output = NULL, error = NULL, \
                 started_at = NULL, finished_at = NULL \
                 WHERE deployment_id = $1 AND org_id = $2 AND ring = $3 AND status = 'failed'",
            )
            .bind(id)
            .bind(self.org)
            .bind(d.current_ring)
            .execute(&mut tx)
            .await?;
        }
        let mut skipped = 0;
        if control == Control::Cancel {
            skipped = sql("UPDATE deployment_devices SET status = 'skipped', \
                 error = 'the deployment was cancelled', finished_at = $1 \
                 WHERE deployment_id = $2 AND org_id = $3 AND status = 'pending'")
            .bind(now)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        }
        let mut withdrawn = Vec::new();
        if control == Control::Cancel {
            let why = format!("the deployment {:?} was cancelled by {actor}", d.name);
            withdrawn = self.withdraw_approvals_of(&mut tx, id, &why, now).await?;
        }
        let changed = audit::changed_fields([
            ("status", true),
            ("pauseReason", reason.is_some() || d.pause_reason.is_some()),
            ("owner", owner_changes && d.owner_actor != actor),
            ("acceptedRing", accepted),
        ]);
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "from": d.status, "to": to, "changed": changed, "ring": d.current_ring + 1,
            "owner": if owner_changes { actor } else { d.owner_actor.as_str() },
            "acceptedFailures": accepted, "retriedDevices": retried,
            "skippedDevices": skipped, "pauseReason": reason,
            "withdrawnApprovals": withdrawn,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_deployment(id).await
    }

    /// Withdraws the approval requests deployment `id`'s running devices wait for — those still
    /// pending, or approved and not yet claimed — so nobody can approve them and the resumer
    /// never runs them; the devices that waited on them are skipped, saying `why`. Each
    /// withdrawal is audited `approval.withdraw` (by the deployments worker, the reason naming
    /// the deployment). A request already claimed or finished is left alone: its answer is
    /// history, and its devices keep what it came to. Returns the withdrawn requests.
    async fn withdraw_approvals_of(
        &self,
        tx: &mut Tx,
        id: Uuid,
        why: &str,
        now: Timestamp,
    ) -> Result<Vec<Uuid>> {
        // Those its devices wait on, and those of calls still waiting when the cancel came
        // (not yet on a device): the worker makes its calls with the deployment's request id.
        let waiting: Vec<(Uuid,)> = sql(
            "SELECT approval_id FROM deployment_devices WHERE deployment_id = $1 \
             AND org_id = $2 AND status = 'running' AND approval_id IS NOT NULL \
             UNION SELECT id FROM approval_requests WHERE org_id = $2 AND request_id = $3 \
             AND status IN ('pending', 'approved')",
        )
        .bind(id)
        .bind(self.org)
        .bind(deployment_request_id(id))
        .fetch_all(&mut *tx)
        .await?;
        let reason = format!("withdrawn: {why}");
        let mut withdrawn = Vec::new();
        for (approval,) in waiting {
            let n = sql(
                "UPDATE approval_requests SET status = 'withdrawn', reason = $1, \
                 completed_at = $2 WHERE id = $3 AND org_id = $4 \
                 AND status IN ('pending', 'approved')",
            )
            .bind(reason.as_str())
            .bind(now)
            .bind(approval)
            .bind(self.org)
            .execute(&mut *tx)
            .await?;
            if n == 0 {
                continue;
            }
            let event =
                AuditEvent::new(deployments_actor(), "approval.withdraw", "approval_request")
                    .org(self.org)
                    .resource(approval)
                    .details(serde_json::json!({ "reason": reason, "deploymentId": id }));
            audit::insert(&mut *tx, &event, now).await?;
            sql(
                "UPDATE deployment_devices SET status = 'skipped', error = $1, finished_at = $2 \
                 WHERE deployment_id = $3 AND org_id = $4 AND status = 'running' \
                 AND approval_id = $5",
            )
            .bind(format!(
                "{why}; its approval request {approval} was withdrawn"
            ))
            .bind(now)
            .bind(id)
            .bind(self.org)
            .bind(approval)
            .execute(&mut *tx)
            .await?;
            withdrawn.push(approval);
        }
        Ok(withdrawn)
    }

    /// For the worker when a deployment was cancelled while it was sending: withdraws the
    /// approval requests its runs made after the cancel (the cancel withdrew those it found).
    /// Nothing when the deployment is not cancelled. Returns the withdrawn requests.
    pub async fn withdraw_cancelled_deployment_approvals(&self, id: Uuid) -> Result<Vec<Uuid>> {
        let d = self.get_deployment(id).await?;
        if d.status != DeploymentStatus::Cancelled {
            return Ok(Vec::new());
        }
        let now = self.store.clock.now();
        let why = format!("the deployment {:?} was cancelled", d.name);
        let mut tx = Tx::begin_in(self).await?;
        let withdrawn = self.withdraw_approvals_of(&mut tx, id, &why, now).await?;
        tx.commit().await?;
        Ok(withdrawn)
    }

    /// Holds pending devices of deployment `id` back until their window opens, saying why
    /// (written only where it changed, as the worker re-reads them every tick).
    pub async fn defer_deployment_devices(&self, id: Uuid, deferrals: &[Deferral]) -> Result<()> {
        for d in deferrals {
            sql(
                "UPDATE deployment_devices SET deferred_reason = $1, deferred_until = $2 \
                 WHERE deployment_id = $3 AND org_id = $4 AND device_id = $5 \
                 AND status = 'pending' AND (deferred_reason IS NULL OR deferred_reason <> $1 \
                 OR deferred_until IS NULL OR deferred_until <> $2)",
            )
            .bind(d.reason.as_str())
            .bind(d.until)
            .bind(id)
            .bind(self.org)
            .bind(d.device_id)
            .execute(self)
            .await?;
        }
        Ok(())
    }

    /// Marks `devices` of deployment `id` running (their run is being sent).
    pub async fn deployment_devices_running(&self, id: Uuid, devices: &[DeviceId]) -> Result<()> {
        let now = self.store.clock.now();
        for d in devices {
            sql(
                "UPDATE deployment_devices SET status = 'running', started_at = $1, \
                 deferred_reason = NULL, deferred_until = NULL \
                 WHERE deployment_id = $2 AND org_id = $3 AND device_id = $4",
            )
            .bind(now)
            .bind(id)
            .bind(self.org)
            .bind(*d)
            .execute(self)
            .await?;
        }
        Ok(())
    }

    /// Records what devices' runs came to (a `status` of `None` leaves it running, e.g.
    /// waiting for approval `approval_id`). A skipped device stays skipped: a cancel skips the
    /// devices whose approval it withdrew, and the call that was waiting on that request
    /// answers afterwards.
    pub async fn record_deployment_results(
        &self,
        id: Uuid,
        results: &[DeviceResult],
    ) -> Result<()> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        for r in results {
            let status = r.status.unwrap_or(DeviceRunStatus::Running);
            sql(
                "UPDATE deployment_devices SET status = $1, approval_id = COALESCE($2, approval_id), \
                 command_id = $3, exit_code = $4, output = $5, error = $6, finished_at = $7, \
                 patch_job_id = COALESCE($11, patch_job_id) \
                 WHERE deployment_id = $8 AND org_id = $9 AND device_id = $10 \
                 AND status <> 'skipped'",
            )
            .bind(status.as_str())
            .bind(r.approval_id)
            .bind(r.command_id.as_deref())
            .bind(r.exit_code)
            .bind(r.output.as_deref())
            .bind(r.error.as_deref())
            .bind(status.is_final().then_some(now))
            .bind(id)
            .bind(self.org)
            .bind(r.device_id)
            .bind(r.patch_job_id)
            .execute(&mut tx)
            .await?;
        }
        tx.commit().await
    }

    /// The worker moves a running deployment on: `Gate`'s decision as one conditional update
    /// with its audit record (`deployment.pause.auto`, `deployment.ring.advance`,
    /// `deployment.complete`). False when the deployment is no longer running on `ring`.
    pub async fn advance_deployment(&self, d: &Deployment, step: Advance) -> Result<bool> {
        let now = self.store.clock.now();
        let (status, ring, reason, action) = match &step {
            Advance::Pause(reason) => (
                DeploymentStatus::Paused,
                d.current_ring,
                Some(reason.as_str()),
                "deployment.pause.auto",
            ),
            Advance::NextRing => (
                DeploymentStatus::Running,
                d.current_ring + 1,
                None,
                "deployment.ring.advance",
            ),
            Advance::Complete => (
                DeploymentStatus::Completed,
                d.current_ring,
                None,
                "deployment.complete",
            ),
        };
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE deployments SET status = $1, current_ring = $2, pause_reason = $3, \
             finished_at = $4, next_step_at = $5, updated_at = $6 \
             WHERE id = $7 AND org_id = $8 AND status = 'running' AND current_ring = $9",
        )
        .bind(status.as_str())
        .bind(ring)
        .bind(reason)
        .bind(status.is_final().then_some(now))
        .bind((status == DeploymentStatus::Running).then_some(now))
        .bind(now)
        .bind(d.id)
        .bind(self.org)
        .bind(d.current_ring)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Ok(false);
        }
        let audit = AuditEvent::new(deployments_actor(), action, "deployment")
            .org(self.org)
            .resource(d.id)
            .details(serde_json::json!({
                "from": d.status, "to": status, "fromRing": d.current_ring + 1,
                "ring": ring + 1, "reason": reason,
                "changed": audit::changed_fields([
                    ("status", status != d.status),
                    ("currentRing", ring != d.current_ring),
                    ("pauseReason", reason.is_some()),
                ]),
            }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Hands a stepped deployment back: due again at `next` if it is still running, or
    /// cancelled with devices whose run is still under way (the worker records what they come
    /// to); otherwise due no more.
    pub async fn release_deployment(&self, id: Uuid, next: Timestamp) -> Result<()> {
        sql(
            "UPDATE deployments SET next_step_at = CASE WHEN status = 'running' \
             OR EXISTS (SELECT 1 FROM deployment_devices dd WHERE dd.deployment_id = $2 \
             AND dd.org_id = $3 AND dd.status = 'running') THEN $1 ELSE NULL END \
             WHERE id = $2 AND org_id = $3 AND status IN ('running', 'cancelled')",
        )
        .bind(next)
        .bind(id)
        .bind(self.org)
        .execute(self)
        .await
        .map(drop)
    }
}

/// What the worker does to a running deployment after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Advance {
    /// Pause it, with the reason.
    Pause(String),
    /// Start the next ring.
    NextRing,
    /// The last ring is done.
    Complete,
}

impl Store {
    /// Takes the lease of `deployment`'s due step: moves `next_step_at` from `due` to now +
    /// [`STEP_LEASE`] with one conditional statement, so one instance steps it. The stepping
    /// instance hands it back ([`crate::OrgDeployments::release_deployment`]); one that dies leaves it to
    /// another after the lease.
    pub async fn claim_deployment_step(&self, d: &Deployment, due: Timestamp) -> Result<bool> {
        STEP.claim(
            self,
            (d.id, d.org_id),
            due,
            Some(self.clock.now() + STEP_LEASE),
        )
        .await
    }
}

impl CrossOrg<'_> {
    /// Running deployments of every organization whose step is due at `now`, soonest first
    /// (and cancelled ones still following runs that were under way).
    pub async fn due_deployments(&self, now: Timestamp, limit: u32) -> Result<Vec<Deployment>> {
        STEP.due(self.store, now, limit).await
    }
}

/// The worker's lease: a running deployment's own `next_step_at`, or a cancelled one's
/// while runs that were under way when it was cancelled have not ended.
const STEP: RowLease = RowLease {
    table: "deployments",
    columns: DEPLOYMENT_COLUMNS,
    at: "next_step_at",
    only: "status IN ('running', 'cancelled')",
};
