-- The audit row's result check without a per-row temporary table (SQLite). Kept in lockstep
-- with migrations/postgres/0007_audit_log_result_check.sql.
--
-- SQLite evaluates `result IN ('success', 'failure', 'denied')` by building a temporary index
-- of the three values every time an INSERT statement runs, and every audit record is inserted
-- by a statement of its own: opening, filling and closing that index was ~20 % of each insert
-- (`perf`: sqlite3BtreeOpen, sqlite3BtreeClose, sqlite3BtreeCreateTable under sqlite3_step).
-- The same rule written as comparisons is checked in place. SQLite cannot change a table's
-- CHECK, so the table is rebuilt as in 0006 and the records copied over as they are.
CREATE TABLE audit_log_checked (
    id            BLOB PRIMARY KEY,
    created_at    TEXT NOT NULL,
    org_id        BLOB,
    actor_type    TEXT NOT NULL,
    actor_id      TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id   TEXT,
    details       TEXT NOT NULL,
    result        TEXT NOT NULL
                  CHECK (result = 'success' OR result = 'failure' OR result = 'denied'),
    error_message TEXT,
    request_id    TEXT
) WITHOUT ROWID;
INSERT INTO audit_log_checked (id, created_at, org_id, actor_type, actor_id, action,
                               resource_type, resource_id, details, result, error_message,
                               request_id)
SELECT id, created_at, org_id, actor_type, actor_id, action, resource_type,
       resource_id, details, result, error_message, request_id
FROM audit_log;
DROP TABLE audit_log;
ALTER TABLE audit_log_checked RENAME TO audit_log;
CREATE INDEX audit_log_org_time ON audit_log (org_id, created_at, id);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
