//! Live queries end to end: a Breeze server on a real socket, the real `breeze-agent` binary
//! enrolled and running, and `run_live_query` / `list_live_queries` through the whole pipeline
//! — a port this test listens on, the agent's own process, files this test wrote with their
//! SHA-256 — each device's rows streamed as progress; beside the real agent an offline device
//! (listed, not waited for), a Windows device (not asked) and an "online" device with no agent
//! (timed out at the per-device bound). Caps per device and per query are hit and named; the
//! results are read again by query id, paged; REST answers the same; and another organization
//! finds none of it.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use breeze_core::{DeviceStatus, OsFamily, SystemClock};
use breeze_store::{
    Backend, NewDevice,
    testing::{TestStore, new_device},
};
use breeze_tools::ProgressReport;
use common::{Fleet, agent, audit, call, call_outcome, enroll, eventually, server};
use serde_json::{Value, json};
use sha2::Digest;

async fn call_streaming(f: &Fleet, args: Value) -> (Value, Vec<ProgressReport>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = match call_outcome(f, f.org, "run_live_query", args, Some(tx)).await {
        breeze_pipeline::CallOutcome::Output(raw) => serde_json::from_str(raw.get()).unwrap(),
        other => panic!("run_live_query: {other:?}"),
    };
    let mut progress = Vec::new();
    while let Some(p) = rx.recv().await {
        progress.push(p);
    }
    (out, progress)
}

async fn device(f: &Fleet, name: &str, os: OsFamily, status: DeviceStatus) -> String {
    let o = f.store.org(f.org);
    let site = o.tenancy().list_sites().await.unwrap()[0].id;
    let d = o
        .devices()
        .create_device(
            NewDevice {
                os_family: os,
                os_name: "Test".into(),
                os_version: "1".into(),
                ..new_device(site, name, status)
            },
            audit("device.create"),
        )
        .await
        .unwrap();
    d.id.to_string()
}

fn hostnames(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d["hostname"].as_str().unwrap().to_owned())
        .collect()
}

async fn run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let real = file["deviceId"].as_str().unwrap().to_owned();
    let real_id: breeze_core::DeviceId = real.parse().unwrap();
    let _running = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(real_id)
    })
    .await;
    eventually(20, "the agent online", || async {
        f.store
            .org(f.org)
            .devices()
            .get_device(real_id)
            .await
            .unwrap()
            .status
            == DeviceStatus::Online
    })
    .await;
    device(&f, "gone-01", OsFamily::Linux, DeviceStatus::Offline).await;
    device(&f, "win-01", OsFamily::Windows, DeviceStatus::Online).await;
    let silent = device(&f, "silent-01", OsFamily::Linux, DeviceStatus::Online).await;

    // Prepare: counts, nothing sent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let question = json!({ "question": "listening_ports", "port": port });
    let out = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "prepare", "question": question }),
    )
    .await
    .unwrap();
    assert_eq!(out["devicesTargeted"], 4, "{out}");
    assert_eq!(out["devicesOnline"], 2, "{out}");
    assert_eq!(hostnames(&out["offline"]), ["gone-01"]);
    assert_eq!(hostnames(&out["unsupported"]), ["win-01"]);
    assert!(out["estimatedRows"].as_u64().unwrap() > 0, "{out}");
    assert!(
        f.store
            .org(f.org)
            .live_queries()
            .list_queries(None, 10)
            .await
            .unwrap()
            .is_empty(),
        "prepare sends and records nothing"
    );

    // Run: the port this test listens on, streamed; the silent device times out at its bound.
    let (out, progress) = call_streaming(
        &f,
        json!({ "action": "run", "question": question, "deviceTimeoutSecs": 1, "timeoutSecs": 3 }),
    )
    .await;
    let query_id = out["query"]["queryId"].as_str().unwrap().to_owned();
    assert_eq!(out["query"]["status"], "finished", "{out}");
    assert_eq!(out["query"]["answered"], 1, "{out}");
    assert_eq!(out["query"]["offline"], 1, "{out}");
    assert_eq!(out["query"]["timedOut"], 1, "{out}");
    assert_eq!(out["query"]["failed"], 1, "the Windows device: {out}");
    assert_eq!(hostnames(&out["offline"]), ["gone-01"]);
    assert_eq!(hostnames(&out["timedOut"]), ["silent-01"]);
    let rows = out["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["row"]["port"] == port && r["deviceId"] == real.as_str()),
        "the test's own port: {out}"
    );
    let streamed: Vec<Value> = progress
        .iter()
        .filter_map(|p| p.message.as_deref())
        .filter_map(|m| serde_json::from_str(m).ok())
        .collect();
    assert!(
        streamed
            .iter()
            .any(|m| m["deviceId"] == real.as_str() && m["rows"][0]["port"] == port),
        "the rows streamed as progress: {progress:?}"
    );
    assert!(
        streamed
            .iter()
            .any(|m| m["deviceId"] == silent.as_str() && m["status"] == "timed_out"),
        "the timeout streamed too: {progress:?}"
    );
    drop(listener);

    // The agent's own process, by name.
    let out = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "run", "question": { "question": "processes", "name": "breeze-agent" },
                "target": { "type": "devices", "deviceIds": [real] } }),
    )
    .await
    .unwrap();
    assert!(
        out["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["row"]["name"] == "breeze-agent"),
        "{out}"
    );

    // Files this test wrote, with their SHA-256; then the device cap and the query cap.
    let files = tempfile::tempdir().unwrap();
    let mut sums = Vec::new();
    for i in 0..3 {
        let body = format!("live query file {i}\n");
        std::fs::write(files.path().join(format!("f{i}.txt")), &body).unwrap();
        sums.push(hex::encode(sha2::Sha256::digest(body.as_bytes())));
    }
    let pattern = format!("{}/*.txt", files.path().display());
    let target = json!({ "type": "devices", "deviceIds": [real] });
    let q = json!({ "question": "files", "pattern": pattern });
    let out = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "run", "question": q, "target": target }),
    )
    .await
    .unwrap();
    let mut got: Vec<String> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["row"]["sha256"].as_str().unwrap().to_owned())
        .collect();
    got.sort();
    sums.sort();
    assert_eq!(got, sums, "{out}");
    let out = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "run", "question": q, "target": target, "maxRowsPerDevice": 2 }),
    )
    .await
    .unwrap();
    assert_eq!(out["capsHit"][0]["cap"], "rows", "{out}");
    assert_eq!(out["rows"].as_array().unwrap().len(), 2, "{out}");
    let out = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "run", "question": q, "target": target, "maxRows": 1 }),
    )
    .await
    .unwrap();
    assert_eq!(out["query"]["queryCap"], "query_rows", "{out}");
    assert_eq!(out["capsHit"][0]["cap"], "query_rows", "{out}");
    assert_eq!(out["query"]["rows"], 1, "{out}");
    assert!(out["message"].as_str().unwrap().contains("query_rows"));
    // A protected location is refused before anything is sent.
    let e = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "run", "question": { "question": "files", "pattern": "/etc/shadow" } }),
    )
    .await
    .unwrap_err();
    assert!(e.contains("question.pattern"), "{e}");

    // Read again by id, paged in device order.
    let page = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "results", "queryId": query_id, "limit": 2 }),
    )
    .await
    .unwrap();
    assert_eq!(page["answers"].as_array().unwrap().len(), 2, "{page}");
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    let rest = call(
        &f,
        f.org,
        "run_live_query",
        json!({ "action": "results", "queryId": query_id, "limit": 2, "cursor": cursor }),
    )
    .await
    .unwrap();
    assert_eq!(rest["answers"].as_array().unwrap().len(), 2, "{rest}");
    assert!(rest.get("nextCursor").is_none(), "{rest}");
    let all: Vec<Value> = page["answers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["answers"].as_array().unwrap())
        .cloned()
        .collect();
    let answered = all.iter().find(|a| a["deviceId"] == real.as_str()).unwrap();
    assert_eq!(answered["status"], "answered");
    assert_eq!(answered["rows"][0]["port"], port);

    // Listed, newest first, paged.
    let list = call(&f, f.org, "list_live_queries", json!({ "limit": 2 }))
        .await
        .unwrap();
    assert_eq!(list["queries"].as_array().unwrap().len(), 2, "{list}");
    assert!(list["nextCursor"].is_string(), "{list}");
    let all = call(&f, f.org, "list_live_queries", json!({}))
        .await
        .unwrap();
    let queries = all["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 5, "{all}");
    assert_eq!(queries[4]["queryId"], query_id.as_str(), "oldest last");
    assert!(queries.iter().all(|q| q["status"] == "finished"), "{all}");

    // REST: the same query, the same answers.
    let http = reqwest::Client::new();
    let rest: Value = http
        .get(format!(
            "{}/api/v1/orgs/a/live-queries/{query_id}?limit=10",
            f.base_url
        ))
        .header("x-api-key", &f.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rest["answers"].as_array().unwrap().len(), 4, "{rest}");
    assert_eq!(rest["query"]["answered"], 1, "{rest}");

    // Another organization: its key finds neither the query nor the devices.
    let other = f.other_org;
    let e = call(
        &f,
        other,
        "run_live_query",
        json!({ "action": "results", "queryId": query_id }),
    )
    .await
    .unwrap_err();
    assert!(e.contains("not found"), "{e}");
    let e = call(
        &f,
        other,
        "run_live_query",
        json!({ "action": "prepare", "question": question,
                "target": { "type": "devices", "deviceIds": [real] } }),
    )
    .await
    .unwrap_err();
    assert!(e.contains("Device not found"), "{e}");
    let theirs = call(&f, other, "list_live_queries", json!({}))
        .await
        .unwrap();
    assert_eq!(theirs["queries"], json!([]), "{theirs}");
    let out = call(
        &f,
        other,
        "run_live_query",
        json!({ "action": "prepare", "question": question }),
    )
    .await
    .unwrap();
    assert_eq!(out["devicesTargeted"], 0, "{out}");
    let status = http
        .get(format!(
            "{}/api/v1/orgs/b/live-queries/{query_id}",
            f.base_url
        ))
        .header("x-api-key", f.exec_key(other))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_queries_on_sqlite() {
    run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_queries_on_postgres() {
    run(Backend::Postgres).await;
}
