//! `breeze mcp stdio`: MCP over stdin/stdout, forwarded to a remote Breeze over Streamable HTTP.
//!
//! For clients configured with a `"command"` (Claude Desktop style): each JSON-RPC line read
//! from stdin is POSTed to `<BREEZE_URL>/mcp` with the API key; each message that comes back —
//! a JSON body or the events of an SSE reply, progress and log notifications included — is
//! written to stdout as one line. The session id from `initialize` is kept and sent back.
//! Diagnostics go to stderr only: stdout belongs to the protocol.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Where and how to connect.
#[derive(Debug, Clone)]
pub(crate) struct StdioTarget {
    pub(crate) endpoint: String,
    pub(crate) api_key: String,
}

impl StdioTarget {
    /// Reads `BREEZE_URL` and `BREEZE_API_KEY` (or `AUTH_TOKEN`) from `env`, unless flags gave them.
    pub(crate) fn from_env(
        env: &BTreeMap<String, String>,
        url: Option<String>,
        key: Option<String>,
    ) -> anyhow::Result<Self> {
        let url = url.or_else(|| env.get("BREEZE_URL").cloned()).context(
            "BREEZE_URL is required: the Breeze server to forward to, e.g. https://rmm.example.com",
        )?;
        let url = url.trim().trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("invalid BREEZE_URL: {url:?} (expected http(s)://host[:port])");
        }
        let endpoint = if url.ends_with("/mcp") {
            url.to_owned()
        } else {
            format!("{url}/mcp")
        };
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
    let http = reqwest::Client::builder()
        .build()
        .context("cannot build the HTTP client")?;
    let mut session: Option<String> = None;
    let mut protocol: Option<String> = None;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        if line.trim().is_empty() {
            continue;
        }
        let request_id = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v.get("id").cloned());
        let mut req = http
            .post(&target.endpoint)
            .header("x-api-key", &target.api_key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(line.clone());
        if let Some(s) = &session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(p) = &protocol {
            req = req.header("mcp-protocol-version", p);
        }
        let messages = match req.send().await {
            Ok(resp) => {
                if let Some(s) = resp
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                {
                    session = Some(s.to_owned());
                }
                let is_sse = resp
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("text/event-stream"));
                let status = resp.status();
                let body = resp.bytes().await.unwrap_or_default();
                if status == reqwest::StatusCode::ACCEPTED || body.is_empty() {
                    Vec::new()
                } else if is_sse {
                    sse_messages(&String::from_utf8_lossy(&body))
                } else {
                    match serde_json::from_slice::<Value>(&body) {
                        Ok(Value::Array(items)) => items,
                        Ok(v) => vec![v],
                        Err(_) => vec![error_for(
                            request_id.as_ref(),
                            &format!("HTTP {status} from Breeze"),
                        )],
                    }
                }
            }
            Err(e) => {
                eprintln!("breeze mcp stdio: {e}");
                vec![error_for(
                    request_id.as_ref(),
                    &format!("cannot reach Breeze at {}: {e}", target.endpoint),
                )]
            }
        };
        for m in messages {
            if let Some(v) = m.pointer("/result/protocolVersion").and_then(Value::as_str) {
                protocol = Some(v.to_owned());
            }
            // Transport errors without an id cannot be matched by the client; answer its request.
            let m = if m.get("id").is_some_and(Value::is_null) && request_id.is_some() {
                let mut m = m;
                m["id"] = request_id.clone().unwrap_or(Value::Null);
                m
            } else {
                m
            };
            let mut text = m.to_string();
            text.push('\n');
            out.write_all(text.as_bytes())
                .await
                .context("writing stdout")?;
        }
        out.flush().await.context("writing stdout")?;
    }
    // The client went away: end the session instead of leaving it to the idle timeout (it
    // counts against the key's session cap until then).
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

    #[test]
    fn parses_sse_bodies() {
        let body =
            "event: message\ndata: {\"a\":1}\n\n: ping\n\nevent: message\ndata: {\"b\":2}\n\n";
        assert_eq!(sse_messages(body), vec![json!({"a":1}), json!({"b":2})]);
    }
}
