-- Device context memory: what an AI (or a technician) learned about a device (SQLite).
CREATE TABLE device_context (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL,
    device_id    BLOB NOT NULL,
    context_type TEXT NOT NULL CHECK (context_type IN ('issue', 'quirk', 'followup', 'preference')),
    summary      TEXT NOT NULL,
    details      TEXT,
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    resolved_at  TEXT,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_context_device ON device_context (org_id, device_id, created_at);
