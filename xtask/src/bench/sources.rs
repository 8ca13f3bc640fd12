//! `cargo xtask bench sources [--calls N] [--operations N] [--database sqlite|postgres]`: what a
//! Tool Source adds to a call, and how long discovering a large OpenAPI document takes.
//!
//! An https upstream runs in this process (`breeze_sources::testing`: a CA made for the run, the
//! well-behaved MCP server whose `echo` tool answers its arguments). Breeze (`breeze demo` on
//! CPU 0) trusts that CA and may reach loopback through its own settings
//! (`TOOL_SOURCES_EXTRA_ROOTS`, `TOOL_SOURCES_ALLOW_PRIVATE_EGRESS`); the source is added,
//! discovered and its tool enabled at Tier 1 with the admin CLI, as an administrator would.
//!
//! 1. **Added latency**: the same client calls `echo` directly at the upstream and
//!    `bench__echo` through Breeze's `/mcp` (read key; the whole pipeline, then the upstream),
//!    N calls at concurrency 1 and N at concurrency 50; the table shows p50/p99 of both and
//!    what Breeze adds. Aim: ≤ 1 ms p50 added.
//! 2. **Discovery**: an OpenAPI 3.1 document of `--operations` operations (default 2,000)
//!    served by the upstream, added as a source and discovered with `breeze sources discover`,
//!    which prints the discovery's own time.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use axum::{Json, Router, routing::get};
use breeze_sources::testing::{McpServer, TestCa, tool};
use serde_json::{Value, json};

use super::{
    build_breeze,
    instance::{Db, Instance},
    percentile, workspace_root,
};

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(args, &["--calls", "--operations", "--database"])?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let calls = num("--calls", 2_000)?.max(50) as usize;
    let operations = num("--operations", 2_000)? as usize;
    let db = Db::parse(f.get("--database").map_or("sqlite", String::as_str))?;
    let root = workspace_root()?;
    let bin = build_breeze(&root)?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let ca = TestCa::new();
    let upstream = McpServer::new(vec![tool("echo", "Answers its arguments.", true)]);
    let document = Arc::new(openapi(operations));
    let (mcp_addr, api_addr) = rt.block_on(async {
        let api = Router::new().route(
            "/openapi.json",
            get({
                let document = document.clone();
                move || async move { Json((*document).clone()) }
            }),
        );
        (
            ca.serve(upstream.router(), true).await,
            ca.serve(api, true).await,
        )
    });
    let roots = root.join("target/bench/sources-ca.pem");
    std::fs::create_dir_all(roots.parent().context("no parent")?)?;
    std::fs::write(&roots, &ca.ca_pem)?;
    let roots_setting = roots.display().to_string();
    let env = [
        ("TOOL_SOURCES_ALLOW_PRIVATE_EGRESS", "true"),
        ("TOOL_SOURCES_EXTRA_ROOTS", roots_setting.as_str()),
        ("MCP_MESSAGE_RATE_LIMIT_PER_MINUTE", "1000000000"),
        ("MCP_TOOL_RATE_LIMITS", "false"),
    ];
    let inst = Instance::start(&root, &bin, db, 0, &env)?;
    let org = inst.demo["organization"]["slug"]
        .as_str()
        .context("demo.json has no organization")?
        .to_owned();
    let mcp_url = format!("https://127.0.0.1:{}/mcp", mcp_addr.port());
    inst.cli_with(
        &env,
        &[
            "sources",
            "add",
            "--org",
            &org,
            "--name",
            "Bench",
            "--slug",
            "bench",
            "--url",
            &mcp_url,
            "--offer-to-mcp",
        ],
    )?;
    inst.cli_with(&env, &["sources", "discover", "--org", &org, "bench"])?;
    inst.cli_with(
        &env,
        &[
            "sources", "set", "--org", &org, "bench", "echo", "--enable", "--tier", "1",
        ],
    )?;
    let key = inst.api_key("read")?;

    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.ca_pem.as_bytes())?)
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(60))
        .build()?;
    let direct = Target {
        http: http.clone(),
        url: mcp_url,
        key: None,
        body: call_body("echo"),
    };
    let through = Target {
        http,
        url: format!("{}/mcp", inst.base_url),
        key: Some(key),
        body: call_body("bench__echo"),
    };
    let mut rows = Vec::new();
    for conc in [1, 50] {
        let (d, t) = rt.block_on(async {
            // Warm both paths (connections, caches) before measuring.
            direct.load(1, 50).await?;
            through.load(1, 50).await?;
            let d = direct.load(conc, calls).await?;
            let t = through.load(conc, calls).await?;
            anyhow::Ok((d, t))
        })?;
        rows.push((conc, d, t));
    }

    eprintln!("discovering a document of {operations} operations…");
    let api_url = format!("https://127.0.0.1:{}", api_addr.port());
    inst.cli_with(
        &env,
        &[
            "sources",
            "add",
            "--org",
            &org,
            "--name",
            "Big API",
            "--slug",
            "bigapi",
            "--kind",
            "openapi",
            "--url",
            &api_url,
            "--document-url",
            &format!("{api_url}/openapi.json"),
        ],
    )?;
    let out = inst.cli_with(&env, &["sources", "discover", "--org", &org, "bigapi"])?;
    let discovered = out.lines().next().unwrap_or_default().to_owned();

    report!();
    report!(
        "## A Tool Source's call through Breeze vs. direct, {} (`breeze demo`, {} build, {calls} \
         calls a run)",
        db.name(),
        super::profile().1
    );
    report!();
    report!(
        "| concurrency | direct p50 ms | direct p99 ms | through Breeze p50 ms | through Breeze p99 ms | added p50 ms | added p99 ms |"
    );
    report!("|---:|---:|---:|---:|---:|---:|---:|");
    for (conc, d, t) in &rows {
        let (d50, d99, t50, t99) = (
            percentile(d, 0.5),
            percentile(d, 0.99),
            percentile(t, 0.5),
            percentile(t, 0.99),
        );
        report!(
            "| {conc} | {d50:.2} | {d99:.2} | {t50:.2} | {t99:.2} | {:.2} | {:.2} |",
            t50 - d50,
            t99 - d99
        );
    }
    report!();
    report!("discovery of an OpenAPI document of {operations} operations: {discovered}");
    let added = rows
        .first()
        .map(|(_, d, t)| percentile(t, 0.5) - percentile(d, 0.5))
        .unwrap_or(f64::NAN);
    report!(
        "{}",
        super::verdict(
            added <= 1.0,
            &format!("aim: ≤ 1 ms p50 added at concurrency 1; {added:.2} ms")
        )
    );
    Ok(())
}

/// Where a measured call goes.
struct Target {
    http: reqwest::Client,
    url: String,
    key: Option<String>,
    body: Value,
}

impl Target {
    /// `calls` calls spread over `conc` workers; each call's milliseconds, sorted. Fails on the
    /// first call that does not answer a result.
    async fn load(&self, conc: usize, calls: usize) -> anyhow::Result<Vec<f64>> {
        let per = calls.div_ceil(conc);
        let workers = (0..conc).map(|_| async move {
            let mut times = Vec::with_capacity(per);
            for _ in 0..per {
                let started = Instant::now();
                self.call().await?;
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            anyhow::Ok(times)
        });
        let mut all = Vec::with_capacity(calls);
        for w in futures::future::join_all(workers).await {
            all.extend(w?);
        }
        all.sort_by(f64::total_cmp);
        Ok(all)
    }

    async fn call(&self) -> anyhow::Result<()> {
        let mut req = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18")
            .json(&self.body);
        if let Some(key) = &self.key {
            req = req.header("X-API-Key", key);
        }
        let r = req.send().await?;
        let status = r.status();
        let text = r.text().await?;
        let answer: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} answered {status}: {text}", self.url))?;
        if answer.get("result").is_none() || answer["result"]["isError"] == true {
            bail!("{} answered {status}: {text}", self.url);
        }
        Ok(())
    }
}

fn call_body(name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": name, "arguments": {"q": "hello"}}})
}

/// An OpenAPI 3.1 document of `n` operations: reads and writes of `n / 2` resources, each with
/// a path parameter, a query parameter, a request body for writes and a response schema, as
/// a large vendor API has.
fn openapi(n: usize) -> Value {
    let mut paths = serde_json::Map::new();
    for i in 0..n.div_ceil(2) {
        let mut item = serde_json::Map::new();
        let param = json!([{"name": "id", "in": "path", "required": true,
            "schema": {"type": "string"}}, {"name": "expand", "in": "query",
            "schema": {"type": "boolean"}}]);
        let response = json!({"200": {"description": "The resource",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}});
        item.insert(
            "get".into(),
            json!({"operationId": format!("getThing{i}"), "summary": format!("Read thing {i}"),
                   "parameters": param, "responses": response}),
        );
        if 2 * i + 1 < n {
            item.insert(
                "put".into(),
                json!({"operationId": format!("putThing{i}"),
                       "summary": format!("Replace thing {i}"), "parameters": param,
                       "requestBody": {"required": true, "content": {"application/json":
                           {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                       "responses": response}),
            );
        }
        paths.insert(format!("/things{i}/{{id}}"), Value::Object(item));
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Bench API", "version": "1"},
        "paths": paths,
        "components": {"schemas": {"Thing": {"type": "object", "properties": {
            "id": {"type": "string"}, "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}}}}}},
    })
}
