-- Report definitions, their runs and the runs' output (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0022_reports.sql.
--
-- A definition names what to report (`kind`: device_inventory, alert_history,
-- audit_activity), in which `format` (json, csv) and with which `filters` (JSON). A run is
-- one generation, from a definition or ad hoc: it copies the definition's name, kind, format
-- and filters, so deleting the definition keeps its history. The output is stored as ordered
-- chunks of at most 256 KiB (`report_chunks`), written while the rows are read and read back
-- one at a time by the download, so no report is ever held in memory whole.
CREATE TABLE report_definitions (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT,
    kind        TEXT NOT NULL CHECK (kind IN ('device_inventory', 'alert_history', 'audit_activity')),
    format      TEXT NOT NULL CHECK (format IN ('json', 'csv')),
    filters     JSONB NOT NULL,
    created_by  TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);

CREATE TABLE report_runs (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    definition_id UUID,
    name          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('device_inventory', 'alert_history', 'audit_activity')),
    format        TEXT NOT NULL CHECK (format IN ('json', 'csv')),
    filters       JSONB NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    row_count     BIGINT NOT NULL,
    byte_count    BIGINT NOT NULL,
    chunk_count   BIGINT NOT NULL,
    error         TEXT,
    requested_by  TEXT NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,
    finished_at   TIMESTAMPTZ,
    UNIQUE (id, org_id)
);
CREATE INDEX report_runs_org ON report_runs (org_id, started_at, id);
CREATE INDEX report_runs_definition ON report_runs (org_id, definition_id, started_at);

CREATE TABLE report_chunks (
    run_id UUID NOT NULL,
    org_id UUID NOT NULL,
    seq    BIGINT NOT NULL,
    data   BYTEA NOT NULL,
    PRIMARY KEY (run_id, seq),
    FOREIGN KEY (run_id, org_id) REFERENCES report_runs (id, org_id) ON DELETE CASCADE
);
