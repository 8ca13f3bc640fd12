//! `breeze audit`: export the audit log as gzip-compressed JSON lines (the format the daily
//! purge archives in), purge what is past the retention now, and move a retired instance's
//! audit journal into the database.

use std::{io::Write, path::PathBuf};

use anyhow::Context;
use breeze_core::Timestamp;
use breeze_store::{AuditExport, ExportSummary};
use clap::Subcommand;

use super::App;
use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Write audit records as gzip-compressed JSON lines (one record a line, in id order) to
    /// --out or standard output. Read them with `zcat`.
    Export {
        /// Records at or after this time (RFC 3339, or a date: 2026-01-31).
        #[arg(long)]
        since: Option<String>,
        /// Records before this time (RFC 3339, or a date).
        #[arg(long)]
        until: Option<String>,
        /// One organization's records (its id or slug); otherwise every record.
        #[arg(long)]
        org: Option<String>,
        /// The file to write (created 0600; replaced if it exists); `-` or none: standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Archive and purge the records past the cluster's retention now (the server does this
    /// daily). BREEZE_AUDIT_RETENTION_DAYS settles that retention only when nothing has yet.
    Purge,
    /// Show the audit retention the whole cluster follows, or change it with --days or
    /// --forever (every instance follows the stored value, whatever its own setting says).
    Retention {
        /// Keep records this many days (1 to 36500), then archive and purge them.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=36_500), conflicts_with = "forever")]
        days: Option<u32>,
        /// Keep records forever.
        #[arg(long)]
        forever: bool,
    },
    /// Move every record waiting in an audit journal into the database now: for an instance
    /// being retired (point BREEZE_AUDIT_JOURNAL_DIR at its journal directory on PostgreSQL;
    /// on SQLite the journal sits beside the database file). Fails while a running server
    /// holds that journal.
    MoveJournal,
}

/// A time bound: RFC 3339, or a date meaning its midnight UTC.
fn parse_time(flag: &str, value: &str) -> anyhow::Result<Timestamp> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .with_context(|| format!("invalid {flag}: {value:?} (expected RFC 3339 or YYYY-MM-DD)"))
}

impl AuditCommand {
    pub(crate) async fn run(self, app: &App, settings: &Settings) -> anyhow::Result<()> {
        match self {
            AuditCommand::Export {
                since,
                until,
                org,
                out,
            } => {
                let filter = AuditExport {
                    org: match org {
                        Some(org) => {
                            Some(app.store.find_organization(&org).await.context("--org")?.id)
                        }
                        None => None,
                    },
                    since: since.map(|v| parse_time("--since", &v)).transpose()?,
                    until: until.map(|v| parse_time("--until", &v)).transpose()?,
                };
                let summary = match out.filter(|p| p.as_os_str() != "-") {
                    Some(path) => export_to_file(app, &filter, &path).await?,
                    None => {
                        let (summary, mut stdout) =
                            app.store.export_audit(&filter, std::io::stdout()).await?;
                        stdout.flush()?;
                        summary
                    }
                };
                eprintln!(
                    "exported {} audit records{}",
                    summary.records,
                    match (summary.oldest, summary.newest) {
                        (Some(a), Some(b)) =>
                            format!(" from {} to {}", a.to_rfc3339(), b.to_rfc3339()),
                        _ => String::new(),
                    }
                );
            }
            AuditCommand::MoveJournal => {
                let journal = app.store.move_audit_journal().await?;
                println!(
                    "every journaled audit record is in the database ({}-*.jsonl moved)",
                    journal.display()
                );
            }
            AuditCommand::Retention { days, forever } => {
                if days.is_some() || forever {
                    let changed = app.store.set_audit_retention(days).await?;
                    if !changed {
                        println!("unchanged");
                    }
                }
                println!(
                    "audit retention: {}",
                    show_days(app.store.audit_retention().await?)
                );
            }
            AuditCommand::Purge => {
                let in_force = app
                    .store
                    .settle_audit_retention(settings.audit_retention_days)
                    .await?;
                if settings.audit_retention_explicit
                    && in_force.days != settings.audit_retention_days
                {
                    eprintln!(
                        "warning: BREEZE_AUDIT_RETENTION_DAYS says {}, but the cluster keeps audit \
                         records {}; purging by the cluster's retention (change it with `breeze \
                         audit retention --days N`)",
                        show_days(settings.audit_retention_days),
                        show_days(in_force.days)
                    );
                }
                app.store.prepare_audit_partitions().await?;
                let report = app.store.purge_audit(&settings.audit_archive_dir).await?;
                match (report.cutoff, report.skipped) {
                    (None, _) => {
                        println!("audit records are kept forever (breeze audit retention)");
                    }
                    (Some(_), true) => println!("another process is purging; nothing done"),
                    (Some(cutoff), false) => println!(
                        "purged records before {}: {} archived{}, {} partitions dropped, {} rows deleted",
                        cutoff.to_rfc3339(),
                        report.archived,
                        report
                            .archive
                            .map(|p| format!(" to {}", p.display()))
                            .unwrap_or_default(),
                        report.partitions_dropped,
                        report.rows_deleted
                    ),
                }
            }
        }
        Ok(())
    }
}

/// A retention as people read it.
fn show_days(days: Option<u32>) -> String {
    days.map_or("forever".to_owned(), |d| format!("{d} days"))
}

/// Exports into `path` (0600), synced before it is reported written.
async fn export_to_file(
    app: &App,
    filter: &AuditExport,
    path: &std::path::Path,
) -> anyhow::Result<ExportSummary> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let (summary, file) = app.store.export_audit(filter, file).await?;
    file.sync_all()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(summary)
}
