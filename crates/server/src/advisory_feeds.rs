//! The scheduled refresh of OSV advisories from the URLs `BREEZE_ADVISORY_FEEDS` names
//! (osv.dev's per-ecosystem `all.zip`, a mirror of it, or one JSON record): each feed is
//! checked every `BREEZE_ADVISORY_REFRESH_HOURS`, with the last download's `ETag` and
//! `Last-Modified` sent back so that an unchanged feed costs one request, and what changed is
//! imported through the same door as `breeze advisories import`
//! ([`breeze_domain::vulnerabilities`]: idempotent, the changed records' exposure recomputed).
//!
//! Of several instances one checks a feed: the check is claimed in the database first (a
//! lease that frees itself if the instance dies). A failure (unreachable, an error status, a
//! download past the size cap, nothing readable) is recorded on the feed and retried after
//! [`RETRY`] (or the refresh period, when shorter); the advisories already imported stay.

use std::{sync::Arc, time::Duration};

use breeze_domain::vulnerabilities::{import, read_bytes};
use breeze_store::{AdvisoryFeed, FeedCheck, Store, StoreError};
use reqwest::{StatusCode, header};

use crate::workers::Worker;

/// The feeds and how often each is checked.
#[derive(Debug, Clone)]
pub struct AdvisoryFeedsConfig {
    /// `BREEZE_ADVISORY_FEEDS`: http(s) URLs; none, no refresh.
    pub urls: Vec<String>,
    /// `BREEZE_ADVISORY_REFRESH_HOURS` (default 24).
    pub every: Duration,
    /// `BREEZE_ADVISORY_MAX_MB` (default 1024): a larger download is refused.
    pub max_bytes: u64,
}

impl Default for AdvisoryFeedsConfig {
    fn default() -> Self {
        AdvisoryFeedsConfig {
            urls: Vec::new(),
            every: Duration::from_secs(24 * 60 * 60),
            max_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// How often the worker asks whether a feed is due (the feed's last check decides).
const FEED_TICK: Duration = Duration::from_secs(300);
/// How soon a failed check is tried again.
pub const RETRY: Duration = Duration::from_secs(3600);
/// How long a claim holds: longer than a download and import of the largest archive.
const LEASE: Duration = Duration::from_secs(3600);

/// Checks every configured feed when due (see the module docs).
pub struct AdvisoryRefresh {
    store: Store,
    client: reqwest::Client,
    config: AdvisoryFeedsConfig,
}

/// What one tick did: per feed checked, its URL and how the check ended.
pub type FeedReport = Vec<(String, FeedCheck)>;

impl AdvisoryRefresh {
    pub fn new(store: Store, config: AdvisoryFeedsConfig) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .timeout(Duration::from_secs(1800))
            .user_agent(concat!("breeze/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        AdvisoryRefresh {
            store,
            client,
            config,
        }
    }

    /// Checks each feed this instance could claim; the others are another instance's now or
    /// not due.
    pub async fn refresh(&self) -> Result<FeedReport, StoreError> {
        let now = self.store.clock().now();
        let every =
            chrono::Duration::from_std(self.config.every).unwrap_or(chrono::Duration::days(30));
        let retry = chrono::Duration::from_std(RETRY.min(self.config.every))
            .unwrap_or(chrono::Duration::days(30));
        let lease = chrono::Duration::from_std(LEASE).unwrap_or(chrono::Duration::days(30));
        let mut report = Vec::new();
        for url in &self.config.urls {
            let Some(feed) = self
                .store
                .claim_advisory_feed(url, now - every, now - retry, now + lease)
                .await?
            else {
                continue;
            };
            let check = self.check(&feed).await;
            self.store.finish_advisory_feed(url, check.clone()).await?;
            report.push((url.clone(), check));
        }
        Ok(report)
    }

    /// Asks for the feed (conditionally), reads and imports what changed.
    async fn check(&self, feed: &AdvisoryFeed) -> FeedCheck {
        match self.download(feed).await {
            Ok(None) => FeedCheck::Unchanged,
            Ok(Some(Download {
                bytes,
                etag,
                last_modified,
            })) => {
                let name = feed.url.clone();
                // Unzipping and parsing an archive of 100,000 records is CPU work.
                let read = tokio::task::spawn_blocking(move || read_bytes(&name, &bytes)).await;
                let records = match read {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => return FeedCheck::Failed(e.to_string()),
                    Err(e) => return FeedCheck::Failed(format!("reading the download: {e}")),
                };
                if records.records.is_empty() && records.rejected > 0 {
                    let first = records.rejections.first().cloned().unwrap_or_default();
                    return FeedCheck::Failed(format!("no OSV record could be read: {first}"));
                }
                match import(&self.store, records).await {
                    Ok(outcome) => FeedCheck::Imported {
                        etag,
                        last_modified,
                        outcome: serde_json::to_string(&outcome).unwrap_or_default(),
                    },
                    Err(e) => FeedCheck::Failed(format!("import: {e}")),
                }
            }
            Err(why) => FeedCheck::Failed(why),
        }
    }

    /// The feed's body and validators, `None` when the server says nothing changed.
    async fn download(&self, feed: &AdvisoryFeed) -> Result<Option<Download>, String> {
        let mut req = self.client.get(&feed.url);
        if let Some(etag) = &feed.etag {
            req = req.header(header::IF_NONE_MATCH, etag);
        }
        if let Some(at) = &feed.last_modified {
            req = req.header(header::IF_MODIFIED_SINCE, at);
        }
        let mut res = req
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = res.status();
        if status == StatusCode::NOT_MODIFIED {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(format!("the server answered {status}"));
        }
        let max = self.config.max_bytes;
        let too_large = || format!("larger than {max} bytes (BREEZE_ADVISORY_MAX_MB)");
        if res.content_length().is_some_and(|n| n > max) {
            return Err(too_large());
        }
        let validator = |name: header::HeaderName| {
            res.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let etag = validator(header::ETAG);
        let last_modified = validator(header::LAST_MODIFIED);
        // The declared length is not trusted: reading stops past the cap.
        let mut body = Vec::new();
        while let Some(chunk) = res
            .chunk()
            .await
            .map_err(|e| format!("download failed: {e}"))?
        {
            if (body.len() + chunk.len()) as u64 > max {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Some(Download {
            bytes: body,
            etag,
            last_modified,
        }))
    }
}

/// A feed's new body, with the validators to ask for it conditionally next time.
struct Download {
    bytes: Vec<u8>,
    etag: Option<String>,
    last_modified: Option<String>,
}

impl Worker for AdvisoryRefresh {
    const NAME: &'static str = "advisory refresh";
    type Report = FeedReport;
    type Error = StoreError;

    fn period(&self) -> Duration {
        FEED_TICK
    }

    fn first_delay(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn tick(self: &Arc<Self>) -> Result<FeedReport, StoreError> {
        self.refresh().await
    }

    fn log(&self, report: &FeedReport) {
        for (url, check) in report {
            match check {
                FeedCheck::Imported { outcome, .. } => {
                    tracing::info!(%url, %outcome, "advisory feed imported");
                }
                FeedCheck::Unchanged => tracing::debug!(%url, "advisory feed unchanged"),
                FeedCheck::Failed(why) => {
                    tracing::warn!(%url, error = %why, "advisory feed check failed; it is retried");
                }
            }
        }
    }
}
