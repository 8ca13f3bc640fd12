//! `cargo xtask bench cluster [--agents N] [--calls N] [--duration SECS]`: two `breeze`
//! processes on one PostgreSQL database and one Redis — what crossing instances costs.
//!
//! A scratch `breeze demo` (instance A) and a `breeze serve` on its database (instance B), both
//! with `REDIS_URL` (a key prefix of their own) and both pinned to CPU 0; the load generator,
//! the simulated agents and the clients run on CPU 1. PostgreSQL and Redis are unpinned. It
//! measures:
//!
//! - MCP throughput on PostgreSQL, one instance against two: `query_devices` over Streamable
//!   HTTP sessions at concurrency 50 (the perf-peers load generator), all on A, then 25 on A
//!   and 25 on B at once. Both servers share one core, so this shows what splitting costs per
//!   request (server CPU µs/request, summed over both), not what a second machine would add.
//! - Legacy SSE delivery: a stream held by A; a `ping` POSTed to A, or to B (relayed to A
//!   through Redis), timed until its reply arrives on the stream.
//! - Agent command round trip: simulated agents connected to A; `manage_services list`
//!   asked on A, or on B (the command travels to A through PostgreSQL's cluster bus), timed
//!   from the call to its answer.
//! - `--agents` simulated agents (default 2000) spread over both instances: connection rate
//!   and each instance's resident memory.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

use super::{
    build_breeze, build_peers, cpu_micros,
    instance::{Db, Instance},
    perf_peers, pinned, profile, rss_kb,
    sim::{self, SimConfig, pct_ms},
    workspace_root,
};

/// `manage_services`' per-user limit: 10 calls per 300 s.
const CALLS_PER_USER: usize = 10;

struct Args {
    agents: usize,
    calls: usize,
    duration: u64,
}

fn parse(args: &[&str]) -> anyhow::Result<Args> {
    let f = super::flags(args, &["--agents", "--calls", "--duration"])?;
    let num = |name: &str, default: usize| -> anyhow::Result<usize> {
        f.get(name).map_or(Ok(default), |v| {
            v.parse()
                .with_context(|| format!("{name}: {v:?} is not a number"))
        })
    };
    let a = Args {
        agents: num("--agents", 2000)?,
        calls: num("--calls", 200)?,
        duration: num("--duration", 8)? as u64,
    };
    if a.agents == 0 || a.calls == 0 || a.duration == 0 {
        bail!("--agents, --calls and --duration must be positive");
    }
    Ok(a)
}

pub(crate) fn run_bench(args: &[&str]) -> anyhow::Result<()> {
    let a = parse(args)?;
    let root = workspace_root()?;
    if let Some(done) = super::rerun_in_release(&root, "cluster", args) {
        return done;
    }
    eprintln!("building breeze and the load generator (release)…");
    let bin = build_breeze(&root)?;
    let peers = perf_peers(&root)?;
    build_peers(&peers, &["loadgen"])?;
    let loadgen = peers.join("target").join(profile().1).join("loadgen");

    let prefix = format!("bench{}:", std::process::id());
    let server_env = [
        ("REDIS_URL", "redis://127.0.0.1:6379"),
        ("BREEZE_REDIS_PREFIX", prefix.as_str()),
        ("BREEZE_ENROLL_RATE_PER_MINUTE", "1000000000"),
        ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "1000000000"),
        ("MCP_SSE_RATE_LIMIT_PER_MINUTE", "1000000000"),
        ("MCP_MAX_SSE_SESSIONS_PER_KEY", "100"),
        ("MCP_MAX_SESSIONS_PER_ORG", "200"),
        ("MCP_MAX_SESSIONS", "1000"),
    ];
    let inst = Instance::start(&root, &bin, Db::Postgres, 0, &server_env)?;
    let peer = inst.start_peer(0, &server_env)?;
    let (a_url, b_url) = (inst.base_url.clone(), peer.base_url.clone());
    eprintln!("instance A (demo) at {a_url}, instance B (serve) at {b_url}, PostgreSQL + Redis");
    let read = inst.api_key("read")?;

    report!("## Two instances on one PostgreSQL and one Redis");
    report!();
    report!(
        "Both servers pinned to CPU 0; load generator, agents and clients on CPU 1; PostgreSQL and Redis unpinned."
    );
    report!();
    throughput(&loadgen, &inst, &peer, &read, a.duration)?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        sse_delivery(&a_url, &b_url, &read, a.calls).await?;
        commands(&inst, &a_url, &b_url, a.calls).await?;
        spread(&inst, &peer, a.agents).await
    })?;
    rt.shutdown_timeout(Duration::from_secs(5));
    drop(peer);
    Ok(())
}

/// Starts one closed-loop run of the load generator against `url`, in sessions opened with
/// `init`.
fn loadgen_run(
    loadgen: &std::path::Path,
    (body, init): (&std::path::Path, &std::path::Path),
    url: &str,
    key: &str,
    conc: u32,
    duration: u64,
) -> std::process::Child {
    let mut cmd = pinned(1);
    cmd.arg(loadgen)
        .args(["--url", &format!("{url}/mcp"), "--body"])
        .arg(body)
        .args(["-c", &conc.to_string(), "-d", &duration.to_string()])
        .args(["--warmup", "1", "--threads", "1", "--init"])
        .arg(init)
        .args(["-H", "MCP-Protocol-Version: 2025-06-18"])
        .args(["-H", &format!("X-API-Key: {key}")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    cmd.spawn().expect("the load generator starts")
}

fn loadgen_result(child: std::process::Child) -> anyhow::Result<Value> {
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).context("loadgen's JSON line")
}

fn throughput(
    loadgen: &std::path::Path,
    inst: &Instance,
    peer: &super::instance::Peer,
    key: &str,
    duration: u64,
) -> anyhow::Result<()> {
    let body = inst.log.with_file_name("query_devices.json");
    std::fs::write(
        &body,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query_devices","arguments":{"status":"offline","limit":25}}}"#,
    )?;
    let init = inst.log.with_file_name("initialize.json");
    std::fs::write(
        &init,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench-cluster","version":"0"}}}"#,
    )?;
    let files = (body.as_path(), init.as_path());
    let pids = [inst.pid(), peer.pid()];
    report!("### MCP calls, `query_devices` in sessions, concurrency 50");
    report!();
    report!("| instances | req/s | p50 ms | p99 ms | errors | server CPU µs/req (both) |");
    report!("|---|---:|---:|---:|---:|---:|");
    for round in 0..2 {
        for two in [false, true] {
            let before: u64 = pids.iter().map(|p| cpu_micros(*p).unwrap_or(0)).sum();
            let results = if two {
                let a = loadgen_run(loadgen, files, &inst.base_url, key, 25, duration);
                let b = loadgen_run(loadgen, files, &peer.base_url, key, 25, duration);
                let (a, b) = (loadgen_result(a), loadgen_result(b));
                vec![a?, b?]
            } else {
                let a = loadgen_run(loadgen, files, &inst.base_url, key, 50, duration);
                vec![loadgen_result(a)?]
            };
            let after: u64 = pids.iter().map(|p| cpu_micros(*p).unwrap_or(0)).sum();
            let rps: f64 = results
                .iter()
                .map(|r| r["rps"].as_f64().unwrap_or(0.0))
                .sum();
            let max = |k: &str| {
                results
                    .iter()
                    .map(|r| r[k].as_f64().unwrap_or(0.0))
                    .fold(0.0, f64::max)
            };
            let errors: u64 = results
                .iter()
                .map(|r| r["errors"].as_u64().unwrap_or(0))
                .sum();
            let ok = rps * duration as f64 * (duration + 1) as f64 / duration as f64;
            let per_req = if ok > 0.0 {
                (after - before) as f64 / ok
            } else {
                0.0
            };
            report!(
                "| {} (round {}) | {rps:.0} | {:.3} | {:.3} | {errors} | {per_req:.1} |",
                if two { "two (25 + 25)" } else { "one" },
                round + 1,
                max("p50_ms"),
                max("p99_ms"),
            );
        }
    }
    report!();
    report!("p50/p99 of the two-instance rows: the slower instance's.");
    report!();
    Ok(())
}

/// The next `data:` of an SSE response, with its event name.
async fn next_event(
    resp: &mut reqwest::Response,
    buf: &mut String,
) -> anyhow::Result<(String, String)> {
    loop {
        if let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let mut name = "message".to_owned();
            let mut data = String::new();
            for line in event.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if !data.is_empty() {
                return Ok((name, data));
            }
            continue;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .context("no SSE event within 10 s")??
            .context("the SSE stream ended")?;
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

async fn sse_delivery(a: &str, b: &str, key: &str, calls: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let mut stream = http
        .get(format!("{a}/api/v1/mcp/sse"))
        .header("x-api-key", key)
        .header("accept", "text/event-stream")
        .send()
        .await?;
    let mut buf = String::new();
    let (_, endpoint) = next_event(&mut stream, &mut buf).await?;
    let path = endpoint
        .split_once("/api/")
        .map(|(_, p)| format!("/api/{p}"))
        .context("the endpoint event names no path")?;
    report!("### Legacy SSE: a stream on A, messages POSTed to A or to B");
    report!();
    report!("| POST to | messages | p50 ms | p99 ms |");
    report!("|---|---:|---:|---:|");
    let mut id = 0u64;
    for (label, base) in [("A (same instance)", a), ("B (relayed through Redis)", b)] {
        let mut latencies = Vec::with_capacity(calls);
        for _ in 0..calls {
            id += 1;
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let t = Instant::now();
            let r = http
                .post(format!("{base}{path}"))
                .header("x-api-key", key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            if r.status() != 202 {
                bail!("POST to {label}: HTTP {}", r.status());
            }
            loop {
                let (_, data) = next_event(&mut stream, &mut buf).await?;
                let v: Value = serde_json::from_str(&data)?;
                if v["id"].as_u64() == Some(id) {
                    break;
                }
            }
            latencies.push(t.elapsed());
        }
        latencies.sort();
        report!(
            "| {label} | {calls} | {:.3} | {:.3} |",
            pct_ms(&latencies, 50.0),
            pct_ms(&latencies, 99.0)
        );
    }
    report!();
    Ok(())
}

async fn commands(inst: &Instance, a: &str, b: &str, calls: usize) -> anyhow::Result<()> {
    let agents = 20;
    let cfg = sim_config(inst, a, agents)?;
    let (enrolled, _) = sim::enroll(&cfg).await?;
    let fleet = sim::connect(&cfg, enrolled).await;
    if fleet.connected.is_empty() {
        bail!("no agent connected: {:?}", fleet.connect.errors);
    }
    let devices = Arc::new(fleet.connected.clone());
    let users = calls.div_ceil(CALLS_PER_USER) * 2;
    let keys = tokio::task::block_in_place(|| super::fleet::command_keys(inst, users))?;
    report!(
        "### Agent commands: {agents} agents connected to A, `manage_services list` asked on A or on B"
    );
    report!();
    report!("| asked on | calls | p50 ms | p99 ms | errors |");
    report!("|---|---:|---:|---:|---:|");
    let mut keys = keys.into_iter();
    for (label, base) in [("A (same instance)", a), ("B (through the cluster bus)", b)] {
        let mcp = sim::Mcp::new(base)?;
        let mut latencies = Vec::with_capacity(calls);
        let mut errors = 0;
        let mut key = String::new();
        for i in 0..calls {
            if i % CALLS_PER_USER == 0 {
                key = keys.next().context("out of command users")?;
            }
            let device = devices[i % devices.len()];
            match mcp.list_services(&key, device).await {
                Ok(d) => latencies.push(d),
                Err(_) => errors += 1,
            }
        }
        latencies.sort();
        report!(
            "| {label} | {calls} | {:.3} | {:.3} | {errors} |",
            pct_ms(&latencies, 50.0),
            pct_ms(&latencies, 99.0)
        );
    }
    report!();
    fleet.stop(Duration::from_secs(5)).await;
    Ok(())
}

fn sim_config(inst: &Instance, base_url: &str, agents: usize) -> anyhow::Result<SimConfig> {
    let enrollment_key = tokio::task::block_in_place(|| inst.enrollment_key(agents))?;
    Ok(SimConfig {
        base_url: base_url.to_owned(),
        agents,
        enrollment_key,
        enroll_concurrency: 32,
        connect_concurrency: 64,
        samples_per_batch: 1,
        heartbeat_every: Duration::from_secs(60),
        metrics_every: Duration::from_secs(30),
    })
}

async fn spread(
    inst: &Instance,
    peer: &super::instance::Peer,
    agents: usize,
) -> anyhow::Result<()> {
    let half = agents / 2;
    let rss0 = (rss_kb(inst.pid())?, rss_kb(peer.pid())?);
    let mut fleets = Vec::new();
    let t = Instant::now();
    let mut connected = 0;
    for (base, n) in [(&inst.base_url, half), (&peer.base_url, agents - half)] {
        let cfg = sim_config(inst, base, n)?;
        let (enrolled, _) = sim::enroll(&cfg).await?;
        let fleet = sim::connect(&cfg, enrolled).await;
        connected += fleet.connected.len();
        fleets.push(fleet);
    }
    let elapsed = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = (rss_kb(inst.pid())?, rss_kb(peer.pid())?);
    let mb = |kb: u64| kb as f64 / 1024.0;
    report!("### {agents} agents spread over both instances");
    report!();
    report!(
        "{connected} of {agents} connected (enrolled and connected in {:.1} s). Resident memory: A {:.0} → {:.0} MiB, B {:.0} → {:.0} MiB ({:.1} KiB per agent on average).",
        elapsed.as_secs_f64(),
        mb(rss0.0),
        mb(rss1.0),
        mb(rss0.1),
        mb(rss1.1),
        (rss1.0 + rss1.1).saturating_sub(rss0.0 + rss0.1) as f64 / connected.max(1) as f64,
    );
    report!();
    for f in fleets {
        f.stop(Duration::from_secs(5)).await;
    }
    Ok(())
}
