//! The `breeze` command: run the server (`serve`, `demo`), migrate the database, and
//! administer partners, organizations, users, API keys and OAuth grants from a shell.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool prints by design

mod commands;
mod config;
mod telemetry;
mod trace_settings;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{SettingFlags, Settings};

/// Every request allocates (JSON trees, strings, futures); mimalloc's thread-local free lists
/// serve them with less work than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Breeze: an MCP-first remote monitoring and management platform.
#[derive(Debug, Parser)]
#[command(name = "breeze", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    settings: SettingFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server.
    Serve,
    /// Seed a demo tenant (first run), write breeze-data/demo.json, and run the server.
    Demo,
    /// Apply pending database migrations, then exit.
    Migrate,
    /// Manage partners.
    #[command(subcommand)]
    Partners(commands::admin::PartnersCommand),
    /// Manage organizations.
    #[command(subcommand)]
    Orgs(commands::admin::OrgsCommand),
    /// Manage users.
    #[command(subcommand)]
    Users(commands::admin::UsersCommand),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(commands::admin::KeysCommand),
    /// A user's OAuth grants (connected AI clients): list, revoke.
    #[command(subcommand)]
    Grants(commands::grants::GrantsCommand),
    /// Manage agent enrollment keys.
    #[command(subcommand, name = "enrollment-keys")]
    EnrollmentKeys(commands::fleet::EnrollmentKeysCommand),
    /// Step-up approval requests: list, show, approve, deny, report; approval modes.
    #[command(subcommand)]
    Approvals(commands::approvals::ApprovalsCommand),
    /// The audit log: export it (gzip JSON lines), purge what is past the retention.
    #[command(subcommand)]
    Audit(commands::audit::AuditCommand),
    /// Device utilities (synthetic devices for load tests).
    #[command(subcommand)]
    Devices(commands::fleet::DevicesCommand),
    /// Manage the script library.
    #[command(subcommand)]
    Scripts(commands::fleet::ScriptsCommand),
    /// Manage alert notification channels (email, signed webhook, in-app).
    #[command(subcommand)]
    Channels(commands::fleet::ChannelsCommand),
    /// Configuration policies: create, update, delete, list, assign (partner-wide too).
    #[command(subcommand, name = "config-policies")]
    ConfigPolicies(commands::config_policies::ConfigPoliciesCommand),
    /// MCP utilities.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Install the breeze-rmm agent skill (SKILL.md and references, locked to this version)
    /// for Claude Code and/or OpenClaw, or into --dir.
    #[command(name = "install-skill")]
    InstallSkill(commands::skill::InstallSkillArgs),
    /// Run the device agent (the same as the `breeze-agent` binary): enroll, run, rotate-token.
    Agent {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Speak MCP on stdin/stdout, forwarding to a Breeze server (BREEZE_URL, BREEZE_API_KEY).
    #[command(version)]
    Stdio {
        /// The Breeze server [env: BREEZE_URL].
        #[arg(long)]
        url: Option<String>,
        /// The API key [env: BREEZE_API_KEY or AUTH_TOKEN].
        #[arg(long)]
        api_key: Option<String>,
        /// The catalog to ask for: full (every tool) or consolidated (discover, describe and
        /// read/write/execute meta-tools); the server's BREEZE_MCP_CATALOG when not given.
        #[arg(long)]
        catalog: Option<String>,
        /// Only these domains' tools, comma-separated (e.g. devices,scripts).
        #[arg(long)]
        toolsets: Option<String>,
    },
    /// List this binary's tools: name, the tiers of its calls and its permission; with --json,
    /// the registry as data (every tool, its tiers, actions and permissions).
    Tools {
        #[arg(long)]
        json: bool,
    },
}

/// Set by `breeze demo` on its agent child: the child holds a pipe from the parent on stdin and
/// exits when it closes, so the agent never outlives the demo, even one killed with SIGKILL.
pub(crate) const EXIT_WITH_PARENT: &str = "BREEZE_AGENT_EXIT_WITH_PARENT";

fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let mut buf = [0u8; 64];
        while std::io::Read::read(&mut std::io::stdin(), &mut buf).is_ok_and(|n| n > 0) {}
        std::process::exit(0);
    });
}

fn main() -> ExitCode {
    // `breeze agent …` is the device agent itself (the demo runs its local agent this way).
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "agent") {
        if config::process_env().contains_key(EXIT_WITH_PARENT) {
            exit_when_stdin_closes();
        }
        return breeze_agent::cli::main_from(std::iter::once("breeze-agent".into()).chain(args));
    }
    let cli = Cli::parse();
    let env = config::process_env();
    if let Command::Mcp(McpCommand::Stdio {
        url,
        api_key,
        catalog,
        toolsets,
    }) = cli.command
    {
        return run_stdio(&env, url, api_key, catalog, toolsets);
    }
    if let Command::Mcp(McpCommand::Tools { json }) = cli.command {
        print!("{}", commands::tools::list(json));
        return ExitCode::SUCCESS;
    }
    // Needs no server settings: only where the home directory is.
    if let Command::InstallSkill(args) = &cli.command {
        return match commands::skill::run(args, config::home_dir(&env).as_deref()) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("breeze install-skill: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match Settings::load(&env, &cli.settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("breeze: {e:#}");
            return ExitCode::from(2);
        }
    };
    // Held to the end of `main`: dropping it flushes the traces still buffered.
    let _telemetry = telemetry::init(&settings);
    let runtime = match server_runtime().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("breeze: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command, settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("breeze: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, settings: Settings) -> anyhow::Result<()> {
    match command {
        Command::Serve => commands::serve(settings).await,
        Command::Demo => commands::demo::run(settings).await,
        Command::Migrate => {
            let app = commands::open(&settings).await?;
            app.store.close().await;
            println!(
                "migrations applied to {}",
                breeze_store::redact_url(&settings.database_url)
            );
            Ok(())
        }
        Command::Partners(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Orgs(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Users(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Keys(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Grants(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::EnrollmentKeys(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Scripts(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Channels(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::ConfigPolicies(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Devices(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Approvals(c) => c.run(&commands::open_existing(&settings).await?).await,
        Command::Audit(c) => {
            c.run(&commands::open_existing(&settings).await?, &settings)
                .await
        }
        Command::Mcp(McpCommand::Stdio { .. }) => unreachable_stdio(),
        Command::Mcp(McpCommand::Tools { .. }) => {
            anyhow::bail!("`breeze mcp tools` is handled before start-up")
        }
        Command::InstallSkill(_) => {
            anyhow::bail!("`breeze install-skill` is handled before start-up")
        }
        // Dispatched in `main` before settings are read.
        Command::Agent { .. } => anyhow::bail!("`breeze agent` is handled before start-up"),
    }
}

/// The runtime for the server and the admin commands: tokio's multi-thread runtime (a worker
/// per processor the process may use), except with a single processor, where one thread runs
/// every task itself. A multi-thread runtime would start one worker there too, and then pay for
/// work stealing and cross-thread wake-ups it cannot use (the README's performance section has
/// the measurement).
fn server_runtime() -> tokio::runtime::Builder {
    let processors = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if processors == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
}

/// `breeze mcp stdio`: needs only the remote's URL and key, never the server's settings.
fn run_stdio(
    env: &std::collections::BTreeMap<String, String>,
    url: Option<String>,
    key: Option<String>,
    catalog: Option<String>,
    toolsets: Option<String>,
) -> ExitCode {
    let target = match commands::stdio::StdioTarget::with_catalog(env, url, key, catalog, toolsets)
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("breeze mcp stdio: {e:#}");
            return ExitCode::from(2);
        }
    };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(commands::stdio::run(target)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("breeze mcp stdio: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `mcp stdio` is handled before settings are loaded.
fn unreachable_stdio() -> anyhow::Result<()> {
    anyhow::bail!("breeze mcp stdio runs without server settings")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every `BREEZE_*` / `MCP_*` name the command's own help mentions, in every subcommand.
    fn documented_settings(cmd: &clap::Command, out: &mut std::collections::BTreeSet<String>) {
        let mut texts: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_help().map(ToString::to_string))
            .collect();
        texts.extend(cmd.get_about().map(ToString::to_string));
        for text in texts {
            for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("BREEZE_") || word.starts_with("MCP_") {
                    out.insert(word.to_owned());
                }
            }
        }
        for sub in cmd.get_subcommands() {
            documented_settings(sub, out);
        }
    }

    /// A variable the binary tells people to set must not make another command refuse to start
    /// as an "unknown setting" (the stdio bridge's BREEZE_URL once did).
    /// The skill is named after the MCP server it documents.
    #[test]
    fn the_skill_is_named_after_the_server() {
        assert_eq!(
            breeze_tools::docs::SKILL_NAME,
            breeze_server::mcp::SERVER_NAME
        );
    }

    #[test]
    fn every_setting_the_help_documents_is_a_known_setting() {
        let mut names = std::collections::BTreeSet::new();
        documented_settings(&Cli::command(), &mut names);
        assert!(
            names.contains("BREEZE_URL") && names.contains("BREEZE_API_KEY"),
            "{names:?}"
        );
        for name in names {
            let env = [(name.clone(), "x".to_owned())].into_iter().collect();
            if let Err(e) = Settings::load(&env, &SettingFlags::default()) {
                assert!(
                    !e.to_string().starts_with("unknown setting"),
                    "{name} is documented but refused: {e}"
                );
            }
        }
    }
}
