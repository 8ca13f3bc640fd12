//! OpenAPI calls against a local REST server: the request is built from the plan (path,
//! query, header, JSON body), sent only to the base URL with the credential, and the answer
//! comes back with its status; a redirect fails the call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::{
    Json, Router,
    extract::{Path, Query},
    http::{HeaderMap, StatusCode},
    routing::{get, put},
};
use breeze_sources::{
    egress::EgressError,
    openapi::{self, CallError, Param, Plan},
    testing::TestCa,
};
use reqwest13::header::{AUTHORIZATION, HeaderValue};
use serde_json::{Value, json};
use url::Url;

fn plan(method: &str, path: &str, params: &[(&str, &str)], body: bool) -> Plan {
    Plan {
        method: method.into(),
        path: path.into(),
        params: params
            .iter()
            .map(|(n, l)| Param {
                name: (*n).into(),
                location: (*l).into(),
            })
            .collect(),
        body,
    }
}

#[tokio::test]
async fn calls_are_built_from_the_plan_and_statuses_come_back() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    let router = Router::new()
        .route(
            "/api/assets/{id}",
            get(
                move |Path(id): Path<String>,
                      Query(q): Query<Vec<(String, String)>>,
                      headers: HeaderMap| async move {
                    s2.lock().unwrap().push(format!(
                        "{id} {q:?} {:?} {:?}",
                        headers
                            .get("x-trace")
                            .map(|v| v.to_str().unwrap_or_default().to_owned()),
                        headers
                            .get("authorization")
                            .map(|v| v.to_str().unwrap_or_default().to_owned()),
                    ));
                    Json(json!({"id": id}))
                },
            ),
        )
        .route(
            "/api/assets/{id}/name",
            put(|Json(body): Json<Value>| async move { (StatusCode::CONFLICT, Json(body)) }),
        )
        .route(
            "/api/moved",
            get(|| async {
                (
                    StatusCode::MOVED_PERMANENTLY,
                    [("location", "https://evil.example/")],
                )
            }),
        );
    let ca = TestCa::new();
    let addr = ca.serve(router, true).await;
    let base = Url::parse(&format!("https://localhost:{}/api", addr.port())).unwrap();
    let egress = ca.egress();
    let auth = vec![(AUTHORIZATION, HeaderValue::from_static("Bearer t"))];
    let get_plan = plan(
        "GET",
        "/assets/{id}",
        &[("id", "path"), ("tag", "query"), ("X-Trace", "header")],
        false,
    );
    let r = openapi::call(
        &egress,
        &base,
        auth.clone(),
        &get_plan,
        &json!({"id": "a/../b", "tag": ["x", "y"], "X-Trace": "t1"}),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!((r.status, r.body), (200, json!({"id": "a/../b"})));
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [r#"a/../b [("tag", "x"), ("tag", "y")] Some("t1") Some("Bearer t")"#]
    );
    let put_plan = plan("PUT", "/assets/{id}/name", &[("id", "path")], true);
    let r = openapi::call(
        &egress,
        &base,
        auth.clone(),
        &put_plan,
        &json!({"id": 1, "body": {"name": "n"}}),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!((r.status, r.body), (409, json!({"name": "n"})));
    let moved = plan("GET", "/moved", &[], false);
    let err = openapi::call(
        &egress,
        &base,
        auth,
        &moved,
        &json!({}),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Egress(EgressError::Redirect { status: 301, .. })
        ),
        "{err}"
    );
}
