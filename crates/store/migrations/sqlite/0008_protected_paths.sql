-- An organization's additions to the protected paths, and the additions each command carried
-- (SQLite). Kept in lockstep with migrations/postgres/0008_protected_paths.sql.
--
-- The built-in list is code in breeze-agent-proto, not data: nothing here can remove from it.
-- A command keeps the additions as they were when it was queued, so a redelivery after a
-- restart carries the same list the audit record saw.
CREATE TABLE org_protected_paths (
    org_id      BLOB PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    patterns    TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

ALTER TABLE device_commands ADD COLUMN protected_paths TEXT NOT NULL DEFAULT '[]';
