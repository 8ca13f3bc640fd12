-- Staged deployments (SQLite). Kept in lockstep with migrations/postgres/0027_deployments.sql.
--
-- A deployment runs one payload (JSON: a library script with its parameters, or a package to
-- install through the patch layer) on the devices of
-- its target, ring after ring (`rings`, JSON: each ring's name and success threshold; the
-- devices are fixed at creation in `deployment_devices`). `max_failure_percent` pauses it
-- automatically (with `pause_reason`) when a ring's failures cross it. `owner_actor` is the
-- credential its script runs act as (who created, then who last started or resumed it).
-- `next_step_at` is the worker's lease: the instance that moves it forward with a conditional
-- update advances the deployment, so a cluster steps each deployment once at a time. The
-- target's ids carry no foreign keys: the devices are resolved at creation into
-- `deployment_devices`, and a deployment's history outlives a deleted site or group.
CREATE TABLE deployments (
    id                   BLOB PRIMARY KEY,
    org_id               BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name                 TEXT NOT NULL,
    description          TEXT,
    payload              TEXT NOT NULL,
    target_kind          TEXT NOT NULL CHECK (target_kind IN ('organization', 'site', 'group', 'device')),
    target_site_id       BLOB,
    target_group_id      BLOB,
    target_device_id     BLOB,
    rings                TEXT NOT NULL,
    max_failure_percent  INTEGER NOT NULL CHECK (max_failure_percent BETWEEN 0 AND 100),
    status               TEXT NOT NULL CHECK (status IN ('draft', 'running', 'paused', 'completed', 'cancelled')),
    current_ring         INTEGER NOT NULL,
    accepted_ring        INTEGER,
    pause_reason         TEXT,
    owner_actor          TEXT NOT NULL,
    next_step_at         TEXT,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL,
    started_at           TEXT,
    finished_at          TEXT,
    UNIQUE (id, org_id),
    CHECK ((target_kind = 'organization' AND target_site_id IS NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'site' AND target_site_id IS NOT NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'group' AND target_group_id IS NOT NULL AND target_site_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'device' AND target_device_id IS NOT NULL AND target_site_id IS NULL AND target_group_id IS NULL))
);
CREATE INDEX deployments_org ON deployments (org_id, created_at);
CREATE INDEX deployments_due ON deployments (next_step_at) WHERE status = 'running';

-- Each device of a deployment: its ring, where it stands, and what its run came to (for a
-- package, the patch job that installs it).
CREATE TABLE deployment_devices (
    deployment_id  BLOB NOT NULL,
    device_id      BLOB NOT NULL,
    org_id         BLOB NOT NULL,
    ring           INTEGER NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'skipped')),
    approval_id    BLOB,
    command_id     TEXT,
    patch_job_id   BLOB,
    exit_code      INTEGER,
    output         TEXT,
    error          TEXT,
    started_at     TEXT,
    finished_at    TEXT,
    PRIMARY KEY (deployment_id, device_id),
    FOREIGN KEY (deployment_id, org_id) REFERENCES deployments (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX deployment_devices_ring ON deployment_devices (deployment_id, ring, status);
