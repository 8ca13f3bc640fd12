//! `manage_maintenance_windows` over MCP: the attacks (another organization's window, device,
//! site and group ids answer not found, on every action that names one; bad schedules, zones
//! and times; a read-only key creating; a write key deleting, which is Tier 3) and the way a
//! person uses it — a weekly window created for a device is open now, checked with
//! active_now, and the alert it held back is visible on the rule.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use breeze_core::{AlertCondition, DeviceId, MaintenanceSchedule, Severity, Timestamp};
use breeze_store::{NewRule, NewWindow, RuleTarget, testing::Ctx};
use common::{audit, code, tool, world};
use serde_json::json;

const TOOL: &str = "manage_maintenance_windows";

async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let ob = w.store.org(w.org_b);
    let b_site = ob.tenancy().list_sites().await.unwrap()[0].id;
    let b_group = ob
        .tenancy()
        .create_group("B group", None, None, audit("g"))
        .await
        .unwrap()
        .id;
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
                    starts_at: now - chrono::Duration::hours(1),
                    ends_at: now + chrono::Duration::hours(1),
                },
                suppress_alerts: true,
                enabled: true,
                created_by: "test".into(),
            },
            audit("maintenance_window.create"),
        )
        .await
        .unwrap()
        .id
        .to_string();

    for args in [
        json!({ "action": "get", "windowId": b_window }),
        json!({ "action": "update", "windowId": b_window, "enabled": false }),
        json!({ "action": "update", "windowId": b_window, "name": "mine" }),
    ] {
        let r = tool(app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
        assert_eq!(
            r["error"]["message"],
            "Maintenance window not found or access denied"
        );
    }
    let targets = [
        json!({ "type": "device", "deviceId": w.b_device }),
        json!({ "type": "site", "siteId": b_site.to_string() }),
        json!({ "type": "group", "groupId": b_group.to_string() }),
    ];
    for target in &targets {
        for args in [
            json!({ "action": "active_now", "target": target }),
            json!({ "action": "create", "name": "steal", "target": target,
                    "schedule": { "kind": "once", "startTime": "2026-01-01T00:00:00Z",
                                  "endTime": "2026-01-01T01:00:00Z" } }),
        ] {
            let r = tool(app, &w.write, TOOL, args.clone()).await;
            assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
        }
    }
    // B's organization-wide window, open now, covers nothing of A's.
    let r = tool(app, &w.read, TOOL, json!({ "action": "active_now" })).await;
    assert_eq!(r["inMaintenance"], false, "{r}");
    let r = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "active_now", "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    assert_eq!(r["windows"], json!([]), "{r}");
    let r = tool(app, &w.read, TOOL, json!({ "action": "list" })).await;
    assert_eq!(r["windows"], json!([]), "{r}");
    // Nothing of B changed, nothing was created in A.
    assert!(
        ob.maintenance()
            .get_window(b_window.parse().unwrap())
            .await
            .unwrap()
            .enabled
    );
    assert!(
        w.store
            .org(w.org_a)
            .maintenance()
            .list_windows()
            .await
            .unwrap()
            .is_empty()
    );
}

async fn bad_inputs_and_tiers_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let weekly = |extra: serde_json::Value| {
        let mut args = json!({ "action": "create", "name": "w",
            "schedule": { "kind": "weekly", "days": ["mon"], "at": "22:00", "durationMinutes": 60 } });
        for (k, v) in extra.as_object().unwrap() {
            if k == "timeZone" || k == "name" {
                args[k] = v.clone();
            } else {
                args["schedule"][k] = v.clone();
            }
        }
        args
    };
    for args in [
        weekly(json!({ "timeZone": "Mars/Olympus_Mons" })),
        weekly(json!({ "at": "25:00" })),
        weekly(json!({ "durationMinutes": 0 })),
        weekly(json!({ "durationMinutes": 10081 })),
        weekly(json!({ "days": [] })),
        weekly(json!({ "days": ["mon", "mon"] })),
        weekly(json!({ "days": ["someday"] })),
        weekly(json!({ "startTime": "2026-01-01T00:00:00Z" })),
        json!({ "action": "create", "name": "w" }),
        json!({ "action": "create", "name": "w",
                "schedule": { "kind": "once", "startTime": "2026-01-01T00:00:00Z" } }),
        json!({ "action": "create", "name": "w",
                "schedule": { "kind": "once", "startTime": "soon", "endTime": "later" } }),
        json!({ "action": "create", "name": "w",
                "schedule": { "kind": "once", "startTime": "2026-01-02T00:00:00Z",
                              "endTime": "2026-01-01T00:00:00Z" } }),
        json!({ "action": "create", "name": "w",
                "schedule": { "kind": "once", "startTime": "2026-01-01T00:00:00Z",
                              "endTime": "2026-03-01T00:00:00Z" } }),
    ] {
        let r = tool(app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{args}: {r}");
    }
    assert!(
        w.store
            .org(w.org_a)
            .maintenance()
            .list_windows()
            .await
            .unwrap()
            .is_empty()
    );
    // A read-only key cannot create (Tier 2); a write key cannot delete (Tier 3).
    let r = tool(app, &w.read, TOOL, weekly(json!({}))).await;
    assert!(
        r["rpcError"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("requires ai:write"),
        "{r}"
    );
    let created = tool(app, &w.write, TOOL, weekly(json!({}))).await;
    let id = created["window"]["id"].as_str().unwrap().to_owned();
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "delete", "windowId": id }),
    )
    .await;
    assert!(
        r["rpcError"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("requires ai:execute"),
        "{r}"
    );
    assert_eq!(
        w.store
            .org(w.org_a)
            .maintenance()
            .list_windows()
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn a_window_is_created_checked_and_shows_what_it_held_back(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    // Wednesday 2026-03-04 23:30 in Sydney (AEDT, UTC+11) is 12:30 UTC.
    let now: Timestamp = "2026-03-04T12:30:00Z".parse().unwrap();
    cx.clock.set(now);
    let created = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "Backups", "description": "nightly",
                "target": { "type": "device", "deviceId": w.a_device },
                "timeZone": "Australia/Sydney",
                "schedule": { "kind": "weekly", "days": ["wed", "thu"], "at": "23:00",
                              "durationMinutes": 120 } }),
    )
    .await;
    let window = &created["window"];
    assert_eq!(window["openNow"], true, "{created}");
    assert_eq!(
        window["occurrence"]["startsAt"],
        "2026-03-04T12:00:00+00:00"
    );
    assert_eq!(window["occurrence"]["endsAt"], "2026-03-04T14:00:00+00:00");
    assert_eq!(window["schedule"]["days"], json!(["wed", "thu"]));
    assert_eq!(window["suppressAlerts"], true);
    let id = window["id"].as_str().unwrap().to_owned();

    let active = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "active_now", "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    assert_eq!(active["inMaintenance"], true, "{active}");
    assert_eq!(active["windows"][0]["id"], id.as_str());

    // The engine held an alert back: the rule and the window both show it.
    let o = w.store.org(w.org_a);
    let rule = o
        .alerts()
        .create_rule(
            NewRule {
                name: "offline".into(),
                description: None,
                severity: Severity::High,
                enabled: true,
                condition: AlertCondition::Offline { minutes: 5 },
                target: RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: true,
                channel_ids: vec![],
                created_by: "test".into(),
            },
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let device = DeviceId(w.a_device.parse().unwrap());
    let covered = o
        .maintenance()
        .maintenance_covering(&[device], now)
        .await
        .unwrap();
    let (win, occ) = &covered[&device];
    o.maintenance()
        .record_suppression(rule.id, device, win, *occ, None)
        .await
        .unwrap();
    let got = tool(
        app,
        &w.read,
        "manage_alert_rules",
        json!({ "action": "get", "ruleId": rule.id.to_string() }),
    )
    .await;
    assert_eq!(got["suppressions"][0]["windowName"], "Backups", "{got}");
    let got = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "get", "windowId": id }),
    )
    .await;
    assert_eq!(
        got["suppressions"][0]["ruleId"],
        rule.id.to_string(),
        "{got}"
    );

    // Updated to weekends only, it is closed now and names its next opening.
    let updated = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "update", "windowId": id,
                "schedule": { "kind": "weekly", "days": ["sat"], "at": "23:00",
                              "durationMinutes": 120 } }),
    )
    .await;
    assert_eq!(updated["window"]["openNow"], false, "{updated}");
    assert_eq!(
        updated["window"]["occurrence"]["startsAt"],
        "2026-03-07T12:00:00+00:00"
    );
    let active = tool(app, &w.read, TOOL, json!({ "action": "active_now" })).await;
    assert_eq!(active["inMaintenance"], false, "{active}");
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    bad_inputs_and_tiers_are_refused,
    a_window_is_created_checked_and_shows_what_it_held_back
);
