-- Audit retention (PostgreSQL). Kept in lockstep with migrations/sqlite/0019_audit_retention.sql.
--
-- The audit log stays append-only for every record younger than the retention; only records
-- older than it may be deleted, and the database itself decides which those are:
-- - `audit_retention` holds the one retention in force, in days (NULL: keep forever, which is
--   where a database starts until the server sets `BREEZE_AUDIT_RETENTION_DAYS`). It cannot be
--   emptied, and every change to it writes an `audit.retention_changed` record into the log.
-- - The row trigger of `audit_log` refuses to delete any row not older than the retention by
--   the database's own clock (`audit_log_cutoff()`), and still refuses every update; a new
--   statement trigger refuses TRUNCATE, which row triggers never see.
CREATE TABLE audit_retention (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    days       INTEGER CHECK (days IS NULL OR days >= 1),
    changed_at TIMESTAMPTZ NOT NULL
);
INSERT INTO audit_retention (id, days, changed_at) VALUES (1, NULL, now());

-- Records created before this instant may be deleted; NULL while the log is kept forever.
CREATE FUNCTION audit_log_cutoff() RETURNS TIMESTAMPTZ LANGUAGE sql STABLE AS $$
    SELECT now() - make_interval(days => days) FROM audit_retention WHERE days IS NOT NULL
$$;

CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.created_at < audit_log_cutoff() THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only: only records older than the retention may be deleted';
END;
$$;
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

CREATE FUNCTION audit_retention_keeps_its_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_retention keeps its one row';
END;
$$;
CREATE TRIGGER audit_retention_keeps_its_row BEFORE DELETE ON audit_retention
    FOR EACH ROW EXECUTE FUNCTION audit_retention_keeps_its_row();
CREATE TRIGGER audit_retention_not_truncated BEFORE TRUNCATE ON audit_retention
    FOR EACH STATEMENT EXECUTE FUNCTION audit_retention_keeps_its_row();

CREATE FUNCTION audit_retention_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_log (id, created_at, org_id, actor_type, actor_id, action, resource_type,
                           resource_id, details, result, error_message, request_id)
    VALUES (gen_random_uuid(), now(), NULL, 'system', 'database', 'audit.retention_changed',
            'audit_log', NULL, jsonb_build_object('fromDays', OLD.days, 'toDays', NEW.days),
            'success', NULL, NULL);
    RETURN NEW;
END;
$$;
CREATE TRIGGER audit_retention_changed AFTER UPDATE ON audit_retention
    FOR EACH ROW WHEN (OLD.days IS DISTINCT FROM NEW.days)
    EXECUTE FUNCTION audit_retention_changed();
