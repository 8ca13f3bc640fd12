-- Row-level security on every organization's table (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0032_row_security.sql, which has nothing to do: SQLite has no row security.
--
-- A second wall behind the code's `org_id` filters (see `crates/store/src/row_security.rs`):
-- each table with an `org_id` column gets row security enabled and forced (so its owner, the
-- role Breeze connects as, is held too) and the policy `org_wall`. A row is visible and
-- writable only when the connection's `breeze.scope` is `system` (the store's system pool sets
-- it at connect) or the row's organization id (the tenant pool sets it per statement); unset,
-- the connection sees no row. A superuser or a BYPASSRLS role passes through regardless.
-- The two tables whose partner-wide rows (`partner_id` set, `org_id` NULL) an organization
-- inherits, configuration policies and their assignments, get `partner_read` as well: an
-- organization may read, never write, the rows of its own partner. (Partner-wide users are
-- reached only by the system scope.)
--
-- The tables are found in the catalog rather than listed, so none is missed; a table added
-- later needs its own policy, which `row_security_covers_every_tenant_table` checks. The
-- audit log's monthly partitions are reached only through their parent, whose policy
-- applies to them.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT c.oid::regclass
        FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'org_id' AND NOT a.attisdropped
        WHERE c.relnamespace = current_schema()::regnamespace
          AND c.relkind IN ('r', 'p')
          AND NOT c.relispartition
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY org_wall ON %s '
            'USING (current_setting(''breeze.scope'', true) IN (''system'', org_id::text))',
            t);
        IF t IN ('config_policies'::regclass, 'config_policy_assignments'::regclass) THEN
            EXECUTE format(
                'CREATE POLICY partner_read ON %s FOR SELECT '
                'USING (org_id IS NULL AND partner_id = '
                '(SELECT o.partner_id FROM organizations o WHERE o.id = '
                ' CASE WHEN current_setting(''breeze.scope'', true) ~ ''^[0-9a-f]{8}-'' '
                ' THEN CAST(current_setting(''breeze.scope'', true) AS uuid) END))',
                t);
        END IF;
    END LOOP;
END
$$;
