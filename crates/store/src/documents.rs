//! Invoices and quotes as PDF documents, set by the report engine's writer ([`crate::pdf`]):
//! the same Unicode font (embedded, searchable), one row per line — description, quantity,
//! unit price, amount, tax — then the totals (and, for an invoice, what was paid and what is
//! owed); a quote's headings and text come first. Amounts print as their exact decimals with
//! the currency, as stored: nothing is recomputed here. Long descriptions, the title (the
//! organization's name) and notes wrap within their column instead of being cut.

use breeze_core::{Money, Quantity};
use uuid::Uuid;

use crate::{Result, pdf::PdfTable};

const COLUMNS: [&str; 5] = ["description", "quantity", "unit price", "amount", "tax"];

/// One printed row.
type Row = [String; 5];

fn money(minor: i64, currency: breeze_core::Currency) -> String {
    Money::new(minor, currency).to_string()
}

/// A line's row: `(description, quantity in thousandths, unit price, amount, tax)`.
fn line_row(
    description: &str,
    quantity_milli: i64,
    [unit, amount, tax]: [i64; 3],
    currency: breeze_core::Currency,
) -> Row {
    [
        description.to_owned(),
        Quantity(quantity_milli).decimal(),
        money(unit, currency),
        money(amount, currency),
        money(tax, currency),
    ]
}

/// A totals row: `label` under the unit price, `amount` under the amount.
fn total_row(label: &str, amount: String) -> Row {
    [
        String::new(),
        String::new(),
        label.to_owned(),
        amount,
        String::new(),
    ]
}

impl crate::Store {
    fn document(&self, title: &str, rows: Vec<Row>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut pdf = PdfTable::start_wrapping(&mut out, title, &COLUMNS, self.pdf_font.font());
        let n = rows.len();
        for r in rows {
            pdf.wrapped_row(&mut out, &r);
        }
        pdf.finish(&mut out, i64::try_from(n).unwrap_or(i64::MAX));
        out
    }
}

impl crate::OrgInvoices<'_> {
    /// The invoice as a PDF: its number (or "draft"), the organization, its lines and totals,
    /// what was paid and what is owed.
    pub async fn pdf(&self, id: Uuid) -> Result<Vec<u8>> {
        let inv = self.get_invoice(id).await?;
        let org = self.whole().tenancy().organization().await?;
        let c = inv.currency;
        let mut rows: Vec<Row> = self
            .lines(id)
            .await?
            .iter()
            .map(|l| {
                line_row(
                    &l.description,
                    l.quantity_milli,
                    [l.unit_price_minor, l.amount_minor, l.tax_minor],
                    c,
                )
            })
            .collect();
        rows.push(Default::default());
        rows.push(total_row("Subtotal", money(inv.subtotal_minor, c)));
        rows.push(total_row("Tax", money(inv.tax_minor, c)));
        rows.push(total_row("Total", money(inv.total_minor, c)));
        rows.push(total_row("Paid", money(inv.paid_minor, c)));
        rows.push(total_row("Balance", inv.balance().to_string()));
        if let Some(notes) = inv.notes.as_deref().filter(|n| !n.trim().is_empty()) {
            rows.push(Default::default());
            rows.push([
                format!("Notes: {notes}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
        let title = format!(
            "Invoice {} — {} — {}{}{}",
            inv.reference().unwrap_or_else(|| "(draft)".into()),
            org.name,
            inv.status,
            inv.issued_at
                .map(|t| format!(", issued {}", t.format("%Y-%m-%d")))
                .unwrap_or_default(),
            inv.due_at
                .map(|t| format!(", due {}", t.format("%Y-%m-%d")))
                .unwrap_or_default(),
        );
        Ok(self.store.document(&title, rows))
    }
}

impl crate::OrgQuotes<'_> {
    /// The quote as a PDF: its number and title, its headings and text, its lines and totals.
    pub async fn pdf(&self, id: Uuid) -> Result<Vec<u8>> {
        let q = self.get_quote(id).await?;
        let org = self.whole().tenancy().organization().await?;
        let c = q.currency;
        let mut rows: Vec<Row> = Vec::new();
        for b in self.blocks(id).await? {
            // Each paragraph a row of its own, wrapped within the description column.
            for (i, para) in b.body.lines().enumerate() {
                let text = if b.kind == "heading" && i == 0 {
                    para.to_uppercase()
                } else {
                    para.to_owned()
                };
                rows.push([
                    text,
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
            }
            rows.push(Default::default());
        }
        for l in self.lines(id).await? {
            rows.push(line_row(
                &l.description,
                l.quantity_milli,
                [l.unit_price_minor, l.amount_minor, l.tax_minor],
                c,
            ));
        }
        rows.push(Default::default());
        rows.push(total_row("Subtotal", money(q.subtotal_minor, c)));
        rows.push(total_row("Tax", money(q.tax_minor, c)));
        rows.push(total_row("Total", money(q.total_minor, c)));
        let title = format!(
            "Quote {} — {} — {} ({}){}",
            q.reference(),
            q.title,
            org.name,
            q.status,
            q.valid_until
                .map(|t| format!(", valid until {}", t.format("%Y-%m-%d")))
                .unwrap_or_default(),
        );
        Ok(self.store.document(&title, rows))
    }
}
