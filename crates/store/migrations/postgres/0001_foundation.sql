-- Foundation: tenancy, devices, users and roles, sessions, API keys, audit log (PostgreSQL).
-- Kept in lockstep with migrations/sqlite/0001_foundation.sql: same tables, same columns.

CREATE TABLE partners (
    id          UUID PRIMARY KEY,
    name        TEXT NOT NULL,
    slug        TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE organizations (
    id          UUID PRIMARY KEY,
    partner_id  UUID NOT NULL REFERENCES partners (id),
    name        TEXT NOT NULL,
    slug        TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX organizations_partner ON organizations (partner_id);

CREATE TABLE sites (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    timezone    TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);

CREATE TABLE device_groups (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    site_id     UUID,
    name        TEXT NOT NULL,
    description TEXT,
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id),
    FOREIGN KEY (site_id, org_id) REFERENCES sites (id, org_id)
);

CREATE TABLE devices (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    site_id       UUID NOT NULL,
    hostname      TEXT NOT NULL,
    os_family     TEXT NOT NULL CHECK (os_family IN ('linux', 'windows', 'macos', 'other')),
    os_name       TEXT NOT NULL,
    os_version    TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('online', 'offline', 'maintenance')),
    agent_version TEXT,
    last_seen_at  TIMESTAMPTZ,
    tags          JSONB NOT NULL DEFAULT '[]',
    created_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (id, org_id),
    FOREIGN KEY (site_id, org_id) REFERENCES sites (id, org_id)
);
CREATE INDEX devices_org_hostname ON devices (org_id, hostname);

CREATE TABLE device_group_members (
    group_id    UUID NOT NULL,
    device_id   UUID NOT NULL,
    org_id      UUID NOT NULL,
    PRIMARY KEY (group_id, device_id),
    FOREIGN KEY (group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

CREATE TABLE roles (
    id          UUID PRIMARY KEY,
    partner_id  UUID NOT NULL REFERENCES partners (id),
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    permissions JSONB NOT NULL,
    builtin     BOOLEAN NOT NULL,
    UNIQUE (partner_id, name)
);

CREATE TABLE users (
    id            UUID PRIMARY KEY,
    partner_id    UUID NOT NULL REFERENCES partners (id),
    org_id        UUID REFERENCES organizations (id),
    email         TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    disabled      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    TIMESTAMPTZ NOT NULL,
    last_login_at TIMESTAMPTZ
);

CREATE TABLE user_org_roles (
    user_id     UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    role_id     UUID NOT NULL REFERENCES roles (id),
    PRIMARY KEY (user_id, org_id)
);

CREATE TABLE user_sessions (
    id           UUID PRIMARY KEY,
    token_hash   BYTEA NOT NULL UNIQUE,
    user_id      UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL
);

CREATE TABLE api_keys (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id      UUID NOT NULL REFERENCES users (id),
    name         TEXT NOT NULL,
    key_hash     BYTEA NOT NULL UNIQUE,
    key_prefix   TEXT NOT NULL,
    scopes       JSONB NOT NULL,
    expires_at   TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ,
    created_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX api_keys_org ON api_keys (org_id, created_at);

-- No foreign keys: the record outlives whatever it describes.
CREATE TABLE audit_log (
    id            UUID PRIMARY KEY,
    created_at    TIMESTAMPTZ NOT NULL,
    org_id        UUID,
    actor_type    TEXT NOT NULL,
    actor_id      TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id   TEXT,
    details       JSONB NOT NULL,
    result        TEXT NOT NULL CHECK (result IN ('success', 'failure', 'denied')),
    error_message TEXT,
    request_id    TEXT
);
CREATE INDEX audit_log_org_time ON audit_log (org_id, created_at, id);
CREATE INDEX audit_log_org_action ON audit_log (org_id, action, created_at);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$;
CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
