//! `manage_patches` over MCP, through the whole pipeline.
//!
//! The attacks first: every id of organization B (device, configuration policy, maintenance
//! window, job) answers "not found" from A on every action that names one, B's key sees none
//! of A's patches, a read key cannot decide and a write key cannot install (Tier 3 needs the
//! execute scope and a person's approval, which shows the plan). Then the way an MSP works:
//! scans recorded, list and compliance with decisions (org-wide, per policy, auto-approval by
//! severity), approve / decline / defer / bulk_approve (audited), install of the approved
//! updates with the agent's answer settling the job, rollback to the recorded version, and a
//! job that waits for its maintenance window and starts when it opens.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use breeze_agent_proto::{
    AgentFrame, AvailablePatch, CommandOutcome, CommandResult, PackageOutcome, PatchInstallReport,
    PatchScanReport,
};
use breeze_auth::CreateApiKey;
use breeze_core::{DeviceId, FeatureType, MaintenanceSchedule, PolicyStatus, Scope, ScopeSet};
use breeze_limits::MemoryLimiter;
use breeze_server::{patch_jobs::PatchJobDispatcher, workers::Worker};
use breeze_store::{NewConfigPolicy, NewWindow, RuleTarget, testing::Ctx};
use common::{Unlimited, World, audit, build, code, tool, world};
use serde_json::{Value, json};

const TOOL: &str = "manage_patches";

/// A person (the admin) approves every pending Tier 3 request of `org` while the returned task
/// runs: install and rollback change packages and are never approved automatically.
fn approver(w: &World, org: breeze_core::OrgId) -> tokio::task::JoinHandle<()> {
    let (store, pipeline, admin) = (w.store.clone(), w.state.pipeline.clone(), w.admin);
    tokio::spawn(async move {
        let user = store.get_user(admin).await.unwrap();
        loop {
            for r in store
                .org(org)
                .approvals()
                .list_approvals(true, 10)
                .await
                .unwrap()
            {
                let request = breeze_pipeline::approvals::DecisionRequest {
                    id: r.id,
                    decision: breeze_store::Decision::Approve,
                    reason: None,
                    request_id: None,
                };
                let actor = breeze_core::Actor::new(breeze_core::ActorType::User, admin);
                let _ = breeze_pipeline::approvals::decide(
                    &store,
                    pipeline.registry(),
                    &user,
                    actor,
                    request,
                )
                .await;
                pipeline.approvals().notify_decided();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
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

fn patch(name: &str, from: &str, to: &str, severity: Option<&str>) -> AvailablePatch {
    AvailablePatch {
        name: name.into(),
        installed_version: Some(from.into()),
        available_version: to.into(),
        arch: Some("x86_64".into()),
        source: Some("baseos".into()),
        security: severity.is_some(),
        severity: severity.map(str::to_owned),
        advisory: severity.map(|_| "RLSA-2024:1".into()),
    }
}

async fn seed_scan(w: &World, org: breeze_core::OrgId, device: &str, patches: Vec<AvailablePatch>) {
    let d: DeviceId = device.parse().unwrap();
    w.store
        .record_patch_scan(
            d,
            org,
            &PatchScanReport {
                manager: "dnf".into(),
                scanned_at: w.state.clock.now(),
                patches,
                reboot_required: true,
                logged_in_users: vec!["alice".into()],
            },
        )
        .await
        .unwrap();
}

fn standard() -> Vec<AvailablePatch> {
    vec![
        patch("openssl", "3.0.7-27", "3.0.7-28", Some("important")),
        patch("kernel", "5.14.0-427.37", "5.14.0-427.42", Some("critical")),
        patch("curl", "7.76.1-29", "7.76.1-30", Some("moderate")),
        patch("vim-minimal", "8.2.2637-20", "8.2.2637-21", None),
    ]
}

async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let exec = exec_key(&w, w.org_a).await;
    let ob = w.store.org(w.org_b);
    seed_scan(&w, w.org_a, &w.a_device, standard()).await;
    seed_scan(&w, w.org_b, &w.b_device, standard()).await;
    let b_policy = ob
        .config_policies()
        .create_config_policy(
            NewConfigPolicy {
                name: "B ring".into(),
                description: None,
                status: PolicyStatus::Active,
                settings: vec![(FeatureType::Patch, json!({ "autoApprove": true }))],
                created_by: "test".into(),
            },
            audit("c"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    let now = w.state.clock.now();
    let b_window = ob
        .maintenance()
        .create_window(
            NewWindow {
                name: "B window".into(),
                description: None,
                target: RuleTarget::Organization,
                time_zone: "UTC".into(),
                schedule: MaintenanceSchedule::Once {
                    starts_at: now + chrono::Duration::hours(1),
                    ends_at: now + chrono::Duration::hours(2),
                },
                suppress_alerts: false,
                enabled: true,
                created_by: "test".into(),
            },
            audit("w"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    // B's own job, made through B's key and approved by a person.
    let _b_approver = approver(&w, w.org_b);
    let b_exec = exec_key(&w, w.org_b).await;
    let r = tool(
        app,
        &b_exec,
        TOOL,
        json!({ "action": "install", "deviceIds": [w.b_device], "packageNames": ["openssl"] }),
    )
    .await;
    let b_job = r["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();

    let cases = [
        json!({ "action": "list", "deviceId": w.b_device }),
        json!({ "action": "compliance", "deviceId": w.b_device }),
        json!({ "action": "results", "deviceId": w.b_device }),
        json!({ "action": "results", "jobId": b_job }),
        json!({ "action": "cancel", "jobId": b_job }),
        json!({ "action": "scan", "deviceIds": [w.b_device] }),
        json!({ "action": "scan", "deviceIds": [w.a_device, w.b_device] }),
        json!({ "action": "approve", "packageName": "openssl", "configPolicyId": b_policy }),
        json!({ "action": "bulk_approve", "packageNames": ["openssl"], "configPolicyId": b_policy }),
        json!({ "action": "install", "deviceIds": [w.b_device] }),
        json!({ "action": "install", "deviceIds": [w.a_device, w.b_device], "packageNames": ["openssl"] }),
        json!({ "action": "install", "deviceIds": [w.a_device], "packageNames": ["openssl"],
                "when": "maintenance_window", "windowId": b_window }),
        json!({ "action": "rollback", "deviceIds": [w.b_device], "packageNames": ["openssl"],
                "version": "3.0.7-27" }),
        json!({ "action": "list", "deviceId": "not-a-uuid-but-36-characters-long-xx" }),
    ];
    for args in &cases {
        let r = tool(app, &exec, TOOL, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.ends_with("not found or access denied"), "{message}");
    }
    // Nothing was decided, queued or scheduled in A; B's job is untouched.
    let oa = w.store.org(w.org_a);
    assert!(
        oa.patches()
            .list_patch_approvals()
            .await
            .unwrap()
            .is_empty()
    );
    assert!(oa.patches().list_patch_jobs(10).await.unwrap().is_empty());
    assert!(
        oa.patches().patch_scans().await.unwrap()[0]
            .command_id
            .is_none()
    );
    let (job, _) = ob
        .patches()
        .get_patch_job(b_job.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(job.status.as_str(), "running");
    // B's read key lists B's patches only, and sees none of A's decisions.
    oa.patches()
        .decide_patch(
            breeze_store::NewPatchDecision {
                package_name: "openssl".into(),
                version: None,
                policy_id: None,
                decision: breeze_store::PatchDecision::Approved,
                defer_until: None,
                note: None,
                decided_by: "test".into(),
            },
            audit("patch.approve"),
        )
        .await
        .unwrap();
    // (A fresh limiter: the admin used up the per-user limit above.)
    let fresh = build(&w, |_| {}, Arc::new(MemoryLimiter::new()));
    let r = tool(&fresh, &w.other_org_key, TOOL, json!({ "action": "list" })).await;
    let patches = r["patches"].as_array().unwrap();
    assert_eq!(patches.len(), 4, "{r}");
    assert!(patches.iter().all(|p| p["deviceId"] == w.b_device.as_str()));
    assert!(patches.iter().all(|p| p["decision"] == "pending"), "{r}");
}

async fn tiers_and_bad_inputs_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    seed_scan(&w, w.org_a, &w.a_device, standard()).await;
    // Tier 3 answers "pending" at once here, with the plan for the approver.
    let app = build(
        &w,
        |c| c.approvals.wait = std::time::Duration::ZERO,
        Arc::new(MemoryLimiter::new()),
    );
    let exec = exec_key(&w, w.org_a).await;
    // A read key reads but cannot decide; a write key decides but cannot install.
    let r = tool(
        &app,
        &w.read,
        TOOL,
        json!({ "action": "approve", "packageName": "openssl" }),
    )
    .await;
    assert!(r["rpcError"].is_object() || code(&r) == "FORBIDDEN", "{r}");
    let r = tool(&app, &w.read, TOOL, json!({ "action": "list" })).await;
    assert_eq!(r["showing"], 4, "{r}");
    let install =
        json!({ "action": "install", "deviceIds": [w.a_device], "packageNames": ["openssl"] });
    let r = tool(&app, &w.write, TOOL, install.clone()).await;
    assert!(r["rpcError"].is_object() || !code(&r).is_empty(), "{r}");
    assert!(
        w.store
            .org(w.org_a)
            .patches()
            .list_patch_jobs(5)
            .await
            .unwrap()
            .is_empty()
    );
    // With the execute scope: an approval request naming the plan, nothing sent yet.
    let r = tool(&app, &exec, TOOL, install.clone()).await;
    assert_eq!(r["status"], "pending_approval", "{r}");
    let approval = w
        .store
        .org(w.org_a)
        .approvals()
        .list_approvals(false, 5)
        .await
        .unwrap()
        .remove(0);
    assert!(
        approval
            .description
            .contains("install 1 package(s) on 1 device(s), reboot never"),
        "{}",
        approval.description
    );
    assert!(
        w.store
            .org(w.org_a)
            .patches()
            .list_patch_jobs(5)
            .await
            .unwrap()
            .is_empty()
    );

    for (args, needle) in [
        (
            json!({ "action": "defer", "packageName": "openssl" }),
            "deferUntil",
        ),
        (
            json!({ "action": "defer", "packageName": "openssl", "deferUntil": "tomorrow-ish" }),
            "deferUntil",
        ),
        (
            json!({ "action": "defer", "packageName": "openssl", "deferUntil": "2020-01-01T00:00:00Z" }),
            "not in the future",
        ),
        (json!({ "action": "approve" }), "packageName"),
        (
            json!({ "action": "approve", "packageName": "-oDpkg::x" }),
            "packageName",
        ),
        (json!({ "action": "bulk_approve" }), "packageNames"),
        (json!({ "action": "list", "cursor": "garbage" }), "cursor"),
        (json!({ "action": "list", "limit": 0 }), "limit"),
        (
            json!({ "action": "approve", "packageName": "x", "extra": 1 }),
            "extra",
        ),
    ] {
        let r = tool(&app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{args}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{args}: {message}");
    }
    // Nothing approved yet: an install of "every approved update" has nothing to do.
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "install", "deviceIds": [w.a_device] }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no approved update"),
        "{r}"
    );
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "install", "deviceIds": [w.a_device], "packageNames": ["openssl"],
                "when": "maintenance_window" }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    let r = tool(
        &app,
        &exec,
        TOOL,
        json!({ "action": "rollback", "deviceIds": [w.a_device], "packageNames": ["openssl"] }),
    )
    .await;
    assert_eq!(
        code(&r),
        "INVALID_ARGUMENT",
        "no earlier version is recorded: {r}"
    );
}

fn answer(cmd: uuid::Uuid, report: &PatchInstallReport, now: breeze_core::Timestamp) -> AgentFrame {
    AgentFrame::CommandResult(CommandResult {
        command_id: cmd,
        status: CommandOutcome::Completed,
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        result: Some(serde_json::to_value(report).unwrap()),
        error: None,
        started_at: now,
        finished_at: now,
    })
}

fn decision_of<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["patches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {list}"))
}

async fn decide_install_results_and_rollback(cx: Ctx) {
    let w = world(&cx).await;
    let _approver = approver(&w, w.org_a);
    let app = &w.app;
    let exec = exec_key(&w, w.org_a).await;
    let oa = w.store.org(w.org_a);
    let device: DeviceId = w.a_device.parse().unwrap();
    seed_scan(&w, w.org_a, &w.a_device, standard()).await;

    // Before any decision: everything pending, security updates counted as such.
    let c = tool(app, &w.read, TOOL, json!({ "action": "compliance" })).await;
    assert_eq!(c["summary"]["devices"], 1, "{c}");
    assert_eq!(c["devices"][0]["pendingSecurity"], 3, "{c}");
    assert_eq!(c["devices"][0]["compliant"], false);
    assert_eq!(c["devices"][0]["rebootRequired"], true);
    assert_eq!(c["devices"][0]["loggedInUsers"], json!(["alice"]));
    assert_eq!(c["devices"][0]["critical"], 1);

    // A policy auto-approves critical updates on the organization's devices.
    let ring = oa
        .config_policies()
        .create_config_policy(
            NewConfigPolicy {
                name: "ring".into(),
                description: None,
                status: PolicyStatus::Active,
                settings: vec![(
                    FeatureType::Patch,
                    json!({ "autoApprove": true, "autoApproveSeverities": ["critical"],
                            "rebootDelayMinutes": 10, "scanIntervalMinutes": 60 }),
                )],
                created_by: "test".into(),
            },
            audit("c"),
        )
        .await
        .unwrap();
    let r = tool(
        app,
        &w.write,
        "apply_configuration_policy",
        json!({ "configPolicyId": ring.id, "level": "organization", "targetId": w.org_a }),
    )
    .await;
    assert_eq!(code(&r), "", "{r}");
    // Decisions: approve openssl org-wide, decline vim, defer curl a week; the policy's own
    // decision about curl wins over the organization's on its devices.
    let week = (w.state.clock.now() + chrono::Duration::days(7)).to_rfc3339();
    for args in [
        json!({ "action": "approve", "packageName": "openssl", "note": "CVE-2024-1" }),
        json!({ "action": "decline", "packageName": "vim-minimal" }),
        json!({ "action": "defer", "packageName": "curl", "deferUntil": week }),
    ] {
        let r = tool(app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), "", "{args}: {r}");
        assert_eq!(r["approvals"].as_array().unwrap().len(), 1, "{r}");
    }
    let list = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "list", "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(
        decision_of(&list, "openssl")["decision"],
        "approved",
        "{list}"
    );
    assert_eq!(decision_of(&list, "kernel")["decision"], "auto_approved");
    assert_eq!(decision_of(&list, "vim-minimal")["decision"], "declined");
    assert_eq!(decision_of(&list, "curl")["decision"], "deferred");
    assert_eq!(decision_of(&list, "curl")["deferUntil"], week);
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "approve", "packageName": "curl", "configPolicyId": ring.id.to_string() }),
    )
    .await;
    assert_eq!(code(&r), "", "{r}");
    let list = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "list", "securityOnly": true }),
    )
    .await;
    assert_eq!(list["showing"], 3, "{list}");
    assert_eq!(
        decision_of(&list, "curl")["decision"],
        "approved",
        "the policy's wins"
    );
    // Paging: two per page, the cursor continues, the last page has none.
    let p1 = tool(app, &w.read, TOOL, json!({ "action": "list", "limit": 2 })).await;
    let cursor = p1["nextCursor"].as_str().unwrap();
    let p2 = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "list", "limit": 2, "cursor": cursor }),
    )
    .await;
    assert_eq!(p2["showing"], 2, "{p2}");
    assert!(
        p2.get("nextCursor").is_none() || p2["nextCursor"].is_null(),
        "{p2}"
    );
    let c = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "compliance", "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(c["devices"][0]["missingApproved"], 3, "{c}");
    assert_eq!(c["devices"][0]["pendingSecurity"], 0, "{c}");
    assert_eq!(c["summary"]["topMissing"]["kernel"], 1, "{c}");

    // Install every approved update: openssl, kernel (auto), curl (policy); not vim.
    let r = tool(
        app,
        &exec,
        TOOL,
        json!({ "action": "install", "deviceIds": [w.a_device], "rebootPolicy": "if_needed" }),
    )
    .await;
    assert_eq!(code(&r), "", "{r}");
    let job_id = r["job"]["id"].as_str().unwrap().to_owned();
    assert_eq!(r["job"]["status"], "running", "{r}");
    let part = &r["job"]["devices"][0];
    assert_eq!(part["status"], "sent", "{r}");
    assert_eq!(
        part["packages"],
        json!(["curl", "kernel", "openssl"]),
        "{r}"
    );
    let cmd_id: uuid::Uuid = part["commandId"].as_str().unwrap().parse().unwrap();
    let cmd = oa.commands().get_command(cmd_id).await.unwrap();
    assert_eq!(cmd.kind, "patch_install");
    assert_eq!(cmd.payload["reboot"], "if_needed");
    assert_eq!(cmd.payload["rebootDelayMinutes"], 10, "the policy's delay");
    // The agent answers; the gateway settles the job.
    let outcome = |name: &str, status: &str, from: &str, to: Option<&str>| PackageOutcome {
        name: name.into(),
        status: status.parse().unwrap(),
        from_version: Some(from.into()),
        to_version: to.map(str::to_owned),
        error: (status == "failed").then(|| "dependency problem".into()),
    };
    let report = PatchInstallReport {
        manager: "dnf".into(),
        packages: vec![
            outcome("curl", "installed", "7.76.1-29", Some("7.76.1-30")),
            outcome(
                "kernel",
                "installed",
                "5.14.0-427.37",
                Some("5.14.0-427.42"),
            ),
            outcome("openssl", "installed", "3.0.7-27", Some("3.0.7-28")),
        ],
        reboot_required: true,
        reboot: "deferred_users_logged_in".into(),
        reboot_detail: Some("not rebooted: a user is logged in (alice)".into()),
        scan: Some(PatchScanReport {
            manager: "dnf".into(),
            scanned_at: w.state.clock.now(),
            patches: vec![patch("vim-minimal", "8.2.2637-20", "8.2.2637-21", None)],
            reboot_required: true,
            logged_in_users: vec!["alice".into()],
        }),
    };
    w.state
        .gateway
        .handle(
            device,
            w.org_a,
            answer(cmd_id, &report, w.state.clock.now()),
        )
        .await
        .unwrap();
    let r = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "results", "jobId": job_id }),
    )
    .await;
    assert_eq!(r["job"]["status"], "succeeded", "{r}");
    let part = &r["job"]["devices"][0];
    assert_eq!(part["status"], "succeeded");
    assert_eq!(part["reboot"], "deferred_users_logged_in");
    assert_eq!(part["results"][1]["toVersion"], "5.14.0-427.42");
    let c = tool(app, &w.read, TOOL, json!({ "action": "compliance" })).await;
    assert_eq!(
        c["devices"][0]["compliant"], true,
        "only the declined vim is left: {c}"
    );
    assert_eq!(c["summary"]["compliancePercent"], 100.0);
    let h = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "results", "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(h["history"].as_array().unwrap().len(), 3, "{h}");
    assert_eq!(h["jobs"][0]["id"], job_id.as_str());

    // Roll the kernel back to the recorded version.
    let r = tool(
        app,
        &exec,
        TOOL,
        json!({ "action": "rollback", "deviceIds": [w.a_device], "packageNames": ["kernel", "bash"] }),
    )
    .await;
    assert_eq!(code(&r), "", "{r}");
    assert_eq!(r["job"]["kind"], "rollback");
    assert!(
        r["skipped"][0].as_str().unwrap().contains("bash"),
        "bash never installed here: {r}"
    );
    let cmd_id: uuid::Uuid = r["job"]["devices"][0]["commandId"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let cmd = oa.commands().get_command(cmd_id).await.unwrap();
    assert_eq!(cmd.kind, "patch_rollback");
    assert_eq!(
        cmd.payload["packages"],
        json!([{ "name": "kernel", "version": "5.14.0-427.37" }])
    );

    // Every change is in the audit log.
    for action in [
        "patch.approve",
        "patch.decline",
        "patch.defer",
        "patch.install",
        "patch.rollback",
    ] {
        let records = common::audit_records(&w, w.org_a, action).await;
        assert!(!records.is_empty(), "{action} is audited");
    }
}

/// `bulk_approve` without package names approves each available package the selection
/// matches once, however many devices offer it, and refuses a selection past the cap.
async fn bulk_approve_by_selection(cx: Ctx) {
    let w = world(&cx).await;
    let app = &build(&w, |_| {}, Arc::new(Unlimited));
    let oa = w.store.org(w.org_a);
    let site = oa.tenancy().list_sites().await.unwrap()[0].id;
    let other = oa
        .devices()
        .create_device(
            breeze_store::testing::new_device(site, "host-2", breeze_core::DeviceStatus::Online),
            audit("d"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    seed_scan(
        &w,
        w.org_a,
        &w.a_device,
        vec![
            patch("openssl", "1", "2", Some("critical")),
            patch("kernel", "1", "2", Some("important")),
            patch("vim", "1", "2", None),
            patch("curl", "1", "2", Some("low")),
        ],
    )
    .await;
    seed_scan(
        &w,
        w.org_a,
        &other,
        vec![
            patch("openssl", "1", "2", Some("critical")),
            patch("curl", "1", "2", Some("low")),
            patch("zlib", "1", "2", Some("critical")),
        ],
    )
    .await;
    let approved = |r: &Value| -> Vec<String> {
        r["approvals"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|a| a["packageName"].as_str().unwrap().to_owned())
            .collect()
    };
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "bulk_approve", "securityOnly": true }),
    )
    .await;
    assert_eq!(approved(&r), ["curl", "kernel", "openssl", "zlib"], "{r}");
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "bulk_approve", "severity": "critical" }),
    )
    .await;
    assert_eq!(approved(&r), ["openssl", "zlib"], "{r}");

    // One more distinct package than a bulk approval takes: refused, nothing decided.
    let before = oa.patches().list_patch_approvals().await.unwrap().len();
    let many = (0..=breeze_store::MAX_PATCH_PACKAGES)
        .map(|i| patch(&format!("pkg-{i:04}"), "1", "2", Some("moderate")))
        .collect();
    seed_scan(&w, w.org_a, &other, many).await;
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "bulk_approve", "severity": "moderate" }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("at most 500 packages"), "{message}");
    assert_eq!(
        oa.patches().list_patch_approvals().await.unwrap().len(),
        before
    );
}

/// The fleet's compliance (devices' counts, the summary, the most-missing packages) is exactly
/// what `list` decides patch by patch, summed: over devices under policies that auto-approve
/// every severity, some severities or none, with decisions organization-wide, per policy, for
/// one version only, and a deferral that has run out.
async fn compliance_sums_what_list_decides(cx: Ctx) {
    let w = world(&cx).await;
    // The tool's rate limit is not what this is about.
    let app = &build(&w, |_| {}, Arc::new(Unlimited));
    let oa = w.store.org(w.org_a);
    let site = oa.tenancy().list_sites().await.unwrap()[0].id;
    const NAMES: [&str; 7] = ["openssl", "kernel", "curl", "vim", "zlib", "bash", "sudo"];
    const SEVERITIES: [Option<&str>; 5] = [
        Some("critical"),
        Some("important"),
        Some("moderate"),
        Some("low"),
        None,
    ];
    let mut devices = vec![w.a_device.clone()];
    for i in 1..24 {
        let d = oa
            .devices()
            .create_device(
                breeze_store::NewDevice {
                    os_name: "Rocky".into(),
                    os_version: "9".into(),
                    ..breeze_store::testing::new_device(
                        site,
                        format!("host-{i:02}"),
                        breeze_core::DeviceStatus::Online,
                    )
                },
                audit("d"),
            )
            .await
            .unwrap();
        devices.push(d.id.to_string());
    }
    // Every device but the last two scanned, each with its own mix of packages.
    for (i, d) in devices.iter().enumerate().take(devices.len() - 2) {
        let patches = NAMES
            .iter()
            .enumerate()
            .filter(|(k, _)| (i + k) % 3 != 0)
            .map(|(k, name)| {
                let severity = SEVERITIES[(i * 3 + k) % SEVERITIES.len()];
                let mut p = patch(name, "1.0-1", &format!("1.0-{}", 2 + (i + k) % 2), severity);
                // Some security updates carry no severity, some severities no security flag.
                p.security = (i + k) % 4 != 1 && (severity.is_some() || k == 3);
                p
            })
            .collect();
        seed_scan(&w, w.org_a, d, patches).await;
    }
    // Three policies: auto-approve everything, only critical and important, nothing.
    let mut policies = Vec::new();
    for (name, settings) in [
        ("all", json!({ "autoApprove": true })),
        (
            "urgent",
            json!({ "autoApprove": true, "autoApproveSeverities": ["critical", "important"] }),
        ),
        ("manual", json!({ "autoApprove": false })),
    ] {
        let p = oa
            .config_policies()
            .create_config_policy(
                NewConfigPolicy {
                    name: name.into(),
                    description: None,
                    status: PolicyStatus::Active,
                    settings: vec![(FeatureType::Patch, settings)],
                    created_by: "test".into(),
                },
                audit("c"),
            )
            .await
            .unwrap();
        policies.push(p.id);
    }
    for (i, d) in devices.iter().enumerate() {
        let Some(policy) = policies.get(i % 4) else {
            continue; // every fourth device has no patch policy
        };
        let r = tool(
            app,
            &w.write,
            "apply_configuration_policy",
            json!({ "configPolicyId": policy, "level": "device", "targetId": d }),
        )
        .await;
        assert_eq!(code(&r), "", "{r}");
    }
    let decide = |name: &str, version: Option<&str>, policy: Option<uuid::Uuid>, decision| {
        breeze_store::NewPatchDecision {
            package_name: name.into(),
            version: version.map(str::to_owned),
            policy_id: policy,
            decision,
            defer_until: (decision == breeze_store::PatchDecision::Deferred)
                .then(|| w.state.clock.now() + chrono::Duration::hours(1)),
            note: None,
            decided_by: "test".into(),
        }
    };
    use breeze_store::PatchDecision::{Approved, Declined, Deferred};
    for d in [
        decide("openssl", None, None, Approved),
        decide("curl", Some("1.0-2"), None, Approved),
        decide("vim", None, None, Declined),
        decide("zlib", None, Some(policies[1]), Declined),
        decide("zlib", None, None, Approved),
        decide("bash", None, None, Deferred),
        decide("sudo", None, Some(policies[2]), Deferred),
    ] {
        oa.patches()
            .decide_patch(d, audit("patch.decide"))
            .await
            .unwrap();
    }
    // The deferral of bash runs out; sudo's, on the manual policy, too.
    cx.clock.advance(chrono::Duration::hours(2));

    // What list decides, patch by patch, summed as compliance sums it.
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = json!({ "action": "list", "limit": 20 });
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = tool(app, &w.read, TOOL, args).await;
        rows.extend(page["patches"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert!(rows.len() > 80, "{}", rows.len());
    let mut expected: std::collections::BTreeMap<String, Value> = Default::default();
    let mut top: std::collections::BTreeMap<String, u64> = Default::default();
    for r in &rows {
        let e = expected
            .entry(r["deviceId"].as_str().unwrap().to_owned())
            .or_insert(json!({
                "available": 0, "security": 0, "critical": 0, "important": 0,
                "missingApproved": 0, "pendingSecurity": 0,
            }));
        let mut bump = |field: &str| {
            e[field] = json!(e[field].as_u64().unwrap() + 1);
        };
        bump("available");
        let security = r["security"] == true;
        if security {
            bump("security");
        }
        match r["severity"].as_str() {
            Some("critical") => bump("critical"),
            Some("important") => bump("important"),
            _ => {}
        }
        match r["decision"].as_str().unwrap() {
            "approved" | "auto_approved" => {
                bump("missingApproved");
                *top.entry(r["name"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
            "pending" if security => bump("pendingSecurity"),
            _ => {}
        }
    }
    let decisions: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions.into_iter().collect::<Vec<_>>(),
        ["approved", "auto_approved", "declined", "pending"],
        "the fleet exercises every way of deciding"
    );

    let c = tool(app, &w.read, TOOL, json!({ "action": "compliance" })).await;
    let views = c["devices"].as_array().unwrap();
    assert_eq!(views.len(), devices.len(), "{c}");
    for v in views {
        let id = v["deviceId"].as_str().unwrap();
        let zero = json!({ "available": 0, "security": 0, "critical": 0, "important": 0,
                           "missingApproved": 0, "pendingSecurity": 0 });
        let e = expected.get(id).unwrap_or(&zero);
        for field in [
            "available",
            "security",
            "critical",
            "important",
            "missingApproved",
            "pendingSecurity",
        ] {
            assert_eq!(v[field], e[field], "{field} of {id}: {v}");
        }
        let compliant =
            v["scanned"] == true && e["missingApproved"] == 0 && e["pendingSecurity"] == 0;
        assert_eq!(v["compliant"], compliant, "{v}");
        // One device asked alone answers the same.
        let one = tool(
            app,
            &w.read,
            TOOL,
            json!({ "action": "compliance", "deviceId": id }),
        )
        .await;
        assert_eq!(&one["devices"][0], v, "{one}");
    }
    let sum = |field: &str| -> u64 { expected.values().map(|e| e[field].as_u64().unwrap()).sum() };
    assert_eq!(
        c["summary"]["missingApproved"],
        sum("missingApproved"),
        "{c}"
    );
    assert_eq!(
        c["summary"]["pendingSecurity"],
        sum("pendingSecurity"),
        "{c}"
    );
    assert_eq!(c["summary"]["neverScanned"], 2, "{c}");
    let mut top: Vec<(String, u64)> = top.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(10);
    assert_eq!(
        c["summary"]["topMissing"],
        json!(
            top.into_iter()
                .collect::<std::collections::BTreeMap<_, _>>()
        ),
        "{c}"
    );
}

async fn a_job_waits_for_its_maintenance_window(cx: Ctx) {
    let w = world(&cx).await;
    let _approver = approver(&w, w.org_a);
    let app = &w.app;
    let exec = exec_key(&w, w.org_a).await;
    let oa = w.store.org(w.org_a);
    seed_scan(&w, w.org_a, &w.a_device, standard()).await;
    let now = w.state.clock.now();
    let window = oa
        .maintenance()
        .create_window(
            NewWindow {
                name: "Sunday night".into(),
                description: None,
                target: RuleTarget::Organization,
                time_zone: "UTC".into(),
                schedule: MaintenanceSchedule::Once {
                    starts_at: now + chrono::Duration::hours(2),
                    ends_at: now + chrono::Duration::hours(4),
                },
                suppress_alerts: false,
                enabled: true,
                created_by: "test".into(),
            },
            audit("w"),
        )
        .await
        .unwrap();
    let r = tool(
        app,
        &exec,
        TOOL,
        json!({ "action": "install", "deviceIds": [w.a_device], "packageNames": ["openssl", "nope"],
                "when": "maintenance_window", "windowId": window.id.to_string() }),
    )
    .await;
    assert_eq!(r["job"]["status"], "scheduled", "{r}");
    assert_eq!(r["job"]["windowName"], "Sunday night");
    assert_eq!(r["job"]["devices"][0]["status"], "scheduled");
    assert!(r["skipped"][0].as_str().unwrap().contains("nope"), "{r}");
    let job: uuid::Uuid = r["job"]["id"].as_str().unwrap().parse().unwrap();
    let dispatcher = Arc::new(PatchJobDispatcher::new(
        w.store.clone(),
        w.state.gateway.clone(),
    ));
    // Not open yet: nothing starts.
    assert_eq!(dispatcher.tick().await.unwrap(), 0);
    cx.clock.advance(chrono::Duration::hours(3));
    assert_eq!(dispatcher.tick().await.unwrap(), 1);
    let (job, parts) = oa.patches().get_patch_job(job).await.unwrap();
    assert_eq!(job.status.as_str(), "running");
    assert_eq!(parts[0].status.as_str(), "sent");
    let cmd = oa
        .commands()
        .get_command(parts[0].command_id.unwrap())
        .await
        .unwrap();
    assert_eq!(cmd.payload["packages"], json!(["openssl"]));
    // Started once.
    assert_eq!(dispatcher.tick().await.unwrap(), 0);
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    tiers_and_bad_inputs_are_refused,
    decide_install_results_and_rollback,
    compliance_sums_what_list_decides,
    bulk_approve_by_selection,
    a_job_waits_for_its_maintenance_window
);
