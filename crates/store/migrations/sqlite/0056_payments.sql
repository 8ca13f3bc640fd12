-- Payments through Stripe (SQLite). Kept in lockstep with migrations/postgres/0056_payments.sql.
--
-- A partner's outside billing accounts: its Stripe secret key and webhook signing secret, and
-- its TD SYNNEX EC Express account, each sealed (AEAD, `v1:` + base64) under the server's
-- credential key; the database never holds them in the clear. A payment link is a Stripe
-- Checkout Session for an issued invoice's balance: its id, URL, amount and state. A Stripe
-- event is recorded once per partner, in the transaction that acts on it, so a replayed or
-- redelivered event changes nothing.
CREATE TABLE partner_billing (
    partner_id            BLOB PRIMARY KEY REFERENCES partners (id),
    stripe_secret_key     TEXT,
    stripe_webhook_secret TEXT,
    synnex_account        TEXT,
    synnex_region         TEXT CHECK (synnex_region IN ('us', 'ca')),
    updated_at            TEXT NOT NULL
);

CREATE TABLE payment_links (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id   BLOB NOT NULL REFERENCES partners (id),
    invoice_id   BLOB NOT NULL,
    provider     TEXT NOT NULL CHECK (provider IN ('stripe')),
    external_id  TEXT NOT NULL,
    url          TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0),
    currency     TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('open', 'paid', 'superseded', 'unmatched')),
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    settled_at   TEXT,
    payment_id   BLOB,
    UNIQUE (provider, external_id),
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX payment_links_by_invoice ON payment_links (org_id, invoice_id, created_at);

CREATE TABLE stripe_events (
    partner_id  BLOB NOT NULL REFERENCES partners (id),
    event_id    TEXT NOT NULL,
    type        TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (partner_id, event_id)
);

-- A payment taken through a link names it: one payment per link, whatever arrives twice.
CREATE UNIQUE INDEX invoice_payments_one_per_link ON invoice_payments (method, reference)
    WHERE method = 'stripe';
