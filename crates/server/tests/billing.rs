//! The catalog (`search_catalog`, `get_catalog_item`, `manage_catalog`), contracts
//! (`list_contracts`, `get_contract`, `manage_contracts`) and catalog lines on invoices, over
//! MCP; the contract period worker over the store.
//!
//! The attacks first: every id-taking action given another organization's contract, or
//! another partner's catalog item, answers not found (the Tier 3 ones before any approval is
//! asked), and one organization's price override is not another's. Then the tiers and grants:
//! the reads are Tier 2, a technician holds no catalog or contract permission, lifecycle
//! changes are Tier 3 and need `contracts.manage` beside `contracts.write`. Then the money:
//! random catalog and manual lines always sum to the invoice's totals, and a line in another
//! currency is refused. Last, the period worker: each closed period opens exactly one draft,
//! even with two store handles billing at once. And quotes (`manage_quotes`): drafted at
//! Tier 2, sent at Tier 3 with `quotes.send`, frozen once sent, isolated per organization.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use breeze_core::{BillingPeriod, Clock, ContractStatus, Currency, Money, OrgId, Quantity, Scope};
use breeze_store::{NewContract, NewContractLine, NewLine, testing::Ctx};
use common::{World, api_key, audit, code, ok, tool, user_with, why, world};
use serde_json::{Value, json};

const CATALOG: &str = "manage_catalog";
const CONTRACTS: &str = "manage_contracts";
const INVOICES: &str = "manage_invoices";
const QUOTES: &str = "manage_quotes";

/// An execute key of the world's administrator in `org`.
async fn exec_key(w: &World, org: OrgId) -> String {
    api_key(w, org, w.admin, &[Scope::AiExecute]).await
}

/// The id of the `what` (`item`, `contract`, `invoice`, `quote`) a call that must succeed
/// created or returned.
async fn create(app: &axum::Router, key: &str, name: &str, args: Value, what: &str) -> String {
    id_of(&ok(app, key, name, args).await, what)
}

fn id_of(v: &Value, what: &str) -> String {
    v[what]["id"].as_str().unwrap().to_owned()
}

/// A catalog item of organization A's partner, made with the write key; its id.
async fn item(w: &World, name: &str, kind: &str, price: &str, currency: &str, tax: u32) -> String {
    create(
        &w.app,
        &w.write,
        CATALOG,
        json!({ "action": "create", "name": name, "kind": kind, "unitPrice": price,
                "currency": currency, "taxBp": tax }),
        "item",
    )
    .await
}

/// An empty draft invoice in USD, made with `key`; its id.
async fn draft_invoice(app: &axum::Router, key: &str) -> String {
    create(
        app,
        key,
        INVOICES,
        json!({ "action": "create", "currency": "USD" }),
        "invoice",
    )
    .await
}

async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let exec = exec_key(&w, w.org_a).await;
    let b_key = exec_key(&w, w.org_b).await;

    // B's contract, through B's own key; and an item of another partner's catalog.
    let b_contract = create(
        app,
        &b_key,
        CONTRACTS,
        json!({ "action": "create", "name": "B's", "currency": "USD" }),
        "contract",
    )
    .await;
    let q = w.store.create_partner("Q", "q", audit("p")).await.unwrap();
    let q_org = w
        .store
        .create_organization(q.id, "Q's", "q-org", audit("o"))
        .await
        .unwrap();
    let q_item = w
        .store
        .org(q_org.id)
        .catalog()
        .create_item(
            breeze_store::NewCatalogItem {
                sku: Some("Q-1".into()),
                name: "Q's laptop".into(),
                kind: breeze_core::CatalogKind::Hardware,
                description: String::new(),
                unit_price: Money::new(100_000, Currency::parse("USD").unwrap()),
                tax_bp: 0,
                created_by: "test".into(),
            },
            audit("catalog.create"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    let mine = create(
        app,
        &exec,
        CATALOG,
        json!({ "action": "create", "name": "Mine", "kind": "service",
                    "unitPrice": "10", "currency": "USD" }),
        "item",
    )
    .await;
    let draft = draft_invoice(app, &exec).await;

    for (name, args) in [
        ("get_contract", json!({ "contractId": b_contract })),
        ("list_contracts", json!({ "orgId": w.org_b.to_string() })),
        (
            CONTRACTS,
            json!({ "action": "update", "contractId": b_contract, "name": "x" }),
        ),
        (
            CONTRACTS,
            json!({ "action": "delete", "contractId": b_contract }),
        ),
        (
            CONTRACTS,
            json!({ "action": "add_line", "contractId": b_contract, "description": "x",
                    "unitPrice": "1" }),
        ),
        (
            CONTRACTS,
            json!({ "action": "remove_line", "contractId": b_contract,
                    "lineId": uuid::Uuid::now_v7().to_string() }),
        ),
        // Tier 3: refused before any person is asked.
        (
            CONTRACTS,
            json!({ "action": "activate", "contractId": b_contract }),
        ),
        (
            CONTRACTS,
            json!({ "action": "pause", "contractId": b_contract }),
        ),
        (
            CONTRACTS,
            json!({ "action": "resume", "contractId": b_contract }),
        ),
        (
            CONTRACTS,
            json!({ "action": "cancel", "contractId": b_contract }),
        ),
        ("get_catalog_item", json!({ "itemId": q_item })),
        (
            CATALOG,
            json!({ "action": "update", "itemId": q_item, "name": "x" }),
        ),
        (CATALOG, json!({ "action": "archive", "itemId": q_item })),
        (
            CATALOG,
            json!({ "action": "set_price_override", "itemId": q_item, "unitPrice": "1" }),
        ),
        (
            CATALOG,
            json!({ "action": "remove_price_override", "itemId": q_item }),
        ),
        (
            CATALOG,
            json!({ "action": "set_component", "itemId": q_item, "componentId": mine }),
        ),
        (
            CATALOG,
            json!({ "action": "remove_component", "itemId": q_item, "componentId": mine }),
        ),
        (
            INVOICES,
            json!({ "action": "add_catalog_line", "invoiceId": draft, "catalogItemId": q_item }),
        ),
    ] {
        let r = tool(app, &exec, name, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{name} {args}: {r}");
    }
    let found = ok(app, &exec, "search_catalog", json!({ "query": "laptop" })).await;
    assert_eq!(
        found["showing"], 0,
        "another partner's catalog is not searched: {found}"
    );

    // The catalog is the partner's, the price override the organization's.
    ok(
        app,
        &exec,
        CATALOG,
        json!({ "action": "set_price_override", "itemId": mine, "unitPrice": "7.50" }),
    )
    .await;
    let a = ok(app, &exec, "get_catalog_item", json!({ "itemId": mine })).await;
    assert_eq!(a["item"]["price"]["amount"], "7.50", "{a}");
    let b = ok(app, &b_key, "get_catalog_item", json!({ "itemId": mine })).await;
    assert_eq!(b["item"]["price"]["amount"], "10.00", "{b}");
    assert!(b["item"].get("priceOverride").is_none(), "{b}");
    let r = tool(
        app,
        &b_key,
        CATALOG,
        json!({ "action": "remove_price_override", "itemId": mine }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "B cannot remove A's override: {r}");
    // B's contract is as it was.
    let after = ok(
        app,
        &b_key,
        "get_contract",
        json!({ "contractId": b_contract }),
    )
    .await;
    assert_eq!(after["contract"]["name"], "B's");
    assert_eq!(after["contract"]["status"], "draft");
}

async fn tiers_scopes_and_permissions(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;

    // Financial reads are Tier 2: a read key gets none of them.
    for (name, args) in [
        ("search_catalog", json!({})),
        (
            "get_catalog_item",
            json!({ "itemId": uuid::Uuid::now_v7().to_string() }),
        ),
        ("list_contracts", json!({})),
        (
            "get_contract",
            json!({ "contractId": uuid::Uuid::now_v7().to_string() }),
        ),
    ] {
        let r = tool(app, &w.read, name, args.clone()).await;
        assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "{name} {args}: {r}");
    }
    // An administrator's write key: the whole catalog, and contract drafts.
    ok(app, &w.write, "search_catalog", json!({})).await;
    let item = create(
        app,
        &w.write,
        CATALOG,
        json!({ "action": "create", "name": "Backup", "kind": "service", "sku": "BK-1",
                    "unitPrice": "25.00", "currency": "USD", "taxBp": 2000 }),
        "item",
    )
    .await;
    let r = tool(
        app,
        &w.write,
        CATALOG,
        json!({ "action": "create", "name": "Again", "kind": "service", "sku": "BK-1",
                "unitPrice": "1", "currency": "USD" }),
    )
    .await;
    assert_eq!(code(&r), "CONFLICT", "a SKU is unique in the catalog: {r}");
    let contract = create(
        app,
        &w.write,
        CONTRACTS,
        json!({ "action": "create", "name": "Managed services", "currency": "USD" }),
        "contract",
    )
    .await;
    let with_line = ok(
        app,
        &w.write,
        CONTRACTS,
        json!({ "action": "add_line", "contractId": contract, "catalogItemId": item,
                "quantity": "3" }),
    )
    .await;
    assert_eq!(
        with_line["contract"]["lines"][0]["unitPrice"]["amount"],
        "25.00"
    );
    for action in ["activate", "pause", "resume", "cancel"] {
        let r = tool(
            app,
            &w.write,
            CONTRACTS,
            json!({ "action": action, "contractId": contract }),
        )
        .await;
        assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "{action} is Tier 3: {r}");
    }
    let exec = exec_key(&w, w.org_a).await;
    let pending = tool(
        app,
        &exec,
        CONTRACTS,
        json!({ "action": "activate", "contractId": contract }),
    )
    .await;
    assert_eq!(pending["status"], "pending_approval", "{pending}");
    let r = tool(
        app,
        &exec,
        CONTRACTS,
        json!({ "action": "resume", "contractId": contract }),
    )
    .await;
    assert_eq!(
        code(&r),
        "CONFLICT",
        "a draft is activated, not resumed: {r}"
    );

    // A technician holds no catalog or contract permission.
    let tech = user_with(&w, "Technician", "tech@p.test").await;
    let tech_key = api_key(&w, w.org_a, tech, &[Scope::AiExecute]).await;
    for (name, args) in [
        ("search_catalog", json!({})),
        ("get_catalog_item", json!({ "itemId": item })),
        (CATALOG, json!({ "action": "archive", "itemId": item })),
        ("list_contracts", json!({})),
        ("get_contract", json!({ "contractId": contract })),
        (
            CONTRACTS,
            json!({ "action": "create", "name": "x", "currency": "USD" }),
        ),
    ] {
        let r = tool(app, &tech_key, name, args.clone()).await;
        assert_eq!(why(&r), "FORBIDDEN", "{name} {args}: {r}");
    }
    // Given contracts.write but not contracts.manage, drafts yes, lifecycle no.
    w.store
        .raw_execute(
            "UPDATE roles SET permissions = '[\"contracts.read\", \"contracts.write\"]' \
             WHERE name = 'Technician'",
        )
        .await
        .unwrap();
    // A user the server has not seen yet (permissions are cached per user for a while).
    let drafter = user_with(&w, "Technician", "drafter@p.test").await;
    let tech_key = api_key(&w, w.org_a, drafter, &[Scope::AiExecute]).await;
    let mine = create(
        app,
        &tech_key,
        CONTRACTS,
        json!({ "action": "create", "name": "Tech's", "currency": "EUR" }),
        "contract",
    )
    .await;
    ok(
        app,
        &tech_key,
        CONTRACTS,
        json!({ "action": "add_line", "contractId": mine, "description": "Support",
                "unitPrice": "10" }),
    )
    .await;
    let r = tool(
        app,
        &tech_key,
        CONTRACTS,
        json!({ "action": "activate", "contractId": mine }),
    )
    .await;
    assert_eq!(why(&r), "FORBIDDEN", "activate needs contracts.manage: {r}");

    // Bad input: kinds, money, currencies, lifecycle.
    for (name, args) in [
        (
            CATALOG,
            json!({ "action": "create", "name": "x", "kind": "food", "unitPrice": "1",
                          "currency": "USD" }),
        ),
        (
            CATALOG,
            json!({ "action": "create", "name": "x", "kind": "service",
                          "unitPrice": "1.005", "currency": "USD" }),
        ),
        (
            CATALOG,
            json!({ "action": "create", "name": "x", "kind": "service",
                          "unitPrice": "-1", "currency": "USD" }),
        ),
        (
            CATALOG,
            json!({ "action": "set_component", "itemId": item, "componentId": item }),
        ),
        (
            CONTRACTS,
            json!({ "action": "add_line", "contractId": mine, "description": "x",
                            "unitPrice": "1", "currency": "USD" }),
        ),
    ] {
        let r = tool(app, &w.write, name, args.clone()).await;
        assert!(
            matches!(why(&r), "INVALID_ARGUMENT" | "CONFLICT"),
            "{name} {args}: {r}"
        );
    }
}

/// Catalog items, bundles and manual lines on a draft: whatever the lines, the totals are
/// their sums, and a line in another currency is refused.
async fn lines_sum_to_totals(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let usd = Currency::parse("USD").unwrap();
    let mut items = Vec::new();
    for (name, kind, price, tax) in [
        ("Laptop", "hardware", "1199.99", 2000),
        ("Office seat", "software", "12.50", 0),
        ("Onboarding", "service", "95.00", 825),
    ] {
        items.push(item(&w, name, kind, price, "USD", tax).await);
    }
    let bundle = item(&w, "New starter", "bundle", "1250.00", "USD", 2000).await;
    for (c, q) in [(&items[0], "1"), (&items[1], "2")] {
        ok(
            app,
            &w.write,
            CATALOG,
            json!({ "action": "set_component", "itemId": bundle, "componentId": c,
                    "quantity": q }),
        )
        .await;
    }
    let got = ok(
        app,
        &w.write,
        "get_catalog_item",
        json!({ "itemId": bundle }),
    )
    .await;
    assert_eq!(
        got["item"]["components"].as_array().unwrap().len(),
        2,
        "{got}"
    );
    items.push(bundle);
    let eur = item(&w, "Euro thing", "hardware", "5", "EUR", 0).await;

    let invoices = w.store.org(w.org_a).invoices();
    // A small deterministic generator: the same "random" lines on every run.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..4 {
        let draft = draft_invoice(app, &w.write).await;
        let id: uuid::Uuid = draft.parse().unwrap();
        for _ in 0..(3 + next(6)) {
            if next(2) == 0 {
                let item = &items[next(items.len() as u64) as usize];
                let quantity = format!("{}.{:03}", 1 + next(5), next(1000));
                ok(
                    app,
                    &w.write,
                    INVOICES,
                    json!({ "action": "add_catalog_line", "invoiceId": draft,
                            "catalogItemId": item, "quantity": quantity }),
                )
                .await;
            } else {
                invoices
                    .add_line(
                        id,
                        NewLine {
                            description: format!("manual {round}"),
                            quantity: Quantity(1 + next(10_000) as i64),
                            unit_price: Money::new(next(1_000_000) as i64, usd),
                            tax_bp: next(2500) as u32,
                        },
                        audit("invoice.add_line"),
                    )
                    .await
                    .unwrap();
            }
        }
        let inv = invoices.get_invoice(id).await.unwrap();
        let lines = invoices.lines(id).await.unwrap();
        assert!(
            lines.iter().all(|l| l.currency == usd),
            "one currency per invoice"
        );
        let subtotal: i64 = lines.iter().map(|l| l.amount_minor).sum();
        let tax: i64 = lines.iter().map(|l| l.tax_minor).sum();
        assert_eq!(inv.subtotal_minor, subtotal, "round {round}");
        assert_eq!(inv.tax_minor, tax, "round {round}");
        assert_eq!(inv.total_minor, subtotal + tax, "round {round}");
        let r = tool(
            app,
            &w.write,
            INVOICES,
            json!({ "action": "add_catalog_line", "invoiceId": draft, "catalogItemId": eur }),
        )
        .await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "currencies never mix: {r}");
        assert_eq!(
            invoices.get_invoice(id).await.unwrap(),
            inv,
            "the refusal changed nothing"
        );
    }
    // A catalog line is billed at the organization's override.
    ok(
        app,
        &w.write,
        CATALOG,
        json!({ "action": "set_price_override", "itemId": items[1], "unitPrice": "10.00" }),
    )
    .await;
    let draft = draft_invoice(app, &w.write).await;
    let with = ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "add_catalog_line", "invoiceId": draft, "catalogItemId": items[1],
                "quantity": "3" }),
    )
    .await;
    assert_eq!(with["invoice"]["total"]["amount"], "30.00", "{with}");
    assert_eq!(with["invoice"]["lines"][0]["kind"], "catalog");
    // An archived item is no longer sold.
    ok(
        app,
        &w.write,
        CATALOG,
        json!({ "action": "archive", "itemId": items[2] }),
    )
    .await;
    let r = tool(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "add_catalog_line", "invoiceId": draft, "catalogItemId": items[2] }),
    )
    .await;
    assert_eq!(code(&r), "CONFLICT", "{r}");
}

/// Two store handles bill closed periods at once: each period opens exactly one draft, with
/// the contract's lines, and paused time is not billed.
async fn each_closed_period_bills_once(cx: Ctx) {
    let w = world(&cx).await;
    let usd = Currency::parse("USD").unwrap();
    let one = w.store.clone();
    let two = w.store.reopen().await.unwrap();
    let contracts = one.org(w.org_a).contracts();
    let start = cx.clock.now();
    let c = contracts
        .create_draft(
            NewContract {
                name: "Managed".into(),
                currency: usd,
                billing_period: BillingPeriod::Monthly,
                tax_bp: 1000,
                notes: None,
                starts_at: start,
                created_by: "test".into(),
            },
            audit("contract.create"),
        )
        .await
        .unwrap();
    contracts
        .add_line(
            c.id,
            NewContractLine::Manual {
                description: "Per seat".into(),
                quantity: Quantity::units(12).unwrap(),
                unit_price: Money::new(2_500, usd),
            },
            audit("contract.add_line"),
        )
        .await
        .unwrap();
    contracts
        .set_status(c.id, ContractStatus::Active, audit("contract.activate"))
        .await
        .unwrap();

    // Nothing has closed yet.
    let none = one.bill_closed_periods(cx.clock.now()).await.unwrap();
    assert_eq!(none.periods, 0);
    // Three months later, three periods closed: two handles race for them.
    cx.clock.advance(chrono::Duration::days(92));
    let now = cx.clock.now();
    let (a, b) = tokio::join!(one.bill_closed_periods(now), two.bill_closed_periods(now));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.periods + b.periods, 3, "{a:?} {b:?}");
    let periods = contracts.periods(c.id).await.unwrap();
    assert_eq!(periods.len(), 3);
    let mut invoices: Vec<_> = periods.iter().filter_map(|p| p.invoice_id).collect();
    invoices.sort();
    invoices.dedup();
    assert_eq!(invoices.len(), 3, "one draft per period");
    for p in &periods {
        // 12 × 25.00 = 300.00, tax 10 % = 30.00.
        assert_eq!(p.total_minor, 33_000);
        let inv = one
            .org(w.org_a)
            .invoices()
            .get_invoice(p.invoice_id.unwrap())
            .await
            .unwrap();
        assert_eq!(inv.status, breeze_core::InvoiceStatus::Draft);
        assert_eq!(inv.total_minor, 33_000);
        let lines = one.org(w.org_a).invoices().lines(inv.id).await.unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].kind, breeze_core::InvoiceLineKind::Contract);
        assert_eq!(lines[0].contract_id, Some(c.id));
    }
    assert_eq!(periods[0].starts_at, start);
    assert_eq!(periods[1].starts_at, periods[0].ends_at);
    // Billing again bills nothing more.
    let again = two.bill_closed_periods(now).await.unwrap();
    assert_eq!(again.periods, 0);

    // Paused for four months: resuming skips the periods that closed meanwhile.
    contracts
        .set_status(c.id, ContractStatus::Paused, audit("contract.pause"))
        .await
        .unwrap();
    cx.clock.advance(chrono::Duration::days(122));
    assert_eq!(
        one.bill_closed_periods(cx.clock.now())
            .await
            .unwrap()
            .periods,
        0
    );
    let resumed = contracts
        .set_status(c.id, ContractStatus::Active, audit("contract.resume"))
        .await
        .unwrap();
    assert!(resumed.next_period_at <= cx.clock.now());
    assert!(
        BillingPeriod::Monthly
            .boundary_after(start, resumed.next_period_at)
            .unwrap()
            > cx.clock.now(),
        "the current period is the next to bill"
    );
    assert_eq!(
        one.bill_closed_periods(cx.clock.now())
            .await
            .unwrap()
            .periods,
        0
    );

    // The tools show the history.
    let exec = api_key(&w, w.org_a, w.admin, &[Scope::AiWrite]).await;
    let got = ok(
        &w.app,
        &exec,
        "get_contract",
        json!({ "contractId": c.id.to_string() }),
    )
    .await;
    assert_eq!(
        got["contract"]["periods"].as_array().unwrap().len(),
        3,
        "{got}"
    );
    assert_eq!(got["contract"]["status"], "active");
    let listed = ok(
        &w.app,
        &exec,
        "list_contracts",
        json!({ "status": "active" }),
    )
    .await;
    assert_eq!(listed["showing"], 1, "{listed}");
}

/// Quotes: drafted with blocks and lines (Tier 2), sent only at Tier 3 with quotes.send and
/// frozen after; another organization's quote is not found by id or number.
async fn quotes_draft_send_and_isolation(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let b_key = exec_key(&w, w.org_b).await;
    let exec = exec_key(&w, w.org_a).await;
    let item = item(&w, "Firewall", "hardware", "499.00", "USD", 2000).await;
    let q = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "create", "title": "Network refresh", "currency": "USD" }),
    )
    .await;
    assert_eq!(q["quote"]["number"], "Q-1");
    let qid = id_of(&q, "quote");
    ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "add_block", "quoteId": "Q-1", "blockKind": "heading",
                "body": "Scope" }),
    )
    .await;
    ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "add_line", "quoteId": qid, "catalogItemId": item, "quantity": "2" }),
    )
    .await;
    let full = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "add_line", "quoteId": qid, "description": "Install",
                "unitPrice": "150.00" }),
    )
    .await;
    // 2 × 499.00 + 20 % = 1197.60; 150.00 untaxed.
    assert_eq!(full["quote"]["total"]["amount"], "1347.60", "{full}");
    assert_eq!(full["quote"]["blocks"][0]["kind"], "heading");

    // B's quote by id and by number is not found; B's number is Q-2 (per partner).
    let b = ok(
        app,
        &b_key,
        QUOTES,
        json!({ "action": "create", "title": "B's", "currency": "USD" }),
    )
    .await;
    assert_eq!(b["quote"]["number"], "Q-2");
    let bid = id_of(&b, "quote");
    for args in [
        json!({ "action": "get", "quoteId": bid }),
        json!({ "action": "get", "quoteId": "Q-2" }),
        json!({ "action": "update", "quoteId": bid, "title": "x" }),
        json!({ "action": "delete", "quoteId": bid }),
        json!({ "action": "add_block", "quoteId": bid, "body": "x" }),
        json!({ "action": "remove_block", "quoteId": bid,
                "blockId": uuid::Uuid::now_v7().to_string() }),
        json!({ "action": "add_line", "quoteId": bid, "description": "x", "unitPrice": "1" }),
        json!({ "action": "remove_line", "quoteId": bid,
                "lineId": uuid::Uuid::now_v7().to_string() }),
        json!({ "action": "decline", "quoteId": bid, "reason": "x" }),
        json!({ "action": "send", "quoteId": bid }),
    ] {
        let r = tool(app, &exec, QUOTES, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
    }
    let listed = ok(app, &exec, QUOTES, json!({ "action": "list" })).await;
    assert_eq!(listed["showing"], 1, "{listed}");

    // Tiers and grants: a read key nothing, a write key no send, a technician nothing.
    let r = tool(app, &w.read, QUOTES, json!({ "action": "list" })).await;
    assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "{r}");
    let r = tool(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "send", "quoteId": qid }),
    )
    .await;
    assert_eq!(why(&r), "INSUFFICIENT_SCOPE", "send is Tier 3: {r}");
    let tech = user_with(&w, "Technician", "tech@p.test").await;
    let tech_key = api_key(&w, w.org_a, tech, &[Scope::AiExecute]).await;
    let r = tool(
        app,
        &tech_key,
        QUOTES,
        json!({ "action": "get", "quoteId": qid }),
    )
    .await;
    assert_eq!(why(&r), "FORBIDDEN", "{r}");
    let pending = tool(
        app,
        &exec,
        QUOTES,
        json!({ "action": "send", "quoteId": qid }),
    )
    .await;
    assert_eq!(pending["status"], "pending_approval", "{pending}");

    // Sent (as the approved call would): frozen, though still declinable.
    let quotes = w.store.org(w.org_a).quotes();
    quotes
        .send(qid.parse().unwrap(), audit("quote.send"))
        .await
        .unwrap();
    let r = tool(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "add_line", "quoteId": qid, "description": "late", "unitPrice": "1" }),
    )
    .await;
    assert_eq!(code(&r), "CONFLICT", "a sent quote never changes: {r}");
    let declined = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "decline", "quoteId": qid, "reason": "over budget" }),
    )
    .await;
    assert_eq!(declined["quote"]["status"], "declined");
    assert_eq!(declined["quote"]["total"]["amount"], "1347.60");
}

/// A ticket of `org` with billable time (`minutes` at `rate` per hour) and, optionally, a
/// part; its id.
async fn ticket_with_time(
    w: &World,
    org: OrgId,
    minutes: i64,
    rate: Money,
    billable: bool,
    part: Option<(Quantity, Money)>,
) -> uuid::Uuid {
    let tickets = w.store.org(org).tickets();
    let t = tickets
        .create_ticket(
            breeze_store::NewTicket {
                subject: "Printer".into(),
                description: String::new(),
                category: None,
                priority: breeze_core::TicketPriority::Normal,
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
        .unwrap();
    tickets
        .log_time(
            t.id,
            minutes,
            breeze_store::NewTime {
                user: w.admin,
                actor: breeze_core::Actor::system("tech"),
                billable,
                rate,
                note: None,
            },
            audit("ticket.log_time"),
        )
        .await
        .unwrap();
    if let Some((quantity, unit_price)) = part {
        tickets
            .add_part(
                t.id,
                breeze_store::NewPart {
                    description: "Toner".into(),
                    quantity,
                    unit_price,
                    billable: true,
                    created_by: "test".into(),
                },
                audit("ticket.add_part"),
            )
            .await
            .unwrap();
    }
    t.id
}

/// GET `path` with `key`: status, content type and body.
async fn download(
    app: &axum::Router,
    key: &str,
    path: &str,
) -> (axum::http::StatusCode, String, Vec<u8>) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let req = axum::http::Request::get(path)
        .header("x-api-key", key)
        .body(axum::body::Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let kind = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, kind, body)
}

/// The text of a PDF, when poppler's pdftotext is installed (CI installs it).
fn pdf_text(pdf: &[u8]) -> Option<String> {
    let path = std::env::temp_dir().join(format!("breeze-{}.pdf", uuid::Uuid::now_v7()));
    std::fs::write(&path, pdf).ok()?;
    let out = std::process::Command::new("pdftotext")
        .arg(&path)
        .arg("-")
        .output();
    let _ = std::fs::remove_file(&path);
    let out = out.ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A billable period assembles into one draft of every ticket's unbilled time × rate and
/// parts in one currency (never another organization's, never twice); a contract's lines
/// join a draft at its price and tax; invoices and quotes download as PDFs.
async fn periods_contract_lines_and_pdfs(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let (usd, eur) = (
        Currency::parse("USD").unwrap(),
        Currency::parse("EUR").unwrap(),
    );
    // 90 min at 120.00/h = 180.00; 20 min at 100.00/h = 33.33 (33.333… rounded once);
    // 2 × 12.50 = 25.00; not billable, another currency, another organization: none of it.
    ticket_with_time(&w, w.org_a, 90, Money::new(12_000, usd), true, None).await;
    let t2 = ticket_with_time(
        &w,
        w.org_a,
        20,
        Money::new(10_000, usd),
        true,
        Some((Quantity::units(2).unwrap(), Money::new(1_250, usd))),
    )
    .await;
    ticket_with_time(&w, w.org_a, 60, Money::new(10_000, usd), false, None).await;
    ticket_with_time(&w, w.org_a, 60, Money::new(8_000, eur), true, None).await;
    ticket_with_time(&w, w.org_b, 60, Money::new(10_000, usd), true, None).await;
    let now = cx.clock.now();
    let period = |currency: &str| {
        json!({ "action": "assemble_from_period", "currency": currency, "taxBp": 1000,
                "periodStart": (now - chrono::Duration::days(1)).to_rfc3339(),
                "periodEnd": (now + chrono::Duration::hours(1)).to_rfc3339() })
    };
    let made = ok(app, &w.write, INVOICES, period("USD")).await;
    let inv = &made["invoice"];
    assert_eq!(inv["lines"].as_array().unwrap().len(), 3, "{made}");
    assert_eq!(inv["subtotal"]["amount"], "238.33", "{made}");
    // Tax per line, rounded once each: 18.00 + 3.33 + 2.50.
    assert_eq!(inv["tax"]["amount"], "23.83", "{made}");
    assert_eq!(inv["total"]["amount"], "262.16", "{made}");
    let lines = inv["lines"].as_array().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "part" && l["amount"]["amount"] == "25.00")
    );
    assert!(
        lines
            .iter()
            .all(|l| l["description"].as_str().unwrap().starts_with("T-")),
        "{made}"
    );
    // Billed once: the same period again has nothing left in USD; EUR is its own invoice.
    let r = tool(app, &w.write, INVOICES, period("USD")).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    let euros = ok(app, &w.write, INVOICES, period("EUR")).await;
    assert_eq!(euros["invoice"]["subtotal"]["amount"], "80.00", "{euros}");
    // A period that ends before it starts, or with nothing in it.
    let mut backwards = period("USD");
    backwards["periodEnd"] = json!((now - chrono::Duration::days(2)).to_rfc3339());
    let r = tool(app, &w.write, INVOICES, backwards).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    // Deleting the draft gives its time back to the ticket.
    let id = inv["id"].as_str().unwrap();
    ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "delete", "invoiceId": id }),
    )
    .await;
    let again = ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "assemble_from_ticket", "ticketId": t2.to_string() }),
    )
    .await;
    assert_eq!(again["invoice"]["subtotal"]["amount"], "58.33", "{again}");

    // Contract lines on a draft: at the contract's price and tax; another organization's
    // contract is not found.
    let contract = create(
        app,
        &w.write,
        CONTRACTS,
        json!({ "action": "create", "name": "Managed", "currency": "USD", "taxBp": 2000 }),
        "contract",
    )
    .await;
    ok(
        app,
        &w.write,
        CONTRACTS,
        json!({ "action": "add_line", "contractId": contract, "description": "Seat",
                "quantity": "3", "unitPrice": "25.00" }),
    )
    .await;
    let b_key = exec_key(&w, w.org_b).await;
    let b_contract = create(
        app,
        &b_key,
        CONTRACTS,
        json!({ "action": "create", "name": "B", "currency": "USD" }),
        "contract",
    )
    .await;
    let draft = draft_invoice(app, &w.write).await;
    let r = tool(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "add_contract_lines", "invoiceId": draft, "contractId": b_contract }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    let with = ok(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "add_contract_lines", "invoiceId": draft, "contractId": contract }),
    )
    .await;
    assert_eq!(with["invoice"]["subtotal"]["amount"], "75.00", "{with}");
    assert_eq!(with["invoice"]["tax"]["amount"], "15.00", "{with}");
    assert_eq!(with["invoice"]["lines"][0]["kind"], "contract");
    assert_eq!(with["invoice"]["lines"][0]["contractId"], contract.as_str());
    let eur_draft = create(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "create", "currency": "EUR" }),
        "invoice",
    )
    .await;
    let r = tool(
        app,
        &w.write,
        INVOICES,
        json!({ "action": "add_contract_lines", "invoiceId": eur_draft, "contractId": contract }),
    )
    .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "currencies never mix: {r}");

    // PDFs: the link the tools give, at Tier 2, never another organization's.
    let pdf_url = with["invoice"]["pdfUrl"].as_str().unwrap().to_owned();
    let (status, kind, pdf) = download(app, &w.write, &pdf_url).await;
    assert_eq!(
        status,
        axum::http::StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&pdf)
    );
    assert_eq!(kind, "application/pdf");
    assert!(breeze_store::testing::check_pdf(&pdf) >= 1);
    if let Some(text) = pdf_text(&pdf) {
        assert!(
            text.contains("Managed: Seat") && text.contains("90.00 USD"),
            "{text}"
        );
    }
    let (status, _, _) = download(app, &w.read, &pdf_url).await;
    assert_eq!(
        status,
        axum::http::StatusCode::FORBIDDEN,
        "financial data is Tier 2"
    );
    let b_read = api_key(&w, w.org_b, w.admin, &[Scope::AiRead, Scope::AiWrite]).await;
    let (status, _, _) = download(
        app,
        &b_read,
        &pdf_url.replace(&w.org_a.to_string(), &w.org_b.to_string()),
    )
    .await;
    assert_eq!(
        status,
        axum::http::StatusCode::NOT_FOUND,
        "another organization's invoice"
    );
    let q = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "create", "title": "Refresh — Ω plan", "currency": "USD" }),
    )
    .await;
    let qid = q["quote"]["id"].as_str().unwrap().to_owned();
    ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "add_block", "quoteId": qid, "blockKind": "heading", "body": "Scope" }),
    )
    .await;
    let q = ok(
        app,
        &w.write,
        QUOTES,
        json!({ "action": "add_line", "quoteId": qid, "description": "Install",
                "unitPrice": "150.00" }),
    )
    .await;
    let (status, kind, pdf) = download(app, &w.write, q["quote"]["pdfUrl"].as_str().unwrap()).await;
    assert_eq!(
        (status, kind.as_str()),
        (axum::http::StatusCode::OK, "application/pdf")
    );
    assert!(breeze_store::testing::check_pdf(&pdf) >= 1);
    if let Some(text) = pdf_text(&pdf) {
        assert!(
            text.contains("SCOPE") && text.contains("150.00 USD") && text.contains("Ω"),
            "{text}"
        );
    }
}

/// An organization's billing currency is what its drafts are in when they name none; another
/// organization's stays its own, and without one a draft must name its currency.
async fn currency_per_organization(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    w.store
        .set_billing_currency(w.org_a, Some(Currency::parse("EUR").unwrap()), audit("c"))
        .await
        .unwrap();
    for (tool_name, args, what) in [
        (INVOICES, json!({ "action": "create" }), "invoice"),
        (
            QUOTES,
            json!({ "action": "create", "title": "Refresh" }),
            "quote",
        ),
        (
            CONTRACTS,
            json!({ "action": "create", "name": "Managed" }),
            "contract",
        ),
    ] {
        let made = ok(app, &w.write, tool_name, args.clone()).await;
        assert_eq!(made[what]["currency"], "EUR", "{tool_name}: {made}");
        // Named explicitly, the draft's own currency wins.
        let mut named = args.clone();
        named["currency"] = json!("JPY");
        let made = ok(app, &w.write, tool_name, named).await;
        assert_eq!(made[what]["currency"], "JPY", "{tool_name}: {made}");
    }
    let b_key = api_key(&w, w.org_b, w.admin, &[Scope::AiRead, Scope::AiWrite]).await;
    let r = tool(app, &b_key, INVOICES, json!({ "action": "create" })).await;
    assert_eq!(
        code(&r),
        "INVALID_ARGUMENT",
        "B has no billing currency: {r}"
    );
    assert!(
        w.store
            .org(w.org_b)
            .tenancy()
            .billing_currency()
            .await
            .unwrap()
            .is_none()
    );
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    tiers_scopes_and_permissions,
    lines_sum_to_totals,
    each_closed_period_bills_once,
    quotes_draft_send_and_isolation,
    periods_contract_lines_and_pdfs,
    currency_per_organization,
);
