//! Compliance policies: lifecycle with audit and confinement (another organization's policy,
//! device, group and script are not found), inventory evaluation over a whole policy and
//! incrementally when a device's inventory changes (only changes are written; status changes
//! are history), agent checks folded in from their command, the evaluation lease (one claim per
//! period), and remediations (refused without a script or a non-compliant device, one open at
//! a time, claimed once).

use std::collections::BTreeMap;

use breeze_agent_proto::{CommandKind, CommandOutcome, CommandResult, Inventory};
use breeze_core::{
    ComplianceRule, ComplianceState, DeviceId, DeviceStatus, OrgId, PolicyEnforcement, RunStatus,
};
use breeze_store::{
    AuditFilter, CompliancePolicyUpdate, NewCommand, NewCompliancePolicy, NewScript,
    RemediationUpdate, RuleTarget, Store, StoreError, testing::Ctx,
};
use serde_json::json;

use crate::{audit, tenancy::new_device};

fn inventory(s: &Store, packages: &[(&str, &str)]) -> Inventory {
    let v = json!({
        "collectedAt": s.clock().now(), "hostname": "h",
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12", "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 2, "logicalCores": 4 },
        "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
        "packages": packages.iter().map(|(n, v)| json!({ "name": n, "version": v })).collect::<Vec<_>>(),
    });
    serde_json::from_value(v).unwrap()
}

fn policy(name: &str, rules: Vec<ComplianceRule>) -> NewCompliancePolicy {
    NewCompliancePolicy {
        name: name.into(),
        description: None,
        rules,
        target: RuleTarget::Organization,
        enforcement: PolicyEnforcement::Monitor,
        remediation_script: None,
        remediation_parameters: BTreeMap::new(),
        active: true,
        owner_actor: "api_key:k1".into(),
        evaluate_every_minutes: 60,
    }
}

fn openssl_rules() -> Vec<ComplianceRule> {
    vec![
        ComplianceRule::PackageInstalled {
            name: "openssl".into(),
        },
        ComplianceRule::PackageMinVersion {
            name: "openssl".into(),
            min_version: "3.0.11".into(),
        },
    ]
}

async fn devices(s: &Store, org: OrgId, n: usize) -> Vec<DeviceId> {
    let o = s.org(org);
    let site = o
        .tenancy()
        .create_site("HQ", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let d = o
            .devices()
            .create_device(
                new_device(site.id, &format!("h{i}"), DeviceStatus::Online),
                audit("d", "device"),
            )
            .await
            .unwrap();
        out.push(d.id);
    }
    out
}

async fn actions(s: &Store, org: OrgId) -> Vec<String> {
    s.org(org)
        .audit()
        .query_audit(&AuditFilter::default(), None, 200)
        .await
        .unwrap()
        .records
        .into_iter()
        .map(|r| r.event.action)
        .collect()
}

async fn policies_lifecycle_and_confinement(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let dev_b = devices(s, b, 1).await[0];
    let group_b = ob
        .tenancy()
        .create_group("g", None, None, audit("g", "group"))
        .await
        .unwrap();
    let script_b = ob
        .scripts()
        .create_script(
            NewScript {
                name: "fix".into(),
                description: String::new(),
                language: "bash".into(),
                category: "general".into(),
                body: "true".into(),
                parameters: vec![],
                created_by: "t".into(),
            },
            audit("script.create", "script"),
        )
        .await
        .unwrap();

    let p = oa
        .compliance()
        .create_compliance_policy(
            policy("ssl", openssl_rules()),
            audit("compliance_policy.create", "p"),
        )
        .await
        .unwrap();
    assert!(p.active && p.next_evaluation_at.is_some(), "due at once");
    // Another organization's device, group or script names nothing here.
    for target in [RuleTarget::Device(dev_b), RuleTarget::Group(group_b.id)] {
        let mut n = policy("x", openssl_rules());
        n.target = target;
        let e = oa
            .compliance()
            .create_compliance_policy(n, audit("c", "p"))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::NotFound(_)), "{e:?}");
    }
    let mut n = policy("y", openssl_rules());
    n.remediation_script = Some(script_b.id);
    assert!(matches!(
        oa.compliance()
            .create_compliance_policy(n, audit("c", "p"))
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));
    // Validation names the field.
    let bad = policy(
        "z",
        vec![ComplianceRule::FileSha256 {
            path: "/etc/x".into(),
            sha256: "nothex".into(),
        }],
    );
    let e = oa
        .compliance()
        .create_compliance_policy(bad, audit("c", "p"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("rules[0].sha256"), "{e}");
    let mut n = policy("r", openssl_rules());
    n.enforcement = PolicyEnforcement::Remediate;
    let e = oa
        .compliance()
        .create_compliance_policy(n, audit("c", "p"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("remediationScriptId"), "{e}");
    assert!(matches!(
        oa.compliance()
            .create_compliance_policy(policy("ssl", openssl_rules()), audit("c", "p"))
            .await
            .unwrap_err(),
        StoreError::Conflict(_)
    ));

    // B reaches none of A's policy.
    assert!(matches!(
        ob.compliance().get_compliance_policy(p.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        ob.compliance()
            .list_compliance_policies()
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        ob.compliance()
            .update_compliance_policy(p.id, CompliancePolicyUpdate::default(), audit("u", "p"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.compliance()
            .delete_compliance_policy(p.id, audit("d", "p"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.compliance()
            .queue_remediation(p.id, None, "api_key:x", audit("q", "p"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        ob.compliance()
            .compliance_statuses(Some(p.id), None, None, 100)
            .await
            .unwrap()
            .is_empty()
    );

    let off = oa
        .compliance()
        .update_compliance_policy(
            p.id,
            CompliancePolicyUpdate {
                active: Some(false),
                ..Default::default()
            },
            audit("compliance_policy.deactivate", "p"),
        )
        .await
        .unwrap();
    assert!(!off.active && off.next_evaluation_at.is_none());
    oa.compliance()
        .delete_compliance_policy(p.id, audit("compliance_policy.delete", "p"))
        .await
        .unwrap();
    assert!(matches!(
        oa.compliance().get_compliance_policy(p.id).await,
        Err(StoreError::NotFound(_))
    ));
    let done = actions(s, a).await;
    for want in [
        "compliance_policy.create",
        "compliance_policy.deactivate",
        "compliance_policy.delete",
    ] {
        assert!(done.iter().any(|x| x == want), "{want} in {done:?}");
    }
}

async fn inventory_rules_evaluate_fully_and_incrementally(cx: Ctx) {
    let s = &cx.store;
    let (a, _b) = crate::two_orgs(s).await;
    let o = s.org(a);
    let d = devices(s, a, 3).await;
    s.record_inventory(
        d[0],
        a,
        &inventory(s, &[("openssl", "3.0.15-1~deb12u1"), ("bash", "5.2")]),
    )
    .await
    .unwrap();
    s.record_inventory(d[1], a, &inventory(s, &[("bash", "5.2")]))
        .await
        .unwrap();
    // d[2] has no inventory.
    let p = o
        .compliance()
        .create_compliance_policy(policy("ssl", openssl_rules()), audit("c", "p"))
        .await
        .unwrap();
    let r = o
        .compliance()
        .evaluate_policy_inventory(&p, None)
        .await
        .unwrap();
    assert_eq!((r.devices, r.changed, r.status_changes), (3, 3, 3));
    assert_eq!((r.compliant, r.non_compliant, r.unknown), (1, 1, 1));
    let pid = p.id;
    let status = |dev: DeviceId| {
        let o = s.org(a);
        async move {
            o.compliance()
                .compliance_statuses(Some(pid), Some(dev), None, 10)
                .await
                .unwrap()
                .pop()
                .unwrap()
        }
    };
    assert_eq!(status(d[0]).await.status, ComplianceState::Compliant);
    let d1 = status(d[1]).await;
    assert_eq!(d1.status, ComplianceState::NonCompliant);
    assert_eq!(d1.results[0].passed, Some(false));
    assert!(
        d1.results[0].detail.contains("not installed"),
        "{:?}",
        d1.results
    );
    assert_eq!(status(d[2]).await.status, ComplianceState::Unknown);

    // Nothing changed: nothing is written.
    let again = o
        .compliance()
        .evaluate_policy_inventory(&p, None)
        .await
        .unwrap();
    assert_eq!((again.changed, again.status_changes), (0, 0));

    // An inventory change re-decides that device alone, through record_inventory.
    s.record_inventory(d[1], a, &inventory(s, &[("openssl", "3.0.2-0ubuntu1")]))
        .await
        .unwrap();
    let d1 = status(d[1]).await;
    assert_eq!(d1.status, ComplianceState::NonCompliant, "{:?}", d1.results);
    assert_eq!(d1.results[0].passed, Some(true));
    assert_eq!(d1.results[1].passed, Some(false), "3.0.2 < 3.0.11");
    s.record_inventory(d[1], a, &inventory(s, &[("openssl", "3.0.13")]))
        .await
        .unwrap();
    assert_eq!(status(d[1]).await.status, ComplianceState::Compliant);
    let history = o
        .compliance()
        .compliance_history(Some(p.id), Some(d[1]), 10)
        .await
        .unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(
        history[0].from_status.map(|s| s.as_str()),
        Some("non_compliant")
    );
    assert_eq!(history[0].to_status.as_str(), "compliant");
    let summary = o.compliance().compliance_summary().await.unwrap();
    assert_eq!(summary.len(), 1);
    assert_eq!(
        (
            summary[0].compliant,
            summary[0].non_compliant,
            summary[0].unknown
        ),
        (2, 0, 1)
    );

    // A narrower target drops the devices it no longer covers.
    let p = o
        .compliance()
        .update_compliance_policy(
            p.id,
            CompliancePolicyUpdate {
                target: Some(RuleTarget::Device(d[0])),
                ..Default::default()
            },
            audit("u", "p"),
        )
        .await
        .unwrap();
    assert!(
        o.compliance()
            .compliance_statuses(Some(p.id), None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let r = o
        .compliance()
        .evaluate_policy_inventory(&p, None)
        .await
        .unwrap();
    assert_eq!((r.devices, r.compliant), (1, 1));

    // The lease: one claim per period.
    let due = p.next_evaluation_at.unwrap();
    assert_eq!(
        s.cross_org()
            .due_compliance_policies(s.clock().now(), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(s.claim_compliance_evaluation(&p, due).await.unwrap());
    assert!(!s.claim_compliance_evaluation(&p, due).await.unwrap());
    assert!(
        s.cross_org()
            .due_compliance_policies(s.clock().now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn agent_checks_fold_in_and_remediations_queue_once(cx: Ctx) {
    let s = &cx.store;
    let (a, _b) = crate::two_orgs(s).await;
    let o = s.org(a);
    let d = devices(s, a, 2).await;
    let script = o
        .scripts()
        .create_script(
            NewScript {
                name: "touch".into(),
                description: String::new(),
                language: "bash".into(),
                category: "general".into(),
                body: "touch /tmp/x".into(),
                parameters: vec![],
                created_by: "t".into(),
            },
            audit("script.create", "script"),
        )
        .await
        .unwrap();
    let rules = vec![
        ComplianceRule::PackageInstalled {
            name: "bash".into(),
        },
        ComplianceRule::FilePresent {
            path: "/tmp/x".into(),
        },
    ];
    let mut n = policy("file", rules);
    n.remediation_script = Some(script.id);
    let p = o
        .compliance()
        .create_compliance_policy(n, audit("c", "p"))
        .await
        .unwrap();
    for dev in &d {
        s.record_inventory(*dev, a, &inventory(s, &[("bash", "5.2")]))
            .await
            .unwrap();
    }
    // The incremental path already wrote both devices; agent rules are not decided yet.
    let rows = o
        .compliance()
        .compliance_statuses(Some(p.id), None, None, 10)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.status == ComplianceState::Unknown));
    assert!(matches!(
        o.compliance()
            .queue_remediation(p.id, None, "api_key:k1", audit("q", "p"))
            .await,
        Err(StoreError::Invalid(_))
    ));

    let (targets, probes) = o
        .compliance()
        .compliance_check_targets(&p, None, 10)
        .await
        .unwrap();
    assert_eq!(targets.len(), 2);
    assert_eq!(probes.len(), 1);
    let mut commands = Vec::new();
    for dev in &targets {
        let cmd = o
            .commands()
            .create_command(
                NewCommand {
                    device_id: *dev,
                    kind: CommandKind::ComplianceCheck {
                        checks: probes.clone(),
                    },
                    timeout_secs: 60,
                    output_cap_bytes: 1024,
                    queue_ttl: chrono::Duration::minutes(5),
                    script: None,
                    created_by: "t".into(),
                },
                audit("compliance.check", "device_command"),
            )
            .await
            .unwrap();
        o.compliance()
            .set_compliance_check(&p, *dev, cmd.id)
            .await
            .unwrap();
        commands.push((*dev, cmd.id));
    }
    // A check outstanding: not sent again.
    assert!(
        o.compliance()
            .compliance_check_targets(&p, None, 10)
            .await
            .unwrap()
            .0
            .is_empty()
    );
    assert!(
        s.cross_org()
            .finished_compliance_checks(10)
            .await
            .unwrap()
            .is_empty()
    );
    let now = s.clock().now();
    for (i, (dev, id)) in commands.iter().enumerate() {
        let passed = i == 0;
        s.complete_command(
            *dev,
            CommandResult {
                command_id: *id,
                status: CommandOutcome::Completed,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                result: Some(json!({ "checks": [{ "passed": passed, "detail": "x" }] })),
                error: None,
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap()
        .unwrap();
    }
    let finished = s.cross_org().finished_compliance_checks(10).await.unwrap();
    assert_eq!(finished.len(), 2);
    for f in finished {
        let cmd = o.commands().get_command(f.check_command_id).await.unwrap();
        o.compliance()
            .fold_compliance_check(&p, f.device_id, &cmd)
            .await
            .unwrap();
    }
    assert!(
        s.cross_org()
            .finished_compliance_checks(10)
            .await
            .unwrap()
            .is_empty()
    );
    let pid = p.id;
    let get = |dev: DeviceId| {
        let o = s.org(a);
        async move {
            o.compliance()
                .compliance_statuses(Some(pid), Some(dev), None, 1)
                .await
                .unwrap()
                .pop()
                .unwrap()
        }
    };
    assert_eq!(get(commands[0].0).await.status, ComplianceState::Compliant);
    let bad = get(commands[1].0).await;
    assert_eq!(bad.status, ComplianceState::NonCompliant);
    assert!(bad.check_command_id.is_none());

    // Remediation: on the non-compliant device only, one open at a time, claimed once.
    let r = o
        .compliance()
        .queue_remediation(
            p.id,
            None,
            "api_key:k1",
            audit("compliance.remediation.queue", "p"),
        )
        .await
        .unwrap();
    assert_eq!(r.device_ids, vec![commands[1].0]);
    assert_eq!(r.status, RunStatus::Queued);
    assert!(matches!(
        o.compliance()
            .queue_remediation(p.id, None, "api_key:k1", audit("q", "p"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    let claimed = s.cross_org().claim_queued_remediations(10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(
        s.cross_org()
            .claim_queued_remediations(10)
            .await
            .unwrap()
            .is_empty()
    );
    let approval = uuid::Uuid::now_v7();
    let waiting = o
        .compliance()
        .update_remediation(
            r.id,
            RemediationUpdate {
                status: RunStatus::PendingApproval,
                approval_ids: vec![approval],
                devices: vec![],
                message: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(waiting.status, RunStatus::PendingApproval);

    // Two instances on one database both see it waiting; each finishes it once its approval
    // is final, and only the first update records anything.
    let other = s.reopen().await.unwrap();
    let seen_here = s
        .cross_org()
        .remediations_awaiting_approval(10)
        .await
        .unwrap();
    let seen_there = other
        .cross_org()
        .remediations_awaiting_approval(10)
        .await
        .unwrap();
    assert_eq!((seen_here.len(), seen_there.len()), (1, 1));
    let end = || RemediationUpdate {
        status: RunStatus::Succeeded,
        approval_ids: vec![approval],
        devices: vec![],
        message: None,
    };
    let (here_org, there_org) = (o.compliance(), other.org(a).compliance());
    let (here, there) = tokio::join!(
        here_org.finish_awaiting_remediation(r.id, end()),
        there_org.finish_awaiting_remediation(r.id, end()),
    );
    let (here, there) = (here.unwrap(), there.unwrap());
    assert!(
        here.is_some() ^ there.is_some(),
        "exactly one instance finishes it: {here:?} {there:?}"
    );
    let finished = here.or(there).unwrap();
    assert_eq!(finished.status, RunStatus::Succeeded);
    assert!(finished.finished_at.is_some());
    // Finished: neither lists it, and a late finish records nothing.
    assert!(
        s.cross_org()
            .remediations_awaiting_approval(10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        o.compliance()
            .finish_awaiting_remediation(r.id, end())
            .await
            .unwrap()
            .is_none()
    );
    other.close().await;
    assert_eq!(
        o.compliance()
            .list_remediations(p.id, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let done = actions(s, a).await;
    for want in [
        "compliance.remediation.queue",
        "compliance.remediation.wait",
        "compliance.remediation.finish",
    ] {
        assert!(done.iter().any(|x| x == want), "{want} in {done:?}");
    }
    assert_eq!(
        done.iter()
            .filter(|x| *x == "compliance.remediation.finish")
            .count(),
        1,
        "one rewrite of the finished remediation: {done:?}"
    );
}

breeze_store::on_both_backends!(
    policies_lifecycle_and_confinement,
    inventory_rules_evaluate_fully_and_incrementally,
    agent_checks_fold_in_and_remediations_queue_once
);
