//! MCP discovery and calls against the local test servers: every page listed, tiers proposed
//! from annotations, each authentication method, and the hostile server's tricks — redirects,
//! 50 MB answers, hangs, invalid JSON-RPC, endless cursors, 10,000 tools — each a clean failure
//! with its reason, in bounded time.

use std::{sync::atomic::Ordering, time::Duration};

use breeze_core::Tier;
use breeze_sources::{
    auth::Authorizer,
    mcp::{self, McpError, Sessions},
    testing::{Behavior, McpServer, TestCa, tool},
    vault::Credential,
};
use reqwest13::header::HeaderName;
use serde_json::json;
use url::Url;

const QUICK: Duration = Duration::from_secs(3);

fn tools(n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| tool(&format!("t{i}"), "a tool", i % 2 == 0))
        .collect()
}

/// A well-behaved upstream listing two tools, and an egress that reaches it.
struct Upstream {
    server: std::sync::Arc<McpServer>,
    url: Url,
    egress: breeze_sources::egress::Egress,
    _ca: TestCa,
}

impl Upstream {
    async fn start() -> Self {
        let ca = TestCa::new();
        let server = McpServer::new(tools(2));
        let addr = ca.serve(server.router(), true).await;
        let url = Url::parse(&format!("https://localhost:{}/mcp", addr.port())).unwrap();
        Self {
            egress: ca.egress(),
            server,
            url,
            _ca: ca,
        }
    }
}

#[tokio::test]
async fn discovery_lists_every_page_and_proposes_tiers() {
    let ca = TestCa::new();
    let mut listed = tools(5);
    listed.push(json!({"name": "plain", "inputSchema": {"type": "object"}}));
    listed.push(tool("has space", "unroutable name", true));
    let server = McpServer::new(listed);
    let addr = ca.serve(server.router(), true).await;
    let url = Url::parse(&format!("https://localhost:{}/mcp", addr.port())).unwrap();
    let found = mcp::discover(&ca.egress(), &url, vec![], QUICK)
        .await
        .unwrap();
    assert_eq!(found.len(), 7, "4 pages of 2 read");
    let tier = |n: &str| found.iter().find(|t| t.name == n).unwrap().proposed_tier;
    assert_eq!(tier("t0"), Tier::T1, "read-only");
    assert_eq!(tier("t1"), Tier::T3, "destructive");
    assert_eq!(tier("plain"), Tier::T2, "no annotations");
    assert!(
        found.iter().any(|t| t.name == "has space"),
        "kept, flagged by the merge"
    );
    let t0 = found.iter().find(|t| t.name == "t0").unwrap();
    assert_eq!(t0.input_schema["properties"]["q"]["type"], json!("string"));
    assert_eq!(t0.annotations["readOnlyHint"], json!(true));
}

#[tokio::test]
async fn calls_reach_the_tool_and_upstream_errors_say_so() {
    let Upstream { url, egress, .. } = Upstream::start().await;
    let sessions = Sessions::default();
    let call = |name: &'static str, args: serde_json::Value| {
        sessions.call("org", &egress, &url, vec![], name, args, QUICK)
    };
    let answer = call("t0", json!({"q": "x"})).await.unwrap();
    assert!(!answer.is_error);
    assert_eq!(
        answer.result["structuredContent"],
        json!({"tool": "t0", "arguments": {"q": "x"}})
    );
    let failed = call("fails", json!({})).await.unwrap();
    assert!(failed.is_error);
    let err = call("t0", json!([1])).await.unwrap_err();
    assert!(matches!(err, McpError::Call(_)), "{err}");
}

#[tokio::test]
async fn calls_share_one_upstream_session_per_key_and_credential() {
    let Upstream {
        server,
        url,
        egress,
        ..
    } = Upstream::start().await;
    let sessions = Sessions::default();
    let header = |v: &str| vec![(HeaderName::from_static("x-api-key"), v.parse().unwrap())];
    for _ in 0..5 {
        sessions
            .call("a", &egress, &url, header("k1"), "t0", json!({}), QUICK)
            .await
            .unwrap();
    }
    assert_eq!(
        server.initializes.load(Ordering::SeqCst),
        1,
        "one handshake"
    );
    assert_eq!(server.calls.lock().unwrap().len(), 5);
    // Concurrent calls share it too.
    let many =
        (0..8).map(|_| sessions.call("a", &egress, &url, header("k1"), "t0", json!({}), QUICK));
    for r in futures::future::join_all(many).await {
        r.unwrap();
    }
    assert_eq!(server.initializes.load(Ordering::SeqCst), 1);
    // Another key (another organization) and another credential each get their own.
    sessions
        .call("b", &egress, &url, header("k1"), "t0", json!({}), QUICK)
        .await
        .unwrap();
    assert_eq!(server.initializes.load(Ordering::SeqCst), 2);
    sessions
        .call("a", &egress, &url, header("k2"), "t0", json!({}), QUICK)
        .await
        .unwrap();
    assert_eq!(server.initializes.load(Ordering::SeqCst), 3);
    assert_eq!(
        sessions.len(),
        2,
        "the rotated credential replaced a's session"
    );
    let last = server.headers.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        last["x-api-key"], "k2",
        "the new session carries the new credential"
    );
}

#[tokio::test]
async fn a_forgotten_session_is_reopened_and_the_call_runs_once() {
    let Upstream {
        server,
        url,
        egress,
        ..
    } = Upstream::start().await;
    let sessions = Sessions::default();
    let call = || sessions.call("org", &egress, &url, vec![], "t0", json!({"n": 1}), QUICK);
    call().await.unwrap();
    server.forget_sessions();
    let answer = call().await.unwrap();
    assert_eq!(answer.result["structuredContent"]["tool"], "t0");
    assert_eq!(server.initializes.load(Ordering::SeqCst), 2, "reopened");
    assert_eq!(
        server.calls.lock().unwrap().len(),
        2,
        "the refused request ran once, after the new handshake"
    );
}

#[tokio::test]
async fn idle_sessions_close_and_the_pool_is_bounded() {
    let Upstream {
        server,
        url,
        egress,
        ..
    } = Upstream::start().await;
    let sessions = Sessions::new(Duration::from_millis(300), 2);
    for key in ["a", "b", "c"] {
        sessions
            .call(key, &egress, &url, vec![], "t0", json!({}), QUICK)
            .await
            .unwrap();
    }
    assert_eq!(sessions.len(), 2, "the least recently used was closed");
    tokio::time::sleep(Duration::from_millis(400)).await;
    sessions
        .call("c", &egress, &url, vec![], "t0", json!({}), QUICK)
        .await
        .unwrap();
    assert_eq!(sessions.len(), 1, "idle sessions closed, c reopened");
    assert_eq!(server.initializes.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_call_that_times_out_leaves_the_next_call_working() {
    let Upstream {
        server,
        url,
        egress,
        ..
    } = Upstream::start().await;
    let sessions = Sessions::default();
    server.set(Behavior::Hang);
    let err = sessions
        .call(
            "org",
            &egress,
            &url,
            vec![],
            "t0",
            json!({}),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Timeout(_)), "{err}");
    server.set(Behavior::WellBehaved);
    let answer = sessions
        .call("org", &egress, &url, vec![], "t0", json!({}), QUICK)
        .await
        .unwrap();
    assert!(!answer.is_error);
}

#[tokio::test]
async fn the_hostile_server_fails_discovery_cleanly() {
    let ca = TestCa::new();
    let server = McpServer::new(tools(3));
    let addr = ca.serve(server.router(), true).await;
    let url = Url::parse(&format!("https://localhost:{}/mcp", addr.port())).unwrap();
    let egress = ca.egress();

    server.set(Behavior::Redirect);
    let before = server.hits.load(Ordering::SeqCst);
    let err = mcp::discover(&egress, &url, vec![], QUICK)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("307") || err.to_string().to_lowercase().contains("redirect"),
        "{err}"
    );
    assert_eq!(
        server.hits.load(Ordering::SeqCst) - before,
        1,
        "the redirect was not followed"
    );

    server.set(Behavior::Huge(50 * 1024 * 1024));
    let started = std::time::Instant::now();
    let err = mcp::discover(&egress, &url, vec![], Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::List(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "stopped at the cap, not the timeout"
    );

    server.set(Behavior::Hang);
    let started = std::time::Instant::now();
    let err = mcp::discover(&egress, &url, vec![], Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(err, McpError::Timeout(Duration::from_millis(500)));
    assert!(started.elapsed() < Duration::from_secs(3));

    server.set(Behavior::InvalidJsonRpc);
    let err = mcp::discover(&egress, &url, vec![], QUICK)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::List(_)), "{err}");

    server.set(Behavior::EndlessCursor);
    let err = mcp::discover(&egress, &url, vec![], Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(err, McpError::TooManyPages);
}

#[tokio::test]
async fn ten_thousand_tools_fail_whole() {
    let ca = TestCa::new();
    let mut server = McpServer::new(tools(10_000));
    if let Some(s) = std::sync::Arc::get_mut(&mut server) {
        s.page = 1_000;
    }
    let addr = ca.serve(server.router(), true).await;
    let url = Url::parse(&format!("https://localhost:{}/mcp", addr.port())).unwrap();
    let err = mcp::discover(&ca.egress(), &url, vec![], Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(err, McpError::TooManyTools);
}

#[tokio::test]
async fn every_auth_method_reaches_a_server_that_demands_it_and_only_its_origin() {
    let ca = TestCa::new();
    let cases = [
        (
            Credential::Bearer {
                token: "tok".into(),
            },
            "authorization",
            "Bearer tok",
        ),
        (
            Credential::ApiKeyHeader {
                header: "X-Api-Key".into(),
                value: "k1".into(),
            },
            "x-api-key",
            "k1",
        ),
        (
            Credential::Basic {
                username: "u".into(),
                password: "p".into(),
            },
            "authorization",
            "Basic dTpw",
        ),
    ];
    let auth = Authorizer::new(ca.egress(), crate::clock());
    for (credential, header, value) in cases {
        let server = McpServer::requiring(tools(1), header, value);
        let addr = ca.serve(server.router(), true).await;
        let url = Url::parse(&format!("https://localhost:{}/mcp", addr.port())).unwrap();
        // Without the credential: refused by the server.
        assert!(
            mcp::discover(&ca.egress(), &url, vec![], QUICK)
                .await
                .is_err()
        );
        let headers = auth
            .headers_for("s1", &url, &url, &credential)
            .await
            .unwrap();
        let found = mcp::discover(&ca.egress(), &url, headers, QUICK)
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{credential:?}");
        // A URL on another origin (another port) gets no headers at all.
        let other = Url::parse(&format!("https://localhost:{}/mcp", addr.port() + 1)).unwrap();
        assert!(
            auth.headers_for("s1", &url, &other, &credential)
                .await
                .unwrap()
                .is_empty()
        );
    }

    // OAuth2 client credentials: a token minted by the token endpoint, cached.
    let server = McpServer::requiring(tools(1), "authorization", "Bearer minted-token");
    let addr = ca.serve(server.router(), true).await;
    let url = Url::parse(&format!("https://localhost:{}/mcp", addr.port())).unwrap();
    let credential = Credential::OAuth2ClientCredentials {
        token_url: format!("https://localhost:{}/token", addr.port()),
        client_id: "client".into(),
        client_secret: "secret".into(),
        scope: None,
    };
    let headers = auth
        .headers_for("s2", &url, &url, &credential)
        .await
        .unwrap();
    assert_eq!(
        mcp::discover(&ca.egress(), &url, headers, QUICK)
            .await
            .unwrap()
            .len(),
        1
    );
    let wrong = Credential::OAuth2ClientCredentials {
        token_url: format!("https://localhost:{}/token", addr.port()),
        client_id: "client".into(),
        client_secret: "wrong".into(),
        scope: None,
    };
    let err = auth
        .headers_for("s3", &url, &url, &wrong)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
}
