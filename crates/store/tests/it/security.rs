//! Security scans: a scan is recorded once (findings, flagged files and posture snapshot
//! together), old scans are pruned while snapshots stay for trends, quarantine records move
//! only from the state they are in, and another organization reaches none of it.

use breeze_core::{
    Clock, DeviceId, DeviceStatus,
    security::{CheckStatus, FindingSeverity, QuarantineState, ScanStatus},
};
use breeze_store::{
    AuditFilter, NewFinding, NewFlagged, NewPosture, NewQuarantine, OrgStore, SCANS_KEPT,
    ScanOutcome, StoreError, testing::Ctx,
};
use chrono::Duration;
use serde_json::json;
use uuid::Uuid;

use crate::{audit, tenancy::new_device};

async fn device(o: &OrgStore<'_>, name: &str) -> DeviceId {
    let site = o
        .tenancy()
        .create_site(name, "UTC", audit("s", "site"))
        .await
        .unwrap();
    o.devices()
        .create_device(
            new_device(site.id, name, DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap()
        .id
}

fn outcome(score: i64) -> ScanOutcome {
    ScanOutcome {
        status: ScanStatus::Completed,
        error: None,
        privileged: Some(false),
        findings: vec![
            NewFinding {
                check: "firewall".into(),
                status: CheckStatus::Fail,
                severity: FindingSeverity::High,
                title: "No host firewall".into(),
                evidence: json!({ "source": "kernel" }),
            },
            NewFinding {
                check: "ssh_root_login".into(),
                status: CheckStatus::Unknown,
                severity: FindingSeverity::Medium,
                title: "unreadable".into(),
                evidence: json!({}),
            },
        ],
        flagged: vec![NewFlagged {
            path: "/usr/local/bin/tool".into(),
            reason: "world-writable executable".into(),
            check: "world_writable".into(),
            severity: FindingSeverity::High,
            sha256: Some("a".repeat(64)),
            mode: "0777".into(),
            uid: 0,
            gid: 0,
            size_bytes: 12,
        }],
        posture: Some(NewPosture {
            score,
            risk_level: "high".into(),
            factors: json!([{ "factor": "firewall", "score": 0 }]),
        }),
    }
}

async fn scans_findings_quarantine_and_confinement(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let da = device(&oa, "web-a").await;
    let db = device(&ob, "web-b").await;

    // Another organization's device cannot be scanned from here.
    let e = oa
        .security()
        .create_security_scan(
            db,
            Uuid::now_v7(),
            "key:x",
            audit("security_scan.start", "s"),
        )
        .await;
    assert!(matches!(e, Err(StoreError::NotFound(_))), "{e:?}");

    let scan = oa
        .security()
        .create_security_scan(
            da,
            Uuid::now_v7(),
            "key:x",
            audit("security_scan.start", "s"),
        )
        .await
        .unwrap();
    assert_eq!(scan.status, ScanStatus::Running);
    assert_eq!(scan.requested_by, "key:x");
    let running = oa
        .security()
        .list_security_scans(Some(da), Some(ScanStatus::Running), 10)
        .await
        .unwrap();
    assert_eq!(running.len(), 1);
    assert!(
        oa.security()
            .latest_completed_scan(da)
            .await
            .unwrap()
            .is_none()
    );

    // B cannot read nor record A's scan.
    assert!(matches!(
        ob.security().get_security_scan(scan.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.security().record_scan_result(scan.id, outcome(40)).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        ob.security()
            .list_security_scans(None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Recorded once, whoever notices first.
    cx.clock.advance(Duration::seconds(30));
    assert!(
        oa.security()
            .record_scan_result(scan.id, outcome(40))
            .await
            .unwrap()
    );
    assert!(
        !oa.security()
            .record_scan_result(scan.id, outcome(90))
            .await
            .unwrap()
    );
    let done = oa.security().get_security_scan(scan.id).await.unwrap();
    assert_eq!(done.status, ScanStatus::Completed);
    assert_eq!(done.privileged, Some(false));
    assert!(done.finished_at.is_some());
    let findings = oa.security().scan_findings(scan.id).await.unwrap();
    assert_eq!(findings.len(), 2);
    assert_eq!(findings[0].check, "firewall");
    assert_eq!(findings[0].status, CheckStatus::Fail);
    assert_eq!(findings[0].evidence["source"], "kernel");
    assert!(
        ob.security()
            .scan_findings(scan.id)
            .await
            .unwrap()
            .is_empty()
    );
    let flagged = oa.security().scan_flagged_files(scan.id).await.unwrap();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0].mode, "0777");
    assert!(matches!(
        ob.security().get_flagged_file(flagged[0].id).await,
        Err(StoreError::NotFound(_))
    ));
    let snaps = oa
        .security()
        .posture_snapshots(Some(da), cx.clock.now() - Duration::days(1), 10)
        .await
        .unwrap();
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0].score, 40, "the second record wrote nothing");
    assert!(ob.security().latest_postures().await.unwrap().is_empty());
    assert_eq!(
        oa.security()
            .latest_completed_scan(da)
            .await
            .unwrap()
            .map(|s| s.id),
        Some(scan.id)
    );

    // A failed scan records no posture.
    let failed = oa
        .security()
        .create_security_scan(
            da,
            Uuid::now_v7(),
            "key:x",
            audit("security_scan.start", "s"),
        )
        .await
        .unwrap();
    let mut o = outcome(0);
    o.status = ScanStatus::Failed;
    o.error = Some("unknown command".into());
    o.posture = None;
    o.findings.clear();
    o.flagged.clear();
    assert!(
        oa.security()
            .record_scan_result(failed.id, o)
            .await
            .unwrap()
    );
    assert_eq!(
        oa.security()
            .get_security_scan(failed.id)
            .await
            .unwrap()
            .error
            .as_deref(),
        Some("unknown command")
    );
    assert_eq!(
        oa.security().latest_postures().await.unwrap()[0].scan_id,
        scan.id
    );

    // Quarantine: recorded with its audit, moved only from its state, unreachable from B.
    let new = NewQuarantine {
        device_id: da,
        flagged_id: Some(flagged[0].id),
        agent_ref: Uuid::now_v7().to_string(),
        original_path: flagged[0].path.clone(),
        sha256: "a".repeat(64),
        mode: "0777".into(),
        uid: 0,
        gid: 0,
        size_bytes: 12,
        state: QuarantineState::Quarantined,
        created_by: "key:x".into(),
    };
    let mut foreign = new.clone();
    foreign.device_id = db;
    assert!(matches!(
        oa.security()
            .record_quarantine(foreign, audit("q", "q"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    let q = oa
        .security()
        .record_quarantine(new.clone(), audit("security_scan.quarantine", "q"))
        .await
        .unwrap();
    assert_eq!(q.state, QuarantineState::Quarantined);
    assert!(matches!(
        oa.security().record_quarantine(new, audit("q", "q")).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        ob.security().get_quarantine(q.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.security()
            .set_quarantine_state(
                q.id,
                QuarantineState::Quarantined,
                QuarantineState::Restored,
                "b",
                audit("q", "q")
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
    let restored = oa
        .security()
        .set_quarantine_state(
            q.id,
            QuarantineState::Quarantined,
            QuarantineState::Restored,
            "key:y",
            audit("security_scan.restore", "q"),
        )
        .await
        .unwrap();
    assert_eq!(restored.state, QuarantineState::Restored);
    assert_eq!(restored.updated_by, "key:y");
    assert!(matches!(
        oa.security()
            .set_quarantine_state(
                q.id,
                QuarantineState::Quarantined,
                QuarantineState::Removed,
                "key:y",
                audit("q", "q")
            )
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        oa.security()
            .list_quarantine(Some(da), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        ob.security()
            .list_quarantine(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    for action in [
        "security_scan.start",
        "security_scan.quarantine",
        "security_scan.restore",
    ] {
        let filter = AuditFilter {
            action: Some(action.into()),
            ..Default::default()
        };
        let page = oa.audit().query_audit(&filter, None, 10).await.unwrap();
        assert!(!page.records.is_empty(), "{action} not audited");
    }
}

async fn old_scans_are_pruned_snapshots_stay(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let oa = s.org(a);
    let d = device(&oa, "web").await;
    let start = cx.clock.now();
    let total = SCANS_KEPT + 3;
    for i in 0..total {
        cx.clock.advance(Duration::minutes(1));
        let scan = oa
            .security()
            .create_security_scan(d, Uuid::now_v7(), "k", audit("security_scan.start", "s"))
            .await
            .unwrap();
        assert!(
            oa.security()
                .record_scan_result(scan.id, outcome(i))
                .await
                .unwrap()
        );
    }
    let scans = oa
        .security()
        .list_security_scans(Some(d), None, 100)
        .await
        .unwrap();
    assert_eq!(scans.len() as i64, SCANS_KEPT);
    let snaps = oa
        .security()
        .posture_snapshots(Some(d), start, 1000)
        .await
        .unwrap();
    assert_eq!(snaps.len() as i64, total, "snapshots outlive their scans");
    assert!(snaps.windows(2).all(|w| w[0].taken_at <= w[1].taken_at));
    let latest = oa.security().latest_postures().await.unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].score, total - 1);
    // The window bounds the trend.
    let recent = oa
        .security()
        .posture_snapshots(Some(d), cx.clock.now() - Duration::seconds(90), 1000)
        .await
        .unwrap();
    assert_eq!(recent.len(), 2);
}

breeze_store::on_both_backends!(
    scans_findings_quarantine_and_confinement,
    old_scans_are_pruned_snapshots_stay
);
