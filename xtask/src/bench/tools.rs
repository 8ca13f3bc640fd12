//! `cargo xtask bench tools [--devices N] [--audit-rows N] [--concurrency C] [--duration SECS]
//! [--database sqlite|postgres|both] [--only NAME]`: every read call of the registry through
//! Breeze's whole MCP pipeline, beside the rmcp peer answering `query_devices` from memory.
//!
//! Generated over the registry: the read key's `tools/list` names every tool, and each tool's
//! `_meta` (`breeze/tier`, `breeze/actionTiers`) says which calls are Tier 1 — each such tool,
//! and each Tier 1 action of a mixed tool, is one row. Arguments are what a client sends: the
//! required fields from the input schema, and those an action's first answer names as required
//! (`ruleId is required for this action`, as a client learns them), ids from the seeded fleet by
//! field name, `limit: 25` where a listing takes one. A call the
//! generator cannot satisfy (an id no answer gave), or that answers an error (an agent round
//! trip on a device with no agent), is listed with its reason, not measured. The tools' own
//! per-user rate limits are off (`MCP_TOOL_RATE_LIMITS=false`): they would time refusals.
//!
//! The fleet: `breeze devices seed --count N --with-inventory` (inventories of ~870 packages,
//! heartbeats with signed-in users, a week of per-minute metrics on the first ten devices,
//! notes on the first thousand) and an audit log of `--audit-rows` records (1,000,000). The
//! server runs on CPU 0, the load generator on CPU 1; server CPU per call is read from `/proc`
//! (and, on PostgreSQL, the CPU of the backends serving the run).

use std::{collections::BTreeMap, process::Stdio};

use anyhow::Context;
use serde_json::{Map, Value, json};

use super::{
    Running, build_breeze, build_peers,
    devices::measure,
    instance::{Db, Instance, free_port},
    perf_peers, pinned, workspace_root,
};

const QUERY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query_devices","arguments":{"status":"offline","limit":25}}}"#;

/// One read call to measure: a Tier 1 tool, or a Tier 1 action of a mixed tool.
struct Call {
    label: String,
    tool: String,
    schema: Value,
    action: Option<String>,
    /// Fields the call's own error named as required for its action.
    needs: Vec<String>,
}

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &[
            "--devices",
            "--audit-rows",
            "--concurrency",
            "--duration",
            "--database",
            "--only",
        ],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let devices = num("--devices", 10_000)?;
    let audit_rows = num("--audit-rows", 1_000_000)? as i64;
    let conc = num("--concurrency", 10)? as usize;
    let duration = num("--duration", 5)?;
    let only = f.get("--only").cloned();
    let dbs = match f.get("--database").map_or("sqlite", String::as_str) {
        "both" => vec![Db::Sqlite, Db::Postgres],
        other => vec![Db::parse(other)?],
    };

    let root = workspace_root()?;
    let peers = perf_peers(&root)?;
    eprintln!("building (release): loadgen, peer-rmcp, breeze…");
    build_peers(&peers, &["loadgen", "peer-rmcp"])?;
    let bin = build_breeze(&root)?;
    let dir = super::profile().1;
    let loadgen = peers.join("target").join(dir).join("loadgen");
    let body_dir = root.join("target/bench/bodies/tools");
    std::fs::create_dir_all(&body_dir)?;
    let query = body_dir.join("query_offline.json");
    std::fs::write(&query, QUERY)?;

    let peer = {
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
        measure(
            "peer-rmcp query_devices (memory)".into(),
            &loadgen,
            peer.id(),
            &format!("http://127.0.0.1:{port}/mcp"),
            &query,
            &[],
            conc,
            duration,
            &Vec::new,
        )?
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut tables = Vec::new();
    for db in dbs {
        // The tools' own per-user limits would time their refusals, not the tools.
        let env = [
            ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "1000000000"),
            ("MCP_TOOL_RATE_LIMITS", "false"),
        ];
        let inst = Instance::start(&root, &bin, db, 0, &env)?;
        seed(&inst, devices, audit_rows)?;
        let key = inst.api_key("read")?;
        let url = format!("{}/mcp", inst.base_url);
        let calls: Vec<Call> = runtime
            .block_on(calls(&url, &key))?
            .into_iter()
            .filter(|c| only.as_ref().is_none_or(|o| c.label.contains(o.as_str())))
            .collect();
        let mut ids = BTreeMap::from([(
            "deviceId".to_owned(),
            Value::from(runtime.block_on(first_device(&url, &key))?),
        )]);
        let (ready, mut skipped) = runtime.block_on(probe_all(&url, &key, calls, &mut ids));
        let mut rows = Vec::new();
        for (call, body) in ready {
            let file = body_dir.join(format!("{}.json", call.label.replace(' ', "_")));
            std::fs::write(&file, body.to_string())?;
            eprintln!("measuring {} on {}…", call.label, db.name());
            let row = measure(
                call.label,
                &loadgen,
                inst.pid(),
                &url,
                &file,
                &[format!("X-API-Key: {key}")],
                conc,
                duration,
                &|| inst.db_backend_pids(),
            )?;
            // A row of failures would time the failure, not the tool.
            if row.rps == 0.0 {
                let why = format!(
                    "no call completed in {duration} s at concurrency {conc} (each waits longer)"
                );
                skipped.push((row.name, why));
            } else if row.errors > 0 {
                let why = format!("{} of its calls answered errors under load", row.errors);
                skipped.push((row.name, why));
            } else {
                rows.push(row);
            }
        }
        tables.push((db, rows, skipped));
    }

    report!();
    report!(
        "## Read tools over {devices} devices and {audit_rows} audit records, concurrency {conc}, {duration} s each (+2 s warm-up)"
    );
    report!();
    report!(
        "peer-rmcp answering query_devices from memory: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, {:.1} µs CPU per call.",
        peer.rps,
        peer.p50,
        peer.p99,
        peer.cpu_us
    );
    for (db, rows, skipped) in tables {
        report!();
        report!("### {}", db.name());
        report!();
        report!(
            "| call | req/s | × rmcp | p50 ms | p99 ms | errors | server CPU µs/call | PostgreSQL CPU µs/call | reply bytes |"
        );
        report!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            report!(
                "| {} | {:.0} | {:.2} | {:.3} | {:.3} | {} | {:.1} | {} | {} |",
                r.name,
                r.rps,
                r.rps / peer.rps.max(1e-9),
                r.p50,
                r.p99,
                r.errors,
                r.cpu_us,
                r.db_cpu_us.map_or("-".to_owned(), |c| format!("{c:.1}")),
                r.bytes
            );
        }
        if !skipped.is_empty() {
            report!();
            report!("Not measured on {}:", db.name());
            for (label, why) in skipped {
                report!("- {label}: {why}");
            }
        }
    }
    Ok(())
}

/// Seeds the fleet and the audit log (see the module docs).
fn seed(inst: &Instance, devices: u64, audit_rows: i64) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    inst.cli(&[
        "devices",
        "seed",
        "--org",
        "acme",
        "--count",
        &devices.to_string(),
        "--with-inventory",
    ])?;
    inst.seed_audit(audit_rows)?;
    inst.analyze()?;
    eprintln!(
        "seeded {} devices and {} audit records in {:.0} s",
        inst.count("SELECT count(*) FROM devices")?,
        inst.count("SELECT count(*) FROM audit_log")?,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// POSTs one JSON-RPC message and returns its answer.
async fn post(url: &str, key: &str, body: &Value) -> anyhow::Result<Value> {
    let reply = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .header("X-API-Key", key)
        .json(body)
        .send()
        .await?;
    let status = reply.status();
    let text = reply.text().await?;
    anyhow::ensure!(status.is_success(), "HTTP {status}: {text}");
    Ok(serde_json::from_str(&text)?)
}

/// One call, to see that it succeeds before it is measured; its structured answer.
async fn probe(url: &str, key: &str, body: &Value) -> Result<Value, String> {
    let answer = post(url, key, body).await.map_err(|e| e.to_string())?;
    if let Some(e) = answer.get("error") {
        return Err(format!("JSON-RPC error {e}"));
    }
    let result = &answer["result"];
    if result["isError"] == true {
        let text = result["content"][0]["text"].as_str().unwrap_or("");
        let short: String = text.chars().take(400).collect();
        return Err(format!("answers an error: {short}"));
    }
    Ok(result["structuredContent"].clone())
}

/// Probes every call, in rounds: a call needing an id (`alertId`, `ruleId`…) waits until an
/// answer of another call (a `list`) has given one, so a `get` is measured on a real row.
/// Answers the calls that succeed, with their request bodies, and why each other is not measured.
async fn probe_all(
    url: &str,
    key: &str,
    calls: Vec<Call>,
    ids: &mut BTreeMap<String, Value>,
) -> (Vec<(Call, Value)>, Vec<(String, String)>) {
    let (mut ready, mut skipped) = (Vec::new(), Vec::new());
    let mut pending: Vec<(Call, String)> = calls.into_iter().map(|c| (c, String::new())).collect();
    loop {
        let known = ids.len();
        let mut learned = false;
        let mut waiting = Vec::new();
        for (mut call, _) in pending {
            let arguments = match arguments(&call, ids) {
                Ok(a) => a,
                Err(why) => {
                    waiting.push((call, why));
                    continue;
                }
            };
            let body = json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": { "name": call.tool, "arguments": arguments },
            });
            match probe(url, key, &body).await {
                Ok(answer) => {
                    harvest_ids(&answer, ids);
                    ready.push((call, body));
                }
                Err(why) => match named_requirement(&call, &why) {
                    Some(field) => {
                        call.needs.push(field);
                        learned = true;
                        waiting.push((call, why));
                    }
                    None => skipped.push((call.label, why)),
                },
            }
        }
        pending = waiting;
        if pending.is_empty() || (ids.len() == known && !learned) {
            break;
        }
    }
    skipped.extend(pending.into_iter().map(|(c, why)| (c.label, why)));
    (ready, skipped)
}

/// Ids an answer gives, by the field name a call would take them as: `"alerts": [{"id": …}]`
/// gives `alertId`, a field `"ruleId": …` gives `ruleId`. The first seen of each name wins.
fn harvest_ids(answer: &Value, ids: &mut BTreeMap<String, Value>) {
    match answer {
        Value::Object(map) => {
            for (k, v) in map {
                if k.ends_with("Id") && v.is_string() {
                    ids.entry(k.clone()).or_insert_with(|| v.clone());
                }
                if let Some(id) = v.as_array().and_then(|a| a.first()).map(|f| &f["id"])
                    && id.is_string()
                {
                    let one = k
                        .strip_suffix("ies")
                        .map(|s| format!("{s}y"))
                        .or_else(|| k.strip_suffix('s').map(str::to_owned))
                        .unwrap_or_else(|| k.clone());
                    ids.entry(format!("{one}Id")).or_insert_with(|| id.clone());
                }
                harvest_ids(v, ids);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| harvest_ids(i, ids)),
        _ => {}
    }
}

/// The read calls of every tool the read key lists, with their arguments.
async fn calls(url: &str, key: &str) -> anyhow::Result<Vec<Call>> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = Map::new();
        if let Some(c) = &cursor {
            params.insert("cursor".into(), c.clone().into());
        }
        let page = post(
            url,
            key,
            &json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params }),
        )
        .await?;
        let result = &page["result"];
        tools.extend(result["tools"].as_array().cloned().unwrap_or_default());
        match result["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let mut calls = Vec::new();
    for tool in &tools {
        let name = tool["name"].as_str().unwrap_or_default().to_owned();
        let base_tier = tool["_meta"]["breeze/tier"].as_u64().unwrap_or(0);
        let schema = &tool["inputSchema"];
        let actions: Vec<String> = schema["properties"]["action"]["enum"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if actions.is_empty() {
            if base_tier == 1 {
                calls.push(Call {
                    label: name.clone(),
                    tool: name.clone(),
                    schema: schema.clone(),
                    action: None,
                    needs: Vec::new(),
                });
            }
            continue;
        }
        for action in actions {
            let tier = tool["_meta"]["breeze/actionTiers"][&action]
                .as_u64()
                .unwrap_or(base_tier);
            if tier == 1 {
                calls.push(Call {
                    label: format!("{name} {action}"),
                    tool: name.clone(),
                    schema: schema.clone(),
                    action: Some(action),
                    needs: Vec::new(),
                });
            }
        }
    }
    Ok(calls)
}

/// The id of the third seeded device (Linux, online, with packages, people signed in, metrics and notes).
async fn first_device(url: &str, key: &str) -> anyhow::Result<String> {
    let answer = post(
        url,
        key,
        &json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "query_devices", "arguments": { "search": "sim-00003", "limit": 1 } },
        }),
    )
    .await?;
    let devices = &answer["result"]["structuredContent"]["devices"];
    devices[0]["id"]
        .as_str()
        .or(devices[0]["deviceId"].as_str())
        .map(str::to_owned)
        .with_context(|| format!("query_devices found no sim-00003: {answer}"))
}

/// The field an error names as required for the call's action (`"ruleId is required for
/// this action"`), when the tool takes such a field and the call does not send it yet.
fn named_requirement(call: &Call, why: &str) -> Option<String> {
    let message = why.split("\"message\":\"").nth(1)?;
    let field = message.split_once(" is required")?.0;
    let known = call.schema["properties"].get(field).is_some();
    (known && !call.needs.iter().any(|n| n == field)).then(|| field.to_owned())
}

/// What a client sends: the required fields (and those the action's error named), `limit: 25`
/// where a listing takes one; ids from `ids` by field name. An error names a field it cannot fill.
fn arguments(call: &Call, ids: &BTreeMap<String, Value>) -> Result<Value, String> {
    let props = call.schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut required: Vec<String> = strings(&call.schema["required"]);
    required.extend(call.needs.iter().cloned());
    let mut out = Map::new();
    if let Some(a) = &call.action {
        out.insert("action".into(), a.as_str().into());
    }
    for field in required {
        if out.contains_key(&field) {
            continue;
        }
        let value = match ids.get(field.as_str()) {
            Some(v) => v.clone(),
            None => sample(&field, props.get(&field).unwrap_or(&Value::Null))?,
        };
        out.insert(field, value);
    }
    if props.contains_key("limit") && !out.contains_key("limit") {
        let max = props["limit"]["maximum"].as_u64().unwrap_or(25);
        out.insert("limit".into(), max.min(25).into());
    }
    Ok(Value::Object(out))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// A value for a required field that is not an id the fleet gives.
fn sample(field: &str, schema: &Value) -> Result<Value, String> {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return Ok(first.clone());
    }
    if !schema["const"].is_null() {
        return Ok(schema["const"].clone());
    }
    if field.ends_with("Id") || field.ends_with("Ids") {
        return Err(format!("needs a {field} the seeded fleet does not give"));
    }
    match schema["type"].as_str() {
        Some("integer" | "number") => Ok(schema["minimum"].as_u64().unwrap_or(1).into()),
        Some("boolean") => Ok(false.into()),
        Some("string") if schema["format"] == "date-time" => Ok((super::sim::now()
            - chrono::Duration::days(1))
        .to_rfc3339()
        .into()),
        Some("string") => Ok("bench".into()),
        _ => Err(format!("cannot generate {field} ({schema})")),
    }
}
