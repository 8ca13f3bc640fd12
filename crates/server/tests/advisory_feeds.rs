//! The scheduled advisory refresh against a local feed that speaks HTTP as osv.dev's bucket
//! does (an `all.zip` with an `ETag`, `304 Not Modified` to a matching `If-None-Match`): the
//! first check imports, a check before the period asks nothing, a later one costs one
//! conditional request, a changed archive imports what changed, a failure is recorded and
//! retried after an hour with the imported advisories kept, a download past the cap and a body
//! that holds no OSV record are refused, and of two instances checking at once one downloads.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{
    io::{Cursor, Write as _},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use breeze_server::advisory_feeds::{AdvisoryFeedsConfig, AdvisoryRefresh};
use breeze_store::{FeedCheck, Store, testing::Ctx};
use serde_json::Value;

const DSA_5321: &str = include_str!("../../store/tests/fixtures/osv/DSA-5321-1.json");
const DSA_5532: &str = include_str!("../../store/tests/fixtures/osv/DSA-5532-1.json");
const DEBIAN_CVE: &str = include_str!("../../store/tests/fixtures/osv/DEBIAN-CVE-2023-38545.json");

fn archive(records: &[&str]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (i, r) in records.iter().enumerate() {
        w.start_file(format!("record-{i}.json"), opts).unwrap();
        w.write_all(r.as_bytes()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// What the feed serves, and what it was asked.
#[derive(Default)]
struct Feed {
    body: Mutex<Vec<u8>>,
    etag: Mutex<String>,
    /// Answered instead of the archive while set.
    fail: Mutex<Option<StatusCode>>,
    requests: AtomicUsize,
    downloads: AtomicUsize,
}

impl Feed {
    fn serve(&self, body: Vec<u8>, etag: &str) {
        *self.body.lock().unwrap() = body;
        *self.etag.lock().unwrap() = format!("\"{etag}\"");
    }
}

async fn all_zip(State(feed): State<Arc<Feed>>, headers: HeaderMap) -> Response {
    feed.requests.fetch_add(1, Ordering::SeqCst);
    // Slow enough that two instances asking at once overlap.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if let Some(status) = *feed.fail.lock().unwrap() {
        return status.into_response();
    }
    let etag = feed.etag.lock().unwrap().clone();
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    feed.downloads.fetch_add(1, Ordering::SeqCst);
    let body = feed.body.lock().unwrap().clone();
    (
        [
            (header::ETAG, etag),
            (header::CONTENT_TYPE, "application/zip".to_owned()),
        ],
        body,
    )
        .into_response()
}

/// The feed on a loopback port; its base URL.
async fn start(feed: Arc<Feed>) -> String {
    let app = Router::new()
        .route("/Debian/all.zip", get(all_zip))
        .route("/junk", get(|| async { "not an advisory" }))
        .with_state(feed);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn refresher(store: &Store, urls: &[&str], max_bytes: u64) -> AdvisoryRefresh {
    AdvisoryRefresh::new(
        store.clone(),
        AdvisoryFeedsConfig {
            urls: urls.iter().map(|u| (*u).to_owned()).collect(),
            every: Duration::from_secs(24 * 3600),
            max_bytes,
        },
    )
}

fn imported(check: &FeedCheck) -> Value {
    match check {
        FeedCheck::Imported { outcome, .. } => serde_json::from_str(outcome).unwrap(),
        other => panic!("not imported: {other:?}"),
    }
}

async fn refreshes_when_due_and_only_what_changed(cx: Ctx) {
    let feed = Arc::new(Feed::default());
    feed.serve(archive(&[DSA_5321, DSA_5532]), "v1");
    let base = start(feed.clone()).await;
    let url = format!("{base}/Debian/all.zip");
    let store = &cx.store;
    let worker = refresher(store, &[&url], 1 << 20);

    // The first check downloads and imports.
    let report = worker.refresh().await.unwrap();
    assert_eq!(report.len(), 1, "{report:?}");
    let outcome = imported(&report[0].1);
    assert_eq!(outcome["added"], 2, "{outcome}");
    let listed = store.advisory_feeds().await.unwrap();
    assert_eq!(listed[0].etag.as_deref(), Some("\"v1\""));
    assert!(listed[0].fetched_at.is_some() && listed[0].error.is_none());
    assert!(listed[0].claimed_until.is_none(), "the claim is freed");

    // Before the period: nothing is asked.
    cx.clock.advance(chrono::Duration::hours(23));
    assert!(worker.refresh().await.unwrap().is_empty());
    assert_eq!(feed.requests.load(Ordering::SeqCst), 1);

    // After it: one conditional request, answered 304, nothing downloaded.
    cx.clock.advance(chrono::Duration::hours(2));
    let report = worker.refresh().await.unwrap();
    assert!(matches!(report[0].1, FeedCheck::Unchanged), "{report:?}");
    assert_eq!(feed.requests.load(Ordering::SeqCst), 2);
    assert_eq!(feed.downloads.load(Ordering::SeqCst), 1);
    let after = &store.advisory_feeds().await.unwrap()[0];
    assert!(after.checked_at > listed[0].checked_at);
    assert_eq!(after.fetched_at, listed[0].fetched_at);

    // A changed archive: the new record is added, the others found unchanged.
    feed.serve(archive(&[DSA_5321, DSA_5532, DEBIAN_CVE]), "v2");
    cx.clock.advance(chrono::Duration::hours(25));
    let report = worker.refresh().await.unwrap();
    let outcome = imported(&report[0].1);
    assert_eq!(
        (outcome["added"].clone(), outcome["unchanged"].clone()),
        (1.into(), 2.into())
    );

    // The feed fails: recorded, the last import kept, retried after an hour, not before.
    *feed.fail.lock().unwrap() = Some(StatusCode::SERVICE_UNAVAILABLE);
    cx.clock.advance(chrono::Duration::hours(25));
    let report = worker.refresh().await.unwrap();
    match &report[0].1 {
        FeedCheck::Failed(why) => assert!(why.contains("503"), "{why}"),
        other => panic!("{other:?}"),
    }
    let failed = &store.advisory_feeds().await.unwrap()[0];
    assert!(failed.error.as_deref().unwrap().contains("503"));
    assert!(failed.outcome.as_deref().unwrap().contains("\"added\":1"));
    cx.clock.advance(chrono::Duration::minutes(30));
    assert!(
        worker.refresh().await.unwrap().is_empty(),
        "too soon to retry"
    );
    *feed.fail.lock().unwrap() = None;
    cx.clock.advance(chrono::Duration::minutes(31));
    let report = worker.refresh().await.unwrap();
    assert!(matches!(report[0].1, FeedCheck::Unchanged), "{report:?}");
    assert!(store.advisory_feeds().await.unwrap()[0].error.is_none());

    // Of two instances checking at once, one asks.
    let other = refresher(store, &[&url], 1 << 20);
    cx.clock.advance(chrono::Duration::hours(25));
    let before = feed.requests.load(Ordering::SeqCst);
    let (a, b) = tokio::join!(worker.refresh(), other.refresh());
    assert_eq!(a.unwrap().len() + b.unwrap().len(), 1);
    assert_eq!(feed.requests.load(Ordering::SeqCst), before + 1);
}

async fn refuses_what_is_too_large_or_not_osv(cx: Ctx) {
    let feed = Arc::new(Feed::default());
    feed.serve(archive(&[DSA_5321, DSA_5532]), "v1");
    let base = start(feed.clone()).await;
    let (big, junk) = (format!("{base}/Debian/all.zip"), format!("{base}/junk"));
    let store = &cx.store;

    let report = refresher(store, &[&big, &junk], 64)
        .refresh()
        .await
        .unwrap();
    assert_eq!(report.len(), 2, "{report:?}");
    for (url, check) in &report {
        let FeedCheck::Failed(why) = check else {
            panic!("{url}: {check:?}");
        };
        let expected = if *url == big {
            "larger than 64 bytes (BREEZE_ADVISORY_MAX_MB)"
        } else {
            "no OSV record could be read"
        };
        assert!(why.contains(expected), "{url}: {why}");
    }
    for f in store.advisory_feeds().await.unwrap() {
        assert!(f.fetched_at.is_none() && f.etag.is_none(), "{f:?}");
    }

    // An unreachable feed is a failure with the reason, too.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/all.zip", l.local_addr().unwrap())
    };
    let report = refresher(store, &[&closed], 1 << 20)
        .refresh()
        .await
        .unwrap();
    assert!(
        matches!(&report[0].1, FeedCheck::Failed(why) if why.contains("request failed")),
        "{report:?}"
    );
}

breeze_store::on_both_backends!(
    refreshes_when_due_and_only_what_changed,
    refuses_what_is_too_large_or_not_osv
);
