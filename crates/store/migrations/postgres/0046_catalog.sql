-- The partner's product catalog (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0046_catalog.sql.
--
-- Items (hardware, software, services and bundles of them) belong to a partner, not to an
-- organization: every organization of the partner sells from one catalog, so the items have
-- no `org_id` and no row-security policy; the store reaches them by the partner of the
-- calling organization. A price override is one organization's price for one item and is an
-- organization's row (row security as for every such table). Archived items stay, so the
-- invoice lines and contracts that name them keep their meaning, but are no longer sold.
-- Invoice lines may now come from a catalog item or bundle (and, from 0047, a contract), and
-- name the item they came from.
CREATE TABLE catalog_items (
    id               UUID PRIMARY KEY,
    partner_id       UUID NOT NULL REFERENCES partners (id) ON DELETE CASCADE,
    sku              TEXT,
    name             TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('hardware', 'software', 'service', 'bundle')),
    description      TEXT NOT NULL,
    unit_price_minor BIGINT NOT NULL CHECK (unit_price_minor >= 0),
    currency         TEXT NOT NULL,
    tax_bp           BIGINT NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    archived_at      TIMESTAMPTZ,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX catalog_items_sku ON catalog_items (partner_id, sku) WHERE sku IS NOT NULL;
CREATE INDEX catalog_items_by_name ON catalog_items (partner_id, name);

CREATE TABLE catalog_components (
    bundle_id      UUID NOT NULL REFERENCES catalog_items (id) ON DELETE CASCADE,
    component_id   UUID NOT NULL REFERENCES catalog_items (id),
    quantity_milli BIGINT NOT NULL CHECK (quantity_milli > 0),
    PRIMARY KEY (bundle_id, component_id),
    CHECK (bundle_id <> component_id)
);

CREATE TABLE catalog_price_overrides (
    item_id          UUID NOT NULL REFERENCES catalog_items (id) ON DELETE CASCADE,
    org_id           UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    unit_price_minor BIGINT NOT NULL CHECK (unit_price_minor >= 0),
    currency         TEXT NOT NULL,
    set_by           TEXT NOT NULL,
    set_at           TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (item_id, org_id)
);
ALTER TABLE catalog_price_overrides ENABLE ROW LEVEL SECURITY;
ALTER TABLE catalog_price_overrides FORCE ROW LEVEL SECURITY;
CREATE POLICY org_wall ON catalog_price_overrides
    USING (current_setting('breeze.scope', true) IN ('system', org_id::text));

ALTER TABLE invoice_lines DROP CONSTRAINT invoice_lines_kind_check;
ALTER TABLE invoice_lines ADD CONSTRAINT invoice_lines_kind_check
    CHECK (kind IN ('manual', 'time', 'part', 'catalog', 'bundle', 'contract'));
ALTER TABLE invoice_lines ADD COLUMN catalog_item_id UUID REFERENCES catalog_items (id);

-- Administrators keep the catalog; technicians and read-only users see nothing of it.
UPDATE roles SET permissions = permissions || '["catalog.read", "catalog.write"]'::jsonb
    WHERE builtin AND name = 'Administrator';
