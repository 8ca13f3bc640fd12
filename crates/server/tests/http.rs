//! The HTTP edge driven in-process (no socket): errors, authentication, tenancy, limits.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_store::testing::Ctx;
use common::{PASSWORD, World, err_msg, send, world};
use serde_json::json;

fn get(uri: &str) -> axum::http::request::Builder {
    Request::get(uri)
}

fn with_key(b: axum::http::request::Builder, key: &str) -> Request<Body> {
    b.header("x-api-key", key).body(Body::empty()).unwrap()
}

fn json_req(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
}

async fn login(w: &World, email: &str) -> String {
    let body = json!({ "email": email, "password": PASSWORD });
    let r = send(
        &w.app,
        json_req("POST", "/api/v1/auth/login")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let cookie = r
        .headers
        .get(header::SET_COOKIE)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    cookie.split(';').next().unwrap().to_owned()
}

/// A client configured with `…/mcp/` reaches the endpoint; one configured with the server's
/// address gets a JSON-RPC error naming the endpoint, not a 405 or a sign-in page.
async fn a_misdirected_mcp_client_is_told_the_endpoint(cx: Ctx) {
    let w = world(&cx).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "t", "version": "1" },
        },
    });
    let post = |uri: &str| {
        json_req("POST", uri)
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("x-api-key", &w.read)
            .body(Body::from(initialize.to_string()))
            .unwrap()
    };
    let r = send(&w.app, post("/mcp/")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    for req in [
        post("/"),
        get("/")
            .header(header::ACCEPT, "text/event-stream")
            .body(Body::empty())
            .unwrap(),
    ] {
        let r = send(&w.app, req).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
        assert_eq!(r.body["jsonrpc"], "2.0");
        assert!(
            err_msg(&r).contains("http://127.0.0.1:3000/mcp"),
            "{}",
            r.body
        );
    }
    // A browser still gets the dashboard (here: sign in first).
    let r = send(
        &w.app,
        get("/")
            .header(header::ACCEPT, "text/html")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(r.status.is_redirection(), "{}", r.status);
}

async fn health_and_readiness(cx: Ctx) {
    let w = world(&cx).await;
    let r = send(&w.app, get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(
        (r.status, r.body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let r = send(&w.app, get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK);
    w.state.store.close().await;
    let r = send(&w.app, get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body["error"]["code"], "unavailable");
    assert_eq!(
        err_msg(&r),
        "Service temporarily unavailable",
        "no internal detail leaks"
    );
}

async fn api_key_errors_are_worded_as_documented(cx: Ctx) {
    let w = world(&cx).await;
    let r = send(&w.app, get("/api/v1/orgs").body(Body::empty()).unwrap()).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::UNAUTHORIZED, "Missing X-API-Key header")
    );
    assert_eq!(r.body["error"]["code"], "unauthorized");
    let r = send(&w.app, with_key(get("/api/v1/orgs"), "sk-123")).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::UNAUTHORIZED, "Invalid API key format")
    );
    let r = send(
        &w.app,
        with_key(get("/api/v1/orgs"), &format!("brz_{}", "Q".repeat(43))),
    )
    .await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::UNAUTHORIZED, "Invalid API key")
    );
    let r = send(&w.app, with_key(get("/api/v1/orgs"), &w.read)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

async fn api_keys_see_only_their_organization(cx: Ctx) {
    let w = world(&cx).await;
    let r = send(&w.app, with_key(get("/api/v1/orgs"), &w.read)).await;
    let slugs: Vec<&str> = r.body["organizations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["org-a"]);

    let r = send(&w.app, with_key(get("/api/v1/orgs/org-a/devices"), &w.read)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["total"], 1);
    assert_eq!(r.body["devices"][0]["id"], w.a_device.as_str());

    // B, by slug or id, and B's device through A: indistinguishable from missing.
    for uri in [
        "/api/v1/orgs/org-b/devices".to_owned(),
        format!("/api/v1/orgs/{}/sites", w.org_b),
        "/api/v1/orgs/no-such-org/devices".to_owned(),
    ] {
        let r = send(&w.app, with_key(get(&uri), &w.read)).await;
        assert_eq!(
            (r.status, err_msg(&r)),
            (StatusCode::NOT_FOUND, "organization not found"),
            "{uri}"
        );
    }
    let r = send(
        &w.app,
        with_key(
            get(&format!("/api/v1/orgs/org-a/devices/{}", w.b_device)),
            &w.read,
        ),
    )
    .await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::NOT_FOUND, "Device not found or access denied")
    );
    let r = send(
        &w.app,
        with_key(
            get(&format!("/api/v1/orgs/org-a/devices/{}", w.a_device)),
            &w.read,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);

    // Keys cannot mint keys.
    let body = json!({ "name": "x", "scopes": ["ai:read"] });
    let req = json_req("POST", "/api/v1/orgs/org-a/api-keys")
        .header("x-api-key", &w.read)
        .body(Body::from(body.to_string()))
        .unwrap();
    let r = send(&w.app, req).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
}

async fn users_manage_keys_through_a_session(cx: Ctx) {
    let w = world(&cx).await;
    let cookie = login(&w, "admin@p.test").await;
    let me = send(
        &w.app,
        get("/api/v1/auth/me")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(me.body["user"]["id"], w.admin.to_string());
    assert_eq!(me.body["organizations"].as_array().unwrap().len(), 2);

    let body = json!({ "name": "Cursor", "scopes": ["ai:read", "ai:write"] });
    let req = json_req("POST", "/api/v1/orgs/org-a/api-keys")
        .header(header::COOKIE, &cookie)
        .body(Body::from(body.to_string()))
        .unwrap();
    let created = send(&w.app, req).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let key = created.body["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("brz_"));
    assert!(created.body.get("key_hash").is_none());
    let id = created.body["id"].as_str().unwrap().to_owned();

    let listed = send(
        &w.app,
        get("/api/v1/orgs/org-a/api-keys")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let text = listed.body.to_string();
    assert!(
        !text.contains(&key[4..]) && !text.contains("key_hash"),
        "listing shows no secret: {text}"
    );
    assert_eq!(
        listed.body["api_keys"].as_array().unwrap().len(),
        3,
        "the world's two and this one"
    );

    assert_eq!(
        send(&w.app, with_key(get("/api/v1/orgs"), &key))
            .await
            .status,
        StatusCode::OK
    );
    // Revoking through B's path does not find A's key.
    let wrong = send(
        &w.app,
        Request::delete(format!("/api/v1/orgs/org-b/api-keys/{id}"))
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::NOT_FOUND);
    assert_eq!(
        send(&w.app, with_key(get("/api/v1/orgs"), &key))
            .await
            .status,
        StatusCode::OK
    );
    let revoked = send(
        &w.app,
        Request::delete(format!("/api/v1/orgs/org-a/api-keys/{id}"))
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert!(revoked.body["revoked_at"].is_string());
    let r = send(&w.app, with_key(get("/api/v1/orgs"), &key)).await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::UNAUTHORIZED, "Invalid API key")
    );

    // Signing out ends the session.
    let out = send(
        &w.app,
        Request::post("/api/v1/auth/logout")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    let r = send(
        &w.app,
        get("/api/v1/auth/me")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

async fn permissions_come_from_the_role(cx: Ctx) {
    let w = world(&cx).await;
    let cookie = login(&w, "viewer@p.test").await;
    let r = send(
        &w.app,
        get("/api/v1/orgs/org-a/devices")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(
        &w.app,
        get("/api/v1/orgs/org-a/api-keys")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (
            StatusCode::FORBIDDEN,
            "permission denied: requires apikeys.manage"
        )
    );
    let r = send(
        &w.app,
        get("/api/v1/orgs/org-b/devices")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "no role in B");
}

async fn sign_in_cookie_and_failures(cx: Ctx) {
    let w = world(&cx).await;
    let body = json!({ "email": "admin@p.test", "password": PASSWORD });
    let r = send(
        &w.app,
        json_req("POST", "/api/v1/auth/login")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await;
    let cookie = r.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    for attr in [
        "breeze_session=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(attr), "{cookie} lacks {attr}");
    }
    assert!(!cookie.contains("Secure"), "plain-http development server");
    let bad = json!({ "email": "admin@p.test", "password": "nope nope nope" });
    let r = send(
        &w.app,
        json_req("POST", "/api/v1/auth/login")
            .body(Body::from(bad.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, err_msg(&r)),
        (StatusCode::UNAUTHORIZED, "Invalid email or password")
    );
    assert!(r.headers.get(header::SET_COOKIE).is_none());
}

async fn sign_in_is_throttled_with_retry_after(cx: Ctx) {
    let w = world(&cx).await;
    let bad = json!({ "email": "viewer@p.test", "password": "not the password" });
    for _ in 0..10 {
        let r = send(
            &w.app,
            json_req("POST", "/api/v1/auth/login")
                .body(Body::from(bad.to_string()))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    }
    let good = json!({ "email": "viewer@p.test", "password": PASSWORD });
    let r = send(
        &w.app,
        json_req("POST", "/api/v1/auth/login")
            .body(Body::from(good.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited"))
    );
    let retry: u64 = r
        .headers
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=300).contains(&retry));
}

/// Behind a balancer (`BREEZE_TRUSTED_PROXIES`) sign-in limits count each client by the address
/// the balancer forwarded for: an attacker spraying passwords, writing a fresh address of its
/// own into `X-Forwarded-For` each time, is refused after 30 failures while the owner, another
/// client of the same balancer, signs in; a peer that is not a trusted proxy is counted by its
/// own address whatever header it sends.
async fn sign_in_behind_a_trusted_proxy_counts_each_client(cx: Ctx) {
    let w = world(&cx).await;
    let app = common::build(
        &w,
        |c| {
            c.trusted_proxies =
                breeze_server::client_addr::TrustedProxies::parse("10.0.0.0/8").unwrap();
        },
        std::sync::Arc::new(breeze_limits::MemoryLimiter::new()),
    );
    let login = |peer: &str, forwarded: &str, email: &str, password: &str| {
        let peer: std::net::SocketAddr = peer.parse().unwrap();
        json_req("POST", "/api/v1/auth/login")
            .extension(axum::extract::ConnectInfo(peer))
            .header("x-forwarded-for", forwarded)
            .body(Body::from(
                json!({ "email": email, "password": password }).to_string(),
            ))
            .unwrap()
    };
    let refused_of = |statuses: &[StatusCode]| {
        statuses
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count()
    };
    let mut statuses = Vec::new();
    for i in 0..35 {
        let spoofed = format!("203.0.113.{i}, 198.51.100.7");
        let email = format!("nobody{i}@p.test");
        let r = send(&app, login("10.0.0.2:4000", &spoofed, &email, "guess")).await;
        statuses.push(r.status);
    }
    assert_eq!(
        refused_of(&statuses),
        5,
        "30 failures, then refused: {statuses:?}"
    );
    let r = send(
        &app,
        login("10.0.0.2:4001", "192.0.2.44", "viewer@p.test", PASSWORD),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the owner is not locked out: {}",
        r.body
    );

    // Straight from the internet, the header is the client's word and is not believed.
    let mut statuses = Vec::new();
    for i in 0..35 {
        let claimed = format!("192.0.2.{i}");
        let email = format!("nobody{i}@p.test");
        let r = send(&app, login("198.51.100.9:5000", &claimed, &email, "guess")).await;
        statuses.push(r.status);
    }
    assert_eq!(
        refused_of(&statuses),
        5,
        "counted as 198.51.100.9: {statuses:?}"
    );
}

async fn bad_requests_get_clear_errors(cx: Ctx) {
    let w = world(&cx).await;
    let cookie = login(&w, "admin@p.test").await;
    let post = |body: String, ct: &str| {
        Request::post("/api/v1/orgs/org-a/api-keys")
            .header(header::COOKIE, &cookie)
            .header(header::CONTENT_TYPE, ct)
            .body(Body::from(body))
            .unwrap()
    };
    let r = send(&w.app, post("{not json".into(), "application/json")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).starts_with("Malformed JSON"), "{}", r.body);
    let r = send(
        &w.app,
        post(
            json!({ "name": "x", "scopes": ["ai:root"] }).to_string(),
            "application/json",
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        err_msg(&r).contains("ai:root"),
        "names the bad scope: {}",
        r.body
    );
    let r = send(
        &w.app,
        post(
            json!({ "name": "x", "scopes": ["ai:read"], "colour": 1 }).to_string(),
            "application/json",
        ),
    )
    .await;
    assert!(
        err_msg(&r).contains("colour"),
        "names the unknown field: {}",
        r.body
    );
    let r = send(
        &w.app,
        post(json!({ "name": "x" }).to_string(), "application/json"),
    )
    .await;
    assert!(
        err_msg(&r).contains("scopes"),
        "names the missing field: {}",
        r.body
    );
    let r = send(&w.app, post("{}".into(), "text/plain")).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let huge = json!({ "name": "x".repeat(2 * 1024 * 1024), "scopes": ["ai:read"] }).to_string();
    let r = send(&w.app, post(huge, "application/json")).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    let r = send(
        &w.app,
        with_key(get("/api/v1/orgs/org-a/devices?limit=0"), &w.read),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = send(
        &w.app,
        with_key(get("/api/v1/orgs/org-a/devices?status=exploded"), &w.read),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).contains("exploded"), "{}", r.body);
    let r = send(
        &w.app,
        get("/api/v1/nothing-here").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let r = send(
        &w.app,
        Request::put("/healthz").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

async fn request_ids_are_issued_and_echoed(cx: Ctx) {
    let w = world(&cx).await;
    let r = send(&w.app, get("/healthz").body(Body::empty()).unwrap()).await;
    let id = r.headers.get("x-request-id").unwrap().to_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    let r = send(
        &w.app,
        get("/healthz")
            .header("x-request-id", "trace-me-42")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.headers.get("x-request-id").unwrap(), "trace-me-42");
    // The request id reaches the audit record of what the request did.
    let cookie = login(&w, "admin@p.test").await;
    let body = json!({ "name": "traced", "scopes": ["ai:read"] });
    let req = json_req("POST", "/api/v1/orgs/org-a/api-keys")
        .header(header::COOKIE, &cookie)
        .header("x-request-id", "req-777")
        .body(Body::from(body.to_string()))
        .unwrap();
    assert_eq!(send(&w.app, req).await.status, StatusCode::CREATED);
    let filter = breeze_store::AuditFilter {
        action: Some("api_key.create".into()),
        ..Default::default()
    };
    let page = w
        .state
        .store
        .org(w.org_a)
        .audit()
        .query_audit(&filter, None, 10)
        .await
        .unwrap();
    assert_eq!(page.records[0].event.request_id.as_deref(), Some("req-777"));
    assert_eq!(page.records[0].event.actor.id, w.admin.to_string());
}

async fn audit_log_is_queryable_per_organization(cx: Ctx) {
    let w = world(&cx).await;
    // The world's setup wrote audit records in both organizations (sites, devices, keys).
    let r = send(
        &w.app,
        with_key(get("/api/v1/orgs/org-a/audit?limit=2"), &w.read),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["records"].as_array().unwrap().len(), 2);
    let mut seen = Vec::new();
    let mut next = r.body["next"].as_str().map(str::to_owned);
    seen.extend(
        r.body["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].clone()),
    );
    while let Some(cursor) = next {
        let r = send(
            &w.app,
            with_key(
                get(&format!("/api/v1/orgs/org-a/audit?limit=2&cursor={cursor}")),
                &w.read,
            ),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        for rec in r.body["records"].as_array().unwrap() {
            assert_eq!(rec["org_id"], w.org_a.to_string());
            seen.push(rec["id"].clone());
        }
        next = r.body["next"].as_str().map(str::to_owned);
    }
    let total = seen.len();
    seen.dedup();
    assert_eq!(seen.len(), total, "no record repeats across pages");
    let all = send(
        &w.app,
        with_key(get("/api/v1/orgs/org-a/audit?limit=500"), &w.read),
    )
    .await;
    assert_eq!(all.body["records"].as_array().unwrap().len(), total);

    let r = send(
        &w.app,
        with_key(
            get("/api/v1/orgs/org-a/audit?action=api_key.create&actor_type=system"),
            &w.read,
        ),
    )
    .await;
    assert_eq!(
        r.body["records"].as_array().unwrap().len(),
        2,
        "the world's two keys: {}",
        r.body
    );
    assert_eq!(r.body["records"][0]["action"], "api_key.create");
    let r = send(&w.app, with_key(get("/api/v1/orgs/org-b/audit"), &w.read)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = send(
        &w.app,
        with_key(get("/api/v1/orgs/org-a/audit?cursor=garbage"), &w.read),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = send(
        &w.app,
        with_key(get("/api/v1/orgs/org-a/audit?actor_type=robot"), &w.read),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(err_msg(&r).contains("robot"), "{}", r.body);
}

macro_rules! sqlite_tests {
    ($($case:ident),+ $(,)?) => {$(
        #[tokio::test]
        async fn $case() {
            breeze_store::testing::run(Backend::Sqlite, super::$case).await;
        }
    )+};
}

mod http {
    sqlite_tests!(
        a_misdirected_mcp_client_is_told_the_endpoint,
        health_and_readiness,
        api_key_errors_are_worded_as_documented,
        api_keys_see_only_their_organization,
        users_manage_keys_through_a_session,
        permissions_come_from_the_role,
        sign_in_cookie_and_failures,
        bad_requests_get_clear_errors,
        request_ids_are_issued_and_echoed,
        audit_log_is_queryable_per_organization,
        sign_in_is_throttled_with_retry_after,
        sign_in_behind_a_trusted_proxy_counts_each_client,
    );
    use breeze_store::Backend;
}
