-- Live queries: when a run must end by, when it ended, and the query-wide cap that stopped
-- its rows, so listings tell running, finished and interrupted runs apart.
-- Kept in lockstep with migrations/postgres/0060_live_query_runs.sql.
ALTER TABLE live_queries ADD COLUMN deadline_at TEXT;
ALTER TABLE live_queries ADD COLUMN finished_at TEXT;
ALTER TABLE live_queries ADD COLUMN query_cap TEXT;
