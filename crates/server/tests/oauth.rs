//! OAuth 2.1 end to end through the router, on both backends: discovery, registration (the
//! real clients' bodies), sign-in redirect and consent, code and refresh-token exchange, bearer
//! tokens on MCP, grants and revocation — and the attack checklist of the security notes (§4):
//! redirect URI variants, PKCE downgrade and absence, code replay, resource confusion, forged
//! tokens (alg none, HS256 with the public key, wrong typ, unknown kid, wrong aud/iss,
//! expired), refresh reuse, cross-client revocation, introspection without credentials, DCR
//! abuse, consent CSRF, open redirect, CIMD SSRF, cross-organization access.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use breeze_limits::MemoryLimiter;
use breeze_oauth::{AccessClaims, SigningKey, pkce};
use breeze_server::oauth::{HttpFetcher, OAuthSettings};
use breeze_store::testing::Ctx;
use chrono::Duration;
use common::{PASSWORD, Reply, World, build, err_msg, send, world};
use serde_json::{Value, json};

const BASE: &str = "http://127.0.0.1:3000";
const RESOURCE: &str = "http://127.0.0.1:3000/mcp";
const VERIFIER: &str = "verifier-0123456789-0123456789-0123456789-abcdef";
const CLAUDE_CB: &str = "https://claude.ai/api/mcp/auth_callback";

fn settings() -> OAuthSettings {
    OAuthSettings::development(BASE, SigningKey::from_seed(&[9; 32]).unwrap(), vec![7; 32])
}

fn oauth_app(w: &World) -> Router {
    build(
        w,
        |c| c.oauth = Some(settings()),
        Arc::new(MemoryLimiter::new()),
    )
}

fn get(path: &str, cookie: Option<&str>) -> Request<Body> {
    let mut b = Request::get(path);
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    b.body(Body::empty()).unwrap()
}

fn form(path: &str, pairs: &[(&str, &str)], headers: &[(&str, &str)]) -> Request<Body> {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    let mut b = Request::post(path).header("content-type", "application/x-www-form-urlencoded");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body)).unwrap()
}

fn json_post(path: &str, body: &Value, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::post(path).header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

fn location(r: &Reply) -> String {
    r.headers
        .get("location")
        .unwrap_or_else(|| panic!("no Location ({}): {}", r.status, r.body))
        .to_str()
        .unwrap()
        .to_owned()
}

fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no field {name} in {html}"))
        + marker.len();
    html[start..start + html[start..].find('"').unwrap()].to_owned()
}

fn set_cookie(r: &Reply, name: &str) -> String {
    r.headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|v| v.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no cookie {name}"))
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

async fn register(app: &Router, body: &Value) -> Reply {
    send(app, json_post("/oauth/reg", body, &[])).await
}

async fn claude_client(app: &Router) -> String {
    let r = register(
        app,
        &json!({"redirect_uris":[CLAUDE_CB],"token_endpoint_auth_method":"client_secret_post","grant_types":["authorization_code","refresh_token"],"client_name":"Claude"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["client_id"].as_str().unwrap().to_owned()
}

async fn sign_in(app: &Router, email: &str) -> String {
    let r = send(
        app,
        json_post(
            "/api/v1/auth/login",
            &json!({ "email": email, "password": PASSWORD }),
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    set_cookie(&r, "breeze_session")
}

fn auth_query(client_id: &str, redirect: &str, extra: &[(&str, &str)]) -> String {
    let challenge = pkce::challenge_of(VERIFIER);
    let mut pairs = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", RESOURCE),
        ("scope", "mcp:read mcp:write"),
        ("state", "st-1"),
    ];
    for (k, v) in extra {
        pairs.retain(|(n, _)| n != k);
        if !v.is_empty() {
            pairs.push((k, v));
        }
    }
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// A shown consent page: its fields and the cookies to post it with.
struct Consent {
    fields: Vec<(String, String)>,
    cookies: String,
}

async fn consent_page(app: &Router, session: &str, query: &str) -> (Reply, Option<Consent>) {
    let r = send(app, get(&format!("/oauth/auth?{query}"), Some(session))).await;
    if r.status != StatusCode::OK {
        return (r, None);
    }
    let html = r.body.as_str().unwrap().to_owned();
    let mut fields: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    fields.push(("csrf".into(), hidden(&html, "csrf")));
    fields.push(("consent_token".into(), hidden(&html, "consent_token")));
    let cookies = format!("{session}; {}", set_cookie(&r, "breeze_consent"));
    (r, Some(Consent { fields, cookies }))
}

async fn decide(app: &Router, c: &Consent, decision: &str, org: &str) -> Reply {
    let mut pairs: Vec<(&str, &str)> = c
        .fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.push(("decision", decision));
    pairs.push(("org_id", org));
    send(app, form("/oauth/auth", &pairs, &[("cookie", &c.cookies)])).await
}

/// Registration, sign-in, consent for org A: the code.
async fn code_for(w: &World, app: &Router, client_id: &str, extra: &[(&str, &str)]) -> String {
    let session = sign_in(app, "admin@p.test").await;
    let (r, c) = consent_page(app, &session, &auth_query(client_id, CLAUDE_CB, extra)).await;
    let c = c.unwrap_or_else(|| panic!("{}: {}", r.status, r.body));
    let r = decide(app, &c, "approve", &w.org_a.to_string()).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let loc = location(&r);
    assert!(loc.starts_with(CLAUDE_CB), "{loc}");
    assert_eq!(query_param(&loc, "state").as_deref(), Some("st-1"));
    assert_eq!(query_param(&loc, "iss").as_deref(), Some(BASE));
    query_param(&loc, "code").unwrap()
}

async fn exchange(app: &Router, client_id: &str, code: &str, verifier: &str) -> Reply {
    send(
        app,
        form(
            "/oauth/token",
            &[
                ("grant_type", "authorization_code"),
                ("client_id", client_id),
                ("code", code),
                ("redirect_uri", CLAUDE_CB),
                ("code_verifier", verifier),
                ("resource", RESOURCE),
            ],
            &[],
        ),
    )
    .await
}

async fn refresh(app: &Router, client_id: &str, token: &str, extra: &[(&str, &str)]) -> Reply {
    let mut pairs = vec![
        ("grant_type", "refresh_token"),
        ("client_id", client_id),
        ("refresh_token", token),
    ];
    pairs.extend_from_slice(extra);
    send(app, form("/oauth/token", &pairs, &[])).await
}

/// The whole authorization of `client_id` in org A by the admin — sign-in, consent page,
/// approval, code exchange — with `extra` authorization parameters: the token response.
async fn authorized(w: &World, app: &Router, client_id: &str, extra: &[(&str, &str)]) -> Value {
    let code = code_for(w, app, client_id, extra).await;
    let r = exchange(app, client_id, &code, VERIFIER).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body
}

/// Tokens for a fresh Claude client in org A.
async fn tokens(w: &World, app: &Router) -> (String, Value) {
    let client = claude_client(app).await;
    let t = authorized(w, app, &client, &[]).await;
    (client, t)
}

/// The signed-in person revokes grant `id` (`DELETE /api/v1/oauth/grants/{id}`).
async fn revoke_grant(app: &Router, session: &str, id: &str) -> Reply {
    send(
        app,
        Request::delete(format!("/api/v1/oauth/grants/{id}"))
            .header("cookie", session)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

fn rpc(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params })
}

async fn mcp(app: &Router, bearer: &str, body: &Value) -> Reply {
    send(
        app,
        json_post(
            "/mcp",
            body,
            &[
                ("authorization", &format!("Bearer {bearer}")),
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-06-18"),
            ],
        ),
    )
    .await
}

/// `initialize` with `bearer`: the new session's id.
async fn open_session(app: &Router, bearer: &str) -> String {
    let init = rpc(
        "initialize",
        json!({ "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": { "name": "t", "version": "1" } }),
    );
    let r = mcp(app, bearer, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.headers["mcp-session-id"].to_str().unwrap().to_owned()
}

/// A request in session `session`.
async fn mcp_in(app: &Router, bearer: &str, session: &str, body: &Value) -> Reply {
    send(
        app,
        json_post(
            "/mcp",
            body,
            &[
                ("authorization", &format!("Bearer {bearer}")),
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-06-18"),
                ("mcp-session-id", session),
            ],
        ),
    )
    .await
}

async fn lists_tools(app: &Router, bearer: &str) -> StatusCode {
    mcp(app, bearer, &rpc("tools/list", json!({}))).await.status
}

fn challenge(r: &Reply) -> String {
    r.headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn discovery_and_challenge(cx: Ctx) {
    let w = world(&cx).await;
    // Off by default: nothing mounted, Bearer refused as before.
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource",
        "/oauth/token",
    ] {
        assert_eq!(
            send(&w.app, get(path, None)).await.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    let app = oauth_app(&w);
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/mcp",
        "/.well-known/openid-configuration",
        "/.well-known/openid-configuration/mcp",
        "/mcp/.well-known/openid-configuration",
    ] {
        let r = send(&app, get(path, None)).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        let m = &r.body;
        assert_eq!(m["issuer"], BASE);
        assert_eq!(m["authorization_endpoint"], format!("{BASE}/oauth/auth"));
        assert_eq!(m["registration_endpoint"], format!("{BASE}/oauth/reg"));
        assert_eq!(m["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(m["authorization_response_iss_parameter_supported"], true);
        assert_eq!(m["token_endpoint_auth_methods_supported"], json!(["none"]));
        assert!(
            m["scopes_supported"]
                .as_array()
                .unwrap()
                .contains(&json!("offline_access"))
        );
    }
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let r = send(&app, get(path, None)).await;
        assert_eq!(r.body["resource"], RESOURCE, "{path}");
        assert_eq!(r.body["authorization_servers"], json!([BASE]));
        assert!(
            !r.body["scopes_supported"]
                .to_string()
                .contains("offline_access")
        );
    }
    let jwks = send(&app, get("/.well-known/jwks.json", None)).await.body;
    assert_eq!(jwks["keys"][0]["crv"], "Ed25519");
    assert_eq!(jwks["keys"][0]["kid"], settings().key.kid());

    // No credentials: 401 pointing at the resource metadata, with the scope to ask for.
    let r = send(&app, json_post("/mcp", &rpc("tools/list", json!({})), &[])).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let c = challenge(&r);
    assert!(c.starts_with("Bearer "), "{c}");
    assert!(
        c.contains(&format!(
            "resource_metadata=\"{BASE}/.well-known/oauth-protected-resource/mcp\""
        )),
        "{c}"
    );
    assert!(
        c.contains("scope=\"mcp:read mcp:write mcp:execute\""),
        "{c}"
    );
    assert!(!c.contains("offline_access"));
    // An API key still works beside OAuth.
    let r = send(
        &app,
        json_post(
            "/mcp",
            &rpc("tools/list", json!({})),
            &[("x-api-key", &w.read)],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

async fn full_flow_refresh_revoke(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    // Not signed in: sent to sign in, and back here afterwards.
    let q = auth_query(&client, CLAUDE_CB, &[("prompt", "consent")]);
    let r = send(&app, get(&format!("/oauth/auth?{q}"), None)).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let to = location(&r);
    assert!(to.starts_with("/login?next=%2Foauth%2Fauth%3F"), "{to}");
    // Signed in: the consent page, framed by nobody, showing where the code goes.
    let session = sign_in(&app, "admin@p.test").await;
    let (r, c) = consent_page(&app, &session, &q).await;
    let c = c.unwrap();
    let html = r.body.as_str().unwrap();
    assert!(html.contains("claude.ai"), "the redirect host is shown");
    assert!(html.contains("Claude") && html.contains("mcp:write"));
    let csp = r.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'")
            && csp.contains("form-action 'self' https://claude.ai"),
        "{csp}"
    );
    assert_eq!(r.headers["x-frame-options"], "DENY");
    assert_eq!(r.headers["cache-control"], "no-store");
    let r = decide(&app, &c, "approve", &w.org_a.to_string()).await;
    let code = query_param(&location(&r), "code").unwrap();
    let r = exchange(&app, &client, &code, VERIFIER).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.headers["cache-control"], "no-store");
    assert_eq!(r.body["token_type"], "Bearer");
    assert_eq!(r.body["expires_in"], 1800);
    assert_eq!(r.body["scope"], "mcp:read mcp:write");
    let access = r.body["access_token"].as_str().unwrap().to_owned();
    let rt = r.body["refresh_token"].as_str().unwrap().to_owned();
    // The header says at+jwt and EdDSA.
    let header: Value =
        serde_json::from_slice(&B64.decode(access.split('.').next().unwrap()).unwrap()).unwrap();
    assert_eq!(
        (header["alg"].as_str(), header["typ"].as_str()),
        (Some("EdDSA"), Some("at+jwt"))
    );

    // MCP with the token: the tools its scopes reach, audited with the grant as actor.
    let r = mcp(&app, &access, &rpc("tools/list", json!({}))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let tools = r.body["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "query_devices"));
    let r = mcp(
        &app,
        &access,
        &rpc(
            "tools/call",
            json!({ "name": "query_devices", "arguments": {} }),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let text = r.body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&w.a_device) && !text.contains(&w.b_device),
        "{text}"
    );
    let grants = send(&app, get("/api/v1/oauth/grants", Some(&session))).await;
    let grant = grants.body["grants"][0].clone();
    assert_eq!(grant["state"], "Connected");
    assert_eq!(grant["client_name"], "Claude");
    assert_eq!(grant["organization_id"], json!(w.org_a));
    let gid = grant["id"].as_str().unwrap().to_owned();
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert!(audit.contains("oauth_grant") && audit.contains("mcp.tools.call"));
    assert!(audit.contains("oauth.grant.create") && audit.contains("oauth.client.register"));

    // Refresh rotates; the old refresh token may be retried once within the window.
    let r = refresh(&app, &client, &rt, &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let rt2 = r.body["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(rt2, rt);
    let access2 = r.body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(lists_tools(&app, &access2).await, StatusCode::OK);
    assert!(
        w.store
            .raw_dump("audit_log")
            .await
            .unwrap()
            .join("\n")
            .contains("oauth.token.refresh")
    );

    // The user revokes the grant: every token dies at once; the client must sign in again.
    let r = revoke_grant(&app, &session, &gid).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["grant"]["state"], "Revoked");
    let r = mcp(&app, &access2, &rpc("tools/list", json!({}))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(challenge(&r).contains("error=\"invalid_token\""));
    assert_eq!(lists_tools(&app, &access).await, StatusCode::UNAUTHORIZED);
    let r = refresh(&app, &client, &rt2, &[]).await;
    assert_eq!(r.body["error"], "invalid_grant");
    // Another user cannot see or revoke it.
    let viewer = sign_in(&app, "viewer@p.test").await;
    let r = send(&app, get("/api/v1/oauth/grants", Some(&viewer))).await;
    assert_eq!(r.body["grants"], json!([]));
    // Re-authorization works.
    authorized(&w, &app, &client, &[]).await;
    // Denying creates nothing.
    let (_, c) = consent_page(&app, &viewer, &auth_query(&client, CLAUDE_CB, &[])).await;
    let r = decide(&app, &c.unwrap(), "deny", &w.org_a.to_string()).await;
    assert_eq!(
        query_param(&location(&r), "error").as_deref(),
        Some("access_denied")
    );
    let r = send(&app, get("/api/v1/oauth/grants", Some(&viewer))).await;
    assert_eq!(r.body["grants"], json!([]));
}

async fn redirect_uris_match_exactly(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    let session = sign_in(&app, "admin@p.test").await;
    for bad in [
        "https://evil.example/cb",
        "https://claude.ai/api/mcp/auth_callback/",
        "https://Claude.ai/api/mcp/auth_callback",
        "https://claude.ai:8443/api/mcp/auth_callback",
        "https://claude.ai/api/mcp/auth_callback?x=1",
    ] {
        let (r, _) = consent_page(&app, &session, &auth_query(&client, bad, &[])).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(
            r.headers.get("location").is_none(),
            "no open redirect for {bad}"
        );
    }
    // Unknown client: a page, never a redirect.
    let (r, _) = consent_page(&app, &session, &auth_query("bzcl_nope", CLAUDE_CB, &[])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.headers.get("location").is_none());
    // Loopback: any port (RFC 8252), nothing else.
    let r = register(&app, &json!({"redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"none","client_name":"Codex"})).await;
    let codex = r.body["client_id"].as_str().unwrap().to_owned();
    let (r, _) = consent_page(
        &app,
        &session,
        &auth_query(&codex, "http://127.0.0.1:49152/callback", &[]),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    for bad in [
        "http://127.0.0.1:49152/callback/",
        "http://localhost:49152/callback",
        "http://127.0.0.1:1/other",
    ] {
        let (r, _) = consent_page(&app, &session, &auth_query(&codex, bad, &[])).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
    }
    // Duplicated parameters are refused.
    let q = format!("{}&client_id={client}", auth_query(&client, CLAUDE_CB, &[]));
    let (r, _) = consent_page(&app, &session, &q).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

async fn pkce_and_resource_are_required(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    let session = sign_in(&app, "admin@p.test").await;
    let refused = |r: &Reply| {
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
        let loc = location(r);
        assert!(loc.starts_with(CLAUDE_CB));
        assert_eq!(query_param(&loc, "state").as_deref(), Some("st-1"));
        query_param(&loc, "error").unwrap()
    };
    for (extra, error) in [
        (vec![("code_challenge", "")], "invalid_request"),
        (vec![("code_challenge_method", "plain")], "invalid_request"),
        (vec![("code_challenge_method", "")], "invalid_request"),
        (vec![("code_challenge_method", "S512")], "invalid_request"),
        (
            vec![
                ("code_challenge", VERIFIER),
                ("code_challenge_method", "plain"),
            ],
            "invalid_request",
        ),
        (vec![("resource", "")], "invalid_target"),
        (
            vec![("resource", "https://evil.example/mcp")],
            "invalid_target",
        ),
        (
            vec![("resource", "http://127.0.0.1:3000/mcp#frag")],
            "invalid_target",
        ),
        (vec![("resource", "/mcp")], "invalid_target"),
        (vec![("scope", "mcp:read admin")], "invalid_scope"),
        (
            vec![("response_type", "token")],
            "unsupported_response_type",
        ),
    ] {
        let (r, _) = consent_page(&app, &session, &auth_query(&client, CLAUDE_CB, &extra)).await;
        assert_eq!(refused(&r), error, "{extra:?}");
    }
    // A trailing slash on the resource is the same resource.
    let (r, _) = consent_page(
        &app,
        &session,
        &auth_query(
            &client,
            CLAUDE_CB,
            &[("resource", "http://127.0.0.1:3000/mcp/")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);

    // Token endpoint: a wrong or missing verifier fails (audited) and does not use up the code.
    let code = code_for(&w, &app, &client, &[]).await;
    let r = exchange(
        &app,
        &client,
        &code,
        "wrong-verifier-0123456789-0123456789-0123456789",
    )
    .await;
    assert_eq!(r.body["error"], "invalid_grant");
    let r = send(
        &app,
        form(
            "/oauth/token",
            &[
                ("grant_type", "authorization_code"),
                ("client_id", &client),
                ("code", &code),
            ],
            &[],
        ),
    )
    .await;
    assert_eq!(r.body["error"], "invalid_grant");
    assert!(
        w.store
            .raw_dump("audit_log")
            .await
            .unwrap()
            .join("\n")
            .contains("oauth.token.pkce")
    );
    // A different resource cannot be asked for at the token endpoint.
    let r = send(
        &app,
        form(
            "/oauth/token",
            &[
                ("grant_type", "authorization_code"),
                ("client_id", &client),
                ("code", &code),
                ("code_verifier", VERIFIER),
                ("resource", "https://evil.example/mcp"),
            ],
            &[],
        ),
    )
    .await;
    assert_eq!(r.body["error"], "invalid_target");
    // Another client cannot redeem it; a bad redirect_uri does not consume it.
    let other = claude_client(&app).await;
    assert_eq!(
        exchange(&app, &other, &code, VERIFIER).await.body["error"],
        "invalid_grant"
    );
    let r = send(
        &app,
        form(
            "/oauth/token",
            &[
                ("grant_type", "authorization_code"),
                ("client_id", &client),
                ("code", &code),
                ("code_verifier", VERIFIER),
                ("redirect_uri", "https://evil.example/cb"),
            ],
            &[],
        ),
    )
    .await;
    assert_eq!(r.body["error"], "invalid_grant");
    assert_eq!(
        exchange(&app, &client, &code, VERIFIER).await.status,
        StatusCode::OK
    );
    // An expired code.
    let code = code_for(&w, &app, &client, &[]).await;
    cx.clock.advance(Duration::seconds(61));
    assert_eq!(
        exchange(&app, &client, &code, VERIFIER).await.body["error"],
        "invalid_grant"
    );
}

async fn code_replay_revokes_the_grant(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    let code = code_for(&w, &app, &client, &[]).await;
    let first = exchange(&app, &client, &code, VERIFIER).await;
    assert_eq!(first.status, StatusCode::OK);
    let access = first.body["access_token"].as_str().unwrap();
    assert_eq!(lists_tools(&app, access).await, StatusCode::OK);
    let again = exchange(&app, &client, &code, VERIFIER).await;
    assert_eq!(again.body["error"], "invalid_grant");
    assert_eq!(lists_tools(&app, access).await, StatusCode::UNAUTHORIZED);
    let r = refresh(
        &app,
        &client,
        first.body["refresh_token"].as_str().unwrap(),
        &[],
    )
    .await;
    assert_eq!(r.body["error"], "invalid_grant");
    assert!(
        w.store
            .raw_dump("audit_log")
            .await
            .unwrap()
            .join("\n")
            .contains("code_replay")
    );
}

async fn refresh_rotation_and_reuse(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let (client, t) = tokens(&w, &app).await;
    let rt1 = t["refresh_token"].as_str().unwrap().to_owned();
    let r = refresh(&app, &client, &rt1, &[]).await;
    let rt2 = r.body["refresh_token"].as_str().unwrap().to_owned();
    // The answer was lost: rt1 once more within the window replaces rt2.
    cx.clock.advance(Duration::seconds(30));
    let r = refresh(&app, &client, &rt1, &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let rt3 = r.body["refresh_token"].as_str().unwrap().to_owned();
    let access3 = r.body["access_token"].as_str().unwrap().to_owned();
    // Scopes narrow, never widen; another client cannot use the token (nothing revoked).
    let r = refresh(&app, &client, &rt3, &[("scope", "mcp:read mcp:execute")]).await;
    assert_eq!(r.body["error"], "invalid_scope");
    let other = claude_client(&app).await;
    assert_eq!(
        refresh(&app, &other, &rt3, &[]).await.body["error"],
        "invalid_grant"
    );
    assert_eq!(lists_tools(&app, &access3).await, StatusCode::OK);
    let r = refresh(&app, &client, &rt3, &[("scope", "mcp:read")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["scope"], "mcp:read");
    let rt4 = r.body["refresh_token"].as_str().unwrap().to_owned();
    // The discarded rt2 reused: the whole grant is revoked.
    let r = refresh(&app, &client, &rt2, &[]).await;
    assert_eq!(r.body["error"], "invalid_grant");
    assert_eq!(lists_tools(&app, &access3).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        refresh(&app, &client, &rt4, &[]).await.body["error"],
        "invalid_grant"
    );

    // Outside the window, the previous token is reuse too.
    let (client, t) = tokens(&w, &app).await;
    let rt1 = t["refresh_token"].as_str().unwrap().to_owned();
    let r = refresh(&app, &client, &rt1, &[]).await;
    let access = r.body["access_token"].as_str().unwrap().to_owned();
    cx.clock.advance(Duration::seconds(61));
    assert_eq!(
        refresh(&app, &client, &rt1, &[]).await.body["error"],
        "invalid_grant"
    );
    assert_eq!(lists_tools(&app, &access).await, StatusCode::UNAUTHORIZED);

    // No refresh after 14 days.
    let (client, t) = tokens(&w, &app).await;
    cx.clock.advance(Duration::days(14) + Duration::seconds(1));
    let r = refresh(&app, &client, t["refresh_token"].as_str().unwrap(), &[]).await;
    assert_eq!(r.body["error"], "invalid_grant");
    assert!(
        w.store
            .raw_dump("audit_log")
            .await
            .unwrap()
            .join("\n")
            .contains("refresh_token_reuse")
    );
}

fn forge(header: &Value, claims: &Value, sig: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        B64.encode(header.to_string()),
        B64.encode(claims.to_string()),
        B64.encode(sig)
    )
}

async fn forged_and_foreign_tokens_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let (_, t) = tokens(&w, &app).await;
    let access = t["access_token"].as_str().unwrap().to_owned();
    let claims: Value =
        serde_json::from_slice(&B64.decode(access.split('.').nth(1).unwrap()).unwrap()).unwrap();
    let key = settings().key;
    let kid = key.kid().to_owned();
    // alg none.
    let none = forge(
        &json!({"alg":"none","typ":"at+jwt","kid":kid}),
        &claims,
        b"",
    );
    // HS256 keyed with the public key.
    let public = B64.decode(key.public_jwk()["x"].as_str().unwrap()).unwrap();
    let h = json!({"alg":"HS256","typ":"at+jwt","kid":kid});
    let signing_input = format!(
        "{}.{}",
        B64.encode(h.to_string()),
        B64.encode(claims.to_string())
    );
    let mac = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &public),
        signing_input.as_bytes(),
    );
    let hs256 = format!("{signing_input}.{}", B64.encode(mac.as_ref()));
    // Another key (unknown kid), and our key with the wrong typ, audience, issuer.
    let typed: AccessClaims = serde_json::from_value(claims.clone()).unwrap();
    let stranger = SigningKey::from_seed(&[5; 32]).unwrap().sign(&typed);
    let other_aud = key.sign(&AccessClaims {
        aud: "https://evil.example/mcp".into(),
        ..typed.clone()
    });
    let other_iss = key.sign(&AccessClaims {
        iss: "https://evil.example".into(),
        ..typed.clone()
    });
    let parts: Vec<&str> = access.split('.').collect();
    let wrong_typ = format!(
        "{}.{}.{}",
        B64.encode(json!({"alg":"EdDSA","typ":"JWT","kid":kid}).to_string()),
        parts[1],
        parts[2]
    );
    // The valid token's signature under other claims: verified tokens are remembered by their
    // signature, so the valid one is used (and remembered) first.
    let mut elevated = claims.clone();
    elevated["scope"] = json!("mcp:read mcp:write mcp:execute");
    let swapped_claims = format!(
        "{}.{}.{}",
        parts[0],
        B64.encode(elevated.to_string()),
        parts[2]
    );
    assert_eq!(lists_tools(&app, &access).await, StatusCode::OK);
    for (name, bad) in [
        ("same signature, other claims", swapped_claims),
        ("alg none", none),
        ("hs256", hs256),
        ("unknown kid", stranger),
        ("audience", other_aud),
        ("issuer", other_iss),
        ("typ", wrong_typ),
        ("garbage", "abc".to_owned()),
        ("api key as bearer", w.read.clone()),
    ] {
        let r = mcp(&app, &bad, &rpc("tools/list", json!({}))).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{name}");
        assert!(challenge(&r).contains("invalid_token"), "{name}");
    }
    assert_eq!(lists_tools(&app, &access).await, StatusCode::OK);
    // Expired after 30 minutes (and the allowed skew).
    cx.clock.advance(Duration::minutes(31));
    assert_eq!(lists_tools(&app, &access).await, StatusCode::UNAUTHORIZED);
}

async fn revocation_and_introspection(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let (client_a, a) = tokens(&w, &app).await;
    let (_, b) = tokens(&w, &app).await;
    let access_a = a["access_token"].as_str().unwrap();
    let access_b = b["access_token"].as_str().unwrap();
    // Introspection needs a resource server's credential; answers only for its organization.
    let r = send(
        &app,
        form("/oauth/token/introspection", &[("token", access_a)], &[]),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(
        &app,
        form(
            "/oauth/token/introspection",
            &[("token", access_a)],
            &[("x-api-key", &w.read)],
        ),
    )
    .await;
    assert_eq!(r.body["active"], true);
    assert_eq!(r.body["scope"], "mcp:read mcp:write");
    let r = send(
        &app,
        form(
            "/oauth/token/introspection",
            &[("token", access_a)],
            &[("x-api-key", &w.other_org_key)],
        ),
    )
    .await;
    assert_eq!(r.body, json!({ "active": false }));
    // Client A cannot revoke client B's token; unknown tokens answer 200 too.
    let r = send(
        &app,
        form(
            "/oauth/token/revocation",
            &[("token", access_b), ("client_id", &client_a)],
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(lists_tools(&app, access_b).await, StatusCode::OK);
    let r = send(
        &app,
        form(
            "/oauth/token/revocation",
            &[("token", "bzrt_nothing"), ("client_id", &client_a)],
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    // Revoking its refresh token kills its access token.
    let r = send(
        &app,
        form(
            "/oauth/token/revocation",
            &[
                ("token", a["refresh_token"].as_str().unwrap()),
                ("client_id", &client_a),
            ],
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(lists_tools(&app, access_a).await, StatusCode::UNAUTHORIZED);
    let r = send(
        &app,
        form(
            "/oauth/token/introspection",
            &[("token", access_a)],
            &[("x-api-key", &w.read)],
        ),
    )
    .await;
    assert_eq!(r.body, json!({ "active": false }));
    // A password change revokes every grant of the user.
    w.store
        .set_password_hash(
            w.admin,
            &breeze_auth::password::hash("new password 123").unwrap(),
            common::audit("pw"),
        )
        .await
        .unwrap();
    assert_eq!(lists_tools(&app, access_b).await, StatusCode::UNAUTHORIZED);
}

async fn registration_rules_and_client_fixtures(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    // The real clients' registration bodies (security notes §1).
    for body in [
        json!({"redirect_uris":[CLAUDE_CB],"token_endpoint_auth_method":"client_secret_post","grant_types":["authorization_code","refresh_token"],"client_name":"Claude"}),
        json!({"redirect_uris":["http://localhost/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"client_name":"Claude Code (breeze)"}),
        json!({"redirect_uris":["http://127.0.0.1:43125/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"client_name":"Codex"}),
        json!({"redirect_uris":["https://chatgpt.com/connector_platform_oauth_redirect"],"token_endpoint_auth_method":"client_secret_basic","client_name":"ChatGPT","scope":"mcp:read"}),
    ] {
        let r = register(&app, &body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{body}: {}", r.body);
        assert_eq!(r.body["token_endpoint_auth_method"], "none");
        assert!(r.body.get("client_secret").is_none());
        assert_eq!(r.headers["cache-control"], "no-store");
    }
    for (body, error) in [
        (
            json!({"redirect_uris":["javascript:alert(1)"]}),
            "invalid_redirect_uri",
        ),
        (
            json!({"redirect_uris":["data:text/html,x"]}),
            "invalid_redirect_uri",
        ),
        (
            json!({"redirect_uris":["http://evil.example/cb"]}),
            "invalid_redirect_uri",
        ),
        (
            json!({"redirect_uris":["https://*.evil.example/cb"]}),
            "invalid_redirect_uri",
        ),
        (json!({"redirect_uris":[]}), "invalid_redirect_uri"),
        (
            json!({"redirect_uris":[CLAUDE_CB],"software_id":"x"}),
            "invalid_client_metadata",
        ),
        (
            json!({"redirect_uris":[CLAUDE_CB],"grant_types":["client_credentials"]}),
            "invalid_client_metadata",
        ),
        (json!({"redirect_uris":"nope"}), "invalid_client_metadata"),
    ] {
        let r = register(&app, &body).await;
        assert_eq!(
            (r.status, r.body["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some(error)),
            "{body}"
        );
    }
    assert!(
        w.store
            .raw_dump("audit_log")
            .await
            .unwrap()
            .join("\n")
            .contains("software_id")
    );
    let big = json!({"redirect_uris":[CLAUDE_CB],"client_name":"x".repeat(20_000)});
    assert_eq!(
        register(&app, &big).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // Rate limited per address.
    let limited = build(
        &w,
        |c| {
            let mut s = settings();
            s.register_per_minute = 2;
            c.oauth = Some(s);
        },
        Arc::new(MemoryLimiter::new()),
    );
    let ok = json!({"redirect_uris":[CLAUDE_CB]});
    assert_eq!(register(&limited, &ok).await.status, StatusCode::CREATED);
    assert_eq!(register(&limited, &ok).await.status, StatusCode::CREATED);
    let r = register(&limited, &ok).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers.contains_key("retry-after"));
    // Gated by an initial access token (an API key).
    let gated = build(
        &w,
        |c| {
            let mut s = settings();
            s.dcr.require_iat = true;
            s.dcr.allow_anonymous = false;
            c.oauth = Some(s);
        },
        Arc::new(MemoryLimiter::new()),
    );
    assert_eq!(register(&gated, &ok).await.status, StatusCode::UNAUTHORIZED);
    let r = send(
        &gated,
        json_post("/oauth/reg", &ok, &[("authorization", "Bearer brz_wrong")]),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(
        &gated,
        json_post(
            "/oauth/reg",
            &ok,
            &[("authorization", &format!("Bearer {}", w.read))],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    // DCR off: no endpoint, and the metadata does not advertise one.
    let off = build(
        &w,
        |c| {
            let mut s = settings();
            s.dcr.enabled = false;
            c.oauth = Some(s);
        },
        Arc::new(MemoryLimiter::new()),
    );
    assert_eq!(register(&off, &ok).await.status, StatusCode::NOT_FOUND);
    let m = send(&off, get("/.well-known/oauth-authorization-server", None)).await;
    assert!(m.body.get("registration_endpoint").is_none());
}

async fn consent_csrf_and_organizations(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    let session = sign_in(&app, "admin@p.test").await;
    let q = auth_query(&client, CLAUDE_CB, &[]);
    let (_, c) = consent_page(&app, &session, &q).await;
    let c = c.unwrap();
    let org = w.org_a.to_string();
    let without = |name: &str| Consent {
        fields: c
            .fields
            .iter()
            .filter(|(k, _)| k != name)
            .cloned()
            .collect(),
        cookies: c.cookies.clone(),
    };
    // The page's session token, the consent token, and the consent cookie are all needed.
    for missing in ["csrf", "consent_token"] {
        let r = decide(&app, &without(missing), "approve", &org).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{missing}");
        assert!(r.headers.get("location").is_none());
    }
    let no_cookie = Consent {
        fields: c.fields.clone(),
        cookies: session.clone(),
    };
    assert_eq!(
        decide(&app, &no_cookie, "approve", &org).await.status,
        StatusCode::FORBIDDEN
    );
    // The token is bound to the request: changing what is granted breaks it.
    let mut widened = Consent {
        fields: c.fields.clone(),
        cookies: c.cookies.clone(),
    };
    for (k, v) in &mut widened.fields {
        if k == "scope" {
            *v = "mcp:read mcp:write mcp:execute".into();
        }
    }
    assert_eq!(
        decide(&app, &widened, "approve", &org).await.status,
        StatusCode::FORBIDDEN
    );
    // Another session's consent form does not pass with this session.
    let other = sign_in(&app, "admin@p.test").await;
    let stolen = Consent {
        fields: c.fields.clone(),
        cookies: c.cookies.replace(&session, &other),
    };
    assert_eq!(
        decide(&app, &stolen, "approve", &org).await.status,
        StatusCode::FORBIDDEN
    );
    // Cross-origin post.
    let mut pairs: Vec<(&str, &str)> = c
        .fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.extend([("decision", "approve"), ("org_id", org.as_str())]);
    let r = send(
        &app,
        form(
            "/oauth/auth",
            &pairs,
            &[("cookie", &c.cookies), ("origin", "https://evil.example")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // An organization the user holds no role in cannot be chosen.
    let viewer = sign_in(&app, "viewer@p.test").await;
    let (_, vc) = consent_page(&app, &viewer, &q).await;
    let r = decide(&app, &vc.unwrap(), "approve", &w.org_b.to_string()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // The honest post works.
    assert_eq!(
        decide(&app, &c, "approve", &org).await.status,
        StatusCode::SEE_OTHER
    );
}

async fn scopes_and_organizations_bound_the_token(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    // A token reaching no tier (only openid) cannot open the stream: 403 insufficient_scope.
    let t = authorized(&w, &app, &client, &[("scope", "openid")]).await;
    let access = t["access_token"].as_str().unwrap();
    let r = send(
        &app,
        Request::get("/api/v1/mcp/sse")
            .header("authorization", format!("Bearer {access}"))
            .header("accept", "text/event-stream")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let c = challenge(&r);
    assert!(
        c.contains("error=\"insufficient_scope\"")
            && c.contains("scope=\"mcp:read\"")
            && c.contains("resource_metadata="),
        "{c}"
    );
    // A read token for org A cannot reach org B's device.
    let (_, t) = tokens(&w, &app).await;
    let access = t["access_token"].as_str().unwrap();
    let r = mcp(
        &app,
        access,
        &rpc(
            "tools/call",
            json!({ "name": "get_device_details", "arguments": { "deviceId": w.b_device } }),
        ),
    )
    .await;
    let text = r.body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        r.body["result"]["isError"] == true || r.body.get("error").is_some(),
        "{}",
        r.body
    );
    assert!(
        !text.contains("web-01") || text.contains("NOT_FOUND"),
        "{text}"
    );
}

const EXECUTE: &str = "mcp:read mcp:write mcp:execute";

/// A Tier 3 `manage_groups create` call made with `bearer`, left waiting in the background.
fn create_group_waiting(app: &Router, bearer: &str, name: &str) -> tokio::task::JoinHandle<Reply> {
    let (app, bearer) = (app.clone(), bearer.to_owned());
    let body = rpc(
        "tools/call",
        json!({ "name": "manage_groups", "arguments": { "action": "create", "name": name } }),
    );
    tokio::spawn(async move { mcp(&app, &bearer, &body).await })
}

/// The organization's newest pending approval request, once the waiting call made it.
async fn pending_request(w: &World) -> breeze_store::ApprovalRecord {
    for _ in 0..200 {
        let pending = w
            .store
            .org(w.org_a)
            .approvals()
            .list_approvals(true, 1)
            .await
            .unwrap();
        if let Some(r) = pending.into_iter().next() {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("no approval request appeared")
}

async fn decide_approval(app: &Router, session: &str, id: uuid::Uuid, decision: &str) -> Reply {
    send(
        app,
        json_post(
            &format!("/api/v1/approvals/{id}/{decision}"),
            &json!({ "reason": "test" }),
            &[("cookie", session)],
        ),
    )
    .await
}

/// The structured error message of a tool result.
fn tool_error(r: &Reply) -> String {
    assert_eq!(r.body["result"]["isError"], true, "{}", r.body);
    r.body["result"]["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn group_exists(w: &World, name: &str) -> bool {
    let groups = w.store.org(w.org_a).tenancy().list_groups().await.unwrap();
    groups.iter().any(|g| g.name == name)
}

/// A token's Tier 3 call waits for a person exactly as an API key's does, runs once approved
/// (cleared again as the grant stands then), is void once the grant is revoked, and a
/// "reported" decision revokes the client's grants for that user — not other clients'.
async fn tier3_calls_with_a_token_go_through_approval(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let session = sign_in(&app, "admin@p.test").await;
    let client = claude_client(&app).await;
    let t = authorized(&w, &app, &client, &[("scope", EXECUTE)]).await;
    let access = t["access_token"].as_str().unwrap().to_owned();
    let grants = send(&app, get("/api/v1/oauth/grants", Some(&session))).await;
    let grant = grants.body["grants"][0]["id"].as_str().unwrap().to_owned();

    // Approved: the waiting call runs it and answers with its result.
    let call = create_group_waiting(&app, &access, "Kiosks");
    let request = pending_request(&w).await;
    assert_eq!(request.api_key_id, None);
    assert_eq!(
        request.oauth_grant_id.map(|g| g.to_string()).as_deref(),
        Some(grant.as_str())
    );
    assert!(
        !group_exists(&w, "Kiosks").await,
        "nothing runs before approval"
    );
    let r = decide_approval(&app, &session, request.id, "approve").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = call.await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_ne!(r.body["result"]["isError"], true, "{}", r.body);
    assert_eq!(
        r.body["result"]["structuredContent"]["group"]["name"],
        "Kiosks"
    );
    assert!(group_exists(&w, "Kiosks").await);
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert!(
        audit
            .lines()
            .any(|l| l.contains("approval.request") && l.contains("oauth_grant")),
        "the request is audited with the grant as actor"
    );

    // Approved after the user revoked the grant: void, nothing runs.
    let client2 = claude_client(&app).await;
    let t2 = authorized(&w, &app, &client2, &[("scope", EXECUTE)]).await;
    let access2 = t2["access_token"].as_str().unwrap().to_owned();
    let call = create_group_waiting(&app, &access2, "Void");
    let request = pending_request(&w).await;
    let g2 = request.oauth_grant_id.unwrap();
    let r = revoke_grant(&app, &session, &g2.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    decide_approval(&app, &session, request.id, "approve").await;
    let msg = tool_error(&call.await.unwrap());
    assert!(
        msg.contains("is void") && msg.contains("grant was revoked"),
        "{msg}"
    );
    assert!(!group_exists(&w, "Void").await);

    // Reported: refused, and the client's grants for this user die at once (a second grant
    // of the same client too); another client's grant is untouched.
    let second = authorized(&w, &app, &client, &[("scope", "mcp:read")]).await;
    let other = claude_client(&app).await;
    let other_t = authorized(&w, &app, &other, &[]).await;
    let call = create_group_waiting(&app, &access, "Reported");
    let request = pending_request(&w).await;
    let r = decide_approval(&app, &session, request.id, "report").await;
    assert_eq!(r.body["status"], "reported", "{}", r.body);
    let msg = tool_error(&call.await.unwrap());
    assert!(
        msg.contains("OAuth client's access has been revoked"),
        "{msg}"
    );
    assert!(!group_exists(&w, "Reported").await);
    assert_eq!(lists_tools(&app, &access).await, StatusCode::UNAUTHORIZED);
    let second_access = second["access_token"].as_str().unwrap();
    assert_eq!(
        lists_tools(&app, second_access).await,
        StatusCode::UNAUTHORIZED
    );
    let r = refresh(&app, &client, t["refresh_token"].as_str().unwrap(), &[]).await;
    assert_eq!(r.body["error"], "invalid_grant");
    let other_access = other_t["access_token"].as_str().unwrap();
    assert_eq!(lists_tools(&app, other_access).await, StatusCode::OK);
    let grants = send(&app, get("/api/v1/oauth/grants", Some(&session))).await;
    let reported: Vec<&Value> = grants.body["grants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["revoke_reason"] == "approval_reported")
        .collect();
    assert_eq!(reported.len(), 2, "{}", grants.body);
    assert!(
        reported
            .iter()
            .all(|g| g["client_id"] == client.as_str() && g["state"] == "Revoked")
    );
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert_eq!(
        audit.matches("approval_reported").count(),
        2,
        "one record per grant"
    );
}

/// The MCP spec's scope challenge: a token whose scopes do not reach a call's tier gets 403
/// `insufficient_scope` naming its scopes plus the one needed (so the client can step up),
/// audited with the grant as actor; API keys keep their JSON-RPC refusal.
async fn insufficient_scope_is_a_step_up_challenge(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    let t = authorized(&w, &app, &client, &[("scope", "mcp:read")]).await;
    let access = t["access_token"].as_str().unwrap();
    let call = |name: &str, arguments: Value| {
        rpc(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
    };
    for (body, needed, scope) in [
        (
            call("manage_groups", json!({ "action": "create", "name": "X" })),
            "mcp:execute",
            "mcp:read mcp:execute",
        ),
        (
            call("set_device_context", json!({})),
            "mcp:write",
            "mcp:read mcp:write",
        ),
        (
            // A batch is judged by its costliest item.
            call(
                "manage_groups",
                json!({ "mode": "commit", "items": [
                    { "clientRef": "a", "input": { "action": "list" } },
                    { "clientRef": "b", "input": { "action": "create", "name": "Y" } },
                ] }),
            ),
            "mcp:execute",
            "mcp:read mcp:execute",
        ),
    ] {
        let r = mcp(&app, access, &body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{body}: {}", r.body);
        let c = challenge(&r);
        assert!(c.starts_with("Bearer "), "{c}");
        assert!(c.contains("error=\"insufficient_scope\""), "{c}");
        assert!(c.contains(&format!("scope=\"{scope}\"")), "{c}");
        assert!(
            c.contains(&format!(
                "resource_metadata=\"{BASE}/.well-known/oauth-protected-resource/mcp\""
            )),
            "{c}"
        );
        assert!(err_msg(&r).contains(needed), "{}", r.body);
    }
    // What the token reaches runs; tools/list is unchanged.
    let r = mcp(&app, access, &call("query_devices", json!({}))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(lists_tools(&app, access).await, StatusCode::OK);
    // The consolidated catalog's execute meta-tool is challenged the same way.
    let r = send(
        &app,
        json_post(
            "/mcp?catalog=consolidated",
            &call(
                "breeze_execute",
                json!({ "operation": "manage_groups", "input": {} }),
            ),
            &[
                ("authorization", &format!("Bearer {access}")),
                ("accept", "application/json, text/event-stream"),
            ],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert!(challenge(&r).contains("scope=\"mcp:read mcp:execute\""));
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert!(
        audit
            .lines()
            .any(|l| l.contains("mcp.refused") && l.contains("oauth_grant") && l.contains("403")),
        "the refusal is audited with the grant as actor"
    );
    // An API key without the scope: the JSON-RPC refusal as before, no challenge.
    let r = send(
        &app,
        json_post(
            "/mcp",
            &call("manage_groups", json!({ "action": "create", "name": "X" })),
            &[
                ("x-api-key", &w.read),
                ("accept", "application/json, text/event-stream"),
            ],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.headers.get("www-authenticate").is_none());
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ai:execute")
    );
    // Stepped up (a new grant of the same client): the call passes the challenge (and meets
    // validation) in the session the read-only token opened; another client's token cannot
    // use that session.
    let session = open_session(&app, access).await;
    let t = authorized(&w, &app, &client, &[("scope", "mcp:read mcp:execute")]).await;
    let stepped = t["access_token"].as_str().unwrap();
    let r = mcp_in(
        &app,
        stepped,
        &session,
        &call("set_device_context", json!({})),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "mcp:execute reaches Tier 2: {}",
        r.body
    );
    let (_, other) = tokens(&w, &app).await;
    let other = other["access_token"].as_str().unwrap();
    let r = mcp_in(&app, other, &session, &call("query_devices", json!({}))).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
}

/// Browser-based clients reach discovery, JWKS, token, registration and revocation across
/// origins; the authorization page and introspection stay same-origin.
async fn cors_on_the_public_endpoints(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let preflight = |path: &str| {
        Request::options(path)
            .header("origin", "http://localhost:6274")
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, mcp-protocol-version, authorization",
            )
            .body(Body::empty())
            .unwrap()
    };
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/jwks.json",
        "/oauth/token",
        "/oauth/reg",
        "/oauth/token/revocation",
    ] {
        let r = send(&app, preflight(path)).await;
        assert!(r.status.is_success(), "{path}: {}", r.status);
        let h = |n: &str| {
            r.headers
                .get(n)
                .map(|v| v.to_str().unwrap().to_ascii_lowercase())
                .unwrap_or_default()
        };
        assert_eq!(h("access-control-allow-origin"), "*", "{path}");
        assert!(h("access-control-allow-methods").contains("post"), "{path}");
        assert!(
            h("access-control-allow-headers").contains("mcp-protocol-version"),
            "{path}"
        );
        assert!(h("access-control-allow-credentials").is_empty(), "{path}");
    }
    let r = send(
        &app,
        Request::get("/.well-known/oauth-authorization-server")
            .header("origin", "http://localhost:6274")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["access-control-allow-origin"], "*");
    let r = send(
        &app,
        form(
            "/oauth/token",
            &[
                ("grant_type", "refresh_token"),
                ("client_id", "x"),
                ("refresh_token", "y"),
            ],
            &[("origin", "http://localhost:6274")],
        ),
    )
    .await;
    assert_eq!(r.headers["access-control-allow-origin"], "*", "errors too");
    for path in ["/oauth/auth", "/oauth/token/introspection"] {
        let r = send(&app, preflight(path)).await;
        assert!(
            r.headers.get("access-control-allow-origin").is_none(),
            "{path} answers no other origin"
        );
    }
}

/// "Sign out everywhere" ends every session of the person and revokes their grants, audited;
/// the daily sweep removes stale registered clients once a day, whoever asks.
/// Disabling a user revokes their OAuth grants at once (the access token and the refresh
/// token both die) and says so; re-enabling restores none of them. A disabled user's refresh
/// is refused even where a grant was left active (disabled by hand in the database).
async fn disabling_a_user_revokes_their_grants(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let (client, t) = tokens(&w, &app).await;
    let access = t["access_token"].as_str().unwrap();
    let refresh_token = t["refresh_token"].as_str().unwrap();
    assert_eq!(lists_tools(&app, access).await, StatusCode::OK);
    let audit = |action: &str| {
        breeze_core::AuditEvent::new(breeze_core::Actor::system("test"), action, "user")
    };
    let (_, grants) = w
        .store
        .set_user_disabled(w.admin, true, audit("user.disable"))
        .await
        .unwrap();
    assert_eq!(grants, 1);
    assert_eq!(lists_tools(&app, access).await, StatusCode::UNAUTHORIZED);
    let r = refresh(&app, &client, refresh_token, &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["error"], "invalid_grant", "{}", r.body);

    // Re-enabled: nothing comes back.
    assert_eq!(
        w.store
            .set_user_disabled(w.admin, false, audit("user.enable"))
            .await
            .unwrap(),
        (0, 0)
    );
    assert_eq!(lists_tools(&app, access).await, StatusCode::UNAUTHORIZED);
    let r = refresh(&app, &client, refresh_token, &[]).await;
    assert_eq!(r.body["error"], "invalid_grant", "{}", r.body);
    let grants = w.store.user_oauth_grants(w.admin).await.unwrap();
    assert!(
        grants
            .iter()
            .all(|g| g.revoke_reason.as_deref() == Some("user_disabled")),
        "{grants:?}"
    );
    let audit_log = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert!(audit_log.contains("user.disable") && audit_log.contains("grants_revoked"));

    // A user disabled behind Breeze's back, grant still active: the refresh is refused anyway.
    let (client, t) = tokens(&w, &app).await;
    let id = match w.store.backend() {
        breeze_store::Backend::Sqlite => format!("X'{}'", w.admin.0.simple()),
        breeze_store::Backend::Postgres => format!("'{}'", w.admin.0),
    };
    w.store
        .raw_execute(&format!("UPDATE users SET disabled = TRUE WHERE id = {id}"))
        .await
        .unwrap();
    let r = refresh(&app, &client, t["refresh_token"].as_str().unwrap(), &[]).await;
    assert_eq!(r.body["error"], "invalid_grant", "{}", r.body);
    assert!(
        r.body["error_description"]
            .as_str()
            .unwrap_or_default()
            .contains("disabled"),
        "{}",
        r.body
    );
}

async fn sign_out_everywhere_and_the_daily_sweep(cx: Ctx) {
    let w = world(&cx).await;
    let mut config = (*w.state.config).clone();
    config.oauth = Some(settings());
    let state = breeze_server::AppState::new(
        w.state.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(MemoryLimiter::new()),
    );
    let app = breeze_server::app(breeze_server::Breeze::new(state.clone()));
    let (_, t) = tokens(&w, &app).await;
    let access = t["access_token"].as_str().unwrap();
    let one = sign_in(&app, "admin@p.test").await;
    let two = sign_in(&app, "admin@p.test").await;
    let viewer = sign_in(&app, "viewer@p.test").await;
    let me = |cookie: &str| send(&app, get("/api/v1/auth/me", Some(cookie)));
    assert_eq!(me(&two).await.status, StatusCode::OK);
    // An API key cannot.
    let r = send(
        &app,
        json_post(
            "/api/v1/auth/logout-everywhere",
            &json!({}),
            &[("x-api-key", &w.read)],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = send(
        &app,
        json_post(
            "/api/v1/auth/logout-everywhere",
            &json!({}),
            &[("cookie", &one)],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.body["sessions_ended"].as_u64().unwrap() >= 3,
        "{}",
        r.body
    );
    assert_eq!(r.body["grants_revoked"], 1);
    assert!(set_cookie(&r, "breeze_session").ends_with("breeze_session="));
    assert_eq!(me(&one).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(me(&two).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        me(&viewer).await.status,
        StatusCode::OK,
        "only the person's own"
    );
    assert_eq!(lists_tools(&app, access).await, StatusCode::UNAUTHORIZED);
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert!(audit.contains("auth.logout_everywhere"));

    // The sweep: once per day by the store's clock, across instances (a second OAuth over the
    // same store is another instance).
    let oauth = state.oauth.clone().unwrap();
    let stale = claude_client(&app).await;
    let kept = claude_client(&app).await;
    authorized(&w, &app, &kept, &[]).await;
    assert_eq!(oauth.sweep_when_due().await.unwrap(), Some(0), "first run");
    cx.clock.advance(Duration::days(91));
    let other = breeze_server::AppState::new(
        w.state.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        state.config.as_ref().clone(),
        Arc::new(MemoryLimiter::new()),
    )
    .oauth
    .unwrap();
    let removed = other.sweep_when_due().await.unwrap();
    assert!(removed.is_some_and(|n| n >= 1), "{removed:?}");
    assert_eq!(oauth.sweep_when_due().await.unwrap(), None, "once a day");
    assert!(w.store.get_oauth_client(&stale).await.unwrap().is_none());
    assert!(
        w.store.get_oauth_client(&kept).await.unwrap().is_some(),
        "a client with an active grant stays"
    );
    let audit = w.store.raw_dump("audit_log").await.unwrap().join("\n");
    assert!(audit.contains("oauth.client.sweep"));
    cx.clock.advance(Duration::days(1));
    assert!(
        oauth.sweep_when_due().await.unwrap().is_some(),
        "the next day"
    );
}

async fn metadata_documents_are_fetched_safely(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let session = sign_in(&app, "admin@p.test").await;
    for id in [
        "https://127.0.0.1/client.json",
        "https://localhost/client.json",
        "https://10.0.0.8/client.json",
        "https://[::ffff:169.254.169.254]/client.json",
        "https://chatgpt.com/../client.json",
        "https://u:p@chatgpt.com/client.json",
        "http://chatgpt.com/client.json",
    ] {
        let (r, _) = consent_page(&app, &session, &auth_query(id, CLAUDE_CB, &[])).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{id}");
        assert!(r.headers.get("location").is_none(), "{id}");
    }
    // The fetcher itself refuses names that resolve to private addresses, and plain http.
    let fetcher = HttpFetcher;
    use breeze_oauth::MetadataFetcher;
    let e = fetcher
        .fetch(&url::Url::parse("https://localhost:9/client.json").unwrap())
        .await
        .unwrap_err();
    assert!(e.contains("non-public"), "{e}");
    let e = fetcher
        .fetch(&url::Url::parse("http://example.com/client.json").unwrap())
        .await
        .unwrap_err();
    assert!(e.contains("https"), "{e}");
    // A document: client_id must be its URL, no secret, public or negotiable to none.
    let doc = |v: Value| v.to_string().into_bytes();
    let id = "https://chatgpt.com/oauth/abc/client.json";
    let ok = breeze_oauth::client::validate_document(
        id,
        &doc(
            json!({"client_id": id, "redirect_uris": ["https://chatgpt.com/connector/oauth/abc"], "token_endpoint_auth_method": "private_key_jwt", "token_endpoint_auth_methods_supported": ["none", "private_key_jwt"], "client_name": "ChatGPT"}),
        ),
    );
    assert!(ok.is_ok(), "{ok:?}");
    for bad in [
        json!({"client_id": "https://chatgpt.com/other.json", "redirect_uris": ["https://chatgpt.com/cb"]}),
        json!({"client_id": id, "redirect_uris": ["https://chatgpt.com/cb"], "client_secret": "s"}),
        json!({"client_id": id, "redirect_uris": ["https://chatgpt.com/cb"], "token_endpoint_auth_method": "private_key_jwt"}),
        json!({"client_id": id, "redirect_uris": ["javascript:x"]}),
    ] {
        assert!(
            breeze_oauth::client::validate_document(id, &doc(bad.clone())).is_err(),
            "{bad}"
        );
    }
    let huge = doc(
        json!({"client_id": id, "redirect_uris": ["https://chatgpt.com/cb"], "pad": "x".repeat(6000)}),
    );
    assert!(breeze_oauth::client::validate_document(id, &huge).is_err());
}

/// A metadata document that cannot be fetched is refused with one generic message: nothing of
/// what the name resolved to or how the host answered reaches the unauthenticated caller.
async fn a_failed_metadata_fetch_says_nothing_of_why(cx: Ctx) {
    struct Failing;
    impl breeze_oauth::MetadataFetcher for Failing {
        fn fetch<'a>(&'a self, _: &'a url::Url) -> breeze_oauth::FetchFuture<'a> {
            Box::pin(async { Err("name resolution failed: 10.1.2.3 refused".to_owned()) })
        }
    }
    let s = settings();
    let oauth = breeze_oauth::OAuth::new(
        cx.store.clone(),
        Arc::new(cx.clock.clone()),
        s.config.clone(),
        s.key.clone(),
        &s.cookie_secret,
        Arc::new(Failing),
    );
    let e = oauth
        .client("https://attacker.example/x.json")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("could not fetch the client ID metadata document"),
        "{e}"
    );
    assert!(!e.contains("10.1.2.3") && !e.contains("resolution"), "{e}");
}

/// Registration refuses a redirect URI whose host is not written where it belongs
/// (`https:///cb` would send codes to the host `cb`), and a client name with bidirectional
/// controls; a name that holds them anyway (stored earlier) is shown without them, isolated.
async fn registration_and_consent_resist_spoofing(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    for uri in ["https:///cb", "https:/cb", "https:\\\\cb/x"] {
        let r = register(&app, &json!({ "redirect_uris": [uri], "client_name": "X" })).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}: {}", r.body);
        assert_eq!(r.body["error"], "invalid_redirect_uri", "{uri}");
    }
    let r = register(
        &app,
        &json!({ "redirect_uris": [CLAUDE_CB], "client_name": "Claude\u{202E}exe.gnp" }),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.body["error"], "invalid_client_metadata");

    w.store
        .insert_oauth_client(
            breeze_store::NewOAuthClient {
                client_id: "bzcl_spoof".into(),
                kind: breeze_store::OAuthClientKind::Dcr,
                client_name: "Claude\u{202E}\u{2066}lanigiro\u{200B}".into(),
                redirect_uris: vec![CLAUDE_CB.into()],
                metadata: json!({}),
                expires_at: w.state.clock.now() + chrono::Duration::days(1),
            },
            breeze_core::AuditEvent::new(
                breeze_core::Actor::system("test"),
                "oauth.client.register",
                "oauth_client",
            ),
        )
        .await
        .unwrap();
    let session = sign_in(&app, "admin@p.test").await;
    let (r, c) = consent_page(&app, &session, &auth_query("bzcl_spoof", CLAUDE_CB, &[])).await;
    assert!(c.is_some(), "{}", r.body);
    let html = r.body.as_str().unwrap();
    assert!(html.contains("<bdi>Claudelanigiro</bdi>"), "{html}");
    for c in ['\u{202E}', '\u{2066}', '\u{200B}'] {
        assert!(!html.contains(c), "{c:?} reached the page");
    }
}

/// A signed access token's scopes are intersected with its grant's scopes at each use: the
/// token still says `mcp:write`, but once the grant holds only `mcp:read` a write is refused
/// as a step-up, while reads keep working.
async fn token_scopes_meet_the_grants_current_scopes(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let client = claude_client(&app).await;
    let t = authorized(&w, &app, &client, &[("scope", EXECUTE)]).await;
    let access = t["access_token"].as_str().unwrap();
    let write = rpc(
        "tools/call",
        json!({ "name": "set_device_context", "arguments": {} }),
    );
    assert_eq!(mcp(&app, access, &write).await.status, StatusCode::OK);
    w.store
        .raw_execute("UPDATE oauth_grants SET scopes = '[\"mcp:read\"]'")
        .await
        .unwrap();
    // Past the grant cache's second.
    cx.clock.advance(chrono::Duration::seconds(2));
    let r = mcp(&app, access, &write).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert!(challenge(&r).contains("error=\"insufficient_scope\""));
    let read = rpc(
        "tools/call",
        json!({ "name": "query_devices", "arguments": {} }),
    );
    assert_eq!(mcp(&app, access, &read).await.status, StatusCode::OK);
}

/// A registration naming a `software_id` (mcp-remote sends one) is refused by default, and
/// the refusal names the setting that accepts it and who sends the field; with that setting
/// it is accepted, the field ignored: not in the answer, not stored.
async fn software_id_is_refused_by_name_or_accepted_and_ignored(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let mcp_remote = json!({
        "redirect_uris": ["http://localhost:3334/oauth/callback"],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "client_name": "MCP CLI Proxy",
        "software_id": "2e6dc280-f3c3-4e01-99a7-8181dbd1d23d",
        "software_version": "0.15.1",
    });
    let r = register(&app, &mcp_remote).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    let why = r.body["error_description"].as_str().unwrap_or_default();
    assert!(
        why.contains("OAUTH_DCR_IGNORE_SOFTWARE_ID=true") && why.contains("mcp-remote"),
        "{why}"
    );
    let accepting = build(
        &w,
        |c| {
            let mut s = settings();
            s.config.ignore_software_id = true;
            c.oauth = Some(s);
        },
        Arc::new(MemoryLimiter::new()),
    );
    let r = register(&accepting, &mcp_remote).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert!(r.body.get("software_id").is_none(), "{}", r.body);
    let stored = w.store.raw_dump("oauth_clients").await.unwrap().join("\n");
    assert!(stored.contains("MCP CLI Proxy"), "{stored}");
    assert!(
        !stored.contains("2e6dc280"),
        "the software_id is never stored: {stored}"
    );
    // A signed statement stays refused: nothing here verifies it.
    let r = register(
        &accepting,
        &json!({"redirect_uris": [CLAUDE_CB], "software_statement": "eyJ.x.y"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

/// Client ID metadata documents can be turned off (no longer advertised, nor resolved, and
/// the client is told why); a document the server cannot fetch is refused with the reason.
async fn cimd_can_be_turned_off_and_a_failed_fetch_says_why(cx: Ctx) {
    let w = world(&cx).await;
    let app = oauth_app(&w);
    let meta = send(&app, get("/.well-known/oauth-authorization-server", None)).await;
    assert_eq!(meta.body["client_id_metadata_document_supported"], true);
    let session = sign_in(&app, "admin@p.test").await;
    // `.invalid` never resolves: the fetch fails, and the page says so and what to do.
    let id = "https://client.invalid/oauth/client.json";
    let (r, _) = consent_page(&app, &session, &auth_query(id, CLAUDE_CB, &[])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let page = r.body.to_string();
    assert!(
        page.contains("could not fetch the client ID metadata document")
            && page.contains("OAUTH_CIMD_ENABLED=false"),
        "{page}"
    );
    let off = build(
        &w,
        |c| {
            let mut s = settings();
            s.config.cimd = false;
            c.oauth = Some(s);
        },
        Arc::new(MemoryLimiter::new()),
    );
    let meta = send(&off, get("/.well-known/oauth-authorization-server", None)).await;
    assert_eq!(meta.body["client_id_metadata_document_supported"], false);
    let session = sign_in(&off, "admin@p.test").await;
    let (r, _) = consent_page(&off, &session, &auth_query(id, CLAUDE_CB, &[])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body.to_string().contains("OAUTH_CIMD_ENABLED=false"),
        "{}",
        r.body
    );
}

breeze_store::on_both_backends!(
    registration_and_consent_resist_spoofing,
    token_scopes_meet_the_grants_current_scopes,
    a_failed_metadata_fetch_says_nothing_of_why,
    discovery_and_challenge,
    software_id_is_refused_by_name_or_accepted_and_ignored,
    cimd_can_be_turned_off_and_a_failed_fetch_says_why,
    full_flow_refresh_revoke,
    redirect_uris_match_exactly,
    pkce_and_resource_are_required,
    code_replay_revokes_the_grant,
    refresh_rotation_and_reuse,
    forged_and_foreign_tokens_are_refused,
    revocation_and_introspection,
    registration_rules_and_client_fixtures,
    consent_csrf_and_organizations,
    scopes_and_organizations_bound_the_token,
    metadata_documents_are_fetched_safely,
    tier3_calls_with_a_token_go_through_approval,
    insufficient_scope_is_a_step_up_challenge,
    cors_on_the_public_endpoints,
    sign_out_everywhere_and_the_daily_sweep,
    disabling_a_user_revokes_their_grants,
);
