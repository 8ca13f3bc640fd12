//! Faults with real processes: two `breeze` processes on one PostgreSQL database and one Redis,
//! an instance killed with SIGKILL while it holds a legacy SSE stream and the socket of an agent
//! running a command, a rolling restart under a steady caller, a PostgreSQL server stopped
//! and started under a running instance, and the fault suite: kill -9, Redis restarted empty
//! and PostgreSQL crashed, one after another under load, with the counts CI prints.
//!
//! Two small TCP proxies stand in for the load balancer: one sends every connection to the first
//! instance while it is up and to the second after (the agent and the SSE stream start on the
//! instance that dies), the other alternates per connection (each request of this test is a
//! connection of its own, so consecutive requests land on different instances).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    time::Duration,
};

use serde_json::{Value, json};

mod common;
use common::{
    PrivateRedis, Server, breeze, eventually, export_lines, free_port, http_get, local_device,
    mcp_tool,
};

/// The role the instances connect as: it owns the test's database but cannot bypass
/// row-level security, as a deployment that follows the README connects.
const ROLE: &str = "breeze_ci";

/// A database of this test's own, dropped at the end.
struct Database {
    name: String,
}

impl Database {
    /// `breeze_<label>_<pid>`: one per test, the tests of this file run at once.
    fn create(label: &str) -> Self {
        let name = format!("breeze_{label}_{}", std::process::id());
        let db = Self { name };
        db.psql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", db.name));
        // Another test may be creating the role at the same moment.
        psql(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN \
             CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOBYPASSRLS; END IF; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        ));
        db.psql(&format!("CREATE DATABASE {} OWNER {ROLE}", db.name));
        db
    }

    fn psql(&self, sql: &str) {
        assert!(psql(sql), "psql: {sql}");
    }

    fn url(&self) -> String {
        format!("postgres://{ROLE}@127.0.0.1:5432/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        psql(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// Runs `sql` on the machine's PostgreSQL as `postgres`; whether it succeeded.
fn psql(sql: &str) -> bool {
    Command::new("psql")
        .args([
            "-q",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("psql (PostgreSQL's client) on PATH")
        .success()
}

/// How a proxy picks an instance for a new connection (it skips one that refuses).
#[derive(Clone, Copy)]
enum Pick {
    /// The first that accepts, in order.
    First,
    /// The next in turn.
    Alternate,
}

/// A TCP proxy on a free port over `upstreams`; its threads live as long as the test. Like a
/// load balancer it health-checks every upstream (`/readyz`, every 50 ms) and sends new
/// connections to ready ones, to any that accepts when none is ready.
fn proxy(upstreams: Vec<u16>, pick: Pick) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let turn = Arc::new(AtomicUsize::new(0));
    let ready: Arc<Vec<AtomicBool>> =
        Arc::new(upstreams.iter().map(|_| AtomicBool::new(true)).collect());
    {
        let (ready, upstreams) = (ready.clone(), upstreams.clone());
        std::thread::spawn(move || {
            loop {
                for (i, p) in upstreams.iter().enumerate() {
                    let ok = http_get(*p, "/readyz", None).is_ok_and(|(status, _)| status == 200);
                    ready[i].store(ok, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
    }
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let start = match pick {
                Pick::First => 0,
                Pick::Alternate => turn.fetch_add(1, Ordering::Relaxed),
            };
            let order: Vec<usize> = (0..upstreams.len())
                .map(|i| (start + i) % upstreams.len())
                .collect();
            let upstream = order
                .iter()
                .filter(|i| ready[**i].load(Ordering::SeqCst))
                .chain(order.iter())
                .find_map(|i| TcpStream::connect(("127.0.0.1", upstreams[*i])).ok());
            let Some(upstream) = upstream else { continue };
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
                (upstream, client),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    port
}

/// A POST through `port` with a request id; returns the status and the body.
fn post(port: u16, path: &str, key: &str, request_id: &str, body: &Value) -> (u16, String) {
    let (status, _, body) = post_in(port, path, key, request_id, None, body);
    (status, body)
}

/// A POST with a request id, in session `session` when given; returns the status, the raw
/// response headers and the body.
fn post_in(
    port: u16,
    path: &str,
    key: &str,
    request_id: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, String, String) {
    let body = body.to_string();
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new(), String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
    let sent = write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {key}\r\nX-Request-Id: {request_id}\r\n\
         {session}Content-Type: application/json\r\nAccept: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if sent.is_err() {
        return (0, String::new(), String::new());
    }
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    (status, head.to_owned(), body.to_owned())
}

/// A legacy SSE stream: its POST path and its `message` events as they come.
struct LegacyStream {
    path: String,
    events: mpsc::Receiver<Value>,
    ended: Arc<AtomicBool>,
}

impl LegacyStream {
    fn open(port: u16, key: &str) -> Self {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "GET /api/v1/mcp/sse HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {key}\r\n\
             Accept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let (tx, events) = mpsc::channel();
        let (path_tx, path_rx) = mpsc::channel();
        let ended = Arc::new(AtomicBool::new(false));
        let end = ended.clone();
        std::thread::spawn(move || {
            let mut event = String::new();
            // Chunked transfer: the chunk-size lines are not `event:`/`data:` lines, so
            // reading line by line and keeping only those is enough here.
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                if let Some(name) = line.strip_prefix("event:") {
                    event = name.trim().to_owned();
                } else if let Some(data) = line.strip_prefix("data:") {
                    let data = data.trim();
                    if event == "endpoint" {
                        let path = data.split_once("/api/").map(|(_, p)| format!("/api/{p}"));
                        let _ = path_tx.send(path.unwrap());
                    } else if let Ok(v) = serde_json::from_str::<Value>(data) {
                        let _ = tx.send(v);
                    }
                }
            }
            end.store(true, Ordering::SeqCst);
        });
        let path = path_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Self {
            path,
            events,
            ended,
        }
    }

    /// Sends `message` through `port` and waits for its reply on the stream.
    fn ask(&self, port: u16, key: &str, request_id: &str, message: &Value) -> Value {
        let (status, body) = post(port, &self.path, key, request_id, message);
        assert_eq!(status, 202, "{body}");
        loop {
            let reply = self.events.recv_timeout(Duration::from_secs(10)).unwrap();
            if reply["id"] == message["id"] {
                return reply;
            }
        }
    }
}

fn initialize(id: i64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": { "name": "fault-test", "version": "1" } } })
}

/// The `Mcp-Session-Id` of raw response headers.
fn session_id(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {head}"))
}

fn tools_list(id: i64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list" })
}

/// Runs `breeze` with `env` in `dir`; its standard output.
fn run(dir: &Path, env: &[(&str, String)], args: &[&str]) -> String {
    let out = breeze(dir)
        .envs(env.iter().map(|(k, v)| (k, v.as_str())))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "breeze {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Two instances on a database of their own and Redis, behind a balancing proxy that is their
/// public URL: `breeze demo` (A, which seeds the demo tenant) and `breeze serve` (B).
struct Pair {
    dir: tempfile::TempDir,
    _db: Database,
    port_a: u16,
    port_b: u16,
    balanced: u16,
    /// The settings both instances and the admin CLI run with.
    env: Vec<(&'static str, String)>,
    demo: Value,
}

impl Pair {
    /// Starts both with `extra` settings; `label` names the database and the Redis prefix.
    fn start(label: &str, extra: &[(&'static str, &str)]) -> (Pair, Server, Server) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(label);
        let (port_a, port_b) = (free_port(), free_port());
        let balanced = proxy(vec![port_a, port_b], Pick::Alternate);
        let mut env = vec![
            ("DATABASE_URL", db.url()),
            ("REDIS_URL", "redis://127.0.0.1:6379".to_owned()),
            (
                "BREEZE_REDIS_PREFIX",
                format!("{label}{}:", std::process::id()),
            ),
            ("BREEZE_PUBLIC_URL", format!("http://127.0.0.1:{balanced}")),
            ("BREEZE_DEMO_AGENT", "false".to_owned()),
        ];
        env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let mut pair = Pair {
            dir,
            _db: db,
            port_a,
            port_b,
            balanced,
            env,
            demo: Value::Null,
        };
        let a = pair.server('a', "demo");
        let b = pair.server('b', "serve");
        let demo = pair.dir.path().join("a/breeze-data/demo.json");
        pair.demo = serde_json::from_slice(&std::fs::read(demo).unwrap()).unwrap();
        (pair, a, b)
    }

    /// Starts instance `which` ('a' or 'b') with `command` in its own directory.
    fn server(&self, which: char, command: &str) -> Server {
        let dir = self.dir.path().join(which.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let port = if which == 'a' {
            self.port_a
        } else {
            self.port_b
        };
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Server::start_with(&dir, port, command, &env)
    }

    /// One of the demo's API keys: `read`, `write` or `execute`.
    fn key(&self, which: &str) -> String {
        self.demo["api_keys"][which].as_str().unwrap().to_owned()
    }
}

/// An agent process enrolled through `server`, until dropped.
struct Agent(Child);

impl Agent {
    /// Enrolls an agent in the demo's `acme` through the server on `port` and runs it, its
    /// configuration under `dir/agent`.
    fn enroll(dir: &Path, env: &[(&str, String)], port: u16) -> Agent {
        let key: Value = serde_json::from_str(&run(
            dir,
            env,
            &[
                "enrollment-keys",
                "create",
                "--org",
                "acme",
                "--site",
                "Headquarters",
                "--json",
            ],
        ))
        .unwrap();
        let agent_config = dir.join("agent/agent.json");
        let agent_config = agent_config.to_str().unwrap();
        let server_url = format!("http://127.0.0.1:{port}");
        run(
            dir,
            &[],
            &[
                "agent",
                "enroll",
                "--server",
                &server_url,
                "--key",
                key["key"].as_str().unwrap(),
                "--config",
                agent_config,
            ],
        );
        Agent(
            breeze(dir)
                .args(["agent", "run", "--config", agent_config])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_instance_killed_mid_command_loses_no_command_stream_or_audit_record() {
    let (pair, a, b) = Pair::start("fault", &[]);
    let (dir, env, port_b, balanced) = (pair.dir.path(), &pair.env, pair.port_b, pair.balanced);
    let sticky = proxy(vec![pair.port_a, port_b], Pick::First);
    let (execute, read) = (pair.key("execute"), pair.key("read"));

    // A script that counts its runs on the device, and an agent on the first instance.
    let marker = dir.join("runs.txt");
    let script = dir.join("slow.sh");
    std::fs::write(
        &script,
        format!(
            "sleep 4\necho run >> {}\necho finished-once\n",
            marker.display()
        ),
    )
    .unwrap();
    let script_path = script.to_str().unwrap();
    run(
        dir,
        env,
        &[
            "scripts",
            "add",
            "--org",
            "acme",
            "--name",
            "slow",
            "--language",
            "sh",
            "--file",
            script_path,
        ],
    );
    let _agent = Agent::enroll(dir, env, sticky);
    let device = local_device(balanced, &read);

    // A legacy SSE stream on the first instance; its messages land on either.
    let stream = LegacyStream::open(sticky, &read);
    let mut answered = Vec::new();
    for (n, message) in [initialize(1), tools_list(2), tools_list(3)]
        .iter()
        .enumerate()
    {
        let rid = format!("fault-before-{n}");
        let reply = stream.ask(balanced, &read, &rid, message);
        assert!(reply.get("result").is_some(), "{reply}");
        answered.push(rid);
    }

    // The script, asked on the second instance, approved, sent to the agent on the first.
    let call = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "run_script", "arguments": { "scriptId": "slow", "deviceIds": [device] } } });
    let running = std::thread::spawn(move || post(port_b, "/mcp", &execute, "fault-run", &call));
    let mut approval = String::new();
    eventually(20, "the approval request", || {
        let out = run(dir, env, &["approvals", "list", "--org", "acme"]);
        approval = out.split_whitespace().next().unwrap_or_default().to_owned();
        !approval.is_empty()
    });
    run(
        dir,
        env,
        &[
            "approvals",
            "approve",
            &approval,
            "--user",
            "admin@breeze.local",
        ],
    );
    std::thread::sleep(Duration::from_millis(1500)); // the script is sleeping on the device
    let mut a = a;
    a.0.kill().unwrap(); // SIGKILL: no drain, no goodbye to the agent or the stream
    a.0.wait().unwrap();

    // The call finishes on the second instance once the agent reconnects there and reports.
    let (status, body) = running.join().unwrap();
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    let result = reply["result"].to_string();
    assert!(
        result.contains("finished-once"),
        "the command completed: {result}"
    );
    answered.push("fault-run".to_owned());
    let runs = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(runs.lines().count(), 1, "the script ran exactly once");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().lines().count(),
        1,
        "and was not sent again"
    );

    // The stream died with its instance; the client reconnects through the balancer.
    eventually(10, "the stream to end with its instance", || {
        stream.ended.load(Ordering::SeqCst)
    });
    let stream = LegacyStream::open(sticky, &read);
    for (n, message) in [initialize(1), tools_list(2)].iter().enumerate() {
        let rid = format!("fault-after-{n}");
        let reply = stream.ask(balanced, &read, &rid, message);
        assert!(reply.get("result").is_some(), "{reply}");
        answered.push(rid);
    }
    let after = mcp_tool(balanced, &read, "query_devices", json!({}));
    assert_eq!(after["structuredContent"]["devices"][0]["status"], "online");

    // Every request that was answered, before the kill or after, is in the audit log.
    let export = dir.join("audit.jsonl.gz");
    run(
        dir,
        env,
        &["audit", "export", "--out", export.to_str().unwrap()],
    );
    let ids: Vec<String> = export_lines(&std::fs::read(&export).unwrap())
        .iter()
        .filter_map(|r| r["request_id"].as_str().map(str::to_owned))
        .collect();
    for rid in &answered {
        assert!(ids.contains(rid), "{rid} answered but not audited");
    }
    b.stop();
}

/// SIGTERM, then wait for the exit (a drained shutdown).
/// Session caps and message rate limits count every instance: through a balancer alternating
/// between two, a key's sixth session is refused although neither instance holds more than
/// three, and a key's messages beyond its rate are refused although each instance saw about
/// half of them.
#[test]
fn session_caps_and_rate_limits_count_every_instance() {
    const RATE: usize = 40;
    let (pair, _a, _b) = Pair::start(
        "caps",
        &[("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", &RATE.to_string())],
    );
    let (balanced, read, execute) = (pair.balanced, pair.key("read"), pair.key("execute"));
    let initialize = |key: &str, n: i64| {
        post_in(
            balanced,
            "/mcp",
            key,
            &format!("caps-init-{n}"),
            None,
            &json!({
            "jsonrpc": "2.0", "id": n, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": { "name": "caps", "version": "1" } } }),
        )
    };

    // The per-key cap is 5 (none of these sessions is idle yet, so none is ended for room).
    for n in 0..5 {
        let (status, _, body) = initialize(&read, n);
        assert_eq!(status, 200, "session {n}: {body}");
    }
    let (status, _, body) = initialize(&read, 5);
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("Too many active MCP sessions for this API key"),
        "{body}"
    );

    // One session of another key, then messages in it beyond its rate, alternating instances.
    let (status, head, body) = initialize(&execute, 10);
    assert_eq!(status, 200, "{body}");
    let session = session_id(&head);
    let statuses: Vec<u16> = (0..RATE + 10)
        .map(|n| {
            post_in(
                balanced,
                "/mcp",
                &execute,
                &format!("caps-list-{n}"),
                Some(&session),
                &tools_list(100 + n as i64),
            )
            .0
        })
        .collect();
    let answered = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(answered + limited, statuses.len(), "{statuses:?}");
    assert!(answered < RATE, "{answered} answered of {statuses:?}");
    assert!(limited >= 10, "{limited} refused of {statuses:?}");
}

fn terminate(server: Server) {
    server.stop();
}

#[test]
fn a_rolling_restart_fails_no_call_of_a_session() {
    let (pair, a, b) = Pair::start(
        "rolling",
        &[
            // The caller calls back to back for seconds: more than the default 120 a minute.
            ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "100000"),
            // Time for the balancer's health check to take a stopping instance out.
            ("BREEZE_SHUTDOWN_DELAY_SECONDS", "1"),
        ],
    );
    let (balanced, read) = (pair.balanced, pair.key("read"));

    let (status, head, body) = post_in(
        balanced,
        "/mcp",
        &read,
        "roll-init",
        None,
        &json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "rolling", "version": "1" } } }),
    );
    assert_eq!(status, 200, "{body}");
    let session = session_id(&head);

    // One client calls in its session without pause while each instance restarts in turn.
    let stop = Arc::new(AtomicBool::new(false));
    let caller = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0, Vec::new());
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let call = json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call",
                    "params": { "name": "query_devices", "arguments": { "limit": 1 } } });
                let rid = format!("roll-{n}");
                let (status, _, body) =
                    post_in(balanced, "/mcp", &read, &rid, Some(&session), &call);
                if status == 200 && body.contains("\"result\"") {
                    ok += 1;
                } else {
                    failed.push(format!("{status} {body}"));
                }
            }
            (ok, failed)
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    terminate(a);
    let a = pair.server('a', "serve");
    std::thread::sleep(Duration::from_secs(1));
    terminate(b);
    let b = pair.server('b', "serve");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = caller.join().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert!(ok > 20, "the caller kept calling: {ok}");
    a.stop();
    b.stop();
}

/// A PostgreSQL server of the test's own (Debian's binaries, run as the `postgres` user), on a
/// free port, to stop and start again.
struct PrivatePostgres {
    dir: tempfile::TempDir,
    port: u16,
    bin: std::path::PathBuf,
}

impl PrivatePostgres {
    fn start() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries under /usr/lib/postgresql")
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("pg_ctl").exists())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut pg = Self {
            port: free_port(),
            bin,
            dir,
        };
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(pg.dir.path())
            .status()
            .unwrap();
        pg.as_postgres(&[
            pg.bin.join("initdb").to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-D",
            data.to_str().unwrap(),
        ]);
        // The port was free when picked, but the tests of this file start servers in parallel
        // and one may have taken it since: a start that fails is retried on another port.
        for _ in 0..3 {
            if pg.try_ctl("start") {
                return pg;
            }
            pg.port = free_port();
        }
        let log = std::fs::read_to_string(pg.dir.path().join("log")).unwrap_or_default();
        panic!("pg_ctl start failed three times; its log:\n{log}");
    }

    /// Runs `args` as the `postgres` user (initdb and the server refuse root).
    fn as_postgres(&self, args: &[&str]) {
        assert!(self.try_as_postgres(args), "{args:?}");
    }

    fn try_as_postgres(&self, args: &[&str]) -> bool {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn ctl(&self, action: &str) {
        if !self.try_ctl(action) {
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            panic!("pg_ctl {action} failed; its log:\n{log}");
        }
    }

    fn try_ctl(&self, action: &str) -> bool {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("log");
        let options = format!(
            "-p {} -k {} -h 127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let mut args = vec![
            self.bin.join("pg_ctl").to_str().unwrap().to_owned(),
            "-D".into(),
            data.to_str().unwrap().to_owned(),
            "-l".into(),
            log.to_str().unwrap().to_owned(),
            "-o".into(),
            options,
            "-w".into(),
        ];
        match action {
            "stop" => args.extend(["-m".into(), "fast".into()]),
            // A crash: every server process is killed, nothing is flushed; the next start
            // recovers from the WAL.
            "crash" => args.extend(["-m".into(), "immediate".into()]),
            _ => {}
        }
        args.push(if action == "crash" { "stop" } else { action }.to_owned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.try_as_postgres(&args)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.try_ctl("stop");
    }
}

#[test]
fn a_postgresql_restart_is_503_then_recovers_without_a_restart() {
    let pg = PrivatePostgres::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let env = [
        ("DATABASE_URL", pg.url()),
        ("BREEZE_DEMO_AGENT", "false".to_owned()),
    ];
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut server = Server::start_with(dir.path(), port, "demo", &env_ref);
    let demo: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("breeze-data/demo.json")).unwrap())
            .unwrap();
    let read = demo["api_keys"]["read"].as_str().unwrap().to_owned();
    // A call that reads the database itself (`query_devices` answers from the in-memory
    // device directory, which outlives a database outage by design).
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "manage_groups", "arguments": { "action": "list" } } });
    // Readiness answers from the last probe at once, outage or not: a load balancer's check
    // never waits on the database (it used to wait out the pool's 10 s timeout).
    let ready = || {
        let started = std::time::Instant::now();
        let status = http_get(port, "/readyz", None).map_or(0, |(status, _)| status);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "/readyz took {took:?}");
        status
    };
    assert_eq!(ready(), 200);
    assert_eq!(post(port, "/mcp", &read, "pg-before", &call).0, 200);

    pg.ctl("stop");
    eventually(10, "/readyz to report the database", || ready() == 503);
    let (status, body) = post(port, "/mcp", &read, "pg-down", &call);
    assert!(
        status == 503 || body.contains("\"retryable\":true"),
        "a call while the database is down is refused as retryable: {status} {body}"
    );
    // `query_devices` answers from memory, and its audit record waits in this instance's
    // journal (`<data dir>/audit-journal`) until the database is back.
    let from_memory = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "query_devices", "arguments": {} } });
    let (status, body) = post(port, "/mcp", &read, "pg-down-read", &from_memory);
    assert!(
        status == 200 && body.contains("\"result\""),
        "a read whose audit record is journaled is answered: {status} {body}"
    );
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "the server is still running"
    );

    pg.ctl("start");
    eventually(30, "/readyz to recover", || ready() == 200);
    let (status, body) = post(port, "/mcp", &read, "pg-after", &call);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"result\""), "{body}");
    // The journaled record reached the database once it was back.
    let env_owned: Vec<(&str, String)> = env.to_vec();
    eventually(10, "the journaled record to be moved in", || {
        let out = dir.path().join("audit.jsonl.gz");
        run(
            dir.path(),
            &env_owned,
            &["audit", "export", "--out", out.to_str().unwrap()],
        );
        export_lines(&std::fs::read(&out).unwrap())
            .iter()
            .any(|r| r["request_id"] == "pg-down-read")
    });
    server.stop();
}

/// How one call of the fault suite ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// A result (and so an audit record owed).
    Answered,
    /// Refused with an answer the client can act on: 429/503 with `Retry-After`, a JSON-RPC
    /// or tool error.
    Refused,
    /// The session was gone (404): the client had to initialize again.
    SessionLost,
    /// An answer the client cannot act on (a status without `Retry-After`, an empty body).
    Failed,
    /// No answer at all: the connection died with the request in it.
    Lost,
}

/// Under a steady load of three sessions through the balancer, one fault after another — an
/// instance killed with SIGKILL and started again, Redis restarted empty, PostgreSQL crashed
/// (`pg_ctl stop -m immediate`) and started — loses nothing beyond the calls in flight at the
/// kill: every answered call is audited, no session is lost, and each refusal is an answer the
/// client can act on. The counts go to stderr and, when `CI_FAULT_REPORT` names a file, to
/// that file (CI prints it).
#[test]
fn under_load_one_fault_after_another_loses_nothing_in_flight_aside() {
    const CALLERS: usize = 3;
    let pg = PrivatePostgres::start();
    let redis_port = free_port();
    let mut redis = PrivateRedis::start(redis_port);
    let (pair, a, b) = Pair::start(
        "faults",
        &[
            ("DATABASE_URL", &pg.url()),
            ("REDIS_URL", &redis.url()),
            ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "100000"),
            ("BREEZE_SHUTDOWN_DELAY_SECONDS", "1"),
        ],
    );
    let (balanced, read) = (pair.balanced, pair.key("read"));

    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..CALLERS)
        .map(|t| {
            let (stop, read) = (stop.clone(), read.clone());
            std::thread::spawn(move || {
                let open = |n: usize| {
                    let rid = format!("faults-{t}-init-{n}");
                    let (status, head, _) =
                        post_in(balanced, "/mcp", &read, &rid, None, &initialize(0));
                    (status == 200).then(|| session_id(&head))
                };
                let mut session = None;
                let mut ended = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let Some(id) = session.clone().or_else(|| open(n)) else {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    session = Some(id.clone());
                    n += 1;
                    let call = json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": { "name": "query_devices", "arguments": { "limit": 1 } } });
                    let rid = format!("faults-{t}-{n}");
                    let (status, head, body) =
                        post_in(balanced, "/mcp", &read, &rid, Some(&id), &call);
                    let retry_after = head.to_ascii_lowercase().contains("retry-after:");
                    let how = match status {
                        200 if body.contains("\"result\"")
                            && !body.contains("\"isError\":true") =>
                        {
                            Ended::Answered
                        }
                        200 => Ended::Refused,
                        429 | 503 if retry_after => Ended::Refused,
                        404 => {
                            session = None;
                            Ended::SessionLost
                        }
                        0 => Ended::Lost,
                        _ => Ended::Failed,
                    };
                    ended.push((rid, how, status));
                    std::thread::sleep(Duration::from_millis(20));
                }
                ended
            })
        })
        .collect();

    std::thread::sleep(Duration::from_secs(2));
    let mut a = a;
    a.0.kill().unwrap(); // SIGKILL: whatever it held in flight dies with it
    a.0.wait().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let a = pair.server('a', "serve");
    std::thread::sleep(Duration::from_secs(2));

    redis.stop(); // and started again empty: it keeps nothing on disk
    std::thread::sleep(Duration::from_millis(500));
    redis = PrivateRedis::start(redis_port);
    std::thread::sleep(Duration::from_secs(3));

    pg.ctl("crash");
    std::thread::sleep(Duration::from_secs(1));
    pg.ctl("start");
    eventually(30, "both instances ready again", || {
        [pair.port_a, pair.port_b]
            .iter()
            .all(|p| http_get(*p, "/readyz", None).map(|r| r.0).ok() == Some(200))
    });
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let ended: Vec<(String, Ended, u16)> = callers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();

    let count = |how: Ended| ended.iter().filter(|(_, h, _)| *h == how).count();
    let answered: Vec<&String> = ended
        .iter()
        .filter(|(_, h, _)| *h == Ended::Answered)
        .map(|(rid, _, _)| rid)
        .collect();
    // Every answered call is audited, the ones answered around the crash included.
    let export = pair.dir.path().join("faults-audit.jsonl.gz");
    let mut audited = 0;
    eventually(30, "every answered call in the audit log", || {
        run(
            pair.dir.path(),
            &pair.env,
            &["audit", "export", "--out", export.to_str().unwrap()],
        );
        let ids: std::collections::HashSet<String> = export_lines(&std::fs::read(&export).unwrap())
            .iter()
            .filter_map(|r| r["request_id"].as_str().map(str::to_owned))
            .collect();
        audited = answered.iter().filter(|rid| ids.contains(**rid)).count();
        audited == answered.len()
    });
    let report = format!(
        "fault suite (kill -9 of an instance, Redis restarted empty, PostgreSQL crashed): \
         sent {}, answered {}, refused with an answer {}, failed {}, sessions lost {}, \
         lost in flight {}, audited {audited} of {} answered",
        ended.len(),
        answered.len(),
        count(Ended::Refused),
        count(Ended::Failed),
        count(Ended::SessionLost),
        count(Ended::Lost),
        answered.len(),
    );
    eprintln!("{report}");
    if let Some(path) = std::env::var_os("CI_FAULT_REPORT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{report}").unwrap();
    }
    let lost: Vec<_> = ended
        .iter()
        .filter(|(_, h, _)| matches!(h, Ended::Lost | Ended::SessionLost | Ended::Failed))
        .collect();
    assert!(
        count(Ended::Lost) <= CALLERS
            && count(Ended::SessionLost) == 0
            && count(Ended::Failed) == 0,
        "at most one call per caller in flight at the kill, no session, every other call \
         answered: {lost:?}"
    );
    assert!(answered.len() > 100, "the callers kept calling: {report}");
    drop(redis);
    a.stop();
    b.stop();
}

/// A configuration-policy change made with the CLI — a process that holds no agent socket —
/// reaches an agent connected to a running server at once (the change is announced on the
/// cluster bus; the instance holding the socket pushes it), well before the agent's next
/// heartbeat (60 s) or reconnection: assigning, updating and deleting a policy each show in
/// what the real agent reports it applied.
#[test]
fn a_configuration_policy_changed_with_the_cli_reaches_a_connected_agent() {
    let (pair, _a, _b) = Pair::start("cpolicy", &[]);
    let (dir, env, balanced, read) = (pair.dir.path(), &pair.env, pair.balanced, pair.key("read"));
    // The agent holds its socket to the first instance; the CLI talks to neither.
    let _agent = Agent::enroll(dir, env, pair.port_a);
    let device = local_device(balanced, &read);
    let applied = || {
        let r = mcp_tool(
            balanced,
            &read,
            "get_effective_configuration",
            json!({ "deviceId": device }),
        );
        let out = &r["structuredContent"];
        (
            out["applied"]["values"]["metricsIntervalSecs"].clone(),
            out["inSync"] == true,
        )
    };
    let mut before = Value::Null;
    eventually(30, "the agent's first applied report", || {
        let (interval, in_sync) = applied();
        before = interval;
        in_sync
    });
    let wait_for = |secs: u64, what: &str| {
        eventually(20, what, || applied() == (json!(secs), true));
    };

    let created = run(
        dir,
        env,
        &[
            "config-policies",
            "create",
            "--org",
            "acme",
            "--name",
            "Fast",
            "--feature",
            r#"monitoring={"metricIntervalSeconds":15}"#,
        ],
    );
    let id = created.split_whitespace().nth(1).unwrap().to_owned();
    let assigned = run(
        dir,
        env,
        &["config-policies", "assign", "--org", "acme", &id],
    );
    assert!(assigned.contains("1 device(s) affected"), "{assigned}");
    wait_for(15, "the assigned policy on the agent");

    run(
        dir,
        env,
        &[
            "config-policies",
            "update",
            "--org",
            "acme",
            &id,
            "--feature",
            r#"monitoring={"metricIntervalSeconds":20}"#,
        ],
    );
    wait_for(20, "the updated policy on the agent");

    run(
        dir,
        env,
        &["config-policies", "delete", "--org", "acme", &id],
    );
    eventually(20, "the agent back on its former configuration", || {
        applied() == (before.clone(), true)
    });
}
