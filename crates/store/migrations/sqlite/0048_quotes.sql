-- Quotes (SQLite). Kept in lockstep with migrations/postgres/0048_quotes.sql.
--
-- A quote is a proposal to an organization: content blocks (headings and text, in order)
-- and priced lines (manual or from the catalog), totalled as an invoice's are. Its number
-- (Q-1, Q-2, …) counts up per partner from `quote_counters`, taken when the draft is made.
-- A draft changes freely; sending it to the customer freezes it (a trigger refuses changes
-- to a sent quote's lines and blocks as well); a quote may be declined, draft or sent.
CREATE TABLE quote_counters (
    partner_id  BLOB PRIMARY KEY REFERENCES partners (id),
    last_number INTEGER NOT NULL
);

CREATE TABLE quotes (
    id             BLOB PRIMARY KEY,
    org_id         BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id     BLOB NOT NULL REFERENCES partners (id),
    number         INTEGER NOT NULL,
    title          TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'sent', 'declined')),
    currency       TEXT NOT NULL,
    subtotal_minor INTEGER NOT NULL,
    tax_minor      INTEGER NOT NULL,
    total_minor    INTEGER NOT NULL,
    valid_until    TEXT,
    created_by     TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    sent_at        TEXT,
    declined_at    TEXT,
    decline_reason TEXT,
    UNIQUE (partner_id, number),
    UNIQUE (id, org_id)
);
CREATE INDEX quotes_by_org ON quotes (org_id, number);

CREATE TABLE quote_blocks (
    id       BLOB PRIMARY KEY,
    org_id   BLOB NOT NULL,
    quote_id BLOB NOT NULL,
    position INTEGER NOT NULL,
    kind     TEXT NOT NULL CHECK (kind IN ('heading', 'text')),
    body     TEXT NOT NULL,
    FOREIGN KEY (quote_id, org_id) REFERENCES quotes (id, org_id) ON DELETE CASCADE
);
CREATE INDEX quote_blocks_by_quote ON quote_blocks (org_id, quote_id, position);

CREATE TABLE quote_lines (
    id               BLOB PRIMARY KEY,
    org_id           BLOB NOT NULL,
    quote_id         BLOB NOT NULL,
    position         INTEGER NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('manual', 'catalog', 'bundle')),
    description      TEXT NOT NULL,
    quantity_milli   INTEGER NOT NULL,
    unit_price_minor INTEGER NOT NULL,
    amount_minor     INTEGER NOT NULL,
    tax_bp           INTEGER NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    tax_minor        INTEGER NOT NULL,
    currency         TEXT NOT NULL,
    catalog_item_id  BLOB REFERENCES catalog_items (id),
    FOREIGN KEY (quote_id, org_id) REFERENCES quotes (id, org_id) ON DELETE CASCADE
);
CREATE INDEX quote_lines_by_quote ON quote_lines (org_id, quote_id, position);

-- A sent quote is what the customer received: its lines and blocks never change.
CREATE TRIGGER quote_lines_frozen_insert BEFORE INSERT ON quote_lines
WHEN (SELECT status FROM quotes WHERE id = NEW.quote_id) = 'sent'
BEGIN SELECT RAISE(ABORT, 'a sent quote never changes'); END;
CREATE TRIGGER quote_lines_frozen_update BEFORE UPDATE ON quote_lines
WHEN (SELECT status FROM quotes WHERE id = OLD.quote_id) = 'sent'
BEGIN SELECT RAISE(ABORT, 'a sent quote never changes'); END;
CREATE TRIGGER quote_lines_frozen_delete BEFORE DELETE ON quote_lines
WHEN (SELECT status FROM quotes WHERE id = OLD.quote_id) = 'sent'
BEGIN SELECT RAISE(ABORT, 'a sent quote never changes'); END;
CREATE TRIGGER quote_blocks_frozen_insert BEFORE INSERT ON quote_blocks
WHEN (SELECT status FROM quotes WHERE id = NEW.quote_id) = 'sent'
BEGIN SELECT RAISE(ABORT, 'a sent quote never changes'); END;
CREATE TRIGGER quote_blocks_frozen_update BEFORE UPDATE ON quote_blocks
WHEN (SELECT status FROM quotes WHERE id = OLD.quote_id) = 'sent'
BEGIN SELECT RAISE(ABORT, 'a sent quote never changes'); END;
CREATE TRIGGER quote_blocks_frozen_delete BEFORE DELETE ON quote_blocks
WHEN (SELECT status FROM quotes WHERE id = OLD.quote_id) = 'sent'
BEGIN SELECT RAISE(ABORT, 'a sent quote never changes'); END;

-- Administrators draft and send quotes.
UPDATE roles SET permissions = json_insert(permissions, '$[#]', 'quotes.write', '$[#]', 'quotes.send')
    WHERE builtin = 1 AND name = 'Administrator';
