-- Step-up approvals: a Tier 3 call becomes a durable request a person decides (SQLite).
-- Kept in lockstep with migrations/postgres/0004_approvals.sql.

CREATE TABLE approval_requests (
    id                BLOB PRIMARY KEY,
    org_id            BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    api_key_id        BLOB REFERENCES api_keys (id) ON DELETE SET NULL,
    requester_user_id BLOB NOT NULL REFERENCES users (id),
    tool              TEXT NOT NULL,
    action            TEXT,
    tier              INTEGER NOT NULL,
    arguments         TEXT NOT NULL,
    arguments_hash    BLOB NOT NULL,
    definition_hash   BLOB NOT NULL,
    description       TEXT NOT NULL,
    mode              TEXT NOT NULL CHECK (mode IN ('supervised', 'four_eyes')),
    status            TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired',
                                                      'reported', 'executing', 'completed',
                                                      'failed')),
    reason            TEXT,
    decided_by        BLOB REFERENCES users (id),
    decided_at        TEXT,
    request_id        TEXT,
    created_at        TEXT NOT NULL,
    expires_at        TEXT NOT NULL,
    claimed_at        TEXT,
    completed_at      TEXT,
    result            TEXT,
    result_is_error   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX approval_requests_open ON approval_requests (status, expires_at);
CREATE INDEX approval_requests_org ON approval_requests (org_id, created_at);

CREATE TABLE approval_policies (
    org_id       BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- `*` (the organization's default), a tool name, or `tool.action`.
    action_class TEXT NOT NULL,
    mode         TEXT NOT NULL CHECK (mode IN ('supervised', 'four_eyes')),
    PRIMARY KEY (org_id, action_class)
);
