-- Security II: a device's identity cannot be taken with an enrollment key, and a report run
-- says when it stopped at its caps (PostgreSQL). Kept in lockstep
-- with migrations/sqlite/0036_device_identity.sql.
--
-- An enrollment never rebinds an existing device: a second machine presenting a known machine
-- id becomes a new device that names the one it may be a clone or impostor of. Only an
-- administrator's one-time re-enroll token (its SHA-256 here, with its expiry) or the
-- device's current token re-enrolls the device itself.
ALTER TABLE devices ADD COLUMN suspected_clone_of UUID;
ALTER TABLE device_credentials ADD COLUMN reenroll_token_hash BYTEA;
ALTER TABLE device_credentials ADD COLUMN reenroll_expires_at TIMESTAMPTZ;
CREATE UNIQUE INDEX device_credentials_reenroll ON device_credentials (reenroll_token_hash)
    WHERE reenroll_token_hash IS NOT NULL;
CREATE INDEX device_credentials_machine ON device_credentials (org_id, machine_id);

-- A report run that stopped at its row or byte cap (its last row says so).
ALTER TABLE report_runs ADD COLUMN truncated BOOLEAN NOT NULL DEFAULT FALSE;
