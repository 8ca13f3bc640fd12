//! Live-query questions against the real system, through the real executor: each catalogue
//! question answers this machine's facts (a process and a port the test itself opens, dpkg's
//! own package, files the test creates), rows carry exactly the catalogue's columns, the
//! agent's caps hold whatever the command asks, and the file question neither names nor hashes
//! a protected path.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use breeze_agent::exec::{self, Executor};
use breeze_agent::logship::LogControl;
use breeze_agent_proto::livequery::{self, CATALOGUE, ColumnType, MAX_ROWS, Question};
use breeze_agent_proto::{Command, CommandKind, CommandOutcome, CommandResult, LogLevel};
use breeze_core::SystemClock;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Agent {
    state: tempfile::TempDir,
    executor: Executor,
}

impl Agent {
    fn new() -> Agent {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("token"), "brz_secret").unwrap();
        let clock = Arc::new(SystemClock);
        let logs = Arc::new(LogControl::new(clock.clone(), LogLevel::Warn));
        let executor = Executor::new(state.path(), clock, logs);
        Agent { state, executor }
    }

    async fn ask_with(
        &self,
        question: Question,
        max_rows: u32,
        max_bytes: u64,
        protected: &[String],
    ) -> CommandResult {
        let command = Command {
            id: Uuid::now_v7(),
            timeout_secs: 120,
            output_cap_bytes: 0,
            kind: CommandKind::LiveQuery {
                question,
                max_rows,
                max_bytes,
            },
            protected_paths: protected.to_vec(),
        };
        self.executor
            .run(&command, CancellationToken::new(), exec::no_progress())
            .await
    }

    /// The answer's JSON, asserting it completed and its rows fit the catalogue.
    async fn ask(&self, question: Question) -> Value {
        let r = self.ask_with(question.clone(), 0, 0, &[]).await;
        assert_eq!(r.status, CommandOutcome::Completed, "{:?}", r.error);
        let v = r.result.unwrap();
        conforms(question.name(), &v);
        v
    }
}

/// Every row has exactly the question's columns, each of its type or null.
fn conforms(name: &str, answer: &Value) {
    let spec = livequery::spec(name).unwrap();
    assert_eq!(answer["question"], name);
    for row in answer["rows"].as_array().unwrap() {
        let obj = row.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want: Vec<&str> = spec.columns.iter().map(|c| c.name).collect();
        want.sort_unstable();
        assert_eq!(keys, want, "{name}: {row}");
        for c in spec.columns {
            let v = &obj[c.name];
            let ok = v.is_null()
                || match c.kind {
                    ColumnType::String => v.is_string(),
                    ColumnType::Integer => v.is_u64() || v.is_i64(),
                    ColumnType::Number => v.is_number(),
                    ColumnType::Boolean => v.is_boolean(),
                    ColumnType::Time => v
                        .as_str()
                        .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()),
                    ColumnType::StringList => {
                        v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
                    }
                };
            assert!(ok, "{name}.{} is not {:?}: {v}", c.name, c.kind);
        }
    }
}

fn rows(v: &Value) -> &Vec<Value> {
    v["rows"].as_array().unwrap()
}

fn sha256_file(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

#[tokio::test]
async fn processes_include_one_the_test_started_with_its_executable_hash() {
    let agent = Agent::new();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let v = agent
        .ask(Question::Processes {
            name: Some("SLEEP".into()),
            hash: true,
        })
        .await;
    child.kill().unwrap();
    let _ = child.wait();
    let row = rows(&v)
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} missing: {v}"));
    assert_eq!(row["name"], "sleep");
    let exe = std::fs::read_link(format!("/proc/{}/exe", std::process::id()))
        .ok()
        .map(|_| ());
    assert!(exe.is_some());
    let path = row["path"].as_str().unwrap();
    assert_eq!(row["sha256"], sha256_file(Path::new(path)));
    assert!(row["startedAt"].is_string());
    assert!(
        rows(&v)
            .iter()
            .all(|r| r["name"].as_str().unwrap().contains("sleep"))
    );
}

#[tokio::test]
async fn listening_ports_include_the_tests_own_listener() {
    let agent = Agent::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let v = agent
        .ask(Question::ListeningPorts { port: Some(port) })
        .await;
    let list = rows(&v);
    assert_eq!(list.len(), 1, "{v}");
    assert_eq!(list[0]["protocol"], "tcp");
    assert_eq!(list[0]["address"], "127.0.0.1");
    assert_eq!(list[0]["port"], port);
    assert_eq!(list[0]["pid"], std::process::id());
    drop(listener);
}

#[tokio::test]
async fn packages_answer_dpkgs_own_version() {
    let agent = Agent::new();
    let Ok(out) = std::process::Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "dpkg"])
        .output()
    else {
        // Not a dpkg system: the question still answers from rpm or apk, or says none.
        let r = agent
            .ask_with(Question::Packages { name: None }, 0, 0, &[])
            .await;
        assert!(r.status == CommandOutcome::Completed || r.error.is_some());
        return;
    };
    let version = String::from_utf8(out.stdout).unwrap();
    let v = agent
        .ask(Question::Packages {
            name: Some("dpkg".into()),
        })
        .await;
    let row = rows(&v).iter().find(|r| r["name"] == "dpkg").unwrap();
    assert_eq!(row["version"], version.as_str());
    assert_eq!(row["source"], "dpkg");
    assert_eq!(row["sourcePackage"], "dpkg");
}

#[tokio::test]
async fn users_and_groups_answer_root_without_password_data() {
    let agent = Agent::new();
    let v = agent
        .ask(Question::Users {
            name: Some("root".into()),
        })
        .await;
    let root = rows(&v).iter().find(|r| r["name"] == "root").unwrap();
    assert_eq!(root["uid"], 0);
    assert_eq!(root["home"], "/root");
    let g = agent
        .ask(Question::Groups {
            name: Some("root".into()),
        })
        .await;
    assert!(
        rows(&g)
            .iter()
            .any(|r| r["name"] == "root" && r["gid"] == 0)
    );
}

#[tokio::test]
async fn sessions_match_utmp() {
    let agent = Agent::new();
    let v = agent.ask(Question::Sessions).await;
    let utmp = breeze_agent::system::heartbeat::logged_in_users();
    assert_eq!(rows(&v).len(), utmp.len());
}

#[tokio::test]
async fn services_answer_or_say_systemd_is_absent() {
    let agent = Agent::new();
    let r = agent
        .ask_with(
            Question::Services {
                name: None,
                state: None,
            },
            0,
            0,
            &[],
        )
        .await;
    if breeze_agent::exec::services::systemd_running() {
        assert_eq!(r.status, CommandOutcome::Completed, "{:?}", r.error);
        let v = r.result.unwrap();
        conforms("services", &v);
        assert!(!rows(&v).is_empty());
    } else {
        assert_eq!(r.status, CommandOutcome::Failed);
        assert!(r.error.unwrap().contains("systemd is not running"));
    }
}

#[tokio::test]
async fn kernel_modules_match_proc_modules() {
    let agent = Agent::new();
    let v = agent.ask(Question::KernelModules { name: None }).await;
    let expected = std::fs::read_to_string("/proc/modules")
        .map(|t| t.lines().count())
        .unwrap_or(0);
    assert_eq!(
        rows(&v).len(),
        expected.min(livequery::DEFAULT_ROWS as usize)
    );
}

#[tokio::test]
async fn scheduled_tasks_interfaces_and_routes_answer() {
    let agent = Agent::new();
    let tasks = agent.ask(Question::ScheduledTasks).await;
    if Path::new("/etc/crontab").exists() {
        let text = std::fs::read_to_string("/etc/crontab").unwrap();
        let expected = breeze_agent::exec::livequery::parse_cron(&text, "/etc/crontab", None);
        let got: Vec<&Value> = rows(&tasks)
            .iter()
            .filter(|r| r["source"] == "/etc/crontab")
            .collect();
        assert_eq!(got.len(), expected.len());
    }
    let ifs = agent.ask(Question::Interfaces).await;
    assert!(rows(&ifs).iter().any(|r| r["name"] == "lo"), "{ifs}");
    let routes = agent.ask(Question::Routes).await;
    let v4 = std::fs::read_to_string("/proc/net/route")
        .map(|t| t.lines().count().saturating_sub(1))
        .unwrap_or(0);
    assert!(rows(&routes).len() >= v4);
}

/// A tree of files for the file question.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("a/b/c")).unwrap();
    std::fs::write(root.join("top.txt"), "top").unwrap();
    std::fs::write(root.join("a/one.txt"), "one").unwrap();
    std::fs::write(root.join("a/b/c/deep.txt"), "deep").unwrap();
    std::fs::write(root.join("a/b/skip.log"), "log").unwrap();
    std::fs::create_dir_all(root.join("secret")).unwrap();
    std::fs::write(root.join("secret/key.txt"), "nobody reads").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("secret/key.txt"), root.join("a/link.txt")).unwrap();
    dir
}

#[tokio::test]
async fn files_match_the_glob_with_sizes_and_hashes_and_skip_protected_and_links() {
    let agent = Agent::new();
    let dir = tree();
    let root = dir.path().display().to_string();
    let protected = vec![format!("{root}/secret")];
    let r = agent
        .ask_with(
            Question::Files {
                pattern: format!("{root}/**/*.txt"),
            },
            0,
            0,
            &protected,
        )
        .await;
    assert_eq!(r.status, CommandOutcome::Completed, "{:?}", r.error);
    let v = r.result.unwrap();
    conforms("files", &v);
    let mut paths: Vec<String> = rows(&v)
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            format!("{root}/a/b/c/deep.txt"),
            format!("{root}/a/one.txt"),
            format!("{root}/top.txt"),
        ]
    );
    let deep = rows(&v)
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with("deep.txt"))
        .unwrap();
    assert_eq!(deep["sizeBytes"], 4);
    assert_eq!(deep["sha256"], hex::encode(Sha256::digest(b"deep")));
    assert_eq!(v["protectedSkipped"], 1);
    assert!(!v.to_string().contains("nobody reads"));
    assert!(!v.to_string().contains("key.txt"));

    // One component's wildcard only, and a literal file.
    let one = agent
        .ask(Question::Files {
            pattern: format!("{root}/a/*.txt"),
        })
        .await;
    assert_eq!(rows(&one).len(), 1, "links are not followed: {one}");
    let lit = agent
        .ask(Question::Files {
            pattern: format!("{root}/top.txt"),
        })
        .await;
    assert_eq!(rows(&lit)[0]["sha256"], hex::encode(Sha256::digest(b"top")));
}

#[tokio::test]
async fn files_refuse_protected_prefixes_and_kernel_trees() {
    let agent = Agent::new();
    let state = agent.state.path().display().to_string();
    for pattern in [
        format!("{state}/*"),
        "/etc/shadow".to_owned(),
        "/root/.ssh/*".to_owned(),
    ] {
        let r = agent
            .ask_with(
                Question::Files {
                    pattern: pattern.clone(),
                },
                0,
                0,
                &[],
            )
            .await;
        assert_eq!(
            r.status,
            CommandOutcome::Failed,
            "{pattern}: {:?}",
            r.result
        );
        assert!(r.error.unwrap().contains("protected"), "{pattern}");
    }
    for pattern in ["/proc/*/environ", "/sys/**", "/dev/*"] {
        let r = agent
            .ask_with(
                Question::Files {
                    pattern: pattern.into(),
                },
                0,
                0,
                &[],
            )
            .await;
        assert_eq!(r.status, CommandOutcome::Failed, "{pattern}");
    }
    let r = agent
        .ask_with(
            Question::Files {
                pattern: "/etc/../etc/shadow".into(),
            },
            0,
            0,
            &[],
        )
        .await;
    assert_eq!(r.status, CommandOutcome::Failed);
    // A glob that walks into the state directory never names what is inside.
    let parent = agent.state.path().parent().unwrap().display().to_string();
    let name = agent.state.path().file_name().unwrap().to_string_lossy();
    let v = agent
        .ask(Question::Files {
            pattern: format!("{parent}/{name}*/*"),
        })
        .await;
    assert!(rows(&v).is_empty(), "{v}");
    assert!(v["protectedSkipped"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn row_and_byte_caps_are_named_and_held() {
    let agent = Agent::new();
    let r = agent
        .ask_with(Question::Users { name: None }, 1, 0, &[])
        .await;
    let v = r.result.unwrap();
    assert_eq!(rows(&v).len(), 1);
    assert_eq!(v["cap"], "rows");
    let r = agent
        .ask_with(Question::Users { name: None }, 0, 200, &[])
        .await;
    let v = r.result.unwrap();
    assert_eq!(v["cap"], "bytes");
    assert!(v["bytes"].as_u64().unwrap() <= 200);
    assert!(serde_json::to_vec(&v["rows"]).unwrap().len() <= 200 + 2);
    let r = agent
        .ask_with(Question::Users { name: None }, 0, 0, &[])
        .await;
    assert!(r.result.unwrap().get("cap").is_none());
}

#[tokio::test]
async fn the_agent_clamps_caps_and_bounds_the_walk_and_the_hashing() {
    let agent = Agent::new();
    let dir = tempfile::tempdir().unwrap();
    let many = dir.path().join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..=livequery::MAX_WALK_ENTRIES {
        std::fs::File::create(many.join(format!("f{i:06}"))).unwrap();
    }
    // Asking for more rows than the agent ever answers: its own maximum applies.
    let r = agent
        .ask_with(
            Question::Files {
                pattern: format!("{}/*", many.display()),
            },
            u32::MAX,
            u64::MAX,
            &[],
        )
        .await;
    let v = r.result.unwrap();
    assert_eq!(rows(&v).len(), MAX_ROWS as usize);
    assert_eq!(v["cap"], "rows");
    // Matching nothing still visits at most the walk budget.
    let r = agent
        .ask_with(
            Question::Files {
                pattern: format!("{}/*.nothing", many.display()),
            },
            0,
            0,
            &[],
        )
        .await;
    let v = r.result.unwrap();
    assert!(rows(&v).is_empty());
    assert_eq!(v["cap"], "walk_entries");
    // A file past the per-file hash limit is listed without a hash (sparse: nothing read).
    let big = dir.path().join("big.bin");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(livequery::MAX_HASH_FILE_BYTES + 1).unwrap();
    let mut small = std::fs::File::create(dir.path().join("small.bin")).unwrap();
    small.write_all(b"x").unwrap();
    let v = agent
        .ask(Question::Files {
            pattern: format!("{}/*.bin", dir.path().display()),
        })
        .await;
    let big_row = rows(&v)
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with("big.bin"))
        .unwrap();
    assert_eq!(big_row["sha256"], Value::Null);
    assert_eq!(v["cap"], "hash_bytes");
    let small_row = rows(&v)
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with("small.bin"))
        .unwrap();
    assert_eq!(small_row["sha256"], hex::encode(Sha256::digest(b"x")));
}

#[tokio::test]
async fn every_catalogue_question_is_linux_and_answers_here() {
    let agent = Agent::new();
    for spec in CATALOGUE {
        assert!(spec.os.contains(&"linux"));
        assert!(!spec.columns.is_empty());
    }
    // Invalid parameters are refused by the agent itself, whatever the server checked.
    let r = agent
        .ask_with(
            Question::Files {
                pattern: "relative/*.txt".into(),
            },
            0,
            0,
            &[],
        )
        .await;
    assert_eq!(r.status, CommandOutcome::Failed);
}
