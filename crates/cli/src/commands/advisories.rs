//! `breeze advisories import FILE|DIR`: loads OSV advisories (a `.json` record, a directory of
//! them, or osv.dev's per-ecosystem `all.zip` archives) for every organization, through the
//! domain's import (idempotent on id and `modified`; the changed records' exposure recomputed).
//! The operator's authority: advisories are installation-wide reference data.
//! `breeze advisories feeds` shows the feeds the server refreshes (`BREEZE_ADVISORY_FEEDS`):
//! when each was checked and downloaded, and why the last check failed.

use std::path::PathBuf;

use clap::Subcommand;

use super::App;

#[derive(Debug, Subcommand)]
pub(crate) enum AdvisoriesCommand {
    /// Import OSV records: a .json file, a directory of .json/.zip files, or an all.zip archive.
    Import {
        /// The file or directory.
        path: PathBuf,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The scheduled feeds (BREEZE_ADVISORY_FEEDS): last check, last download, last error.
    Feeds {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl AdvisoriesCommand {
    pub(crate) async fn run(self, app: &App) -> anyhow::Result<()> {
        match self {
            AdvisoriesCommand::Import { path, json } => {
                let outcome =
                    breeze_domain::vulnerabilities::import_path(&app.store, &path).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&outcome)?);
                } else {
                    println!(
                        "added {}, replaced {}, unchanged {}, rejected {}; exposure recomputed \
                         on {} devices ({} findings written)",
                        outcome.added,
                        outcome.replaced,
                        outcome.unchanged,
                        outcome.rejected,
                        outcome.devices_recomputed,
                        outcome.findings
                    );
                    for why in &outcome.rejections {
                        println!("  rejected: {why}");
                    }
                }
                Ok(())
            }
            AdvisoriesCommand::Feeds { json } => {
                let feeds = app.store.advisory_feeds().await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&feeds)?);
                    return Ok(());
                }
                if feeds.is_empty() {
                    println!("no advisory feed has been checked (BREEZE_ADVISORY_FEEDS)");
                }
                let at = |t: Option<breeze_core::Timestamp>| {
                    t.map_or("never".to_owned(), |t| t.to_rfc3339())
                };
                for f in feeds {
                    println!("{}", f.url);
                    println!(
                        "  checked {}, downloaded {}",
                        at(f.checked_at),
                        at(f.fetched_at)
                    );
                    if let Some(outcome) = &f.outcome {
                        println!("  last import: {outcome}");
                    }
                    if let Some(error) = &f.error {
                        println!("  last check failed: {error}");
                    }
                }
                Ok(())
            }
        }
    }
}
