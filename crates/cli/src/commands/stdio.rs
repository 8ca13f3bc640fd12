//! `breeze mcp stdio`: MCP over stdin/stdout, forwarded to a remote Breeze over Streamable HTTP.
//!
//! For clients configured with a `"command"` (Claude Desktop style): each JSON-RPC line read
//! from stdin is POSTed to `<BREEZE_URL>/mcp` with the API key — concurrently, so a
//! `notifications/cancelled` reaches Breeze while the call it cancels still runs; each message
//! that comes back — a JSON body or the events of an SSE reply, progress and log notifications
//! included — is written to stdout as one line the moment it arrives. The session id from
//! `initialize` is kept and sent back.
//! Diagnostics go to stderr only: stdout belongs to the protocol.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader},
    sync::mpsc,
    task::JoinSet,
};

/// Where and how to connect.
#[derive(Debug, Clone)]
pub(crate) struct StdioTarget {
    pub(crate) endpoint: String,
    pub(crate) api_key: String,
}

impl StdioTarget {
    /// Reads `BREEZE_URL` and `BREEZE_API_KEY` (or `AUTH_TOKEN`) from `env`, unless flags gave them.
    #[cfg(test)]
    pub(crate) fn from_env(
        env: &BTreeMap<String, String>,
        url: Option<String>,
        key: Option<String>,
    ) -> anyhow::Result<Self> {
        Self::with_catalog(env, url, key, None, None)
    }

    /// Reads `BREEZE_URL` and the API key as `from_env` does, with the catalog (`full` or
    /// `consolidated`) and the toolsets the bridge asks for: passed on as `?catalog=` /
    /// `?toolsets=` on every request, so the session keeps them.
    pub(crate) fn with_catalog(
        env: &BTreeMap<String, String>,
        url: Option<String>,
        key: Option<String>,
        catalog: Option<String>,
        toolsets: Option<String>,
    ) -> anyhow::Result<Self> {
        let url = url.or_else(|| env.get("BREEZE_URL").cloned()).context(
            "BREEZE_URL is required: the Breeze server to forward to, e.g. https://rmm.example.com",
        )?;
        let url = url.trim();
        // A query in the URL (`…/mcp?catalog=consolidated`) is kept as given.
        let (url, given_query) = match url.split_once('?') {
            Some((u, q)) => (u.trim_end_matches('/'), Some(q)),
            None => (url.trim_end_matches('/'), None),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("invalid BREEZE_URL: {url:?} (expected http(s)://host[:port])");
        }
        let mut endpoint = if url.ends_with("/mcp") {
            url.to_owned()
        } else {
            format!("{url}/mcp")
        };
        let mut query: Vec<String> = given_query
            .filter(|q| !q.is_empty())
            .map(str::to_owned)
            .into_iter()
            .collect();
        if let Some(c) = catalog {
            let c = c.trim().to_ascii_lowercase();
            if !matches!(c.as_str(), "full" | "consolidated") {
                bail!("invalid --catalog: {c:?} (valid: full, consolidated)");
            }
            query.push(format!("catalog={c}"));
        }
        if let Some(t) = toolsets {
            let t = t.trim();
            if t.is_empty()
                || !t
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, ',' | '_' | '-'))
            {
                bail!(
                    "invalid --toolsets: {t:?} (expected comma-separated domain names, e.g. devices,scripts)"
                );
            }
            query.push(format!("toolsets={t}"));
        }
        if !query.is_empty() {
            endpoint.push('?');
            endpoint.push_str(&query.join("&"));
        }
        let api_key = key
            .or_else(|| env.get("BREEZE_API_KEY").cloned())
            .or_else(|| env.get("AUTH_TOKEN").cloned())
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty())
            .context("BREEZE_API_KEY (or AUTH_TOKEN) is required: an API key starting with brz_")?;
        Ok(Self { endpoint, api_key })
    }
}

/// Runs the bridge until stdin closes.
pub(crate) async fn run(target: StdioTarget) -> anyhow::Result<()> {
    bridge(
        target,
        BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
    )
    .await
}

/// What the requests of one bridge share: the session and revision `initialize` gave.
#[derive(Default)]
struct Shared {
    session: Option<String>,
    protocol: Option<String>,
}

/// The bridge between `input` (JSON-RPC lines) and `output`. `initialize` is forwarded alone
/// (what follows needs its session); every other line is POSTed at once, concurrently with the
/// calls still running, so a `notifications/cancelled` reaches Breeze while the call it cancels
/// waits. What comes back is written a line at a time as it arrives — a progress notification
/// while its call still runs. When `input` ends, the calls in flight finish and the session
/// is ended.
pub(crate) async fn bridge(
    target: StdioTarget,
    input: impl AsyncBufRead + Unpin,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .build()
        .context("cannot build the HTTP client")?;
    let target = Arc::new(target);
    let shared = Arc::new(Mutex::new(Shared::default()));
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(m) = out_rx.recv().await {
            let mut text = m.to_string();
            text.push('\n');
            output
                .write_all(text.as_bytes())
                .await
                .context("writing stdout")?;
            output.flush().await.context("writing stdout")?;
        }
        anyhow::Ok(())
    });
    let mut calls = JoinSet::new();
    let mut lines = input.lines();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<Value>(&line).ok();
        let is_initialize = parsed
            .as_ref()
            .is_some_and(|v| v.get("method").and_then(Value::as_str) == Some("initialize"));
        let call = forward(
            http.clone(),
            target.clone(),
            shared.clone(),
            line,
            parsed.and_then(|v| v.get("id").cloned()),
            out_tx.clone(),
        );
        if is_initialize {
            call.await;
        } else {
            calls.spawn(call);
        }
    }
    while calls.join_next().await.is_some() {}
    drop(out_tx);
    writer.await.context("the stdout writer stopped")??;
    // The client went away: end the session instead of leaving it to the idle timeout (it
    // counts against the key's session cap until then).
    let session = lock(&shared).session.clone();
    if let Some(s) = session {
        let ended = http
            .delete(&target.endpoint)
            .header("x-api-key", &target.api_key)
            .header("mcp-session-id", s)
            .send()
            .await;
        if let Err(e) = ended {
            eprintln!("breeze mcp stdio: could not end the session: {e}");
        }
    }
    Ok(())
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// POSTs one line and sends each message of the answer to `out` as it arrives.
async fn forward(
    http: reqwest::Client,
    target: Arc<StdioTarget>,
    shared: Arc<Mutex<Shared>>,
    line: String,
    request_id: Option<Value>,
    out: mpsc::UnboundedSender<Value>,
) {
    let emit = |m: Value| {
        if let Some(v) = m.pointer("/result/protocolVersion").and_then(Value::as_str) {
            lock(&shared).protocol = Some(v.to_owned());
        }
        // Transport errors without an id cannot be matched by the client: they answer its
        // request, when the line was one. A notification gets no answer, not even an error
        // (JSON-RPC 2.0 §4.1): the reason goes to stderr, where the client's log shows it.
        let m = match (m.get("id").is_some_and(Value::is_null), &request_id) {
            (true, Some(id)) => {
                let mut m = m;
                m["id"] = id.clone();
                m
            }
            (true, None) => {
                let why = m.pointer("/error/message").and_then(Value::as_str);
                eprintln!(
                    "breeze mcp stdio: Breeze refused a notification: {}",
                    why.unwrap_or("no reason given")
                );
                return;
            }
            (false, _) => m,
        };
        let _ = out.send(m);
    };
    let mut req = http
        .post(&target.endpoint)
        .header("x-api-key", &target.api_key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(line);
    {
        let shared = lock(&shared);
        if let Some(s) = &shared.session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(p) = &shared.protocol {
            req = req.header("mcp-protocol-version", p);
        }
    }
    let mut resp = match req.send().await {
        Ok(resp) => resp,
        Err(e) => {
            eprintln!("breeze mcp stdio: {e}");
            emit(error_for(
                request_id.as_ref(),
                &format!("cannot reach Breeze at {}: {e}", target.endpoint),
            ));
            return;
        }
    };
    if let Some(s) = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        lock(&shared).session = Some(s.to_owned());
    }
    let is_sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let status = resp.status();
    if is_sse {
        // Each event as soon as its block is complete.
        let mut pending = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    pending.extend(chunk.iter().filter(|b| **b != b'\r'));
                    while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
                        let block: Vec<u8> = pending.drain(..end + 2).collect();
                        sse_messages(&String::from_utf8_lossy(&block))
                            .into_iter()
                            .for_each(&emit);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    eprintln!("breeze mcp stdio: the stream broke off: {e}");
                    break;
                }
            }
        }
        sse_messages(&String::from_utf8_lossy(&pending))
            .into_iter()
            .for_each(&emit);
        return;
    }
    let body = resp.bytes().await.unwrap_or_default();
    if status == reqwest::StatusCode::ACCEPTED || body.is_empty() {
        return;
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(items)) => items.into_iter().for_each(emit),
        Ok(v) => emit(v),
        Err(_) => emit(error_for(
            request_id.as_ref(),
            &format!("HTTP {status} from Breeze"),
        )),
    }
}

/// A JSON-RPC error answering `id` (nothing to answer for notifications).
fn error_for(id: Option<&Value>, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id.cloned().unwrap_or(Value::Null), "error": { "code": -32603, "message": message } })
}

/// The JSON messages carried by the `data:` lines of an SSE body.
fn sse_messages(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|block| {
            let data: Vec<&str> = block
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                None
            } else {
                serde_json::from_str(&data.join("\n")).ok()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_choice_rides_on_the_endpoint() {
        let env = BTreeMap::new();
        let key = || Some("brz_x".to_owned());
        let t = StdioTarget::with_catalog(
            &env,
            Some("https://h/".into()),
            key(),
            Some("Consolidated".into()),
            Some("devices,scripts".into()),
        )
        .unwrap();
        assert_eq!(
            t.endpoint,
            "https://h/mcp?catalog=consolidated&toolsets=devices,scripts"
        );
        // A query already in the URL is kept, and the path still gets /mcp.
        let t = StdioTarget::with_catalog(
            &env,
            Some("https://h?catalog=full".into()),
            key(),
            None,
            None,
        )
        .unwrap();
        assert_eq!(t.endpoint, "https://h/mcp?catalog=full");
        let e = StdioTarget::with_catalog(
            &env,
            Some("https://h".into()),
            key(),
            Some("tiny".into()),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("full, consolidated"), "{e}");
        assert!(
            StdioTarget::with_catalog(
                &env,
                Some("https://h".into()),
                key(),
                None,
                Some("a&b=c".into())
            )
            .is_err()
        );
    }

    #[test]
    fn target_from_env() {
        let env: BTreeMap<String, String> = [
            ("BREEZE_URL", "https://rmm.example.com/"),
            ("AUTH_TOKEN", "brz_x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let t = StdioTarget::from_env(&env, None, None).unwrap();
        assert_eq!(
            (t.endpoint.as_str(), t.api_key.as_str()),
            ("https://rmm.example.com/mcp", "brz_x")
        );
        assert!(
            StdioTarget::from_env(&BTreeMap::new(), None, None)
                .unwrap_err()
                .to_string()
                .contains("BREEZE_URL")
        );
        let no_key =
            StdioTarget::from_env(&BTreeMap::new(), Some("http://h".into()), None).unwrap_err();
        assert!(no_key.to_string().contains("BREEZE_API_KEY"));
    }

    /// Reads one HTTP request: headers, then the body they announce.
    async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
        use tokio::io::AsyncReadExt;
        let mut request = Vec::new();
        loop {
            let mut buf = [0u8; 4096];
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    return text;
                }
            }
        }
    }

    /// A notification refused by Breeze (a wrong key: 401 with an id-less JSON-RPC error) gets
    /// no answer on stdout; a request refused the same way gets the error under its own id.
    #[tokio::test]
    async fn a_refused_notification_is_not_answered() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (mut socket, _) = listener.accept().await.unwrap();
                read_request(&mut socket).await;
                let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Invalid API key"}}"#;
                let head = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                socket.write_all(head.as_bytes()).await.unwrap();
                socket.write_all(body.as_bytes()).await.unwrap();
            }
        });
        let target = StdioTarget {
            endpoint: format!("{url}/mcp"),
            api_key: "brz_wrong".into(),
        };
        let (mut client_in, bridge_in) = tokio::io::duplex(4096);
        let (bridge_out, client_out) = tokio::io::duplex(4096);
        let bridge = tokio::spawn(bridge(target, BufReader::new(bridge_in), bridge_out));
        client_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await
            .unwrap();
        client_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}\n")
            .await
            .unwrap();
        drop(client_in);
        let mut out = BufReader::new(client_out).lines();
        let mut lines = Vec::new();
        while let Some(line) = out.next_line().await.unwrap() {
            lines.push(serde_json::from_str::<Value>(&line).unwrap());
        }
        bridge.await.unwrap().unwrap();
        server.await.unwrap();
        assert_eq!(lines.len(), 1, "only the request is answered: {lines:?}");
        assert_eq!(lines[0]["id"], 7);
        assert_eq!(lines[0]["error"]["message"], "Invalid API key");
    }

    /// A server that answers a `tools/call` with an SSE stream: a progress notification at
    /// once, the result only when `release` fires.
    async fn slow_server(
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_request(&mut socket).await;
            socket
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
                      event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":64,\"total\":256,\"message\":\"scanned 64 of 256 hosts\"}}\n\n",
                )
                .await
                .unwrap();
            socket.flush().await.unwrap();
            let _ = release.await;
            socket
                .write_all(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"content\":[]}}\n\n")
                .await
                .unwrap();
        });
        (url, server)
    }

    /// A progress notification is written out while its call still runs, before the result.
    #[tokio::test]
    async fn progress_is_forwarded_before_the_result() {
        let (release_tx, release_rx) = tokio::sync::oneshot::channel();
        let (url, server) = slow_server(release_rx).await;
        let target = StdioTarget {
            endpoint: format!("{url}/mcp"),
            api_key: "brz_test".into(),
        };
        let (mut client_in, bridge_in) = tokio::io::duplex(4096);
        let (bridge_out, client_out) = tokio::io::duplex(4096);
        let bridge = tokio::spawn(bridge(target, BufReader::new(bridge_in), bridge_out));
        client_in
            .write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"network_discovery\",\"_meta\":{\"progressToken\":\"p\"}}}\n",
            )
            .await
            .unwrap();
        let mut out = BufReader::new(client_out).lines();
        let first = tokio::time::timeout(std::time::Duration::from_secs(10), out.next_line())
            .await
            .expect("the progress is written while the call runs")
            .unwrap()
            .unwrap();
        let first: Value = serde_json::from_str(&first).unwrap();
        assert_eq!(first["method"], "notifications/progress");
        assert_eq!(first["params"]["message"], "scanned 64 of 256 hosts");
        release_tx.send(()).unwrap();
        let second: Value = serde_json::from_str(&out.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(second["id"], 5);
        assert!(second["result"].is_object());
        drop(client_in);
        bridge.await.unwrap().unwrap();
        server.await.unwrap();
    }

    #[test]
    fn parses_sse_bodies() {
        let body =
            "event: message\ndata: {\"a\":1}\n\n: ping\n\nevent: message\ndata: {\"b\":2}\n\n";
        assert_eq!(sse_messages(body), vec![json!({"a":1}), json!({"b":2})]);
    }
}
