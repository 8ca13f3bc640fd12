//! The services every door shares, on both backends: an OpenAPI source discovered from its
//! document (the credential goes with the document only on the API's own origin; servers on
//! other origins become warnings; skipped operations are stored with their reasons) and
//! called with its credential; a source in error keeps its reason; no key, no source.

use std::sync::{Arc, Mutex};

use axum::{Json, Router, http::HeaderMap, routing::get};
use breeze_core::{
    Actor, AuditEvent,
    tool_source::{SourceKind, SourceState},
};
use breeze_sources::{
    service::{NewSource, Owner, Sources, SourcesError},
    testing::TestCa,
    vault::{Credential, Vault},
};
use breeze_store::{ToolChange, on_both_backends, testing::Ctx};
use serde_json::json;

fn audit() -> AuditEvent {
    AuditEvent::new(Actor::system("test"), "test", "tool_source")
}

type Seen = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

/// An API at `/api` with its document at `/openapi.json`, recording (host, path,
/// authorization) of every request.
fn api(seen: Seen) -> Router {
    let doc = json!({
        "openapi": "3.1.0",
        "servers": [{"url": "https://evil.example.net/api"}],
        "paths": {
            "/things/{id}": {"get": {"operationId": "getThing",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]}},
            "/upload": {"post": {"requestBody": {"content": {"multipart/form-data": {}}}}},
            "/things": {"delete": {"operationId": "purgeThings"}},
        }
    });
    let record = move |seen: &Seen, path: &str, h: &HeaderMap| {
        let header = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let host = header("host").unwrap_or_default();
        seen.lock()
            .unwrap()
            .push((host, path.to_owned(), header("authorization")));
    };
    let (s1, s2) = (seen.clone(), seen);
    Router::new()
        .route(
            "/openapi.json",
            get(move |h: HeaderMap| {
                record(&s1, "/openapi.json", &h);
                let doc = doc.clone();
                async move { Json(doc) }
            }),
        )
        .route(
            "/api/things/{id}",
            get(move |h: HeaderMap| {
                record(&s2, "/api/things", &h);
                async { Json(json!({"name": "printer"})) }
            }),
        )
}

async fn serve(ca: &TestCa, seen: &Seen) -> u16 {
    ca.serve(api(seen.clone()), true).await.port()
}

async fn openapi_sources_keep_the_credential_on_the_base_origin(cx: Ctx) {
    let s = &cx.store;
    let p = s.create_partner("P", "p", audit()).await.unwrap();
    let org = s
        .create_organization(p.id, "A", "a", audit())
        .await
        .unwrap()
        .id;
    let ca = TestCa::new();
    let seen: Seen = Arc::default();
    let api_port = serve(&ca, &seen).await;
    let doc_port = serve(&ca, &seen).await; // another origin: another port
    let vault = Vault::from_setting(&Vault::generate_key().unwrap()).unwrap();
    let clock: Arc<dyn breeze_core::Clock> = Arc::new(cx.clock.clone());
    let sources = Sources::new(s.clone(), Some(vault), ca.egress(), clock.clone());
    let owner = Owner::Organization(s.org(org).tool_sources());
    let new = |slug: &str, doc_port: u16| NewSource {
        display_name: "Things API".into(),
        slug: Some(slug.into()),
        kind: SourceKind::OpenApi,
        url: format!("https://localhost:{api_port}/api"),
        document_url: Some(format!("https://localhost:{doc_port}/openapi.json")),
        credential: Credential::Bearer {
            token: "tok".into(),
        },
        offer_to_mcp: false,
    };

    // The document elsewhere: fetched without the credential.
    let elsewhere = sources
        .create(owner, new("elsewhere", doc_port), "t", audit())
        .await
        .unwrap();
    let found = sources
        .discover(owner, elsewhere.id, audit())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.tools, found.skipped), (2, 1));
    assert_eq!(found.warnings.len(), 1);
    assert!(found.warnings[0].contains("https://evil.example.net"));
    // The document on the API's origin: fetched with it.
    let same = sources
        .create(owner, new("same", api_port), "t", audit())
        .await
        .unwrap();
    sources
        .discover(owner, same.id, audit())
        .await
        .unwrap()
        .unwrap();
    {
        let seen = seen.lock().unwrap();
        let docs: Vec<(&str, Option<&str>)> = seen
            .iter()
            .filter(|(_, path, _)| path == "/openapi.json")
            .map(|(host, _, auth)| (host.as_str(), auth.as_deref()))
            .collect();
        let (doc_host, api_host) = (
            format!("localhost:{doc_port}"),
            format!("localhost:{api_port}"),
        );
        assert_eq!(
            docs,
            [
                (doc_host.as_str(), None),
                (api_host.as_str(), Some("Bearer tok"))
            ]
        );
    }
    let stored = s
        .org(org)
        .tool_sources()
        .tool_source(same.id)
        .await
        .unwrap();
    assert_eq!(stored.skipped[0]["path"], json!("/upload"));
    assert!(
        stored.skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );

    // The Tier 1 test call works before the tool is enabled; a Tier 3 one is refused unsent.
    let tool = sources
        .find_tool(org, "same__getThing")
        .await
        .unwrap()
        .unwrap();
    assert!(!tool.tool.enabled);
    let r = sources
        .test_call(org, &tool, json!({"id": "t1"}), audit())
        .await
        .unwrap();
    assert_eq!(r.status, Some(200));
    let purge = sources
        .find_tool(org, "same__purgeThings")
        .await
        .unwrap()
        .unwrap();
    let calls = seen.lock().unwrap().len();
    assert!(
        sources
            .test_call(org, &purge, json!({}), audit())
            .await
            .is_err()
    );
    assert_eq!(seen.lock().unwrap().len(), calls, "nothing was sent");

    // Enabled, the tool calls the API at the base URL with the credential.
    s.org(org)
        .tool_sources()
        .change_source_tool(
            same.id,
            "getThing",
            ToolChange {
                enabled: Some(true),
                tier: None,
            },
            audit(),
        )
        .await
        .unwrap();
    let tool = sources
        .find_tool(org, "same__getThing")
        .await
        .unwrap()
        .unwrap();
    let r = sources
        .call(org, &tool, json!({"id": "p1"}), audit())
        .await
        .unwrap();
    assert_eq!((r.status, r.is_error), (Some(200), false));
    assert_eq!(r.result["body"], json!({"name": "printer"}));
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        (last.1.as_str(), last.2.as_deref()),
        ("/api/things", Some("Bearer tok"))
    );

    // An unreachable API: discovery fails, the source keeps the reason.
    let dead = NewSource {
        url: "https://localhost:1/api".into(),
        document_url: Some("https://localhost:1/openapi.json".into()),
        ..new("dead", doc_port)
    };
    let dead = sources.create(owner, dead, "t", audit()).await.unwrap();
    let failed = sources.discover(owner, dead.id, audit()).await.unwrap();
    assert!(failed.is_err());
    let stored = s
        .org(org)
        .tool_sources()
        .tool_source(dead.id)
        .await
        .unwrap();
    assert_eq!(stored.state, SourceState::InError);
    assert!(stored.error.is_some());

    // Without a key nothing is created; bad input is refused before anything is stored.
    let keyless = Sources::new(s.clone(), None, ca.egress(), clock);
    assert!(matches!(
        keyless
            .create(owner, new("nokey", api_port), "t", audit())
            .await,
        Err(SourcesError::NoKey)
    ));
    for (slug, url) in [
        ("Bad_Slug", "https://localhost/api"),
        ("ok", "http://localhost/api"),
    ] {
        let bad = NewSource {
            url: url.into(),
            ..new(slug, api_port)
        };
        assert!(
            sources.create(owner, bad, "t", audit()).await.is_err(),
            "{slug} {url}"
        );
    }
}

on_both_backends!(openapi_sources_keep_the_credential_on_the_base_origin);
