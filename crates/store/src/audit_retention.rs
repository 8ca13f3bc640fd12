//! Audit log growth: the retention, archives, and the purge of records past the retention.
//!
//! Every MCP request writes an audit record, so the log grows by millions of rows a day under
//! load. The retention (the database's `audit_retention` row: migration 0019) says how long
//! records are kept. It is one value for the cluster: the first instance settles it from its
//! `BREEZE_AUDIT_RETENTION_DAYS` (migration 0050), later instances follow it, and only an
//! explicit change (`breeze audit retention`) moves it. The database itself
//! refuses to delete any record younger than it (a trigger on both backends, by the database's
//! own clock), and still refuses every update and `TRUNCATE`. Changing the retention writes an
//! `audit.retention_changed` record, also from the database.
//!
//! [`Store::purge_audit`] is the one purge path: it writes every record older than the cutoff
//! (now − retention) to an archive file first — gzip-compressed JSON lines, one
//! [`AuditRecord`] a line in id order (ids are time-ordered), the format
//! [`Store::export_audit`] writes on demand (`breeze audit export`) and [`read_audit_archive`]
//! reads back — makes the file durable, and only then deletes. On PostgreSQL the log is
//! partitioned by month (migration 0020): months wholly past the cutoff are dropped as tables
//! (`audit_log_drop_partitions`, which checks the retention itself) and rows are deleted only
//! in the month the cutoff cuts through; on SQLite rows are deleted in batches from the front
//! of the id-keyed table. On PostgreSQL an advisory lock makes concurrent purges (two
//! instances) skip rather than archive the same records twice.
//!
//! Records are stamped by the writing server's clock, so none arrives older than the cutoff
//! after the archive is written, unless a clock is off by the whole retention. A purge that
//! fails after its archive was written leaves the records in the log, and the next purge
//! archives them again (ids tell the duplicates apart).

use std::{
    io::{BufWriter, Read, Write},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use breeze_core::{AuditRecord, OrgId, Timestamp};
use flate2::{Compression, read::MultiGzDecoder, write::GzEncoder};
use uuid::Uuid;

use crate::{
    Backend, Pool, Result, Store, StoreError,
    audit::{AuditRow, audit_columns, push_time_bounds},
    sql::sql,
};

/// Records read per query while exporting.
const EXPORT_PAGE: i64 = 5_000;

/// Records deleted per statement by a purge (each statement a short transaction, so the audit
/// writers on the request path never wait long).
const DELETE_BATCH: i64 = 5_000;

/// How far ahead (in months) the server keeps PostgreSQL's monthly partitions made.
const MONTHS_AHEAD: u32 = 3;

/// Which records an export holds. Every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct AuditExport {
    /// One organization's records only (otherwise every record, system events included).
    pub org: Option<OrgId>,
    /// Inclusive lower bound on `created_at`.
    pub since: Option<Timestamp>,
    /// Exclusive upper bound on `created_at`.
    pub until: Option<Timestamp>,
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Records written.
    pub records: u64,
    /// The oldest and newest `created_at` written.
    pub oldest: Option<Timestamp>,
    pub newest: Option<Timestamp>,
}

/// What a purge did.
#[derive(Debug, Clone, Default)]
pub struct PurgeReport {
    /// Records created before this were purged; `None` when the log is kept forever.
    pub cutoff: Option<Timestamp>,
    /// Another process held the purge (PostgreSQL): this one did nothing.
    pub skipped: bool,
    /// Records written to the archive.
    pub archived: u64,
    /// The archive file, when there was anything to archive.
    pub archive: Option<PathBuf>,
    /// Monthly partitions dropped (PostgreSQL).
    pub partitions_dropped: u32,
    /// Rows deleted one by one (outside dropped partitions).
    pub rows_deleted: u64,
    /// Time spent writing the archive, and deleting.
    pub archive_time: Duration,
    pub delete_time: Duration,
}

/// The cluster's audit retention, as [`Store::settle_audit_retention`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionInForce {
    /// Days records are kept; `None`: forever.
    pub days: Option<u32>,
    /// Whether this call settled it (nothing had before).
    pub settled_now: bool,
}

impl Store {
    /// The retention in force, in days; `None` when records are kept forever.
    pub async fn audit_retention(&self) -> Result<Option<u32>> {
        let days: Option<i64> =
            sql("SELECT CAST(days AS BIGINT) FROM audit_retention WHERE id = 1")
                .fetch_scalar(self)
                .await?;
        Ok(days.and_then(|d| u32::try_from(d).ok()))
    }

    /// Sets the cluster's retention (`None` or `Some(0)`: keep forever): a person's explicit
    /// change, which every instance then follows. Returns whether it changed (or was settled
    /// by this call); a change is recorded in the audit log by the database.
    pub async fn set_audit_retention(&self, days: Option<u32>) -> Result<bool> {
        let days = days.filter(|&d| d > 0).map(i64::from);
        let changed = sql(
            "UPDATE audit_retention SET days = $1, changed_at = $2, settled = TRUE \
             WHERE id = 1 AND (NOT settled OR days <> $1 OR (days IS NULL) <> ($1 IS NULL))",
        )
        .bind(days)
        .bind(self.clock.now())
        .execute(self)
        .await?;
        Ok(changed > 0)
    }

    /// Settles the cluster's retention to `days` when nothing has settled it yet (the first
    /// instance to run does), and answers the retention in force. An instance configured with
    /// another value does not overwrite it: the retention is one value for the cluster, changed
    /// only with [`Store::set_audit_retention`].
    pub async fn settle_audit_retention(&self, days: Option<u32>) -> Result<RetentionInForce> {
        let wanted = days.filter(|&d| d > 0).map(i64::from);
        let settled_now = sql("UPDATE audit_retention SET days = $1, changed_at = $2, \
             settled = TRUE WHERE id = 1 AND NOT settled")
        .bind(wanted)
        .bind(self.clock.now())
        .execute(self)
        .await?
            > 0;
        Ok(RetentionInForce {
            days: self.audit_retention().await?,
            settled_now,
        })
    }

    /// PostgreSQL: makes the audit log's monthly partitions from last month through
    /// three months ahead of the store's clock that are missing; returns how many
    /// it made. SQLite: nothing to make.
    pub async fn prepare_audit_partitions(&self) -> Result<u32> {
        if self.backend() != Backend::Postgres {
            return Ok(0);
        }
        let now = self.clock.now();
        let made: i32 = sql("SELECT audit_log_add_partitions($1, $2)")
            .bind(now - chrono::Months::new(1))
            .bind(now + chrono::Months::new(MONTHS_AHEAD))
            .fetch_scalar(self)
            .await?;
        Ok(u32::try_from(made).unwrap_or(0))
    }

    /// Writes the records `filter` selects to `out` as gzip-compressed JSON lines (one
    /// [`AuditRecord`] a line, in id order), compressing on a blocking thread; returns what
    /// it wrote and `out` (flushed), e.g. for the caller to sync a file.
    pub async fn export_audit<W>(&self, filter: &AuditExport, out: W) -> Result<(ExportSummary, W)>
    where
        W: Write + Send + 'static,
    {
        // Records still in the audit journal are part of the log.
        self.flush_audit().await;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        let writer = tokio::task::spawn_blocking(move || -> std::io::Result<W> {
            let mut gz = GzEncoder::new(BufWriter::new(out), Compression::fast());
            while let Some(chunk) = rx.blocking_recv() {
                gz.write_all(&chunk)?;
            }
            let mut buffered = gz.finish()?;
            buffered.flush()?;
            buffered.into_inner().map_err(|e| e.into_error())
        });
        let mut summary = ExportSummary::default();
        let read = self.export_pages(filter, &mut summary, &tx).await;
        drop(tx);
        let written = writer
            .await
            .map_err(|e| StoreError::Archive(format!("the archive writer stopped: {e}")))?;
        // A failed read explains a failed write (the channel closed), not the other way round.
        read?;
        let out = written.map_err(|e| StoreError::Archive(e.to_string()))?;
        Ok((summary, out))
    }

    /// Reads the records `filter` selects page by page (keyset on the primary key's id, which
    /// both backends walk in order) and sends each page, encoded, to the writer.
    async fn export_pages(
        &self,
        filter: &AuditExport,
        summary: &mut ExportSummary,
        tx: &tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<()> {
        let mut after: Option<Uuid> = None;
        loop {
            let mut q = sql(concat!(
                "SELECT ",
                audit_columns!(),
                " FROM audit_log WHERE 1 = 1"
            ));
            if let Some(org) = filter.org {
                let p = q.arg(org);
                q.push(&format!(" AND org_id = {p}"));
            }
            push_time_bounds(&mut q, filter.since, filter.until);
            if let Some(id) = after {
                let p = q.arg(id);
                q.push(&format!(" AND id > {p}"));
            }
            let limit = q.arg(EXPORT_PAGE);
            q.push(&format!(" ORDER BY id LIMIT {limit}"));
            let rows: Vec<AuditRow> = q.fetch_all(self).await?;
            let full = rows.len() as i64 == EXPORT_PAGE;
            let mut chunk = Vec::with_capacity(rows.len() * 256);
            for row in rows {
                let record = AuditRecord::try_from(row)?;
                after = Some(record.id.0);
                summary.records += 1;
                summary.oldest = Some(
                    summary
                        .oldest
                        .map_or(record.created_at, |t| t.min(record.created_at)),
                );
                summary.newest = Some(
                    summary
                        .newest
                        .map_or(record.created_at, |t| t.max(record.created_at)),
                );
                serde_json::to_writer(&mut chunk, &record)
                    .map_err(|e| StoreError::Archive(e.to_string()))?;
                chunk.push(b'\n');
            }
            if !chunk.is_empty() && tx.send(chunk).await.is_err() {
                return Err(StoreError::Archive("the archive writer stopped".into()));
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Purges the records older than the retention: archives them into `archive_dir`
    /// (`audit-until-<cutoff>.jsonl.gz`, written as `.partial`, synced, then renamed), then
    /// deletes them. Nothing while the log is kept forever. See the module doc.
    pub async fn purge_audit(&self, archive_dir: &Path) -> Result<PurgeReport> {
        let Some(days) = self.audit_retention().await? else {
            return Ok(PurgeReport::default());
        };
        let cutoff = self.clock.now() - chrono::Duration::days(i64::from(days));
        let mut report = PurgeReport {
            cutoff: Some(cutoff),
            ..PurgeReport::default()
        };
        let Some(_lock) = self.purge_lock().await? else {
            report.skipped = true;
            return Ok(report);
        };

        let started = Instant::now();
        let name = format!("audit-until-{}.jsonl.gz", cutoff.format("%Y%m%dT%H%M%SZ"));
        let path = archive_dir.join(&name);
        let partial = archive_dir.join(format!("{name}.partial"));
        let file = create_archive_file(archive_dir, &partial)?;
        let filter = AuditExport {
            until: Some(cutoff),
            ..AuditExport::default()
        };
        let (summary, file) = match self.export_audit(&filter, file).await {
            Ok(done) => done,
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
        };
        if summary.records == 0 {
            drop(file);
            let _ = std::fs::remove_file(&partial);
        } else {
            let archived = file
                .sync_all()
                .and_then(|()| std::fs::rename(&partial, &path))
                .and_then(|()| sync_dir(archive_dir));
            if let Err(e) = archived {
                let _ = std::fs::remove_file(&partial);
                return Err(StoreError::Archive(format!("{}: {e}", path.display())));
            }
            report.archive = Some(path);
        }
        report.archived = summary.records;
        report.archive_time = started.elapsed();

        let started = Instant::now();
        if self.backend() == Backend::Postgres {
            let dropped: i32 = sql("SELECT audit_log_drop_partitions($1)")
                .bind(cutoff)
                .fetch_scalar(self)
                .await?;
            report.partitions_dropped = u32::try_from(dropped).unwrap_or(0);
        }
        if summary.records > 0 {
            loop {
                let deleted = sql("DELETE FROM audit_log WHERE created_at < $1 AND id IN \
                     (SELECT id FROM audit_log WHERE created_at < $1 ORDER BY id LIMIT $2)")
                .bind(cutoff)
                .bind(DELETE_BATCH)
                .execute(self)
                .await?;
                report.rows_deleted += deleted;
                if deleted < DELETE_BATCH as u64 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        report.delete_time = started.elapsed();
        Ok(report)
    }

    /// PostgreSQL: this schema's purge lock, held by a connection of its own (taken out of the
    /// pool, so the lock dies with it); `None` when another process holds it. SQLite: always
    /// granted (one server process per file).
    async fn purge_lock(&self) -> Result<Option<PurgeLock>> {
        match &self.pool {
            Pool::Sqlite(_) => Ok(Some(PurgeLock { _conn: None })),
            Pool::Postgres { system: pool, .. } => {
                let mut conn = pool.acquire().await?.detach();
                let got: bool = sqlx::query_scalar(
                    "SELECT pg_try_advisory_lock(hashtext(current_schema() || '.audit_purge'))",
                )
                .fetch_one(&mut conn)
                .await?;
                Ok(got.then_some(PurgeLock { _conn: Some(conn) }))
            }
        }
    }
}

/// Holds [`Store::purge_audit`]'s lock until dropped (closing the connection releases it).
struct PurgeLock {
    _conn: Option<sqlx::PgConnection>,
}

/// Creates `dir` (0700) when missing and `path` in it (0600: the log names people and
/// devices), replacing what a failed purge left there.
fn create_archive_file(dir: &Path, path: &Path) -> Result<std::fs::File> {
    let fail = |e: std::io::Error| StoreError::Archive(format!("{}: {e}", path.display()));
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(fail)?;
        #[cfg(unix)]
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(fail)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).map_err(fail)
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Reads an archive written by [`Store::export_audit`] or [`Store::purge_audit`] (concatenated
/// archives too) back into records, in file order.
pub fn read_audit_archive(input: impl Read) -> Result<Vec<AuditRecord>> {
    let mut text = String::new();
    MultiGzDecoder::new(input)
        .read_to_string(&mut text)
        .map_err(|e| StoreError::Archive(e.to_string()))?;
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_str(line).map_err(|e| StoreError::Archive(e.to_string())))
        .collect()
}
