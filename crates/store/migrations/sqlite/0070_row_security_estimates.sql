-- Row-level security's policies restated (PostgreSQL only; see
-- migrations/postgres/0070_row_security_estimates.sql). Kept so the trees stay in lockstep.
SELECT 1;
