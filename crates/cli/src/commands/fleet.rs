//! Fleet administration from a shell: agent enrollment keys and the script library.
//!
//! Like the other admin commands these act as the system (audit actor `system:cli`).

use anyhow::{Context, bail};
use breeze_auth::CreateEnrollmentKey;
use breeze_core::{Actor, AuditEvent, Organization, Site};
use breeze_store::{NewScript, Script, ScriptParameter};
use chrono::Duration;
use clap::Subcommand;

use super::App;

fn cli_audit(action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("cli"), action, resource)
}

async fn site_of(app: &App, org: &Organization, site: &str) -> anyhow::Result<Site> {
    let sites = app.store.org(org.id).tenancy().list_sites().await?;
    sites
        .into_iter()
        .find(|s| s.id.to_string() == site || s.name.eq_ignore_ascii_case(site))
        .with_context(|| format!("--site: no site {site:?} in {}", org.slug))
}

#[derive(Debug, Subcommand)]
pub(crate) enum EnrollmentKeysCommand {
    /// Create a site-scoped key agents enroll with (`breeze-agent enroll --key …`).
    Create {
        /// Organization id or slug.
        #[arg(long)]
        org: String,
        /// Site id or name.
        #[arg(long)]
        site: String,
        /// A name for the enrollment key (e.g. the site or batch it is for).
        #[arg(long, default_value = "agent rollout")]
        name: String,
        /// How many enrollments the key allows (unlimited when omitted).
        #[arg(long)]
        max_uses: Option<u32>,
        /// Hours until the key expires (1 to 720).
        #[arg(long, default_value_t = 24)]
        expires_in_hours: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List an organization's enrollment keys (never their secrets).
    List {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
    },
    /// Revoke a key; devices it enrolled keep working.
    Revoke {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The enrollment key's id (as `enrollment-keys list` shows it).
        id: String,
    },
}

impl EnrollmentKeysCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            EnrollmentKeysCommand::Create {
                org,
                site,
                name,
                max_uses,
                expires_in_hours,
                json,
            } => {
                if !(1..=720).contains(&expires_in_hours) {
                    bail!("--expires-in-hours must be between 1 and 720");
                }
                let org = app.store.find_organization(&org).await.context("--org")?;
                let site = site_of(app, &org, &site).await?;
                let (secret, record) = app
                    .auth
                    .create_enrollment_key(
                        CreateEnrollmentKey {
                            org_id: org.id,
                            site_id: site.id,
                            name,
                            max_uses,
                            expires_at: app.clock.now() + Duration::hours(expires_in_hours),
                            created_by: "system:cli".into(),
                        },
                        cli_audit("enrollment_key.create", "enrollment_key"),
                    )
                    .await?;
                if json {
                    let mut v = serde_json::to_value(&record)?;
                    v["key"] = secret.expose().into();
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    println!(
                        "created enrollment key {} ({}) for {} / {}, expires {}",
                        record.name,
                        record.id,
                        org.slug,
                        site.name,
                        record.expires_at.to_rfc3339()
                    );
                    println!("key: {}", secret.expose());
                    println!("(shown once; Breeze stores only its SHA-256)");
                }
            }
            EnrollmentKeysCommand::List { org } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let now = app.clock.now();
                for k in app
                    .store
                    .org(org.id)
                    .agents()
                    .list_enrollment_keys()
                    .await?
                {
                    let state = if k.revoked_at.is_some() {
                        "revoked"
                    } else if k.expires_at <= now {
                        "expired"
                    } else if k.max_uses.is_some_and(|m| k.uses >= m) {
                        "used-up"
                    } else {
                        "active"
                    };
                    let uses = k
                        .max_uses
                        .map_or_else(|| format!("{}", k.uses), |m| format!("{}/{m}", k.uses));
                    println!(
                        "{}  {:<8} {:<10} uses {:<8} {}",
                        k.id, state, k.key_prefix, uses, k.name
                    );
                }
            }
            EnrollmentKeysCommand::Revoke { org, id } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let id = uuid::Uuid::parse_str(&id)
                    .with_context(|| format!("{id:?} is not an enrollment key id"))?;
                let k = app
                    .store
                    .org(org.id)
                    .agents()
                    .revoke_enrollment_key(id, cli_audit("enrollment_key.revoke", "enrollment_key"))
                    .await?;
                println!("revoked enrollment key {} ({})", k.name, k.id);
            }
        }
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum DevicesCommand {
    /// Create synthetic devices (no agent) for load tests and demos: hostnames `sim-00001`…,
    /// mixed OS families, about a fifth offline. One transaction, one audit record.
    Seed {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// Site id or name (default: the organization's first site).
        #[arg(long)]
        site: Option<String>,
        /// How many synthetic devices to create.
        #[arg(long)]
        count: u32,
        /// Also give them what agents and technicians would have added: inventories (about 870
        /// packages on Linux), heartbeats with signed-in users, a week of metrics for the first
        /// ten, context notes for the first thousand.
        #[arg(long)]
        with_inventory: bool,
    },
    /// Issue a one-time re-enroll token for a device: `breeze-agent enroll --key …
    /// --reenroll-token …` on the machine then re-enrolls that device itself (an enrollment
    /// key alone never takes over an existing device).
    ReenrollToken {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The device id.
        device: String,
        /// Hours until the token expires (1 to 168).
        #[arg(long, default_value_t = breeze_auth::REENROLL_TOKEN_HOURS)]
        expires_in_hours: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

impl DevicesCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        let (org, site, count, with_inventory) = match self {
            DevicesCommand::Seed {
                org,
                site,
                count,
                with_inventory,
            } => (org, site, count, with_inventory),
            DevicesCommand::ReenrollToken {
                org,
                device,
                expires_in_hours,
                json,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let device = uuid::Uuid::parse_str(&device)
                    .map(breeze_core::DeviceId)
                    .with_context(|| format!("{device:?} is not a device id"))?;
                let (token, expires_at) = app
                    .auth
                    .issue_reenroll_token(
                        org.id,
                        device,
                        expires_in_hours,
                        cli_audit("device.reenroll_token.issue", "device"),
                    )
                    .await?;
                if json {
                    let v = serde_json::json!({
                        "token": token.expose(), "device_id": device, "expires_at": expires_at,
                    });
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    println!(
                        "re-enroll token for device {device}, expires {}",
                        expires_at.to_rfc3339()
                    );
                    println!("token: {}", token.expose());
                    println!("(one use, shown once; Breeze stores only its SHA-256)");
                }
                return Ok(());
            }
        };
        if count == 0 || count > 100_000 {
            bail!("--count must be between 1 and 100000");
        }
        let org = app.store.find_organization(&org).await.context("--org")?;
        let site = match site {
            Some(s) => site_of(app, &org, &s).await?,
            None => app
                .store
                .org(org.id)
                .tenancy()
                .list_sites()
                .await?
                .into_iter()
                .next()
                .context("the organization has no site; create one first")?,
        };
        let families = [
            (breeze_core::OsFamily::Linux, "Ubuntu", "24.04"),
            (breeze_core::OsFamily::Windows, "Windows 11 Pro", "23H2"),
            (breeze_core::OsFamily::Macos, "macOS", "15.1"),
        ];
        let now = app.clock.now();
        let devices: Vec<breeze_store::NewDevice> = (1..=count)
            .map(|i| {
                let (family, name, version) = families[i as usize % families.len()];
                breeze_store::NewDevice {
                    site_id: site.id,
                    hostname: format!("sim-{i:05}"),
                    os_family: family,
                    os_name: name.into(),
                    os_version: version.into(),
                    status: if i % 5 == 0 {
                        breeze_core::DeviceStatus::Offline
                    } else {
                        breeze_core::DeviceStatus::Online
                    },
                    agent_version: Some("0.1.0".into()),
                    last_seen_at: Some(now - Duration::seconds(i64::from(i % 600))),
                    tags: vec!["simulated".into()],
                }
            })
            .collect();
        let hostnames: std::collections::HashSet<String> =
            devices.iter().map(|d| d.hostname.clone()).collect();
        let n = app
            .store
            .org(org.id)
            .devices()
            .create_devices(devices, cli_audit("device.bulk_create", "device"))
            .await?;
        println!(
            "created {n} simulated devices in {} / {}",
            org.slug, site.name
        );
        if with_inventory {
            let seeded = seeded_devices(app, org.id, &hostnames).await?;
            super::fleet_seed::seed(app, org.id, &seeded).await?;
            println!(
                "added inventories, heartbeats, metrics and notes to {} devices",
                seeded.len()
            );
        }
        Ok(())
    }
}

/// The devices just created (by hostname, newest of each name), in hostname order.
async fn seeded_devices(
    app: &App,
    org: breeze_core::OrgId,
    hostnames: &std::collections::HashSet<String>,
) -> anyhow::Result<Vec<breeze_core::Device>> {
    let filter = breeze_store::DeviceFilter {
        tags: vec!["simulated".into()],
        ..Default::default()
    };
    let mut out: Vec<breeze_core::Device> = Vec::new();
    let page = 1_000;
    let mut offset = 0;
    loop {
        let (devices, total) = app
            .store
            .org(org)
            .devices()
            .list_devices(&filter, page, offset)
            .await?;
        let got = devices.len() as u32;
        out.extend(
            devices
                .into_iter()
                .filter(|d| hostnames.contains(&d.hostname)),
        );
        offset += got;
        if got == 0 || u64::from(offset) >= total {
            break;
        }
    }
    // An earlier seed's devices share the names; keep the newest of each.
    out.sort_by(|a, b| (&a.hostname, b.created_at).cmp(&(&b.hostname, a.created_at)));
    out.dedup_by(|a, b| a.hostname == b.hostname);
    Ok(out)
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScriptsCommand {
    /// Add a script to an organization's library.
    Add {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The script's name.
        #[arg(long)]
        name: String,
        /// bash, sh, python or powershell.
        #[arg(long)]
        language: String,
        /// The script body.
        #[arg(long)]
        file: std::path::PathBuf,
        /// A description shown beside the name.
        #[arg(long, default_value = "")]
        description: String,
        /// The script category (e.g. maintenance, security).
        #[arg(long, default_value = "general")]
        category: String,
        /// A declared parameter, in order: NAME, NAME! (required) or NAME=DEFAULT. Repeatable.
        #[arg(long = "param")]
        params: Vec<String>,
    },
    /// List an organization's scripts.
    List {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The script category (e.g. maintenance, security).
        #[arg(long)]
        category: Option<String>,
    },
    /// Show a script, body included.
    Show {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// Id or name.
        script: String,
    },
    /// Remove a script (past executions keep its name).
    Remove {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// Id or name.
        script: String,
    },
}

/// Parses `NAME`, `NAME!` or `NAME=DEFAULT`.
fn parameter(spec: &str) -> ScriptParameter {
    let (name, default) = match spec.split_once('=') {
        Some((n, d)) => (n, Some(d.to_owned())),
        None => (spec, None),
    };
    let (name, required) = match name.strip_suffix('!') {
        Some(n) => (n, true),
        None => (name, false),
    };
    ScriptParameter {
        name: name.trim().to_owned(),
        description: String::new(),
        required,
        default,
    }
}

fn describe(s: &Script) -> String {
    format!(
        "{}  {:<10} {:<12} {}{}",
        s.id,
        s.language,
        s.category,
        s.name,
        if s.description.is_empty() {
            String::new()
        } else {
            format!(" — {}", s.description)
        }
    )
}

impl ScriptsCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            ScriptsCommand::Add {
                org,
                name,
                language,
                file,
                description,
                category,
                params,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let body = std::fs::read_to_string(&file)
                    .with_context(|| format!("--file: cannot read {}", file.display()))?;
                let script = app
                    .store
                    .org(org.id)
                    .scripts()
                    .create_script(
                        NewScript {
                            name,
                            description,
                            language,
                            category,
                            body,
                            parameters: params.iter().map(|p| parameter(p)).collect(),
                            created_by: "system:cli".into(),
                        },
                        cli_audit("script.create", "script"),
                    )
                    .await?;
                println!("added script {}", describe(&script));
            }
            ScriptsCommand::List { org, category } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                for s in app
                    .store
                    .org(org.id)
                    .scripts()
                    .list_scripts(category.as_deref(), None)
                    .await?
                {
                    println!("{}", describe(&s));
                }
            }
            ScriptsCommand::Show { org, script } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let s = app.store.org(org.id).scripts().find_script(&script).await?;
                println!("{}", describe(&s));
                for p in &s.parameters {
                    println!(
                        "  param {}{}{}",
                        p.name,
                        if p.required { " (required)" } else { "" },
                        p.default
                            .as_ref()
                            .map_or_else(String::new, |d| format!(" default {d:?}"))
                    );
                }
                println!("---\n{}", s.body);
            }
            ScriptsCommand::Remove { org, script } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let store = app.store.org(org.id);
                let s = store.scripts().find_script(&script).await?;
                store
                    .scripts()
                    .delete_script(s.id, cli_audit("script.delete", "script"))
                    .await?;
                println!("removed script {} ({})", s.name, s.id);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parameter;

    #[test]
    fn parameters_parse() {
        let p = parameter("target!");
        assert!(p.required && p.name == "target" && p.default.is_none());
        let p = parameter("days=7");
        assert!(!p.required && p.name == "days" && p.default.as_deref() == Some("7"));
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ChannelsCommand {
    /// Add a notification channel. A webhook's signing secret is read from --secret-file, or
    /// generated and printed once; it is never shown again.
    Add {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The channel's name.
        #[arg(long)]
        name: String,
        /// email, webhook or in_app.
        #[arg(long)]
        kind: String,
        /// Email: a recipient (repeatable).
        #[arg(long = "to")]
        to: Vec<String>,
        /// Webhook: the http(s) URL it posts to.
        #[arg(long)]
        url: Option<String>,
        /// Webhook: a file holding the signing secret (at least 16 characters).
        #[arg(long)]
        secret_file: Option<std::path::PathBuf>,
    },
    /// List an organization's channels (never their secrets).
    List {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
    },
    /// Remove a channel that no alert rule names.
    Remove {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// Id or name.
        channel: String,
    },
}

fn describe_channel(c: &breeze_store::NotificationChannel) -> String {
    let target = match c.kind {
        breeze_core::ChannelKind::Email => c.config["to"]
            .as_array()
            .map(|to| {
                to.iter()
                    .filter_map(serde_json::Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default(),
        // The URL's query may carry a token: only scheme, host and path are shown.
        breeze_core::ChannelKind::Webhook => c.config["url"]
            .as_str()
            .map(|u| u.split(['?', '#']).next().unwrap_or("").to_owned())
            .unwrap_or_default(),
        breeze_core::ChannelKind::InApp => String::new(),
    };
    format!("{}  {:<8} {}  {}", c.id, c.kind, c.name, target)
}

impl ChannelsCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            ChannelsCommand::Add {
                org,
                name,
                kind,
                to,
                url,
                secret_file,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let kind: breeze_core::ChannelKind = kind.parse().context("--kind")?;
                let (config, secret, generated) = match kind {
                    breeze_core::ChannelKind::Email => {
                        (serde_json::json!({ "to": to }), None, false)
                    }
                    breeze_core::ChannelKind::Webhook => {
                        let url = url.context("--url is required for a webhook")?;
                        let (secret, generated) = match secret_file {
                            Some(path) => (
                                std::fs::read_to_string(&path)
                                    .with_context(|| {
                                        format!("--secret-file: cannot read {}", path.display())
                                    })?
                                    .trim()
                                    .to_owned(),
                                false,
                            ),
                            None => (super::admin::random_secret(32), true),
                        };
                        (serde_json::json!({ "url": url }), Some(secret), generated)
                    }
                    breeze_core::ChannelKind::InApp => (serde_json::json!({}), None, false),
                };
                let shown = secret.clone().filter(|_| generated);
                let channel = app
                    .store
                    .org(org.id)
                    .alerts()
                    .create_channel(
                        breeze_store::NewChannel {
                            name,
                            kind,
                            config,
                            secret,
                        },
                        cli_audit("notification_channel.create", "notification_channel"),
                    )
                    .await?;
                println!("added channel {}", describe_channel(&channel));
                if let Some(secret) = shown {
                    println!("signing secret (shown once, keep it with the receiver): {secret}");
                }
            }
            ChannelsCommand::List { org } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                for c in app.store.org(org.id).alerts().list_channels().await? {
                    println!("{}", describe_channel(&c));
                }
            }
            ChannelsCommand::Remove { org, channel } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let store = app.store.org(org.id);
                let found = store
                    .alerts()
                    .list_channels()
                    .await?
                    .into_iter()
                    .find(|c| c.id.to_string() == channel || c.name == channel)
                    .with_context(|| format!("no channel {channel:?} in this organization"))?;
                store
                    .alerts()
                    .delete_channel(
                        found.id,
                        cli_audit("notification_channel.delete", "notification_channel"),
                    )
                    .await?;
                println!("removed channel {} ({})", found.name, found.id);
            }
        }
        Ok(())
    }
}
