-- Payment links of quotes, and refunds of invoice payments (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0064_quote_payment_links.sql.
--
-- A sent quote can be paid ahead through a Stripe Checkout Session for its total, as an issued
-- invoice's balance can (0056): the session's id, URL, amount and state. Settling one records
-- the Stripe event (`stripe_events`) in the same transaction and moves the link from open to
-- paid conditionally, so a replayed or redelivered event changes nothing. `event_id` names the
-- event that settled it.
CREATE TABLE quote_payment_links (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id   UUID NOT NULL REFERENCES partners (id),
    quote_id     UUID NOT NULL,
    provider     TEXT NOT NULL CHECK (provider IN ('stripe')),
    external_id  TEXT NOT NULL,
    url          TEXT NOT NULL,
    amount_minor BIGINT NOT NULL CHECK (amount_minor > 0),
    currency     TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('open', 'paid', 'superseded', 'unmatched')),
    created_by   TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    settled_at   TIMESTAMPTZ,
    event_id     TEXT,
    UNIQUE (provider, external_id),
    FOREIGN KEY (quote_id, org_id) REFERENCES quotes (id, org_id)
);
CREATE INDEX quote_payment_links_by_quote ON quote_payment_links (org_id, quote_id, created_at);

ALTER TABLE quote_payment_links ENABLE ROW LEVEL SECURITY;
ALTER TABLE quote_payment_links FORCE ROW LEVEL SECURITY;
CREATE POLICY org_wall ON quote_payment_links
    USING (current_setting('breeze.scope', true) IN ('system', org_id::text));

-- Refunds made at Stripe of a payment taken through an invoice's link. A paid link keeps the
-- Checkout Session's PaymentIntent, which a `charge.refunded` event names; each event that
-- refunds more records the difference against the payment (`refunded_total_minor` is the
-- charge's `amount_refunded` it brought), lowering the invoice's paid amount, in the
-- transaction that records the event, so a replay or an older event records nothing.
ALTER TABLE payment_links ADD COLUMN payment_intent TEXT;
CREATE INDEX payment_links_by_intent ON payment_links (provider, payment_intent);

CREATE TABLE invoice_refunds (
    id                   UUID PRIMARY KEY,
    org_id               UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    invoice_id           UUID NOT NULL,
    payment_id           UUID NOT NULL REFERENCES invoice_payments (id),
    amount_minor         BIGINT NOT NULL CHECK (amount_minor > 0),
    currency             TEXT NOT NULL,
    provider             TEXT NOT NULL CHECK (provider IN ('stripe')),
    charge_id            TEXT NOT NULL,
    refunded_total_minor BIGINT NOT NULL,
    event_id             TEXT NOT NULL,
    created_at           TIMESTAMPTZ NOT NULL,
    UNIQUE (payment_id, refunded_total_minor),
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX invoice_refunds_by_invoice ON invoice_refunds (org_id, invoice_id, created_at);

ALTER TABLE invoice_refunds ENABLE ROW LEVEL SECURITY;
ALTER TABLE invoice_refunds FORCE ROW LEVEL SECURITY;
CREATE POLICY org_wall ON invoice_refunds
    USING (current_setting('breeze.scope', true) IN ('system', org_id::text));
