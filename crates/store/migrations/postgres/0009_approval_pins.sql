-- Approvals that pin what they depend on and can be withdrawn (PostgreSQL). Kept in lockstep
-- with migrations/sqlite/0009_approval_pins.sql.
--
-- `pinned` is the snapshot of stored data a Tier 3 call depends on (a script's name, language,
-- body and parameters, …) as the approver reviews it, `pinned_hash` its SHA-256: the call runs
-- only while that data is unchanged. `withdrawn` is the status of a request whose caller
-- cancelled or went away while it waited.
ALTER TABLE approval_requests ADD COLUMN pinned JSONB;
ALTER TABLE approval_requests ADD COLUMN pinned_hash BYTEA;
ALTER TABLE approval_requests DROP CONSTRAINT approval_requests_status_check;
ALTER TABLE approval_requests ADD CONSTRAINT approval_requests_status_check
    CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'reported', 'withdrawn',
                      'executing', 'completed', 'failed'));
