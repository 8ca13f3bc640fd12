-- Package removals in the patch history (SQLite). Kept in lockstep with
-- migrations/postgres/0031_patch_history_removals.sql.
--
-- `patch_history` records removals too (`manage_patches` remove, a deployment's package
-- removal): one row per device and package with action 'remove', the version removed and what
-- the agent answered; no job. The action check of 0024 widened: SQLite cannot change a CHECK,
-- so the table is rebuilt and its rows copied.
CREATE TABLE patch_history_new (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL,
    device_id    BLOB NOT NULL,
    job_id       BLOB,
    package_name TEXT NOT NULL,
    action       TEXT NOT NULL CHECK (action IN ('install', 'rollback', 'remove')),
    from_version TEXT,
    to_version   TEXT,
    status       TEXT NOT NULL,
    error        TEXT,
    at           TEXT NOT NULL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
INSERT INTO patch_history_new SELECT id, org_id, device_id, job_id, package_name, action,
    from_version, to_version, status, error, at FROM patch_history;
DROP TABLE patch_history;
ALTER TABLE patch_history_new RENAME TO patch_history;
CREATE INDEX patch_history_device ON patch_history (org_id, device_id, package_name, at);
