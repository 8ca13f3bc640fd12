-- The audit retention is one value for the whole cluster (SQLite). Kept in lockstep with
-- migrations/postgres/0050_audit_retention_settled.sql, which explains it.
ALTER TABLE audit_retention ADD COLUMN settled INTEGER NOT NULL DEFAULT 0;
UPDATE audit_retention SET settled = 1 WHERE days IS NOT NULL;
