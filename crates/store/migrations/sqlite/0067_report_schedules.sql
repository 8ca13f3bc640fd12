-- Report schedules (SQLite). Kept in lockstep with migrations/postgres/0067_report_schedules.sql.
--
-- A schedule runs its report definition `daily`, `weekly` (on `day`, 0 = Sunday … 6) or
-- `monthly` (on `day` of the month, 1-28) at `at_minute` minutes after midnight, read in
-- `time_zone` (UTC or an IANA zone), writing `format`. The server's worker makes the stored
-- `generate_report` generate call as `owner_actor` through the call pipeline; the run is kept
-- with the others (`report_runs`) and downloaded from there. `next_run_at` is the lease: the
-- instance that moves it forward with a conditional update fires the occurrence, so a cluster
-- fires each one once. Deleting the definition deletes its schedules.
CREATE TABLE report_schedules (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    report_id    BLOB NOT NULL,
    cadence      TEXT NOT NULL CHECK (cadence IN ('daily', 'weekly', 'monthly')),
    day          INTEGER,
    at_minute    INTEGER NOT NULL CHECK (at_minute >= 0 AND at_minute < 1440),
    time_zone    TEXT NOT NULL,
    format       TEXT NOT NULL CHECK (format IN ('json', 'csv', 'pdf')),
    owner_actor  TEXT NOT NULL,
    next_run_at  TEXT,
    last_run_at  TEXT,
    last_status  TEXT,
    last_message TEXT,
    last_run_id  BLOB,
    created_at   TEXT NOT NULL,
    FOREIGN KEY (report_id, org_id) REFERENCES report_definitions (id, org_id) ON DELETE CASCADE
);
CREATE INDEX report_schedules_org ON report_schedules (org_id, report_id, created_at);
CREATE INDEX report_schedules_due ON report_schedules (next_run_at);
