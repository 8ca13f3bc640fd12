-- Staged deployments (PostgreSQL). Kept in lockstep with migrations/sqlite/0027_deployments.sql.
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
    id                   UUID PRIMARY KEY,
    org_id               UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name                 TEXT NOT NULL,
    description          TEXT,
    payload              JSONB NOT NULL,
    target_kind          TEXT NOT NULL CHECK (target_kind IN ('organization', 'site', 'group', 'device')),
    target_site_id       UUID,
    target_group_id      UUID,
    target_device_id     UUID,
    rings                JSONB NOT NULL,
    max_failure_percent  BIGINT NOT NULL CHECK (max_failure_percent BETWEEN 0 AND 100),
    status               TEXT NOT NULL CHECK (status IN ('draft', 'running', 'paused', 'completed', 'cancelled')),
    current_ring         BIGINT NOT NULL,
    accepted_ring        BIGINT,
    pause_reason         TEXT,
    owner_actor          TEXT NOT NULL,
    next_step_at         TIMESTAMPTZ,
    created_at           TIMESTAMPTZ NOT NULL,
    updated_at           TIMESTAMPTZ NOT NULL,
    started_at           TIMESTAMPTZ,
    finished_at          TIMESTAMPTZ,
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
    deployment_id  UUID NOT NULL,
    device_id      UUID NOT NULL,
    org_id         UUID NOT NULL,
    ring           BIGINT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'skipped')),
    approval_id    UUID,
    command_id     TEXT,
    patch_job_id   UUID,
    exit_code      BIGINT,
    output         TEXT,
    error          TEXT,
    started_at     TIMESTAMPTZ,
    finished_at    TIMESTAMPTZ,
    PRIMARY KEY (deployment_id, device_id),
    FOREIGN KEY (deployment_id, org_id) REFERENCES deployments (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX deployment_devices_ring ON deployment_devices (deployment_id, ring, status);
