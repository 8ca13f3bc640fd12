//! The security scan end to end with the real agent on this machine: a Breeze server on a real
//! socket, the real `breeze-agent` binary enrolled and running, and `security_scan` /
//! `get_security_posture` called through the whole pipeline (guard, approval by a person,
//! handler). The scan's SSH, firewall and listening-service findings are checked against what
//! the test itself reads from this machine (not canned values); a file placed at an indicator
//! path is flagged with its real sha256, quarantined, restored, quarantined again and removed;
//! the posture and its trend come from the stored snapshot; another organization sees none of
//! it.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{path::Path, sync::Arc, time::Duration};

use breeze_core::{OrgId, SystemClock};
use breeze_limits::{Decision, LimiterError, RateLimiter};
use breeze_pipeline::CallOutcome;
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
    ) -> BoxFuture<'a, Result<Decision, LimiterError>> {
        Box::pin(async move {
            Ok(Decision {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_security_scan_reports_this_machine_on_sqlite() {
    run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_security_scan_reports_this_machine_on_postgres() {
    run(Backend::Postgres).await;
}
