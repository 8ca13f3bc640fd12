-- Device context memory: what an AI (or a technician) learned about a device (PostgreSQL).
CREATE TABLE device_context (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL,
    device_id    UUID NOT NULL,
    context_type TEXT NOT NULL CHECK (context_type IN ('issue', 'quirk', 'followup', 'preference')),
    summary      TEXT NOT NULL,
    details      JSONB,
    created_by   TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ,
    resolved_at  TIMESTAMPTZ,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_context_device ON device_context (org_id, device_id, created_at);
