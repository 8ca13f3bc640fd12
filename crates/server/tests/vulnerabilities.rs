//! Vulnerability exposure through every door on both backends, over real OSV records (the
//! store tests' fixture): `get_vulnerability_exposure` and `manage_advisories` over MCP with
//! an API key, the REST routes, and the console pages; another organization's device and
//! exposure never answer, and an upload through the tool waits for a person's approval.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::{body::Body, http::Request, http::StatusCode};
use breeze_agent_proto::Inventory;
use breeze_core::{DeviceId, OrgId, advisory::OsvRecord};
use breeze_store::{Store, testing::Ctx};
use common::browser::{get, html, sign_in};
use common::{ok, send, tool, why, world};
use serde_json::json;

fn fixture() -> Vec<OsvRecord> {
    [
        include_str!("../../store/tests/fixtures/osv/DSA-5532-1.json"),
        include_str!("../../store/tests/fixtures/osv/DEBIAN-CVE-2023-38545.json"),
        include_str!("../../store/tests/fixtures/osv/USN-6429-1.json"),
        include_str!("../../store/tests/fixtures/osv/RLSA-2023-5453.json"),
    ]
    .into_iter()
    .map(|t| OsvRecord::parse(t).unwrap())
    .collect()
}

fn inventory(s: &Store, packages: &[(&str, &str)]) -> Inventory {
    serde_json::from_value(json!({
        "collectedAt": s.clock().now(), "hostname": "web-01",
        "os": { "family": "linux", "name": "Debian", "version": "12", "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 2, "logicalCores": 4 },
        "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
        "packages": packages.iter().map(|(n, v)| json!({ "name": n, "version": v })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

async fn report(s: &Store, org: OrgId, device: &str, packages: &[(&str, &str)]) {
    let id = DeviceId(device.parse().unwrap());
    s.record_inventory(id, org, &inventory(s, packages))
        .await
        .unwrap();
}

async fn exposure_through_mcp_rest_and_pages(cx: Ctx) {
    let w = world(&cx).await;
    let s = &w.store;
    s.import_advisories(fixture()).await.unwrap();
    report(
        s,
        w.org_a,
        &w.a_device,
        &[
            ("openssl", "3.0.11-1~deb12u1"),
            ("curl", "7.88.1-10+deb12u3"),
        ],
    )
    .await;
    report(s, w.org_b, &w.b_device, &[("curl", "7.88.1-10+deb12u3")]).await;

    // MCP, organization A's read key.
    let summary = ok(
        &w.app,
        &w.read,
        "get_vulnerability_exposure",
        json!({"action": "summary"}),
    )
    .await;
    assert_eq!(summary["devicesExposed"], 1, "{summary}");
    assert_eq!(summary["findingsTotal"], 2);
    assert_eq!(summary["bySeverity"][0]["severity"], "critical");
    assert_eq!(summary["advisories"][0]["id"], "DEBIAN-CVE-2023-38545");
    assert_eq!(summary["advisories"][0]["cvssScore"], 9.8);
    assert!(summary["hint"].as_str().unwrap().contains("manage_patches"));
    assert!(
        summary["hint"]
            .as_str()
            .unwrap()
            .contains("manage_deployments")
    );

    let by_cve = ok(
        &w.app,
        &w.read,
        "get_vulnerability_exposure",
        json!({"action": "devices", "id": "CVE-2023-38545"}),
    )
    .await;
    let findings = by_cve["findings"].as_array().unwrap();
    assert_eq!(
        findings.len(),
        1,
        "organization B's device is not A's: {by_cve}"
    );
    assert_eq!(findings[0]["deviceId"], w.a_device.as_str());
    assert_eq!(findings[0]["installedVersion"], "7.88.1-10+deb12u3");
    assert_eq!(findings[0]["fixedIn"], "7.88.1-10+deb12u4");
    assert_eq!(
        by_cve["fixes"][0]["text"],
        "fixed by upgrading curl to ≥ 7.88.1-10+deb12u4"
    );

    let device = ok(
        &w.app,
        &w.read,
        "get_vulnerability_exposure",
        json!({"action": "device", "deviceId": w.a_device}),
    )
    .await;
    assert_eq!(device["findings"].as_array().unwrap().len(), 2, "{device}");
    assert_eq!(device["findings"][0]["severity"], "critical");
    // Another organization's device id answers like a missing one.
    let other = tool(
        &w.app,
        &w.read,
        "get_vulnerability_exposure",
        json!({"action": "device", "deviceId": w.b_device}),
    )
    .await;
    assert_eq!(why(&other), "NOT_FOUND", "{other}");
    // Organization B's key sees B's exposure only.
    let b = ok(
        &w.app,
        &w.other_org_key,
        "get_vulnerability_exposure",
        json!({"action": "summary"}),
    )
    .await;
    assert_eq!(b["devicesExposed"], 1);
    assert_eq!(b["findingsTotal"], 1);
    let b_dev = tool(
        &w.app,
        &w.other_org_key,
        "get_vulnerability_exposure",
        json!({"action": "device", "deviceId": w.a_device}),
    )
    .await;
    assert_eq!(why(&b_dev), "NOT_FOUND", "{b_dev}");
    // A missing id names the field.
    let missing = tool(
        &w.app,
        &w.read,
        "get_vulnerability_exposure",
        json!({"action": "devices"}),
    )
    .await;
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("id"),
        "{missing}"
    );

    // manage_advisories: reading is Tier 1; a credential's upload is Tier 3, so it waits for
    // a person's approval and nothing is stored meanwhile.
    let listed = ok(
        &w.app,
        &w.read,
        "manage_advisories",
        json!({"action": "list", "query": "curl"}),
    )
    .await;
    let ids: Vec<&str> = listed["advisories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["DEBIAN-CVE-2023-38545", "USN-6429-1"]);
    let got = ok(
        &w.app,
        &w.read,
        "manage_advisories",
        json!({"action": "get", "id": "RLSA-2023:5453"}),
    )
    .await;
    assert_eq!(got["advisory"]["severity"], "high");
    assert_eq!(got["record"]["affected"][0]["package"]["name"], "glibc");
    let upload = tool(
        &w.app,
        &w.write,
        "manage_advisories",
        json!({"action": "import", "record": {"id": "LOCAL-1", "modified": "2024-01-01T00:00:00Z"}}),
    )
    .await;
    assert!(
        !why(&upload).is_empty(),
        "not run without approval: {upload}"
    );
    assert!(
        s.org(w.org_a)
            .vulnerabilities()
            .get_advisory("LOCAL-1")
            .await
            .is_err()
    );

    // REST.
    let rest = |uri: String, key: &str| {
        Request::get(uri)
            .header("x-api-key", key)
            .body(Body::empty())
            .unwrap()
    };
    let r = send(
        &w.app,
        rest("/api/v1/orgs/org-a/vulnerabilities".into(), &w.read),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["summary"]["devicesExposed"], 1);
    assert_eq!(r.body["advisories"][0]["devices"], 1);
    assert_eq!(r.body["advisories"][0]["cves"][0], "CVE-2023-38545");
    let r = send(
        &w.app,
        rest(
            "/api/v1/orgs/org-a/vulnerabilities/CVE-2023-38545".into(),
            &w.read,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["findings"][0]["fixedIn"], "7.88.1-10+deb12u4");
    let r = send(
        &w.app,
        rest(
            format!("/api/v1/orgs/org-a/vulnerabilities/devices/{}", w.a_device),
            &w.read,
        ),
    )
    .await;
    assert_eq!(
        r.body["findings"].as_array().unwrap().len(),
        2,
        "{}",
        r.body
    );
    let r = send(
        &w.app,
        rest(
            format!("/api/v1/orgs/org-a/vulnerabilities/devices/{}", w.b_device),
            &w.read,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = send(
        &w.app,
        rest(
            "/api/v1/orgs/org-a/vulnerabilities?severity=dire".into(),
            &w.read,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.to_string().contains("severity"), "{}", r.body);
    let r = send(
        &w.app,
        rest(
            "/api/v1/orgs/org-a/vulnerabilities".into(),
            &w.other_org_key,
        ),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "another organization's key"
    );

    // Pages.
    let b = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/vulnerabilities", &b.cookie).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let page = html(&r);
    assert!(
        page.contains("href=\"/o/org-a/vulnerabilities\""),
        "nav link"
    );
    assert!(page.contains("id=\"severity-summary\""), "{page}");
    assert!(page.contains("DEBIAN-CVE-2023-38545") && page.contains("DSA-5532-1"));
    let r = get(
        &w.app,
        "/o/org-a/vulnerabilities?severity=critical",
        &b.cookie,
    )
    .await;
    assert!(!html(&r).contains(">DSA-5532-1<"), "filtered to critical");
    let r = get(&w.app, "/o/org-a/vulnerabilities/CVE-2023-38545", &b.cookie).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let page = html(&r);
    assert!(page.contains("id=\"affected-devices\"") && page.contains("web-01"));
    assert!(
        page.contains("fixed by upgrading curl to ≥ 7.88.1-10+deb12u4"),
        "{page}"
    );
    let r = get(
        &w.app,
        &format!("/o/org-a/devices/{}", w.a_device),
        &b.cookie,
    )
    .await;
    let page = html(&r);
    assert!(page.contains("id=\"device-vulnerabilities\""), "{page}");
    assert!(page.contains("id=\"device-findings\""));
    let r = get(
        &w.app,
        &format!("/o/org-a/devices/{}/vulnerabilities", w.a_device),
        &b.cookie,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("fixed by upgrading openssl to ≥ 3.0.11-1~deb12u2"));
    let r = get(
        &w.app,
        &format!("/o/org-a/devices/{}/vulnerabilities", w.b_device),
        &b.cookie,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = get(&w.app, "/o/org-a/vulnerabilities/CVE-1999-0001", &b.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

breeze_store::on_both_backends!(exposure_through_mcp_rest_and_pages);
