//! A signed-in browser for the dashboard's page tests: sign-in through the real form, its
//! session cookie and CSRF token, GETs and form posts from our origin.

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};

use super::{PASSWORD, Reply, send};

/// A browser: its cookies and the last page's CSRF token.
pub(crate) struct Browser {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
}

impl Browser {
    /// Posts `form` as this signed-in browser's page would: its session cookie, our origin,
    /// and its CSRF token as the `csrf` field.
    pub(crate) async fn post(&self, app: &Router, uri: &str, form: &[(&str, &str)]) -> Reply {
        let mut all = vec![("csrf", self.csrf.as_str())];
        all.extend_from_slice(form);
        post_form(app, uri, &self.cookie, &all).await
    }
}

pub(crate) const ORIGIN: &str = "http://127.0.0.1:3000";

pub(crate) fn set_cookies(r: &Reply) -> Vec<String> {
    r.headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn cookie_value(r: &Reply, name: &str) -> Option<String> {
    set_cookies(r).into_iter().find_map(|c| {
        let first = c.split(';').next().unwrap().to_owned();
        first.strip_prefix(&format!("{name}=")).map(str::to_owned)
    })
}

pub(crate) fn html(r: &Reply) -> &str {
    r.body
        .as_str()
        .unwrap_or_else(|| panic!("not HTML: {}", r.body))
}

/// The `value` of the hidden input named `name` in `page`.
pub(crate) fn hidden(page: &str, name: &str) -> String {
    let at = page
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no hidden {name} in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

pub(crate) fn location(r: &Reply) -> &str {
    r.headers
        .get(header::LOCATION)
        .map_or("", |v| v.to_str().unwrap())
}

pub(crate) async fn get(app: &Router, uri: &str, cookie: &str) -> Reply {
    let mut b = Request::get(uri);
    if !cookie.is_empty() {
        b = b.header(header::COOKIE, cookie);
    }
    send(app, b.body(Body::empty()).unwrap()).await
}

pub(crate) async fn post_form(
    app: &Router,
    uri: &str,
    cookie: &str,
    form: &[(&str, &str)],
) -> Reply {
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

/// A person who is Administrator in `org` only (so `org-b` is another organization to them).
pub(crate) async fn admin_of(w: &super::World, email: &str, org: breeze_core::OrgId) {
    let s = &w.store;
    let partner = s.find_partner("p").await.unwrap();
    let u = s
        .create_user(
            breeze_store::NewUser {
                partner_id: partner.id,
                org_id: None,
                email: email.into(),
                name: "Other".into(),
                password_hash: breeze_auth::password::hash(super::PASSWORD).unwrap(),
            },
            super::audit("u"),
        )
        .await
        .unwrap();
    let role = s.find_role(partner.id, "Administrator").await.unwrap();
    s.assign_role(u.id, org, role.id, super::audit("r"))
        .await
        .unwrap();
}

/// Reads the event stream `body` until an event named `name` arrives; false after `within`.
pub(crate) async fn event_arrives(
    body: &mut Body,
    name: &str,
    within: std::time::Duration,
) -> bool {
    use http_body_util::BodyExt;
    let wanted = format!("event: {name}\n");
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            _ => return false,
        };
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
            if seen.contains(&wanted) {
                return true;
            }
        }
    }
}

/// Opens `/o/{org}/events` as `who`; the streaming body.
pub(crate) async fn events(w: &super::World, org: &str, who: &Browser) -> Body {
    use tower::ServiceExt;
    let res = w
        .app
        .clone()
        .oneshot(
            Request::get(format!("/o/{org}/events"))
                .header(header::COOKIE, &who.cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        res.headers().get(header::CONTENT_TYPE).unwrap(),
        "text/event-stream"
    );
    res.into_body()
}

/// The query value `key` of a redirect's target, decoded.
pub(crate) fn outcome(r: &Reply, key: &str) -> String {
    let to = location(r);
    let q = to.split_once('?').map_or("", |(_, q)| q);
    serde_urlencoded::from_str::<Vec<(String, String)>>(q)
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// A person who can sign in, holding the built-in role `role` in organization A only.
pub(crate) async fn person(
    w: &super::World,
    email: &str,
    role: &str,
) -> (breeze_core::UserId, Browser) {
    let partner = w.store.find_partner("p").await.unwrap();
    let u = w
        .store
        .create_user(
            breeze_store::NewUser {
                partner_id: partner.id,
                org_id: None,
                email: email.into(),
                name: email.into(),
                password_hash: breeze_auth::password::hash(PASSWORD).unwrap(),
            },
            super::audit("u"),
        )
        .await
        .unwrap();
    let r = w.store.find_role(partner.id, role).await.unwrap();
    w.store
        .assign_role(u.id, w.org_a, r.id, super::audit("r"))
        .await
        .unwrap();
    (u.id, sign_in(&w.app, email).await)
}

/// Gives the partner's built-in role `role` exactly `permissions` (names): the store has no
/// custom roles yet, and these tests need a person holding some rights but not others.
pub(crate) async fn set_role_permissions(w: &super::World, role: &str, permissions: &[&str]) {
    let list = serde_json::to_string(permissions).unwrap();
    w.store
        .raw_execute(&format!(
            "UPDATE roles SET permissions = '{list}' WHERE name = '{role}'"
        ))
        .await
        .unwrap();
}

pub(crate) async fn role_of(
    w: &super::World,
    user: breeze_core::UserId,
    org: breeze_core::OrgId,
) -> breeze_core::RoleId {
    w.store
        .org_access(user, org)
        .await
        .unwrap()
        .unwrap()
        .role_id
}
