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

breeze_store::on_both_backends!(
    ticket_day_and_invoices_on_the_dashboard,
    walls_between_organizations_and_roles,
);
