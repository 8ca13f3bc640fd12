-- Step-up approvals: a Tier 3 call becomes a durable request a person decides (PostgreSQL).
-- Kept in lockstep with migrations/sqlite/0004_approvals.sql.

CREATE TABLE approval_requests (
    id                UUID PRIMARY KEY,
    org_id            UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    api_key_id        UUID REFERENCES api_keys (id) ON DELETE SET NULL,
    requester_user_id UUID NOT NULL REFERENCES users (id),
    tool              TEXT NOT NULL,
    action            TEXT,
    tier              BIGINT NOT NULL,
    arguments         JSONB NOT NULL,
    arguments_hash    BYTEA NOT NULL,
    definition_hash   BYTEA NOT NULL,
    description       TEXT NOT NULL,
    mode              TEXT NOT NULL CHECK (mode IN ('supervised', 'four_eyes')),
    status            TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired',
                                                      'reported', 'executing', 'completed',
                                                      'failed')),
    reason            TEXT,
    decided_by        UUID REFERENCES users (id),
    decided_at        TIMESTAMPTZ,
    request_id        TEXT,
    created_at        TIMESTAMPTZ NOT NULL,
    expires_at        TIMESTAMPTZ NOT NULL,
    claimed_at        TIMESTAMPTZ,
    completed_at      TIMESTAMPTZ,
    result            JSONB,
    result_is_error   BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX approval_requests_open ON approval_requests (status, expires_at);
CREATE INDEX approval_requests_org ON approval_requests (org_id, created_at);

CREATE TABLE approval_policies (
    org_id       UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- `*` (the organization's default), a tool name, or `tool.action`.
    action_class TEXT NOT NULL,
    mode         TEXT NOT NULL CHECK (mode IN ('supervised', 'four_eyes')),
    PRIMARY KEY (org_id, action_class)
);
