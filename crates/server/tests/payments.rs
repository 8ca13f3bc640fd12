//! Payment links through Stripe and distributor lookups at TD SYNNEX, against stand-ins that
//! speak each service's wire format (`breeze_billing::testing`), on both backends.
//!
//! Payments: `manage_invoices create_payment_link` (Tier 2) asks Stripe for a Checkout Session
//! for an issued invoice's balance and stores it; the partner's webhook endpoint records the
//! payment exactly once. The attacks: a forged signature (another secret), an altered body, an
//! expired or future timestamp, no signature, an unknown partner, a replay of the very request,
//! a second event about the same payment, and another partner's validly signed event naming
//! this partner's session — none records a second payment or any payment it should not.
//!
//! Distributor: `lookup_distributor_product` (Tier 2) shows a partner user the reseller cost
//! and withholds it from an organization's user; a partner without an account gets an error
//! and the stand-in no request; `manage_catalog import_distributor_product` prices a catalog
//! item from the answer, and the item bills on an invoice at that price.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use breeze_billing::{
    Billing, BillingConfig, SynnexAccount,
    testing::{MFG_PN, SKU, StripeStandIn, SynnexStandIn, paid_event_body},
};
use breeze_core::{Clock, Currency, InvoiceStatus, Money, PartnerId, Quantity, Scope};
use breeze_limits::MemoryLimiter;
use breeze_server::ToolSourcesConfig;
use breeze_sources::{testing::TestCa, vault::Vault};
use breeze_store::{NewLine, NewUser, testing::Ctx};
use common::browser::{get, html, location, post_form, sign_in};
use common::{World, api_key, audit, build, code, ok, send, tool, why, world};
use serde_json::{Value, json};

const INVOICES: &str = "manage_invoices";
const QUOTES: &str = "manage_quotes";
const LOOKUP: &str = "lookup_distributor_product";
const SECRET_KEY: &str = "sk_test_breeze";
const WEBHOOK_SECRET: &str = "whsec_breeze_test";

/// The application configured for the stand-ins, and a [`Billing`] to set accounts with.
struct Setup {
    app: Router,
    billing: Billing,
    partner: PartnerId,
    stripe: StripeStandIn,
    synnex: SynnexStandIn,
}

fn account(password: &str) -> SynnexAccount {
    SynnexAccount {
        customer_no: "1150897".into(),
        user_name: "buyer@msp.example".into(),
        password: password.into(),
    }
}

async fn setup(w: &World) -> Setup {
    let ca = TestCa::new();
    let stripe = StripeStandIn::start(&ca, SECRET_KEY).await;
    let synnex = SynnexStandIn::start(&ca, account("right")).await;
    let vault = Vault::from_setting(&Vault::generate_key().unwrap()).unwrap();
    let mut config = BillingConfig::new("http://127.0.0.1:3000");
    config.stripe_api = stripe.url.clone();
    config.synnex_api = Some(synnex.url.clone());
    let app = build(
        w,
        |c| {
            c.tool_sources = ToolSourcesConfig {
                key: Some(vault.clone()),
                egress: ca.config(true),
            };
            c.billing = config.clone();
        },
        Arc::new(MemoryLimiter::new()),
    );
    let billing = Billing::new(
        w.store.clone(),
        ca.egress(),
        Some(vault),
        config,
        w.state.clock.clone(),
    );
    let partner = w
        .store
        .org(w.org_a)
        .tenancy()
        .organization()
        .await
        .unwrap()
        .partner_id;
    Setup {
        app,
        billing,
        partner,
        stripe,
        synnex,
    }
}

/// An issued invoice of organization A for 123.45 USD; its id.
async fn issued_invoice(w: &World) -> uuid::Uuid {
    let invoices = w.store.org(w.org_a).invoices();
    let usd = Currency::parse("USD").unwrap();
    let d = invoices
        .create_draft(usd, None, None, "test", audit("invoice.create"))
        .await
        .unwrap();
    invoices
        .add_line(
            d.id,
            NewLine {
                description: "Firewall".into(),
                quantity: Quantity::ONE,
                unit_price: Money::new(12_345, usd),
                tax_bp: 0,
            },
            audit("invoice.add_line"),
        )
        .await
        .unwrap();
    invoices
        .issue(d.id, audit("invoice.issue"))
        .await
        .unwrap()
        .id
}

async fn webhook(
    app: &Router,
    partner: &str,
    body: &str,
    signature: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::post(format!("/api/v1/webhooks/stripe/{partner}"))
        .header("content-type", "application/json");
    if let Some(s) = signature {
        req = req.header("stripe-signature", s);
    }
    let r = send(app, req.body(Body::from(body.to_owned())).unwrap()).await;
    (r.status, r.body)
}

async fn payment_links_record_each_payment_once(cx: Ctx) {
    let w = world(&cx).await;
    let s = setup(&w).await;
    let app = &s.app;
    let inv = issued_invoice(&w).await.to_string();
    let link_args = json!({ "action": "create_payment_link", "invoiceId": inv });

    // Not set up yet: refused before any request.
    let r = tool(app, &w.write, INVOICES, link_args.clone()).await;
    assert_eq!(code(&r), "FORBIDDEN", "{r}");
    assert_eq!(s.stripe.requests(), 0);
    s.billing
        .set_stripe(
            s.partner,
            Some((SECRET_KEY, WEBHOOK_SECRET)),
            audit("billing.stripe"),
        )
        .await
        .unwrap();
    // The sealed secrets never reach the database in the clear.
    let row = w.store.partner_billing(s.partner).await.unwrap().unwrap();
    for sealed in [&row.stripe_secret_key, &row.stripe_webhook_secret] {
        let sealed = sealed.as_deref().unwrap();
        assert!(
            sealed.starts_with("v1:") && !sealed.contains("breeze"),
            "{sealed}"
        );
    }

    // Tiers: a read key cannot; a draft has no link; another organization's is not found.
    let r = tool(app, &w.read, INVOICES, link_args.clone()).await;
    assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "{r}");
    let draft = w
        .store
        .org(w.org_a)
        .invoices()
        .create_draft(Currency::parse("USD").unwrap(), None, None, "t", audit("c"))
        .await
        .unwrap();
    let r = tool(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "create_payment_link", "invoiceId": draft.id.to_string() }),
    )
    .await;
    assert_eq!(code(&r), "CONFLICT", "{r}");
    let b_key = api_key(&w, w.org_b, w.admin, &[Scope::AiRead, Scope::AiWrite]).await;
    let r = tool(app, &b_key, INVOICES, link_args.clone()).await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    assert_eq!(s.stripe.requests(), 0, "no refused call reached Stripe");

    // The link: one Checkout Session for the balance; asked again, the same link.
    let made = ok(app, &w.write, INVOICES, link_args.clone()).await;
    let link = &made["paymentLink"];
    assert_eq!(link["amount"]["amount"], "123.45", "{made}");
    assert_eq!(link["status"], "open");
    let url = link["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://checkout.stripe.com/c/pay/cs_test_"),
        "{url}"
    );
    let session = url.rsplit('/').next().unwrap().to_owned();
    let again = ok(app, &w.write, INVOICES, link_args.clone()).await;
    assert_eq!(again["paymentLink"]["url"], link["url"]);
    assert_eq!(s.stripe.sessions(), 1, "one session per balance");
    let got = ok(app, &w.write, "get_invoice", json!({ "invoiceId": inv })).await;
    assert_eq!(got["invoice"]["paymentLinks"][0]["status"], "open", "{got}");

    let partner = s.partner.to_string();
    let now = cx.clock.now().timestamp();
    let (body, signature) = s.stripe.paid_event(&session, "evt_1", WEBHOOK_SECRET, now);
    let payments = || async {
        w.store
            .org(w.org_a)
            .invoices()
            .payments(inv.parse().unwrap())
            .await
            .unwrap()
    };

    // Forgeries and stale deliveries: 400, nothing recorded.
    let other_partner = w.store.create_partner("Q", "q", audit("p")).await.unwrap();
    let forged = [
        (
            partner.clone(),
            body.clone(),
            Some(breeze_billing::stripe::sign(
                body.as_bytes(),
                "whsec_guess",
                now,
            )),
        ),
        (
            partner.clone(),
            body.replace("evt_1", "evt_9"),
            Some(signature.clone()),
        ),
        (
            partner.clone(),
            body.clone(),
            Some(breeze_billing::stripe::sign(
                body.as_bytes(),
                WEBHOOK_SECRET,
                now - 301,
            )),
        ),
        (
            partner.clone(),
            body.clone(),
            Some(breeze_billing::stripe::sign(
                body.as_bytes(),
                WEBHOOK_SECRET,
                now + 301,
            )),
        ),
        (partner.clone(), body.clone(), None),
        (partner.clone(), body.clone(), Some("t=1,v1=00".into())),
        (
            other_partner.id.to_string(),
            body.clone(),
            Some(signature.clone()),
        ),
        (
            "not-a-partner".into(),
            body.clone(),
            Some(signature.clone()),
        ),
    ];
    for (p, b, sig) in forged {
        let (status, answer) = webhook(app, &p, &b, sig.as_deref()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{sig:?}: {answer}");
    }
    assert!(
        payments().await.is_empty(),
        "a refused webhook records nothing"
    );

    // The real one records the payment; the invoice is paid.
    let (status, answer) = webhook(app, &partner, &body, Some(&signature)).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("recorded")),
        "{answer}"
    );
    let paid = payments().await;
    assert_eq!(paid.len(), 1);
    assert_eq!(
        (paid[0].amount_minor, paid[0].method.as_str()),
        (12_345, "stripe")
    );
    assert_eq!(paid[0].reference.as_deref(), Some(session.as_str()));
    let invoice = w
        .store
        .org(w.org_a)
        .invoices()
        .get_invoice(inv.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(invoice.status, InvoiceStatus::Paid);

    // A replay of the same request, and another event about the same payment: nothing more.
    let (status, answer) = webhook(app, &partner, &body, Some(&signature)).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("duplicate")),
        "{answer}"
    );
    let late = paid_event_body(
        &session,
        "evt_2",
        12_345,
        "usd",
        "checkout.session.async_payment_succeeded",
    );
    let late_sig = breeze_billing::stripe::sign(late.as_bytes(), WEBHOOK_SECRET, now);
    let (status, answer) = webhook(app, &partner, &late, Some(&late_sig)).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("duplicate")),
        "{answer}"
    );
    assert_eq!(payments().await.len(), 1, "exactly one payment");
    let got = ok(app, &w.write, "get_invoice", json!({ "invoiceId": inv })).await;
    assert_eq!(got["invoice"]["paymentLinks"][0]["status"], "paid", "{got}");
    assert_eq!(got["invoice"]["status"], "paid");

    // Another partner, validly signed with its own secret, cannot pay this partner's link.
    s.billing
        .set_stripe(
            other_partner.id,
            Some((SECRET_KEY, "whsec_other")),
            audit("billing.stripe"),
        )
        .await
        .unwrap();
    let inv2 = issued_invoice(&w).await.to_string();
    let made = ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "create_payment_link", "invoiceId": inv2 }),
    )
    .await;
    let session2 = made["paymentLink"]["url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let (body2, sig2) = s.stripe.paid_event(&session2, "evt_3", "whsec_other", now);
    let (status, answer) = webhook(app, &other_partner.id.to_string(), &body2, Some(&sig2)).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("ignored")),
        "{answer}"
    );
    let unpaid = w
        .store
        .org(w.org_a)
        .invoices()
        .get_invoice(inv2.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(unpaid.status, InvoiceStatus::Issued);
    // An event Breeze does not act on is acknowledged, and known when it comes again.
    let other = paid_event_body(
        &session2,
        "evt_4",
        12_345,
        "usd",
        "checkout.session.expired",
    );
    let other_sig = breeze_billing::stripe::sign(other.as_bytes(), WEBHOOK_SECRET, now);
    let (_, answer) = webhook(app, &partner, &other, Some(&other_sig)).await;
    assert_eq!(answer["result"], "ignored");
    let (_, answer) = webhook(app, &partner, &other, Some(&other_sig)).await;
    assert_eq!(answer["result"], "duplicate");

    // Stripe refusing (a revoked key): an upstream error, and no link stored.
    s.billing
        .set_stripe(
            s.partner,
            Some(("sk_test_revoked", WEBHOOK_SECRET)),
            audit("billing.stripe"),
        )
        .await
        .unwrap();
    let inv3 = issued_invoice(&w).await.to_string();
    let r = tool(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "create_payment_link", "invoiceId": inv3 }),
    )
    .await;
    assert_eq!(code(&r), "UPSTREAM_ERROR", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Invalid API Key"),
        "{r}"
    );
}

async fn distributor_lookups_are_partner_scoped(cx: Ctx) {
    let w = world(&cx).await;
    let s = setup(&w).await;
    let app = &s.app;

    // No account: refused, and no request made.
    let r = tool(app, &w.write, LOOKUP, json!({ "sku": SKU })).await;
    assert_eq!(code(&r), "FORBIDDEN", "{r}");
    assert_eq!(s.synnex.requests(), 0);
    s.billing
        .set_synnex(
            s.partner,
            Some((&account("right"), "us")),
            audit("billing.synnex"),
        )
        .await
        .unwrap();

    // A partner user: the reseller cost.
    let found = ok(app, &w.write, LOOKUP, json!({ "sku": SKU })).await;
    let p = &found["product"];
    assert_eq!(p["mfgPartNumber"], MFG_PN, "{found}");
    assert_eq!(p["resellerCost"]["amount"], "1049.50");
    assert_eq!(p["resellerCost"]["currency"], "USD");
    assert_eq!(p["msrp"]["amount"], "1399.00");
    assert_eq!(p["totalStock"], 17);
    assert_eq!(p["warehouses"].as_array().unwrap().len(), 2);
    assert_eq!(p["costRedacted"], false);
    let by_part = ok(app, &w.write, LOOKUP, json!({ "mfgPartNumber": MFG_PN })).await;
    assert_eq!(by_part["product"]["sku"], SKU);

    // An organization's own user: availability, the cost withheld.
    let org_user = w
        .store
        .create_user(
            NewUser {
                partner_id: s.partner,
                org_id: Some(w.org_a),
                email: "buyer@a.test".into(),
                name: "Buyer".into(),
                password_hash: "x".into(),
            },
            audit("u"),
        )
        .await
        .unwrap();
    let admin = w.store.find_role(s.partner, "Administrator").await.unwrap();
    w.store
        .assign_role(org_user.id, w.org_a, admin.id, audit("r"))
        .await
        .unwrap();
    let org_key = api_key(&w, w.org_a, org_user.id, &[Scope::AiRead, Scope::AiWrite]).await;
    let redacted = ok(app, &org_key, LOOKUP, json!({ "sku": SKU })).await;
    assert_eq!(redacted["product"]["costRedacted"], true, "{redacted}");
    assert!(redacted["product"]["resellerCost"].is_null(), "{redacted}");
    assert_eq!(redacted["product"]["totalStock"], 17);

    // Bad input, unknown products, read keys.
    for args in [
        json!({}),
        json!({ "sku": SKU, "mfgPartNumber": MFG_PN }),
        json!({ "sku": "<x>" }),
    ] {
        let r = tool(app, &w.write, LOOKUP, args.clone()).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{args}: {r}");
    }
    let r = tool(app, &w.write, LOOKUP, json!({ "sku": "0000001" })).await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    let r = tool(app, &w.read, LOOKUP, json!({ "sku": SKU })).await;
    assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "{r}");

    // Pricing into the catalog: at cost plus a markup (a partner user only), or at the MSRP.
    let marked_up = ok(
        app,
        &w.write,
        "manage_catalog",
        json!({ "action": "import_distributor_product", "distributorSku": SKU,
                "markupBp": 2000, "sku": "TP-X13", "taxBp": 2000 }),
    )
    .await;
    // 1049.50 × 1.20 = 1259.40.
    assert_eq!(
        marked_up["item"]["listPrice"]["amount"], "1259.40",
        "{marked_up}"
    );
    assert_eq!(marked_up["item"]["kind"], "hardware");
    let r = tool(
        app,
        &org_key,
        "manage_catalog",
        json!({ "action": "import_distributor_product", "distributorSku": SKU, "markupBp": 2000 }),
    )
    .await;
    assert_eq!(code(&r), "FORBIDDEN", "the cost is withheld: {r}");
    let at_msrp = ok(
        app,
        &org_key,
        "manage_catalog",
        json!({ "action": "import_distributor_product", "mfgPartNumber": MFG_PN }),
    )
    .await;
    assert_eq!(
        at_msrp["item"]["listPrice"]["amount"], "1399.00",
        "{at_msrp}"
    );
    assert_eq!(at_msrp["item"]["sku"], MFG_PN);
    // The imported item bills on an invoice at its price.
    let draft = ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "create", "currency": "USD" }),
    )
    .await;
    let with = ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "add_catalog_line", "invoiceId": draft["invoice"]["id"],
                "catalogItemId": marked_up["item"]["id"], "quantity": "2" }),
    )
    .await;
    assert_eq!(with["invoice"]["subtotal"]["amount"], "2518.80", "{with}");
    assert_eq!(with["invoice"]["tax"]["amount"], "503.76", "{with}");

    // The distributor refusing the login: an upstream error.
    s.billing
        .set_synnex(
            s.partner,
            Some((&account("wrong"), "us")),
            audit("billing.synnex"),
        )
        .await
        .unwrap();
    let r = tool(app, &w.write, LOOKUP, json!({ "sku": SKU })).await;
    assert_eq!(code(&r), "UPSTREAM_ERROR", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Invalid login"),
        "{r}"
    );
}

/// A sent quote of organization A for 123.45 USD; its id.
async fn sent_quote(w: &World) -> uuid::Uuid {
    let quotes = w.store.org(w.org_a).quotes();
    let usd = Currency::parse("USD").unwrap();
    let q = quotes
        .create_draft("Firewall refresh", usd, None, "test", audit("quote.create"))
        .await
        .unwrap();
    quotes
        .add_line(
            q.id,
            breeze_store::NewQuoteLine::Manual {
                description: "Firewall".into(),
                quantity: Quantity::ONE,
                unit_price: Money::new(12_345, usd),
                tax_bp: 0,
            },
            audit("quote.add_line"),
        )
        .await
        .unwrap();
    quotes.send(q.id, audit("quote.send")).await.unwrap().id
}

/// `manage_quotes create_payment_link` (Tier 2) asks Stripe for a Checkout Session for a sent
/// quote's total and stores it on the quote; the partner's webhook marks the quote paid
/// exactly once (a forgery, a replay and a second event about the same payment change
/// nothing), and a paid quote takes no new link.
async fn quote_payment_links_mark_the_quote_paid_once(cx: Ctx) {
    let w = world(&cx).await;
    let s = setup(&w).await;
    let app = &s.app;
    let q = sent_quote(&w).await.to_string();
    let link_args = json!({ "action": "create_payment_link", "quoteId": q });

    // Not set up yet: refused before any request.
    let r = tool(app, &w.write, QUOTES, link_args.clone()).await;
    assert_eq!(code(&r), "FORBIDDEN", "{r}");
    s.billing
        .set_stripe(
            s.partner,
            Some((SECRET_KEY, WEBHOOK_SECRET)),
            audit("billing.stripe"),
        )
        .await
        .unwrap();
    // Tiers: a read key cannot; a draft has no link; another organization's is not found.
    let r = tool(app, &w.read, QUOTES, link_args.clone()).await;
    assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "{r}");
    let draft = w
        .store
        .org(w.org_a)
        .quotes()
        .create_draft("d", Currency::parse("USD").unwrap(), None, "t", audit("c"))
        .await
        .unwrap();
    let r = tool(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "create_payment_link", "quoteId": draft.id.to_string() }),
    )
    .await;
    assert_eq!(code(&r), "CONFLICT", "{r}");
    let b_key = api_key(&w, w.org_b, w.admin, &[Scope::AiRead, Scope::AiWrite]).await;
    let r = tool(app, &b_key, QUOTES, link_args.clone()).await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    assert_eq!(s.stripe.requests(), 0, "no refused call reached Stripe");

    // The link: one Checkout Session for the total; asked again, the same link.
    let made = ok(app, &w.write, QUOTES, link_args.clone()).await;
    let link = &made["paymentLink"];
    assert_eq!(link["amount"]["amount"], "123.45", "{made}");
    assert_eq!(link["status"], "open");
    let url = link["url"].as_str().unwrap();
    let session = url.rsplit('/').next().unwrap().to_owned();
    let again = ok(app, &w.write, QUOTES, link_args.clone()).await;
    assert_eq!(again["paymentLink"]["url"], link["url"]);
    assert_eq!(s.stripe.sessions(), 1, "one session per quote");
    let got = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "get", "quoteId": q }),
    )
    .await;
    assert_eq!(got["quote"]["paymentLinks"][0]["status"], "open", "{got}");

    // The quote's page shows the link, and its button (CSRF-checked) gives the same one.
    let admin = sign_in(app, "admin@p.test").await;
    let page = format!("/o/org-a/quotes/{q}");
    let r = get(app, &page, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        html(&r).contains(url) && html(&r).contains("payment-link-form"),
        "{}",
        html(&r)
    );
    let r = post_form(app, &format!("{page}/payment-link"), &admin.cookie, &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a forged form");
    let r = admin.post(app, &format!("{page}/payment-link"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(location(&r), page);
    let b_quote = w
        .store
        .org(w.org_b)
        .quotes()
        .create_draft("b", Currency::parse("USD").unwrap(), None, "t", audit("c"))
        .await
        .unwrap();
    let r = admin
        .post(
            app,
            &format!("/o/org-a/quotes/{}/payment-link", b_quote.id),
            &[],
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "another organization's quote"
    );
    assert_eq!(s.stripe.sessions(), 1, "still one session");

    let partner = s.partner.to_string();
    let now = cx.clock.now().timestamp();
    let (body, signature) = s.stripe.paid_event(&session, "evt_q1", WEBHOOK_SECRET, now);
    // A forged signature and a stale one: refused, nothing changes.
    for sig in [
        breeze_billing::stripe::sign(body.as_bytes(), "whsec_guess", now),
        breeze_billing::stripe::sign(body.as_bytes(), WEBHOOK_SECRET, now - 301),
    ] {
        let (status, answer) = webhook(app, &partner, &body, Some(&sig)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    }
    let got = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "get", "quoteId": q }),
    )
    .await;
    assert_eq!(got["quote"]["paymentLinks"][0]["status"], "open", "{got}");

    // The real one marks it paid; a replay and a later event about the same payment do not
    // again.
    let (status, answer) = webhook(app, &partner, &body, Some(&signature)).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("quote_paid")),
        "{answer}"
    );
    let (status, answer) = webhook(app, &partner, &body, Some(&signature)).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("duplicate")),
        "{answer}"
    );
    let late = paid_event_body(
        &session,
        "evt_q2",
        12_345,
        "usd",
        "checkout.session.async_payment_succeeded",
    );
    let late_sig = breeze_billing::stripe::sign(late.as_bytes(), WEBHOOK_SECRET, now);
    let (status, answer) = webhook(app, &partner, &late, Some(&late_sig)).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("duplicate")),
        "{answer}"
    );
    let got = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "get", "quoteId": q }),
    )
    .await;
    let links = got["quote"]["paymentLinks"].as_array().unwrap();
    assert_eq!(links.len(), 1, "{got}");
    assert_eq!(links[0]["status"], "paid", "{got}");
    assert!(links[0]["settledAt"].is_string(), "{got}");
    // Paid: no new link.
    let r = tool(app, &w.write, QUOTES, link_args).await;
    assert_eq!(code(&r), "CONFLICT", "{r}");
    assert_eq!(s.stripe.sessions(), 1);
    let r = get(app, &page, &admin.cookie).await;
    assert!(
        html(&r).contains(">paid<") && !html(&r).contains("payment-link-form"),
        "{}",
        html(&r)
    );
    // Audited as Stripe's doing.
    let audited = w
        .store
        .raw_strings("SELECT action FROM audit_log WHERE action LIKE 'quote.%payment%'")
        .await
        .unwrap();
    assert!(
        audited.iter().any(|a| a == "quote.payment_received")
            && audited.iter().any(|a| a == "quote.create_payment_link"),
        "{audited:?}"
    );
}

/// Stripe's `charge.refunded` for a payment taken through an invoice's link: each event that
/// refunds more records the difference against the payment and lowers the invoice's paid
/// amount (a paid invoice owes it again), audited; a forged or stale signature, a replay, an
/// older event delivered late and another partner's endpoint record nothing; the invoice's
/// page lists the refunds.
async fn refunds_lower_what_was_paid_once(cx: Ctx) {
    let w = world(&cx).await;
    let s = setup(&w).await;
    let app = &s.app;
    s.billing
        .set_stripe(
            s.partner,
            Some((SECRET_KEY, WEBHOOK_SECRET)),
            audit("billing.stripe"),
        )
        .await
        .unwrap();
    let inv = issued_invoice(&w).await;
    let made = ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "create_payment_link", "invoiceId": inv.to_string() }),
    )
    .await;
    let url = made["paymentLink"]["url"].as_str().unwrap();
    let session = url.rsplit('/').next().unwrap().to_owned();
    let partner = s.partner.to_string();
    let now = cx.clock.now().timestamp();
    let (body, signature) = s
        .stripe
        .paid_event(&session, "evt_pay", WEBHOOK_SECRET, now);
    let (status, answer) = webhook(app, &partner, &body, Some(&signature)).await;
    assert_eq!(answer["result"], "recorded", "{status}: {answer}");
    let invoices = w.store.org(w.org_a).invoices();
    let paid = |i: breeze_store::Invoice| (i.paid_minor, i.status);
    assert_eq!(
        paid(invoices.get_invoice(inv).await.unwrap()),
        (12_345, InvoiceStatus::Paid)
    );
    // The stand-in's session was paid through PaymentIntent pi_<event id>.
    let signed = |b: &str, t: i64| breeze_billing::stripe::sign(b.as_bytes(), WEBHOOK_SECRET, t);
    let partial = breeze_billing::testing::refund_event_body(
        "ch_1",
        "pi_evt_pay",
        "evt_r1",
        [12_345, 2_000],
        "usd",
    );

    // Forged, stale, or sent to another partner's endpoint: refused, nothing recorded.
    let other = w.store.create_partner("Q", "q", audit("p")).await.unwrap();
    for (p, sig) in [
        (
            partner.clone(),
            breeze_billing::stripe::sign(partial.as_bytes(), "whsec_guess", now),
        ),
        (partner.clone(), signed(&partial, now - 301)),
        (other.id.to_string(), signed(&partial, now)),
    ] {
        let (status, answer) = webhook(app, &p, &partial, Some(&sig)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    }
    assert!(invoices.refunds(inv).await.unwrap().is_empty());

    // A partial refund: 20.00 back, the invoice owes it again.
    let (status, answer) = webhook(app, &partner, &partial, Some(&signed(&partial, now))).await;
    assert_eq!(
        (status, answer["result"].as_str()),
        (StatusCode::OK, Some("refunded")),
        "{answer}"
    );
    assert_eq!(
        paid(invoices.get_invoice(inv).await.unwrap()),
        (10_345, InvoiceStatus::Issued)
    );
    // The very request again, and the same news under another event id: nothing more.
    let (_, answer) = webhook(app, &partner, &partial, Some(&signed(&partial, now))).await;
    assert_eq!(answer["result"], "duplicate", "{answer}");
    let same = breeze_billing::testing::refund_event_body(
        "ch_1",
        "pi_evt_pay",
        "evt_r1b",
        [12_345, 2_000],
        "usd",
    );
    let (_, answer) = webhook(app, &partner, &same, Some(&signed(&same, now))).await;
    assert_eq!(answer["result"], "duplicate", "{answer}");

    // The rest refunded; then the first partial event delivered late under a new id (older
    // news) changes nothing.
    let full = breeze_billing::testing::refund_event_body(
        "ch_1",
        "pi_evt_pay",
        "evt_r2",
        [12_345, 12_345],
        "usd",
    );
    let (_, answer) = webhook(app, &partner, &full, Some(&signed(&full, now))).await;
    assert_eq!(answer["result"], "refunded", "{answer}");
    let late = breeze_billing::testing::refund_event_body(
        "ch_1",
        "pi_evt_pay",
        "evt_r0",
        [12_345, 1_000],
        "usd",
    );
    let (_, answer) = webhook(app, &partner, &late, Some(&signed(&late, now))).await;
    assert_eq!(answer["result"], "duplicate", "{answer}");
    assert_eq!(
        paid(invoices.get_invoice(inv).await.unwrap()),
        (0, InvoiceStatus::Issued)
    );
    let refunds = invoices.refunds(inv).await.unwrap();
    assert_eq!(
        refunds
            .iter()
            .map(|r| (r.amount_minor, r.refunded_total_minor))
            .collect::<Vec<_>>(),
        vec![(2_000, 2_000), (10_345, 12_345)]
    );
    // A refund of a payment Breeze never linked is not Breeze's: ignored.
    let stranger = breeze_billing::testing::refund_event_body(
        "ch_9",
        "pi_unknown",
        "evt_r9",
        [500, 500],
        "usd",
    );
    let (_, answer) = webhook(app, &partner, &stranger, Some(&signed(&stranger, now))).await;
    assert_eq!(answer["result"], "ignored", "{answer}");

    let audited = w
        .store
        .raw_strings("SELECT action FROM audit_log WHERE action = 'invoice.payment_refunded'")
        .await
        .unwrap();
    assert_eq!(audited.len(), 2, "{audited:?}");
    // The invoice's page lists them.
    let admin = sign_in(app, "admin@p.test").await;
    let r = get(app, &format!("/o/org-a/invoices/{inv}"), &admin.cookie).await;
    let body = html(&r);
    assert!(
        body.contains("id=\"refunds\"") && body.contains("103.45 USD") && body.contains("ch_1"),
        "{body}"
    );
}

breeze_store::on_both_backends!(
    refunds_lower_what_was_paid_once,
    quote_payment_links_mark_the_quote_paid_once,
    payment_links_record_each_payment_once,
    distributor_lookups_are_partner_scoped,
);
