-- Approvals that pin what they depend on and can be withdrawn (SQLite). Kept in lockstep with
-- migrations/postgres/0009_approval_pins.sql.
--
-- `pinned` is the snapshot of stored data a Tier 3 call depends on (a script's name, language,
-- body and parameters, …) as the approver reviews it, `pinned_hash` its SHA-256: the call runs
-- only while that data is unchanged. `withdrawn` is the status of a request whose caller
-- cancelled or went away while it waited. SQLite cannot change a table's CHECK, so the table
-- is rebuilt and the requests copied over as they are.
CREATE TABLE approval_requests_pinned (
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
INSERT INTO approval_requests_pinned
    SELECT id, org_id, api_key_id, requester_user_id, tool, action, tier, arguments,
           arguments_hash, definition_hash, description, mode, status, reason, decided_by,
           decided_at, request_id, created_at, expires_at, claimed_at, completed_at, result,
           result_is_error, NULL, NULL
    FROM approval_requests;
DROP TABLE approval_requests;
ALTER TABLE approval_requests_pinned RENAME TO approval_requests;
CREATE INDEX approval_requests_open ON approval_requests (status, expires_at);
CREATE INDEX approval_requests_org ON approval_requests (org_id, created_at);
