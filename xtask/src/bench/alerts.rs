//! `cargo xtask bench alerts [--devices N] [--rules N] [--cycles N] [--database
//! sqlite|postgres|both]`: the alert engine and report generation over a seeded fleet, in this
//! process (no server), on a fresh store per backend (`breeze_store::testing`: a SQLite file, or
//! a schema of the test PostgreSQL).
//!
//! The fleet (10,000 devices) sends one metric sample per device every 30 s, the agents' real
//! rate (`metrics_interval_secs`), on a manual clock stepped 30 s per cycle — the engine's own
//! tick. Twenty organization-wide rules (CPU, memory, disk, offline) are evaluated every cycle;
//! from the fourth cycle 1 % of the devices run their CPU at 99 %. Per cycle this prints the
//! engine's wall time and this process's CPU time (PostgreSQL's backends are not counted), and
//! at the end the alert latency of the hot devices: from the moment the rule's duration was
//! met (breach start + duration) to the raise, in the clock the engine sees (the wait for the
//! next tick included) plus the tick's own wall time up to that point.
//!
//! Then a 10,000-device inventory report is generated as JSON and as CSV: time, size, and the
//! peak resident memory it added (`/proc/self/clear_refs` resets the high-water mark, then
//! `VmHWM` is read). The build profile is printed: debug numbers are smoke numbers.

use std::{sync::Arc, time::Instant};

use anyhow::Context;
use breeze_agent_proto::{DiskUsageSample, MetricSample};
use breeze_alerts::{AlertEngine, EngineConfig};
use breeze_core::{
    Actor, AlertCondition, AuditEvent, Clock, Comparison, DeviceId, DeviceStatus, ManualClock,
    Metric, OrgId, OsFamily, ReportFilters, ReportFormat, ReportKind, Severity, Timestamp,
};
use breeze_store::{
    Backend, NewDevice, NewRule, ReportRequest, RuleTarget, Store, testing::TestStore,
};
use futures::StreamExt;

/// Seconds between an agent's samples, and between engine ticks.
const INTERVAL_SECS: i64 = 30;
/// The cycle from which the hot devices breach.
const HOT_FROM: usize = 3;
/// The CPU rule the hot devices trip: above 90 % for this many minutes.
const HOT_RULE_MINUTES: i64 = 2;

fn audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("bench"), action, "bench")
}

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(args, &["--devices", "--rules", "--cycles", "--database"])?;
    let num = |name: &str, default: u64| -> anyhow::Result<u64> {
        f.get(name).map_or(Ok(default), |v| {
            v.parse()
                .with_context(|| format!("{name}: {v:?} is not a number"))
        })
    };
    let devices = num("--devices", 10_000)? as usize;
    let rules = num("--rules", 20)? as usize;
    let cycles = num("--cycles", 10)? as usize;
    let dbs = match f.get("--database").map_or("both", String::as_str) {
        "both" => vec![Backend::Sqlite, Backend::Postgres],
        "sqlite" => vec![Backend::Sqlite],
        "postgres" => vec![Backend::Postgres],
        other => anyhow::bail!("--database: {other:?} is not sqlite, postgres or both"),
    };
    println!(
        "bench alerts: {devices} devices, {rules} rules, {cycles} cycles of {INTERVAL_SECS} s \
         ({} build)",
        if cfg!(debug_assertions) {
            "DEBUG"
        } else {
            "release"
        }
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for db in dbs {
        rt.block_on(one_backend(db, devices, rules, cycles))?;
    }
    Ok(())
}

/// Process CPU time (user + system) in microseconds.
fn cpu_micros() -> anyhow::Result<u64> {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)?;
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Ok(us(usage.user_time()) + us(usage.system_time()))
}

/// A field of `/proc/self/status` in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn sample(at: Timestamp, cpu: f64) -> MetricSample {
    MetricSample {
        at,
        cpu_percent: cpu,
        ram_percent: 40.0,
        ram_used_bytes: 4 << 30,
        disks: vec![DiskUsageSample {
            mount: "/".into(),
            used_percent: 55.0,
        }],
        network: vec![],
        process_count: 180,
    }
}

/// The rules: CPU, memory and disk thresholds at several durations, and offline checks.
fn rule_set(n: usize) -> Vec<NewRule> {
    (0..n)
        .map(|i| {
            let condition = match i % 5 {
                0 if i == 0 => AlertCondition::Metric {
                    metric: Metric::Cpu,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: HOT_RULE_MINUTES as u32,
                },
                0 | 1 => AlertCondition::Metric {
                    metric: Metric::Cpu,
                    comparison: Comparison::Above,
                    threshold: 95.0 + (i % 4) as f64,
                    duration_minutes: 5 + i as u32,
                },
                2 => AlertCondition::Metric {
                    metric: Metric::Memory,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: 5,
                },
                3 => AlertCondition::Metric {
                    metric: Metric::Disk,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: 1,
                },
                _ => AlertCondition::Offline {
                    minutes: 10 + i as u32,
                },
            };
            NewRule {
                name: format!("rule {i:02}"),
                description: None,
                severity: Severity::High,
                enabled: true,
                condition,
                target: RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: true,
                channel_ids: vec![],
                created_by: "bench".into(),
            }
        })
        .collect()
}

async fn seed(store: &Store, devices: usize) -> anyhow::Result<(OrgId, Vec<DeviceId>)> {
    let partner = store.create_partner("Bench", "bench", audit("p")).await?;
    let org = store
        .create_organization(partner.id, "Bench", "bench-org", audit("o"))
        .await?;
    let o = store.org(org.id);
    let site = o.create_site("HQ", "UTC", audit("s")).await?;
    let fleet: Vec<NewDevice> = (0..devices)
        .map(|i| NewDevice {
            site_id: site.id,
            hostname: format!("bench-{i:05}"),
            os_family: OsFamily::Linux,
            os_name: "Debian".into(),
            os_version: "12".into(),
            status: DeviceStatus::Online,
            agent_version: Some("0.1.0".into()),
            last_seen_at: Some(store.clock().now()),
            tags: vec![],
        })
        .collect();
    for chunk in fleet.chunks(2_000) {
        o.create_devices(chunk.to_vec(), audit("device.seed"))
            .await?;
    }
    let (page, _) = o
        .list_devices(&breeze_store::DeviceFilter::default(), u32::MAX, 0)
        .await?;
    let ids: Vec<DeviceId> = page.iter().map(|d| d.id).collect();
    anyhow::ensure!(ids.len() == devices, "seeded {} of {devices}", ids.len());
    Ok((org.id, ids))
}

async fn one_backend(
    db: Backend,
    devices: usize,
    rules: usize,
    cycles: usize,
) -> anyhow::Result<()> {
    let start: Timestamp = "2026-03-02T09:00:00Z".parse()?;
    let clock = ManualClock::new(start);
    let test = TestStore::new(db, Arc::new(clock.clone())).await;
    let store = test.store.clone();
    let name = match db {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    };
    println!("\n== {name} ==");
    let t = Instant::now();
    let (org, ids) = seed(&store, devices).await?;
    let o = store.org(org);
    for r in rule_set(rules) {
        o.create_rule(r, audit("alert_rule.create")).await?;
    }
    println!(
        "seeded {devices} devices and {rules} rules in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let hot: Vec<DeviceId> = ids.iter().step_by(100).copied().collect();
    let hot_set: std::collections::HashSet<DeviceId> = hot.iter().copied().collect();

    let engine = AlertEngine::new(
        store.clone(),
        EngineConfig {
            rules_per_tick: 500,
            ..EngineConfig::default()
        },
    );
    let mut breach_start: Option<Timestamp> = None;
    let mut latencies: Vec<f64> = Vec::new();
    let mut ingest_s = 0.0;
    println!("cycle  ingest s  tick wall ms  tick CPU ms  raised  resolved");
    let mut tick_walls = Vec::new();
    let mut tick_cpus = Vec::new();
    for cycle in 0..cycles {
        clock.advance(chrono::Duration::seconds(INTERVAL_SECS));
        let now = clock.now();
        let hot_now = cycle >= HOT_FROM;
        if hot_now && breach_start.is_none() {
            breach_start = Some(now);
        }
        // One sample per device, as the agents send them (16 batches in flight).
        let t = Instant::now();
        let results: Vec<_> = futures::stream::iter(ids.iter().copied())
            .map(|d| {
                let store = store.clone();
                let cpu = if hot_now && hot_set.contains(&d) {
                    99.0
                } else {
                    20.0
                };
                async move { store.insert_metrics(d, org, &[sample(now, cpu)]).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for r in results {
            r?;
        }
        let ingest = t.elapsed().as_secs_f64();
        ingest_s += ingest;

        let cpu0 = cpu_micros()?;
        let t = Instant::now();
        let report = engine.tick().await?;
        let wall = t.elapsed();
        let cpu = (cpu_micros()? - cpu0) as f64 / 1000.0;
        tick_walls.push(wall.as_secs_f64() * 1000.0);
        tick_cpus.push(cpu);
        if let Some(b) = breach_start {
            let due = b + chrono::Duration::minutes(HOT_RULE_MINUTES);
            for id in &report.raised {
                let alert = o.get_alert(*id).await?;
                if hot_set.contains(&alert.device_id) {
                    let waited = (now - due).num_milliseconds() as f64 / 1000.0;
                    latencies.push(waited + wall.as_secs_f64());
                }
            }
        }
        println!(
            "{cycle:>5}  {ingest:>8.2}  {:>12.1}  {cpu:>11.1}  {:>6}  {:>8}",
            wall.as_secs_f64() * 1000.0,
            report.raised.len(),
            report.resolved.len()
        );
    }
    let mut w = tick_walls.clone();
    w.sort_by(f64::total_cmp);
    let mut c = tick_cpus.clone();
    c.sort_by(f64::total_cmp);
    latencies.sort_by(f64::total_cmp);
    println!(
        "evaluation cycle ({rules} rules x {devices} devices): wall median {:.0} ms, max {:.0} ms; \
         process CPU median {:.0} ms, max {:.0} ms ({:.1} % of a core at one tick per {INTERVAL_SECS} s)",
        percentile(&w, 0.5),
        percentile(&w, 1.0),
        percentile(&c, 0.5),
        percentile(&c, 1.0),
        percentile(&c, 0.5) / (INTERVAL_SECS as f64 * 10.0),
    );
    println!(
        "ingest: {:.0} samples/s in this bench (one sample per device per cycle)",
        (devices * cycles) as f64 / ingest_s
    );
    println!(
        "alert latency (hot devices, {} of {} raised; duration met -> raised): p50 {:.1} s, \
         p99 {:.1} s",
        latencies.len(),
        hot.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
    );

    // Reports: a 10,000-device inventory as JSON and CSV.
    for format in [ReportFormat::Json, ReportFormat::Csv] {
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let rss0 = status_kib("VmRSS:");
        let t = Instant::now();
        let run = o
            .generate_report(
                ReportRequest {
                    definition_id: None,
                    name: format!("bench {format}"),
                    kind: ReportKind::DeviceInventory,
                    format,
                    filters: ReportFilters::default(),
                },
                "bench",
                audit("report.generate"),
            )
            .await?;
        let took = t.elapsed().as_secs_f64() * 1000.0;
        let peak = status_kib("VmHWM:");
        println!(
            "report {format}: {} rows, {:.1} MiB in {} chunks, {took:.0} ms; peak RSS added {} \
             (VmHWM {peak} KiB, RSS before {rss0} KiB)",
            run.row_count,
            run.byte_count as f64 / (1024.0 * 1024.0),
            run.chunk_count,
            if reset {
                format!("{} KiB", peak.saturating_sub(rss0))
            } else {
                "unknown (clear_refs refused)".into()
            },
        );
    }
    test.cleanup().await;
    Ok(())
}
