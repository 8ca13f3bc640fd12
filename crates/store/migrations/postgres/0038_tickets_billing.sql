-- Tickets and billing (PostgreSQL). Kept in lockstep with migrations/sqlite/0038_tickets_billing.sql.
--
-- Tickets belong to an organization; their numbers count up per partner (`ticket_counters`),
-- so two organizations of one partner never show the same number. Comments, alert links,
-- time entries and parts hang off a ticket by `(ticket_id, org_id)` and follow it when it
-- moves to another organization of the partner (ON UPDATE CASCADE; alert links, which name
-- the old organization's alerts, are removed first). At most one running timer (an entry
-- without `ended_at`) exists per user, whatever the organization.
--
-- Amounts are integers in the currency's minor unit with the ISO 4217 code beside them
-- (`breeze_core::money`); quantities are thousandths. An invoice's number is assigned when
-- it is issued, from `invoice_counters` (one row per partner, locked by the issuing
-- transaction, so numbers are gap-free and increase in commit order); a draft has none.
-- Issued invoices are frozen by trigger: their lines, amounts, number and currency never
-- change, only their payments and the move to paid or void (which keeps the number).
CREATE TABLE ticket_counters (
    partner_id  UUID PRIMARY KEY REFERENCES partners (id),
    last_number BIGINT NOT NULL
);

CREATE TABLE tickets (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id  UUID NOT NULL REFERENCES partners (id),
    number      BIGINT NOT NULL,
    subject     TEXT NOT NULL,
    description TEXT NOT NULL,
    category    TEXT,
    priority    TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    status      TEXT NOT NULL CHECK (status IN ('new', 'open', 'pending', 'on_hold', 'resolved', 'closed')),
    device_id   UUID,
    submitter   TEXT,
    assignee_id UUID REFERENCES users (id),
    tags        JSONB NOT NULL,
    due_at      TIMESTAMPTZ,
    created_by  TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    resolved_at TIMESTAMPTZ,
    closed_at   TIMESTAMPTZ,
    UNIQUE (partner_id, number),
    UNIQUE (id, org_id),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id)
);
CREATE INDEX tickets_by_number ON tickets (org_id, number);
CREATE INDEX tickets_by_device ON tickets (org_id, device_id);

CREATE TABLE ticket_comments (
    id             UUID PRIMARY KEY,
    org_id         UUID NOT NULL,
    ticket_id      UUID NOT NULL,
    author         TEXT NOT NULL,
    author_user_id UUID NOT NULL REFERENCES users (id),
    body           TEXT NOT NULL,
    internal       BOOLEAN NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    edited_at      TIMESTAMPTZ,
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX ticket_comments_by_ticket ON ticket_comments (org_id, ticket_id, created_at);

CREATE TABLE ticket_alerts (
    ticket_id UUID NOT NULL,
    alert_id  UUID NOT NULL,
    org_id    UUID NOT NULL,
    linked_by TEXT NOT NULL,
    linked_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (ticket_id, alert_id),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE,
    FOREIGN KEY (alert_id, org_id) REFERENCES alerts (id, org_id) ON DELETE CASCADE
);
CREATE INDEX ticket_alerts_by_alert ON ticket_alerts (org_id, alert_id);

CREATE TABLE invoice_counters (
    partner_id  UUID PRIMARY KEY REFERENCES partners (id),
    last_number BIGINT NOT NULL
);

CREATE TABLE invoices (
    id             UUID PRIMARY KEY,
    org_id         UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id     UUID NOT NULL REFERENCES partners (id),
    number         BIGINT,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'issued', 'paid', 'void')),
    currency       TEXT NOT NULL,
    subtotal_minor BIGINT NOT NULL,
    tax_minor      BIGINT NOT NULL,
    total_minor    BIGINT NOT NULL,
    paid_minor     BIGINT NOT NULL,
    notes          TEXT,
    due_at         TIMESTAMPTZ,
    ticket_id      UUID,
    issued_at      TIMESTAMPTZ,
    voided_at      TIMESTAMPTZ,
    void_reason    TEXT,
    created_by     TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    UNIQUE (partner_id, number),
    UNIQUE (id, org_id),
    CHECK ((status = 'draft' AND number IS NULL AND issued_at IS NULL)
        OR (status <> 'draft' AND number IS NOT NULL AND issued_at IS NOT NULL)),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id)
);
CREATE INDEX invoices_by_org ON invoices (org_id, id);

CREATE TABLE ticket_time_entries (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL,
    ticket_id   UUID NOT NULL,
    user_id     UUID NOT NULL REFERENCES users (id),
    actor       TEXT NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL,
    ended_at    TIMESTAMPTZ,
    minutes     BIGINT,
    billable    BOOLEAN NOT NULL,
    rate_minor  BIGINT NOT NULL,
    currency    TEXT NOT NULL,
    note        TEXT,
    created_at  TIMESTAMPTZ NOT NULL,
    invoice_id  UUID,
    UNIQUE (id, org_id),
    CHECK ((ended_at IS NULL AND minutes IS NULL) OR (ended_at IS NOT NULL AND minutes >= 0)),
    CHECK (rate_minor >= 0),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX ticket_time_by_ticket ON ticket_time_entries (org_id, ticket_id, started_at);
CREATE UNIQUE INDEX ticket_time_one_timer ON ticket_time_entries (user_id) WHERE ended_at IS NULL;

CREATE TABLE ticket_parts (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL,
    ticket_id        UUID NOT NULL,
    description      TEXT NOT NULL,
    quantity_milli   BIGINT NOT NULL CHECK (quantity_milli > 0),
    unit_price_minor BIGINT NOT NULL,
    currency         TEXT NOT NULL,
    billable         BOOLEAN NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    invoice_id       UUID,
    UNIQUE (id, org_id),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX ticket_parts_by_ticket ON ticket_parts (org_id, ticket_id);

CREATE TABLE invoice_lines (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL,
    invoice_id       UUID NOT NULL,
    position         BIGINT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('manual', 'time', 'part')),
    description      TEXT NOT NULL,
    quantity_milli   BIGINT NOT NULL,
    unit_price_minor BIGINT NOT NULL,
    amount_minor     BIGINT NOT NULL,
    tax_bp           BIGINT NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    tax_minor        BIGINT NOT NULL,
    currency         TEXT NOT NULL,
    time_entry_id    UUID,
    part_id          UUID,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (time_entry_id, org_id) REFERENCES ticket_time_entries (id, org_id),
    FOREIGN KEY (part_id, org_id) REFERENCES ticket_parts (id, org_id)
);
CREATE INDEX invoice_lines_by_invoice ON invoice_lines (org_id, invoice_id, position);

CREATE TABLE invoice_payments (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL,
    invoice_id   UUID NOT NULL,
    amount_minor BIGINT NOT NULL CHECK (amount_minor > 0),
    currency     TEXT NOT NULL,
    method       TEXT NOT NULL,
    reference    TEXT,
    received_at  TIMESTAMPTZ NOT NULL,
    recorded_by  TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    voided_at    TIMESTAMPTZ,
    void_reason  TEXT,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX invoice_payments_by_invoice ON invoice_payments (org_id, invoice_id);

-- An issued invoice is frozen: its lines never change, nor its number, currency, amounts,
-- notes or due date; a void one changes no more at all; only a draft is deleted.
CREATE FUNCTION invoice_lines_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    inv UUID := CASE WHEN TG_OP = 'INSERT' THEN NEW.invoice_id ELSE OLD.invoice_id END;
BEGIN
    IF (SELECT status FROM invoices WHERE id = inv) <> 'draft' THEN
        RAISE EXCEPTION 'invoice is not a draft: its lines never change';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER invoice_lines_frozen BEFORE INSERT OR UPDATE OR DELETE ON invoice_lines
    FOR EACH ROW EXECUTE FUNCTION invoice_lines_frozen();
CREATE FUNCTION invoices_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status <> 'draft' THEN
            RAISE EXCEPTION 'only a draft invoice is deleted';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.status <> 'draft' AND (OLD.status = 'void'
        OR NEW.number IS DISTINCT FROM OLD.number OR NEW.currency IS DISTINCT FROM OLD.currency
        OR NEW.subtotal_minor IS DISTINCT FROM OLD.subtotal_minor
        OR NEW.tax_minor IS DISTINCT FROM OLD.tax_minor
        OR NEW.total_minor IS DISTINCT FROM OLD.total_minor
        OR NEW.issued_at IS DISTINCT FROM OLD.issued_at
        OR NEW.notes IS DISTINCT FROM OLD.notes OR NEW.due_at IS DISTINCT FROM OLD.due_at
        OR NEW.org_id IS DISTINCT FROM OLD.org_id OR NEW.partner_id IS DISTINCT FROM OLD.partner_id
        OR NEW.status = 'draft') THEN
        RAISE EXCEPTION 'an issued invoice never changes: void it and issue another';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER invoices_frozen BEFORE UPDATE OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION invoices_frozen();

-- Row security for the new organization tables (0032 covered the tables that existed then).
DO $$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY['tickets', 'ticket_comments', 'ticket_alerts', 'invoices',
        'ticket_time_entries', 'ticket_parts', 'invoice_lines', 'invoice_payments']::regclass[]
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

-- The built-in roles gain the ticket and billing permissions: administrators all of them,
-- technicians working tickets, read-only users reading them.
UPDATE roles SET permissions = permissions || '["tickets.read", "tickets.write", "tickets.manage", "invoices.read", "invoices.write", "invoices.send"]'::jsonb
    WHERE builtin AND name = 'Administrator';
UPDATE roles SET permissions = permissions || '["tickets.read", "tickets.write"]'::jsonb,
        description = 'Operates devices, scripts, alerts, files and tickets; no billing, settings, users or keys'
    WHERE builtin AND name = 'Technician';
UPDATE roles SET permissions = permissions || '["tickets.read"]'::jsonb,
        description = 'Sees devices, scripts, alerts, files, tickets and the audit log; changes nothing'
    WHERE builtin AND name = 'Read Only';
