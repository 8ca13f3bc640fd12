-- The `org_wall` policies (migration 0032 and every table since) said the same thing in a
-- form the planner could not estimate: `current_setting(...) IN ('system', org_id::text)`
-- compares a setting with a per-row text cast, which PostgreSQL guesses keeps 1% of the rows
-- whatever the statistics say. Every statement on a tenant table carries the policy, so every
-- plan was built for a hundredth of the real rows: a nested loop over all 10,000 devices for
-- the 100 signed-in ones, a hash of a device's whole week of metrics for its newest sample.
--
-- The same wall, stated as `org_id = <the scope as a uuid>`: the planner estimates it from
-- `org_id`'s own statistics (one organization's share of the rows) and can use it in an index
-- condition. The system scope still passes every row; an unset or empty scope (a tenant
-- connection before its first `SET`, or after a `SET LOCAL` ended) matches no row; a scope that
-- is neither fails the statement. A table added later states its `org_wall` exactly so, which
-- the store's `every_wall_is_one_policy` test holds it to.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT p.polrelid::regclass
        FROM pg_policy p
        JOIN pg_class c ON c.oid = p.polrelid
        WHERE p.polname = 'org_wall' AND c.relnamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format(
            'ALTER POLICY org_wall ON %s USING ('
            'org_id = CAST(NULLIF(NULLIF(current_setting(''breeze.scope'', true), ''system''), '''') AS uuid) '
            'OR current_setting(''breeze.scope'', true) = ''system'')',
            t);
    END LOOP;
END
$$;
