-- Events agents report (SQLite). Kept in lockstep with migrations/postgres/0028_device_events.sql.
--
-- One row per event a device's agent observed (a watched log line matched, a command failed,
-- the agent started). Alert rules count them over a window; retention is bounded twice: the
-- gateway's hourly sweep deletes events past `event_retention`, and every insert keeps at most
-- the newest `MAX_EVENTS_PER_DEVICE` of its device. `severity_rank` orders severities (info 0
-- … critical 4) so a rule's minimum is one comparison.
CREATE TABLE device_events (
    id            BLOB PRIMARY KEY,
    org_id        BLOB NOT NULL,
    device_id     BLOB NOT NULL,
    at            TEXT NOT NULL,
    received_at   TEXT NOT NULL,
    source        TEXT NOT NULL,
    kind          TEXT NOT NULL,
    severity      TEXT NOT NULL CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical')),
    severity_rank INTEGER NOT NULL CHECK (severity_rank BETWEEN 0 AND 4),
    message       TEXT NOT NULL,
    attributes    TEXT NOT NULL,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_events_device_time ON device_events (org_id, device_id, at);
CREATE INDEX device_events_org_time ON device_events (org_id, at);
CREATE INDEX device_events_time ON device_events (at);

-- The events that raised an alert of an event rule, as they were (the events themselves age
-- out; the alert keeps what it was raised on). JSON array, absent for other rules.
ALTER TABLE alerts ADD COLUMN trigger_events TEXT;
