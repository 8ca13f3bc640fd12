//! An organization's protected paths: `GET` shows the built-in list and the organization's
//! additions (anyone who can see its devices may know what tools cannot reach); `PUT`
//! replaces the additions (a signed-in user holding `settings.manage`; audited with the list
//! before and after). The built-in list is code: no request can remove from it.

use axum::{Json, Router, extract::State, routing::get};
use breeze_agent_proto::paths::BUILTIN_PROTECTED;
use breeze_core::AuditEvent;
use serde::{Deserialize, Serialize};

use crate::{
    ApiError, AppState,
    authz::OrgScope,
    extract::{Json as JsonBody, RequestId},
};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/protected-paths", get(show).put(replace))
}

#[derive(Serialize)]
struct ProtectedPaths {
    /// Always protected on every device, whatever the organization says.
    builtin: &'static [&'static str],
    /// The organization's additions, carried with every file and disk command.
    additions: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Replace {
    additions: Vec<String>,
}

async fn show(
    State(state): State<AppState>,
    scope: OrgScope,
) -> Result<Json<ProtectedPaths>, ApiError> {
    Ok(Json(ProtectedPaths {
        builtin: BUILTIN_PROTECTED,
        additions: scope.store(&state).commands().protected_paths().await?,
    }))
}

async fn replace(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,

    JsonBody(req): JsonBody<Replace>,
) -> Result<Json<ProtectedPaths>, ApiError> {
    let audit = AuditEvent::new(
        scope.caller.actor(),
        "org.protected_paths.set",
        "organization",
    )
    .request(request_id);
    let additions = scope
        .store(&state)
        .commands()
        .set_protected_paths(&req.additions, audit.resource(scope.org.id))
        .await?;
    Ok(Json(ProtectedPaths {
        builtin: BUILTIN_PROTECTED,
        additions,
    }))
}
