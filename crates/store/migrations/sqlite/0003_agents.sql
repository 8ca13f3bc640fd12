-- The agent and the device gateway: enrollment, device credentials, heartbeat state, user
-- sessions, commands, metrics and their rollups, agent logs, the script library (SQLite).
-- Kept in lockstep with migrations/postgres/0003_agents.sql.

CREATE TABLE enrollment_keys (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    site_id     BLOB NOT NULL,
    name        TEXT NOT NULL,
    key_hash    BLOB NOT NULL UNIQUE,
    key_prefix  TEXT NOT NULL,
    max_uses    INTEGER,
    uses        INTEGER NOT NULL DEFAULT 0,
    expires_at  TEXT NOT NULL,
    revoked_at  TEXT,
    created_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (id, org_id),
    FOREIGN KEY (site_id, org_id) REFERENCES sites (id, org_id) ON DELETE CASCADE
);

CREATE TABLE device_credentials (
    device_id          BLOB PRIMARY KEY,
    org_id             BLOB NOT NULL,
    token_hash         BLOB NOT NULL UNIQUE,
    pending_token_hash BLOB UNIQUE,
    machine_id         TEXT,
    enrollment_key_id  BLOB,
    enrolled_at        TEXT NOT NULL,
    rotated_at         TEXT,
    revoked_at         TEXT,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE device_state (
    device_id       BLOB PRIMARY KEY,
    org_id          BLOB NOT NULL,
    heartbeat_at    TEXT,
    uptime_secs     INTEGER,
    pending_reboot  INTEGER NOT NULL DEFAULT 0,
    logged_in_users TEXT NOT NULL DEFAULT '[]',
    inventory       TEXT,
    inventory_at    TEXT,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE device_user_sessions (
    id                  BLOB PRIMARY KEY,
    org_id              BLOB NOT NULL,
    device_id           BLOB NOT NULL,
    username            TEXT NOT NULL,
    terminal            TEXT,
    host                TEXT,
    login_at            TEXT NOT NULL,
    logout_at           TEXT,
    login_duration_secs REAL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_user_sessions_device ON device_user_sessions (org_id, device_id, login_at);

CREATE TABLE scripts (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    language    TEXT NOT NULL CHECK (language IN ('bash', 'sh', 'python', 'powershell')),
    category    TEXT NOT NULL DEFAULT 'general',
    body        TEXT NOT NULL,
    parameters  TEXT NOT NULL DEFAULT '[]',
    created_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);

CREATE TABLE device_commands (
    id               BLOB PRIMARY KEY,
    org_id           BLOB NOT NULL,
    device_id        BLOB NOT NULL,
    kind             TEXT NOT NULL,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'running', 'completed',
                                                     'failed', 'timed_out', 'cancelled')),
    timeout_secs     INTEGER NOT NULL,
    output_cap_bytes INTEGER NOT NULL,
    script_id        BLOB REFERENCES scripts (id) ON DELETE SET NULL,
    script_name      TEXT,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    deadline_at      TEXT NOT NULL,
    sent_at          TEXT,
    started_at       TEXT,
    completed_at     TEXT,
    exit_code        INTEGER,
    stdout           TEXT,
    stderr           TEXT,
    stdout_truncated INTEGER NOT NULL DEFAULT 0,
    stderr_truncated INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    error            TEXT,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_commands_open ON device_commands (device_id, status);
CREATE INDEX device_commands_org ON device_commands (org_id, device_id, created_at);

CREATE TABLE device_metrics (
    device_id      BLOB NOT NULL,
    org_id         BLOB NOT NULL,
    at             TEXT NOT NULL,
    cpu_percent    REAL NOT NULL,
    ram_percent    REAL NOT NULL,
    ram_used_bytes INTEGER NOT NULL,
    disk_percent   REAL NOT NULL,
    disks          TEXT NOT NULL,
    net_rx_bytes   INTEGER NOT NULL,
    net_tx_bytes   INTEGER NOT NULL,
    network        TEXT NOT NULL,
    process_count  INTEGER NOT NULL,
    PRIMARY KEY (device_id, at),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE metric_rollups (
    device_id     BLOB NOT NULL,
    org_id        BLOB NOT NULL,
    bucket        TEXT NOT NULL CHECK (bucket IN ('hourly', 'daily')),
    bucket_start  TEXT NOT NULL,
    samples       INTEGER NOT NULL,
    cpu_sum       REAL NOT NULL,
    cpu_max       REAL NOT NULL,
    ram_sum       REAL NOT NULL,
    ram_max       REAL NOT NULL,
    disk_sum      REAL NOT NULL,
    disk_max      REAL NOT NULL,
    net_rx_bytes  INTEGER NOT NULL,
    net_tx_bytes  INTEGER NOT NULL,
    process_sum   REAL NOT NULL,
    PRIMARY KEY (device_id, bucket, bucket_start),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE agent_logs (
    id        BLOB PRIMARY KEY,
    org_id    BLOB NOT NULL,
    device_id BLOB NOT NULL,
    at        TEXT NOT NULL,
    level     TEXT NOT NULL CHECK (level IN ('trace', 'debug', 'info', 'warn', 'error')),
    target    TEXT NOT NULL,
    message   TEXT NOT NULL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX agent_logs_device ON agent_logs (org_id, device_id, at);
