//! Payment links and Stripe's webhooks, as every door runs them.

use breeze_core::{Actor, AuditEvent, PartnerId};
use breeze_store::{Invoice, LinkPaid, NewPaymentLink, PaymentLink, Settled, StoreError};

use crate::{
    Billing, BillingError, OrgBilling, Purpose, Result,
    stripe::{self, CheckoutRequest, SignatureError},
};

/// What a webhook did.
#[derive(Debug, Clone, PartialEq)]
pub enum WebhookOutcome {
    /// A payment was recorded against an invoice.
    Recorded { invoice: uuid::Uuid },
    /// The event (or another about the same payment) was taken before: nothing changed.
    Duplicate,
    /// Paid, but the invoice could not take it: the link is marked for a person.
    Unmatched(String),
    /// Not an event Breeze acts on (recorded, so a redelivery is known).
    Ignored,
}

impl OrgBilling<'_> {
    /// A payment link for an issued invoice's balance: the open link asking for that amount
    /// if there is one, else a new Stripe Checkout Session (older open links are superseded).
    /// A retried call for an unchanged invoice reuses Stripe's answer through the idempotency
    /// key, so it never makes a second session.
    pub async fn invoice_link(
        &self,
        invoice: &Invoice,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<PaymentLink> {
        let invoices = self.org.invoices();
        let balance = invoice.balance();
        if invoice.status != breeze_core::InvoiceStatus::Issued || balance.minor <= 0 {
            return Err(StoreError::Conflict(format!(
                "a payment link is for an issued invoice that owes something; this one is {}",
                invoice.status
            ))
            .into());
        }
        if let Some(open) = invoices
            .payment_links(invoice.id)
            .await?
            .into_iter()
            .find(|l| l.status == "open" && l.amount() == balance)
        {
            return Ok(open);
        }
        let key = self.billing.stripe_key(invoice.partner_id).await?;
        let org = self.org.tenancy().organization().await?;
        let number = invoice.reference().unwrap_or_default();
        let id = invoice.id.to_string();
        let success_url = format!(
            "{}/o/{}/invoices/{id}?paid=1",
            self.billing.config.public_url.trim_end_matches('/'),
            org.slug
        );
        let session = stripe::create_checkout_session(
            &self.billing.egress,
            &self.billing.config.stripe_api,
            &key,
            &CheckoutRequest {
                amount: balance,
                name: &format!("Invoice {number} ({})", org.name),
                reference: &id,
                metadata: &[("breeze_invoice", &id), ("breeze_number", &number)],
                success_url: &success_url,
            },
            &format!(
                "breeze-invoice-{id}-{}-{}",
                invoice.paid_minor,
                invoice.updated_at.timestamp_micros()
            ),
        )
        .await?;
        if session.amount().is_some_and(|a| a != balance) {
            return Err(crate::ProviderError::Malformed(format!(
                "Stripe made a session for {:?} {:?}, not {balance}",
                session.amount_total, session.currency
            ))
            .into());
        }
        let link = NewPaymentLink {
            provider: "stripe".into(),
            url: session.url.clone().unwrap_or_default(),
            external_id: session.id,
            amount: balance,
        };
        Ok(invoices
            .add_payment_link(invoice, link, created_by, audit)
            .await?)
    }
}

/// Why a webhook was refused: every one is answered 400 and changes nothing.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// Signed, but not an event.
    #[error("the body is not a Stripe event")]
    NotAnEvent,
    /// The store failed: Stripe should deliver again.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Billing {
    /// Takes a webhook Stripe sent to partner `partner`'s endpoint: the signature must verify
    /// under that partner's signing secret within the tolerance ([`stripe::verify`]); then a
    /// paid Checkout Session of one of the partner's payment links records its payment once,
    /// whatever is replayed or redelivered. A partner without a signing secret answers as a
    /// bad signature does, so the endpoint tells nothing about who is set up.
    pub async fn take_stripe_webhook(
        &self,
        partner: PartnerId,
        body: &[u8],
        signature: Option<&str>,
    ) -> Result<WebhookOutcome, WebhookError> {
        let secret = match self.store.partner_billing(partner).await? {
            Some(row) => row
                .stripe_webhook_secret
                .and_then(|s| self.open(Purpose::StripeWebhook, partner, &s).ok()),
            None => None,
        };
        let Some(secret) = secret else {
            return Err(SignatureError::Mismatch.into());
        };
        stripe::verify(
            body,
            signature,
            &secret,
            self.clock.now().timestamp(),
            stripe::TOLERANCE,
        )?;
        let event: stripe::Event =
            serde_json::from_slice(body).map_err(|_| WebhookError::NotAnEvent)?;
        if event.object != "event" || event.id.is_empty() || event.id.len() > 255 {
            return Err(WebhookError::NotAnEvent);
        }
        let session = match event.session() {
            Some(s) if event.is_payment() => s,
            _ => return self.ignore(partner, &event).await,
        };
        let link = match self
            .store
            .payment_link_by_external("stripe", &session.id)
            .await?
        {
            // Only the partner whose secret signed it speaks for its links.
            Some(l) if l.partner_id == partner => l,
            _ => {
                tracing::warn!(
                    %partner,
                    session = %session.id,
                    "a paid Stripe session names no payment link of this partner"
                );
                return self.ignore(partner, &event).await;
            }
        };
        let Some(amount) = session.amount() else {
            return Err(WebhookError::NotAnEvent);
        };
        let audit = AuditEvent::new(
            Actor::system("stripe"),
            "invoice.payment_received",
            "invoice",
        );
        let settled = self
            .store
            .org(link.org_id)
            .invoices()
            .settle_payment_link(
                &link,
                LinkPaid {
                    event_id: &event.id,
                    event_type: &event.kind,
                    amount,
                },
                audit,
            )
            .await?;
        Ok(match settled {
            Settled::Recorded(_) => WebhookOutcome::Recorded {
                invoice: link.invoice_id,
            },
            Settled::AlreadyTaken => WebhookOutcome::Duplicate,
            Settled::Unmatched(why) => WebhookOutcome::Unmatched(why),
        })
    }
}

impl Billing {
    /// Records an event that needs no action, so its redelivery is known.
    async fn ignore(
        &self,
        partner: PartnerId,
        event: &stripe::Event,
    ) -> Result<WebhookOutcome, WebhookError> {
        Ok(
            if self
                .store
                .note_provider_event(partner, &event.id, &event.kind)
                .await?
            {
                WebhookOutcome::Ignored
            } else {
                WebhookOutcome::Duplicate
            },
        )
    }
}

impl From<BillingError> for WebhookError {
    fn from(e: BillingError) -> Self {
        match e {
            BillingError::Store(s) => WebhookError::Store(s),
            _ => WebhookError::Signature(SignatureError::Mismatch),
        }
    }
}
