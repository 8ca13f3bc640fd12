-- The agent and the device gateway: enrollment, device credentials, heartbeat state, user
-- sessions, commands, metrics and their rollups, agent logs, the script library (PostgreSQL).
-- Kept in lockstep with migrations/sqlite/0003_agents.sql.

CREATE TABLE enrollment_keys (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    site_id     UUID NOT NULL,
    name        TEXT NOT NULL,
    key_hash    BYTEA NOT NULL UNIQUE,
    key_prefix  TEXT NOT NULL,
    max_uses    BIGINT,
    uses        BIGINT NOT NULL DEFAULT 0,
    expires_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ,
    created_by  TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (id, org_id),
    FOREIGN KEY (site_id, org_id) REFERENCES sites (id, org_id) ON DELETE CASCADE
);

CREATE TABLE device_credentials (
    device_id          UUID PRIMARY KEY,
    org_id             UUID NOT NULL,
    token_hash         BYTEA NOT NULL UNIQUE,
    pending_token_hash BYTEA UNIQUE,
    machine_id         TEXT,
    enrollment_key_id  UUID,
    enrolled_at        TIMESTAMPTZ NOT NULL,
    rotated_at         TIMESTAMPTZ,
    revoked_at         TIMESTAMPTZ,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE device_state (
    device_id       UUID PRIMARY KEY,
    org_id          UUID NOT NULL,
    heartbeat_at    TIMESTAMPTZ,
    uptime_secs     BIGINT,
    pending_reboot  BOOLEAN NOT NULL DEFAULT FALSE,
    logged_in_users JSONB NOT NULL DEFAULT '[]',
    inventory       JSONB,
    inventory_at    TIMESTAMPTZ,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE device_user_sessions (
    id                  UUID PRIMARY KEY,
    org_id              UUID NOT NULL,
    device_id           UUID NOT NULL,
    username            TEXT NOT NULL,
    terminal            TEXT,
    host                TEXT,
    login_at            TIMESTAMPTZ NOT NULL,
    logout_at           TIMESTAMPTZ,
    login_duration_secs DOUBLE PRECISION,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_user_sessions_device ON device_user_sessions (org_id, device_id, login_at);

CREATE TABLE scripts (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    language    TEXT NOT NULL CHECK (language IN ('bash', 'sh', 'python', 'powershell')),
    category    TEXT NOT NULL DEFAULT 'general',
    body        TEXT NOT NULL,
    parameters  JSONB NOT NULL DEFAULT '[]',
    created_by  TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);

CREATE TABLE device_commands (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL,
    device_id        UUID NOT NULL,
    kind             TEXT NOT NULL,
    payload          JSONB NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'running', 'completed',
                                                     'failed', 'timed_out', 'cancelled')),
    timeout_secs     BIGINT NOT NULL,
    output_cap_bytes BIGINT NOT NULL,
    script_id        UUID REFERENCES scripts (id) ON DELETE SET NULL,
    script_name      TEXT,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    deadline_at      TIMESTAMPTZ NOT NULL,
    sent_at          TIMESTAMPTZ,
    started_at       TIMESTAMPTZ,
    completed_at     TIMESTAMPTZ,
    exit_code        BIGINT,
    stdout           TEXT,
    stderr           TEXT,
    stdout_truncated BOOLEAN NOT NULL DEFAULT FALSE,
    stderr_truncated BOOLEAN NOT NULL DEFAULT FALSE,
    result           JSONB,
    error            TEXT,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_commands_open ON device_commands (device_id, status);
CREATE INDEX device_commands_org ON device_commands (org_id, device_id, created_at);

CREATE TABLE device_metrics (
    device_id      UUID NOT NULL,
    org_id         UUID NOT NULL,
    at             TIMESTAMPTZ NOT NULL,
    cpu_percent    DOUBLE PRECISION NOT NULL,
    ram_percent    DOUBLE PRECISION NOT NULL,
    ram_used_bytes BIGINT NOT NULL,
    disk_percent   DOUBLE PRECISION NOT NULL,
    disks          JSONB NOT NULL,
    net_rx_bytes   BIGINT NOT NULL,
    net_tx_bytes   BIGINT NOT NULL,
    network        JSONB NOT NULL,
    process_count  BIGINT NOT NULL,
    PRIMARY KEY (device_id, at),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE metric_rollups (
    device_id     UUID NOT NULL,
    org_id        UUID NOT NULL,
    bucket        TEXT NOT NULL CHECK (bucket IN ('hourly', 'daily')),
    bucket_start  TIMESTAMPTZ NOT NULL,
    samples       BIGINT NOT NULL,
    cpu_sum       DOUBLE PRECISION NOT NULL,
    cpu_max       DOUBLE PRECISION NOT NULL,
    ram_sum       DOUBLE PRECISION NOT NULL,
    ram_max       DOUBLE PRECISION NOT NULL,
    disk_sum      DOUBLE PRECISION NOT NULL,
    disk_max      DOUBLE PRECISION NOT NULL,
    net_rx_bytes  BIGINT NOT NULL,
    net_tx_bytes  BIGINT NOT NULL,
    process_sum   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (device_id, bucket, bucket_start),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE agent_logs (
    id        UUID PRIMARY KEY,
    org_id    UUID NOT NULL,
    device_id UUID NOT NULL,
    at        TIMESTAMPTZ NOT NULL,
    level     TEXT NOT NULL CHECK (level IN ('trace', 'debug', 'info', 'warn', 'error')),
    target    TEXT NOT NULL,
    message   TEXT NOT NULL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX agent_logs_device ON agent_logs (org_id, device_id, at);
