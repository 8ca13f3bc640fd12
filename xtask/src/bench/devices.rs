//! `cargo xtask bench devices [--devices N] [--concurrency C] [--duration SECS]
//! [--database sqlite|postgres|both] [--audit-commit sync|async|both]`:
//! `tools/call query_devices {"status":"offline","limit":25}`
//! through Breeze's whole MCP pipeline over a seeded fleet, beside the rmcp peer answering the
//! same call from memory over its own 10,000 devices, and the same peer's echo (the
//! reference of the pipeline's aims on PostgreSQL, #25).
//!
//! Breeze runs `breeze demo` (no local agent) with N synthetic devices from
//! `breeze devices seed` (a fifth offline). The read key is used; the transport's message limit
//! is raised through its setting. Every server runs on CPU 0 and the perf-peers load generator
//! on CPU 1; server CPU per request is read from `/proc`, and on PostgreSQL the CPU of the
//! backends serving the database is reported too (PostgreSQL itself is not pinned).
//!
//! `--audit-commit` (PostgreSQL) runs Breeze with `BREEZE_AUDIT_SYNCHRONOUS_COMMIT` true
//! (`sync`, the default setting), false (`async`, the opt-out), or each in turn (`both`): the
//! price of every request's audit record surviving a PostgreSQL crash.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::Context;
use serde_json::Value;

use super::{
    Running, build_breeze, build_peers, cpu_micros,
    instance::{Db, Instance, free_port},
    perf_peers, pinned, run as sh, workspace_root,
};

const QUERY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query_devices","arguments":{"status":"offline","limit":25}}}"#;

pub(super) struct Row {
    pub(super) name: String,
    pub(super) rps: f64,
    pub(super) p50: f64,
    pub(super) p99: f64,
    pub(super) errors: u64,
    pub(super) cpu_us: f64,
    /// CPU of the PostgreSQL backends serving the run, per request.
    pub(super) db_cpu_us: Option<f64>,
    pub(super) bytes: u64,
}

/// One closed-loop run of the load generator against `url`.
#[allow(clippy::too_many_arguments)]
pub(super) fn measure(
    name: String,
    loadgen: &Path,
    pid: u32,
    url: &str,
    body: &Path,
    headers: &[String],
    conc: usize,
    duration: u64,
    db_pids: &dyn Fn() -> Vec<u32>,
) -> anyhow::Result<Row> {
    let warmup = 2;
    let mut cmd = pinned(1);
    cmd.arg(loadgen)
        .args(["--url", url, "--body"])
        .arg(body)
        .args([
            "-c",
            &conc.to_string(),
            "-d",
            &duration.to_string(),
            "--warmup",
            &warmup.to_string(),
            "--threads",
            "1",
            "-H",
            "MCP-Protocol-Version: 2025-06-18",
        ]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let db_cpu = |pids: &[u32]| -> BTreeMap<u32, u64> {
        pids.iter()
            .filter_map(|&p| cpu_micros(p).ok().map(|c| (p, c)))
            .collect()
    };
    let db_before = db_cpu(&db_pids());
    let before = cpu_micros(pid)?;
    let out = sh(&mut cmd)?;
    let after = cpu_micros(pid)?;
    // Backends that appeared during the run count from zero.
    let db_after = db_cpu(&db_pids());
    let db_used: u64 = db_after
        .iter()
        .map(|(p, c)| c.saturating_sub(db_before.get(p).copied().unwrap_or(0)))
        .sum();
    let line: Value = serde_json::from_str(out.lines().last().unwrap_or("{}"))?;
    let rps = line["rps"].as_f64().unwrap_or(0.0);
    // CPU over warm-up + run, divided by the requests of both (same rate assumed).
    let reqs = rps * (duration + warmup) as f64;
    Ok(Row {
        name,
        rps,
        p50: line["p50_ms"].as_f64().unwrap_or(0.0),
        p99: line["p99_ms"].as_f64().unwrap_or(0.0),
        errors: line["errors"].as_u64().unwrap_or(0),
        cpu_us: if reqs > 0.0 {
            after.saturating_sub(before) as f64 / reqs
        } else {
            0.0
        },
        db_cpu_us: (!db_after.is_empty() && reqs > 0.0).then(|| db_used as f64 / reqs),
        bytes: line["avg_resp_bytes"].as_u64().unwrap_or(0),
    })
}

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &[
            "--devices",
            "--concurrency",
            "--duration",
            "--database",
            "--audit-commit",
        ],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let devices = num("--devices", 10_000)?;
    let conc = num("--concurrency", 50)? as usize;
    let duration = num("--duration", 20)?;
    let dbs = match f.get("--database").map_or("sqlite", String::as_str) {
        "both" => vec![Db::Sqlite, Db::Postgres],
        other => vec![Db::parse(other)?],
    };
    let commits: Vec<(&str, &str)> = match f.get("--audit-commit").map_or("sync", String::as_str) {
        "sync" => vec![("sync", "true")],
        "async" => vec![("async", "false")],
        "both" => vec![("sync", "true"), ("async", "false")],
        other => anyhow::bail!("--audit-commit: {other:?} is not sync, async or both"),
    };

    let root = workspace_root()?;
    let peers = perf_peers(&root)?;
    eprintln!("building (release): loadgen, peer-rmcp, breeze…");
    build_peers(&peers, &["loadgen", "peer-rmcp"])?;
    let bin = build_breeze(&root)?;
    let dir = super::profile().1;
    let loadgen = peers.join("target").join(dir).join("loadgen");
    let body_dir = root.join("target/bench/bodies");
    std::fs::create_dir_all(&body_dir)?;
    let body: PathBuf = body_dir.join("query_offline.json");
    std::fs::write(&body, QUERY)?;

    let mut rows = Vec::new();
    {
        let port = free_port()?;
        let peer = Running::start(
            pinned(0)
                .arg(peers.join("target").join(dir).join("peer-rmcp"))
                .args(["--port", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            port,
        )
        .context("starting peer-rmcp")?;
        eprintln!("measuring peer-rmcp…");
        rows.push(measure(
            "peer-rmcp (memory, 10,000 devices)".into(),
            &loadgen,
            peer.0.id(),
            &format!("http://127.0.0.1:{port}/mcp"),
            &body,
            &[],
            conc,
            duration,
            &Vec::new,
        )?);
        // The same peer's echo: what #25's pipeline aims are stated against.
        rows.push(measure(
            "peer-rmcp (echo)".into(),
            &loadgen,
            peer.0.id(),
            &format!("http://127.0.0.1:{port}/mcp"),
            &peers.join("bodies/echo.json"),
            &[],
            conc,
            duration,
            &Vec::new,
        )?);
    }
    let runs = dbs.into_iter().flat_map(|db| {
        // SQLite has no audit commit mode to choose.
        let modes = if db == Db::Postgres {
            commits.clone()
        } else {
            vec![("", "")]
        };
        modes.into_iter().map(move |m| (db, m))
    });
    for (db, (commit, sync)) in runs {
        let mut env = vec![("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "1000000000")];
        if !sync.is_empty() {
            env.push(("BREEZE_AUDIT_SYNCHRONOUS_COMMIT", sync));
        }
        let inst = Instance::start(&root, &bin, db, 0, &env)?;
        inst.cli(&[
            "devices",
            "seed",
            "--org",
            "acme",
            "--count",
            &devices.to_string(),
        ])?;
        let total = inst.count("SELECT count(*) FROM devices")?;
        let offline = inst.count("SELECT count(*) FROM devices WHERE status = 'offline'")?;
        eprintln!("measuring breeze on {} ({total} devices)…", db.name());
        let key = inst.api_key("read")?;
        let commit = if commit.is_empty() {
            String::new()
        } else {
            format!(", audit commit {commit}")
        };
        rows.push(measure(
            format!(
                "breeze pipeline, {}{commit} ({total} devices, {offline} offline)",
                db.name()
            ),
            &loadgen,
            inst.pid(),
            &format!("{}/mcp", inst.base_url),
            &body,
            &[format!("X-API-Key: {key}")],
            conc,
            duration,
            &|| inst.db_backend_pids(),
        )?);
        let log = inst.log_summary(5);
        if !log.is_empty() {
            eprintln!("breeze ({}) server log, most frequent:", db.name());
            for (n, l) in log {
                eprintln!("  {n:>6}× {l}");
            }
        }
    }

    report!();
    report!(
        "## query_devices {{status: offline, limit: 25}}, concurrency {conc}, {duration} s (+2 s warm-up)"
    );
    report!();
    report!(
        "| server | req/s | p50 ms | p99 ms | errors | server CPU µs/req | PostgreSQL CPU µs/req | reply bytes |"
    );
    report!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        report!(
            "| {} | {:.0} | {:.3} | {:.3} | {} | {:.1} | {} | {} |",
            r.name,
            r.rps,
            r.p50,
            r.p99,
            r.errors,
            r.cpu_us,
            r.db_cpu_us.map_or("-".to_owned(), |c| format!("{c:.1}")),
            r.bytes
        );
    }
    if let [peer, echo, breezes @ ..] = rows.as_slice() {
        report!();
        for b in breezes {
            report!(
                "{} vs peer-rmcp: req/s {:.2}×, p50 {:.2}×, p99 {:.2}×, CPU/req {:.2}×; \
                 vs its echo: req/s {:.2}×",
                b.name,
                b.rps / peer.rps.max(1e-9),
                b.p50 / peer.p50.max(1e-9),
                b.p99 / peer.p99.max(1e-9),
                b.cpu_us / peer.cpu_us.max(1e-9),
                b.rps / echo.rps.max(1e-9)
            );
        }
    }
    Ok(())
}
