//! The security scan end to end with the real agent on this machine: a Breeze server on a real
//! socket, the real `breeze-agent` binary enrolled and running, and `security_scan` /
//! `get_security_posture` called through the whole pipeline (guard, approval by a person,
//! handler). The scan's SSH, firewall and listening-service findings are checked against what
//! the test itself reads from this machine (not canned values); a file placed at an indicator
//! path is flagged with its real sha256, quarantined, restored, quarantined again and removed;
//! the posture and its trend come from the stored snapshot; another organization sees none of
//! it. And a scheduled scan from `schedule` through the schedule worker and a person's approval
//! to the agent's stored results.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{path::Path, sync::Arc, time::Duration};

use breeze_core::{OrgId, SystemClock};
use breeze_limits::{LimiterError, RateDecision, RateLimiter};
use breeze_pipeline::CallOutcome;
use breeze_server::workers::Worker;
use breeze_store::{Backend, Store, testing::TestStore};
use common::{Fleet, agent, enroll, eventually};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::process::Child;

/// No limits: this test calls `security_scan` more than its 3 per 10 minutes (the limit is
/// the server tests' business).
struct Unlimited;

impl RateLimiter for Unlimited {
    fn check<'a>(
        &'a self,
        _key: &'a str,
        limit: u32,
        _window: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        Box::pin(async move {
            Ok(RateDecision {
                allowed: true,
                retry_after: Duration::ZERO,
                remaining: limit,
            })
        })
    }

    fn backend(&self) -> &'static str {
        "unlimited"
    }
}

/// A fleet without rate limits.
async fn server(store: Store) -> Fleet {
    common::server_with(store, |_| {}, Arc::new(Unlimited)).await
}

/// Calls a tool through the whole pipeline with the admin's `*` key of `org`; a person
/// approves each Tier 3 request as it appears. An error reads `Code: message`.
async fn call(f: &Fleet, org: OrgId, tool: &str, args: Value) -> Result<Value, String> {
    match common::call_outcome(f, org, tool, args, None).await {
        CallOutcome::Output(raw) => Ok(serde_json::from_str(raw.get()).unwrap()),
        CallOutcome::Failed(e) => Err(format!("{:?}: {}", e.code, e.message)),
        other => panic!("{tool}: {other:?}"),
    }
}

fn finding<'a>(results: &'a Value, check: &str) -> &'a Value {
    results["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {results}"))
}

/// Whether a program is installed where the agent's probes look.
fn installed(name: &str) -> bool {
    [
        "/usr/sbin",
        "/sbin",
        "/usr/bin",
        "/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
    ]
    .iter()
    .any(|d| Path::new(d).join(name).is_file())
}

fn table_names(path: &str) -> Value {
    std::fs::read_to_string(path).map_or(Value::Null, |t| {
        json!(
            t.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
        )
    })
}

async fn run(backend: Backend) {
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

    // What the scan should see: a socket this test listens on, and a file at an indicator
    // path (in a temp dir: nothing outside temp dirs is touched).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let work = tempfile::tempdir().unwrap();
    let payload = work.path().join("dropper.sh");
    let body = "#!/bin/sh\necho not really\n";
    std::fs::write(&payload, body).unwrap();
    let payload_path = payload.to_string_lossy().into_owned();
    let sha = hex::encode(Sha256::digest(body.as_bytes()));

    let out = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "scan", "deviceIds": [device], "indicatorPaths": [payload_path] }),
    )
    .await
    .unwrap();
    let scan = &out["scans"][0];
    assert_eq!(scan["status"], "completed", "{out}");
    let scan_id = scan["scanId"].as_str().unwrap().to_owned();

    let results = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "results", "scanId": scan_id }),
    )
    .await
    .unwrap();
    let results = &results["results"];
    for check in [
        "firewall",
        "security_updates",
        "disk_encryption",
        "ssh_root_login",
        "ssh_password_auth",
        "world_writable",
        "listening_services",
        "antivirus",
        "indicators",
    ] {
        let f = finding(results, check);
        assert!(
            ["pass", "fail", "unknown"].contains(&f["status"].as_str().unwrap()),
            "{f}"
        );
        assert!(f["severity"].is_string() && f["title"].is_string(), "{f}");
    }

    // SSH, as this machine has it.
    let ssh = finding(results, "ssh_root_login");
    if Path::new("/etc/ssh/sshd_config").exists() {
        let source = ssh["evidence"]["source"].as_str().unwrap();
        assert!(["sshd -T", "sshd_config"].contains(&source), "{ssh}");
        if source == "sshd_config" {
            assert_eq!(ssh["evidence"]["files"][0], "/etc/ssh/sshd_config", "{ssh}");
        }
    } else {
        assert_eq!(ssh["evidence"]["sshdInstalled"], installed("sshd"), "{ssh}");
        if !installed("sshd") {
            assert_eq!(ssh["status"], "pass", "no SSH server: {ssh}");
        }
    }

    // The firewall, as this machine has it: the tools tried and the kernel's own facts.
    let fw = finding(results, "firewall");
    let ev = &fw["evidence"];
    assert_eq!(ev["tools"]["nft"]["installed"], installed("nft"), "{fw}");
    assert_eq!(
        ev["tools"]["iptables"]["installed"],
        installed("iptables"),
        "{fw}"
    );
    assert_eq!(
        ev["tools"]["ufw"]["installed"],
        Path::new("/etc/ufw/ufw.conf").exists(),
        "{fw}"
    );
    if ev["source"] == "kernel" || ev["source"] == "none" {
        assert_eq!(
            ev["kernel"]["nfTablesModuleLoaded"],
            Path::new("/sys/module/nf_tables").exists(),
            "{fw}"
        );
        assert_eq!(
            ev["kernel"]["ipTables"],
            table_names("/proc/net/ip_tables_names"),
            "{fw}"
        );
    }

    // The listener this test opened is among the machine's listening sockets.
    let ls = finding(results, "listening_services");
    let listeners = ls["evidence"]["listeners"].as_array().unwrap();
    assert!(
        listeners
            .iter()
            .any(|l| l["port"] == port && l["address"] == "127.0.0.1" && l["protocol"] == "tcp"),
        "port {port} not in {ls}"
    );
    drop(listener);

    // The indicator file is flagged with its real hash.
    let ind = finding(results, "indicators");
    assert_eq!(ind["status"], "fail", "{ind}");
    let flagged = results["flaggedFiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["path"] == payload_path.as_str())
        .unwrap_or_else(|| panic!("not flagged: {results}"))
        .clone();
    assert_eq!(flagged["sha256"], sha.as_str());
    assert_eq!(flagged["check"], "indicators");
    let posture = &results["posture"];
    assert!(posture["score"].as_u64().unwrap() <= 100);
    assert_eq!(posture["factors"].as_array().unwrap().len(), 8);

    // Another organization sees neither the scan nor the flagged file.
    let theirs = call(
        &f,
        f.other_org,
        "security_scan",
        json!({ "action": "results", "scanId": scan_id }),
    )
    .await;
    assert!(theirs.unwrap_err().contains("NotFound"));
    let theirs = call(
        &f,
        f.other_org,
        "security_scan",
        json!({ "action": "quarantine", "flaggedFileId": flagged["flaggedFileId"] }),
    )
    .await;
    assert!(theirs.unwrap_err().contains("NotFound"));
    assert!(payload.exists());

    // Quarantine, restore, quarantine again, remove.
    let q = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "quarantine", "flaggedFileId": flagged["flaggedFileId"] }),
    )
    .await
    .unwrap();
    let record = &q["quarantine"];
    assert_eq!(record["state"], "quarantined", "{q}");
    assert_eq!(record["sha256"], sha.as_str());
    assert!(!payload.exists(), "moved into the agent's quarantine");
    let qid = record["quarantineId"].as_str().unwrap().to_owned();
    let r = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "restore", "quarantineId": qid }),
    )
    .await
    .unwrap();
    assert_eq!(r["quarantine"]["state"], "restored", "{r}");
    assert_eq!(std::fs::read_to_string(&payload).unwrap(), body);
    let again = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "restore", "quarantineId": qid }),
    )
    .await;
    assert!(again.unwrap_err().contains("Conflict"));
    let q = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "quarantine", "flaggedFileId": flagged["flaggedFileId"] }),
    )
    .await
    .unwrap();
    let qid = q["quarantine"]["quarantineId"].as_str().unwrap().to_owned();
    let removed = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "remove", "quarantineId": qid }),
    )
    .await
    .unwrap();
    assert_eq!(removed["quarantine"]["state"], "removed", "{removed}");
    assert!(!payload.exists());
    let status = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "status", "deviceId": device }),
    )
    .await
    .unwrap();
    assert_eq!(
        status["quarantinedFiles"].as_array().unwrap().len(),
        2,
        "{status}"
    );
    // Every step is in the audit log.
    for a in [
        "device.security_scan",
        "security_scan.start",
        "security_scan.quarantine",
        "security_scan.restore",
        "security_scan.remove",
    ] {
        let filter = breeze_store::AuditFilter {
            action: Some(a.to_owned()),
            ..Default::default()
        };
        let page = f
            .store
            .org(f.org)
            .audit()
            .query_audit(&filter, None, 10)
            .await
            .unwrap();
        assert!(!page.records.is_empty(), "{a} is not audited");
    }

    // The posture: the device's, and the fleet's, with the trend.
    let p = call(
        &f,
        f.org,
        "get_security_posture",
        json!({ "deviceId": device }),
    )
    .await
    .unwrap();
    assert_eq!(p["scope"], "device");
    assert_eq!(p["device"]["score"], posture["score"], "{p}");
    assert_eq!(p["trend"].as_array().unwrap().len(), 1);
    assert_eq!(p["weights"].as_array().unwrap().len(), 8);
    let fleet = call(&f, f.org, "get_security_posture", json!({}))
        .await
        .unwrap();
    assert_eq!(fleet["fleet"]["devicesAudited"], 1, "{fleet}");
    let theirs = call(&f, f.other_org, "get_security_posture", json!({}))
        .await
        .unwrap();
    assert_eq!(theirs["fleet"]["devicesAudited"], 0, "{theirs}");
    test.cleanup().await;
}

/// The real clock, `ahead` later: the instance of a scheduled scan whose occurrence came due.
struct Ahead(chrono::Duration);

impl breeze_core::Clock for Ahead {
    fn now(&self) -> breeze_core::Timestamp {
        breeze_core::Clock::now(&SystemClock) + self.0
    }
}

/// A scheduled scan through to stored results: `security_scan` `schedule` (Tier 3, approved),
/// then — an hour on, as the schedule worker of an instance whose clock is there sees it — the
/// worker fires the occurrence through the pipeline as the schedule's owner; its scan call is
/// Tier 3 again and waits for a person (the request carrying the schedule's request id), who
/// approves it; the real agent runs the scan, and its results are stored and read back with
/// `security_scan` `status` and `results`. The schedule records what the occurrence came to and
/// its next run.
async fn scheduled_run(backend: Backend) {
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

    let scheduled = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "schedule", "name": "hourly", "deviceIds": [device],
                "intervalMinutes": 60 }),
    )
    .await
    .unwrap();
    let schedule = scheduled["schedule"]["scheduleId"]
        .as_str()
        .unwrap_or_else(|| panic!("{scheduled}"))
        .to_owned();
    let schedule_id: uuid::Uuid = schedule.parse().unwrap();
    let o = f.store.org(f.org);
    let stored = o.security().get_scan_schedule(schedule_id).await.unwrap();
    assert!(stored.owner_actor.starts_with("api_key:"), "{stored:?}");
    assert!(
        o.security()
            .list_security_scans(None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // The instance an hour on: its worker finds the occurrence due and fires it.
    let later = test
        .store
        .reopen_with_clock(Arc::new(Ahead(chrono::Duration::minutes(61))))
        .await
        .unwrap();
    let worker = Arc::new(breeze_server::scan_schedules::ScanScheduleWorker::new(
        later.clone(),
        f.state.pipeline.clone(),
    ));
    let approver = common::approve_everything(&f, f.org);
    assert_eq!(worker.tick().await.unwrap(), 1, "the due occurrence fires");
    tokio::time::timeout(Duration::from_secs(120), worker.settle())
        .await
        .expect("the scheduled scan call ended");
    approver.abort();
    assert_eq!(worker.tick().await.unwrap(), 0, "fired once");

    // It went through a person's approval, as the owner, naming the schedule.
    let requests: Vec<_> = o
        .approvals()
        .list_approvals(false, 50)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.request_id.as_deref() == Some(&format!("scan-schedule:{schedule}")))
        .collect();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].tool, "security_scan");
    assert_eq!(requests[0].arguments["action"], "scan");
    assert_eq!(
        requests[0].status.as_str(),
        "completed",
        "{:?}",
        requests[0]
    );

    // What the occurrence came to, and the next one.
    let after = o.security().get_scan_schedule(schedule_id).await.unwrap();
    assert_eq!(
        after.last_status.map(|s| s.as_str()),
        Some("ran"),
        "{after:?}"
    );
    let scans = o
        .security()
        .list_security_scans(Some(device_id), None, 10)
        .await
        .unwrap();
    assert_eq!(scans.len(), 1, "{scans:?}");
    let scan_id = scans[0].id.to_string();
    assert!(
        after
            .last_message
            .as_deref()
            .unwrap_or_default()
            .contains(&scan_id),
        "{after:?}"
    );
    assert!(after.next_run_at > stored.next_run_at, "{after:?}");

    // The results are stored and read through the tool.
    let status = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "status", "scanId": scan_id }),
    )
    .await
    .unwrap();
    let view = &status["scans"][0];
    assert_eq!(view["status"], "completed", "{status}");
    assert_eq!(view["deviceId"], device.as_str(), "{status}");
    assert_eq!(view["requestedBy"], stored.owner_actor.as_str(), "{status}");
    let checked: usize = view["summary"]
        .as_object()
        .unwrap_or_else(|| panic!("{status}"))
        .values()
        .map(|n| n.as_u64().unwrap() as usize)
        .sum();
    assert!(checked >= 8, "every check answered: {status}");
    let results = call(
        &f,
        f.org,
        "security_scan",
        json!({ "action": "results", "deviceId": device }),
    )
    .await
    .unwrap();
    let results = &results["results"];
    for check in ["firewall", "ssh_root_login", "listening_services"] {
        let f = finding(results, check);
        assert!(
            ["pass", "fail", "unknown"].contains(&f["status"].as_str().unwrap()),
            "{f}"
        );
    }
    let posture = call(
        &f,
        f.org,
        "get_security_posture",
        json!({ "deviceId": device }),
    )
    .await
    .unwrap();
    assert_eq!(posture["trend"].as_array().unwrap().len(), 1, "{posture}");
    later.close().await;
    test.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_security_scan_reaches_stored_results_on_sqlite() {
    scheduled_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_security_scan_reaches_stored_results_on_postgres() {
    scheduled_run(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_security_scan_reports_this_machine_on_sqlite() {
    run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_security_scan_reports_this_machine_on_postgres() {
    run(Backend::Postgres).await;
}
