//! `manage_deployments` over MCP and the deployment worker under a test clock, on both
//! backends.
//!
//! The attack first: a deployment whose owner is a key without `ai:execute` never runs — the
//! worker's `run_script` is refused by the guard, the deployment pauses with the refusal, and
//! nothing reaches a device or asks for approval; a write key cannot start one at all (Tier 3).
//! Then an execute key's deployment: each run waits for a person's approval, a denied run is a
//! failed device that pauses the deployment automatically with the reason, a `resume` accepts
//! the ring's failures and the next ring (offline devices skipped) finishes it, with every
//! change audited; two workers step it once. Then the tool: rings by device, group and
//! percentage, the refusals, and another organization's ids on every id-taking action. Then
//! cancelling: what waits for approval is withdrawn, a run already under way on a device is
//! not interrupted and its result is still recorded while the deployment stays cancelled; and
//! maintenance windows: a device offline while its window is open waits (deferred) for a
//! window it is online in.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use breeze_agent_proto::{AgentFrame, CommandOutcome, CommandResult};
use breeze_auth::CreateApiKey;
use breeze_core::{
    DeploymentStatus, DeviceId, DeviceRunStatus, DeviceStatus, OrgId, Scope, ScopeSet, Timestamp,
};
use breeze_limits::MemoryLimiter;
use breeze_server::{
    AppState, Breeze, ServerConfig,
    deployments::{DeploymentConfig, DeploymentWorker},
    workers::Worker,
};
use breeze_store::{
    AuditFilter, Control, Decision, Deployment, NewScript, NewWindow, RuleTarget, WindowUpdate,
    testing::Ctx,
};
use common::{World, audit, code, tool, world};
use serde_json::{Value, json};
use uuid::Uuid;

const TOOL: &str = "manage_deployments";

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

async fn key(w: &World, org: OrgId, scopes: &[Scope]) -> String {
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: org,
                user_id: w.admin,
                name: "k".into(),
                scopes: ScopeSet::new(scopes.iter().copied()),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    secret.expose().to_owned()
}

async fn exec_key(w: &World, org: OrgId) -> String {
    key(w, org, &[Scope::AiRead, Scope::AiWrite, Scope::AiExecute]).await
}

/// A state whose Tier 3 calls answer "pending" at once (no 45 s wait in a test), with a fresh
/// limiter (every key here is the admin's; the tool allows 10 calls in 10 minutes).
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

fn quick_app(w: &World) -> axum::Router {
    breeze_server::app(Breeze::new(quick_state(w)))
}

fn worker(w: &World) -> Arc<DeploymentWorker> {
    let state = quick_state(w);
    Arc::new(DeploymentWorker::new(
        w.store.clone(),
        state.pipeline,
        DeploymentConfig::default(),
    ))
}

async fn tick(worker: &Arc<DeploymentWorker>) -> usize {
    let r = worker.tick().await.unwrap();
    worker.settle().await;
    r.stepped
}

async fn script_id(w: &World, org: OrgId) -> String {
    w.store
        .org(org)
        .scripts()
        .create_script(
            NewScript {
                name: "hello".into(),
                description: String::new(),
                language: "sh".into(),
                category: "general".into(),
                body: "echo deployed".into(),
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

/// One more device of `org`, `online` or offline.
async fn device(w: &World, org: OrgId, hostname: &str, online: bool) -> String {
    let o = w.store.org(org);
    let site = o.tenancy().list_sites().await.unwrap()[0].id;
    o.devices()
        .create_device(
            breeze_store::testing::new_device(
                site,
                hostname,
                if online {
                    DeviceStatus::Online
                } else {
                    DeviceStatus::Offline
                },
            ),
            audit("d"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

async fn get(w: &World, id: &str) -> Deployment {
    w.store
        .org(w.org_a)
        .deployments()
        .get_deployment(id.parse().unwrap())
        .await
        .unwrap()
}

async fn commands(w: &World) -> usize {
    w.store.raw_dump("device_commands").await.unwrap().len()
}

async fn approvals(w: &World) -> usize {
    w.store.raw_dump("approval_requests").await.unwrap().len()
}

/// Starts a draft as `actor` (what an approved `start` does).
async fn start_as(w: &World, id: &str, actor: &str) {
    w.store
        .org(w.org_a)
        .deployments()
        .control_deployment(
            id.parse().unwrap(),
            Control::Start,
            actor,
            audit("deployment.start"),
        )
        .await
        .unwrap();
}

/// The `Actor` text of the API key `secret`.
async fn actor_of(w: &World, secret: &str) -> String {
    let p = w
        .state
        .auth
        .authenticate_api_key(Some(secret))
        .await
        .unwrap();
    format!("api_key:{}", p.api_key_id().unwrap())
}

async fn a_write_key_deployment_never_runs(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let app = quick_app(&w);
    let script = script_id(&w, w.org_a).await;
    let created = tool(
        &app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "sneaky",
                "payload": { "kind": "script", "scriptId": script },
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    assert_eq!(created["deployment"]["status"], "draft", "{created}");
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    assert!(
        created["deployment"]["owner"]
            .as_str()
            .unwrap()
            .starts_with("api_key:")
    );
    // The write key cannot start it: start is Tier 3.
    let r = tool(
        &app,
        &w.write,
        TOOL,
        json!({ "action": "start", "deploymentId": id }),
    )
    .await;
    assert_eq!(
        r["rpcError"]["data"]["code"], "INSUFFICIENT_SCOPE",
        "start is Tier 3: {r}"
    );
    assert_eq!(get(&w, &id).await.status, DeploymentStatus::Draft);

    // Even running as the write key (as if it had been started for it), the worker's
    // run_script is refused by the guard: the deployment pauses with the refusal.
    let owner = actor_of(&w, &w.write).await;
    start_as(&w, &id, &owner).await;
    let worker = worker(&w);
    assert_eq!(tick(&worker).await, 1);
    let d = get(&w, &id).await;
    assert_eq!(d.status, DeploymentStatus::Paused, "{d:?}");
    let reason = d.pause_reason.unwrap();
    assert!(reason.contains("ai:execute"), "{reason}");
    assert_eq!(commands(&w).await, 0, "nothing reached a device");
    assert_eq!(approvals(&w).await, 0, "no approval was asked for");
    let s = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "device_status", "deploymentId": id }),
    )
    .await;
    assert_eq!(s["devices"][0]["status"], "failed", "{s}");
    assert_eq!(s["deployment"]["status"], "paused", "{s}");
}

async fn an_execute_key_deployment_waits_pauses_on_failure_and_resumes(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let app = quick_app(&w);
    let exec = exec_key(&w, w.org_a).await;
    let script = script_id(&w, w.org_a).await;
    let asleep = device(&w, w.org_a, "asleep-01", false).await;
    let later = device(&w, w.org_a, "later-01", false).await;
    let created = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "agent-update",
                "payload": { "kind": "script", "scriptId": script, "timeoutSeconds": 30 },
                "rings": [ { "name": "canary", "deviceIds": [w.a_device, asleep] } ] }),
    )
    .await;
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    let rings = &created["deployment"]["rings"];
    assert_eq!(rings.as_array().unwrap().len(), 2, "{created}");
    assert_eq!(rings[0]["devices"], 2, "{created}");
    assert_eq!(rings[1]["name"], "remaining", "{created}");
    assert_eq!(rings[1]["devices"], 1, "{created}");
    assert!(later.len() == 36);

    // start is Tier 3: the execute key gets an approval request, not a running deployment.
    let pending = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "start", "deploymentId": id }),
    )
    .await;
    assert_eq!(pending["status"], "pending_approval", "{pending}");
    assert_eq!(get(&w, &id).await.status, DeploymentStatus::Draft);
    let owner = actor_of(&w, &exec).await;
    start_as(&w, &id, &owner).await;

    // Two workers, one step: the lease.
    let (one, two) = (worker(&w), worker(&w));
    let (a, b) = tokio::join!(one.tick(), two.tick());
    one.settle().await;
    two.settle().await;
    assert_eq!(a.unwrap().stepped + b.unwrap().stepped, 1);

    // The offline device is skipped; the online one's run waits for a person.
    let o = w.store.org(w.org_a);
    let devices = o
        .deployments()
        .deployment_devices(id.parse().unwrap(), Some(0), None)
        .await
        .unwrap();
    let by = |d: &str| {
        devices
            .iter()
            .find(|x| x.device_id.to_string() == d)
            .unwrap()
            .clone()
    };
    assert_eq!(by(&asleep).status, DeviceRunStatus::Skipped, "{devices:?}");
    let web = by(&w.a_device);
    assert_eq!(web.status, DeviceRunStatus::Running, "{devices:?}");
    let approval = web.approval_id.expect("the run waits for approval");
    let record = o.approvals().get_approval(approval).await.unwrap();
    assert_eq!(record.tool, "run_script");
    assert_eq!(record.arguments["deviceIds"][0], w.a_device);
    assert_eq!(
        commands(&w).await,
        0,
        "nothing runs before a person approves"
    );
    assert_eq!(get(&w, &id).await.status, DeploymentStatus::Running);

    // The person denies it: a failed device, above the 0% allowed, pauses the deployment.
    o.approvals()
        .decide_approval(
            approval,
            Decision::Deny,
            w.admin,
            Some("not today"),
            audit("deny"),
        )
        .await
        .unwrap();
    cx.clock.advance(chrono::Duration::seconds(20));
    tick(&one).await;
    let d = get(&w, &id).await;
    assert_eq!(d.status, DeploymentStatus::Paused, "{d:?}");
    let reason = d.pause_reason.clone().unwrap();
    assert!(reason.contains("ring 1 (canary): 1 of 1"), "{reason}");
    let s = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "device_status", "deploymentId": id, "status": "failed" }),
    )
    .await;
    assert_eq!(s["showing"], 1, "{s}");
    assert!(
        s["devices"][0]["error"]
            .as_str()
            .unwrap()
            .contains("not today"),
        "{s}"
    );
    // A paused deployment is not stepped.
    assert_eq!(tick(&one).await, 0);

    // Resumed, the ring's failure is accepted; the next ring's device is offline: skipped,
    // and the deployment completes.
    w.store
        .org(w.org_a)
        .deployments()
        .control_deployment(
            id.parse().unwrap(),
            Control::Resume {
                retry_failed: false,
            },
            &owner,
            audit("deployment.resume"),
        )
        .await
        .unwrap();
    tick(&one).await;
    let d = get(&w, &id).await;
    assert_eq!(d.status, DeploymentStatus::Completed, "{d:?}");
    assert!(d.finished_at.is_some());
    let g = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "get", "deploymentId": id }),
    )
    .await;
    assert_eq!(g["deployment"]["rings"][0]["failed"], 1, "{g}");
    assert_eq!(g["deployment"]["rings"][1]["skipped"], 1, "{g}");
    assert_eq!(commands(&w).await, 0);

    // Every state change is on record.
    let page = o
        .audit()
        .query_audit(
            &AuditFilter {
                resource_id: Some(id.clone()),
                ..AuditFilter::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    let actions: Vec<&str> = page
        .records
        .iter()
        .map(|r| r.event.action.as_str())
        .collect();
    for want in [
        "deployment.create",
        "deployment.start",
        "deployment.pause.auto",
        "deployment.resume",
        "deployment.ring.advance",
        "deployment.complete",
    ] {
        assert!(actions.contains(&want), "{want} in {actions:?}");
    }
}

async fn rings_refusals_and_other_organizations(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let script = script_id(&w, w.org_a).await;
    let b_script = script_id(&w, w.org_b).await;
    let mut a_devices = vec![w.a_device.clone()];
    for i in 0..5 {
        a_devices.push(device(&w, w.org_a, &format!("a-{i}"), true).await);
    }
    let oa = w.store.org(w.org_a);
    let group = oa
        .tenancy()
        .create_group("canaries", None, None, audit("g"))
        .await
        .unwrap();
    oa.tenancy()
        .add_to_group(group.id, DeviceId(a_devices[3].parse().unwrap()))
        .await
        .unwrap();
    let b_group = w
        .store
        .org(w.org_b)
        .tenancy()
        .create_group("theirs", None, None, audit("g"))
        .await
        .unwrap();
    let b_site = w.store.org(w.org_b).tenancy().list_sites().await.unwrap()[0].id;

    // Rings by group, then percentages of the whole target; the rest gets a ring.
    let app = quick_app(&w);
    let created = tool(
        &app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "staged",
                "payload": { "kind": "script", "scriptId": script },
                "maxFailurePercent": 20,
                "rings": [ { "groupId": group.id.to_string() },
                           { "percent": 50, "successPercent": 90 } ] }),
    )
    .await;
    let d = &created["deployment"];
    let sizes: Vec<u64> = d["rings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["devices"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1, 2, 3], "{created}");
    assert_eq!(d["rings"][1]["successPercent"], 90, "{created}");
    assert_eq!(d["rings"][2]["successPercent"], 80, "{created}");
    let id = d["id"].as_str().unwrap().to_owned();

    // Bad inputs name the problem; another organization's script, device, group or site is
    // not found.
    let mk = |extra: Value| {
        let mut v = json!({ "action": "create", "name": "x",
                            "payload": { "kind": "script", "scriptId": script } });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let cases = [
        (
            json!({ "action": "create", "name": "x",
                    "payload": { "kind": "script", "scriptId": b_script } }),
            "NOT_FOUND",
            "",
        ),
        (
            mk(json!({ "rings": [ { "deviceIds": [w.b_device] } ] })),
            "NOT_FOUND",
            "",
        ),
        (
            mk(json!({ "rings": [ { "groupId": b_group.id.to_string() } ] })),
            "NOT_FOUND",
            "",
        ),
        (
            mk(json!({ "target": { "type": "site", "siteId": b_site.to_string() } })),
            "NOT_FOUND",
            "",
        ),
        (
            mk(
                json!({ "target": { "type": "device", "deviceId": w.a_device },
                       "rings": [ { "deviceIds": [a_devices[1]] } ] }),
            ),
            "INVALID_ARGUMENT",
            "not in the deployment's target",
        ),
        (
            mk(json!({ "rings": [ { "percent": 50 }, { "percent": 40 } ] })),
            "INVALID_ARGUMENT",
            "above the previous ring",
        ),
        (
            mk(json!({ "rings": [ { "percent": 50, "groupId": group.id.to_string() } ] })),
            "INVALID_ARGUMENT",
            "exactly one of",
        ),
        (
            json!({ "action": "create", "name": "x" }),
            "INVALID_ARGUMENT",
            "payload",
        ),
    ];
    for (i, (args, want, needle)) in cases.into_iter().enumerate() {
        // A fresh limiter every few calls (10 calls in 10 minutes per user).
        let app = if i % 5 == 0 {
            quick_app(&w)
        } else {
            app.clone()
        };
        let r = tool(&app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), want, "{args}: {r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(needle),
            "{args}: {r}"
        );
    }

    // Organization B's keys see nothing of A's deployment, on every id-taking action.
    let b_exec = exec_key(&w, w.org_b).await;
    let app = quick_app(&w);
    for action in ["get", "device_status", "start", "pause", "resume", "cancel"] {
        let r = tool(
            &app,
            &b_exec,
            TOOL,
            json!({ "action": action, "deploymentId": id }),
        )
        .await;
        assert_eq!(code(&r), "NOT_FOUND", "{action}: {r}");
    }
    let r = tool(&app, &w.other_org_key, TOOL, json!({ "action": "list" })).await;
    assert_eq!(r["showing"], 0, "{r}");
    assert_eq!(
        approvals(&w).await,
        0,
        "no approval for another organization's id"
    );
    assert_eq!(get(&w, &id).await.status, DeploymentStatus::Draft);
    // A malformed id names nothing either.
    let app = quick_app(&w);
    let r = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "get", "deploymentId": Uuid::nil().to_string() }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");

    // State rules: a draft cannot be paused or resumed; a cancelled one cannot start.
    let actor = "user:test";
    let o = w.store.org(w.org_a);
    let did: Uuid = id.parse().unwrap();
    for c in [
        Control::Pause,
        Control::Resume {
            retry_failed: false,
        },
    ] {
        let e = o
            .deployments()
            .control_deployment(did, c, actor, audit("x"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("draft"), "{e}");
    }
    let d = o
        .deployments()
        .control_deployment(did, Control::Cancel, actor, audit("deployment.cancel"))
        .await
        .unwrap();
    assert_eq!(d.status, DeploymentStatus::Cancelled);
    assert!(
        o.deployments()
            .deployment_devices(did, None, None)
            .await
            .unwrap()
            .iter()
            .all(|x| x.status == DeviceRunStatus::Skipped)
    );
    assert!(
        o.deployments()
            .control_deployment(did, Control::Start, actor, audit("x"))
            .await
            .is_err()
    );
    let r = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "list", "status": "cancelled" }),
    )
    .await;
    assert_eq!(r["showing"], 1, "{r}");
}

async fn a_package_deployment_goes_through_manage_patches(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let app = quick_app(&w);
    let exec = exec_key(&w, w.org_a).await;
    // A removal is a package payload too (its runs: manage_patches remove, Tier 3).
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "rm",
                "payload": { "kind": "package", "name": "htop", "action": "remove" } }),
    )
    .await;
    assert_eq!(r["deployment"]["payload"]["action"], "remove", "{r}");
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "rm",
                "payload": { "kind": "package", "name": "-y", "action": "remove" } }),
    )
    .await;
    assert_eq!(
        code(&r),
        "INVALID_ARGUMENT",
        "an option is not a package: {r}"
    );
    // manage_patches remove is Tier 3: a write key cannot; an execute key waits for a person;
    // a name that is an option is refused.
    let rm = json!({ "action": "remove", "deviceIds": [w.a_device], "packageNames": ["htop"] });
    let r = tool(&app, &w.write, "manage_patches", rm.clone()).await;
    assert_eq!(r["rpcError"]["data"]["code"], "INSUFFICIENT_SCOPE", "{r}");
    let r = tool(&app, &exec, "manage_patches", rm).await;
    assert_eq!(r["status"], "pending_approval", "{r}");
    let r = tool(
        &app,
        &exec,
        "manage_patches",
        json!({ "action": "remove", "deviceIds": [w.a_device], "packageNames": ["--purge"] }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    // The device's last scan offers the package.
    let device: DeviceId = w.a_device.parse().unwrap();
    let report = breeze_agent_proto::PatchScanReport {
        manager: "apt".into(),
        scanned_at: w.state.clock.now(),
        patches: vec![breeze_agent_proto::AvailablePatch {
            name: "htop".into(),
            installed_version: None,
            available_version: "3.2.2".into(),
            arch: None,
            source: None,
            security: false,
            severity: None,
            advisory: None,
        }],
        reboot_required: false,
        logged_in_users: Vec::new(),
    };
    w.store
        .record_patch_scan(device, w.org_a, &report)
        .await
        .unwrap();
    let created = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "htop-rollout",
                "payload": { "kind": "package", "name": "htop" },
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    assert_eq!(
        created["deployment"]["payload"]["kind"], "package",
        "{created}"
    );
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    let owner = actor_of(&w, &exec).await;
    start_as(&w, &id, &owner).await;
    let worker = worker(&w);
    tick(&worker).await;

    // The install is manage_patches' Tier 3 call as the owner: a person approves it first.
    let o = w.store.org(w.org_a);
    let did: Uuid = id.parse().unwrap();
    let part = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(part.status, DeviceRunStatus::Running, "{part:?}");
    let approval = o
        .approvals()
        .get_approval(part.approval_id.unwrap())
        .await
        .unwrap();
    assert_eq!(approval.tool, "manage_patches");
    assert_eq!(approval.arguments["action"], "install");
    assert_eq!(approval.arguments["packageNames"][0], "htop");
    o.approvals()
        .decide_approval(
            approval.id,
            Decision::Approve,
            w.admin,
            None,
            audit("approve"),
        )
        .await
        .unwrap();
    let state = quick_state(&w);
    let stop = tokio_util::sync::CancellationToken::new();
    state.pipeline.spawn_resumer(stop.clone());
    for _ in 0..100 {
        if o.approvals()
            .get_approval(approval.id)
            .await
            .unwrap()
            .is_final()
        {
            break;
        }
        cx.clock.advance(chrono::Duration::seconds(1));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    stop.cancel();
    assert_eq!(
        o.approvals()
            .get_approval(approval.id)
            .await
            .unwrap()
            .status
            .as_str(),
        "completed"
    );

    // The approved call made a patch job; the device waits for its part.
    tick(&worker).await;
    let part = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(part.status, DeviceRunStatus::Running, "{part:?}");
    let job = part.patch_job_id.expect("the device follows the patch job");
    let (_, parts) = o.patches().get_patch_job(job).await.unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].device_id, device);

    // The agent's answer (as the gateway would record it): the part succeeded.
    w.store
        .raw_execute("UPDATE patch_job_devices SET status = 'succeeded'")
        .await
        .unwrap();
    tick(&worker).await;
    let part = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(part.status, DeviceRunStatus::Succeeded, "{part:?}");
    assert_eq!(get(&w, &id).await.status, DeploymentStatus::Completed);
}

/// Cancelling a deployment withdraws the approval requests its runs wait for: nobody can
/// approve them any more, the resumer never runs them, their devices are skipped saying the
/// deployment was cancelled, and a worker call that was waiting on one stops waiting.
async fn cancelling_withdraws_the_approvals_its_runs_wait_for(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let app = quick_app(&w);
    let exec = exec_key(&w, w.org_a).await;
    let script = script_id(&w, w.org_a).await;
    let second = device(&w, w.org_a, "web-02", true).await;
    let created = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "to-cancel",
                "payload": { "kind": "script", "scriptId": script },
                "rings": [ { "deviceIds": [w.a_device, second] } ] }),
    )
    .await;
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    let did: Uuid = id.parse().unwrap();
    let owner = actor_of(&w, &exec).await;
    start_as(&w, &id, &owner).await;

    // A worker whose calls wait for the decision (an hour: only a withdrawal ends it early).
    let mut state = quick_state(&w);
    let mut config: ServerConfig = (*state.config).clone();
    config.approvals.wait = std::time::Duration::from_secs(3600);
    config.approvals.poll = std::time::Duration::from_millis(20);
    state = AppState::new(
        w.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    );
    let waiting = Arc::new(DeploymentWorker::new(
        w.store.clone(),
        state.pipeline,
        DeploymentConfig::default(),
    ));
    assert_eq!(waiting.tick().await.unwrap().stepped, 1);
    let o = w.store.org(w.org_a);
    let approval = loop {
        let pending = o.approvals().list_approvals(true, 10).await.unwrap();
        if let Some(a) = pending.iter().find(|a| a.tool == "run_script") {
            break a.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(approval.tool, "run_script");
    assert_eq!(approval.arguments["deviceIds"].as_array().unwrap().len(), 2);

    // The cancel (what an approved `cancel` does).
    o.deployments()
        .control_deployment(did, Control::Cancel, &owner, audit("deployment.cancel"))
        .await
        .unwrap();
    let r = o.approvals().get_approval(approval.id).await.unwrap();
    assert_eq!(r.status.as_str(), "withdrawn", "{r:?}");
    let reason = r.reason.clone().unwrap();
    assert!(
        reason.contains("to-cancel") && reason.contains("cancelled"),
        "{reason}"
    );

    // The worker's waiting call ends (refused: withdrawn) instead of waiting out its hour;
    // the guard only turns a hang into a failure.
    tokio::time::timeout(std::time::Duration::from_secs(120), waiting.settle())
        .await
        .expect("the waiting run_script call stopped when its request was withdrawn");

    // Both devices are skipped with the reason, even after the refused call answered.
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    assert_eq!(parts.len(), 2);
    for p in &parts {
        assert_eq!(p.status, DeviceRunStatus::Skipped, "{p:?}");
        let e = p.error.clone().unwrap();
        assert!(e.contains("cancelled") && e.contains("withdrawn"), "{e}");
    }
    assert_eq!(get(&w, &id).await.status, DeploymentStatus::Cancelled);

    // Nobody can approve it now, and the resumer has nothing to run.
    let late = o
        .approvals()
        .decide_approval(
            approval.id,
            Decision::Approve,
            w.admin,
            None,
            audit("approve"),
        )
        .await;
    assert!(late.is_err(), "a withdrawn request cannot be approved");
    let stop = tokio_util::sync::CancellationToken::new();
    let resumer = quick_state(&w).pipeline.spawn_resumer(stop.clone());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.cancel();
    resumer.await.unwrap();
    assert_eq!(commands(&w).await, 0, "nothing reached a device");
    assert_eq!(
        o.approvals()
            .get_approval(approval.id)
            .await
            .unwrap()
            .status
            .as_str(),
        "withdrawn"
    );

    // The withdrawal and the cancel are on record.
    let page = o
        .audit()
        .query_audit(
            &AuditFilter {
                resource_id: Some(approval.id.to_string()),
                ..AuditFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert!(
        page.records
            .iter()
            .any(|r| r.event.action == "approval.withdraw"),
        "{page:?}"
    );
    let cancel = o
        .audit()
        .query_audit(
            &AuditFilter {
                resource_id: Some(id.clone()),
                action: Some("deployment.cancel".into()),
                ..AuditFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        cancel.records[0].event.details["withdrawnApprovals"][0],
        approval.id.to_string(),
        "{cancel:?}"
    );
}

/// A window as the tests make them.
fn window(name: &str, target: RuleTarget, time_zone: &str, schedule: Value) -> NewWindow {
    NewWindow {
        name: name.into(),
        description: None,
        target,
        time_zone: time_zone.into(),
        schedule: serde_json::from_value(schedule).unwrap(),
        suppress_alerts: false,
        enabled: true,
        created_by: "test".into(),
    }
}

/// A deployment with when=maintenance_window sends a device's run only while a window is
/// open for it (under the test clock): the device in an open window goes at once, the one
/// whose weekly window (Europe/Berlin) opens later is deferred with that opening and goes when
/// it opens, one no window covers waits saying so. windowId narrows it to one window; a
/// disabled or another organization's window is refused.
async fn maintenance_window_deployments_wait_for_each_devices_window(cx: Ctx) {
    // Monday 2026-03-02, 10:00 UTC (11:00 in Berlin).
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let app = quick_app(&w);
    let exec = exec_key(&w, w.org_a).await;
    let script = script_id(&w, w.org_a).await;
    let night = device(&w, w.org_a, "night-01", true).await;
    let bare = device(&w, w.org_a, "bare-01", true).await;
    let o = w.store.org(w.org_a);
    let id_of = |s: &str| DeviceId(s.parse().unwrap());
    let group = o
        .tenancy()
        .create_group("wave", None, None, audit("g"))
        .await
        .unwrap();
    for d in [&w.a_device, &night, &bare] {
        o.tenancy().add_to_group(group.id, id_of(d)).await.unwrap();
    }
    o.maintenance()
        .create_window(
            window(
                "now-ish",
                RuleTarget::Device(id_of(&w.a_device)),
                "UTC",
                json!({ "kind": "once", "startsAt": "2026-03-02T09:30:00Z",
                    "endsAt": "2026-03-02T10:30:00Z" }),
            ),
            audit("w"),
        )
        .await
        .unwrap();
    // Mondays 13:00-14:00 in Berlin: 12:00 UTC in March.
    let berlin = o
        .maintenance()
        .create_window(
            window(
                "berlin-lunch",
                RuleTarget::Device(id_of(&night)),
                "Europe/Berlin",
                json!({ "kind": "weekly", "days": ["mon"], "startTime": "13:00",
                        "durationMinutes": 60 }),
            ),
            audit("w"),
        )
        .await
        .unwrap();

    let created = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "in-windows", "when": "maintenance_window",
                "payload": { "kind": "script", "scriptId": script },
                "target": { "type": "group", "groupId": group.id.to_string() } }),
    )
    .await;
    assert_eq!(
        created["deployment"]["when"], "maintenance_window",
        "{created}"
    );
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    let did: Uuid = id.parse().unwrap();
    let owner = actor_of(&w, &exec).await;
    start_as(&w, &id, &owner).await;
    let worker = worker(&w);
    tick(&worker).await;

    let part = |parts: &[breeze_store::DeploymentDevice], d: &str| {
        parts
            .iter()
            .find(|p| p.device_id == id_of(d))
            .unwrap()
            .clone()
    };
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    let web = part(&parts, &w.a_device);
    assert_eq!(web.status, DeviceRunStatus::Running, "{web:?}");
    assert!(web.approval_id.is_some(), "its run went out: {web:?}");
    let n = part(&parts, &night);
    assert_eq!(n.status, DeviceRunStatus::Pending, "{n:?}");
    assert_eq!(n.deferred_until, Some(at("2026-03-02T12:00:00Z")), "{n:?}");
    assert!(
        n.deferred_reason
            .as_deref()
            .unwrap()
            .contains("berlin-lunch"),
        "{n:?}"
    );
    let b = part(&parts, &bare);
    assert_eq!(b.status, DeviceRunStatus::Pending, "{b:?}");
    assert!(
        b.deferred_reason
            .as_deref()
            .unwrap()
            .contains("no enabled maintenance window"),
        "{b:?}"
    );
    assert_eq!(b.deferred_until, None);
    // The tool says so.
    let s = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "device_status", "deploymentId": id }),
    )
    .await;
    let row = s["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["deviceId"] == night.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["status"], "deferred", "{s}");
    assert_eq!(row["nextWindowAt"], "2026-03-02T12:00:00+00:00", "{s}");
    assert_eq!(s["deployment"]["rings"][0]["deferred"], 2, "{s}");
    assert_eq!(s["deployment"]["status"], "running", "{s}");

    // Still outside: another tick sends nothing more.
    cx.clock.set(at("2026-03-02T11:59:00Z"));
    tick(&worker).await;
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    assert_eq!(part(&parts, &night).status, DeviceRunStatus::Pending);

    // Berlin's window opens: night-01 goes out at the next tick; bare-01 still waits.
    cx.clock.set(at("2026-03-02T12:01:00Z"));
    tick(&worker).await;
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    let n = part(&parts, &night);
    assert_eq!(n.status, DeviceRunStatus::Running, "{n:?}");
    assert!(
        n.approval_id.is_some() && n.deferred_reason.is_none(),
        "{n:?}"
    );
    let approval = o
        .approvals()
        .get_approval(n.approval_id.unwrap())
        .await
        .unwrap();
    assert_eq!(approval.arguments["deviceIds"], json!([night]));
    assert_eq!(part(&parts, &bare).status, DeviceRunStatus::Pending);

    // windowId: only that window counts; it must be this organization's and enabled.
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "one-window", "when": "maintenance_window",
                "windowId": berlin.id.to_string(),
                "payload": { "kind": "script", "scriptId": script },
                "target": { "type": "device", "deviceId": bare } }),
    )
    .await;
    assert_eq!(r["deployment"]["windowId"], berlin.id.to_string(), "{r}");
    let one = r["deployment"]["id"].as_str().unwrap().to_owned();
    start_as(&w, &one, &owner).await;
    tick(&worker).await;
    let bp = o
        .deployments()
        .deployment_devices(one.parse().unwrap(), None, None)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        bp.status,
        DeviceRunStatus::Running,
        "berlin-lunch is open: {bp:?}"
    );
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "x", "windowId": berlin.id.to_string(),
                "payload": { "kind": "script", "scriptId": script } }),
    )
    .await;
    assert_eq!(
        r["deployment"]["when"], "now",
        "windowId without when is ignored: {r}"
    );
    assert!(r["deployment"]["windowId"].is_null(), "{r}");
    let theirs = w
        .store
        .org(w.org_b)
        .maintenance()
        .create_window(
            window(
                "theirs",
                RuleTarget::Organization,
                "UTC",
                json!({ "kind": "weekly", "days": ["mon"], "startTime": "00:00",
                           "durationMinutes": 1440 }),
            ),
            audit("w"),
        )
        .await
        .unwrap();
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "x", "when": "maintenance_window",
                "windowId": theirs.id.to_string(),
                "payload": { "kind": "script", "scriptId": script } }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    o.maintenance()
        .update_window(
            berlin.id,
            WindowUpdate {
                enabled: Some(false),
                ..WindowUpdate::default()
            },
            audit("w"),
        )
        .await
        .unwrap();
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "x", "when": "maintenance_window",
                "windowId": berlin.id.to_string(),
                "payload": { "kind": "script", "scriptId": script } }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "disabled window: {r}");

    // Cancelling withdraws both devices' waiting approvals; bare-01 (pending) is skipped.
    o.deployments()
        .control_deployment(did, Control::Cancel, &owner, audit("deployment.cancel"))
        .await
        .unwrap();
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    assert!(
        parts.iter().all(|p| p.status == DeviceRunStatus::Skipped),
        "{parts:?}"
    );
    assert_eq!(commands(&w).await, 0);
}

/// A cancel does not interrupt a run already under way on a device (its approved call claimed
/// and waiting for the agent): the deployment is cancelled at once and starts nothing more,
/// and when the agent answers, the worker still records that device's result; then it stops
/// stepping the deployment.
async fn cancelling_records_runs_already_under_way(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let app = quick_app(&w);
    let exec = exec_key(&w, w.org_a).await;
    let script = script_id(&w, w.org_a).await;
    let second = device(&w, w.org_a, "web-02", true).await;
    let created = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "under-way",
                "payload": { "kind": "script", "scriptId": script },
                "rings": [ { "deviceIds": [w.a_device] }, { "deviceIds": [second] } ] }),
    )
    .await;
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    let did: Uuid = id.parse().unwrap();
    let owner = actor_of(&w, &exec).await;
    start_as(&w, &id, &owner).await;
    let state = quick_state(&w);
    let worker = Arc::new(DeploymentWorker::new(
        w.store.clone(),
        state.pipeline.clone(),
        DeploymentConfig::default(),
    ));
    assert_eq!(tick(&worker).await, 1);
    let o = w.store.org(w.org_a);
    let web = DeviceId(w.a_device.parse().unwrap());
    let part = o
        .deployments()
        .deployment_devices(did, Some(0), None)
        .await
        .unwrap()
        .remove(0);
    let approval = part.approval_id.expect("ring 1 waits for approval");

    // A person approves; the resumer claims the call, which queues the script on web-01 and
    // waits for the agent.
    o.approvals()
        .decide_approval(approval, Decision::Approve, w.admin, None, audit("approve"))
        .await
        .unwrap();
    // Past the few seconds a live waiter gets first: the resumer runs it.
    cx.clock.advance(chrono::Duration::seconds(5));
    let stop = tokio_util::sync::CancellationToken::new();
    let resumer = state.pipeline.spawn_resumer(stop.clone());
    let mut queued = Vec::new();
    for _ in 0..200 {
        queued = o.commands().list_commands(web, 10).await.unwrap();
        if !queued.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(queued.len(), 1, "the approved run reached web-01");
    assert_eq!(
        o.approvals()
            .get_approval(approval)
            .await
            .unwrap()
            .status
            .as_str(),
        "executing"
    );

    // The cancel: too late to withdraw that run; ring 2 is never reached.
    let cancelled = o
        .deployments()
        .control_deployment(did, Control::Cancel, &owner, audit("deployment.cancel"))
        .await
        .unwrap();
    assert_eq!(cancelled.status, DeploymentStatus::Cancelled);
    assert_eq!(
        o.approvals()
            .get_approval(approval)
            .await
            .unwrap()
            .status
            .as_str(),
        "executing"
    );
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    let status_of = |parts: &[breeze_store::DeploymentDevice], d: &str| {
        parts
            .iter()
            .find(|p| p.device_id.to_string() == d)
            .unwrap()
            .clone()
    };
    assert_eq!(
        status_of(&parts, &w.a_device).status,
        DeviceRunStatus::Running
    );
    assert_eq!(status_of(&parts, &second).status, DeviceRunStatus::Skipped);

    // The agent answers; the approved call ends with it.
    let now = w.state.clock.now();
    state
        .gateway
        .handle(
            web,
            w.org_a,
            AgentFrame::CommandResult(CommandResult {
                command_id: queued[0].id,
                status: CommandOutcome::Completed,
                exit_code: Some(0),
                stdout: "deployed\n".into(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                result: None,
                error: None,
                started_at: now,
                finished_at: now,
            }),
        )
        .await
        .unwrap();
    for _ in 0..200 {
        if o.approvals()
            .get_approval(approval)
            .await
            .unwrap()
            .status
            .as_str()
            == "completed"
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    stop.cancel();
    resumer.await.unwrap();
    assert_eq!(
        o.approvals()
            .get_approval(approval)
            .await
            .unwrap()
            .status
            .as_str(),
        "completed"
    );

    // The worker still follows the cancelled deployment: web-01's result is recorded.
    cx.clock.advance(chrono::Duration::seconds(20));
    assert_eq!(
        tick(&worker).await,
        1,
        "the cancelled deployment is followed"
    );
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    let web_part = status_of(&parts, &w.a_device);
    assert_eq!(web_part.status, DeviceRunStatus::Succeeded, "{web_part:?}");
    assert_eq!(web_part.exit_code, Some(0));
    assert!(web_part.finished_at.is_some());
    assert_eq!(status_of(&parts, &second).status, DeviceRunStatus::Skipped);
    let d = get(&w, &id).await;
    assert_eq!(d.status, DeploymentStatus::Cancelled, "{d:?}");
    assert_eq!(commands(&w).await, 1, "nothing else started");
    // Nothing is left running: it is due no more.
    assert_eq!(d.next_step_at, None, "{d:?}");
    cx.clock.advance(chrono::Duration::seconds(20));
    assert_eq!(tick(&worker).await, 0);
    let r = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "device_status", "deploymentId": id }),
    )
    .await;
    assert_eq!(r["deployment"]["status"], "cancelled", "{r}");
}

/// With when=maintenance_window, a device offline while its window is open is not skipped: it
/// stays pending (deferred, saying it was offline) and goes when it is online inside a window —
/// later in the same one, or, when it comes back after the window closed, in the next.
async fn offline_devices_wait_for_a_window_they_are_online_in(cx: Ctx) {
    // Monday 2026-03-02 10:00 UTC; the window is Mondays 10:00-11:00 UTC.
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let app = quick_app(&w);
    let exec = exec_key(&w, w.org_a).await;
    let script = script_id(&w, w.org_a).await;
    let soon = device(&w, w.org_a, "soon-01", false).await;
    let late = device(&w, w.org_a, "late-01", false).await;
    let o = w.store.org(w.org_a);
    let id_of = |s: &str| DeviceId(s.parse().unwrap());
    o.maintenance()
        .create_window(
            window(
                "monday-ten",
                RuleTarget::Organization,
                "UTC",
                json!({ "kind": "weekly", "days": ["mon"], "startTime": "10:00",
                    "durationMinutes": 60 }),
            ),
            audit("w"),
        )
        .await
        .unwrap();
    let created = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "offline-in-window", "when": "maintenance_window",
                "payload": { "kind": "script", "scriptId": script },
                "rings": [ { "deviceIds": [soon, late] } ] }),
    )
    .await;
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    let did: Uuid = id.parse().unwrap();
    let owner = actor_of(&w, &exec).await;
    start_as(&w, &id, &owner).await;
    let worker = worker(&w);
    let part = |parts: &[breeze_store::DeploymentDevice], d: &str| {
        parts
            .iter()
            .find(|p| p.device_id == id_of(d))
            .unwrap()
            .clone()
    };

    // Both offline inside the open window: pending, deferred, nothing asked or sent.
    tick(&worker).await;
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    for d in [&soon, &late] {
        let p = part(&parts, d);
        assert_eq!(p.status, DeviceRunStatus::Pending, "{p:?}");
        assert!(
            p.deferred_reason.as_deref().unwrap().contains("offline"),
            "{p:?}"
        );
    }
    assert_eq!(approvals(&w).await, 0);
    let s = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "device_status", "deploymentId": id }),
    )
    .await;
    assert_eq!(s["deployment"]["status"], "running", "{s}");
    for d in [&soon, &late] {
        let row = s["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["deviceId"] == d.as_str())
            .unwrap();
        assert_eq!(row["status"], "deferred", "{s}");
    }

    // soon-01 comes online inside the window: it goes at the next tick.
    cx.clock.set(at("2026-03-02T10:30:00Z"));
    let hb = breeze_agent_proto::Heartbeat {
        agent_version: "1".into(),
        uptime_secs: 1,
        pending_reboot: false,
        logged_in_users: vec![],
        running_commands: vec![],
        applied_policy: None,
    };
    w.store
        .record_heartbeat(id_of(&soon), w.org_a, &hb)
        .await
        .unwrap();
    tick(&worker).await;
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    let p = part(&parts, &soon);
    assert_eq!(p.status, DeviceRunStatus::Running, "{p:?}");
    assert!(
        p.approval_id.is_some() && p.deferred_reason.is_none(),
        "{p:?}"
    );
    assert_eq!(part(&parts, &late).status, DeviceRunStatus::Pending);

    // late-01 comes back after the window closed: it waits for next Monday's.
    cx.clock.set(at("2026-03-02T11:30:00Z"));
    w.store
        .record_heartbeat(id_of(&late), w.org_a, &hb)
        .await
        .unwrap();
    tick(&worker).await;
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    let p = part(&parts, &late);
    assert_eq!(p.status, DeviceRunStatus::Pending, "{p:?}");
    assert_eq!(p.deferred_until, Some(at("2026-03-09T10:00:00Z")), "{p:?}");
    cx.clock.set(at("2026-03-09T10:01:00Z"));
    w.store
        .record_heartbeat(id_of(&late), w.org_a, &hb)
        .await
        .unwrap();
    tick(&worker).await;
    let parts = o
        .deployments()
        .deployment_devices(did, None, None)
        .await
        .unwrap();
    let p = part(&parts, &late);
    assert_eq!(p.status, DeviceRunStatus::Running, "{p:?}");
    assert!(p.approval_id.is_some(), "{p:?}");
    assert_eq!(
        part(&parts, &soon).status,
        DeviceRunStatus::Running,
        "nobody was skipped: {parts:?}"
    );
}

breeze_store::on_both_backends!(
    cancelling_records_runs_already_under_way,
    offline_devices_wait_for_a_window_they_are_online_in,
    a_write_key_deployment_never_runs,
    an_execute_key_deployment_waits_pauses_on_failure_and_resumes,
    rings_refusals_and_other_organizations,
    a_package_deployment_goes_through_manage_patches,
    cancelling_withdraws_the_approvals_its_runs_wait_for,
    maintenance_window_deployments_wait_for_each_devices_window
);
