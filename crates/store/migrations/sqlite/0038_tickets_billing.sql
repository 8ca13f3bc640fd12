-- Tickets and billing (SQLite). Kept in lockstep with migrations/postgres/0038_tickets_billing.sql.
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
    partner_id  BLOB PRIMARY KEY REFERENCES partners (id),
    last_number INTEGER NOT NULL
);

CREATE TABLE tickets (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id  BLOB NOT NULL REFERENCES partners (id),
    number      INTEGER NOT NULL,
    subject     TEXT NOT NULL,
    description TEXT NOT NULL,
    category    TEXT,
    priority    TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    status      TEXT NOT NULL CHECK (status IN ('new', 'open', 'pending', 'on_hold', 'resolved', 'closed')),
    device_id   BLOB,
    submitter   TEXT,
    assignee_id BLOB REFERENCES users (id),
    tags        TEXT NOT NULL,
    due_at      TEXT,
    created_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    resolved_at TEXT,
    closed_at   TEXT,
    UNIQUE (partner_id, number),
    UNIQUE (id, org_id),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id)
);
CREATE INDEX tickets_by_number ON tickets (org_id, number);
CREATE INDEX tickets_by_device ON tickets (org_id, device_id);

CREATE TABLE ticket_comments (
    id             BLOB PRIMARY KEY,
    org_id         BLOB NOT NULL,
    ticket_id      BLOB NOT NULL,
    author         TEXT NOT NULL,
    author_user_id BLOB NOT NULL REFERENCES users (id),
    body           TEXT NOT NULL,
    internal       INTEGER NOT NULL,
    created_at     TEXT NOT NULL,
    edited_at      TEXT,
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX ticket_comments_by_ticket ON ticket_comments (org_id, ticket_id, created_at);

CREATE TABLE ticket_alerts (
    ticket_id BLOB NOT NULL,
    alert_id  BLOB NOT NULL,
    org_id    BLOB NOT NULL,
    linked_by TEXT NOT NULL,
    linked_at TEXT NOT NULL,
    PRIMARY KEY (ticket_id, alert_id),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE,
    FOREIGN KEY (alert_id, org_id) REFERENCES alerts (id, org_id) ON DELETE CASCADE
);
CREATE INDEX ticket_alerts_by_alert ON ticket_alerts (org_id, alert_id);

CREATE TABLE invoice_counters (
    partner_id  BLOB PRIMARY KEY REFERENCES partners (id),
    last_number INTEGER NOT NULL
);

CREATE TABLE invoices (
    id             BLOB PRIMARY KEY,
    org_id         BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id     BLOB NOT NULL REFERENCES partners (id),
    number         INTEGER,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'issued', 'paid', 'void')),
    currency       TEXT NOT NULL,
    subtotal_minor INTEGER NOT NULL,
    tax_minor      INTEGER NOT NULL,
    total_minor    INTEGER NOT NULL,
    paid_minor     INTEGER NOT NULL,
    notes          TEXT,
    due_at         TEXT,
    ticket_id      BLOB,
    issued_at      TEXT,
    voided_at      TEXT,
    void_reason    TEXT,
    created_by     TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    UNIQUE (partner_id, number),
    UNIQUE (id, org_id),
    CHECK ((status = 'draft' AND number IS NULL AND issued_at IS NULL)
        OR (status <> 'draft' AND number IS NOT NULL AND issued_at IS NOT NULL)),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id)
);
CREATE INDEX invoices_by_org ON invoices (org_id, id);

CREATE TABLE ticket_time_entries (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL,
    ticket_id   BLOB NOT NULL,
    user_id     BLOB NOT NULL REFERENCES users (id),
    actor       TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    ended_at    TEXT,
    minutes     INTEGER,
    billable    INTEGER NOT NULL,
    rate_minor  INTEGER NOT NULL,
    currency    TEXT NOT NULL,
    note        TEXT,
    created_at  TEXT NOT NULL,
    invoice_id  BLOB,
    UNIQUE (id, org_id),
    CHECK ((ended_at IS NULL AND minutes IS NULL) OR (ended_at IS NOT NULL AND minutes >= 0)),
    CHECK (rate_minor >= 0),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX ticket_time_by_ticket ON ticket_time_entries (org_id, ticket_id, started_at);
CREATE UNIQUE INDEX ticket_time_one_timer ON ticket_time_entries (user_id) WHERE ended_at IS NULL;

CREATE TABLE ticket_parts (
    id               BLOB PRIMARY KEY,
    org_id           BLOB NOT NULL,
    ticket_id        BLOB NOT NULL,
    description      TEXT NOT NULL,
    quantity_milli   INTEGER NOT NULL CHECK (quantity_milli > 0),
    unit_price_minor INTEGER NOT NULL,
    currency         TEXT NOT NULL,
    billable         INTEGER NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    invoice_id       BLOB,
    UNIQUE (id, org_id),
    FOREIGN KEY (ticket_id, org_id) REFERENCES tickets (id, org_id) ON DELETE CASCADE ON UPDATE CASCADE,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX ticket_parts_by_ticket ON ticket_parts (org_id, ticket_id);

CREATE TABLE invoice_lines (
    id               BLOB PRIMARY KEY,
    org_id           BLOB NOT NULL,
    invoice_id       BLOB NOT NULL,
    position         INTEGER NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('manual', 'time', 'part')),
    description      TEXT NOT NULL,
    quantity_milli   INTEGER NOT NULL,
    unit_price_minor INTEGER NOT NULL,
    amount_minor     INTEGER NOT NULL,
    tax_bp           INTEGER NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    tax_minor        INTEGER NOT NULL,
    currency         TEXT NOT NULL,
    time_entry_id    BLOB,
    part_id          BLOB,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (time_entry_id, org_id) REFERENCES ticket_time_entries (id, org_id),
    FOREIGN KEY (part_id, org_id) REFERENCES ticket_parts (id, org_id)
);
CREATE INDEX invoice_lines_by_invoice ON invoice_lines (org_id, invoice_id, position);

CREATE TABLE invoice_payments (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL,
    invoice_id   BLOB NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0),
    currency     TEXT NOT NULL,
    method       TEXT NOT NULL,
    reference    TEXT,
    received_at  TEXT NOT NULL,
    recorded_by  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    voided_at    TEXT,
    void_reason  TEXT,
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id)
);
CREATE INDEX invoice_payments_by_invoice ON invoice_payments (org_id, invoice_id);

-- An issued invoice is frozen: its lines never change, nor its number, currency, amounts,
-- notes or due date; a void one changes no more at all; only a draft is deleted.
CREATE TRIGGER invoice_lines_frozen_insert BEFORE INSERT ON invoice_lines
WHEN (SELECT status FROM invoices WHERE id = NEW.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, 'invoice is not a draft: its lines never change'); END;
CREATE TRIGGER invoice_lines_frozen_update BEFORE UPDATE ON invoice_lines
WHEN (SELECT status FROM invoices WHERE id = OLD.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, 'invoice is not a draft: its lines never change'); END;
CREATE TRIGGER invoice_lines_frozen_delete BEFORE DELETE ON invoice_lines
WHEN (SELECT status FROM invoices WHERE id = OLD.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, 'invoice is not a draft: its lines never change'); END;
CREATE TRIGGER invoices_frozen BEFORE UPDATE ON invoices
WHEN OLD.status <> 'draft' AND (OLD.status = 'void'
    OR NEW.number IS NOT OLD.number OR NEW.currency IS NOT OLD.currency
    OR NEW.subtotal_minor IS NOT OLD.subtotal_minor OR NEW.tax_minor IS NOT OLD.tax_minor
    OR NEW.total_minor IS NOT OLD.total_minor OR NEW.issued_at IS NOT OLD.issued_at
    OR NEW.notes IS NOT OLD.notes OR NEW.due_at IS NOT OLD.due_at
    OR NEW.org_id IS NOT OLD.org_id OR NEW.partner_id IS NOT OLD.partner_id
    OR NEW.status = 'draft')
BEGIN SELECT RAISE(ABORT, 'an issued invoice never changes: void it and issue another'); END;
CREATE TRIGGER invoices_frozen_delete BEFORE DELETE ON invoices
WHEN OLD.status <> 'draft'
BEGIN SELECT RAISE(ABORT, 'only a draft invoice is deleted'); END;

-- The built-in roles gain the ticket and billing permissions: administrators all of them,
-- technicians working tickets, read-only users reading them.
UPDATE roles SET permissions = json_insert(permissions, '$[#]', 'tickets.read', '$[#]', 'tickets.write',
        '$[#]', 'tickets.manage', '$[#]', 'invoices.read', '$[#]', 'invoices.write', '$[#]', 'invoices.send')
    WHERE builtin = 1 AND name = 'Administrator';
UPDATE roles SET permissions = json_insert(permissions, '$[#]', 'tickets.read', '$[#]', 'tickets.write'),
        description = 'Operates devices, scripts, alerts, files and tickets; no billing, settings, users or keys'
    WHERE builtin = 1 AND name = 'Technician';
UPDATE roles SET permissions = json_insert(permissions, '$[#]', 'tickets.read'),
        description = 'Sees devices, scripts, alerts, files, tickets and the audit log; changes nothing'
    WHERE builtin = 1 AND name = 'Read Only';
