//! `manage_automations` over MCP and the automation worker under a test clock.
//!
//! The attack first: a key with only the write scope creates an automation whose task runs a
//! script — on its schedule and on a manual run the worker's `run_script` is refused by the
//! guard and nothing reaches a device; a key with the execute scope gets an approval request,
//! never a silent run, and a denied request leaves the run refused. Then the tool's lifecycle
//! and its refusals (another organization's ids, bad cron, create_ticket, tiers), a scheduled
//! automation firing once per occurrence under a stepped clock (two workers, one run; a long
//! outage, one catch-up), an alert-triggered automation, maintenance holding back a script
//! run, and the `breeze://automations` resource.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use breeze_auth::CreateApiKey;
use breeze_core::{
    AlertCondition, ChannelKind, Clock, Comparison, MaintenanceSchedule, Metric, RunStatus, Scope,
    ScopeSet, Severity, Timestamp,
};
use breeze_limits::MemoryLimiter;
use breeze_server::{
    AppState, ServerConfig,
    automations::{AutomationConfig, AutomationWorker},
    workers::Worker,
};
use breeze_store::{
    AutomationRun, Decision, NewChannel, NewRule, NewScript, NewWindow, RuleTarget, testing::Ctx,
};
use common::{World, audit, code, send, tool, world};
use serde_json::{Value, json};

const TOOL: &str = "manage_automations";

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

async fn exec_key(w: &World) -> String {
    let (secret, _) = w
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
    secret.expose().to_owned()
}

/// A worker over the world's store, with a pipeline whose Tier 3 calls answer "pending" at
/// once (no 45 s wait in a test).
fn worker(w: &World) -> Arc<AutomationWorker> {
    let mut config: ServerConfig = (*w.state.config).clone();
    config.approvals.wait = std::time::Duration::ZERO;
    let state = AppState::new(
        w.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    );
    Arc::new(AutomationWorker::new(
        w.store.clone(),
        state.pipeline.clone(),
        state.config.alerts.notify.clone(),
        AutomationConfig::default(),
    ))
}

async fn tick(worker: &Arc<AutomationWorker>) -> breeze_server::automations::TickReport {
    let r = worker.tick().await.unwrap();
    worker.settle().await;
    r
}

async fn script_id(w: &World) -> String {
    w.store
        .org(w.org_a)
        .scripts()
        .create_script(
            NewScript {
                name: "hello".into(),
                description: String::new(),
                language: "sh".into(),
                category: "general".into(),
                body: "echo hello-from-automation".into(),
                parameters: vec![],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

async fn runs(w: &World, automation: &str) -> Vec<AutomationRun> {
    w.store
        .org(w.org_a)
        .automations()
        .list_runs(Some(automation.parse().unwrap()), 100)
        .await
        .unwrap()
}

async fn commands(w: &World) -> usize {
    w.store.raw_dump("device_commands").await.unwrap().len()
}

async fn a_write_key_cannot_make_an_automation_run_a_script(cx: Ctx) {
    cx.clock.set(at("2026-03-02T09:58:00Z"));
    let w = world(&cx).await;
    let script = script_id(&w).await;
    let created = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "sneaky",
                "trigger": { "kind": "schedule", "cron": "* * * * *" },
                "task": { "kind": "run_script", "scriptId": script },
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    let id = created["automation"]["id"].as_str().unwrap().to_owned();
    assert!(
        created["automation"]["owner"]
            .as_str()
            .unwrap()
            .starts_with("api_key:")
    );
    let worker = worker(&w);

    // Its schedule comes due: the worker's run_script, as the write key, is refused.
    cx.clock.set(at("2026-03-02T09:59:00Z"));
    let report = tick(&worker).await;
    assert_eq!((report.scheduled, report.started), (1, 1), "{report:?}");
    let history = runs(&w, &id).await;
    assert_eq!(history.len(), 1);
    let run = &history[0];
    assert_eq!(run.status, RunStatus::Refused, "{run:?}");
    assert!(
        run.message.as_deref().unwrap().contains("ai:execute"),
        "the refusal names the missing scope: {run:?}"
    );
    assert_eq!(run.devices[0].status.as_str(), "refused");

    // A manual run by the same key: refused the same way.
    let r = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({ "action": "run", "automationId": id }),
    )
    .await;
    assert_eq!(r["runs"][0]["status"], "queued", "{r}");
    tick(&worker).await;
    let history = runs(&w, &id).await;
    assert!(
        history.iter().all(|r| r.status == RunStatus::Refused),
        "{history:?}"
    );
    // Nothing reached a device, and no approval was asked for.
    assert_eq!(commands(&w).await, 0);
    assert!(
        w.store
            .raw_dump("approval_requests")
            .await
            .unwrap()
            .is_empty()
    );

    // The history says so over MCP too.
    let h = tool(
        &w.app,
        &w.read,
        TOOL,
        json!({ "action": "history", "automationId": id }),
    )
    .await;
    assert_eq!(h["showing"], 2, "{h}");
    assert_eq!(h["runs"][0]["status"], "refused", "{h}");
}

async fn an_execute_key_automation_waits_for_a_person(cx: Ctx) {
    cx.clock.set(at("2026-03-02T09:58:00Z"));
    let w = world(&cx).await;
    let exec = exec_key(&w).await;
    let script = script_id(&w).await;
    let created = tool(
        &w.app,
        &exec,
        TOOL,
        json!({ "action": "create", "name": "cleanup",
                "trigger": { "kind": "schedule", "cron": "* * * * *", "timeZone": "Europe/Paris" },
                "task": { "kind": "run_script", "scriptId": script, "timeoutSeconds": 30 },
                "target": { "type": "device", "deviceId": w.a_device } }),
    )
    .await;
    let id = created["automation"]["id"].as_str().unwrap().to_owned();
    let worker = worker(&w);
    cx.clock.set(at("2026-03-02T09:59:00Z"));
    tick(&worker).await;
    let run = runs(&w, &id).await.remove(0);
    assert_eq!(run.status, RunStatus::PendingApproval, "{run:?}");
    assert_eq!(run.approval_ids.len(), 1);
    assert_eq!(
        commands(&w).await,
        0,
        "nothing runs before a person approves"
    );
    let approval = w
        .store
        .org(w.org_a)
        .approvals()
        .get_approval(run.approval_ids[0])
        .await
        .unwrap();
    assert_eq!(approval.tool, "run_script");
    assert_eq!(approval.status.as_str(), "pending");
    assert_eq!(approval.arguments["deviceIds"][0], w.a_device);

    // The person denies it: the run ends refused, naming the decision.
    w.store
        .org(w.org_a)
        .approvals()
        .decide_approval(
            approval.id,
            Decision::Deny,
            w.admin,
            Some("not today"),
            audit("approval.deny"),
        )
        .await
        .unwrap();
    let report = tick(&worker).await;
    assert_eq!(report.followed_up, 1, "{report:?}");
    let run = w
        .store
        .org(w.org_a)
        .automations()
        .get_run(run.id)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Refused, "{run:?}");
    assert!(
        run.devices[0]
            .error
            .as_deref()
            .unwrap()
            .contains("not today"),
        "{run:?}"
    );
    assert_eq!(commands(&w).await, 0);

    // A revoked owner key makes every later run void.
    let key_id = run
        .requested_by
        .strip_prefix("api_key:")
        .unwrap()
        .parse()
        .unwrap();
    w.store
        .org(w.org_a)
        .api_keys()
        .revoke_api_key(breeze_core::ApiKeyId(key_id), audit("api_key.revoke"))
        .await
        .unwrap();
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    tick(&worker).await;
    let latest = runs(&w, &id).await.remove(0);
    assert_eq!(latest.status, RunStatus::Refused, "{latest:?}");
    assert!(
        latest.message.as_deref().unwrap().contains("revoked"),
        "{latest:?}"
    );
}

async fn the_tool_lifecycle_and_its_refusals(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let script = script_id(&w).await;
    let ob = w.store.org(w.org_b);
    let b_script = ob
        .scripts()
        .create_script(
            NewScript {
                name: "b".into(),
                description: String::new(),
                language: "sh".into(),
                category: "general".into(),
                body: "true".into(),
                parameters: vec![],
                created_by: "t".into(),
            },
            audit("s"),
        )
        .await
        .unwrap();
    let manual = |task: Value| json!({ "action": "create", "name": "x", "trigger": { "kind": "manual" }, "task": task });
    // Bad inputs name the problem; another organization's script or device is not found.
    for (args, want, needle) in [
        (
            json!({ "action": "create", "name": "x", "trigger": { "kind": "schedule", "cron": "every day" },
                    "task": { "kind": "run_script", "scriptId": script } }),
            "INVALID_ARGUMENT",
            "",
        ),
        (
            json!({ "action": "create", "name": "x", "trigger": { "kind": "schedule", "cron": "0 0 * * * *" },
                    "task": { "kind": "run_script", "scriptId": script } }),
            "INVALID_ARGUMENT",
            "five-field",
        ),
        (
            json!({ "action": "create", "name": "x", "trigger": { "kind": "schedule", "cron": "0 0 * * *", "timeZone": "Moon/Base" },
                    "task": { "kind": "run_script", "scriptId": script } }),
            "INVALID_ARGUMENT",
            "IANA",
        ),
        (
            manual(json!({ "kind": "create_ticket" })),
            "INVALID_ARGUMENT",
            "no tickets",
        ),
        (
            manual(json!({ "kind": "run_script", "scriptId": b_script.id.to_string() })),
            "NOT_FOUND",
            "",
        ),
        (
            json!({ "action": "create", "name": "x", "trigger": { "kind": "manual" },
                    "task": { "kind": "run_script", "scriptId": script },
                    "target": { "type": "device", "deviceId": w.b_device } }),
            "NOT_FOUND",
            "",
        ),
        (
            json!({ "action": "create", "name": "x" }),
            "INVALID_ARGUMENT",
            "trigger",
        ),
        (
            json!({ "action": "get" }),
            "INVALID_ARGUMENT",
            "automationId",
        ),
    ] {
        let r = tool(app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), want, "{args}: {r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(needle),
            "{args}: {r}"
        );
    }
    // (The per-user limit is 10 calls in 10 minutes, and every key here is the admin's: each
    // phase gets an application with a fresh limiter.)
    let app = &fresh(&w);
    // A read key lists but cannot create; a write key cannot delete (Tier 3).
    let r = tool(
        app,
        &w.read,
        TOOL,
        manual(json!({ "kind": "run_script", "scriptId": script })),
    )
    .await;
    assert_eq!(
        r["rpcError"]["data"]["code"], "INSUFFICIENT_SCOPE",
        "create is Tier 2: {r}"
    );
    let created = tool(
        app,
        &w.write,
        TOOL,
        json!({
        "action": "create", "name": "nightly", "description": "clean up",
        "trigger": { "kind": "schedule", "cron": "0 2 * * *", "timeZone": "Europe/Berlin" },
        "task": { "kind": "run_script", "scriptId": script, "parameters": {} } }),
    )
    .await;
    let id = created["automation"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["automation"]["trigger"]["cron"], "0 2 * * *",
        "{created}"
    );
    assert!(created["automation"]["nextRunAt"].is_string(), "{created}");
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "delete", "automationId": id }),
    )
    .await;
    assert_eq!(
        r["rpcError"]["data"]["code"], "INSUFFICIENT_SCOPE",
        "delete is Tier 3: {r}"
    );

    let app = &fresh(&w);
    let list = tool(app, &w.read, TOOL, json!({ "action": "list" })).await;
    assert_eq!(list["showing"], 1, "{list}");
    let off = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "disable", "automationId": id }),
    )
    .await;
    assert_eq!(off["automation"]["enabled"], false, "{off}");
    assert!(off["automation"]["nextRunAt"].is_null(), "{off}");
    let on = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "enable", "automationId": id }),
    )
    .await;
    assert_eq!(on["automation"]["enabled"], true, "{on}");
    let up = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "update", "automationId": id,
        "trigger": { "kind": "alert", "minSeverity": "high" } }),
    )
    .await;
    assert_eq!(up["automation"]["trigger"]["kind"], "alert", "{up}");
    assert!(up["automation"]["nextRunAt"].is_null(), "{up}");
    let got = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "get", "automationId": id }),
    )
    .await;
    assert_eq!(got["automation"]["trigger"]["minSeverity"], "high", "{got}");
    assert_eq!(got["runs"], json!([]));

    let app = &fresh(&w);
    // Organization B sees none of it, by listing or by id.
    let b_key = &w.other_org_key;
    let r = tool(app, b_key, TOOL, json!({ "action": "list" })).await;
    assert_eq!(r["automations"], json!([]), "{r}");
    for action in ["get", "history"] {
        let r = tool(
            app,
            b_key,
            TOOL,
            json!({ "action": action, "automationId": id }),
        )
        .await;
        assert_eq!(code(&r), "NOT_FOUND", "{action}: {r}");
        assert_eq!(
            r["error"]["message"],
            "Automation not found or access denied"
        );
    }
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    for action in [
        "automation.create",
        "automation.disable",
        "automation.enable",
        "automation.update",
    ] {
        assert!(audit.contains(action), "{action} audited");
    }

    // The resource serves it.
    let r = send(
        app,
        axum::http::Request::post("/mcp")
            .header("content-type", "application/json")
            .header("x-api-key", &w.read)
            .body(axum::body::Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "resources/read",
                        "params": { "uri": "breeze://automations" } })
                .to_string(),
            ))
            .unwrap(),
    )
    .await;
    let text = r.body["result"]["contents"][0]["text"].as_str().unwrap();
    let listed: Value = serde_json::from_str(text).unwrap();
    assert_eq!(listed[0]["name"], "nightly", "{listed}");
    assert_eq!(listed[0]["trigger"], "alert", "{listed}");
}

/// The application with a limiter of its own.
fn fresh(w: &World) -> axum::Router {
    common::build(w, |_| {}, Arc::new(MemoryLimiter::new()))
}

async fn in_app_channel(w: &World) -> String {
    w.store
        .org(w.org_a)
        .alerts()
        .create_channel(
            NewChannel {
                name: "dashboard".into(),
                kind: ChannelKind::InApp,
                config: json!({}),
                secret: None,
            },
            audit("c"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

async fn a_schedule_fires_once_per_occurrence_under_a_test_clock(cx: Ctx) {
    cx.clock.set(at("2026-03-02T09:58:30Z"));
    let w = world(&cx).await;
    let channel = in_app_channel(&w).await;
    let created = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({
        "action": "create", "name": "every five",
        "trigger": { "kind": "schedule", "cron": "*/5 * * * *", "timeZone": "America/New_York" },
        "task": { "kind": "notify", "channelId": channel, "message": "tick" } }),
    )
    .await;
    let id = created["automation"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["automation"]["nextRunAt"], "2026-03-02T10:00:00+00:00",
        "{created}"
    );
    // Two instances' workers over one database.
    let (one, two) = (worker(&w), worker(&w));
    tick(&one).await;
    assert!(runs(&w, &id).await.is_empty(), "not due yet");
    cx.clock.set(at("2026-03-02T10:00:10Z"));
    let (a, b) = tokio::join!(tick(&one), tick(&two));
    assert_eq!(
        a.scheduled + b.scheduled,
        1,
        "one instance fires it: {a:?} {b:?}"
    );
    tick(&one).await;
    let history = runs(&w, &id).await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].status, RunStatus::Succeeded, "{history:?}");
    assert_eq!(history[0].occurrence_at, Some(at("2026-03-02T10:00:00Z")));
    assert!(history[0].message.as_deref().unwrap().contains("dashboard"));

    // Down for three hours: one catch-up run for the latest occurrence, the rest skipped.
    cx.clock.set(at("2026-03-02T13:02:00Z"));
    tick(&two).await;
    let history = runs(&w, &id).await;
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0].occurrence_at, Some(at("2026-03-02T13:00:00Z")));
    assert!(
        history[0]
            .message
            .as_deref()
            .unwrap_or("")
            .contains("dashboard")
            || history[0].status == RunStatus::Succeeded
    );
    let a = w
        .store
        .org(w.org_a)
        .automations()
        .get_automation(id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(a.next_run_at, Some(at("2026-03-02T13:05:00Z")));
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert!(audit.contains("automation.run.queue") && audit.contains("automation.run.finish"));
}

async fn alerts_start_automations_and_maintenance_holds_scripts_back(cx: Ctx) {
    cx.clock.set(at("2026-03-02T10:00:00Z"));
    let w = world(&cx).await;
    let oa = w.store.org(w.org_a);
    let channel = in_app_channel(&w).await;
    let script = script_id(&w).await;
    let rule = oa
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
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let notify = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({
        "action": "create", "name": "tell",
        "trigger": { "kind": "alert", "ruleId": rule.id.to_string() },
        "task": { "kind": "notify", "channelId": channel } }),
    )
    .await;
    let notify_id = notify["automation"]["id"].as_str().unwrap().to_owned();
    let critical_only = tool(
        &w.app,
        &w.write,
        TOOL,
        json!({
        "action": "create", "name": "critical only",
        "trigger": { "kind": "alert", "minSeverity": "critical" },
        "task": { "kind": "notify", "channelId": channel } }),
    )
    .await;
    let critical_id = critical_only["automation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let exec = exec_key(&w).await;
    let fix = tool(
        &w.app,
        &exec,
        TOOL,
        json!({
        "action": "create", "name": "fix",
        "trigger": { "kind": "alert", "ruleId": rule.id.to_string() },
        "task": { "kind": "run_script", "scriptId": script } }),
    )
    .await;
    let fix_id = fix["automation"]["id"].as_str().unwrap().to_owned();
    // The device is under maintenance.
    oa.maintenance()
        .create_window(
            NewWindow {
                name: "patching".into(),
                description: None,
                target: RuleTarget::Organization,
                time_zone: "UTC".into(),
                schedule: MaintenanceSchedule::Once {
                    starts_at: at("2026-03-02T09:00:00Z"),
                    ends_at: at("2026-03-02T11:00:00Z"),
                },
                suppress_alerts: true,
                enabled: true,
                created_by: "t".into(),
            },
            audit("maintenance_window.create"),
        )
        .await
        .unwrap();

    cx.clock.set(at("2026-03-02T10:01:00Z"));
    let device: breeze_core::DeviceId = breeze_core::DeviceId(w.a_device.parse().unwrap());
    let alert = oa
        .alerts()
        .raise_alert(&rule, device, Some(97.0))
        .await
        .unwrap()
        .unwrap();
    let worker = worker(&w);
    let report = tick(&worker).await;
    assert_eq!(report.alerted, 2, "{report:?}");
    // Seen again: no second run.
    assert_eq!(tick(&worker).await.alerted, 0);

    let told = runs(&w, &notify_id).await;
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].alert_id, Some(alert.id));
    assert_eq!(told[0].status, RunStatus::Succeeded, "{told:?}");
    assert!(
        runs(&w, &critical_id).await.is_empty(),
        "a high alert is below critical"
    );
    let fixed = runs(&w, &fix_id).await;
    assert_eq!(fixed[0].status, RunStatus::Suppressed, "{fixed:?}");
    assert_eq!(fixed[0].devices[0].window_name.as_deref(), Some("patching"));
    assert_eq!(commands(&w).await, 0);
    assert!(
        w.store
            .raw_dump("approval_requests")
            .await
            .unwrap()
            .is_empty()
    );
    let h = tool(&w.app, &w.read, TOOL, json!({ "action": "history" })).await;
    assert_eq!(h["showing"], 2, "{h}");
    let _ = cx.clock.now();
}

breeze_store::on_both_backends!(
    a_write_key_cannot_make_an_automation_run_a_script,
    an_execute_key_automation_waits_for_a_person,
    the_tool_lifecycle_and_its_refusals,
    a_schedule_fires_once_per_occurrence_under_a_test_clock,
    alerts_start_automations_and_maintenance_holds_scripts_back
);
