//! API keys of an organization: create (the secret is in this one response), list, revoke.
//! Only a signed-in user holding `apikeys.manage` may do any of it.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::{delete, get},
};
use breeze_auth::CreateApiKey;
use breeze_core::{ApiKeyId, AuditEvent, ScopeSet, Timestamp};
use breeze_store::ApiKeyRecord;
use serde::{Deserialize, Serialize};

use crate::{
    ApiError, AppState,
    authz::OrgScope,
    extract::{Json as JsonBody, RequestId},
};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/api-keys", get(list).post(create))
        .route("/orgs/{org}/api-keys/{key}", delete(revoke))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    name: String,
    scopes: ScopeSet,
    expires_at: Option<Timestamp>,
}

#[derive(Serialize)]
struct Created {
    /// The secret. Shown here once; Breeze keeps only its hash.
    key: String,
    #[serde(flatten)]
    record: ApiKeyRecord,
}

async fn create(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,

    JsonBody(req): JsonBody<CreateRequest>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let audit =
        AuditEvent::new(scope.caller.actor(), "api_key.create", "api_key").request(request_id);
    let (secret, record) = state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: scope.org.id,
                user_id: scope.caller.user(),
                name: req.name,
                scopes: req.scopes,
                expires_at: req.expires_at,
            },
            audit,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(Created {
            key: secret.expose().to_owned(),
            record,
        }),
    ))
}

async fn list(
    State(state): State<AppState>,
    scope: OrgScope,
) -> Result<Json<serde_json::Value>, ApiError> {
    let keys = scope.store(&state).api_keys().list_api_keys().await?;
    Ok(Json(serde_json::json!({ "api_keys": keys })))
}

async fn revoke(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, key)): Path<(String, String)>,
) -> Result<Json<ApiKeyRecord>, ApiError> {
    let id: ApiKeyId = key
        .parse()
        .map_err(|_| ApiError::not_found("API key not found"))?;
    let audit =
        AuditEvent::new(scope.caller.actor(), "api_key.revoke", "api_key").request(request_id);
    Ok(Json(
        scope
            .store(&state)
            .api_keys()
            .revoke_api_key(id, audit)
            .await?,
    ))
}
