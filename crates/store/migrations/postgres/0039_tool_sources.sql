-- Tool Sources (PostgreSQL): external MCP servers and OpenAPI APIs whose tools Breeze offers
-- beside its own. Kept in lockstep with migrations/sqlite/0039_tool_sources.sql.
--
-- A source is owned by one organization (org_id) or by its partner (partner_id: every
-- organization of the partner sees it), never both, as configuration policies are. Its slug
-- is unique among its owner's sources; an organization's slug may not repeat a partner-wide
-- one of its partner either (checked when a source is created, since tools of both are
-- addressed `<slug>__<name>` in the same organization). `credential` is sealed (AEAD, the
-- source id as associated data) and never leaves the store but to the call path.
-- The tools of a source carry their source's owner columns, so row security judges them
-- without a join.
--
-- Row security: both tables get `org_wall` (an organization's own rows) and `partner_read`
-- (an organization reads, never writes, its partner's partner-wide rows): a partner-wide
-- source is created, changed and re-discovered only through the system scope, after the door
-- checked the permission to manage partner-wide policies.
CREATE TABLE tool_sources (
    id            UUID PRIMARY KEY,
    org_id        UUID REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id    UUID REFERENCES partners (id) ON DELETE CASCADE,
    slug          TEXT NOT NULL CHECK (slug ~ '^[a-z0-9]{1,24}$'),
    display_name  TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('mcp', 'openapi')),
    url           TEXT NOT NULL,
    document_url  TEXT,
    state         TEXT NOT NULL CHECK (state IN ('active', 'disabled', 'error')),
    error         TEXT,
    auth_method   TEXT NOT NULL,
    credential    TEXT NOT NULL,
    offer_to_mcp  BOOLEAN NOT NULL DEFAULT FALSE,
    warnings      JSONB NOT NULL,
    skipped       JSONB NOT NULL,
    discovered_at TIMESTAMPTZ,
    created_by    TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    CHECK ((org_id IS NULL) <> (partner_id IS NULL)),
    CHECK (kind = 'mcp' OR document_url IS NOT NULL),
    UNIQUE (org_id, slug),
    UNIQUE (partner_id, slug),
    UNIQUE (id, org_id),
    UNIQUE (id, partner_id)
);

CREATE TABLE tool_source_tools (
    source_id       UUID NOT NULL REFERENCES tool_sources (id) ON DELETE CASCADE,
    org_id          UUID,
    partner_id      UUID,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    input_schema    JSONB NOT NULL,
    output_schema   JSONB,
    annotations     JSONB NOT NULL,
    call_plan       JSONB NOT NULL,
    definition_hash TEXT NOT NULL,
    proposed_tier   SMALLINT NOT NULL CHECK (proposed_tier BETWEEN 1 AND 4),
    tier            SMALLINT NOT NULL CHECK (tier BETWEEN 1 AND 4),
    tier_set        BOOLEAN NOT NULL,
    enabled         BOOLEAN NOT NULL,
    review_needed   BOOLEAN NOT NULL,
    removed         BOOLEAN NOT NULL,
    unusable        TEXT,
    updated_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (source_id, name),
    CHECK ((org_id IS NULL) <> (partner_id IS NULL)),
    CHECK (NOT enabled OR (NOT removed AND unusable IS NULL)),
    FOREIGN KEY (source_id, org_id) REFERENCES tool_sources (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (source_id, partner_id) REFERENCES tool_sources (id, partner_id) ON DELETE CASCADE
);

DO $$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY['tool_sources'::regclass, 'tool_source_tools'::regclass]
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY org_wall ON %s '
            'USING (current_setting(''breeze.scope'', true) IN (''system'', org_id::text))',
            t);
        EXECUTE format(
            'CREATE POLICY partner_read ON %s FOR SELECT '
            'USING (org_id IS NULL AND partner_id = '
            '(SELECT o.partner_id FROM organizations o WHERE o.id = '
            ' CASE WHEN current_setting(''breeze.scope'', true) ~ ''^[0-9a-f]{8}-'' '
            ' THEN CAST(current_setting(''breeze.scope'', true) AS uuid) END))',
            t);
    END LOOP;
END
$$;

-- Calling external tools is its own grant: `external_tools.read` for Tier 1 tools,
-- `external_tools.write` for Tier 2 and 3. The built-in roles get what their descriptions
-- promise (Administrator and Technician both, Read Only the reads); custom roles get nothing
-- until an administrator grants it.
UPDATE roles SET permissions = permissions || '["external_tools.read", "external_tools.write"]'::jsonb
    WHERE builtin AND name IN ('Administrator', 'Technician');
UPDATE roles SET permissions = permissions || '["external_tools.read"]'::jsonb
    WHERE builtin AND name = 'Read Only';
