-- Recurring contracts (PostgreSQL). Kept in lockstep with migrations/sqlite/0047_contracts.sql.
--
-- A contract bills its lines every period (a month, a quarter or a year) while it is active.
-- A period is billed in arrears, when it closes: the period worker (one runner per cluster)
-- records it in `contract_periods` and opens a draft invoice of the contract's lines in the
-- same transaction. `(contract_id, starts_at)` is unique, so a period is billed once whatever
-- the number of instances racing for it. `next_period_at` is the start of the first period
-- not yet billed; a paused contract bills nothing, and resuming skips the periods that
-- closed while it was paused.
CREATE TABLE contracts (
    id             UUID PRIMARY KEY,
    org_id         UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id     UUID NOT NULL REFERENCES partners (id),
    name           TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'active', 'paused', 'cancelled')),
    currency       TEXT NOT NULL,
    billing_period TEXT NOT NULL CHECK (billing_period IN ('monthly', 'quarterly', 'yearly')),
    tax_bp         BIGINT NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    notes          TEXT,
    starts_at      TIMESTAMPTZ NOT NULL,
    next_period_at TIMESTAMPTZ NOT NULL,
    created_by     TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    activated_at   TIMESTAMPTZ,
    cancelled_at   TIMESTAMPTZ,
    UNIQUE (id, org_id)
);
CREATE INDEX contracts_by_org ON contracts (org_id, id);
CREATE INDEX contracts_due ON contracts (status, next_period_at);

CREATE TABLE contract_lines (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL,
    contract_id      UUID NOT NULL,
    position         BIGINT NOT NULL,
    description      TEXT NOT NULL,
    quantity_milli   BIGINT NOT NULL CHECK (quantity_milli > 0),
    unit_price_minor BIGINT NOT NULL CHECK (unit_price_minor >= 0),
    currency         TEXT NOT NULL,
    catalog_item_id  UUID REFERENCES catalog_items (id),
    FOREIGN KEY (contract_id, org_id) REFERENCES contracts (id, org_id) ON DELETE CASCADE
);
CREATE INDEX contract_lines_by_contract ON contract_lines (org_id, contract_id, position);

CREATE TABLE contract_periods (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL,
    contract_id UUID NOT NULL,
    starts_at   TIMESTAMPTZ NOT NULL,
    ends_at     TIMESTAMPTZ NOT NULL,
    invoice_id  UUID REFERENCES invoices (id) ON DELETE SET NULL,
    total_minor BIGINT NOT NULL,
    currency    TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (contract_id, starts_at),
    FOREIGN KEY (contract_id, org_id) REFERENCES contracts (id, org_id) ON DELETE CASCADE
);
CREATE INDEX contract_periods_by_contract ON contract_periods (org_id, contract_id, starts_at);

ALTER TABLE invoice_lines ADD COLUMN contract_id UUID REFERENCES contracts (id);

DO $$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY['contracts', 'contract_lines', 'contract_periods']::regclass[]
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

-- Administrators hold every contract permission, lifecycle changes included.
UPDATE roles SET permissions = permissions || '["contracts.read", "contracts.write", "contracts.manage"]'::jsonb
    WHERE builtin AND name = 'Administrator';
