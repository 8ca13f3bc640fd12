//! The dashboard's pages driven in-process: sign-in and `next`, CSRF, headers, assets, and
//! organization isolation of every page and form.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_store::testing::Ctx;
use common::{PASSWORD, World, send, world};

/// A browser: its cookies and the last page's CSRF token.
pub(crate) struct Browser {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
}

const ORIGIN: &str = "http://127.0.0.1:3000";

fn set_cookies(r: &common::Reply) -> Vec<String> {
    r.headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

fn cookie_value(r: &common::Reply, name: &str) -> Option<String> {
    set_cookies(r).into_iter().find_map(|c| {
        let first = c.split(';').next().unwrap().to_owned();
        first.strip_prefix(&format!("{name}=")).map(str::to_owned)
    })
}

fn html(r: &common::Reply) -> &str {
    r.body
        .as_str()
        .unwrap_or_else(|| panic!("not HTML: {}", r.body))
}

/// The `value` of the hidden input named `name` in `page`.
fn hidden(page: &str, name: &str) -> String {
    let at = page
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no hidden {name} in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

fn location(r: &common::Reply) -> &str {
    r.headers
        .get(header::LOCATION)
        .map_or("", |v| v.to_str().unwrap())
}

async fn get(app: &Router, uri: &str, cookie: &str) -> common::Reply {
    let mut b = Request::get(uri);
    if !cookie.is_empty() {
        b = b.header(header::COOKIE, cookie);
    }
    send(app, b.body(Body::empty()).unwrap()).await
}

async fn post_form(app: &Router, uri: &str, cookie: &str, form: &[(&str, &str)]) -> common::Reply {
    let body = serde_urlencoded::to_string(form).unwrap();
    let mut b = Request::post(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ORIGIN, ORIGIN);
    if !cookie.is_empty() {
        b = b.header(header::COOKIE, cookie);
    }
    send(app, b.body(Body::from(body)).unwrap()).await
}

/// Signs `email` in through the sign-in page and returns the browser state.
pub(crate) async fn sign_in(app: &Router, email: &str) -> Browser {
    let r = get(app, "/login", "").await;
    assert_eq!(r.status, StatusCode::OK);
    let pre = cookie_value(&r, "breeze_login").unwrap();
    let token = hidden(html(&r), "csrf");
    assert_eq!(pre, token);
    let r = post_form(
        app,
        "/login",
        &format!("breeze_login={pre}"),
        &[
            ("csrf", &token),
            ("next", "/"),
            ("email", email),
            ("password", PASSWORD),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let session = cookie_value(&r, "breeze_session").unwrap();
    let cookie = format!("breeze_session={session}");
    let r = get(app, "/", &cookie).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let r = get(app, location(&r), &cookie).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let csrf = hidden(html(&r), "csrf");
    Browser { cookie, csrf }
}

async fn signed_out_pages_redirect_to_sign_in_with_next(cx: Ctx) {
    let w = world(&cx).await;
    for (path, next) in [
        ("/", "/login"),
        ("/o/org-a", "/login?next=%2Fo%2Forg-a"),
        (
            "/o/org-a?x=1&y=%2F",
            "/login?next=%2Fo%2Forg-a%3Fx%3D1%26y%3D%252F",
        ),
    ] {
        let r = get(&w.app, path, "").await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(location(&r), next, "{path}");
    }
    // A stale or forged session is no session.
    let r = get(&w.app, "/o/org-a", "breeze_session=forged").await;
    assert_eq!(location(&r), "/login?next=%2Fo%2Forg-a");
    // htmx requests are told to navigate instead of swapping the sign-in page in.
    let r = send(
        &w.app,
        Request::get("/o/org-a")
            .header("hx-request", "true")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        r.headers.get("hx-redirect").unwrap(),
        "/login?next=%2Fo%2Forg-a"
    );
}

async fn sign_in_goes_to_next_only_on_this_site(cx: Ctx) {
    let w = world(&cx).await;
    // Sign-in is throttled per email (10 in 5 minutes): the attempts alternate two people.
    let turn = std::sync::atomic::AtomicUsize::new(0);
    let attempt = |next: &'static str| {
        let app = w.app.clone();
        let email = ["admin@p.test", "viewer@p.test"]
            [turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2];
        async move {
            let r = get(&app, "/login", "").await;
            let pre = cookie_value(&r, "breeze_login").unwrap();
            let r = post_form(
                &app,
                "/login",
                &format!("breeze_login={pre}"),
                &[
                    ("csrf", &pre),
                    ("next", next),
                    ("email", email),
                    ("password", PASSWORD),
                ],
            )
            .await;
            assert_eq!(r.status, StatusCode::SEE_OTHER, "{next}: {}", r.body);
            assert!(cookie_value(&r, "breeze_session").is_some());
            location(&r).to_owned()
        }
    };
    assert_eq!(attempt("/o/org-a/approvals").await, "/o/org-a/approvals");
    assert_eq!(
        attempt("/oauth/auth?client_id=c&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb").await,
        "/oauth/auth?client_id=c&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb"
    );
    for evil in [
        "//evil.example",
        "https://evil.example/",
        "/\\evil.example",
        "\\\\evil.example",
        "/%2f%2fevil.example",
        "/%5cevil.example",
        "/%252f%252fevil.example",
        "javascript:alert(1)",
        "http:evil.example",
        "/%0d%0aLocation:%20https://evil.example",
        "",
    ] {
        assert_eq!(attempt(evil).await, "/", "{evil:?}");
    }
    // The form carries `next` through: rendered from the query, validated on the way in.
    let r = get(&w.app, "/login?next=%2Fo%2Forg-a%2Faudit", "").await;
    assert_eq!(hidden(html(&r), "next"), "/o/org-a/audit");
    let r = get(&w.app, "/login?next=%2F%2Fevil.example", "").await;
    assert_eq!(hidden(html(&r), "next"), "/");
    // Signed in already: /login goes straight on.
    let b = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/login?next=%2Fo%2Forg-b", &b.cookie).await;
    assert_eq!(
        (r.status, location(&r)),
        (StatusCode::SEE_OTHER, "/o/org-b")
    );
    let r = get(&w.app, "/login?next=https%3A%2F%2Fevil.example", &b.cookie).await;
    assert_eq!(location(&r), "/");
}

async fn sign_in_refuses_bad_passwords_forged_forms_and_other_origins(cx: Ctx) {
    let w = world(&cx).await;
    let r = get(&w.app, "/login", "").await;
    let pre = cookie_value(&r, "breeze_login").unwrap();
    let cookie = format!("breeze_login={pre}");
    let form = |csrf: &'static str, password: &'static str| {
        vec![
            ("csrf", csrf),
            ("next", "/o/org-a"),
            ("email", "admin@p.test"),
            ("password", password),
        ]
    };
    let pre_static: &'static str = Box::leak(pre.clone().into_boxed_str());
    // Wrong password: the form again, with the error and the email kept.
    let r = post_form(&w.app, "/login", &cookie, &form(pre_static, "nope")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(html(&r).contains("Invalid email or password."));
    assert!(html(&r).contains("value=\"admin@p.test\""));
    assert_eq!(hidden(html(&r), "next"), "/o/org-a");
    assert!(cookie_value(&r, "breeze_session").is_none());
    // A forged form: no pre-session cookie, or a token that is not the cookie's.
    for (cookie, token) in [
        ("", pre_static),
        (cookie.as_str(), "forged"),
        (cookie.as_str(), ""),
    ] {
        let r = post_form(&w.app, "/login", cookie, &form(token, PASSWORD)).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{cookie} {token}");
        assert!(cookie_value(&r, "breeze_session").is_none());
    }
    // Another origin.
    let body = serde_urlencoded::to_string(form(pre_static, PASSWORD)).unwrap();
    let r = send(
        &w.app,
        Request::post("/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ORIGIN, "https://evil.example")
            .header(header::COOKIE, &cookie)
            .body(Body::from(body))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(cookie_value(&r, "breeze_session").is_none());
    // Empty fields: a clear message.
    let r = post_form(
        &w.app,
        "/login",
        &cookie,
        &[("csrf", pre_static), ("email", ""), ("password", "")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(html(&r).contains("Enter your email and password."));
}

async fn sign_in_is_throttled(cx: Ctx) {
    let w = world(&cx).await;
    let r = get(&w.app, "/login", "").await;
    let pre = cookie_value(&r, "breeze_login").unwrap();
    let cookie = format!("breeze_login={pre}");
    let mut last = StatusCode::OK;
    for _ in 0..11 {
        let r = post_form(
            &w.app,
            "/login",
            &cookie,
            &[
                ("csrf", &pre),
                ("email", "viewer@p.test"),
                ("password", "x"),
            ],
        )
        .await;
        last = r.status;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            assert!(r.headers.contains_key(header::RETRY_AFTER));
            assert!(html(&r).contains("Too many"), "{}", html(&r));
        }
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
}

async fn pages_carry_a_strict_policy_and_assets_are_immutable(cx: Ctx) {
    let w = world(&cx).await;
    let b = sign_in(&w.app, "admin@p.test").await;
    for (path, cookie) in [("/login", ""), ("/o/org-a", b.cookie.as_str())] {
        let r = get(&w.app, path, cookie).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        let csp = r.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert_eq!(
            csp,
            "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; \
             form-action 'self'; base-uri 'none'"
        );
        assert_eq!(r.headers[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(r.headers[header::CACHE_CONTROL], "no-store");
        assert!(
            r.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let page = html(&r);
        // No inline script or style: every <script> has a src, no style attribute or element.
        assert!(
            !page.contains("<script>") && !page.contains("style="),
            "{path}"
        );
        assert!(!page.contains("<style"), "{path}");
        // Every asset the page names is served, hashed, typed and cacheable for a year.
        for (marker, want_ext, ty) in [
            ("/assets/app.", "css", "text/css"),
            ("/assets/htmx.min.", "js", "text/javascript"),
            ("/assets/app.", "js", "text/javascript"),
            ("/assets/favicon.", "svg", "image/svg+xml"),
        ] {
            let url = page
                .match_indices(marker)
                .map(|(i, _)| &page[i..i + page[i..].find('"').unwrap()])
                .find(|u| u.rsplit('.').next() == Some(want_ext))
                .unwrap_or_else(|| panic!("{marker} {ty} not linked from {path}"));
            let a = get(&w.app, url, "").await;
            assert_eq!(a.status, StatusCode::OK, "{url}");
            assert!(
                a.headers[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .starts_with(ty),
                "{url}"
            );
            assert_eq!(
                a.headers[header::CACHE_CONTROL],
                "public, max-age=31536000, immutable"
            );
        }
    }
    for missing in [
        "/assets/app.0000000000.css",
        "/assets/app.css",
        "/assets/..%2fCargo.toml",
    ] {
        let r = get(&w.app, missing, "").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{missing}");
    }
    // htmx keeps its licence line.
    let r = get(&w.app, "/login", "").await;
    let page = html(&r);
    let at = page.find("/assets/htmx.min.").unwrap();
    let url = &page[at..at + page[at..].find('"').unwrap()];
    let js = get(&w.app, url, "").await;
    assert!(html(&js).starts_with("/*! htmx.org 2."));
}

async fn sign_out_needs_the_csrf_token(cx: Ctx) {
    let w = world(&cx).await;
    let b = sign_in(&w.app, "admin@p.test").await;
    for token in ["", "forged"] {
        let r = post_form(&w.app, "/logout", &b.cookie, &[("csrf", token)]).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{token:?}");
        assert!(html(&r).contains("CSRF"));
    }
    // The session still works.
    let r = get(&w.app, "/o/org-a", &b.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    // The header works as well as the field (htmx).
    let r = send(
        &w.app,
        Request::post("/logout")
            .header(header::COOKIE, &b.cookie)
            .header(header::ORIGIN, ORIGIN)
            .header("x-csrf-token", &b.csrf)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!((r.status, location(&r)), (StatusCode::SEE_OTHER, "/login"));
    let r = get(&w.app, "/o/org-a", &b.cookie).await;
    assert_eq!(location(&r), "/login?next=%2Fo%2Forg-a");
}

async fn a_token_from_another_session_is_refused(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    assert_ne!(admin.csrf, viewer.csrf);
    let r = post_form(&w.app, "/logout", &admin.cookie, &[("csrf", &viewer.csrf)]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A right token from another origin is refused too.
    let r = send(
        &w.app,
        Request::post("/logout")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, &admin.cookie)
            .header(header::ORIGIN, "https://evil.example")
            .body(Body::from(format!("csrf={}", admin.csrf)))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

async fn overview_and_switcher_respect_organizations(cx: Ctx) {
    let w: World = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let page = html(&r);
    assert!(page.contains("Org A"));
    // The switcher lists both organizations of the admin.
    assert!(page.contains("href=\"/o/org-b\""), "{page}");
    assert!(page.contains("http://127.0.0.1:3000/mcp"));
    // The viewer is only in A: B's page is a 404 exactly like an organization that does not
    // exist, and the switcher does not name B.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let a = get(&w.app, "/o/org-a", &viewer.cookie).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(!html(&a).contains("Org B"));
    let b = get(&w.app, "/o/org-b", &viewer.cookie).await;
    let none = get(&w.app, "/o/no-such-org", &viewer.cookie).await;
    assert_eq!(b.status, StatusCode::NOT_FOUND);
    assert_eq!(none.status, StatusCode::NOT_FOUND);
    assert_eq!(html(&b), html(&none));
    let by_id = get(&w.app, &format!("/o/{}", w.org_b), &viewer.cookie).await;
    assert_eq!(by_id.status, StatusCode::NOT_FOUND);
}

macro_rules! sqlite_tests {
    ($($case:ident),+ $(,)?) => {$(
        #[tokio::test]
        async fn $case() {
            breeze_store::testing::run(breeze_store::Backend::Sqlite, super::$case).await;
        }
    )+};
}

mod pages {
    sqlite_tests!(
        signed_out_pages_redirect_to_sign_in_with_next,
        sign_in_goes_to_next_only_on_this_site,
        sign_in_refuses_bad_passwords_forged_forms_and_other_origins,
        sign_in_is_throttled,
        pages_carry_a_strict_policy_and_assets_are_immutable,
        sign_out_needs_the_csrf_token,
        a_token_from_another_session_is_refused,
        overview_and_switcher_respect_organizations,
    );
}
