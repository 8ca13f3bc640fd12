//! `manage_alerts`, `manage_alert_rules` and `breeze://alerts` over MCP: the attacks
//! (another organization's alert, rule, device, site, group and channel ids; oversized and
//! out-of-range inputs; a read-only key acknowledging), and the way a person uses them — a
//! draft tested against current samples raises nothing, a rule created, an alert acknowledged
//! and resolved with notes visible on the alert and in the audit log.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::{body::Body, http::Request};
use breeze_agent_proto::{DiskUsageSample, MetricSample};
use breeze_core::{AlertCondition, ChannelKind, DeviceId, OrgId, Severity};
use breeze_store::{AuditFilter, NewChannel, NewRule, RuleTarget, testing::Ctx};
use chrono::Duration;
use common::{audit, code, send, tool, world};
use serde_json::{Value, json};

fn offline_rule(name: &str, target: RuleTarget) -> NewRule {
    NewRule {
        name: name.into(),
        description: None,
        severity: Severity::High,
        enabled: true,
        condition: AlertCondition::Offline { minutes: 5 },
        target,
        cooldown_minutes: 0,
        auto_resolve: true,
        channel_ids: vec![],
        created_by: "test".into(),
    }
}

async fn raise(w: &common::World, org: OrgId, device: &str, name: &str) -> (String, String) {
    let o = w.store.org(org);
    let rule = o
        .create_rule(
            offline_rule(name, RuleTarget::Organization),
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let alert = o
        .raise_alert(&rule, DeviceId(device.parse().unwrap()), Some(7.0))
        .await
        .unwrap()
        .unwrap();
    (rule.id.to_string(), alert.id.to_string())
}

async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let (b_rule, b_alert) = raise(&w, w.org_b, &w.b_device, "B rule").await;
    let ob = w.store.org(w.org_b);
    let b_site = ob.list_sites().await.unwrap()[0].id.to_string();
    let b_group = ob
        .create_group("B group", None, None, audit("g"))
        .await
        .unwrap()
        .id
        .to_string();
    let b_channel = ob
        .create_channel(
            NewChannel {
                name: "B app".into(),
                kind: ChannelKind::InApp,
                config: json!({}),
                secret: None,
            },
            audit("c"),
        )
        .await
        .unwrap()
        .id
        .to_string();

    for action in ["get", "acknowledge", "resolve"] {
        let r = tool(
            app,
            &w.write,
            "manage_alerts",
            json!({ "action": action, "alertId": b_alert, "note": "mine now" }),
        )
        .await;
        assert_eq!(code(&r), "NOT_FOUND", "{action}: {r}");
        assert_eq!(r["error"]["message"], "Alert not found or access denied");
    }
    let listed = tool(app, &w.write, "manage_alerts", json!({ "action": "list" })).await;
    assert_eq!(listed["alerts"], json!([]), "{listed}");
    let listed = tool(
        app,
        &w.write,
        "manage_alerts",
        json!({ "action": "list", "ruleId": b_rule, "deviceId": w.b_device }),
    )
    .await;
    assert_eq!(listed["alerts"], json!([]), "{listed}");

    for args in [
        json!({ "action": "get", "ruleId": b_rule }),
        json!({ "action": "update", "ruleId": b_rule, "enabled": false }),
        json!({ "action": "test", "ruleId": b_rule }),
    ] {
        let r = tool(app, &w.write, "manage_alert_rules", args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
    }
    // Targets and channels of another organization, on create, update and a draft's test.
    let condition = json!({ "kind": "offline", "minutes": 5 });
    for target in [
        json!({ "type": "device", "deviceId": w.b_device }),
        json!({ "type": "site", "siteId": b_site }),
        json!({ "type": "group", "groupId": b_group }),
    ] {
        for action in ["create", "test"] {
            let r = tool(
                app,
                &w.write,
                "manage_alert_rules",
                json!({ "action": action, "name": "steal", "condition": condition, "target": target }),
            )
            .await;
            assert_eq!(code(&r), "NOT_FOUND", "{action} {target}: {r}");
        }
    }
    let r = tool(
        app,
        &w.write,
        "manage_alert_rules",
        json!({ "action": "create", "name": "steal", "condition": condition, "channelIds": [b_channel] }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    let channels = tool(
        app,
        &w.write,
        "manage_alert_rules",
        json!({ "action": "list_channels" }),
    )
    .await;
    assert_eq!(channels["channels"], json!([]));
    // Nothing of B changed.
    let alert = ob.get_alert(b_alert.parse().unwrap()).await.unwrap();
    assert_eq!(alert.status, breeze_core::AlertStatus::Open);
    assert!(ob.get_rule(b_rule.parse().unwrap()).await.unwrap().enabled);
    assert!(w.store.org(w.org_a).list_rules().await.unwrap().is_empty());
}

async fn oversized_and_out_of_range_inputs_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let (_, alert) = raise(&w, w.org_a, &w.a_device, "A rule").await;
    let metric = |threshold: f64, minutes: u32| {
        json!({ "kind": "metric", "metric": "cpu", "comparison": "above",
                "threshold": threshold, "durationMinutes": minutes })
    };
    for args in [
        json!({ "action": "create", "name": "n".repeat(256), "condition": metric(90.0, 5) }),
        json!({ "action": "create", "name": "x", "description": "d".repeat(2001), "condition": metric(90.0, 5) }),
        json!({ "action": "create", "name": "x", "condition": metric(1e13, 5) }),
        json!({ "action": "create", "name": "x", "condition": metric(150.0, 5) }),
        json!({ "action": "create", "name": "x", "condition": metric(90.0, 1441) }),
        json!({ "action": "create", "name": "x", "condition": { "kind": "offline", "minutes": 0 } }),
        json!({ "action": "create", "name": "x", "condition": metric(90.0, 5), "cooldownMinutes": 10081 }),
        json!({ "action": "create", "name": "x", "condition": metric(90.0, 5),
                "channelIds": vec![w.a_device.clone(); 11] }),
        json!({ "action": "create", "name": "x", "condition": { "kind": "script", "body": "rm -rf /" } }),
        json!({ "action": "create", "name": "   ", "condition": metric(90.0, 5) }),
        json!({ "action": "test" }),
    ] {
        let r = tool(app, &w.write, "manage_alert_rules", args.clone()).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{args}: {r}");
    }
    for args in [
        json!({ "action": "acknowledge", "alertId": alert, "note": "n".repeat(2001) }),
        json!({ "action": "list", "cursor": "not-a-cursor" }),
        json!({ "action": "list", "limit": 101 }),
        json!({ "action": "list", "startTime": "yesterday" }),
    ] {
        let r = tool(app, &w.write, "manage_alerts", args.clone()).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{args}: {r}");
    }
    assert!(
        w.store
            .org(w.org_a)
            .list_rules()
            .await
            .unwrap()
            .iter()
            .all(|r| r.name == "A rule"),
        "nothing was created"
    );
    // A read-only key cannot acknowledge (Tier 2).
    let r = tool(
        app,
        &w.read,
        "manage_alerts",
        json!({ "action": "acknowledge", "alertId": alert }),
    )
    .await;
    assert!(
        r["rpcError"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("requires ai:write"),
        "{r}"
    );
}

async fn rules_are_tested_created_and_alerts_handled(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let now = w.state.clock.now();
    let samples: Vec<MetricSample> = (0..14)
        .map(|i| MetricSample {
            at: now - Duration::seconds(30 * (13 - i)),
            cpu_percent: 97.0,
            ram_percent: 20.0,
            ram_used_bytes: 1,
            disks: vec![DiskUsageSample {
                mount: "/".into(),
                used_percent: 50.0,
            }],
            network: vec![],
            process_count: 10,
        })
        .collect();
    w.store
        .insert_metrics(DeviceId(w.a_device.parse().unwrap()), w.org_a, &samples)
        .await
        .unwrap();
    let condition = json!({ "kind": "metric", "metric": "cpu", "comparison": "above",
                            "threshold": 90, "durationMinutes": 5 });
    let test = tool(
        app,
        &w.read,
        "manage_alert_rules",
        json!({ "action": "test", "condition": condition }),
    )
    .await;
    assert_eq!(test["test"]["breaching"], 1, "{test}");
    assert_eq!(test["test"]["devices"][0]["deviceId"], w.a_device.as_str());
    assert_eq!(test["test"]["devices"][0]["wouldRaise"], true);
    let listed = tool(app, &w.read, "manage_alerts", json!({ "action": "list" })).await;
    assert_eq!(listed["alerts"], json!([]), "testing raises nothing");

    let created = tool(
        app,
        &w.write,
        "manage_alert_rules",
        json!({ "action": "create", "name": "CPU hot", "severity": "critical",
                "condition": condition, "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    assert_eq!(
        created["rule"]["summary"], "cpu above 90 % for 5 min",
        "{created}"
    );
    assert_eq!(created["rule"]["targetType"], "device");
    let rule_id = created["rule"]["id"].as_str().unwrap().to_owned();

    // The engine's work, done here by the store: one alert.
    let o = w.store.org(w.org_a);
    let rule = o.get_rule(rule_id.parse().unwrap()).await.unwrap();
    let alert = o
        .raise_alert(&rule, DeviceId(w.a_device.parse().unwrap()), Some(97.0))
        .await
        .unwrap()
        .unwrap()
        .id
        .to_string();
    let test = tool(
        app,
        &w.read,
        "manage_alert_rules",
        json!({ "action": "test", "ruleId": rule_id }),
    )
    .await;
    assert_eq!(test["test"]["devices"][0]["wouldRaise"], false, "{test}");

    let acked = tool(
        app,
        &w.write,
        "manage_alerts",
        json!({ "action": "acknowledge", "alertId": alert, "note": "on it" }),
    )
    .await;
    assert_eq!(acked["alert"]["status"], "acknowledged", "{acked}");
    let resolved = tool(
        app,
        &w.write,
        "manage_alerts",
        json!({ "action": "resolve", "alertId": alert, "note": "killed the runaway job" }),
    )
    .await;
    assert_eq!(resolved["alert"]["status"], "resolved");
    let history: Vec<(Value, Value)> = resolved["alert"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].clone(), e["note"].clone()))
        .collect();
    assert_eq!(
        history,
        vec![
            (json!("raised"), Value::Null),
            (json!("acknowledged"), json!("on it")),
            (json!("resolved"), json!("killed the runaway job")),
        ]
    );
    let again = tool(
        app,
        &w.write,
        "manage_alerts",
        json!({ "action": "resolve", "alertId": alert }),
    )
    .await;
    assert_eq!(code(&again), "CONFLICT", "{again}");

    let page = o
        .query_audit(
            &AuditFilter {
                action: Some("alert.resolve".into()),
                ..AuditFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(
        page.records[0].event.details["note"],
        "killed the runaway job"
    );
    assert_eq!(
        page.records[0].event.actor.kind,
        breeze_core::ActorType::ApiKey
    );

    // Filters, paging and the summary.
    let (_, second) = raise(&w, w.org_a, &w.a_device, "second").await;
    let first_page = tool(
        app,
        &w.read,
        "manage_alerts",
        json!({ "action": "list", "limit": 1 }),
    )
    .await;
    assert_eq!(first_page["alerts"][0]["id"], second.as_str());
    let cursor = first_page["nextCursor"].as_str().unwrap();
    let next = tool(
        app,
        &w.read,
        "manage_alerts",
        json!({ "action": "list", "limit": 1, "cursor": cursor }),
    )
    .await;
    assert_eq!(next["alerts"][0]["id"], alert.as_str());
    assert!(next["nextCursor"].is_null());
    let active = tool(
        app,
        &w.read,
        "manage_alerts",
        json!({ "action": "list", "status": "active", "severity": "high" }),
    )
    .await;
    assert_eq!(active["showing"], 1, "{active}");
    let summary = tool(
        app,
        &w.read,
        "manage_alert_rules",
        json!({ "action": "summary" }),
    )
    .await;
    assert_eq!(summary["summary"]["open"], 1, "{summary}");
    assert_eq!(summary["summary"]["resolved"], 1);
    assert_eq!(summary["summary"]["unresolvedBySeverity"]["high"], 1);

    // The resource lists what is active.
    let r = send(
        app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("x-api-key", &w.read)
            .body(Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "resources/read",
                        "params": { "uri": "breeze://alerts" } })
                .to_string(),
            ))
            .unwrap(),
    )
    .await;
    let listed: Value =
        serde_json::from_str(r.body["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], second.as_str());
    // Another organization's key sees none of it.
    let r = send(
        app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("x-api-key", &w.other_org_key)
            .body(Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "resources/read",
                        "params": { "uri": "breeze://alerts" } })
                .to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(r.body["result"]["contents"][0]["text"], "[]");
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    oversized_and_out_of_range_inputs_are_refused,
    rules_are_tested_created_and_alerts_handled
);
