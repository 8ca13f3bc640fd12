-- The advisory feeds the server refreshes on a schedule (`BREEZE_ADVISORY_FEEDS`): per URL,
-- the validators of the last download (a conditional request fetches only what changed), when
-- it was last checked, what the last import did or why it failed, and the lease of the instance
-- checking it now, so that of several instances one downloads. Installation-wide, like the
-- advisories. Kept in lockstep with migrations/postgres/0069_advisory_feeds.sql.
CREATE TABLE advisory_feeds (
    url           TEXT PRIMARY KEY,
    etag          TEXT,
    last_modified TEXT,
    checked_at    TEXT,
    fetched_at    TEXT,
    outcome       TEXT,
    error         TEXT,
    claimed_until TEXT
);
