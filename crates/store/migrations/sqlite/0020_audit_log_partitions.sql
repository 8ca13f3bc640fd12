-- Nothing to change on SQLite. Kept in lockstep with
-- migrations/postgres/0020_audit_log_partitions.sql, which partitions the PostgreSQL audit log
-- by month so that a purge drops whole months instead of deleting rows one by one. SQLite has
-- no partitions; its table is keyed by the time-ordered id, so a purge deletes from the front
-- of one B-tree, in batches (`Store::purge_audit`).
SELECT 1;
