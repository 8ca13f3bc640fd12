//! `manage_policies` over MCP and the compliance worker under a test clock.
//!
//! The attacks first: another organization's key reaches none of A's policies, results or
//! remediations, and A cannot point a policy at B's device or script; a rule cannot name a
//! protected path; a key with only the write scope can neither delete nor remediate (Tier 3),
//! and a policy it owns with `enforcement: remediate` gets a remediation whose `run_script`
//! the guard refuses — nothing reaches a device. Then an execute key's remediate waits for a
//! person, and once approved queues a remediation whose script again goes through
//! `run_script`'s guard and approval. Then the lifecycle: inventory evaluation, status,
//! summary, history, activation, and the worker's periodic evaluation under its lease.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use breeze_auth::CreateApiKey;
use breeze_core::{DeviceId, RunStatus, Scope, ScopeSet, Timestamp};
use breeze_limits::MemoryLimiter;
use breeze_server::{
    AppState, ServerConfig,
    compliance::{ComplianceConfig, ComplianceWorker},
    workers::Worker,
};
use breeze_store::{Decision, NewScript, testing::Ctx};
use common::{World, audit, code, tool, world};
use serde_json::{Value, json};

const TOOL: &str = "manage_policies";

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

async fn exec_key(w: &World) -> String {
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: w.org_a,
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

/// A state whose Tier 3 calls answer "pending" at once (no 45 s wait in a test).
fn quick_state(w: &World) -> AppState {
    let mut config: ServerConfig = (*w.state.config).clone();
    config.approvals.wait = std::time::Duration::ZERO;
    AppState::new(
        w.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    )
}

fn worker(state: &AppState) -> Arc<ComplianceWorker> {
    Arc::new(ComplianceWorker::new(
        state.store.clone(),
        state.gateway.clone(),
        state.pipeline.clone(),
        ComplianceConfig::default(),
    ))
}

async fn tick(worker: &Arc<ComplianceWorker>) -> breeze_server::compliance::ComplianceTick {
    let r = worker.tick().await.unwrap();
    worker.settle().await;
    r
}

async fn script(w: &World, org: breeze_core::OrgId) -> String {
    w.store
        .org(org)
        .scripts()
        .create_script(
            NewScript {
                name: "install-it".into(),
                description: String::new(),
                language: "sh".into(),
                category: "general".into(),
                body: "echo fixing".into(),
                parameters: vec![],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

/// The world's device in A reports an inventory with bash only.
async fn inventory(w: &World) {
    let inv = serde_json::from_value(json!({
        "collectedAt": w.state.clock.now(), "hostname": "web-01",
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12", "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 1, "logicalCores": 1 },
        "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
        "packages": [{ "name": "bash", "version": "5.2.15-2" }],
    }))
    .unwrap();
    let device = DeviceId(w.a_device.parse().unwrap());
    w.store
        .record_inventory(device, w.org_a, &inv)
        .await
        .unwrap();
}

fn rules() -> Value {
    json!([
        { "type": "package_installed", "name": "bash" },
        { "type": "package_min_version", "name": "bash", "minVersion": "5.1" },
        { "type": "package_installed", "name": "auditd" },
    ])
}

async fn commands(w: &World) -> usize {
    w.store.raw_dump("device_commands").await.unwrap().len()
}

async fn isolation_tiers_and_lifecycle(cx: Ctx) {
    cx.clock.set(at("2026-03-02T09:58:00Z"));
    let w = world(&cx).await;
    inventory(&w).await;
    let b_script = script(&w, w.org_b).await;

    // A policy of A cannot name B's device or script, nor a protected path.
    let r = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "x", "rules": rules(),
                "target": { "type": "device", "deviceId": w.b_device } }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    let r = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "x", "rules": rules(), "remediationScriptId": b_script }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    let r = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "x",
                "rules": [{ "type": "file_sha256", "path": "/etc/shadow", "sha256": "0".repeat(64) }] }),
    )
    .await;
    assert_eq!(code(&r), "FORBIDDEN", "{r}");
    // A read key cannot create.
    let r = tool(
        &w.app,
        &w.read,
        TOOL,
        json!({ "action": "create", "name": "x", "rules": rules() }),
    )
    .await;
    assert!(r["rpcError"].is_object(), "{r}");

    let created = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "baseline", "rules": rules(),
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    let id = created["policy"]["id"].as_str().unwrap().to_owned();
    assert!(
        created["policy"]["owner"]
            .as_str()
            .unwrap()
            .starts_with("api_key:")
    );

    // Evaluate: bash passes both rules, auditd is missing.
    let e = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "evaluate", "policyId": id, "waitSeconds": 0 }),
    )
    .await;
    assert_eq!(e["evaluation"]["nonCompliant"], 1, "{e}");
    let row = &e["statuses"][0];
    assert_eq!(row["status"], "non_compliant");
    assert_eq!(row["results"][0]["passed"], true);
    assert_eq!(row["results"][1]["passed"], true);
    assert_eq!(row["results"][2]["passed"], false);
    let s = tool(
        &w.app,
        &w.read,
        TOOL,
        json!({ "action": "compliance_status", "policyId": id, "status": "non_compliant" }),
    )
    .await;
    assert_eq!(s["showing"], 1, "{s}");
    let sum = tool(
        &w.app,
        &w.read,
        TOOL,
        json!({ "action": "compliance_summary" }),
    )
    .await;
    assert_eq!(sum["summary"][0]["nonCompliant"], 1, "{sum}");
    let h = tool(
        &w.app,
        &w.read,
        TOOL,
        json!({ "action": "history", "policyId": id }),
    )
    .await;
    assert_eq!(h["history"][0]["toStatus"], "non_compliant", "{h}");

    // Another organization's key reaches none of it.
    for args in [
        json!({ "action": "get", "policyId": id }),
        json!({ "action": "compliance_status", "policyId": id }),
        json!({ "action": "history", "policyId": id }),
    ] {
        let r = tool(&w.app, &w.other_org_key, TOOL, args).await;
        assert_eq!(code(&r), "NOT_FOUND", "{r}");
    }
    let r = tool(&w.app, &w.other_org_key, TOOL, json!({ "action": "list" })).await;
    assert_eq!(r["showing"], 0, "{r}");
    let r = tool(
        &w.app,
        &w.other_org_key,
        TOOL,
        json!({ "action": "compliance_summary" }),
    )
    .await;
    assert_eq!(r["showing"], 0, "{r}");

    // A write key cannot delete or remediate (Tier 3).
    for action in ["delete", "remediate"] {
        let r = tool(
            &w.app,
            &w.write,
            TOOL,
            json!({ "action": action, "policyId": id }),
        )
        .await;
        assert!(r["rpcError"].is_object(), "{action}: {r}");
    }

    // Deactivate, activate; every change is audited.
    let r = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "deactivate", "policyId": id }),
    )
    .await;
    assert_eq!(r["policy"]["active"], false, "{r}");
    let r = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "activate", "policyId": id }),
    )
    .await;
    assert_eq!(r["policy"]["active"], true, "{r}");
    let r = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "update", "policyId": id, "rules": [{ "type": "package_installed", "name": "bash" }] }),
    )
    .await;
    assert_eq!(r["policy"]["rules"].as_array().unwrap().len(), 1, "{r}");
    let audit = w.store.raw_dump("audit_log").await.unwrap();
    for want in [
        "compliance_policy.create",
        "compliance_policy.deactivate",
        "compliance_policy.activate",
        "compliance_policy.update",
    ] {
        assert!(audit.iter().any(|r| r.contains(want)), "{want} is audited");
    }

    // The worker: the updated policy is due; one claim evaluates it (bash only: compliant).
    let state = quick_state(&w);
    let (one, two) = (worker(&state), worker(&state));
    let r1 = tick(&one).await;
    let r2 = tick(&two).await;
    assert_eq!(r1.evaluated + r2.evaluated, 1, "{r1:?} {r2:?}");
    let s = tool(
        &w.app,
        &w.read,
        TOOL,
        json!({ "action": "compliance_status", "policyId": id }),
    )
    .await;
    assert_eq!(s["statuses"][0]["status"], "compliant", "{s}");
    cx.clock.advance(chrono::Duration::minutes(61));
    assert_eq!(tick(&one).await.evaluated, 1, "due again after its period");
}

async fn remediation_goes_through_run_script(cx: Ctx) {
    cx.clock.set(at("2026-03-02T09:58:00Z"));
    let w = world(&cx).await;
    inventory(&w).await;
    let script = script(&w, w.org_a).await;
    let state = quick_state(&w);
    let app = breeze_server::app(breeze_server::Breeze::new(state.clone()));
    let worker = worker(&state);

    // A write key's policy that remediates by itself: the worker queues a remediation as the
    // write key, and the guard refuses its run_script. Nothing reaches a device.
    let created = tool(
        &app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "auto", "rules": rules(),
                "enforcement": "remediate", "remediationScriptId": script,
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    let auto = created["policy"]["id"].as_str().unwrap().to_owned();
    let r = tick(&worker).await;
    assert_eq!((r.evaluated, r.remediations_queued), (1, 1), "{r:?}");
    tick(&worker).await;
    let rem = w
        .store
        .org(w.org_a)
        .compliance()
        .list_remediations(auto.parse().unwrap(), 10)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(rem.status, RunStatus::Refused, "{rem:?}");
    assert!(
        rem.message.as_deref().unwrap().contains("ai:execute"),
        "{rem:?}"
    );
    assert_eq!(commands(&w).await, 0);

    // An execute key's remediate is Tier 3: a person approves it first.
    let exec = exec_key(&w).await;
    let created = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "manual", "rules": rules(),
                "remediationScriptId": script,
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    let id = created["policy"]["id"].as_str().unwrap().to_owned();
    tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "evaluate", "policyId": id, "waitSeconds": 0 }),
    )
    .await;
    let pending = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "remediate", "policyId": id }),
    )
    .await;
    assert_eq!(pending["status"], "pending_approval", "{pending}");
    let approval: uuid::Uuid = pending["approvalId"].as_str().unwrap().parse().unwrap();
    assert!(
        w.store
            .org(w.org_a)
            .compliance()
            .list_remediations(id.parse().unwrap(), 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing is queued before the approval"
    );
    w.store
        .org(w.org_a)
        .approvals()
        .decide_approval(
            approval,
            Decision::Approve,
            w.admin,
            None,
            audit("approval.approve"),
        )
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    state.pipeline.spawn_resumer(stop.clone());
    let mut queued = Vec::new();
    for _ in 0..100 {
        queued = w
            .store
            .org(w.org_a)
            .compliance()
            .list_remediations(id.parse().unwrap(), 10)
            .await
            .unwrap();
        if !queued.is_empty() {
            break;
        }
        cx.clock.advance(chrono::Duration::seconds(1));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    stop.cancel();
    assert_eq!(queued.len(), 1, "the approved call queued the remediation");
    assert!(queued[0].requested_by.starts_with("api_key:"));

    // The worker runs its script as run_script, as the execute key: a second request, pinned
    // to the script, or a refusal for an offline device — never a silent run.
    tick(&worker).await;
    let rem = w
        .store
        .org(w.org_a)
        .compliance()
        .get_remediation(queued[0].id)
        .await
        .unwrap();
    assert!(
        matches!(
            rem.status,
            RunStatus::PendingApproval | RunStatus::Failed | RunStatus::Refused
        ),
        "{rem:?}"
    );
    if rem.status == RunStatus::PendingApproval {
        let a = w
            .store
            .org(w.org_a)
            .approvals()
            .get_approval(rem.approval_ids[0])
            .await
            .unwrap();
        assert_eq!(a.tool, "run_script");
        assert_eq!(a.arguments["scriptId"], script.as_str());
    }
    assert_eq!(
        commands(&w).await,
        0,
        "no script reached a device without its own approval"
    );
    // Reads show it.
    let g = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "get", "policyId": id }),
    )
    .await;
    assert_eq!(g["remediations"][0]["id"], queued[0].id.to_string(), "{g}");
}

/// Two instances' compliance workers on one database both see a remediation waiting for an
/// approval that became final: it is finished — rewritten and audited — once.
async fn waiting_remediation_is_finished_once(cx: Ctx) {
    cx.clock.set(at("2026-03-02T09:58:00Z"));
    let w = world(&cx).await;
    inventory(&w).await;
    let script = script(&w, w.org_a).await;
    let state = quick_state(&w);
    let app = breeze_server::app(breeze_server::Breeze::new(state.clone()));
    let created = tool(
        &app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "manual", "rules": rules(),
                "remediationScriptId": script,
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    let policy: uuid::Uuid = created["policy"]["id"].as_str().unwrap().parse().unwrap();
    tool(
        &app,
        &w.write,
        TOOL,
        json!({ "action": "evaluate", "policyId": policy, "waitSeconds": 0 }),
    )
    .await;
    let org = w.store.org(w.org_a);
    let rem = org
        .compliance()
        .queue_remediation(
            policy,
            None,
            "system:test",
            audit("compliance.remediation.queue"),
        )
        .await
        .unwrap();
    assert_eq!(
        w.store
            .cross_org()
            .claim_queued_remediations(10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Its run_script request, denied by a person.
    let request = org
        .approvals()
        .create_approval(
            breeze_store::NewApproval {
                api_key_id: None,
                oauth_grant_id: None,
                ai_session_id: None,
                client_name: None,
                requester_user_id: w.admin,
                tool: "run_script".into(),
                action: None,
                tier: 3,
                arguments: json!({ "scriptId": script, "deviceIds": [w.a_device] }),
                arguments_hash: [1; 32],
                definition_hash: [2; 32],
                description: "remediate".into(),
                mode: "supervised".into(),
                request_id: None,
                expires_at: w.state.clock.now() + chrono::Duration::minutes(5),
                pinned: None,
            },
            audit("approval.request"),
        )
        .await
        .unwrap();
    org.compliance()
        .update_remediation(
            rem.id,
            breeze_store::RemediationUpdate {
                status: RunStatus::PendingApproval,
                approval_ids: vec![request.id],
                devices: vec![],
                message: None,
            },
        )
        .await
        .unwrap();
    org.approvals()
        .decide_approval(
            request.id,
            Decision::Deny,
            w.admin,
            None,
            audit("approval.deny"),
        )
        .await
        .unwrap();

    let other_store = w.store.reopen().await.unwrap();
    let other_state = AppState::new(
        other_store.clone(),
        state.auth.clone(),
        state.clock.clone(),
        (*state.config).clone(),
        Arc::new(MemoryLimiter::new()),
    );
    let (one, two) = (worker(&state), worker(&other_state));
    let (a, b) = tokio::join!(one.tick(), two.tick());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.followed_up + b.followed_up, 1, "{a:?} {b:?}");
    // Later ticks find nothing waiting.
    let (a, b) = tokio::join!(one.tick(), two.tick());
    assert_eq!(a.unwrap().followed_up + b.unwrap().followed_up, 0);
    let done = org.compliance().get_remediation(rem.id).await.unwrap();
    assert!(done.status.is_terminal(), "{done:?}");
    let finishes = org
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some("compliance.remediation.finish".into()),
                resource_id: Some(rem.id.to_string()),
                ..Default::default()
            },
            None,
            50,
        )
        .await
        .unwrap()
        .records;
    assert_eq!(finishes.len(), 1, "one rewrite: {finishes:?}");
    other_store.close().await;
}

breeze_store::on_both_backends!(
    isolation_tiers_and_lifecycle,
    remediation_goes_through_run_script,
    waiting_remediation_is_finished_once
);
