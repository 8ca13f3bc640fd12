//! `generate_report` over MCP and the download over REST: the attacks (another organization's
//! definition, run and site answer not found on every action and on the download; bad inputs;
//! a read key generating, which is Tier 2), every report type the tool lists generated in every
//! format, and the way a person uses it — a definition created, generated, its history read, and the
//! report downloaded whole with the read key while the tool's reply carries only a summary.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::{body::Body, http::Request};
use breeze_core::{DeviceStatus, OsFamily, ReportFilters, ReportFormat, ReportKind};
use breeze_store::{NewDevice, ReportRequest, testing::Ctx};
use common::{Reply, World, audit, code, send, tool, world};
use serde_json::{Value, json};

const TOOL: &str = "generate_report";

fn download_request(key: &str, path: &str) -> Request<Body> {
    Request::get(path)
        .header("x-api-key", key)
        .body(Body::empty())
        .unwrap()
}

async fn download(w: &World, key: &str, path: &str) -> Reply {
    send(&w.app, download_request(key, path)).await
}

/// A completed run of B's, and a definition of B's.
async fn b_report(w: &World) -> (String, String) {
    let ob = w.store.org(w.org_b);
    let def = ob
        .reports()
        .create_report(
            breeze_store::NewReport {
                name: "B fleet".into(),
                description: None,
                kind: ReportKind::DeviceInventory,
                format: ReportFormat::Json,
                filters: ReportFilters::default(),
                created_by: "test".into(),
            },
            audit("report.create"),
        )
        .await
        .unwrap();
    let run = ob
        .reports()
        .generate_report(ReportRequest::from(&def), "test", audit("report.generate"))
        .await
        .unwrap();
    (def.id.to_string(), run.id.to_string())
}

async fn another_organizations_reports_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let (b_def, b_run) = b_report(&w).await;
    let b_site = w.store.org(w.org_b).tenancy().list_sites().await.unwrap()[0].id;
    for args in [
        json!({ "action": "get", "reportId": b_def }),
        json!({ "action": "update", "reportId": b_def, "name": "mine" }),
        json!({ "action": "delete", "reportId": b_def }),
        json!({ "action": "generate", "reportId": b_def }),
    ] {
        let r = tool(app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
        assert_eq!(r["error"]["message"], "Report not found or access denied");
    }
    let r = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "data", "runId": b_run }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    assert_eq!(
        r["error"]["message"],
        "Report run not found or access denied"
    );
    // B's history is not in A's, even asked by B's definition id.
    let r = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "history", "reportId": b_def }),
    )
    .await;
    assert_eq!(r["runs"], json!([]), "{r}");
    let r = tool(app, &w.read, TOOL, json!({ "action": "list" })).await;
    assert_eq!(r["reports"], json!([]), "{r}");
    // A filter naming B's site.
    for action in ["create", "generate"] {
        let r = tool(
            app,
            &w.write,
            TOOL,
            json!({ "action": action, "name": "steal", "reportType": "device_inventory",
                    "filters": { "siteId": b_site.to_string() } }),
        )
        .await;
        assert_eq!(code(&r), "NOT_FOUND", "{action}: {r}");
    }
    // The download: A's key for B's run, through A's organization or B's.
    for org in [w.org_a, w.org_b] {
        let r = download(
            &w,
            &w.read,
            &format!("/api/v1/orgs/{org}/reports/{b_run}/download"),
        )
        .await;
        assert_eq!(r.status, 404, "{org}: {}", r.body);
    }
    let r = download(
        &w,
        &w.read,
        &format!("/api/v1/orgs/{}/reports/not-a-uuid/download", w.org_a),
    )
    .await;
    assert_eq!(r.status, 404);
    // B's own key does get it.
    let r = download(
        &w,
        &w.other_org_key,
        &format!("/api/v1/orgs/{}/reports/{b_run}/download", w.org_b),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Nothing of B changed, nothing was created in A.
    assert_eq!(
        w.store
            .org(w.org_b)
            .reports()
            .get_report(b_def.parse().unwrap())
            .await
            .unwrap()
            .name,
        "B fleet"
    );
    assert!(
        w.store
            .org(w.org_a)
            .reports()
            .list_reports()
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        w.store
            .org(w.org_a)
            .reports()
            .report_runs(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn bad_inputs_and_tiers_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    for args in [
        json!({ "action": "generate" }),
        json!({ "action": "generate", "reportType": "audit_activity",
                "filters": { "status": "online" } }),
        json!({ "action": "create", "reportType": "device_inventory" }),
        json!({ "action": "create", "name": "x" }),
        json!({ "action": "create", "name": "x", "reportType": "device_inventory",
                "filters": { "sinceHours": 24 } }),
        json!({ "action": "create", "name": "x", "reportType": "audit_activity",
                "filters": { "severity": "high" } }),
        json!({ "action": "create", "name": "x", "reportType": "alert_history",
                "filters": { "sinceHours": 0 } }),
        json!({ "action": "create", "name": "x", "reportType": "device_inventory",
                "filters": { "hostname": "web" } }),
        json!({ "action": "create", "name": "x", "reportType": "device_inventory",
                "format": "xlsx" }),
        json!({ "action": "data" }),
    ] {
        let r = tool(app, &w.write, TOOL, args.clone()).await;
        let c = code(&r);
        assert!(
            c == "INVALID_ARGUMENT" || !r["rpcError"].is_null(),
            "{args}: {r}"
        );
    }
    // A read-only key can read but not generate or define (Tier 2).
    for args in [
        json!({ "action": "generate", "reportType": "device_inventory" }),
        json!({ "action": "create", "name": "x", "reportType": "device_inventory" }),
    ] {
        let r = tool(app, &w.read, TOOL, args).await;
        assert!(
            r["rpcError"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("requires ai:write"),
            "{r}"
        );
    }
    assert!(
        w.store
            .org(w.org_a)
            .reports()
            .report_runs(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        w.store
            .org(w.org_a)
            .reports()
            .list_reports()
            .await
            .unwrap()
            .is_empty()
    );
}

/// The values the property `name` may take wherever it sits in `schema` (following local
/// `$ref`s and `anyOf`/`oneOf` choices, e.g. a nullable enum).
fn enum_of(schema: &Value, name: &str) -> Option<Vec<String>> {
    fn values(s: &Value, root: &Value) -> Vec<String> {
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            return e
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
        }
        if let Some(c) = s.get("const").and_then(Value::as_str) {
            return vec![c.to_owned()];
        }
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            let target = r
                .trim_start_matches("#/")
                .split('/')
                .try_fold(root, |node, key| node.get(key));
            return target.map(|t| values(t, root)).unwrap_or_default();
        }
        ["anyOf", "oneOf"]
            .iter()
            .filter_map(|k| s.get(*k).and_then(Value::as_array))
            .flatten()
            .flat_map(|alt| values(alt, root))
            .collect()
    }
    fn find<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
        match s {
            Value::Object(map) => map
                .get("properties")
                .and_then(|p| p.get(name))
                .or_else(|| map.values().find_map(|v| find(v, name))),
            Value::Array(items) => items.iter().find_map(|v| find(v, name)),
            _ => None,
        }
    }
    let found = values(find(schema, name)?, schema);
    (!found.is_empty()).then_some(found)
}

/// Every report type the tool's listed input schema offers generates, in every format it
/// offers, and downloads: none is listed and then refused.
async fn every_listed_report_type_generates(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let list = send(
        app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("x-api-key", &w.write)
            .body(Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string(),
            ))
            .unwrap(),
    )
    .await;
    let schema = list.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == TOOL)
        .map(|t| t["inputSchema"].clone())
        .expect("generate_report is listed for a write key");
    let types = enum_of(&schema, "reportType").expect("reportType lists its values");
    let formats = enum_of(&schema, "format").expect("format lists its values");
    assert!(types.len() >= 5, "{types:?}");
    let (_, devices) = w
        .store
        .org(w.org_a)
        .devices()
        .list_devices(&Default::default(), 1, 0)
        .await
        .unwrap();
    // One generation per type (the tool allows 10 in 5 minutes), the formats taken in turn.
    for (t, f) in types.iter().zip(formats.iter().cycle()) {
        let r = tool(
            app,
            &w.write,
            TOOL,
            json!({ "action": "generate", "reportType": t, "format": f }),
        )
        .await;
        let run = &r["run"];
        assert_eq!(run["status"], "completed", "{t} as {f}: {r}");
        if matches!(t.as_str(), "device_inventory" | "patch_status") {
            assert_eq!(run["rows"], devices, "{t}: one row per device");
        }
        let path = run["downloadPath"].as_str().unwrap();
        let got = download(&w, &w.read, path).await;
        assert_eq!(got.status, 200, "{t} as {f}");
    }
}

async fn a_report_is_defined_generated_and_downloaded(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let oa = w.store.org(w.org_a);
    let site = oa.tenancy().list_sites().await.unwrap()[0].id;
    let fleet: Vec<NewDevice> = (0..1500)
        .map(|i| NewDevice {
            os_family: if i % 3 == 0 {
                OsFamily::Windows
            } else {
                OsFamily::Linux
            },
            os_name: "OS".into(),
            os_version: "1".into(),
            ..breeze_store::testing::new_device(site, format!("node-{i:05}"), DeviceStatus::Online)
        })
        .collect();
    oa.devices()
        .create_devices(fleet, audit("device.seed"))
        .await
        .unwrap();

    let created = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "create", "name": "Windows fleet", "reportType": "device_inventory",
                "format": "csv", "filters": { "osType": "windows" } }),
    )
    .await;
    let id = created["report"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["report"]["filters"], json!({ "osType": "windows" }));
    let generated = send(
        app,
        common::tool_request(
            &w.write,
            TOOL,
            json!({ "action": "generate", "reportId": id }),
        ),
    )
    .await;
    let reply_bytes = generated.body.to_string().len();
    let run = &generated.body["result"]["structuredContent"]["run"];
    assert_eq!(run["status"], "completed", "{}", generated.body);
    assert_eq!(run["rows"], 500);
    assert_eq!(run["reportId"], id.as_str());
    assert!(
        reply_bytes < 4_000,
        "the reply is a summary ({reply_bytes} bytes)"
    );
    let path = run["downloadPath"].as_str().unwrap().to_owned();
    let run_id = run["id"].as_str().unwrap().to_owned();

    // The read key downloads it whole.
    let r = download(&w, &w.read, &path).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/csv; charset=utf-8");
    let text = r.body.as_str().unwrap();
    assert_eq!(text.lines().count(), 501);
    assert_eq!(text.len() as u64, run["bytes"].as_u64().unwrap());

    // data: summary and a bounded preview; history and get list the run.
    let data = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "data", "runId": run_id }),
    )
    .await;
    assert!(
        data["preview"]
            .as_str()
            .unwrap()
            .starts_with("id,hostname,")
    );
    assert!(data["preview"].as_str().unwrap().chars().count() <= 1_501);
    let history = tool(app, &w.read, TOOL, json!({ "action": "history" })).await;
    assert_eq!(history["runs"][0]["id"], run_id.as_str());
    let got = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "get", "reportId": id }),
    )
    .await;
    assert_eq!(got["runs"][0]["id"], run_id.as_str());

    // Ad hoc JSON of the whole fleet; audit activity shows the generation.
    let adhoc = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "generate", "reportType": "device_inventory" }),
    )
    .await;
    let r = download(&w, &w.read, adhoc["run"]["downloadPath"].as_str().unwrap()).await;
    assert_eq!(r.body.as_array().unwrap().len(), 1501);
    let activity = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "generate", "reportType": "audit_activity", "format": "json",
                "filters": { "sinceHours": 1 } }),
    )
    .await;
    let r = download(
        &w,
        &w.read,
        activity["run"]["downloadPath"].as_str().unwrap(),
    )
    .await;
    let actions: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"report.generate"), "{actions:?}");
    assert!(actions.contains(&"report.create"), "{actions:?}");

    // Update and delete; the history stays.
    let updated = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "update", "reportId": id, "format": "json" }),
    )
    .await;
    assert_eq!(updated["report"]["format"], "json");
    let deleted = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "delete", "reportId": id }),
    )
    .await;
    assert!(
        deleted["message"].as_str().unwrap().contains("deleted"),
        "{deleted}"
    );
    let r = download(&w, &w.read, &path).await;
    assert_eq!(r.status, 200);
    let _: Value = r.body;
}

/// PDF: downloaded as a PDF document, byte for byte the stored one (its content is checked by
/// the store's tests); `data` previews no binary.
async fn a_pdf_report_is_downloaded_as_a_document(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let pdf = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "generate", "reportType": "device_inventory", "format": "pdf" }),
    )
    .await;
    assert_eq!(pdf["run"]["format"], "pdf", "{pdf}");
    let r = download(&w, &w.read, pdf["run"]["downloadPath"].as_str().unwrap()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "application/pdf");
    assert!(
        r.headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains(".pdf")
    );
    // The bytes (the embedded font is binary): exactly the stored report, a sound PDF whose
    // text maps back to Unicode (the store's tests read it back with pdftotext).
    let path = pdf["run"]["downloadPath"].as_str().unwrap();
    let res = tower::ServiceExt::oneshot(w.app.clone(), download_request(&w.read, path))
        .await
        .unwrap();
    let bytes = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    let run_id: uuid::Uuid = pdf["run"]["id"].as_str().unwrap().parse().unwrap();
    let o = w.store.org(w.org_a);
    let mut stored = Vec::new();
    let mut seq = 0;
    while let Some(chunk) = o.reports().report_chunk(run_id, seq).await.unwrap() {
        stored.extend(chunk);
        seq += 1;
    }
    assert_eq!(&bytes[..], &stored[..], "the download is the stored report");
    assert!(breeze_store::testing::check_pdf(&bytes) >= 1);
    assert!(String::from_utf8_lossy(&bytes).contains("/ToUnicode"));
    let data = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "data", "runId": pdf["run"]["id"] }),
    )
    .await;
    assert!(data["preview"].is_null(), "{data}");
    assert_eq!(data["run"]["format"], "pdf");
}

breeze_store::on_both_backends!(
    every_listed_report_type_generates,
    a_pdf_report_is_downloaded_as_a_document,
    another_organizations_reports_are_not_found,
    bad_inputs_and_tiers_are_refused,
    a_report_is_defined_generated_and_downloaded
);
