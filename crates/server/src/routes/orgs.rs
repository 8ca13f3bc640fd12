//! Organizations, their sites and devices.

use axum::http::Method;
use axum::{
    Json, Router,
    extract::{Path, Query, State},
    routing::get,
};
use breeze_core::{
    Denied, Device, DeviceGroupId, DeviceId, DeviceStatus, Organization, OsFamily, SiteId,
};
use serde::{Deserialize, Serialize};

use crate::{
    ApiError, AppState,
    authz::{self, OrgScope},
    extract::Authenticated,
};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs", get(list_orgs))
        .route("/orgs/{org}", get(get_org))
        .route("/orgs/{org}/sites", get(list_sites))
        .route("/orgs/{org}/devices", get(list_devices))
        .route("/orgs/{org}/devices/{device}", get(get_device))
}

/// Organizations the caller can reach: a user's memberships, or an API key's one organization
/// (when it may read there, as `GET /orgs/{org}` decides).
async fn list_orgs(
    State(state): State<AppState>,
    who: Authenticated,
) -> Result<Json<serde_json::Value>, ApiError> {
    let orgs: Vec<Organization> = match &who {
        Authenticated::Person(u) => state
            .store
            .user_organizations(u.id)
            .await?
            .into_iter()
            .map(|(o, _)| o)
            .collect(),
        Authenticated::Credential(c) => {
            let read = authz::operation(&Method::GET, "/orgs/{org}")
                .map(|op| breeze_core::authz::authorize(c, op, state.scope_policy()));
            match read {
                Some(Ok(_)) => vec![state.store.org(c.org()).tenancy().organization().await?],
                Some(Err(Denied::MissingScope { scope, .. })) => {
                    return Err(ApiError::forbidden(format!(
                        "this API key lacks the {scope} scope"
                    )));
                }
                _ => Vec::new(),
            }
        }
    };
    Ok(Json(serde_json::json!({ "organizations": orgs })))
}

async fn get_org(scope: OrgScope) -> Result<Json<Organization>, ApiError> {
    Ok(Json(scope.org))
}

async fn list_sites(
    State(state): State<AppState>,
    scope: OrgScope,
) -> Result<Json<serde_json::Value>, ApiError> {
    let sites = scope.store(&state).tenancy().list_sites().await?;
    Ok(Json(serde_json::json!({ "sites": sites })))
}

/// Query parameters of the device listing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceQuery {
    status: Option<DeviceStatus>,
    os: Option<OsFamily>,
    site: Option<SiteId>,
    group: Option<DeviceGroupId>,
    search: Option<String>,
    tag: Option<String>,
    limit: Option<u32>,
    offset: Option<u32>,
}

/// Most devices one page may hold.
const MAX_DEVICE_PAGE: u32 = 500;

#[derive(Serialize)]
struct DevicePage {
    devices: Vec<Device>,
    total: u64,
    showing: usize,
    offset: u32,
}

async fn list_devices(
    State(state): State<AppState>,
    scope: OrgScope,

    query: Result<Query<DeviceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DevicePage>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_DEVICE_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_DEVICE_PAGE}"
        )));
    }
    let filter = breeze_store::DeviceFilter {
        status: q.status,
        os_family: q.os,
        site_id: q.site,
        group_id: q.group,
        search: q.search,
        tags: q.tag.into_iter().collect(),
    };
    let offset = q.offset.unwrap_or(0);
    let (devices, total) = scope
        .store(&state)
        .devices()
        .list_devices(&filter, limit, offset)
        .await?;
    Ok(Json(DevicePage {
        showing: devices.len(),
        devices,
        total,
        offset,
    }))
}

async fn get_device(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, device)): Path<(String, String)>,
) -> Result<Json<Device>, ApiError> {
    let not_found = || ApiError::not_found("Device not found or access denied");
    let id: DeviceId = device.parse().map_err(|_| not_found())?;
    scope
        .store(&state)
        .devices()
        .get_device(id)
        .await
        .map(Json)
        .map_err(|e| match e {
            breeze_store::StoreError::NotFound(_) => not_found(),
            other => other.into(),
        })
}
