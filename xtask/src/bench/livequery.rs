//! `cargo xtask bench livequery [--agents N] [--rounds R] [--database sqlite|postgres]`: a live
//! query over a simulated fleet.
//!
//! A scratch `breeze demo` runs pinned to CPU 0; this process, pinned to CPU 1, enrolls N
//! simulated agents (`sim`, the fleet benchmark's: the real wire contract, answering a
//! `live_query` command at once with one listening port) and opens their sockets. Then, R
//! times, it calls `run_live_query action=run` (the listening-ports question, the whole
//! organization) over MCP with a progress token and reads the streamed answer as it arrives:
//! the time to the first row (the first progress notification carrying one), to each
//! device's answer (p50, p99) and to the last answer (the call's result), with the server's
//! CPU time over the call. The aim: the last answer from 10,000 online agents within 2 s.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::{
    build_breeze, cpu_micros,
    fleet::{pin_self, raise_nofile},
    instance::{Db, Instance},
    sim::{self, SimConfig, pct_ms},
    workspace_root,
};

struct Args {
    agents: usize,
    rounds: usize,
    db: Db,
}

fn parse(args: &[&str]) -> anyhow::Result<Args> {
    let f = super::flags(args, &["--agents", "--rounds", "--database"])?;
    let num = |name: &str, default: usize| -> anyhow::Result<usize> {
        f.get(name).map_or(Ok(default), |v| {
            v.parse()
                .with_context(|| format!("{name}: {v:?} is not a number"))
        })
    };
    let a = Args {
        agents: num("--agents", 10_000)?,
        rounds: num("--rounds", 3)?,
        db: Db::parse(f.get("--database").map_or("sqlite", String::as_str))?,
    };
    if a.agents == 0 || a.rounds == 0 || a.rounds > 15 {
        bail!(
            "--agents must be positive and --rounds 1 to 15 (the tool's limit is 20 calls per 5 minutes)"
        );
    }
    Ok(a)
}

/// One query as the client saw it.
struct Round {
    answered: u64,
    first_row: Option<Duration>,
    last: Duration,
    /// Each device's answer, from the call's start.
    arrivals: Vec<Duration>,
    server_elapsed_ms: u64,
    server_first_row_ms: Option<u64>,
    server_cpu: Duration,
}

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let a = parse(args)?;
    let root = workspace_root()?;
    if let Some(done) = super::rerun_in_release(&root, "livequery", args) {
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
    let key = inst.api_key("read")?;
    let pinned = pin_self(1);
    let cfg = SimConfig {
        base_url: inst.base_url.clone(),
        agents: a.agents,
        enrollment_key,
        enroll_concurrency: 32,
        connect_concurrency: 64,
        samples_per_batch: 1,
        // Quiet agents: the query is what is measured.
        heartbeat_every: Duration::from_secs(60),
        metrics_every: Duration::from_secs(600),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let rounds = rt.block_on(drive(&inst, &cfg, &key, &a))?;
    report!(
        "{} simulated agents on one socket each ({}), server pinned to one core{}; open files {nofile}.",
        a.agents,
        a.db.name(),
        if pinned {
            ", clients on the other"
        } else {
            " (pinning unavailable)"
        }
    );
    report!();
    report!(
        "| round | answered | first row | p50 answer | p99 answer | last answer | server's own elapsed | server CPU |"
    );
    report!("|---|---|---|---|---|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        let mut arrivals = r.arrivals.clone();
        arrivals.sort_unstable();
        report!(
            "| {} | {} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {} ms (first row {}) | {:.2} s ({:.0}% of the call) |",
            i + 1,
            r.answered,
            r.first_row.map_or("none".into(), |d| format!(
                "{:.0} ms",
                d.as_secs_f64() * 1e3
            )),
            pct_ms(&arrivals, 50.0),
            pct_ms(&arrivals, 99.0),
            r.last.as_secs_f64() * 1e3,
            r.server_elapsed_ms,
            r.server_first_row_ms
                .map_or("none".into(), |ms| format!("{ms} ms")),
            r.server_cpu.as_secs_f64(),
            r.server_cpu.as_secs_f64() / r.last.as_secs_f64().max(1e-9) * 100.0,
        );
    }
    let best = rounds.iter().map(|r| r.last).min().unwrap_or(Duration::MAX);
    report!();
    report!(
        "Aim: the last answer from {} online agents within 2 s — {} (best round {:.0} ms).",
        a.agents,
        if best <= Duration::from_secs(2) {
            "met"
        } else {
            "not met"
        },
        best.as_secs_f64() * 1e3
    );
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok(())
}

async fn drive(
    inst: &Instance,
    cfg: &SimConfig,
    key: &str,
    a: &Args,
) -> anyhow::Result<Vec<Round>> {
    eprintln!("enrolling {} agents…", cfg.agents);
    let (agents, enroll) = sim::enroll(cfg).await?;
    if agents.is_empty() {
        bail!("no agent enrolled: {:?}", enroll.errors);
    }
    eprintln!("opening {} sockets…", agents.len());
    let fleet = sim::connect(cfg, agents).await;
    if fleet.connected.is_empty() {
        bail!("no socket opened: {:?}", fleet.connect.errors);
    }
    let connected = fleet.connected.len() as u64;
    // Every connected agent counted online (its socket's welcome marks it) before measuring.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let online = tokio::task::block_in_place(|| {
            inst.count("SELECT count(*) FROM devices WHERE status = 'online'")
        })?;
        if online >= connected {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("only {online} of {connected} devices online; measuring anyway");
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The device directory follows status changes within its staleness bound.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .tcp_nodelay(true)
        .build()?;
    let mut rounds = Vec::new();
    for i in 0..a.rounds {
        eprintln!("live query {} of {}…", i + 1, a.rounds);
        rounds.push(one_query(&http, inst, key).await?);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    fleet.stop(Duration::from_secs(5)).await;
    Ok(rounds)
}

/// One `run_live_query` call, read as it streams.
async fn one_query(http: &reqwest::Client, inst: &Instance, key: &str) -> anyhow::Result<Round> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "run_live_query",
            "arguments": {
                "action": "run",
                "question": { "question": "listening_ports" },
                "deviceTimeoutSecs": 30, "timeoutSecs": 60, "limit": 0,
            },
            "_meta": { "progressToken": "bench" },
        }
    });
    let pid = inst.pid();
    let cpu0 = cpu_micros(pid)?;
    let t = Instant::now();
    let mut resp = http
        .post(format!("{}/mcp", inst.base_url))
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_string())
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("HTTP {}", resp.status());
    }
    let mut buf = String::new();
    let mut first_row = None;
    let mut arrivals = Vec::new();
    let mut result: Option<Value> = None;
    let mut last = Duration::ZERO;
    while let Some(chunk) = resp.chunk().await? {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find('\n') {
            let line: String = buf.drain(..=end).collect();
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let Ok(msg) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            if msg["method"] == "notifications/progress" {
                let at = t.elapsed();
                let answer: Value = msg["params"]["message"]
                    .as_str()
                    .and_then(|m| serde_json::from_str(m).ok())
                    .unwrap_or(Value::Null);
                if answer["rowCount"].as_u64().unwrap_or(0) > 0 && first_row.is_none() {
                    first_row = Some(at);
                }
                arrivals.push(at);
            } else if msg.get("result").is_some() || msg.get("error").is_some() {
                last = t.elapsed();
                result = Some(msg);
            }
        }
    }
    if result.is_none() {
        // A plain JSON answer (no stream).
        if let Ok(msg) = serde_json::from_str::<Value>(buf.trim()) {
            last = t.elapsed();
            result = Some(msg);
        }
    }
    let server_cpu = Duration::from_micros(cpu_micros(pid)?.saturating_sub(cpu0));
    let msg = result.context("no answer to the call")?;
    if let Some(e) = msg.get("error") {
        bail!("JSON-RPC error {e}");
    }
    let out = &msg["result"]["structuredContent"];
    if msg["result"]["isError"] == true {
        bail!("tool error: {}", msg["result"]["content"][0]["text"]);
    }
    Ok(Round {
        answered: out["query"]["answered"].as_u64().unwrap_or(0),
        first_row,
        last,
        arrivals,
        server_elapsed_ms: out["elapsedMs"].as_u64().unwrap_or(0),
        server_first_row_ms: out["firstRowMs"].as_u64(),
        server_cpu,
    })
}
