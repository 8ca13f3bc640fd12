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
    /// The provider's id of the payment (a Checkout Session's PaymentIntent `pi_…`), which
    /// its refund events name.
    pub payment_intent: Option<&'a str>,
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

/// A link being settled by a provider's event, inside the transaction that records the event:
/// the part an invoice's and a quote's link share. Between [`Settlement::begin`] and
/// [`Settlement::finish`] the caller marks its link (and, for an invoice, records the payment)
/// in `tx`.
struct Settlement {
    tx: Tx,
    now: Timestamp,
    partner: PartnerId,
    /// Why what the provider took is not what the link asked, if it is not.
    mismatch: Option<String>,
}

impl Settlement {
    /// Records the provider's event for a link of `partner` asking `asked`; `None` when that
    /// event was taken before.
    async fn begin(
        scope: &impl crate::handles::Scoped,
        partner: PartnerId,
        asked: Money,
        paid: &LinkPaid<'_>,
    ) -> Result<Option<Self>> {
        let now = scope.store().clock.now();
        let mut tx = Tx::begin_in(scope).await?;
        if !note_event(&mut tx, partner, paid.event_id, paid.event_type, now).await? {
            return Ok(None);
        }
        let mismatch = (paid.amount != asked).then(|| {
            format!(
                "the provider took {}, the link asked for {asked}",
                paid.amount
            )
        });
        Ok(Some(Self {
            tx,
            now,
            partner,
            mismatch,
        }))
    }

    /// Commits with `audit` when the caller marked its link (`marked` rows changed); `false`
    /// when it marked none because another event about the same payment settled the link
    /// first — then only this event's record is kept, so its redelivery is known too.
    async fn finish(
        self,
        store: &Store,
        marked: u64,
        paid: &LinkPaid<'_>,
        audit: &AuditEvent,
    ) -> Result<bool> {
        if marked == 0 {
            drop(self.tx);
            store
                .note_provider_event(self.partner, paid.event_id, paid.event_type)
                .await?;
            return Ok(false);
        }
        ledger::commit(self.tx, audit, self.now).await?;
        Ok(true)
    }
}

/// The invoice or quote a payment link is for, and the table its links live in.
struct LinkOwner {
    org: OrgId,
    partner: PartnerId,
    table: &'static str,
    columns: &'static str,
    parent_column: &'static str,
    parent: Uuid,
    /// The number the audit record names (a draft invoice has none yet).
    reference: Option<String>,
}

/// Supersedes `owner`'s open links, stores the new one as `id` and commits with its audit
/// record: the one way a link is added, whether it is for an invoice's balance or a quote's
/// total (both link tables have the same shape up to their parent column).
async fn replace_open_link(
    mut tx: Tx,
    owner: LinkOwner,
    id: Uuid,
    link: &NewPaymentLink,
    created_by: &str,
    audit: AuditEvent,
    now: Timestamp,
) -> Result<()> {
    let LinkOwner {
        org,
        partner,
        table,
        columns,
        parent_column,
        parent,
        reference,
    } = owner;
    sql(format!(
        "UPDATE {table} SET status = 'superseded' WHERE {parent_column} = $1 AND org_id = $2 \
         AND status = 'open'"
    ))
    .bind(parent)
    .bind(org)
    .execute(&mut tx)
    .await?;
    sql(format!(
        "INSERT INTO {table} ({columns}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'open', \
         $10, $11, NULL, NULL)"
    ))
    .bind(id)
    .bind(org)
    .bind(partner)
    .bind(parent)
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
    let details = json!({ "number": reference, "linkId": id, "provider": link.provider,
                          "externalId": link.external_id, "amount": link.amount });
    ledger::commit(tx, &audit.details(details), now).await
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
        let audit = audit.org(self.org).resource(invoice.id);
        let owner = LinkOwner {
            org: self.org,
            partner: invoice.partner_id,
            table: "payment_links",
            columns: LINK_COLUMNS,
            parent_column: "invoice_id",
            parent: invoice.id,
            reference: invoice.reference(),
        };
        replace_open_link(tx, owner, id, &link, created_by, audit, now).await?;
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
        let inv = self.get_invoice(link.invoice_id).await?;
        let Some(mut settling) =
            Settlement::begin(self, link.partner_id, link.amount(), &paid).await?
        else {
            return Ok(Settled::AlreadyTaken);
        };
        let why_not = settling
            .mismatch
            .take()
            .or_else(|| payable(&inv, paid.amount).err().map(|e| e.to_string()));
        let (status, payment) = match why_not {
            Some(_) => ("unmatched", None),
            None => {
                let (pid, _) = insert_payment(
                    &mut settling.tx,
                    &inv,
                    paid.amount,
                    &link.provider,
                    Some(&link.external_id),
                    &format!("{}:{}", link.provider, paid.event_id),
                    settling.now,
                )
                .await
                .map_err(|e| e.conflict_as(|| "the payment was taken meanwhile".into()))?;
                ("paid", Some(pid))
            }
        };
        let marked = sql(
            "UPDATE payment_links SET status = $1, settled_at = $2, payment_id = $3, \
             payment_intent = $6 WHERE id = $4 AND org_id = $5 \
             AND status IN ('open', 'superseded')",
        )
        .bind(status)
        .bind(settling.now)
        .bind(payment)
        .bind(link.id)
        .bind(self.org)
        .bind(paid.payment_intent)
        .execute(&mut settling.tx)
        .await?;
        let details = json!({
            "number": inv.reference(), "linkId": link.id, "eventId": paid.event_id,
            "amount": paid.amount, "paymentId": payment, "unmatched": why_not,
        });
        let audit = audit.org(self.org).resource(inv.id).details(details);
        if !settling.finish(self.store, marked, &paid, &audit).await? {
            return Ok(Settled::AlreadyTaken);
        }
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

/// A payment link of a sent quote: a provider's hosted payment page for its total, paid ahead
/// of the work. Its `status` is the quote's payment state: `open`, `paid`, `superseded` (a
/// newer link replaced it) or `unmatched` (paid, but not for what the link asked, or the quote
/// was declined meanwhile: a person must look).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct QuoteLink {
    pub id: Uuid,
    pub org_id: OrgId,
    pub partner_id: PartnerId,
    pub quote_id: Uuid,
    /// `stripe`.
    pub provider: String,
    /// The provider's id of it (a Checkout Session's `cs_…`).
    pub external_id: String,
    pub url: String,
    pub amount_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub status: String,
    pub created_by: String,
    pub created_at: Timestamp,
    pub settled_at: Option<Timestamp>,
    /// The provider's event that settled it.
    pub event_id: Option<String>,
}

impl QuoteLink {
    pub fn amount(&self) -> Money {
        Money::new(self.amount_minor, self.currency)
    }
}

const QUOTE_LINK_COLUMNS: &str = "id, org_id, partner_id, quote_id, provider, external_id, url, \
    amount_minor, currency, status, created_by, created_at, settled_at, event_id";

/// What settling a quote's link did.
#[derive(Debug, Clone, PartialEq)]
pub enum QuoteSettled {
    /// The quote is paid through this link.
    Paid(Box<QuoteLink>),
    /// This event, or another about the same payment, was taken already: nothing changed.
    AlreadyTaken,
    /// Paid, but not as the link asked (another amount, or the quote was declined): the link
    /// is marked `unmatched` for a person to resolve.
    Unmatched(String),
}

/// A refund made at the provider of a payment taken through an invoice's link.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Refund {
    pub id: Uuid,
    pub invoice_id: Uuid,
    pub payment_id: Uuid,
    /// What this event refunded more than the ones before it.
    pub amount_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    /// `stripe`.
    pub provider: String,
    /// The provider's charge (`ch_…`).
    pub charge_id: String,
    /// How much of the charge the provider said was refunded in all, then.
    pub refunded_total_minor: i64,
    pub event_id: String,
    pub created_at: Timestamp,
}

impl Refund {
    pub fn amount(&self) -> Money {
        Money::new(self.amount_minor, self.currency)
    }
}

const REFUND_COLUMNS: &str = "id, invoice_id, payment_id, amount_minor, currency, provider, \
    charge_id, refunded_total_minor, event_id, created_at";

/// A provider event that says a charge paid through a link was refunded (in part or whole).
#[derive(Debug, Clone)]
pub struct LinkRefunded<'a> {
    pub event_id: &'a str,
    pub event_type: &'a str,
    /// The provider's charge (`ch_…`).
    pub charge_id: &'a str,
    /// How much of the charge is refunded in all now (Stripe's `amount_refunded`).
    pub refunded_total: Money,
}

/// What recording a refund did.
#[derive(Debug, Clone, PartialEq)]
pub enum Refunded {
    /// The refund was recorded and the invoice's paid amount lowered by it.
    Recorded(Refund),
    /// This event was taken already, or it refunds nothing more than was recorded (an older
    /// or repeated event): nothing changed.
    AlreadyTaken,
    /// The payment cannot take it (voided, another currency, the invoice void): the event is
    /// recorded, nothing else; a person must look.
    Unmatched(String),
}

impl Store {
    /// The invoice link whose payment the provider knows as `payment_intent`, whichever
    /// organization's it is (the caller checks the partner the event came for).
    pub async fn payment_link_by_intent(
        &self,
        provider: &str,
        payment_intent: &str,
    ) -> Result<Option<PaymentLink>> {
        sql(format!(
            "SELECT {LINK_COLUMNS} FROM payment_links WHERE provider = $1 AND payment_intent = $2"
        ))
        .bind(provider)
        .bind(payment_intent)
        .fetch_optional(self)
        .await
    }

    /// The quote link a provider knows as `external_id`, whichever organization's it is (a
    /// webhook names only the provider's id; the caller checks the partner it came for).
    pub async fn quote_link_by_external(
        &self,
        provider: &str,
        external_id: &str,
    ) -> Result<Option<QuoteLink>> {
        sql(format!(
            "SELECT {QUOTE_LINK_COLUMNS} FROM quote_payment_links \
             WHERE provider = $1 AND external_id = $2"
        ))
        .bind(provider)
        .bind(external_id)
        .fetch_optional(self)
        .await
    }
}

impl crate::OrgInvoices<'_> {
    /// An invoice's refunds, oldest first.
    pub async fn refunds(&self, invoice: Uuid) -> Result<Vec<Refund>> {
        ledger::children(
            self,
            "invoice_refunds",
            REFUND_COLUMNS,
            "invoice_id",
            invoice,
            "created_at, id",
        )
        .await
    }

    /// Records what the provider's event refunded of `link`'s payment (of this organization):
    /// the difference between the charge's refunded total and the refunds recorded before,
    /// lowering the invoice's paid amount by it (a paid invoice owes that again), together
    /// with the event in one transaction. An event seen before, or one refunding no more
    /// than is recorded (older, or repeated under another id), changes nothing.
    pub async fn record_refund(
        &self,
        link: &PaymentLink,
        refunded: LinkRefunded<'_>,
        audit: AuditEvent,
    ) -> Result<Refunded> {
        let now = self.store.clock.now();
        let inv = self.get_invoice(link.invoice_id).await?;
        let payment = match link.payment_id {
            Some(pid) => self
                .payments(inv.id)
                .await?
                .into_iter()
                .find(|p| p.id == pid),
            None => None,
        };
        let mut tx = Tx::begin_in(self).await?;
        if !note_event(
            &mut tx,
            link.partner_id,
            refunded.event_id,
            refunded.event_type,
            now,
        )
        .await?
        {
            return Ok(Refunded::AlreadyTaken);
        }
        let why_not = match &payment {
            None => Some("the link's payment was never recorded".to_owned()),
            Some(p) if p.voided_at.is_some() => Some("the payment is void".to_owned()),
            Some(p) if p.currency != refunded.refunded_total.currency => Some(format!(
                "the payment is in {}, the refund in {}",
                p.currency, refunded.refunded_total.currency
            )),
            Some(_)
                if !matches!(
                    inv.status,
                    breeze_core::InvoiceStatus::Issued | breeze_core::InvoiceStatus::Paid
                ) =>
            {
                Some(format!("the invoice is {}", inv.status))
            }
            Some(_) => None,
        };
        let (Some(p), None) = (payment, why_not.clone()) else {
            let why = why_not.unwrap_or_default();
            ledger::commit(
                tx,
                &audit
                    .org(self.org)
                    .resource(inv.id)
                    .details(json!({ "eventId": refunded.event_id, "unmatched": why })),
                now,
            )
            .await?;
            return Ok(Refunded::Unmatched(why));
        };
        let before: i64 = sql(
            "SELECT CAST(COALESCE(SUM(amount_minor), 0) AS BIGINT) FROM invoice_refunds \
             WHERE payment_id = $1 AND org_id = $2",
        )
        .bind(p.id)
        .bind(self.org)
        .fetch_scalar(&mut tx)
        .await?;
        let total = refunded.refunded_total.minor.min(p.amount_minor);
        let more = total - before;
        if more <= 0 {
            // Older or repeated news: keep only the event's record.
            tx.commit().await?;
            return Ok(Refunded::AlreadyTaken);
        }
        // Conditional on the paid amount read: a concurrent change makes this a conflict,
        // and the provider delivers the event again.
        let n = sql(
            "UPDATE invoices SET paid_minor = paid_minor - $1, status = 'issued', \
             updated_at = $2 WHERE id = $3 AND org_id = $4 AND paid_minor = $5 \
             AND status IN ('issued', 'paid') AND paid_minor >= $1",
        )
        .bind(more)
        .bind(now)
        .bind(inv.id)
        .bind(self.org)
        .bind(inv.paid_minor)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the invoice changed meanwhile; read it again")?;
        let id = Uuid::now_v7();
        sql(format!(
            "INSERT INTO invoice_refunds (org_id, {REFUND_COLUMNS}) VALUES ($1, $2, $3, $4, $5, \
             $6, $7, $8, $9, $10, $11)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(inv.id)
        .bind(p.id)
        .bind(more)
        .bind(p.currency.code())
        .bind(link.provider.as_str())
        .bind(refunded.charge_id)
        .bind(total)
        .bind(refunded.event_id)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "the refund was recorded meanwhile".into()))?;
        let details = json!({
            "number": inv.reference(), "paymentId": p.id, "refundId": id,
            "eventId": refunded.event_id, "chargeId": refunded.charge_id,
            "amount": Money::new(more, p.currency),
            "refundedTotal": Money::new(total, p.currency),
        });
        ledger::commit(
            tx,
            &audit.org(self.org).resource(inv.id).details(details),
            now,
        )
        .await?;
        self.refunds(inv.id)
            .await?
            .into_iter()
            .find(|r| r.id == id)
            .map(Refunded::Recorded)
            .ok_or(StoreError::NotFound("refund"))
    }
}

impl crate::OrgQuotes<'_> {
    /// A quote's payment links, newest first.
    pub async fn payment_links(&self, quote: Uuid) -> Result<Vec<QuoteLink>> {
        ledger::children(
            self,
            "quote_payment_links",
            QUOTE_LINK_COLUMNS,
            "quote_id",
            quote,
            "created_at DESC, id DESC",
        )
        .await
    }

    /// Stores a link the provider made for a sent quote's total; its earlier open links are
    /// superseded. A quote paid through a link takes no other.
    pub async fn add_payment_link(
        &self,
        quote: &crate::Quote,
        link: NewPaymentLink,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<QuoteLink> {
        quote_payable(quote, link.amount)?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        // The quote must still be sent, unchanged, and not paid through another link.
        let state: Option<(String, i64)> =
            sql("SELECT status, total_minor FROM quotes WHERE id = $1 AND org_id = $2")
                .bind(quote.id)
                .bind(self.org)
                .fetch_optional(&mut tx)
                .await?;
        if state != Some(("sent".to_owned(), quote.total_minor)) {
            return Err(StoreError::Conflict(
                "the quote changed meanwhile; read it again".into(),
            ));
        }
        let paid: Option<(i64,)> = sql(
            "SELECT COUNT(*) FROM quote_payment_links WHERE quote_id = $1 AND org_id = $2 \
             AND status = 'paid'",
        )
        .bind(quote.id)
        .bind(self.org)
        .fetch_optional(&mut tx)
        .await?;
        if paid.is_some_and(|(n,)| n > 0) {
            return Err(StoreError::Conflict(format!(
                "quote {} is paid already",
                quote.reference()
            )));
        }
        let audit = audit.org(self.org).resource(quote.id);
        let owner = LinkOwner {
            org: self.org,
            partner: quote.partner_id,
            table: "quote_payment_links",
            columns: QUOTE_LINK_COLUMNS,
            parent_column: "quote_id",
            parent: quote.id,
            reference: Some(quote.reference()),
        };
        replace_open_link(tx, owner, id, &link, created_by, audit, now).await?;
        self.payment_links(quote.id)
            .await?
            .into_iter()
            .find(|l| l.id == id)
            .ok_or(StoreError::NotFound("payment link"))
    }

    /// Settles `link` (of this organization) as the provider's event says: records the event
    /// and — unless it or another about the same payment was taken before — marks the link
    /// paid (or unmatched, when the amount differs or the quote was declined), in one
    /// transaction.
    pub async fn settle_payment_link(
        &self,
        link: &QuoteLink,
        paid: LinkPaid<'_>,
        audit: AuditEvent,
    ) -> Result<QuoteSettled> {
        let q = self.get_quote(link.quote_id).await?;
        let Some(mut settling) =
            Settlement::begin(self, link.partner_id, link.amount(), &paid).await?
        else {
            return Ok(QuoteSettled::AlreadyTaken);
        };
        let why_not = settling
            .mismatch
            .take()
            .or_else(|| (q.status != "sent").then(|| format!("the quote is {}", q.status)));
        let status = if why_not.is_some() {
            "unmatched"
        } else {
            "paid"
        };
        let marked = sql(
            "UPDATE quote_payment_links SET status = $1, settled_at = $2, event_id = $3 \
             WHERE id = $4 AND org_id = $5 AND status IN ('open', 'superseded')",
        )
        .bind(status)
        .bind(settling.now)
        .bind(paid.event_id)
        .bind(link.id)
        .bind(self.org)
        .execute(&mut settling.tx)
        .await?;
        let details = json!({
            "number": q.reference(), "linkId": link.id, "eventId": paid.event_id,
            "amount": paid.amount, "unmatched": why_not,
        });
        let audit = audit.org(self.org).resource(q.id).details(details);
        if !settling.finish(self.store, marked, &paid, &audit).await? {
            return Ok(QuoteSettled::AlreadyTaken);
        }
        match why_not {
            Some(why) => Ok(QuoteSettled::Unmatched(why)),
            None => self
                .payment_links(q.id)
                .await?
                .into_iter()
                .find(|l| l.id == link.id)
                .map(|l| QuoteSettled::Paid(Box::new(l)))
                .ok_or(StoreError::NotFound("payment link")),
        }
    }
}

/// Whether `amount` may be asked of `quote` through a link: a sent quote, its whole total, in
/// its currency.
fn quote_payable(quote: &crate::Quote, amount: Money) -> Result<()> {
    if quote.status != "sent" {
        return Err(StoreError::Conflict(format!(
            "a payment link is for a sent quote; {} is {}",
            quote.reference(),
            quote.status
        )));
    }
    if amount != quote.total() || amount.minor <= 0 {
        return Err(StoreError::Invalid(format!(
            "a quote's payment link asks for its total, {}",
            quote.total()
        )));
    }
    Ok(())
}
