//! `GET`/`PUT /api/v1/orgs/{org}/protected-paths`: who may read and change an organization's
//! additions, what is refused, and that the built-in list cannot be removed.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_store::testing::Ctx;
use common::{PASSWORD, World, send, world};
use serde_json::{Value, json};

async fn login(w: &World, email: &str) -> String {
    let body = json!({ "email": email, "password": PASSWORD });
    let r = send(
        &w.app,
        Request::post("/api/v1/auth/login")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let cookie = r.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

fn put(org: &str, cookie: &str, body: &Value) -> Request<Body> {
    Request::put(format!("/api/v1/orgs/{org}/protected-paths"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::COOKIE, cookie)
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn get(org: &str, cookie: &str) -> Request<Body> {
    Request::get(format!("/api/v1/orgs/{org}/protected-paths"))
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap()
}

async fn admins_add_protected_paths_and_nobody_removes_builtins(cx: Ctx) {
    let w = world(&cx).await;
    let admin = login(&w, "admin@p.test").await;
    let viewer = login(&w, "viewer@p.test").await;

    let r = send(&w.app, get("org-a", &viewer)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["additions"], json!([]));
    let builtin = r.body["builtin"].to_string();
    for p in [
        "/etc/shadow",
        "~/.ssh",
        "/proc/*/environ",
        "/etc/breeze-agent",
    ] {
        assert!(builtin.contains(p), "{p} missing from {builtin}");
    }

    let body = json!({ "additions": ["/srv/vault", "~/.config/app/token"] });
    let r = send(&w.app, put("org-a", &viewer, &body)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a viewer cannot change it");
    let r = send(
        &w.app,
        Request::put("/api/v1/orgs/org-a/protected-paths")
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-api-key", &w.write)
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "an API key cannot change it"
    );

    let r = send(&w.app, put("org-a", &admin, &body)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["additions"], body["additions"]);
    let r = send(&w.app, get("org-a", &viewer)).await;
    assert_eq!(r.body["additions"], body["additions"]);
    assert!(r.body["builtin"].to_string().contains("/etc/shadow"));
    let r = send(&w.app, get("org-b", &admin)).await;
    assert_eq!(r.body["additions"], json!([]), "B's list is its own");

    // Emptying the additions leaves the built-in list whole: it is not data.
    let r = send(&w.app, put("org-a", &admin, &json!({ "additions": [] }))).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body["builtin"].to_string().contains("/etc/shadow"));
    let r = send(
        &w.app,
        put("org-a", &admin, &json!({ "builtin": [], "additions": [] })),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);

    for bad in ["relative/path", "/a/../b", "/", "/x\u{0}y"] {
        let r = send(&w.app, put("org-a", &admin, &json!({ "additions": [bad] }))).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad:?}: {}", r.body);
    }

    let audit = send(
        &w.app,
        Request::get("/api/v1/orgs/org-a/audit?action=org.protected_paths.set")
            .header(header::COOKIE, &admin)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.body);
    let records = audit.body.to_string();
    assert!(records.contains("/srv/vault"), "{records}");
}

macro_rules! sqlite_tests {
    ($($case:ident),+ $(,)?) => {$(
        #[tokio::test]
        async fn $case() {
            breeze_store::testing::run(Backend::Sqlite, super::$case).await;
        }
    )+};
}

mod protected_paths {
    sqlite_tests!(admins_add_protected_paths_and_nobody_removes_builtins);
    use breeze_store::Backend;
}
