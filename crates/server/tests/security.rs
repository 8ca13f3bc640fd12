//! `security_scan` and `get_security_posture` over MCP: the attacks (another organization's
//! device, site, scan, flagged file and quarantine record answer "not found" on every action
//! that names one, before any approval is asked; protected and relative paths are refused
//! naming the field; keys without `ai:execute` cannot call it at all; the fourth call in ten
//! minutes is rate limited) and the posture a person reads: a device's score and factors with
//! weights, its trend over two scans, and the fleet's — each organization seeing its own.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;
use std::time::Duration;

use breeze_auth::CreateApiKey;
use breeze_core::{
    DeviceId, Scope, ScopeSet,
    security::{CheckStatus, FindingInput, FindingSeverity, QuarantineState, ScanStatus, score},
};
use breeze_limits::MemoryLimiter;
use breeze_store::{
    NewFinding, NewFlagged, NewPosture, NewQuarantine, OrgStore, ScanOutcome, testing::Ctx,
};
use common::{Unlimited, World, audit, build, tool, world};
use serde_json::{Value, json};
use uuid::Uuid;

const TOOL: &str = "security_scan";

/// A tool error's code, whether a result (`structuredContent.error`) or a refusal before the
/// tool (a JSON-RPC error's `data`); "" when the call succeeded.
fn code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .or_else(|| v["rpcError"]["data"]["code"].as_str())
        .unwrap_or("")
}

async fn exec_key(w: &World, org: breeze_core::OrgId) -> String {
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: org,
                user_id: w.admin,
                name: "exec".into(),
                scopes: ScopeSet::new([Scope::AiRead, Scope::AiWrite, Scope::AiExecute]),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    secret.expose().to_owned()
}

/// Findings as an agent reports them: `fails` checks failing, the rest passing.
fn findings(fails: &[&str]) -> Vec<NewFinding> {
    [
        "firewall",
        "security_updates",
        "disk_encryption",
        "ssh_root_login",
        "ssh_password_auth",
        "world_writable",
        "listening_services",
        "antivirus",
    ]
    .into_iter()
    .map(|c| {
        let fail = fails.contains(&c);
        NewFinding {
            check: c.into(),
            status: if fail {
                CheckStatus::Fail
            } else {
                CheckStatus::Pass
            },
            severity: if fail {
                FindingSeverity::High
            } else {
                FindingSeverity::Info
            },
            title: c.into(),
            evidence: if c == "security_updates" {
                json!({ "pendingSecurity": if fail { 2 } else { 0 } })
            } else {
                json!({ "riskyExposed": [], "exposedCount": 1 })
            },
        }
    })
    .collect()
}

/// A completed scan of `device` with `fails`, as the tool would record it; its flagged file.
async fn seed_scan(o: &OrgStore<'_>, device: &str, fails: &[&str]) -> (Uuid, Uuid) {
    let device: DeviceId = device.parse().unwrap();
    let scan = o
        .security()
        .create_security_scan(device, Uuid::now_v7(), "test", audit("security_scan.start"))
        .await
        .unwrap();
    let found = findings(fails);
    let inputs: Vec<FindingInput<'_>> = found
        .iter()
        .map(|f| FindingInput {
            check: &f.check,
            status: f.status,
            severity: f.severity,
            evidence: &f.evidence,
        })
        .collect();
    let p = score(&inputs);
    let outcome = ScanOutcome {
        status: ScanStatus::Completed,
        error: None,
        privileged: Some(true),
        findings: found.clone(),
        flagged: vec![NewFlagged {
            path: "/usr/local/bin/evil".into(),
            reason: "world-writable executable in a system path".into(),
            check: "world_writable".into(),
            severity: FindingSeverity::High,
            sha256: Some("b".repeat(64)),
            mode: "0777".into(),
            uid: 0,
            gid: 0,
            size_bytes: 10,
        }],
        posture: Some(NewPosture {
            score: i64::from(p.score),
            risk_level: p.risk_level.clone(),
            factors: serde_json::to_value(&p.factors).unwrap(),
        }),
    };
    assert!(
        o.security()
            .record_scan_result(scan.id, outcome)
            .await
            .unwrap()
    );
    let flagged = o.security().scan_flagged_files(scan.id).await.unwrap()[0].id;
    (scan.id, flagged)
}

async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let app = &build(
        &w,
        |c| c.approvals.wait = Duration::ZERO,
        Arc::new(Unlimited),
    );
    let key = exec_key(&w, w.org_a).await;
    let ob = w.store.org(w.org_b);
    let (b_scan, b_flagged) = seed_scan(&ob, &w.b_device, &["firewall"]).await;
    let b_quarantine = ob
        .security()
        .record_quarantine(
            NewQuarantine {
                device_id: w.b_device.parse().unwrap(),
                flagged_id: Some(b_flagged),
                agent_ref: Uuid::now_v7().to_string(),
                original_path: "/usr/local/bin/evil".into(),
                sha256: "b".repeat(64),
                mode: "0777".into(),
                uid: 0,
                gid: 0,
                size_bytes: 10,
                state: QuarantineState::Quarantined,
                created_by: "test".into(),
            },
            audit("q"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    let b_site = ob.tenancy().list_sites().await.unwrap()[0].id.to_string();
    let (b_scan, b_flagged) = (b_scan.to_string(), b_flagged.to_string());
    let cases = [
        json!({ "action": "scan", "deviceIds": [w.b_device] }),
        json!({ "action": "scan", "target": { "kind": "site", "siteId": b_site } }),
        json!({ "action": "status", "scanId": b_scan }),
        json!({ "action": "status", "deviceId": w.b_device }),
        json!({ "action": "results", "scanId": b_scan }),
        json!({ "action": "results", "deviceId": w.b_device }),
        json!({ "action": "quarantine", "flaggedFileId": b_flagged }),
        json!({ "action": "remove", "flaggedFileId": b_flagged }),
        json!({ "action": "remove", "quarantineId": b_quarantine }),
        json!({ "action": "restore", "quarantineId": b_quarantine }),
        json!({ "action": "results", "scanId": "not-a-uuid-but-36-characters-long-xx" }),
    ];
    for args in cases {
        let out = tool(app, &key, TOOL, args.clone()).await;
        assert_eq!(code(&out), "NOT_FOUND", "{args}: {out}");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(message.contains("not found or access denied"), "{message}");
    }
    let out = tool(
        app,
        &w.read,
        "get_security_posture",
        json!({ "deviceId": w.b_device }),
    )
    .await;
    assert_eq!(code(&out), "NOT_FOUND", "{out}");
    // Nothing was asked of a person, nothing changed in B.
    assert!(
        w.store
            .org(w.org_a)
            .approvals()
            .list_approvals(true, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let q = ob
        .security()
        .get_quarantine(b_quarantine.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(q.state, QuarantineState::Quarantined);
    assert_eq!(
        ob.security()
            .list_security_scans(None, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn bad_inputs_and_scopes_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    let app = &build(
        &w,
        |c| c.approvals.wait = Duration::ZERO,
        Arc::new(Unlimited),
    );
    let key = exec_key(&w, w.org_a).await;
    let cases = [
        (
            json!({ "action": "scan" }),
            "INVALID_ARGUMENT",
            "deviceIds or target",
        ),
        (
            json!({ "action": "scan", "deviceIds": [w.a_device], "extraRoots": ["usr/bin"] }),
            "INVALID_ARGUMENT",
            "extraRoots",
        ),
        (
            json!({ "action": "scan", "deviceIds": [w.a_device], "indicatorPaths": ["/etc/shadow"] }),
            "FORBIDDEN",
            "indicatorPaths",
        ),
        (
            json!({ "action": "scan", "deviceIds": [w.a_device], "extraRoots": ["/var/../etc"] }),
            "INVALID_ARGUMENT",
            "extraRoots",
        ),
        (
            json!({ "action": "quarantine" }),
            "INVALID_ARGUMENT",
            "flaggedFileId",
        ),
        (
            json!({ "action": "restore" }),
            "INVALID_ARGUMENT",
            "quarantineId",
        ),
        (json!({ "action": "wipe" }), "INVALID_ARGUMENT", ""),
    ];
    for (args, want, mentions) in cases {
        let out = tool(app, &key, TOOL, args.clone()).await;
        assert_eq!(code(&out), want, "{args}: {out}");
        let message = out["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(mentions), "{args}: {message}");
    }
    // An offline device is refused before anything is queued.
    let oa = w.store.org(w.org_a);
    let site = oa.tenancy().list_sites().await.unwrap()[0].id;
    let offline = oa
        .devices()
        .create_device(
            breeze_store::testing::new_device(site, "db-01", breeze_core::DeviceStatus::Offline),
            audit("d"),
        )
        .await
        .unwrap();
    let out = tool(
        app,
        &key,
        TOOL,
        json!({ "action": "scan", "deviceIds": [offline.id.to_string()] }),
    )
    .await;
    assert_eq!(code(&out), "UPSTREAM_ERROR", "{out}");
    assert!(
        oa.commands()
            .list_commands(offline.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Every action is Tier 3: read and write keys cannot call any of them.
    for k in [&w.read, &w.write] {
        for action in ["status", "results", "scan"] {
            let out = tool(
                app,
                k,
                TOOL,
                json!({ "action": action, "deviceId": w.a_device }),
            )
            .await;
            assert_eq!(code(&out), "INSUFFICIENT_SCOPE", "{action}: {out}");
        }
    }
}

async fn three_calls_per_ten_minutes(cx: Ctx) {
    let w = world(&cx).await;
    let app = &build(
        &w,
        |c| c.approvals.wait = Duration::ZERO,
        Arc::new(MemoryLimiter::new()),
    );
    let key = exec_key(&w, w.org_a).await;
    let args = json!({ "action": "status", "scanId": Uuid::now_v7().to_string() });
    for _ in 0..3 {
        let out = tool(app, &key, TOOL, args.clone()).await;
        assert_eq!(code(&out), "NOT_FOUND", "{out}");
    }
    let out = tool(app, &key, TOOL, args).await;
    assert_eq!(code(&out), "RATE_LIMITED", "{out}");
    // The posture is not limited.
    for _ in 0..5 {
        let out = tool(app, &w.read, "get_security_posture", json!({})).await;
        assert_eq!(code(&out), "", "{out}");
    }
}

fn factor<'a>(factors: &'a Value, name: &str) -> &'a Value {
    factors
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["factor"] == name)
        .unwrap_or_else(|| panic!("no {name} in {factors}"))
}

async fn posture_for_devices_and_fleets(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let (oa, ob) = (w.store.org(w.org_a), w.store.org(w.org_b));

    // Nothing scanned yet: the answer says so.
    let out = tool(app, &w.read, "get_security_posture", json!({})).await;
    assert_eq!(out["fleet"]["devicesAudited"], 0, "{out}");
    assert_eq!(out["fleet"]["devicesNotScanned"], 1);
    assert!(out["message"].as_str().unwrap().contains("security_scan"));

    seed_scan(
        &oa,
        &w.a_device,
        &["firewall", "disk_encryption", "security_updates"],
    )
    .await;
    cx.clock.advance(chrono::Duration::days(1));
    seed_scan(&oa, &w.a_device, &["firewall"]).await;
    seed_scan(&ob, &w.b_device, &[]).await;

    let out = tool(
        app,
        &w.read,
        "get_security_posture",
        json!({ "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(out["scope"], "device", "{out}");
    let device = &out["device"];
    // Everything passes but the firewall (weight 10).
    assert_eq!(device["score"], 90, "{out}");
    assert_eq!(device["riskLevel"], "low");
    assert_eq!(factor(&device["factors"], "firewall")["score"], 0);
    assert_eq!(factor(&device["factors"], "firewall")["weight"], 10);
    assert_eq!(factor(&device["factors"], "patch_compliance")["weight"], 25);
    let recs = device["recommendations"].as_array().unwrap();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["factor"], "firewall");
    assert_eq!(recs[0]["impact"], 10);
    let weights: u64 = out["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["weight"].as_u64().unwrap())
        .sum();
    assert_eq!(weights, 100);
    let trend = out["trend"].as_array().unwrap();
    assert_eq!(trend.len(), 2, "{trend:?}");
    assert!(trend[0]["score"].as_i64().unwrap() < trend[1]["score"].as_i64().unwrap());

    let fleet = tool(app, &w.read, "get_security_posture", json!({})).await;
    let f = &fleet["fleet"];
    assert_eq!(f["devicesAudited"], 1, "{fleet}");
    assert_eq!(f["score"], 90);
    assert_eq!(f["riskCounts"]["low"], 1);
    assert_eq!(f["lowestDevices"][0]["deviceId"], w.a_device.as_str());
    assert_eq!(fleet["trend"].as_array().unwrap().len(), 2);
    let theirs = tool(app, &w.other_org_key, "get_security_posture", json!({})).await;
    assert_eq!(theirs["fleet"]["devicesAudited"], 1, "{theirs}");
    assert_eq!(theirs["fleet"]["score"], 100);
    assert_eq!(
        theirs["fleet"]["lowestDevices"][0]["deviceId"],
        w.b_device.as_str()
    );
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    bad_inputs_and_scopes_are_refused,
    three_calls_per_ten_minutes,
    posture_for_devices_and_fleets
);
