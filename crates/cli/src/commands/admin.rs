//! Administration from a shell: partners, organizations, users and API keys.
//!
//! These commands act as the system (audit actor `system:cli`): whoever runs them already holds
//! the database.

use std::io::BufRead;

use anyhow::{Context, bail};
use breeze_auth::{CreateApiKey, password};
use breeze_core::{Actor, AuditEvent, ScopeSet, tenancy::slugify};
use breeze_store::NewUser;
use chrono::Duration;
use clap::{Args, Subcommand};
use rand::{Rng, distributions::Alphanumeric};

use super::App;

fn cli_audit(action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("cli"), action, resource)
}

#[derive(Debug, Subcommand)]
pub(crate) enum PartnersCommand {
    /// Create a partner (an MSP).
    Create {
        /// The partner's name.
        #[arg(long)]
        name: String,
        /// Defaults to one derived from the name.
        #[arg(long)]
        slug: Option<String>,
    },
    /// List partners.
    List,
}

impl PartnersCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            PartnersCommand::Create { name, slug } => {
                let slug = slug.unwrap_or_else(|| slugify(&name));
                let p = app
                    .store
                    .create_partner(&name, &slug, cli_audit("partner.create", "partner"))
                    .await?;
                println!("created partner {} ({}) {}", p.name, p.slug, p.id);
            }
            PartnersCommand::List => {
                for p in app.store.list_partners().await? {
                    println!("{}  {:<24} {}", p.id, p.slug, p.name);
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum OrgsCommand {
    /// Create an organization under a partner.
    Create {
        /// Partner id or slug.
        #[arg(long)]
        partner: String,
        /// The organization's name.
        #[arg(long)]
        name: String,
        /// The short name used in URLs and commands (default: made from the name).
        #[arg(long)]
        slug: Option<String>,
    },
    /// List a partner's organizations.
    List {
        /// The partner (slug or id).
        #[arg(long)]
        partner: String,
    },
}

impl OrgsCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            OrgsCommand::Create {
                partner,
                name,
                slug,
            } => {
                let partner = app
                    .store
                    .find_partner(&partner)
                    .await
                    .context("--partner")?;
                let slug = slug.unwrap_or_else(|| slugify(&name));
                let o = app
                    .store
                    .create_organization(
                        partner.id,
                        &name,
                        &slug,
                        cli_audit("organization.create", "organization"),
                    )
                    .await?;
                println!("created organization {} ({}) {}", o.name, o.slug, o.id);
            }
            OrgsCommand::List { partner } => {
                let partner = app
                    .store
                    .find_partner(&partner)
                    .await
                    .context("--partner")?;
                for o in app.store.list_organizations(partner.id).await? {
                    println!("{}  {:<24} {}", o.id, o.slug, o.name);
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum UsersCommand {
    /// Create a user with a role in one or more organizations, or in all of a partner's
    /// (`--partner`: a partner admin).
    Create(CreateUser),
    /// Disable a user: they cannot sign in, their sessions end and every OAuth grant of theirs
    /// is revoked (AI clients must be authorized again after re-enabling).
    Disable {
        /// The user's email.
        email: String,
    },
    /// Re-enable a disabled user. Nothing revoked when they were disabled comes back.
    Enable {
        /// The user's email.
        email: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct CreateUser {
    /// The user's sign-in email address.
    #[arg(long)]
    email: String,
    /// The user's full name.
    #[arg(long)]
    name: String,
    /// Organization id or slug; repeat for a partner-level user with access to several.
    #[arg(long = "org", required_unless_present = "partner")]
    orgs: Vec<String>,
    /// Role to hold in each organization (Administrator, Technician, Read Only).
    #[arg(long, default_value = "Administrator")]
    role: String,
    /// A partner admin: a partner-level user of this partner (id or slug) holding --role in
    /// every organization of the partner, present and future (a role given in an --org wins
    /// there).
    #[arg(long)]
    partner: Option<String>,
    /// Make a partner-level user even with a single --org.
    #[arg(long)]
    partner_level: bool,
    /// Read the password from the first line of standard input instead of generating one.
    #[arg(long)]
    password_stdin: bool,
}

/// Disables or re-enables the user with `email`, saying what that ended.
async fn set_disabled(app: &App, email: &str, disabled: bool) -> anyhow::Result<()> {
    let user = app
        .store
        .find_user_for_login(email)
        .await?
        .with_context(|| format!("no user with email {email:?}"))?
        .user;
    let action = if disabled {
        "user.disable"
    } else {
        "user.enable"
    };
    let (sessions, grants) = app
        .store
        .set_user_disabled(
            user.id,
            disabled,
            breeze_core::AuditEvent::new(breeze_core::Actor::system("cli"), action, "user"),
        )
        .await?;
    if disabled {
        println!(
            "disabled {}: {sessions} session(s) ended, {grants} OAuth grant(s) revoked",
            user.email
        );
    } else {
        println!(
            "enabled {} (no session or OAuth grant is restored: they sign in and authorize \
             their AI clients again)",
            user.email
        );
    }
    Ok(())
}

/// A random password of 20 letters and digits.
pub(crate) fn generate_password() -> String {
    random_secret(20)
}

/// `len` random letters and digits from the OS-seeded generator.
pub(crate) fn random_secret(len: usize) -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

impl UsersCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        let args = match self {
            UsersCommand::Create(args) => args,
            UsersCommand::Disable { email } => return set_disabled(app, &email, true).await,
            UsersCommand::Enable { email } => return set_disabled(app, &email, false).await,
        };
        let mut orgs = Vec::new();
        for r in &args.orgs {
            orgs.push(
                app.store
                    .find_organization(r)
                    .await
                    .with_context(|| format!("--org {r}"))?,
            );
        }
        let partner_wide = match &args.partner {
            Some(p) => Some(app.store.find_partner(p).await.context("--partner")?),
            None => None,
        };
        let partner = match (&partner_wide, orgs.first()) {
            (Some(p), _) => p.id,
            (None, Some(o)) => o.partner_id,
            (None, None) => bail!("give --org (one or more) or --partner"),
        };
        if orgs.iter().any(|o| o.partner_id != partner) {
            bail!("every --org must belong to the same partner (and to --partner)");
        }
        let role = app
            .store
            .find_role(partner, &args.role)
            .await
            .with_context(|| format!("--role {}", args.role))?;
        let (password, generated) = if args.password_stdin {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the password from stdin")?;
            (line.trim_end_matches(['\r', '\n']).to_owned(), false)
        } else {
            (generate_password(), true)
        };
        let hash = password::hash(&password)?;
        let partner_level = args.partner_level || orgs.len() > 1 || partner_wide.is_some();
        let user = app
            .store
            .create_user(
                NewUser {
                    partner_id: partner,
                    org_id: if partner_level {
                        None
                    } else {
                        orgs.first().map(|o| o.id)
                    },
                    email: args.email,
                    name: args.name,
                    password_hash: hash,
                },
                cli_audit("user.create", "user"),
            )
            .await?;
        for o in &orgs {
            app.store
                .assign_role(
                    user.id,
                    o.id,
                    role.id,
                    cli_audit("user.role.assign", "user"),
                )
                .await?;
        }
        if let Some(p) = &partner_wide {
            app.store
                .assign_partner_role(
                    user.id,
                    role.id,
                    cli_audit("user.partner_role.assign", "user"),
                )
                .await?;
            println!(
                "created user {} ({}) with role {} in every organization of {}",
                user.email, user.id, role.name, p.slug
            );
        } else {
            let names: Vec<&str> = orgs.iter().map(|o| o.slug.as_str()).collect();
            println!(
                "created user {} ({}) with role {} in {}",
                user.email,
                user.id,
                role.name,
                names.join(", ")
            );
        }
        if generated {
            println!("password: {password}");
            println!("(shown once; pass --password-stdin to choose one)");
        }
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Create an API key; prints the secret once.
    Create {
        /// Organization id or slug.
        #[arg(long)]
        org: String,
        /// Email of the user the key acts as.
        #[arg(long)]
        user: String,
        /// A name for the key, e.g. where it is used ("Claude Desktop on my laptop").
        #[arg(long)]
        name: String,
        /// Comma-separated: ai:read, ai:write, ai:execute, ai:execute_admin, *.
        #[arg(long)]
        scopes: String,
        /// Expire after this many days.
        #[arg(long)]
        expires_in_days: Option<u32>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List an organization's keys (never their secrets).
    List {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
    },
    /// Revoke a key at once.
    Revoke {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The key's id.
        id: String,
    },
}

impl KeysCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            KeysCommand::Create {
                org,
                user,
                name,
                scopes,
                expires_in_days,
                json,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let scopes = ScopeSet::parse_list(&scopes).context("--scopes")?;
                let user = app
                    .store
                    .find_user_for_login(&user)
                    .await?
                    .with_context(|| format!("--user: no user with email {user:?}"))?
                    .user;
                let expires_at =
                    expires_in_days.map(|d| app.clock.now() + Duration::days(i64::from(d)));
                let (secret, record) = app
                    .auth
                    .create_api_key(
                        CreateApiKey {
                            org_id: org.id,
                            user_id: user.id,
                            name,
                            scopes,
                            expires_at,
                        },
                        cli_audit("api_key.create", "api_key"),
                    )
                    .await?;
                if json {
                    let mut v = serde_json::to_value(&record)?;
                    v["key"] = secret.expose().into();
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    println!(
                        "created API key {} ({}) for {} in {}",
                        record.name, record.id, user.email, org.slug
                    );
                    println!("scopes: {}", record.scopes);
                    println!("key: {}", secret.expose());
                    println!("(shown once; Breeze stores only its SHA-256)");
                }
            }
            KeysCommand::List { org } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let now = app.clock.now();
                for k in app.store.org(org.id).api_keys().list_api_keys().await? {
                    let state = match (k.revoked_at, k.is_active(now)) {
                        (Some(_), _) => "revoked",
                        (None, false) => "expired",
                        (None, true) => "active",
                    };
                    let last = k
                        .last_used_at
                        .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339());
                    println!(
                        "{}  {:<8} {:<10} {:<28} {:<32} last used {last}",
                        k.id, state, k.key_prefix, k.name, k.scopes
                    );
                }
            }
            KeysCommand::Revoke { org, id } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let id = id
                    .parse()
                    .with_context(|| format!("{id:?} is not a key id"))?;
                let k = app
                    .store
                    .org(org.id)
                    .api_keys()
                    .revoke_api_key(id, cli_audit("api_key.revoke", "api_key"))
                    .await?;
                println!("revoked API key {} ({})", k.name, k.id);
            }
        }
        Ok(())
    }
}
