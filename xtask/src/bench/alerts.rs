//! `cargo xtask bench alerts [--devices N] [--rules N] [--cycles N] [--database
//! sqlite|postgres|both] [--mode tick|incremental|both]`: the alert engine and report generation over a seeded fleet, in this
//! process (no server), on a fresh store per backend (`breeze_store::testing`: a SQLite file, or
//! a schema of the test PostgreSQL).
//!
//! The fleet (10,000 devices) sends one metric sample per device every 30 s, the agents' real
//! rate (`metrics_interval_secs`), spread over the cycle (device i reports 1 + i mod 29 s into
//! it, the clock stepped to each arrival), and the engine ticks at the end of each 30 s cycle.
//! `--mode tick` evaluates on the tick only (metric rules rescanned every tick: the engine
//! before incremental evaluation); `--mode incremental` also hands each arrival's devices to
//! `AlertEngine::devices_reported`, as the server's gateway listener does, and the tick then
//! keeps offline rules (metric rules every 10th tick); its on-arrival handling is measured in
//! wall time and in this process's CPU time (the same clock as the tick's). Twenty organization-wide rules (CPU, memory, disk, offline) are evaluated every cycle;
//! from the fourth cycle 1 % of the devices run their CPU at 99 %. Per cycle this prints the
//! engine's wall time and this process's CPU time (PostgreSQL's backends are not counted), and
//! at the end the alert latency of the hot devices: from the moment the rule's duration was
//! met (the device's first hot sample + duration, which is also when the sample that meets it
//! arrives) to the raise, in the clock the engine sees (the wait for the next tick included)
//! plus the wall time of the evaluation that raised it.
//!
//! Then a 10,000-device inventory report is generated as JSON, CSV and PDF: time, size, and the
//! peak resident memory it added (`/proc/self/clear_refs` resets the high-water mark, then
//! `VmHWM` is read). The build profile is printed: debug numbers are smoke numbers.

use std::{sync::Arc, time::Instant};

use breeze_agent_proto::{DiskUsageSample, MetricSample};
use breeze_alerts::{AlertEngine, AlertEngineConfig};
use breeze_core::{
    AlertCondition, Clock, Comparison, DeviceId, ManualClock, Metric, ReportFilters, ReportFormat,
    ReportKind, Severity, Timestamp,
};
use breeze_store::{Backend, NewRule, ReportRequest, RuleTarget, testing::TestStore};
use futures::StreamExt;

use super::percentile;

/// Seconds between an agent's samples, and between engine ticks.
const INTERVAL_SECS: i64 = 30;
/// The cycle from which the hot devices breach.
const HOT_FROM: usize = 3;
/// The CPU rule the hot devices trip: above 90 % for this many minutes.
const HOT_RULE_MINUTES: i64 = 2;

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &["--devices", "--rules", "--cycles", "--database", "--mode"],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let devices = num("--devices", 10_000)? as usize;
    let rules = num("--rules", 20)? as usize;
    let cycles = num("--cycles", 10)? as usize;
    let dbs = match f.get("--database").map_or("both", String::as_str) {
        "both" => vec![Backend::Sqlite, Backend::Postgres],
        "sqlite" => vec![Backend::Sqlite],
        "postgres" => vec![Backend::Postgres],
        other => anyhow::bail!("--database: {other:?} is not sqlite, postgres or both"),
    };
    let modes = match f.get("--mode").map_or("both", String::as_str) {
        "both" => vec![false, true],
        "tick" => vec![false],
        "incremental" => vec![true],
        other => anyhow::bail!("--mode: {other:?} is not tick, incremental or both"),
    };
    report!(
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
        for &incremental in &modes {
            rt.block_on(one_backend(db, devices, rules, cycles, incremental))?;
        }
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

/// Adds the latency of each raised alert of a hot device: from its duration being met to `now`
/// in the engine's clock, plus the evaluation's wall time.
async fn collect(
    o: &breeze_store::OrgStore<'_>,
    raised: &[uuid::Uuid],
    first_hot: &std::collections::HashMap<DeviceId, Timestamp>,
    now: Timestamp,
    wall_s: f64,
    latencies: &mut Vec<f64>,
) -> anyhow::Result<()> {
    for id in raised {
        let alert = o.alerts().get_alert(*id).await?;
        if let Some(first) = first_hot.get(&alert.device_id) {
            let due = *first + chrono::Duration::minutes(HOT_RULE_MINUTES);
            latencies.push((now - due).num_milliseconds() as f64 / 1000.0 + wall_s);
        }
    }
    Ok(())
}

async fn one_backend(
    db: Backend,
    devices: usize,
    rules: usize,
    cycles: usize,
    incremental: bool,
) -> anyhow::Result<()> {
    let start: Timestamp = "2026-03-02T09:00:00Z".parse()?;
    let clock = ManualClock::new(start);
    let test = TestStore::new(db, Arc::new(clock.clone())).await;
    let store = test.store.clone();
    let name = match db {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    };
    report!(
        "\n== {name}, {} ==",
        if incremental {
            "incremental (on arrival + tick)"
        } else {
            "tick only"
        }
    );
    let t = Instant::now();
    let (org, ids) = super::seed_fleet(&store, devices).await?;
    let o = store.org(org);
    for r in rule_set(rules) {
        o.alerts()
            .create_rule(r, super::audit("alert_rule.create"))
            .await?;
    }
    report!(
        "seeded {devices} devices and {rules} rules in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let hot: Vec<DeviceId> = ids.iter().step_by(100).copied().collect();
    let hot_set: std::collections::HashSet<DeviceId> = hot.iter().copied().collect();

    let engine = AlertEngine::new(
        store.clone(),
        AlertEngineConfig {
            rules_per_tick: 500,
            ..AlertEngineConfig::default()
        },
    );
    if incremental {
        engine.enable_incremental();
    }
    // Device i reports this many seconds into each cycle.
    let offset = |i: usize| 1 + (i % 29) as i64;
    let mut arrivals: Vec<Vec<DeviceId>> = vec![Vec::new(); 30];
    for (i, d) in ids.iter().enumerate() {
        arrivals[offset(i) as usize].push(*d);
    }
    let mut first_hot: std::collections::HashMap<DeviceId, Timestamp> = Default::default();
    let mut latencies: Vec<f64> = Vec::new();
    let mut ingest_s = 0.0;
    let mut on_arrival_ms = 0.0;
    let mut on_arrival_cpu_ms = 0.0;
    report!(
        "cycle  ingest s  arrival wall ms  arrival CPU ms  tick wall ms  tick CPU ms  raised  \
         resolved"
    );
    let mut tick_walls = Vec::new();
    let mut tick_cpus = Vec::new();
    for cycle in 0..cycles {
        let cycle_start = clock.now();
        let hot_now = cycle >= HOT_FROM;
        let mut raised = 0;
        let mut arrival_ms = 0.0;
        let mut arrival_cpu = 0.0;
        let mut ingest = 0.0;
        for (secs, group) in arrivals.iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            let at = cycle_start + chrono::Duration::seconds(secs as i64);
            clock.set(at);
            // One sample per device, as the agents send them (16 batches in flight).
            let t = Instant::now();
            let results: Vec<_> = futures::stream::iter(group.iter().copied())
                .map(|d| {
                    let store = store.clone();
                    let cpu = if hot_now && hot_set.contains(&d) {
                        99.0
                    } else {
                        20.0
                    };
                    async move { store.insert_metrics(d, org, &[sample(at, cpu)]).await }
                })
                .buffer_unordered(16)
                .collect()
                .await;
            for r in results {
                r?;
            }
            ingest += t.elapsed().as_secs_f64();
            if hot_now {
                for d in group.iter().filter(|d| hot_set.contains(d)) {
                    first_hot.entry(*d).or_insert(at);
                }
            }
            if incremental {
                // Process CPU, as for the tick: the SQLite connections' worker threads do much
                // of the work, which a thread's own CPU clock would miss.
                let cpu0 = cpu_micros()?;
                let t = Instant::now();
                let report = engine
                    .devices_reported(org, group, breeze_core::TelemetryKind::Metrics)
                    .await?;
                let wall = t.elapsed().as_secs_f64();
                arrival_cpu += (cpu_micros()? - cpu0) as f64 / 1000.0;
                arrival_ms += wall * 1000.0;
                raised += report.raised.len();
                collect(
                    &o,
                    &report.raised,
                    &first_hot,
                    clock.now(),
                    wall,
                    &mut latencies,
                )
                .await?;
            }
        }
        ingest_s += ingest;
        on_arrival_ms += arrival_ms;
        on_arrival_cpu_ms += arrival_cpu;
        clock.set(cycle_start + chrono::Duration::seconds(INTERVAL_SECS));
        let now = clock.now();

        let cpu0 = cpu_micros()?;
        let t = Instant::now();
        let report = engine.tick().await?;
        let wall = t.elapsed();
        let cpu = (cpu_micros()? - cpu0) as f64 / 1000.0;
        tick_walls.push(wall.as_secs_f64() * 1000.0);
        tick_cpus.push(cpu);
        raised += report.raised.len();
        collect(
            &o,
            &report.raised,
            &first_hot,
            now,
            wall.as_secs_f64(),
            &mut latencies,
        )
        .await?;
        report!(
            "{cycle:>5}  {ingest:>8.2}  {arrival_ms:>15.1}  {arrival_cpu:>14.1}  {:>12.1}  \
             {cpu:>11.1}  {raised:>6}  {:>8}",
            wall.as_secs_f64() * 1000.0,
            report.resolved.len()
        );
    }
    let mut w = tick_walls.clone();
    w.sort_by(f64::total_cmp);
    let mut c = tick_cpus.clone();
    c.sort_by(f64::total_cmp);
    latencies.sort_by(f64::total_cmp);
    report!(
        "evaluation cycle ({rules} rules x {devices} devices): wall median {:.0} ms, max {:.0} ms; \
         process CPU median {:.0} ms, max {:.0} ms ({:.1} % of a core at one tick per {INTERVAL_SECS} s)",
        percentile(&w, 0.5),
        percentile(&w, 1.0),
        percentile(&c, 0.5),
        percentile(&c, 1.0),
        percentile(&c, 0.5) / (INTERVAL_SECS as f64 * 10.0),
    );
    if incremental {
        let cpu_per_cycle = on_arrival_cpu_ms / cycles as f64;
        report!(
            "evaluation on arrival: wall {:.0} ms, process CPU {cpu_per_cycle:.0} ms per cycle on \
             average ({:.1} % of a core); with the tick: process CPU {:.0} ms per cycle \
             ({:.1} % of a core)",
            on_arrival_ms / cycles as f64,
            cpu_per_cycle / (INTERVAL_SECS as f64 * 10.0),
            cpu_per_cycle + tick_cpus.iter().sum::<f64>() / cycles as f64,
            (cpu_per_cycle + tick_cpus.iter().sum::<f64>() / cycles as f64)
                / (INTERVAL_SECS as f64 * 10.0),
        );
    }
    report!(
        "ingest: {:.0} samples/s in this bench (one sample per device per cycle)",
        (devices * cycles) as f64 / ingest_s
    );
    report!(
        "alert latency (hot devices, {} of {} raised; duration met -> raised): p50 {:.1} s, \
         p99 {:.1} s",
        latencies.len(),
        hot.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
    );

    // Reports: a 10,000-device inventory as JSON, CSV and PDF.
    for format in [ReportFormat::Json, ReportFormat::Csv, ReportFormat::Pdf] {
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let rss0 = status_kib("VmRSS:");
        let t = Instant::now();
        let run = o
            .reports()
            .generate_report(
                ReportRequest {
                    definition_id: None,
                    name: format!("bench {format}"),
                    kind: ReportKind::DeviceInventory,
                    format,
                    filters: ReportFilters::default(),
                },
                "bench",
                super::audit("report.generate"),
            )
            .await?;
        let took = t.elapsed().as_secs_f64() * 1000.0;
        let peak = status_kib("VmHWM:");
        report!(
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
