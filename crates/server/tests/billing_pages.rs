//! The dashboard's ticket, invoice, quote and contract pages driven in-process, on both
//! backends: a technician's day on a ticket (comment, assign, status, timer), invoices with
//! their PDF, and the walls — another organization's records are "not found", a read-only
//! person sees no button and is refused the post, a forged form is refused.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::http::StatusCode;
use breeze_core::{Currency, Money, Quantity, TicketPriority};
use breeze_store::{NewLine, NewTicket, testing::Ctx};
use common::browser::{get, html, location, post_form, sign_in};
use common::{World, audit, world};

async fn a_ticket(w: &World, org: breeze_core::OrgId, subject: &str) -> String {
    w.store
        .org(org)
        .tickets()
        .create_ticket(
            NewTicket {
                subject: subject.into(),
                description: "It jams on page two".into(),
                category: None,
                priority: TicketPriority::High,
                device_id: None,
                submitter: None,
                assignee_id: None,
                tags: vec![],
                due_at: None,
                created_by: "test".into(),
            },
            audit("ticket.create"),
        )
        .await
        .unwrap()
        .reference()
}

async fn an_issued_invoice(w: &World, org: breeze_core::OrgId) -> uuid::Uuid {
    let invoices = w.store.org(org).invoices();
    let usd = Currency::parse("USD").unwrap();
    let d = invoices
        .create_draft(usd, None, None, "test", audit("c"))
        .await
        .unwrap();
    invoices
        .add_line(
            d.id,
            NewLine {
                description: "Printer service".into(),
                quantity: Quantity::parse("1.5").unwrap(),
                unit_price: Money::new(9_000, usd),
                tax_bp: 2000,
            },
            audit("l"),
        )
        .await
        .unwrap();
    invoices.issue(d.id, audit("i")).await.unwrap().id
}

async fn ticket_day_and_invoices_on_the_dashboard(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let admin = sign_in(app, "admin@p.test").await;
    let t = a_ticket(&w, w.org_a, "Printer jams").await;

    // The list and the ticket.
    let r = get(app, "/o/org-a/tickets", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains(&t) && html(&r).contains("Printer jams"));
    let page = format!("/o/org-a/tickets/{t}");
    let act = format!("{page}/act");
    let r = get(app, &page, &admin.cookie).await;
    assert!(html(&r).contains("comment-form") && html(&r).contains("start-timer"));

    // Comment, assign, status, timer: each lands and shows.
    for form in [
        vec![("action", "comment"), ("body", "Replaced the roller")],
        vec![
            ("action", "comment"),
            ("body", "Ask about the warranty"),
            ("internal", "1"),
        ],
        vec![("action", "assign_me")],
        vec![("action", "status"), ("status", "pending")],
        vec![
            ("action", "start_timer"),
            ("rate", "90.00"),
            ("currency", "USD"),
        ],
    ] {
        let r = admin.post(app, &act, &form).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{form:?}: {}", r.body);
        assert_eq!(location(&r), page);
    }
    let r = get(app, &page, &admin.cookie).await;
    let body = html(&r);
    assert!(
        body.contains("Replaced the roller") && body.contains("· internal"),
        "{body}"
    );
    assert!(
        body.contains(">pending<") && body.contains("stop-timer"),
        "{body}"
    );
    assert!(!body.contains(">nobody<"), "assigned: {body}");
    cx.clock.advance(chrono::Duration::minutes(30));
    let r = admin.post(app, &act, &[("action", "stop_timer")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let body = html(&get(app, &page, &admin.cookie).await).to_owned();
    assert!(
        body.contains("30 min") && body.contains("90.00 USD"),
        "{body}"
    );
    // A move the PSA does not allow is shown as an error, not made.
    let r = admin
        .post(app, &act, &[("action", "status"), ("status", "new")])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("ticket-error"), "{}", html(&r));

    // Invoices: the list, one invoice with its totals, its PDF.
    let inv = an_issued_invoice(&w, w.org_a).await;
    let r = get(app, "/o/org-a/invoices", &admin.cookie).await;
    assert!(html(&r).contains("INV-000001"), "{}", html(&r));
    let r = get(app, &format!("/o/org-a/invoices/{inv}"), &admin.cookie).await;
    let body = html(&r);
    // 1.5 × 90.00 = 135.00, tax 20 % = 27.00.
    assert!(
        body.contains("135.00 USD") && body.contains("162.00 USD"),
        "{body}"
    );
    assert!(
        body.contains("payment-link-form"),
        "an issued invoice offers a link: {body}"
    );
    let pdf = get(app, &format!("/o/org-a/invoices/{inv}/pdf"), &admin.cookie).await;
    assert_eq!(pdf.status, StatusCode::OK);
    assert_eq!(pdf.headers["content-type"], "application/pdf");
    // Without Stripe set up for the partner, the button says so rather than failing.
    let r = admin
        .post(app, &format!("/o/org-a/invoices/{inv}/payment-link"), &[])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("record-error"), "{}", html(&r));

    // Quotes and contracts list and show.
    for path in ["/o/org-a/quotes", "/o/org-a/contracts"] {
        let r = get(app, path, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
    }
}

async fn walls_between_organizations_and_roles(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let admin = sign_in(app, "admin@p.test").await;
    let viewer = sign_in(app, "viewer@p.test").await;
    let b_ticket = a_ticket(&w, w.org_b, "B's printer").await;
    let b_invoice = an_issued_invoice(&w, w.org_b).await;
    let a_ticket_ref = a_ticket(&w, w.org_a, "A's printer").await;

    // Another organization's records through this organization's pages: not found.
    for path in [
        format!("/o/org-a/tickets/{b_ticket}"),
        format!("/o/org-a/invoices/{b_invoice}"),
        format!("/o/org-a/invoices/{b_invoice}/pdf"),
        format!("/o/org-a/quotes/{}", uuid::Uuid::now_v7()),
        format!("/o/org-a/contracts/{}", uuid::Uuid::now_v7()),
    ] {
        let r = get(app, &path, &admin.cookie).await;
        // T-n numbers are per partner: B's number in A's pages finds nothing of A's.
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.body);
    }
    let r = admin
        .post(
            app,
            &format!("/o/org-a/tickets/{b_ticket}/act"),
            &[("action", "comment"), ("body", "x")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // A read-only person reads tickets, sees no button, and is refused the post; invoices
    // are financial data (Tier 2, invoices.read), not theirs to read.
    let page = format!("/o/org-a/tickets/{a_ticket_ref}");
    let r = get(app, &page, &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("comment-form") && !html(&r).contains("start-timer"));
    let r = viewer
        .post(
            app,
            &format!("{page}/act"),
            &[("action", "comment"), ("body", "x")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = get(app, "/o/org-a/invoices", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // A forged form (no token, or another session's) is refused before it is read.
    let r = post_form(
        app,
        &format!("{page}/act"),
        &admin.cookie,
        &[("action", "comment"), ("body", "forged")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post_form(
        app,
        &format!("{page}/act"),
        &admin.cookie,
        &[
            ("csrf", viewer.csrf.as_str()),
            ("action", "comment"),
            ("body", "forged"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let comments = w
        .store
        .org(w.org_a)
        .tickets()
        .ticket_by_number(a_ticket_ref.trim_start_matches("T-").parse().unwrap())
        .await
        .unwrap();
    assert!(
        w.store
            .org(w.org_a)
            .tickets()
            .comments(comments.id)
            .await
            .unwrap()
            .is_empty(),
        "nothing was posted"
    );
}

/// A raised alert on the organization's device.
async fn an_alert(w: &World, org: breeze_core::OrgId, device: &str) -> String {
    use breeze_core::{AlertCondition, Comparison, Metric, Severity};
    let o = w.store.org(org);
    let rule = o
        .alerts()
        .create_rule(
            breeze_store::NewRule {
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
                target: breeze_store::RuleTarget::Organization,
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

/// An alert's page opens a ticket from it (linked, carrying its device), and both the alert's
/// and the device's pages list the ticket with a link; a read-only person sees the tickets but
/// no button and is refused the post; another organization's alert is not found; a forged
/// form is refused.
async fn alert_and_device_pages_show_their_tickets(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let admin = sign_in(app, "admin@p.test").await;
    let viewer = sign_in(app, "viewer@p.test").await;
    let alert = an_alert(&w, w.org_a, &w.a_device).await;
    let page = format!("/o/org-a/alerts/{alert}");
    let make = format!("{page}/ticket");

    let r = get(app, &page, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let body = html(&r);
    assert!(
        body.contains("ticket-from-alert") && body.contains("linked-tickets-empty"),
        "{body}"
    );
    // Without the session's token the post is refused and nothing is made.
    let r = post_form(app, &make, &admin.cookie, &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = admin.post(app, &make, &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let ticket_page = location(&r).to_owned();
    assert!(
        ticket_page.starts_with("/o/org-a/tickets/T-"),
        "{ticket_page}"
    );
    let reference = ticket_page.rsplit('/').next().unwrap().to_owned();

    let t = w
        .store
        .org(w.org_a)
        .tickets()
        .ticket_by_number(reference.trim_start_matches("T-").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(t.device_id.map(|d| d.to_string()), Some(w.a_device.clone()));
    assert_eq!(t.priority, TicketPriority::High, "the alert's severity");
    let linked = w
        .store
        .org(w.org_a)
        .tickets()
        .linked_alerts(t.id)
        .await
        .unwrap();
    assert_eq!(linked.len(), 1);

    // Both pages list it, linked to the ticket, with its status.
    for path in [page.clone(), format!("/o/org-a/devices/{}", w.a_device)] {
        let r = get(app, &path, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        let body = html(&r);
        assert!(
            body.contains(&format!("href=\"{ticket_page}\""))
                && body.contains(&format!("id=\"ticket-{reference}\""))
                && body.contains(">new<"),
            "{path}: {body}"
        );
    }
    let r = get(app, &ticket_page, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);

    // A read-only person sees the tickets, no button, and is refused the post.
    let r = get(app, &page, &viewer.cookie).await;
    let body = html(&r);
    assert!(
        body.contains(&reference) && !body.contains("ticket-from-alert"),
        "{body}"
    );
    let r = viewer.post(app, &make, &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);

    // Another organization's alert through this organization's page: not found.
    let b_alert = an_alert(&w, w.org_b, &w.b_device).await;
    let r = admin
        .post(app, &format!("/o/org-a/alerts/{b_alert}/ticket"), &[])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = admin
        .post(app, "/o/org-a/alerts/not-an-id/ticket", &[])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let b_tickets = w
        .store
        .org(w.org_b)
        .tickets()
        .list_tickets(&breeze_store::TicketFilter::default(), None, 10)
        .await
        .unwrap();
    assert!(b_tickets.tickets.is_empty(), "nothing was made in B");
    let a_tickets = w
        .store
        .org(w.org_a)
        .tickets()
        .list_tickets(&breeze_store::TicketFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(
        a_tickets.tickets.len(),
        1,
        "one ticket, from the one good post"
    );
}

/// A draft quote of `org` with one line; its id.
async fn a_draft_quote(w: &World, org: breeze_core::OrgId) -> uuid::Uuid {
    let quotes = w.store.org(org).quotes();
    let usd = Currency::parse("USD").unwrap();
    let q = quotes
        .create_draft("Printer fleet", usd, None, "test", audit("quote.create"))
        .await
        .unwrap();
    quotes
        .add_line(
            q.id,
            breeze_store::NewQuoteLine::Manual {
                description: "Printer".into(),
                quantity: Quantity::ONE,
                unit_price: Money::new(40_000, usd),
                tax_bp: 0,
            },
            audit("quote.add_line"),
        )
        .await
        .unwrap();
    q.id
}

/// A draft contract of `org` with one line; its id.
async fn a_draft_contract(w: &World, org: breeze_core::OrgId) -> uuid::Uuid {
    let contracts = w.store.org(org).contracts();
    let usd = Currency::parse("USD").unwrap();
    let k = contracts
        .create_draft(
            breeze_store::NewContract {
                name: "Managed printers".into(),
                currency: usd,
                billing_period: breeze_core::BillingPeriod::Monthly,
                tax_bp: 0,
                notes: None,
                starts_at: w.state.clock.now(),
                created_by: "test".into(),
            },
            audit("contract.create"),
        )
        .await
        .unwrap();
    contracts
        .add_line(
            k.id,
            breeze_store::NewContractLine::Manual {
                description: "Per printer".into(),
                quantity: Quantity::ONE,
                unit_price: Money::new(2_500, usd),
            },
            audit("contract.add_line"),
        )
        .await
        .unwrap();
    k.id
}

/// A quote is sent and declined from its page, a contract activated, paused, resumed and
/// cancelled from its own — each only when its state allows it, each audited; a move the
/// state does not allow is shown as an error; a forged form, a read-only person and another
/// organization's record are refused.
async fn quote_and_contract_pages_act(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let admin = sign_in(app, "admin@p.test").await;
    let viewer = sign_in(app, "viewer@p.test").await;

    // A quote: send, then decline (a reason is required).
    let q = a_draft_quote(&w, w.org_a).await;
    let page = format!("/o/org-a/quotes/{q}");
    let act = format!("{page}/act");
    let body = html(&get(app, &page, &admin.cookie).await).to_owned();
    assert!(
        body.contains("act-send") && body.contains("act-decline"),
        "{body}"
    );
    let r = post_form(app, &act, &admin.cookie, &[("action", "send")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a forged form");
    let r = viewer.post(app, &act, &[("action", "send")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = admin.post(app, &act, &[("action", "send")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(location(&r), page);
    let body = html(&get(app, &page, &admin.cookie).await).to_owned();
    assert!(
        body.contains(">sent<") && !body.contains("act-send") && body.contains("act-decline"),
        "{body}"
    );
    let r = admin.post(app, &act, &[("action", "send")]).await;
    assert_eq!(r.status, StatusCode::OK, "sent already: shown, not made");
    assert!(html(&r).contains("record-error"), "{}", html(&r));
    let r = admin.post(app, &act, &[("action", "decline")]).await;
    assert!(html(&r).contains("reason"), "{}", html(&r));
    let r = admin
        .post(
            app,
            &act,
            &[("action", "decline"), ("reason", "Budget moved to Q3")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let quote = w.store.org(w.org_a).quotes().get_quote(q).await.unwrap();
    assert_eq!(quote.status, "declined");
    assert_eq!(quote.decline_reason.as_deref(), Some("Budget moved to Q3"));
    let r = admin.post(app, &act, &[("action", "nonsense")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Another organization's quote: not found, and unchanged.
    let b_quote = a_draft_quote(&w, w.org_b).await;
    let r = admin
        .post(
            app,
            &format!("/o/org-a/quotes/{b_quote}/act"),
            &[("action", "send")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let b = w
        .store
        .org(w.org_b)
        .quotes()
        .get_quote(b_quote)
        .await
        .unwrap();
    assert_eq!(b.status, "draft");

    // A contract through its lifecycle.
    let k = a_draft_contract(&w, w.org_a).await;
    let page = format!("/o/org-a/contracts/{k}");
    let act = format!("{page}/act");
    let body = html(&get(app, &page, &admin.cookie).await).to_owned();
    assert!(
        body.contains("act-activate")
            && !body.contains("act-pause")
            && !body.contains("act-resume"),
        "{body}"
    );
    let r = viewer.post(app, &act, &[("action", "activate")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = post_form(app, &act, &admin.cookie, &[("action", "activate")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a forged form");
    for (action, status, shown, hidden) in [
        ("activate", "active", "act-pause", "act-activate"),
        ("pause", "paused", "act-resume", "act-pause"),
        ("resume", "active", "act-pause", "act-resume"),
        ("cancel", "cancelled", "", "act-cancel"),
    ] {
        let r = admin.post(app, &act, &[("action", action)]).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{action}: {}", r.body);
        let body = html(&get(app, &page, &admin.cookie).await).to_owned();
        assert!(
            body.contains(&format!(">{status}<")) && body.contains(shown) && !body.contains(hidden),
            "{action}: {body}"
        );
    }
    // A cancelled contract stays so: the move is refused with the rule's words.
    let r = admin.post(app, &act, &[("action", "resume")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        html(&r).contains("a cancelled contract cannot resume"),
        "{}",
        html(&r)
    );
    let b_contract = a_draft_contract(&w, w.org_b).await;
    let r = admin
        .post(
            app,
            &format!("/o/org-a/contracts/{b_contract}/act"),
            &[("action", "activate")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let audited = w
        .store
        .raw_strings(
            "SELECT action FROM audit_log WHERE action IN ('quote.send', 'quote.decline', \
             'contract.activate', 'contract.pause', 'contract.resume', 'contract.cancel')",
        )
        .await
        .unwrap();
    assert_eq!(audited.len(), 6, "{audited:?}");
}

breeze_store::on_both_backends!(
    quote_and_contract_pages_act,
    ticket_day_and_invoices_on_the_dashboard,
    walls_between_organizations_and_roles,
    alert_and_device_pages_show_their_tickets,
);
