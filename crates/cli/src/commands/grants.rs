//! `breeze grants`: a user's OAuth grants — the AI clients they connected — listed with their
//! connection state, and revoked (one, or all of them) through the store, audited as the
//! dashboard's and the REST API's revocations are (`oauth.grant.revoke`).

use anyhow::{Context, bail};
use breeze_core::{Actor, AuditEvent, GrantId, UserId};
use clap::Subcommand;

use super::App;

#[derive(Debug, Subcommand)]
pub(crate) enum GrantsCommand {
    /// List a user's grants: client, organization, scopes, created, last used, state.
    List {
        /// The user's email.
        #[arg(long)]
        user: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a user's grant (every token of it stops working at once), or all of them.
    Revoke {
        /// The user's email.
        #[arg(long)]
        user: String,
        /// The grant's id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Revoke every active grant of the user.
        #[arg(long)]
        all: bool,
    },
}

async fn user_id(app: &App, email: &str) -> anyhow::Result<UserId> {
    Ok(app
        .store
        .find_user_for_login(email)
        .await?
        .with_context(|| format!("--user: no user with email {email:?}"))?
        .user
        .id)
}

fn revoke_audit() -> AuditEvent {
    AuditEvent::new(Actor::system("cli"), "oauth.grant.revoke", "oauth_grant")
}

impl GrantsCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            GrantsCommand::List { user, json } => {
                let user = user_id(app, &user).await?;
                let grants = app.store.user_oauth_grants(user).await?;
                if json {
                    let rows: Vec<serde_json::Value> = grants
                        .iter()
                        .map(|g| {
                            serde_json::json!({
                                "id": g.id, "client_id": g.client_id,
                                "client_name": g.client_name, "organization_id": g.org_id,
                                "scopes": g.scopes, "state": breeze_oauth::connection_state(g),
                                "created_at": g.created_at, "last_used_at": g.last_used_at,
                                "revoked_at": g.revoked_at, "revoke_reason": g.revoke_reason,
                            })
                        })
                        .collect();
                    println!("{}", serde_json::to_string_pretty(&rows)?);
                    return Ok(());
                }
                if grants.is_empty() {
                    println!("no OAuth grants");
                }
                for g in grants {
                    let last = g
                        .last_used_at
                        .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339());
                    println!(
                        "{}  {:<10} {:<28} org {}  scopes {:<36} created {}  last used {last}",
                        g.id,
                        breeze_oauth::connection_state(&g),
                        g.client_name,
                        g.org_id,
                        g.scopes.join(" "),
                        g.created_at.to_rfc3339(),
                    );
                }
            }
            GrantsCommand::Revoke { user, id, all } => {
                let user = user_id(app, &user).await?;
                if all {
                    let n = app
                        .store
                        .revoke_user_oauth_grants(user, "revoked_by_admin", revoke_audit())
                        .await?;
                    println!("revoked {n} OAuth grant(s)");
                    return Ok(());
                }
                let Some(id) = id else {
                    bail!("name the grant's id, or --all");
                };
                let id: GrantId = id
                    .parse()
                    .with_context(|| format!("{id:?} is not a grant id"))?;
                let g = app
                    .store
                    .revoke_user_oauth_grant(user, id, revoke_audit())
                    .await
                    .context("no such grant of that user")?;
                println!(
                    "revoked OAuth grant {} ({}); state {}",
                    g.id,
                    g.client_name,
                    breeze_oauth::connection_state(&g)
                );
            }
        }
        Ok(())
    }
}
