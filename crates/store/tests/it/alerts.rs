//! Alerts and alert rules: rule lifecycle, evaluation over stored samples, one unresolved alert
//! per rule and device, cooldown, acknowledgement and resolution with history and audit,
//! listings with cursors, and confinement to the organization.

use breeze_agent_proto::{DiskUsageSample, MetricSample, NetworkSample};
use breeze_core::{
    Actor, AlertCondition, AlertStatus, ChannelKind, Comparison, DeviceStatus, Metric, Severity,
};
use breeze_store::{
    AlertFilter, AuditFilter, NewChannel, NewRule, Observed, RuleTarget, RuleUpdate, StoreError,
    testing::Ctx,
};
use chrono::Duration;

use crate::{audit, tenancy::new_device};

fn cpu_rule(name: &str, target: RuleTarget) -> NewRule {
    NewRule {
        name: name.into(),
        description: None,
        severity: Severity::High,
        enabled: true,
        condition: AlertCondition::Metric {
            metric: Metric::Cpu,
            comparison: Comparison::Above,
            threshold: 90.0,
            duration_minutes: 5,
        },
        target,
        cooldown_minutes: 10,
        auto_resolve: true,
        channel_ids: vec![],
        created_by: "test".into(),
    }
}

fn sample(at: breeze_core::Timestamp, cpu: f64, disk_used: f64, rx: u64) -> MetricSample {
    MetricSample {
        at,
        cpu_percent: cpu,
        ram_percent: 40.0,
        ram_used_bytes: 1 << 30,
        disks: vec![DiskUsageSample {
            mount: "/".into(),
            used_percent: disk_used,
        }],
        network: vec![NetworkSample {
            interface: "eth0".into(),
            rx_bytes: rx,
            tx_bytes: 0,
        }],
        process_count: 100,
    }
}

async fn actions(cx: &Ctx, org: breeze_core::OrgId) -> Vec<String> {
    let page = cx
        .store
        .org(org)
        .audit()
        .query_audit(&AuditFilter::default(), None, 200)
        .await
        .unwrap();
    page.records.into_iter().map(|r| r.event.action).collect()
}

async fn rules_alerts_and_their_lifecycle(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(partner.id, "A", "a", audit("organization.create", "org"))
        .await
        .unwrap();
    let b = s
        .create_organization(partner.id, "B", "b", audit("organization.create", "org"))
        .await
        .unwrap();
    let (oa, ob) = (s.org(a.id), s.org(b.id));
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let site_b = ob
        .tenancy()
        .create_site("B-HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let hot = oa
        .devices()
        .create_device(
            new_device(site.id, "hot", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let cool = oa
        .devices()
        .create_device(
            new_device(site.id, "cool", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let dev_b = ob
        .devices()
        .create_device(
            new_device(site_b.id, "b-1", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let group_b = ob
        .tenancy()
        .create_group("B group", None, None, audit("device_group.create", "g"))
        .await
        .unwrap();

    // Targets and channels of another organization are unknown here.
    for target in [
        RuleTarget::Device(dev_b.id),
        RuleTarget::Site(site_b.id),
        RuleTarget::Group(group_b.id),
    ] {
        let err = oa
            .alerts()
            .create_rule(
                cpu_rule("x", target),
                audit("alert_rule.create", "alert_rule"),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{target:?}: {err}");
    }
    let channel_b = ob
        .alerts()
        .create_channel(
            NewChannel {
                name: "ops".into(),
                kind: ChannelKind::InApp,
                config: serde_json::json!({}),
                secret: None,
            },
            audit("notification_channel.create", "notification_channel"),
        )
        .await
        .unwrap();
    let mut foreign = cpu_rule("x", RuleTarget::Organization);
    foreign.channel_ids = vec![channel_b.id];
    assert!(matches!(
        oa.alerts()
            .create_rule(foreign, audit("alert_rule.create", "alert_rule"))
            .await
            .unwrap_err(),
        StoreError::NotFound("notification channel")
    ));
    // Bad conditions and oversized fields are refused before anything is written.
    let mut bad = cpu_rule("bad", RuleTarget::Organization);
    bad.condition = AlertCondition::Metric {
        metric: Metric::Cpu,
        comparison: Comparison::Above,
        threshold: 500.0,
        duration_minutes: 5,
    };
    assert!(matches!(
        oa.alerts()
            .create_rule(bad, audit("alert_rule.create", "alert_rule"))
            .await
            .unwrap_err(),
        StoreError::Invalid(_)
    ));
    let long = cpu_rule(&"n".repeat(300), RuleTarget::Organization);
    assert!(matches!(
        oa.alerts()
            .create_rule(long, audit("alert_rule.create", "alert_rule"))
            .await
            .unwrap_err(),
        StoreError::Invalid(_)
    ));

    let in_app = oa
        .alerts()
        .create_channel(
            NewChannel {
                name: "dashboard".into(),
                kind: ChannelKind::InApp,
                config: serde_json::json!({}),
                secret: None,
            },
            audit("notification_channel.create", "notification_channel"),
        )
        .await
        .unwrap();
    let mut new = cpu_rule("CPU hot", RuleTarget::Site(site.id));
    new.channel_ids = vec![in_app.id, in_app.id];
    let rule = oa
        .alerts()
        .create_rule(new, audit("alert_rule.create", "alert_rule"))
        .await
        .unwrap();
    assert_eq!(rule.channel_ids, vec![in_app.id], "duplicates collapse");
    assert_eq!(rule.target().unwrap(), RuleTarget::Site(site.id));
    assert!(
        ob.alerts().get_rule(rule.id).await.is_err(),
        "another organization cannot see the rule"
    );
    assert!(matches!(
        oa.alerts()
            .create_rule(
                cpu_rule("CPU hot", RuleTarget::Organization),
                audit("alert_rule.create", "alert_rule")
            )
            .await
            .unwrap_err(),
        StoreError::Conflict(_)
    ));

    // Six minutes of samples every 30 s: "hot" above 90 % throughout, "cool" below at the end.
    let now = s.clock().now();
    let mut hot_samples = Vec::new();
    let mut cool_samples = Vec::new();
    for i in 0..12 {
        let at = now - Duration::seconds(360) + Duration::seconds(30 * (i + 1));
        hot_samples.push(sample(at, 95.0, 50.0, 1000));
        cool_samples.push(sample(at, if i == 11 { 40.0 } else { 95.0 }, 50.0, 1000));
    }
    s.insert_metrics(hot.id, a.id, &hot_samples).await.unwrap();
    s.insert_metrics(cool.id, a.id, &cool_samples)
        .await
        .unwrap();
    let obs = oa.alerts().observe_rule(&rule).await.unwrap();
    let state = |d| obs.iter().find(|o| o.device_id == d).map(|o| o.state);
    assert_eq!(state(hot.id), Some(Observed::Breaching));
    assert_eq!(state(cool.id), Some(Observed::Clear));

    let alert = oa
        .alerts()
        .raise_alert(&rule, hot.id, Some(95.0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(alert.status, AlertStatus::Open);
    assert_eq!(alert.severity, Severity::High);
    assert!(alert.title.contains("hot"), "{}", alert.title);
    assert!(
        oa.alerts()
            .raise_alert(&rule, hot.id, Some(96.0))
            .await
            .unwrap()
            .is_none(),
        "one unresolved alert per rule and device"
    );

    // Cross-organization ids: invisible and unchangeable.
    assert!(matches!(
        ob.alerts().get_alert(alert.id).await.unwrap_err(),
        StoreError::NotFound("alert")
    ));
    let user = Actor::system("someone");
    assert!(matches!(
        ob.alerts()
            .acknowledge_alert(alert.id, &user, None, audit("alert.acknowledge", "alert"))
            .await
            .unwrap_err(),
        StoreError::NotFound("alert")
    ));
    assert!(
        ob.alerts()
            .delete_rule(rule.id, &user, audit("alert_rule.delete", "alert_rule"))
            .await
            .is_err()
    );

    let acked = oa
        .alerts()
        .acknowledge_alert(
            alert.id,
            &user,
            Some("looking"),
            audit("alert.acknowledge", "alert"),
        )
        .await
        .unwrap();
    assert_eq!(acked.status, AlertStatus::Acknowledged);
    assert_eq!(acked.acknowledged_by.as_deref(), Some("system:someone"));
    assert!(matches!(
        oa.alerts()
            .acknowledge_alert(alert.id, &user, None, audit("alert.acknowledge", "alert"))
            .await
            .unwrap_err(),
        StoreError::Conflict(_)
    ));
    assert!(matches!(
        oa.alerts()
            .acknowledge_alert(
                alert.id,
                &user,
                Some(&"x".repeat(3000)),
                audit("alert.acknowledge", "alert")
            )
            .await
            .unwrap_err(),
        StoreError::Invalid(_)
    ));
    let resolved = oa
        .alerts()
        .resolve_alert(
            alert.id,
            &user,
            Some("fixed"),
            audit("alert.resolve", "alert"),
        )
        .await
        .unwrap();
    assert_eq!(resolved.status, AlertStatus::Resolved);
    let history: Vec<(String, Option<String>)> = oa
        .alerts()
        .alert_events(alert.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.note))
        .collect();
    assert_eq!(
        history,
        vec![
            ("raised".into(), None),
            ("acknowledged".into(), Some("looking".into())),
            ("resolved".into(), Some("fixed".into())),
        ]
    );

    // Cooldown: 10 minutes after the resolution nothing new is raised; after it, one is.
    assert!(
        oa.alerts()
            .raise_alert(&rule, hot.id, None)
            .await
            .unwrap()
            .is_none()
    );
    cx.clock.advance(Duration::minutes(11));
    let again = oa
        .alerts()
        .raise_alert(&rule, hot.id, None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        oa.alerts()
            .auto_resolve_alert(again.id, Some(10.0))
            .await
            .unwrap()
    );
    assert!(
        !oa.alerts()
            .auto_resolve_alert(again.id, Some(10.0))
            .await
            .unwrap(),
        "resolving twice changes nothing"
    );

    // Samples are now 11 minutes old: nothing to say about either device.
    assert!(oa.alerts().observe_rule(&rule).await.unwrap().is_empty());

    // Listing: filters and cursors.
    cx.clock.advance(Duration::minutes(11));
    let third = oa
        .alerts()
        .raise_alert(&rule, cool.id, None)
        .await
        .unwrap()
        .unwrap();
    let page = oa
        .alerts()
        .list_alerts(&AlertFilter::default(), None, 2)
        .await
        .unwrap();
    assert_eq!(page.alerts.len(), 2);
    assert_eq!(page.alerts[0].id, third.id, "newest first");
    let rest = oa
        .alerts()
        .list_alerts(&AlertFilter::default(), page.next_cursor, 2)
        .await
        .unwrap();
    assert_eq!(rest.alerts.len(), 1);
    assert!(rest.next_cursor.is_none());
    let open = oa
        .alerts()
        .list_alerts(
            &AlertFilter {
                status: Some(AlertStatus::Open),
                device: Some(cool.id),
                severity: Some(Severity::High),
                rule: Some(rule.id),
                ..AlertFilter::default()
            },
            None,
            50,
        )
        .await
        .unwrap();
    assert_eq!(open.alerts.len(), 1);
    assert!(
        ob.alerts()
            .list_alerts(&AlertFilter::default(), None, 50)
            .await
            .unwrap()
            .alerts
            .is_empty()
    );
    let summary = oa.alerts().alert_summary().await.unwrap();
    assert_eq!((summary.open, summary.resolved, summary.rules), (1, 2, 1));

    // Update and delete: deletion resolves what is unresolved and hides the rule.
    let updated = oa
        .alerts()
        .update_rule(
            rule.id,
            RuleUpdate {
                severity: Some(Severity::Critical),
                target: Some(RuleTarget::Device(hot.id)),
                ..RuleUpdate::default()
            },
            audit("alert_rule.update", "alert_rule"),
        )
        .await
        .unwrap();
    assert_eq!(updated.severity, Severity::Critical);
    assert!(matches!(
        oa.alerts()
            .update_rule(
                rule.id,
                RuleUpdate {
                    target: Some(RuleTarget::Device(dev_b.id)),
                    ..RuleUpdate::default()
                },
                audit("alert_rule.update", "alert_rule"),
            )
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));
    assert_eq!(
        oa.alerts()
            .delete_rule(rule.id, &user, audit("alert_rule.delete", "alert_rule"))
            .await
            .unwrap(),
        1
    );
    assert!(oa.alerts().get_rule(rule.id).await.is_err());
    assert_eq!(
        oa.alerts().get_alert(third.id).await.unwrap().status,
        AlertStatus::Resolved
    );

    let logged = actions(&cx, a.id).await;
    for action in [
        "alert_rule.create",
        "alert.raise",
        "alert.acknowledge",
        "alert.resolve",
        "alert.auto_resolve",
        "alert_rule.update",
        "alert_rule.delete",
    ] {
        assert!(logged.iter().any(|a| a == action), "{action} in {logged:?}");
    }
    assert!(
        !actions(&cx, b.id)
            .await
            .iter()
            .any(|a| a.starts_with("alert.")),
        "B's log holds none of A's alert changes"
    );
}

async fn offline_disk_free_and_network_conditions(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(partner.id, "A", "a", audit("organization.create", "org"))
        .await
        .unwrap();
    let oa = s.org(a.id);
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let now = s.clock().now();
    let mut gone = new_device(site.id, "gone", DeviceStatus::Offline);
    gone.last_seen_at = Some(now - Duration::minutes(30));
    let gone = oa
        .devices()
        .create_device(gone, audit("device.create", "device"))
        .await
        .unwrap();
    let mut blip = new_device(site.id, "blip", DeviceStatus::Offline);
    blip.last_seen_at = Some(now - Duration::minutes(2));
    let blip = oa
        .devices()
        .create_device(blip, audit("device.create", "device"))
        .await
        .unwrap();
    let up = oa
        .devices()
        .create_device(
            new_device(site.id, "up", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let group = oa
        .tenancy()
        .create_group("G", None, None, audit("device_group.create", "g"))
        .await
        .unwrap();
    oa.tenancy().add_to_group(group.id, up.id).await.unwrap();

    let mut offline = cpu_rule("offline", RuleTarget::Organization);
    offline.condition = AlertCondition::Offline { minutes: 10 };
    let offline = oa
        .alerts()
        .create_rule(offline, audit("alert_rule.create", "alert_rule"))
        .await
        .unwrap();
    let obs = oa.alerts().observe_rule(&offline).await.unwrap();
    let state = |d| obs.iter().find(|o| o.device_id == d).map(|o| o.state);
    assert_eq!(state(gone.id), Some(Observed::Breaching));
    assert_eq!(state(blip.id), Some(Observed::Unknown));
    assert_eq!(state(up.id), Some(Observed::Clear));

    // Disk free below 15 % on the newest samples, and network in above 1 KB/s over 5 minutes,
    // on a group's members only.
    let mut samples = Vec::new();
    for i in 0..11 {
        samples.push(sample(
            now - Duration::seconds(300) + Duration::seconds(30 * (i + 1)),
            10.0,
            90.0,
            60_000,
        ));
    }
    s.insert_metrics(up.id, a.id, &samples).await.unwrap();
    s.insert_metrics(gone.id, a.id, &samples).await.unwrap();
    let mut disk = cpu_rule("disk", RuleTarget::Group(group.id));
    disk.condition = AlertCondition::Metric {
        metric: Metric::DiskFree,
        comparison: Comparison::Below,
        threshold: 15.0,
        duration_minutes: 0,
    };
    let disk = oa
        .alerts()
        .create_rule(disk, audit("alert_rule.create", "alert_rule"))
        .await
        .unwrap();
    let obs = oa.alerts().observe_rule(&disk).await.unwrap();
    assert_eq!(obs.len(), 1, "group members only: {obs:?}");
    assert_eq!(obs[0].device_id, up.id);
    assert_eq!(obs[0].state, Observed::Breaching);
    assert!((obs[0].value.unwrap() - 10.0).abs() < 1e-9);

    let mut net = cpu_rule("net", RuleTarget::Device(up.id));
    net.condition = AlertCondition::Metric {
        metric: Metric::NetworkIn,
        comparison: Comparison::Above,
        threshold: 1000.0,
        duration_minutes: 5,
    };
    let net = oa
        .alerts()
        .create_rule(net, audit("alert_rule.create", "alert_rule"))
        .await
        .unwrap();
    let obs = oa.alerts().observe_rule(&net).await.unwrap();
    assert_eq!(obs.len(), 1);
    // 10 samples of 60,000 bytes in the window (the first lies on its open start) over 300 s.
    assert_eq!(obs[0].state, Observed::Breaching);
    assert!((obs[0].value.unwrap() - 2000.0).abs() < 1.0, "{obs:?}");
}

/// A channel is deleted with an audit record, not while a rule names it, and never from
/// another organization.
async fn channels_are_deleted_only_when_unused(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let channel = oa
        .alerts()
        .create_channel(
            NewChannel {
                name: "app".into(),
                kind: ChannelKind::InApp,
                config: serde_json::json!({}),
                secret: None,
            },
            audit("notification_channel.create", "c"),
        )
        .await
        .unwrap();
    let mut rule = cpu_rule("hot", RuleTarget::Organization);
    rule.channel_ids = vec![channel.id];
    let rule = oa
        .alerts()
        .create_rule(rule, audit("alert_rule.create", "r"))
        .await
        .unwrap();
    let err = ob
        .alerts()
        .delete_channel(channel.id, audit("notification_channel.delete", "c"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    let err = oa
        .alerts()
        .delete_channel(channel.id, audit("notification_channel.delete", "c"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    oa.alerts()
        .update_rule(
            rule.id,
            RuleUpdate {
                channel_ids: Some(vec![]),
                ..RuleUpdate::default()
            },
            audit("alert_rule.update", "r"),
        )
        .await
        .unwrap();
    oa.alerts()
        .delete_channel(channel.id, audit("notification_channel.delete", "c"))
        .await
        .unwrap();
    assert!(oa.alerts().list_channels().await.unwrap().is_empty());
    assert!(
        actions(&cx, a)
            .await
            .contains(&"notification_channel.delete".to_owned())
    );
}

breeze_store::on_both_backends!(
    rules_alerts_and_their_lifecycle,
    offline_disk_free_and_network_conditions,
    channels_are_deleted_only_when_unused
);
