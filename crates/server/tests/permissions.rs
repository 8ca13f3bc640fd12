//! One permission model at every door: for every tool action and every route under
//! `/orgs/{org}`, what the door decides for a caller is what `breeze_core::authz::authorize`
//! decides — over the built-in roles, API keys of every scope set and a signed-in person. The
//! walks are generated from the registry and from `ORG_ROUTES`, so a new tool or route is
//! covered without anyone adding a row.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::sync::Arc;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_auth::{CreateApiKey, password};
use breeze_core::{Caller, Operation, OrgId, ScopePolicy, ScopeSet, Verdict, authz::authorize};
use breeze_pipeline::{CallOutcome, Refusal};
use breeze_server::{AppState, Breeze, ORG_ROUTES, ServerConfig, app};
use breeze_store::{NewUser, testing::Ctx};
use breeze_tools::CallOptions;
use common::{PASSWORD, audit, send, world};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One way of calling: how to present it over HTTP, and the caller the model judges.
struct Who {
    label: String,
    caller: Caller,
    /// `X-API-Key`, or the session cookie.
    key: Option<String>,
    cookie: Option<String>,
}

const SCOPE_SETS: [&str; 4] = ["ai:read", "ai:read,ai:write", "ai:execute", "*"];

async fn callers(w: &common::World, app: &axum::Router, state: &AppState) -> Vec<Who> {
    let s = &w.store;
    let partner = s
        .org(w.org_a)
        .tenancy()
        .organization()
        .await
        .unwrap()
        .partner_id;
    let mut out = Vec::new();
    for role in ["Administrator", "Technician", "Read Only"] {
        let role = s.find_role(partner, role).await.unwrap();
        let email = format!("{}@p.test", role.name.replace(' ', "-").to_lowercase());
        let user = s
            .create_user(
                NewUser {
                    partner_id: partner,
                    org_id: None,
                    email: email.clone(),
                    name: role.name.clone(),
                    password_hash: password::hash(PASSWORD).unwrap(),
                },
                audit("u"),
            )
            .await
            .unwrap();
        s.assign_role(user.id, w.org_a, role.id, audit("r"))
            .await
            .unwrap();
        for scopes in SCOPE_SETS {
            let (secret, _) = state
                .auth
                .create_api_key(
                    CreateApiKey {
                        org_id: w.org_a,
                        user_id: user.id,
                        name: scopes.into(),
                        scopes: ScopeSet::parse_list(scopes).unwrap(),
                        expires_at: None,
                    },
                    audit("api_key.create"),
                )
                .await
                .unwrap();
            let secret = secret.expose().to_owned();
            let caller = state
                .auth
                .authenticate_api_key(Some(&secret))
                .await
                .unwrap();
            out.push(Who {
                label: format!("{} key [{scopes}]", role.name),
                caller,
                key: Some(secret),
                cookie: None,
            });
        }
        let login = json!({ "email": email, "password": PASSWORD });
        let r = send(
            app,
            Request::post("/api/v1/auth/login")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(login.to_string()))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
        out.push(Who {
            label: format!("{} session", role.name),
            caller: Caller::dashboard_session(user.id, w.org_a, Some(role.permissions)),
            key: None,
            cookie: Some(cookie.split(';').next().unwrap().to_owned()),
        });
    }
    out
}

/// The state and app of the world, with approvals answering "pending" at once (an allowed
/// Tier 3 call must not wait for a person here).
fn no_wait(w: &common::World) -> (AppState, axum::Router) {
    let mut config: ServerConfig = (*w.state.config).clone();
    config.approvals.wait = std::time::Duration::ZERO;
    let state = AppState::new(
        w.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        Arc::new(breeze_limits::MemoryLimiter::new()),
    );
    let app = app(Breeze::new(state.clone()));
    (state, app)
}

fn policy(state: &AppState) -> ScopePolicy {
    ScopePolicy {
        production: state.config.production,
        require_execute_admin: state.config.require_execute_admin,
    }
}

/// Every tool action, for every caller: the pipeline refuses exactly what the model denies.
/// (The per-tool rate limit and the production allowlist are later steps: a rate-limited call
/// was allowed by the model; the allowlist applies only in production.)
async fn every_tool_action_is_decided_by_the_model(cx: Ctx) {
    let w = world(&cx).await;
    let (state, app) = no_wait(&w);
    let who = callers(&w, &app, &state).await;
    let registry = state.pipeline.registry();
    let mut walked = 0;
    let mut wrong = Vec::new();
    for spec in registry.iter() {
        let calls: Vec<Value> = if spec.actions.is_empty() {
            vec![json!({})]
        } else {
            spec.actions
                .iter()
                .map(|a| json!({ spec.action_key: a.name }))
                .collect()
        };
        for args in calls {
            let op = Operation {
                tier: spec.effective_tier(&args),
                permission: spec.permission_for(&args),
            };
            for w in &who {
                let model = authorize(&w.caller, op, policy(&state));
                let outcome = state
                    .pipeline
                    .call(
                        &w.caller,
                        spec.name,
                        args.clone(),
                        CallOptions::default(),
                        &CancellationToken::new(),
                    )
                    .await;
                walked += 1;
                // A rate limit is counted only once the model allowed the call.
                let refused = matches!(
                    outcome,
                    CallOutcome::Refused(ref r) if !matches!(r, Refusal::RateLimited { .. })
                );
                if refused != model.is_err() {
                    wrong.push(format!(
                        "{}({args}) as {}: model {model:?}, pipeline {}",
                        spec.name,
                        w.label,
                        outcome.kind()
                    ));
                }
            }
        }
    }
    assert!(walked > 500, "walked only {walked} calls");
    assert!(
        wrong.is_empty(),
        "{} disagreements:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The route with its parameters filled: `{org}` is organization A, anything else an id that
/// does not exist.
fn concrete(path: &str, org: OrgId) -> String {
    path.split('/')
        .map(|seg| match seg {
            "{org}" => org.to_string(),
            s if s.starts_with('{') => uuid::Uuid::now_v7().to_string(),
            s => s.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Every route under `/orgs/{org}`, for every caller: REST forbids exactly what the model does
/// not allow now (a denial, or a Tier 3 operation that would need a person's approval, which
/// REST does not ask for), before it reads the body. And each declared route exists.
async fn every_org_route_is_decided_by_the_model(cx: Ctx) {
    let w = world(&cx).await;
    let (state, app) = no_wait(&w);
    let who = callers(&w, &app, &state).await;
    let mut wrong = Vec::new();
    for (method, path, op) in ORG_ROUTES {
        let uri = format!("/api/v1{}", concrete(path, w.org_a));
        for w in &who {
            let model = authorize(&w.caller, *op, policy(&state));
            let mut req = Request::builder().method(method.clone()).uri(&uri);
            if let Some(key) = &w.key {
                req = req.header("x-api-key", key);
            }
            if let Some(cookie) = &w.cookie {
                req = req
                    .header(header::COOKIE, cookie)
                    .header(header::ORIGIN, "http://127.0.0.1:3000");
            }
            // A body no route accepts: authorization must answer before it is read.
            let req = req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{\"unexpected\": true}"))
                .unwrap();
            let r = send(&app, req).await;
            let forbidden = r.status == StatusCode::FORBIDDEN;
            let expected = !matches!(model, Ok(Verdict::Allowed));
            if forbidden != expected {
                wrong.push(format!(
                    "{method} {path} as {}: model {model:?}, REST {} {}",
                    w.label, r.status, r.body
                ));
            }
            let missing = r.status == StatusCode::METHOD_NOT_ALLOWED
                || r.body["error"]["message"] == "no such endpoint";
            if missing {
                wrong.push(format!("{method} {path} is declared but not routed"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} disagreements:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

breeze_store::on_both_backends!(
    every_tool_action_is_decided_by_the_model,
    every_org_route_is_decided_by_the_model,
);
