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
        .alerts()
        .create_rule(
            offline_rule(name, RuleTarget::Organization),
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let alert = o
        .alerts()
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
    let b_site = ob.tenancy().list_sites().await.unwrap()[0].id.to_string();
    let b_group = ob
        .tenancy()
        .create_group("B group", None, None, audit("g"))
        .await
        .unwrap()
        .id
        .to_string();
    let b_channel = ob
        .alerts()
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
    let alert = ob
        .alerts()
        .get_alert(b_alert.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(alert.status, breeze_core::AlertStatus::Open);
    assert!(
        ob.alerts()
            .get_rule(b_rule.parse().unwrap())
            .await
            .unwrap()
            .enabled
    );
    assert!(
        w.store
            .org(w.org_a)
            .alerts()
            .list_rules()
            .await
            .unwrap()
            .is_empty()
    );
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
            .alerts()
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
    let rule = o.alerts().get_rule(rule_id.parse().unwrap()).await.unwrap();
    let alert = o
        .alerts()
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
        .audit()
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

fn agent_post(path: &str, token: &str, body: &Value) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// A device of organization A with an agent's token, enrolled over HTTP.
async fn enrolled_device(w: &common::World) -> (String, String) {
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let (key, _) = w
        .state
        .auth
        .create_enrollment_key(
            breeze_auth::CreateEnrollmentKey {
                org_id: w.org_a,
                site_id: site,
                name: "events".into(),
                max_uses: Some(1),
                expires_at: w.state.clock.now() + Duration::hours(1),
                created_by: "test".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let r = send(
        &w.app,
        Request::post("/api/v1/agents/enroll")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({
                    "enrollmentKey": key.expose(), "hostname": "db-01", "machineId": "m-events",
                    "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12",
                            "kernel": "6.1", "arch": "x86_64" },
                    "agentVersion": "0.1.0",
                })
                .to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    (
        r.body["deviceId"].as_str().unwrap().to_owned(),
        r.body["token"].as_str().unwrap().to_owned(),
    )
}

fn event(at: chrono::DateTime<chrono::Utc>, severity: &str, message: &str) -> Value {
    json!({ "at": at, "source": "log_watch", "kind": "syslog", "severity": severity,
            "message": message, "attributes": { "path": "/var/log/syslog" } })
}

/// An event rule over what an agent reports: validation that names the field, counting within
/// the window (source, kind, severity, text), the alert keeping the events that raised it
/// (shown by `manage_alerts get`), auto-resolution once the window passes, and the attacks —
/// another organization's key reading the alert or testing the rule, creating a rule on A's
/// device, and an organization-wide rule of B counting A's events.
async fn event_rules_count_reported_events_and_resolve(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let (device, token) = enrolled_device(&w).await;
    let engine = breeze_alerts::AlertEngine::new(w.store.clone(), Default::default());
    let condition = json!({ "kind": "event", "source": "log_watch", "eventKind": "syslog",
                            "minSeverity": "medium", "messageContains": "SEGFAULT",
                            "count": 2, "windowMinutes": 10 });

    // Invalid conditions are refused naming what is wrong; nothing is created.
    for (bad, names) in [
        (
            json!({ "kind": "event", "windowMinutes": 10, "count": 0 }),
            "count",
        ),
        (
            json!({ "kind": "event", "windowMinutes": 0 }),
            "windowMinutes",
        ),
        (
            json!({ "kind": "event", "windowMinutes": 1441 }),
            "windowMinutes",
        ),
        (
            json!({ "kind": "event", "windowMinutes": 5, "source": "log watch" }),
            "source",
        ),
        (
            json!({ "kind": "event", "windowMinutes": 5, "messageContains": "  " }),
            "messageContains",
        ),
        (
            json!({ "kind": "event", "windowMinutes": 5, "minSeverity": "fatal" }),
            "minSeverity",
        ),
        (
            json!({ "kind": "event", "source": "agent" }),
            "windowMinutes",
        ),
    ] {
        let r = tool(
            app,
            &w.write,
            "manage_alert_rules",
            json!({ "action": "create", "name": "bad", "condition": bad }),
        )
        .await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{bad}: {r}");
        let message = r["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(names), "{bad}: {message}");
    }

    let created = tool(
        app,
        &w.write,
        "manage_alert_rules",
        json!({ "action": "create", "name": "segfaults", "severity": "high",
                "cooldownMinutes": 0, "condition": condition,
                "target": { "type": "device", "deviceId": device } }),
    )
    .await;
    let rule_id = created["rule"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["rule"]["condition"]["kind"], "event", "{created}");

    // B's organization-wide event rule must never count A's events.
    let ob = w.store.org(w.org_b);
    let mut b_rule = offline_rule("B events", RuleTarget::Organization);
    b_rule.condition =
        serde_json::from_value(json!({ "kind": "event", "windowMinutes": 10 })).unwrap();
    let b_rule = ob
        .alerts()
        .create_rule(b_rule, audit("alert_rule.create"))
        .await
        .unwrap();

    let now = w.state.clock.now();
    let post = |events: Value| {
        send(
            app,
            agent_post(
                "/api/v1/agents/events",
                &token,
                &json!({ "events": events }),
            ),
        )
    };
    // One match, one too mild, one of another text: not two matches yet.
    let r = post(json!([
        event(
            now - Duration::minutes(1),
            "high",
            "app[12]: segfault at 0 ip 42"
        ),
        event(now, "low", "app[13]: segfault at 0 ip 43"),
        event(now, "critical", "kernel: oom-killer"),
    ]))
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let report = engine.tick().await.unwrap();
    assert!(report.raised.is_empty(), "{report:?}");
    let tested = tool(
        app,
        &w.read,
        "manage_alert_rules",
        json!({ "action": "test", "ruleId": rule_id }),
    )
    .await;
    assert_eq!(tested["test"]["devices"][0]["value"], 1.0, "{tested}");
    assert_eq!(tested["test"]["breaching"], 0);

    // A second match within the window raises, once.
    cx.clock.advance(Duration::seconds(30));
    let r = post(json!([event(
        w.state.clock.now(),
        "medium",
        "app[14]: SegFault at 0 ip 44"
    )]))
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let report = engine.tick().await.unwrap();
    assert_eq!(report.raised.len(), 1, "{report:?}");
    assert!(
        engine.tick().await.unwrap().raised.is_empty(),
        "raised once"
    );
    let alert = report.raised[0].to_string();
    let got = tool(
        app,
        &w.read,
        "manage_alerts",
        json!({ "action": "get", "alertId": alert }),
    )
    .await;
    let trigger = got["alert"]["triggeringEvents"].as_array().unwrap();
    let messages: Vec<&str> = trigger
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        [
            "app[14]: SegFault at 0 ip 44",
            "app[12]: segfault at 0 ip 42"
        ],
        "{got}"
    );
    assert_eq!(trigger[0]["attributes"]["path"], "/var/log/syslog");
    assert_eq!(got["alert"]["value"], 2.0);
    // B's rule saw nothing, and B's key reaches none of it.
    assert!(
        ob.alerts()
            .unresolved_alerts_of_rule(b_rule.id)
            .await
            .unwrap()
            .is_empty()
    );
    let foreign = tool(
        app,
        &w.other_org_key,
        "manage_alerts",
        json!({ "action": "get", "alertId": alert }),
    )
    .await;
    assert_eq!(code(&foreign), "NOT_FOUND", "{foreign}");
    let foreign = tool(
        app,
        &w.other_org_key,
        "manage_alert_rules",
        json!({ "action": "test", "ruleId": rule_id }),
    )
    .await;
    assert_eq!(code(&foreign), "NOT_FOUND", "{foreign}");
    let b_write = w
        .state
        .auth
        .create_api_key(
            breeze_auth::CreateApiKey {
                org_id: w.org_b,
                user_id: w.admin,
                name: "b-write".into(),
                scopes: breeze_core::ScopeSet::new([
                    breeze_core::Scope::AiRead,
                    breeze_core::Scope::AiWrite,
                ]),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap()
        .0
        .expose()
        .to_owned();
    let foreign = tool(
        app,
        &b_write,
        "manage_alert_rules",
        json!({ "action": "create", "name": "spy", "condition": condition,
                "target": { "type": "device", "deviceId": device } }),
    )
    .await;
    assert_eq!(code(&foreign), "NOT_FOUND", "{foreign}");
    let foreign = tool(
        app,
        &b_write,
        "manage_alert_rules",
        json!({ "action": "test", "condition": condition,
                "target": { "type": "device", "deviceId": device } }),
    )
    .await;
    assert_eq!(code(&foreign), "NOT_FOUND", "{foreign}");

    // Refused batches write nothing.
    let bad_source = json!([{ "at": now, "source": "bad source", "kind": "x", "severity": "info", "message": "m" }]);
    let r = post(bad_source).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.to_string().contains("events[0].source"),
        "{}",
        r.body
    );
    let r = post(Value::Array(vec![event(now, "info", "x"); 101])).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let o = w.store.org(w.org_a);
    let stored = o
        .telemetry()
        .device_events(DeviceId(device.parse().unwrap()), 200)
        .await
        .unwrap();
    assert_eq!(stored.len(), 4);

    // Once the window holds fewer than two matches, the alert resolves itself.
    cx.clock
        .advance(Duration::minutes(9) + Duration::seconds(45));
    let report = engine.tick().await.unwrap();
    assert_eq!(report.resolved.len(), 1, "{report:?}");
    let got = tool(
        app,
        &w.read,
        "manage_alerts",
        json!({ "action": "get", "alertId": alert }),
    )
    .await;
    assert_eq!(got["alert"]["status"], "resolved", "{got}");
    assert_eq!(
        got["alert"]["triggeringEvents"].as_array().map(Vec::len),
        Some(2),
        "kept after resolving"
    );
}

/// Retention: a device keeps its newest events up to the cap, and the sweep drops old ones.
async fn device_events_are_bounded(cx: Ctx) {
    let w = world(&cx).await;
    let device = DeviceId(w.a_device.parse().unwrap());
    let now = w.state.clock.now();
    let batch: Vec<breeze_agent_proto::AgentEvent> = (0..breeze_store::MAX_EVENTS_PER_DEVICE + 5)
        .map(|i| breeze_agent_proto::AgentEvent {
            at: now - Duration::seconds(2000 - i),
            source: "agent".into(),
            kind: "command_failed".into(),
            severity: breeze_agent_proto::EventSeverity::Medium,
            message: format!("failure {i}"),
            attributes: Default::default(),
        })
        .collect();
    w.store
        .insert_device_events(device, w.org_a, &batch)
        .await
        .unwrap();
    let o = w.store.org(w.org_a);
    let newest = o.telemetry().device_events(device, 1).await.unwrap();
    assert_eq!(
        newest[0].message,
        format!("failure {}", breeze_store::MAX_EVENTS_PER_DEVICE + 4)
    );
    let future = breeze_agent_proto::AgentEvent {
        at: now + Duration::hours(5),
        ..batch[0].clone()
    };
    w.store
        .insert_device_events(device, w.org_a, &[future])
        .await
        .unwrap();
    let newest = o.telemetry().device_events(device, 1).await.unwrap();
    assert_eq!(
        newest[0].at, now,
        "an event is never later than its arrival"
    );
    // Everything left is pruned at once: exactly the cap was kept.
    cx.clock
        .advance(breeze_store::EVENT_RETENTION + Duration::hours(1));
    let pruned = w
        .store
        .prune_device_events(w.state.clock.now() - breeze_store::EVENT_RETENTION)
        .await
        .unwrap();
    assert_eq!(pruned, breeze_store::MAX_EVENTS_PER_DEVICE as u64);
    assert!(
        o.telemetry()
            .device_events(device, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    oversized_and_out_of_range_inputs_are_refused,
    rules_are_tested_created_and_alerts_handled,
    event_rules_count_reported_events_and_resolve,
    device_events_are_bounded
);
