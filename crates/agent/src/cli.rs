//! The `breeze-agent` command line: enroll, run, rotate-token. The binary is a one-line
//! `main` over [`main_from`]; `breeze agent …` runs the same code from the server binary (the
//! demo starts its local agent that way).
//!
//! This is the only place the agent reads environment variables: `BREEZE_AGENT_CONFIG` (the
//! config file), `BREEZE_AGENT_LOG` (the stderr log filter, default `info`), and
//! `XDG_CONFIG_HOME` / `HOME` for a non-root default config path.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{default_config_path, running_as_root};
use crate::logship::{DEFAULT_SHIP_LEVEL, LogControl, ShipLayer};
use crate::{AgentError, enroll, runtime};
use anyhow::Context as _;
use breeze_core::{Clock, SystemClock};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, Parser)]
#[command(name = "breeze-agent", version, about = "The Breeze device agent")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Enroll this machine with a Breeze server and write the config file.
    Enroll {
        /// The server URL, e.g. <https://rmm.example.com>
        #[arg(long)]
        server: String,
        /// The site's enrollment key.
        #[arg(long)]
        key: String,
        /// A one-time re-enroll token an administrator issued for the device this machine is
        /// (`breeze devices reenroll-token`): re-enrolls that device instead of adding one.
        #[arg(long)]
        reenroll_token: Option<String>,
        /// The config file to write.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run the agent in the foreground until SIGTERM or Ctrl-C.
    Run {
        #[arg(long)]
        config: Option<PathBuf>,
        /// A file or directory no file or disk command may reach, besides the built-in list,
        /// the config file and the state directory (repeatable; `breeze demo` protects its data
        /// directory this way).
        #[arg(long = "protect", value_name = "PATH")]
        protect: Vec<PathBuf>,
    },
    /// Replace the device token with a new one from the server.
    RotateToken {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[allow(clippy::disallowed_methods)] // the binary's config layer: the one place env is read
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn config_path(flag: Option<PathBuf>) -> PathBuf {
    default_config_path(
        flag.or_else(|| env("BREEZE_AGENT_CONFIG").map(PathBuf::from)),
        running_as_root(),
        env("XDG_CONFIG_HOME").map(PathBuf::from),
        env("HOME").map(PathBuf::from),
    )
}

fn init_logging(clock: Arc<dyn Clock>) -> Arc<LogControl> {
    let control = Arc::new(LogControl::new(clock, DEFAULT_SHIP_LEVEL));
    let filter = EnvFilter::try_new(env("BREEZE_AGENT_LOG").unwrap_or_else(|| "info".into()))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let ship = ShipLayer::new(control.clone()).with_filter(
        tracing_subscriber::filter::Targets::new()
            .with_target("breeze_agent", tracing::Level::TRACE),
    );
    tracing_subscriber::registry()
        .with(stderr)
        .with(ship)
        .init();
    control
}

async fn shutdown_signal(token: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    token.cancel();
}

/// Parses `args` (the first is the program name) and runs the command on a fresh runtime.
pub fn main_from<I, T>(args: I) -> std::process::ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    run_cli(cli)
}

/// Runs the agent as the command `name` (e.g. `breeze agent`, so its help and errors say how
/// it was started); `args` are the arguments after that name.
pub fn main_as<I, T>(name: &'static str, args: I) -> std::process::ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command().name(name).bin_name(name);
    let argv =
        std::iter::once(std::ffi::OsString::from(name)).chain(args.into_iter().map(Into::into));
    let cli = command
        .try_get_matches_from(argv)
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| e.exit());
    run_cli(cli)
}

fn run_cli(cli: Cli) -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("breeze-agent: cannot start the runtime: {e}");
            }
            return std::process::ExitCode::FAILURE;
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let logs = init_logging(clock.clone());
    match runtime.block_on(real_main(cli, clock, logs)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            #[allow(clippy::print_stderr)] // the user must see why, whatever the log filter
            {
                eprintln!("breeze-agent: {e:#}");
            }
            match e.downcast_ref::<AgentError>() {
                Some(AgentError::TokenRefused(_)) => {
                    std::process::ExitCode::from(crate::EXIT_TOKEN_REFUSED)
                }
                _ => std::process::ExitCode::FAILURE,
            }
        }
    }
}

async fn real_main(cli: Cli, clock: Arc<dyn Clock>, logs: Arc<LogControl>) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Enroll {
            server,
            key,
            reenroll_token,
            config,
        } => {
            let path = config_path(config);
            let file = enroll::enroll(
                &server,
                &key,
                &path,
                clock.as_ref(),
                reenroll_token.as_deref(),
            )
            .await
            .map_err(explain)
            .context("enrollment failed")?;
            tracing::info!(
                device_id = %file.device_id,
                config = %path.display(),
                "enrolled; start the agent with `breeze-agent run`"
            );
            Ok(())
        }
        Cmd::Run { config, protect } => {
            let path = config_path(config);
            let shutdown = CancellationToken::new();
            tokio::spawn(shutdown_signal(shutdown.clone()));
            runtime::run(&path, &protect, clock, logs, shutdown)
                .await
                .map_err(explain)
                .with_context(|| format!("cannot run with config {}", path.display()))
        }
        Cmd::RotateToken { config } => {
            let path = config_path(config);
            enroll::rotate_token(&path)
                .await
                .map_err(explain)
                .context("token rotation failed")?;
            tracing::info!(config = %path.display(), "device token rotated");
            Ok(())
        }
    }
}

fn explain(error: AgentError) -> anyhow::Error {
    match error {
        AgentError::Server { message, .. } => anyhow::anyhow!("the server said: {message}"),
        other => anyhow::Error::new(other),
    }
}
