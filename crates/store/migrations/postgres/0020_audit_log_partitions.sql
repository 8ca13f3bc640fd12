-- The audit log partitioned by month (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0020_audit_log_partitions.sql.
--
-- Every MCP request writes an audit row, millions a day under load. A purge past the retention
-- (`Store::purge_audit`) drops the months wholly past it (`audit_log_drop_partitions`: a
-- catalog change, whatever the month held) and deletes rows only in the month it cuts through.
-- - `audit_log` is range-partitioned on `created_at`; one partition a month,
--   `audit_log_pYYYYMM` (UTC), made ahead of time by `audit_log_add_partitions` (here for the
--   stored rows' months and three months ahead; then by the server every day). A row outside
--   every month goes to `audit_log_default`, so an insert never fails for want of a partition;
--   a month whose rows already sit in the default partition is not made (they stay there).
-- - The primary key must hold the partition key: (id, created_at).
-- - The row trigger (updates refused, deletes only past the retention) is on the parent, so
--   every partition has it; TRUNCATE is refused on the parent and on each partition.
-- - `audit_log_drop_partitions(before)` drops only months that end before both `before` (what
--   the caller archived) and the retention's cutoff by the database's clock.
-- Existing rows are copied into the new table.
ALTER TABLE audit_log RENAME TO audit_log_unpartitioned;
ALTER INDEX audit_log_org_time RENAME TO audit_log_unpartitioned_org_time;
ALTER TABLE audit_log_unpartitioned RENAME CONSTRAINT audit_log_pkey TO audit_log_unpartitioned_pkey;
DROP TRIGGER audit_log_no_change ON audit_log_unpartitioned;
DROP TRIGGER audit_log_no_truncate ON audit_log_unpartitioned;

CREATE TABLE audit_log (
    id            UUID NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    org_id        UUID,
    actor_type    TEXT NOT NULL,
    actor_id      TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id   TEXT,
    details       JSONB NOT NULL,
    result        TEXT NOT NULL CHECK (result IN ('success', 'failure', 'denied')),
    error_message TEXT,
    request_id    TEXT,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX audit_log_org_time ON audit_log (org_id, created_at, id);
CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

CREATE TABLE audit_log_default PARTITION OF audit_log DEFAULT;
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log_default
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- Makes the monthly partitions from the month of `from_ts` through the month of `to_ts` that
-- do not exist yet; returns how many it made. A month that overlaps another partition, or
-- whose rows are already in the default partition, is skipped with a notice.
CREATE FUNCTION audit_log_add_partitions(from_ts TIMESTAMPTZ, to_ts TIMESTAMPTZ)
RETURNS INTEGER LANGUAGE plpgsql SET timezone = 'UTC' AS $$
DECLARE
    month TIMESTAMPTZ := date_trunc('month', from_ts);
    part  TEXT;
    made  INTEGER := 0;
BEGIN
    WHILE month <= to_ts LOOP
        part := 'audit_log_p' || to_char(month, 'YYYYMM');
        IF to_regclass(format('%I.%I', current_schema(), part)) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I.%I PARTITION OF audit_log FOR VALUES FROM (%L) TO (%L)',
                               current_schema(), part, month, month + interval '1 month');
                EXECUTE format('CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON %I.%I '
                               'FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()',
                               current_schema(), part);
                made := made + 1;
            EXCEPTION WHEN check_violation OR invalid_object_definition THEN
                RAISE NOTICE 'audit_log: no partition %: %', part, SQLERRM;
            END;
        END IF;
        month := month + interval '1 month';
    END LOOP;
    RETURN made;
END;
$$;

-- Drops every partition of audit_log (never the default) whose upper bound is at or before
-- both `before_ts` and the retention's cutoff; returns how many it dropped. Nothing while the
-- log is kept forever.
CREATE FUNCTION audit_log_drop_partitions(before_ts TIMESTAMPTZ)
RETURNS INTEGER LANGUAGE plpgsql SET timezone = 'UTC' AS $$
DECLARE
    retention_cutoff TIMESTAMPTZ := audit_log_cutoff();
    part   RECORD;
    upper  TIMESTAMPTZ;
    total  INTEGER := 0;
BEGIN
    IF retention_cutoff IS NULL OR before_ts IS NULL THEN
        RETURN 0;
    END IF;
    FOR part IN
        SELECT n.nspname, c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE i.inhparent = 'audit_log'::regclass
    LOOP
        upper := substring(part.bound FROM 'TO \(''([^'']+)''\)')::TIMESTAMPTZ;
        IF upper IS NOT NULL AND upper <= before_ts AND upper <= retention_cutoff THEN
            EXECUTE format('DROP TABLE %I.%I', part.nspname, part.relname);
            total := total + 1;
        END IF;
    END LOOP;
    RETURN total;
END;
$$;

SELECT audit_log_add_partitions(
    GREATEST(LEAST(now(), (SELECT min(created_at) FROM audit_log_unpartitioned)),
             now() - interval '5 years'),
    now() + interval '3 months');
INSERT INTO audit_log (id, created_at, org_id, actor_type, actor_id, action, resource_type,
                       resource_id, details, result, error_message, request_id)
SELECT id, created_at, org_id, actor_type, actor_id, action, resource_type, resource_id,
       details, result, error_message, request_id
FROM audit_log_unpartitioned;
DROP TABLE audit_log_unpartitioned;
