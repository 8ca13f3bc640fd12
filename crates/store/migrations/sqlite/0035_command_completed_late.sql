-- A command's result that arrived after the sweeper had timed the command out replaces the
-- timeout (the command ran; its output is kept) and is marked as having completed late.
ALTER TABLE device_commands ADD COLUMN completed_late INTEGER NOT NULL DEFAULT 0;
