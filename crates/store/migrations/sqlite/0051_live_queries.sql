-- Live queries: one row per question asked of a set of devices, and one per device's answer,
-- kept until expires_at (the retention) so results can be read again by query id, paged.
-- Kept in lockstep with migrations/postgres/0051_live_queries.sql.
CREATE TABLE live_queries (
    id               BLOB PRIMARY KEY,
    org_id           BLOB NOT NULL,
    question         TEXT NOT NULL,
    target           TEXT NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    expires_at       TEXT NOT NULL,
    devices_targeted INTEGER NOT NULL,
    devices_online   INTEGER NOT NULL,
    UNIQUE (id, org_id)
);
CREATE INDEX live_queries_org ON live_queries (org_id, created_at);
CREATE INDEX live_queries_expiry ON live_queries (expires_at);

CREATE TABLE live_query_answers (
    org_id      BLOB NOT NULL,
    query_id    BLOB NOT NULL,
    device_id   BLOB NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('answered', 'failed', 'timed_out', 'offline')),
    rows        TEXT NOT NULL,
    row_count   INTEGER NOT NULL,
    cap         TEXT,
    error       TEXT,
    answered_at TEXT NOT NULL,
    PRIMARY KEY (query_id, device_id),
    FOREIGN KEY (query_id, org_id) REFERENCES live_queries (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
