-- Dynamic device groups (SQLite). Kept in lockstep with
-- migrations/postgres/0016_dynamic_groups.sql.
--
-- A group with a row here is dynamic: its members are the devices its filter (the JSON of
-- `breeze_core::GroupFilter`) matches, recomputed when the filter changes and when a device's
-- inventory or status changes. Every membership change of any group, static or dynamic, is
-- logged: which device, added or removed, by whom or what, why, when.
CREATE TABLE device_group_filters (
    group_id    BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL,
    filter      TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    FOREIGN KEY (group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE
);
CREATE INDEX device_group_filters_org ON device_group_filters (org_id);

CREATE TABLE group_membership_log (
    id          BLOB PRIMARY KEY,
    org_id      BLOB NOT NULL,
    group_id    BLOB NOT NULL,
    device_id   BLOB NOT NULL,
    change      TEXT NOT NULL CHECK (change IN ('added', 'removed')),
    actor       TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          TEXT NOT NULL,
    FOREIGN KEY (group_id, org_id) REFERENCES device_groups (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX group_membership_log_group ON group_membership_log (org_id, group_id, at, id);
