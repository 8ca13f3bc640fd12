//! Quotes: proposals with content blocks and priced lines, numbered per partner, drafted,
//! sent to the customer (then frozen) or declined.
//!
//! A quote's lines are priced and totalled exactly as an invoice's ([`Doc::Quote`] beside
//! [`Doc::Invoice`]): one rounding per line, totals the sums of the rounded lines, one
//! currency per quote.

use breeze_core::{
    AuditEvent, Currency, InvoiceLineKind, Money, OrgId, PartnerId, Quantity, Timestamp,
};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    Result, StoreError,
    alerts::check_text,
    invoices::{Doc, LineRow, LineSource, insert_lines, recompute},
    ledger,
    sql::{Tx, sql},
};

/// The longest title, block or line text.
const MAX_TEXT: usize = 5000;
/// The most blocks one quote holds.
const MAX_BLOCKS: i64 = 100;
/// The largest page of quotes one listing returns.
pub const MAX_QUOTE_PAGE: u32 = 100;

/// A quote's header with its totals.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Quote {
    pub id: Uuid,
    pub org_id: OrgId,
    pub partner_id: PartnerId,
    pub number: i64,
    pub title: String,
    /// `draft`, `sent` or `declined`.
    pub status: String,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub subtotal_minor: i64,
    pub tax_minor: i64,
    pub total_minor: i64,
    pub valid_until: Option<Timestamp>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub sent_at: Option<Timestamp>,
    pub declined_at: Option<Timestamp>,
    pub decline_reason: Option<String>,
}

impl Quote {
    /// `Q-12`.
    pub fn reference(&self) -> String {
        format!("Q-{}", self.number)
    }

    pub fn total(&self) -> Money {
        Money::new(self.total_minor, self.currency)
    }
}

const QUOTE_COLUMNS: &str = "id, org_id, partner_id, number, title, status, currency, \
    subtotal_minor, tax_minor, total_minor, valid_until, created_by, created_at, updated_at, \
    sent_at, declined_at, decline_reason";

/// A content block: a heading or a paragraph of text.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct QuoteBlock {
    pub id: Uuid,
    pub quote_id: Uuid,
    pub position: i64,
    /// `heading` or `text`.
    pub kind: String,
    pub body: String,
}

const BLOCK_COLUMNS: &str = "id, quote_id, position, kind, body";

/// One priced line of a quote.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct QuoteLine {
    pub id: Uuid,
    pub quote_id: Uuid,
    pub position: i64,
    #[sqlx(try_from = "String")]
    pub kind: InvoiceLineKind,
    pub description: String,
    pub quantity_milli: i64,
    pub unit_price_minor: i64,
    pub amount_minor: i64,
    pub tax_bp: i64,
    pub tax_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub catalog_item_id: Option<Uuid>,
}

const QUOTE_LINE_COLUMNS: &str = "id, quote_id, position, kind, description, quantity_milli, \
    unit_price_minor, amount_minor, tax_bp, tax_minor, currency, catalog_item_id";

/// A line to add to a draft quote.
#[derive(Debug, Clone)]
pub enum NewQuoteLine {
    Manual {
        description: String,
        quantity: Quantity,
        unit_price: Money,
        tax_bp: u32,
    },
    Catalog {
        item: Uuid,
        quantity: Quantity,
    },
}

impl crate::OrgQuotes<'_> {
    fn audit(&self, audit: AuditEvent, q: &Quote, details: serde_json::Value) -> AuditEvent {
        let mut details = details;
        details["number"] = json!(q.reference());
        audit.org(self.org).resource(q.id).details(details)
    }

    /// One quote of this organization.
    pub async fn get_quote(&self, id: Uuid) -> Result<Quote> {
        ledger::one(self, "quotes", QUOTE_COLUMNS, id, "quote").await
    }

    /// The quote of this organization with this number (`Q-12` is 12).
    pub async fn quote_by_number(&self, number: i64) -> Result<Quote> {
        ledger::by_number(self, "quotes", QUOTE_COLUMNS, number, "quote").await
    }

    /// A quote's blocks in order.
    pub async fn blocks(&self, id: Uuid) -> Result<Vec<QuoteBlock>> {
        ledger::children(
            self,
            "quote_blocks",
            BLOCK_COLUMNS,
            "quote_id",
            id,
            "position, id",
        )
        .await
    }

    /// A quote's lines in order.
    pub async fn lines(&self, id: Uuid) -> Result<Vec<QuoteLine>> {
        ledger::children(
            self,
            "quote_lines",
            QUOTE_LINE_COLUMNS,
            "quote_id",
            id,
            "position, id",
        )
        .await
    }

    /// Quotes newest first, `limit` of them (at most [`MAX_QUOTE_PAGE`]) below number
    /// `before`.
    pub async fn list_quotes(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<(Vec<Quote>, Option<i64>)> {
        let limit = limit.clamp(1, MAX_QUOTE_PAGE);
        let rows = sql(format!(
            "SELECT {QUOTE_COLUMNS} FROM quotes WHERE org_id = $1 AND number < $2 \
             ORDER BY number DESC LIMIT $3"
        ))
        .bind(self.org)
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit) + 1)
        .fetch_all(self)
        .await?;
        Ok(ledger::page(rows, limit, |q: &Quote| q.number))
    }

    async fn draft(&self, id: Uuid) -> Result<Quote> {
        let q = self.get_quote(id).await?;
        if q.status != "draft" {
            return Err(StoreError::Conflict(format!(
                "quote {} is {}: only a draft changes",
                q.reference(),
                q.status
            )));
        }
        Ok(q)
    }

    /// Drafts an empty quote with the partner's next quote number.
    pub async fn create_draft(
        &self,
        title: &str,
        currency: Currency,
        valid_until: Option<Timestamp>,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<Quote> {
        check_text("title", title, MAX_TEXT)?;
        let partner = self.whole().tenancy().partner_id().await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        let number = ledger::next_number(&mut tx, "quote_counters", partner).await?;
        sql(format!(
            "INSERT INTO quotes ({QUOTE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, 'draft', $6, 0, 0, \
             0, $7, $8, $9, $9, NULL, NULL, NULL)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(partner)
        .bind(number)
        .bind(title)
        .bind(currency.code())
        .bind(valid_until)
        .bind(created_by)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(json!({
            "number": format!("Q-{number}"), "title": title, "currency": currency,
        }));
        ledger::commit(tx, &audit, now).await?;
        self.get_quote(id).await
    }

    /// Changes a draft's title or validity.
    pub async fn update_draft(
        &self,
        id: Uuid,
        title: Option<&str>,
        valid_until: Option<Timestamp>,
        audit: AuditEvent,
    ) -> Result<Quote> {
        ledger::check_optional("title", title, MAX_TEXT)?;
        let q = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE quotes SET title = $1, valid_until = $2, updated_at = $3 WHERE id = $4 \
             AND org_id = $5 AND status = 'draft'",
        )
        .bind(title.unwrap_or(&q.title))
        .bind(valid_until.or(q.valid_until))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the quote was sent meanwhile")?;
        let changed = crate::audit::changed_fields([
            ("title", title.is_some()),
            ("validUntil", valid_until.is_some()),
        ]);
        ledger::commit(
            tx,
            &self.audit(audit, &q, json!({ "changed": changed })),
            now,
        )
        .await?;
        self.get_quote(id).await
    }

    /// Deletes a draft; its number is not reused.
    pub async fn delete_draft(&self, id: Uuid, audit: AuditEvent) -> Result<Quote> {
        let q = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("DELETE FROM quotes WHERE id = $1 AND org_id = $2 AND status = 'draft'")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        ledger::changed(n, "the quote was sent meanwhile")?;
        ledger::commit(
            tx,
            &self.audit(audit, &q, json!({ "total": q.total() })),
            now,
        )
        .await?;
        Ok(q)
    }

    /// Appends a content block (`heading` or `text`) to a draft.
    pub async fn add_block(
        &self,
        id: Uuid,
        heading: bool,
        body: &str,
        audit: AuditEvent,
    ) -> Result<Vec<QuoteBlock>> {
        check_text("body", body, MAX_TEXT)?;
        let q = self.draft(id).await?;
        let (count, last): (i64, Option<i64>) = sql(
            "SELECT COUNT(*), MAX(position) FROM quote_blocks WHERE quote_id = $1 AND org_id = $2",
        )
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .unwrap_or((0, None));
        if count >= MAX_BLOCKS {
            return Err(StoreError::Invalid(format!(
                "a quote holds at most {MAX_BLOCKS} blocks"
            )));
        }
        let now = self.store.clock.now();
        let block = Uuid::now_v7();
        let kind = if heading { "heading" } else { "text" };
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO quote_blocks (org_id, {BLOCK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"
        ))
        .bind(self.org)
        .bind(block)
        .bind(id)
        .bind(last.unwrap_or(0) + 1)
        .bind(kind)
        .bind(body)
        .execute(&mut tx)
        .await?;
        ledger::commit(
            tx,
            &self.audit(audit, &q, json!({ "blockId": block, "kind": kind })),
            now,
        )
        .await?;
        self.blocks(id).await
    }

    /// Removes a block from a draft.
    pub async fn remove_block(
        &self,
        id: Uuid,
        block: Uuid,
        audit: AuditEvent,
    ) -> Result<Vec<QuoteBlock>> {
        let q = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("DELETE FROM quote_blocks WHERE id = $1 AND quote_id = $2 AND org_id = $3")
            .bind(block)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound("quote block"));
        }
        ledger::commit(tx, &self.audit(audit, &q, json!({ "blockId": block })), now).await?;
        self.blocks(id).await
    }

    /// Adds a line (manual, or a catalog item or bundle at this organization's price) to a
    /// draft, in the quote's currency.
    pub async fn add_line(&self, id: Uuid, line: NewQuoteLine, audit: AuditEvent) -> Result<Quote> {
        let q = self.draft(id).await?;
        let row = match line {
            NewQuoteLine::Manual {
                description,
                quantity,
                unit_price,
                tax_bp,
            } => {
                check_text("description", &description, MAX_TEXT)?;
                ledger::check_tax(tax_bp)?;
                if unit_price.currency != q.currency {
                    return Err(StoreError::Invalid(format!(
                        "the quote is in {}; a line in {} cannot be added",
                        q.currency, unit_price.currency
                    )));
                }
                if quantity.0 == 0 {
                    return Err(StoreError::Invalid(
                        "a line's quantity cannot be zero".into(),
                    ));
                }
                LineRow::priced(
                    InvoiceLineKind::Manual,
                    description,
                    quantity,
                    unit_price,
                    tax_bp,
                    LineSource::default(),
                )?
            }
            NewQuoteLine::Catalog { item, quantity } => {
                self.whole()
                    .catalog()
                    .line(item, quantity, q.currency)
                    .await?
            }
        };
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let ids = insert_lines(&mut tx, Doc::Quote, self.org, id, vec![row]).await?;
        let totals = recompute(&mut tx, Doc::Quote, self.org, id, q.currency, now).await?;
        let details = json!({ "lineId": ids.first(), "total": totals.total });
        ledger::commit(tx, &self.audit(audit, &q, details), now).await?;
        self.get_quote(id).await
    }

    /// Removes a line from a draft.
    pub async fn remove_line(&self, id: Uuid, line: Uuid, audit: AuditEvent) -> Result<Quote> {
        let q = self.draft(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("DELETE FROM quote_lines WHERE id = $1 AND quote_id = $2 AND org_id = $3")
            .bind(line)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound("quote line"));
        }
        recompute(&mut tx, Doc::Quote, self.org, id, q.currency, now).await?;
        ledger::commit(tx, &self.audit(audit, &q, json!({ "lineId": line })), now).await?;
        self.get_quote(id).await
    }

    /// Sends a draft to the customer: from now on it never changes. An empty quote is not
    /// sent.
    pub async fn send(&self, id: Uuid, audit: AuditEvent) -> Result<Quote> {
        let q = self.draft(id).await?;
        if self.lines(id).await?.is_empty() {
            return Err(StoreError::Invalid(
                "a quote without lines cannot be sent".into(),
            ));
        }
        self.move_status(&q, "draft", "sent", None, audit).await
    }

    /// Declines a draft or sent quote, with the customer's reason.
    pub async fn decline(&self, id: Uuid, reason: &str, audit: AuditEvent) -> Result<Quote> {
        check_text("reason", reason, MAX_TEXT)?;
        let q = self.get_quote(id).await?;
        if q.status == "declined" {
            return Err(StoreError::Conflict("the quote is declined already".into()));
        }
        let from = q.status.clone();
        self.move_status(&q, &from, "declined", Some(reason), audit)
            .await
    }

    async fn move_status(
        &self,
        q: &Quote,
        from: &str,
        to: &str,
        reason: Option<&str>,
        audit: AuditEvent,
    ) -> Result<Quote> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE quotes SET status = $1, sent_at = CASE WHEN $1 = 'sent' THEN $2 ELSE sent_at END, \
             declined_at = CASE WHEN $1 = 'declined' THEN $2 ELSE declined_at END, \
             decline_reason = $3, updated_at = $2 WHERE id = $4 AND org_id = $5 AND status = $6",
        )
        .bind(to)
        .bind(now)
        .bind(reason)
        .bind(q.id)
        .bind(self.org)
        .bind(from)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the quote changed meanwhile; read it again")?;
        let details = json!({ "from": from, "to": to, "reason": reason, "total": q.total() });
        ledger::commit(tx, &self.audit(audit, q, details), now).await?;
        self.get_quote(q.id).await
    }
}
