-- Nothing to change on PostgreSQL. Kept in lockstep with
-- migrations/sqlite/0007_audit_log_result_check.sql, which rewrites the audit row's result check
-- because SQLite builds a temporary index for an IN list on every INSERT statement;
-- PostgreSQL checks `result IN (...)` in place.
SELECT 1;
