-- Deployments that run only inside maintenance windows (SQLite). Kept in lockstep with
-- migrations/postgres/0029_deployment_windows.sql.
--
-- `maintenance_window_only`: a device's run is sent only while a maintenance window is open
-- for it — window `window_id` when set (as `manage_patches` install in a window), else any
-- enabled window covering the device (its organization, site, groups or itself). A device
-- outside one stays pending with `deferred_reason` and, when known, `deferred_until` (when
-- its next window opens); both are cleared when its run is sent. `window_id` has no foreign
-- key: a deleted window leaves its deployment deferred, saying so, not rewritten.
ALTER TABLE deployments ADD COLUMN maintenance_window_only INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deployments ADD COLUMN window_id BLOB;
ALTER TABLE deployment_devices ADD COLUMN deferred_reason TEXT;
ALTER TABLE deployment_devices ADD COLUMN deferred_until TEXT;
