-- The partner's product catalog (SQLite). Kept in lockstep with
-- migrations/postgres/0046_catalog.sql.
--
-- Items (hardware, software, services and bundles of them) belong to a partner, not to an
-- organization: every organization of the partner sells from one catalog. A price override
-- is one organization's price for one item. Archived items stay, so the invoice lines and
-- contracts that name them keep their meaning, but are no longer sold. Invoice lines may now
-- come from a catalog item or bundle (and, from 0047, a contract), and name the item they
-- came from: SQLite cannot change a CHECK, so `invoice_lines` is rebuilt, its rows copied
-- and its index and freezing triggers made again (nothing references it).
CREATE TABLE catalog_items (
    id               BLOB PRIMARY KEY,
    partner_id       BLOB NOT NULL REFERENCES partners (id) ON DELETE CASCADE,
    sku              TEXT,
    name             TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('hardware', 'software', 'service', 'bundle')),
    description      TEXT NOT NULL,
    unit_price_minor INTEGER NOT NULL CHECK (unit_price_minor >= 0),
    currency         TEXT NOT NULL,
    tax_bp           INTEGER NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    archived_at      TEXT,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE UNIQUE INDEX catalog_items_sku ON catalog_items (partner_id, sku) WHERE sku IS NOT NULL;
CREATE INDEX catalog_items_by_name ON catalog_items (partner_id, name);

CREATE TABLE catalog_components (
    bundle_id      BLOB NOT NULL REFERENCES catalog_items (id) ON DELETE CASCADE,
    component_id   BLOB NOT NULL REFERENCES catalog_items (id),
    quantity_milli INTEGER NOT NULL CHECK (quantity_milli > 0),
    PRIMARY KEY (bundle_id, component_id),
    CHECK (bundle_id <> component_id)
);

CREATE TABLE catalog_price_overrides (
    item_id          BLOB NOT NULL REFERENCES catalog_items (id) ON DELETE CASCADE,
    org_id           BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    unit_price_minor INTEGER NOT NULL CHECK (unit_price_minor >= 0),
    currency         TEXT NOT NULL,
    set_by           TEXT NOT NULL,
    set_at           TEXT NOT NULL,
    PRIMARY KEY (item_id, org_id)
);

CREATE TABLE invoice_lines_new (
    id               BLOB PRIMARY KEY,
    org_id           BLOB NOT NULL,
    invoice_id       BLOB NOT NULL,
    position         INTEGER NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('manual', 'time', 'part', 'catalog', 'bundle', 'contract')),
    description      TEXT NOT NULL,
    quantity_milli   INTEGER NOT NULL,
    unit_price_minor INTEGER NOT NULL,
    amount_minor     INTEGER NOT NULL,
    tax_bp           INTEGER NOT NULL CHECK (tax_bp >= 0 AND tax_bp <= 10000),
    tax_minor        INTEGER NOT NULL,
    currency         TEXT NOT NULL,
    time_entry_id    BLOB,
    part_id          BLOB,
    catalog_item_id  BLOB REFERENCES catalog_items (id),
    FOREIGN KEY (invoice_id, org_id) REFERENCES invoices (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (time_entry_id, org_id) REFERENCES ticket_time_entries (id, org_id),
    FOREIGN KEY (part_id, org_id) REFERENCES ticket_parts (id, org_id)
);
INSERT INTO invoice_lines_new SELECT id, org_id, invoice_id, position, kind, description,
    quantity_milli, unit_price_minor, amount_minor, tax_bp, tax_minor, currency, time_entry_id,
    part_id, NULL FROM invoice_lines;
DROP TABLE invoice_lines;
ALTER TABLE invoice_lines_new RENAME TO invoice_lines;
CREATE INDEX invoice_lines_by_invoice ON invoice_lines (org_id, invoice_id, position);
CREATE TRIGGER invoice_lines_frozen_insert BEFORE INSERT ON invoice_lines
WHEN (SELECT status FROM invoices WHERE id = NEW.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, 'invoice is not a draft: its lines never change'); END;
CREATE TRIGGER invoice_lines_frozen_update BEFORE UPDATE ON invoice_lines
WHEN (SELECT status FROM invoices WHERE id = OLD.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, 'invoice is not a draft: its lines never change'); END;
CREATE TRIGGER invoice_lines_frozen_delete BEFORE DELETE ON invoice_lines
WHEN (SELECT status FROM invoices WHERE id = OLD.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, 'invoice is not a draft: its lines never change'); END;

-- Administrators keep the catalog; technicians and read-only users see nothing of it.
UPDATE roles SET permissions = json_insert(permissions, '$[#]', 'catalog.read', '$[#]', 'catalog.write')
    WHERE builtin = 1 AND name = 'Administrator';
