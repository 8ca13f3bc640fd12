//! `breeze config-policies`: create, update, delete, list and assign configuration policies.
//! Changes are `breeze_domain::config_policies`, the same operations the tools run (actor
//! `system:cli`, each audited). Organization policies are assigned with the
//! `apply_configuration_policy` tool as well; partner-wide policies (`--partner`) are made and
//! assigned here only. Settings are given per feature as `--feature TYPE=JSON` (e.g.
//! `monitoring='{"metricIntervalSeconds":15}'`) and checked like the tools check them (an
//! error names the field).
//!
//! This process holds no agent sockets: a change is announced on the cluster bus (awaited
//! before the command returns), and the running servers push it to the agents connected to
//! them. On SQLite there is no bus: agents get the change when they next connect or send an
//! HTTP heartbeat.

use anyhow::{Context, bail};
use breeze_core::{Actor, ConfigLevel, FeatureType, PolicyStatus};
use breeze_domain::{
    Agents,
    config_policies::{Assign, ConfigPolicies, NewPolicy, PartnerConfigPolicies},
};
use breeze_store::{ConfigPolicy, ConfigPolicyUpdate};
use clap::Subcommand;
use uuid::Uuid;

use super::App;

/// One organization's policies as the CLI changes them.
fn org_policies(app: &App, org: breeze_core::OrgId) -> ConfigPolicies<'_> {
    ConfigPolicies::new(
        app.store.org(org).config_policies(),
        Agents::Bus,
        Actor::system("cli"),
    )
}

/// The devices a change covers (their agents are sent it), for the command's output.
fn sent(devices: usize) -> String {
    match devices {
        0 => String::new(),
        n => format!(" ({n} device(s) affected)"),
    }
}

fn features(raw: &[String]) -> anyhow::Result<Vec<(FeatureType, serde_json::Value)>> {
    raw.iter()
        .map(|f| {
            let (kind, json) = f
                .split_once('=')
                .with_context(|| format!("--feature {f:?}: expected TYPE=JSON"))?;
            let kind: FeatureType = kind.parse().context("--feature")?;
            let value: serde_json::Value = serde_json::from_str(json)
                .with_context(|| format!("--feature {kind}: not JSON"))?;
            Ok((kind, value))
        })
        .collect()
}

fn describe(p: &ConfigPolicy) -> String {
    format!(
        "{}  {:<8} {}  {}",
        p.id,
        p.status,
        p.name,
        serde_json::to_string(&p.settings).unwrap_or_default()
    )
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigPoliciesCommand {
    /// Create a policy for an organization (--org) or partner-wide (--partner).
    Create {
        /// The organization (slug or id).
        #[arg(long, conflicts_with = "partner", required_unless_present = "partner")]
        org: Option<String>,
        /// The partner (slug or id).
        #[arg(long)]
        partner: Option<String>,
        /// The policy's name.
        #[arg(long)]
        name: String,
        /// A description shown beside the name.
        #[arg(long)]
        description: Option<String>,
        /// active (default) or inactive.
        #[arg(long, default_value = "active")]
        status: String,
        /// TYPE=JSON, repeatable: monitoring, agent_log, patch, maintenance, monitored_services.
        #[arg(long = "feature", required = true)]
        features: Vec<String>,
    },
    /// Change an organization's policy; --feature replaces all of its settings.
    Update {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The policy's id (as `config-policies list` shows it).
        policy: Uuid,
        /// The policy's name.
        #[arg(long)]
        name: Option<String>,
        /// A description shown beside the name.
        #[arg(long)]
        description: Option<String>,
        /// active or inactive.
        #[arg(long)]
        status: Option<String>,
        /// TYPE=JSON, repeatable: replaces all of the policy's settings.
        #[arg(long = "feature")]
        features: Vec<String>,
    },
    /// Delete an organization's policy and its assignments.
    Delete {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The policy's id (as `config-policies list` shows it).
        policy: Uuid,
    },
    /// List the policies an organization sees, with their assignments.
    List {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
    },
    /// Assign a policy: an organization's at a level of its hierarchy (--org, --level,
    /// --target), or a partner's partner-wide (--partner).
    Assign {
        /// The organization (slug or id).
        #[arg(long, conflicts_with = "partner", required_unless_present = "partner")]
        org: Option<String>,
        /// The partner (slug or id).
        #[arg(long)]
        partner: Option<String>,
        /// The policy's id (as `config-policies list` shows it).
        policy: Uuid,
        /// organization, site, device_group or device (with --org).
        #[arg(long)]
        level: Option<String>,
        /// The organization, site, group or device id (with --org; default the organization).
        #[arg(long)]
        target: Option<Uuid>,
        /// Higher wins when two assignments set the same feature (default 0).
        #[arg(long, default_value_t = 0)]
        priority: i64,
    },
}

impl ConfigPoliciesCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        let store = &app.store;
        match self {
            ConfigPoliciesCommand::Create {
                org,
                partner,
                name,
                description,
                status,
                features: raw,
            } => {
                let new = NewPolicy {
                    name,
                    description,
                    status: status.parse::<PolicyStatus>().context("--status")?,
                    settings: features(&raw)?,
                };
                let policy = match (org, partner) {
                    (Some(org), _) => {
                        let org = store.find_organization(&org).await.context("--org")?;
                        org_policies(app, org.id).create(new).await?
                    }
                    (None, Some(partner)) => {
                        let partner = store.find_partner(&partner).await.context("--partner")?;
                        PartnerConfigPolicies::new(store, partner.id, None, Actor::system("cli"))
                            .create(new)
                            .await?
                    }
                    (None, None) => bail!("--org or --partner is required"),
                };
                println!("created {}", describe(&policy));
            }
            ConfigPoliciesCommand::Update {
                org,
                policy,
                name,
                description,
                status,
                features: raw,
            } => {
                let org = store.find_organization(&org).await.context("--org")?;
                let update = ConfigPolicyUpdate {
                    name,
                    description,
                    status: status
                        .map(|s| s.parse::<PolicyStatus>())
                        .transpose()
                        .context("--status")?,
                    settings: if raw.is_empty() {
                        None
                    } else {
                        Some(features(&raw)?)
                    },
                };
                let changed = org_policies(app, org.id).update(policy, update).await?;
                println!(
                    "updated {}{}",
                    describe(&changed.value),
                    sent(changed.devices.len())
                );
            }
            ConfigPoliciesCommand::Delete { org, policy } => {
                let org = store.find_organization(&org).await.context("--org")?;
                let changed = org_policies(app, org.id).delete(policy).await?;
                println!(
                    "deleted {}{}",
                    changed.value.name,
                    sent(changed.devices.len())
                );
            }
            ConfigPoliciesCommand::List { org } => {
                let org = store.find_organization(&org).await.context("--org")?;
                let o = store.org(org.id);
                let assignments = o.config_policies().list_config_assignments().await?;
                for p in o.config_policies().list_config_policies(None).await? {
                    println!("{}", describe(&p));
                    for a in assignments.iter().filter(|a| a.policy_id == p.id) {
                        println!(
                            "    {}  {} {} priority {}",
                            a.id, a.level, a.target_id, a.priority
                        );
                    }
                }
            }
            ConfigPoliciesCommand::Assign {
                org,
                partner,
                policy,
                level,
                target,
                priority,
            } => {
                let (a, note) = match (org, partner) {
                    (Some(org), _) => {
                        let org = store.find_organization(&org).await.context("--org")?;
                        let level: ConfigLevel = level
                            .as_deref()
                            .unwrap_or("organization")
                            .parse()
                            .context("--level")?;
                        let changed = org_policies(app, org.id)
                            .assign(Assign {
                                policy_id: policy,
                                level,
                                target_id: target.unwrap_or(org.id.0),
                                priority,
                            })
                            .await?;
                        (changed.value, sent(changed.devices.len()))
                    }
                    (None, Some(partner)) => {
                        let partner = store.find_partner(&partner).await.context("--partner")?;
                        let (a, orgs) = PartnerConfigPolicies::new(
                            store,
                            partner.id,
                            None,
                            Actor::system("cli"),
                        )
                        .assign(policy, priority)
                        .await?;
                        (a, format!(" ({} organization(s) affected)", orgs.len()))
                    }
                    (None, None) => bail!("--org or --partner is required"),
                };
                println!(
                    "assigned {}  {} {} priority {}{note}",
                    a.id, a.level, a.target_id, a.priority
                );
            }
        }
        Ok(())
    }
}
