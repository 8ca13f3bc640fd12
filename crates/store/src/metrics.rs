//! Device metrics: raw points plus hourly and daily rollups, kept for configurable retention.
//!
//! Rollups are maintained incrementally as points arrive (sums, maxima and sample counts per
//! bucket), in the same transaction as the raw insert; a re-sent point (same device and time)
//! is ignored and counted nowhere, so an agent retrying a batch cannot skew averages.

use breeze_agent_proto::MetricSample;
use breeze_core::{Device, DeviceId, OrgId, Timestamp};
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde::Serialize;

use crate::{
    Result, Store, StoreError,
    sql::{Arg, Tx, sql},
};

/// Resolution of a metrics query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregation {
    Raw,
    Hourly,
    Daily,
}

impl Aggregation {
    fn bucket(self) -> Option<(&'static str, Duration)> {
        match self {
            Aggregation::Raw => None,
            Aggregation::Hourly => Some(("hourly", Duration::hours(1))),
            Aggregation::Daily => Some(("daily", Duration::days(1))),
        }
    }
}

/// One point of a metrics series: a raw sample, or a bucket's averages and maxima.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct MetricPoint {
    pub at: Timestamp,
    pub samples: i64,
    pub cpu_avg: f64,
    pub cpu_max: f64,
    pub ram_avg: f64,
    pub ram_max: f64,
    pub disk_avg: f64,
    pub disk_max: f64,
    pub net_rx_bytes: i64,
    pub net_tx_bytes: i64,
    pub process_avg: f64,
}

/// How long metrics are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsRetention {
    pub raw: Duration,
    pub hourly: Duration,
    pub daily: Duration,
}

impl Default for MetricsRetention {
    fn default() -> Self {
        Self {
            raw: Duration::days(7),
            hourly: Duration::days(90),
            daily: Duration::days(730),
        }
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn bucket_start(at: DateTime<Utc>, width: Duration) -> Timestamp {
    at.duration_trunc(width).unwrap_or(at)
}

impl Store {
    /// Stores a batch of samples from one device and folds each new one into its hourly and
    /// daily buckets. Returns how many samples were new.
    pub async fn insert_metrics(
        &self,
        device: DeviceId,
        org: OrgId,
        samples: &[MetricSample],
    ) -> Result<u64> {
        let mut tx = Tx::begin(&self.pool).await?;
        let mut inserted = 0;
        for s in samples {
            let disk = s.disks.iter().map(|d| d.used_percent).fold(0.0, f64::max);
            let rx: u64 = s.network.iter().map(|n| n.rx_bytes).sum();
            let tx_bytes: u64 = s.network.iter().map(|n| n.tx_bytes).sum();
            let n = sql(
                "INSERT INTO device_metrics (device_id, org_id, at, cpu_percent, \
                         ram_percent, ram_used_bytes, disk_percent, disks, net_rx_bytes, \
                         net_tx_bytes, network, process_count) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                         ON CONFLICT (device_id, at) DO NOTHING",
            )
            .bind(device)
            .bind(org)
            .bind(s.at)
            .bind(s.cpu_percent)
            .bind(s.ram_percent)
            .bind(clamp_i64(s.ram_used_bytes))
            .bind(disk)
            .bind(Arg::json(&s.disks))
            .bind(clamp_i64(rx))
            .bind(clamp_i64(tx_bytes))
            .bind(Arg::json(&s.network))
            .bind(i64::from(s.process_count))
            .execute(&mut tx)
            .await?;
            if n == 0 {
                continue;
            }
            inserted += 1;
            for (bucket, width) in [("hourly", Duration::hours(1)), ("daily", Duration::days(1))] {
                sql(
                    "INSERT INTO metric_rollups (device_id, org_id, bucket, bucket_start, \
                     samples, cpu_sum, cpu_max, ram_sum, ram_max, disk_sum, disk_max, \
                     net_rx_bytes, net_tx_bytes, process_sum) \
                     VALUES ($1, $2, $3, $4, 1, $5, $5, $6, $6, $7, $7, $8, $9, $10) \
                     ON CONFLICT (device_id, bucket, bucket_start) DO UPDATE SET \
                     samples = metric_rollups.samples + 1, \
                     cpu_sum = metric_rollups.cpu_sum + excluded.cpu_sum, \
                     cpu_max = CASE WHEN excluded.cpu_max > metric_rollups.cpu_max \
                         THEN excluded.cpu_max ELSE metric_rollups.cpu_max END, \
                     ram_sum = metric_rollups.ram_sum + excluded.ram_sum, \
                     ram_max = CASE WHEN excluded.ram_max > metric_rollups.ram_max \
                         THEN excluded.ram_max ELSE metric_rollups.ram_max END, \
                     disk_sum = metric_rollups.disk_sum + excluded.disk_sum, \
                     disk_max = CASE WHEN excluded.disk_max > metric_rollups.disk_max \
                         THEN excluded.disk_max ELSE metric_rollups.disk_max END, \
                     net_rx_bytes = metric_rollups.net_rx_bytes + excluded.net_rx_bytes, \
                     net_tx_bytes = metric_rollups.net_tx_bytes + excluded.net_tx_bytes, \
                     process_sum = metric_rollups.process_sum + excluded.process_sum",
                )
                .bind(device)
                .bind(org)
                .bind(bucket)
                .bind(bucket_start(s.at, width))
                .bind(s.cpu_percent)
                .bind(s.ram_percent)
                .bind(disk)
                .bind(clamp_i64(rx))
                .bind(clamp_i64(tx_bytes))
                .bind(f64::from(s.process_count))
                .execute(&mut tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(inserted)
    }

    /// Deletes raw points and rollups older than their retention. Returns rows deleted.
    pub async fn prune_metrics(&self, retention: MetricsRetention) -> Result<u64> {
        let now = self.clock.now();
        let raw = sql("DELETE FROM device_metrics WHERE at < $1")
            .bind(now - retention.raw)
            .execute(self)
            .await?;
        let hourly =
            sql("DELETE FROM metric_rollups WHERE bucket = 'hourly' AND bucket_start < $1")
                .bind(now - retention.hourly)
                .execute(self)
                .await?;
        let daily = sql("DELETE FROM metric_rollups WHERE bucket = 'daily' AND bucket_start < $1")
            .bind(now - retention.daily)
            .execute(self)
            .await?;
        Ok(raw + hourly + daily)
    }
}

impl crate::OrgTelemetry<'_> {
    /// A device's newest raw sample, if it has one (one indexed row, whatever its age).
    pub async fn latest_metric(&self, device: DeviceId) -> Result<Option<MetricPoint>> {
        self.whole().devices().get_device(device).await?;
        sql("SELECT at, CAST(1 AS BIGINT) AS samples, cpu_percent AS cpu_avg, cpu_percent AS cpu_max, \
             ram_percent AS ram_avg, ram_percent AS ram_max, disk_percent AS disk_avg, \
             disk_percent AS disk_max, net_rx_bytes, net_tx_bytes, \
             CAST(process_count AS DOUBLE PRECISION) AS process_avg \
             FROM device_metrics WHERE org_id = $1 AND device_id = $2 ORDER BY at DESC LIMIT 1")
        .bind(self.org)
        .bind(device)
        .fetch_optional(self)
        .await
    }

    /// The `limit` devices with the highest average of `metric` (`cpu`, `memory` or `disk`,
    /// percent) over their samples since `since`, highest first: the overview's "top" lists.
    /// One grouped query over the organization's recent samples (index `(org_id, at)`).
    pub async fn top_devices(
        &self,
        metric: breeze_core::Metric,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<(DeviceId, f64)>> {
        let column = match metric {
            breeze_core::Metric::Cpu => "cpu_percent",
            breeze_core::Metric::Memory => "ram_percent",
            breeze_core::Metric::Disk => "disk_percent",
            other => {
                return Err(crate::StoreError::Invalid(format!(
                    "no fleet ranking by {other:?}"
                )));
            }
        };
        sql(format!(
            "SELECT device_id, AVG({column}) AS v FROM device_metrics WHERE org_id = $1 \
             AND at >= $2 GROUP BY device_id ORDER BY v DESC, device_id LIMIT $3"
        ))
        .bind(self.org)
        .bind(since)
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// A device's metrics from `since` (inclusive) to `until` (exclusive), oldest first.
    ///
    /// The caller has read `device` through this organization (that read is what answers
    /// "no such device"); the statement is scoped to the organization too, so another
    /// organization's device has no points here.
    pub async fn query_metrics(
        &self,
        device: &Device,
        since: Timestamp,
        until: Timestamp,
        aggregation: Aggregation,
    ) -> Result<Vec<MetricPoint>> {
        let device = device.id;
        series(self.org, device, since, until, aggregation, |select, at| {
            format!("{select} ORDER BY {at}")
        })?
        .fetch_all(self)
        .await
    }

    /// The plan of a device's raw series, for a test to hold it to its covering index.
    #[cfg(feature = "testing")]
    pub async fn explain_metrics_series(
        &self,
        device: DeviceId,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<String> {
        series(
            self.org,
            device,
            since,
            until,
            Aggregation::Raw,
            |select, at| format!("{select} ORDER BY {at}"),
        )?
        .explain(self)
        .await
    }

    /// The figures of a device's whole series over the range (counted in the database) and
    /// only its `last` newest points, oldest first: what a summary of a long series needs,
    /// without reading every point out of the database. `device` as for
    /// [`Self::query_metrics`].
    pub async fn query_metrics_tail(
        &self,
        device: &Device,
        since: Timestamp,
        until: Timestamp,
        aggregation: Aggregation,
        last: u32,
    ) -> Result<(Option<MetricTotals>, Vec<MetricPoint>)> {
        let device = device.id;
        // PostgreSQL sums BIGINT as NUMERIC; the casts keep both backends' types alike.
        let totals: Option<MetricTotals> =
            series(self.org, device, since, until, aggregation, |select, _| {
                format!(
                    "SELECT CAST(COUNT(*) AS BIGINT) AS points, \
                     CAST(COALESCE(SUM(samples), 0) AS BIGINT) AS samples, \
                     CAST(COALESCE(SUM(cpu_avg * samples), 0) AS DOUBLE PRECISION) AS cpu_weighted, \
                     CAST(COALESCE(MIN(cpu_avg), 0) AS DOUBLE PRECISION) AS cpu_min, \
                     CAST(COALESCE(MAX(cpu_max), 0) AS DOUBLE PRECISION) AS cpu_max, \
                     CAST(COALESCE(SUM(ram_avg * samples), 0) AS DOUBLE PRECISION) AS ram_weighted, \
                     CAST(COALESCE(MIN(ram_avg), 0) AS DOUBLE PRECISION) AS ram_min, \
                     CAST(COALESCE(MAX(ram_max), 0) AS DOUBLE PRECISION) AS ram_max, \
                     CAST(COALESCE(SUM(disk_avg * samples), 0) AS DOUBLE PRECISION) AS disk_weighted, \
                     CAST(COALESCE(MIN(disk_avg), 0) AS DOUBLE PRECISION) AS disk_min, \
                     CAST(COALESCE(MAX(disk_max), 0) AS DOUBLE PRECISION) AS disk_max, \
                     CAST(COALESCE(SUM(net_rx_bytes), 0) AS BIGINT) AS net_rx_bytes, \
                     CAST(COALESCE(SUM(net_tx_bytes), 0) AS BIGINT) AS net_tx_bytes \
                     FROM ({select}) series"
                )
            })?
            .fetch_optional(self)
            .await?;
        // An aggregate answers one row, even over no points.
        let Some(totals) = totals.filter(|t| t.points > 0) else {
            return Ok((None, Vec::new()));
        };
        let tail = series(self.org, device, since, until, aggregation, |select, at| {
            format!("SELECT * FROM ({select} ORDER BY {at} DESC LIMIT {last}) tail ORDER BY at")
        })?
        .fetch_all(self)
        .await?;
        Ok((Some(totals), tail))
    }
}

/// A metrics series' figures over its whole range: the point count, sample-weighted sums for
/// averages, the least average and greatest maximum per metric, and the network byte totals.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct MetricTotals {
    pub points: i64,
    pub samples: i64,
    pub cpu_weighted: f64,
    pub cpu_min: f64,
    pub cpu_max: f64,
    pub ram_weighted: f64,
    pub ram_min: f64,
    pub ram_max: f64,
    pub disk_weighted: f64,
    pub disk_min: f64,
    pub disk_max: f64,
    pub net_rx_bytes: i64,
    pub net_tx_bytes: i64,
}

/// A device's series over `[since, until)` at one resolution, as a `SELECT` that `wrap` turns
/// into the statement (given the select and the column it is ordered by); every point has the
/// columns of [`MetricPoint`].
fn series(
    org: OrgId,
    device: DeviceId,
    since: Timestamp,
    until: Timestamp,
    aggregation: Aggregation,
    wrap: impl FnOnce(&str, &str) -> String,
) -> Result<crate::sql::Sql> {
    if since >= until {
        return Err(StoreError::Invalid("the range is empty".into()));
    }
    Ok(match aggregation.bucket() {
        None => sql(wrap(
            "SELECT at, CAST(1 AS BIGINT) AS samples, cpu_percent AS cpu_avg, \
             cpu_percent AS cpu_max, ram_percent AS ram_avg, ram_percent AS ram_max, \
             disk_percent AS disk_avg, disk_percent AS disk_max, net_rx_bytes, net_tx_bytes, \
             CAST(process_count AS DOUBLE PRECISION) AS process_avg \
             FROM device_metrics WHERE org_id = $1 AND device_id = $2 \
             AND at >= $3 AND at < $4",
            "at",
        ))
        .bind(org)
        .bind(device)
        .bind(since)
        .bind(until),
        Some((bucket, width)) => sql(wrap(
            "SELECT bucket_start AS at, samples, cpu_sum / samples AS cpu_avg, cpu_max, \
             ram_sum / samples AS ram_avg, ram_max, disk_sum / samples AS disk_avg, \
             disk_max, net_rx_bytes, net_tx_bytes, process_sum / samples AS process_avg \
             FROM metric_rollups WHERE org_id = $1 AND device_id = $2 AND bucket = $3 \
             AND bucket_start >= $4 AND bucket_start < $5",
            "bucket_start",
        ))
        .bind(org)
        .bind(device)
        .bind(bucket)
        .bind(bucket_start(since, width))
        .bind(until),
    })
}
