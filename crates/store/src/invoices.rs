//! Invoices: drafts and their lines, assembly from a ticket's billable time and parts, issue
//! with the partner's next number, payments and voids.
//!
//! Amounts follow `breeze_core::money`: minor units beside an ISO 4217 code, one rounding per
//! line, totals the sums of the rounded lines. A draft's totals are recomputed from its lines
//! in the transaction that changes them. An invoice gets its number only when it is issued
//! ([`crate::OrgInvoices::issue`]): the partner's `invoice_counters` row is incremented in the
//! issuing transaction and stays locked until it commits, so two instances issuing at once
//! wait for each other, numbers increase in commit order, and a failed issue gives its number
//! back (no gaps). Issued invoices are frozen by trigger as well as by these methods: only
//! payments and a void change them, and a void keeps the number.

use breeze_core::{
    AuditEvent, Currency, InvoiceLineKind, InvoiceStatus, Money, OrgId, PartnerId, Quantity,
    Timestamp,
    money::{self, Totals},
    ticket::invoice_reference,
};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    Result, StoreError,
    alerts::check_text,
    audit, ledger,
    sql::{Sql, Tx, sql},
};

/// The largest page of invoices one listing returns.
pub const MAX_INVOICE_PAGE: u32 = 100;
/// The most lines one invoice holds.
pub(crate) const MAX_LINES: i64 = 500;
/// The longest line description, note or payment reference.
const MAX_TEXT: usize = 2000;

/// An invoice's header, with its totals.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Invoice {
    pub id: Uuid,
    pub org_id: OrgId,
    pub partner_id: PartnerId,
    /// Assigned at issue; a draft has none.
    pub number: Option<i64>,
    #[sqlx(try_from = "String")]
    pub status: InvoiceStatus,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub subtotal_minor: i64,
    pub tax_minor: i64,
    pub total_minor: i64,
    pub paid_minor: i64,
    pub notes: Option<String>,
    pub due_at: Option<Timestamp>,
    pub ticket_id: Option<Uuid>,
    pub issued_at: Option<Timestamp>,
    pub voided_at: Option<Timestamp>,
    pub void_reason: Option<String>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Invoice {
    /// `INV-000042`, once issued.
    pub fn reference(&self) -> Option<String> {
        self.number.map(invoice_reference)
    }

    pub fn total(&self) -> Money {
        Money::new(self.total_minor, self.currency)
    }

    /// What is still owed (nothing on a draft or a void).
    pub fn balance(&self) -> Money {
        match self.status {
            InvoiceStatus::Issued | InvoiceStatus::Paid => {
                Money::new(self.total_minor - self.paid_minor, self.currency)
            }
            InvoiceStatus::Draft | InvoiceStatus::Void => Money::zero(self.currency),
        }
    }
}

const INVOICE_COLUMNS: &str = "id, org_id, partner_id, number, status, currency, subtotal_minor, \
    tax_minor, total_minor, paid_minor, notes, due_at, ticket_id, issued_at, voided_at, \
    void_reason, created_by, created_at, updated_at";

/// One line of an invoice.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct InvoiceLine {
    pub id: Uuid,
    pub invoice_id: Uuid,
    pub position: i64,
    #[sqlx(try_from = "String")]
    pub kind: InvoiceLineKind,
    pub description: String,
    /// Thousandths. A time line's is its hours (to three places, for reading); its amount is
    /// computed from the exact minutes.
    pub quantity_milli: i64,
    pub unit_price_minor: i64,
    pub amount_minor: i64,
    /// Tax rate in basis points (`2000` = 20 %).
    pub tax_bp: i64,
    pub tax_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub time_entry_id: Option<Uuid>,
    pub part_id: Option<Uuid>,
    pub catalog_item_id: Option<Uuid>,
    pub contract_id: Option<Uuid>,
}

const LINE_COLUMNS: &str = "id, invoice_id, position, kind, description, quantity_milli, \
    unit_price_minor, amount_minor, tax_bp, tax_minor, currency, time_entry_id, part_id, \
    catalog_item_id, contract_id";

/// A manual line to add to a draft.
#[derive(Debug, Clone)]
pub struct NewLine {
    pub description: String,
    pub quantity: Quantity,
    pub unit_price: Money,
    pub tax_bp: u32,
}

/// A payment recorded against an issued invoice.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Payment {
    pub id: Uuid,
    pub invoice_id: Uuid,
    pub amount_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub method: String,
    pub reference: Option<String>,
    pub received_at: Timestamp,
    pub recorded_by: String,
    pub created_at: Timestamp,
    pub voided_at: Option<Timestamp>,
    pub void_reason: Option<String>,
}

const PAYMENT_COLUMNS: &str = "id, invoice_id, amount_minor, currency, method, reference, \
    received_at, recorded_by, created_at, voided_at, void_reason";

/// One page of invoices, newest first.
#[derive(Debug, Clone)]
pub struct InvoicePage {
    pub invoices: Vec<Invoice>,
    /// The id to pass as `before` for the next page.
    pub next_before: Option<Uuid>,
}

/// A line's values before it is stored; what it came from, if anything, is in `source`.
pub(crate) struct LineRow {
    pub(crate) kind: InvoiceLineKind,
    pub(crate) description: String,
    pub(crate) quantity: Quantity,
    pub(crate) unit_price: Money,
    pub(crate) amount: Money,
    pub(crate) tax_bp: u32,
    pub(crate) source: LineSource,
}

/// What an assembled draft bills: time entries and parts, the readable reference of each
/// one's ticket, the currency, and what it is assembled from (for messages).
struct Billable {
    entries: Vec<crate::TimeEntry>,
    parts: Vec<crate::TicketPart>,
    refs: std::collections::HashMap<Uuid, String>,
    currency: Currency,
    what: String,
}

/// The record an invoice line bills.
#[derive(Default, Clone, Copy)]
pub(crate) struct LineSource {
    pub(crate) time_entry: Option<Uuid>,
    pub(crate) part: Option<Uuid>,
    pub(crate) catalog_item: Option<Uuid>,
    pub(crate) contract: Option<Uuid>,
}

impl LineRow {
    /// A line of `quantity × unit_price` (rounded once), from `source`.
    pub(crate) fn priced(
        kind: InvoiceLineKind,
        description: String,
        quantity: Quantity,
        unit_price: Money,
        tax_bp: u32,
        source: LineSource,
    ) -> Result<Self> {
        let amount = money::line_amount(quantity, unit_price).map_err(ledger::money_err)?;
        Ok(Self {
            kind,
            description,
            quantity,
            unit_price,
            amount,
            tax_bp,
            source,
        })
    }
}

fn invoice_audit(
    audit: AuditEvent,
    org: OrgId,
    id: Uuid,
    details: serde_json::Value,
) -> AuditEvent {
    audit.org(org).resource(id).details(details)
}

impl crate::OrgInvoices<'_> {
    /// Opens an empty draft in `currency`.
    pub async fn create_draft(
        &self,
        currency: Currency,
        notes: Option<&str>,
        due_at: Option<Timestamp>,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<Invoice> {
        ledger::check_optional("notes", notes, MAX_TEXT)?;
        let id = self
            .insert_draft(currency, notes, due_at, None, created_by, audit, |_| {
                json!({})
            })
            .await?;
        self.get_invoice(id).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn insert_draft(
        &self,
        currency: Currency,
        notes: Option<&str>,
        due_at: Option<Timestamp>,
        ticket: Option<Uuid>,
        created_by: &str,
        audit: AuditEvent,
        details: impl FnOnce(Uuid) -> serde_json::Value,
    ) -> Result<Uuid> {
        let partner = self.whole().tenancy().partner_id().await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        insert_invoice(
            &mut tx, self.org, partner, id, currency, notes, due_at, ticket, created_by, now,
        )
        .await?;
        let mut d = details(id);
        d["currency"] = json!(currency);
        ledger::commit(tx, &invoice_audit(audit, self.org, id, d), now).await?;
        Ok(id)
    }

    /// One invoice of this organization.
    pub async fn get_invoice(&self, id: Uuid) -> Result<Invoice> {
        ledger::one(self, "invoices", INVOICE_COLUMNS, id, "invoice").await
    }

    /// The issued invoice of this organization with this number (`INV-000042` is 42).
    pub async fn invoice_by_number(&self, number: i64) -> Result<Invoice> {
        ledger::by_number(self, "invoices", INVOICE_COLUMNS, number, "invoice").await
    }

    async fn draft(&self, id: Uuid) -> Result<Invoice> {
        let inv = self.get_invoice(id).await?;
        if inv.status != InvoiceStatus::Draft {
            return Err(StoreError::Conflict(format!(
                "invoice {} is {}: an issued invoice never changes (void it and issue another)",
                inv.reference().unwrap_or_default(),
                inv.status
            )));
        }
        Ok(inv)
    }

    /// Invoices newest first, optionally of one status, `limit` of them before `before`.
    pub async fn list_invoices(
        &self,
        status: Option<InvoiceStatus>,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<InvoicePage> {
        let limit = limit.clamp(1, MAX_INVOICE_PAGE);
        let mut q: Sql = sql(format!(
            "SELECT {INVOICE_COLUMNS} FROM invoices WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(s) = status {
            let p = q.arg(s.as_str());
            q.push(&format!(" AND status = {p}"));
        }
        if let Some(b) = before {
            let p = q.arg(b);
            q.push(&format!(" AND id < {p}"));
        }
        let p = q.arg(i64::from(limit) + 1);
        q.push(&format!(" ORDER BY id DESC LIMIT {p}"));
        let (invoices, next_before) =
            ledger::page(q.fetch_all(self).await?, limit, |i: &Invoice| i.id);
        Ok(InvoicePage {
            invoices,
            next_before,
        })
    }

    /// An invoice's lines in order.
    pub async fn lines(&self, id: Uuid) -> Result<Vec<InvoiceLine>> {
        ledger::children(
            self,
            "invoice_lines",
            LINE_COLUMNS,
            "invoice_id",
            id,
            "position, id",
        )
        .await
    }

    /// An invoice's payments, voided ones included, oldest first.
    pub async fn payments(&self, id: Uuid) -> Result<Vec<Payment>> {
        ledger::children(
            self,
            "invoice_payments",
            PAYMENT_COLUMNS,
            "invoice_id",
            id,
            "created_at, id",
        )
        .await
    }

    /// Changes a draft's notes and due date.
    pub async fn update_draft(
        &self,
        id: Uuid,
        notes: Option<&str>,
        due_at: Option<Timestamp>,
        audit: AuditEvent,
    ) -> Result<Invoice> {
        ledger::check_optional("notes", notes, MAX_TEXT)?;
        let inv = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE invoices SET notes = $1, due_at = $2, updated_at = $3 WHERE id = $4 \
             AND org_id = $5 AND status = 'draft'",
        )
        .bind(notes.or(inv.notes.as_deref()))
        .bind(due_at.or(inv.due_at))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the invoice was issued meanwhile")?;
        let changed =
            audit::changed_fields([("notes", notes.is_some()), ("dueDate", due_at.is_some())]);
        ledger::commit(
            tx,
            &invoice_audit(audit, self.org, id, json!({ "changed": changed })),
            now,
        )
        .await?;
        self.get_invoice(id).await
    }

    /// Deletes a draft; the time and parts it billed become billable again.
    pub async fn delete_draft(&self, id: Uuid, audit: AuditEvent) -> Result<Invoice> {
        let inv = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        release_billed(&mut tx, self.org, id).await?;
        let n = sql("DELETE FROM invoices WHERE id = $1 AND org_id = $2 AND status = 'draft'")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        ledger::changed(n, "the invoice was issued meanwhile")?;
        ledger::commit(
            tx,
            &invoice_audit(audit, self.org, id, json!({ "total": inv.total() })),
            now,
        )
        .await?;
        Ok(inv)
    }

    /// Adds a manual line to a draft, in the draft's currency.
    pub async fn add_line(&self, id: Uuid, line: NewLine, audit: AuditEvent) -> Result<Invoice> {
        check_text("description", &line.description, MAX_TEXT)?;
        ledger::check_tax(line.tax_bp)?;
        let inv = self.draft(id).await?;
        if line.unit_price.currency != inv.currency {
            return Err(StoreError::Invalid(format!(
                "the invoice is in {}; a line in {} cannot be added",
                inv.currency, line.unit_price.currency
            )));
        }
        if line.quantity.0 == 0 {
            return Err(StoreError::Invalid(
                "a line's quantity cannot be zero".into(),
            ));
        }
        let row = LineRow::priced(
            InvoiceLineKind::Manual,
            line.description,
            line.quantity,
            line.unit_price,
            line.tax_bp,
            LineSource::default(),
        )?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let line_id = insert_lines(&mut tx, Doc::Invoice, self.org, id, vec![row]).await?;
        recompute(&mut tx, Doc::Invoice, self.org, id, inv.currency, now).await?;
        ledger::commit(
            tx,
            &invoice_audit(audit, self.org, id, json!({ "lineId": line_id.first() })),
            now,
        )
        .await?;
        self.get_invoice(id).await
    }

    /// Adds `quantity` of a catalog item (or bundle: one line at the bundle's price, its
    /// components named) to a draft, at this organization's price for it and the item's tax
    /// rate. The price must be in the draft's currency: currencies are never mixed.
    pub async fn add_catalog_line(
        &self,
        id: Uuid,
        item: Uuid,
        quantity: Quantity,
        audit: AuditEvent,
    ) -> Result<Invoice> {
        let inv = self.draft(id).await?;
        let row = self
            .whole()
            .catalog()
            .line(item, quantity, inv.currency)
            .await?;
        let price = row.unit_price;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let line_id = insert_lines(&mut tx, Doc::Invoice, self.org, id, vec![row]).await?;
        recompute(&mut tx, Doc::Invoice, self.org, id, inv.currency, now).await?;
        let details = json!({ "lineId": line_id.first(), "catalogItemId": item, "price": price });
        ledger::commit(tx, &invoice_audit(audit, self.org, id, details), now).await?;
        self.get_invoice(id).await
    }

    /// Adds a contract's lines to a draft, one line each at the contract's price and tax rate
    /// (an extra charge outside its billing periods, or a first partial period). The
    /// contract must be in the draft's currency, have lines, and not be cancelled.
    pub async fn add_contract_lines(
        &self,
        id: Uuid,
        contract: Uuid,
        audit: AuditEvent,
    ) -> Result<Invoice> {
        let inv = self.draft(id).await?;
        let contracts = self.whole().contracts();
        let c = contracts.get_contract(contract).await?;
        if c.status == breeze_core::ContractStatus::Cancelled {
            return Err(StoreError::Conflict("the contract is cancelled".into()));
        }
        if c.currency != inv.currency {
            return Err(StoreError::Invalid(format!(
                "the invoice is in {}; the contract bills in {}",
                inv.currency, c.currency
            )));
        }
        let tax_bp = u32::try_from(c.tax_bp).map_err(|_| StoreError::Corrupt("tax rate".into()))?;
        let mut rows = Vec::new();
        for l in contracts.lines(contract).await? {
            rows.push(LineRow::priced(
                InvoiceLineKind::Contract,
                format!("{}: {}", c.name, l.description)
                    .chars()
                    .take(MAX_TEXT)
                    .collect(),
                Quantity(l.quantity_milli),
                Money::new(l.unit_price_minor, l.currency),
                tax_bp,
                LineSource {
                    catalog_item: l.catalog_item_id,
                    contract: Some(contract),
                    ..LineSource::default()
                },
            )?);
        }
        if rows.is_empty() {
            return Err(StoreError::Invalid("the contract has no lines".into()));
        }
        let count = rows.len();
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        insert_lines(&mut tx, Doc::Invoice, self.org, id, rows).await?;
        let totals = recompute(&mut tx, Doc::Invoice, self.org, id, inv.currency, now).await?;
        let details = json!({ "contractId": contract, "contract": c.name, "lines": count,
                              "total": totals.total });
        ledger::commit(tx, &invoice_audit(audit, self.org, id, details), now).await?;
        self.get_invoice(id).await
    }

    /// Removes a line from a draft; the time or part it billed becomes billable again.
    pub async fn remove_line(&self, id: Uuid, line: Uuid, audit: AuditEvent) -> Result<Invoice> {
        let inv = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        for table in ["ticket_time_entries", "ticket_parts"] {
            let column = if table == "ticket_parts" {
                "part_id"
            } else {
                "time_entry_id"
            };
            sql(format!(
                "UPDATE {table} SET invoice_id = NULL WHERE org_id = $1 AND id = \
                 (SELECT {column} FROM invoice_lines WHERE id = $2 AND invoice_id = $3 \
                 AND org_id = $1)"
            ))
            .bind(self.org)
            .bind(line)
            .bind(id)
            .execute(&mut tx)
            .await?;
        }
        let n = sql("DELETE FROM invoice_lines WHERE id = $1 AND invoice_id = $2 AND org_id = $3")
            .bind(line)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound("invoice line"));
        }
        recompute(&mut tx, Doc::Invoice, self.org, id, inv.currency, now).await?;
        ledger::commit(
            tx,
            &invoice_audit(audit, self.org, id, json!({ "lineId": line })),
            now,
        )
        .await?;
        self.get_invoice(id).await
    }

    /// Assembles a draft from a ticket's billable time entries (finished, not yet invoiced)
    /// and billable parts: one line each, every one taxed at `tax_bp`. A time line's amount
    /// is `minutes × hourly rate / 60`, a part's `quantity × unit price`, each rounded once.
    /// All of it must be in one currency; nothing billable is an error. What the draft bills
    /// is marked as invoiced, so it is not billed twice; deleting the draft or removing the
    /// line gives it back.
    pub async fn assemble_from_ticket(
        &self,
        ticket: Uuid,
        tax_bp: u32,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<Invoice> {
        ledger::check_tax(tax_bp)?;
        let tickets = self.whole().tickets();
        let t = tickets.get_ticket(ticket).await?;
        let entries: Vec<_> = tickets
            .time_entries(ticket)
            .await?
            .into_iter()
            .filter(|e| e.billable && e.invoice_id.is_none() && e.ended_at.is_some())
            .collect();
        let parts: Vec<_> = tickets
            .parts(ticket)
            .await?
            .into_iter()
            .filter(|p| p.billable && p.invoice_id.is_none())
            .collect();
        let what = format!("ticket {}", t.reference());
        let currency = match (entries.first(), parts.first()) {
            (Some(e), _) => e.currency,
            (None, Some(p)) => p.currency,
            (None, None) => {
                return Err(StoreError::Invalid(format!(
                    "{what} has no billable time or parts that are not invoiced"
                )));
            }
        };
        let refs = [(t.id, t.reference())].into_iter().collect();
        let details = json!({ "ticket": t.reference(), "ticketId": ticket });
        self.assemble(
            Billable {
                entries,
                parts,
                refs,
                currency,
                what,
            },
            Some(ticket),
            tax_bp,
            created_by,
            (audit, details),
        )
        .await
    }

    /// Assembles a draft from what the organization's tickets have to bill in `[start, end)`:
    /// billable time entries that ended then and billable parts recorded then, not yet
    /// invoiced, priced as [`Self::assemble_from_ticket`] prices them. Only `currency`'s are
    /// taken (the others wait for their own invoice); without it, everything must be in one
    /// currency. The period's end is exclusive, so consecutive periods never bill twice.
    pub async fn assemble_from_period(
        &self,
        start: Timestamp,
        end: Timestamp,
        currency: Option<Currency>,
        tax_bp: u32,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<Invoice> {
        ledger::check_tax(tax_bp)?;
        if end <= start {
            return Err(StoreError::Invalid(
                "a billable period ends after it starts".into(),
            ));
        }
        let tickets = self.whole().tickets();
        let (mut entries, mut parts) = tickets.billable_in(start, end).await?;
        let what = format!(
            "the period {} to {}",
            start.format("%Y-%m-%d"),
            end.format("%Y-%m-%d")
        );
        let currency = match (currency, entries.first(), parts.first()) {
            (Some(c), _, _) => c,
            (None, Some(e), _) => e.currency,
            (None, None, Some(p)) => p.currency,
            (None, None, None) => {
                return Err(StoreError::Invalid(format!(
                    "{what} has no billable time or parts that are not invoiced"
                )));
            }
        };
        entries.retain(|e| e.currency == currency);
        parts.retain(|p| p.currency == currency);
        if entries.is_empty() && parts.is_empty() {
            return Err(StoreError::Invalid(format!(
                "{what} has nothing billable in {currency} that is not invoiced"
            )));
        }
        let mut refs = std::collections::HashMap::new();
        for id in entries
            .iter()
            .map(|e| e.ticket_id)
            .chain(parts.iter().map(|p| p.ticket_id))
        {
            if let std::collections::hash_map::Entry::Vacant(v) = refs.entry(id) {
                v.insert(tickets.get_ticket(id).await?.reference());
            }
        }
        let details = json!({ "periodStart": start, "periodEnd": end });
        self.assemble(
            Billable {
                entries,
                parts,
                refs,
                currency,
                what,
            },
            None,
            tax_bp,
            created_by,
            (audit, details),
        )
        .await
    }

    /// Opens a draft billing `b` — one line per time entry and part, each taxed at `tax_bp` —
    /// and marks each as invoiced, conditionally, so two assemblies at once cannot both bill
    /// one (the second is a conflict and opens nothing).
    async fn assemble(
        &self,
        b: Billable,
        ticket: Option<Uuid>,
        tax_bp: u32,
        created_by: &str,
        (audit, mut details): (AuditEvent, serde_json::Value),
    ) -> Result<Invoice> {
        let Billable {
            entries,
            parts,
            refs,
            currency,
            what,
        } = b;
        let reference = |ticket: Uuid| refs.get(&ticket).cloned().unwrap_or_default();
        let mut rows = Vec::new();
        for e in &entries {
            let minutes = e.minutes.unwrap_or(0);
            let amount = money::time_amount(minutes, e.rate()).map_err(ledger::money_err)?;
            let hours =
                Quantity(i64::try_from((i128::from(minutes) * 1000 + 30) / 60).unwrap_or(i64::MAX));
            rows.push(LineRow {
                kind: InvoiceLineKind::Time,
                description: format!(
                    "{}: {minutes} min by {}{}",
                    reference(e.ticket_id),
                    e.actor,
                    e.note
                        .as_deref()
                        .map(|n| format!(" — {}", n.chars().take(200).collect::<String>()))
                        .unwrap_or_default()
                ),
                quantity: hours,
                unit_price: e.rate(),
                amount,
                tax_bp,
                source: LineSource {
                    time_entry: Some(e.id),
                    ..LineSource::default()
                },
            });
        }
        for p in &parts {
            rows.push(LineRow::priced(
                InvoiceLineKind::Part,
                format!("{}: {}", reference(p.ticket_id), p.description),
                p.quantity(),
                p.unit_price(),
                tax_bp,
                LineSource {
                    part: Some(p.id),
                    ..LineSource::default()
                },
            )?);
        }
        if let Some(other) = rows.iter().find(|r| r.amount.currency != currency) {
            return Err(StoreError::Invalid(format!(
                "{what} bills in {currency} and {}: assemble one currency per invoice",
                other.amount.currency
            )));
        }
        let partner = self.whole().tenancy().partner_id().await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        insert_invoice(
            &mut tx, self.org, partner, id, currency, None, None, ticket, created_by, now,
        )
        .await?;
        for (table, ids) in [
            (
                "ticket_time_entries",
                entries.iter().map(|e| e.id).collect::<Vec<_>>(),
            ),
            ("ticket_parts", parts.iter().map(|p| p.id).collect()),
        ] {
            for item in ids {
                // Conditional, so two assemblies at once cannot both bill it.
                let n = sql(format!(
                    "UPDATE {table} SET invoice_id = $1 WHERE id = $2 AND org_id = $3 \
                     AND invoice_id IS NULL"
                ))
                .bind(id)
                .bind(item)
                .bind(self.org)
                .execute(&mut tx)
                .await?;
                ledger::changed(
                    n,
                    "the ticket's time or parts were invoiced meanwhile; try again",
                )?;
            }
        }
        let count = rows.len();
        insert_lines(&mut tx, Doc::Invoice, self.org, id, rows).await?;
        let totals = recompute(&mut tx, Doc::Invoice, self.org, id, currency, now).await?;
        details["lines"] = json!(count);
        details["timeEntries"] = json!(entries.len());
        details["parts"] = json!(parts.len());
        details["total"] = json!(totals.total);
        ledger::commit(tx, &invoice_audit(audit, self.org, id, details), now).await?;
        self.get_invoice(id).await
    }

    /// Issues a draft: it takes the partner's next invoice number and never changes again.
    /// An empty draft is refused; a draft issued meanwhile (by another instance) is a
    /// conflict, and the number this attempt took is given back.
    pub async fn issue(&self, id: Uuid, audit: AuditEvent) -> Result<Invoice> {
        let inv = self.draft(id).await?;
        let lines: i64 =
            sql("SELECT COUNT(*) FROM invoice_lines WHERE invoice_id = $1 AND org_id = $2")
                .bind(id)
                .bind(self.org)
                .fetch_scalar(self)
                .await?;
        if lines == 0 {
            return Err(StoreError::Invalid(
                "an invoice without lines cannot be issued".into(),
            ));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let number = ledger::next_number(&mut tx, "invoice_counters", inv.partner_id).await?;
        let n = sql(
            "UPDATE invoices SET status = 'issued', number = $1, issued_at = $2, updated_at = $2 \
             WHERE id = $3 AND org_id = $4 AND status = 'draft'",
        )
        .bind(number)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            // Dropping the transaction rolls the counter back: the number is not spent.
            return Err(StoreError::Conflict(
                "the invoice was issued or deleted meanwhile".into(),
            ));
        }
        let details = json!({ "number": invoice_reference(number), "total": inv.total() });
        ledger::commit(tx, &invoice_audit(audit, self.org, id, details), now).await?;
        self.get_invoice(id).await
    }

    /// Voids an issued invoice with no live payments; it keeps its number, and the time and
    /// parts it billed become billable again (for the corrected invoice).
    pub async fn void(&self, id: Uuid, reason: &str, audit: AuditEvent) -> Result<Invoice> {
        check_text("reason", reason, MAX_TEXT)?;
        let inv = self.get_invoice(id).await?;
        match inv.status {
            InvoiceStatus::Issued if inv.paid_minor == 0 => {}
            InvoiceStatus::Issued | InvoiceStatus::Paid => {
                return Err(StoreError::Conflict(
                    "the invoice has payments: void them first".into(),
                ));
            }
            InvoiceStatus::Draft => {
                return Err(StoreError::Conflict(
                    "a draft is deleted, not voided".into(),
                ));
            }
            InvoiceStatus::Void => {
                return Err(StoreError::Conflict("the invoice is void already".into()));
            }
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE invoices SET status = 'void', voided_at = $1, void_reason = $2, \
             updated_at = $1 WHERE id = $3 AND org_id = $4 AND status = 'issued' \
             AND paid_minor = 0",
        )
        .bind(now)
        .bind(reason)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the invoice changed meanwhile")?;
        release_billed(&mut tx, self.org, id).await?;
        let details = json!({ "number": inv.reference(), "reason": reason, "total": inv.total() });
        ledger::commit(tx, &invoice_audit(audit, self.org, id, details), now).await?;
        self.get_invoice(id).await
    }

    /// Records a payment against an issued invoice, in its currency and no more than its
    /// balance; a payment that settles it makes it paid.
    pub async fn record_payment(
        &self,
        id: Uuid,
        amount: Money,
        method: &str,
        reference: Option<&str>,
        recorded_by: &str,
        audit: AuditEvent,
    ) -> Result<Payment> {
        check_text("method", method, 50)?;
        ledger::check_optional("reference", reference, MAX_TEXT)?;
        let inv = self.get_invoice(id).await?;
        payable(&inv, amount)?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let (pid, status) =
            insert_payment(&mut tx, &inv, amount, method, reference, recorded_by, now).await?;
        let details = json!({
            "number": inv.reference(), "paymentId": pid, "amount": amount, "method": method,
            "status": status,
        });
        ledger::commit(tx, &invoice_audit(audit, self.org, id, details), now).await?;
        self.payments(id)
            .await?
            .into_iter()
            .find(|p| p.id == pid)
            .ok_or(StoreError::NotFound("payment"))
    }

    /// Voids a payment: the invoice owes its amount again (a paid invoice is issued again).
    pub async fn void_payment(
        &self,
        id: Uuid,
        payment: Uuid,
        reason: &str,
        audit: AuditEvent,
    ) -> Result<Payment> {
        check_text("reason", reason, MAX_TEXT)?;
        let inv = self.get_invoice(id).await?;
        let p = self
            .payments(id)
            .await?
            .into_iter()
            .find(|p| p.id == payment)
            .ok_or(StoreError::NotFound("payment"))?;
        if p.voided_at.is_some() {
            return Err(StoreError::Conflict("the payment is void already".into()));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE invoice_payments SET voided_at = $1, void_reason = $2 WHERE id = $3 \
             AND invoice_id = $4 AND org_id = $5 AND voided_at IS NULL",
        )
        .bind(now)
        .bind(reason)
        .bind(payment)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        let m = sql(
            "UPDATE invoices SET paid_minor = paid_minor - $1, status = 'issued', updated_at = $2 \
             WHERE id = $3 AND org_id = $4 AND status IN ('issued', 'paid') AND paid_minor >= $1",
        )
        .bind(p.amount_minor)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        ledger::changed(n.min(m), "the payment or invoice changed meanwhile")?;
        let details = json!({
            "number": inv.reference(), "paymentId": payment, "reason": reason,
            "amount": Money::new(p.amount_minor, p.currency),
        });
        ledger::commit(tx, &invoice_audit(audit, self.org, id, details), now).await?;
        self.payments(id)
            .await?
            .into_iter()
            .find(|p| p.id == payment)
            .ok_or(StoreError::NotFound("payment"))
    }
}

/// Whether `amount` can be paid against `inv`: an issued, unpaid invoice, in its currency, more
/// than zero and at most its balance.
pub(crate) fn payable(inv: &Invoice, amount: Money) -> Result<()> {
    if inv.status != InvoiceStatus::Issued {
        return Err(StoreError::Conflict(format!(
            "payments are recorded against issued, unpaid invoices; this one is {}",
            inv.status
        )));
    }
    if amount.currency != inv.currency {
        return Err(StoreError::Invalid(format!(
            "the invoice is in {}, the payment in {}",
            inv.currency, amount.currency
        )));
    }
    let balance = inv.balance();
    if amount.minor <= 0 || amount.minor > balance.minor {
        return Err(StoreError::Invalid(format!(
            "a payment is more than zero and at most the balance, {balance}"
        )));
    }
    Ok(())
}

/// Records `amount` paid against `inv` (an issued invoice, read before `tx`) in `tx`: the
/// payment row, and the invoice's paid amount and status, conditionally on the paid amount
/// read (a concurrent payment makes this a conflict). Returns the payment's id and the
/// invoice's new status.
pub(crate) async fn insert_payment(
    tx: &mut Tx,
    inv: &Invoice,
    amount: Money,
    method: &str,
    reference: Option<&str>,
    recorded_by: &str,
    now: Timestamp,
) -> Result<(Uuid, InvoiceStatus)> {
    let paid = inv.paid_minor + amount.minor;
    let status = if paid == inv.total_minor {
        InvoiceStatus::Paid
    } else {
        InvoiceStatus::Issued
    };
    let pid = Uuid::now_v7();
    let n = sql(
        "UPDATE invoices SET paid_minor = $1, status = $2, updated_at = $3 WHERE id = $4 \
         AND org_id = $5 AND paid_minor = $6 AND status = 'issued'",
    )
    .bind(paid)
    .bind(status.as_str())
    .bind(now)
    .bind(inv.id)
    .bind(inv.org_id)
    .bind(inv.paid_minor)
    .execute(&mut *tx)
    .await?;
    ledger::changed(n, "the invoice changed meanwhile; read it again")?;
    sql(format!(
        "INSERT INTO invoice_payments (org_id, {PAYMENT_COLUMNS}) VALUES ($1, $2, $3, $4, \
         $5, $6, $7, $8, $9, $10, $11, $12)"
    ))
    .bind(inv.org_id)
    .bind(pid)
    .bind(inv.id)
    .bind(amount.minor)
    .bind(amount.currency.code())
    .bind(method)
    .bind(reference)
    .bind(now)
    .bind(recorded_by)
    .bind(now)
    .bind(None::<Timestamp>)
    .bind(None::<String>)
    .execute(&mut *tx)
    .await?;
    Ok((pid, status))
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn insert_invoice(
    tx: &mut Tx,
    org: OrgId,
    partner: PartnerId,
    id: Uuid,
    currency: Currency,
    notes: Option<&str>,
    due_at: Option<Timestamp>,
    ticket: Option<Uuid>,
    created_by: &str,
    now: Timestamp,
) -> Result<()> {
    sql(format!(
        "INSERT INTO invoices ({INVOICE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
         $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
    ))
    .bind(id)
    .bind(org)
    .bind(partner)
    .bind(None::<i64>)
    .bind(InvoiceStatus::Draft.as_str())
    .bind(currency.code())
    .bind(0i64)
    .bind(0i64)
    .bind(0i64)
    .bind(0i64)
    .bind(notes)
    .bind(due_at)
    .bind(ticket)
    .bind(None::<Timestamp>)
    .bind(None::<Timestamp>)
    .bind(None::<String>)
    .bind(created_by)
    .bind(now)
    .bind(now)
    .execute(tx)
    .await?;
    Ok(())
}

/// A priced document with lines: an invoice or a quote. Their lines are priced, taxed and
/// summed the same way, by [`insert_lines`] and [`recompute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doc {
    Invoice,
    Quote,
}

impl Doc {
    fn header(self) -> &'static str {
        match self {
            Doc::Invoice => "invoices",
            Doc::Quote => "quotes",
        }
    }

    fn lines(self) -> &'static str {
        match self {
            Doc::Invoice => "invoice_lines",
            Doc::Quote => "quote_lines",
        }
    }

    fn parent(self) -> &'static str {
        match self {
            Doc::Invoice => "invoice_id",
            Doc::Quote => "quote_id",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Doc::Invoice => "invoice",
            Doc::Quote => "quote",
        }
    }
}

/// Appends `rows` after the document's last line; returns their ids.
pub(crate) async fn insert_lines(
    tx: &mut Tx,
    doc: Doc,
    org: OrgId,
    parent: Uuid,
    rows: Vec<LineRow>,
) -> Result<Vec<Uuid>> {
    let (table, column) = (doc.lines(), doc.parent());
    let (count, last): (i64, Option<i64>) = sql(format!(
        "SELECT COUNT(*), MAX(position) FROM {table} WHERE {column} = $1 AND org_id = $2"
    ))
    .bind(parent)
    .bind(org)
    .fetch_optional(&mut *tx)
    .await?
    .unwrap_or((0, None));
    if count + rows.len() as i64 > MAX_LINES {
        return Err(StoreError::Invalid(format!(
            "a{} {} holds at most {MAX_LINES} lines",
            if doc == Doc::Invoice { "n" } else { "" },
            doc.name()
        )));
    }
    let mut position = last.unwrap_or(0);
    let mut ids = Vec::new();
    for r in rows {
        position += 1;
        let tax = money::tax_amount(r.amount, r.tax_bp).map_err(ledger::money_err)?;
        let id = Uuid::now_v7();
        // A quote's line names only the catalog item it came from; an invoice's whatever
        // it bills.
        let (sources, placeholders) = match doc {
            Doc::Invoice => (
                "time_entry_id, part_id, catalog_item_id, contract_id",
                "$13, $14, $15, $16",
            ),
            Doc::Quote => ("catalog_item_id", "$13"),
        };
        let q = sql(format!(
            "INSERT INTO {table} (org_id, id, {column}, position, kind, description, \
             quantity_milli, unit_price_minor, amount_minor, tax_bp, tax_minor, currency, \
             {sources}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             {placeholders})"
        ))
        .bind(org)
        .bind(id)
        .bind(parent)
        .bind(position)
        .bind(r.kind.as_str())
        .bind(r.description.as_str())
        .bind(r.quantity.0)
        .bind(r.unit_price.minor)
        .bind(r.amount.minor)
        .bind(i64::from(r.tax_bp))
        .bind(tax.minor)
        .bind(r.amount.currency.code());
        let q = match doc {
            Doc::Invoice => q
                .bind(r.source.time_entry)
                .bind(r.source.part)
                .bind(r.source.catalog_item)
                .bind(r.source.contract),
            Doc::Quote => q.bind(r.source.catalog_item),
        };
        q.execute(&mut *tx).await?;
        ids.push(id);
    }
    Ok(ids)
}

/// Recomputes a draft document's totals from its lines (in `tx`, so they commit together).
pub(crate) async fn recompute(
    tx: &mut Tx,
    doc: Doc,
    org: OrgId,
    parent: Uuid,
    currency: Currency,
    now: Timestamp,
) -> Result<Totals> {
    let rows: Vec<(i64, i64, String)> = sql(format!(
        "SELECT amount_minor, tax_minor, currency FROM {} WHERE {} = $1 AND org_id = $2",
        doc.lines(),
        doc.parent()
    ))
    .bind(parent)
    .bind(org)
    .fetch_all(&mut *tx)
    .await?;
    let mut pairs = Vec::with_capacity(rows.len());
    for (amount, tax, code) in rows {
        let c = Currency::parse(&code).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        pairs.push((Money::new(amount, c), Money::new(tax, c)));
    }
    let totals = Totals::of(currency, pairs).map_err(ledger::money_err)?;
    let n = sql(format!(
        "UPDATE {} SET subtotal_minor = $1, tax_minor = $2, total_minor = $3, \
         updated_at = $4 WHERE id = $5 AND org_id = $6 AND status = 'draft'",
        doc.header()
    ))
    .bind(totals.subtotal.minor)
    .bind(totals.tax.minor)
    .bind(totals.total.minor)
    .bind(now)
    .bind(parent)
    .bind(org)
    .execute(&mut *tx)
    .await?;
    ledger::changed(n, &format!("the {} is no longer a draft", doc.name()))?;
    Ok(totals)
}

/// Makes what invoice `invoice` billed billable again.
async fn release_billed(tx: &mut Tx, org: OrgId, invoice: Uuid) -> Result<()> {
    for table in ["ticket_time_entries", "ticket_parts"] {
        sql(format!(
            "UPDATE {table} SET invoice_id = NULL WHERE invoice_id = $1 AND org_id = $2"
        ))
        .bind(invoice)
        .bind(org)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}
