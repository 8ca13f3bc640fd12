//! `cargo xtask bench fleet [--agents N] [--duration SECS] [--database sqlite|postgres]`:
//! Breeze's device gateway under a simulated fleet.
//!
//! A scratch `breeze demo` (no local agent, enrollment rate limit lifted through its setting)
//! runs pinned to CPU 0; this process, pinned to CPU 1, enrolls N agents over HTTP, opens N
//! WebSockets and keeps them busy for `--duration` seconds with the agent's real cadence
//! (heartbeat every 60 s, metrics every 30 s, jittered). Meanwhile it times
//! `manage_services list` through MCP — sequential calls in the first half of the
//! window, bursts of 10 concurrent calls in the second — and reads the server's CPU time and
//! RSS from `/proc`. Metrics ingestion is confirmed by counting `device_metrics` rows.
//!
//! `manage_services` is limited to 10 calls per user per 5 minutes (by design), so the command
//! loop gets its own users, each with a write key, and spends 10 calls per user
//! (`--cmd-users`, 40 by default: 400 calls).
//!
//! Other knobs: `--enroll-concurrency` (32), `--connect-concurrency` (64),
//! `--samples-per-batch` (1).

use std::{
    collections::BTreeMap,
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

use super::{
    build_breeze, cpu_micros,
    instance::{Db, Instance},
    rss_kb,
    sim::{self, Errors, Phase, RoundTrips, SimConfig, pct_ms},
    workspace_root,
};

/// `manage_services`'s per-user limit: 10 calls per 300 s.
const CALLS_PER_USER: usize = 10;
/// Concurrency of the command bursts.
const BURST: usize = 10;

struct Args {
    agents: usize,
    duration: u64,
    db: Db,
    enroll_concurrency: usize,
    connect_concurrency: usize,
    cmd_users: usize,
    samples_per_batch: usize,
}

fn parse(args: &[&str]) -> anyhow::Result<Args> {
    let f = super::flags(
        args,
        &[
            "--agents",
            "--duration",
            "--database",
            "--enroll-concurrency",
            "--connect-concurrency",
            "--cmd-users",
            "--samples-per-batch",
        ],
    )?;
    let num = |name: &str, default: usize| -> anyhow::Result<usize> {
        f.get(name).map_or(Ok(default), |v| {
            v.parse()
                .with_context(|| format!("{name}: {v:?} is not a number"))
        })
    };
    let a = Args {
        agents: num("--agents", 10_000)?,
        duration: num("--duration", 60)? as u64,
        db: Db::parse(f.get("--database").map_or("sqlite", String::as_str))?,
        enroll_concurrency: num("--enroll-concurrency", 32)?,
        connect_concurrency: num("--connect-concurrency", 64)?,
        cmd_users: num("--cmd-users", 40)?,
        samples_per_batch: num("--samples-per-batch", 1)?,
    };
    if a.agents == 0 || a.duration == 0 {
        bail!("--agents and --duration must be positive");
    }
    Ok(a)
}

/// Raises this process's open-file limit (children inherit it) to cover `want`; returns the
/// soft limit in force.
pub(super) fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    let target = want.max(65_536);
    if soft >= target {
        return soft;
    }
    // Raising the hard limit needs privilege; without it, go as high as the hard limit.
    if setrlimit(Resource::RLIMIT_NOFILE, target, hard.max(target)).is_err() {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    getrlimit(Resource::RLIMIT_NOFILE).map_or(soft, |(s, _)| s)
}

/// Pins every thread of this process to `cpu` (threads started later inherit it).
pub(super) fn pin_self(cpu: u32) -> bool {
    let two = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    two && Command::new("taskset")
        .args([
            "-a",
            "-cp",
            &cpu.to_string(),
            &std::process::id().to_string(),
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `n` users in `acme`, each with an `ai:read,ai:write` key; returns the keys.
pub(super) fn command_keys(inst: &Instance, n: usize) -> anyhow::Result<Vec<String>> {
    let stamp = sim::now().timestamp();
    let make = |i: usize| -> anyhow::Result<String> {
        let email = format!("bench-cmd-{stamp}-{i}@bench.invalid");
        inst.cli(&[
            "users",
            "create",
            "--email",
            &email,
            "--name",
            &format!("Bench {i}"),
            "--org",
            "acme",
            "--role",
            "Administrator",
        ])?;
        let out = inst.cli(&[
            "keys",
            "create",
            "--org",
            "acme",
            "--user",
            &email,
            "--name",
            &format!("bench-cmd-{i}"),
            "--scopes",
            "ai:read,ai:write",
            "--json",
        ])?;
        let v: Value = serde_json::from_str(&out).context("keys create --json")?;
        v["key"]
            .as_str()
            .map(str::to_owned)
            .context("keys create: no key")
    };
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                s.spawn(move || -> anyhow::Result<Vec<String>> {
                    (w..n).step_by(4).map(make).collect()
                })
            })
            .collect();
        let mut keys = Vec::with_capacity(n);
        for h in workers {
            keys.extend(
                h.join()
                    .map_err(|_| anyhow::anyhow!("a key-making thread panicked"))??,
            );
        }
        Ok(keys)
    })
}

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let a = parse(args)?;
    let root = workspace_root()?;
    if let Some(done) = super::rerun_in_release(&root, "fleet", args) {
        return done;
    }
    let nofile = raise_nofile(a.agents as u64 * 2 + 4096);
    eprintln!("building breeze (release)…");
    let bin = build_breeze(&root)?;
    let inst = Instance::start(
        &root,
        &bin,
        a.db,
        0,
        &[
            ("BREEZE_ENROLL_RATE_PER_MINUTE", "1000000000"),
            ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "1000000000"),
        ],
    )?;
    eprintln!("breeze demo on {} ({})", inst.base_url, a.db.name());
    let enrollment_key = inst.enrollment_key(a.agents)?;
    let t = Instant::now();
    let keys = command_keys(&inst, a.cmd_users)?;
    eprintln!(
        "{} command users with write keys in {:.1} s",
        keys.len(),
        t.elapsed().as_secs_f64()
    );
    let pinned = pin_self(1);
    let cfg = SimConfig {
        base_url: inst.base_url.clone(),
        agents: a.agents,
        enrollment_key,
        enroll_concurrency: a.enroll_concurrency,
        connect_concurrency: a.connect_concurrency,
        samples_per_batch: a.samples_per_batch,
        heartbeat_every: Duration::from_secs(60),
        metrics_every: Duration::from_secs(30),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut inst = inst;
    let r = rt.block_on(drive(&inst, &cfg, keys, &a))?;
    let alive = inst.alive();
    print(&a, &inst, &r, nofile, pinned, alive);
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok(())
}

/// Everything measured.
struct Report {
    enroll: Phase,
    connect: Phase,
    welcomes: u64,
    server_cpu_enroll: f64,
    server_cpu_connect: f64,
    server_cpu_steady: f64,
    sim_cpu_steady: f64,
    rss_idle_kb: u64,
    rss_enrolled_kb: u64,
    rss_connected_kb: u64,
    rss_peak_kb: u64,
    rss_end_kb: u64,
    window: Duration,
    sent: sim::Snapshot,
    connected_end: u64,
    disconnects: Errors,
    rows_base: u64,
    rows_window: u64,
    rows_final: u64,
    drain: Duration,
    samples_total: u64,
    seq: RoundTrips,
    burst: RoundTrips,
    commands_completed: Option<u64>,
}

fn cpu_pct(pid: u32, before: u64, since: Instant) -> f64 {
    let now = cpu_micros(pid).unwrap_or(before);
    (now.saturating_sub(before)) as f64 / since.elapsed().as_micros().max(1) as f64 * 100.0
}

async fn count(inst: &Instance, sql: &'static str) -> anyhow::Result<u64> {
    tokio::task::block_in_place(|| inst.count(sql))
}

async fn drive(
    inst: &Instance,
    cfg: &SimConfig,
    keys: Vec<String>,
    a: &Args,
) -> anyhow::Result<Report> {
    let pid = inst.pid();
    const METRIC_ROWS: &str = "SELECT count(*) FROM device_metrics";
    let rows_base = count(inst, METRIC_ROWS).await?;
    let rss_idle_kb = rss_kb(pid)?;

    eprintln!(
        "enrolling {} agents ({} at a time)…",
        cfg.agents, cfg.enroll_concurrency
    );
    let (c0, t0) = (cpu_micros(pid)?, Instant::now());
    let (agents, enroll) = sim::enroll(cfg).await?;
    let server_cpu_enroll = cpu_pct(pid, c0, t0);
    let rss_enrolled_kb = rss_kb(pid)?;
    if agents.is_empty() {
        bail!("no agent enrolled: {:?}", enroll.errors);
    }

    eprintln!(
        "opening {} sockets ({} handshakes at a time)…",
        agents.len(),
        cfg.connect_concurrency
    );
    let (c0, t0) = (cpu_micros(pid)?, Instant::now());
    let fleet = sim::connect(cfg, agents).await;
    let server_cpu_connect = cpu_pct(pid, c0, t0);
    let rss_connected_kb = rss_kb(pid)?;
    if fleet.connected.is_empty() {
        bail!("no socket opened: {:?}", fleet.connect.errors);
    }

    let window = Duration::from_secs(a.duration);
    eprintln!(
        "{} agents connected; steady state for {} s…",
        fleet.connected.len(),
        a.duration
    );
    let devices = Arc::new(fleet.connected.clone());
    let total_calls = keys.len() * CALLS_PER_USER;
    let seq_calls = total_calls / 2;
    let burst_rounds = (total_calls - seq_calls) / BURST;
    let commands = tokio::spawn(sim::command_loop(
        sim::Mcp::new(&inst.base_url)?,
        keys,
        CALLS_PER_USER,
        devices,
        window,
        seq_calls,
        burst_rounds,
        BURST,
    ));
    let s0 = fleet.counters.snapshot();
    let rows0 = count(inst, METRIC_ROWS).await?;
    let me = std::process::id();
    let (c0, sc0, t0) = (cpu_micros(pid)?, cpu_micros(me)?, Instant::now());
    let mut rss_peak_kb = rss_connected_kb;
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep_until((tokio::time::Instant::now() + Duration::from_secs(1)).min(end))
            .await;
        match rss_kb(pid) {
            Ok(r) => rss_peak_kb = rss_peak_kb.max(r),
            Err(_) => break, // the server is gone; reported below
        }
    }
    let server_cpu_steady = cpu_pct(pid, c0, t0);
    let sim_cpu_steady = cpu_pct(me, sc0, t0);
    let elapsed = t0.elapsed();
    let s1 = fleet.counters.snapshot();
    let rows1 = count(inst, METRIC_ROWS).await.unwrap_or(rows0);
    let rss_end_kb = rss_kb(pid).unwrap_or(0);

    eprintln!("waiting for the command loop, closing the sockets…");
    let (seq, burst) = commands.await?;
    let connected_end = fleet.counters.snapshot().connected;
    let disconnects = fleet
        .counters
        .disconnects
        .lock()
        .map(|d| d.clone())
        .unwrap_or_default();
    let welcomes = fleet
        .counters
        .welcomes
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut fleet = fleet;
    let connect = std::mem::take(&mut fleet.connect);
    let counters = fleet.counters.clone();
    fleet.stop(Duration::from_secs(10)).await;
    let samples_total = counters.snapshot().samples;
    let t_drain = Instant::now();
    let mut last = rows1;
    let mut stable = 0;
    while t_drain.elapsed() < Duration::from_secs(60) && stable < 2 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = count(inst, METRIC_ROWS).await.unwrap_or(last);
        stable = if n == last { stable + 1 } else { 0 };
        last = n;
    }
    let commands_completed = count(
        inst,
        "SELECT count(*) FROM device_commands WHERE status = 'completed'",
    )
    .await
    .ok();
    Ok(Report {
        enroll,
        connect,
        welcomes,
        server_cpu_enroll,
        server_cpu_connect,
        server_cpu_steady,
        sim_cpu_steady,
        rss_idle_kb,
        rss_enrolled_kb,
        rss_connected_kb,
        rss_peak_kb,
        rss_end_kb,
        window: elapsed,
        sent: sim::Snapshot {
            heartbeats: s1.heartbeats - s0.heartbeats,
            metric_batches: s1.metric_batches - s0.metric_batches,
            samples: s1.samples - s0.samples,
            commands: s1.commands - s0.commands,
            results: s1.results - s0.results,
            connected: s1.connected,
        },
        connected_end,
        disconnects,
        rows_base,
        rows_window: rows1.saturating_sub(rows0),
        rows_final: last,
        drain: t_drain.elapsed().saturating_sub(Duration::from_secs(2)),
        samples_total,
        seq,
        burst,
        commands_completed,
    })
}

fn errors_text(e: &Errors) -> String {
    if e.is_empty() {
        return "none".into();
    }
    e.iter()
        .map(|(k, n)| format!("{n}× {k}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn print(a: &Args, inst: &Instance, r: &Report, nofile: u64, pinned: bool, alive: bool) {
    let secs = r.window.as_secs_f64().max(1e-9);
    let mb = |kb: u64| kb as f64 / 1024.0;
    report!();
    report!(
        "## Fleet: {} agents, {}, {:.0} s steady state",
        a.agents,
        a.db.name(),
        secs
    );
    report!();
    report!(
        "server pinned to CPU 0, simulator + MCP client to CPU 1: {}; RLIMIT_NOFILE {nofile} (both); server still running at the end: {alive}",
        if pinned {
            "yes"
        } else {
            "no (single CPU or no taskset)"
        }
    );
    report!();
    report!(
        "| setup | ok / attempted | time s | rate /s | p50 ms | p99 ms | server CPU % | server CPU µs/op | errors |"
    );
    report!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (name, p, cpu) in [
        (
            format!("enroll (HTTP, c={})", a.enroll_concurrency),
            &r.enroll,
            r.server_cpu_enroll,
        ),
        (
            format!("open socket (c={})", a.connect_concurrency),
            &r.connect,
            r.server_cpu_connect,
        ),
    ] {
        report!(
            "| {name} | {} / {} | {:.2} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {} |",
            p.ok,
            p.attempted,
            p.elapsed.as_secs_f64(),
            p.rate(),
            pct_ms(&p.latencies, 50.0),
            pct_ms(&p.latencies, 99.0),
            cpu,
            cpu / 100.0 * p.elapsed.as_secs_f64() * 1e6 / p.ok.max(1) as f64,
            errors_text(&p.errors)
        );
    }
    report!();
    report!(
        "welcome frames received: {} of {}",
        r.welcomes,
        r.connect.ok
    );
    report!();
    report!("| steady state | value |");
    report!("|---|---:|");
    report!(
        "| server CPU (100% = one core) | {:.1}% |",
        r.server_cpu_steady
    );
    report!("| simulator CPU (same units) | {:.1}% |", r.sim_cpu_steady);
    report!(
        "| server RSS idle → enrolled → connected | {:.1} → {:.1} → {:.1} MB |",
        mb(r.rss_idle_kb),
        mb(r.rss_enrolled_kb),
        mb(r.rss_connected_kb)
    );
    report!(
        "| server RSS per connected agent | {:.1} KB |",
        r.rss_connected_kb.saturating_sub(r.rss_enrolled_kb) as f64 / r.connect.ok.max(1) as f64
    );
    report!(
        "| server RSS peak / end of window | {:.1} / {:.1} MB |",
        mb(r.rss_peak_kb),
        mb(r.rss_end_kb)
    );
    report!(
        "| sockets open at start / end | {} / {} |",
        r.connect.ok,
        r.connected_end
    );
    report!(
        "| heartbeats sent | {} ({:.1}/s) |",
        r.sent.heartbeats,
        r.sent.heartbeats as f64 / secs
    );
    report!(
        "| metric batches sent (samples) | {} ({}) |",
        r.sent.metric_batches,
        r.sent.samples
    );
    report!(
        "| metric samples sent per second | {:.1} |",
        r.sent.samples as f64 / secs
    );
    report!(
        "| metric rows stored during the window (SQL) | {} ({:.1}/s) |",
        r.rows_window,
        r.rows_window as f64 / secs
    );
    report!(
        "| metric rows stored in all / samples sent in all | {} / {} (drained {:.0} s after the window) |",
        r.rows_final.saturating_sub(r.rows_base),
        r.samples_total,
        r.drain.as_secs_f64()
    );
    report!(
        "| command frames received / answered | {} / {} |",
        r.sent.commands,
        r.sent.results
    );
    if let Some(n) = r.commands_completed {
        report!("| commands `completed` in the database | {n} |");
    }
    report!(
        "| socket drops during the run | {} |",
        errors_text(&r.disconnects)
    );
    report!();
    report!(
        "manage_services list round trip (MCP → gateway → simulated agent → MCP), on random connected devices:"
    );
    report!();
    report!("| mode | calls ok | errors | p50 ms | p90 ms | p99 ms | max ms |");
    report!("|---|---:|---:|---:|---:|---:|---:|");
    for rt in [&r.seq, &r.burst] {
        let l = &rt.latencies;
        report!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            if rt.concurrency == 1 {
                "sequential".to_owned()
            } else {
                format!("bursts of {}", rt.concurrency)
            },
            l.len(),
            rt.errors.values().sum::<usize>(),
            pct_ms(l, 50.0),
            pct_ms(l, 90.0),
            pct_ms(l, 99.0),
            l.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        );
    }
    let errs: BTreeMap<_, _> = r
        .seq
        .errors
        .iter()
        .chain(r.burst.errors.iter())
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    if !errs.is_empty() {
        report!();
        report!("command errors: {}", errors_text(&errs));
    }
    let log = inst.log_summary(8);
    report!();
    if log.is_empty() {
        report!("server log: no warnings or errors");
    } else {
        report!("server log (warn and above), most frequent:");
        for (n, line) in log {
            report!("  {n:>6}× {line}");
        }
    }
}
