//! Invoices on both backends: drafts and lines with totals that are the sums of their rounded
//! lines, a draft assembled from a ticket equal to its billable time × rate + parts, issue
//! with gap-free per-partner numbers (also under 2 instances × 50 concurrent issues), issued
//! invoices frozen (by the store and, underneath, by the database), voids that keep their
//! number, payments — and another organization's invoice, line, payment or ticket not found.

use std::collections::BTreeSet;

use breeze_core::{Currency, InvoiceStatus, Money, Quantity};
use breeze_store::{NewLine, StoreError, testing::Ctx};

use crate::{
    audit,
    tickets::{part, ticket, time, usd, user},
};

fn a(action: &str) -> breeze_core::AuditEvent {
    audit(action, "invoice")
}

fn line(description: &str, quantity: &str, price: &str, tax_bp: u32) -> NewLine {
    NewLine {
        description: description.into(),
        quantity: Quantity::parse(quantity).unwrap(),
        unit_price: usd(price),
        tax_bp,
    }
}

fn usd_c() -> Currency {
    Currency::parse("USD").unwrap()
}

async fn drafts_issue_void_and_payments(cx: Ctx) {
    let s = &cx.store;
    let (a_org, b_org) = crate::two_orgs(s).await;
    let ia = s.org(a_org).invoices();
    let ib = s.org(b_org).invoices();

    let d = ia
        .create_draft(usd_c(), Some("November"), None, "test", a("invoice.create"))
        .await
        .unwrap();
    assert_eq!(
        (d.status, d.number, d.total_minor),
        (InvoiceStatus::Draft, None, 0)
    );
    let d = ia
        .add_line(
            d.id,
            line("hours", "1.5", "95.00", 2000),
            a("invoice.add_line"),
        )
        .await
        .unwrap();
    // 1.5 × 95.00 = 142.50, tax 20 % = 28.50.
    assert_eq!(
        (d.subtotal_minor, d.tax_minor, d.total_minor),
        (14_250, 2850, 17_100)
    );
    let d = ia
        .add_line(
            d.id,
            line("cable", "0.333", "0.05", 825),
            a("invoice.add_line"),
        )
        .await
        .unwrap();
    // 0.333 × 0.05 = 0.01665 → 0.02; tax 8.25 % of 0.02 = 0.00165 → 0.00.
    assert_eq!((d.subtotal_minor, d.tax_minor), (14_252, 2850));
    let lines = ia.lines(d.id).await.unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines.iter().map(|l| l.amount_minor).sum::<i64>(),
        d.subtotal_minor,
        "the total is the sum of the rounded lines"
    );
    assert!(
        matches!(
            ia.add_line(
                d.id,
                NewLine {
                    unit_price: Money::new(100, Currency::parse("EUR").unwrap()),
                    ..line("eur", "1", "1", 0)
                },
                a("x")
            )
            .await,
            Err(StoreError::Invalid(_))
        ),
        "currencies never mix"
    );
    let d = ia
        .remove_line(d.id, lines[1].id, a("invoice.remove_line"))
        .await
        .unwrap();
    assert_eq!(d.total_minor, 17_100);

    // An empty draft is not issued; this one is, as number 1.
    let empty = ia
        .create_draft(usd_c(), None, None, "t", a("x"))
        .await
        .unwrap();
    assert!(matches!(
        ia.issue(empty.id, a("x")).await,
        Err(StoreError::Invalid(_))
    ));
    let issued = ia.issue(d.id, a("invoice.issue")).await.unwrap();
    assert_eq!(issued.number, Some(1));
    assert_eq!(issued.reference().as_deref(), Some("INV-000001"));
    assert_eq!(issued.status, InvoiceStatus::Issued);
    assert!(issued.issued_at.is_some());

    // Frozen: by the store…
    assert!(matches!(
        ia.add_line(d.id, line("more", "1", "1", 0), a("x")).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        ia.remove_line(d.id, lines[0].id, a("x")).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        ia.update_draft(d.id, Some("x"), None, a("x")).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        ia.delete_draft(d.id, a("x")).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        ia.issue(d.id, a("x")).await,
        Err(StoreError::Conflict(_))
    ));
    // …and by the database, whatever SQL says.
    for statement in [
        format!("UPDATE invoices SET total_minor = 1 WHERE id = '{}'", d.id),
        format!("UPDATE invoices SET number = 99 WHERE id = '{}'", d.id),
        format!(
            "UPDATE invoice_lines SET amount_minor = 1 WHERE invoice_id = '{}'",
            d.id
        ),
        format!("DELETE FROM invoice_lines WHERE invoice_id = '{}'", d.id),
        format!("DELETE FROM invoices WHERE id = '{}'", d.id),
    ] {
        let statement = match s.backend() {
            breeze_store::Backend::Sqlite => {
                statement.replace(&format!("'{}'", d.id), &format!("x'{}'", d.id.simple()))
            }
            breeze_store::Backend::Postgres => statement,
        };
        assert!(
            s.raw_execute(&statement).await.is_err(),
            "refused: {statement}"
        );
    }
    assert_eq!(ia.get_invoice(d.id).await.unwrap(), issued);
    assert_eq!(ia.lines(d.id).await.unwrap().len(), 1);

    // Payments: in its currency, up to the balance; settling makes it paid.
    let eur = Money::new(100, Currency::parse("EUR").unwrap());
    assert!(matches!(
        ia.record_payment(d.id, eur, "card", None, "t", a("x"))
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(
        matches!(
            ia.record_payment(d.id, usd("171.01"), "card", None, "t", a("x"))
                .await,
            Err(StoreError::Invalid(_))
        ),
        "no overpayment"
    );
    let p1 = ia
        .record_payment(
            d.id,
            usd("100.00"),
            "card",
            Some("ch_1"),
            "t",
            a("invoice.record_payment"),
        )
        .await
        .unwrap();
    assert_eq!(ia.get_invoice(d.id).await.unwrap().balance(), usd("71.00"));
    assert!(
        matches!(
            ia.void(d.id, "oops", a("x")).await,
            Err(StoreError::Conflict(_))
        ),
        "payments first"
    );
    ia.record_payment(
        d.id,
        usd("71.00"),
        "bank",
        None,
        "t",
        a("invoice.record_payment"),
    )
    .await
    .unwrap();
    assert_eq!(
        ia.get_invoice(d.id).await.unwrap().status,
        InvoiceStatus::Paid
    );
    assert!(matches!(
        ia.record_payment(d.id, usd("1.00"), "card", None, "t", a("x"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    let voided = ia
        .void_payment(d.id, p1.id, "chargeback", a("invoice.void_payment"))
        .await
        .unwrap();
    assert!(voided.voided_at.is_some());
    assert!(matches!(
        ia.void_payment(d.id, p1.id, "again", a("x")).await,
        Err(StoreError::Conflict(_))
    ));
    let back = ia.get_invoice(d.id).await.unwrap();
    assert_eq!(
        (back.status, back.paid_minor),
        (InvoiceStatus::Issued, 7100)
    );

    // A void keeps its number; the next invoice takes the next one, also in organization B
    // (numbers are the partner's).
    let second = ia
        .create_draft(usd_c(), None, None, "t", a("x"))
        .await
        .unwrap();
    ia.add_line(second.id, line("x", "1", "10", 0), a("x"))
        .await
        .unwrap();
    let second = ia.issue(second.id, a("invoice.issue")).await.unwrap();
    let v = ia
        .void(second.id, "wrong customer", a("invoice.void"))
        .await
        .unwrap();
    assert_eq!((v.status, v.number), (InvoiceStatus::Void, Some(2)));
    assert!(matches!(
        ia.void(second.id, "again", a("x")).await,
        Err(StoreError::Conflict(_))
    ));
    let b = ib
        .create_draft(usd_c(), None, None, "t", a("x"))
        .await
        .unwrap();
    ib.add_line(b.id, line("x", "1", "10", 0), a("x"))
        .await
        .unwrap();
    assert_eq!(
        ib.issue(b.id, a("invoice.issue")).await.unwrap().number,
        Some(3)
    );

    // Listing: newest first, by status, in pages; B's never among A's.
    let all = ia.list_invoices(None, None, 100).await.unwrap().invoices;
    assert_eq!(
        all.iter().map(|i| i.id).collect::<Vec<_>>(),
        [second.id, empty.id, d.id]
    );
    let drafts = ia
        .list_invoices(Some(InvoiceStatus::Draft), None, 100)
        .await
        .unwrap()
        .invoices;
    assert_eq!(drafts.iter().map(|i| i.id).collect::<Vec<_>>(), [empty.id]);
    let page = ia.list_invoices(None, None, 2).await.unwrap();
    let rest = ia.list_invoices(None, page.next_before, 2).await.unwrap();
    assert_eq!(
        rest.invoices.iter().map(|i| i.id).collect::<Vec<_>>(),
        [d.id]
    );

    // Another organization's invoice, line or payment is not found, and stays as it was.
    let nf = |r: Result<(), StoreError>, what: &str| {
        assert!(matches!(r, Err(StoreError::NotFound(_))), "{what}: {r:?}");
    };
    nf(ib.get_invoice(d.id).await.map(drop), "get");
    nf(ib.invoice_by_number(1).await.map(drop), "by number");
    nf(
        ib.update_draft(empty.id, Some("x"), None, a("x"))
            .await
            .map(drop),
        "update",
    );
    nf(ib.delete_draft(empty.id, a("x")).await.map(drop), "delete");
    nf(
        ib.add_line(empty.id, line("x", "1", "1", 0), a("x"))
            .await
            .map(drop),
        "add line",
    );
    let b_draft = ib
        .create_draft(usd_c(), None, None, "t", a("x"))
        .await
        .unwrap();
    nf(
        ib.remove_line(b_draft.id, lines[0].id, a("x"))
            .await
            .map(drop),
        "their line via my draft",
    );
    nf(ib.issue(empty.id, a("x")).await.map(drop), "issue");
    nf(ib.void(d.id, "x", a("x")).await.map(drop), "void");
    nf(
        ib.record_payment(d.id, usd("1"), "card", None, "t", a("x"))
            .await
            .map(drop),
        "pay",
    );
    nf(
        ib.void_payment(d.id, p1.id, "x", a("x")).await.map(drop),
        "void payment",
    );
    nf(
        ib.void_payment(b.id, p1.id, "x", a("x")).await.map(drop),
        "their payment via mine",
    );
    assert!(ib.lines(d.id).await.unwrap().is_empty());
    assert!(ib.payments(d.id).await.unwrap().is_empty());
    assert_eq!(ia.get_invoice(empty.id).await.unwrap(), empty);

    ia.delete_draft(empty.id, a("invoice.delete"))
        .await
        .unwrap();
    assert!(matches!(
        ia.get_invoice(empty.id).await,
        Err(StoreError::NotFound(_))
    ));
}

/// The assembled draft is billable time × rate + parts, each line rounded once; what it bills
/// is not billed twice; deleting the draft or voiding the invoice gives it back.
async fn assembled_from_a_ticket(cx: Ctx) {
    let s = &cx.store;
    let (a_org, b_org) = crate::two_orgs(s).await;
    let tech = user(s, "tech@p.test", "Technician", &[a_org]).await;
    let (ta, ia) = (s.org(a_org).tickets(), s.org(a_org).invoices());
    let t = ta
        .create_ticket(ticket("server down"), audit("t", "ticket"))
        .await
        .unwrap();
    assert!(
        matches!(
            ia.assemble_from_ticket(t.id, 0, "t", a("x")).await,
            Err(StoreError::Invalid(_))
        ),
        "nothing billable"
    );
    ta.log_time(t.id, 90, time(tech, "100.00"), audit("t", "ticket"))
        .await
        .unwrap();
    ta.log_time(t.id, 20, time(tech, "100.00"), audit("t", "ticket"))
        .await
        .unwrap();
    let mut free = time(tech, "100.00");
    free.billable = false;
    ta.log_time(t.id, 600, free, audit("t", "ticket"))
        .await
        .unwrap();
    // A running timer is not billed until it stops.
    ta.start_timer(t.id, time(tech, "100.00"), audit("t", "ticket"))
        .await
        .unwrap();
    ta.add_part(
        t.id,
        part("SSD", Quantity::parse("2").unwrap(), usd("89.99"), true),
        audit("t", "ticket"),
    )
    .await
    .unwrap();
    ta.add_part(
        t.id,
        part("screws", Quantity::ONE, usd("0.10"), false),
        audit("t", "ticket"),
    )
    .await
    .unwrap();

    let inv = ia
        .assemble_from_ticket(t.id, 1000, "t", a("invoice.assemble"))
        .await
        .unwrap();
    // 90 min at 100.00 = 150.00; 20 min = 33.333… → 33.33; 2 × 89.99 = 179.98.
    let expected = 15_000 + 3333 + 17_998;
    assert_eq!(inv.subtotal_minor, expected);
    // Tax 10 % per line: 15.00 + 3.33 + 18.00 (17.998 → 18.00).
    assert_eq!(inv.tax_minor, 1500 + 333 + 1800);
    assert_eq!(inv.total_minor, inv.subtotal_minor + inv.tax_minor);
    assert_eq!(inv.ticket_id, Some(t.id));
    let lines = ia.lines(inv.id).await.unwrap();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1].quantity_milli, 333, "20 minutes read as 0.333 h");
    // Not billed twice.
    assert!(matches!(
        ia.assemble_from_ticket(t.id, 0, "t", a("x")).await,
        Err(StoreError::Invalid(_))
    ));
    // Deleting the draft gives it back; a new draft bills the same.
    ia.delete_draft(inv.id, a("invoice.delete")).await.unwrap();
    let again = ia
        .assemble_from_ticket(t.id, 1000, "t", a("invoice.assemble"))
        .await
        .unwrap();
    assert_eq!(again.total_minor, inv.total_minor);
    // Issued then voided: the work is billable again for the corrected invoice.
    ia.issue(again.id, a("invoice.issue")).await.unwrap();
    ia.void(again.id, "wrong rate", a("invoice.void"))
        .await
        .unwrap();
    let corrected = ia
        .assemble_from_ticket(t.id, 0, "t", a("invoice.assemble"))
        .await
        .unwrap();
    assert_eq!(corrected.subtotal_minor, expected);
    // An invoiced ticket stays where it was billed.
    let admin = user(s, "admin@p.test", "Administrator", &[a_org, b_org]).await;
    assert!(matches!(
        ta.move_ticket(t.id, b_org, admin, audit("t", "ticket"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    // Another organization's ticket is not found.
    assert!(matches!(
        s.org(b_org)
            .invoices()
            .assemble_from_ticket(t.id, 0, "t", a("x"))
            .await,
        Err(StoreError::NotFound("ticket"))
    ));
}

/// Two store instances on one database issue 50 drafts each at once (100 concurrent issues,
/// every draft raced by both): every draft is issued exactly once, and the numbers are
/// exactly 1..=50, with no gap and no repeat.
async fn numbers_are_gap_free_under_concurrency(cx: Ctx) {
    let s = &cx.store;
    let (a_org, b_org) = crate::two_orgs(s).await;
    let other = s.reopen().await.unwrap();
    let mut drafts = Vec::new();
    for i in 0..50 {
        let org = if i % 2 == 0 { a_org } else { b_org };
        let inv = s.org(org).invoices();
        let d = inv
            .create_draft(usd_c(), None, None, "t", a("x"))
            .await
            .unwrap();
        inv.add_line(d.id, line(&format!("item {i}"), "1", "10", 0), a("x"))
            .await
            .unwrap();
        drafts.push((org, d.id));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (org, id) in drafts.iter().copied() {
        for store in [s.clone(), other.clone()] {
            tasks.spawn(async move {
                // Busy databases may ask us to retry; a conflict means the other won.
                for _ in 0..50 {
                    match store
                        .org(org)
                        .invoices()
                        .issue(id, a("invoice.issue"))
                        .await
                    {
                        Ok(i) => return Some(i.number),
                        Err(StoreError::Conflict(_)) => return None,
                        Err(StoreError::Unavailable(_)) => {
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                        Err(e) => panic!("issue failed: {e:?}"),
                    }
                }
                panic!("the database stayed busy");
            });
        }
    }
    let mut numbers = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Some(n) = r.unwrap() {
            numbers.push(n.unwrap());
        }
    }
    assert_eq!(numbers.len(), 50, "each draft issued exactly once");
    let set: BTreeSet<i64> = numbers.iter().copied().collect();
    assert_eq!(
        set,
        (1..=50).collect::<BTreeSet<_>>(),
        "gap-free, no repeats"
    );
    for (org, id) in drafts {
        let i = s.org(org).invoices().get_invoice(id).await.unwrap();
        assert_eq!(i.status, InvoiceStatus::Issued);
    }
    other.close().await;
}

/// What poppler's `pdftotext -bbox` reads from `pdf` (after `qpdf --check` finds it sound):
/// each word with its right edge, in points.
fn pdf_words(pdf: &[u8]) -> Vec<(String, f64)> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("invoice.pdf");
    std::fs::write(&file, pdf).unwrap();
    let check = std::process::Command::new("qpdf")
        .arg("--check")
        .arg(&file)
        .output()
        .expect("qpdf is installed (apt-get install qpdf)");
    assert!(check.status.success(), "qpdf --check");
    let out = std::process::Command::new("pdftotext")
        .args(["-enc", "UTF-8", "-bbox"])
        .arg(&file)
        .arg("-")
        .output()
        .expect("pdftotext is installed (apt-get install poppler-utils)");
    assert!(out.status.success(), "pdftotext");
    let html = String::from_utf8(out.stdout).unwrap();
    html.split("<word ")
        .skip(1)
        .map(|w| {
            let x_max: f64 = w
                .split("xMax=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap()
                .parse()
                .unwrap();
            let text = w
                .split_once('>')
                .and_then(|(_, r)| r.split_once("</word>"))
                .unwrap()
                .0
                .to_owned();
            (text, x_max)
        })
        .collect()
}

/// A 400-character line description, long notes and a long organization name wrap inside
/// their columns: every word comes back out of the PDF, the description spans several lines,
/// and no word reaches past the page's right margin (A4 landscape, 842 pt, 36 pt margins).
async fn long_text_wraps_in_invoice_and_quote_pdfs(cx: Ctx) {
    let s = &cx.store;
    let (a_org, _) = crate::two_orgs(s).await;
    let words: Vec<String> = (0..80).map(|i| format!("part{i:03}")).collect();
    let description: String = words.join(" ").chars().take(400).collect();
    assert_eq!(description.chars().count(), 400);
    let described: Vec<&str> = description.split_whitespace().collect();
    let notes: String = (0..40)
        .map(|i| format!("note{i:02}"))
        .collect::<Vec<_>>()
        .join(" ");
    let ia = s.org(a_org).invoices();
    let d = ia
        .create_draft(usd_c(), Some(&notes), None, "test", a("invoice.create"))
        .await
        .unwrap();
    ia.add_line(d.id, line(&description, "1", "10.00", 0), a("l"))
        .await
        .unwrap();
    // One unbroken 150-character word is broken where the line is full, never cut.
    let long_word = "x".repeat(150);
    ia.add_line(d.id, line(&long_word, "1", "1.00", 0), a("l"))
        .await
        .unwrap();
    let pdf = ia.pdf(d.id).await.unwrap();
    let printed = pdf_words(&pdf);
    let right = 842.0 - 36.0;
    for (w, x) in &printed {
        assert!(*x <= right + 0.5, "{w:?} ends at {x} pt, past {right}");
    }
    let texts: Vec<&str> = printed.iter().map(|(w, _)| w.as_str()).collect();
    for w in described
        .iter()
        .chain(notes.split(' ').collect::<Vec<_>>().iter())
    {
        assert!(texts.contains(w), "{w:?} is in the PDF");
    }
    let xs: String = texts
        .iter()
        .filter(|t| t.chars().all(|c| c == 'x'))
        .copied()
        .collect();
    assert_eq!(xs.len(), 150, "the long word, broken, all there");
    // Several lines: the description's words are laid out on more than one line.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("invoice.pdf");
    std::fs::write(&file, &pdf).unwrap();
    let layout = std::process::Command::new("pdftotext")
        .args(["-enc", "UTF-8", "-layout"])
        .arg(&file)
        .arg("-")
        .output()
        .unwrap();
    let lines = String::from_utf8(layout.stdout).unwrap();
    let spanned = lines
        .lines()
        .filter(|l| l.split_whitespace().any(|w| described.contains(&w)))
        .count();
    assert!(
        spanned >= 3,
        "the description spans {spanned} lines:\n{lines}"
    );

    // A quote's long text block wraps the same way.
    let qa = s.org(a_org).quotes();
    let q = qa
        .create_draft(
            "Wrapped",
            usd_c(),
            None,
            "test",
            audit("quote.create", "quote"),
        )
        .await
        .unwrap();
    qa.add_block(q.id, false, &description, audit("quote.add_block", "quote"))
        .await
        .unwrap();
    let printed = pdf_words(&qa.pdf(q.id).await.unwrap());
    for (w, x) in &printed {
        assert!(*x <= right + 0.5, "{w:?} ends at {x} pt, past {right}");
    }
    let texts: Vec<&str> = printed.iter().map(|(w, _)| w.as_str()).collect();
    for w in &described {
        assert!(texts.contains(w), "{w:?} is in the quote's PDF");
    }
}

breeze_store::on_both_backends!(
    long_text_wraps_in_invoice_and_quote_pdfs,
    drafts_issue_void_and_payments,
    assembled_from_a_ticket,
    numbers_are_gap_free_under_concurrency,
);
