//! Patch management: scans replace a device's available patches (agent schedule and command
//! results alike), decisions replace each other per package and scope with audit records and
//! refuse what makes no sense (a past deferral, a foreign policy, option-like names), jobs
//! settle from their devices' results into history that a rollback reads, and nothing of
//! organization B is reachable through A.

use breeze_agent_proto::{
    AvailablePatch, CommandKind, CommandOutcome, CommandResult, PackageOutcome, PatchInstallReport,
    PatchScanReport,
};
use breeze_core::{DeviceId, DeviceStatus, FeatureType, OrgId, PolicyStatus};
use breeze_store::{
    AuditFilter, NewCommand, NewConfigPolicy, NewPatchDecision, NewPatchJob, PatchDecision,
    PatchFilter, PatchJobKind, Store, StoreError, testing::Ctx,
};
use serde_json::json;

use crate::{audit, tenancy::new_device};

fn patch(name: &str, from: &str, to: &str, security: bool) -> AvailablePatch {
    AvailablePatch {
        name: name.into(),
        installed_version: Some(from.into()),
        available_version: to.into(),
        arch: Some("amd64".into()),
        source: Some(if security {
            "Debian-Security:12/stable-security".into()
        } else {
            "Debian:12/stable".into()
        }),
        security,
        severity: security.then(|| "Important".into()),
        advisory: None,
    }
}

fn report(s: &Store, patches: Vec<AvailablePatch>) -> PatchScanReport {
    PatchScanReport {
        manager: "apt".into(),
        scanned_at: s.clock().now(),
        patches,
        reboot_required: false,
        logged_in_users: vec!["alice".into()],
    }
}

async fn device(s: &Store, org: OrgId, name: &str) -> DeviceId {
    let o = s.org(org);
    let site = match o.tenancy().list_sites().await.unwrap().first() {
        Some(site) => site.id,
        None => {
            o.tenancy()
                .create_site("HQ", "UTC", audit("site.create", "site"))
                .await
                .unwrap()
                .id
        }
    };
    o.devices()
        .create_device(
            new_device(site, name, DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap()
        .id
}

/// Queues a command of `kind` for `device` and answers it with `result`.
async fn answer(
    s: &Store,
    org: OrgId,
    device: DeviceId,
    kind: CommandKind,
    status: CommandOutcome,
    result: serde_json::Value,
) -> uuid::Uuid {
    let cmd = s
        .org(org)
        .commands()
        .create_command(
            NewCommand {
                device_id: device,
                kind,
                timeout_secs: 60,
                output_cap_bytes: 1024,
                queue_ttl: chrono::Duration::minutes(5),
                script: None,
                created_by: "test".into(),
            },
            audit("device.command", "device_command"),
        )
        .await
        .unwrap();
    let now = s.clock().now();
    let done = s
        .complete_command(
            device,
            CommandResult {
                command_id: cmd.id,
                status,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                result: Some(result),
                error: (status != CommandOutcome::Completed).then(|| "apt broke".into()),
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap()
        .unwrap();
    s.record_patch_command(&done).await.unwrap();
    cmd.id
}

async fn scans_decisions_jobs_and_history(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let web = device(s, a, "web-01").await;
    let db = device(s, a, "db-01").await;
    let theirs = device(s, b, "b-01").await;

    // The agent's own scan, then a scan command's result: each replaces the device's list.
    s.record_patch_scan(
        web,
        a,
        &report(s, vec![patch("bash", "5.2-1", "5.2-2", false)]),
    )
    .await
    .unwrap();
    let scan = report(
        s,
        vec![
            patch("openssl", "3.0.14", "3.0.15", true),
            patch("libssl3", "3.0.14", "3.0.15", true),
            patch("bash", "5.2-1", "5.2-2", false),
            patch("bad name", "1", "2", false),
        ],
    );
    let cmd = s
        .org(a)
        .commands()
        .create_command(
            NewCommand {
                device_id: web,
                kind: CommandKind::PatchScan,
                timeout_secs: 60,
                output_cap_bytes: 1024,
                queue_ttl: chrono::Duration::minutes(5),
                script: None,
                created_by: "test".into(),
            },
            audit("device.command", "device_command"),
        )
        .await
        .unwrap();
    oa.patches()
        .request_patch_scan(web, cmd.id, "test", audit("patch.scan", "device"))
        .await
        .unwrap();
    assert_eq!(
        oa.patches().patch_scans().await.unwrap()[0].command_id,
        Some(cmd.id)
    );
    let now = s.clock().now();
    let done = s
        .complete_command(
            web,
            CommandResult {
                command_id: cmd.id,
                status: CommandOutcome::Completed,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                result: Some(serde_json::to_value(&scan).unwrap()),
                error: None,
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap()
        .unwrap();
    s.record_patch_command(&done).await.unwrap();
    s.record_patch_scan(
        db,
        a,
        &report(s, vec![patch("bash", "5.2-1", "5.2-2", false)]),
    )
    .await
    .unwrap();
    s.record_patch_scan(
        theirs,
        b,
        &report(s, vec![patch("openssl", "3.0.14", "3.0.15", true)]),
    )
    .await
    .unwrap();

    let all = oa
        .patches()
        .list_device_patches(&PatchFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 4, "a name with a space is dropped: {all:?}");
    assert!(all.iter().all(|p| p.device_id != theirs));
    let scans = oa.patches().patch_scans().await.unwrap();
    let web_scan = scans.iter().find(|s| s.device_id == web).unwrap();
    assert_eq!(
        (
            web_scan.patch_count,
            web_scan.security_count,
            web_scan.command_id
        ),
        (3, 2, None),
        "the answer closes the request"
    );
    assert_eq!(web_scan.logged_in_users, ["alice"]);
    // Filters and keyset pages.
    let security = oa
        .patches()
        .list_device_patches(&PatchFilter {
            security_only: true,
            severity: Some("important".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(security.len(), 2, "{security:?}");
    let first = oa
        .patches()
        .list_device_patches(&PatchFilter {
            limit: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    let last = first.last().unwrap();
    let rest = oa
        .patches()
        .list_device_patches(&PatchFilter {
            after: Some((last.device_id, last.name.clone())),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(first.len() + rest.len(), 4);
    let plan = oa
        .patches()
        .explain_device_patches_after((last.device_id, &last.name))
        .await
        .unwrap();
    assert!(
        plan.contains("device_patches_org")
            && (plan.contains("device_id>") || plan.contains("device_id >=")),
        "a page resumes its index range at the cursor, not at the fleet's first row: {plan}"
    );
    let searched = oa
        .patches()
        .list_device_patches(&PatchFilter {
            search: Some("SSL".into()),
            device: Some(web),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(searched.len(), 2);

    // Decisions: one per package and scope; the latest replaces; deferrals need a future date.
    let decide = |name: &str, decision, until, policy| NewPatchDecision {
        package_name: name.into(),
        version: None,
        policy_id: policy,
        decision,
        defer_until: until,
        note: None,
        decided_by: "test".into(),
    };
    oa.patches()
        .decide_patch(
            decide("openssl", PatchDecision::Declined, None, None),
            audit("patch.decline", "patch_approval"),
        )
        .await
        .unwrap();
    oa.patches()
        .decide_patch(
            decide("openssl", PatchDecision::Approved, None, None),
            audit("patch.approve", "patch_approval"),
        )
        .await
        .unwrap();
    let later = s.clock().now() + chrono::Duration::days(7);
    let deferred = oa
        .patches()
        .decide_patch(
            decide("bash", PatchDecision::Deferred, Some(later), None),
            audit("patch.defer", "patch_approval"),
        )
        .await
        .unwrap();
    assert_eq!(
        deferred.effective("5.2-2", s.clock().now()),
        Some(PatchDecision::Deferred)
    );
    assert_eq!(
        deferred.effective("5.2-2", later),
        None,
        "past its date: no decision"
    );
    let past = s.clock().now() - chrono::Duration::hours(1);
    let e = oa
        .patches()
        .decide_patch(
            decide("bash", PatchDecision::Deferred, Some(past), None),
            audit("patch.defer", "patch_approval"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("deferUntil")),
        "{e}"
    );
    let e = oa
        .patches()
        .decide_patch(
            decide("-oAPT::x", PatchDecision::Approved, None, None),
            audit("patch.approve", "patch_approval"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("packageName")),
        "{e}"
    );
    // A policy scope: A's own policy works, B's is not found.
    let policy = |name: &str| NewConfigPolicy {
        name: name.into(),
        description: None,
        status: PolicyStatus::Active,
        settings: vec![(FeatureType::Patch, json!({ "scanIntervalMinutes": 60 }))],
        created_by: "test".into(),
    };
    let pa = oa
        .config_policies()
        .create_config_policy(policy("ring-1"), audit("c", "config_policy"))
        .await
        .unwrap();
    let pb = ob
        .config_policies()
        .create_config_policy(policy("ring-b"), audit("c", "config_policy"))
        .await
        .unwrap();
    oa.patches()
        .decide_patch(
            decide("bash", PatchDecision::Approved, None, Some(pa.id)),
            audit("patch.approve", "patch_approval"),
        )
        .await
        .unwrap();
    let e = oa
        .patches()
        .decide_patch(
            decide("bash", PatchDecision::Approved, None, Some(pb.id)),
            audit("patch.approve", "patch_approval"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, StoreError::NotFound("configuration policy")),
        "{e}"
    );
    let approvals = oa.patches().list_patch_approvals().await.unwrap();
    assert_eq!(approvals.len(), 3, "{approvals:?}");
    assert!(
        ob.patches()
            .list_patch_approvals()
            .await
            .unwrap()
            .is_empty()
    );
    let page = oa
        .audit()
        .query_audit(
            &AuditFilter {
                action: Some("patch.approve".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(page.records.len(), 2, "every decision is audited");

    // A job: B's device cannot be named; A's job settles from its devices' results.
    let e = oa
        .patches()
        .create_patch_job(
            NewPatchJob {
                kind: PatchJobKind::Install,
                reboot_policy: "never".into(),
                reboot_with_users: false,
                window: None,
                devices: vec![(theirs, json!(["openssl"]))],
                requested_by: "test".into(),
            },
            audit("patch.install", "patch_job"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound("device")), "{e}");
    let job = oa
        .patches()
        .create_patch_job(
            NewPatchJob {
                kind: PatchJobKind::Install,
                reboot_policy: "if_needed".into(),
                reboot_with_users: false,
                window: None,
                devices: vec![(web, json!(["openssl", "libssl3"])), (db, json!(["bash"]))],
                requested_by: "test".into(),
            },
            audit("patch.install", "patch_job"),
        )
        .await
        .unwrap();
    assert_eq!(job.status.as_str(), "running");
    assert!(
        ob.patches().get_patch_job(job.id).await.is_err(),
        "B cannot read A's job"
    );
    let install = CommandKind::PatchInstall {
        packages: vec!["openssl".into(), "libssl3".into()],
        reboot: breeze_agent_proto::RebootMode::IfNeeded,
        reboot_with_users: false,
        reboot_delay_minutes: 5,
    };
    let outcome = |name: &str, status: &str| PackageOutcome {
        name: name.into(),
        status: status.parse().unwrap(),
        from_version: Some("3.0.14".into()),
        to_version: (status == "installed").then(|| "3.0.15".into()),
        error: None,
    };
    let result = PatchInstallReport {
        manager: "apt".into(),
        packages: vec![
            outcome("openssl", "installed"),
            outcome("libssl3", "failed"),
        ],
        reboot_required: true,
        reboot: "deferred_users_logged_in".into(),
        reboot_detail: Some("not rebooted: a user is logged in (alice)".into()),
        scan: Some(report(s, vec![patch("libssl3", "3.0.14", "3.0.15", true)])),
    };
    // The command is tied to the part before the agent answers.
    let web_cmd = s
        .org(a)
        .commands()
        .create_command(
            NewCommand {
                device_id: web,
                kind: install.clone(),
                timeout_secs: 60,
                output_cap_bytes: 1024,
                queue_ttl: chrono::Duration::minutes(5),
                script: None,
                created_by: "test".into(),
            },
            audit("device.command", "device_command"),
        )
        .await
        .unwrap();
    oa.patches()
        .patch_part_sent(job.id, web, Ok(web_cmd.id))
        .await
        .unwrap();
    oa.patches()
        .patch_part_sent(job.id, db, Err("device offline".into()))
        .await
        .unwrap();
    let now = s.clock().now();
    let done = s
        .complete_command(
            web,
            CommandResult {
                command_id: web_cmd.id,
                status: CommandOutcome::Completed,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                result: Some(serde_json::to_value(&result).unwrap()),
                error: None,
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap()
        .unwrap();
    s.record_patch_command(&done).await.unwrap();
    // A repeated result changes nothing.
    s.record_patch_command(&done).await.unwrap();
    let (job, parts) = oa.patches().get_patch_job(job.id).await.unwrap();
    assert_eq!(job.status.as_str(), "partial", "{parts:?}");
    let web_part = parts.iter().find(|p| p.device_id == web).unwrap();
    assert_eq!(web_part.status.as_str(), "partial");
    assert_eq!(web_part.reboot.as_deref(), Some("deferred_users_logged_in"));
    assert_eq!(web_part.results.as_ref().unwrap()[0]["status"], "installed");
    let db_part = parts.iter().find(|p| p.device_id == db).unwrap();
    assert_eq!(
        (db_part.status.as_str(), db_part.error.as_deref()),
        ("failed", Some("device offline"))
    );
    // The scan made after the install replaced the device's list.
    let left = oa
        .patches()
        .list_device_patches(&PatchFilter {
            device: Some(web),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].name, "libssl3");
    // History, and what a rollback goes back to.
    let history = oa
        .patches()
        .patch_history(Some(web), None, 10)
        .await
        .unwrap();
    assert_eq!(history.len(), 2);
    assert!(
        ob.patches()
            .patch_history(None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let previous = oa
        .patches()
        .previous_versions(web, &["openssl".into(), "libssl3".into()])
        .await
        .unwrap();
    assert_eq!(previous.get("openssl").map(String::as_str), Some("3.0.14"));
    assert!(!previous.contains_key("libssl3"), "it never installed");
    assert!(
        ob.patches()
            .previous_versions(web, &["openssl".into()])
            .await
            .unwrap()
            .is_empty(),
        "B reads nothing of A's device"
    );

    // A failed rollback command fails its part and the job.
    let rollback = oa
        .patches()
        .create_patch_job(
            NewPatchJob {
                kind: PatchJobKind::Rollback,
                reboot_policy: "never".into(),
                reboot_with_users: false,
                window: None,
                devices: vec![(web, json!([{ "name": "openssl", "version": "3.0.14" }]))],
                requested_by: "test".into(),
            },
            audit("patch.rollback", "patch_job"),
        )
        .await
        .unwrap();
    let kind = CommandKind::PatchRollback {
        packages: vec![breeze_agent_proto::PackageVersion {
            name: "openssl".into(),
            version: "3.0.14".into(),
        }],
        reboot: breeze_agent_proto::RebootMode::Never,
        reboot_with_users: false,
        reboot_delay_minutes: 0,
    };
    let cmd = s
        .org(a)
        .commands()
        .create_command(
            NewCommand {
                device_id: web,
                kind: kind.clone(),
                timeout_secs: 60,
                output_cap_bytes: 1024,
                queue_ttl: chrono::Duration::minutes(5),
                script: None,
                created_by: "test".into(),
            },
            audit("device.command", "device_command"),
        )
        .await
        .unwrap();
    oa.patches()
        .patch_part_sent(rollback.id, web, Ok(cmd.id))
        .await
        .unwrap();
    let now = s.clock().now();
    let done = s
        .complete_command(
            web,
            CommandResult {
                command_id: cmd.id,
                status: CommandOutcome::Failed,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                result: None,
                error: Some("dpkg was interrupted".into()),
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap()
        .unwrap();
    s.record_patch_command(&done).await.unwrap();
    let (rollback, parts) = oa.patches().get_patch_job(rollback.id).await.unwrap();
    assert_eq!(rollback.status.as_str(), "failed");
    assert_eq!(parts[0].error.as_deref(), Some("dpkg was interrupted"));

    // A failed scan keeps the old list and says why.
    answer(
        s,
        a,
        db,
        CommandKind::PatchScan,
        CommandOutcome::Failed,
        json!(null),
    )
    .await;
    let db_scan = oa
        .patches()
        .patch_scans()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.device_id == db)
        .unwrap();
    assert_eq!(db_scan.patch_count, 1);
}

async fn scheduled_jobs_wait_and_cancel(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let oa = s.org(a);
    let web = device(s, a, "web-01").await;
    let window = uuid::Uuid::now_v7();
    let job = oa
        .patches()
        .create_patch_job(
            NewPatchJob {
                kind: PatchJobKind::Install,
                reboot_policy: "always".into(),
                reboot_with_users: true,
                window: Some((window, "Sunday night".into())),
                devices: vec![(web, json!(["bash"]))],
                requested_by: "test".into(),
            },
            audit("patch.install", "patch_job"),
        )
        .await
        .unwrap();
    assert_eq!(job.status.as_str(), "scheduled");
    let scheduled = s.cross_org().scheduled_patch_jobs().await.unwrap();
    assert_eq!(scheduled.len(), 1);
    assert_eq!(scheduled[0].window_name.as_deref(), Some("Sunday night"));
    // B cannot cancel it; A can, once.
    assert!(matches!(
        s.org(b)
            .patches()
            .cancel_patch_job(job.id, audit("patch.job.cancel", "patch_job"))
            .await,
        Err(StoreError::NotFound("patch job"))
    ));
    assert!(
        oa.patches()
            .cancel_patch_job(job.id, audit("patch.job.cancel", "patch_job"))
            .await
            .unwrap()
    );
    assert!(
        !oa.patches()
            .cancel_patch_job(job.id, audit("patch.job.cancel", "patch_job"))
            .await
            .unwrap()
    );
    let (job, parts) = oa.patches().get_patch_job(job.id).await.unwrap();
    assert_eq!(job.status.as_str(), "cancelled");
    assert_eq!(parts[0].status.as_str(), "skipped");
    assert!(
        s.cross_org()
            .scheduled_patch_jobs()
            .await
            .unwrap()
            .is_empty()
    );
    let e = oa
        .patches()
        .create_patch_job(
            NewPatchJob {
                kind: PatchJobKind::Install,
                reboot_policy: "sometimes".into(),
                reboot_with_users: false,
                window: None,
                devices: vec![(web, json!(["bash"]))],
                requested_by: "test".into(),
            },
            audit("patch.install", "patch_job"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("rebootPolicy")),
        "{e}"
    );
}

/// A removal (no job) is history too: each package the agent answered for, or — no answer —
/// each package the command named, failed with the reason; another organization sees none.
async fn removals_are_history(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let web = device(s, a, "web-01").await;
    let report = PatchInstallReport {
        manager: "apt".into(),
        packages: vec![
            PackageOutcome {
                name: "nginx".into(),
                status: "removed".parse().unwrap(),
                from_version: Some("1.22.1-9".into()),
                to_version: None,
                error: None,
            },
            PackageOutcome {
                name: "curl".into(),
                status: "not_installed".parse().unwrap(),
                from_version: None,
                to_version: None,
                error: None,
            },
        ],
        reboot_required: false,
        reboot: "not_requested".into(),
        reboot_detail: None,
        scan: None,
    };
    answer(
        s,
        a,
        web,
        CommandKind::PackageRemove {
            packages: vec!["nginx".into(), "curl".into()],
        },
        CommandOutcome::Completed,
        serde_json::to_value(&report).unwrap(),
    )
    .await;
    cx.clock.advance(chrono::Duration::seconds(5));
    answer(
        s,
        a,
        web,
        CommandKind::PackageRemove {
            packages: vec!["vim".into()],
        },
        CommandOutcome::Failed,
        json!(null),
    )
    .await;
    let oa = s.org(a);
    let history = oa
        .patches()
        .patch_history(Some(web), None, 10)
        .await
        .unwrap();
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(
        history
            .iter()
            .all(|h| h.action == "remove" && h.job_id.is_none())
    );
    // Newest first: the failed removal, then the two answered packages.
    assert_eq!(
        (history[0].package_name.as_str(), history[0].status.as_str()),
        ("vim", "failed")
    );
    assert_eq!(history[0].error.as_deref(), Some("apt broke"));
    let nginx = oa
        .patches()
        .patch_history(Some(web), Some("nginx"), 10)
        .await
        .unwrap();
    assert_eq!(nginx.len(), 1);
    assert_eq!(nginx[0].status.as_str(), "removed");
    assert_eq!(nginx[0].from_version.as_deref(), Some("1.22.1-9"));
    assert_eq!(
        oa.patches()
            .patch_history(Some(web), Some("curl"), 10)
            .await
            .unwrap()[0]
            .status
            .as_str(),
        "not_installed"
    );
    // A removal is never what a rollback goes back to.
    assert!(
        oa.patches()
            .previous_versions(web, &["nginx".into()])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.org(b)
            .patches()
            .patch_history(None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Severity, security flag, count.
type Tally = (Option<String>, bool, u32);

/// A scan's tallies count its patches by severity (lower-cased, as the patches are stored) and
/// security flag, and the migration that added them counts the stored patches the same way.
async fn tallies_count_as_the_migration_does(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let web = device(s, a, "web-01").await;
    let db = device(s, a, "db-01").await;
    let mut plain = patch("bash", "5.2-1", "5.2-2", false);
    plain.severity = Some("Low".into());
    let mut flagged = patch("sudo", "1.9-1", "1.9-2", true);
    flagged.severity = None;
    let patches = vec![
        patch("openssl", "3.0-1", "3.0-2", true),
        patch("curl", "7.88-1", "7.88-2", true),
        patch("vim", "9.0-1", "9.0-2", false),
        plain,
        flagged,
    ];
    s.record_patch_scan(web, a, &report(s, patches))
        .await
        .unwrap();
    s.record_patch_scan(db, a, &report(s, Vec::new()))
        .await
        .unwrap();
    let tallies = || async {
        let mut scans: Vec<(DeviceId, Vec<Tally>)> = s
            .org(a)
            .patches()
            .patch_scans()
            .await
            .unwrap()
            .into_iter()
            .map(|scan| {
                let mut t: Vec<_> = scan
                    .tallies
                    .into_iter()
                    .map(|t| (t.severity, t.security, t.count))
                    .collect();
                t.sort();
                (scan.device_id, t)
            })
            .collect();
        scans.sort();
        scans
    };
    let written = tallies().await;
    let of_web = &written.iter().find(|(d, _)| *d == web).unwrap().1;
    assert_eq!(
        of_web,
        &[
            (None, false, 1),
            (None, true, 1),
            (Some("important".to_owned()), true, 2),
            (Some("low".to_owned()), false, 1),
        ]
    );
    assert!(written.iter().any(|(d, t)| *d == db && t.is_empty()));

    let migration = match s.backend() {
        breeze_store::Backend::Sqlite => {
            include_str!("../../migrations/sqlite/0068_patch_tallies.sql")
        }
        breeze_store::Backend::Postgres => {
            include_str!("../../migrations/postgres/0068_patch_tallies.sql")
        }
    };
    let backfill = &migration[migration.find("UPDATE").unwrap()..];
    s.raw_execute("UPDATE patch_scans SET tallies = '[]'")
        .await
        .unwrap();
    s.raw_execute(backfill).await.unwrap();
    assert_eq!(tallies().await, written);
}

breeze_store::on_both_backends!(
    scans_decisions_jobs_and_history,
    tallies_count_as_the_migration_does,
    scheduled_jobs_wait_and_cancel,
    removals_are_history
);
