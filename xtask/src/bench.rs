//! `cargo xtask bench mcp`: Breeze's MCP server measured side by side with peer servers.
//!
//! Uses the harness in `../shared/perf-peers` (or `$BREEZE_PERF_PEERS`): its closed-loop load
//! generator drives `tools/call` over Streamable HTTP at concurrency 1 and 50 against, in turn, the
//! bare axum floor, the engine alone (the conformance fixtures server's simplest tool), the rmcp
//! peer (echo) and Breeze's whole pipeline (key authentication, scope check, schema validation,
//! rate limit, audit record) on a Tier-1 tool. Every server is pinned to CPU 0 and the load
//! generator to CPU 1; server CPU time per request is read from `/proc`. Then N idle sessions are
//! opened on Breeze to measure resident memory per session, and N legacy SSE streams
//! (`BENCH_SSE_STREAMS`, 10,000) are held through a keepalive by `scripts/sse_hold.py`.
//!
//! After the load runs the issue's aims are printed, each with its figure in every round and the
//! median over the rounds (ratios are taken within a round, between neighbouring runs: the
//! machine's speed drifts by tens of percent over minutes, so many short rounds judge an aim
//! better than a few long ones).
//!
//! Settings (environment): `BENCH_DURATION` seconds per run (6), `BENCH_ROUNDS` (5),
//! `BENCH_SESSIONS` (5000). Breeze's transport limits are raised through their environment
//! variables, never by a code path that skips them.
//!
//! Before the load runs, the size of `tools/list` per key and catalog mode is printed beside
//! its aims ([`sizes`], also `cargo xtask bench sizes` alone).
//!
//! Submodules: [`fleet`] (`cargo xtask bench fleet`, simulated agents on the device gateway)
//! and [`devices`] (`cargo xtask bench devices`, `query_devices` over a seeded fleet against
//! the rmcp peer), both on a scratch Breeze from [`instance`].

pub(crate) mod alerts;
pub(crate) mod billing;
pub(crate) mod chat;
pub(crate) mod cluster;
pub(crate) mod compliance;
pub(crate) mod devices;
pub(crate) mod fleet;
mod instance;
pub(crate) mod livequery;
mod oauth;
pub(crate) mod pages;
pub(crate) mod reports;
pub(crate) mod row_security;
mod sim;
pub(crate) mod sizes;
pub(crate) mod sources;
pub(crate) mod tools;
pub(crate) mod vulns;

use std::{
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

struct Server {
    name: &'static str,
    /// Which of the servers this is, for the aims summary.
    role: Role,
    /// The process measured (a run that shares another's server names its process here).
    pid: u32,
    /// The process, when this run owns it: held to be killed when dropped.
    _child: Option<Running>,
    url: String,
    body: PathBuf,
    headers: Vec<String>,
}

/// A server process, killed when dropped (also when the bench stops early with an error).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    /// Spawns `cmd` and waits until it accepts connections on `port`.
    fn start(cmd: &mut Command, port: u16) -> anyhow::Result<Running> {
        let mut running = Running(cmd.spawn()?);
        wait_for_port(port, &mut running.0)?;
        Ok(running)
    }

    fn id(&self) -> u32 {
        self.0.id()
    }
}

/// A benchmark's audit record for what it seeds.
fn audit(action: &str) -> breeze_core::AuditEvent {
    breeze_core::AuditEvent::new(breeze_core::Actor::system("bench"), action, "bench")
}

/// One partner with one organization ("bench-org") of `devices` online Debian devices at one
/// site, as the fleet benchmarks start from; the organization and its devices' ids.
async fn seed_fleet(
    store: &breeze_store::Store,
    devices: usize,
) -> anyhow::Result<(breeze_core::OrgId, Vec<breeze_core::DeviceId>)> {
    use breeze_core::{DeviceStatus, OsFamily};
    let partner = store.create_partner("Bench", "bench", audit("p")).await?;
    let org = store
        .create_organization(partner.id, "Bench", "bench-org", audit("o"))
        .await?;
    let o = store.org(org.id);
    let site = o.tenancy().create_site("HQ", "UTC", audit("s")).await?;
    let fleet: Vec<breeze_store::NewDevice> = (0..devices)
        .map(|i| breeze_store::NewDevice {
            site_id: site.id,
            hostname: format!("bench-{i:05}"),
            os_family: OsFamily::Linux,
            os_name: "Debian GNU/Linux".into(),
            os_version: "12".into(),
            status: DeviceStatus::Online,
            agent_version: Some("0.1.0".into()),
            last_seen_at: Some(store.clock().now()),
            tags: vec![],
        })
        .collect();
    for chunk in fleet.chunks(2_000) {
        o.devices()
            .create_devices(chunk.to_vec(), audit("device.seed"))
            .await?;
    }
    let (page, _) = o
        .devices()
        .list_devices(&breeze_store::DeviceFilter::default(), u32::MAX, 0)
        .await?;
    let ids: Vec<breeze_core::DeviceId> = page.iter().map(|d| d.id).collect();
    anyhow::ensure!(ids.len() == devices, "seeded {} of {devices}", ids.len());
    Ok((org.id, ids))
}

fn env_num(name: &str, default: u64) -> u64 {
    #[allow(clippy::disallowed_methods)] // benchmark knobs, not Breeze settings
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pinned(cpu: u32) -> Command {
    let two_cpus = std::thread::available_parallelism()
        .map(|n| n.get() >= 2)
        .unwrap_or(false);
    if two_cpus && Command::new("taskset").arg("--version").output().is_ok() {
        let mut c = Command::new("taskset");
        c.args(["-c", &cpu.to_string()]);
        c
    } else {
        // Without taskset the numbers are still printed, just noisier.
        Command::new("env")
    }
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `probe` every 100 ms until it yields a value; fails when `child` exits first or
/// `timeout` passes, naming `what` was awaited.
fn wait_until<T>(
    child: &mut Child,
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Ok(value);
        }
        if let Some(status) = child.try_wait()? {
            bail!("server exited before {what}: {status}");
        }
        if Instant::now() > deadline {
            bail!("no {what} within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for_port(port: u16, child: &mut Child) -> anyhow::Result<()> {
    wait_until(
        child,
        &format!("listening on port {port}"),
        Duration::from_secs(60),
        || TcpStream::connect(("127.0.0.1", port)).ok().map(drop),
    )
}

/// Reads the JSON file `path` once it exists and parses: `breeze demo` listens before it
/// writes `demo.json`, so an open port does not mean the file is there.
fn wait_for_json(path: &Path, child: &mut Child) -> anyhow::Result<Value> {
    wait_until(
        child,
        &format!("writing {}", path.display()),
        Duration::from_secs(30),
        || {
            let bytes = std::fs::read(path).ok()?;
            serde_json::from_slice(&bytes).ok()
        },
    )
}

/// `breeze demo` in `dir` on `port`, pinned to CPU 0, with its transport limits raised through
/// their settings and without the demo's own agent: that child inherits the pin, and its
/// inventory and patch scans (`apt-get`, in slices of up to 8 ms) would run on the server's
/// core in the middle of a measurement.
fn demo_command(bin: &Path, dir: &Path, port: u16) -> Command {
    let mut cmd = pinned(0);
    cmd.arg(bin)
        .args(["demo", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(dir)
        .env("BREEZE_DEMO_AGENT", "false")
        .env("BREEZE_LOG", "warn")
        .env("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "1000000000")
        .env("MCP_SSE_RATE_LIMIT_PER_MINUTE", "1000000000")
        .env("MCP_MAX_SESSIONS", "1000000")
        .env("MCP_MAX_SSE_SESSIONS_PER_KEY", "1000000")
        .env("MCP_MAX_SESSIONS_PER_ORG", "1000000")
        .stdout(Stdio::null());
    cmd
}

/// utime + stime of `pid`, in microseconds.
fn cpu_micros(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(ticks * 10_000) // USER_HZ is 100 on Linux
}

fn rss_kb(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

/// The workspace root (the parent of `xtask/`).
pub(crate) fn workspace_root() -> anyhow::Result<PathBuf> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace root")?
        .to_owned())
}

/// A writable copy of the perf-peers harness under `target/bench` (copied on first use from
/// `$BREEZE_PERF_PEERS` or `../shared/perf-peers`, which may be read-only).
fn perf_peers(root: &Path) -> anyhow::Result<PathBuf> {
    #[allow(clippy::disallowed_methods)] // benchmark knob
    let peers_src = std::env::var("BREEZE_PERF_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("../shared/perf-peers"));
    let work = root.join("target/bench");
    let peers = work.join("perf-peers");
    std::fs::create_dir_all(&work)?;
    if !peers.join("Cargo.toml").exists() {
        run(Command::new("cp").arg("-r").arg(&peers_src).arg(&work))
            .context("copying the perf-peers harness")?;
    }
    Ok(peers)
}

/// Builds `packages` of the perf-peers workspace at `peers` (release; debug for `bench mcp`'s
/// smoke run, see [`profile`]).
fn build_peers(peers: &Path, packages: &[&str]) -> anyhow::Result<()> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(peers)
        .arg("build")
        .args(profile().0)
        .arg("-q");
    for p in packages {
        cmd.args(["-p", p]);
    }
    run(&mut cmd).map(drop)
}

/// In a debug build of xtask, runs `cargo xtask bench <bench> <args>` again from a release build
/// (the bench's clients share the machine with the servers, so they must be optimised) and
/// returns its outcome; `None` in a release build, which goes on itself.
fn rerun_in_release(root: &Path, bench: &str, args: &[&str]) -> Option<anyhow::Result<()>> {
    if !cfg!(debug_assertions) {
        return None;
    }
    eprintln!("building xtask (release) for the clients…");
    let status = Command::new("cargo")
        .current_dir(root)
        .args([
            "run",
            "--release",
            "-q",
            "-p",
            "xtask",
            "--",
            "bench",
            bench,
        ])
        .args(args)
        .status();
    Some(match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(anyhow::anyhow!(
            "the release build of the {bench} benchmark failed: {s}"
        )),
        Err(e) => Err(e.into()),
    })
}

/// `cargo build --release -q -p breeze-cli`; returns the binary. `BENCH_BREEZE_BIN` names a
/// prebuilt binary instead (to measure a fixed build while the tree changes).
fn build_breeze(root: &Path) -> anyhow::Result<PathBuf> {
    #[allow(clippy::disallowed_methods)] // benchmark knob
    if let Ok(bin) = std::env::var("BENCH_BREEZE_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let (flags, dir) = profile();
    run(Command::new("cargo")
        .current_dir(root)
        .arg("build")
        .args(flags)
        .args(["-q", "-p", "breeze-cli"]))?;
    Ok(root.join("target").join(dir).join("breeze"))
}

/// Cargo's flags and the target directory of the profile Breeze and the peers are built with:
/// release, or with `BENCH_PROFILE=debug` a debug build (a smoke run of the bench's plumbing,
/// whose numbers mean nothing).
fn profile() -> (&'static [&'static str], &'static str) {
    #[allow(clippy::disallowed_methods)] // benchmark knob
    match std::env::var("BENCH_PROFILE").as_deref() {
        Ok("debug") => (&[], "debug"),
        _ => (&["--release"], "release"),
    }
}

pub(crate) fn mcp() -> anyhow::Result<()> {
    let root = workspace_root()?;
    let work = root.join("target/bench");
    let peers = perf_peers(&root)?;
    let duration = env_num("BENCH_DURATION", 6);
    let rounds = env_num("BENCH_ROUNDS", 5);
    let sessions = env_num("BENCH_SESSIONS", 5000);

    let (flags, dir) = profile();
    eprintln!("building ({dir}): loadgen, peers, breeze, the fixtures server…");
    build_peers(&peers, &["loadgen", "peer-rmcp", "baseline-axum"])?;
    let breeze_bin = build_breeze(&root)?;
    run(Command::new("cargo")
        .current_dir(&root)
        .arg("build")
        .args(flags)
        .args(["-q", "-p", "breeze-mcp", "--example", "conformance"]))?;
    let loadgen = peers.join("target").join(dir).join("loadgen");

    // Breeze demo in a scratch directory, limits raised through their settings.
    let demo_dir = work.join("breeze-demo");
    let _ = std::fs::remove_dir_all(&demo_dir);
    std::fs::create_dir_all(&demo_dir)?;
    let breeze_port = 3211;
    // With OAuth on, so a Bearer token's run sits beside the API key's.
    let mut breeze = Running::start(
        demo_command(&breeze_bin, &demo_dir, breeze_port).envs(oauth::DEMO_ENV),
        breeze_port,
    )?;
    let demo = wait_for_json(&demo_dir.join("breeze-data/demo.json"), &mut breeze.0)?;
    let key = demo["api_keys"]["read"]
        .as_str()
        .context("demo read key")?
        .to_owned();
    let breeze_base = format!("http://127.0.0.1:{breeze_port}");
    let mcp_url = demo["mcp_url"].as_str().context("demo mcp_url")?;
    let token = oauth::access_token(&breeze_base, mcp_url, &demo)
        .context("an OAuth access token for the Bearer run")?;
    sizes::print_sizes(
        &format!("http://127.0.0.1:{breeze_port}"),
        &sizes::demo_keys(&demo)?,
    )?;
    report!();

    let bodies = work.join("bodies");
    std::fs::create_dir_all(&bodies)?;
    let breeze_body = bodies.join("breeze_query.json");
    std::fs::write(
        &breeze_body,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query_devices","arguments":{"status":"offline","limit":25}}}"#,
    )?;
    let fixture_body = bodies.join("fixture_text.json");
    std::fs::write(
        &fixture_body,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_simple_text","arguments":{}}}"#,
    )?;

    let spawn_peer = |bin: &str, port: u16| -> anyhow::Result<Running> {
        Running::start(
            pinned(0)
                .arg(peers.join("target").join(dir).join(bin))
                .args(["--port", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            port,
        )
    };
    let fixture_port = 3212;
    let fixture = Running::start(
        pinned(0)
            .arg(root.join("target").join(dir).join("examples/conformance"))
            // Breeze's own reply mode (JSON unless the handler speaks first), as the rmcp peer
            // answers with `json_response`; the fixture's default, SSE, is the suite's setting.
            .args([&fixture_port.to_string(), "--replies", "adaptive"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        fixture_port,
    )?;

    let echo = peers.join("bodies/echo.json");
    // In this order every round: the rmcp peer runs right after the engine and right before the
    // pipeline's two runs (key and token), the figures the aims divide by its own, so that each
    // ratio compares runs a few seconds apart rather than across the machine's drift.
    let pipeline_pid = breeze.id();
    let (floor, rmcp) = (
        spawn_peer("baseline-axum", 3213)?,
        spawn_peer("peer-rmcp", 3214)?,
    );
    let servers = vec![
        Server {
            name: "baseline-axum (echo floor)",
            role: Role::Floor,
            pid: floor.id(),
            _child: Some(floor),
            url: "http://127.0.0.1:3213/mcp".into(),
            body: echo.clone(),
            headers: vec![],
        },
        Server {
            name: "breeze engine (fixture test_simple_text, JSON replies)",
            role: Role::Engine,
            pid: fixture.id(),
            _child: Some(fixture),
            url: format!("http://127.0.0.1:{fixture_port}/mcp"),
            body: fixture_body,
            headers: vec![],
        },
        Server {
            name: "peer-rmcp (echo)",
            role: Role::Rmcp,
            pid: rmcp.id(),
            _child: Some(rmcp),
            url: "http://127.0.0.1:3214/mcp".into(),
            body: echo,
            headers: vec![],
        },
        Server {
            name: "breeze pipeline (query_devices, Tier 1)",
            role: Role::Pipeline,
            pid: pipeline_pid,
            _child: Some(breeze),
            url: format!("http://127.0.0.1:{breeze_port}/mcp"),
            body: breeze_body.clone(),
            headers: vec![format!("X-API-Key: {key}")],
        },
        // The same server and call with an OAuth access token instead of the key, beside it,
        // so the two compare runs seconds apart.
        Server {
            name: "breeze pipeline, Bearer token (query_devices, Tier 1)",
            role: Role::Bearer,
            pid: pipeline_pid,
            _child: None,
            url: format!("http://127.0.0.1:{breeze_port}/mcp"),
            body: breeze_body,
            headers: vec![format!("Authorization: Bearer {token}")],
        },
    ];

    let mut runs: Vec<Run> = Vec::new();
    report!("| server | conc | req/s | p50 ms | p99 ms | errors | server CPU µs/req |");
    report!("|---|---:|---:|---:|---:|---:|---:|");
    for round in 0..rounds {
        for conc in [1u32, 50] {
            // The key and the token share one server and one database: whichever runs second
            // inherits the first's WAL checkpoint and audit backlog, so they swap places every
            // round and neither carries that cost in every sample.
            let mut order: Vec<&Server> = servers.iter().collect();
            if round % 2 == 1
                && let (Some(k), Some(b)) = (
                    order.iter().position(|s| s.role == Role::Pipeline),
                    order.iter().position(|s| s.role == Role::Bearer),
                )
            {
                order.swap(k, b);
            }
            for s in order {
                let pid = s.pid;
                let mut cmd = pinned(1);
                cmd.arg(&loadgen)
                    .args(["--url", &s.url, "--body"])
                    .arg(&s.body)
                    .args([
                        "-c",
                        &conc.to_string(),
                        "-d",
                        &duration.to_string(),
                        "--warmup",
                        "1",
                        "--threads",
                        "1",
                    ])
                    .args(["-H", "MCP-Protocol-Version: 2025-06-18"]);
                for h in &s.headers {
                    cmd.args(["-H", h]);
                }
                // Warm-up is inside the run; CPU is measured over the whole run and divided by
                // the successful requests of the measured part, a slight overestimate.
                let before = cpu_micros(pid)?;
                let out = run(&mut cmd)?;
                let after = cpu_micros(pid)?;
                let line: Value = serde_json::from_str(out.lines().last().unwrap_or("{}"))?;
                let rps = line["rps"].as_f64().unwrap_or(0.0);
                let ok = rps * duration as f64;
                let per_req = if ok > 0.0 {
                    (after - before) as f64 / (ok * (duration + 1) as f64 / duration as f64)
                } else {
                    0.0
                };
                let p99 = line["p99_ms"].as_f64().unwrap_or(0.0);
                report!(
                    "| {} | {conc} | {:.0} | {:.3} | {p99:.3} | {} | {:.1} |",
                    s.name,
                    rps,
                    line["p50_ms"].as_f64().unwrap_or(0.0),
                    line["errors"],
                    per_req
                );
                runs.push(Run {
                    role: s.role,
                    conc,
                    rps,
                    p99,
                });
            }
        }
    }

    report!();
    print_aims(&runs);

    // Idle sessions on a fresh Breeze process (memory freed by the load runs would hide them):
    // 100 warm-up sessions, then N more; initialize + initialized, never deleted.
    let mut servers = servers;
    let at = servers
        .iter()
        .position(|s| s.role == Role::Pipeline)
        .context("the Breeze server")?;
    let breeze = servers.swap_remove(at);
    drop(servers);
    let breeze_url = breeze.url.clone();
    let key_header = breeze.headers[0].clone();
    drop(breeze);
    // Measured once the demo has finished starting (it rewrites demo.json when it has): until
    // then its own allocations come and go by more than the sessions take.
    let demo_json = demo_dir.join("breeze-data/demo.json");
    std::fs::remove_file(&demo_json)?;
    let mut fresh = Running::start(
        // Freed memory goes back to the OS at once, so RSS measures what is held: otherwise
        // the allocator returns startup's garbage later, in the middle of the measurement.
        demo_command(&breeze_bin, &demo_dir, breeze_port).env("MIMALLOC_PURGE_DELAY", "0"),
        breeze_port,
    )?;
    wait_for_json(&demo_json, &mut fresh.0)?;
    let fresh = Server {
        name: "breeze",
        role: Role::Pipeline,
        pid: fresh.id(),
        _child: Some(fresh),
        url: breeze_url,
        body: PathBuf::new(),
        headers: vec![key_header],
    };
    let pid = fresh.pid;
    let init = peers.join("bodies/initialize.json");
    let open = |n: u64| -> anyhow::Result<()> {
        run(pinned(1)
            .arg(&loadgen)
            .args([
                "--url",
                &fresh.url,
                "--open-sessions",
                &n.to_string(),
                "-c",
                "10",
                "--init",
            ])
            .arg(&init)
            .args(["-H", &fresh.headers[0]]))?;
        Ok(())
    };
    open(100)?;
    std::thread::sleep(Duration::from_secs(2));
    let before = rss_kb(pid)?;
    open(sessions)?;
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_kb(pid)?;
    let per_session = (after.saturating_sub(before)) as f64 / sessions as f64;
    report!();
    report!(
        "{}: {sessions} idle sessions: RSS {before} KB → {after} KB = {per_session:.2} KB/session ({})",
        fresh.name,
        verdict(per_session <= 10.0, "aim ≤ 10 KB")
    );

    // Legacy SSE streams held open through a 30 s keepalive.
    let streams = env_num("BENCH_SSE_STREAMS", 10_000);
    if streams > 0 {
        let before = rss_kb(pid)?;
        let holder = Command::new("python3")
            .arg(root.join("xtask/scripts/sse_hold.py"))
            .args([
                "127.0.0.1",
                &breeze_port.to_string(),
                &key,
                &streams.to_string(),
                "35",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .context("python3 for the SSE stream holder")?;
        std::thread::sleep(Duration::from_secs(30));
        let during = rss_kb(pid)?;
        let out = holder.wait_with_output()?;
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let held = ["opened", "endpoint", "ping"]
            .iter()
            .all(|k| report[k].as_u64() == Some(streams))
            && report["errors"].as_u64() == Some(0);
        report!(
            "breeze: {streams} SSE streams: opened {}, endpoint events {}, keepalive pings {} within 35 s, errors {}; RSS {before} KB → {during} KB = {:.2} KB/stream ({})",
            report["opened"],
            report["endpoint"],
            report["ping"],
            report["errors"],
            (during.saturating_sub(before)) as f64 / streams as f64,
            verdict(held, "every stream held through a keepalive")
        );
    }
    Ok(())
}

/// The servers of a run, as the aims compare them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Floor,
    Rmcp,
    Engine,
    Pipeline,
    /// The pipeline's server again, called with an OAuth access token instead of the key.
    Bearer,
}

/// One load run's figures.
struct Run {
    role: Role,
    conc: u32,
    rps: f64,
    p99: f64,
}

/// The issue's aims, each as its value in every round and the median over rounds, with
/// whether the median meets it. Rounds are compared within themselves (the machine's speed
/// drifts between them), so a ratio is taken between runs of the same round.
fn print_aims(runs: &[Run]) {
    let of = |role: Role, conc: u32| -> Vec<&Run> {
        runs.iter()
            .filter(|r| r.role == role && r.conc == conc)
            .collect()
    };
    let ratios = |a: Role, b: Role, conc: u32| -> Vec<f64> {
        of(a, conc)
            .iter()
            .zip(of(b, conc))
            .map(|(a, b)| if b.rps > 0.0 { a.rps / b.rps } else { 0.0 })
            .collect()
    };
    let p99s = |role: Role| -> Vec<f64> { of(role, 50).iter().map(|r| r.p99).collect() };
    let aims = [
        Aim {
            name: "engine ≥ 2× rmcp's echo req/s (c=50)",
            values: ratios(Role::Engine, Role::Rmcp, 50),
            unit: "×",
            met: |m| m >= 2.0,
        },
        Aim {
            name: "pipeline ≥ rmcp's echo req/s (c=1)",
            values: ratios(Role::Pipeline, Role::Rmcp, 1),
            unit: "×",
            met: |m| m >= 1.0,
        },
        Aim {
            name: "pipeline ≥ rmcp's echo req/s (c=50)",
            values: ratios(Role::Pipeline, Role::Rmcp, 50),
            unit: "×",
            met: |m| m >= 1.0,
        },
        Aim {
            name: "pipeline ≥ 1.2× rmcp's echo req/s (c=50)",
            values: ratios(Role::Pipeline, Role::Rmcp, 50),
            unit: "×",
            met: |m| m >= 1.2,
        },
        Aim {
            name: "pipeline p99 ≤ 3 ms (c=50)",
            values: p99s(Role::Pipeline),
            unit: " ms",
            met: |m| m <= 3.0,
        },
        Aim {
            name: "pipeline p99 ≤ 2 ms (c=50)",
            values: p99s(Role::Pipeline),
            unit: " ms",
            met: |m| m <= 2.0,
        },
        Aim {
            name: "Bearer token ≥ 0.95× the API key's req/s (c=1)",
            values: ratios(Role::Bearer, Role::Pipeline, 1),
            unit: "×",
            met: |m| m >= 0.95,
        },
        Aim {
            name: "Bearer token ≥ 0.95× the API key's req/s (c=50)",
            values: ratios(Role::Bearer, Role::Pipeline, 50),
            unit: "×",
            met: |m| m >= 0.95,
        },
        Aim {
            name: "engine p99 ≤ 3 ms (c=50)",
            values: p99s(Role::Engine),
            unit: " ms",
            met: |m| m <= 3.0,
        },
    ];
    report!("| aim (server pinned to one core) | per round | median | |");
    report!("|---|---|---:|---|");
    for aim in aims {
        let Some(m) = median(&aim.values) else {
            continue;
        };
        let each: Vec<String> = aim
            .values
            .iter()
            .map(|v| format!("{v:.2}{}", aim.unit))
            .collect();
        report!(
            "| {} | {} | {m:.2}{} | {} |",
            aim.name,
            each.join(", "),
            aim.unit,
            verdict((aim.met)(m), "")
        );
    }
}

/// One aim of the issue: its figure in each round, and whether a median meets it.
struct Aim {
    name: &'static str,
    values: Vec<f64>,
    unit: &'static str,
    met: fn(f64) -> bool,
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
/// The value at fraction `p` (0–1) of `sorted`, nearest rank; NaN when empty.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// "met" or "NOT met", after `aim` and a colon when one is named.
fn verdict(met: bool, aim: &str) -> String {
    let word = if met { "met" } else { "NOT met" };
    if aim.is_empty() {
        word.to_owned()
    } else {
        format!("{aim}: {word}")
    }
}

/// `--name value` pairs from `args`; any other word, or a flag not in `known`, is an error.
fn flags(
    args: &[&str],
    known: &[&str],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut it = args.iter();
    while let Some(&name) = it.next() {
        if !known.contains(&name) {
            bail!(
                "unknown argument {name:?}; expected one of {}",
                known.join(", ")
            );
        }
        let value = it.next().with_context(|| format!("{name} needs a value"))?;
        out.insert(name.to_owned(), (*value).to_owned());
    }
    Ok(out)
}

/// Flag `name` of `flags` as a number, `default` when absent.
fn number(
    flags: &std::collections::BTreeMap<String, String>,
    name: &str,
    default: u64,
) -> anyhow::Result<u64> {
    flags.get(name).map_or(Ok(default), |v| {
        v.parse()
            .with_context(|| format!("{name}: {v:?} is not a number"))
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
