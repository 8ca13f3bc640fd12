//! `cargo xtask bench sizes`: the byte size of `tools/list` per API key (read, write, execute)
//! and catalog mode (full, consolidated), beside issue #22's aims (consolidated ≤ 8 KB for every
//! key; an execute key's full list of `breeze_tools::BUDGETED_CATALOGUE` ≤ 40 KB), then the
//! execute key's full listing split per tool and per part (description, inputSchema,
//! outputSchema, annotations, `_meta`), so the bytes can be found. No load is generated: a `breeze demo` is started (debug build, or
//! `BENCH_BREEZE_BIN`), asked, and stopped. `cargo xtask bench mcp` prints the same table.
//!
//! Then each MCP Apps view as served (`ui://breeze/…`), in bytes and gzipped, beside issue #56's
//! aim (≤ 60 KB gzipped each).
//!
//! Sizes are of the `result` object as sent (compact JSON): what a client puts in its model's
//! context. The same figures are held by the `catalog_sizes` test in `crates/server`.

use std::{collections::BTreeMap, process::Command, time::Duration};

use anyhow::Context;
use serde_json::{Value, json};

use breeze_tools::{BUDGETED_CATALOGUE, FULL_LISTING_BUDGET};

use super::{Running, demo_command, run, wait_for_json, workspace_root};

/// The aim for the consolidated listing of every key, bytes.
const CONSOLIDATED_AIM: usize = 8 * 1024;

/// The demo's three keys by label, in the order they are reported.
pub(super) fn demo_keys(demo: &Value) -> anyhow::Result<Vec<(&'static str, String)>> {
    ["read", "write", "execute"]
        .into_iter()
        .map(|label| {
            let key = demo["api_keys"][label]
                .as_str()
                .with_context(|| format!("demo {label} key"))?;
            Ok((label, key.to_owned()))
        })
        .collect()
}

/// `cargo xtask bench sizes`.
pub(crate) fn run_sizes() -> anyhow::Result<()> {
    let root = workspace_root()?;
    #[allow(clippy::disallowed_methods)] // benchmark knob
    let bin = match std::env::var("BENCH_BREEZE_BIN") {
        Ok(bin) => bin.into(),
        Err(_) => {
            eprintln!("building (debug): breeze…");
            run(Command::new("cargo").current_dir(&root).args([
                "build",
                "-q",
                "-p",
                "breeze-cli",
            ]))?;
            root.join("target/debug/breeze")
        }
    };
    let dir = root.join("target/bench/sizes-demo");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let port = 3216;
    let mut breeze = Running::start(&mut demo_command(&bin, &dir, port), port)?;
    let demo = wait_for_json(&dir.join("breeze-data/demo.json"), &mut breeze.0)?;
    let keys = demo_keys(&demo)?;
    let base = format!("http://127.0.0.1:{port}");
    print_sizes(&base, &keys)?;
    report!();
    print_parts(&base, &keys)?;
    report!();
    print_views(&base, &keys)?;
    Ok(())
}

/// The aim for one MCP Apps view document, gzipped (issue #56).
const VIEW_GZIP_AIM: usize = 60 * 1024;

/// Prints each MCP Apps view (`ui://breeze/…`) as served to a client that negotiated the
/// extension: its bytes, and gzipped (best compression).
fn print_views(base: &str, keys: &[(&'static str, String)]) -> anyhow::Result<()> {
    use std::io::Write;
    let key = keys.first().map(|(_, k)| k).context("a key")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = format!("{base}/mcp");
    let post = |session: Option<String>, method: &'static str, params: Value| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let mut req = http
                .post(&url)
                .header("x-api-key", key)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if let Some(s) = &session {
                req = req
                    .header("mcp-session-id", s)
                    .header("mcp-protocol-version", "2025-11-25");
            }
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
            let resp = req.body(body.to_string()).send().await?;
            let session = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut v: Value = serde_json::from_str(&resp.text().await?)?;
            anyhow::ensure!(v.get("error").is_none(), "{method}: {v}");
            anyhow::Ok((session, v["result"].take()))
        }
    };
    let views: Vec<(String, String)> = rt.block_on(async {
        let (session, _) = post(
            None,
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": { "extensions": {
                    "io.modelcontextprotocol/ui": { "mimeTypes": ["text/html;profile=mcp-app"] }
                } },
                "clientInfo": { "name": "xtask-bench-sizes", "version": "1" },
            }),
        )
        .await?;
        let (_, listed) = post(session.clone(), "resources/list", json!({})).await?;
        let mut out = Vec::new();
        for r in listed["resources"].as_array().into_iter().flatten() {
            let Some(uri) = r["uri"].as_str().filter(|u| u.starts_with("ui://")) else {
                continue;
            };
            let (_, read) = post(session.clone(), "resources/read", json!({ "uri": uri })).await?;
            let text = read["contents"][0]["text"].as_str().unwrap_or_default();
            out.push((uri.to_owned(), text.to_owned()));
        }
        anyhow::Ok(out)
    })?;
    report!("| MCP Apps view | bytes | gzip | aim |");
    report!("|---|---:|---:|---|");
    for (uri, html) in &views {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(html.as_bytes())?;
        let gzipped = gz.finish()?.len();
        let aim = super::verdict(gzipped <= VIEW_GZIP_AIM, "≤ 61440 gzip");
        report!("| {uri} | {} | {gzipped} | {aim} |", html.len());
    }
    Ok(())
}

/// Prints the size table for the server at `base` (the listing of each key in each mode).
pub(super) fn print_sizes(base: &str, keys: &[(&'static str, String)]) -> anyhow::Result<()> {
    report!("| tools/list | key | tools | bytes | aim |");
    report!("|---|---|---:|---:|---|");
    for (mode, path) in [
        ("full", "/mcp"),
        ("consolidated", "/mcp?catalog=consolidated"),
    ] {
        for (label, key) in keys {
            let result = list(&format!("{base}{path}"), key)?;
            let bytes = result.to_string().len();
            let tools = result["tools"].as_array().map_or(0, Vec::len);
            let aim = match mode {
                "consolidated" => super::verdict(bytes <= CONSOLIDATED_AIM, "≤ 8192"),
                _ => String::new(),
            };
            report!("| {mode} | {label} | {tools} | {bytes} | {aim} |");
            if (mode, *label) == ("full", "execute") {
                // The budget is held on the catalogue it was set for; the whole list above is
                // printed so its growth is seen.
                let budgeted: Vec<&Value> = result["tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|t| {
                        t["name"]
                            .as_str()
                            .is_some_and(|n| BUDGETED_CATALOGUE.contains(&n))
                    })
                    .collect();
                let held = json!({ "tools": budgeted }).to_string().len();
                let aim = super::verdict(held <= FULL_LISTING_BUDGET, "≤ 40960");
                report!(
                    "| full, the {} budgeted tools | {label} | {} | {held} | {aim} |",
                    BUDGETED_CATALOGUE.len(),
                    budgeted.len()
                );
            }
        }
    }
    Ok(())
}

/// Prints the execute key's full listing per tool and per part, largest tool first, and the
/// parts' totals. A part's bytes are its value's compact JSON; the rest of a tool's entry (its
/// name, title, keys and punctuation) is in `other`.
fn print_parts(base: &str, keys: &[(&'static str, String)]) -> anyhow::Result<()> {
    let key = keys
        .iter()
        .find(|(l, _)| *l == "execute")
        .map(|(_, k)| k)
        .context("the execute key")?;
    let result = list(&format!("{base}/mcp"), key)?;
    let tools = result["tools"].as_array().context("tools")?;
    const PARTS: [&str; 5] = [
        "description",
        "inputSchema",
        "outputSchema",
        "annotations",
        "_meta",
    ];
    let mut rows: Vec<(String, usize, Vec<usize>)> = tools
        .iter()
        .map(|t| {
            let whole = t.to_string().len();
            let parts = PARTS
                .iter()
                .map(|p| t.get(*p).map_or(0, |v| v.to_string().len()))
                .collect();
            (t["name"].as_str().unwrap_or("?").to_owned(), whole, parts)
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    report!(
        "| execute key, full: tool | bytes | {} | other |",
        PARTS.join(" | ")
    );
    report!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut totals = BTreeMap::<usize, usize>::new();
    let mut whole_total = 0;
    for (name, whole, parts) in &rows {
        let other = whole - parts.iter().sum::<usize>();
        whole_total += whole;
        for (i, p) in parts.iter().chain([&other]).enumerate() {
            *totals.entry(i).or_default() += p;
        }
        let cells: Vec<String> = parts.iter().map(usize::to_string).collect();
        report!("| {name} | {whole} | {} | {other} |", cells.join(" | "));
    }
    let cells: Vec<String> = totals.values().map(usize::to_string).collect();
    report!(
        "| **all {} tools** | {whole_total} | {} |",
        rows.len(),
        cells.join(" | ")
    );
    Ok(())
}

/// The `result` of a stateless `tools/list` POST to `url` with `key`.
fn list(url: &str, key: &str) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
        let resp = http
            .post(url)
            .header("x-api-key", key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body.to_string())
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        anyhow::ensure!(
            status.is_success(),
            "tools/list at {url}: HTTP {status}: {text}"
        );
        // JSON, or an SSE stream whose last `data:` line is the answer.
        let json = if text.trim_start().starts_with('{') {
            text.as_str()
        } else {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .rfind(|d| d.contains("\"result\""))
                .unwrap_or("")
        };
        let mut v: Value =
            serde_json::from_str(json).with_context(|| format!("tools/list reply: {text}"))?;
        anyhow::ensure!(v.get("error").is_none(), "tools/list at {url}: {v}");
        Ok(v["result"].take())
    })
}
