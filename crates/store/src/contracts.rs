//! Recurring contracts: their lines, lifecycle (draft, active, paused, cancelled) and the
//! billing periods that turn into draft invoices when they close.
//!
//! A period is billed in arrears: once `next_period_at + period length` has passed, the period
//! worker calls [`Store::bill_closed_periods`], which for each such period moves
//! `next_period_at` forward *conditionally on the value it read*, records the period and opens
//! the draft invoice, all in one transaction. A second instance racing for the same period
//! finds `next_period_at` moved (PostgreSQL re-evaluates the condition after the first
//! commits; SQLite serializes writers) and bills nothing, and `(contract_id, starts_at)` is
//! unique besides: exactly one draft per closed period. Lines may change while the contract
//! runs; a period bills the lines as they stand when it closes.

use breeze_core::{
    Actor, AuditEvent, BillingPeriod, ContractStatus, Currency, InvoiceLineKind, Money, OrgId,
    PartnerId, Quantity, Timestamp, money,
};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    Result, Store, StoreError,
    alerts::check_text,
    invoices::{Doc, LineRow, LineSource, insert_invoice, insert_lines, recompute},
    ledger,
    sql::{Sql, Tx, sql},
};

/// The largest page of contracts one listing returns.
pub const MAX_CONTRACT_PAGE: u32 = 100;
/// The most lines one contract holds.
const MAX_CONTRACT_LINES: i64 = 200;
/// The longest name, line description or note.
const MAX_TEXT: usize = 2000;
/// The most periods one worker round bills (the rest wait for the next round).
const MAX_PERIODS_PER_ROUND: i64 = 500;

/// A contract's header.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Contract {
    pub id: Uuid,
    pub org_id: OrgId,
    pub partner_id: PartnerId,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub status: ContractStatus,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    #[sqlx(try_from = "String")]
    pub billing_period: BillingPeriod,
    pub tax_bp: i64,
    pub notes: Option<String>,
    pub starts_at: Timestamp,
    /// The start of the first period not yet billed.
    pub next_period_at: Timestamp,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub activated_at: Option<Timestamp>,
    pub cancelled_at: Option<Timestamp>,
}

const CONTRACT_COLUMNS: &str = "id, org_id, partner_id, name, status, currency, billing_period, \
    tax_bp, notes, starts_at, next_period_at, created_by, created_at, updated_at, activated_at, \
    cancelled_at";

/// One recurring line of a contract.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ContractLine {
    pub id: Uuid,
    pub contract_id: Uuid,
    pub position: i64,
    pub description: String,
    pub quantity_milli: i64,
    pub unit_price_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub catalog_item_id: Option<Uuid>,
}

const CONTRACT_LINE_COLUMNS: &str = "id, contract_id, position, description, quantity_milli, \
    unit_price_minor, currency, catalog_item_id";

/// A billed period.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ContractPeriod {
    pub id: Uuid,
    pub contract_id: Uuid,
    pub starts_at: Timestamp,
    pub ends_at: Timestamp,
    /// The draft it opened (absent once that draft is deleted).
    pub invoice_id: Option<Uuid>,
    pub total_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub created_at: Timestamp,
}

const PERIOD_COLUMNS: &str =
    "id, contract_id, starts_at, ends_at, invoice_id, total_minor, currency, created_at";

/// A contract to draft.
#[derive(Debug, Clone)]
pub struct NewContract {
    pub name: String,
    pub currency: Currency,
    pub billing_period: BillingPeriod,
    pub tax_bp: u32,
    pub notes: Option<String>,
    pub starts_at: Timestamp,
    pub created_by: String,
}

/// Changes to a draft; `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct ContractUpdate {
    pub name: Option<String>,
    pub billing_period: Option<BillingPeriod>,
    pub tax_bp: Option<u32>,
    pub notes: Option<String>,
    pub starts_at: Option<Timestamp>,
}

/// A line to add: typed in, or from a catalog item at this organization's price.
#[derive(Debug, Clone)]
pub enum NewContractLine {
    Manual {
        description: String,
        quantity: Quantity,
        unit_price: Money,
    },
    Catalog {
        item: Uuid,
        quantity: Quantity,
    },
}

/// One page of contracts, newest first.
#[derive(Debug, Clone)]
pub struct ContractPage {
    pub contracts: Vec<Contract>,
    /// The id to pass as `before` for the next page.
    pub next_before: Option<Uuid>,
}

impl crate::OrgContracts<'_> {
    fn audit(&self, audit: AuditEvent, id: Uuid, details: serde_json::Value) -> AuditEvent {
        audit.org(self.org).resource(id).details(details)
    }

    /// One contract of this organization.
    pub async fn get_contract(&self, id: Uuid) -> Result<Contract> {
        ledger::one(self, "contracts", CONTRACT_COLUMNS, id, "contract").await
    }

    /// A contract's lines in order.
    pub async fn lines(&self, id: Uuid) -> Result<Vec<ContractLine>> {
        ledger::children(
            self,
            "contract_lines",
            CONTRACT_LINE_COLUMNS,
            "contract_id",
            id,
            "position, id",
        )
        .await
    }

    /// A contract's billed periods, oldest first.
    pub async fn periods(&self, id: Uuid) -> Result<Vec<ContractPeriod>> {
        ledger::children(
            self,
            "contract_periods",
            PERIOD_COLUMNS,
            "contract_id",
            id,
            "starts_at, id",
        )
        .await
    }

    /// Contracts newest first, optionally of one status, `limit` of them before `before`.
    pub async fn list_contracts(
        &self,
        status: Option<ContractStatus>,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<ContractPage> {
        let limit = limit.clamp(1, MAX_CONTRACT_PAGE);
        let mut q: Sql = sql(format!(
            "SELECT {CONTRACT_COLUMNS} FROM contracts WHERE org_id = $1"
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
        let (contracts, next_before) =
            ledger::page(q.fetch_all(self).await?, limit, |c: &Contract| c.id);
        Ok(ContractPage {
            contracts,
            next_before,
        })
    }

    async fn draft(&self, id: Uuid) -> Result<Contract> {
        let c = self.get_contract(id).await?;
        if c.status != ContractStatus::Draft {
            return Err(StoreError::Conflict(format!(
                "the contract is {}: only a draft changes this way",
                c.status
            )));
        }
        Ok(c)
    }

    /// Drafts a contract with no lines.
    pub async fn create_draft(&self, new: NewContract, audit: AuditEvent) -> Result<Contract> {
        check_text("name", &new.name, MAX_TEXT)?;
        ledger::check_optional("notes", new.notes.as_deref(), MAX_TEXT)?;
        ledger::check_tax(new.tax_bp)?;
        let partner = self.whole().tenancy().partner_id().await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO contracts ({CONTRACT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, $10, $11, $12, $13, $14, $15, $16)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(partner)
        .bind(new.name.as_str())
        .bind(ContractStatus::Draft.as_str())
        .bind(new.currency.code())
        .bind(new.billing_period.as_str())
        .bind(i64::from(new.tax_bp))
        .bind(new.notes.as_deref())
        .bind(new.starts_at)
        .bind(new.starts_at)
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(now)
        .bind(None::<Timestamp>)
        .bind(None::<Timestamp>)
        .execute(&mut tx)
        .await?;
        let details = json!({ "name": new.name, "currency": new.currency,
                              "billingPeriod": new.billing_period });
        ledger::commit(tx, &self.audit(audit, id, details), now).await?;
        self.get_contract(id).await
    }

    /// Changes a draft's header.
    pub async fn update_draft(
        &self,
        id: Uuid,
        update: ContractUpdate,
        audit: AuditEvent,
    ) -> Result<Contract> {
        if let Some(n) = &update.name {
            check_text("name", n, MAX_TEXT)?;
        }
        ledger::check_optional("notes", update.notes.as_deref(), MAX_TEXT)?;
        if let Some(t) = update.tax_bp {
            ledger::check_tax(t)?;
        }
        let c = self.draft(id).await?;
        let changed = crate::audit::changed_fields([
            ("name", update.name.is_some()),
            ("billingPeriod", update.billing_period.is_some()),
            ("taxBp", update.tax_bp.is_some()),
            ("notes", update.notes.is_some()),
            ("startsAt", update.starts_at.is_some()),
        ]);
        if changed.is_empty() {
            return Err(StoreError::Invalid("no field to change was given".into()));
        }
        let starts = update.starts_at.unwrap_or(c.starts_at);
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE contracts SET name = $1, billing_period = $2, tax_bp = $3, notes = $4, \
             starts_at = $5, next_period_at = $5, updated_at = $6 WHERE id = $7 AND org_id = $8 \
             AND status = 'draft'",
        )
        .bind(update.name.as_deref().unwrap_or(&c.name))
        .bind(update.billing_period.unwrap_or(c.billing_period).as_str())
        .bind(update.tax_bp.map_or(c.tax_bp, i64::from))
        .bind(update.notes.as_deref().or(c.notes.as_deref()))
        .bind(starts)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the contract was activated meanwhile")?;
        ledger::commit(
            tx,
            &self.audit(audit, id, json!({ "changed": changed })),
            now,
        )
        .await?;
        self.get_contract(id).await
    }

    /// Deletes a draft and its lines.
    pub async fn delete_draft(&self, id: Uuid, audit: AuditEvent) -> Result<Contract> {
        let c = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("DELETE FROM contracts WHERE id = $1 AND org_id = $2 AND status = 'draft'")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        ledger::changed(n, "the contract was activated meanwhile")?;
        ledger::commit(tx, &self.audit(audit, id, json!({ "name": c.name })), now).await?;
        Ok(c)
    }

    /// Adds a line to a contract that is not cancelled, in the contract's currency; the next
    /// period to close bills it.
    pub async fn add_line(
        &self,
        id: Uuid,
        line: NewContractLine,
        audit: AuditEvent,
    ) -> Result<Vec<ContractLine>> {
        let c = self.get_contract(id).await?;
        if c.status == ContractStatus::Cancelled {
            return Err(StoreError::Conflict("the contract is cancelled".into()));
        }
        let (description, quantity, price, item) = match line {
            NewContractLine::Manual {
                description,
                quantity,
                unit_price,
            } => (description, quantity, unit_price, None),
            NewContractLine::Catalog { item, quantity } => {
                let catalog = self.whole().catalog();
                let it = catalog.sellable(item).await?;
                let price = catalog.price(&it).await?;
                (it.name, quantity, price, Some(item))
            }
        };
        check_text("description", &description, MAX_TEXT)?;
        if price.currency != c.currency {
            return Err(StoreError::Invalid(format!(
                "the contract is in {}; a line in {} cannot be added",
                c.currency, price.currency
            )));
        }
        if quantity.0 <= 0 || price.minor < 0 {
            return Err(StoreError::Invalid(
                "a line's quantity is positive and its price not negative".into(),
            ));
        }
        // The amount must be computable when the period bills it.
        money::line_amount(quantity, price).map_err(ledger::money_err)?;
        let (count, last): (i64, Option<i64>) = sql(
            "SELECT COUNT(*), MAX(position) FROM contract_lines WHERE contract_id = $1 \
             AND org_id = $2",
        )
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .unwrap_or((0, None));
        if count >= MAX_CONTRACT_LINES {
            return Err(StoreError::Invalid(format!(
                "a contract holds at most {MAX_CONTRACT_LINES} lines"
            )));
        }
        let now = self.store.clock.now();
        let line_id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO contract_lines (org_id, {CONTRACT_LINE_COLUMNS}) VALUES ($1, $2, $3, \
             $4, $5, $6, $7, $8, $9)"
        ))
        .bind(self.org)
        .bind(line_id)
        .bind(id)
        .bind(last.unwrap_or(0) + 1)
        .bind(description.as_str())
        .bind(quantity.0)
        .bind(price.minor)
        .bind(price.currency.code())
        .bind(item)
        .execute(&mut tx)
        .await?;
        let details = json!({ "lineId": line_id, "description": description,
                              "quantity": quantity.decimal(), "unitPrice": price,
                              "catalogItemId": item });
        ledger::commit(tx, &self.audit(audit, id, details), now).await?;
        self.lines(id).await
    }

    /// Removes a line from a contract that is not cancelled.
    pub async fn remove_line(
        &self,
        id: Uuid,
        line: Uuid,
        audit: AuditEvent,
    ) -> Result<Vec<ContractLine>> {
        let c = self.get_contract(id).await?;
        if c.status == ContractStatus::Cancelled {
            return Err(StoreError::Conflict("the contract is cancelled".into()));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n =
            sql("DELETE FROM contract_lines WHERE id = $1 AND contract_id = $2 AND org_id = $3")
                .bind(line)
                .bind(id)
                .bind(self.org)
                .execute(&mut tx)
                .await?;
        if n == 0 {
            return Err(StoreError::NotFound("contract line"));
        }
        ledger::commit(tx, &self.audit(audit, id, json!({ "lineId": line })), now).await?;
        self.lines(id).await
    }

    /// Moves the contract to `to` as its lifecycle allows. Activating needs a line and starts
    /// billing at `starts_at`; resuming skips the periods that closed while paused.
    pub async fn set_status(
        &self,
        id: Uuid,
        to: ContractStatus,
        audit: AuditEvent,
    ) -> Result<Contract> {
        let c = self.get_contract(id).await?;
        if !c.status.can_move_to(to) {
            return Err(StoreError::Conflict(format!(
                "a {} contract cannot become {to}",
                c.status
            )));
        }
        if to == ContractStatus::Active
            && c.status == ContractStatus::Draft
            && self.lines(id).await?.is_empty()
        {
            return Err(StoreError::Invalid(
                "a contract without lines cannot be activated".into(),
            ));
        }
        let now = self.store.clock.now();
        let mut next = c.next_period_at;
        if c.status == ContractStatus::Paused && to == ContractStatus::Active {
            while let Some(end) = c.billing_period.boundary_after(c.starts_at, next)
                && end <= now
            {
                next = end;
            }
        }
        let activated = if c.status == ContractStatus::Draft && to == ContractStatus::Active {
            Some(now)
        } else {
            c.activated_at
        };
        let cancelled = (to == ContractStatus::Cancelled).then_some(now);
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE contracts SET status = $1, next_period_at = $2, activated_at = $3, \
             cancelled_at = $4, updated_at = $5 WHERE id = $6 AND org_id = $7 AND status = $8 \
             AND next_period_at = $9",
        )
        .bind(to.as_str())
        .bind(next)
        .bind(activated)
        .bind(cancelled)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .bind(c.status.as_str())
        .bind(c.next_period_at)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the contract changed meanwhile; read it again")?;
        let details = json!({ "from": c.status, "to": to, "nextPeriodAt": next });
        ledger::commit(tx, &self.audit(audit, id, details), now).await?;
        self.get_contract(id).await
    }

    /// Bills the period of `c` that starts at `start` and ends at `end`: moves the contract
    /// on, records the period and opens its draft invoice (none when it has no lines) in one
    /// transaction. `None` when another instance billed it first.
    async fn bill_period(
        &self,
        c: &Contract,
        start: Timestamp,
        end: Timestamp,
    ) -> Result<Option<Option<Uuid>>> {
        let lines = self.lines(c.id).await?;
        let tax_bp = u32::try_from(c.tax_bp).map_err(|_| StoreError::Corrupt("tax rate".into()))?;
        let mut rows = Vec::with_capacity(lines.len());
        for l in &lines {
            rows.push(LineRow::priced(
                InvoiceLineKind::Contract,
                format!(
                    "{}: {} ({} – {})",
                    c.name,
                    l.description,
                    start.format("%Y-%m-%d"),
                    end.format("%Y-%m-%d")
                )
                .chars()
                .take(MAX_TEXT)
                .collect(),
                Quantity(l.quantity_milli),
                Money::new(l.unit_price_minor, l.currency),
                tax_bp,
                LineSource {
                    catalog_item: l.catalog_item_id,
                    contract: Some(c.id),
                    ..LineSource::default()
                },
            )?);
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE contracts SET next_period_at = $1, updated_at = $2 WHERE id = $3 \
             AND org_id = $4 AND status = 'active' AND next_period_at = $5",
        )
        .bind(end)
        .bind(now)
        .bind(c.id)
        .bind(self.org)
        .bind(start)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Ok(None);
        }
        // A contract whose lines were all removed records the period with nothing to bill.
        let invoice = if rows.is_empty() {
            None
        } else {
            let id = Uuid::now_v7();
            let notes = format!(
                "{}: {} to {}",
                c.name,
                start.format("%Y-%m-%d"),
                end.format("%Y-%m-%d")
            );
            insert_invoice(
                &mut tx,
                self.org,
                c.partner_id,
                id,
                c.currency,
                Some(&notes),
                None,
                None,
                "contract billing",
                now,
            )
            .await?;
            insert_lines(&mut tx, Doc::Invoice, self.org, id, rows).await?;
            Some((
                id,
                recompute(&mut tx, Doc::Invoice, self.org, id, c.currency, now).await?,
            ))
        };
        let total = invoice
            .as_ref()
            .map_or(Money::zero(c.currency), |(_, t)| t.total);
        let period = Uuid::now_v7();
        sql(format!(
            "INSERT INTO contract_periods (org_id, {PERIOD_COLUMNS}) VALUES ($1, $2, $3, $4, $5, \
             $6, $7, $8, $9)"
        ))
        .bind(self.org)
        .bind(period)
        .bind(c.id)
        .bind(start)
        .bind(end)
        .bind(invoice.as_ref().map(|(id, _)| *id))
        .bind(total.minor)
        .bind(total.currency.code())
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "the period was billed meanwhile".into()))?;
        let audit = AuditEvent::new(
            Actor::system("contract-billing"),
            "contract.period_billed",
            "contract",
        );
        let details = json!({ "periodId": period, "startsAt": start, "endsAt": end,
                              "invoiceId": invoice.as_ref().map(|(id, _)| *id), "total": total });
        ledger::commit(tx, &self.audit(audit, c.id, details), now).await?;
        Ok(Some(invoice.map(|(id, _)| id)))
    }
}

/// What one round of [`Store::bill_closed_periods`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeriodsBilled {
    /// Periods this call billed.
    pub periods: usize,
    /// The draft invoices they opened.
    pub invoices: Vec<Uuid>,
}

impl Store {
    /// Bills every period of an active contract that has closed by `now`, across
    /// organizations, catching up period by period; another instance's concurrent call bills
    /// each period at most once between them.
    pub async fn bill_closed_periods(&self, now: Timestamp) -> Result<PeriodsBilled> {
        let due: Vec<(Uuid, OrgId)> = sql(
            "SELECT id, org_id FROM contracts WHERE status = 'active' AND next_period_at <= $1 \
             ORDER BY next_period_at, id LIMIT $2",
        )
        .bind(now)
        .bind(MAX_PERIODS_PER_ROUND)
        .fetch_all(self)
        .await?;
        let mut done = PeriodsBilled::default();
        for (id, org) in due {
            let contracts = self.org(org).contracts();
            loop {
                let c = match contracts.get_contract(id).await {
                    Ok(c) if c.status == ContractStatus::Active => c,
                    Ok(_) | Err(StoreError::NotFound(_)) => break,
                    Err(e) => return Err(e),
                };
                let start = c.next_period_at;
                let Some(end) = c
                    .billing_period
                    .boundary_after(c.starts_at, start)
                    .filter(|e| *e <= now)
                else {
                    break;
                };
                match contracts.bill_period(&c, start, end).await {
                    Ok(Some(invoice)) => {
                        done.periods += 1;
                        done.invoices.extend(invoice);
                    }
                    // Another instance billed it: read the contract again.
                    Ok(None) | Err(StoreError::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
                if done.periods >= MAX_PERIODS_PER_ROUND as usize {
                    return Ok(done);
                }
            }
        }
        Ok(done)
    }
}
