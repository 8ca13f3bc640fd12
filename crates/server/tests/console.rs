//! The technician's console, driven in-process on both backends: the HTML 404 under an
//! organization, the overview, the alerts inbox and its actions (single, bulk, live), alert
//! rules, the audit page's names, noise filter and CSV export, and the approvals page's
//! headline. Every page and action is held to organization isolation (another organization's
//! ids are 404), CSRF (a forged post is refused) and the one permission model (a Read Only
//! person sees no button, and a post of theirs is refused).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_core::{AlertCondition, Comparison, DeviceId, Metric, OrgId, Severity};
use breeze_store::{AlertRule, NewRule, RuleTarget, testing::Ctx};
use common::browser::{
    admin_of, event_arrives, events, get, html, location, outcome, post_form, sign_in,
};
use common::{World, audit_records, send, world};
use uuid::Uuid;

/// A rule of `org` named `name` (CPU above 90 % for 5 minutes, on every device).
async fn rule(w: &World, org: OrgId, name: &str, severity: Severity) -> AlertRule {
    w.store
        .org(org)
        .alerts()
        .create_rule(
            NewRule {
                name: name.into(),
                description: None,
                severity,
                enabled: true,
                condition: AlertCondition::Metric {
                    metric: Metric::Cpu,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: 5,
                },
                target: RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: false,
                channel_ids: vec![],
                created_by: "test".into(),
            },
            common::audit("alert_rule.create"),
        )
        .await
        .unwrap()
}

/// An alert of `rule` raised on `device`; its id.
async fn raise(w: &World, org: OrgId, rule: &AlertRule, device: &str) -> Uuid {
    w.store
        .org(org)
        .alerts()
        .raise_alert(rule, DeviceId(device.parse().unwrap()), Some(97.0))
        .await
        .unwrap()
        .expect("raised")
        .id
}

/// A device more in `org`'s first site; its id.
async fn device(
    w: &World,
    org: OrgId,
    hostname: &str,
    status: breeze_core::DeviceStatus,
) -> String {
    let site = w.store.org(org).tenancy().list_sites().await.unwrap()[0].id;
    w.store
        .org(org)
        .devices()
        .create_device(
            breeze_store::NewDevice {
                last_seen_at: Some(w.state.clock.now() - chrono::Duration::hours(30)),
                ..breeze_store::testing::new_device(site, hostname, status)
            },
            common::audit("d"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

async fn status_of(w: &World, org: OrgId, alert: Uuid) -> String {
    w.store
        .org(org)
        .alerts()
        .get_alert(alert)
        .await
        .unwrap()
        .status
        .to_string()
}

/// Unknown paths under an organization answer the HTML 404 page, signed in or not, whatever
/// the method; the API keeps its JSON 404.
async fn unknown_paths_answer_the_html_404_page(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    for (uri, cookie) in [
        ("/o/org-a/nope", admin.cookie.as_str()),
        ("/o/org-a/devices/a/b/c", admin.cookie.as_str()),
        ("/o/org-a/settings/nothing-here", admin.cookie.as_str()),
        ("/o/no-such-org/anything", admin.cookie.as_str()),
        ("/o/org-a/nope", ""),
    ] {
        let r = get(&w.app, uri, cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
        assert!(
            r.headers
                .get(header::CONTENT_TYPE)
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{uri}"
        );
        let page = html(&r);
        assert!(
            page.contains("<!doctype html>") && page.contains("no such page"),
            "{page}"
        );
        assert!(r.headers.contains_key(header::CONTENT_SECURITY_POLICY));
    }
    let r = post_form(
        &w.app,
        "/o/org-a/nope",
        &admin.cookie,
        &[("csrf", &admin.csrf)],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(html(&r).contains("no such page"));
    let r = get(&w.app, "/api/v1/nope", "").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["code"], "not_found");
}

async fn overview_shows_the_fleet_at_a_glance_with_links(cx: Ctx) {
    let w = world(&cx).await;
    let down = device(&w, w.org_a, "db-07", breeze_core::DeviceStatus::Offline).await;
    let hot = rule(&w, w.org_a, "CPU hot", Severity::High).await;
    raise(&w, w.org_a, &hot, &w.a_device).await;
    // Another organization's alert and offline device stay out of A's figures.
    let b_rule = rule(&w, w.org_b, "B only", Severity::Critical).await;
    raise(&w, w.org_b, &b_rule, &w.b_device).await;
    device(&w, w.org_b, "b-secret", breeze_core::DeviceStatus::Offline).await;
    // A recent sample: web-01 tops the CPU list.
    let now = w.state.clock.now();
    w.store
        .insert_metrics(
            DeviceId(w.a_device.parse().unwrap()),
            w.org_a,
            &[breeze_agent_proto::MetricSample {
                at: now - chrono::Duration::minutes(1),
                cpu_percent: 88.0,
                ram_percent: 40.0,
                ram_used_bytes: 1,
                disks: vec![],
                network: vec![],
                process_count: 10,
            }],
        )
        .await
        .unwrap();
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("id=\"device-total\">2<"), "{page}");
    assert!(page.contains("id=\"online-count\">1<") && page.contains("id=\"offline-count\">1<"));
    assert!(page.contains("href=\"/o/org-a/devices?status=offline\""));
    assert!(page.contains(&format!("href=\"/o/org-a/devices/{down}\">db-07</a>")));
    assert!(page.contains("30 h"), "offline for 30 hours");
    assert!(page.contains("id=\"unresolved-count\">1<"));
    assert!(
        page.contains(
            "href=\"/o/org-a/alerts?severity=high\" class=\"badge sev sev-high\">high: 1<"
        )
    );
    assert!(page.contains("critical: 0"));
    assert!(page.contains("id=\"pending-count\">0<"));
    assert!(page.contains("No device has a completed security scan yet."));
    assert!(page.contains("id=\"top-cpu-list\"") && page.contains("88%"));
    assert!(!page.contains("b-secret") && !page.contains("B only"));
    // The live part reloads on the devices event, through its own authorized fragment.
    assert!(page.contains("hx-get=\"/o/org-a/overview/fleet\""));
    let r = get(&w.app, "/o/org-a/overview/fleet", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("<html") && html(&r).contains("id=\"offline-count\">1<"));
    // Patch compliance, by manage_patches' own code, loads after the page.
    assert!(page.contains("hx-get=\"/o/org-a/overview/patches\" hx-trigger=\"load\""));
    let r = get(&w.app, "/o/org-a/overview/patches", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        html(&r).contains("No device has reported its updates yet (2 devices never scanned)."),
        "{}",
        html(&r)
    );
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    for uri in [
        "/o/org-b",
        "/o/org-b/overview/fleet",
        "/o/org-b/overview/patches",
    ] {
        assert_eq!(
            get(&w.app, uri, &ops.cookie).await.status,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
}

async fn alerts_inbox_lists_filters_and_arrives_live(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let db = device(&w, w.org_a, "db-07", breeze_core::DeviceStatus::Online).await;
    let hot = rule(&w, w.org_a, "CPU hot", Severity::High).await;
    let low = rule(&w, w.org_a, "CPU warm", Severity::Low).await;
    let mut stream = events(&w, "org-a", &admin).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let a1 = raise(&w, w.org_a, &hot, &w.a_device).await;
    assert!(
        event_arrives(&mut stream, "alerts", std::time::Duration::from_secs(8)).await,
        "a raised alert is an `alerts` event"
    );
    let a2 = raise(&w, w.org_a, &low, &db).await;
    let b_rule = rule(&w, w.org_b, "B only", Severity::High).await;
    let b_alert = raise(&w, w.org_b, &b_rule, &w.b_device).await;

    let r = get(&w.app, "/o/org-a/alerts", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains(&format!("id=\"al-{a1}\"")) && page.contains(&format!("id=\"al-{a2}\"")));
    assert!(!page.contains(&b_alert.to_string()) && !page.contains("B only"));
    assert!(
        page.contains(&format!("href=\"/o/org-a/devices/{db}\">db-07</a>")),
        "device linked"
    );
    assert!(page.contains("data-refresh-on=\"alerts\""));
    assert!(page.contains("value=\"acknowledge\"") && page.contains("value=\"suppress\""));
    // Filters: severity, rule, device.
    let r = get(&w.app, "/o/org-a/alerts?severity=high", &admin.cookie).await;
    assert!(html(&r).contains(&a1.to_string()) && !html(&r).contains(&format!("al-{a2}")));
    let r = get(
        &w.app,
        &format!("/o/org-a/alerts?rule={}", low.id),
        &admin.cookie,
    )
    .await;
    assert!(!html(&r).contains(&format!("al-{a1}")) && html(&r).contains(&format!("al-{a2}")));
    let r = get(
        &w.app,
        &format!("/o/org-a/alerts?device={db}"),
        &admin.cookie,
    )
    .await;
    assert!(!html(&r).contains(&format!("al-{a1}")) && html(&r).contains(&format!("al-{a2}")));
    // Another organization's rule or device filters to nothing, never to its alerts.
    let r = get(
        &w.app,
        &format!("/o/org-a/alerts?rule={}", b_rule.id),
        &admin.cookie,
    )
    .await;
    assert!(html(&r).contains("No alert matches."));
    // Bad filters: 400 with the reason.
    for (q, says) in [
        ("severity=loud", "loud"),
        ("status=sideways", "sideways"),
        ("device=x", "not a device id"),
        ("cursor=zz", "page link"),
    ] {
        let r = get(&w.app, &format!("/o/org-a/alerts?{q}"), &admin.cookie).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}");
        assert!(html(&r).contains(says), "{q}");
    }
    // Paging: 50 to a page, the next page continues.
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let many: Vec<breeze_store::NewDevice> = (0..55)
        .map(|i| {
            breeze_store::testing::new_device(
                site,
                format!("h-{i:02}"),
                breeze_core::DeviceStatus::Online,
            )
        })
        .collect();
    w.store
        .org(w.org_a)
        .devices()
        .create_devices(many, common::audit("d"))
        .await
        .unwrap();
    let (all, _) = w
        .store
        .org(w.org_a)
        .devices()
        .list_devices(&Default::default(), 100, 0)
        .await
        .unwrap();
    for d in all.iter().filter(|d| d.hostname.starts_with("h-")) {
        raise(&w, w.org_a, &low, &d.id.to_string()).await;
    }
    let r = get(&w.app, "/o/org-a/alerts", &admin.cookie).await;
    let page = html(&r);
    assert_eq!(page.matches("<tr id=\"al-").count(), 50);
    let at = page.find("id=\"next-page\"").unwrap();
    let href_at = page[..at].rfind("href=\"").unwrap() + 6;
    let href = page[href_at..href_at + page[href_at..].find('"').unwrap()].replace("&#38;", "&");
    let r = get(&w.app, &href, &admin.cookie).await;
    assert_eq!(html(&r).matches("<tr id=\"al-").count(), 57 - 50);
    // The rows fragment, for the live reload, is a fragment and stays in its organization.
    let r = get(&w.app, "/o/org-a/alerts/rows?severity=high", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("<html") && html(&r).contains(&format!("al-{a1}")));
    // One alert's page: its history, device and rule.
    let r = get(&w.app, &format!("/o/org-a/alerts/{a1}"), &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(
        page.contains("CPU hot")
            && page.contains("raised")
            && page.contains("system (alert engine)")
    );
    // Isolation: another organization's alert is 404 through A, and B's pages are 404 to a
    // person outside B.
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    for uri in [
        format!("/o/org-a/alerts/{b_alert}"),
        format!("/o/org-b/alerts/{b_alert}"),
        "/o/org-b/alerts".to_owned(),
        "/o/org-b/alerts/rows".to_owned(),
        "/o/org-a/alerts/not-an-id".to_owned(),
    ] {
        assert_eq!(
            get(&w.app, &uri, &ops.cookie).await.status,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
}

async fn alerts_are_acknowledged_resolved_and_suppressed_one_or_many(cx: Ctx) {
    let w = world(&cx).await;
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let db = device(&w, w.org_a, "db-07", breeze_core::DeviceStatus::Online).await;
    let web = device(&w, w.org_a, "web-02", breeze_core::DeviceStatus::Online).await;
    let hot = rule(&w, w.org_a, "CPU hot", Severity::High).await;
    let a1 = raise(&w, w.org_a, &hot, &w.a_device).await;
    let a2 = raise(&w, w.org_a, &hot, &db).await;
    let a3 = raise(&w, w.org_a, &hot, &web).await;
    let b_rule = rule(&w, w.org_b, "B only", Severity::High).await;
    let b_alert = raise(&w, w.org_b, &b_rule, &w.b_device).await;

    // A row's button: acknowledge one, with the audit record of the tool's action, as the person.
    let r = ops
        .post(
            &w.app,
            "/o/org-a/alerts/act",
            &[
                ("one", &format!("acknowledge:{a1}")),
                ("back", "/o/org-a/alerts?severity=high"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        location(&r).starts_with("/o/org-a/alerts?severity=high&done="),
        "{}",
        location(&r)
    );
    assert_eq!(status_of(&w, w.org_a, a1).await, "acknowledged");
    let rec = audit_records(&w, w.org_a, "alert.acknowledge").await;
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].event.actor.kind, breeze_core::ActorType::User);
    assert_eq!(
        rec[0].event.resource_id.as_deref(),
        Some(a1.to_string().as_str())
    );
    let r = get(&w.app, location(&r), &ops.cookie).await;
    assert!(html(&r).contains("1 alert acknowledged."), "{}", html(&r));
    // Acknowledging it again is refused by the store's rule, reported on the page.
    let r = ops
        .post(
            &w.app,
            "/o/org-a/alerts/act",
            &[("action", "acknowledge"), ("id", &a1.to_string())],
        )
        .await;
    let r = get(&w.app, location(&r), &ops.cookie).await;
    assert!(
        html(&r)
            .contains("0 alerts acknowledged. 1 not changed: the alert is acknowledged, not open"),
        "{}",
        html(&r)
    );
    // Bulk: resolve two with a note; each its own record and history entry.
    let r = ops
        .post(
            &w.app,
            "/o/org-a/alerts/act",
            &[
                ("action", "resolve"),
                ("id", &a1.to_string()),
                ("id", &a2.to_string()),
                ("note", "patched the kernel"),
                ("back", "//evil.example/"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    // `back` is only ever a path on this site.
    assert!(
        location(&r).starts_with("/o/org-a/alerts?done="),
        "{}",
        location(&r)
    );
    assert_eq!(status_of(&w, w.org_a, a1).await, "resolved");
    assert_eq!(status_of(&w, w.org_a, a2).await, "resolved");
    assert_eq!(audit_records(&w, w.org_a, "alert.resolve").await.len(), 2);
    let history = w
        .store
        .org(w.org_a)
        .alerts()
        .alert_events(a2)
        .await
        .unwrap();
    assert_eq!(
        history.last().unwrap().note.as_deref(),
        Some("patched the kernel")
    );
    // Suppress: resolved, and the rule raises nothing on that device for the hours given.
    let r = ops
        .post(
            &w.app,
            "/o/org-a/alerts/act",
            &[
                ("action", "suppress"),
                ("id", &a3.to_string()),
                ("hours", "2"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let a = w.store.org(w.org_a).alerts().get_alert(a3).await.unwrap();
    assert_eq!(a.status.to_string(), "resolved");
    assert_eq!(
        a.suppressed_until,
        Some(w.state.clock.now() + chrono::Duration::hours(2))
    );
    let again = w
        .store
        .org(w.org_a)
        .alerts()
        .raise_alert(&hot, DeviceId(web.parse().unwrap()), Some(99.0))
        .await
        .unwrap();
    assert!(again.is_none(), "suppressed: nothing raised");
    assert_eq!(audit_records(&w, w.org_a, "alert.suppress").await.len(), 1);
    // Another device is not held back.
    assert!(
        w.store
            .org(w.org_a)
            .alerts()
            .raise_alert(&hot, DeviceId(db.parse().unwrap()), None)
            .await
            .unwrap()
            .is_some()
    );
    let r = ops
        .post(
            &w.app,
            "/o/org-a/alerts/act",
            &[
                ("action", "suppress"),
                ("id", &a3.to_string()),
                ("hours", "9999"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Another organization's alert through A's page: 404, and unchanged.
    for form in [
        vec![("one".to_owned(), format!("resolve:{b_alert}"))],
        vec![
            ("action".to_owned(), "resolve".to_owned()),
            ("id".to_owned(), b_alert.to_string()),
        ],
    ] {
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let r = ops.post(&w.app, "/o/org-a/alerts/act", &form).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{form:?}");
    }
    let r = ops
        .post(
            &w.app,
            "/o/org-b/alerts/act",
            &[("one", &format!("resolve:{b_alert}"))],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(status_of(&w, w.org_b, b_alert).await, "open");

    // A forged post (no CSRF token, or another session's) is refused before anything changes.
    let a4 = raise(&w, w.org_a, &hot, &w.a_device).await;
    let r = post_form(
        &w.app,
        "/o/org-a/alerts/act",
        &ops.cookie,
        &[("one", &format!("resolve:{a4}"))],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(html(&r).contains("CSRF"));
    let r = post_form(
        &w.app,
        "/o/org-a/alerts/act",
        &ops.cookie,
        &[("csrf", &viewer.csrf), ("one", &format!("resolve:{a4}"))],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Read Only: sees the inbox without a button, and a post of theirs is refused.
    let r = get(&w.app, "/o/org-a/alerts", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains(&format!("al-{a4}")));
    assert!(
        !page.contains("name=\"action\"")
            && !page.contains("name=\"one\"")
            && !page.contains("type=\"checkbox\"")
    );
    let r = get(&w.app, &format!("/o/org-a/alerts/{a4}"), &viewer.cookie).await;
    assert!(!html(&r).contains("id=\"alert-actions\""));
    for form in [
        [("one", format!("resolve:{a4}"))],
        [("one", format!("acknowledge:{a4}"))],
    ] {
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = viewer.post(&w.app, "/o/org-a/alerts/act", &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    }
    // An unknown action is never allowed.
    let r = ops
        .post(
            &w.app,
            "/o/org-a/alerts/act",
            &[("one", &format!("delete:{a4}"))],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(status_of(&w, w.org_a, a4).await, "open");
}

/// The tool does the same: `manage_alerts suppress` through MCP, the same desk.
async fn the_suppress_tool_action_is_the_same_operation(cx: Ctx) {
    let w = world(&cx).await;
    let hot = rule(&w, w.org_a, "CPU hot", Severity::High).await;
    let a = raise(&w, w.org_a, &hot, &w.a_device).await;
    let out = common::tool(
        &w.app,
        &w.write,
        "manage_alerts",
        serde_json::json!({ "action": "suppress", "alertId": a, "suppressMinutes": 30, "note": "noisy" }),
    )
    .await;
    assert_eq!(out["alert"]["status"], "resolved", "{out}");
    assert!(out["alert"]["suppressedUntil"].is_string(), "{out}");
    let rec = audit_records(&w, w.org_a, "alert.suppress").await;
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].event.actor.kind, breeze_core::ActorType::ApiKey);
    // A read key cannot.
    let out = common::tool(
        &w.app,
        &w.read,
        "manage_alerts",
        serde_json::json!({ "action": "suppress", "alertId": a }),
    )
    .await;
    assert!(
        !common::code(&out).is_empty() || !out["rpcError"].is_null(),
        "{out}"
    );
}

async fn alert_rules_are_listed_created_and_edited(cx: Ctx) {
    let w = world(&cx).await;
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/alerts/rules", &ops.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("No alert rule yet.") && html(&r).contains("id=\"new-rule\""));
    let r = get(&w.app, "/o/org-a/alerts/rules/new", &ops.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("Create rule"));
    let form = |name: &'static str, threshold: &'static str| {
        vec![
            ("name", name),
            ("severity", "critical"),
            ("kind", "metric"),
            ("metric", "disk"),
            ("comparison", "above"),
            ("threshold", threshold),
            ("duration", "10"),
            ("target_kind", "organization"),
            ("cooldown", "30"),
            ("enabled", "on"),
            ("auto_resolve", "on"),
        ]
    };
    let r = ops
        .post(&w.app, "/o/org-a/alerts/rules", &form("Disk full", "95"))
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let rules = w.store.org(w.org_a).alerts().list_rules().await.unwrap();
    assert_eq!(rules.len(), 1);
    let made = &rules[0];
    assert_eq!(made.severity, Severity::Critical);
    assert_eq!(made.cooldown_minutes, 30);
    assert!(made.enabled && made.auto_resolve);
    assert_eq!(
        made.condition,
        AlertCondition::Metric {
            metric: Metric::Disk,
            comparison: Comparison::Above,
            threshold: 95.0,
            duration_minutes: 10
        }
    );
    let rec = audit_records(&w, w.org_a, "alert_rule.create").await;
    assert!(
        rec.iter()
            .any(|r| r.event.actor.kind == breeze_core::ActorType::User)
    );
    let r = get(&w.app, location(&r), &ops.cookie).await;
    assert!(html(&r).contains("Created rule Disk full.") && html(&r).contains("Disk full"));
    // The store's checks refuse a bad condition, and the form comes back as typed.
    let r = ops
        .post(&w.app, "/o/org-a/alerts/rules", &form("Bad", "250"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        html(&r).contains("value=\"Bad\"") && html(&r).contains("id=\"form-error\""),
        "{}",
        html(&r)
    );
    let r = ops
        .post(&w.app, "/o/org-a/alerts/rules", &form("Bad", "lots"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(html(&r).contains("not a number"));
    let r = ops
        .post(&w.app, "/o/org-a/alerts/rules", &form("Disk full", "90"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "a duplicate name");
    // A site of another organization as the target: refused, nothing made.
    let b_site = w.store.org(w.org_b).tenancy().list_sites().await.unwrap()[0]
        .id
        .to_string();
    let mut f = form("B site", "90");
    f.retain(|(k, _)| *k != "target_kind");
    f.push(("target_kind", "site"));
    f.push(("target_site", &b_site));
    let r = ops.post(&w.app, "/o/org-a/alerts/rules", &f).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        w.store
            .org(w.org_a)
            .alerts()
            .list_rules()
            .await
            .unwrap()
            .len(),
        1
    );
    // Edit: the form shows the rule; saving changes it, audited.
    let id = made.id;
    let r = get(&w.app, &format!("/o/org-a/alerts/rules/{id}"), &ops.cookie).await;
    assert!(html(&r).contains("value=\"Disk full\"") && html(&r).contains("value=\"95\""));
    let mut f = form("Disk nearly full", "90");
    f.retain(|(k, _)| *k != "enabled");
    let r = ops
        .post(&w.app, &format!("/o/org-a/alerts/rules/{id}"), &f)
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let after = w.store.org(w.org_a).alerts().get_rule(id).await.unwrap();
    assert_eq!(after.name, "Disk nearly full");
    assert!(!after.enabled, "an unticked box disables");
    assert_eq!(
        audit_records(&w, w.org_a, "alert_rule.update").await.len(),
        1
    );
    // Read Only: sees the rules and the form, no button; a post is refused.
    let r = get(&w.app, "/o/org-a/alerts/rules", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("Disk nearly full") && !html(&r).contains("id=\"new-rule\""));
    let r = get(
        &w.app,
        &format!("/o/org-a/alerts/rules/{id}"),
        &viewer.cookie,
    )
    .await;
    assert!(html(&r).contains("id=\"read-only\"") && !html(&r).contains("Save rule"));
    for uri in [
        "/o/org-a/alerts/rules".to_owned(),
        format!("/o/org-a/alerts/rules/{id}"),
    ] {
        let r = viewer.post(&w.app, &uri, &form("Mine", "90")).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
    }
    // Forged: refused.
    let r = post_form(
        &w.app,
        &format!("/o/org-a/alerts/rules/{id}"),
        &ops.cookie,
        &form("Forged", "90"),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        w.store
            .org(w.org_a)
            .alerts()
            .get_rule(id)
            .await
            .unwrap()
            .name,
        "Disk nearly full"
    );
    // Isolation: B's rule is 404 through A, to view or to change; B's pages are 404 to ops.
    let b_rule = rule(&w, w.org_b, "B only", Severity::High).await;
    let r = get(
        &w.app,
        &format!("/o/org-a/alerts/rules/{}", b_rule.id),
        &ops.cookie,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = ops
        .post(
            &w.app,
            &format!("/o/org-a/alerts/rules/{}", b_rule.id),
            &form("Taken", "90"),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        w.store
            .org(w.org_b)
            .alerts()
            .get_rule(b_rule.id)
            .await
            .unwrap()
            .name,
        "B only"
    );
    for uri in [
        "/o/org-b/alerts/rules".to_owned(),
        "/o/org-b/alerts/rules/new".to_owned(),
        format!("/o/org-b/alerts/rules/{}", b_rule.id),
    ] {
        assert_eq!(
            get(&w.app, &uri, &ops.cookie).await.status,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
    let r = ops
        .post(&w.app, "/o/org-b/alerts/rules", &form("Taken", "90"))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// An MCP request with `key`: `initialize`, then a `tools/call` with request id `rid`.
async fn mcp_calls(w: &World, key: &str, rid: &str) {
    let init = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "t", "version": "1" } } });
    let call = serde_json::json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "list_devices", "arguments": {} } });
    for (body, id) in [(init, "init"), (call, rid)] {
        let r = send(
            &w.app,
            Request::post("/mcp")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("x-api-key", key)
                .header("x-request-id", id)
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
    }
}

async fn audit_names_actors_hides_protocol_noise_and_exports_csv(cx: Ctx) {
    let w = world(&cx).await;
    mcp_calls(&w, &w.read, "rid-call-1").await;
    mcp_calls(&w, &w.other_org_key, "rid-b-secret").await;
    w.store.flush_audit().await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/audit", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(
        page.contains("mcp.tools.call") && page.contains("rid-call-1"),
        "{page}"
    );
    assert!(
        !page.contains("<code>mcp.initialize</code>"),
        "initialize is noise, hidden"
    );
    assert!(page.contains("id=\"noise-hidden\""));
    // The key by its name, the id one click away.
    assert!(page.contains(">key “k”</span>"), "{page}");
    assert!(!page.contains("rid-b-secret"));
    // The toggle shows it; an action filter too.
    for q in ["noise=1", "action=mcp.initialize"] {
        let r = get(&w.app, &format!("/o/org-a/audit?{q}"), &admin.cookie).await;
        assert!(html(&r).contains("<code>mcp.initialize</code>"), "{q}");
    }
    // One request's records.
    let r = get(
        &w.app,
        "/o/org-a/audit?noise=1&request=rid-call-1",
        &admin.cookie,
    )
    .await;
    assert_eq!(html(&r).matches("<tr id=\"r-").count(), 1);
    // CSV: streamed, the same filter, names beside ids, quoted properly.
    let r = get(&w.app, "/o/org-a/audit/export.csv?noise=1", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers.get(header::CONTENT_TYPE).unwrap(),
        "text/csv; charset=utf-8"
    );
    assert!(
        r.headers
            .get(header::CONTENT_DISPOSITION)
            .unwrap()
            .to_str()
            .unwrap()
            .contains("audit-org-a.csv")
    );
    let csv = r.body.as_str().unwrap();
    assert!(
        csv.starts_with("time_utc,actor,actor_name,action,"),
        "{csv}"
    );
    assert!(
        csv.contains("mcp.initialize") && csv.contains("key “k”") && csv.contains("rid-call-1")
    );
    assert!(!csv.contains("rid-b-secret"));
    let r = get(&w.app, "/o/org-a/audit/export.csv", &admin.cookie).await;
    assert!(
        !r.body.as_str().unwrap().contains("mcp.initialize"),
        "noise hidden by default"
    );
    let r = get(
        &w.app,
        "/o/org-a/audit/export.csv?since=yesterday",
        &admin.cookie,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Isolation.
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    for uri in ["/o/org-b/audit", "/o/org-b/audit/export.csv"] {
        assert_eq!(
            get(&w.app, uri, &ops.cookie).await.status,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
    let r = get(&w.app, "/o/org-a/audit/export.csv", "").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "signed out: sign in");
}

async fn approvals_show_a_headline_who_asked_and_the_device(cx: Ctx) {
    let w = world(&cx).await;
    let (secret, key) = w
        .state
        .auth
        .create_api_key(
            breeze_auth::CreateApiKey {
                org_id: w.org_a,
                user_id: w.admin,
                name: "night-shift bot".into(),
                scopes: breeze_core::ScopeSet::new([
                    breeze_core::Scope::AiRead,
                    breeze_core::Scope::AiWrite,
                    breeze_core::Scope::AiExecute,
                ]),
                expires_at: None,
            },
            common::audit("api_key.create"),
        )
        .await
        .unwrap();
    let _ = secret;
    let now = w.state.clock.now();
    w.store
        .org(w.org_a)
        .approvals()
        .create_approval(
            breeze_store::NewApproval {
                api_key_id: Some(key.id),
                oauth_grant_id: None,
                ai_session_id: None,
                client_name: Some("Claude Code".into()),
                requester_user_id: w.admin,
                tool: "manage_services".into(),
                action: Some("restart".into()),
                tier: 3,
                arguments: serde_json::json!({ "action": "restart", "deviceId": w.a_device, "serviceName": "nginx" }),
                arguments_hash: [1; 32],
                definition_hash: [2; 32],
                description: "restart nginx".into(),
                mode: "supervised".into(),
                request_id: Some("rid-approval".into()),
                expires_at: now + chrono::Duration::minutes(10),
                pinned: None,
            },
            common::audit("approval.request"),
        )
        .await
        .unwrap();
    let admin = sign_in(&w.app, "admin@p.test").await;
    for uri in ["/o/org-a/approvals", "/o/org-a/approvals/pending"] {
        let r = get(&w.app, uri, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::OK);
        let page = html(&r);
        assert!(
            page.contains("Manage services: restart on web-01"),
            "{page}"
        );
        assert!(page.contains("API key “night-shift bot”"), "{page}");
        assert!(page.contains(&format!(
            "href=\"/o/org-a/devices/{}\">web-01</a>",
            w.a_device
        )));
        assert!(
            page.contains(
                "<dd class=\"client\" title=\"As the client named itself\">Claude Code</dd>"
            ),
            "{page}"
        );
        // The raw call is one click away, not the first thing shown.
        assert!(
            page.contains("<details>\n    <summary>Arguments (the exact call)</summary>"),
            "{page}"
        );
    }
}

/// End to end: an MCP client that named itself at `initialize` asks for a Tier 3 call in that
/// session; the approvals page names the client and the key.
async fn approvals_name_the_ai_client_that_asked(cx: Ctx) {
    let w = world(&cx).await;
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            breeze_auth::CreateApiKey {
                org_id: w.org_a,
                user_id: w.admin,
                name: "laptop".into(),
                scopes: breeze_core::ScopeSet::new([
                    breeze_core::Scope::AiRead,
                    breeze_core::Scope::AiWrite,
                    breeze_core::Scope::AiExecute,
                ]),
                expires_at: None,
            },
            common::audit("api_key.create"),
        )
        .await
        .unwrap();
    let key = secret.expose().to_owned();
    let init = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "Acme Agent\u{7}", "version": "2" } } });
    let r = send(
        &w.app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-api-key", &key)
            .body(Body::from(init.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let session = r
        .headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let call = serde_json::json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "manage_groups", "arguments": { "action": "create", "name": "Lab" } } });
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", &key)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .body(Body::from(call.to_string()))
        .unwrap();
    let app = w.app.clone();
    let waiting = tokio::spawn(async move { send(&app, req).await });
    let mut pending = Vec::new();
    for _ in 0..400 {
        pending = w
            .store
            .org(w.org_a)
            .approvals()
            .pending_approvals()
            .await
            .unwrap();
        if !pending.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(pending.len(), 1);
    assert_eq!(
        pending[0].client_name.as_deref(),
        Some("Acme Agent"),
        "control characters dropped"
    );
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/approvals", &admin.cookie).await;
    let page = html(&r);
    assert!(page.contains("Manage device groups: create"), "{page}");
    assert!(
        page.contains("API key “laptop”") && page.contains(">Acme Agent</dd>"),
        "{page}"
    );
    waiting.abort();
}

/// The device list's columns: active alerts (linked to the filtered inbox) and updates.
async fn device_list_shows_alerts_and_updates(cx: Ctx) {
    let w = world(&cx).await;
    let hot = rule(&w, w.org_a, "CPU hot", Severity::High).await;
    raise(&w, w.org_a, &hot, &w.a_device).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/devices", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("<th>Alerts</th>") && page.contains("<th>Updates</th>"));
    assert!(
        page.contains(&format!(
            "href=\"/o/org-a/alerts?device={}\" class=\"badge s-open\">1 active</a>",
            w.a_device
        )),
        "{page}"
    );
    assert!(page.contains("none known"));
    // The live reload shows the same columns.
    let r = get(&w.app, "/o/org-a/devices/rows?page=1", &admin.cookie).await;
    assert!(html(&r).contains("1 active"));
}

/// A library script of `org`; its id.
async fn script(w: &World, org: OrgId, name: &str) -> String {
    w.store
        .org(org)
        .scripts()
        .create_script(
            breeze_store::NewScript {
                name: name.into(),
                description: "says hello".into(),
                language: "bash".into(),
                category: "maintenance".into(),
                body: "echo hello".into(),
                parameters: vec![],
                created_by: "test".into(),
            },
            common::audit("script.create"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

/// A static group of `org`; its id.
async fn group(w: &World, org: OrgId, name: &str) -> String {
    w.store
        .org(org)
        .tenancy()
        .create_group(name, None, None, common::audit("g"))
        .await
        .unwrap()
        .id
        .to_string()
}

async fn groups_of(w: &World, org: OrgId, device: &str) -> Vec<String> {
    w.store
        .org(org)
        .tenancy()
        .groups_of_device(DeviceId(device.parse().unwrap()))
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.name)
        .collect()
}

/// The device page's actions are tool calls through the pipeline: a group joined and left, a
/// maintenance window opened, a script run (refused by the tool for an offline device, with
/// the tool's reason); each leaves the tool's own audit record. A Read Only person sees no
/// action and is refused; a forged post is refused; another organization's device is 404.
async fn device_page_actions_are_the_tools_own_calls(cx: Ctx) {
    let w = world(&cx).await;
    let gid = group(&w, w.org_a, "Web servers").await;
    let sid = script(&w, w.org_a, "Say hello").await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let page_uri = format!("/o/org-a/devices/{}", w.a_device);
    let r = get(&w.app, &page_uri, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    for needle in [
        "id=\"device-actions\"",
        "value=\"run_script\"",
        "Say hello",
        "value=\"service_restart\"",
        "value=\"security_scan\"",
        "value=\"patch_scan\"",
        "value=\"maintenance\"",
        "value=\"add_to_group\"",
        "Web servers",
    ] {
        assert!(page.contains(needle), "{needle} missing");
    }
    let back = page_uri.as_str();
    // Add to a group: manage_groups add_devices, as MCP would call it.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "add_to_group"),
                ("id", &w.a_device),
                ("group", &gid),
                ("back", back),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(location(&r).starts_with(back), "{}", location(&r));
    assert!(
        outcome(&r, "failed").is_empty(),
        "{}",
        outcome(&r, "failed")
    );
    assert_eq!(groups_of(&w, w.org_a, &w.a_device).await, ["Web servers"]);
    let r = get(&w.app, location(&r), &admin.cookie).await;
    assert!(html(&r).contains("id=\"notice\""));
    assert!(html(&r).contains("aria-label=\"Remove from Web servers\""));
    // …and leave it.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "remove_from_group"),
                ("id", &w.a_device),
                ("group", &gid),
                ("back", back),
            ],
        )
        .await;
    assert!(
        outcome(&r, "failed").is_empty(),
        "{}",
        outcome(&r, "failed")
    );
    assert!(groups_of(&w, w.org_a, &w.a_device).await.is_empty());
    // Maintenance mode: a window on the device, from now, for the hours given.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "maintenance"),
                ("id", &w.a_device),
                ("hours", "3"),
                ("back", back),
            ],
        )
        .await;
    assert!(
        outcome(&r, "failed").is_empty(),
        "{}",
        outcome(&r, "failed")
    );
    let windows = w
        .store
        .org(w.org_a)
        .maintenance()
        .list_windows()
        .await
        .unwrap();
    assert_eq!(windows.len(), 1);
    assert_eq!(windows[0].name, "Maintenance mode: web-01");
    assert_eq!(
        windows[0].target_device_id.map(|d| d.to_string()),
        Some(w.a_device.clone())
    );
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "maintenance"),
                ("id", &w.a_device),
                ("hours", "500"),
                ("back", back),
            ],
        )
        .await;
    assert!(
        outcome(&r, "failed").contains("1 to 72 hours"),
        "{}",
        location(&r)
    );
    // Run a script: run_script itself, as the signed-in person.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "run_script"),
                ("id", &w.a_device),
                ("script", &sid),
                ("back", back),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    // web-01 is online with no agent connected: the tool queues the command and waits for the
    // agent, past what a page waits for, so the page says it is running; the command is the
    // tool's, in the device's recent commands.
    let said = format!("{}{}", outcome(&r, "done"), outcome(&r, "failed"));
    assert!(said.contains("still running"), "{said}");
    let r = get(&w.app, &page_uri, &admin.cookie).await;
    assert!(html(&r).contains("<code>Say hello</code>"), "{}", html(&r));
    // A parameter the script does not declare: the tool's validation, worded by the tool.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "run_script"),
                ("id", &w.a_device),
                ("script", &sid),
                ("params", "colour=blue"),
                ("back", back),
            ],
        )
        .await;
    assert!(outcome(&r, "failed").contains("colour"), "{}", location(&r));
    // Each change is the tool's audit record.
    let membership = audit_records(&w, w.org_a, "device_group.membership").await;
    assert_eq!(membership.len(), 2);
    assert_eq!(
        membership[0].event.actor.to_string(),
        format!("user:{}", w.admin)
    );
    assert_eq!(
        audit_records(&w, w.org_a, "maintenance_window.create")
            .await
            .len(),
        1
    );

    // Read Only: no actions, and a post is refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, &page_uri, &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("id=\"device-actions\""));
    let r = get(&w.app, "/o/org-a/devices", &viewer.cookie).await;
    assert!(!html(&r).contains("id=\"bulk-devices\""));
    let r = viewer
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "add_to_group"),
                ("id", &w.a_device),
                ("group", &gid),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(groups_of(&w, w.org_a, &w.a_device).await.is_empty());
    // A forged post (no CSRF token) and an unknown action are refused.
    let r = post_form(
        &w.app,
        "/o/org-a/devices/act",
        &admin.cookie,
        &[
            ("action", "add_to_group"),
            ("id", &w.a_device),
            ("group", &gid),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[("action", "format_disk"), ("id", &w.a_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(groups_of(&w, w.org_a, &w.a_device).await.is_empty());
    // Another organization's device, through A's URL or B's for a person of A only: 404.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "add_to_group"),
                ("id", &w.b_device),
                ("group", &gid),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let b_group = group(&w, w.org_b, "B group").await;
    let r = ops
        .post(
            &w.app,
            "/o/org-b/devices/act",
            &[
                ("action", "add_to_group"),
                ("id", &w.b_device),
                ("group", &b_group),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(groups_of(&w, w.org_b, &w.b_device).await.is_empty());
    // A's device with B's group: the tool refuses it as not found, nothing joins.
    let r = ops
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "add_to_group"),
                ("id", &w.a_device),
                ("group", &b_group),
            ],
        )
        .await;
    assert!(!outcome(&r, "failed").is_empty(), "{}", location(&r));
    assert!(groups_of(&w, w.org_a, &w.a_device).await.is_empty());
}

/// The device list's selection: checkboxes on each row and one action on many devices.
async fn device_list_acts_on_a_selection(cx: Ctx) {
    let w = world(&cx).await;
    let second = device(&w, w.org_a, "web-02", breeze_core::DeviceStatus::Online).await;
    let gid = group(&w, w.org_a, "Patch ring 1").await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/devices", &admin.cookie).await;
    let page = html(&r);
    assert!(page.contains("id=\"bulk-devices\""));
    assert!(page.contains(&format!(
        "name=\"id\" value=\"{}\" form=\"bulk-devices\"",
        w.a_device
    )));
    let r = get(&w.app, "/o/org-a/devices/rows?page=1", &admin.cookie).await;
    assert!(html(&r).contains("form=\"bulk-devices\""));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "add_to_group"),
                ("id", &w.a_device),
                ("id", &second),
                ("group", &gid),
                ("back", "/o/org-a/devices?status=online"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        location(&r).starts_with("/o/org-a/devices?status=online&done="),
        "{}",
        location(&r)
    );
    assert_eq!(groups_of(&w, w.org_a, &w.a_device).await, ["Patch ring 1"]);
    assert_eq!(groups_of(&w, w.org_a, &second).await, ["Patch ring 1"]);
    let r = get(&w.app, location(&r), &admin.cookie).await;
    assert!(html(&r).contains("id=\"notice\""));
    // Maintenance on two devices: a window each.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "maintenance"),
                ("id", &w.a_device),
                ("id", &second),
                ("hours", "1"),
            ],
        )
        .await;
    assert!(outcome(&r, "failed").is_empty(), "{}", location(&r));
    assert_eq!(
        w.store
            .org(w.org_a)
            .maintenance()
            .list_windows()
            .await
            .unwrap()
            .len(),
        2
    );
    // Nothing selected; a selection with another organization's device (nothing is done).
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[("action", "security_scan")],
        )
        .await;
    assert!(outcome(&r, "failed").contains("Select at least one"));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "remove_from_group"),
                ("id", &w.a_device),
                ("id", &w.b_device),
                ("group", &gid),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(groups_of(&w, w.org_a, &w.a_device).await, ["Patch ring 1"]);
}

breeze_store::on_both_backends!(
    device_page_actions_are_the_tools_own_calls,
    device_list_acts_on_a_selection,
    device_list_shows_alerts_and_updates,
    approvals_name_the_ai_client_that_asked,
    unknown_paths_answer_the_html_404_page,
    overview_shows_the_fleet_at_a_glance_with_links,
    alerts_inbox_lists_filters_and_arrives_live,
    alerts_are_acknowledged_resolved_and_suppressed_one_or_many,
    the_suppress_tool_action_is_the_same_operation,
    alert_rules_are_listed_created_and_edited,
    audit_names_actors_hides_protocol_noise_and_exports_csv,
    approvals_show_a_headline_who_asked_and_the_device,
);
