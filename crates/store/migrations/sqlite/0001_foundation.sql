-- Foundation: tenancy, devices, users and roles, sessions, API keys, audit log (SQLite).
-- Kept in lockstep with migrations/postgres/0001_foundation.sql: same tables, same columns.
-- Ids are UUIDs (BLOB), times are RFC 3339 UTC text, JSON is text.

CREATE TABLE partners (
    id          BLOB PRIMARY KEY,
    name        TEXT NOT NULL,
    slug        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);

CREATE TABLE organizations (
    id          BLOB PRIMARY KEY,
    partner_id  BLOB NOT NULL REFERENCES partners (id),
    name        TEXT NOT NULL,
    slug        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);
CREATE INDEX organizations_partner ON organizations (partner_id);

CREATE TABLE sites (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    timezone    TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);

CREATE TABLE device_groups (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    site_id     BLOB,
    name        TEXT NOT NULL,
    description TEXT,
    created_at  TEXT NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id),
    FOREIGN KEY (site_id, org_id) REFERENCES sites (id, org_id)
);

CREATE TABLE devices (
    id            BLOB PRIMARY KEY,
    org_id        BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    site_id       BLOB NOT NULL,
    hostname      TEXT NOT NULL,
    os_family     TEXT NOT NULL CHECK (os_family IN ('linux', 'windows', 'macos', 'other')),
    os_name       TEXT NOT NULL,
    os_version    TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('online', 'offline', 'maintenance')),
    agent_version TEXT,
    last_seen_at  TEXT,
    tags          TEXT NOT NULL DEFAULT '[]',
    created_at    TEXT NOT NULL,
    UNIQUE (id, org_id),
    FOREIGN KEY (site_id, org_id) REFERENCES sites (id, org_id)
);
CREATE INDEX devices_org_hostname ON devices (org_id, hostname);

CREATE TABLE device_group_members (
    group_id    BLOB NOT NULL,
    device_id   BLOB NOT NULL,
    org_id      BLOB NOT NULL,
    PRIMARY KEY (group_id, device_id),
    FOREIGN KEY (group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE roles (
    id          BLOB PRIMARY KEY,
    partner_id  BLOB NOT NULL REFERENCES partners (id),
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    permissions TEXT NOT NULL,
    builtin     INTEGER NOT NULL,
    UNIQUE (partner_id, name)
);

CREATE TABLE users (
    id            BLOB PRIMARY KEY,
    partner_id    BLOB NOT NULL REFERENCES partners (id),
    org_id        BLOB REFERENCES organizations (id),
    email         TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    disabled      INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL,
    last_login_at TEXT
);

CREATE TABLE user_org_roles (
    user_id     BLOB NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id      BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    role_id     BLOB NOT NULL REFERENCES roles (id),
    PRIMARY KEY (user_id, org_id)
);

CREATE TABLE user_sessions (
    id           BLOB PRIMARY KEY,
    token_hash   BLOB NOT NULL UNIQUE,
    user_id      BLOB NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   TEXT NOT NULL,
    expires_at   TEXT NOT NULL
);

CREATE TABLE api_keys (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id      BLOB NOT NULL REFERENCES users (id),
    name         TEXT NOT NULL,
    key_hash     BLOB NOT NULL UNIQUE,
    key_prefix   TEXT NOT NULL,
    scopes       TEXT NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    last_used_at TEXT,
    created_at   TEXT NOT NULL
);
CREATE INDEX api_keys_org ON api_keys (org_id, created_at);

-- No foreign keys: the record outlives whatever it describes.
CREATE TABLE audit_log (
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
);
CREATE INDEX audit_log_org_time ON audit_log (org_id, created_at, id);
CREATE INDEX audit_log_org_action ON audit_log (org_id, action, created_at);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
