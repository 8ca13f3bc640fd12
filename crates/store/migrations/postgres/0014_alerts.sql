-- Alerts, alert rules and notification channels (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0014_alerts.sql.
--
-- A rule names one target (the organization, a site, a group or a device) through nullable
-- columns, each with a composite foreign key to a row of the same organization, so a rule can
-- never reach another organization's site, group or device. A rule is deleted softly
-- (`deleted_at`): its alerts keep naming it.
CREATE TABLE notification_channels (
    id          UUID PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('email', 'webhook', 'in_app')),
    config      JSONB NOT NULL,
    secret      TEXT,
    enabled     BOOLEAN NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);

CREATE TABLE alert_rules (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    description      TEXT,
    severity         TEXT NOT NULL CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical')),
    enabled          BOOLEAN NOT NULL,
    condition        JSONB NOT NULL,
    target_kind      TEXT NOT NULL CHECK (target_kind IN ('organization', 'site', 'group', 'device')),
    target_site_id   UUID,
    target_group_id  UUID,
    target_device_id UUID,
    cooldown_minutes BIGINT NOT NULL CHECK (cooldown_minutes >= 0),
    auto_resolve     BOOLEAN NOT NULL,
    channel_ids      JSONB NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    deleted_at       TIMESTAMPTZ,
    UNIQUE (id, org_id),
    CHECK ((target_kind = 'organization' AND target_site_id IS NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'site' AND target_site_id IS NOT NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'group' AND target_group_id IS NOT NULL AND target_site_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'device' AND target_device_id IS NOT NULL AND target_site_id IS NULL AND target_group_id IS NULL)),
    FOREIGN KEY (target_site_id, org_id) REFERENCES sites (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
-- Names are unique among the rules in use; a deleted rule's name can be taken again.
CREATE UNIQUE INDEX alert_rules_name ON alert_rules (org_id, name) WHERE deleted_at IS NULL;

CREATE TABLE alerts (
    id              UUID PRIMARY KEY,
    org_id          UUID NOT NULL,
    rule_id         UUID NOT NULL,
    device_id       UUID NOT NULL,
    severity        TEXT NOT NULL CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical')),
    status          TEXT NOT NULL CHECK (status IN ('open', 'acknowledged', 'resolved')),
    title           TEXT NOT NULL,
    message         TEXT NOT NULL,
    value           DOUBLE PRECISION,
    triggered_at    TIMESTAMPTZ NOT NULL,
    acknowledged_at TIMESTAMPTZ,
    acknowledged_by TEXT,
    resolved_at     TIMESTAMPTZ,
    resolved_by     TEXT,
    UNIQUE (id, org_id),
    FOREIGN KEY (rule_id, org_id) REFERENCES alert_rules (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
-- One alert at a time per rule and device: a second insert while one is unresolved conflicts.
CREATE UNIQUE INDEX alerts_one_unresolved ON alerts (rule_id, device_id) WHERE status <> 'resolved';
CREATE INDEX alerts_org_time ON alerts (org_id, triggered_at, id);
CREATE INDEX alerts_rule_device ON alerts (rule_id, device_id, resolved_at);

-- What happened to an alert, in order: raised, acknowledged, resolved, notified, a channel's
-- failure, a suppression. Shown with the alert.
CREATE TABLE alert_events (
    id         UUID PRIMARY KEY,
    org_id     UUID NOT NULL,
    alert_id   UUID NOT NULL,
    at         TIMESTAMPTZ NOT NULL,
    kind       TEXT NOT NULL,
    actor      TEXT NOT NULL,
    note       TEXT,
    details    JSONB,
    FOREIGN KEY (alert_id, org_id) REFERENCES alerts (id, org_id) ON DELETE CASCADE
);
CREATE INDEX alert_events_alert ON alert_events (alert_id, at, id);
