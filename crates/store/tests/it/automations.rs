//! Automations: lifecycle with audit, confinement to the organization (another's script,
//! channel, rule, site, device and automation are not found), the schedule's lease (one claim
//! per occurrence however many instances ask; disabled and re-enabled schedules do not catch
//! up), runs queued once per alert, claimed once, finished with their per-device outcome, and
//! interrupted runs failed.

use std::collections::BTreeMap;

use breeze_core::{
    AlertCondition, AutomationTrigger, ChannelKind, Comparison, DeviceStatus, Metric, RunStatus,
    Severity, Timestamp,
};
use breeze_store::{
    ActionSpec, AuditFilter, AutomationUpdate, DeviceOutcome, NewAutomation, NewChannel, NewRule,
    NewRun, NewScript, RuleTarget, RunUpdate, StoreError, TriggerSpec, testing::Ctx,
};
use chrono::Duration;

use crate::{audit, tenancy::new_device};

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn script(name: &str) -> NewScript {
    NewScript {
        name: name.into(),
        description: String::new(),
        language: "bash".into(),
        category: "general".into(),
        body: "echo hi".into(),
        parameters: vec![],
        created_by: "test".into(),
    }
}

fn hourly(name: &str, script: uuid::Uuid) -> NewAutomation {
    NewAutomation {
        name: name.into(),
        description: None,
        enabled: true,
        trigger: TriggerSpec::Schedule {
            cron: "0 * * * *".into(),
            time_zone: "Europe/Berlin".into(),
        },
        action: ActionSpec::RunScript {
            script,
            parameters: BTreeMap::new(),
            timeout_seconds: 60,
        },
        target: RuleTarget::Organization,
        owner_actor: "api_key:k1".into(),
    }
}

fn queued(trigger: AutomationTrigger) -> NewRun {
    NewRun {
        trigger,
        occurrence_at: None,
        alert_id: None,
        device_id: None,
        requested_by: "api_key:k1".into(),
        status: RunStatus::Queued,
        message: None,
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

async fn automations_lifecycle_and_confinement(cx: Ctx) {
    let s = &cx.store;
    cx.clock.set(at("2026-02-02T10:20:00Z"));
    let (a, b) = crate::two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let site_b = ob
        .tenancy()
        .create_site("B", "UTC", audit("s", "site"))
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
    let mine = oa
        .scripts()
        .create_script(script("mine"), audit("script.create", "script"))
        .await
        .unwrap();
    let theirs = ob
        .scripts()
        .create_script(script("theirs"), audit("script.create", "script"))
        .await
        .unwrap();
    let channel_b = ob
        .alerts()
        .create_channel(
            NewChannel {
                name: "b".into(),
                kind: ChannelKind::InApp,
                config: serde_json::json!({}),
                secret: None,
            },
            audit("c", "c"),
        )
        .await
        .unwrap();
    let rule_b = ob
        .alerts()
        .create_rule(
            NewRule {
                name: "cpu".into(),
                description: None,
                severity: Severity::High,
                enabled: true,
                condition: AlertCondition::Metric {
                    metric: Metric::Cpu,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: 5,
                },
                target: RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: true,
                channel_ids: vec![],
                created_by: "t".into(),
            },
            audit("r", "r"),
        )
        .await
        .unwrap();

    // Created at 11:20 Berlin time: the next run is 12:00 there, 11:00 UTC.
    let created = oa
        .automations()
        .create_automation(
            hourly("nightly", mine.id),
            audit("automation.create", "automation"),
        )
        .await
        .unwrap();
    assert_eq!(created.next_run_at, Some(at("2026-02-02T11:00:00Z")));
    assert_eq!(created.owner_actor, "api_key:k1");
    assert_eq!(oa.automations().list_automations().await.unwrap().len(), 1);
    let dup = oa
        .automations()
        .create_automation(
            hourly("nightly", mine.id),
            audit("automation.create", "automation"),
        )
        .await
        .unwrap_err();
    assert!(matches!(dup, StoreError::Conflict(_)), "{dup}");

    // Another organization's script, channel, rule and device are not found; bad schedules
    // name the problem.
    let foreign: Vec<NewAutomation> = vec![
        hourly("x1", theirs.id),
        NewAutomation {
            action: ActionSpec::Notify {
                channel: channel_b.id,
                message: None,
            },
            ..hourly("x2", mine.id)
        },
        NewAutomation {
            trigger: TriggerSpec::Alert {
                rule: Some(rule_b.id),
                min_severity: None,
            },
            ..hourly("x3", mine.id)
        },
        NewAutomation {
            target: RuleTarget::Device(dev_b.id),
            ..hourly("x4", mine.id)
        },
        NewAutomation {
            target: RuleTarget::Site(site_b.id),
            ..hourly("x5", mine.id)
        },
    ];
    for new in foreign {
        let e = oa
            .automations()
            .create_automation(new.clone(), audit("automation.create", "automation"))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::NotFound(_)), "{}: {e}", new.name);
    }
    for (cron, tz, needle) in [
        ("every hour", "UTC", "five-field"),
        ("0 25 * * *", "UTC", "not a valid"),
        ("0 * * * *", "Atlantis/Capital", "IANA"),
    ] {
        let e = oa
            .automations()
            .create_automation(
                NewAutomation {
                    trigger: TriggerSpec::Schedule {
                        cron: cron.into(),
                        time_zone: tz.into(),
                    },
                    ..hourly("bad", mine.id)
                },
                audit("automation.create", "automation"),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains(needle), "{cron} {tz}: {e}");
    }
    let e = oa
        .automations()
        .create_automation(
            NewAutomation {
                action: ActionSpec::RunScript {
                    script: mine.id,
                    parameters: BTreeMap::new(),
                    timeout_seconds: 4,
                },
                ..hourly("bad", mine.id)
            },
            audit("automation.create", "automation"),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("timeoutSeconds"), "{e}");
    // B cannot see, change, delete or run A's automation.
    assert!(matches!(
        ob.automations().get_automation(created.id).await,
        Err(StoreError::NotFound("automation"))
    ));
    assert!(
        ob.automations()
            .update_automation(
                created.id,
                AutomationUpdate {
                    enabled: Some(false),
                    ..Default::default()
                },
                audit("automation.update", "automation"),
            )
            .await
            .is_err()
    );
    assert!(
        ob.automations()
            .delete_automation(created.id, audit("automation.delete", "automation"))
            .await
            .is_err()
    );
    assert!(
        ob.automations()
            .queue_run(
                created.id,
                queued(AutomationTrigger::Manual),
                audit("q", "q")
            )
            .await
            .is_err()
    );
    assert!(
        ob.automations()
            .list_automations()
            .await
            .unwrap()
            .is_empty()
    );

    // Disabled: no next run. Re-enabled two hours later: the next occurrence after now, no
    // catch-up of what passed while disabled. An update names its author the owner.
    let off = oa
        .automations()
        .update_automation(
            created.id,
            AutomationUpdate {
                enabled: Some(false),
                ..Default::default()
            },
            audit("automation.disable", "automation"),
        )
        .await
        .unwrap();
    assert_eq!(off.next_run_at, None);
    assert_eq!(off.owner_actor, "api_key:k1");
    cx.clock.advance(Duration::hours(2));
    let on = oa
        .automations()
        .update_automation(
            created.id,
            AutomationUpdate {
                enabled: Some(true),
                description: Some("now with words".into()),
                owner_actor: Some("oauth_grant:g2".into()),
                ..Default::default()
            },
            audit("automation.update", "automation"),
        )
        .await
        .unwrap();
    assert_eq!(on.next_run_at, Some(at("2026-02-02T13:00:00Z")));
    assert_eq!(on.owner_actor, "oauth_grant:g2");
    assert_eq!(on.description.as_deref(), Some("now with words"));

    // Runs: queued, claimed once, finished with each device's outcome.
    let run = oa
        .automations()
        .queue_run(
            created.id,
            queued(AutomationTrigger::Manual),
            audit("automation.run.queue", "automation"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    let claimed = s.cross_org().claim_queued_runs(10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].status, RunStatus::Running);
    assert!(
        s.cross_org()
            .claim_queued_runs(10)
            .await
            .unwrap()
            .is_empty()
    );
    let done = oa
        .automations()
        .update_run(
            run.id,
            RunUpdate {
                status: RunStatus::Succeeded,
                approval_ids: vec![],
                devices: vec![DeviceOutcome {
                    device_id: dev_b.id, // any id: the outcome is what the worker recorded
                    status: "completed".parse().unwrap(),
                    exit_code: Some(0),
                    ..Default::default()
                }],
                message: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.devices[0].exit_code, Some(0));
    assert!(done.finished_at.is_some());
    assert!(ob.automations().get_run(run.id).await.is_err());
    assert!(
        ob.automations()
            .list_runs(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        oa.automations()
            .list_runs(Some(created.id), 10)
            .await
            .unwrap()
            .len(),
        1
    );

    // Deleted with its history.
    oa.automations()
        .delete_automation(created.id, audit("automation.delete", "automation"))
        .await
        .unwrap();
    assert!(oa.automations().get_run(run.id).await.is_err());
    let log = actions(&cx, a).await;
    for expected in [
        "automation.create",
        "automation.disable",
        "automation.update",
        "automation.run.queue",
        "automation.run.finish",
        "automation.delete",
    ] {
        assert!(log.iter().any(|x| x == expected), "{expected} in {log:?}");
    }
}

async fn schedules_fire_once_and_alerts_queue_once(cx: Ctx) {
    let s = &cx.store;
    cx.clock.set(at("2026-02-02T10:20:00Z"));
    let (a, _) = crate::two_orgs(s).await;
    let oa = s.org(a);
    let mine = oa
        .scripts()
        .create_script(script("mine"), audit("script.create", "script"))
        .await
        .unwrap();
    let auto = oa
        .automations()
        .create_automation(
            NewAutomation {
                trigger: TriggerSpec::Schedule {
                    cron: "0 * * * *".into(),
                    time_zone: "UTC".into(),
                },
                ..hourly("hourly", mine.id)
            },
            audit("automation.create", "automation"),
        )
        .await
        .unwrap();
    let due = at("2026-02-02T11:00:00Z");
    assert!(
        s.cross_org()
            .due_automations(at("2026-02-02T10:20:00Z"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    cx.clock.set(at("2026-02-02T11:00:30Z"));
    let found = s
        .cross_org()
        .due_automations(at("2026-02-02T11:00:30Z"), 10)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    let run = |occurrence| NewRun {
        occurrence_at: Some(occurrence),
        ..queued(AutomationTrigger::Schedule)
    };
    // Two instances claim the same occurrence: one wins.
    let next = Some(at("2026-02-02T12:00:00Z"));
    let (x, y) = tokio::join!(
        s.claim_schedule(&found[0], due, next, run(due)),
        s.claim_schedule(&found[0], due, next, run(due)),
    );
    assert!(x.unwrap() ^ y.unwrap(), "exactly one instance claims it");
    assert!(
        !s.claim_schedule(&found[0], due, next, run(due))
            .await
            .unwrap()
    );
    assert_eq!(
        oa.automations()
            .list_runs(Some(auto.id), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        oa.automations()
            .get_automation(auto.id)
            .await
            .unwrap()
            .next_run_at,
        next
    );
    assert!(
        s.cross_org()
            .due_automations(at("2026-02-02T11:00:30Z"), 10)
            .await
            .unwrap()
            .is_empty()
    );

    // An alert queues one run per automation, however often it is seen.
    let alert_id = uuid::Uuid::now_v7();
    let by_alert = NewRun {
        alert_id: Some(alert_id),
        ..queued(AutomationTrigger::Alert)
    };
    assert!(
        oa.automations()
            .queue_run(
                auto.id,
                by_alert.clone(),
                audit("automation.run.queue", "automation")
            )
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        oa.automations()
            .queue_run(
                auto.id,
                by_alert,
                audit("automation.run.queue", "automation")
            )
            .await
            .unwrap()
            .is_none()
    );

    // A run left running past the limit by a stopped instance is failed, not retried.
    let claimed = s.cross_org().claim_queued_runs(10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(s.fail_interrupted_runs().await.unwrap(), 0);
    cx.clock.advance(Duration::minutes(31));
    assert_eq!(s.fail_interrupted_runs().await.unwrap(), 2);
    let runs = oa.automations().list_runs(Some(auto.id), 10).await.unwrap();
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Failed),
        "{runs:?}"
    );
    assert!(
        s.cross_org()
            .runs_awaiting_approval(10)
            .await
            .unwrap()
            .is_empty()
    );
}

breeze_store::on_both_backends!(
    automations_lifecycle_and_confinement,
    schedules_fire_once_and_alerts_queue_once
);
