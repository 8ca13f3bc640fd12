-- Patch management (PostgreSQL). Kept in lockstep with migrations/sqlite/0024_patches.sql.
--
-- `device_patches` is each device's last scan: the updates its package manager offers (replaced
-- whole by every scan); `patch_scans` the scan itself (one row per device) and a scan asked for
-- and not answered yet. `patch_approvals` holds decisions per package, organization-wide
-- (policy_id NULL) or for the devices a configuration policy's patch settings cover; one per
-- package and scope. `patch_jobs` are installs and rollbacks (now, or in a maintenance
-- window), `patch_job_devices` each device's part and result, `patch_history` every package
-- change an agent reported (the earlier version a rollback goes back to).
CREATE TABLE device_patches (
    device_id         UUID NOT NULL,
    org_id            UUID NOT NULL,
    name              TEXT NOT NULL,
    installed_version TEXT,
    available_version TEXT NOT NULL,
    arch              TEXT,
    source            TEXT,
    security          BOOLEAN NOT NULL,
    severity          TEXT,
    advisory          TEXT,
    scanned_at        TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (device_id, name),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_patches_org ON device_patches (org_id, device_id, name);

CREATE TABLE patch_scans (
    device_id       UUID PRIMARY KEY,
    org_id          UUID NOT NULL,
    manager         TEXT,
    scanned_at      TIMESTAMPTZ,
    patch_count     BIGINT NOT NULL DEFAULT 0,
    security_count  BIGINT NOT NULL DEFAULT 0,
    reboot_required BOOLEAN NOT NULL DEFAULT FALSE,
    logged_in_users JSONB NOT NULL DEFAULT '[]',
    requested_at    TIMESTAMPTZ,
    requested_by    TEXT,
    command_id      UUID,
    error           TEXT,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX patch_scans_org ON patch_scans (org_id);

CREATE TABLE patch_approvals (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    policy_id    UUID,
    package_name TEXT NOT NULL,
    version      TEXT,
    decision     TEXT NOT NULL CHECK (decision IN ('approved', 'declined', 'deferred')),
    defer_until  TIMESTAMPTZ,
    note         TEXT,
    decided_by   TEXT NOT NULL,
    decided_at   TIMESTAMPTZ NOT NULL,
    CHECK ((decision = 'deferred') = (defer_until IS NOT NULL)),
    FOREIGN KEY (policy_id, org_id) REFERENCES config_policies (id, org_id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX patch_approvals_scope
    ON patch_approvals (org_id, package_name, COALESCE(policy_id, org_id));

CREATE TABLE patch_jobs (
    id                UUID PRIMARY KEY,
    org_id            UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    kind              TEXT NOT NULL CHECK (kind IN ('install', 'rollback')),
    reboot_policy     TEXT NOT NULL CHECK (reboot_policy IN ('never', 'if_needed', 'always')),
    reboot_with_users BOOLEAN NOT NULL,
    schedule          TEXT NOT NULL CHECK (schedule IN ('now', 'maintenance_window')),
    window_id         UUID,
    window_name       TEXT,
    status            TEXT NOT NULL CHECK (status IN ('scheduled', 'running', 'succeeded', 'partial', 'failed', 'cancelled')),
    requested_by      TEXT NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    started_at        TIMESTAMPTZ,
    finished_at       TIMESTAMPTZ,
    UNIQUE (id, org_id)
);
CREATE INDEX patch_jobs_org ON patch_jobs (org_id, created_at);
CREATE INDEX patch_jobs_scheduled ON patch_jobs (status) WHERE status = 'scheduled';

CREATE TABLE patch_job_devices (
    job_id        UUID NOT NULL,
    org_id        UUID NOT NULL,
    device_id     UUID NOT NULL,
    packages      JSONB NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('scheduled', 'sent', 'succeeded', 'partial', 'failed', 'skipped')),
    command_id    UUID,
    results       JSONB,
    reboot        TEXT,
    reboot_detail TEXT,
    error         TEXT,
    updated_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (job_id, device_id),
    FOREIGN KEY (job_id, org_id) REFERENCES patch_jobs (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX patch_job_devices_command ON patch_job_devices (command_id);

CREATE TABLE patch_history (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL,
    device_id    UUID NOT NULL,
    job_id       UUID,
    package_name TEXT NOT NULL,
    action       TEXT NOT NULL CHECK (action IN ('install', 'rollback')),
    from_version TEXT,
    to_version   TEXT,
    status       TEXT NOT NULL,
    error        TEXT,
    at           TIMESTAMPTZ NOT NULL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX patch_history_device ON patch_history (org_id, device_id, package_name, at);
