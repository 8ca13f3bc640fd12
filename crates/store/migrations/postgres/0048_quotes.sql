-- Quotes (PostgreSQL). Kept in lockstep with migrations/sqlite/0048_quotes.sql.
--
-- A quote is a proposal to an organization: content blocks (headings and text, in order)
-- and priced lines (manual or from the catalog), totalled as an invoice's are. Its number
-- (Q-1, Q-2, …) counts up per partner from `quote_counters`, taken when the draft is made.
-- A draft changes freely; sending it to the customer freezes it (a trigger refuses changes
-- to a sent quote's lines and blocks as well); a quote may be declined, draft or sent.
CREATE TABLE quote_counters (
    partner_id  UUID PRIMARY KEY REFERENCES partners (id),
    last_number BIGINT NOT NULL
);

CREATE TABLE quotes (
    id             UUID PRIMARY KEY,
    org_id         UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id     UUID NOT NULL REFERENCES partners (id),
    number         BIGINT NOT NULL,
    title          TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'sent', 'declined')),
    currency       TEXT NOT NULL,
    subtotal_minor BIGINT NOT NULL,
    tax_minor      BIGINT NOT NULL,
    total_minor    BIGINT NOT NULL,
    valid_until    TIMESTAMPTZ,
    created_by     TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    sent_at        TIMESTAMPTZ,
    declined_at    TIMESTAMPTZ,
    decline_reason TEXT,
    UNIQUE (partner_id, number),
    UNIQUE (id, org_id)
);
CREATE INDEX quotes_by_org ON quotes (org_id, number);

CREATE TABLE quote_blocks (
    id       UUID PRIMARY KEY,
    org_id   UUID NOT NULL,
    quote_id UUID NOT NULL,
    position BIGINT NOT NULL,
    kind     TEXT NOT NULL CHECK (kind IN ('heading', 'text')),
    body     TEXT NOT NULL,
    FOREIGN KEY (quote_id, org_id) REFERENCES quotes (id, org_id) ON DELETE CASCADE
);
CREATE INDEX quote_blocks_by_quote ON quote_blocks (org_id, quote_id, position);

CREATE TABLE quote_lines (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL,
    quote_id         UUID NOT NULL,
    position         BIGINT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('manual', 'catalog', 'bundle')),
    description      TEXT NOT NULL,
    quantity_milli   BIGINT NOT NULL,
    unit_price_minor BIGINT NOT NULL,
    amount_minor     BIGINT NOT NULL,
    tax_bp           BIGINT NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    tax_minor        BIGINT NOT NULL,
    currency         TEXT NOT NULL,
    catalog_item_id  UUID REFERENCES catalog_items (id),
    FOREIGN KEY (quote_id, org_id) REFERENCES quotes (id, org_id) ON DELETE CASCADE
);
CREATE INDEX quote_lines_by_quote ON quote_lines (org_id, quote_id, position);

-- A sent quote is what the customer received: its lines and blocks never change.
CREATE FUNCTION quote_parts_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT status FROM quotes WHERE id = COALESCE(NEW.quote_id, OLD.quote_id)) = 'sent' THEN
        RAISE EXCEPTION 'a sent quote never changes';
    END IF;
    RETURN COALESCE(NEW, OLD);
END
$$;
CREATE TRIGGER quote_lines_frozen BEFORE INSERT OR UPDATE OR DELETE ON quote_lines
    FOR EACH ROW EXECUTE FUNCTION quote_parts_frozen();
CREATE TRIGGER quote_blocks_frozen BEFORE INSERT OR UPDATE OR DELETE ON quote_blocks
    FOR EACH ROW EXECUTE FUNCTION quote_parts_frozen();

DO $$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY['quotes', 'quote_blocks', 'quote_lines']::regclass[]
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY org_wall ON %s '
            'USING (current_setting(''breeze.scope'', true) IN (''system'', org_id::text))',
            t);
    END LOOP;
END
$$;

-- Administrators draft and send quotes.
UPDATE roles SET permissions = permissions || '["quotes.write", "quotes.send"]'::jsonb
    WHERE builtin AND name = 'Administrator';
