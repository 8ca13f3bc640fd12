-- Maintenance windows and the alerts they suppressed (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0015_maintenance_windows.sql.
--
-- A window targets the organization, a site, a group or a device like an alert rule does
-- (composite foreign keys keep the target in the window's organization). `schedule` is the
-- JSON of `breeze_core::MaintenanceSchedule` (one-off instants, or weekly days + local start
-- time + duration), read in `time_zone` (an IANA name).
CREATE TABLE maintenance_windows (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    description      TEXT,
    target_kind      TEXT NOT NULL CHECK (target_kind IN ('organization', 'site', 'group', 'device')),
    target_site_id   UUID,
    target_group_id  UUID,
    target_device_id UUID,
    time_zone        TEXT NOT NULL,
    schedule         JSONB NOT NULL,
    suppress_alerts  BOOLEAN NOT NULL,
    enabled          BOOLEAN NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id),
    CHECK ((target_kind = 'organization' AND target_site_id IS NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'site' AND target_site_id IS NOT NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'group' AND target_group_id IS NOT NULL AND target_site_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'device' AND target_device_id IS NOT NULL AND target_site_id IS NULL AND target_group_id IS NULL)),
    FOREIGN KEY (target_site_id, org_id) REFERENCES sites (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);

-- An alert a rule would have raised on a device while a window was open: one row per rule,
-- device, window and occurrence (the engine asks again every tick; the first time is kept).
-- The window is named, not referenced, so the record outlives a deleted window.
CREATE TABLE alert_suppressions (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL,
    rule_id          UUID NOT NULL,
    device_id        UUID NOT NULL,
    window_id        UUID NOT NULL,
    window_name      TEXT NOT NULL,
    occurrence_start TIMESTAMPTZ NOT NULL,
    occurrence_end   TIMESTAMPTZ NOT NULL,
    at               TIMESTAMPTZ NOT NULL,
    value            DOUBLE PRECISION,
    UNIQUE (rule_id, device_id, window_id, occurrence_start),
    FOREIGN KEY (rule_id, org_id) REFERENCES alert_rules (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX alert_suppressions_rule ON alert_suppressions (org_id, rule_id, at);
CREATE INDEX alert_suppressions_window ON alert_suppressions (org_id, window_id, at);
