-- Compliance policies (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0025_compliance_policies.sql.
--
-- A policy holds rules (JSON: `breeze_core::ComplianceRule`s) over stored inventory and agent
-- checks, a target (composite foreign keys, like alert rules), what it does about
-- non-compliance (`enforcement`, and the library script a remediation runs), an active flag and
-- an owner (the credential a remediation queued by the worker acts as). `next_evaluation_at` is
-- the periodic evaluation's lease: the instance that moves it forward with a conditional update
-- evaluates, so a cluster evaluates each policy once per period.
CREATE TABLE compliance_policies (
    id                      UUID PRIMARY KEY,
    org_id                  UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name                    TEXT NOT NULL,
    description             TEXT,
    rules                   JSONB NOT NULL,
    target_kind             TEXT NOT NULL CHECK (target_kind IN ('organization', 'site', 'group', 'device')),
    target_site_id          UUID,
    target_group_id         UUID,
    target_device_id        UUID,
    enforcement             TEXT NOT NULL CHECK (enforcement IN ('monitor', 'remediate')),
    remediation_script_id   UUID,
    remediation_parameters  JSONB NOT NULL,
    active                  BOOLEAN NOT NULL,
    owner_actor             TEXT NOT NULL,
    evaluate_every_minutes  BIGINT NOT NULL CHECK (evaluate_every_minutes BETWEEN 5 AND 10080),
    next_evaluation_at      TIMESTAMPTZ,
    last_evaluated_at       TIMESTAMPTZ,
    created_at              TIMESTAMPTZ NOT NULL,
    updated_at              TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id),
    CHECK (enforcement <> 'remediate' OR remediation_script_id IS NOT NULL),
    CHECK ((target_kind = 'organization' AND target_site_id IS NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'site' AND target_site_id IS NOT NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'group' AND target_group_id IS NOT NULL AND target_site_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'device' AND target_device_id IS NOT NULL AND target_site_id IS NULL AND target_group_id IS NULL)),
    FOREIGN KEY (target_site_id, org_id) REFERENCES sites (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX compliance_policies_due ON compliance_policies (next_evaluation_at) WHERE active;

-- Where each device stands against each policy: the overall status and every rule's result
-- (JSON: `breeze_core::RuleResult`s), and the agent check command whose answer is awaited.
-- Only a change of the results writes the row.
CREATE TABLE compliance_status (
    policy_id        UUID NOT NULL,
    device_id        UUID NOT NULL,
    org_id           UUID NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('compliant', 'non_compliant', 'unknown')),
    results          JSONB NOT NULL,
    check_command_id UUID,
    evaluated_at     TIMESTAMPTZ NOT NULL,
    changed_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (policy_id, device_id),
    FOREIGN KEY (policy_id, org_id) REFERENCES compliance_policies (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX compliance_status_device ON compliance_status (org_id, device_id);
CREATE INDEX compliance_status_checks ON compliance_status (check_command_id) WHERE check_command_id IS NOT NULL;

-- Every change of a device's status against a policy, with the results that made it.
CREATE TABLE compliance_history (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL,
    policy_id    UUID NOT NULL,
    device_id    UUID NOT NULL,
    from_status  TEXT,
    to_status    TEXT NOT NULL,
    results      JSONB NOT NULL,
    at           TIMESTAMPTZ NOT NULL,
    FOREIGN KEY (policy_id, org_id) REFERENCES compliance_policies (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX compliance_history_policy ON compliance_history (org_id, policy_id, at);
CREATE INDEX compliance_history_device ON compliance_history (org_id, device_id, at);

-- A remediation: the policy's script run on its non-compliant devices, by the worker, through
-- `run_script` (Tier 3, guard and approval) as `requested_by`; each device's outcome (JSON).
CREATE TABLE compliance_remediations (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL,
    policy_id     UUID NOT NULL,
    requested_by  TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('queued', 'running', 'pending_approval', 'succeeded', 'partial', 'failed', 'refused', 'suppressed', 'skipped')),
    device_ids    JSONB NOT NULL,
    approval_ids  JSONB NOT NULL,
    devices       JSONB NOT NULL,
    message       TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    started_at    TIMESTAMPTZ,
    finished_at   TIMESTAMPTZ,
    FOREIGN KEY (policy_id, org_id) REFERENCES compliance_policies (id, org_id) ON DELETE CASCADE
);
CREATE INDEX compliance_remediations_history ON compliance_remediations (org_id, policy_id, created_at);
CREATE INDEX compliance_remediations_open ON compliance_remediations (status, created_at)
    WHERE status IN ('queued', 'running', 'pending_approval');
