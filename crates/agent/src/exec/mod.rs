//! Running commands: every `CommandKind`, against the real OS.
//!
//! [`Executor::run`] turns a `Command` into its terminal `CommandResult`: shell and script
//! commands answer with stdout/stderr/exit code, typed operations with a structured `result`
//! (the JSON shapes documented on `CommandKind`), failures with a sentence in `error` and status
//! `failed`. Every kind obeys the command's timeout (`timed_out`) and cancellation
//! (`cancelled`). The exactly-once bookkeeping is the caller's ([`crate::journal`]).

pub mod compliance;
pub mod disk;
pub mod files;
pub mod livequery;
pub mod network;
pub mod patches;
pub mod process;
pub mod processes;
pub mod protect;
pub mod security;
pub mod services;
pub mod syslog;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use breeze_agent_proto::{
    Command, CommandKind, CommandOutcome, CommandProgress, CommandResult, Interpreter, Shell,
};
use breeze_core::{Clock, Timestamp};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::logship::LogControl;
use process::{Captured, End};
use protect::Protection;

/// Used when a command carries `timeoutSecs: 0`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// Where a long command reports progress.
pub type Progress = Arc<dyn Fn(CommandProgress) + Send + Sync>;

/// A progress sink that drops everything.
pub fn no_progress() -> Progress {
    Arc::new(|_| {})
}

/// A typed operation's answer: the `result` JSON, or why it failed.
pub type Typed = Result<Value, String>;

/// Runs commands.
#[derive(Clone)]
pub struct Executor {
    state_dir: PathBuf,
    clock: Arc<dyn Clock>,
    logs: Arc<LogControl>,
    protection: Arc<Protection>,
    patching: Arc<patches::PatchingConfig>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor writing temporary scripts under `state_dir/scripts`. File and disk
    /// commands may not reach `state_dir` nor the built-in protected paths.
    pub fn new(state_dir: &Path, clock: Arc<dyn Clock>, logs: Arc<LogControl>) -> Executor {
        Executor {
            state_dir: state_dir.to_path_buf(),
            clock,
            logs,
            protection: Arc::new(Protection::new(&[state_dir.to_path_buf()])),
            patching: Arc::new(patches::PatchingConfig::default()),
        }
    }

    /// Patches through the package manager `config` names (tests: a fake executable).
    #[must_use]
    pub fn patching(mut self, config: patches::PatchingConfig) -> Executor {
        self.patching = Arc::new(config);
        self
    }

    /// Also protects `paths` (the agent's config file, `--protect` directories) and what
    /// `patterns` name, besides the state directory and the built-in list.
    #[must_use]
    pub fn protecting(mut self, paths: &[PathBuf], patterns: &[String]) -> Executor {
        let mut all = vec![self.state_dir.clone()];
        all.extend_from_slice(paths);
        self.protection = Arc::new(Protection::new(&all).with_patterns(patterns));
        self
    }

    /// Where quarantined files are kept (inside the protected state directory).
    fn quarantine_dir(&self) -> PathBuf {
        self.state_dir.join("quarantine")
    }

    /// The clock the executor stamps results with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Runs `command` to its terminal result.
    pub async fn run(
        &self,
        command: &Command,
        cancel: CancellationToken,
        progress: Progress,
    ) -> CommandResult {
        let started_at = self.clock.now();
        let timeout = if command.timeout_secs == 0 {
            DEFAULT_TIMEOUT
        } else {
            Duration::from_secs(u64::from(command.timeout_secs))
        };
        let cap = if command.output_cap_bytes == 0 {
            breeze_agent_proto::DEFAULT_OUTPUT_CAP_BYTES
        } else {
            command.output_cap_bytes
        };
        match &command.kind {
            CommandKind::Shell {
                shell,
                command: line,
            } => {
                let (program, args) = shell_invocation(*shell, line);
                let run = process::run_captured(program, &args, timeout, cap, &cancel).await;
                self.process_result(command.id, started_at, program, timeout, run)
            }
            CommandKind::Script {
                interpreter,
                body,
                args,
            } => {
                self.run_script(
                    command.id,
                    *interpreter,
                    body,
                    args,
                    timeout,
                    cap,
                    &cancel,
                    started_at,
                )
                .await
            }
            kind => {
                let deadline = Instant::now() + timeout;
                let work = self.typed(
                    command.id,
                    kind,
                    &command.protected_paths,
                    deadline,
                    progress,
                );
                let outcome = tokio::select! {
                    r = work => Ok(r),
                    () = tokio::time::sleep_until(deadline) => Err(CommandOutcome::TimedOut),
                    () = cancel.cancelled() => Err(CommandOutcome::Cancelled),
                };
                let finished_at = self.clock.now();
                match outcome {
                    Ok(Ok(value)) => ok_result(command.id, started_at, finished_at, Some(value)),
                    Ok(Err(error)) => failed(command.id, started_at, finished_at, error),
                    Err(CommandOutcome::TimedOut) => ended(
                        command.id,
                        started_at,
                        finished_at,
                        CommandOutcome::TimedOut,
                        format!("timed out after {} s", timeout.as_secs()),
                    ),
                    Err(_) => ended(
                        command.id,
                        started_at,
                        finished_at,
                        CommandOutcome::Cancelled,
                        "cancelled".to_owned(),
                    ),
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_script(
        &self,
        id: Uuid,
        interpreter: Interpreter,
        body: &str,
        args: &[String],
        timeout: Duration,
        cap: u64,
        cancel: &CancellationToken,
        started_at: Timestamp,
    ) -> CommandResult {
        let dir = self.state_dir.join("scripts");
        let ext = match interpreter {
            Interpreter::Bash | Interpreter::Sh => "sh",
            Interpreter::Python => "py",
            Interpreter::Powershell => "ps1",
        };
        let path = dir.join(format!("{id}.{ext}"));
        if let Err(e) = crate::config::create_private_dir(&dir)
            .and_then(|()| crate::config::write_atomic(&path, body.as_bytes(), 0o700))
        {
            return failed(
                id,
                started_at,
                self.clock.now(),
                format!("could not write the script file: {e}"),
            );
        }
        let script = path.to_string_lossy().into_owned();
        let candidates: Vec<(&str, Vec<String>)> = match interpreter {
            Interpreter::Bash => vec![("bash", vec![script])],
            Interpreter::Sh => vec![("sh", vec![script])],
            Interpreter::Python => {
                vec![("python3", vec![script.clone()]), ("python", vec![script])]
            }
            Interpreter::Powershell => vec![(
                "pwsh",
                vec![
                    "-NoLogo".into(),
                    "-NoProfile".into(),
                    "-NonInteractive".into(),
                    "-File".into(),
                    script,
                ],
            )],
        };
        let mut last = None;
        for (program, mut program_args) in candidates {
            program_args.extend(args.iter().cloned());
            let run = process::run_captured(program, &program_args, timeout, cap, cancel).await;
            let not_found = matches!(&run, Err(e) if e.kind() == std::io::ErrorKind::NotFound);
            last = Some((program, run));
            if !not_found {
                break;
            }
        }
        let _ = std::fs::remove_file(&path);
        match last {
            Some((program, run)) => self.process_result(id, started_at, program, timeout, run),
            None => failed(
                id,
                started_at,
                self.clock.now(),
                "no interpreter".to_owned(),
            ),
        }
    }

    fn process_result(
        &self,
        id: Uuid,
        started_at: Timestamp,
        program: &str,
        timeout: Duration,
        run: std::io::Result<Captured>,
    ) -> CommandResult {
        let finished_at = self.clock.now();
        let captured = match run {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return failed(
                    id,
                    started_at,
                    finished_at,
                    format!("{program} is not installed"),
                );
            }
            Err(e) => {
                return failed(
                    id,
                    started_at,
                    finished_at,
                    format!("could not start {program}: {e}"),
                );
            }
        };
        let (status, error) = match (captured.end, captured.signal) {
            (End::Exited, None) => (CommandOutcome::Completed, None),
            (End::Exited, Some(sig)) => (
                CommandOutcome::Failed,
                Some(format!("{program} was killed by signal {sig}")),
            ),
            (End::TimedOut, _) => (
                CommandOutcome::TimedOut,
                Some(format!(
                    "timed out after {} s; the process group was killed",
                    timeout.as_secs()
                )),
            ),
            (End::Cancelled, _) => (
                CommandOutcome::Cancelled,
                Some("cancelled; the process group was killed".to_owned()),
            ),
        };
        CommandResult {
            command_id: id,
            status,
            exit_code: captured.exit_code,
            stdout: captured.stdout,
            stderr: captured.stderr,
            stdout_truncated: captured.stdout_truncated,
            stderr_truncated: captured.stderr_truncated,
            result: None,
            error,
            started_at,
            finished_at,
        }
    }

    async fn typed(
        &self,
        id: Uuid,
        kind: &CommandKind,
        additions: &[String],
        deadline: Instant,
        progress: Progress,
    ) -> Typed {
        let kind = kind.clone();
        // The guard stats what the patterns name: built on the blocking pool with the work.
        let guard = || {
            let protection = self.protection.clone();
            let additions = additions.to_vec();
            move || protection.for_command(&additions)
        };
        match kind {
            CommandKind::ListProcesses { sort_by, limit } => {
                blocking(move || processes::list(sort_by, limit)).await
            }
            CommandKind::KillProcess { pid, force } => {
                blocking(move || processes::kill(pid, force)).await
            }
            CommandKind::ListServices => blocking(services::list).await,
            CommandKind::ServiceAction { name, action } => {
                blocking(move || services::action(&name, action)).await
            }
            CommandKind::FileList { path } => {
                let g = guard();
                blocking(move || files::list(&g()?, &path)).await
            }
            CommandKind::FileRead { path, max_bytes } => {
                let g = guard();
                blocking(move || files::read(&g()?, &path, max_bytes)).await
            }
            CommandKind::FileWrite {
                path,
                content,
                encoding,
            } => {
                let g = guard();
                blocking(move || files::write(&g()?, &path, &content, encoding)).await
            }
            CommandKind::FileDelete { path, recursive } => {
                let g = guard();
                blocking(move || files::delete(&g()?, &path, recursive)).await
            }
            CommandKind::FileMkdir { path } => {
                let g = guard();
                blocking(move || files::mkdir(&g()?, &path)).await
            }
            CommandKind::FileRename { from, to } => {
                let g = guard();
                blocking(move || files::rename(&g()?, &from, &to)).await
            }
            CommandKind::QueryLogs {
                pattern,
                unit,
                since_minutes,
                limit,
            } => {
                let clock = self.clock.clone();
                blocking(move || {
                    syslog::query(
                        clock.as_ref(),
                        pattern.as_deref(),
                        unit.as_deref(),
                        since_minutes,
                        limit,
                    )
                })
                .await
            }
            CommandKind::DiskScan {
                path,
                top_n,
                large_file_bytes,
            } => {
                let deadline = deadline.into_std();
                let g = guard();
                blocking(move || disk::scan(&g()?, &path, top_n, large_file_bytes, deadline)).await
            }
            CommandKind::DiskCleanup { paths } => {
                let g = guard();
                blocking(move || Ok(disk::cleanup(&g()?, &paths))).await
            }
            CommandKind::NetworkDiscovery { mode, cidr } => {
                network::discover(id, mode, cidr.as_deref(), progress).await
            }
            CommandKind::SetLogLevel {
                level,
                duration_minutes,
            } => {
                let reverts_at = self.logs.set_override(level, duration_minutes);
                tracing::info!(?level, %reverts_at, "shipped log level overridden");
                Ok(json!({ "level": level, "revertsAt": reverts_at }))
            }
            CommandKind::CollectInventory => {
                let clock = self.clock.clone();
                blocking(move || {
                    serde_json::to_value(crate::system::inventory::collect(clock.as_ref()))
                        .map_err(|e| e.to_string())
                })
                .await
            }
            CommandKind::PatchScan => {
                let (config, clock) = (self.patching.clone(), self.clock.clone());
                blocking(move || {
                    let pm = patches::PackageManager::detect(&config)?;
                    let report = pm.scan(clock.as_ref(), usernames())?;
                    serde_json::to_value(report).map_err(|e| e.to_string())
                })
                .await
            }
            CommandKind::PatchInstall {
                packages,
                reboot,
                reboot_with_users,
                reboot_delay_minutes,
            } => {
                let (config, clock) = (self.patching.clone(), self.clock.clone());
                let reboot = patches::Reboot {
                    mode: reboot,
                    with_users: reboot_with_users,
                    delay_minutes: reboot_delay_minutes,
                };
                blocking(move || {
                    let pm = patches::PackageManager::detect(&config)?;
                    let report = pm.install(clock.as_ref(), &packages, reboot, &usernames)?;
                    serde_json::to_value(report).map_err(|e| e.to_string())
                })
                .await
            }
            CommandKind::PatchRollback {
                packages,
                reboot,
                reboot_with_users,
                reboot_delay_minutes,
            } => {
                let (config, clock) = (self.patching.clone(), self.clock.clone());
                let reboot = patches::Reboot {
                    mode: reboot,
                    with_users: reboot_with_users,
                    delay_minutes: reboot_delay_minutes,
                };
                blocking(move || {
                    let pm = patches::PackageManager::detect(&config)?;
                    let report = pm.rollback(clock.as_ref(), &packages, reboot, &usernames)?;
                    serde_json::to_value(report).map_err(|e| e.to_string())
                })
                .await
            }
            CommandKind::Reboot {
                delay_minutes,
                with_users,
            } => {
                let config = self.patching.clone();
                blocking(move || patches::reboot(&config, delay_minutes, with_users, &usernames()))
                    .await
            }
            CommandKind::PackageRemove { packages } => {
                let config = self.patching.clone();
                blocking(move || {
                    let pm = patches::PackageManager::detect(&config)?;
                    let report = pm.remove(&packages)?;
                    serde_json::to_value(report).map_err(|e| e.to_string())
                })
                .await
            }
            CommandKind::SecurityScan {
                extra_roots,
                indicator_paths,
            } => {
                let deadline = deadline.into_std();
                let g = guard();
                blocking(move || {
                    security::scan(&g()?, None, &extra_roots, &indicator_paths, deadline)
                })
                .await
            }
            CommandKind::QuarantineFile {
                path,
                expected_sha256,
                delete,
            } => {
                let g = guard();
                let qdir = self.quarantine_dir();
                let now = self.clock.now();
                blocking(move || {
                    security::quarantine(
                        &g()?,
                        &qdir,
                        &path,
                        expected_sha256.as_deref(),
                        delete,
                        now,
                    )
                })
                .await
            }
            CommandKind::RestoreQuarantined { quarantine_id } => {
                let g = guard();
                let qdir = self.quarantine_dir();
                let now = self.clock.now();
                blocking(move || security::restore(&g()?, &qdir, &quarantine_id, now)).await
            }
            CommandKind::DeleteQuarantined { quarantine_id } => {
                let qdir = self.quarantine_dir();
                let now = self.clock.now();
                blocking(move || security::delete(&qdir, &quarantine_id, now)).await
            }
            CommandKind::ComplianceCheck { checks } => {
                let g = guard();
                blocking(move || compliance::check(&g(), &checks)).await
            }
            CommandKind::LiveQuery {
                question,
                max_rows,
                max_bytes,
            } => {
                let caps = breeze_agent_proto::livequery::Caps::clamp(max_rows, max_bytes);
                let limits = livequery::Limits::new(caps, deadline.into_std());
                let g = guard();
                blocking(move || livequery::answer(&g()?, &question, limits)).await
            }
            CommandKind::Shell { .. } | CommandKind::Script { .. } => {
                Err("not a typed command".to_owned())
            }
        }
    }
}

/// Who is logged in (the reboot safety signal).
fn usernames() -> Vec<String> {
    crate::system::heartbeat::logged_in_users()
        .into_iter()
        .map(|u| u.username)
        .collect()
}

/// Runs blocking work on the blocking pool.
async fn blocking<F>(work: F) -> Typed
where
    F: FnOnce() -> Typed + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(r) => r,
        Err(e) => Err(format!("the operation crashed: {e}")),
    }
}

/// `(program, args)` for a shell command line.
pub fn shell_invocation(shell: Shell, line: &str) -> (&'static str, Vec<String>) {
    match shell {
        Shell::Sh => ("sh", vec!["-c".into(), line.into()]),
        Shell::Bash => ("bash", vec!["-c".into(), line.into()]),
        Shell::Pwsh => (
            "pwsh",
            vec![
                "-NoLogo".into(),
                "-NoProfile".into(),
                "-NonInteractive".into(),
                "-Command".into(),
                line.into(),
            ],
        ),
    }
}

fn ok_result(
    id: Uuid,
    started_at: Timestamp,
    finished_at: Timestamp,
    result: Option<Value>,
) -> CommandResult {
    CommandResult {
        command_id: id,
        status: CommandOutcome::Completed,
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        result,
        error: None,
        started_at,
        finished_at,
    }
}

fn ended(
    id: Uuid,
    started_at: Timestamp,
    finished_at: Timestamp,
    status: CommandOutcome,
    error: String,
) -> CommandResult {
    CommandResult {
        status,
        error: Some(error),
        ..ok_result(id, started_at, finished_at, None)
    }
}

/// A failed result with `error`.
pub fn failed(
    id: Uuid,
    started_at: Timestamp,
    finished_at: Timestamp,
    error: String,
) -> CommandResult {
    ended(id, started_at, finished_at, CommandOutcome::Failed, error)
}

/// An RFC 3339 time from Unix seconds.
pub(crate) fn unix_time(secs: u64) -> Option<Timestamp> {
    chrono::DateTime::from_timestamp(i64::try_from(secs).ok()?, 0)
}

/// An RFC 3339 time from a `SystemTime`.
pub(crate) fn system_time(t: std::time::SystemTime) -> Option<Timestamp> {
    Some(chrono::DateTime::<chrono::Utc>::from(t))
}
