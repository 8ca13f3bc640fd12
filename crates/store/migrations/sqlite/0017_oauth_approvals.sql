-- OAuth follow-ups (SQLite). Kept in lockstep with migrations/postgres/0017_oauth_approvals.sql.
--
-- An approval request made with an OAuth access token names the token's grant, as one made
-- with an API key names the key: the approved call is cleared again as the grant stands then
-- (void once revoked), and a "reported" decision revokes the grant's client for its user.
-- `scheduled_runs` is a lease row per periodic job (the daily OAuth sweep): an instance runs
-- the job only after moving `last_run_at` forward with a conditional update, so instances
-- sharing the database run it once per period between them.
ALTER TABLE approval_requests
    ADD COLUMN oauth_grant_id BLOB REFERENCES oauth_grants (id) ON DELETE SET NULL;

CREATE TABLE scheduled_runs (
    name        TEXT PRIMARY KEY,
    last_run_at TEXT NOT NULL
);
