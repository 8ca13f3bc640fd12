//! Configuration policies: every change that can alter a device's effective configuration,
//! written with its audit record and then sent to the agents it concerns.
//!
//! Creating, updating and deleting a policy, assigning it and removing an assignment are the
//! same operation whether the MCP tools (`apply_configuration_policy`,
//! `remove_configuration_policy_assignment`) or `breeze config-policies` ask: one audit action
//! per operation (`config_policy.create|update|delete` on the policy,
//! `config_policy.assign|unassign` on the assignment), and the devices the change covers are
//! sent their new effective configuration through [`Agents`] — by the gateway in a server, by a
//! cluster-bus announcement from the CLI. Resolution itself is `breeze_core::config_policy`;
//! what is stored is `breeze_store`'s.

use breeze_core::{Actor, AuditEvent, ConfigLevel, DeviceId, OrgId, PartnerId};
use breeze_gateway::Gateway;
use breeze_store::{
    ConfigAssignment, ConfigPolicy, ConfigPolicyUpdate, NewAssignment, NewConfigPolicy,
    OrgConfigPolicies, Store,
};
use uuid::Uuid;

use crate::{Agents, Result};

/// An assignment to make: a policy at a level of the organization's hierarchy.
#[derive(Debug, Clone)]
pub struct Assign {
    pub policy_id: Uuid,
    /// organization, site, device group or device (partner-wide: [`PartnerConfigPolicies`]).
    pub level: ConfigLevel,
    /// The organization, site, group or device id.
    pub target_id: Uuid,
    /// 0–1000; higher wins on the same level.
    pub priority: i64,
}

/// What a change wrote, and the devices whose agents were sent their effective configuration
/// again (those it covers; a device whose configuration came out the same gets the same
/// revision, which the agent ignores).
#[derive(Debug)]
pub struct Changed<T> {
    pub value: T,
    pub devices: Vec<DeviceId>,
}

/// One organization's configuration policies, for an actor who was authorized to change them.
pub struct ConfigPolicies<'a> {
    org: OrgConfigPolicies<'a>,
    agents: Agents<'a>,
    actor: Actor,
    request_id: Option<String>,
}

impl<'a> ConfigPolicies<'a> {
    /// Changes made through `org` as `actor`, sent to agents through `agents`.
    pub fn new(org: OrgConfigPolicies<'a>, agents: Agents<'a>, actor: Actor) -> Self {
        Self {
            org,
            agents,
            actor,
            request_id: None,
        }
    }

    /// The request id the audit records carry.
    #[must_use]
    pub fn request(mut self, request_id: Option<String>) -> Self {
        self.request_id = request_id;
        self
    }

    fn audit(&self, action: &str, resource: &str) -> AuditEvent {
        AuditEvent::new(self.actor.clone(), action, resource).request(self.request_id.clone())
    }

    /// Creates a policy owned by the organization, created by the actor. It covers no device
    /// until assigned, so nothing is sent.
    pub async fn create(&self, new: NewPolicy) -> Result<ConfigPolicy> {
        let new = NewConfigPolicy {
            name: new.name,
            description: new.description,
            status: new.status,
            settings: new.settings,
            created_by: self.actor.to_string(),
        };
        Ok(self
            .org
            .create_config_policy(new, self.audit("config_policy.create", "config_policy"))
            .await?)
    }

    /// Changes one of the organization's policies (settings, status, name); the devices its
    /// assignments cover are sent their configuration.
    pub async fn update(
        &self,
        id: Uuid,
        update: ConfigPolicyUpdate,
    ) -> Result<Changed<ConfigPolicy>> {
        let policy = self
            .org
            .update_config_policy(
                id,
                update,
                self.audit("config_policy.update", "config_policy"),
            )
            .await?;
        let devices = self.covered_by_policy(policy.id).await?;
        self.send(&devices).await?;
        Ok(Changed {
            value: policy,
            devices,
        })
    }

    /// Deletes one of the organization's policies with its assignments; the devices they
    /// covered are sent what the rest of the hierarchy resolves.
    pub async fn delete(&self, id: Uuid) -> Result<Changed<ConfigPolicy>> {
        // Read before the assignments go with the policy. An assignment made between the two
        // statements is deleted with the rest, its devices not sent: they get it at their
        // next connection or HTTP heartbeat.
        let devices = self.covered_by_policy(id).await?;
        let policy = self
            .org
            .delete_config_policy(id, self.audit("config_policy.delete", "config_policy"))
            .await?;
        self.send(&devices).await?;
        Ok(Changed {
            value: policy,
            devices,
        })
    }

    /// Assigns a policy; the devices the assignment covers are sent their configuration.
    pub async fn assign(&self, assign: Assign) -> Result<Changed<ConfigAssignment>> {
        let new = NewAssignment {
            policy_id: assign.policy_id,
            level: assign.level,
            target_id: assign.target_id,
            priority: assign.priority,
            created_by: self.actor.to_string(),
        };
        let assignment = self
            .org
            .assign_config_policy(
                new,
                self.audit("config_policy.assign", "config_policy_assignment"),
            )
            .await?;
        let devices = self.covered(assignment.level, assignment.target_id).await?;
        self.send(&devices).await?;
        Ok(Changed {
            value: assignment,
            devices,
        })
    }

    /// Removes an assignment; the devices it covered are sent what the rest resolves.
    pub async fn unassign(&self, id: Uuid) -> Result<Changed<ConfigAssignment>> {
        let assignment = self
            .org
            .remove_config_assignment(
                id,
                self.audit("config_policy.unassign", "config_policy_assignment"),
            )
            .await?;
        let devices = self.covered(assignment.level, assignment.target_id).await?;
        self.send(&devices).await?;
        Ok(Changed {
            value: assignment,
            devices,
        })
    }

    /// The organization's devices an assignment at `level` on `target` covers.
    async fn covered(&self, level: ConfigLevel, target: Uuid) -> Result<Vec<DeviceId>> {
        let only = (level == ConfigLevel::Device).then(|| vec![DeviceId(target)]);
        Ok(self
            .org
            .device_places(only.as_deref())
            .await?
            .into_iter()
            .filter(|p| p.covers(level, target))
            .map(|p| DeviceId(p.device))
            .collect())
    }

    /// The organization's devices some assignment of `policy` covers.
    async fn covered_by_policy(&self, policy: Uuid) -> Result<Vec<DeviceId>> {
        let assignments: Vec<ConfigAssignment> = self
            .org
            .list_config_assignments()
            .await?
            .into_iter()
            .filter(|a| a.policy_id == policy)
            .collect();
        if assignments.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .org
            .device_places(None)
            .await?
            .into_iter()
            .filter(|p| assignments.iter().any(|a| p.covers(a.level, a.target_id)))
            .map(|p| DeviceId(p.device))
            .collect())
    }

    async fn send(&self, devices: &[DeviceId]) -> Result<()> {
        if devices.is_empty() {
            return Ok(());
        }
        send(self.org, self.agents, Some(devices.to_vec())).await
    }
}

/// A policy to create: its settings per feature, checked by the store as `validate_feature`
/// decides.
#[derive(Debug, Clone)]
pub struct NewPolicy {
    pub name: String,
    pub description: Option<String>,
    pub status: breeze_core::PolicyStatus,
    pub settings: Vec<(breeze_core::FeatureType, serde_json::Value)>,
}

/// Sends the effective configuration of `devices` (`None`: all) of `org` to their agents.
async fn send(
    org: OrgConfigPolicies<'_>,
    agents: Agents<'_>,
    devices: Option<Vec<DeviceId>>,
) -> Result<()> {
    match agents {
        Agents::Gateway(fleet) => {
            let devices = match devices {
                Some(d) => d,
                None => org
                    .device_places(None)
                    .await?
                    .into_iter()
                    .map(|p| DeviceId(p.device))
                    .collect(),
            };
            fleet.push_policies(devices);
        }
        Agents::Bus => org.announce_policies_changed(devices).await,
    }
    Ok(())
}

/// A partner's partner-wide configuration policies, which every organization of the partner
/// sees and resolves at the partner level. Partner rows are reached through the store itself,
/// so this handle holds it; it touches only the partner's policies and assignments and the
/// agents of the partner's organizations.
pub struct PartnerConfigPolicies<'a> {
    store: &'a Store,
    partner: PartnerId,
    /// A server's gateway (the agents connected here, the rest through the bus); `None`: the
    /// bus alone (the CLI).
    gateway: Option<&'a Gateway>,
    actor: Actor,
}

impl<'a> PartnerConfigPolicies<'a> {
    pub fn new(
        store: &'a Store,
        partner: PartnerId,
        gateway: Option<&'a Gateway>,
        actor: Actor,
    ) -> Self {
        Self {
            store,
            partner,
            gateway,
            actor,
        }
    }

    fn audit(&self, action: &str, resource: &str) -> AuditEvent {
        AuditEvent::new(self.actor.clone(), action, resource)
    }

    /// Creates a partner-wide policy (nothing is sent until it is assigned).
    pub async fn create(&self, new: NewPolicy) -> Result<ConfigPolicy> {
        let new = NewConfigPolicy {
            name: new.name,
            description: new.description,
            status: new.status,
            settings: new.settings,
            created_by: self.actor.to_string(),
        };
        Ok(self
            .store
            .create_partner_config_policy(
                self.partner,
                new,
                self.audit("config_policy.create", "config_policy"),
            )
            .await?)
    }

    /// Assigns a partner policy at the partner level: every device of every organization of
    /// the partner is sent its configuration. The organizations sent to are returned.
    pub async fn assign(
        &self,
        policy: Uuid,
        priority: i64,
    ) -> Result<(ConfigAssignment, Vec<OrgId>)> {
        let assignment = self
            .store
            .assign_partner_config_policy(
                self.partner,
                policy,
                priority,
                &self.actor.to_string(),
                self.audit("config_policy.assign", "config_policy_assignment"),
            )
            .await?;
        let mut orgs = Vec::new();
        for org in self.store.list_organizations(self.partner).await? {
            let agents = self
                .gateway
                .map_or(Agents::Bus, |g| Agents::Gateway(g.org(org.id)));
            send(self.store.org(org.id).config_policies(), agents, None).await?;
            orgs.push(org.id);
        }
        Ok((assignment, orgs))
    }
}
