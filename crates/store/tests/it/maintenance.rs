//! Maintenance windows: lifecycle with audit, which windows are open for a device (through its
//! site, its groups, the organization or itself), suppression records kept once per occurrence,
//! and confinement to the organization (another's window, site, group or device is not found).

use breeze_core::{
    DayOfWeek, DeviceStatus, MaintenanceSchedule, Timestamp, maintenance::parse_hhmm,
};
use breeze_store::{NewWindow, RuleTarget, StoreError, WindowUpdate, testing::Ctx};
use chrono::Duration;

use crate::{audit, tenancy::new_device};

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn once(name: &str, target: RuleTarget, from: &str, to: &str) -> NewWindow {
    NewWindow {
        name: name.into(),
        description: None,
        target,
        time_zone: "UTC".into(),
        schedule: MaintenanceSchedule::Once {
            starts_at: at(from),
            ends_at: at(to),
        },
        suppress_alerts: true,
        enabled: true,
        created_by: "test".into(),
    }
}

async fn windows_lifecycle_coverage_and_confinement(cx: Ctx) {
    let s = &cx.store;
    cx.clock.set(at("2026-02-02T10:00:00Z"));
    let (a, b) = crate::two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let branch = oa
        .tenancy()
        .create_site("Branch", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let site_b = ob
        .tenancy()
        .create_site("B", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let web = oa
        .devices()
        .create_device(
            new_device(site.id, "web", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let db = oa
        .devices()
        .create_device(
            new_device(branch.id, "db", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let dev_b = ob
        .devices()
        .create_device(
            new_device(site_b.id, "b", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let group = oa
        .tenancy()
        .create_group("DBs", None, None, audit("g", "g"))
        .await
        .unwrap();
    oa.tenancy().add_to_group(group.id, db.id).await.unwrap();
    let group_b = ob
        .tenancy()
        .create_group("BG", None, None, audit("g", "g"))
        .await
        .unwrap();

    // Another organization's targets are unknown here, and nothing is written.
    for target in [
        RuleTarget::Device(dev_b.id),
        RuleTarget::Site(site_b.id),
        RuleTarget::Group(group_b.id),
    ] {
        let err = oa
            .maintenance()
            .create_window(
                once(
                    "steal",
                    target,
                    "2026-02-02T09:00:00Z",
                    "2026-02-02T11:00:00Z",
                ),
                audit("maintenance_window.create", "w"),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{target:?}: {err}");
    }
    assert!(oa.maintenance().list_windows().await.unwrap().is_empty());

    // Bad schedules and zones are refused.
    let mut bad = once(
        "bad",
        RuleTarget::Organization,
        "2026-02-02T11:00:00Z",
        "2026-02-02T09:00:00Z",
    );
    assert!(matches!(
        oa.maintenance()
            .create_window(bad.clone(), audit("w", "w"))
            .await
            .unwrap_err(),
        StoreError::Invalid(_)
    ));
    bad.schedule = MaintenanceSchedule::Once {
        starts_at: at("2026-02-02T09:00:00Z"),
        ends_at: at("2026-02-02T11:00:00Z"),
    };
    bad.time_zone = "Nowhere/Else".into();
    assert!(matches!(
        oa.maintenance()
            .create_window(bad, audit("w", "w"))
            .await
            .unwrap_err(),
        StoreError::Invalid(_)
    ));

    let site_window = oa
        .maintenance()
        .create_window(
            once(
                "HQ now",
                RuleTarget::Site(site.id),
                "2026-02-02T09:00:00Z",
                "2026-02-02T11:00:00Z",
            ),
            audit("maintenance_window.create", "w"),
        )
        .await
        .unwrap();
    let weekly = oa
        .maintenance()
        .create_window(
            NewWindow {
                name: "DB Mondays".into(),
                description: Some("patching".into()),
                target: RuleTarget::Group(group.id),
                time_zone: "Europe/Lisbon".into(),
                schedule: MaintenanceSchedule::Weekly {
                    days: vec![DayOfWeek::Mon],
                    start_time: parse_hhmm("09:30").unwrap(),
                    duration_minutes: 60,
                },
                suppress_alerts: true,
                enabled: true,
                created_by: "test".into(),
            },
            audit("maintenance_window.create", "w"),
        )
        .await
        .unwrap();
    let b_window = ob
        .maintenance()
        .create_window(
            once(
                "B all",
                RuleTarget::Organization,
                "2026-02-02T00:00:00Z",
                "2026-02-03T00:00:00Z",
            ),
            audit("maintenance_window.create", "w"),
        )
        .await
        .unwrap();
    // Names are unique in an organization.
    assert!(matches!(
        oa.maintenance()
            .create_window(
                once(
                    "HQ now",
                    RuleTarget::Organization,
                    "2026-02-02T09:00:00Z",
                    "2026-02-02T11:00:00Z"
                ),
                audit("w", "w")
            )
            .await
            .unwrap_err(),
        StoreError::Conflict(_)
    ));

    // 2026-02-02 is a Monday; 10:00 UTC is 10:00 in Lisbon (WET): both windows are open.
    let now = s.clock().now();
    let names = |v: Vec<(breeze_store::MaintenanceWindow, breeze_core::Occurrence)>| {
        let mut n: Vec<String> = v.into_iter().map(|(w, _)| w.name).collect();
        n.sort();
        n
    };
    assert_eq!(
        names(
            oa.maintenance()
                .open_windows(RuleTarget::Device(web.id), now)
                .await
                .unwrap()
        ),
        ["HQ now"]
    );
    assert_eq!(
        names(
            oa.maintenance()
                .open_windows(RuleTarget::Device(db.id), now)
                .await
                .unwrap()
        ),
        ["DB Mondays"]
    );
    assert_eq!(
        names(
            oa.maintenance()
                .open_windows(RuleTarget::Site(branch.id), now)
                .await
                .unwrap()
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        names(
            oa.maintenance()
                .open_windows(RuleTarget::Organization, now)
                .await
                .unwrap()
        ),
        ["DB Mondays", "HQ now"]
    );
    // B's organization-wide window covers nothing of A; B's device is unknown to A.
    assert!(matches!(
        oa.maintenance()
            .open_windows(RuleTarget::Device(dev_b.id), now)
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));
    let covered = oa
        .maintenance()
        .maintenance_covering(&[web.id, db.id], now)
        .await
        .unwrap();
    assert_eq!(covered[&web.id].0.id, site_window.id);
    assert_eq!(covered[&db.id].0.id, weekly.id);
    let later = now + Duration::hours(2);
    assert!(
        oa.maintenance()
            .maintenance_covering(&[web.id, db.id], later)
            .await
            .unwrap()
            .is_empty()
    );

    // Suppressions: once per rule, device, window and occurrence.
    let rule = oa
        .alerts()
        .create_rule(
            breeze_store::NewRule {
                name: "offline".into(),
                description: None,
                severity: breeze_core::Severity::High,
                enabled: true,
                condition: breeze_core::AlertCondition::Offline { minutes: 5 },
                target: RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: true,
                channel_ids: vec![],
                created_by: "test".into(),
            },
            audit("alert_rule.create", "r"),
        )
        .await
        .unwrap();
    let (w, o) = &covered[&web.id];
    assert!(
        oa.maintenance()
            .record_suppression(rule.id, web.id, w, *o, Some(1.0))
            .await
            .unwrap()
    );
    assert!(
        !oa.maintenance()
            .record_suppression(rule.id, web.id, w, *o, Some(2.0))
            .await
            .unwrap()
    );
    assert_eq!(
        oa.maintenance()
            .suppressions(Some(rule.id), None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        oa.maintenance()
            .suppressions(None, Some(w.id), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        ob.maintenance()
            .suppressions(Some(rule.id), None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Update and delete: B's window is not found from A, and stays as it was.
    let update = WindowUpdate {
        enabled: Some(false),
        ..WindowUpdate::default()
    };
    for err in [
        oa.maintenance().get_window(b_window.id).await.unwrap_err(),
        oa.maintenance()
            .update_window(b_window.id, update.clone(), audit("w", "w"))
            .await
            .unwrap_err(),
        oa.maintenance()
            .delete_window(b_window.id, audit("w", "w"))
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(err, StoreError::NotFound("maintenance window")),
            "{err}"
        );
    }
    assert!(
        ob.maintenance()
            .get_window(b_window.id)
            .await
            .unwrap()
            .enabled
    );
    let err = oa
        .maintenance()
        .update_window(
            site_window.id,
            WindowUpdate {
                target: Some(RuleTarget::Device(dev_b.id)),
                ..WindowUpdate::default()
            },
            audit("w", "w"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");

    let disabled = oa
        .maintenance()
        .update_window(
            site_window.id,
            update,
            audit("maintenance_window.update", "w"),
        )
        .await
        .unwrap();
    assert!(!disabled.enabled);
    assert!(
        oa.maintenance()
            .open_windows(RuleTarget::Device(web.id), now)
            .await
            .unwrap()
            .is_empty()
    );
    oa.maintenance()
        .delete_window(weekly.id, audit("maintenance_window.delete", "w"))
        .await
        .unwrap();
    assert_eq!(oa.maintenance().list_windows().await.unwrap().len(), 1);
    // The suppression outlives its window, naming it.
    assert_eq!(
        oa.maintenance()
            .suppressions(Some(rule.id), None, 10)
            .await
            .unwrap()[0]
            .window_name,
        "HQ now"
    );
}

breeze_store::on_both_backends!(windows_lifecycle_coverage_and_confinement);
