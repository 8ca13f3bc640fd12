-- Tool Sources (SQLite): external MCP servers and OpenAPI APIs whose tools Breeze offers
-- beside its own. Kept in lockstep with migrations/postgres/0039_tool_sources.sql, which
-- explains the design and adds row security (SQLite has none; the store's filters are the
-- wall).
CREATE TABLE tool_sources (
    id            BLOB PRIMARY KEY,
    org_id        BLOB REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id    BLOB REFERENCES partners (id) ON DELETE CASCADE,
    slug          TEXT NOT NULL CHECK (length(slug) BETWEEN 1 AND 24 AND slug NOT GLOB '*[^a-z0-9]*'),
    display_name  TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('mcp', 'openapi')),
    url           TEXT NOT NULL,
    document_url  TEXT,
    state         TEXT NOT NULL CHECK (state IN ('active', 'disabled', 'error')),
    error         TEXT,
    auth_method   TEXT NOT NULL,
    credential    TEXT NOT NULL,
    offer_to_mcp  INTEGER NOT NULL DEFAULT 0,
    warnings      TEXT NOT NULL,
    skipped       TEXT NOT NULL,
    discovered_at TEXT,
    created_by    TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    CHECK ((org_id IS NULL) <> (partner_id IS NULL)),
    CHECK (kind = 'mcp' OR document_url IS NOT NULL),
    UNIQUE (org_id, slug),
    UNIQUE (partner_id, slug),
    UNIQUE (id, org_id),
    UNIQUE (id, partner_id)
);

CREATE TABLE tool_source_tools (
    source_id       BLOB NOT NULL REFERENCES tool_sources (id) ON DELETE CASCADE,
    org_id          BLOB,
    partner_id      BLOB,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    input_schema    TEXT NOT NULL,
    output_schema   TEXT,
    annotations     TEXT NOT NULL,
    call_plan       TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    proposed_tier   INTEGER NOT NULL CHECK (proposed_tier BETWEEN 1 AND 4),
    tier            INTEGER NOT NULL CHECK (tier BETWEEN 1 AND 4),
    tier_set        INTEGER NOT NULL,
    enabled         INTEGER NOT NULL,
    review_needed   INTEGER NOT NULL,
    removed         INTEGER NOT NULL,
    unusable        TEXT,
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (source_id, name),
    CHECK ((org_id IS NULL) <> (partner_id IS NULL)),
    CHECK (NOT enabled OR (NOT removed AND unusable IS NULL)),
    FOREIGN KEY (source_id, org_id) REFERENCES tool_sources (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (source_id, partner_id) REFERENCES tool_sources (id, partner_id) ON DELETE CASCADE
);

-- Calling external tools is its own grant (see the PostgreSQL migration).
UPDATE roles SET permissions = json_insert(json_insert(permissions, '$[#]', 'external_tools.read'),
    '$[#]', 'external_tools.write')
    WHERE builtin AND name IN ('Administrator', 'Technician');
UPDATE roles SET permissions = json_insert(permissions, '$[#]', 'external_tools.read')
    WHERE builtin AND name = 'Read Only';
