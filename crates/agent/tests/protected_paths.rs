//! Path attacks against the real executor: every file and disk command must refuse the
//! protected paths however they are spelt or reached — dot segments, repeated slashes, `/proc`
//! variants, symlinks (and a symlink swapped in while the agent opens the path), hard links,
//! bind mounts where this machine allows them, NUL bytes, long paths and names that are not
//! UTF-8 — and listings, scans and cleanups must neither show nor touch them.
//!
//! The protected "secret" in most tests is the executor's own state directory (protected for
//! every agent) or an organization's addition carried by the command, so the tests do not
//! depend on what this machine keeps in `/etc`.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use breeze_agent::exec::{self, Executor};
use breeze_agent::logship::LogControl;
use breeze_agent_proto::{
    Command, CommandKind, CommandOutcome, CommandResult, ContentEncoding, LogLevel,
};
use breeze_core::SystemClock;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const SECRET: &str = "brz_the-device-token-nobody-may-read";

/// An agent whose state directory holds a secret, as a real one holds its journal.
struct Agent {
    state: tempfile::TempDir,
    executor: Executor,
}

impl Agent {
    fn new() -> Agent {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("secret.txt"), SECRET).unwrap();
        let clock = Arc::new(SystemClock);
        let logs = Arc::new(LogControl::new(clock.clone(), LogLevel::Warn));
        let executor = Executor::new(state.path(), clock, logs);
        Agent { state, executor }
    }

    fn secret(&self) -> PathBuf {
        self.state.path().join("secret.txt")
    }

    async fn run_with(&self, kind: CommandKind, protected: &[String]) -> CommandResult {
        let command = Command {
            id: Uuid::now_v7(),
            timeout_secs: 60,
            output_cap_bytes: 1024 * 1024,
            kind,
            protected_paths: protected.to_vec(),
        };
        self.executor
            .run(&command, CancellationToken::new(), exec::no_progress())
            .await
    }

    async fn run(&self, kind: CommandKind) -> CommandResult {
        self.run_with(kind, &[]).await
    }

    async fn read(&self, path: &str) -> CommandResult {
        self.run(read(path)).await
    }
}

fn read(path: &str) -> CommandKind {
    CommandKind::FileRead {
        path: path.into(),
        max_bytes: 0,
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The command failed as protected and gave nothing away.
#[track_caller]
fn refused(r: &CommandResult, given: &str) {
    assert_eq!(
        r.status,
        CommandOutcome::Failed,
        "{given:?} was not refused: {r:?}"
    );
    let error = r.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("is protected"),
        "{given:?} failed, but not as protected: {error}"
    );
    assert!(r.result.is_none());
    assert!(
        !format!("{r:?}").contains(SECRET),
        "the secret leaked: {r:?}"
    );
}

#[track_caller]
fn failed_with(r: &CommandResult, words: &str) {
    assert_eq!(r.status, CommandOutcome::Failed, "{r:?}");
    let error = r.error.as_deref().unwrap_or_default();
    assert!(error.contains(words), "expected {words:?} in {error:?}");
}

fn result(r: &CommandResult) -> &Value {
    r.result
        .as_ref()
        .unwrap_or_else(|| panic!("no result: {r:?}"))
}

#[tokio::test]
async fn spellings_of_protected_paths_are_refused() {
    let agent = Agent::new();
    let state = s(agent.state.path());
    let tail = state.trim_start_matches('/');
    for path in [
        s(&agent.secret()),
        format!("/{state}/secret.txt"),
        format!("/{tail}//secret.txt"),
        format!("/{tail}/./secret.txt"),
        format!("/tmp/../{tail}/secret.txt"),
        format!("/../../{tail}/secret.txt"),
        format!("{state}/secret.txt/"),
        "/etc/shadow".into(),
        "//etc/shadow".into(),
        "/etc/./shadow".into(),
        "/etc//shadow".into(),
        "/var/../etc/shadow".into(),
        "/etc/sudoers".into(),
        "/root/.ssh/authorized_keys".into(),
        "/etc/breeze-agent/agent.json".into(),
    ] {
        refused(&agent.read(&path).await, &path);
    }
}

#[tokio::test]
async fn proc_variants_are_refused() {
    let agent = Agent::new();
    let me = std::process::id();
    let tid = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    for path in [
        "/proc/self/environ".to_owned(),
        "//proc/self/environ".to_owned(),
        "/proc/./self/environ".to_owned(),
        "/proc/thread-self/environ".to_owned(),
        format!("/proc/{me}/environ"),
        format!("/proc/{me}/task/{tid}/environ"),
        "/proc/self/mem".to_owned(),
        format!("/proc/{me}/task/{tid}/mem"),
        "/proc/1/environ".to_owned(),
        "/proc/kcore".to_owned(),
        "/proc/self/root/etc/shadow".to_owned(),
    ] {
        refused(&agent.read(&path).await, &path);
    }
    // /proc/<pid>/fd/<n> names whatever the process holds open: refused as a whole.
    let held = std::fs::File::open(agent.secret()).unwrap();
    let fd = {
        use std::os::fd::AsRawFd;
        held.as_raw_fd()
    };
    let path = format!("/proc/{me}/fd/{fd}");
    refused(&agent.read(&path).await, &path);
    let path = format!("/proc/self/root{}", s(&agent.secret()));
    refused(&agent.read(&path).await, &path);
    // What is not protected in /proc still reads.
    let r = agent.read("/proc/self/status").await;
    assert_eq!(r.status, CommandOutcome::Completed, "{r:?}");
    // A listing of a process leaves out its environment, memory and descriptors.
    let r = agent
        .run(CommandKind::FileList {
            path: "/proc/self".into(),
        })
        .await;
    let names: Vec<String> = result(&r)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.iter().any(|n| n == "status"), "{names:?}");
    for hidden in ["environ", "mem", "fd", "map_files"] {
        assert!(!names.iter().any(|n| n == hidden), "{hidden} listed");
    }
    assert!(result(&r)["protectedOmitted"].as_u64().unwrap() >= 4);
}

#[tokio::test]
async fn symlinks_to_protected_paths_are_refused() {
    let agent = Agent::new();
    let links = tempfile::tempdir().unwrap();
    let to_file = links.path().join("innocent.txt");
    std::os::unix::fs::symlink(agent.secret(), &to_file).unwrap();
    let to_dir = links.path().join("logs");
    std::os::unix::fs::symlink(agent.state.path(), &to_dir).unwrap();
    let chain = links.path().join("chain");
    std::os::unix::fs::symlink(&to_file, &chain).unwrap();
    let to_environ = links.path().join("env");
    std::os::unix::fs::symlink("/proc/self/environ", &to_environ).unwrap();
    let to_shadow = links.path().join("shadow");
    std::os::unix::fs::symlink("/etc/shadow", &to_shadow).unwrap();
    let relative = links.path().join("rel");
    std::os::unix::fs::symlink("../../../../../../../../etc/shadow", &relative).unwrap();
    for path in [
        s(&to_file),
        s(&to_dir.join("secret.txt")),
        s(&chain),
        s(&to_environ),
        s(&to_shadow),
        s(&relative),
        // `..` after a link is the link target's parent, as the kernel has it.
        format!(
            "{}/logs/../{}/secret.txt",
            s(links.path()),
            agent.state.path().file_name().unwrap().to_string_lossy()
        ),
    ] {
        refused(&agent.read(&path).await, &path);
    }
    let r = agent.run(CommandKind::FileList { path: s(&to_dir) }).await;
    refused(&r, "a link to the state directory");
    // Writing through a link into the protected directory is refused too.
    let r = agent
        .run(CommandKind::FileWrite {
            path: s(&to_dir.join("planted.sh")),
            content: "x".into(),
            encoding: ContentEncoding::Utf8,
        })
        .await;
    refused(&r, "a write through a link");
    assert!(!agent.state.path().join("planted.sh").exists());
    // A write to the link itself does not follow it into the protected file.
    let r = agent
        .run(CommandKind::FileWrite {
            path: s(&to_file),
            content: "overwritten".into(),
            encoding: ContentEncoding::Utf8,
        })
        .await;
    assert_eq!(r.status, CommandOutcome::Failed, "{r:?}");
    assert_eq!(std::fs::read_to_string(agent.secret()).unwrap(), SECRET);
    // Deleting the link deletes the link, never its target.
    let r = agent
        .run(CommandKind::FileDelete {
            path: s(&to_file),
            recursive: false,
        })
        .await;
    assert_eq!(r.status, CommandOutcome::Completed, "{r:?}");
    assert!(agent.secret().exists());
}

/// Flips `path` between a harmless regular file (or directory) and a link to the secret while
/// the agent reads it: whatever the timing, the agent never answers with the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_while_opening_never_leaks() {
    let agent = Agent::new();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("f");
    let dir = work.path().join("d");
    let real_dir = work.path().join("real");
    std::fs::create_dir(&real_dir).unwrap();
    std::fs::write(real_dir.join("secret.txt"), "public").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, file, dir, real_dir) =
            (stop.clone(), file.clone(), dir.clone(), real_dir.clone());
        let secret = agent.secret();
        let state = agent.state.path().to_path_buf();
        std::thread::spawn(move || {
            let tmp_link = file.with_extension("l");
            let tmp_dir_link = dir.with_extension("l");
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A regular file, then atomically a link to the secret, and back.
                let plain = file.with_extension("p");
                std::fs::write(&plain, "public").unwrap();
                std::fs::rename(&plain, &file).unwrap();
                let _ = std::fs::remove_file(&tmp_link);
                std::os::unix::fs::symlink(&secret, &tmp_link).unwrap();
                std::fs::rename(&tmp_link, &file).unwrap();
                // A directory component: a real directory, then a link to the state directory.
                let _ = std::fs::remove_file(&tmp_dir_link);
                std::os::unix::fs::symlink(&real_dir, &tmp_dir_link).unwrap();
                std::fs::rename(&tmp_dir_link, &dir).unwrap();
                std::os::unix::fs::symlink(&state, &tmp_dir_link).unwrap();
                std::fs::rename(&tmp_dir_link, &dir).unwrap();
                flips += 1;
            }
            flips
        })
    };
    let mut answered = 0;
    for _ in 0..300 {
        for path in [s(&file), s(&dir.join("secret.txt"))] {
            let r = agent.read(&path).await;
            assert!(
                !format!("{r:?}").contains(SECRET),
                "the secret leaked through a swapped link: {r:?}"
            );
            if r.status == CommandOutcome::Completed {
                assert_eq!(result(&r)["content"], "public");
                answered += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0, "the links never moved");
    let _ = answered; // how many reads caught the harmless state depends on timing
}

#[tokio::test]
async fn hard_links_and_bind_mounts_are_refused_by_identity() {
    let agent = Agent::new();
    let work = tempfile::tempdir_in(agent.state.path().parent().unwrap()).unwrap();
    let hard = work.path().join("copy.txt");
    if std::fs::hard_link(agent.secret(), &hard).is_ok() {
        refused(&agent.read(&s(&hard)).await, "a hard link");
        let r = agent
            .run(CommandKind::FileWrite {
                path: s(&hard),
                content: "overwritten".into(),
                encoding: ContentEncoding::Utf8,
            })
            .await;
        refused(&r, "a write through a hard link");
        assert_eq!(std::fs::read_to_string(agent.secret()).unwrap(), SECRET);
    }
    let mount = work.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    let Some(_mounted) = BindMount::new(agent.state.path(), &mount) else {
        // No bind mounts here (not root, or no CAP_SYS_ADMIN): nothing more to attack.
        return;
    };
    refused(
        &agent.read(&s(&mount.join("secret.txt"))).await,
        "a bind mount of the state directory",
    );
    refused(
        &agent.run(CommandKind::FileList { path: s(&mount) }).await,
        "a listing through a bind mount",
    );
    // A listing of the directory holding the mount leaves it out.
    let r = agent
        .run(CommandKind::FileList {
            path: s(work.path()),
        })
        .await;
    assert!(
        !result(&r)["entries"].to_string().contains("\"mnt\""),
        "{r:?}"
    );
    // A recursive delete of a tree with a mount inside does not reach into it.
    let r = agent
        .run(CommandKind::FileDelete {
            path: s(work.path()),
            recursive: true,
        })
        .await;
    refused(&r, "deleting a tree that holds a bind mount");
    assert_eq!(std::fs::read_to_string(agent.secret()).unwrap(), SECRET);
}

/// A bind mount, unmounted when dropped (before the temporary directories are removed).
struct BindMount(PathBuf);

impl BindMount {
    fn new(from: &Path, to: &Path) -> Option<BindMount> {
        let ok = std::process::Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(to)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| BindMount(to.to_path_buf()))
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test]
async fn nul_relative_empty_and_long_paths_are_refused() {
    let agent = Agent::new();
    let secret = s(&agent.secret());
    failed_with(&agent.read(&format!("{secret}\0.txt")).await, "NUL");
    failed_with(&agent.read("/tmp/a\0b").await, "NUL");
    failed_with(&agent.read("etc/shadow").await, "not an absolute path");
    failed_with(&agent.read("./etc/shadow").await, "not an absolute path");
    failed_with(&agent.read("").await, "empty");
    failed_with(
        &agent.read(&format!("/{}", "a/".repeat(3000))).await,
        "too long",
    );
    // Padding with dot segments up to the limit still lands on the protected file.
    let pad = "./".repeat((4000 - secret.len()) / 2);
    let padded = format!("/{pad}{}", secret.trim_start_matches('/'));
    assert!(padded.len() <= 4096);
    refused(&agent.read(&padded).await, "a padded path");
    // A real path near PATH_MAX outside the protected ones reads fine.
    let work = tempfile::tempdir().unwrap();
    let mut deep = work.path().to_path_buf();
    while s(&deep).len() < 3800 {
        deep.push("d".repeat(200));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("f"), "deep").unwrap();
    let r = agent.read(&s(&deep.join("f"))).await;
    assert_eq!(result(&r)["content"], "deep");
    let r = agent
        .run(CommandKind::DiskScan {
            path: format!("{secret}\0"),
            top_n: 5,
            large_file_bytes: 0,
        })
        .await;
    failed_with(&r, "NUL");
}

#[tokio::test]
async fn names_that_are_not_utf8_are_matched_and_listed_safely() {
    use std::os::unix::ffi::OsStrExt;
    let agent = Agent::new();
    let work = tempfile::tempdir().unwrap();
    let odd = work
        .path()
        .join(std::ffi::OsStr::from_bytes(b"key\xff\xfe.pem"));
    std::fs::write(&odd, SECRET).unwrap();
    let link = work.path().join(std::ffi::OsStr::from_bytes(b"l\xff"));
    std::os::unix::fs::symlink(agent.secret(), &link).unwrap();
    std::fs::write(work.path().join("plain.txt"), "plain").unwrap();
    let additions = vec![format!("{}/key*", s(work.path()))];
    let r = agent
        .run_with(
            CommandKind::FileList {
                path: s(work.path()),
            },
            &additions,
        )
        .await;
    let entries = result(&r)["entries"].as_array().unwrap().clone();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"plain.txt"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("key")), "{names:?}");
    // The link is listed as a link (names are shown lossily), never followed.
    let shown = entries
        .iter()
        .find(|e| e["name"].as_str().unwrap().starts_with('l'))
        .unwrap();
    assert_eq!(shown["kind"], "symlink");
    assert_eq!(result(&r)["protectedOmitted"], 1);
    // A scan of the directory never names the protected file.
    let r = agent
        .run_with(
            CommandKind::DiskScan {
                path: s(work.path()),
                top_n: 50,
                large_file_bytes: 1,
            },
            &additions,
        )
        .await;
    let v = result(&r).to_string();
    assert!(!v.contains("key"), "{v}");
    assert_eq!(result(&r)["protectedSkipped"], 1);
}

#[tokio::test]
async fn organization_additions_protect_like_the_builtin_list() {
    let agent = Agent::new();
    let vault = tempfile::tempdir().unwrap();
    std::fs::create_dir(vault.path().join("keys")).unwrap();
    std::fs::write(vault.path().join("keys/app.pem"), SECRET).unwrap();
    std::fs::write(vault.path().join("readme"), "ok").unwrap();
    let additions = vec![format!("{}/keys", s(vault.path()))];
    let pem = s(&vault.path().join("keys/app.pem"));
    // Without the addition the file reads; with it, every spelling is refused.
    assert_eq!(agent.read(&pem).await.status, CommandOutcome::Completed);
    for path in [
        pem.clone(),
        format!("{}/./keys//app.pem", s(vault.path())),
        format!("{}/keys/../keys/app.pem", s(vault.path())),
    ] {
        refused(&agent.run_with(read(&path), &additions).await, &path);
    }
    let link = vault.path().join("shortcut");
    std::os::unix::fs::symlink(vault.path().join("keys"), &link).unwrap();
    let path = s(&link.join("app.pem"));
    refused(&agent.run_with(read(&path), &additions).await, &path);
    // Write, mkdir, rename in or out, delete of the tree that holds it: all refused.
    let kinds = [
        CommandKind::FileWrite {
            path: format!("{}/keys/new.pem", s(vault.path())),
            content: "x".into(),
            encoding: ContentEncoding::Utf8,
        },
        CommandKind::FileMkdir {
            path: format!("{}/keys/sub/dir", s(vault.path())),
        },
        CommandKind::FileRename {
            from: pem.clone(),
            to: format!("{}/stolen.pem", s(vault.path())),
        },
        CommandKind::FileRename {
            from: s(&vault.path().join("keys")),
            to: format!("{}/moved", s(vault.path())),
        },
        CommandKind::FileRename {
            from: s(&vault.path().join("readme")),
            to: format!("{}/keys/readme", s(vault.path())),
        },
        CommandKind::FileDelete {
            path: s(&vault.path().join("keys")),
            recursive: true,
        },
    ];
    for kind in kinds {
        let shown = format!("{kind:?}");
        refused(&agent.run_with(kind, &additions).await, &shown);
    }
    // Moving or deleting the tree that holds the agent's own state is refused too.
    let r = agent
        .run(CommandKind::FileDelete {
            path: s(agent.state.path()),
            recursive: true,
        })
        .await;
    refused(&r, "the state directory");
    assert_eq!(
        std::fs::read_to_string(vault.path().join("keys/app.pem")).unwrap(),
        SECRET
    );
    // An addition that does not parse fails the command: it is never silently dropped.
    let r = agent
        .run_with(read(&s(&vault.path().join("readme"))), &["relative".into()])
        .await;
    failed_with(&r, "protected paths are invalid");
}

#[tokio::test]
async fn scans_and_cleanups_never_reach_protected_paths() {
    let agent = Agent::new();
    let temp = tempfile::tempdir_in("/tmp").unwrap();
    let keep = temp.path().join("keep");
    std::fs::create_dir(&keep).unwrap();
    std::fs::File::create(keep.join("big.bin"))
        .unwrap()
        .set_len(3 * 1024 * 1024)
        .unwrap();
    let junk = temp.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("x"), "x").unwrap();
    let link = temp.path().join("to-state");
    std::os::unix::fs::symlink(agent.state.path(), &link).unwrap();
    let additions = vec![s(&keep)];
    let r = agent
        .run_with(
            CommandKind::DiskScan {
                path: s(temp.path()),
                top_n: 50,
                large_file_bytes: 1024 * 1024,
            },
            &additions,
        )
        .await;
    let v = result(&r).to_string();
    assert!(!v.contains("keep"), "the scan named a protected path: {v}");
    assert!(v.contains("junk"), "{v}");
    // A scan of a protected path is refused outright.
    let r = agent
        .run_with(
            CommandKind::DiskScan {
                path: s(&keep),
                top_n: 5,
                large_file_bytes: 0,
            },
            &additions,
        )
        .await;
    refused(&r, "a scan of a protected path");
    let r = agent
        .run(CommandKind::DiskScan {
            path: s(&link),
            top_n: 5,
            large_file_bytes: 0,
        })
        .await;
    refused(&r, "a scan through a link to the state directory");
    // Cleanup: the protected tree, anything inside it, a tree that holds it, and a path
    // through a link into it are skipped; the link itself and plain junk go.
    let r = agent
        .run_with(
            CommandKind::DiskCleanup {
                paths: vec![
                    s(&keep),
                    s(&keep.join("big.bin")),
                    s(temp.path()),
                    s(&link.join("secret.txt")),
                    s(&junk),
                    s(&link),
                ],
            },
            &additions,
        )
        .await;
    let v = result(&r);
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 4, "{v}");
    for s in skipped {
        assert!(
            s["reason"].as_str().unwrap().contains("is protected"),
            "{s}"
        );
    }
    assert!(keep.join("big.bin").exists());
    assert!(agent.secret().exists());
    assert!(!junk.exists());
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "the link itself is junk"
    );
}

#[tokio::test]
async fn the_agents_own_config_and_extra_paths_are_protected() {
    let state = tempfile::tempdir().unwrap();
    let etc = tempfile::tempdir().unwrap();
    let config = etc.path().join("agent.json");
    std::fs::write(&config, format!("{{\"token\":\"{SECRET}\"}}")).unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("demo.json"), SECRET).unwrap();
    let clock = Arc::new(SystemClock);
    let logs = Arc::new(LogControl::new(clock.clone(), LogLevel::Warn));
    let executor = Executor::new(state.path(), clock, logs).protecting(
        &[config.clone(), data.path().to_path_buf()],
        &[format!("{}/.agent.json.*.tmp", s(etc.path()))],
    );
    let agent = Agent { state, executor };
    std::fs::write(etc.path().join(".agent.json.1234.tmp"), SECRET).unwrap();
    for path in [
        s(&config),
        s(&data.path().join("demo.json")),
        s(&etc.path().join(".agent.json.1234.tmp")),
    ] {
        refused(&agent.read(&path).await, &path);
    }
    // Its neighbours are not.
    std::fs::write(etc.path().join("other.txt"), "fine").unwrap();
    let r = agent.read(&s(&etc.path().join("other.txt"))).await;
    assert_eq!(result(&r)["content"], "fine");
}

#[tokio::test]
async fn devices_and_pipes_are_not_read() {
    let agent = Agent::new();
    failed_with(&agent.read("/dev/zero").await, "not a regular file");
    let work = tempfile::tempdir().unwrap();
    let fifo = work.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        failed_with(&agent.read(&s(&fifo)).await, "not a regular file");
    }
}
