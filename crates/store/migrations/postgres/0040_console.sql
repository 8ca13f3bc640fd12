-- The technician's console: suppressing alerts, and indexes for its overview and live alerts.
-- An alert suppressed by a person: resolved, and its rule raises nothing more on that device
-- until the time kept here. Kept in lockstep with migrations/sqlite/0040_console.sql.
ALTER TABLE alerts ADD COLUMN suppressed_until TIMESTAMPTZ;
-- The dashboard's live check of the unresolved alerts (counts by status, newest id).
CREATE INDEX alerts_org_status ON alerts (org_id, status);
-- The overview's top devices by CPU, memory and disk: the organization's recent samples.
CREATE INDEX device_metrics_org_at ON device_metrics (org_id, at);
