-- Live queries: one row per question asked of a set of devices, and one per device's answer,
-- kept until expires_at (the retention) so results can be read again by query id, paged.
-- Kept in lockstep with migrations/sqlite/0051_live_queries.sql.
CREATE TABLE live_queries (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL,
    question         JSONB NOT NULL,
    target           JSONB NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    devices_targeted BIGINT NOT NULL,
    devices_online   BIGINT NOT NULL,
    UNIQUE (id, org_id)
);
CREATE INDEX live_queries_org ON live_queries (org_id, created_at);
CREATE INDEX live_queries_expiry ON live_queries (expires_at);

CREATE TABLE live_query_answers (
    org_id      UUID NOT NULL,
    query_id    UUID NOT NULL,
    device_id   UUID NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('answered', 'failed', 'timed_out', 'offline')),
    rows        JSONB NOT NULL,
    row_count   BIGINT NOT NULL,
    cap         TEXT,
    error       TEXT,
    answered_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (query_id, device_id),
    FOREIGN KEY (query_id, org_id) REFERENCES live_queries (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

DO $$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY['live_queries', 'live_query_answers']::regclass[]
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY org_wall ON %s '
            'USING (current_setting(''breeze.scope'', true) IN (''system'', org_id::text))',
            t);
    END LOOP;
END
$$;
