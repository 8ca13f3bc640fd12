-- Recurring contracts (SQLite). Kept in lockstep with migrations/postgres/0047_contracts.sql.
--
-- A contract bills its lines every period (a month, a quarter or a year) while it is active.
-- A period is billed in arrears, when it closes: the period worker (one runner per cluster)
-- records it in `contract_periods` and opens a draft invoice of the contract's lines in the
-- same transaction. `(contract_id, starts_at)` is unique, so a period is billed once whatever
-- the number of instances racing for it. `next_period_at` is the start of the first period
-- not yet billed; a paused contract bills nothing, and resuming skips the periods that
-- closed while it was paused.
CREATE TABLE contracts (
    id             BLOB PRIMARY KEY,
    org_id         BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id     BLOB NOT NULL REFERENCES partners (id),
    name           TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'active', 'paused', 'cancelled')),
    currency       TEXT NOT NULL,
    billing_period TEXT NOT NULL CHECK (billing_period IN ('monthly', 'quarterly', 'yearly')),
    tax_bp         INTEGER NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    notes          TEXT,
    starts_at      TEXT NOT NULL,
    next_period_at TEXT NOT NULL,
    created_by     TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    activated_at   TEXT,
    cancelled_at   TEXT,
    UNIQUE (id, org_id)
);
CREATE INDEX contracts_by_org ON contracts (org_id, id);
CREATE INDEX contracts_due ON contracts (status, next_period_at);

CREATE TABLE contract_lines (
    id               BLOB PRIMARY KEY,
    org_id           BLOB NOT NULL,
    contract_id      BLOB NOT NULL,
    position         INTEGER NOT NULL,
    description      TEXT NOT NULL,
    quantity_milli   INTEGER NOT NULL CHECK (quantity_milli > 0),
    unit_price_minor INTEGER NOT NULL CHECK (unit_price_minor >= 0),
    currency         TEXT NOT NULL,
    catalog_item_id  BLOB REFERENCES catalog_items (id),
    FOREIGN KEY (contract_id, org_id) REFERENCES contracts (id, org_id) ON DELETE CASCADE
);
CREATE INDEX contract_lines_by_contract ON contract_lines (org_id, contract_id, position);

CREATE TABLE contract_periods (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL,
    contract_id BLOB NOT NULL,
    starts_at   TEXT NOT NULL,
    ends_at     TEXT NOT NULL,
    invoice_id  BLOB REFERENCES invoices (id) ON DELETE SET NULL,
    total_minor INTEGER NOT NULL,
    currency    TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (contract_id, starts_at),
    FOREIGN KEY (contract_id, org_id) REFERENCES contracts (id, org_id) ON DELETE CASCADE
);
CREATE INDEX contract_periods_by_contract ON contract_periods (org_id, contract_id, starts_at);

ALTER TABLE invoice_lines ADD COLUMN contract_id BLOB REFERENCES contracts (id);

-- Administrators hold every contract permission, lifecycle changes included.
UPDATE roles SET permissions = json_insert(permissions, '$[#]', 'contracts.read', '$[#]', 'contracts.write',
        '$[#]', 'contracts.manage')
    WHERE builtin = 1 AND name = 'Administrator';
