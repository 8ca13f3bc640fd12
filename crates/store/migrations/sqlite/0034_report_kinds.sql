-- Patch and compliance reports (SQLite). Kept in lockstep with
-- migrations/postgres/0034_report_kinds.sql.
--
-- Reports may be of kind `patch_status` (each device's last patch scan) and
-- `compliance_status` (each device's status against each compliance policy): the kind checks
-- widened. SQLite cannot change a CHECK, so the three report tables are rebuilt and their rows
-- copied, as 0030 did: the chunks are moved before their runs' table is dropped (dropping it
-- would cascade to them), and renaming the new runs' table rewrites the new chunks' foreign
-- key to the final name.
CREATE TABLE report_definitions_new (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT,
    kind        TEXT NOT NULL CHECK (kind IN ('device_inventory', 'alert_history', 'audit_activity',
                                          'patch_status', 'compliance_status')),
    format      TEXT NOT NULL CHECK (format IN ('json', 'csv', 'pdf')),
    filters     TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);
INSERT INTO report_definitions_new SELECT id, org_id, name, description, kind, format, filters,
    created_by, created_at, updated_at FROM report_definitions;

CREATE TABLE report_runs_new (
    id            BLOB PRIMARY KEY,
    org_id        BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    definition_id BLOB,
    name          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('device_inventory', 'alert_history', 'audit_activity',
                                            'patch_status', 'compliance_status')),
    format        TEXT NOT NULL CHECK (format IN ('json', 'csv', 'pdf')),
    filters       TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    row_count     INTEGER NOT NULL,
    byte_count    INTEGER NOT NULL,
    chunk_count   INTEGER NOT NULL,
    error         TEXT,
    requested_by  TEXT NOT NULL,
    started_at    TEXT NOT NULL,
    finished_at   TEXT,
    UNIQUE (id, org_id)
);
INSERT INTO report_runs_new SELECT id, org_id, definition_id, name, kind, format, filters,
    status, row_count, byte_count, chunk_count, error, requested_by, started_at, finished_at
    FROM report_runs;

CREATE TABLE report_chunks_new (
    run_id BLOB NOT NULL,
    org_id BLOB NOT NULL,
    seq    INTEGER NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (run_id, seq),
    FOREIGN KEY (run_id, org_id) REFERENCES report_runs_new (id, org_id) ON DELETE CASCADE
);
INSERT INTO report_chunks_new SELECT run_id, org_id, seq, data FROM report_chunks;

DROP TABLE report_chunks;
DROP TABLE report_runs;
DROP TABLE report_definitions;
ALTER TABLE report_definitions_new RENAME TO report_definitions;
ALTER TABLE report_runs_new RENAME TO report_runs;
ALTER TABLE report_chunks_new RENAME TO report_chunks;
CREATE INDEX report_runs_org ON report_runs (org_id, started_at, id);
CREATE INDEX report_runs_definition ON report_runs (org_id, definition_id, started_at);
