//! The AI assistant's REST door on both databases: the session lifecycle, a session visible to
//! its person alone (another person of the same organization gets 404 for it, its messages and
//! its tool calls; an API key is refused), search with literal wildcards on a route that wins
//! over `/sessions/{id}`, a message answered as an event stream that ends with `done`, a Tier 3
//! call approved from the chat's own endpoint, and usage for the cost indicator.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
#[path = "../../assistant/tests/stand_in/mod.rs"]
mod stand_in;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use breeze_assistant::{ProviderConfig, ProviderKind};
use breeze_limits::MemoryLimiter;
use breeze_store::{on_both_backends, testing::Ctx};
use common::{World, browser, build, ok, send, tool, world};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use stand_in::{Scripted, StandIn, anthropic};
use tower::ServiceExt;

/// A session cookie for `email`, signed in through the sign-in page.
async fn sign_in(app: &Router, email: &str) -> String {
    browser::sign_in(app, email).await.cookie
}

fn req(method: &str, path: &str, cookie: &str, body: Option<Value>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("cookie", cookie)
        .header("origin", "http://127.0.0.1:3000")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap()
}

/// The app with the stand-in as its Anthropic provider.
fn with_provider(w: &World, provider: &StandIn) -> Router {
    let url = provider.url.clone();
    build(
        w,
        move |c| {
            let mut p =
                ProviderConfig::new(ProviderKind::Anthropic, "claude-sonnet-4-5-20250929", &url);
            p.api_key = Some("sk-server-secret".into());
            c.assistant.provider = Some(p);
        },
        Arc::new(MemoryLimiter::new()),
    )
}

/// Reads `event:` names (and data) of an event-stream body as they come, until `until`.
async fn read_events(body: &mut Body, until: &str) -> Vec<(String, Value)> {
    let mut text = String::new();
    let mut events = Vec::new();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), body.frame())
            .await
            .unwrap();
        let Some(frame) = frame else { return events };
        let Ok(data) = frame.unwrap().into_data() else {
            continue;
        };
        text.push_str(std::str::from_utf8(&data).unwrap());
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            if name.is_empty() {
                continue; // a keep-alive comment
            }
            let stop = name == until;
            events.push((name, serde_json::from_str(&data).unwrap_or(Value::Null)));
            if stop {
                return events;
            }
        }
    }
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

async fn sessions_are_their_persons_alone(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = send(
        &w.app,
        req(
            "POST",
            "/api/v1/ai/sessions",
            &admin,
            Some(json!({
                "org": "org-a", "title": "100% CPU on web_01",
                "pageContext": {"type": "device", "id": w.a_device, "hostname": "web-01"},
            })),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_owned();
    assert_eq!(r.body["pageContext"]["hostname"], "web-01");
    // The admin reaches two organizations: a listing must name one.
    let r = send(&w.app, req("GET", "/api/v1/ai/sessions", &admin, None)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    let r = send(
        &w.app,
        req("GET", "/api/v1/ai/sessions?org=org-a", &admin, None),
    )
    .await;
    assert_eq!(r.body["sessions"][0]["id"], id.as_str());
    // Search: the static route wins over {id}, and wildcards match only themselves.
    for (q, hits) in [("100%25", 1), ("web_01", 1), ("web%2501", 0), ("cpu", 1)] {
        let r = send(
            &w.app,
            req(
                "GET",
                &format!("/api/v1/ai/sessions/search?org=org-a&q={q}"),
                &admin,
                None,
            ),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{q}: {}", r.body);
        assert_eq!(r.body["sessions"].as_array().unwrap().len(), hits, "{q}");
    }
    // Another person of the same organization: 404 everywhere, nothing changed.
    let path = format!("/api/v1/ai/sessions/{id}");
    for (method, p, body) in [
        ("GET", path.clone(), None),
        ("PATCH", path.clone(), Some(json!({"title": "mine"}))),
        ("DELETE", path.clone(), None),
        ("POST", format!("{path}/close"), None),
        (
            "POST",
            format!("{path}/messages"),
            Some(json!({"content": "hi"})),
        ),
        (
            "POST",
            format!("{path}/approve/{}", uuid::Uuid::now_v7()),
            Some(json!({"approve": true})),
        ),
    ] {
        let r = send(&w.app, req(method, &p, &viewer, body)).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{method} {p}: {}", r.body);
    }
    let r = send(
        &w.app,
        req("GET", "/api/v1/ai/sessions/search?q=cpu", &viewer, None),
    )
    .await;
    assert_eq!(r.body["sessions"], json!([]));
    // An API key is not a person.
    let r = send(
        &w.app,
        Request::get("/api/v1/ai/sessions?org=org-a")
            .header("x-api-key", &w.write)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    // The owner renames, reads, closes (history kept) and deletes.
    let r = send(
        &w.app,
        req("PATCH", &path, &admin, Some(json!({"title": "renamed"}))),
    )
    .await;
    assert_eq!(r.body["title"], "renamed");
    let r = send(&w.app, req("POST", &format!("{path}/close"), &admin, None)).await;
    assert_eq!(r.body["status"], "closed");
    let r = send(&w.app, req("GET", &path, &admin, None)).await;
    assert_eq!(r.body["session"]["status"], "closed");
    let r = send(&w.app, req("DELETE", &path, &admin, None)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = send(&w.app, req("GET", &path, &admin, None)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

async fn no_provider_answers_a_stream_naming_the_setting(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = send(
        &w.app,
        req(
            "POST",
            "/api/v1/ai/sessions",
            &admin,
            Some(json!({"org": "org-a"})),
        ),
    )
    .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    let res = w
        .app
        .clone()
        .oneshot(req(
            "POST",
            &format!("/api/v1/ai/sessions/{id}/messages"),
            &admin,
            Some(json!({"content": "hi"})),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    let events = read_events(&mut body, "done").await;
    assert_eq!(names(&events), ["error", "done"]);
    assert!(
        events[0].1["message"]
            .as_str()
            .unwrap()
            .contains("BREEZE_AI_PROVIDER")
    );
}

/// Opens a chat in org-a and sends a turn whose model asks to create a group (Tier 3, so it
/// waits): the session id, the open stream, and its events up to `approval_required`.
async fn a_turn_waiting_for_approval(
    app: &Router,
    admin: &str,
    provider: &StandIn,
    preamble: &str,
) -> (String, Body, Vec<(String, Value)>) {
    let r = send(
        app,
        req(
            "POST",
            "/api/v1/ai/sessions",
            admin,
            Some(json!({"org": "org-a"})),
        ),
    )
    .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    provider.script([
        Scripted::stream(anthropic::tools(
            preamble,
            &[(
                "toolu_1",
                "manage_groups",
                &["{\"action\":\"create\",\"name\":\"web\"}"],
            )],
            100,
            20,
        )),
        Scripted::stream(anthropic::text(&["Done."], 150, 5)),
    ]);
    let res = app
        .clone()
        .oneshot(req(
            "POST",
            &format!("/api/v1/ai/sessions/{id}/messages"),
            admin,
            Some(json!({"content": "make a web group"})),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let first = read_events(&mut body, "approval_required").await;
    (id, body, first)
}

/// A turn over REST with a Tier 3 call: the stream stops at `approval_required`, the chat's
/// approve endpoint decides the one request, and the same stream carries the result to `done`.
async fn a_tier3_call_is_approved_from_the_chat(cx: Ctx) {
    let w = world(&cx).await;
    let provider = StandIn::start().await;
    let app = with_provider(&w, &provider);
    let admin = sign_in(&app, "admin@p.test").await;
    let (id, mut body, first) =
        a_turn_waiting_for_approval(&app, &admin, &provider, "I'll create it.").await;
    assert_eq!(
        names(&first),
        [
            "message_start",
            "content_delta",
            "message_end",
            "tool_use_start",
            "approval_required"
        ]
    );
    let execution = first[4].1["executionId"].as_str().unwrap().to_owned();
    // The same request is on the approvals page's list.
    let pending = send(&app, req("GET", "/api/v1/approvals", &admin, None)).await;
    assert_eq!(
        pending.body["approvals"].as_array().unwrap().len(),
        1,
        "{}",
        pending.body
    );
    let r = send(
        &app,
        req(
            "POST",
            &format!("/api/v1/ai/sessions/{id}/approve/{execution}"),
            &admin,
            Some(json!({"approve": true})),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let rest = read_events(&mut body, "done").await;
    assert_eq!(
        names(&rest),
        [
            "tool_result",
            "message_start",
            "content_delta",
            "message_end",
            "done"
        ]
    );
    assert_eq!(rest[0].1["isError"], false, "{}", rest[0].1);
    // The session shows the conversation and the completed call.
    let r = send(
        &app,
        req("GET", &format!("/api/v1/ai/sessions/{id}"), &admin, None),
    )
    .await;
    assert_eq!(r.body["executions"][0]["status"], "completed");
    assert_eq!(r.body["messages"][0]["content"], "make a web group");
    // Usage for the cost indicator: both responses, costed.
    let r = send(&app, req("GET", "/api/v1/ai/usage?org=org-a", &admin, None)).await;
    assert_eq!(r.body["usage"][0]["inputTokens"], 250, "{}", r.body);
    assert_eq!(r.body["usage"][0]["costMicroCents"], 250 * 300 + 25 * 1500);
    // A budget, set by a person who manages settings (the viewer may not), stops the next turn
    // before the provider is called.
    let viewer = sign_in(&app, "viewer@p.test").await;
    let budget = json!({"org": "org-a", "dailyCents": 0, "monthlyCents": null});
    let r = send(
        &app,
        req("PUT", "/api/v1/ai/budget", &viewer, Some(budget.clone())),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = send(&app, req("PUT", "/api/v1/ai/budget", &admin, Some(budget))).await;
    assert_eq!(r.body, json!({"dailyCents": 0, "monthlyCents": null}));
    let res = app
        .clone()
        .oneshot(req(
            "POST",
            &format!("/api/v1/ai/sessions/{id}/messages"),
            &admin,
            Some(json!({"content": "more"})),
        ))
        .await
        .unwrap();
    let events = read_events(&mut res.into_body(), "done").await;
    assert_eq!(names(&events), ["error", "done"]);
    assert!(
        events[0].1["message"].as_str().unwrap().contains("budget"),
        "{events:?}"
    );
    assert_eq!(
        provider.received().len(),
        2,
        "the provider was not called again"
    );
    // The key went to the provider and nowhere else.
    assert_eq!(
        provider.received()[0].headers["x-api-key"],
        "sk-server-secret"
    );
    assert!(!r.body.to_string().contains("sk-server-secret"));
}

/// The chat page: reachable from the navigation, with the device page's context as a badge
/// and in the session its form opens (CSRF checked), the way to configure a provider when
/// there is none, a search over the person's own chats, and another person's chat out of
/// reach (404), like another organization's device.
async fn the_chat_page_opens_sessions_with_the_pages_context(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let device = browser::get(&w.app, &format!("/o/org-a/devices/{}", w.a_device), &admin).await;
    assert_eq!(device.status, StatusCode::OK);
    let chat_link = format!("/o/org-a/chat?device={}", w.a_device);
    assert!(
        browser::html(&device).contains(&chat_link),
        "the nav's assistant link carries the device"
    );
    let r = browser::get(&w.app, &chat_link, &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let html = browser::html(&r);
    assert!(html.contains("Device: web-01"), "{html}");
    assert!(html.contains("No AI provider is configured"));
    assert!(html.contains("BREEZE_AI_PROVIDER"));
    assert!(
        html.contains("/assets/chat."),
        "the chat's script is an asset"
    );
    assert!(!html.contains("<script>"), "no inline script");
    assert!(html.contains("data-usage=\"/api/v1/ai/usage?org=org-a"));
    let csrf = browser::hidden(html, "csrf");
    // Another organization's device is not a context here.
    let r = browser::get(
        &w.app,
        &format!("/o/org-a/chat?device={}", w.b_device),
        &admin,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // The form opens the session: without the token it is refused.
    let form = [
        ("device", w.a_device.as_str()),
        ("content", "why is web-01 slow?"),
    ];
    let r = browser::post_form(&w.app, "/o/org-a/chat/sessions", &admin, &form).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let mut with = vec![("csrf", csrf.as_str())];
    with.extend_from_slice(&form);
    let r = browser::post_form(&w.app, "/o/org-a/chat/sessions", &admin, &with).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let to = r.headers["location"].to_str().unwrap().to_owned();
    let id = to
        .strip_prefix("/o/org-a/chat?session=")
        .unwrap()
        .to_owned();
    let rest = send(
        &w.app,
        req("GET", &format!("/api/v1/ai/sessions/{id}"), &admin, None),
    )
    .await;
    assert_eq!(rest.body["session"]["pageContext"]["type"], "device");
    assert_eq!(rest.body["session"]["pageContext"]["hostname"], "web-01");
    assert_eq!(rest.body["session"]["title"], "why is web-01 slow?");
    let r = browser::get(&w.app, &to, &admin).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(browser::html(&r).contains("Device: web-01"));
    assert!(browser::html(&r).contains(&format!("data-session=\"{id}\"")));
    // Search: the fragment the search box loads.
    let r = browser::get(&w.app, "/o/org-a/chat/sessions?q=slow", &admin).await;
    assert!(browser::html(&r).contains(&id), "{}", r.body);
    let r = browser::get(&w.app, "/o/org-a/chat/sessions?q=100%25", &admin).await;
    assert!(!browser::html(&r).contains(&id) && browser::html(&r).contains("No chat matches"));
    // Another person of the organization: not their chat.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = browser::get(&w.app, &to, &viewer).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = browser::get(&w.app, "/o/org-a/chat", &viewer).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!browser::html(&r).contains(&id));
    // An organization the person does not reach.
    let r = browser::get(&w.app, "/o/org-b/chat", &viewer).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Manage the chat from its page: rename, close, delete — each a CSRF-checked form, and
    // nobody else's session.
    let r = browser::get(&w.app, &to, &admin).await;
    let html = browser::html(&r);
    assert!(html.contains("Manage chat") && html.contains("value=\"rename\""));
    let change = format!("/o/org-a/chat/sessions/{id}");
    let rename = [("op", "rename"), ("title", "web-01 slowness")];
    let r = browser::post_form(&w.app, &change, &admin, &rename).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "no token: refused");
    let viewer_csrf = browser::hidden(
        browser::html(&browser::get(&w.app, "/o/org-a/chat", &viewer).await),
        "csrf",
    );
    let mut forged = vec![("csrf", viewer_csrf.as_str())];
    forged.extend_from_slice(&rename);
    let r = browser::post_form(&w.app, &change, &viewer, &forged).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "another person's chat");
    let mut with = vec![("csrf", csrf.as_str())];
    with.extend_from_slice(&rename);
    let r = browser::post_form(&w.app, &change, &admin, &with).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let rest = send(
        &w.app,
        req("GET", &format!("/api/v1/ai/sessions/{id}"), &admin, None),
    )
    .await;
    assert_eq!(rest.body["session"]["title"], "web-01 slowness");
    let blank = [("csrf", csrf.as_str()), ("op", "rename"), ("title", "  ")];
    let r = browser::post_form(&w.app, &change, &admin, &blank).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.to_string().contains("title"), "{}", r.body);
    let odd = [("csrf", csrf.as_str()), ("op", "archive")];
    let r = browser::post_form(&w.app, &change, &admin, &odd).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let close = [("csrf", csrf.as_str()), ("op", "close")];
    let r = browser::post_form(&w.app, &change, &admin, &close).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let r = browser::get(&w.app, &to, &admin).await;
    assert!(browser::html(&r).contains("This chat is closed"));
    let delete = [("csrf", csrf.as_str()), ("op", "delete")];
    let r = browser::post_form(&w.app, &change, &admin, &delete).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.headers["location"], "/o/org-a/chat");
    let r = browser::get(&w.app, &to, &admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "deleted");
    let other = format!("/o/org-a/chat/sessions/{}", uuid::Uuid::new_v4());
    let r = browser::post_form(&w.app, &other, &admin, &close).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// A conversation as the page renders it: the messages, a card per tool call with its input,
/// and, while a Tier 3 call waits, the inline Approve / Reject for its execution; once
/// approved, the card's result and status.
async fn the_chat_page_shows_tool_cards_and_the_waiting_approval(cx: Ctx) {
    let w = world(&cx).await;
    let provider = StandIn::start().await;
    let app = with_provider(&w, &provider);
    let admin = sign_in(&app, "admin@p.test").await;
    let (id, mut body, first) =
        a_turn_waiting_for_approval(&app, &admin, &provider, "Creating it.").await;
    let execution = first.last().unwrap().1["executionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let chat = format!("/o/org-a/chat?session={id}");
    let r = browser::get(&app, &chat, &admin).await;
    let html = browser::html(&r);
    assert!(!html.contains("No AI provider is configured"));
    assert!(html.contains("make a web group") && html.contains("Creating it."));
    assert!(html.contains("<code>manage_groups</code>"), "{html}");
    assert!(html.contains(&format!("data-execution=\"{execution}\"")));
    assert!(html.contains("data-decide=\"approve\"") && html.contains("data-decide=\"reject\""));
    assert!(
        ["&quot;", "&#34;", "&#x22;"]
            .iter()
            .any(|q| html.contains(&format!("{q}name{q}: {q}web{q}"))),
        "the input, pretty: {html}"
    );
    let r = send(
        &app,
        req(
            "POST",
            &format!("/api/v1/ai/sessions/{id}/approve/{execution}"),
            &admin,
            Some(json!({"approve": true})),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    read_events(&mut body, "done").await;
    let r = browser::get(&app, &chat, &admin).await;
    let html = browser::html(&r);
    assert!(!html.contains("data-decide="), "decided: no dialog");
    assert!(
        html.contains("s-completed") && html.contains("Result"),
        "{html}"
    );
    assert!(html.contains("Done."));
}

/// A chat's tool calls are found by their session in the audit log — the assistant acts as
/// its session, so the filter is on the record's actor, not a search of `details` — through
/// REST, the audit page (with a link from each of the assistant's records) and
/// `query_audit_log`; another organization's log holds none of them, and a malformed session
/// or one contradicting the actor filters is refused.
async fn a_chat_sessions_audit_records_are_found_by_its_session(cx: Ctx) {
    let w = world(&cx).await;
    let provider = StandIn::start().await;
    let app = with_provider(&w, &provider);
    let admin = sign_in(&app, "admin@p.test").await;
    let (id, mut body, first) =
        a_turn_waiting_for_approval(&app, &admin, &provider, "On it.").await;
    let execution = first[4].1["executionId"].as_str().unwrap().to_owned();
    let r = send(
        &app,
        req(
            "POST",
            &format!("/api/v1/ai/sessions/{id}/approve/{execution}"),
            &admin,
            Some(json!({"approve": true})),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    read_events(&mut body, "done").await;

    let audit = |org: &str, q: &str| {
        req(
            "GET",
            &format!("/api/v1/orgs/{org}/audit?{q}"),
            &admin,
            None,
        )
    };
    let r = send(&app, audit("org-a", &format!("session={id}"))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let records = r.body["records"].as_array().unwrap();
    let actions: Vec<&str> = records
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"ai.tools.call"), "{actions:?}");
    assert!(
        records.len() >= 2,
        "the call's own records too: {actions:?}"
    );
    for rec in records {
        assert_eq!(rec["actor"]["type"], "ai_chat", "{rec}");
        assert_eq!(rec["actor"]["id"], id.as_str(), "{rec}");
    }
    let call = records
        .iter()
        .find(|r| r["action"] == "ai.tools.call")
        .unwrap();
    assert_eq!(call["details"]["session"], id.as_str());
    assert_eq!(call["resource_id"], "manage_groups", "{call}");
    // Another session (a fresh one) has no records; another organization's log holds none.
    let other = send(
        &app,
        req(
            "POST",
            "/api/v1/ai/sessions",
            &admin,
            Some(json!({"org": "org-a"})),
        ),
    )
    .await;
    let other = other.body["id"].as_str().unwrap().to_owned();
    let r = send(&app, audit("org-a", &format!("session={other}"))).await;
    assert_eq!(r.body["records"], json!([]), "{}", r.body);
    let r = send(&app, audit("org-b", &format!("session={id}"))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["records"], json!([]), "{}", r.body);
    // Refused: not a session id; a session and another actor.
    let r = send(&app, audit("org-a", "session=web_01")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    let r = send(
        &app,
        audit("org-a", &format!("session={id}&actor_type=user")),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);

    // The audit page: the filter field, the records, a link to the session from each.
    let page = browser::get(
        &app,
        &format!("/o/org-a/audit?noise=1&session={id}"),
        &admin,
    )
    .await;
    let html = browser::html(&page);
    assert!(html.contains("id=\"f-session\""), "{html}");
    assert!(html.contains("ai.tools.call"), "{html}");
    assert!(
        html.contains(&format!("audit?noise=1&amp;session={id}")),
        "{html}"
    );
    let page = browser::get(
        &app,
        &format!("/o/org-b/audit?noise=1&session={id}"),
        &admin,
    )
    .await;
    assert!(!browser::html(&page).contains("ai.tools.call"));
    let page = browser::get(&app, "/o/org-a/audit?session=nope", &admin).await;
    assert!(browser::html(&page).contains("is not a session id"));
    // A person's own records are not the assistant's: the session link is only on its rows.
    let page = browser::get(&app, "/o/org-a/audit?noise=1&actor_type=user", &admin).await;
    assert!(!browser::html(&page).contains("session="));

    // The tool, for an MCP client (or the assistant itself) reading the log.
    let found = ok(
        &app,
        &w.read,
        "query_audit_log",
        json!({"chatSessionId": id, "action": "ai.tools.call"}),
    )
    .await;
    assert_eq!(found["showing"], 1, "{found}");
    assert_eq!(found["entries"][0]["actorType"], "ai_chat");
    assert_eq!(found["entries"][0]["actorId"], id.as_str());
    let other_org = tool(
        &app,
        &w.other_org_key,
        "query_audit_log",
        json!({"chatSessionId": id}),
    )
    .await;
    assert_eq!(other_org["showing"], 0, "{other_org}");
    let bad = tool(
        &app,
        &w.read,
        "query_audit_log",
        json!({"chatSessionId": id, "actorType": "user"}),
    )
    .await;
    assert_eq!(common::code(&bad), "INVALID_ARGUMENT", "{bad}");
}

/// The other page contexts: an alert's page sends the assistant link with the alert, which
/// the chat looks up in this organization (another organization's alert is not found) and
/// shows as a badge; a custom context (a ticket's page names itself) is shown and injected
/// as given, bounded in length.
async fn the_chat_page_takes_an_alert_or_a_custom_context(cx: Ctx) {
    use breeze_core::{AlertCondition, DeviceId, Severity};
    use breeze_store::{NewRule, RuleTarget};
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let mut alerts = Vec::new();
    for (org, device) in [(w.org_a, &w.a_device), (w.org_b, &w.b_device)] {
        let o = w.store.org(org);
        let rule = o
            .alerts()
            .create_rule(
                NewRule {
                    name: "Offline".into(),
                    description: None,
                    severity: Severity::High,
                    enabled: true,
                    condition: AlertCondition::Offline { minutes: 5 },
                    target: RuleTarget::Organization,
                    cooldown_minutes: 0,
                    auto_resolve: true,
                    channel_ids: vec![],
                    created_by: "test".into(),
                },
                common::audit("alert_rule.create"),
            )
            .await
            .unwrap();
        let alert = o
            .alerts()
            .raise_alert(&rule, DeviceId(device.parse().unwrap()), Some(7.0))
            .await
            .unwrap()
            .unwrap();
        alerts.push(alert);
    }
    let (a_alert, b_alert) = (&alerts[0], &alerts[1]);
    let page = browser::get(&w.app, &format!("/o/org-a/alerts/{}", a_alert.id), &admin).await;
    assert_eq!(page.status, StatusCode::OK);
    let chat_link = format!("/o/org-a/chat?alert={}", a_alert.id);
    assert!(
        browser::html(&page).contains(&chat_link),
        "the alert page's assistant link carries the alert"
    );
    let r = browser::get(&w.app, &chat_link, &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let html = browser::html(&r);
    assert!(
        html.contains(&format!("Alert: {}", a_alert.title)),
        "{html}"
    );
    let csrf = browser::hidden(html, "csrf");
    let form = [
        ("csrf", csrf.as_str()),
        ("alert", &a_alert.id.to_string()),
        ("content", "why did it go offline?"),
    ];
    let r = browser::post_form(&w.app, "/o/org-a/chat/sessions", &admin, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let to = r.headers["location"].to_str().unwrap().to_owned();
    let id = to.strip_prefix("/o/org-a/chat?session=").unwrap();
    let rest = send(
        &w.app,
        req("GET", &format!("/api/v1/ai/sessions/{id}"), &admin, None),
    )
    .await;
    let ctx = &rest.body["session"]["pageContext"];
    assert_eq!(ctx["type"], "alert", "{ctx}");
    assert_eq!(ctx["id"], a_alert.id.to_string());
    assert!(browser::html(&browser::get(&w.app, &to, &admin).await).contains("Alert: "));
    let r = browser::get(
        &w.app,
        &format!("/o/org-a/chat?alert={}", b_alert.id),
        &admin,
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "another organization's alert"
    );

    // A custom context: a ticket's page names itself; the badge and the session carry it.
    let r = browser::get(&w.app, "/o/org-a/chat?context=ticket%20T-0042", &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let html = browser::html(&r);
    assert!(html.contains("Context: ticket T-0042"), "{html}");
    assert!(
        html.contains("/o/org-a/chat?context=ticket%20T%2D0042"),
        "the assistant link keeps it, encoded"
    );
    let csrf = browser::hidden(html, "csrf");
    let form = [
        ("csrf", csrf.as_str()),
        ("context", "ticket T-0042"),
        ("content", "summarise the ticket"),
    ];
    let r = browser::post_form(&w.app, "/o/org-a/chat/sessions", &admin, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let to = r.headers["location"].to_str().unwrap().to_owned();
    let id = to.strip_prefix("/o/org-a/chat?session=").unwrap();
    let rest = send(
        &w.app,
        req("GET", &format!("/api/v1/ai/sessions/{id}"), &admin, None),
    )
    .await;
    assert_eq!(
        rest.body["session"]["pageContext"],
        json!({"type": "custom", "label": "ticket T-0042"})
    );
    assert!(
        browser::html(&browser::get(&w.app, &to, &admin).await).contains("Context: ticket T-0042")
    );
    // The list the page's script reloads after opening a chat: both chats, this one current.
    let r = browser::get(
        &w.app,
        &format!("/o/org-a/chat/sessions?q=&session={id}"),
        &admin,
    )
    .await;
    let list = browser::html(&r);
    assert!(list.contains("summarise the ticket") && list.contains("why did it go offline?"));
    assert!(
        list.contains(&format!("session={id}\" aria-current=\"page\"")),
        "{list}"
    );
    let r = browser::get(&w.app, "/o/org-a/chat/sessions?session=nope", &admin).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!browser::html(&r).contains("aria-current"));
    let long = "x".repeat(201);
    let r = browser::get(&w.app, &format!("/o/org-a/chat?context={long}"), &admin).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
}

on_both_backends!(
    sessions_are_their_persons_alone,
    no_provider_answers_a_stream_naming_the_setting,
    a_tier3_call_is_approved_from_the_chat,
    the_chat_page_opens_sessions_with_the_pages_context,
    the_chat_page_shows_tool_cards_and_the_waiting_approval,
    a_chat_sessions_audit_records_are_found_by_its_session,
    the_chat_page_takes_an_alert_or_a_custom_context,
);
