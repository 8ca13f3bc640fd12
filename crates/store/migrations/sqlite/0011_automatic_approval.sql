-- Automatic approval (SQLite). Kept in lockstep with
-- migrations/postgres/0010_automatic_approval.sql.
--
-- An organization may let its policy approve a read-only Tier 3 action (e.g.
-- `execute_command.list_processes`) at once: mode `automatic`, on the policy and on the
-- requests it approved (which keep `decided_by` empty and name the policy in `reason`).
-- SQLite cannot change a table's CHECK, so both tables are rebuilt and their rows copied.
CREATE TABLE approval_requests_automatic (
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
    mode              TEXT NOT NULL CHECK (mode IN ('supervised', 'four_eyes', 'automatic')),
    status            TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired',
                                                      'reported', 'withdrawn', 'executing',
                                                      'completed', 'failed')),
    reason            TEXT,
    decided_by        BLOB REFERENCES users (id),
    decided_at        TEXT,
    request_id        TEXT,
    created_at        TEXT NOT NULL,
    expires_at        TEXT NOT NULL,
    claimed_at        TEXT,
    completed_at      TEXT,
    result            TEXT,
    result_is_error   INTEGER NOT NULL DEFAULT 0,
    pinned            TEXT,
    pinned_hash       BLOB
);
INSERT INTO approval_requests_automatic
    SELECT id, org_id, api_key_id, requester_user_id, tool, action, tier, arguments,
           arguments_hash, definition_hash, description, mode, status, reason, decided_by,
           decided_at, request_id, created_at, expires_at, claimed_at, completed_at, result,
           result_is_error, pinned, pinned_hash
    FROM approval_requests;
DROP TABLE approval_requests;
ALTER TABLE approval_requests_automatic RENAME TO approval_requests;
CREATE INDEX approval_requests_open ON approval_requests (status, expires_at);
CREATE INDEX approval_requests_org ON approval_requests (org_id, created_at);

CREATE TABLE approval_policies_automatic (
    org_id       BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- `*` (the organization's default), a tool name, or `tool.action`.
    action_class TEXT NOT NULL,
    mode         TEXT NOT NULL CHECK (mode IN ('supervised', 'four_eyes', 'automatic')),
    PRIMARY KEY (org_id, action_class)
);
INSERT INTO approval_policies_automatic SELECT org_id, action_class, mode FROM approval_policies;
DROP TABLE approval_policies;
ALTER TABLE approval_policies_automatic RENAME TO approval_policies;
