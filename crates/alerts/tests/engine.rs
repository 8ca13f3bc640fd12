//! The alert engine end to end on both backends, stepping a manual clock: samples cross a
//! threshold for the rule's duration, one alert is raised (never two), its channels are told —
//! a real SMTP conversation with a listener this test runs, a signed webhook to a local HTTP
//! server that fails once and is retried, in-app — while a dead and a hanging channel fail
//! without holding up evaluation; the condition clears and the alert resolves itself.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration as StdDuration;

use breeze_agent_proto::{DiskUsageSample, MetricSample};
use breeze_alerts::{
    AlertEngine, AlertEngineConfig, NotifyConfig, SmtpConfig, SmtpSecurity, sign,
    testing::{Hook, smtp_server, webhook_server},
};
use breeze_core::{
    Actor, AlertCondition, AlertStatus, AuditEvent, ChannelKind, Comparison, DeviceStatus, Metric,
    OrgId, Severity, SiteId,
};
use breeze_store::{NewChannel, NewDevice, NewRule, RuleTarget, Store, testing::Ctx};
use chrono::Duration;
use tokio::net::TcpListener;

fn audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("test"), action, "test")
}

/// Accepts connections and never answers.
async fn hanging_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    port
}

fn config(smtp_port: u16, allow_private: bool) -> AlertEngineConfig {
    AlertEngineConfig {
        tick: StdDuration::from_secs(30),
        rules_per_tick: 100,
        notify: NotifyConfig {
            smtp: Some(SmtpConfig {
                host: "127.0.0.1".into(),
                port: smtp_port,
                security: SmtpSecurity::None,
                from: "Breeze <alerts@breeze.test>".into(),
                username: None,
                password: None,
            }),
            timeout: StdDuration::from_secs(2),
            webhook_attempts: 3,
            webhook_backoff: StdDuration::from_millis(20),
            allow_private_targets: allow_private,
        },
    }
}

async fn tenant(s: &Store) -> (OrgId, SiteId) {
    let partner = s
        .create_partner("P", "p", audit("partner.create"))
        .await
        .unwrap();
    let org = s
        .create_organization(partner.id, "A", "a", audit("organization.create"))
        .await
        .unwrap();
    let site = s
        .org(org.id)
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create"))
        .await
        .unwrap();
    (org.id, site.id)
}

fn device(site: SiteId, hostname: &str, status: DeviceStatus) -> NewDevice {
    breeze_store::testing::new_device(site, hostname, status)
}

fn cpu(at: breeze_core::Timestamp, percent: f64) -> MetricSample {
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

fn channel(name: &str, kind: ChannelKind, config: serde_json::Value) -> NewChannel {
    NewChannel {
        name: name.into(),
        kind,
        config,
        secret: (kind == ChannelKind::Webhook).then(|| "a-secret-of-some-length".to_owned()),
    }
}

async fn a_breach_raises_notifies_and_resolves(cx: Ctx) {
    let s = &cx.store;
    let (org, site) = tenant(s).await;
    let o = s.org(org);
    let hot = o
        .devices()
        .create_device(
            device(site, "hot", DeviceStatus::Online),
            audit("device.create"),
        )
        .await
        .unwrap();
    let (smtp_port, mail) = smtp_server().await.unwrap();
    let (hook_port, hooks) = webhook_server(1).await.unwrap();
    let hang_port = hanging_server().await;
    let dead_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut channels = Vec::new();
    for (name, kind, config) in [
        (
            "mail",
            ChannelKind::Email,
            serde_json::json!({ "to": ["ops@example.com"] }),
        ),
        (
            "hook",
            ChannelKind::Webhook,
            serde_json::json!({ "url": format!("http://127.0.0.1:{hook_port}/hook") }),
        ),
        ("app", ChannelKind::InApp, serde_json::json!({})),
        (
            "dead",
            ChannelKind::Webhook,
            serde_json::json!({ "url": format!("http://127.0.0.1:{dead_port}/hook") }),
        ),
        (
            "hang",
            ChannelKind::Webhook,
            serde_json::json!({ "url": format!("http://127.0.0.1:{hang_port}/hook") }),
        ),
    ] {
        channels.push(
            o.alerts()
                .create_channel(
                    channel(name, kind, config),
                    audit("notification_channel.create"),
                )
                .await
                .unwrap(),
        );
    }
    o.alerts()
        .create_rule(
            NewRule {
                name: "CPU hot".into(),
                description: None,
                severity: Severity::Critical,
                enabled: true,
                condition: AlertCondition::Metric {
                    metric: Metric::Cpu,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: 5,
                },
                target: RuleTarget::Organization,
                cooldown_minutes: 15,
                auto_resolve: true,
                channel_ids: channels.iter().map(|c| c.id).collect(),
                created_by: "test".into(),
            },
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let engine = AlertEngine::new(s.clone(), config(smtp_port, true));

    // Four minutes above the threshold: not yet for five.
    let start = s.clock().now();
    for minute in 0..4 {
        let at = start + Duration::minutes(minute);
        cx.clock.set(at);
        s.insert_metrics(
            hot.id,
            org,
            &[cpu(at, 97.0), cpu(at + Duration::seconds(30), 97.0)],
        )
        .await
        .unwrap();
        assert!(
            engine.tick().await.unwrap().raised.is_empty(),
            "minute {minute}"
        );
    }
    for minute in 4..7 {
        let at = start + Duration::minutes(minute);
        s.insert_metrics(
            hot.id,
            org,
            &[cpu(at, 97.0), cpu(at + Duration::seconds(30), 97.0)],
        )
        .await
        .unwrap();
    }
    cx.clock
        .set(start + Duration::minutes(6) + Duration::seconds(45));
    let began = std::time::Instant::now();
    let report = engine.tick().await.unwrap();
    assert!(
        began.elapsed() < StdDuration::from_secs(1),
        "evaluation does not wait for channels (a hanging one takes 2 s)"
    );
    assert_eq!(report.raised.len(), 1, "{report:?}");
    let alert_id = report.raised[0];
    assert!(
        engine.tick().await.unwrap().raised.is_empty(),
        "no second alert while one is open"
    );
    engine.settle().await;

    let mail = mail.lock().unwrap().clone();
    assert_eq!(mail.len(), 1, "{mail:?}");
    assert!(mail[0].contains("RCPT TO:<ops@example.com>"), "{}", mail[0]);
    assert!(
        mail[0].contains("Subject: [Breeze critical] CPU hot: hot"),
        "{}",
        mail[0]
    );

    let hooks_seen = hooks.lock().unwrap().clone();
    assert_eq!(hooks_seen.len(), 2, "one failure, one retry that succeeded");
    let header = |h: &Hook, name: &str| h.headers[name].to_str().unwrap().to_owned();
    assert_eq!(
        header(&hooks_seen[0], "x-breeze-delivery"),
        header(&hooks_seen[1], "x-breeze-delivery"),
        "a retry is the same delivery"
    );
    for h in &hooks_seen {
        let expected = sign(
            "a-secret-of-some-length",
            &header(h, "x-breeze-timestamp"),
            &h.body,
        );
        assert_eq!(
            header(h, "x-breeze-signature"),
            format!("sha256={expected}")
        );
        assert_eq!(header(h, "x-breeze-event"), "alert.raised");
    }
    let body: serde_json::Value = serde_json::from_str(&hooks_seen[1].body).unwrap();
    assert_eq!(body["alert"]["id"], serde_json::json!(alert_id));

    let events = o.alerts().alert_events(alert_id).await.unwrap();
    let outcome = |name: &str| {
        events
            .iter()
            .find(|e| e.details.as_ref().is_some_and(|d| d["channel"] == name))
            .map(|e| e.kind.clone())
    };
    assert_eq!(outcome("mail").as_deref(), Some("notified"));
    assert_eq!(outcome("hook").as_deref(), Some("notified"));
    assert_eq!(outcome("app").as_deref(), Some("notified"));
    assert_eq!(outcome("dead").as_deref(), Some("notify_failed"));
    assert_eq!(outcome("hang").as_deref(), Some("notify_failed"));

    // The load ends: the next sample is below the threshold and the alert resolves itself.
    let later = start + Duration::minutes(8);
    cx.clock.set(later);
    s.insert_metrics(hot.id, org, &[cpu(later, 12.0)])
        .await
        .unwrap();
    let report = engine.tick().await.unwrap();
    assert_eq!(report.resolved, vec![alert_id]);
    engine.settle().await;
    let alert = o.alerts().get_alert(alert_id).await.unwrap();
    assert_eq!(alert.status, AlertStatus::Resolved);
    assert_eq!(alert.resolved_by.as_deref(), Some("system:alert-engine"));
    let hooks_seen = hooks.lock().unwrap().clone();
    assert_eq!(
        hooks_seen.last().unwrap().headers["x-breeze-event"],
        "alert.resolved"
    );

    // Within the cooldown a new breach raises nothing.
    for minute in 9..16 {
        let at = start + Duration::minutes(minute);
        s.insert_metrics(
            hot.id,
            org,
            &[cpu(at, 99.0), cpu(at + Duration::seconds(30), 99.0)],
        )
        .await
        .unwrap();
    }
    cx.clock.set(start + Duration::minutes(16));
    assert!(engine.tick().await.unwrap().raised.is_empty());
}

async fn offline_devices_and_private_webhooks(cx: Ctx) {
    let s = &cx.store;
    let (org, site) = tenant(s).await;
    let o = s.org(org);
    let mut gone = device(site, "gone", DeviceStatus::Offline);
    gone.last_seen_at = Some(s.clock().now() - Duration::minutes(3));
    let gone = o
        .devices()
        .create_device(gone, audit("device.create"))
        .await
        .unwrap();
    let (hook_port, hooks) = webhook_server(0).await.unwrap();
    let hook = o
        .alerts()
        .create_channel(
            channel(
                "hook",
                ChannelKind::Webhook,
                serde_json::json!({ "url": format!("http://127.0.0.1:{hook_port}/hook") }),
            ),
            audit("notification_channel.create"),
        )
        .await
        .unwrap();
    o.alerts()
        .create_rule(
            NewRule {
                name: "offline".into(),
                description: None,
                severity: Severity::Medium,
                enabled: true,
                condition: AlertCondition::Offline { minutes: 10 },
                target: RuleTarget::Device(gone.id),
                cooldown_minutes: 0,
                auto_resolve: true,
                channel_ids: vec![hook.id],
                created_by: "test".into(),
            },
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    // Private targets refused: the production default.
    let engine = AlertEngine::new(s.clone(), config(1, false));
    assert!(
        engine.tick().await.unwrap().raised.is_empty(),
        "3 minutes offline"
    );
    cx.clock.advance(Duration::minutes(8));
    let report = engine.tick().await.unwrap();
    assert_eq!(report.raised.len(), 1);
    engine.settle().await;
    assert!(
        hooks.lock().unwrap().is_empty(),
        "nothing reached 127.0.0.1"
    );
    let events = o.alerts().alert_events(report.raised[0]).await.unwrap();
    let failed = events.iter().find(|e| e.kind == "notify_failed").unwrap();
    let detail = failed.details.as_ref().unwrap()["detail"].as_str().unwrap();
    assert!(detail.contains("non-public"), "{detail}");
}

/// A weekly window over the device's site, open now in its own time zone: the breach raises
/// nothing and is recorded once (on the rule, audited), however many ticks see it; once the
/// window is over the still-breaching device raises.
async fn a_maintenance_window_suppresses_then_lets_through(cx: Ctx) {
    use breeze_core::{DayOfWeek, MaintenanceSchedule, maintenance::parse_hhmm};
    use breeze_store::{AuditFilter, NewWindow};
    let s = &cx.store;
    let (org, site) = tenant(s).await;
    let o = s.org(org);
    let hot = o
        .devices()
        .create_device(
            device(site, "hot", DeviceStatus::Online),
            audit("device.create"),
        )
        .await
        .unwrap();
    let rule = o
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
                    duration_minutes: 0,
                },
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
    // Monday 2026-01-05 21:30 in Tokyo is 12:30 UTC; the window is Mondays 21:00 for an hour.
    let start: breeze_core::Timestamp = "2026-01-05T12:30:00Z".parse().unwrap();
    cx.clock.set(start);
    let window = o
        .maintenance()
        .create_window(
            NewWindow {
                name: "Patch night".into(),
                description: None,
                target: RuleTarget::Site(site),
                time_zone: "Asia/Tokyo".into(),
                schedule: MaintenanceSchedule::Weekly {
                    days: vec![DayOfWeek::Mon],
                    start_time: parse_hhmm("21:00").unwrap(),
                    duration_minutes: 60,
                },
                suppress_alerts: true,
                enabled: true,
                created_by: "test".into(),
            },
            audit("maintenance_window.create"),
        )
        .await
        .unwrap();
    let engine = AlertEngine::new(s.clone(), config(1, false));
    for minute in 0..3 {
        let at = start + Duration::minutes(minute);
        cx.clock.set(at);
        s.insert_metrics(hot.id, org, &[cpu(at, 99.0)])
            .await
            .unwrap();
        let report = engine.tick().await.unwrap();
        assert!(report.raised.is_empty(), "minute {minute}: {report:?}");
        assert_eq!(report.suppressed, 1, "minute {minute}");
    }
    let held = o
        .maintenance()
        .suppressions(Some(rule.id), None, 10)
        .await
        .unwrap();
    assert_eq!(held.len(), 1, "one record per occurrence: {held:?}");
    assert_eq!(held[0].device_id, hot.id);
    assert_eq!(held[0].window_id, window.id);
    assert_eq!(
        held[0].occurrence_start,
        "2026-01-05T12:00:00Z"
            .parse::<breeze_core::Timestamp>()
            .unwrap()
    );
    let audited = o
        .audit()
        .query_audit(&AuditFilter::default(), None, 100)
        .await
        .unwrap()
        .records
        .into_iter()
        .filter(|r| r.event.action == "alert.suppress")
        .count();
    assert_eq!(audited, 1);
    assert!(
        o.alerts()
            .list_alerts(&Default::default(), None, 10)
            .await
            .unwrap()
            .alerts
            .is_empty()
    );

    // 13:00 UTC is 22:00 in Tokyo: the window has closed, the breach raises.
    let after = "2026-01-05T13:00:30Z".parse().unwrap();
    cx.clock.set(after);
    s.insert_metrics(hot.id, org, &[cpu(after, 99.0)])
        .await
        .unwrap();
    let report = engine.tick().await.unwrap();
    assert_eq!(report.raised.len(), 1, "{report:?}");
    assert_eq!(report.suppressed, 0);
}

/// Incremental evaluation: the report that meets the condition raises at once (no tick), the
/// tick then leaves metric rules alone but for its periodic sweep, and both paths together —
/// even at the same moment — raise and resolve each (rule, device) once.
async fn reports_raise_at_once_and_both_paths_agree(cx: Ctx) {
    let s = &cx.store;
    let (org, site) = tenant(s).await;
    let o = s.org(org);
    let hot = o
        .devices()
        .create_device(device(site, "hot", DeviceStatus::Online), audit("d"))
        .await
        .unwrap();
    let cool = o
        .devices()
        .create_device(device(site, "cool", DeviceStatus::Online), audit("d"))
        .await
        .unwrap();
    let rule = o
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
                channel_ids: vec![],
                created_by: "test".into(),
            },
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let engine = std::sync::Arc::new(AlertEngine::new(s.clone(), AlertEngineConfig::default()));
    engine.enable_incremental();
    let metrics = breeze_core::TelemetryKind::Metrics;
    let start = s.clock().now();
    for step in 0..4 {
        let at = start + Duration::seconds(30 * step);
        cx.clock.set(at);
        for (d, percent) in [(hot.id, 97.0), (cool.id, 20.0)] {
            s.insert_metrics(d, org, &[cpu(at, percent)]).await.unwrap();
        }
        let report = engine
            .devices_reported(org, &[hot.id, cool.id], metrics)
            .await
            .unwrap();
        assert!(report.raised.is_empty(), "step {step}: {report:?}");
    }
    // The sample that completes two minutes raises on arrival.
    let at = start + Duration::minutes(2);
    cx.clock.set(at);
    s.insert_metrics(hot.id, org, &[cpu(at, 97.0)])
        .await
        .unwrap();
    let report = engine
        .devices_reported(org, &[hot.id], metrics)
        .await
        .unwrap();
    assert_eq!(report.raised.len(), 1, "{report:?}");
    let alert = report.raised[0];
    let (just_hot, both) = ([hot.id], [hot.id, cool.id]);
    // The tick (its first is a sweep) and another arrival, at once: nothing more.
    let (tick, again) = tokio::join!(
        engine.tick(),
        engine.devices_reported(org, &just_hot, metrics)
    );
    assert!(tick.unwrap().raised.is_empty());
    assert!(again.unwrap().raised.is_empty());
    assert_eq!(
        o.alerts()
            .unresolved_alerts_of_rule(rule.id)
            .await
            .unwrap()
            .len(),
        1
    );
    // Cleared: both paths race to resolve; one does.
    let at = at + Duration::seconds(30);
    cx.clock.set(at);
    s.insert_metrics(hot.id, org, &[cpu(at, 20.0)])
        .await
        .unwrap();
    let (a, b) = tokio::join!(
        engine.devices_reported(org, &just_hot, metrics),
        engine.devices_reported(org, &both, metrics)
    );
    assert_eq!(a.unwrap().resolved.len() + b.unwrap().resolved.len(), 1);
    // Between sweeps the tick leaves metric rules to the arrivals.
    assert_eq!(engine.tick().await.unwrap().rules, 0);
    let events = o.alerts().alert_events(alert).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["raised", "auto_resolved"]);
}

breeze_store::on_both_backends!(
    reports_raise_at_once_and_both_paths_agree,
    a_breach_raises_notifies_and_resolves,
    offline_devices_and_private_webhooks,
    a_maintenance_window_suppresses_then_lets_through
);
