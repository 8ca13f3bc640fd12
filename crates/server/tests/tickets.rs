//! `manage_tickets`, `list_invoices`, `get_invoice` and `manage_invoices` over MCP.
//!
//! The attacks first: every id-taking action given another organization's ticket, alert,
//! device, comment or invoice answers not found — the Tier 3 ones before any approval is
//! asked; a read key cannot change tickets nor read invoices (financial reads are Tier 2); a
//! read-only user's write key cannot create; another user's comment is changed only through
//! the `*_any_comment` actions. Then the way a technician works: a ticket from an alert, a
//! comment, time logged (Tier 3: a person approves it first), a draft assembled from the
//! ticket, issued after approval with number INV-000001.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use breeze_core::{AlertCondition, Comparison, InvoiceStatus, Metric, OrgId, Scope, Severity};
use breeze_limits::MemoryLimiter;
use breeze_server::{AppState, ServerConfig};
use breeze_store::{Decision, NewRule, RuleTarget, testing::Ctx};
use common::{World, api_key, audit, code, ok, tool, user_with, why, world};
use serde_json::{Value, json};

const TICKETS: &str = "manage_tickets";
const INVOICES: &str = "manage_invoices";

/// A state whose Tier 3 calls answer "pending" at once (no 45 s wait in a test).
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

/// A raised alert on the organization's device.
async fn alert(w: &World, org: OrgId, device: &str) -> String {
    let o = w.store.org(org);
    let rule = o
        .alerts()
        .create_rule(
            NewRule {
                name: "hot".into(),
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
                auto_resolve: false,
                channel_ids: vec![],
                created_by: "test".into(),
            },
            audit("alert_rule.create"),
        )
        .await
        .unwrap();
    let device = breeze_core::DeviceId(device.parse().unwrap());
    let a = o
        .alerts()
        .raise_alert(&rule, device, Some(97.0))
        .await
        .unwrap()
        .unwrap();
    a.id.to_string()
}

async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let state = quick_state(&w);
    let app = breeze_server::app(breeze_server::Breeze::new(state.clone()));
    let exec = api_key(&w, w.org_a, w.admin, &[Scope::AiExecute]).await;
    let b_key = api_key(&w, w.org_b, w.admin, &[Scope::AiExecute]).await;

    // B's ticket (with a comment), alert and invoice, made through B's own key.
    let b_ticket = ok(
        &app,
        &b_key,
        TICKETS,
        json!({ "action": "create", "subject": "B's" }),
    )
    .await;
    let b_id = b_ticket["ticket"]["id"].as_str().unwrap().to_owned();
    let b_comment = ok(
        &app,
        &b_key,
        TICKETS,
        json!({ "action": "comment", "ticketId": b_id, "body": "B only" }),
    )
    .await["comment"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let b_alert = alert(&w, w.org_b, &w.b_device).await;
    let b_invoice = ok(
        &app,
        &b_key,
        INVOICES,
        json!({ "action": "create", "currency": "USD" }),
    )
    .await["invoice"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mine = ok(
        &app,
        &exec,
        TICKETS,
        json!({ "action": "create", "subject": "mine" }),
    )
    .await;
    let mine_id = mine["ticket"]["id"].as_str().unwrap().to_owned();
    let b_number = b_ticket["ticket"]["number"].as_str().unwrap().to_owned();

    for args in [
        json!({ "action": "get", "ticketId": b_id }),
        json!({ "action": "get", "ticketId": b_number }),
        json!({ "action": "comment", "ticketId": b_id, "body": "x" }),
        json!({ "action": "assign", "ticketId": b_id }),
        json!({ "action": "update_status", "ticketId": b_id, "status": "open" }),
        json!({ "action": "update", "ticketId": b_id, "subject": "x" }),
        json!({ "action": "link_alert", "ticketId": b_id, "alertId": b_alert }),
        json!({ "action": "unlink_alert", "ticketId": b_id, "alertId": b_alert }),
        json!({ "action": "add_part", "ticketId": b_id, "description": "x", "unitPrice": "1",
                "currency": "USD" }),
        json!({ "action": "edit_comment", "ticketId": b_id, "commentId": b_comment, "body": "x" }),
        json!({ "action": "delete_comment", "ticketId": b_id, "commentId": b_comment }),
        json!({ "action": "edit_any_comment", "ticketId": b_id, "commentId": b_comment,
                "body": "x" }),
        json!({ "action": "delete_any_comment", "ticketId": b_id, "commentId": b_comment }),
        json!({ "action": "edit_any_comment", "ticketId": mine_id, "commentId": b_comment,
                "body": "x" }),
        json!({ "action": "delete_any_comment", "ticketId": mine_id, "commentId": b_comment }),
        json!({ "action": "link_alert", "ticketId": mine_id, "alertId": b_alert }),
        json!({ "action": "create_from_alert", "alertId": b_alert }),
        json!({ "action": "create", "subject": "x", "deviceId": w.b_device }),
        json!({ "action": "update", "ticketId": mine_id, "deviceId": w.b_device }),
        // Tier 3: refused before any person is asked.
        json!({ "action": "log_time", "ticketId": b_id, "minutes": 5, "rate": "1",
                "currency": "USD" }),
        json!({ "action": "start_timer", "ticketId": b_id, "rate": "1", "currency": "USD" }),
        json!({ "action": "stop_timer", "ticketId": b_id }),
        json!({ "action": "move", "ticketId": b_id, "targetOrgId": w.org_a.to_string() }),
    ] {
        let r = tool(&app, &exec, TICKETS, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
    }
    for (name, args) in [
        ("get_invoice", json!({ "invoiceId": b_invoice })),
        ("list_invoices", json!({ "orgId": w.org_b.to_string() })),
        (
            INVOICES,
            json!({ "action": "update", "invoiceId": b_invoice, "notes": "x" }),
        ),
        (
            INVOICES,
            json!({ "action": "delete", "invoiceId": b_invoice }),
        ),
        (
            INVOICES,
            json!({ "action": "add_line", "invoiceId": b_invoice, "description": "x",
                           "unitPrice": "1" }),
        ),
        (
            INVOICES,
            json!({ "action": "remove_line", "invoiceId": b_invoice,
                           "lineId": uuid::Uuid::now_v7().to_string() }),
        ),
        (
            INVOICES,
            json!({ "action": "assemble_from_ticket", "ticketId": b_id }),
        ),
        (
            INVOICES,
            json!({ "action": "issue", "invoiceId": b_invoice }),
        ),
        (
            INVOICES,
            json!({ "action": "void", "invoiceId": b_invoice, "reason": "x" }),
        ),
        (
            INVOICES,
            json!({ "action": "record_payment", "invoiceId": b_invoice, "amount": "1" }),
        ),
        (
            INVOICES,
            json!({ "action": "void_payment", "invoiceId": b_invoice, "reason": "x",
                           "paymentId": uuid::Uuid::now_v7().to_string() }),
        ),
    ] {
        let r = tool(&app, &exec, name, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{name} {args}: {r}");
    }
    // B's things are as they were.
    let after = ok(
        &app,
        &b_key,
        TICKETS,
        json!({ "action": "get", "ticketId": b_id }),
    )
    .await;
    assert_eq!(after["ticket"]["subject"], "B's");
    assert_eq!(after["ticket"]["comments"][0]["body"], "B only");
    assert_eq!(after["ticket"]["alerts"], json!([]));
    let listed = ok(&app, &exec, TICKETS, json!({ "action": "list" })).await;
    assert_eq!(listed["showing"], 1, "{listed}");
}

async fn tiers_scopes_and_permissions(cx: Ctx) {
    let w = world(&cx).await;
    let state = quick_state(&w);
    let app = breeze_server::app(breeze_server::Breeze::new(state.clone()));

    // A read key lists and reads tickets, but changes none and reads no invoices.
    ok(&app, &w.read, TICKETS, json!({ "action": "list" })).await;
    for (name, args) in [
        (TICKETS, json!({ "action": "create", "subject": "x" })),
        ("list_invoices", json!({})),
        ("get_invoice", json!({ "invoiceId": "INV-000001" })),
    ] {
        let r = tool(&app, &w.read, name, args.clone()).await;
        assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "{name} {args}: {r}");
    }
    // A write key creates; its Tier 3 asks a person.
    let t = ok(
        &app,
        &w.write,
        TICKETS,
        json!({ "action": "create", "subject": "x" }),
    )
    .await;
    let id = t["ticket"]["id"].as_str().unwrap().to_owned();
    assert_eq!(t["ticket"]["number"], "T-1");
    let r = tool(
        &app,
        &w.write,
        TICKETS,
        json!({ "action": "log_time", "ticketId": id, "minutes": 5, "rate": "1", "currency": "USD" }),
    )
    .await;
    assert_eq!(
        why(&r),
        "INSUFFICIENT_SCOPE",
        "Tier 3 needs ai:execute: {r}"
    );
    ok(&app, &w.write, "list_invoices", json!({})).await;

    // A read-only user's write key: the role decides.
    let viewer = user_with(&w, "Read Only", "ro@p.test").await;
    let ro_key = api_key(&w, w.org_a, viewer, &[Scope::AiRead, Scope::AiWrite]).await;
    ok(
        &app,
        &ro_key,
        TICKETS,
        json!({ "action": "get", "ticketId": "T-1" }),
    )
    .await;
    for (name, args) in [
        (TICKETS, json!({ "action": "create", "subject": "x" })),
        (
            TICKETS,
            json!({ "action": "comment", "ticketId": id, "body": "x" }),
        ),
        ("list_invoices", json!({})),
        (INVOICES, json!({ "action": "create", "currency": "USD" })),
    ] {
        let r = tool(&app, &ro_key, name, args.clone()).await;
        assert_eq!(why(&r), "FORBIDDEN", "{name} {args}: {r}");
    }

    // A technician's key: tickets yes, another's comment only with tickets.manage, no billing.
    let tech = user_with(&w, "Technician", "tech@p.test").await;
    let tech_key = api_key(&w, w.org_a, tech, &[Scope::AiRead, Scope::AiWrite]).await;
    let admins = ok(
        &app,
        &w.write,
        TICKETS,
        json!({ "action": "comment", "ticketId": id,
                                                      "body": "admin's" }),
    )
    .await["comment"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = tool(
        &app,
        &tech_key,
        TICKETS,
        json!({ "action": "edit_comment", "ticketId": id,
                                                    "commentId": admins, "body": "mine" }),
    )
    .await;
    assert_eq!(why(&r), "FORBIDDEN", "{r}");
    let r = tool(
        &app,
        &tech_key,
        TICKETS,
        json!({ "action": "delete_any_comment",
                                                    "ticketId": id, "commentId": admins }),
    )
    .await;
    assert_eq!(
        why(&r),
        "FORBIDDEN",
        "a technician lacks tickets.manage: {r}"
    );
    let own = ok(
        &app,
        &tech_key,
        TICKETS,
        json!({ "action": "comment", "ticketId": id,
                                                    "body": "tech's" }),
    )
    .await["comment"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(
        &app,
        &tech_key,
        TICKETS,
        json!({ "action": "edit_comment", "ticketId": id,
                                         "commentId": own, "body": "tech's, edited" }),
    )
    .await;
    // The administrator may change anyone's through the *_any_ actions.
    ok(
        &app,
        &w.write,
        TICKETS,
        json!({ "action": "delete_any_comment", "ticketId": id,
                                        "commentId": own }),
    )
    .await;
    let r = tool(
        &app,
        &tech_key,
        INVOICES,
        json!({ "action": "create", "currency": "USD" }),
    )
    .await;
    assert_eq!(why(&r), "FORBIDDEN", "{r}");

    // Bad input: statuses, money and transitions.
    for args in [
        json!({ "action": "update_status", "ticketId": id, "status": "active" }),
        json!({ "action": "update_status", "ticketId": id, "status": "new" }),
        json!({ "action": "add_part", "ticketId": id, "description": "x", "unitPrice": "1.005",
                "currency": "USD" }),
        json!({ "action": "add_part", "ticketId": id, "description": "x", "unitPrice": "1e3",
                "currency": "USD" }),
        json!({ "action": "add_part", "ticketId": id, "description": "x", "unitPrice": "1",
                "currency": "XXX" }),
        json!({ "action": "add_part", "ticketId": id, "description": "x", "unitPrice": "1" }),
    ] {
        let r = tool(&app, &w.write, TICKETS, args.clone()).await;
        assert!(
            matches!(code(&r), "INVALID_ARGUMENT" | "CONFLICT"),
            "{args}: {r}"
        );
    }
}

/// The technician's day: an alert becomes a ticket, time is logged once a person approves,
/// the ticket's work becomes a draft that is issued (after approval) as INV-000001.
async fn from_alert_to_issued_invoice(cx: Ctx) {
    let w = world(&cx).await;
    let state = quick_state(&w);
    let app = breeze_server::app(breeze_server::Breeze::new(state.clone()));
    let exec = api_key(&w, w.org_a, w.admin, &[Scope::AiExecute]).await;
    let alert_id = alert(&w, w.org_a, &w.a_device).await;

    let t = ok(
        &app,
        &exec,
        TICKETS,
        json!({ "action": "create_from_alert", "alertId": alert_id }),
    )
    .await;
    let id = t["ticket"]["id"].as_str().unwrap().to_owned();
    assert_eq!(t["ticket"]["priority"], "high");
    assert_eq!(t["ticket"]["deviceId"], w.a_device.as_str());
    assert_eq!(t["ticket"]["alerts"][0]["alertId"], alert_id.as_str());
    ok(
        &app,
        &exec,
        TICKETS,
        json!({ "action": "update_status", "ticketId": id, "status": "open" }),
    )
    .await;
    ok(
        &app,
        &exec,
        TICKETS,
        json!({ "action": "add_part", "ticketId": id, "description": "fan",
                                     "quantity": "2", "unitPrice": "12.50", "currency": "USD" }),
    )
    .await;

    let stop = tokio_util::sync::CancellationToken::new();
    state.pipeline.spawn_resumer(stop.clone());
    let approve = |pending: Value| {
        let w = &w;
        async move {
            assert_eq!(pending["status"], "pending_approval", "{pending}");
            let approval: uuid::Uuid = pending["approvalId"].as_str().unwrap().parse().unwrap();
            w.store
                .org(w.org_a)
                .approvals()
                .decide_approval(
                    approval,
                    Decision::Approve,
                    w.admin,
                    None,
                    audit("approval.approve"),
                )
                .await
                .unwrap();
        }
    };
    let pending = tool(
        &app,
        &exec,
        TICKETS,
        json!({ "action": "log_time", "ticketId": id,
                                                     "minutes": 45, "rate": "80.00",
                                                     "currency": "USD" }),
    )
    .await;
    assert!(
        w.store
            .org(w.org_a)
            .tickets()
            .time_entries(id.parse().unwrap())
            .await
            .unwrap()
            .is_empty(),
        "nothing is logged before a person approves"
    );
    approve(pending).await;
    let mut logged = Vec::new();
    for _ in 0..100 {
        logged = w
            .store
            .org(w.org_a)
            .tickets()
            .time_entries(id.parse().unwrap())
            .await
            .unwrap();
        if !logged.is_empty() {
            break;
        }
        cx.clock.advance(chrono::Duration::seconds(1));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(logged.len(), 1, "the approved call logged the time");
    assert_eq!(logged[0].minutes, Some(45));

    // 45 min × 80.00 = 60.00, 2 × 12.50 = 25.00.
    let draft = ok(
        &app,
        &exec,
        INVOICES,
        json!({ "action": "assemble_from_ticket",
                                                  "ticketId": "T-1" }),
    )
    .await;
    assert_eq!(draft["invoice"]["total"]["amount"], "85.00", "{draft}");
    assert_eq!(draft["invoice"]["total"]["minor"], 8500);
    assert_eq!(draft["invoice"]["total"]["currency"], "USD");
    assert_eq!(draft["invoice"]["lines"].as_array().unwrap().len(), 2);
    let inv = draft["invoice"]["id"].as_str().unwrap().to_owned();
    let pending = tool(
        &app,
        &exec,
        INVOICES,
        json!({ "action": "issue", "invoiceId": inv }),
    )
    .await;
    approve(pending).await;
    let mut issued = None;
    for _ in 0..100 {
        let i = w
            .store
            .org(w.org_a)
            .invoices()
            .get_invoice(inv.parse().unwrap())
            .await
            .unwrap();
        if i.status == InvoiceStatus::Issued {
            issued = Some(i);
            break;
        }
        cx.clock.advance(chrono::Duration::seconds(1));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    stop.cancel();
    assert_eq!(issued.unwrap().reference().as_deref(), Some("INV-000001"));
    let got = ok(
        &app,
        &exec,
        "get_invoice",
        json!({ "invoiceId": "INV-000001" }),
    )
    .await;
    assert_eq!(got["invoice"]["status"], "issued");
    assert_eq!(got["invoice"]["balance"]["amount"], "85.00");
    let r = tool(
        &app,
        &exec,
        INVOICES,
        json!({ "action": "add_line", "invoiceId": inv,
                                               "description": "late", "unitPrice": "1" }),
    )
    .await;
    assert_eq!(code(&r), "CONFLICT", "issued invoices never change: {r}");
}

/// REST for administrators: open, list, comment on and move a ticket; another organization's
/// ticket is 404; invoices need more than a read key.
async fn rest_routes(cx: Ctx) {
    let w = world(&cx).await;
    let req = |method: &str, path: &str, key: &str, body: Option<Value>| {
        axum::http::Request::builder()
            .method(method)
            .uri(format!("/api/v1/orgs/{path}"))
            .header("x-api-key", key)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(
                body.map_or(String::new(), |b| b.to_string()),
            ))
            .unwrap()
    };
    let created = common::send(
        &w.app,
        req(
            "POST",
            "org-a/tickets",
            &w.write,
            Some(json!({ "subject": "VPN down" })),
        ),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_owned();
    assert_eq!(created.body["number"], 1);
    let r = common::send(
        &w.app,
        req(
            "POST",
            "org-a/tickets",
            &w.read,
            Some(json!({ "subject": "x" })),
        ),
    )
    .await;
    assert_eq!(r.status, 403, "a read key opens no ticket: {}", r.body);
    let r = common::send(
        &w.app,
        req(
            "POST",
            &format!("org-a/tickets/{id}/comments"),
            &w.write,
            Some(json!({ "body": "on it", "internal": true })),
        ),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = common::send(
        &w.app,
        req(
            "POST",
            &format!("org-a/tickets/{id}/status"),
            &w.write,
            Some(json!({ "status": "new" })),
        ),
    )
    .await;
    assert_eq!(r.status, 409, "new → new is not a move: {}", r.body);
    let r = common::send(
        &w.app,
        req("GET", &format!("org-a/tickets/{id}"), &w.read, None),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["comments"][0]["body"], "on it");
    let listed = common::send(
        &w.app,
        req("GET", "org-a/tickets?active=true", &w.read, None),
    )
    .await;
    assert_eq!(listed.body["tickets"].as_array().unwrap().len(), 1);
    // Another organization's key, and another organization's ticket through A's path.
    let r = common::send(
        &w.app,
        req(
            "GET",
            &format!("org-b/tickets/{id}"),
            &w.other_org_key,
            None,
        ),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = common::send(&w.app, req("GET", "org-a/invoices", &w.read, None)).await;
    assert_eq!(r.status, 403, "invoices need ai:write: {}", r.body);
    let r = common::send(&w.app, req("GET", "org-a/invoices", &w.write, None)).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    tiers_scopes_and_permissions,
    from_alert_to_issued_invoice,
    rest_routes,
);
