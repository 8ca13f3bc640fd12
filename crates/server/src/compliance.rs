//! The compliance worker, one of the server's background tasks ([`crate::serve`]).
//!
//! Each [`ComplianceWorker::tick`]:
//! 1. **Evaluations.** Active policies whose `next_evaluation_at` is due (by the store's
//!    `Clock`) are claimed through that lease ([`Store::claim_compliance_evaluation`]: one
//!    instance per period), their inventory rules re-decided for every targeted device, and a
//!    `ComplianceCheck` queued on each online targeted device with no check outstanding (at
//!    most `checks_per_policy`). A policy with `enforcement: remediate` that finds
//!    non-compliant devices queues a remediation as its owner (one open at a time).
//! 2. **Answers.** Agent checks whose command is final are folded into the devices' results.
//! 3. **Remediations.** Queued remediations are claimed (one instance each) and run in tracked
//!    tasks; those waiting for approval are finished once their requests are.
//!
//! **The Tier 3 rule.** A remediation's script goes through [`Pipeline::call`] as `run_script`
//! — the same guard (scope, role, per-tool limit, allowlist) and the same durable approval as
//! an MCP call — as the credential that asked for it (the caller of `remediate`, or the
//! policy's owner for one the worker queued), rebuilt as it stands now
//! ([`breeze_pipeline::standing`]). Nothing reaches an agent any other way; this is the
//! automation worker's path, shared in `owner_runs`.

use std::{sync::Arc, time::Duration};

use crate::{
    owner_runs::{self, ScriptCall, overall},
    workers::{Tasks, Worker},
};
use breeze_core::{AuditEvent, PolicyEnforcement, RunStatus};
use breeze_domain::compliance::ComplianceChecks;
use breeze_gateway::Gateway;
use breeze_pipeline::Pipeline;
use breeze_store::{
    CompliancePolicy, Remediation, RemediationUpdate, Store, StoreError, compliance_actor,
};

/// The worker's pace and bounds.
#[derive(Debug, Clone)]
pub struct ComplianceConfig {
    /// How often a tick runs.
    pub tick: Duration,
    /// The most due policies one tick evaluates.
    pub policies_per_tick: u32,
    /// The most agent checks one policy's evaluation queues.
    pub checks_per_policy: usize,
    /// The most finished checks one tick folds in.
    pub answers_per_tick: u32,
    /// The most queued remediations one tick starts.
    pub remediations_per_tick: u32,
}

impl Default for ComplianceConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(30),
            policies_per_tick: 20,
            checks_per_policy: 200,
            answers_per_tick: 1000,
            remediations_per_tick: 10,
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComplianceTick {
    /// Policies this instance evaluated.
    pub evaluated: usize,
    /// Agent checks queued.
    pub checks_sent: usize,
    /// Agent answers folded in.
    pub answers: usize,
    /// Remediations queued by enforcement.
    pub remediations_queued: usize,
    /// Remediations started.
    pub remediations_started: usize,
    /// Remediations this instance finished after their approvals were.
    pub followed_up: usize,
}

/// The compliance worker. Cheap to share (`Arc`).
pub struct ComplianceWorker {
    store: Store,
    gateway: Gateway,
    pipeline: Pipeline,
    config: ComplianceConfig,
    runs: Tasks,
}

impl ComplianceWorker {
    pub fn new(
        store: Store,
        gateway: Gateway,
        pipeline: Pipeline,
        config: ComplianceConfig,
    ) -> Self {
        Self {
            store,
            gateway,
            pipeline,
            config,
            runs: Tasks::default(),
        }
    }
}

/// Runs every `config.tick`.
impl Worker for ComplianceWorker {
    const NAME: &'static str = "compliance worker";
    type Report = ComplianceTick;
    type Error = StoreError;

    fn period(&self) -> Duration {
        self.config.tick
    }

    /// One round: due evaluations, answers, remediations (started in tasks of their own),
    /// approvals.
    async fn tick(self: &Arc<Self>) -> Result<ComplianceTick, StoreError> {
        let mut report = ComplianceTick::default();
        let now = self.store.clock().now();
        for p in self
            .store
            .cross_org()
            .due_compliance_policies(now, self.config.policies_per_tick)
            .await?
        {
            let Some(due) = p.next_evaluation_at else {
                continue;
            };
            if !self.store.claim_compliance_evaluation(&p, due).await? {
                continue;
            }
            report.evaluated += 1;
            let (sent, queued) = self.evaluate(&p).await?;
            report.checks_sent += sent;
            report.remediations_queued += usize::from(queued);
        }
        report.answers = self.fold_answers().await?;
        for r in self
            .store
            .cross_org()
            .claim_queued_remediations(self.config.remediations_per_tick)
            .await?
        {
            report.remediations_started += 1;
            let this = self.clone();
            self.runs.spawn(async move {
                let (org, id) = (r.org_id, r.id);
                if let Err(e) = this.remediate(r).await {
                    tracing::warn!(remediation = %id, error = %e, "remediation failed on the store");
                    let _ = this
                        .store
                        .org(org)
                        .compliance().update_remediation(
                            id,
                            RemediationUpdate::ended(RunStatus::Failed, format!("internal error: {e}")),
                        )
                        .await;
                }
            });
        }
        report.followed_up = self.follow_approvals().await?;
        Ok(report)
    }
}

impl ComplianceWorker {
    /// Waits until every remediation started so far has finished its part (tests, shutdown).
    pub async fn settle(&self) {
        self.runs.settle().await;
    }

    /// One policy's periodic evaluation: (checks sent, remediation queued).
    async fn evaluate(&self, p: &CompliancePolicy) -> Result<(usize, bool), StoreError> {
        let org = self.store.org(p.org_id);
        let report = org.compliance().evaluate_policy_inventory(p, None).await?;
        let sent = ComplianceChecks::new(org.compliance(), self.gateway.org(p.org_id))
            .queue(
                p,
                None,
                self.config.checks_per_policy,
                &compliance_actor(),
                None,
            )
            .await
            .map_err(|breeze_domain::Error::Store(e)| e)?
            .len();
        let mut queued = false;
        if p.enforcement == PolicyEnforcement::Remediate && report.non_compliant > 0 {
            let audit = AuditEvent::new(
                compliance_actor(),
                "compliance.remediation.queue",
                "compliance_policy",
            );
            match org
                .compliance()
                .queue_remediation(p.id, None, &p.owner_actor, audit)
                .await
            {
                Ok(_) => queued = true,
                // One is open already, or nothing is left to do.
                Err(StoreError::Conflict(_) | StoreError::Invalid(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok((sent, queued))
    }

    async fn fold_answers(&self) -> Result<usize, StoreError> {
        let mut folded = 0;
        for f in self
            .store
            .cross_org()
            .finished_compliance_checks(self.config.answers_per_tick)
            .await?
        {
            let org = self.store.org(f.org_id);
            let (policy, command) = match (
                org.compliance().get_compliance_policy(f.policy_id).await,
                org.commands().get_command(f.check_command_id).await,
            ) {
                (Ok(p), Ok(c)) => (p, c),
                (Err(StoreError::NotFound(_)), _) | (_, Err(StoreError::NotFound(_))) => continue,
                (Err(e), _) | (_, Err(e)) => return Err(e),
            };
            org.compliance()
                .fold_compliance_check(&policy, f.device_id, &command)
                .await?;
            folded += 1;
        }
        Ok(folded)
    }

    async fn finish(
        &self,
        r: &Remediation,
        status: RunStatus,
        message: impl Into<String>,
    ) -> Result<(), StoreError> {
        self.store
            .org(r.org_id)
            .compliance()
            .update_remediation(r.id, RemediationUpdate::ended(status, message))
            .await
            .map(drop)
    }

    /// Runs a remediation's script through the pipeline as its requester.
    async fn remediate(&self, r: Remediation) -> Result<(), StoreError> {
        let org = self.store.org(r.org_id);
        let p = match org.compliance().get_compliance_policy(r.policy_id).await {
            Ok(p) => p,
            Err(StoreError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(script) = p.remediation_script_id else {
            return self
                .finish(
                    &r,
                    RunStatus::Failed,
                    "the policy has no remediation script",
                )
                .await;
        };
        let standing = match owner_runs::acting_as(&self.store, r.org_id, &r.requested_by).await? {
            Ok(s) => s,
            Err(why) => return self.finish(&r, RunStatus::Refused, why).await,
        };
        let call = ScriptCall {
            script_id: script,
            parameters: &p.remediation_parameters,
            timeout_seconds: None,
        };
        let done = owner_runs::run_script_as(&self.pipeline, &standing, call, &r.device_ids).await;
        let status = done.status();
        org.compliance()
            .update_remediation(
                r.id,
                RemediationUpdate {
                    status,
                    message: done.message(status, &standing.actor()),
                    approval_ids: done.approvals,
                    devices: done.outcomes,
                },
            )
            .await?;
        Ok(())
    }

    /// Finishes remediations whose approval requests are all final.
    async fn follow_approvals(&self) -> Result<usize, StoreError> {
        let mut done = 0;
        for r in self
            .store
            .cross_org()
            .remediations_awaiting_approval(100)
            .await?
        {
            let Some(records) =
                owner_runs::final_approvals(&self.store, r.org_id, &r.approval_ids).await?
            else {
                continue;
            };
            let (outcomes, note) = owner_runs::settle_approvals(&r.devices, &records);
            // Every instance sees the waiting remediation: the one whose update moves it
            // finishes it, the others record nothing.
            if self
                .store
                .org(r.org_id)
                .compliance()
                .finish_awaiting_remediation(
                    r.id,
                    RemediationUpdate {
                        status: overall(&outcomes),
                        approval_ids: r.approval_ids.clone(),
                        devices: outcomes,
                        message: note.or(r.message.clone()),
                    },
                )
                .await?
                .is_some()
            {
                done += 1;
            }
        }
        Ok(done)
    }
}
