-- Automations and their runs (SQLite). Kept in lockstep with
-- migrations/postgres/0021_automations.sql.
--
-- An automation starts on a cron schedule (`cron` read in `time_zone`), on an alert (one rule,
-- or any rule at or above `alert_min_severity`) or only by hand, and runs a library script on
-- its target's devices or notifies a channel. It runs as its owner (`owner_actor`, the API key
-- or OAuth grant that created it), cleared again by the guard on every run. `next_run_at` is
-- the schedule's lease: the instance that moves it forward with a conditional update is the one
-- that queues the run, so a cluster fires each occurrence once and a restart loses nothing.
-- The target columns carry composite foreign keys like alert rules; the script and channel are
-- checked when written and again at run time (a deleted one fails the run, it does not delete
-- the automation).
CREATE TABLE automations (
    id                 BLOB PRIMARY KEY,
    org_id             BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name               TEXT NOT NULL,
    description        TEXT,
    enabled            INTEGER NOT NULL,
    trigger_kind       TEXT NOT NULL CHECK (trigger_kind IN ('schedule', 'alert', 'manual')),
    cron               TEXT,
    time_zone          TEXT NOT NULL,
    alert_rule_id      BLOB,
    alert_min_severity TEXT,
    action_kind        TEXT NOT NULL CHECK (action_kind IN ('run_script', 'notify')),
    script_id          BLOB,
    parameters         TEXT NOT NULL,
    timeout_seconds    INTEGER NOT NULL,
    channel_id         BLOB,
    message            TEXT,
    target_kind        TEXT NOT NULL CHECK (target_kind IN ('organization', 'site', 'group', 'device')),
    target_site_id     BLOB,
    target_group_id    BLOB,
    target_device_id   BLOB,
    owner_actor        TEXT NOT NULL,
    next_run_at        TEXT,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    UNIQUE (org_id, name),
    UNIQUE (id, org_id),
    CHECK (trigger_kind <> 'schedule' OR cron IS NOT NULL),
    CHECK (action_kind <> 'run_script' OR script_id IS NOT NULL),
    CHECK (action_kind <> 'notify' OR channel_id IS NOT NULL),
    CHECK ((target_kind = 'organization' AND target_site_id IS NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'site' AND target_site_id IS NOT NULL AND target_group_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'group' AND target_group_id IS NOT NULL AND target_site_id IS NULL AND target_device_id IS NULL)
        OR (target_kind = 'device' AND target_device_id IS NOT NULL AND target_site_id IS NULL AND target_group_id IS NULL)),
    FOREIGN KEY (alert_rule_id, org_id) REFERENCES alert_rules (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_site_id, org_id) REFERENCES sites (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (target_device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX automations_due ON automations (next_run_at) WHERE trigger_kind = 'schedule' AND enabled = 1;
CREATE INDEX automations_alert ON automations (trigger_kind, enabled);

-- One run of an automation: why it started (a schedule's occurrence, an alert, a person), who
-- asked for a manual one, where it is, and each device's outcome (JSON). A schedule's
-- occurrence and an alert queue at most one run each (unique), whichever instance sees them.
CREATE TABLE automation_runs (
    id             BLOB PRIMARY KEY,
    org_id         BLOB NOT NULL,
    automation_id  BLOB NOT NULL,
    trigger_kind   TEXT NOT NULL CHECK (trigger_kind IN ('schedule', 'alert', 'manual')),
    occurrence_at  TEXT,
    alert_id       BLOB,
    device_id      BLOB,
    requested_by   TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('queued', 'running', 'pending_approval', 'succeeded', 'partial', 'failed', 'refused', 'suppressed', 'skipped')),
    approval_ids   TEXT NOT NULL,
    devices        TEXT NOT NULL,
    message        TEXT,
    created_at     TEXT NOT NULL,
    started_at     TEXT,
    finished_at    TEXT,
    UNIQUE (automation_id, occurrence_at),
    UNIQUE (automation_id, alert_id),
    FOREIGN KEY (automation_id, org_id) REFERENCES automations (id, org_id) ON DELETE CASCADE
);
CREATE INDEX automation_runs_history ON automation_runs (org_id, automation_id, created_at);
CREATE INDEX automation_runs_open ON automation_runs (status, created_at)
    WHERE status IN ('queued', 'running', 'pending_approval');
