-- Tool sources: discovery is queued (at creation, on "Re-discover") and run by a worker,
-- never by polling the upstream. Kept in lockstep with migrations/sqlite/0044.
--
-- `discovery_queued_at`: NULL when nothing is queued; otherwise the time from which a worker
-- may take it. A worker claims a queued source by moving it into the future (a lease), so a
-- discovery cut short by a crash is taken again once the lease runs out.
ALTER TABLE tool_sources ADD COLUMN discovery_queued_at TIMESTAMPTZ;

-- Partner-wide tool sources are managed with their own grant, exercised on a person's
-- partner-wide role; the built-in Administrator role has every permission.
UPDATE roles SET permissions = permissions || '["partner_policies.manage"]'::jsonb
    WHERE builtin AND name = 'Administrator';
