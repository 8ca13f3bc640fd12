//! `breeze config-policies`: create, update, delete, list and assign configuration policies
//! through the store, each change audited (actor `system:cli`). Organization policies are
//! assigned with the `apply_configuration_policy` tool as well; partner-wide policies
//! (`--partner`) are made and assigned here only. Settings are given per feature as
//! `--feature TYPE=JSON` (e.g. `monitoring='{"metricIntervalSeconds":15}'`) and checked like the
//! tools check them (an error names the field). Agents connected to a running server get a
//! change made here when they next connect or send an HTTP heartbeat; the tools push at once.

use anyhow::{Context, bail};
use breeze_core::{Actor, AuditEvent, ConfigLevel, FeatureType, PolicyStatus};
use breeze_store::{ConfigPolicy, ConfigPolicyUpdate, NewAssignment, NewConfigPolicy};
use clap::Subcommand;
use uuid::Uuid;

use super::App;

fn cli_audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("cli"), action, "config_policy")
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
        #[arg(long, conflicts_with = "partner", required_unless_present = "partner")]
        org: Option<String>,
        #[arg(long)]
        partner: Option<String>,
        #[arg(long)]
        name: String,
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
        #[arg(long)]
        org: String,
        policy: Uuid,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        description: Option<String>,
        #[arg(long)]
        status: Option<String>,
        #[arg(long = "feature")]
        features: Vec<String>,
    },
    /// Delete an organization's policy and its assignments.
    Delete {
        #[arg(long)]
        org: String,
        policy: Uuid,
    },
    /// List the policies an organization sees, with their assignments.
    List {
        #[arg(long)]
        org: String,
    },
    /// Assign a policy: an organization's at a level of its hierarchy (--org, --level,
    /// --target), or a partner's partner-wide (--partner).
    Assign {
        #[arg(long, conflicts_with = "partner", required_unless_present = "partner")]
        org: Option<String>,
        #[arg(long)]
        partner: Option<String>,
        policy: Uuid,
        /// organization, site, device_group or device (with --org).
        #[arg(long)]
        level: Option<String>,
        /// The organization, site, group or device id (with --org; default the organization).
        #[arg(long)]
        target: Option<Uuid>,
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
                let new = NewConfigPolicy {
                    name,
                    description,
                    status: status.parse::<PolicyStatus>().context("--status")?,
                    settings: features(&raw)?,
                    created_by: "system:cli".into(),
                };
                let policy = match (org, partner) {
                    (Some(org), _) => {
                        let org = store.find_organization(&org).await.context("--org")?;
                        store
                            .org(org.id)
                            .create_config_policy(new, cli_audit("config_policy.create"))
                            .await?
                    }
                    (None, Some(partner)) => {
                        let partner = store.find_partner(&partner).await.context("--partner")?;
                        store
                            .create_partner_config_policy(
                                partner.id,
                                new,
                                cli_audit("config_policy.create"),
                            )
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
                let p = store
                    .org(org.id)
                    .update_config_policy(policy, update, cli_audit("config_policy.update"))
                    .await?;
                println!("updated {}", describe(&p));
            }
            ConfigPoliciesCommand::Delete { org, policy } => {
                let org = store.find_organization(&org).await.context("--org")?;
                let p = store
                    .org(org.id)
                    .delete_config_policy(policy, cli_audit("config_policy.delete"))
                    .await?;
                println!("deleted {}", p.name);
            }
            ConfigPoliciesCommand::List { org } => {
                let org = store.find_organization(&org).await.context("--org")?;
                let o = store.org(org.id);
                let assignments = o.list_config_assignments().await?;
                for p in o.list_config_policies(None).await? {
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
                let a = match (org, partner) {
                    (Some(org), _) => {
                        let org = store.find_organization(&org).await.context("--org")?;
                        let level: ConfigLevel = level
                            .as_deref()
                            .unwrap_or("organization")
                            .parse()
                            .context("--level")?;
                        store
                            .org(org.id)
                            .assign_config_policy(
                                NewAssignment {
                                    policy_id: policy,
                                    level,
                                    target_id: target.unwrap_or(org.id.0),
                                    priority,
                                    created_by: "system:cli".into(),
                                },
                                cli_audit("config_policy.assign"),
                            )
                            .await?
                    }
                    (None, Some(partner)) => {
                        let partner = store.find_partner(&partner).await.context("--partner")?;
                        store
                            .assign_partner_config_policy(
                                partner.id,
                                policy,
                                priority,
                                "system:cli",
                                cli_audit("config_policy.assign"),
                            )
                            .await?
                    }
                    (None, None) => bail!("--org or --partner is required"),
                };
                println!(
                    "assigned {}  {} {} priority {}",
                    a.id, a.level, a.target_id, a.priority
                );
            }
        }
        Ok(())
    }
}
