//! Scheduled security scans (`security_scan` schedule, list_schedules, unschedule) and the
//! server's schedule worker under a test clock, on both backends.
//!
//! Scheduling is Tier 3 (a write key is refused; an execute key's call waits for a person).
//! A stored schedule fires once per occurrence however many workers tick (the lease), as a
//! `security_scan` scan call through the pipeline as its owner: an execute key's scan waits
//! for approval (the request carries the schedule's request id), and the tool's rate limit (3
//! in 10 minutes per user) holds — a fourth occurrence in the same minutes is refused and
//! recorded so. Intervals go on from the due time; a cron fires at its next local time.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use breeze_auth::CreateApiKey;
use breeze_core::{Scope, ScopeSet, Timestamp};
use breeze_limits::MemoryLimiter;
use breeze_server::{
    AppState, Breeze, ServerConfig, scan_schedules::ScanScheduleWorker, workers::Worker,
};
use breeze_store::{NewScanSchedule, ScanCadence, testing::Ctx};
use common::{World, audit, code, tool, world};
use serde_json::json;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

async fn exec_key(w: &World) -> (String, String) {
    let (secret, key) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: w.org_a,
                user_id: w.admin,
                name: "exec".into(),
                scopes: ScopeSet::new([Scope::AiRead, Scope::AiWrite, Scope::AiExecute]),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    (secret.expose().to_owned(), format!("api_key:{}", key.id))
}

fn quick_state(w: &World) -> AppState {
    let mut config: ServerConfig = (*w.state.config).clone();
    config.approvals.wait = std::time::Duration::ZERO;
    AppState::new(
        w.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    )
}

async fn scheduled_scans_fire_once_as_their_owner_within_the_limit(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let state = quick_state(&w);
    let app = breeze_server::app(Breeze::new(state.clone()));
    let (exec, owner) = exec_key(&w).await;

    // Scheduling is Tier 3.
    let args = json!({ "action": "schedule", "deviceIds": [w.a_device], "intervalMinutes": 60 });
    let r = tool(&app, &w.write, "security_scan", args.clone()).await;
    assert_eq!(r["rpcError"]["data"]["code"], "INSUFFICIENT_SCOPE", "{r}");
    let r = tool(&app, &exec, "security_scan", args).await;
    assert_eq!(r["status"], "pending_approval", "{r}");
    let r = tool(
        &app,
        &exec,
        "security_scan",
        json!({ "action": "schedule", "deviceIds": [w.a_device] }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "a cadence is required: {r}");
    let r = tool(
        &app,
        &exec,
        "security_scan",
        json!({ "action": "schedule", "deviceIds": [w.a_device], "cron": "0 3 * * *",
                "timeZone": "Mars/Base" }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "a real time zone: {r}");
    // (A fresh limiter: the tool allows the user 3 calls in 10 minutes.)
    let app = breeze_server::app(Breeze::new(quick_state(&w)));
    let r = tool(
        &app,
        &exec,
        "security_scan",
        json!({ "action": "schedule", "deviceIds": [w.b_device], "intervalMinutes": 60 }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "another organization's device: {r}");

    // What an approved schedule stores: hourly, as the execute key.
    let o = w.store.org(w.org_a);
    let new = |name: &str, cadence: ScanCadence| NewScanSchedule {
        name: name.into(),
        arguments: json!({ "deviceIds": [w.a_device] }),
        cadence,
        owner_actor: owner.clone(),
    };
    let hourly = o
        .security()
        .create_scan_schedule(new("hourly", ScanCadence::Interval(60)), audit("s"))
        .await
        .unwrap();
    assert_eq!(hourly.next_run_at, Some(at("2026-03-02T11:00:00Z")));
    assert!(
        o.security()
            .create_scan_schedule(new("fast", ScanCadence::Interval(5)), audit("s"))
            .await
            .is_err(),
        "shorter than an hour is refused"
    );
    let nightly = o
        .security()
        .create_scan_schedule(
            new(
                "nightly",
                ScanCadence::Cron {
                    cron: "0 3 * * *".into(),
                    time_zone: "Europe/Berlin".into(),
                },
            ),
            audit("s"),
        )
        .await
        .unwrap();
    assert_eq!(nightly.next_run_at, Some(at("2026-03-03T02:00:00Z")));

    // Not due: nothing fires. (The workers' pipeline has a limiter of its own: the calls
    // above were the same user's.)
    let state = quick_state(&w);
    let (one, two) = (
        Arc::new(ScanScheduleWorker::new(
            w.store.clone(),
            state.pipeline.clone(),
        )),
        Arc::new(ScanScheduleWorker::new(
            w.store.clone(),
            state.pipeline.clone(),
        )),
    );
    assert_eq!(one.tick().await.unwrap(), 0);

    // Due (a little late): two workers, one occurrence, a scan call as the owner that waits
    // for a person; the next occurrence an interval after the due one.
    cx.clock.set(at("2026-03-02T11:05:00Z"));
    let (a, b) = tokio::join!(one.tick(), two.tick());
    one.settle().await;
    two.settle().await;
    assert_eq!(a.unwrap() + b.unwrap(), 1);
    let s = o.security().get_scan_schedule(hourly.id).await.unwrap();
    assert_eq!(s.next_run_at, Some(at("2026-03-02T12:00:00Z")));
    assert_eq!(
        s.last_status.map(|s| s.as_str()),
        Some("pending_approval"),
        "{s:?}"
    );
    let pending = o.approvals().list_approvals(true, 10).await.unwrap();
    let request = pending
        .iter()
        .find(|r| r.request_id.as_deref() == Some(format!("scan-schedule:{}", hourly.id).as_str()))
        .unwrap_or_else(|| panic!("{pending:?}"));
    assert_eq!(request.tool, "security_scan");
    assert_eq!(request.arguments["action"], "scan");
    assert_eq!(request.arguments["deviceIds"], json!([w.a_device]));
    assert_eq!(
        request.api_key_id.map(|k| format!("api_key:{k}")),
        Some(owner.clone())
    );

    // The tool's limit holds for scheduled calls: with three more due in the same minutes,
    // the owner's scan calls past the third in 10 minutes are refused, and recorded so.
    let mut more = Vec::new();
    for i in 0..3 {
        more.push(
            o.security()
                .create_scan_schedule(
                    new(&format!("more-{i}"), ScanCadence::Interval(60)),
                    audit("s"),
                )
                .await
                .unwrap()
                .id,
        );
    }
    cx.clock.set(at("2026-03-02T12:06:00Z"));
    assert_eq!(
        one.tick().await.unwrap(),
        4,
        "the hourly one and the three new ones"
    );
    one.settle().await;
    let mut statuses = Vec::new();
    for id in more.iter().chain([&hourly.id]) {
        let s = o.security().get_scan_schedule(*id).await.unwrap();
        statuses.push((s.last_status.unwrap(), s.last_message.unwrap_or_default()));
    }
    let refused: Vec<_> = statuses
        .iter()
        .filter(|(s, _)| s.as_str() == "refused")
        .collect();
    assert_eq!(refused.len(), 2, "calls 4 and 5 of the owner: {statuses:?}");
    assert!(
        refused
            .iter()
            .all(|(_, m)| m.to_lowercase().contains("limit")),
        "{statuses:?}"
    );

    // Unscheduled: gone; it fires no more.
    o.security()
        .delete_scan_schedule(hourly.id, audit("security.schedule.delete"))
        .await
        .unwrap();
    cx.clock.set(at("2026-03-02T18:00:00Z"));
    let fired = one.tick().await.unwrap();
    one.settle().await;
    assert_eq!(fired, 3, "the three others, not the deleted one");
    assert!(o.security().get_scan_schedule(hourly.id).await.is_err());
}

breeze_store::on_both_backends!(scheduled_scans_fire_once_as_their_owner_within_the_limit);
