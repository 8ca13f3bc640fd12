-- A cheaper audit row (PostgreSQL). Kept in lockstep with migrations/sqlite/0006_audit_log_write_cost.sql.
--
-- Every MCP request writes an audit record, while the log is read a page at a time. The index
-- on (org_id, action, created_at) is gone: a query filtered by action walks the organization's
-- time index newest first, as an unfiltered page does. (The SQLite side also keys the table by
-- its id; a PostgreSQL heap has no rowid tree to save.)
DROP INDEX audit_log_org_action;
