//! Helpers shared by the `breeze` binary's end-to-end tests: the binary with a clean
//! environment, a server process that is healthy before it is used, and minimal HTTP.
#![allow(dead_code)] // each test binary uses its own subset

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

pub(crate) fn breeze(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_breeze"));
    c.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("BREEZE_LOG", "warn");
    c
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A minimal HTTP/1.1 GET; returns status and parsed JSON body.
pub(crate) fn http_get(
    port: u16,
    path: &str,
    api_key: Option<&str>,
) -> std::io::Result<(u16, Value)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let key = api_key
        .map(|k| format!("X-API-Key: {k}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{key}Connection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    // The server answers with a Content-Length body (no chunking) for these small JSON replies.
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// A minimal HTTP/1.1 POST of a JSON-RPC `tools/call` to `/mcp`; returns the result.
pub(crate) fn mcp_tool(port: u16, api_key: &str, tool: &str, args: Value) -> Value {
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": tool, "arguments": args } })
    .to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {api_key}\r\n\
         Content-Type: application/json\r\nAccept: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v["result"].clone()
}

/// Polls `check` every 250 ms for up to `secs` seconds.
pub(crate) fn eventually(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The id of the demo's local device once its agent is online.
pub(crate) fn local_device(port: u16, key: &str) -> String {
    let mut device = String::new();
    eventually(30, "the local agent to come online", || {
        let r = mcp_tool(port, key, "query_devices", serde_json::json!({}));
        let d = &r["structuredContent"]["devices"][0];
        device = d["id"].as_str().unwrap_or_default().to_owned();
        d["status"] == "online"
    });
    device
}

pub(crate) struct Server(pub(crate) Child);

impl Server {
    pub(crate) fn start(dir: &Path, port: u16, command: &str) -> Server {
        Self::start_with(dir, port, command, &[])
    }

    pub(crate) fn start_with(dir: &Path, port: u16, command: &str, env: &[(&str, &str)]) -> Server {
        let child = breeze(dir)
            .args([command, "--listen", &format!("127.0.0.1:{port}")])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut server = Server(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(port, "/healthz", None).map(|r| r.0).ok() != Some(200) {
            if let Some(status) = server.0.try_wait().unwrap() {
                panic!("breeze {command} exited early: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "breeze {command} did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// SIGTERM, then wait: a graceful shutdown exits 0.
    pub(crate) fn stop(mut self) {
        let pid = self.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = self.0.wait().unwrap();
        assert!(
            status.success(),
            "graceful shutdown should exit 0, got {status}"
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The records of a `breeze audit export` (gzip JSON lines).
pub(crate) fn export_lines(gz: &[u8]) -> Vec<Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A Redis of the test's own on a free port (Debian's `redis-server`), keeping nothing on disk,
/// to stop and start again empty.
pub(crate) struct PrivateRedis {
    port: u16,
    child: Child,
}

impl PrivateRedis {
    pub(crate) fn start(port: u16) -> Self {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (Debian's redis-server package) on PATH");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self { port, child };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not listen on {port}");
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
