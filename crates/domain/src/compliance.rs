//! Compliance policies' agent checks: queuing the `ComplianceCheck` commands that decide a
//! policy's agent rules (service running, file present, a setting, disk encryption, firewall).
//!
//! `manage_policies evaluate` and the server's compliance worker both send them; they send
//! them the same way here — which devices (online, targeted, with no check outstanding, at most
//! a bound), which command (the policy's probes, its time limits and output cap), its audit
//! record, and the device's standing recording the check awaited — so an answer is folded in
//! the same way whoever asked.

use breeze_agent_proto::CommandKind;
use breeze_core::{Actor, AuditEvent, DeviceId};
use breeze_gateway::OrgFleet;
use breeze_store::{CompliancePolicy, NewCommand, OrgCompliance};
use uuid::Uuid;

use crate::Result;

/// How long an agent may take to answer a check.
const CHECK_TIMEOUT_SECS: u32 = 60;
/// How long a check waits for an offline agent before it expires.
const CHECK_QUEUE_TTL: chrono::Duration = chrono::Duration::minutes(5);
/// The most output a check's answer may carry (verdicts, never contents).
const CHECK_OUTPUT_CAP: u64 = 64 * 1024;

/// One organization's compliance checks: its store and its agents.
pub struct ComplianceChecks<'a> {
    org: OrgCompliance<'a>,
    fleet: OrgFleet<'a>,
}

impl<'a> ComplianceChecks<'a> {
    pub fn new(org: OrgCompliance<'a>, fleet: OrgFleet<'a>) -> Self {
        Self { org, fleet }
    }

    /// Queues one `ComplianceCheck` of `policy`'s agent rules on each online targeted device
    /// (of `only`, when given) with no check outstanding, at most `max`, each audited as
    /// `actor` and recorded as the device's awaited check. The devices and their commands.
    pub async fn queue(
        &self,
        policy: &CompliancePolicy,
        only: Option<&[DeviceId]>,
        max: usize,
        actor: &Actor,
        request_id: Option<String>,
    ) -> Result<Vec<(DeviceId, Uuid)>> {
        let (devices, probes) = self.org.compliance_check_targets(policy, only, max).await?;
        let mut sent = Vec::new();
        for d in devices {
            let audit = AuditEvent::new(actor.clone(), "compliance.check", "device_command")
                .request(request_id.clone());
            let cmd = self
                .fleet
                .submit(
                    NewCommand {
                        device_id: d,
                        kind: CommandKind::ComplianceCheck {
                            checks: probes.clone(),
                        },
                        timeout_secs: CHECK_TIMEOUT_SECS,
                        output_cap_bytes: CHECK_OUTPUT_CAP,
                        queue_ttl: CHECK_QUEUE_TTL,
                        script: None,
                        created_by: actor.to_string(),
                    },
                    audit,
                )
                .await?;
            self.org.set_compliance_check(policy, d, cmd.id).await?;
            sent.push((d, cmd.id));
        }
        Ok(sent)
    }
}
