-- Deployments in maintenance windows and scheduled security scans (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0029_deployment_windows.sql.
--
-- `maintenance_window_only`: a device's run is sent only while a maintenance window is open
-- for it — window `window_id` when set (as `manage_patches` install in a window), else any
-- enabled window covering the device (its organization, site, groups or itself). A device
-- outside one stays pending with `deferred_reason` and, when known, `deferred_until` (when
-- its next window opens); both are cleared when its run is sent. `window_id` has no foreign
-- key: a deleted window leaves its deployment deferred, saying so, not rewritten.
ALTER TABLE deployments ADD COLUMN maintenance_window_only BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE deployments ADD COLUMN window_id UUID;
ALTER TABLE deployment_devices ADD COLUMN deferred_reason TEXT;
ALTER TABLE deployment_devices ADD COLUMN deferred_until TIMESTAMPTZ;

-- Security scans on a schedule: `arguments` are a `security_scan` scan call's (devices or a
-- target, extra roots, indicator paths), run by the server's worker through the call pipeline
-- as `owner_actor` (Tier 3: approval, rate limit) every `interval_minutes`, or at a five-field
-- `cron` read in `time_zone`. `next_run_at` is the lease: the instance that moves it forward
-- with a conditional update fires the occurrence, so a cluster fires each one once.
CREATE TABLE security_scan_schedules (
    id                UUID PRIMARY KEY,
    org_id            UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    arguments         JSONB NOT NULL,
    interval_minutes  BIGINT,
    cron              TEXT,
    time_zone         TEXT NOT NULL,
    owner_actor       TEXT NOT NULL,
    next_run_at       TIMESTAMPTZ,
    last_run_at       TIMESTAMPTZ,
    last_status       TEXT,
    last_message      TEXT,
    created_at        TIMESTAMPTZ NOT NULL,
    CHECK ((interval_minutes IS NULL) <> (cron IS NULL))
);
CREATE INDEX security_scan_schedules_org ON security_scan_schedules (org_id, created_at);
CREATE INDEX security_scan_schedules_due ON security_scan_schedules (next_run_at);
