-- Each scan's patches counted by severity and security, written with the scan: the fleet's
-- compliance sums these instead of reading every available patch of every device. Kept in
-- lockstep with migrations/sqlite/0068_patch_tallies.sql.
ALTER TABLE patch_scans ADD COLUMN tallies JSONB NOT NULL DEFAULT '[]';

UPDATE patch_scans s SET tallies = COALESCE((
    SELECT jsonb_agg(jsonb_build_object('severity', t.severity, 'security', t.security,
                                        'count', t.n))
    FROM (SELECT severity, security, COUNT(*) AS n FROM device_patches p
          WHERE p.device_id = s.device_id AND p.org_id = s.org_id
          GROUP BY severity, security) t
), '[]');
