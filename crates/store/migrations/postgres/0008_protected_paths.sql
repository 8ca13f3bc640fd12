-- An organization's additions to the protected paths, and the additions each command carried
-- (PostgreSQL). Kept in lockstep with migrations/sqlite/0008_protected_paths.sql.
--
-- The built-in list is code in breeze-agent-proto, not data: nothing here can remove from it.
-- A command keeps the additions as they were when it was queued, so a redelivery after a
-- restart carries the same list the audit record saw.
CREATE TABLE org_protected_paths (
    org_id      UUID PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    patterns    JSONB NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);

ALTER TABLE device_commands ADD COLUMN protected_paths JSONB NOT NULL DEFAULT '[]'::jsonb;
