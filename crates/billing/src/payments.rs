//! Payment links and Stripe's webhooks, as every door runs them.

use breeze_core::{Actor, AuditEvent, PartnerId};
use breeze_store::{
    Invoice, LinkPaid, LinkRefunded, NewPaymentLink, PaymentLink, Quote, QuoteLink, QuoteSettled,
    Refunded, Settled, StoreError,
};

use crate::{
    Billing, BillingError, OrgBilling, Purpose, Result,
    stripe::{self, CheckoutRequest, SignatureError},
};

/// What a webhook did.
#[derive(Debug, Clone, PartialEq)]
pub enum WebhookOutcome {
    /// A payment was recorded against an invoice.
    Recorded { invoice: uuid::Uuid },
    /// A quote was paid through its link.
    QuotePaid { quote: uuid::Uuid },
    /// A refund of a payment taken through an invoice's link was recorded against it.
    Refunded { invoice: uuid::Uuid },
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

impl OrgBilling<'_> {
    /// A payment link for a sent quote's total: its open link if there is one, else a new
    /// Stripe Checkout Session (older open links are superseded). A retried call for an
    /// unchanged quote reuses Stripe's answer through the idempotency key.
    pub async fn quote_link(
        &self,
        quote: &Quote,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<QuoteLink> {
        let quotes = self.org.quotes();
        let total = quote.total();
        if quote.status != "sent" || total.minor <= 0 {
            return Err(StoreError::Conflict(format!(
                "a payment link is for a sent quote with a total; {} is {}",
                quote.reference(),
                quote.status
            ))
            .into());
        }
        let links = quotes.payment_links(quote.id).await?;
        if links.iter().any(|l| l.status == "paid") {
            return Err(StoreError::Conflict(format!(
                "quote {} is paid already",
                quote.reference()
            ))
            .into());
        }
        if let Some(open) = links
            .into_iter()
            .find(|l| l.status == "open" && l.amount() == total)
        {
            return Ok(open);
        }
        let key = self.billing.stripe_key(quote.partner_id).await?;
        let org = self.org.tenancy().organization().await?;
        let number = quote.reference();
        let id = quote.id.to_string();
        let success_url = format!(
            "{}/o/{}/quotes/{id}?paid=1",
            self.billing.config.public_url.trim_end_matches('/'),
            org.slug
        );
        let session = stripe::create_checkout_session(
            &self.billing.egress,
            &self.billing.config.stripe_api,
            &key,
            &CheckoutRequest {
                amount: total,
                name: &format!("Quote {number}: {} ({})", quote.title, org.name),
                reference: &id,
                metadata: &[("breeze_quote", &id), ("breeze_number", &number)],
                success_url: &success_url,
            },
            &format!("breeze-quote-{id}-{}", quote.updated_at.timestamp_micros()),
        )
        .await?;
        if session.amount().is_some_and(|a| a != total) {
            return Err(crate::ProviderError::Malformed(format!(
                "Stripe made a session for {:?} {:?}, not {total}",
                session.amount_total, session.currency
            ))
            .into());
        }
        let link = NewPaymentLink {
            provider: "stripe".into(),
            url: session.url.clone().unwrap_or_default(),
            external_id: session.id,
            amount: total,
        };
        Ok(quotes
            .add_payment_link(quote, link, created_by, audit)
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
    /// paid Checkout Session of one of the partner's payment links records its payment once
    /// (an invoice's against the invoice, a quote's as the quote's link paid), whatever is
    /// replayed or redelivered. A partner without a signing secret answers as a
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
        if let Some(charge) = event.refunded_charge() {
            return self.take_refund(partner, &event, &charge).await;
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
            Some(_) => {
                tracing::warn!(%partner, session = %session.id, "another partner's payment link");
                return self.ignore(partner, &event).await;
            }
            None => {
                return self.take_quote_payment(partner, &event, &session).await;
            }
        };
        let Some(amount) = session.amount() else {
            return Err(WebhookError::NotAnEvent);
        };
        self.settle_invoice_link(&link, &event, amount, session.payment_intent.as_deref())
            .await
    }

    /// A `charge.refunded` event about a payment taken through one of the partner's invoice
    /// links (matched by its PaymentIntent) records what it refunds more than before, once.
    async fn take_refund(
        &self,
        partner: PartnerId,
        event: &stripe::Event,
        charge: &stripe::Charge,
    ) -> Result<WebhookOutcome, WebhookError> {
        let Some(refunded_total) = charge.refunded_total() else {
            return Err(WebhookError::NotAnEvent);
        };
        let link = match charge.payment_intent.as_deref() {
            Some(pi) => self.store.payment_link_by_intent("stripe", pi).await?,
            None => None,
        };
        let link = match link {
            Some(l) if l.partner_id == partner => l,
            _ => return self.ignore(partner, event).await,
        };
        let audit = AuditEvent::new(
            Actor::system("stripe"),
            "invoice.payment_refunded",
            "invoice",
        );
        let done = self
            .store
            .org(link.org_id)
            .invoices()
            .record_refund(
                &link,
                LinkRefunded {
                    event_id: &event.id,
                    event_type: &event.kind,
                    charge_id: &charge.id,
                    refunded_total,
                },
                audit,
            )
            .await?;
        Ok(match done {
            Refunded::Recorded(_) => WebhookOutcome::Refunded {
                invoice: link.invoice_id,
            },
            Refunded::AlreadyTaken => WebhookOutcome::Duplicate,
            Refunded::Unmatched(why) => WebhookOutcome::Unmatched(why),
        })
    }

    /// A paid session that is one of the partner's quote links marks that quote paid, once.
    async fn take_quote_payment(
        &self,
        partner: PartnerId,
        event: &stripe::Event,
        session: &stripe::CheckoutSession,
    ) -> Result<WebhookOutcome, WebhookError> {
        let link = match self
            .store
            .quote_link_by_external("stripe", &session.id)
            .await?
        {
            Some(l) if l.partner_id == partner => l,
            _ => {
                tracing::warn!(
                    %partner,
                    session = %session.id,
                    "a paid Stripe session names no payment link of this partner"
                );
                return self.ignore(partner, event).await;
            }
        };
        let Some(amount) = session.amount() else {
            return Err(WebhookError::NotAnEvent);
        };
        let audit = AuditEvent::new(Actor::system("stripe"), "quote.payment_received", "quote");
        let settled = self
            .store
            .org(link.org_id)
            .quotes()
            .settle_payment_link(
                &link,
                LinkPaid {
                    event_id: &event.id,
                    event_type: &event.kind,
                    amount,
                    payment_intent: session.payment_intent.as_deref(),
                },
                audit,
            )
            .await?;
        Ok(match settled {
            QuoteSettled::Paid(_) => WebhookOutcome::QuotePaid {
                quote: link.quote_id,
            },
            QuoteSettled::AlreadyTaken => WebhookOutcome::Duplicate,
            QuoteSettled::Unmatched(why) => WebhookOutcome::Unmatched(why),
        })
    }

    /// A paid session of one of the partner's invoice links records its payment, once.
    async fn settle_invoice_link(
        &self,
        link: &PaymentLink,
        event: &stripe::Event,
        amount: breeze_core::Money,
        payment_intent: Option<&str>,
    ) -> Result<WebhookOutcome, WebhookError> {
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
                link,
                LinkPaid {
                    event_id: &event.id,
                    event_type: &event.kind,
                    amount,
                    payment_intent,
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
