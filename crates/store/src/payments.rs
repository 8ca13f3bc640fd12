//! Payments taken outside Breeze: a partner's payment-provider and distributor accounts (kept
//! sealed: the store never sees them in the clear), the payment links of issued invoices, and
//! settling a link when the provider says it was paid.
//!
//! **Exactly once.** A provider's event is recorded (`stripe_events`, unique per partner and
//! event id) in the very transaction that acts on it: the link moves from open to paid
//! conditionally, and the payment row names the link (`invoice_payments_one_per_link`), so a
//! replayed event, a redelivery, or two events about the same payment (Stripe sends
//! `checkout.session.completed` and may send `…async_payment_succeeded`) record one payment.

use breeze_core::{AuditEvent, Currency, Money, OrgId, PartnerId, Timestamp};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    Result, Store, StoreError,
    invoices::{Invoice, Payment, insert_payment, payable},
    ledger,
    sql::{Tx, sql},
};

/// A partner's outside billing accounts, each credential sealed (`v1:` + base64) by the
/// caller. `Debug` shows only which are set.
#[derive(Clone, PartialEq, sqlx::FromRow)]
pub struct PartnerBilling {
    pub partner_id: PartnerId,
    pub stripe_secret_key: Option<String>,
    pub stripe_webhook_secret: Option<String>,
    pub synnex_account: Option<String>,
    /// `us` or `ca`: which TD SYNNEX EC Express the account is on.
    pub synnex_region: Option<String>,
    pub updated_at: Timestamp,
}

impl std::fmt::Debug for PartnerBilling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartnerBilling")
            .field("partner_id", &self.partner_id)
            .field("stripe", &self.stripe_secret_key.is_some())
            .field("stripe_webhook", &self.stripe_webhook_secret.is_some())
            .field("synnex", &self.synnex_account.is_some())
            .field("synnex_region", &self.synnex_region)
            .finish()
    }
}

const BILLING_COLUMNS: &str = "partner_id, stripe_secret_key, stripe_webhook_secret, \
    synnex_account, synnex_region, updated_at";

/// A payment link of an invoice: a provider's hosted payment page for an amount.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct PaymentLink {
    pub id: Uuid,
    pub org_id: OrgId,
    pub partner_id: PartnerId,
    pub invoice_id: Uuid,
    /// `stripe`.
    pub provider: String,
    /// The provider's id of it (a Checkout Session's `cs_…`).
    pub external_id: String,
    pub url: String,
    pub amount_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    /// `open`, `paid`, `superseded` (a newer link replaced it) or `unmatched` (paid, but the
    /// invoice could no longer take the payment: a person must look).
    pub status: String,
    pub created_by: String,
    pub created_at: Timestamp,
    pub settled_at: Option<Timestamp>,
    pub payment_id: Option<Uuid>,
}

impl PaymentLink {
    pub fn amount(&self) -> Money {
        Money::new(self.amount_minor, self.currency)
    }
}

const LINK_COLUMNS: &str = "id, org_id, partner_id, invoice_id, provider, external_id, url, \
    amount_minor, currency, status, created_by, created_at, settled_at, payment_id";

/// A link the provider made, to store.
#[derive(Debug, Clone)]
pub struct NewPaymentLink {
    pub provider: String,
    pub external_id: String,
    pub url: String,
    pub amount: Money,
}

/// What settling a link did.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// The payment was recorded against the invoice.
    Recorded(Payment),
    /// This event, or another about the same payment, was taken already: nothing changed.
    AlreadyTaken,
    /// Paid, but the invoice cannot take it (void, paid meanwhile, another amount): the link
    /// is marked `unmatched` for a person to resolve (refund, or record by hand).
    Unmatched(String),
}

/// A provider event that says a link was paid.
#[derive(Debug, Clone)]
pub struct LinkPaid<'a> {
    pub event_id: &'a str,
    pub event_type: &'a str,
    /// What the provider took.
    pub amount: Money,
}

impl Store {
    /// The partner's outside billing accounts, if any were set.
    pub async fn partner_billing(&self, partner: PartnerId) -> Result<Option<PartnerBilling>> {
        sql(format!(
            "SELECT {BILLING_COLUMNS} FROM partner_billing WHERE partner_id = $1"
        ))
        .bind(partner)
        .fetch_optional(self)
        .await
    }

    /// Sets (or, with `None`, clears) the partner's sealed Stripe secret key and webhook
    /// signing secret.
    pub async fn set_stripe_account(
        &self,
        partner: PartnerId,
        secret_key: Option<&str>,
        webhook_secret: Option<&str>,
        audit: AuditEvent,
    ) -> Result<()> {
        self.set_billing(
            partner,
            "stripe_secret_key = $2, stripe_webhook_secret = $3",
            [secret_key, webhook_secret],
            audit.details(json!({ "stripe": secret_key.is_some() })),
        )
        .await
    }

    /// Sets (or clears) the partner's sealed TD SYNNEX account and its region (`us`, `ca`).
    pub async fn set_synnex_account(
        &self,
        partner: PartnerId,
        account: Option<&str>,
        region: Option<&str>,
        audit: AuditEvent,
    ) -> Result<()> {
        if region.is_some_and(|r| r != "us" && r != "ca") {
            return Err(StoreError::Invalid(
                "the TD SYNNEX region is us or ca".into(),
            ));
        }
        self.set_billing(
            partner,
            "synnex_account = $2, synnex_region = $3",
            [account, region],
            audit.details(json!({ "synnex": account.is_some(), "region": region })),
        )
        .await
    }

    async fn set_billing(
        &self,
        partner: PartnerId,
        set: &str,
        [a, b]: [Option<&str>; 2],
        audit: AuditEvent,
    ) -> Result<()> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        sql(
            "INSERT INTO partner_billing (partner_id, updated_at) VALUES ($1, $2) \
             ON CONFLICT (partner_id) DO NOTHING",
        )
        .bind(partner)
        .bind(now)
        .execute(&mut tx)
        .await?;
        sql(format!(
            "UPDATE partner_billing SET {set}, updated_at = $4 WHERE partner_id = $1"
        ))
        .bind(partner)
        .bind(a)
        .bind(b)
        .bind(now)
        .execute(&mut tx)
        .await?;
        ledger::commit(tx, &audit.resource(partner.0), now).await
    }

    /// Sets (or, with `None`, clears) organization `org`'s billing currency.
    pub async fn set_billing_currency(
        &self,
        org: OrgId,
        currency: Option<Currency>,
        audit: AuditEvent,
    ) -> Result<()> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let n = sql("UPDATE organizations SET billing_currency = $1 WHERE id = $2")
            .bind(currency.map(|c| c.code().to_owned()))
            .bind(org)
            .execute(&mut tx)
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound("organization"));
        }
        let audit = audit
            .org(org)
            .resource(org.0)
            .details(json!({ "billingCurrency": currency }));
        ledger::commit(tx, &audit, now).await
    }

    /// The link a provider knows as `external_id`, whichever organization's it is (a webhook
    /// names only the provider's id; the caller checks the partner it came for).
    pub async fn payment_link_by_external(
        &self,
        provider: &str,
        external_id: &str,
    ) -> Result<Option<PaymentLink>> {
        sql(format!(
            "SELECT {LINK_COLUMNS} FROM payment_links WHERE provider = $1 AND external_id = $2"
        ))
        .bind(provider)
        .bind(external_id)
        .fetch_optional(self)
        .await
    }

    /// Records that the partner received provider event `event_id` which needs no action, so
    /// that its redelivery is known; `false` when it was recorded already.
    pub async fn note_provider_event(
        &self,
        partner: PartnerId,
        event_id: &str,
        event_type: &str,
    ) -> Result<bool> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let fresh = note_event(&mut tx, partner, event_id, event_type, now).await?;
        tx.commit().await?;
        Ok(fresh)
    }
}

/// Records event `event_id` of `partner` in `tx`; `false` when it is there already.
async fn note_event(
    tx: &mut Tx,
    partner: PartnerId,
    event_id: &str,
    event_type: &str,
    now: Timestamp,
) -> Result<bool> {
    let n = sql(
        "INSERT INTO stripe_events (partner_id, event_id, type, received_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (partner_id, event_id) DO NOTHING",
    )
    .bind(partner)
    .bind(event_id)
    .bind(event_type)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(n == 1)
}

impl crate::OrgInvoices<'_> {
    /// An invoice's payment links, newest first.
    pub async fn payment_links(&self, invoice: Uuid) -> Result<Vec<PaymentLink>> {
        ledger::children(
            self,
            "payment_links",
            LINK_COLUMNS,
            "invoice_id",
            invoice,
            "created_at DESC, id DESC",
        )
        .await
    }

    /// Stores a link the provider made for `invoice`'s balance; the invoice's earlier open
    /// links are superseded (a payment through one of them is still taken if the invoice can
    /// take it). The invoice must still owe exactly that amount.
    pub async fn add_payment_link(
        &self,
        invoice: &Invoice,
        link: NewPaymentLink,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<PaymentLink> {
        payable(invoice, link.amount)?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        // The balance the link asks for must be the one that stands now.
        let paid: Option<(i64,)> = sql(
            "SELECT paid_minor FROM invoices WHERE id = $1 AND org_id = $2 AND status = 'issued'",
        )
        .bind(invoice.id)
        .bind(self.org)
        .fetch_optional(&mut tx)
        .await?;
        if paid != Some((invoice.paid_minor,)) {
            return Err(StoreError::Conflict(
                "the invoice changed meanwhile; read it again".into(),
            ));
        }
        sql(
            "UPDATE payment_links SET status = 'superseded' WHERE invoice_id = $1 AND org_id = $2 \
             AND status = 'open'",
        )
        .bind(invoice.id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        sql(format!(
            "INSERT INTO payment_links ({LINK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, 'open', $10, $11, NULL, NULL)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(invoice.partner_id)
        .bind(invoice.id)
        .bind(link.provider.as_str())
        .bind(link.external_id.as_str())
        .bind(link.url.as_str())
        .bind(link.amount.minor)
        .bind(link.amount.currency.code())
        .bind(created_by)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "the provider returned a link already stored".into()))?;
        let details = json!({ "number": invoice.reference(), "linkId": id,
                              "provider": link.provider, "externalId": link.external_id,
                              "amount": link.amount });
        ledger::commit(
            tx,
            &audit.org(self.org).resource(invoice.id).details(details),
            now,
        )
        .await?;
        self.payment_links(invoice.id)
            .await?
            .into_iter()
            .find(|l| l.id == id)
            .ok_or(StoreError::NotFound("payment link"))
    }

    /// Settles `link` (of this organization) as the provider's event says: records the event,
    /// and — unless it or another about the same payment was taken before — the payment
    /// against the invoice, in one transaction. A payment the invoice cannot take marks the
    /// link unmatched instead.
    pub async fn settle_payment_link(
        &self,
        link: &PaymentLink,
        paid: LinkPaid<'_>,
        audit: AuditEvent,
    ) -> Result<Settled> {
        let now = self.store.clock.now();
        let inv = self.get_invoice(link.invoice_id).await?;
        let mut tx = Tx::begin_in(self).await?;
        if !note_event(
            &mut tx,
            link.partner_id,
            paid.event_id,
            paid.event_type,
            now,
        )
        .await?
        {
            return Ok(Settled::AlreadyTaken);
        }
        let why_not = if paid.amount != link.amount() {
            Some(format!(
                "the provider took {}, the link asked for {}",
                paid.amount,
                link.amount()
            ))
        } else {
            payable(&inv, paid.amount).err().map(|e| e.to_string())
        };
        let (status, payment) = match why_not {
            Some(_) => ("unmatched", None),
            None => {
                let (pid, _) = insert_payment(
                    &mut tx,
                    &inv,
                    paid.amount,
                    &link.provider,
                    Some(&link.external_id),
                    &format!("{}:{}", link.provider, paid.event_id),
                    now,
                )
                .await
                .map_err(|e| e.conflict_as(|| "the payment was taken meanwhile".into()))?;
                ("paid", Some(pid))
            }
        };
        let n = sql(
            "UPDATE payment_links SET status = $1, settled_at = $2, payment_id = $3 \
             WHERE id = $4 AND org_id = $5 AND status IN ('open', 'superseded')",
        )
        .bind(status)
        .bind(now)
        .bind(payment)
        .bind(link.id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            // Another event about the same payment settled it first: keep only this event's
            // record, so its redelivery is known too.
            drop(tx);
            self.store
                .note_provider_event(link.partner_id, paid.event_id, paid.event_type)
                .await?;
            return Ok(Settled::AlreadyTaken);
        }
        let details = json!({
            "number": inv.reference(), "linkId": link.id, "eventId": paid.event_id,
            "amount": paid.amount, "paymentId": payment, "unmatched": why_not,
        });
        ledger::commit(
            tx,
            &audit.org(self.org).resource(inv.id).details(details),
            now,
        )
        .await?;
        match (payment, why_not) {
            (Some(pid), _) => self
                .payments(inv.id)
                .await?
                .into_iter()
                .find(|p| p.id == pid)
                .map(Settled::Recorded)
                .ok_or(StoreError::NotFound("payment")),
            (None, why) => Ok(Settled::Unmatched(why.unwrap_or_default())),
        }
    }
}
