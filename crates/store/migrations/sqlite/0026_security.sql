-- Security scans, their findings and flagged files, quarantined files and posture snapshots
-- (SQLite). Kept in lockstep with migrations/postgres/0026_security.sql.
--
-- A scan is one device's `security_scan` command: requested by someone, running until its
-- result is recorded (then completed or failed). Its findings and flagged files are written
-- with the result, in one transaction with the posture snapshot it gives. Every row carries
-- the organization and composite foreign keys keep it in the device's organization.
CREATE TABLE security_scans (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    device_id    BLOB NOT NULL,
    command_id   BLOB NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    requested_by TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    finished_at  TEXT,
    error        TEXT,
    privileged   INTEGER,
    UNIQUE (id, org_id),
    UNIQUE (command_id),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX security_scans_device ON security_scans (org_id, device_id, started_at);
CREATE INDEX security_scans_running ON security_scans (org_id, status);

CREATE TABLE security_findings (
    id         BLOB PRIMARY KEY,
    org_id     BLOB NOT NULL,
    scan_id    BLOB NOT NULL,
    device_id  BLOB NOT NULL,
    check_name TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('pass', 'fail', 'unknown')),
    severity   TEXT NOT NULL CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical')),
    title      TEXT NOT NULL,
    evidence   TEXT NOT NULL,
    FOREIGN KEY (scan_id, org_id) REFERENCES security_scans (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX security_findings_scan ON security_findings (scan_id);

-- Files a scan flagged: what a quarantine may act on (pinned by sha256).
CREATE TABLE security_flagged_files (
    id         BLOB PRIMARY KEY,
    org_id     BLOB NOT NULL,
    scan_id    BLOB NOT NULL,
    device_id  BLOB NOT NULL,
    path       TEXT NOT NULL,
    reason     TEXT NOT NULL,
    check_name TEXT NOT NULL,
    severity   TEXT NOT NULL CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical')),
    sha256     TEXT,
    mode       TEXT NOT NULL,
    uid        INTEGER NOT NULL,
    gid        INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    UNIQUE (id, org_id),
    FOREIGN KEY (scan_id, org_id) REFERENCES security_scans (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX security_flagged_files_scan ON security_flagged_files (scan_id);

-- A file moved into the agent's quarantine (agent_ref is the agent's quarantine id), and
-- what became of it. Kept when the flagged file's scan is pruned.
CREATE TABLE security_quarantine (
    id            BLOB PRIMARY KEY,
    org_id        BLOB NOT NULL,
    device_id     BLOB NOT NULL,
    flagged_id    BLOB,
    agent_ref     TEXT NOT NULL,
    original_path TEXT NOT NULL,
    sha256        TEXT NOT NULL,
    mode          TEXT NOT NULL,
    uid           INTEGER NOT NULL,
    gid           INTEGER NOT NULL,
    size_bytes    INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('quarantined', 'removed', 'restored')),
    created_by    TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_by    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    UNIQUE (device_id, agent_ref),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX security_quarantine_org ON security_quarantine (org_id, device_id);

-- The posture each completed scan gave its device, kept for trends (it outlives the scan,
-- whose rows are pruned to the newest per device).
CREATE TABLE security_posture_snapshots (
    id         BLOB PRIMARY KEY,
    org_id     BLOB NOT NULL,
    device_id  BLOB NOT NULL,
    scan_id    BLOB NOT NULL,
    score      INTEGER NOT NULL CHECK (score BETWEEN 0 AND 100),
    risk_level TEXT NOT NULL CHECK (risk_level IN ('low', 'medium', 'high', 'critical')),
    factors    TEXT NOT NULL,
    taken_at   TEXT NOT NULL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX security_posture_device ON security_posture_snapshots (org_id, device_id, taken_at);
CREATE INDEX security_posture_org ON security_posture_snapshots (org_id, taken_at);
