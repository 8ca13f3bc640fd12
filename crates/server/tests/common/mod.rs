//! The world both in-process test suites start from, and how they send requests.
//!
//! Partner `p` with organizations A (`org-a`) and B (`org-b`), one site and one device
//! (`web-01`) in each; `admin@p.test` (partner-level, Administrator in A and B) and
//! `viewer@p.test` (Read Only in A), both with [`PASSWORD`]; API keys of the admin:
//! `read` (ai:read) and `write` (ai:read, ai:write) in A, `other_org_key` (ai:read) in B.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{HeaderMap, Request, StatusCode},
};
use breeze_auth::{AuthService, AuthSettings, CreateApiKey, password};
use breeze_core::{Actor, AuditEvent, DeviceStatus, OrgId, Scope, ScopeSet, UserId};
use breeze_limits::{LimiterError, MemoryLimiter, RateDecision, RateLimiter};
use breeze_server::{AppState, Breeze, ServerConfig, app};
use breeze_store::{NewUser, Store, testing::Ctx};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

pub(crate) mod browser;

pub(crate) const PASSWORD: &str = "correct horse battery";

pub(crate) struct World {
    /// The application with default settings.
    pub(crate) app: Router,
    pub(crate) store: Store,
    pub(crate) state: AppState,
    pub(crate) org_a: OrgId,
    pub(crate) org_b: OrgId,
    pub(crate) admin: UserId,
    pub(crate) read: String,
    pub(crate) write: String,
    pub(crate) other_org_key: String,
    pub(crate) a_device: String,
    pub(crate) b_device: String,
}

pub(crate) fn audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("test"), action, "test")
}

pub(crate) async fn world(cx: &Ctx) -> World {
    let s = cx.store.clone();
    let clock: Arc<dyn breeze_core::Clock> = Arc::new(cx.clock.clone());
    let p = s.create_partner("P", "p", audit("p")).await.unwrap();
    let a = s
        .create_organization(p.id, "Org A", "org-a", audit("o"))
        .await
        .unwrap();
    let b = s
        .create_organization(p.id, "Org B", "org-b", audit("o"))
        .await
        .unwrap();
    let mk_user = |email: &str| NewUser {
        partner_id: p.id,
        org_id: None,
        email: email.into(),
        name: "U".into(),
        password_hash: password::hash(PASSWORD).unwrap(),
    };
    let admin = s
        .create_user(mk_user("admin@p.test"), audit("u"))
        .await
        .unwrap();
    let viewer = s
        .create_user(mk_user("viewer@p.test"), audit("u"))
        .await
        .unwrap();
    let admin_role = s.find_role(p.id, "Administrator").await.unwrap();
    let read_only = s.find_role(p.id, "Read Only").await.unwrap();
    s.assign_role(viewer.id, a.id, read_only.id, audit("r"))
        .await
        .unwrap();
    let mut devices = Vec::new();
    for org in [a.id, b.id] {
        s.assign_role(admin.id, org, admin_role.id, audit("r"))
            .await
            .unwrap();
        let site = s
            .org(org)
            .tenancy()
            .create_site("HQ", "UTC", audit("s"))
            .await
            .unwrap();
        let device = breeze_store::testing::new_device(site.id, "web-01", DeviceStatus::Online);
        let d = s
            .org(org)
            .devices()
            .create_device(device, audit("d"))
            .await
            .unwrap();
        devices.push(d.id.to_string());
    }
    let auth = AuthService::new(s.clone(), clock.clone(), AuthSettings::default());
    let key = |org: OrgId, scopes: &[Scope]| {
        let auth = auth.clone();
        let scopes = ScopeSet::new(scopes.iter().copied());
        let req = CreateApiKey {
            org_id: org,
            user_id: admin.id,
            name: "k".into(),
            scopes,
            expires_at: None,
        };
        async move {
            auth.create_api_key(req, audit("api_key.create"))
                .await
                .unwrap()
                .0
                .expose()
                .to_owned()
        }
    };
    let read = key(a.id, &[Scope::AiRead]).await;
    let write = key(a.id, &[Scope::AiRead, Scope::AiWrite]).await;
    let other_org_key = key(b.id, &[Scope::AiRead]).await;
    let state = AppState::new(
        s.clone(),
        auth,
        clock,
        ServerConfig::development("http://127.0.0.1:3000"),
        Arc::new(MemoryLimiter::new()),
    );
    let app = app(Breeze::new(state.clone()));
    World {
        app,
        store: s,
        state,
        org_a: a.id,
        org_b: b.id,
        admin: admin.id,
        read,
        write,
        other_org_key,
        a_device: devices[0].clone(),
        b_device: devices[1].clone(),
    }
}

/// A limiter that allows every call: for a test that calls one tool more often than its
/// limit allows, about something else than the limit.
pub(crate) struct Unlimited;

impl RateLimiter for Unlimited {
    fn check<'a>(
        &'a self,
        _key: &'a str,
        limit: u32,
        _window: std::time::Duration,
    ) -> futures::future::BoxFuture<'a, Result<RateDecision, LimiterError>> {
        Box::pin(async move {
            Ok(RateDecision {
                allowed: true,
                retry_after: std::time::Duration::ZERO,
                remaining: limit,
            })
        })
    }

    fn backend(&self) -> &'static str {
        "unlimited"
    }
}

/// The application with `tweak`ed settings and `limiter`.
pub(crate) fn build(
    w: &World,
    tweak: impl FnOnce(&mut ServerConfig),
    limiter: Arc<dyn RateLimiter>,
) -> Router {
    let mut config = (*w.state.config).clone();
    tweak(&mut config);
    let state = AppState::new(
        w.state.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        limiter,
    );
    app(Breeze::new(state))
}

pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    /// JSON, `Null` for an empty body, or the text when it is not JSON.
    pub(crate) body: Value,
}

pub(crate) async fn send(app: &Router, req: Request<Body>) -> Reply {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// The `error.message` of a REST or JSON-RPC error body.
pub(crate) fn err_msg(r: &Reply) -> &str {
    r.body["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {}", r.body))
}

/// A `tools/call` request with an API key.
pub(crate) fn tool_request(key: &str, tool: &str, args: Value) -> Request<Body> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": tool, "arguments": args },
    });
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("x-api-key", key)
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// The structured result of a tool call (its `structuredContent`), or `{"rpcError": …}`.
pub(crate) async fn tool(app: &Router, key: &str, name: &str, args: Value) -> Value {
    let r = send(app, tool_request(key, name, args)).await;
    if !r.body["error"].is_null() {
        return serde_json::json!({ "rpcError": r.body["error"] });
    }
    r.body["result"]["structuredContent"].clone()
}

/// The tool error code of a structured result ("" when it is not an error).
pub(crate) fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

/// An API key of `user` in `org` with `scopes`; its secret.
pub(crate) async fn api_key(w: &World, org: OrgId, user: UserId, scopes: &[Scope]) -> String {
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: org,
                user_id: user,
                name: "k".into(),
                scopes: ScopeSet::new(scopes.iter().copied()),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    secret.expose().to_owned()
}

/// A new user of the world's partner with the built-in role `role` in organization A.
pub(crate) async fn user_with(w: &World, role: &str, email: &str) -> UserId {
    let partner = w
        .store
        .org(w.org_a)
        .tenancy()
        .organization()
        .await
        .unwrap()
        .partner_id;
    let u = w
        .store
        .create_user(
            NewUser {
                partner_id: partner,
                org_id: None,
                email: email.into(),
                name: email.into(),
                password_hash: "x".into(),
            },
            audit("u"),
        )
        .await
        .unwrap();
    let r = w.store.find_role(partner, role).await.unwrap();
    w.store
        .assign_role(u.id, w.org_a, r.id, audit("r"))
        .await
        .unwrap();
    u.id
}

/// The refusal's code, whether a tool error or a JSON-RPC error (scope refusals are).
pub(crate) fn why(v: &Value) -> &str {
    v["rpcError"]["data"]["code"]
        .as_str()
        .unwrap_or_else(|| code(v))
}

/// A tool call that must succeed; its structured result.
pub(crate) async fn ok(app: &Router, key: &str, name: &str, args: Value) -> Value {
    let r = tool(app, key, name, args.clone()).await;
    assert_eq!(code(&r), "", "{name} {args}: {r}");
    assert!(r.get("rpcError").is_none(), "{name} {args}: {r}");
    r
}

/// The audit records of `action` in `org` (the newest 100), once the journal is written.
pub(crate) async fn audit_records(
    w: &World,
    org: OrgId,
    action: &str,
) -> Vec<breeze_core::AuditRecord> {
    w.store.flush_audit().await;
    w.store
        .org(org)
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some(action.into()),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap()
        .records
}
