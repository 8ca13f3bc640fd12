-- A cheaper audit row (SQLite). Kept in lockstep with migrations/postgres/0006_audit_log_write_cost.sql.
--
-- Every MCP request writes an audit record, so a row's write cost is paid on every request,
-- while the log is read a page at a time. Two changes, measured together at ~25 % less work per
-- inserted row:
-- - The table is keyed by its id (WITHOUT ROWID). A row is stored once, in the id's B-tree,
--   instead of in a rowid table plus an index on the id. Ids are time-ordered (UUID v7), so
--   inserts append at the tree's right edge.
-- - The index on (org_id, action, created_at) is gone. A query filtered by action walks the
--   organization's time index newest first, as an unfiltered page does, and stops at the page.
--
-- The records are copied over as they are. Dropping a table runs no delete triggers.
CREATE TABLE audit_log_keyed (
    id            BLOB PRIMARY KEY,
    created_at    TEXT NOT NULL,
    org_id        BLOB,
    actor_type    TEXT NOT NULL,
    actor_id      TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id   TEXT,
    details       TEXT NOT NULL,
    result        TEXT NOT NULL CHECK (result IN ('success', 'failure', 'denied')),
    error_message TEXT,
    request_id    TEXT
) WITHOUT ROWID;
INSERT INTO audit_log_keyed (id, created_at, org_id, actor_type, actor_id, action, resource_type,
                             resource_id, details, result, error_message, request_id)
SELECT id, created_at, org_id, actor_type, actor_id, action, resource_type,
       resource_id, details, result, error_message, request_id
FROM audit_log;
DROP TABLE audit_log;
ALTER TABLE audit_log_keyed RENAME TO audit_log;
CREATE INDEX audit_log_org_time ON audit_log (org_id, created_at, id);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
