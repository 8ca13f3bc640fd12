-- Indexes for the read tools' hot paths. Kept in lockstep with
-- migrations/postgres/0065_read_path_indexes.sql.

-- A device's groups (its details, its effective configuration, the patch decisions of a page of
-- patches): the primary key leads with the group, so without this index every lookup by device
-- read every membership of the organization.
CREATE INDEX device_group_members_device ON device_group_members (org_id, device_id);

-- A device's metric series (analyze_metrics, the device page's chart) read from the index
-- alone: the rows also hold each disk's and interface's figures as JSON, so visiting them for
-- a day of points touched a page or more per point.
CREATE INDEX device_metrics_series ON device_metrics
    (device_id, at, org_id, cpu_percent, ram_percent, disk_percent, net_rx_bytes, net_tx_bytes,
     process_count);
