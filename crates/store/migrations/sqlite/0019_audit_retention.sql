-- Audit retention (SQLite). Kept in lockstep with migrations/postgres/0019_audit_retention.sql.
--
-- The audit log stays append-only for every record younger than the retention; only records
-- older than it may be deleted, and the database itself decides which those are:
-- - `audit_retention` holds the one retention in force, in days (NULL: keep forever, which is
--   where a database starts until the server sets `BREEZE_AUDIT_RETENTION_DAYS`). It cannot be
--   emptied, and every change to it writes an `audit.retention_changed` record into the log.
-- - The delete trigger of `audit_log` refuses any row not older than the retention by the
--   database's own clock (to the second, rounding against deletion). Updates stay refused.
CREATE TABLE audit_retention (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    days       INTEGER CHECK (days IS NULL OR days >= 1),
    changed_at TEXT NOT NULL
);
INSERT INTO audit_retention (id, days, changed_at)
VALUES (1, NULL, strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'));

CREATE TRIGGER audit_retention_keeps_its_row BEFORE DELETE ON audit_retention
BEGIN
    SELECT RAISE(ABORT, 'audit_retention keeps its one row');
END;

CREATE TRIGGER audit_retention_changed AFTER UPDATE OF days ON audit_retention
WHEN OLD.days IS NOT NEW.days
BEGIN
    INSERT INTO audit_log (id, created_at, org_id, actor_type, actor_id, action, resource_type,
                           resource_id, details, result, error_message, request_id)
    VALUES (randomblob(16), strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'), NULL, 'system',
            'database', 'audit.retention_changed', 'audit_log', NULL,
            json_object('fromDays', OLD.days, 'toDays', NEW.days), 'success', NULL, NULL);
END;

DROP TRIGGER audit_log_no_delete;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
WHEN NOT EXISTS (
    SELECT 1 FROM audit_retention
    WHERE days IS NOT NULL
      AND OLD.created_at < strftime('%Y-%m-%dT%H:%M:%S', 'now', '-' || days || ' days')
)
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only: only records older than the retention may be deleted');
END;
