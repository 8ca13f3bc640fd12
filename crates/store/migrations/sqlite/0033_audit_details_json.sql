-- The audit log's details as `json` on PostgreSQL (see
-- migrations/postgres/0033_audit_details_json.sql). SQLite stores them as text already. Kept so
-- the trees stay in lockstep.
SELECT 1;
