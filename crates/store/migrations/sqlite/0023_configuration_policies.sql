-- Configuration policies, their assignments through the hierarchy and what agents applied
-- (SQLite). Kept in lockstep with migrations/postgres/0023_configuration_policies.sql.
--
-- A policy is owned by an organization (org_id) or by a partner (partner_id, every
-- organization of the partner sees it), never both. `settings` is the JSON of
-- `breeze_core::config_policy::PolicySettings` (feature type -> the fields it sets), checked
-- in Rust when written.
CREATE TABLE config_policies (
    id          BLOB PRIMARY KEY,
    org_id      BLOB REFERENCES organizations (id) ON DELETE CASCADE,
    partner_id  BLOB REFERENCES partners (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT,
    status      TEXT NOT NULL CHECK (status IN ('active', 'inactive')),
    settings    TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    CHECK ((org_id IS NULL) <> (partner_id IS NULL)),
    UNIQUE (org_id, name),
    UNIQUE (partner_id, name),
    UNIQUE (id, org_id),
    UNIQUE (id, partner_id)
);

-- An assignment attaches a policy at one level. An organization's policy is assigned to the
-- organization itself, one of its sites, groups or devices (composite foreign keys keep every
-- target in the policy's organization); a partner's policy at the partner level.
CREATE TABLE config_policy_assignments (
    id               BLOB PRIMARY KEY,
    policy_id        BLOB NOT NULL,
    org_id           BLOB,
    partner_id       BLOB,
    level            TEXT NOT NULL CHECK (level IN ('partner', 'organization', 'site', 'device_group', 'device')),
    target_id        BLOB NOT NULL,
    target_site_id   BLOB,
    target_group_id  BLOB,
    target_device_id BLOB,
    priority         INTEGER NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    UNIQUE (policy_id, level, target_id),
    CHECK ((org_id IS NULL) <> (partner_id IS NULL)),
    CHECK ((level = 'partner' AND partner_id IS NOT NULL AND target_id = partner_id)
        OR (level = 'organization' AND org_id IS NOT NULL AND target_id = org_id)
        OR (level = 'site' AND org_id IS NOT NULL AND target_site_id = target_id)
        OR (level = 'device_group' AND org_id IS NOT NULL AND target_group_id = target_id)
        OR (level = 'device' AND org_id IS NOT NULL AND target_device_id = target_id)),
    FOREIGN KEY (policy_id, org_id) REFERENCES config_policies (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (policy_id, partner_id) REFERENCES config_policies (id, partner_id) ON DELETE CASCADE,
    FOREIGN KEY (policy_id) REFERENCES config_policies (id) ON DELETE CASCADE,
    FOREIGN KEY (target_site_id, org_id) REFERENCES sites (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX config_policy_assignments_org ON config_policy_assignments (org_id);
CREATE INDEX config_policy_assignments_partner ON config_policy_assignments (partner_id);

-- What a device's agent last reported as applied: the revision of the configuration it
-- received and the values in effect on the device.
CREATE TABLE device_config_reports (
    device_id   BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL,
    revision    TEXT,
    applied     TEXT NOT NULL,
    reported_at TEXT NOT NULL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
