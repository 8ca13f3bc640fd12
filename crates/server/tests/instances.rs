//! Two `breeze serve` instances on one database (two stores on the same SQLite file or
//! PostgreSQL schema, each with its own alert engine and automation worker), racing on the same
//! data — the attack on "once per cluster".
//!
//! Eight devices cross a CPU rule's threshold; at the sample that completes the duration both
//! instances' ticks (the first of each is a full sweep) and both instances' incremental paths
//! (as if each had received the report) evaluate every device at the same moment. Exactly one
//! instance ticks (the held lease), and the cluster raises one alert per device, delivers one
//! webhook and one in-app notification per alert, and queues and runs one alert-triggered
//! automation per alert (its notifications counted at the same local webhook receiver); a
//! scheduled automation fires once; the condition clears and each alert is resolved, and its
//! resolution notified, once. Then the ticking instance stops: the other takes its lease over
//! once it lapsed, and the first stands by when it comes back.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{collections::HashMap, sync::Arc, time::Duration as StdDuration};

use breeze_agent_proto::{DiskUsageSample, MetricSample};
use breeze_alerts::{
    AlertEngine, AlertEngineConfig, NotifyConfig, TickReport,
    testing::{Hook, snapshot, webhook_server},
};
use breeze_auth::{AuthService, AuthSettings};
use breeze_core::{
    AlertCondition, ChannelKind, Comparison, DeviceId, Metric, RunStatus, Severity, Timestamp,
};
use breeze_limits::MemoryLimiter;
use breeze_server::{
    AppState,
    automations::{AutomationConfig, AutomationWorker},
    workers::Worker,
};
use breeze_store::{NewChannel, NewRule, RuleTarget, Store, testing::Ctx};
use common::{World, audit, tool, world};
use serde_json::{Value, json};

const HOT_DEVICES: usize = 8;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn cpu(at: Timestamp, percent: f64) -> MetricSample {
    MetricSample {
        at,
        cpu_percent: percent,
        ram_percent: 30.0,
        ram_used_bytes: 1 << 30,
        disks: vec![DiskUsageSample {
            mount: "/".into(),
            used_percent: 40.0,
        }],
        network: vec![],
        process_count: 50,
    }
}

/// One instance: its store, alert engine and automation worker.
struct Instance {
    store: Store,
    engine: Arc<AlertEngine>,
    worker: Arc<AutomationWorker>,
}

fn instance(w: &World, store: Store) -> Instance {
    let clock = w.state.clock.clone();
    let mut config = (*w.state.config).clone();
    config.approvals.wait = StdDuration::ZERO;
    let state = AppState::new(
        store.clone(),
        AuthService::new(store.clone(), clock.clone(), AuthSettings::default()),
        clock,
        config,
        Arc::new(MemoryLimiter::new()),
    );
    let engine = Arc::new(AlertEngine::new(
        store.clone(),
        AlertEngineConfig {
            tick: StdDuration::from_secs(30),
            rules_per_tick: 100,
            notify: NotifyConfig {
                timeout: StdDuration::from_secs(5),
                webhook_backoff: StdDuration::from_millis(20),
                allow_private_targets: true,
                ..NotifyConfig::default()
            },
        },
    ));
    engine.enable_incremental();
    let worker = Arc::new(AutomationWorker::new(
        store.clone(),
        state.pipeline.clone(),
        state.config.alerts.notify.clone(),
        AutomationConfig::default(),
    ));
    Instance {
        store,
        engine,
        worker,
    }
}

/// Both instances evaluate `devices` at once, each through its tick and its incremental path.
async fn race(
    one: &Instance,
    two: &Instance,
    org: breeze_core::OrgId,
    devices: &[DeviceId],
) -> [TickReport; 4] {
    let (a, b, c, d) = tokio::join!(
        one.engine.tick(),
        two.engine.tick(),
        one.engine
            .devices_reported(org, devices, breeze_core::TelemetryKind::Metrics),
        two.engine
            .devices_reported(org, devices, breeze_core::TelemetryKind::Metrics),
    );
    let reports = [a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap()];
    assert!(
        reports[0].standby ^ reports[1].standby,
        "exactly one instance ticks: {reports:?}"
    );
    assert!(reports.iter().all(|r| r.failed == 0), "{reports:?}");
    reports
}

/// Webhook deliveries by their `event`, and by automation for `automation.notify`.
fn deliveries(hooks: &[Hook]) -> (HashMap<String, Vec<Value>>, HashMap<String, usize>) {
    let mut by_event: HashMap<String, Vec<Value>> = HashMap::new();
    let mut by_automation: HashMap<String, usize> = HashMap::new();
    for hook in hooks {
        let body: Value = serde_json::from_str(&hook.body).unwrap();
        let event = body["event"].as_str().unwrap().to_owned();
        if event == "automation.notify" {
            *by_automation
                .entry(body["automation"]["id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        by_event.entry(event).or_default().push(body);
    }
    (by_event, by_automation)
}

async fn settle(one: &Instance, two: &Instance) {
    one.engine.settle().await;
    two.engine.settle().await;
    one.worker.settle().await;
    two.worker.settle().await;
}

async fn two_instances_raise_notify_and_automate_once(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let oa = w.store.org(w.org_a);
    let one = instance(&w, w.store.clone());
    let two = instance(&w, w.store.reopen().await.unwrap());

    let site = oa
        .devices()
        .get_device(DeviceId(w.a_device.parse().unwrap()))
        .await
        .unwrap()
        .site_id;
    let mut hot = Vec::new();
    for i in 0..HOT_DEVICES {
        let d = oa
            .devices()
            .create_device(
                breeze_store::testing::new_device(
                    site,
                    format!("hot-{i}"),
                    breeze_core::DeviceStatus::Online,
                ),
                audit("device.create"),
            )
            .await
            .unwrap();
        hot.push(d.id);
    }
    let (hook_port, hooks) = webhook_server(0).await.unwrap();
    let hook = oa
        .alerts()
        .create_channel(
            NewChannel {
                name: "hook".into(),
                kind: ChannelKind::Webhook,
                config: json!({ "url": format!("http://127.0.0.1:{hook_port}/hook") }),
                secret: Some("a-secret-of-some-length".into()),
            },
            audit("notification_channel.create"),
        )
        .await
        .unwrap();
    let app = oa
        .alerts()
        .create_channel(
            NewChannel {
                name: "app".into(),
                kind: ChannelKind::InApp,
                config: json!({}),
                secret: None,
            },
            audit("notification_channel.create"),
        )
        .await
        .unwrap();
    let rule = oa
        .alerts()
        .create_rule(
            NewRule {
                name: "CPU hot".into(),
                description: None,
                severity: Severity::High,
                enabled: true,
                condition: AlertCondition::Metric {
                    metric: Metric::Cpu,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: 2,
                },
                target: RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: true,
                channel_ids: vec![hook.id, app.id],
                created_by: "test".into(),
            },
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let on_alert = tool(
        &w.app,
        &w.write,
        "manage_automations",
        json!({
        "action": "create", "name": "tell on alert",
        "trigger": { "kind": "alert", "ruleId": rule.id.to_string() },
        "task": { "kind": "notify", "channelId": hook.id.to_string(), "message": "hot" } }),
    )
    .await;
    let on_alert = on_alert["automation"]["id"].as_str().unwrap().to_owned();
    let scheduled = tool(
        &w.app,
        &w.write,
        "manage_automations",
        json!({
        "action": "create", "name": "every five",
        "trigger": { "kind": "schedule", "cron": "*/5 * * * *" },
        "task": { "kind": "notify", "channelId": hook.id.to_string(), "message": "tick" } }),
    )
    .await;
    let scheduled = scheduled["automation"]["id"].as_str().unwrap().to_owned();

    // Two minutes of samples above the threshold; the last completes the duration.
    let start = at("2026-03-02T10:00:00Z");
    for step in 0..=4 {
        let t = start + chrono::Duration::seconds(30 * step);
        cx.clock.set(t);
        for d in &hot {
            one.store
                .insert_metrics(*d, w.org_a, &[cpu(t, 97.0)])
                .await
                .unwrap();
        }
        if step < 4 {
            let (a, b) = tokio::join!(
                one.engine
                    .devices_reported(w.org_a, &hot, breeze_core::TelemetryKind::Metrics),
                two.engine
                    .devices_reported(w.org_a, &hot, breeze_core::TelemetryKind::Metrics),
            );
            assert!(a.unwrap().raised.is_empty() && b.unwrap().raised.is_empty());
        }
    }
    let reports = race(&one, &two, w.org_a, &hot).await;
    let raised: Vec<_> = reports.iter().flat_map(|r| r.raised.clone()).collect();
    assert_eq!(
        raised.len(),
        HOT_DEVICES,
        "one alert per device: {reports:?}"
    );
    assert_eq!(
        w.store.raw_dump("alerts").await.unwrap().len(),
        HOT_DEVICES,
        "no alert beyond one per device was stored"
    );
    // Again, both instances at once: the alerts are open, nothing more is raised.
    let again = race(&one, &two, w.org_a, &hot).await;
    assert!(again.iter().all(|r| r.raised.is_empty()), "{again:?}");
    settle(&one, &two).await;

    // One webhook delivery and one in-app record per alert.
    let (events, _) = deliveries(&snapshot(&hooks));
    let told = &events["alert.raised"];
    assert_eq!(told.len(), HOT_DEVICES, "{told:?}");
    let mut told_ids: Vec<&str> = told
        .iter()
        .map(|b| b["alert"]["id"].as_str().unwrap())
        .collect();
    told_ids.sort_unstable();
    told_ids.dedup();
    assert_eq!(told_ids.len(), HOT_DEVICES, "each alert told once");
    for id in &raised {
        let notified: Vec<_> = oa
            .alerts()
            .alert_events(*id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "notified")
            .collect();
        let in_app = notified
            .iter()
            .filter(|e| e.details.as_ref().unwrap()["kind"] == "in_app")
            .count();
        assert_eq!(
            notified.len(),
            2,
            "webhook and in-app, once each: {notified:?}"
        );
        assert_eq!(in_app, 1, "{notified:?}");
    }

    // Both workers see the new alerts at once: one run per alert, one notification each.
    let (a, b) = tokio::join!(one.worker.tick(), two.worker.tick());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.alerted + b.alerted, HOT_DEVICES, "{a:?} {b:?}");
    // Runs queued by one instance may be started by either; each once.
    let (c, d) = tokio::join!(one.worker.tick(), two.worker.tick());
    let (c, d) = (c.unwrap(), d.unwrap());
    assert_eq!(c.alerted + d.alerted, 0, "{c:?} {d:?}");
    assert_eq!(
        a.started + b.started + c.started + d.started,
        HOT_DEVICES,
        "{a:?} {b:?} {c:?} {d:?}"
    );
    settle(&one, &two).await;
    let runs = oa
        .automations()
        .list_runs(Some(on_alert.parse().unwrap()), 100)
        .await
        .unwrap();
    assert_eq!(runs.len(), HOT_DEVICES, "{runs:?}");
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Succeeded),
        "{runs:?}"
    );
    let (_, by_automation) = deliveries(&snapshot(&hooks));
    assert_eq!(by_automation.get(&on_alert), Some(&HOT_DEVICES));

    // The schedule comes due: both workers at once, one run, one notification.
    cx.clock.set(at("2026-03-02T10:05:10Z"));
    let (a, b) = tokio::join!(one.worker.tick(), two.worker.tick());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.scheduled + b.scheduled, 1, "{a:?} {b:?}");
    let (c, d) = tokio::join!(one.worker.tick(), two.worker.tick());
    assert_eq!(c.unwrap().scheduled + d.unwrap().scheduled, 0);
    settle(&one, &two).await;
    let runs = oa
        .automations()
        .list_runs(Some(scheduled.parse().unwrap()), 100)
        .await
        .unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Succeeded, "{runs:?}");
    let (_, by_automation) = deliveries(&snapshot(&hooks));
    assert_eq!(by_automation.get(&scheduled), Some(&1));

    // The load ends: both instances race to resolve; each alert resolves, and is told, once.
    let t = at("2026-03-02T10:05:30Z");
    cx.clock.set(t);
    for d in &hot {
        two.store
            .insert_metrics(*d, w.org_a, &[cpu(t, 10.0)])
            .await
            .unwrap();
    }
    let reports = race(&one, &two, w.org_a, &hot).await;
    let resolved: usize = reports.iter().map(|r| r.resolved.len()).sum();
    assert_eq!(resolved, HOT_DEVICES, "{reports:?}");
    settle(&one, &two).await;
    let (events, _) = deliveries(&snapshot(&hooks));
    assert_eq!(events["alert.resolved"].len(), HOT_DEVICES);
    for id in &raised {
        let kinds: Vec<String> = oa
            .alerts()
            .alert_events(*id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| k != "notified")
            .collect();
        assert_eq!(kinds, ["raised", "auto_resolved"]);
    }

    // The ticking instance stops. Its lease holds for three ticks without renewal; then the
    // other takes the ticking over, and the first, back, stands by.
    let (leader, standby) = if reports[0].standby {
        (&two, &one)
    } else {
        (&one, &two)
    };
    cx.clock.set(t + chrono::Duration::seconds(60));
    assert!(standby.engine.tick().await.unwrap().standby);
    cx.clock.set(t + chrono::Duration::seconds(91));
    assert!(!standby.engine.tick().await.unwrap().standby);
    assert!(leader.engine.tick().await.unwrap().standby);
    assert!(!standby.engine.tick().await.unwrap().standby);

    two.store.close().await;
}

breeze_store::on_both_backends!(two_instances_raise_notify_and_automate_once);
