//! The live query pages driven in-process on both backends: the form and its navigation link,
//! the prepare summary (nothing sent), a run started from the page opening its own page, the
//! rows fragment and the CSV export showing stored answers, and another organization's query
//! and devices not found.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::http::StatusCode;
use breeze_core::DeviceId;
use breeze_store::{NewLiveAnswer, testing::Ctx};
use common::browser::{get, html, location, post_form, sign_in};
use common::world;
use serde_json::json;

async fn pick_prepare_run_and_read(cx: Ctx) {
    let w = world(&cx).await;
    let b = sign_in(&w.app, "admin@p.test").await;

    let r = get(&w.app, "/o/org-a/live-queries", &b.cookie).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let page = html(&r);
    assert!(page.contains("href=\"/o/org-a/live-queries\""), "nav link");
    assert!(page.contains("id=\"live-query-form\""));
    assert!(page.contains("no-queries"));

    let form = |step: &'static str, target: &'static str, device: &str| {
        vec![
            ("csrf".to_owned(), b.csrf.clone()),
            ("question".to_owned(), "processes".to_owned()),
            ("name".to_owned(), "ssh".to_owned()),
            ("target".to_owned(), target.to_owned()),
            ("device".to_owned(), device.to_owned()),
            ("step".to_owned(), step.to_owned()),
        ]
    };
    let pairs = |f: &Vec<(String, String)>| -> Vec<(String, String)> { f.clone() };
    let send = |f: Vec<(String, String)>| {
        let app = w.app.clone();
        let cookie = b.cookie.clone();
        async move {
            let refs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            post_form(&app, "/o/org-a/live-queries", &cookie, &refs).await
        }
    };

    // Prepare: the summary, nothing recorded.
    let r = send(pairs(&form("prepare", "organization", ""))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let page = html(&r);
    assert!(page.contains("id=\"prepare-summary\""), "{page}");
    assert!(
        page.contains("<strong id=\"online-count\">1</strong>"),
        "{page}"
    );
    assert!(
        w.store
            .org(w.org_a)
            .live_queries()
            .list_queries(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Another organization's device is not found; nothing starts.
    let r = send(pairs(&form("run", "device", &w.b_device))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(html(&r).contains("device not found"), "{}", r.body);
    // A form without a CSRF token is refused.
    let r = post_form(
        &w.app,
        "/o/org-a/live-queries",
        &b.cookie,
        &[("question", "processes"), ("step", "run")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Run: the query's page opens at once and follows the answers.
    let r = send(pairs(&form("run", "device", &w.a_device))).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let at = location(&r).to_owned();
    assert!(at.starts_with("/o/org-a/live-queries/"), "{at}");
    let id: uuid::Uuid = at.rsplit('/').next().unwrap().parse().unwrap();
    let r = get(&w.app, &at, &b.cookie).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let page = html(&r);
    assert!(page.contains("data-refresh-on=\"livequeries\""), "{page}");
    assert!(page.contains("s-running"), "{page}");

    // The device's answer arrives (stored as the run stores it): the fragment and CSV show it.
    let device: DeviceId = w.a_device.parse().unwrap();
    w.store
        .org(w.org_a)
        .live_queries()
        .record_answers(
            id,
            vec![NewLiveAnswer {
                device_id: device,
                status: "answered".into(),
                rows: vec![json!({ "pid": 4242, "name": "sshd", "user": "root" })],
                cap: Some("rows".into()),
                error: None,
            }],
        )
        .await
        .unwrap();
    let r = get(&w.app, &format!("{at}/rows"), &b.cookie).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let frag = html(&r);
    assert!(frag.contains("4242") && frag.contains("sshd"), "{frag}");
    assert!(frag.contains("cap rows hit"), "{frag}");
    let r = get(&w.app, &format!("{at}/export.csv"), &b.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let csv = r.body.as_str().unwrap().to_owned();
    assert!(
        csv.starts_with("deviceId,hostname,status,cap,error,pid,name,path"),
        "{csv}"
    );
    assert!(csv.contains(",web-01,answered,rows,,4242,sshd,"), "{csv}");
    let r = get(&w.app, "/o/org-a/live-queries", &b.cookie).await;
    assert!(html(&r).contains(&format!("q-{id}")), "listed");

    // Another organization: the same person, the other organization's pages, not found.
    for path in ["", "/rows", "/export.csv"] {
        let r = get(
            &w.app,
            &format!("/o/org-b/live-queries/{id}{path}"),
            &b.cookie,
        )
        .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
    }
    let r = get(&w.app, "/o/org-b/live-queries", &b.cookie).await;
    assert!(!html(&r).contains(&format!("q-{id}")), "not listed there");
}

breeze_store::on_both_backends!(pick_prepare_run_and_read);
