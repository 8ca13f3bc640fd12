//! The console's remaining device and organization actions of issue #54, driven in-process on
//! both backends: a reboot from the device page and from the device list's selection (the
//! tool call `execute_command` `reboot`, queued for the agent like every agent command), and
//! giving a role through the Organization page, never beyond the giver's own rights. Each is
//! held to organization isolation (another organization's ids are 404), CSRF (a forged post is
//! refused) and the one permission model (a person without the right sees no button, and a
//! post of theirs is refused).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::http::StatusCode;
use breeze_core::{DeviceId, OrgId};
use breeze_store::testing::Ctx;
use common::browser::{
    admin_of, get, html, location, outcome, person, post_form, role_of, set_role_permissions,
    sign_in,
};
use common::{World, world};

async fn device(w: &World, org: OrgId, hostname: &str) -> String {
    let site = w.store.org(org).tenancy().list_sites().await.unwrap()[0].id;
    w.store
        .org(org)
        .devices()
        .create_device(
            breeze_store::NewDevice {
                last_seen_at: Some(w.state.clock.now()),
                ..breeze_store::testing::new_device(
                    site,
                    hostname,
                    breeze_core::DeviceStatus::Online,
                )
            },
            common::audit("d"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

/// The reboot commands queued for `device`: each one's payload.
async fn reboots(w: &World, org: OrgId, device: &str) -> Vec<serde_json::Value> {
    w.store
        .org(org)
        .commands()
        .list_commands(DeviceId(device.parse().unwrap()), 50)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.kind == "reboot")
        .map(|c| c.payload)
        .collect()
}

/// Reboot on the device page: `execute_command` `reboot` through the pipeline as the signed-in
/// person (Tier 3, `devices.execute`), queued for the agent with the delay and the users choice
/// the form gave, audited as the tool's own command. A person without `devices.execute` sees no
/// reboot button and is refused; a forged post is refused; another organization's device is
/// 404 and gets nothing.
async fn a_device_is_rebooted_from_its_page(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let page_uri = format!("/o/org-a/devices/{}", w.a_device);
    let r = get(&w.app, &page_uri, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("id=\"act-reboot\""), "{page}");
    assert!(page.contains("value=\"reboot\""));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "reboot"),
                ("id", &w.a_device),
                ("delay", "5"),
                ("with_users", "1"),
                ("back", &page_uri),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(location(&r).starts_with(&page_uri), "{}", location(&r));
    // No agent is connected: the command waits for it past what a page waits.
    let said = format!("{}{}", outcome(&r, "done"), outcome(&r, "failed"));
    assert!(said.contains("still running"), "{said}");
    let queued = reboots(&w, w.org_a, &w.a_device).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(queued[0]["type"], "reboot");
    assert_eq!(queued[0]["delayMinutes"], 5);
    assert_eq!(queued[0]["withUsers"], true);
    // A delay out of bounds is the form's clear error, and nothing is queued.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[("action", "reboot"), ("id", &w.a_device), ("delay", "9999")],
        )
        .await;
    assert!(
        outcome(&r, "failed").contains("0 to 1440 minutes"),
        "{}",
        location(&r)
    );
    assert_eq!(reboots(&w, w.org_a, &w.a_device).await.len(), 1);

    // A forged post (no CSRF token) is refused.
    let r = post_form(
        &w.app,
        "/o/org-a/devices/act",
        &admin.cookie,
        &[("action", "reboot"), ("id", &w.a_device)],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Read Only: no actions at all, and a post is refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, &page_uri, &viewer.cookie).await;
    assert!(!html(&r).contains("id=\"act-reboot\""));
    let r = viewer
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[("action", "reboot"), ("id", &w.a_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A technician without devices.execute: groups yes, reboot no (no button, post refused).
    set_role_permissions(&w, "Technician", &["devices.read", "devices.write"]).await;
    let (_, tech) = person(&w, "tech@p.test", "Technician").await;
    let r = get(&w.app, &page_uri, &tech.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("id=\"device-actions\""), "{page}");
    assert!(!page.contains("id=\"act-reboot\""));
    let r = get(&w.app, "/o/org-a/devices", &tech.cookie).await;
    assert!(!html(&r).contains("<option value=\"reboot\">"));
    let r = tech
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[("action", "reboot"), ("id", &w.a_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(reboots(&w, w.org_a, &w.a_device).await.len(), 1);

    // Another organization's device, through A's URL or B's for a person of A only: 404.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[("action", "reboot"), ("id", &w.b_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let r = ops
        .post(
            &w.app,
            "/o/org-b/devices/act",
            &[("action", "reboot"), ("id", &w.b_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(reboots(&w, w.org_b, &w.b_device).await.is_empty());

    // The tool's own audit record, as the person.
    w.store.flush_audit().await;
    let audit = w
        .store
        .org(w.org_a)
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some("device.command".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap()
        .records;
    assert_eq!(audit.len(), 1);
    assert_eq!(
        audit[0].event.actor.to_string(),
        format!("user:{}", w.admin)
    );
}

/// Reboot as a bulk action on the device list's selection: one `execute_command` call per
/// device (the tool takes one device), each queued; a selection with another organization's
/// device does nothing and is 404.
async fn a_selection_is_rebooted_from_the_list(cx: Ctx) {
    let w = world(&cx).await;
    let second = device(&w, w.org_a, "web-02").await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/devices", &admin.cookie).await;
    let page = html(&r);
    assert!(
        page.contains("<option value=\"reboot\">Reboot</option>"),
        "{page}"
    );
    assert!(page.contains("id=\"bulk-delay\""));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "reboot"),
                ("id", &w.a_device),
                ("id", &second),
                ("delay", "0"),
                ("back", "/o/org-a/devices"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let said = outcome(&r, "done");
    assert!(
        said.contains("web-01: Sent; still running"),
        "{}",
        location(&r)
    );
    assert!(
        said.contains("web-02: Sent; still running"),
        "{}",
        location(&r)
    );
    for d in [&w.a_device, &second] {
        let queued = reboots(&w, w.org_a, d).await;
        assert_eq!(queued.len(), 1, "{d}");
        assert_eq!(queued[0]["delayMinutes"], 0);
        assert_eq!(
            queued[0]["withUsers"], false,
            "the list never overrides users"
        );
    }
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[("action", "reboot"), ("id", &second), ("id", &w.b_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(reboots(&w, w.org_a, &second).await.len(), 1);
    assert!(reboots(&w, w.org_b, &w.b_device).await.is_empty());
}

/// Role beyond the giver: a person who may manage users but holds fewer rights than a role
/// cannot give that role through the Organization page (it is not offered, and a post naming
/// it is refused with nothing changed), nor change the role of someone holding more than they
/// do; a role within their own rights is given.
async fn nobody_gives_a_role_beyond_their_own(cx: Ctx) {
    let w = world(&cx).await;
    let partner = w.store.find_partner("p").await.unwrap();
    let administrator = w
        .store
        .find_role(partner.id, "Administrator")
        .await
        .unwrap();
    let read_only = w.store.find_role(partner.id, "Read Only").await.unwrap();
    // A lead who manages people and reads devices, and nothing else.
    set_role_permissions(
        &w,
        "Technician",
        &[
            "users.manage",
            "devices.read",
            "scripts.read",
            "alerts.read",
            "files.read",
            "audit.read",
            "tickets.read",
            "external_tools.read",
        ],
    )
    .await;
    let (_, lead) = person(&w, "lead@p.test", "Technician").await;
    let (newbie, _) = person(&w, "newbie@p.test", "Read Only").await;
    let r = get(&w.app, "/o/org-a/people", &lead.cookie).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let page = html(&r);
    assert!(page.contains("id=\"assign-role\""), "{page}");
    assert!(
        !page.contains(&format!("value=\"{}\"", administrator.id)),
        "not offered"
    );
    assert!(page.contains(&format!("value=\"{}\"", read_only.id)));
    let (n, a) = (newbie.to_string(), administrator.id.to_string());
    let r = lead
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &n), ("role", &a)],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(role_of(&w, newbie, w.org_a).await, read_only.id);
    // Nor over someone who holds more (the administrator), even to a lesser role.
    let (admin_id, ro) = (w.admin.to_string(), read_only.id.to_string());
    let r = lead
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &admin_id), ("role", &ro)],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(role_of(&w, w.admin, w.org_a).await, administrator.id);
    // The lead's own role is within their rights: given.
    let tech = w.store.find_role(partner.id, "Technician").await.unwrap();
    let t = tech.id.to_string();
    let r = lead
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &n), ("role", &t)],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        outcome(&r, "done").contains("Technician"),
        "{}",
        location(&r)
    );
    assert_eq!(role_of(&w, newbie, w.org_a).await, tech.id);
    // A forged post of an in-bounds role is refused too.
    let r = post_form(
        &w.app,
        "/o/org-a/people/role",
        &lead.cookie,
        &[("user", &n), ("role", &ro)],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(role_of(&w, newbie, w.org_a).await, tech.id);
}

fn at(s: &str) -> breeze_core::Timestamp {
    s.parse().unwrap()
}

/// A report definition of `org`; its id.
async fn definition(w: &World, org: OrgId, name: &str) -> uuid::Uuid {
    w.store
        .org(org)
        .reports()
        .create_report(
            breeze_store::NewReport {
                name: name.into(),
                description: None,
                kind: breeze_core::ReportKind::DeviceInventory,
                format: breeze_core::ReportFormat::Json,
                filters: breeze_core::ReportFilters::default(),
                created_by: "test".into(),
            },
            common::audit("report.create"),
        )
        .await
        .unwrap()
        .id
}

/// Report schedules on the Reports page: created daily, weekly or monthly at a time in UTC or
/// a site's time zone (bad input is the form's clear error), run by the server's worker at the
/// injected clock's due instant exactly once (two workers, one occurrence) as the person who
/// made it, into a stored run downloadable as PDF from the page, and deleted. A person without
/// the right sees no form and is refused; a forged post is refused; another organization's
/// definition or schedule is 404.
async fn reports_run_on_a_schedule(cx: Ctx) {
    use breeze_server::{report_schedules::ReportScheduleWorker, workers::Worker};
    use std::sync::Arc;
    let w = world(&cx).await;
    w.store
        .org(w.org_a)
        .tenancy()
        .create_site("Berlin", "Europe/Berlin", common::audit("s"))
        .await
        .unwrap();
    let fleet = definition(&w, w.org_a, "Fleet inventory").await;
    let b_report = definition(&w, w.org_b, "B inventory").await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/reports", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("id=\"new-schedule\""), "{page}");
    assert!(
        page.contains("<option value=\"Europe/Berlin\">"),
        "the site's zone is offered"
    );
    assert!(page.contains("No report runs on a schedule."));
    let f = fleet.to_string();
    // 13:30 in Berlin is 12:30 UTC in November: due half an hour after the clock's noon.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/reports/schedules",
            &[
                ("report", &f),
                ("cadence", "daily"),
                ("at", "13:30"),
                ("time_zone", "Europe/Berlin"),
                ("format", "pdf"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        outcome(&r, "done")
            .contains("Daily at 13:30 (Europe/Berlin); next at 2026-11-30 12:30 UTC"),
        "{}",
        location(&r)
    );
    let reports = w.store.org(w.org_a).reports();
    let all = reports.list_report_schedules().await.unwrap();
    assert_eq!(all.len(), 1);
    let daily = all[0].clone();
    assert_eq!(daily.next_run_at, Some(at("2026-11-30T12:30:00Z")));
    assert_eq!(daily.owner_actor, format!("user:{}", w.admin));
    // Weekly on a Monday in UTC: the next Monday, today's 07:00 having passed.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/reports/schedules",
            &[
                ("report", &f),
                ("cadence", "weekly"),
                ("weekday", "1"),
                ("at", "07:00"),
                ("time_zone", "UTC"),
                ("format", "csv"),
            ],
        )
        .await;
    assert!(
        outcome(&r, "done").contains("Weekly on Monday at 07:00 (UTC)"),
        "{}",
        location(&r)
    );
    let weekly = reports.list_report_schedules().await.unwrap()[1].clone();
    assert_eq!(weekly.next_run_at, Some(at("2026-12-07T07:00:00Z")));
    // Bad input: each its own clear error, nothing created.
    for (field, value, says) in [
        ("month_day", "31", "1 to 28"),
        ("at", "25:00", "not a time of day"),
        ("time_zone", "Mars/Olympus", "Mars/Olympus"),
        ("format", "docx", "Format"),
    ] {
        let mut form = vec![
            ("report", f.as_str()),
            ("cadence", "monthly"),
            ("month_day", "1"),
            ("at", "06:00"),
            ("time_zone", "UTC"),
            ("format", "csv"),
        ];
        form.retain(|(k, _)| *k != field);
        form.push((field, value));
        let r = admin
            .post(&w.app, "/o/org-a/reports/schedules", &form)
            .await;
        assert!(
            outcome(&r, "failed").contains(says),
            "{field}: {}",
            location(&r)
        );
    }
    assert_eq!(reports.list_report_schedules().await.unwrap().len(), 2);

    // The worker: nothing before it is due; at 12:31 two workers fire the daily one once, as
    // the admin, into a stored PDF run; a later tick does not fire it again.
    let one = Arc::new(ReportScheduleWorker::new(
        w.store.clone(),
        w.state.pipeline.clone(),
    ));
    let two = Arc::new(ReportScheduleWorker::new(
        w.store.clone(),
        w.state.pipeline.clone(),
    ));
    assert_eq!(one.tick().await.unwrap(), 0);
    cx.clock.set(at("2026-11-30T12:31:00Z"));
    let (a, b) = tokio::join!(one.tick(), two.tick());
    one.settle().await;
    two.settle().await;
    assert_eq!(a.unwrap() + b.unwrap(), 1, "one occurrence, fired once");
    cx.clock.set(at("2026-11-30T12:45:00Z"));
    assert_eq!(one.tick().await.unwrap(), 0);
    one.settle().await;
    let s = reports.get_report_schedule(daily.id).await.unwrap();
    assert_eq!(s.last_status.as_deref(), Some("ran"), "{s:?}");
    assert_eq!(s.next_run_at, Some(at("2026-12-01T12:30:00Z")));
    let runs = reports.report_runs(None, 10).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(Some(runs[0].id), s.last_run_id);
    assert_eq!(runs[0].format, breeze_core::ReportFormat::Pdf);
    assert_eq!(runs[0].status, breeze_core::ReportStatus::Completed);
    assert_eq!(runs[0].requested_by, format!("user:{}", w.admin));
    // The page lists it with the run's download, which is the PDF.
    let r = get(&w.app, "/o/org-a/reports", &admin.cookie).await;
    let page = html(&r);
    let download = format!("/api/v1/orgs/org-a/reports/{}/download", runs[0].id);
    assert!(page.contains(&download), "{page}");
    assert!(page.contains("Daily at 13:30 (Europe/Berlin)"));
    let r = get(&w.app, &download, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).starts_with("%PDF"), "not a PDF");

    // Read Only: sees the schedules, no form, no delete, and a post is refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/reports", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("Daily at 13:30"));
    assert!(!page.contains("id=\"new-schedule\""));
    assert!(!page.contains("/reports/schedules/"));
    let r = viewer
        .post(
            &w.app,
            "/o/org-a/reports/schedules",
            &[
                ("report", &f),
                ("cadence", "daily"),
                ("at", "08:00"),
                ("format", "csv"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let delete = format!("/o/org-a/reports/schedules/{}/delete", weekly.id);
    let r = viewer.post(&w.app, &delete, &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A forged post is refused.
    let r = post_form(&w.app, &delete, &admin.cookie, &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post_form(
        &w.app,
        "/o/org-a/reports/schedules",
        &admin.cookie,
        &[
            ("report", &f),
            ("cadence", "daily"),
            ("at", "08:00"),
            ("format", "csv"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(reports.list_report_schedules().await.unwrap().len(), 2);
    // Isolation: B's definition through A's URL, A's schedule through B's URL.
    let b = b_report.to_string();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/reports/schedules",
            &[
                ("report", &b),
                ("cadence", "daily"),
                ("at", "08:00"),
                ("format", "csv"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = admin
        .post(
            &w.app,
            &format!("/o/org-b/reports/schedules/{}/delete", weekly.id),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        w.store
            .org(w.org_b)
            .reports()
            .list_report_schedules()
            .await
            .unwrap()
            .is_empty()
    );
    // Deleted: gone from the page; the run stays.
    let r = admin.post(&w.app, &delete, &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(outcome(&r, "done").contains("deleted"), "{}", location(&r));
    assert_eq!(reports.list_report_schedules().await.unwrap().len(), 1);
    assert_eq!(reports.report_runs(None, 10).await.unwrap().len(), 1);
    // A person's schedule runs as them as they stand now: once disabled, the occurrence is
    // refused (and says why), and nothing is generated.
    let (tech_id, tech) = person(&w, "tech@p.test", "Technician").await;
    let r = tech
        .post(
            &w.app,
            "/o/org-a/reports/schedules",
            &[
                ("report", &f),
                ("cadence", "daily"),
                ("at", "13:00"),
                ("format", "csv"),
            ],
        )
        .await;
    assert!(
        outcome(&r, "done").contains("Daily at 13:00 (UTC)"),
        "{}",
        location(&r)
    );
    w.store
        .set_user_disabled(tech_id, true, common::audit("user.disable"))
        .await
        .unwrap();
    cx.clock.set(at("2026-11-30T13:01:00Z"));
    assert_eq!(one.tick().await.unwrap(), 1);
    one.settle().await;
    let theirs = reports
        .list_report_schedules()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.owner_actor == format!("user:{tech_id}"))
        .unwrap();
    assert_eq!(theirs.last_status.as_deref(), Some("refused"), "{theirs:?}");
    assert!(
        theirs
            .last_message
            .as_deref()
            .unwrap_or("")
            .contains("no longer holds a role"),
        "{theirs:?}"
    );
    assert_eq!(reports.report_runs(None, 10).await.unwrap().len(), 1);
    for action in ["report_schedule.create", "report_schedule.delete"] {
        let n = common::audit_records(&w, w.org_a, action).await.len();
        assert!(n >= 1, "{action}");
    }
}

async fn window(
    w: &World,
    org: OrgId,
    name: &str,
    schedule: breeze_core::MaintenanceSchedule,
    enabled: bool,
) {
    w.store
        .org(org)
        .maintenance()
        .create_window(
            breeze_store::NewWindow {
                name: name.into(),
                description: None,
                target: breeze_store::RuleTarget::Organization,
                time_zone: "Europe/Berlin".into(),
                schedule,
                suppress_alerts: true,
                enabled,
                created_by: "test".into(),
            },
            common::audit("maintenance_window.create"),
        )
        .await
        .unwrap();
}

/// The maintenance calendar: the next 14 days (UTC, from the clock's Monday 2026-11-30), each
/// a heading with the openings that start on it — a weekly window expanded onto each of its
/// days, a one-off on its day, a disabled window and another organization's nowhere; a day
/// without one says so. The read right alone shows it; the Read Only person sees it too.
async fn maintenance_windows_show_on_a_fourteen_day_calendar(cx: Ctx) {
    use breeze_core::{DayOfWeek, MaintenanceSchedule};
    let w = world(&cx).await;
    let weekly = MaintenanceSchedule::Weekly {
        days: vec![DayOfWeek::Mon, DayOfWeek::Thu],
        start_time: chrono::NaiveTime::from_hms_opt(2, 0, 0).unwrap(),
        duration_minutes: 120,
    };
    window(&w, w.org_a, "Patch nights", weekly.clone(), true).await;
    window(&w, w.org_a, "Switched off", weekly.clone(), false).await;
    window(&w, w.org_b, "B nights", weekly, true).await;
    window(
        &w,
        w.org_a,
        "Core switch swap",
        MaintenanceSchedule::Once {
            starts_at: at("2026-12-01T22:00:00Z"),
            ends_at: at("2026-12-02T01:00:00Z"),
        },
        true,
    )
    .await;
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/maintenance", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("id=\"next-days\""), "{page}");
    assert!(page.contains(">Today, Mon 30 Nov</h3>"), "{page}");
    assert!(page.contains(">Tomorrow, Tue 1 Dec</h3>"));
    assert!(
        page.contains(">Sunday 13 December</h3>"),
        "the fourteenth day"
    );
    assert!(!page.contains("Monday 14 December"), "no fifteenth day");
    // Today's 01:00-03:00 UTC opening is over; Thursday, the Mondays and Thursday after.
    let day = |d: &str| {
        let start = page
            .find(&format!("id=\"day-{d}-heading\""))
            .unwrap_or_else(|| panic!("{d}"));
        let rest = &page[start..];
        let end = rest[10..]
            .find("class=\"table-heading\"")
            .map_or(rest.len(), |e| e + 10);
        rest[..end].to_owned()
    };
    assert!(day("2026-11-30").contains("No window."));
    for d in ["2026-12-03", "2026-12-07", "2026-12-10"] {
        let text = day(d);
        assert!(text.contains("01:00 → 03:00"), "{d}: {text}");
        assert!(text.contains("Patch nights"), "{d}");
        assert!(text.contains("every device"), "{d}");
    }
    let tuesday = day("2026-12-01");
    assert!(tuesday.contains("Core switch swap"));
    assert!(tuesday.contains("22:00 → Wed 2 Dec 01:00"), "{tuesday}");
    assert!(day("2026-12-02").contains("No window."));
    let calendar =
        &page[page.find("id=\"next-days\"").unwrap()..page.find("id=\"calendar\"").unwrap()];
    assert!(
        !calendar.contains("Switched off"),
        "a disabled window has no opening"
    );
    assert!(!page.contains("B nights"), "another organization's window");
    // While one is open, it is on today.
    cx.clock.set(at("2026-12-03T01:30:00Z"));
    let viewer = sign_in(&w.app, "viewer@p.test").await; // days later: a new session
    let r = get(&w.app, "/o/org-a/maintenance", &viewer.cookie).await;
    let page = html(&r);
    assert!(page.contains(">Today, Thu 3 Dec</h3>"), "{page}");
    assert!(page.contains("open now, until 03:00"), "{page}");
    // Another organization's calendar is not this person's.
    let r = get(&w.app, "/o/org-b/maintenance", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

breeze_store::on_both_backends!(
    a_device_is_rebooted_from_its_page,
    a_selection_is_rebooted_from_the_list,
    nobody_gives_a_role_beyond_their_own,
    reports_run_on_a_schedule,
    maintenance_windows_show_on_a_fourteen_day_calendar,
);
