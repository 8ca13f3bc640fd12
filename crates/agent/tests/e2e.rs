//! The real thing end to end: a Breeze server on a real socket, the real `breeze-agent` binary
//! enrolled into it and running, and the fleet tools acting on this machine through it — a
//! library script, file writes and reads, a disk scan and a cleanup of what it found, a network
//! sweep reporting progress. Then the agent is killed: the device goes offline and tools say so
//! instead of hanging; restarted, it is back. A configuration policy applied through the
//! pipeline changes the metric interval the agent reports as applied. And the monitoring
//! scenario: real CPU load on this machine raises an alert that goes out by SMTP and webhook
//! and starts an automation, clears by itself, and is held back by a maintenance window. And
//! agent-reported events: a log watch configured on a temporary file turns a matching line into
//! an event that raises an event rule's alert, which resolves itself once its window passes.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use breeze_core::{Actor, ActorType, DeviceStatus, OrgId, SystemClock};
use breeze_limits::MemoryLimiter;
use breeze_pipeline::{
    CallOutcome,
    approvals::{DecisionRequest, decide},
};
use breeze_server::{ServerConfig, workers::Worker};
use breeze_store::{Backend, NewScript, ScriptParameter, Store, testing::TestStore};
use breeze_tools::ProgressReport;
use common::{Fleet, agent, approve_everything, audit, call_outcome, enroll, eventually};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// Tests share the machine's CPU, except the monitoring scenario, which needs its CPU load
/// to be the only one and takes this exclusively.
static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn server(store: Store) -> Fleet {
    let shared = MACHINE.read().await;
    let mut f = server_with(store, |_| {}).await;
    f._beside_others = Some(shared);
    f
}

/// [`server`] with its configuration changed by `tweak` first.
async fn server_with(store: Store, tweak: impl FnOnce(&mut ServerConfig)) -> Fleet {
    common::server_with(store, tweak, Arc::new(MemoryLimiter::new())).await
}

/// Calls a tool through the whole pipeline with the admin's `*` key of `org` (a person
/// approves each Tier 3 request as it appears), collecting progress reports.
async fn call(
    f: &Fleet,
    org: OrgId,
    tool: &str,
    args: Value,
) -> (Result<Value, String>, Vec<ProgressReport>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = match call_outcome(f, org, tool, args, Some(tx)).await {
        CallOutcome::Output(raw) => Ok(serde_json::from_str(raw.get()).unwrap()),
        CallOutcome::Failed(e) => Err(e.message),
        other => panic!("{tool}: {other:?}"),
    };
    let mut progress = Vec::new();
    while let Some(p) = rx.recv().await {
        progress.push(p);
    }
    (out, progress)
}

async fn run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let mut f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");

    // A bad key: the agent says why and writes nothing.
    let out = agent(
        &[
            "enroll",
            "--server",
            &f.base_url,
            "--key",
            &format!("brz_{}", "x".repeat(43)),
        ],
        &config,
    )
    .output()
    .await
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Invalid, expired or used-up enrollment key"),
        "{stderr}"
    );
    assert!(!config.exists());

    enroll(&f, &config).await;
    let file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let device = file["deviceId"].as_str().unwrap().to_owned();
    let device_id: breeze_core::DeviceId = device.parse().unwrap();
    let mut running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(device_id)
    })
    .await;

    // A library script with declared parameters runs on the real machine.
    let script = f
        .store
        .org(f.org)
        .scripts()
        .create_script(
            NewScript {
                name: "greet".into(),
                description: "says hello".into(),
                language: "bash".into(),
                category: "test".into(),
                body: "echo \"hello $1\"; echo oops >&2; exit 3\n".into(),
                parameters: vec![ScriptParameter {
                    name: "who".into(),
                    description: String::new(),
                    required: true,
                    default: None,
                }],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap();
    let (out, _) = call(
        &f,
        f.org,
        "run_script",
        json!({
            "scriptId": "greet", "deviceIds": [device], "parameters": { "who": "world" }
        }),
    )
    .await;
    let out = out.unwrap();
    let run0 = &out["results"][0];
    assert_eq!(run0["status"], "completed", "{out}");
    assert_eq!(run0["exitCode"], 3);
    assert_eq!(run0["stdout"], "hello world\n");
    assert_eq!(run0["stderr"], "oops\n");
    assert_eq!(out["succeeded"], 0);
    let recorded = f
        .store
        .org(f.org)
        .commands()
        .list_commands(device_id, 10)
        .await
        .unwrap();
    assert_eq!(
        recorded[0].script_id,
        Some(script.id),
        "the execution is recorded per device"
    );
    let (out, _) = call(
        &f,
        f.org,
        "run_script",
        json!({
            "scriptId": "greet", "deviceIds": [device]
        }),
    )
    .await;
    assert!(out.unwrap_err().contains("parameters.who: required"));

    // An alert raises; the automation it triggers runs the library script on the device, as
    // its owner (an execute key), after a person approves; the history shows the outcome.
    let exec_key = &f.exec_keys.iter().find(|(o, _)| *o == f.org).unwrap().1;
    let owner = f
        .state
        .auth
        .authenticate_api_key(Some(exec_key))
        .await
        .unwrap()
        .api_key_id()
        .unwrap();
    let o = f.store.org(f.org);
    let rule = o
        .alerts()
        .create_rule(
            breeze_store::NewRule {
                name: "hot".into(),
                description: None,
                severity: breeze_core::Severity::High,
                enabled: true,
                condition: breeze_core::AlertCondition::Offline { minutes: 60 },
                target: breeze_store::RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: false,
                channel_ids: vec![],
                created_by: "test".into(),
            },
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let automation = o
        .automations()
        .create_automation(
            breeze_store::NewAutomation {
                name: "greet on alert".into(),
                description: None,
                enabled: true,
                trigger: breeze_store::TriggerSpec::Alert {
                    rule: Some(rule.id),
                    min_severity: None,
                },
                action: breeze_store::ActionSpec::RunScript {
                    script: script.id,
                    parameters: [("who".to_owned(), "automation".to_owned())].into(),
                    timeout_seconds: 30,
                },
                target: breeze_store::RuleTarget::Organization,
                owner_actor: Actor::new(ActorType::ApiKey, owner).to_string(),
            },
            audit("automation.create"),
        )
        .await
        .unwrap();
    let approver = {
        let (store, pipeline, admin, org) = (
            f.store.clone(),
            f.state.pipeline.clone(),
            f.admin.clone(),
            f.org,
        );
        tokio::spawn(async move {
            loop {
                for r in store
                    .org(org)
                    .approvals()
                    .list_approvals(true, 10)
                    .await
                    .unwrap()
                {
                    let request = DecisionRequest {
                        id: r.id,
                        decision: breeze_store::Decision::Approve,
                        reason: None,
                        request_id: None,
                    };
                    let actor = Actor::new(ActorType::User, admin.id);
                    let _ = decide(&store, pipeline.registry(), &admin, actor, request).await;
                    pipeline.approvals().notify_decided();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let alert = o
        .alerts()
        .raise_alert(&rule, device_id, None)
        .await
        .unwrap()
        .unwrap();
    eventually(60, "the automation's run to finish", || async {
        f.store
            .org(f.org)
            .automations()
            .list_runs(Some(automation.id), 5)
            .await
            .unwrap()
            .first()
            .is_some_and(|r| r.status.is_terminal())
    })
    .await;
    approver.abort();
    let run = o
        .automations()
        .list_runs(Some(automation.id), 5)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(run.alert_id, Some(alert.id));
    // The approval was granted while the worker's call waited, which then ran it.
    let approved = o.approvals().list_approvals(false, 20).await.unwrap();
    assert!(
        approved.iter().any(|a| a.tool == "run_script"
            && a.arguments["parameters"]["who"] == "automation"
            && a.status.as_str() == "completed"),
        "the automation's script run was approved by a person first"
    );
    let outcome = &run.devices[0];
    assert_eq!(outcome.device_id, device_id, "{run:?}");
    assert_eq!(outcome.status.as_str(), "completed", "{run:?}");
    assert_eq!(outcome.exit_code, Some(3), "{run:?}");
    assert_eq!(
        outcome.stdout.as_deref(),
        Some("hello automation\n"),
        "{run:?}"
    );
    assert_eq!(
        run.status,
        breeze_core::RunStatus::Failed,
        "exit 3 is a failure: {run:?}"
    );

    // Files: write (Tier 3 handler), read back, list.
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("note.txt").display().to_string();
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({
            "deviceId": device, "action": "write", "path": path, "content": "written by breeze"
        }),
    )
    .await;
    assert_eq!(out.unwrap()["status"], "completed");
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({
            "deviceId": device, "action": "read", "path": path
        }),
    )
    .await;
    assert_eq!(out.unwrap()["result"]["content"], "written by breeze");
    // Bytes that are not text (here a NUL) travel base64 through the store and the agent, and
    // come back exactly; as "text" they are refused, never silently changed.
    let nul_path = work.path().join("nul.bin").display().to_string();
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": device, "action": "write", "path": nul_path,
                "content": "before\u{0}after" }),
    )
    .await;
    assert!(out.unwrap_err().contains("base64"));
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": device, "action": "write", "path": nul_path,
                "content": "YmVmb3JlAGFmdGVyCg==", "encoding": "base64" }),
    )
    .await;
    assert_eq!(out.unwrap()["status"], "completed");
    assert_eq!(std::fs::read(&nul_path).unwrap(), b"before\0after\n");
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": device, "action": "read", "path": nul_path }),
    )
    .await;
    let read = out.unwrap();
    assert_eq!(read["result"]["encoding"], "base64");
    assert_eq!(read["result"]["content"], "YmVmb3JlAGFmdGVyCg==");
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({
            "deviceId": device, "action": "read", "path": "/etc/shadow"
        }),
    )
    .await;
    assert!(out.unwrap_err().contains("is protected"));

    // The agent refuses on its own what the server lets through: its own config file (the
    // device token), and, through a link the server cannot see, a path the organization added.
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": device, "action": "read", "path": config.display().to_string() }),
    )
    .await;
    let refused = out.unwrap_err();
    assert!(refused.contains("is protected"), "{refused}");
    assert!(!refused.contains("brz_"), "{refused}");
    let vault = work.path().join("vault");
    std::fs::create_dir(&vault).unwrap();
    std::fs::write(vault.join("key.pem"), "PRIVATE").unwrap();
    std::os::unix::fs::symlink(&vault, work.path().join("shortcut")).unwrap();
    f.store
        .org(f.org)
        .commands()
        .set_protected_paths(
            &[vault.display().to_string()],
            audit("org.protected_paths.set"),
        )
        .await
        .unwrap();
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": device, "action": "read", "path": vault.join("key.pem").display().to_string() }),
    )
    .await;
    assert!(
        out.unwrap_err().contains("is protected"),
        "the server's wall"
    );
    let through_link = work.path().join("shortcut/key.pem").display().to_string();
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": device, "action": "read", "path": through_link }),
    )
    .await;
    let refused = out.unwrap_err();
    assert!(
        refused.contains("is protected"),
        "the agent's wall: {refused}"
    );
    assert!(!refused.contains("PRIVATE"));
    let (out, _) = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": device, "action": "list", "path": work.path().display().to_string() }),
    )
    .await;
    let listing = out.unwrap()["result"].clone();
    assert!(!listing.to_string().contains("\"vault\""), "{listing}");
    assert_eq!(listing["protectedOmitted"], 1);
    f.store
        .org(f.org)
        .commands()
        .set_protected_paths(&[], audit("org.protected_paths.set"))
        .await
        .unwrap();
    std::fs::remove_file(work.path().join("shortcut")).unwrap();
    std::fs::remove_dir_all(&vault).unwrap();

    // Processes: the agent itself is among them.
    let (out, _) = call(&f, f.org, "execute_command", json!({
        "deviceId": device, "commandType": "list_processes", "payload": { "limit": 500, "sortBy": "memory" }
    }))
    .await;
    let out = out.unwrap();
    assert!(
        out["result"].to_string().contains("breeze-agent"),
        "{}",
        out["result"]
    );

    // Disk: a scan finds a planted large file as a cleanup candidate; cleanup deletes it.
    let big = work.path().join("big.bin");
    std::fs::write(&big, vec![0u8; 3 * 1024 * 1024]).unwrap();
    let (out, _) = call(&f, f.org, "analyze_disk_usage", json!({
        "deviceId": device, "refresh": true, "path": work.path().display().to_string(), "largeFileMb": 1
    }))
    .await;
    let snapshot = out.unwrap();
    let big_path = big.display().to_string();
    assert!(
        snapshot["analysis"]["cleanupCandidates"]
            .to_string()
            .contains(&big_path),
        "{snapshot}"
    );
    let (out, _) = call(
        &f,
        f.org,
        "disk_cleanup",
        json!({ "deviceId": device, "action": "preview" }),
    )
    .await;
    assert!(out.unwrap()["candidates"].to_string().contains(&big_path));
    let (out, _) = call(
        &f,
        f.org,
        "disk_cleanup",
        json!({
            "deviceId": device, "action": "execute", "paths": [big_path, "/etc/hostname"]
        }),
    )
    .await;
    let out = out.unwrap();
    assert_eq!(
        out["rejected"],
        json!(["/etc/hostname"]),
        "only snapshot candidates are deleted"
    );
    assert!(!big.exists(), "{out}");

    // Network discovery reports progress while it sweeps.
    let (out, progress) = call(
        &f,
        f.org,
        "network_discovery",
        json!({
            "deviceId": device, "subnet": "127.0.0.0/28", "scanType": "ping"
        }),
    )
    .await;
    let out = out.unwrap();
    assert_eq!(out["status"], "completed", "{out}");
    assert!(!progress.is_empty(), "progress reached the caller");

    // A script that outlives its timeout is stopped and reported timed out.
    f.store
        .org(f.org)
        .scripts()
        .create_script(
            NewScript {
                name: "slow".into(),
                description: String::new(),
                language: "sh".into(),
                category: "test".into(),
                body: "sleep 30\n".into(),
                parameters: vec![],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let (out, _) = call(
        &f,
        f.org,
        "run_script",
        json!({
            "scriptId": "slow", "deviceIds": [device], "timeoutSeconds": 5
        }),
    )
    .await;
    // A run that did not complete anywhere is a tool error with the device's reason.
    let error = out.unwrap_err();
    assert!(
        error.starts_with("timed out on ") && error.contains("command id"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    // The same command delivered twice runs once.
    let marker = work.path().join("ran.log");
    let kind = breeze_agent_proto::CommandKind::Shell {
        shell: breeze_agent_proto::Shell::Sh,
        command: format!("echo run >> {}", marker.display()),
    };
    let cmd = f
        .state
        .gateway
        .org(f.org)
        .submit(
            breeze_store::NewCommand {
                device_id,
                kind,
                timeout_secs: 10,
                output_cap_bytes: 1024,
                queue_ttl: chrono::Duration::seconds(30),
                script: None,
                created_by: "test".into(),
            },
            audit("device.command"),
        )
        .await
        .unwrap();
    let wire = cmd.to_wire().unwrap();
    assert!(
        f.state
            .gateway
            .deliver(device_id, breeze_agent_proto::ServerFrame::Command(wire))
    );
    let done = f
        .state
        .gateway
        .org(f.org)
        .wait(cmd.id, Duration::from_secs(10), |_| {})
        .await
        .unwrap();
    assert_eq!(done.status, breeze_core::CommandStatus::Completed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "run\n",
        "ran exactly once"
    );

    // The server restarts: the agent reconnects by itself and keeps working.
    f.restart().await;
    eventually(
        30,
        "the agent to reconnect after a server restart",
        || async { f.state.gateway.is_connected(device_id) },
    )
    .await;
    let r = f
        .mcp(
            "file_operations",
            json!({ "deviceId": device, "action": "list", "path": "/" }),
        )
        .await;
    assert_eq!(r["structuredContent"]["status"], "completed", "{r}");

    // Another organization cannot reach the device, and a missing one reads the same.
    let (out, _) = call(
        &f,
        f.other_org,
        "execute_command",
        json!({
            "deviceId": device, "commandType": "list_processes"
        }),
    )
    .await;
    assert_eq!(out.unwrap_err(), "Device not found or access denied");

    // Killed, the agent's device goes offline and tools answer at once, queueing nothing.
    running.kill().await.unwrap();
    eventually(30, "the device to go offline", || async {
        f.store
            .org(f.org)
            .devices()
            .get_device(device_id)
            .await
            .unwrap()
            .status
            == DeviceStatus::Offline
    })
    .await;
    let before = f
        .store
        .org(f.org)
        .commands()
        .list_commands(device_id, 100)
        .await
        .unwrap()
        .len();
    let started = Instant::now();
    let (out, _) = call(
        &f,
        f.org,
        "execute_command",
        json!({
            "deviceId": device, "commandType": "list_processes"
        }),
    )
    .await;
    assert!(out.unwrap_err().contains("is not online"));
    assert!(started.elapsed() < Duration::from_secs(2), "no hang");
    assert_eq!(
        f.store
            .org(f.org)
            .commands()
            .list_commands(device_id, 100)
            .await
            .unwrap()
            .len(),
        before
    );

    // Restarted, it is back and works.
    let _again = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent to reconnect", || async {
        f.state.gateway.is_connected(device_id)
    })
    .await;
    eventually(20, "the device to be online", || async {
        f.store
            .org(f.org)
            .devices()
            .get_device(device_id)
            .await
            .unwrap()
            .status
            == DeviceStatus::Online
    })
    .await;
    let (out, _) = call(
        &f,
        f.org,
        "execute_command",
        json!({
            "deviceId": device, "commandType": "list_processes", "payload": { "limit": 1 }
        }),
    )
    .await;
    assert_eq!(out.unwrap()["status"], "completed");
    test.cleanup().await;
}

/// A configuration policy applied through the pipeline reaches the real agent: the metric
/// interval it reports as applied becomes the policy's, with no drift, and falls back to the
/// server's when the assignment is removed.
async fn policy_run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let device = file["deviceId"].as_str().unwrap().to_owned();
    let device_id: breeze_core::DeviceId = device.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(device_id)
    })
    .await;
    let applied = |want: u64| {
        let f = &f;
        let device = device.clone();
        move || {
            let device = device.clone();
            async move {
                let (out, _) = call(
                    f,
                    f.org,
                    "get_effective_configuration",
                    json!({ "deviceId": device }),
                )
                .await;
                let out = out.unwrap();
                out["applied"]["values"]["metricsIntervalSecs"] == want && out["inSync"] == true
            }
        }
    };
    // Before any policy: the server's interval (30 s), in sync with an empty configuration.
    eventually(20, "the agent's first report", applied(30)).await;

    let policy = f
        .store
        .org(f.org)
        .config_policies()
        .create_config_policy(
            breeze_store::NewConfigPolicy {
                name: "fast metrics".into(),
                description: None,
                status: breeze_core::PolicyStatus::Active,
                settings: vec![(
                    breeze_core::FeatureType::Monitoring,
                    json!({ "metricIntervalSeconds": 7 }),
                )],
                created_by: "test".into(),
            },
            audit("config_policy.create"),
        )
        .await
        .unwrap();
    let (out, _) = call(
        &f,
        f.org,
        "apply_configuration_policy",
        json!({ "configPolicyId": policy.id.to_string(), "level": "organization",
                "targetId": f.org.to_string(), "priority": 10 }),
    )
    .await;
    let out = out.unwrap();
    assert_eq!(out["affectedDevices"], 1, "{out}");
    let assignment = out["assignment"]["id"].as_str().unwrap().to_owned();
    eventually(20, "the agent to apply 7 s", applied(7)).await;
    let (out, _) = call(
        &f,
        f.org,
        "get_effective_configuration",
        json!({ "deviceId": device }),
    )
    .await;
    let out = out.unwrap();
    let v = &out["effective"]["monitoring"]["metricIntervalSeconds"];
    assert_eq!(v["value"], 7, "{out}");
    assert_eq!(v["source"]["policyName"], "fast metrics");
    assert_eq!(v["source"]["level"], "organization");
    assert_eq!(out["drift"], json!([]));

    let (out, _) = call(
        &f,
        f.org,
        "remove_configuration_policy_assignment",
        json!({ "assignmentId": assignment }),
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    eventually(20, "the agent to fall back to 30 s", applied(30)).await;
    test.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_policy_reaches_the_real_agent_on_sqlite() {
    policy_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_policy_reaches_the_real_agent_on_postgres() {
    policy_run(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_on_sqlite() {
    run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_on_postgres() {
    run(Backend::Postgres).await;
}

/// Busy loops on every core, at the lowest priority so the other tests barely notice; killed
/// when dropped.
fn cpu_load() -> Vec<Child> {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    (0..cores)
        .map(|_| {
            Command::new("nice")
                .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        })
        .collect()
}

/// The #26 scenario on the production backend, in real time with the real agent: a CPU load
/// started here crosses the rule's threshold for its one-minute duration and raises an alert;
/// the alert is mailed to a local SMTP server and posted, signed, to a local webhook; the
/// automation it triggers runs a library script on the device after a person approves; the
/// load stops and the alert resolves itself; under a maintenance window the next breach is
/// recorded as suppressed and raises nothing; a scheduled automation has fired meanwhile.
async fn monitoring_run(backend: Backend) {
    use breeze_alerts::testing::{smtp_server, snapshot, webhook_server};

    let _alone = MACHINE.write().await;
    let (smtp_port, mail) = smtp_server().await.unwrap();
    let (hook_port, hooks) = webhook_server(0).await.unwrap();
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server_with(test.store.clone(), |c| {
        c.gateway.agent.metrics_interval_secs = 3;
        c.gateway.agent.metrics_batch_size = 1;
        c.alerts.tick = Duration::from_secs(1);
        c.alerts.notify = breeze_alerts::NotifyConfig {
            smtp: Some(breeze_alerts::SmtpConfig {
                host: "127.0.0.1".into(),
                port: smtp_port,
                security: breeze_alerts::SmtpSecurity::None,
                from: "Breeze <alerts@breeze.test>".into(),
                username: None,
                password: None,
            }),
            timeout: Duration::from_secs(5),
            webhook_attempts: 3,
            webhook_backoff: Duration::from_millis(200),
            allow_private_targets: true,
        };
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let device = file["deviceId"].as_str().unwrap().to_owned();
    let device_id: breeze_core::DeviceId = device.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(device_id)
    })
    .await;

    let o = f.store.org(f.org);
    let channel = |name: &str, kind, config: Value| breeze_store::NewChannel {
        name: name.into(),
        kind,
        config,
        secret: (kind == breeze_core::ChannelKind::Webhook)
            .then(|| "a-secret-of-some-length".to_owned()),
    };
    let mut channels = Vec::new();
    for (name, kind, config) in [
        (
            "ops mail",
            breeze_core::ChannelKind::Email,
            json!({ "to": ["ops@example.com"] }),
        ),
        (
            "ops hook",
            breeze_core::ChannelKind::Webhook,
            json!({ "url": format!("http://127.0.0.1:{hook_port}/hook") }),
        ),
        ("in app", breeze_core::ChannelKind::InApp, json!({})),
    ] {
        let c = o
            .alerts()
            .create_channel(channel(name, kind, config), audit("channel.create"))
            .await
            .unwrap();
        channels.push(c.id.to_string());
    }
    let script = o
        .scripts()
        .create_script(
            NewScript {
                name: "triage".into(),
                description: "collects what is hot".into(),
                language: "bash".into(),
                category: "test".into(),
                body: "echo \"triaged $1\"\n".into(),
                parameters: vec![ScriptParameter {
                    name: "why".into(),
                    description: String::new(),
                    required: true,
                    default: None,
                }],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap()
        .id
        .to_string();

    // Everything is set up through the tools, as an AI client would.
    let tool = |name: &'static str, args: Value| {
        let f = &f;
        async move {
            let (out, _) = call(f, f.org, name, args).await;
            out.unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    };
    let rule = tool(
        "manage_alert_rules",
        json!({
            "action": "create", "name": "CPU hot", "severity": "high",
            "condition": { "kind": "metric", "metric": "cpu", "comparison": "above",
                           "threshold": 80.0, "durationMinutes": 1 },
            "target": { "type": "device", "deviceId": device },
            "cooldownMinutes": 0, "autoResolve": true, "channelIds": channels,
        }),
    )
    .await;
    let rule_id = rule["rule"]["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(rule_id.len(), 36, "{rule}");
    let on_alert = tool(
        "manage_automations",
        json!({
            "action": "create", "name": "triage on CPU",
            "trigger": { "kind": "alert", "ruleId": rule_id },
            "task": { "kind": "run_script", "scriptId": script,
                      "parameters": { "why": "cpu" }, "timeoutSeconds": 30 },
            "target": { "type": "device", "deviceId": device },
        }),
    )
    .await;
    let on_alert = on_alert["automation"]["id"].as_str().unwrap().to_owned();
    let every_minute = tool(
        "manage_automations",
        json!({
            "action": "create", "name": "minutely digest",
            "trigger": { "kind": "schedule", "cron": "* * * * *", "timeZone": "UTC" },
            "task": { "kind": "notify", "channelId": channels[2], "message": "digest" },
        }),
    )
    .await;
    let every_minute = every_minute["automation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // A person approves the automation's Tier 3 script run when it asks.
    let approver = {
        let (store, pipeline, admin, org) = (
            f.store.clone(),
            f.state.pipeline.clone(),
            f.admin.clone(),
            f.org,
        );
        tokio::spawn(async move {
            loop {
                for r in store
                    .org(org)
                    .approvals()
                    .list_approvals(true, 10)
                    .await
                    .unwrap()
                {
                    let request = DecisionRequest {
                        id: r.id,
                        decision: breeze_store::Decision::Approve,
                        reason: None,
                        request_id: None,
                    };
                    let actor = Actor::new(ActorType::User, admin.id);
                    let _ = decide(&store, pipeline.registry(), &admin, actor, request).await;
                    pipeline.approvals().notify_decided();
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let alerts = |status: &'static str| {
        let rule_id = rule_id.clone();
        async move {
            let out = tool(
                "manage_alerts",
                json!({ "action": "list", "ruleId": rule_id, "status": status }),
            )
            .await;
            out["alerts"].as_array().cloned().unwrap_or_default()
        }
    };

    // Waiting reads the store (the tools' rate limits are for clients); what is asserted is
    // read through the tools.
    let rule_uuid: uuid::Uuid = rule_id.parse().unwrap();
    let unresolved = || async {
        let filter = breeze_store::AlertFilter {
            rule: Some(rule_uuid),
            unresolved: true,
            ..Default::default()
        };
        o.alerts()
            .list_alerts(&filter, None, 10)
            .await
            .unwrap()
            .alerts
    };
    let finished = |automation: &str| {
        let id: uuid::Uuid = automation.parse().unwrap();
        async move {
            o.automations()
                .list_runs(Some(id), 5)
                .await
                .unwrap()
                .first()
                .is_some_and(|r| r.status.is_terminal())
        }
    };

    // The load: one minute above 80 % and the alert is raised.
    let load = cpu_load();
    eventually(180, "the CPU alert", || async {
        !unresolved().await.is_empty()
    })
    .await;
    let alert = alerts("open").await.remove(0);
    assert_eq!(alert["deviceId"], device.as_str(), "{alert}");
    let alert_id = alert["id"].as_str().unwrap().to_owned();
    eventually(30, "the mail and the webhook", || async {
        !snapshot(&mail).is_empty() && !snapshot(&hooks).is_empty()
    })
    .await;
    let sent = snapshot(&mail).remove(0);
    assert!(sent.contains("RCPT TO:<ops@example.com>"), "{sent}");
    assert!(sent.contains("CPU hot"), "{sent}");
    let hook = snapshot(&hooks).remove(0);
    let header = |name: &str| hook.headers[name].to_str().unwrap().to_owned();
    assert_eq!(header("x-breeze-event"), "alert.raised");
    assert_eq!(
        header("x-breeze-signature"),
        format!(
            "sha256={}",
            breeze_alerts::sign(
                "a-secret-of-some-length",
                &header("x-breeze-timestamp"),
                &hook.body
            )
        )
    );
    let body: Value = serde_json::from_str(&hook.body).unwrap();
    assert_eq!(body["alert"]["id"], alert_id.as_str());

    // The automation the alert started ran the script on the device, after approval.
    eventually(90, "the alert's automation run", || finished(&on_alert)).await;
    let history = tool(
        "manage_automations",
        json!({ "action": "history", "automationId": on_alert }),
    )
    .await;
    let run = &history["runs"][0];
    assert_eq!(run["status"], "succeeded", "{history}");
    assert_eq!(run["alertId"], alert_id.as_str(), "{history}");
    assert_eq!(run["devices"][0]["stdout"], "triaged cpu\n", "{history}");

    // The load stops: the next sample is clear and the alert resolves itself.
    drop(load);
    eventually(120, "the alert to resolve itself", || async {
        unresolved().await.is_empty()
    })
    .await;
    let resolved = tool(
        "manage_alerts",
        json!({ "action": "get", "alertId": alert_id }),
    )
    .await;
    assert_eq!(resolved["alert"]["status"], "resolved", "{resolved}");
    eventually(30, "the resolution's webhook", || async {
        snapshot(&hooks)
            .iter()
            .any(|h| h.headers["x-breeze-event"] == "alert.resolved")
    })
    .await;

    // Under a maintenance window the next breach is recorded as suppressed and raises nothing.
    let now = f.state.clock.now();
    tool(
        "manage_maintenance_windows",
        json!({
            "action": "create", "name": "hands off",
            "target": { "type": "device", "deviceId": device },
            "schedule": { "kind": "once",
                          "startTime": (now - chrono::Duration::minutes(1)).to_rfc3339(),
                          "endTime": (now + chrono::Duration::minutes(30)).to_rfc3339() },
            "suppressAlerts": true,
        }),
    )
    .await;
    let load = cpu_load();
    eventually(180, "the suppression", || async {
        !o.maintenance()
            .suppressions(Some(rule_uuid), None, 5)
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    drop(load);
    let r = tool(
        "manage_alert_rules",
        json!({ "action": "get", "ruleId": rule_id }),
    )
    .await;
    assert_eq!(r["suppressions"].as_array().map(Vec::len), Some(1), "{r}");
    assert!(
        alerts("open").await.is_empty(),
        "nothing raised in the window"
    );

    // The scheduled automation fired on its own meanwhile (the scenario spans minutes).
    eventually(70, "the scheduled run", || finished(&every_minute)).await;
    let history = tool(
        "manage_automations",
        json!({ "action": "history", "automationId": every_minute }),
    )
    .await;
    assert_eq!(history["runs"][0]["status"], "succeeded", "{history}");
    approver.abort();
    test.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_load_alerts_notifies_automates_resolves_and_is_suppressed_on_postgres() {
    monitoring_run(Backend::Postgres).await;
}

/// Compliance with the real agent: a rule on a package this machine has installed (read from
/// the inventory the agent reported) passes and one on a missing package fails; a "file
/// present" rule is checked by the agent and fails; `remediate` (approved) queues the policy's
/// library script, which the compliance worker runs through `run_script` (approved again) on
/// the agent; evaluated again, the rule passes. The file lives in a temporary directory.
async fn compliance_run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let device = file["deviceId"].as_str().unwrap().to_owned();
    let device_id: breeze_core::DeviceId = device.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(device_id)
    })
    .await;
    let o = f.store.org(f.org);
    eventually(30, "the agent's inventory", || async {
        o.devices()
            .device_packages(device_id, None, None, 1)
            .await
            .is_ok_and(|p| p.listed && p.total > 0)
    })
    .await;
    let installed = o
        .devices()
        .device_packages(device_id, None, None, 1)
        .await
        .unwrap()
        .packages[0]
        .name
        .clone();

    // Inventory rules: the installed package passes, a missing one fails.
    let (out, _) = call(
        &f,
        f.org,
        "manage_policies",
        json!({ "action": "create", "name": "packages",
                "rules": [{ "type": "package_installed", "name": installed },
                          { "type": "package_installed", "name": "breeze-no-such-package" }] }),
    )
    .await;
    let packages = out.unwrap()["policy"]["id"].as_str().unwrap().to_owned();
    let (out, _) = call(
        &f,
        f.org,
        "manage_policies",
        json!({ "action": "evaluate", "policyId": packages, "deviceId": device, "waitSeconds": 0 }),
    )
    .await;
    let out = out.unwrap();
    let results = &out["statuses"][0]["results"];
    assert_eq!(results[0]["passed"], true, "{out}");
    assert_eq!(results[1]["passed"], false, "{out}");
    assert_eq!(out["statuses"][0]["status"], "non_compliant", "{out}");

    // An agent rule: a file the remediation script creates (outside the agent's own state
    // directory, which it protects).
    let marks = tempfile::tempdir().unwrap();
    let marker = marks.path().join("remediated");
    let script = o
        .scripts()
        .create_script(
            NewScript {
                name: "create marker".into(),
                description: String::new(),
                language: "sh".into(),
                category: "test".into(),
                body: format!("touch '{}'\n", marker.display()),
                parameters: vec![],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap();
    let (out, _) = call(
        &f,
        f.org,
        "manage_policies",
        json!({ "action": "create", "name": "marker",
                "rules": [{ "type": "file_present", "path": marker.display().to_string() }],
                "remediationScriptId": script.id.to_string(),
                "target": { "type": "device", "deviceId": device } }),
    )
    .await;
    let policy = out.unwrap()["policy"]["id"].as_str().unwrap().to_owned();
    let evaluate = || {
        call(
            &f,
            f.org,
            "manage_policies",
            json!({ "action": "evaluate", "policyId": policy, "waitSeconds": 20 }),
        )
    };
    let (out, _) = evaluate().await;
    let out = out.unwrap();
    assert_eq!(out["evaluation"]["checksAnswered"], 1, "{out}");
    assert_eq!(out["statuses"][0]["results"][0]["passed"], false, "{out}");
    assert!(!marker.exists());

    // Remediate (approved), then the worker runs the script through run_script (approved).
    let (out, _) = call(
        &f,
        f.org,
        "manage_policies",
        json!({ "action": "remediate", "policyId": policy }),
    )
    .await;
    let out = out.unwrap();
    let remediation: uuid::Uuid = out["remediations"][0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let approver = approve_everything(&f, f.org);
    let worker = Arc::new(breeze_server::compliance::ComplianceWorker::new(
        f.store.clone(),
        f.state.gateway.clone(),
        f.state.pipeline.clone(),
        breeze_server::compliance::ComplianceConfig::default(),
    ));
    eventually(90, "the remediation to finish", || {
        let (worker, o) = (worker.clone(), f.store.org(f.org));
        async move {
            worker.tick().await.unwrap();
            worker.settle().await;
            let r = o.compliance().get_remediation(remediation).await.unwrap();
            r.finished_at.is_some()
        }
    })
    .await;
    approver.abort();
    let r = o.compliance().get_remediation(remediation).await.unwrap();
    assert_eq!(r.status, breeze_core::RunStatus::Succeeded, "{r:?}");
    assert!(marker.exists(), "the script ran on this machine");
    let approvals = f.store.raw_dump("approval_requests").await.unwrap();
    for tool in ["manage_policies", "run_script"] {
        assert!(
            approvals.iter().any(|a| a.contains(tool)),
            "{tool} was approved by a person"
        );
    }

    // A check the worker sent before the script ran may still be awaited: its answer is
    // folded in by the worker, and the next evaluation sends a fresh one.
    eventually(60, "the marker rule to pass", || {
        let worker = worker.clone();
        let evaluate = &evaluate;
        async move {
            worker.tick().await.unwrap();
            worker.settle().await;
            let (out, _) = evaluate().await;
            let out = out.unwrap();
            out["statuses"][0]["results"][0]["passed"] == true
                && out["statuses"][0]["status"] == "compliant"
        }
    })
    .await;
    let (out, _) = call(
        &f,
        f.org,
        "manage_policies",
        json!({ "action": "history", "policyId": policy }),
    )
    .await;
    assert_eq!(out.unwrap()["history"][0]["toStatus"], "compliant");
    test.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compliance_with_the_real_agent_on_sqlite() {
    compliance_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compliance_with_the_real_agent_on_postgres() {
    compliance_run(Backend::Postgres).await;
}

/// Agent-reported events with the real agent (#26): the agent's config names a log watch on a
/// temporary file; the agent reports its own start, a line matching the watch but not the
/// rule's text raises nothing, a matching line raises the event rule's alert (read back through
/// `manage_alerts get` with the line that raised it; another organization's key is told it does
/// not exist), and with no matching line in the rule's one-minute window the alert resolves
/// itself. The store is polled, not the tools, whose calls are rate-limited.
async fn events_run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let shared = MACHINE.read().await;
    let mut f = server_with(test.store.clone(), |c| {
        c.alerts.tick = Duration::from_secs(1);
    })
    .await;
    f._beside_others = Some(shared);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let watched = dir.path().join("app.log");
    std::fs::write(&watched, "FATAL: disk failure long before the agent ran\n").unwrap();
    // The watch goes into the agent's config file, as an administrator would write it.
    let mut file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    file["logWatches"] = json!([{
        "name": "app_errors", "path": watched, "patterns": ["FATAL", "disk failure"],
        "ignoreCase": true, "severity": "high", "maxPerMinute": 5
    }]);
    std::fs::write(&config, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    let device = file["deviceId"].as_str().unwrap().to_owned();
    let device_id: breeze_core::DeviceId = device.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(device_id)
    })
    .await;
    let o = f.store.org(f.org);
    let events = || async { o.telemetry().device_events(device_id, 50).await.unwrap() };
    eventually(20, "the agent's start event", || async {
        events()
            .await
            .iter()
            .any(|e| e.source == "agent" && e.kind == "agent_started")
    })
    .await;

    let (created, _) = call(
        &f,
        f.org,
        "manage_alert_rules",
        json!({ "action": "create", "name": "disk failures in the app log", "severity": "high",
                "cooldownMinutes": 0,
                "condition": { "kind": "event", "source": "log_watch", "eventKind": "app_errors",
                               "minSeverity": "medium", "messageContains": "DISK FAILURE",
                               "count": 1, "windowMinutes": 1 },
                "target": { "type": "device", "deviceId": device } }),
    )
    .await;
    let created = created.unwrap();
    assert_eq!(
        created["rule"]["summary"],
        "1 or more events from log_watch of kind app_errors at medium or worse containing \"DISK FAILURE\" in 1 min",
        "{created}"
    );
    let rule_id: uuid::Uuid = created["rule"]["id"].as_str().unwrap().parse().unwrap();

    // A line of the watch that is not the rule's: an event, no breach.
    append_line(&watched, "FATAL: config reload refused");
    eventually(20, "the watched line as an event", || async {
        events()
            .await
            .iter()
            .any(|e| e.source == "log_watch" && e.message == "FATAL: config reload refused")
    })
    .await;
    assert!(
        !events()
            .await
            .iter()
            .any(|e| e.message.contains("long before")),
        "lines written before the agent started are history, not events"
    );
    let (tested, _) = call(
        &f,
        f.org,
        "manage_alert_rules",
        json!({ "action": "test", "ruleId": rule_id }),
    )
    .await;
    let tested = tested.unwrap();
    assert_eq!(tested["test"]["breaching"], 0, "{tested}");
    assert_eq!(tested["test"]["clear"], 1, "{tested}");

    let written = Instant::now();
    append_line(
        &watched,
        "kernel: sda: Disk failure imminent, replace the drive",
    );
    let unresolved = || async {
        o.alerts()
            .unresolved_alerts_of_rule(rule_id)
            .await
            .unwrap()
            .into_iter()
            .next()
    };
    eventually(30, "the event rule's alert", || async {
        unresolved().await.is_some()
    })
    .await;
    let raised_after = written.elapsed();
    // The agent polls each second and sends at once; the engine evaluates on arrival.
    assert!(
        raised_after < Duration::from_secs(15),
        "raised {raised_after:?} after the line was written"
    );
    let alert = unresolved().await.unwrap();
    assert_eq!(alert.device_id, device_id);
    assert_eq!(alert.value, Some(1.0));
    let (got, _) = call(
        &f,
        f.org,
        "manage_alerts",
        json!({ "action": "get", "alertId": alert.id }),
    )
    .await;
    let got = got.unwrap();
    let trigger = &got["alert"]["triggeringEvents"];
    assert_eq!(trigger.as_array().map(Vec::len), Some(1), "{got}");
    assert_eq!(
        trigger[0]["message"],
        "kernel: sda: Disk failure imminent, replace the drive"
    );
    assert_eq!(trigger[0]["source"], "log_watch");
    assert_eq!(trigger[0]["kind"], "app_errors");
    assert_eq!(trigger[0]["severity"], "high");
    assert_eq!(trigger[0]["attributes"]["pattern"], "disk failure");
    let (foreign, _) = call(
        &f,
        f.other_org,
        "manage_alerts",
        json!({ "action": "get", "alertId": alert.id }),
    )
    .await;
    assert!(
        foreign.as_ref().is_err_and(|e| e.contains("not found")),
        "{foreign:?}"
    );

    // No matching line in the window: the alert resolves itself.
    eventually(100, "the alert to resolve itself", || async {
        unresolved().await.is_none()
    })
    .await;
    let history = o.alerts().alert_events(alert.id).await.unwrap();
    assert!(
        history.iter().any(|e| e.kind == "auto_resolved"),
        "{history:?}"
    );
    test.cleanup().await;
}

fn append_line(path: &std::path::Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    writeln!(file, "{line}").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_log_line_raises_an_event_alert_that_resolves_on_sqlite() {
    events_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_log_line_raises_an_event_alert_that_resolves_on_postgres() {
    events_run(Backend::Postgres).await;
}
