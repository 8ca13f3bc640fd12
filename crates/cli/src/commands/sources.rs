//! `breeze sources …`: tool sources from a shell — add one (its credential sealed under the
//! configured or data-directory key), list them, edit or delete one, discover their tools, list
//! a source's tools, test-call a Tier 1 tool, enable, disable or set the tier of one or several
//! tools, and the bulk switches "enable all reads" and "disable all".
//!
//! Like the other admin commands these act as the system (audit actor `system:cli`) with the
//! database's authority: whoever runs them holds `DATABASE_URL`. A partner-wide source
//! (`--all-orgs`) is created and changed through the partner's handle. Every command is one
//! call of `breeze_sources::service::Sources`, the same calls REST and the pages make; `add`
//! queues the first discovery for a running server's worker, `discover` runs one now.

use anyhow::{Context, bail};
use breeze_core::{Actor, AuditEvent, tool_source::SourceKind};
use breeze_sources::{
    egress::Egress,
    service::{Edit, NewSource, Owner, Sources, tier_from_number},
    vault::Credential,
};
use breeze_store::{SourceOwner, ToolChange, ToolSource, ToolSwitch};
use clap::Subcommand;

use super::App;
use crate::config::Settings;

fn cli_audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("cli"), action, "tool_source")
}

#[derive(Debug, Subcommand)]
pub(crate) enum SourcesCommand {
    /// Add a source and queue its discovery (a running server's worker runs it, or
    /// `breeze sources discover` now); its tools arrive disabled.
    Add {
        /// The organization (slug or id); with `--all-orgs`, any organization of the partner.
        #[arg(long)]
        org: String,
        /// Offer the source to every organization of the organization's partner (one
        /// credential then serves every organization's assistant).
        #[arg(long)]
        all_orgs: bool,
        /// The display name; the slug is derived from it unless `--slug` is given.
        #[arg(long)]
        name: String,
        /// Lowercase letters and digits, at most 24; fixed once saved.
        #[arg(long)]
        slug: Option<String>,
        /// `mcp` or `openapi`.
        #[arg(long, default_value = "mcp")]
        kind: String,
        /// The MCP endpoint, or the API's base URL (https).
        #[arg(long)]
        url: String,
        /// The OpenAPI document's URL (openapi only).
        #[arg(long)]
        document_url: Option<String>,
        /// The credential as JSON: `{"method":"bearer","token":"…"}`, `api_key_header`
        /// (`header`, `value`), `basic` (`username`, `password`), `oauth2_client_credentials`
        /// (`token_url`, `client_id`, `client_secret`, `scope`), or `none` (the default).
        #[arg(long, env = "BREEZE_SOURCE_CREDENTIAL", hide_env_values = true)]
        credential: Option<String>,
        /// List its enabled tools in Breeze's own `tools/list` for MCP clients allowed them.
        #[arg(long)]
        offer_to_mcp: bool,
    },
    /// List the sources an organization sees (its own and its partner's).
    List {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
    },
    /// Change a source: its name, whether it is enabled or offered to MCP clients, its
    /// credential. Without `--credential` the stored one is kept, which is allowed only while
    /// the method is unchanged; switching methods needs the new credential.
    Edit {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug (fixed once saved).
        source: String,
        /// A new display name.
        #[arg(long)]
        name: Option<String>,
        /// Make the source active again.
        #[arg(long)]
        enable: bool,
        /// Disable the source: none of its tools can be called.
        #[arg(long, conflicts_with = "enable")]
        disable: bool,
        /// `true` or `false`: list its enabled tools in Breeze's own `tools/list`.
        #[arg(long)]
        offer_to_mcp: Option<bool>,
        /// The authentication method (`none`, `bearer`, `api_key_header`, `basic`,
        /// `oauth2_client_credentials`); a change needs `--credential` too.
        #[arg(long)]
        auth_method: Option<String>,
        /// A new credential as JSON (as for `add`).
        #[arg(long, env = "BREEZE_SOURCE_CREDENTIAL", hide_env_values = true)]
        credential: Option<String>,
    },
    /// Delete a source and its tools.
    Delete {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug.
        source: String,
    },
    /// Discover a source's tools now (Breeze never polls).
    Discover {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug.
        source: String,
    },
    /// List a source's tools with their tiers and flags.
    Tools {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug.
        source: String,
    },
    /// Call a Tier 1 tool for real (enabled or not) and print its raw answer and duration.
    Test {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug.
        source: String,
        /// The tool's name at its source.
        tool: String,
        /// The arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
    },
    /// Enable or disable one or several tools, or set their tier (which also clears "review
    /// needed"). Each tool is changed on its own: the first one refused stops the command and
    /// names it, the ones before it stay changed.
    Set {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug.
        source: String,
        /// The tools' names at their source.
        #[arg(required = true)]
        tools: Vec<String>,
        /// Enable the tool (a removed or unroutable one cannot be).
        #[arg(long)]
        enable: bool,
        /// Disable the tool.
        #[arg(long, conflicts_with = "enable")]
        disable: bool,
        /// 1, 2 or 3.
        #[arg(long)]
        tier: Option<u8>,
    },
    /// "Enable all reads": every Tier 1 tool that can be enabled (not removed upstream, name
    /// usable).
    EnableReads {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug.
        source: String,
    },
    /// "Disable all": every enabled tool of the source.
    DisableAll {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// The source's slug.
        source: String,
    },
}

fn sources(app: &App, settings: &Settings) -> anyhow::Result<Sources> {
    let egress = Egress::new(&settings.tool_sources.egress)?;
    Ok(Sources::new(
        app.store.clone(),
        settings.tool_sources.key.clone(),
        egress,
        app.clock.clone(),
    ))
}

fn describe(s: &ToolSource) -> String {
    let scope = match s.owner {
        SourceOwner::Organization(_) => "this organization",
        SourceOwner::Partner(_) => "all organizations",
    };
    let error = s
        .error
        .as_deref()
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    format!(
        "{}  {} ({}, {scope}) {} [{}{error}]",
        s.slug,
        s.display_name,
        s.kind.as_str(),
        s.url,
        s.state.as_str()
    )
}

impl SourcesCommand {
    pub(crate) async fn run(self, app: &App, settings: &Settings) -> anyhow::Result<()> {
        match self {
            SourcesCommand::Add {
                org,
                all_orgs,
                name,
                slug,
                kind,
                url,
                document_url,
                credential,
                offer_to_mcp,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let kind: SourceKind = kind.parse().context("--kind")?;
                let credential: Credential = match credential {
                    None => Credential::None,
                    Some(c) => serde_json::from_str(&c).context("--credential")?,
                };
                let owner = if all_orgs {
                    eprintln!(
                        "warning: a partner-wide source serves every organization's assistant with one credential"
                    );
                    Owner::Partner(app.store.partner_tool_sources(org.partner_id))
                } else {
                    Owner::Organization(app.store.org(org.id).tool_sources())
                };
                let new = NewSource {
                    display_name: name,
                    slug,
                    kind,
                    url,
                    document_url,
                    credential,
                    offer_to_mcp,
                };
                let source = sources(app, settings)?
                    .create(owner, new, "system:cli", cli_audit("tool_source.create"))
                    .await?;
                println!("added {}", describe(&source));
            }
            SourcesCommand::List { org } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                for s in sources(app, settings)?.list(org.id).await? {
                    println!("{}", describe(&s));
                }
            }
            SourcesCommand::Discover { org, source } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let sources = sources(app, settings)?;
                let s = find(&sources, org.id, &source).await?;
                let started = std::time::Instant::now();
                match sources
                    .discover(
                        Owner::of(&app.store, s.owner),
                        s.id,
                        cli_audit("tool_source.discover"),
                    )
                    .await?
                {
                    Ok(d) => {
                        println!(
                            "{}: {} tools, {} skipped, {} need review, in {} ms",
                            s.slug,
                            d.tools,
                            d.skipped,
                            d.review_needed,
                            started.elapsed().as_millis()
                        );
                        for w in d.warnings {
                            println!("warning: {w}");
                        }
                    }
                    Err(why) => bail!("discovery of {} failed: {why}", s.slug),
                }
            }
            SourcesCommand::Tools { org, source } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let sources = sources(app, settings)?;
                let s = find(&sources, org.id, &source).await?;
                for t in sources.tools(org.id, s.id).await? {
                    let mut flags = Vec::new();
                    if t.review_needed {
                        flags.push("review needed".to_owned());
                    }
                    if t.removed {
                        flags.push("removed upstream".to_owned());
                    }
                    if let Some(why) = &t.unusable {
                        flags.push(format!("name not usable: {why}"));
                    }
                    println!(
                        "{}__{}  tier {} (proposed {}) {} {}",
                        s.slug,
                        t.name,
                        t.tier.number(),
                        t.proposed_tier.number(),
                        if t.enabled { "enabled" } else { "disabled" },
                        flags.join(", ")
                    );
                }
            }
            SourcesCommand::Test {
                org,
                source,
                tool,
                args,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let args: serde_json::Value = serde_json::from_str(&args).context("--args")?;
                let sources = sources(app, settings)?;
                let s = find(&sources, org.id, &source).await?;
                let r = sources
                    .test_tool(org.id, s.id, &tool, args, cli_audit("external_tool.test"))
                    .await?;
                println!("{}", serde_json::to_string_pretty(&r.result)?);
                println!(
                    "{} in {} ms",
                    if r.is_error { "upstream error" } else { "ok" },
                    r.duration.as_millis()
                );
            }
            SourcesCommand::Set {
                org,
                source,
                tools,
                enable,
                disable,
                tier,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let sources = sources(app, settings)?;
                let s = find(&sources, org.id, &source).await?;
                let change = ToolChange {
                    enabled: (enable || disable).then_some(enable),
                    tier: tier.map(tier_from_number).transpose().context("--tier")?,
                };
                for tool in tools {
                    let audit = cli_audit("tool_source.tool_change");
                    let t = sources
                        .change_tool(Owner::of(&app.store, s.owner), s.id, &tool, change, audit)
                        .await
                        .with_context(|| format!("{}__{tool}", s.slug))?;
                    println!(
                        "{}__{}: tier {}, {}",
                        s.slug,
                        t.name,
                        t.tier.number(),
                        if t.enabled { "enabled" } else { "disabled" }
                    );
                }
            }
            SourcesCommand::Edit {
                org,
                source,
                name,
                enable,
                disable,
                offer_to_mcp,
                auth_method,
                credential,
            } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let credential: Option<Credential> = credential
                    .map(|c| serde_json::from_str(&c).context("--credential"))
                    .transpose()?;
                let sources = sources(app, settings)?;
                let s = find(&sources, org.id, &source).await?;
                let edit = Edit {
                    display_name: name,
                    enabled: (enable || disable).then_some(enable),
                    offer_to_mcp,
                    auth_method,
                    credential,
                };
                let s = sources
                    .edit(
                        Owner::of(&app.store, s.owner),
                        s.id,
                        edit,
                        cli_audit("tool_source.update"),
                    )
                    .await?;
                println!("changed {}", describe(&s));
            }
            SourcesCommand::Delete { org, source } => {
                let org = app.store.find_organization(&org).await.context("--org")?;
                let sources = sources(app, settings)?;
                let s = find(&sources, org.id, &source).await?;
                sources
                    .delete(
                        Owner::of(&app.store, s.owner),
                        s.id,
                        cli_audit("tool_source.delete"),
                    )
                    .await?;
                println!("deleted {}", s.slug);
            }
            SourcesCommand::EnableReads { org, source } => {
                switch(app, settings, &org, &source, ToolSwitch::EnableReads).await?;
            }
            SourcesCommand::DisableAll { org, source } => {
                switch(app, settings, &org, &source, ToolSwitch::DisableAll).await?;
            }
        }
        Ok(())
    }
}

async fn find(
    sources: &Sources,
    org: breeze_core::OrgId,
    slug: &str,
) -> anyhow::Result<ToolSource> {
    sources
        .by_slug(org, slug)
        .await
        .with_context(|| format!("no tool source {slug:?} in this organization"))
}

/// "Enable all reads" or "Disable all" on the source `slug` of `org`, printing how many tools
/// changed.
async fn switch(
    app: &App,
    settings: &Settings,
    org: &str,
    slug: &str,
    switch: ToolSwitch,
) -> anyhow::Result<()> {
    let org = app.store.find_organization(org).await.context("--org")?;
    let sources = sources(app, settings)?;
    let s = find(&sources, org.id, slug).await?;
    let changed = sources
        .switch_tools(
            Owner::of(&app.store, s.owner),
            s.id,
            switch,
            cli_audit("tool_source.tools_switch"),
        )
        .await?;
    let what = match switch {
        ToolSwitch::EnableReads => "enabled",
        ToolSwitch::DisableAll => "disabled",
    };
    println!("{}: {changed} tools {what}", s.slug);
    Ok(())
}
