-- Runs of periodic jobs claimed by one server among those sharing the database: the first
-- insert of (job, slot) wins, so a sweep runs once per cluster per interval.
CREATE TABLE cluster_runs (
    job        TEXT NOT NULL,
    slot       BIGINT NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (job, slot)
);
