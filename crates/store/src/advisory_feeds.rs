//! Advisory feeds (migration 0069): the URLs the server downloads OSV advisories from on a
//! schedule, each with the validators of its last download (`ETag`, `Last-Modified`), when it
//! was last checked, and what the last import did or why it failed. Installation-wide, like
//! the advisories themselves.
//!
//! Several instances share one database: a feed is *claimed* before it is checked (a lease
//! that runs out, so a crashed instance's claim frees itself), and only the claimant downloads.

use breeze_core::Timestamp;
use serde::Serialize;

use crate::{Result, Store, sql::sql};

/// One feed's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct AdvisoryFeed {
    pub url: String,
    /// The last download's validators, sent back so that an unchanged feed is not downloaded.
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// When it was last asked (downloaded, unchanged, or failed).
    pub checked_at: Option<Timestamp>,
    /// When it was last downloaded and imported.
    pub fetched_at: Option<Timestamp>,
    /// The last import's outcome (JSON), kept while later checks find nothing new.
    pub outcome: Option<String>,
    /// Why the last check failed; cleared by the next that does not.
    pub error: Option<String>,
    pub claimed_until: Option<Timestamp>,
}

/// How a check of a feed ended.
#[derive(Debug, Clone)]
pub enum FeedCheck {
    /// Downloaded and imported: the new validators and the import's outcome (JSON).
    Imported {
        etag: Option<String>,
        last_modified: Option<String>,
        outcome: String,
    },
    /// The server answered that nothing changed since the last download.
    Unchanged,
    /// Why it failed (the validators are kept: the next check asks as before).
    Failed(String),
}

const FEED_COLUMNS: &str =
    "url, etag, last_modified, checked_at, fetched_at, outcome, error, claimed_until";

impl Store {
    /// Claims `url` until `lease_until` when it is due — never checked, last checked at or
    /// before `due_before`, or last failed at or before `retry_before` — and no other instance
    /// holds it; returns the feed when this caller now holds it, `None` otherwise.
    pub async fn claim_advisory_feed(
        &self,
        url: &str,
        due_before: Timestamp,
        retry_before: Timestamp,
        lease_until: Timestamp,
    ) -> Result<Option<AdvisoryFeed>> {
        let now = self.clock.now();
        sql("INSERT INTO advisory_feeds (url) VALUES ($1) ON CONFLICT (url) DO NOTHING")
            .bind(url)
            .execute(self)
            .await?;
        sql(format!(
            "UPDATE advisory_feeds SET claimed_until = $1 WHERE url = $2 \
             AND (checked_at IS NULL OR checked_at <= $3 \
                  OR (error IS NOT NULL AND checked_at <= $4)) \
             AND (claimed_until IS NULL OR claimed_until <= $5) RETURNING {FEED_COLUMNS}"
        ))
        .bind(lease_until)
        .bind(url)
        .bind(due_before)
        .bind(retry_before)
        .bind(now)
        .fetch_optional(self)
        .await
    }

    /// Records how the check of a claimed feed ended, and frees the claim.
    pub async fn finish_advisory_feed(&self, url: &str, check: FeedCheck) -> Result<()> {
        let now = self.clock.now();
        let q = match check {
            FeedCheck::Imported {
                etag,
                last_modified,
                outcome,
            } => sql(
                "UPDATE advisory_feeds SET etag = $1, last_modified = $2, outcome = $3, \
                 fetched_at = $4, checked_at = $4, error = NULL, claimed_until = NULL \
                 WHERE url = $5",
            )
            .bind(etag)
            .bind(last_modified)
            .bind(outcome)
            .bind(now)
            .bind(url),
            FeedCheck::Unchanged => sql(
                "UPDATE advisory_feeds SET checked_at = $1, error = NULL, claimed_until = NULL \
                 WHERE url = $2",
            )
            .bind(now)
            .bind(url),
            FeedCheck::Failed(why) => sql(
                "UPDATE advisory_feeds SET checked_at = $1, error = $2, claimed_until = NULL \
                 WHERE url = $3",
            )
            .bind(now)
            .bind(why)
            .bind(url),
        };
        q.execute(self).await.map(drop)
    }

    /// Every feed ever configured, by URL (one no longer configured stays until deleted).
    pub async fn advisory_feeds(&self) -> Result<Vec<AdvisoryFeed>> {
        sql(format!(
            "SELECT {FEED_COLUMNS} FROM advisory_feeds ORDER BY url"
        ))
        .fetch_all(self)
        .await
    }
}
