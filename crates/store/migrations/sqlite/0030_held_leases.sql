-- Held leases (SQLite). Kept in lockstep with migrations/postgres/0030_held_leases.sql.
--
-- A lease row of `scheduled_runs` can be held: `holder` names the instance that holds it and
-- `last_run_at` is when it last renewed. The holder keeps the lease by renewing it; another
-- instance takes it over only once it has gone unrenewed for the lease's time to live (the
-- alert engine's periodic tick: one instance per cluster, the same one while it lives, so its
-- walk through the rules continues where it stopped). Period leases leave `holder` empty.
ALTER TABLE scheduled_runs ADD COLUMN holder TEXT;
