-- Each scan's patches counted by severity and security, written with the scan: the fleet's
-- compliance sums these instead of reading every available patch of every device. Kept in
-- lockstep with migrations/postgres/0068_patch_tallies.sql.
ALTER TABLE patch_scans ADD COLUMN tallies TEXT NOT NULL DEFAULT '[]';

UPDATE patch_scans SET tallies = COALESCE((
    SELECT json_group_array(json_object(
        'severity', t.severity,
        'security', json(CASE WHEN t.security THEN 'true' ELSE 'false' END),
        'count', t.n))
    FROM (SELECT severity, security, COUNT(*) AS n FROM device_patches p
          WHERE p.device_id = patch_scans.device_id AND p.org_id = patch_scans.org_id
          GROUP BY severity, security) t
), '[]');
