//! `breeze approvals`: list, show and decide step-up approval requests from a shell, and set
//! an organization's approval modes. Decisions are made as a named person (`--user EMAIL`), with
//! the same checks as the REST API: their role must allow the call, and under four-eyes the
//! requester cannot approve their own request. A request approved here while the server is down
//! runs once when the server comes back.

use anyhow::Context;
use breeze_core::{Actor, ActorType, AuditEvent};
use breeze_store::{ApprovalRecord, Decision};
use clap::Subcommand;

use super::App;

#[derive(Debug, Subcommand)]
pub(crate) enum ApprovalsCommand {
    /// List an organization's approval requests (pending ones unless --all).
    List {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// Decided and expired requests too (default: pending ones only).
        #[arg(long)]
        all: bool,
    },
    /// Show one request with its arguments and outcome.
    Show {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The approval request's id (as `approvals list` shows it).
        id: String,
    },
    /// Approve a pending request: it runs once.
    Approve(DecideArgs),
    /// Deny a pending request.
    Deny(DecideArgs),
    /// Deny a request as suspicious and revoke the API key that made it.
    Report(DecideArgs),
    /// Set who must approve an action class: `*` (the organization's default), a tool, or
    /// `tool.action`.
    Policy {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The action class: `*`, a tool name, or tool.action.
        #[arg(long)]
        class: String,
        /// supervised (the requester may approve), four_eyes (someone else must) or
        /// automatic (the policy approves at once; only for a read-only `tool.action` such as
        /// execute_command.list_processes).
        #[arg(long, value_parser = ["supervised", "four_eyes", "automatic"])]
        mode: String,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct DecideArgs {
    /// The approval request's id (as `approvals list` shows it).
    id: String,
    /// The person deciding (their role must allow the call).
    #[arg(long)]
    user: String,
    /// Why: kept with the decision in the audit log.
    #[arg(long)]
    reason: Option<String>,
}

fn line(r: &ApprovalRecord) -> String {
    format!(
        "{}  {:<10} {:<10} expires {}  {}",
        r.id,
        r.status,
        r.mode,
        r.expires_at.to_rfc3339(),
        r.description
    )
}

impl ApprovalsCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        let (decision, args) = match self {
            ApprovalsCommand::List { org, all } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                for r in app
                    .store
                    .org(org.id)
                    .approvals()
                    .list_approvals(!all, 200)
                    .await?
                {
                    println!("{}", line(&r));
                }
                return Ok(());
            }
            ApprovalsCommand::Show { org, id } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let id = uuid::Uuid::parse_str(&id).context("not an approval request id")?;
                let r = app.store.org(org.id).approvals().get_approval(id).await?;
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(());
            }
            ApprovalsCommand::Policy { org, class, mode } => {
                breeze_tools::all()
                    .check_approval_policy(&class, &mode)
                    .map_err(anyhow::Error::msg)?;
                let org = app.store.find_organization(&org).await.context("--org")?;
                app.store
                    .org(org.id)
                    .approvals()
                    .set_approval_policy(
                        &class,
                        &mode,
                        AuditEvent::new(
                            Actor::system("cli"),
                            "approval_policy.set",
                            "organization",
                        ),
                    )
                    .await?;
                println!("{}: {class} → {mode}", org.slug);
                return Ok(());
            }
            ApprovalsCommand::Approve(a) => (Decision::Approve, a),
            ApprovalsCommand::Deny(a) => (Decision::Deny, a),
            ApprovalsCommand::Report(a) => (Decision::Report, a),
        };
        let user = app
            .store
            .find_user_for_login(&args.user)
            .await?
            .with_context(|| format!("--user: no user with email {:?}", args.user))?
            .user;
        let id = uuid::Uuid::parse_str(&args.id).context("not an approval request id")?;
        let registry = breeze_tools::all();
        let actor = Actor::new(ActorType::User, user.id);
        let r = breeze_pipeline::approvals::decide(
            &app.store,
            &registry,
            &user,
            actor,
            breeze_pipeline::approvals::DecisionRequest {
                id,
                decision,
                reason: args.reason,
                request_id: None,
            },
        )
        .await?;
        println!("{}", line(&r));
        Ok(())
    }
}
