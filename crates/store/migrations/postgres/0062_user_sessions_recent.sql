-- The newest sessions of an organization, fleet-wide (get_user_experience_metrics without a
-- device): in login order, so the listing walks the index newest first and stops at its limit
-- instead of sorting every session of the fleet. Kept in lockstep with
-- migrations/sqlite/0062_user_sessions_recent.sql.
CREATE INDEX device_user_sessions_recent ON device_user_sessions (org_id, login_at, id);
