//! Compliance policies (migration 0025): rules over stored inventory and agent checks, each
//! device's standing per policy with every rule's result, the history of status changes, and
//! remediations (a library script run on the non-compliant devices).
//!
//! Inventory rules are decided here, in Rust over the latest inventories
//! ([`breeze_core::compliance::evaluate_inventory`]): for a whole policy on demand
//! ([`crate::OrgCompliance::evaluate_policy_inventory`], a few queries whatever the number of devices) and
//! for one device when its inventory changes ([`Store::compliance_inventory_changed`], called by
//! `record_inventory`, best effort). Agent rules are decided by the agent: the tool and the
//! server's worker queue a `ComplianceCheck` command ([`agent_probes`]) and fold its answer in
//! with [`crate::OrgCompliance::fold_compliance_check`]. Only a change of a device's results writes its
//! row (in multi-row statements), and a change of its status also writes a history row.
//! Every change to a policy and every remediation is written with its audit record. The store
//! runs nothing: the worker runs a remediation's script through the tool pipeline.

use std::collections::{BTreeMap, HashMap, HashSet};

use breeze_agent_proto::{ComplianceProbe, Package, ProbeResult};
use breeze_core::{
    AuditEvent, ComplianceRule, ComplianceState, DeviceGroupId, DeviceId, OrgId, PolicyEnforcement,
    RuleResult, RuleSource, RunStatus, SiteId, TargetKind, Timestamp,
    compliance::{InventoryFacts, evaluate_inventory, overall, validate_rules},
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    CommandRecord, CrossOrg, DeviceOutcome, Result, RuleTarget, Store, StoreError,
    alerts::{MAX_NAME_CHARS, MAX_NOTE_CHARS, check_text, target_columns, target_of},
    audit,
    runs::{RunRow, RunTable, RunUpdate},
    scheduled::RowLease,
    sql::{Arg, Sql, Tx, sql},
};

/// The most compliance policies one organization may keep.
pub const MAX_POLICIES_PER_ORG: i64 = 200;
/// The most devices one remediation acts on.
pub const MAX_REMEDIATION_DEVICES: usize = 50;
/// Rows per multi-row statement when writing results.
const ROWS_PER_STATEMENT: usize = 200;

/// A compliance policy as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CompliancePolicy {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    pub description: Option<String>,
    #[sqlx(json)]
    pub rules: Vec<ComplianceRule>,
    #[sqlx(try_from = "String")]
    pub target_kind: TargetKind,
    pub target_site_id: Option<SiteId>,
    pub target_group_id: Option<DeviceGroupId>,
    pub target_device_id: Option<DeviceId>,
    #[sqlx(try_from = "String")]
    pub enforcement: PolicyEnforcement,
    pub remediation_script_id: Option<Uuid>,
    #[sqlx(json)]
    pub remediation_parameters: BTreeMap<String, String>,
    pub active: bool,
    /// The credential that created or last changed it; a remediation the worker queues acts
    /// as it.
    pub owner_actor: String,
    pub evaluate_every_minutes: i64,
    /// The periodic evaluation's lease; `None` while inactive.
    pub next_evaluation_at: Option<Timestamp>,
    pub last_evaluated_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl CompliancePolicy {
    /// The target as one value.
    pub fn target(&self) -> Result<RuleTarget> {
        target_of(
            self.target_kind,
            (
                self.target_site_id,
                self.target_group_id,
                self.target_device_id,
            ),
            || format!("policy {}", self.id),
        )
    }

    /// Whether any rule is decided over inventory.
    pub fn has_inventory_rules(&self) -> bool {
        self.rules.iter().any(ComplianceRule::is_inventory)
    }

    /// Whether any rule is checked by the agent.
    pub fn has_agent_rules(&self) -> bool {
        self.rules.iter().any(|r| !r.is_inventory())
    }
}

/// A policy to create.
#[derive(Debug, Clone)]
pub struct NewCompliancePolicy {
    pub name: String,
    pub description: Option<String>,
    pub rules: Vec<ComplianceRule>,
    pub target: RuleTarget,
    pub enforcement: PolicyEnforcement,
    pub remediation_script: Option<Uuid>,
    pub remediation_parameters: BTreeMap<String, String>,
    pub active: bool,
    pub owner_actor: String,
    pub evaluate_every_minutes: u32,
}

/// Changes to a policy; `None` keeps the current value. Changing the rules or the target
/// forgets every device's results (they are evaluated again).
#[derive(Debug, Clone, Default)]
pub struct CompliancePolicyUpdate {
    pub name: Option<String>,
    pub description: Option<String>,
    pub rules: Option<Vec<ComplianceRule>>,
    pub target: Option<RuleTarget>,
    pub enforcement: Option<PolicyEnforcement>,
    pub remediation_script: Option<Uuid>,
    pub remediation_parameters: Option<BTreeMap<String, String>>,
    pub active: Option<bool>,
    pub evaluate_every_minutes: Option<u32>,
    pub owner_actor: Option<String>,
}

/// One device's standing against one policy.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ComplianceStatus {
    pub policy_id: Uuid,
    pub device_id: DeviceId,
    pub hostname: String,
    #[sqlx(try_from = "String")]
    pub status: ComplianceState,
    #[sqlx(json)]
    pub results: Vec<RuleResult>,
    /// The agent check whose answer is awaited.
    pub check_command_id: Option<Uuid>,
    pub evaluated_at: Timestamp,
    pub changed_at: Timestamp,
}

/// One change of a device's status against a policy.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ComplianceChange {
    pub id: Uuid,
    pub policy_id: Uuid,
    pub device_id: DeviceId,
    pub from_status: Option<ComplianceState>,
    pub to_status: ComplianceState,
    #[sqlx(json)]
    pub results: Vec<RuleResult>,
    pub at: Timestamp,
}

/// A policy's counts of devices per status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySummary {
    pub policy_id: Uuid,
    pub name: String,
    pub active: bool,
    pub compliant: u64,
    pub non_compliant: u64,
    pub unknown: u64,
}

/// What an evaluation did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationReport {
    /// Devices the policy targets (that were looked at).
    pub devices: usize,
    /// Devices whose results changed (rows written).
    pub changed: usize,
    /// Devices whose status changed (history rows).
    pub status_changes: usize,
    pub compliant: usize,
    pub non_compliant: usize,
    pub unknown: usize,
}

/// A remediation as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Remediation {
    pub id: Uuid,
    pub org_id: OrgId,
    pub policy_id: Uuid,
    pub requested_by: String,
    #[sqlx(try_from = "String")]
    pub status: RunStatus,
    #[sqlx(json)]
    pub device_ids: Vec<DeviceId>,
    #[sqlx(json)]
    pub approval_ids: Vec<Uuid>,
    #[sqlx(json)]
    pub devices: Vec<DeviceOutcome>,
    pub message: Option<String>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
}

/// A remediation's progress or end: a run's (the shared run bookkeeping).
pub type RemediationUpdate = RunUpdate;

/// The remediation table's shared bookkeeping ([`crate::runs`]).
const REMEDIATIONS: RunTable = RunTable {
    table: "compliance_remediations",
    columns: REMEDIATION_COLUMNS,
    what: "remediation",
    resource_type: "compliance_remediation",
    finish_action: "compliance.remediation.finish",
    wait_action: "compliance.remediation.wait",
    actor: compliance_actor,
};

/// The periodic evaluation's lease: an active policy's own `next_evaluation_at`.
const EVALUATION_LEASE: RowLease = RowLease {
    table: "compliance_policies",
    columns: POLICY_COLUMNS,
    at: "next_evaluation_at",
    only: "active = TRUE",
};

impl RunRow for Remediation {
    fn id(&self) -> Uuid {
        self.id
    }

    fn started(&mut self, now: Timestamp) {
        self.status = RunStatus::Running;
        self.started_at = Some(now);
    }
}

/// An agent check whose command reached a final state, for the worker to fold in.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FinishedCheck {
    pub org_id: OrgId,
    pub policy_id: Uuid,
    pub device_id: DeviceId,
    pub check_command_id: Uuid,
}

const POLICY_COLUMNS: &str = "id, org_id, name, description, rules, target_kind, target_site_id, \
    target_group_id, target_device_id, enforcement, remediation_script_id, \
    remediation_parameters, active, owner_actor, evaluate_every_minutes, next_evaluation_at, \
    last_evaluated_at, created_at, updated_at";
const STATUS_COLUMNS: &str = "s.policy_id, s.device_id, d.hostname, s.status, s.results, \
    s.check_command_id, s.evaluated_at, s.changed_at";
const REMEDIATION_COLUMNS: &str = "id, org_id, policy_id, requested_by, status, device_ids, \
    approval_ids, devices, message, created_at, started_at, finished_at";

/// The compliance worker, in audit records.
pub fn compliance_actor() -> breeze_core::Actor {
    breeze_core::Actor::system("compliance")
}

/// The agent probe of an agent rule (`None` for an inventory rule).
pub fn probe_of(rule: &ComplianceRule) -> Option<ComplianceProbe> {
    Some(match rule {
        ComplianceRule::ServiceRunning { name } => {
            ComplianceProbe::ServiceRunning { name: name.clone() }
        }
        ComplianceRule::FilePresent { path } => ComplianceProbe::FilePresent { path: path.clone() },
        ComplianceRule::FileSha256 { path, sha256 } => ComplianceProbe::FileSha256 {
            path: path.clone(),
            sha256: sha256.clone(),
        },
        ComplianceRule::SettingValue { path, key, value } => ComplianceProbe::SettingValue {
            path: path.clone(),
            key: key.clone(),
            value: value.clone(),
        },
        ComplianceRule::DiskEncrypted => ComplianceProbe::DiskEncrypted,
        ComplianceRule::FirewallEnabled => ComplianceProbe::FirewallEnabled,
        ComplianceRule::PackageInstalled { .. }
        | ComplianceRule::PackageMinVersion { .. }
        | ComplianceRule::OsVersion { .. } => return None,
    })
}

/// The probes a `ComplianceCheck` for `rules` carries, in rule order.
pub fn agent_probes(rules: &[ComplianceRule]) -> Vec<ComplianceProbe> {
    rules.iter().filter_map(probe_of).collect()
}

/// The parts of a stored inventory that rules read.
#[derive(Deserialize)]
struct InventoryLite {
    os: OsLite,
    #[serde(default)]
    packages: Option<Vec<Package>>,
}

#[derive(Deserialize)]
struct OsLite {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

fn facts_of(inv: InventoryLite) -> InventoryFacts {
    InventoryFacts::new(
        inv.os.name,
        inv.os.version,
        inv.packages
            .map(|p| p.into_iter().map(|p| (p.name, p.version)).collect()),
    )
}

/// A stored row's parts that evaluation compares with.
#[derive(sqlx::FromRow)]
struct Current {
    policy_id: Uuid,
    device_id: DeviceId,
    #[sqlx(try_from = "String")]
    status: ComplianceState,
    #[sqlx(json)]
    results: Vec<RuleResult>,
    check_command_id: Option<Uuid>,
    changed_at: Timestamp,
}

/// A row to write.
struct Write {
    policy: Uuid,
    device: DeviceId,
    status: ComplianceState,
    results: Vec<RuleResult>,
    check_command_id: Option<Uuid>,
    changed_at: Timestamp,
    /// The previous status when it changed (or there was none): a history row.
    history: Option<Option<ComplianceState>>,
}

/// The results of `rules` for a device: inventory rules decided over `facts`, agent rules kept
/// from `old` (or not checked yet). `None` when nothing changed.
fn decide(
    policy: &CompliancePolicy,
    device: DeviceId,
    facts: Option<&InventoryFacts>,
    old: Option<&Current>,
    now: Timestamp,
) -> Option<Write> {
    let results: Vec<RuleResult> = policy
        .rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            if rule.is_inventory() {
                return evaluate_inventory(i, rule, facts);
            }
            old.and_then(|o| {
                o.results
                    .iter()
                    .find(|r| r.rule == i && r.source == RuleSource::Agent)
                    .cloned()
            })
            .unwrap_or(RuleResult {
                rule: i,
                source: RuleSource::Agent,
                passed: None,
                detail: "not checked by the agent yet".into(),
            })
        })
        .collect();
    write_for(
        policy,
        device,
        results,
        old,
        old.and_then(|o| o.check_command_id),
        now,
    )
}

fn write_for(
    policy: &CompliancePolicy,
    device: DeviceId,
    results: Vec<RuleResult>,
    old: Option<&Current>,
    check_command_id: Option<Uuid>,
    now: Timestamp,
) -> Option<Write> {
    let status = overall(policy.rules.len(), &results);
    if let Some(o) = old
        && o.results == results
        && o.check_command_id == check_command_id
    {
        return None;
    }
    let changed = old.is_none_or(|o| o.status != status);
    Some(Write {
        policy: policy.id,
        device,
        status,
        results,
        check_command_id,
        changed_at: if changed {
            now
        } else {
            old.map_or(now, |o| o.changed_at)
        },
        history: changed.then(|| old.map(|o| o.status)),
    })
}

/// Writes rows (multi-row upserts) and history in `tx`.
async fn write_rows(tx: &mut Tx, org: OrgId, writes: &[Write], now: Timestamp) -> Result<()> {
    for chunk in writes.chunks(ROWS_PER_STATEMENT) {
        let mut q: Sql = sql(
            "INSERT INTO compliance_status (policy_id, device_id, org_id, status, results, \
             check_command_id, evaluated_at, changed_at) VALUES ",
        );
        for (i, w) in chunk.iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            q.push_row([
                w.policy.into(),
                w.device.into(),
                org.into(),
                w.status.as_str().into(),
                Arg::json(&w.results),
                w.check_command_id.into(),
                now.into(),
                w.changed_at.into(),
            ]);
        }
        q.push(
            " ON CONFLICT (policy_id, device_id) DO UPDATE SET status = excluded.status, \
             results = excluded.results, check_command_id = excluded.check_command_id, \
             evaluated_at = excluded.evaluated_at, changed_at = excluded.changed_at",
        );
        q.execute(&mut *tx).await?;
        let history: Vec<&Write> = chunk.iter().filter(|w| w.history.is_some()).collect();
        if history.is_empty() {
            continue;
        }
        let mut h = sql(
            "INSERT INTO compliance_history (id, org_id, policy_id, device_id, from_status, \
             to_status, results, at) VALUES ",
        );
        for (i, w) in history.iter().enumerate() {
            if i > 0 {
                h.push(", ");
            }
            let from = w.history.flatten().map(ComplianceState::as_str);
            h.push_row([
                Uuid::now_v7().into(),
                org.into(),
                w.policy.into(),
                w.device.into(),
                from.into(),
                w.status.as_str().into(),
                Arg::json(&w.results),
                now.into(),
            ]);
        }
        h.execute(&mut *tx).await?;
    }
    Ok(())
}

fn tally(report: &mut EvaluationReport, status: ComplianceState) {
    match status {
        ComplianceState::Compliant => report.compliant += 1,
        ComplianceState::NonCompliant => report.non_compliant += 1,
        ComplianceState::Unknown => report.unknown += 1,
    }
}

impl crate::OrgCompliance<'_> {
    async fn check_policy(
        &self,
        description: Option<&str>,
        rules: &[ComplianceRule],
        target: RuleTarget,
        enforcement: PolicyEnforcement,
        script: Option<Uuid>,
        every: u32,
    ) -> Result<()> {
        if description.is_some_and(|d| d.chars().count() > MAX_NOTE_CHARS) {
            return Err(StoreError::Invalid(format!(
                "description is longer than {MAX_NOTE_CHARS} characters"
            )));
        }
        validate_rules(rules).map_err(StoreError::Invalid)?;
        if !(5..=10080).contains(&every) {
            return Err(StoreError::Invalid(
                "evaluateEveryMinutes must be between 5 and 10080".into(),
            ));
        }
        if let Some(s) = script {
            self.whole().scripts().get_script(s).await?;
        } else if enforcement == PolicyEnforcement::Remediate {
            return Err(StoreError::Invalid(
                "remediationScriptId is required for enforcement remediate".into(),
            ));
        }
        self.whole().alerts().check_target(target).await
    }

    /// Creates a policy after checking its rules, target and script are valid and this
    /// organization's. An active policy is due for evaluation at once.
    pub async fn create_compliance_policy(
        &self,
        new: NewCompliancePolicy,
        audit: AuditEvent,
    ) -> Result<CompliancePolicy> {
        check_text("name", &new.name, MAX_NAME_CHARS)?;
        self.check_policy(
            new.description.as_deref(),
            &new.rules,
            new.target,
            new.enforcement,
            new.remediation_script,
            new.evaluate_every_minutes,
        )
        .await?;
        self.whole()
            .check_room(
                "compliance_policies",
                MAX_POLICIES_PER_ORG,
                "compliance policies",
            )
            .await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let (site, group, device) = target_columns(new.target);
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO compliance_policies ({POLICY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, \
             $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, NULL, $17, $18)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(new.description.as_deref())
        .bind(Arg::json(&new.rules))
        .bind(new.target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(new.enforcement.as_str())
        .bind(new.remediation_script)
        .bind(Arg::json(&new.remediation_parameters))
        .bind(new.active)
        .bind(new.owner_actor.as_str())
        .bind(i64::from(new.evaluate_every_minutes))
        .bind(new.active.then_some(now))
        .bind(now)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| {
            e.conflict_as(|| format!("a compliance policy named {:?} exists", new.name))
        })?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": new.name, "rules": new.rules, "target": new.target,
            "enforcement": new.enforcement, "remediationScriptId": new.remediation_script,
            "active": new.active,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_compliance_policy(id).await
    }

    /// One policy of this organization.
    pub async fn get_compliance_policy(&self, id: Uuid) -> Result<CompliancePolicy> {
        sql(format!(
            "SELECT {POLICY_COLUMNS} FROM compliance_policies WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("compliance policy"))
    }

    /// The organization's policies, by name.
    pub async fn list_compliance_policies(&self) -> Result<Vec<CompliancePolicy>> {
        sql(format!(
            "SELECT {POLICY_COLUMNS} FROM compliance_policies WHERE org_id = $1 ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Changes a policy (audited with the fields changed). New rules or a new target forget
    /// the devices' results; activating makes it due at once.
    pub async fn update_compliance_policy(
        &self,
        id: Uuid,
        update: CompliancePolicyUpdate,
        audit: AuditEvent,
    ) -> Result<CompliancePolicy> {
        let current = self.get_compliance_policy(id).await?;
        if let Some(name) = &update.name {
            check_text("name", name, MAX_NAME_CHARS)?;
        }
        let rules = update.rules.clone().unwrap_or(current.rules.clone());
        let target = update.target.unwrap_or(current.target()?);
        let enforcement = update.enforcement.unwrap_or(current.enforcement);
        let script = update.remediation_script.or(current.remediation_script_id);
        let every = update
            .evaluate_every_minutes
            .unwrap_or(u32::try_from(current.evaluate_every_minutes).unwrap_or(60));
        self.check_policy(
            update.description.as_deref(),
            &rules,
            target,
            enforcement,
            script,
            every,
        )
        .await?;
        let active = update.active.unwrap_or(current.active);
        let now = self.store.clock.now();
        let reset = update.rules.is_some() || update.target.is_some();
        let next = if !active {
            None
        } else if reset || !current.active || current.next_evaluation_at.is_none() {
            Some(now)
        } else {
            current.next_evaluation_at
        };
        let name = update.name.clone().unwrap_or(current.name.clone());
        let owner = update
            .owner_actor
            .clone()
            .unwrap_or(current.owner_actor.clone());
        let params = update
            .remediation_parameters
            .clone()
            .unwrap_or(current.remediation_parameters.clone());
        let (site, group, device) = target_columns(target);
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE compliance_policies SET name = $1, description = $2, rules = $3, \
             target_kind = $4, target_site_id = $5, target_group_id = $6, target_device_id = $7, \
             enforcement = $8, remediation_script_id = $9, remediation_parameters = $10, \
             active = $11, owner_actor = $12, evaluate_every_minutes = $13, \
             next_evaluation_at = $14, updated_at = $15 WHERE id = $16 AND org_id = $17",
        )
        .bind(name.as_str())
        .bind(
            update
                .description
                .as_deref()
                .or(current.description.as_deref()),
        )
        .bind(Arg::json(&rules))
        .bind(target.kind().as_str())
        .bind(site)
        .bind(group)
        .bind(device)
        .bind(enforcement.as_str())
        .bind(script)
        .bind(Arg::json(&params))
        .bind(active)
        .bind(owner.as_str())
        .bind(i64::from(every))
        .bind(next)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a compliance policy named {name:?} exists")))?;
        if n == 0 {
            return Err(StoreError::NotFound("compliance policy"));
        }
        if reset {
            sql("DELETE FROM compliance_status WHERE policy_id = $1 AND org_id = $2")
                .bind(id)
                .bind(self.org)
                .execute(&mut tx)
                .await?;
        }
        let changed: Vec<&str> = [
            ("name", update.name.is_some()),
            ("description", update.description.is_some()),
            ("rules", update.rules.is_some()),
            ("target", update.target.is_some()),
            ("enforcement", update.enforcement.is_some()),
            ("remediationScriptId", update.remediation_script.is_some()),
            (
                "remediationParameters",
                update.remediation_parameters.is_some(),
            ),
            ("active", update.active.is_some()),
            (
                "evaluateEveryMinutes",
                update.evaluate_every_minutes.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(f, set)| set.then_some(f))
        .collect();
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "changed": changed, "active": active, "owner": owner, "resultsReset": reset,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_compliance_policy(id).await
    }

    /// Deletes a policy with its results, history and remediations (the audit log keeps them).
    pub async fn delete_compliance_policy(
        &self,
        id: Uuid,
        audit: AuditEvent,
    ) -> Result<CompliancePolicy> {
        let current = self.get_compliance_policy(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        for table in [
            "compliance_remediations",
            "compliance_history",
            "compliance_status",
        ] {
            sql(format!(
                "DELETE FROM {table} WHERE policy_id = $1 AND org_id = $2"
            ))
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        }
        audit::delete_row(
            &mut tx,
            self.org,
            "compliance_policies",
            id,
            "compliance policy",
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

    /// The devices `target` covers now, by id.
    pub async fn target_devices(&self, target: RuleTarget) -> Result<Vec<DeviceId>> {
        let rows: Vec<(DeviceId,)> = match target {
            RuleTarget::Organization => {
                sql("SELECT id FROM devices WHERE org_id = $1 ORDER BY id")
                    .bind(self.org)
                    .fetch_all(self)
                    .await?
            }
            RuleTarget::Site(s) => {
                sql("SELECT id FROM devices WHERE org_id = $1 AND site_id = $2 ORDER BY id")
                    .bind(self.org)
                    .bind(s)
                    .fetch_all(self)
                    .await?
            }
            RuleTarget::Group(g) => sql(
                "SELECT device_id FROM device_group_members WHERE org_id = $1 AND group_id = $2 \
                 ORDER BY device_id",
            )
            .bind(self.org)
            .bind(g)
            .fetch_all(self)
            .await?,
            RuleTarget::Device(d) => {
                sql("SELECT id FROM devices WHERE org_id = $1 AND id = $2")
                    .bind(self.org)
                    .bind(d)
                    .fetch_all(self)
                    .await?
            }
        };
        Ok(rows.into_iter().map(|(d,)| d).collect())
    }

    async fn inventories(
        &self,
        only: Option<DeviceId>,
    ) -> Result<HashMap<DeviceId, InventoryFacts>> {
        let mut q = sql(
            "SELECT device_id, inventory FROM device_state WHERE org_id = $1 \
             AND inventory IS NOT NULL",
        )
        .bind(self.org);
        if let Some(d) = only {
            let p = q.arg(d);
            q.push(&format!(" AND device_id = {p}"));
        }
        let rows: Vec<(DeviceId, sqlx::types::Json<serde_json::Value>)> = q.fetch_all(self).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(d, v)| {
                // An inventory that does not parse (an older shape) counts as none.
                let inv: InventoryLite = serde_json::from_value(v.0).ok()?;
                Some((d, facts_of(inv)))
            })
            .collect())
    }

    async fn currents(
        &self,
        policy: Option<Uuid>,
        device: Option<DeviceId>,
    ) -> Result<Vec<Current>> {
        let mut q = sql(
            "SELECT policy_id, device_id, status, results, check_command_id, changed_at \
             FROM compliance_status WHERE org_id = $1",
        )
        .bind(self.org);
        if let Some(p) = policy {
            let p = q.arg(p);
            q.push(&format!(" AND policy_id = {p}"));
        }
        if let Some(d) = device {
            let d = q.arg(d);
            q.push(&format!(" AND device_id = {d}"));
        }
        q.fetch_all(self).await
    }

    /// Evaluates `policy`'s inventory rules on every device it targets (or on `only` of them):
    /// writes the devices whose results changed, and a history row for each status change.
    /// Rows of devices the policy no longer targets are removed.
    pub async fn evaluate_policy_inventory(
        &self,
        policy: &CompliancePolicy,
        only: Option<&[DeviceId]>,
    ) -> Result<EvaluationReport> {
        let now = self.store.clock.now();
        let mut devices = self.target_devices(policy.target()?).await?;
        if let Some(only) = only {
            let only: HashSet<&DeviceId> = only.iter().collect();
            devices.retain(|d| only.contains(d));
        }
        let single = match (only, devices.as_slice()) {
            (Some(_), [d]) => Some(*d),
            _ => None,
        };
        let inventories = if policy.has_inventory_rules() {
            self.inventories(single).await?
        } else {
            HashMap::new()
        };
        let currents: HashMap<DeviceId, Current> = self
            .currents(Some(policy.id), single)
            .await?
            .into_iter()
            .map(|c| (c.device_id, c))
            .collect();
        let mut report = EvaluationReport {
            devices: devices.len(),
            ..Default::default()
        };
        let mut writes = Vec::new();
        for d in &devices {
            let old = currents.get(d);
            match decide(policy, *d, inventories.get(d), old, now) {
                Some(w) => {
                    tally(&mut report, w.status);
                    writes.push(w);
                }
                None => tally(
                    &mut report,
                    old.map_or(ComplianceState::Unknown, |o| o.status),
                ),
            }
        }
        report.changed = writes.len();
        report.status_changes = writes.iter().filter(|w| w.history.is_some()).count();
        let targeted: HashSet<&DeviceId> = devices.iter().collect();
        let gone: Vec<DeviceId> = if only.is_none() {
            currents
                .keys()
                .filter(|d| !targeted.contains(d))
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let mut tx = Tx::begin_in(self).await?;
        write_rows(&mut tx, self.org, &writes, now).await?;
        for d in gone {
            sql("DELETE FROM compliance_status WHERE policy_id = $1 AND device_id = $2 AND org_id = $3")
                .bind(policy.id)
                .bind(d)
                .bind(self.org)
                .execute(&mut tx)
                .await?;
        }
        if only.is_none() {
            sql("UPDATE compliance_policies SET last_evaluated_at = $1 WHERE id = $2 AND org_id = $3")
                .bind(now)
                .bind(policy.id)
                .bind(self.org)
                .execute(&mut tx)
                .await?;
        }
        tx.commit().await?;
        Ok(report)
    }

    /// Re-decides the inventory rules of every active policy that targets `device` (after its
    /// inventory changed): one inventory read, one status read, one write for all policies.
    /// Returns how many rows changed.
    pub async fn evaluate_device_inventory(&self, device: DeviceId) -> Result<usize> {
        let policies: Vec<CompliancePolicy> = sql(format!(
            "SELECT {POLICY_COLUMNS} FROM compliance_policies WHERE org_id = $1 AND active = $2"
        ))
        .bind(self.org)
        .bind(true)
        .fetch_all(self)
        .await?;
        let policies: Vec<CompliancePolicy> = policies
            .into_iter()
            .filter(CompliancePolicy::has_inventory_rules)
            .collect();
        if policies.is_empty() {
            return Ok(0);
        }
        let place: Option<(SiteId,)> =
            sql("SELECT site_id FROM devices WHERE org_id = $1 AND id = $2")
                .bind(self.org)
                .bind(device)
                .fetch_optional(self)
                .await?;
        let Some((site,)) = place else {
            return Ok(0);
        };
        let groups: Vec<(DeviceGroupId,)> =
            sql("SELECT group_id FROM device_group_members WHERE org_id = $1 AND device_id = $2")
                .bind(self.org)
                .bind(device)
                .fetch_all(self)
                .await?;
        let covers = |t: RuleTarget| match t {
            RuleTarget::Organization => true,
            RuleTarget::Site(s) => s == site,
            RuleTarget::Group(g) => groups.iter().any(|(x,)| *x == g),
            RuleTarget::Device(d) => d == device,
        };
        let inventories = self.inventories(Some(device)).await?;
        let facts = inventories.get(&device);
        let currents: HashMap<Uuid, Current> = self
            .currents(None, Some(device))
            .await?
            .into_iter()
            .map(|c| (c.policy_id, c))
            .collect();
        let now = self.store.clock.now();
        let mut writes = Vec::new();
        for p in &policies {
            if !p.target().is_ok_and(covers) {
                continue;
            }
            if let Some(w) = decide(p, device, facts, currents.get(&p.id), now) {
                writes.push(w);
            }
        }
        if writes.is_empty() {
            return Ok(0);
        }
        let mut tx = Tx::begin_in(self).await?;
        write_rows(&mut tx, self.org, &writes, now).await?;
        tx.commit().await?;
        Ok(writes.len())
    }

    /// Online devices `policy` targets whose agent has no check outstanding, at most `limit`,
    /// with the probes to send (empty when the policy has no agent rule).
    pub async fn compliance_check_targets(
        &self,
        policy: &CompliancePolicy,
        only: Option<&[DeviceId]>,
        limit: usize,
    ) -> Result<(Vec<DeviceId>, Vec<ComplianceProbe>)> {
        let probes = agent_probes(&policy.rules);
        if probes.is_empty() {
            return Ok((Vec::new(), probes));
        }
        let targeted: HashSet<DeviceId> = self
            .target_devices(policy.target()?)
            .await?
            .into_iter()
            .collect();
        let online: Vec<(DeviceId,)> =
            sql("SELECT id FROM devices WHERE org_id = $1 AND status = 'online' ORDER BY id")
                .bind(self.org)
                .fetch_all(self)
                .await?;
        let busy: HashSet<DeviceId> = self
            .currents(Some(policy.id), None)
            .await?
            .into_iter()
            .filter(|c| c.check_command_id.is_some())
            .map(|c| c.device_id)
            .collect();
        let devices = online
            .into_iter()
            .map(|(d,)| d)
            .filter(|d| targeted.contains(d) && !busy.contains(d))
            .filter(|d| only.is_none_or(|o| o.contains(d)))
            .take(limit)
            .collect();
        Ok((devices, probes))
    }

    /// Records that `command` checks `device` for `policy` (its row is created when missing).
    pub async fn set_compliance_check(
        &self,
        policy: &CompliancePolicy,
        device: DeviceId,
        command: Uuid,
    ) -> Result<()> {
        let now = self.store.clock.now();
        let old = self.currents(Some(policy.id), Some(device)).await?.pop();
        let results = match &old {
            Some(o) => o.results.clone(),
            None => decide(policy, device, None, None, now)
                .map(|w| w.results)
                .unwrap_or_default(),
        };
        if let Some(w) = write_for(policy, device, results, old.as_ref(), Some(command), now) {
            let mut tx = Tx::begin_in(self).await?;
            write_rows(&mut tx, self.org, &[w], now).await?;
            tx.commit().await?;
        }
        Ok(())
    }

    /// Folds a finished `ComplianceCheck` command into `device`'s results for `policy`: each
    /// probe's answer becomes its rule's result (a failed or timed-out command leaves the agent
    /// rules undecided, saying why). A command that is not the row's awaited check changes
    /// nothing. Returns the device's status after.
    pub async fn fold_compliance_check(
        &self,
        policy: &CompliancePolicy,
        device: DeviceId,
        command: &CommandRecord,
    ) -> Result<Option<ComplianceState>> {
        if !command.is_terminal() {
            return Ok(None);
        }
        let Some(old) = self.currents(Some(policy.id), Some(device)).await?.pop() else {
            return Ok(None);
        };
        if old.check_command_id != Some(command.id) {
            return Ok(Some(old.status));
        }
        let answers: Option<Vec<ProbeResult>> = command
            .result
            .as_ref()
            .and_then(|r| r.get("checks"))
            .and_then(|c| serde_json::from_value(c.clone()).ok());
        let agent_rules: Vec<usize> = policy
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_inventory())
            .map(|(i, _)| i)
            .collect();
        let why = match (&answers, command.status.as_str()) {
            (Some(a), _) if a.len() == agent_rules.len() => None,
            (Some(_), _) => Some("the agent answered a different set of checks".to_owned()),
            (None, status) => Some(format!(
                "the agent check {status}: {}",
                command.error.as_deref().unwrap_or("no result")
            )),
        };
        let mut results = old.results.clone();
        for (k, i) in agent_rules.iter().enumerate() {
            let result = match (&why, &answers) {
                (None, Some(a)) => RuleResult {
                    rule: *i,
                    source: RuleSource::Agent,
                    passed: a[k].passed,
                    detail: a[k].detail.clone(),
                },
                (w, _) => RuleResult {
                    rule: *i,
                    source: RuleSource::Agent,
                    passed: None,
                    detail: w.clone().unwrap_or_default(),
                },
            };
            match results.iter_mut().find(|r| r.rule == *i) {
                Some(slot) => *slot = result,
                None => results.push(result),
            }
        }
        results.sort_by_key(|r| r.rule);
        let now = self.store.clock.now();
        let status = overall(policy.rules.len(), &results);
        if let Some(w) = write_for(policy, device, results, Some(&old), None, now) {
            let mut tx = Tx::begin_in(self).await?;
            write_rows(&mut tx, self.org, &[w], now).await?;
            tx.commit().await?;
        }
        Ok(Some(status))
    }

    /// Devices' standings: of one policy and/or one device, optionally of one status, by
    /// hostname, at most `limit` (1–500).
    pub async fn compliance_statuses(
        &self,
        policy: Option<Uuid>,
        device: Option<DeviceId>,
        status: Option<ComplianceState>,
        limit: u32,
    ) -> Result<Vec<ComplianceStatus>> {
        let mut q = sql(format!(
            "SELECT {STATUS_COLUMNS} FROM compliance_status s JOIN devices d \
             ON d.id = s.device_id AND d.org_id = s.org_id WHERE s.org_id = $1"
        ))
        .bind(self.org);
        if let Some(p) = policy {
            let p = q.arg(p);
            q.push(&format!(" AND s.policy_id = {p}"));
        }
        if let Some(d) = device {
            let d = q.arg(d);
            q.push(&format!(" AND s.device_id = {d}"));
        }
        if let Some(s) = status {
            let s = q.arg(s.as_str());
            q.push(&format!(" AND s.status = {s}"));
        }
        let l = q.arg(i64::from(limit.clamp(1, 500)));
        q.push(&format!(
            " ORDER BY d.hostname, s.device_id, s.policy_id LIMIT {l}"
        ));
        q.fetch_all(self).await
    }

    /// Per policy, how many devices stand in each status.
    pub async fn compliance_summary(&self) -> Result<Vec<PolicySummary>> {
        let counts: Vec<(Uuid, String, i64)> = sql(
            "SELECT policy_id, status, COUNT(*) FROM compliance_status WHERE org_id = $1 \
             GROUP BY policy_id, status",
        )
        .bind(self.org)
        .fetch_all(self)
        .await?;
        let mut by: HashMap<Uuid, PolicySummary> = HashMap::new();
        for (p, s, n) in counts {
            let e = by.entry(p).or_default();
            let n = u64::try_from(n).unwrap_or(0);
            match s.parse::<ComplianceState>() {
                Ok(ComplianceState::Compliant) => e.compliant = n,
                Ok(ComplianceState::NonCompliant) => e.non_compliant = n,
                _ => e.unknown += n,
            }
        }
        Ok(self
            .list_compliance_policies()
            .await?
            .into_iter()
            .map(|p| {
                let c = by.remove(&p.id).unwrap_or_default();
                PolicySummary {
                    policy_id: p.id,
                    name: p.name,
                    active: p.active,
                    ..c
                }
            })
            .collect())
    }

    /// Status changes, newest first: of a policy and/or a device, at most `limit` (1–200).
    pub async fn compliance_history(
        &self,
        policy: Option<Uuid>,
        device: Option<DeviceId>,
        limit: u32,
    ) -> Result<Vec<ComplianceChange>> {
        let mut q = sql(
            "SELECT id, policy_id, device_id, from_status, to_status, results, at \
             FROM compliance_history WHERE org_id = $1",
        )
        .bind(self.org);
        if let Some(p) = policy {
            let p = q.arg(p);
            q.push(&format!(" AND policy_id = {p}"));
        }
        if let Some(d) = device {
            let d = q.arg(d);
            q.push(&format!(" AND device_id = {d}"));
        }
        let l = q.arg(i64::from(limit.clamp(1, 200)));
        q.push(&format!(" ORDER BY at DESC, id DESC LIMIT {l}"));
        q.fetch_all(self).await
    }

    // ---- remediations ------------------------------------------------------------------------

    /// Queues a remediation of `policy` on its non-compliant devices (at most
    /// [`MAX_REMEDIATION_DEVICES`], or those of `only`), acting as `requested_by`. Refused when
    /// the policy has no script, no device is non-compliant, or one is already open.
    pub async fn queue_remediation(
        &self,
        policy: Uuid,
        only: Option<&[DeviceId]>,
        requested_by: &str,
        audit: AuditEvent,
    ) -> Result<Remediation> {
        let p = self.get_compliance_policy(policy).await?;
        let Some(script) = p.remediation_script_id else {
            return Err(StoreError::Invalid(
                "the policy has no remediationScriptId; set one with action=update".into(),
            ));
        };
        let mut devices: Vec<DeviceId> = self
            .compliance_statuses(Some(policy), None, Some(ComplianceState::NonCompliant), 500)
            .await?
            .into_iter()
            .map(|s| s.device_id)
            .filter(|d| only.is_none_or(|o| o.contains(d)))
            .collect();
        if devices.is_empty() {
            return Err(StoreError::Invalid(
                "no device is non-compliant with this policy; nothing to remediate".into(),
            ));
        }
        devices.truncate(MAX_REMEDIATION_DEVICES);
        let open: i64 = sql(
            "SELECT COUNT(*) FROM compliance_remediations WHERE org_id = $1 AND policy_id = $2 \
             AND status IN ('queued', 'running', 'pending_approval')",
        )
        .bind(self.org)
        .bind(policy)
        .fetch_scalar(self)
        .await?;
        if open > 0 {
            return Err(StoreError::Conflict(
                "a remediation of this policy is already open; follow it with action=get".into(),
            ));
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO compliance_remediations ({REMEDIATION_COLUMNS}) VALUES ($1, $2, $3, $4, \
             'queued', $5, $6, $7, NULL, $8, NULL, NULL)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(policy)
        .bind(requested_by)
        .bind(Arg::json(&devices))
        .bind(Arg::json(&Vec::<Uuid>::new()))
        .bind(Arg::json(&Vec::<DeviceOutcome>::new()))
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(self.org)
            .resource(policy)
            .details(serde_json::json!({
                "remediationId": id, "scriptId": script, "devices": devices,
                "requestedBy": requested_by,
            }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_remediation(id).await
    }

    /// One remediation of this organization.
    pub async fn get_remediation(&self, id: Uuid) -> Result<Remediation> {
        REMEDIATIONS.get(self, id).await
    }

    /// A policy's remediations, newest first, at most `limit` (1–100).
    pub async fn list_remediations(&self, policy: Uuid, limit: u32) -> Result<Vec<Remediation>> {
        sql(format!(
            "SELECT {REMEDIATION_COLUMNS} FROM compliance_remediations WHERE org_id = $1 \
             AND policy_id = $2 ORDER BY created_at DESC, id DESC LIMIT $3"
        ))
        .bind(self.org)
        .bind(policy)
        .bind(i64::from(limit.clamp(1, 100)))
        .fetch_all(self)
        .await
    }

    /// Records a remediation's progress or end (audited `compliance.remediation.finish` when
    /// it ends, `.wait` otherwise).
    pub async fn update_remediation(
        &self,
        id: Uuid,
        update: RemediationUpdate,
    ) -> Result<Remediation> {
        REMEDIATIONS.update(self, id, update).await
    }

    /// Finishes a remediation waiting for approval: [`crate::OrgCompliance::update_remediation`] only if
    /// it is still `pending_approval`; `None` when another instance finished it first (every
    /// instance's worker sees the waiting row, one records its end).
    pub async fn finish_awaiting_remediation(
        &self,
        id: Uuid,
        update: RemediationUpdate,
    ) -> Result<Option<Remediation>> {
        REMEDIATIONS
            .update_from(self, id, update, Some(RunStatus::PendingApproval))
            .await
    }
}

impl Store {
    /// After a device's inventory changed: re-decides the inventory rules of the active
    /// policies targeting it. Best effort — a failure is logged, never the caller's.
    pub(crate) async fn compliance_inventory_changed(&self, org: OrgId, device: DeviceId) {
        if let Err(e) = self
            .org(org)
            .compliance()
            .evaluate_device_inventory(device)
            .await
        {
            tracing::warn!(device = %device, error = %e, "compliance re-evaluation failed");
        }
    }

    /// Takes the lease of `policy`'s due evaluation: moves `next_evaluation_at` from `due` to
    /// now + its period with one conditional statement, so one instance evaluates it.
    pub async fn claim_compliance_evaluation(
        &self,
        policy: &CompliancePolicy,
        due: Timestamp,
    ) -> Result<bool> {
        let next = self.clock.now() + chrono::Duration::minutes(policy.evaluate_every_minutes);
        EVALUATION_LEASE
            .claim(self, (policy.id, policy.org_id), due, Some(next))
            .await
    }
}

impl CrossOrg<'_> {
    /// Active policies of every organization whose evaluation is due at `now`, soonest first.
    pub async fn due_compliance_policies(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<CompliancePolicy>> {
        EVALUATION_LEASE.due(self.store, now, limit).await
    }

    /// Agent checks whose command is final, for the worker to fold in, at most `limit`.
    pub async fn finished_compliance_checks(&self, limit: u32) -> Result<Vec<FinishedCheck>> {
        sql(
            "SELECT s.org_id, s.policy_id, s.device_id, s.check_command_id FROM compliance_status s \
             JOIN device_commands c ON c.id = s.check_command_id AND c.org_id = s.org_id \
             WHERE s.check_command_id IS NOT NULL \
             AND c.status IN ('completed', 'failed', 'timed_out', 'cancelled') LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// Takes up to `limit` queued remediations (each by a conditional update) and marks them
    /// running.
    pub async fn claim_queued_remediations(&self, limit: u32) -> Result<Vec<Remediation>> {
        REMEDIATIONS.claim_queued(self.store, limit).await
    }

    /// Remediations waiting for approval of their script runs, oldest first.
    pub async fn remediations_awaiting_approval(&self, limit: u32) -> Result<Vec<Remediation>> {
        REMEDIATIONS.awaiting_approval(self.store, limit).await
    }
}
