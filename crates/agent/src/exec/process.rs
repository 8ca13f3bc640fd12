//! Running a program with captured, capped output, a deadline and cancellation.
//!
//! The child gets its own process group (Unix), so a timeout or a cancel kills everything it
//! started, not just the shell. Output beyond the cap is read and discarded (so the child never
//! blocks on a full pipe) and flagged as truncated.

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The program exited by itself (with `exit_code`, or killed by `signal`).
    Exited,
    /// The deadline passed; the process group was killed.
    TimedOut,
    /// The run was cancelled; the process group was killed.
    Cancelled,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub end: End,
    pub exit_code: Option<i32>,
    /// The signal that ended the program, when one did (Unix).
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

#[derive(Debug, Default)]
struct Capture {
    bytes: Vec<u8>,
    truncated: bool,
}

type Shared = Arc<Mutex<Capture>>;

async fn read_capped<R: AsyncRead + Unpin>(mut reader: R, cap: usize, into: Shared) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut capture = into.lock().unwrap_or_else(PoisonError::into_inner);
                let room = cap.saturating_sub(capture.bytes.len());
                let keep = room.min(n);
                capture.bytes.extend_from_slice(&buf[..keep]);
                if keep < n {
                    capture.truncated = true;
                }
            }
        }
    }
}

fn take(shared: &Shared) -> (String, bool) {
    let capture = shared.lock().unwrap_or_else(PoisonError::into_inner);
    (
        String::from_utf8_lossy(&capture.bytes).into_owned(),
        capture.truncated,
    )
}

/// Kills the process group led by `pid` (Unix) — the child and everything it started.
#[cfg(unix)]
fn kill_group(pid: Option<u32>) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

#[cfg(not(unix))]
fn kill_group(_pid: Option<u32>) {}

/// How long to wait for the output pipes to close after the program itself exited (children
/// left in the background may hold them open).
const DRAIN_GRACE: Duration = Duration::from_secs(3);

/// Runs `program args…`, capturing stdout and stderr up to `cap` bytes each, killing the
/// process group at `timeout` or when `cancel` fires. Errors only when the program cannot be
/// started (`NotFound` when it does not exist).
pub async fn run_captured(
    program: &str,
    args: &[String],
    timeout: Duration,
    cap: u64,
    cancel: &CancellationToken,
) -> std::io::Result<Captured> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = command.spawn()?;
    let pid = child.id();
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let out: Shared = Arc::default();
    let err: Shared = Arc::default();
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(tokio::spawn(read_capped(stdout, cap, out.clone())));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(tokio::spawn(read_capped(stderr, cap, err.clone())));
    }
    let deadline = Instant::now() + timeout;
    let (end, status) = tokio::select! {
        status = child.wait() => (End::Exited, status.ok()),
        () = tokio::time::sleep_until(deadline) => (End::TimedOut, None),
        () = cancel.cancelled() => (End::Cancelled, None),
    };
    let status = match end {
        End::Exited => status,
        End::TimedOut | End::Cancelled => {
            kill_group(pid);
            let _ = child.start_kill();
            child.wait().await.ok()
        }
    };
    // Wait for the pipes; if something in the group still holds them, kill the group.
    let drain = futures::future::join_all(readers.iter_mut());
    let grace = if end == End::Exited {
        DRAIN_GRACE.min(deadline.saturating_duration_since(Instant::now()))
    } else {
        Duration::from_secs(2)
    };
    if tokio::time::timeout(grace, drain).await.is_err() {
        kill_group(pid);
        let drain = futures::future::join_all(readers.iter_mut());
        if tokio::time::timeout(Duration::from_secs(2), drain)
            .await
            .is_err()
        {
            for reader in &readers {
                reader.abort();
            }
        }
    }
    let (stdout, stdout_truncated) = take(&out);
    let (stderr, stderr_truncated) = take(&err);
    let (exit_code, signal) = match status {
        Some(status) => (status.code(), exit_signal(&status)),
        None => (None, None),
    };
    Ok(Captured {
        end,
        exit_code: if end == End::Exited { exit_code } else { None },
        signal: if end == End::Exited { signal } else { None },
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
    })
}

#[cfg(unix)]
fn exit_signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn exit_signal(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}
