-- Idempotent writes (PostgreSQL). Kept in lockstep with migrations/sqlite/0010_idempotency.sql.
--
-- One row per (organization, principal, requestId): the first call with a requestId claims it
-- (`in_progress`), its outcome is stored (`done`) and every later call with the same requestId
-- and the same tool and payload (`payload_hash`: SHA-256 of the tool and its canonical
-- arguments without the requestId) is answered from `result`; a different payload is a
-- conflict. `claim_token` names the current claim, so that only its holder completes or
-- releases it, and a claim taken over after going stale leaves the old holder nothing to
-- overwrite. Rows are pruned after the retention window (see `idempotency.rs`).
CREATE TABLE idempotency_records (
    org_id          UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- Who called: an ActorType (`api_key`, `user`, …) and that principal's id.
    actor_type      TEXT NOT NULL,
    actor_id        TEXT NOT NULL,
    request_id      TEXT NOT NULL CHECK (char_length(request_id) BETWEEN 1 AND 200),
    tool            TEXT NOT NULL,
    payload_hash    BYTEA NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('in_progress', 'done')),
    claim_token     UUID NOT NULL,
    result          JSONB,
    result_is_error BOOLEAN NOT NULL DEFAULT FALSE,
    created_at      TIMESTAMPTZ NOT NULL,
    claimed_at      TIMESTAMPTZ NOT NULL,
    completed_at    TIMESTAMPTZ,
    PRIMARY KEY (org_id, actor_type, actor_id, request_id),
    CHECK ((state = 'done') = (completed_at IS NOT NULL AND result IS NOT NULL))
);
-- The retention sweep: finished records by completion, open claims by their last claim.
CREATE INDEX idempotency_records_done ON idempotency_records (completed_at);
CREATE INDEX idempotency_records_open ON idempotency_records (claimed_at)
    WHERE state = 'in_progress';
