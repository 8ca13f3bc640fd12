//! The `breeze` command: run the server (`serve`, `demo`), migrate the database, and
//! administer partners, organizations, users, API keys and OAuth grants from a shell.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool prints by design

mod commands;
mod config;
mod telemetry;
mod trace_settings;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{ServerFlags, SettingFlags, Settings, StoreFlags};

/// Every request allocates (JSON trees, strings, futures); mimalloc's thread-local free lists
/// serve them with less work than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Breeze: an MCP-first remote monitoring and management platform.
#[derive(Debug, Parser)]
#[command(name = "breeze", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server on an existing database (`--create` or `breeze init` makes a new one).
    Serve {
        /// Create the SQLite database when its file does not exist (with no users: add them
        /// with `breeze partners`, `orgs`, `users`, or start with `breeze demo`).
        #[arg(long)]
        create: bool,
        #[command(flatten)]
        settings: ServerFlags,
    },
    /// Seed a demo tenant (first run), write breeze-data/demo.json, and run the server.
    Demo {
        #[command(flatten)]
        settings: ServerFlags,
    },
    /// Create the database if needed and apply pending migrations, then exit.
    #[command(visible_alias = "init")]
    Migrate {
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Manage partners.
    Partners {
        #[command(subcommand)]
        command: commands::admin::PartnersCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Manage organizations.
    Orgs {
        #[command(subcommand)]
        command: commands::admin::OrgsCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Manage users.
    Users {
        #[command(subcommand)]
        command: commands::admin::UsersCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: commands::admin::KeysCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Security advisories (OSV): import files, directories or osv.dev's all.zip archives.
    Advisories {
        #[command(subcommand)]
        command: commands::advisories::AdvisoriesCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// A user's OAuth grants (connected AI clients): list, revoke.
    Grants {
        #[command(subcommand)]
        command: commands::grants::GrantsCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Manage agent enrollment keys.
    #[command(name = "enrollment-keys")]
    EnrollmentKeys {
        #[command(subcommand)]
        command: commands::fleet::EnrollmentKeysCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Step-up approval requests: list, show, approve, deny, report; approval modes.
    Approvals {
        #[command(subcommand)]
        command: commands::approvals::ApprovalsCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// The audit log: export it (gzip JSON lines), purge what is past the retention.
    Audit {
        #[command(subcommand)]
        command: commands::audit::AuditCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Device utilities (synthetic devices for load tests).
    Devices {
        #[command(subcommand)]
        command: commands::fleet::DevicesCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Manage the script library.
    Scripts {
        #[command(subcommand)]
        command: commands::fleet::ScriptsCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Manage alert notification channels (email, signed webhook, in-app).
    Channels {
        #[command(subcommand)]
        command: commands::fleet::ChannelsCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Configuration policies: create, update, delete, list, assign (partner-wide too).
    #[command(name = "config-policies")]
    ConfigPolicies {
        #[command(subcommand)]
        command: commands::config_policies::ConfigPoliciesCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Tool sources: external MCP servers and OpenAPI APIs whose tools Breeze offers.
    Sources {
        #[command(subcommand)]
        command: commands::sources::SourcesCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// A partner's billing accounts: Stripe (payment links) and TD SYNNEX (distributor).
    Billing {
        #[command(subcommand)]
        command: commands::billing::BillingCommand,
        #[command(flatten)]
        settings: StoreFlags,
    },
    /// Chat with the AI assistant in this terminal (signs in to a running Breeze as a person).
    Chat(commands::chat::ChatArgs),
    /// MCP utilities.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Install the breeze-rmm agent skill (SKILL.md and references, locked to this version)
    /// for Claude Code and/or OpenClaw, or into --dir.
    #[command(name = "install-skill")]
    InstallSkill(commands::skill::InstallSkillArgs),
    /// Run the device agent (the same as the `breeze-agent` binary): enroll, run, rotate-token.
    Agent {
        /// The agent's own command and options (`breeze agent --help` lists them).
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
        /// Print the registry as JSON (every tool, its tiers, actions and permissions).
        #[arg(long)]
        json: bool,
    },
}

impl Command {
    /// The settings flags this command was given (each command offers only those it uses).
    fn setting_flags(&self) -> SettingFlags {
        match self {
            Command::Serve { settings, .. } | Command::Demo { settings } => settings.into(),
            Command::Migrate { settings }
            | Command::Partners { settings, .. }
            | Command::Orgs { settings, .. }
            | Command::Users { settings, .. }
            | Command::Keys { settings, .. }
            | Command::Grants { settings, .. }
            | Command::Advisories { settings, .. }
            | Command::EnrollmentKeys { settings, .. }
            | Command::Approvals { settings, .. }
            | Command::Audit { settings, .. }
            | Command::Devices { settings, .. }
            | Command::Scripts { settings, .. }
            | Command::Channels { settings, .. }
            | Command::ConfigPolicies { settings, .. }
            | Command::Sources { settings, .. }
            | Command::Billing { settings, .. } => settings.into(),
            Command::Mcp(_)
            | Command::Chat(_)
            | Command::InstallSkill(_)
            | Command::Agent { .. } => SettingFlags::default(),
        }
    }
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
        return breeze_agent::cli::main_as("breeze agent", args);
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
    // Needs no server settings: a running server's URL and a person to sign in as.
    if let Command::Chat(args) = cli.command {
        return run_chat(&env, args);
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
    let settings = match Settings::load(&env, &cli.command.setting_flags()) {
        Ok(s) => {
            for notice in &s.notices {
                eprintln!("breeze: notice: {notice}");
            }
            s
        }
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
        Command::Serve { create, .. } => commands::serve(settings, create).await,
        Command::Demo { .. } => commands::demo::run(settings).await,
        Command::Migrate { .. } => {
            let app = commands::open(&settings).await?;
            app.store.close().await;
            println!(
                "migrations applied to {}",
                breeze_store::redact_url(&settings.database_url)
            );
            Ok(())
        }
        Command::Partners { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Orgs { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Users { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Keys { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Grants { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Advisories { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::EnrollmentKeys { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Scripts { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Channels { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::ConfigPolicies { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Sources { command, .. } => {
            let app = commands::open_existing(&settings).await?;
            let settings = commands::with_tool_sources_key(&settings, &app.store).await?;
            command.run(&app, &settings).await
        }
        Command::Billing { command, .. } => {
            let app = commands::open_existing(&settings).await?;
            let settings = commands::with_tool_sources_key(&settings, &app.store).await?;
            command.run(&app, &settings).await
        }
        Command::Devices { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Approvals { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?)
                .await
        }
        Command::Audit { command, .. } => {
            command
                .run(&commands::open_existing(&settings).await?, &settings)
                .await
        }
        Command::Mcp(McpCommand::Stdio { .. }) => unreachable_stdio(),
        Command::Mcp(McpCommand::Tools { .. }) => {
            anyhow::bail!("`breeze mcp tools` is handled before start-up")
        }
        Command::InstallSkill(_) => {
            anyhow::bail!("`breeze install-skill` is handled before start-up")
        }
        Command::Chat(_) => anyhow::bail!("`breeze chat` is handled before start-up"),
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

/// `breeze chat`: stdin and stdout are the conversation.
fn run_chat(
    env: &std::collections::BTreeMap<String, String>,
    args: commands::chat::ChatArgs,
) -> ExitCode {
    let stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            rt.block_on(commands::chat::run(
                args,
                env,
                stdin,
                &mut std::io::stdout(),
            ))
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("breeze chat: {e:#}");
            ExitCode::FAILURE
        }
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

    /// Every command, its path from the top.
    fn all_commands(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands() {
            let p = format!("{path} {}", sub.get_name()).trim().to_owned();
            out.push((p.clone(), sub.clone()));
            all_commands(sub, p, out);
        }
    }

    #[test]
    fn every_flag_is_described_and_each_command_shows_only_the_settings_it_uses() {
        let mut root = Cli::command();
        root.build();
        let mut commands = Vec::new();
        all_commands(&root, String::new(), &mut commands);
        let mut undescribed = Vec::new();
        for (path, cmd) in &commands {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                let described = arg
                    .get_help()
                    .is_some_and(|h| !h.to_string().trim().is_empty());
                if !described && !matches!(id, "help" | "version") {
                    undescribed.push(format!("breeze {path}: {id}"));
                }
            }
        }
        assert!(
            undescribed.is_empty(),
            "flags without a description: {undescribed:#?}"
        );
        let help = |path: &str| -> String {
            let mut words = vec!["breeze"];
            words.extend(path.split(' ').filter(|w| !w.is_empty()));
            words.push("--help");
            match Cli::command().try_get_matches_from(words) {
                Err(e) => e.render().to_string(),
                Ok(_) => panic!("--help did not print help"),
            }
        };
        let stdio = help("mcp stdio");
        for other in ["--listen", "--database-url", "--redis-url", "--public-url"] {
            assert!(!stdio.contains(other), "mcp stdio shows {other}: {stdio}");
        }
        let keys = help("keys create");
        assert!(
            keys.contains("--database-url") && !keys.contains("--listen"),
            "{keys}"
        );
        let serve = help("serve");
        let (own, listen) = (serve.find("--create"), serve.find("--listen"));
        assert!(
            own.is_some() && listen.is_some() && own < listen,
            "serve's own options come first: {serve}"
        );
        let top = help("");
        assert!(
            !top.contains("--listen"),
            "the top level has no server flags: {top}"
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
