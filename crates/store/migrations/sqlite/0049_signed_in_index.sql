-- Who is signed in, fleet-wide (get_active_users): a partial index over the device states whose
-- latest heartbeat lists a session, in device order, so the listing reads only those rows and
-- stops at its limit instead of scanning every state row (each one carries its device's whole
-- inventory). Kept in lockstep with migrations/postgres/0049_signed_in_index.sql.
CREATE INDEX device_state_signed_in ON device_state (org_id, device_id)
    WHERE logged_in_users <> '[]';
