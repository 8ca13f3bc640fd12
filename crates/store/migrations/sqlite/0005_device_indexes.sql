-- Indexes for device listings filtered by status, site or OS family and ordered by hostname
-- (SQLite). Kept in lockstep with migrations/postgres/0005_device_indexes.sql.
CREATE INDEX devices_org_status_hostname ON devices (org_id, status, hostname);
CREATE INDEX devices_org_site_hostname ON devices (org_id, site_id, hostname);
CREATE INDEX devices_org_os_hostname ON devices (org_id, os_family, hostname);
