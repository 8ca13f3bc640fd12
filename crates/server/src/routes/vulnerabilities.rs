//! Vulnerability exposure over REST, read from the exposure the store keeps current:
//! `GET /orgs/{org}/vulnerabilities` sums it up by severity and lists the advisories
//! affecting the organization with their device counts (`severity`, `offset`, `limit`),
//! `GET /orgs/{org}/vulnerabilities/{id}` lists the devices an advisory or CVE affects with
//! installed and fixed-in versions, and `GET /orgs/{org}/vulnerabilities/devices/{device}` a
//! device's advisories. The same reads as `get_vulnerability_exposure`.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    routing::get,
};
use breeze_core::DeviceId;
use breeze_store::SEVERITIES;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{ApiError, AppState, authz::OrgScope};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/vulnerabilities", get(summary))
        .route(
            "/orgs/{org}/vulnerabilities/devices/{device}",
            get(device_findings),
        )
        .route("/orgs/{org}/vulnerabilities/{id}", get(advisory_devices))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    severity: Option<String>,
    offset: Option<u32>,
    limit: Option<u32>,
}

async fn summary(
    State(state): State<AppState>,
    scope: OrgScope,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    if let Some(s) = &q.severity
        && !SEVERITIES.contains(&s.as_str())
    {
        return Err(ApiError::bad_request(format!(
            "severity: {s:?} is not one of {}",
            SEVERITIES.join(", ")
        )));
    }
    let v = scope.store(&state).vulnerabilities();
    let summary = v.summary().await?;
    let limit = q.limit.unwrap_or(50).clamp(1, 200);
    let offset = q.offset.unwrap_or(0);
    let advisories = v
        .exposed_advisories(q.severity.as_deref(), offset, limit)
        .await?;
    Ok(Json(json!({
        "summary": summary,
        "advisories": advisories,
        "nextOffset": (advisories.len() == limit as usize).then_some(offset + limit),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DevicesQuery {
    limit: Option<u32>,
}

async fn advisory_devices(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, id)): Path<(String, String)>,
    Query(q): Query<DevicesQuery>,
) -> Result<Json<Value>, ApiError> {
    let findings = scope
        .store(&state)
        .vulnerabilities()
        .findings_for(&id, q.limit.unwrap_or(200))
        .await?;
    Ok(Json(
        json!({ "id": id, "findings": findings_json(&findings) }),
    ))
}

async fn device_findings(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, device)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let device = Uuid::parse_str(&device).map_err(|_| ApiError::not_found("device not found"))?;
    let findings = scope
        .store(&state)
        .vulnerabilities()
        .device_findings(DeviceId(device))
        .await?;
    Ok(Json(
        json!({ "deviceId": device, "findings": findings_json(&findings) }),
    ))
}

fn findings_json(findings: &[breeze_store::ExposureFinding]) -> Vec<Value> {
    findings
        .iter()
        .map(|f| {
            let mut v = serde_json::to_value(f).unwrap_or_default();
            v["cves"] = json!(f.cve_list());
            v
        })
        .collect()
}
