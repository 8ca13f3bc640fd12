//! Fleet administration: enrollment keys (create — the secret is in this one response — list,
//! revoke), the script library (add, list, show, remove) and a device's command history.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    routing::get,
};
use breeze_auth::CreateEnrollmentKey;
use breeze_core::{AuditEvent, DeviceId, SiteId};
use breeze_store::{EnrollmentKeyRecord, NewScript, Script, ScriptParameter};
use chrono::Duration;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    ApiError, AppState,
    authz::OrgScope,
    extract::{Json as JsonBody, RequestId},
};

/// Body limit of a script's creation: a body at the store's limit, JSON-escaped (quotes,
/// backslashes and newlines double), with its metadata.
const SCRIPT_BODY_BYTES: usize = 4 * breeze_store::MAX_SCRIPT_BYTES;

pub(crate) fn router() -> Router<AppState> {
    let scripts = Router::new().route("/orgs/{org}/scripts", get(list_scripts).post(create_script));
    Router::new()
        .route(
            "/orgs/{org}/enrollment-keys",
            get(list_keys).post(create_key),
        )
        .route(
            "/orgs/{org}/enrollment-keys/{id}",
            axum::routing::delete(revoke_key),
        )
        .merge(crate::body_limit(scripts, SCRIPT_BODY_BYTES))
        .route(
            "/orgs/{org}/scripts/{id}",
            get(show_script).delete(delete_script),
        )
        .route("/orgs/{org}/devices/{id}/commands", get(device_commands))
        .route(
            "/orgs/{org}/devices/{id}/reenroll-token",
            axum::routing::post(reenroll_token),
        )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReenrollTokenRequest {
    /// Hours until the token expires (1 to 168, default 24).
    expires_in_hours: Option<i64>,
}

#[derive(Serialize)]
struct ReenrollTokenIssued {
    /// The one-time token. Shown here once; Breeze keeps only its hash.
    token: String,
    device_id: DeviceId,
    expires_at: breeze_core::Timestamp,
}

/// Issues a one-time re-enroll token for a device with an agent: `breeze-agent enroll
/// --reenroll-token` with any enrollment key of the organization then re-enrolls that device
/// itself (an enrollment key alone never does).
async fn reenroll_token(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<ReenrollTokenRequest>,
) -> Result<(StatusCode, Json<ReenrollTokenIssued>), ApiError> {
    let device = Uuid::parse_str(&id)
        .map(DeviceId)
        .map_err(|_| ApiError::not_found("device not found"))?;
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "device.reenroll_token.issue",
        "device",
    )
    .request(request_id);
    let (token, expires_at) = state
        .auth
        .issue_reenroll_token(
            scope.org.id,
            device,
            req.expires_in_hours
                .unwrap_or(breeze_auth::REENROLL_TOKEN_HOURS),
            audit,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ReenrollTokenIssued {
            token: token.expose().to_owned(),
            device_id: device,
            expires_at,
        }),
    ))
}

/// Longest life of an enrollment key (30 days); default 24 hours.
const MAX_KEY_HOURS: i64 = 24 * 30;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    site_id: SiteId,
    name: String,
    max_uses: Option<u32>,
    /// Hours until the key expires (1 to 720, default 24).
    expires_in_hours: Option<i64>,
}

#[derive(Serialize)]
struct CreatedKey {
    /// The secret. Shown here once; Breeze keeps only its hash.
    key: String,
    #[serde(flatten)]
    record: EnrollmentKeyRecord,
}

async fn create_key(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,

    JsonBody(req): JsonBody<CreateKey>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    let hours = req.expires_in_hours.unwrap_or(24);
    if !(1..=MAX_KEY_HOURS).contains(&hours) {
        return Err(ApiError::bad_request(format!(
            "expires_in_hours must be between 1 and {MAX_KEY_HOURS}"
        )));
    }
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "enrollment_key.create",
        "enrollment_key",
    )
    .request(request_id);
    let (secret, record) = state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: scope.org.id,
                site_id: req.site_id,
                name: req.name,
                max_uses: req.max_uses,
                expires_at: state.clock.now() + Duration::hours(hours),
                created_by: scope.caller.actor().to_string(),
            },
            audit,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            key: secret.expose().to_owned(),
            record,
        }),
    ))
}

async fn list_keys(
    State(state): State<AppState>,
    scope: OrgScope,
) -> Result<Json<Value>, ApiError> {
    let keys = scope.store(&state).agents().list_enrollment_keys().await?;
    Ok(Json(json!({ "enrollment_keys": keys })))
}

async fn revoke_key(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<EnrollmentKeyRecord>, ApiError> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::not_found("enrollment key not found"))?;
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "enrollment_key.revoke",
        "enrollment_key",
    )
    .request(request_id);
    Ok(Json(
        scope
            .store(&state)
            .agents()
            .revoke_enrollment_key(id, audit)
            .await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateScript {
    name: String,
    #[serde(default)]
    description: String,
    language: String,
    category: Option<String>,
    body: String,
    #[serde(default)]
    parameters: Vec<ScriptParameter>,
}

async fn create_script(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,

    JsonBody(req): JsonBody<CreateScript>,
) -> Result<(StatusCode, Json<Script>), ApiError> {
    let audit =
        AuditEvent::new(scope.caller.actor(), "script.create", "script").request(request_id);
    let script = scope
        .store(&state)
        .scripts()
        .create_script(
            NewScript {
                name: req.name,
                description: req.description,
                language: req.language,
                category: req.category.unwrap_or_else(|| "general".into()),
                body: req.body,
                parameters: req.parameters,
                created_by: scope.caller.actor().to_string(),
            },
            audit,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(script)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptQuery {
    category: Option<String>,
    search: Option<String>,
}

async fn list_scripts(
    State(state): State<AppState>,
    scope: OrgScope,

    Query(q): Query<ScriptQuery>,
) -> Result<Json<Value>, ApiError> {
    let scripts = scope
        .store(&state)
        .scripts()
        .list_scripts(q.category.as_deref(), q.search.as_deref())
        .await?;
    Ok(Json(json!({ "scripts": scripts })))
}

async fn show_script(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Script>, ApiError> {
    Ok(Json(scope.store(&state).scripts().find_script(&id).await?))
}

async fn delete_script(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let store = scope.store(&state);
    let script = store.scripts().find_script(&id).await?;
    let audit =
        AuditEvent::new(scope.caller.actor(), "script.delete", "script").request(request_id);
    store.scripts().delete_script(script.id, audit).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn device_commands(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let device: DeviceId = id
        .parse()
        .map_err(|_| ApiError::not_found("device not found"))?;
    let commands = scope
        .store(&state)
        .commands()
        .list_commands(device, 100)
        .await?;
    Ok(Json(json!({ "commands": commands })))
}
