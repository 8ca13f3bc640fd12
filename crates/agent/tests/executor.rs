//! Executor tests against the real OS: shell and script runs, output caps, timeouts that kill
//! the whole process group, cancellation, processes, files, disk scan and cleanup, network
//! parsing and the log-level override.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use breeze_agent::exec::{self, Executor, network};
use breeze_agent::logship::LogControl;
use breeze_agent_proto::{
    Command, CommandKind, CommandOutcome, CommandResult, ContentEncoding, DiscoveryMode,
    Interpreter, LogLevel, ProcessSort, Shell,
};
use breeze_core::SystemClock;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn executor(dir: &Path) -> Executor {
    let clock = Arc::new(SystemClock);
    let logs = Arc::new(LogControl::new(clock.clone(), LogLevel::Warn));
    Executor::new(dir, clock, logs)
}

fn command(kind: CommandKind) -> Command {
    Command {
        id: Uuid::now_v7(),
        timeout_secs: 30,
        output_cap_bytes: 1024 * 1024,
        kind,
        protected_paths: Vec::new(),
    }
}

async fn run(kind: CommandKind) -> CommandResult {
    let dir = tempfile::tempdir().unwrap();
    executor(dir.path())
        .run(
            &command(kind),
            CancellationToken::new(),
            exec::no_progress(),
        )
        .await
}

fn sh(line: &str) -> CommandKind {
    CommandKind::Shell {
        shell: Shell::Sh,
        command: line.into(),
    }
}

fn result(r: &CommandResult) -> &Value {
    r.result
        .as_ref()
        .unwrap_or_else(|| panic!("no result: {r:?}"))
}

/// Whether `pid` is still a live (not zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

#[tokio::test]
async fn shell_exit_codes_and_streams() {
    let r = run(sh("echo out; echo err >&2; exit 3")).await;
    assert_eq!(r.status, CommandOutcome::Completed);
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.stdout, "out\n");
    assert_eq!(r.stderr, "err\n");
    assert!(!r.stdout_truncated && !r.stderr_truncated);

    let r = run(CommandKind::Shell {
        shell: Shell::Bash,
        command: "echo ${BASH_VERSION:+bash}".into(),
    })
    .await;
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout, "bash\n");
}

#[tokio::test]
async fn pwsh_missing_is_a_clear_failure() {
    let r = run(CommandKind::Shell {
        shell: Shell::Pwsh,
        command: "Get-Date".into(),
    })
    .await;
    if r.status == CommandOutcome::Failed {
        assert_eq!(r.error.as_deref(), Some("pwsh is not installed"));
    }
}

#[tokio::test]
async fn output_is_capped_and_drained() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(sh("head -c 200000 /dev/zero | tr '\\0' a; echo done >&2"));
    cmd.output_cap_bytes = 1000;
    let r = executor(dir.path())
        .run(&cmd, CancellationToken::new(), exec::no_progress())
        .await;
    assert_eq!(r.status, CommandOutcome::Completed);
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout.len(), 1000);
    assert!(r.stdout_truncated);
    assert_eq!(r.stderr, "done\n");
    assert!(!r.stderr_truncated);
}

#[tokio::test]
async fn timeout_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut cmd = command(sh(&format!(
        "sleep 300 & echo $! > {}; wait",
        pidfile.display()
    )));
    cmd.timeout_secs = 1;
    let started = std::time::Instant::now();
    let r = executor(dir.path())
        .run(&cmd, CancellationToken::new(), exec::no_progress())
        .await;
    assert_eq!(r.status, CommandOutcome::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !alive(pid),
        "the background sleep {pid} survived the timeout"
    );
}

#[tokio::test]
async fn cancel_stops_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let exec = executor(dir.path());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = std::time::Instant::now();
    let r = exec
        .run(&command(sh("sleep 300")), cancel, exec::no_progress())
        .await;
    assert_eq!(r.status, CommandOutcome::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn scripts_with_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let exec = executor(dir.path());
    let cases = [
        (Interpreter::Bash, "echo \"bash:$1:$2\""),
        (Interpreter::Sh, "echo \"sh:$1:$2\""),
        (
            Interpreter::Python,
            "import sys\nprint('python:' + ':'.join(sys.argv[1:]))",
        ),
    ];
    for (interpreter, body) in cases {
        let cmd = command(CommandKind::Script {
            interpreter,
            body: body.into(),
            args: vec!["a b".into(), "c".into()],
        });
        let r = exec
            .run(&cmd, CancellationToken::new(), exec::no_progress())
            .await;
        assert_eq!(r.status, CommandOutcome::Completed, "{r:?}");
        assert!(r.stdout.ends_with(":a b:c\n"), "{:?}", r.stdout);
    }
    // Script files are removed afterwards.
    let left = std::fs::read_dir(dir.path().join("scripts"))
        .unwrap()
        .count();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn file_operations_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().display().to_string();
    let file = format!("{base}/a/b/hello.txt");

    let r = run(CommandKind::FileWrite {
        path: file.clone(),
        content: "héllo".into(),
        encoding: ContentEncoding::Utf8,
    })
    .await;
    assert_eq!(result(&r)["bytesWritten"], 6);

    let r = run(CommandKind::FileRead {
        path: file.clone(),
        max_bytes: 100,
    })
    .await;
    assert_eq!(result(&r)["content"], "héllo");
    assert_eq!(result(&r)["encoding"], "utf8");
    assert_eq!(result(&r)["truncated"], false);

    let bin = format!("{base}/bin.dat");
    let r = run(CommandKind::FileWrite {
        path: bin.clone(),
        content: "AP8AAQ==".into(),
        encoding: ContentEncoding::Base64,
    })
    .await;
    assert_eq!(result(&r)["bytesWritten"], 4);
    let r = run(CommandKind::FileRead {
        path: bin.clone(),
        max_bytes: 0,
    })
    .await;
    assert_eq!(result(&r)["encoding"], "base64");
    assert_eq!(result(&r)["content"], "AP8AAQ==");
    // Valid UTF-8 holding NUL is not text the server can keep: base64, byte for byte.
    let nul = format!("{base}/nul.txt");
    std::fs::write(&nul, b"before\0after\n").unwrap();
    let r = run(CommandKind::FileRead {
        path: nul.clone(),
        max_bytes: 0,
    })
    .await;
    assert_eq!(result(&r)["encoding"], "base64");
    use base64::Engine as _;
    let back = base64::engine::general_purpose::STANDARD
        .decode(result(&r)["content"].as_str().unwrap())
        .unwrap();
    assert_eq!(back, b"before\0after\n");
    let r = run(CommandKind::FileRead {
        path: file.clone(),
        max_bytes: 2,
    })
    .await;
    assert_eq!(result(&r)["content"], "h");
    assert_eq!(result(&r)["truncated"], true);

    let r = run(CommandKind::FileList {
        path: format!("{base}/a/b"),
    })
    .await;
    let entries = result(&r)["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["name"], "hello.txt");
    assert_eq!(entries[0]["kind"], "file");
    assert_eq!(entries[0]["sizeBytes"], 6);
    assert!(entries[0]["modifiedAt"].is_string());
    assert!(entries[0]["mode"].is_string());

    let r = run(CommandKind::FileMkdir {
        path: format!("{base}/x/y/z"),
    })
    .await;
    assert_eq!(result(&r)["created"], true);
    let r = run(CommandKind::FileRename {
        from: file.clone(),
        to: format!("{base}/x/y/z/moved.txt"),
    })
    .await;
    assert_eq!(r.status, CommandOutcome::Completed, "{r:?}");
    assert!(Path::new(&format!("{base}/x/y/z/moved.txt")).exists());

    // A directory needs `recursive`.
    let r = run(CommandKind::FileDelete {
        path: format!("{base}/x"),
        recursive: false,
    })
    .await;
    assert_eq!(r.status, CommandOutcome::Failed);
    assert!(r.error.as_deref().unwrap().contains("recursive"));
    assert!(Path::new(&format!("{base}/x")).exists());
    let r = run(CommandKind::FileDelete {
        path: format!("{base}/x"),
        recursive: true,
    })
    .await;
    assert_eq!(result(&r)["deleted"], true);
    assert!(!Path::new(&format!("{base}/x")).exists());

    let r = run(CommandKind::FileRead {
        path: "relative/path".into(),
        max_bytes: 10,
    })
    .await;
    assert_eq!(r.status, CommandOutcome::Failed);
    let r = run(CommandKind::FileRead {
        path: format!("{base}/missing"),
        max_bytes: 10,
    })
    .await;
    assert!(r.error.unwrap().contains("no such file"));
}

#[tokio::test]
async fn list_processes_includes_ours() {
    let r = run(CommandKind::ListProcesses {
        sort_by: ProcessSort::Memory,
        limit: 100_000,
    })
    .await;
    let processes = result(&r)["processes"].as_array().unwrap().clone();
    let me = processes
        .iter()
        .find(|p| p["pid"] == std::process::id())
        .expect("our own pid is listed");
    assert!(me["memoryBytes"].as_u64().unwrap() > 0);
    assert!(me.get("cpuPercent").is_some());
    let r = run(CommandKind::ListProcesses {
        sort_by: ProcessSort::Cpu,
        limit: 3,
    })
    .await;
    assert_eq!(result(&r)["processes"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn kill_a_spawned_sleep() {
    let mut child = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let r = run(CommandKind::KillProcess {
        pid: child.id(),
        force: false,
    })
    .await;
    assert_eq!(result(&r)["killed"], true);
    let status = child.wait().unwrap();
    assert!(!status.success());

    let r = run(CommandKind::KillProcess {
        pid: std::process::id(),
        force: true,
    })
    .await;
    assert_eq!(r.status, CommandOutcome::Failed);
}

#[tokio::test]
async fn disk_scan_finds_a_planted_large_file() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("deep/er/big.bin");
    std::fs::create_dir_all(big.parent().unwrap()).unwrap();
    std::fs::File::create(&big)
        .unwrap()
        .set_len(5 * 1024 * 1024)
        .unwrap();
    std::fs::write(dir.path().join("small.txt"), "x").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("/", dir.path().join("loop")).unwrap();
    let r = run(CommandKind::DiskScan {
        path: dir.path().display().to_string(),
        top_n: 5,
        large_file_bytes: 1024 * 1024,
    })
    .await;
    let v = result(&r);
    let big_path = big.display().to_string();
    assert_eq!(v["largestFiles"][0]["path"], big_path.as_str());
    assert_eq!(v["largestFiles"][0]["sizeBytes"], 5 * 1024 * 1024);
    assert!(
        v["cleanupCandidates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["category"] == "large_file" && c["path"] == big_path.as_str())
    );
    assert!(v["largestDirectories"].as_array().unwrap().len() >= 2);
    assert!(v["mounts"].is_array());
    // The symlink to / was not followed.
    assert!(v["scannedEntries"].as_u64().unwrap() < 20);
}

#[tokio::test]
async fn cleanup_deletes_only_candidates() {
    // Outside every cleanup category: not under /tmp (where a CI checkout may live), a cache
    // or a log directory — the home directory.
    #[allow(clippy::disallowed_methods)] // test setup
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let outside = tempfile::tempdir_in(home).unwrap();
    let keep = outside.path().join("keep.txt");
    std::fs::write(&keep, "keep").unwrap();
    let temp = tempfile::tempdir_in("/tmp").unwrap();
    let junk = temp.path().join("junk.bin");
    std::fs::write(&junk, vec![0u8; 4096]).unwrap();
    let r = run(CommandKind::DiskCleanup {
        paths: vec![
            keep.display().to_string(),
            junk.display().to_string(),
            "/tmp".into(),
            "/tmp/../etc/passwd".into(),
        ],
    })
    .await;
    let v = result(&r);
    assert!(
        keep.exists(),
        "a path outside the candidate categories was deleted"
    );
    assert!(!junk.exists());
    assert_eq!(v["bytesFreed"], 4096);
    assert_eq!(v["deleted"].as_array().unwrap().len(), 1);
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 3);
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("not a cleanup candidate")
    );
}

#[test]
fn cidr_parsing_and_limit() {
    assert_eq!(network::parse_cidr("10.0.0.0/24").unwrap().len(), 254);
    assert_eq!(network::parse_cidr("10.0.0.7/22").unwrap().len(), 1022);
    assert_eq!(
        network::parse_cidr("10.0.0.7/22").unwrap()[0].to_string(),
        "10.0.0.1"
    );
    assert_eq!(network::parse_cidr("192.168.1.5/32").unwrap().len(), 1);
    assert!(
        network::parse_cidr("10.0.0.0/21")
            .unwrap_err()
            .contains("/22")
    );
    assert!(network::parse_cidr("10.0.0.0").is_err());
    assert!(network::parse_cidr("fe80::/120").is_err());
    assert!(network::parse_cidr("10.0.0.0/33").is_err());
}

#[test]
fn arp_table_parsing() {
    let fixture = "IP address       HW type     Flags       HW address            Mask     Device\n\
                   192.168.1.1      0x1         0x2         AA:bb:cc:dd:ee:01     *        eth0\n\
                   192.168.1.9      0x1         0x0         00:00:00:00:00:00     *        eth0\n\
                   10.0.0.2         0x1         0x6         02:42:ac:11:00:02     *        docker0\n";
    let entries = network::parse_arp(fixture);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].ip.to_string(), "192.168.1.1");
    assert_eq!(entries[0].mac, "aa:bb:cc:dd:ee:01");
    assert_eq!(entries[1].device, "docker0");
}

#[tokio::test]
async fn discovery_of_localhost_and_oversized_range() {
    let r = run(CommandKind::NetworkDiscovery {
        mode: DiscoveryMode::Ping,
        cidr: Some("127.0.0.1/32".into()),
    })
    .await;
    let hosts = result(&r)["hosts"].as_array().unwrap().clone();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0]["alive"], true);
    let r = run(CommandKind::NetworkDiscovery {
        mode: DiscoveryMode::Ping,
        cidr: Some("10.0.0.0/16".into()),
    })
    .await;
    assert_eq!(r.status, CommandOutcome::Failed);
}

#[tokio::test]
async fn set_log_level_answers_when_it_reverts() {
    let r = run(CommandKind::SetLogLevel {
        level: LogLevel::Debug,
        duration_minutes: 15,
    })
    .await;
    assert_eq!(result(&r)["level"], "debug");
    assert!(result(&r)["revertsAt"].is_string());
}

#[tokio::test]
async fn services_and_logs_fail_cleanly_or_answer() {
    let r = run(CommandKind::ListServices).await;
    match r.status {
        CommandOutcome::Completed => assert!(result(&r)["services"].is_array()),
        _ => assert!(!r.error.unwrap().is_empty()),
    }
    let r = run(CommandKind::QueryLogs {
        pattern: None,
        unit: None,
        since_minutes: 60,
        limit: 5,
    })
    .await;
    match r.status {
        CommandOutcome::Completed => assert!(result(&r)["lines"].is_array()),
        _ => assert!(r.error.unwrap().contains("no system log")),
    }
    let r = run(CommandKind::CollectInventory).await;
    assert!(result(&r)["cpu"]["logicalCores"].as_u64().unwrap() >= 1);
}

/// A reboot runs the configured reboot command (here a fake that records its arguments, so the
/// test machine is never restarted) with `+<delay>`; a failing command is the command's
/// failure with its reason.
#[tokio::test]
async fn reboot_runs_the_configured_command_with_its_delay() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("reboot.log");
    let fake = dir.path().join("fake-reboot");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$*\" >> \"{}\"\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = exec::patches::PatchingConfig {
        reboot_command: Some(vec![fake.display().to_string(), "-r".into()]),
        ..Default::default()
    };
    let reboot = |with_users| CommandKind::Reboot {
        delay_minutes: 3,
        with_users,
    };
    let r = executor(dir.path())
        .patching(config)
        .run(
            &command(reboot(true)),
            CancellationToken::new(),
            exec::no_progress(),
        )
        .await;
    assert_eq!(r.status, CommandOutcome::Completed, "{r:?}");
    assert_eq!(result(&r)["reboot"], "scheduled");
    assert_eq!(result(&r)["detail"], "reboot in 3 minutes");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "-r +3\n");

    let failing = exec::patches::PatchingConfig {
        reboot_command: Some(vec!["/bin/false".into()]),
        ..Default::default()
    };
    let r = executor(dir.path())
        .patching(failing)
        .run(
            &command(reboot(true)),
            CancellationToken::new(),
            exec::no_progress(),
        )
        .await;
    assert_eq!(r.status, CommandOutcome::Failed, "{r:?}");
    assert!(
        r.error
            .as_deref()
            .unwrap_or("")
            .contains("the reboot command"),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "-r +3\n",
        "nothing else ran"
    );
}
