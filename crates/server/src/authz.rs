//! REST and dashboard authorization: from who authenticated and an organization reference to
//! a [`Caller`] in that organization, judged by the one permission model
//! ([`breeze_core::authz::authorize`], the guard's too).
//!
//! Every route under `/orgs/{org}` declares the [`Operation`] it performs in [`ORG_ROUTES`];
//! the [`org_routes`] layer authorizes the request against it before the handler or its body
//! extractor runs, and hands the handler an [`OrgScope`]. A route that declares nothing is
//! refused (fail closed), so a new route cannot skip the check. Dashboard pages call
//! [`org_scope`] with their operation. An organization the caller cannot reach answers exactly
//! like one that does not exist. A Tier 3 operation by a credential needs a person's approval,
//! which only the tool pipeline offers: REST refuses it and names the way.

use std::collections::HashMap;

use axum::{
    extract::{FromRequestParts, MatchedPath, Path, Request, State},
    http::{Method, request::Parts},
    middleware::Next,
    response::{IntoResponse, Response},
};
use breeze_core::{Caller, Denied, Operation, Organization, Permission, Verdict, authz};
use breeze_store::{OrgStore, StoreError};

use crate::{ApiError, AppState, extract::Authenticated};

/// A caller's verified reach into one organization.
#[derive(Debug, Clone)]
pub(crate) struct OrgScope {
    pub(crate) org: Organization,
    pub(crate) caller: Caller,
}

impl OrgScope {
    /// The store confined to this organization.
    pub(crate) fn store<'a>(&self, state: &'a AppState) -> OrgStore<'a> {
        state.store.org(self.org.id)
    }
}

/// Handed over by [`org_routes`]; a handler outside that layer gets a 500, never an unchecked
/// scope.
impl<S: Send + Sync> FromRequestParts<S> for OrgScope {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<OrgScope>().cloned().ok_or_else(|| {
            ApiError::internal("a handler asked for an OrgScope its route never authorized")
        })
    }
}

use Permission::*;

/// Every route under `/api/v1/orgs/{org}`: method, path as routed, and the operation it
/// performs. Reads are Tier 1; changes Tier 2; minting a credential for devices (an enrollment
/// key, a device's re-enroll token) is Tier 3, which a credential cannot do over REST.
pub const ORG_ROUTES: &[(Method, &str, Operation)] = &[
    (Method::GET, "/orgs/{org}", Operation::read(DevicesRead)),
    (
        Method::GET,
        "/orgs/{org}/sites",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/devices",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/devices/{device}",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/devices/{id}/commands",
        Operation::read(DevicesRead),
    ),
    (
        Method::POST,
        "/orgs/{org}/devices/{id}/reenroll-token",
        Operation::execute(DevicesWrite),
    ),
    (
        Method::GET,
        "/orgs/{org}/live-queries",
        Operation::read(DevicesRead),
    ),
    (
        Method::POST,
        "/orgs/{org}/live-queries",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/live-queries/{id}",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/vulnerabilities",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/vulnerabilities/{id}",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/vulnerabilities/devices/{device}",
        Operation::read(DevicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/api-keys",
        Operation::read(ApikeysManage),
    ),
    (
        Method::POST,
        "/orgs/{org}/api-keys",
        Operation::write(ApikeysManage),
    ),
    (
        Method::DELETE,
        "/orgs/{org}/api-keys/{key}",
        Operation::write(ApikeysManage),
    ),
    (Method::GET, "/orgs/{org}/audit", Operation::read(AuditRead)),
    (
        Method::GET,
        "/orgs/{org}/reports/{run}/download",
        Operation::read(AuditRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/enrollment-keys",
        Operation::read(DevicesWrite),
    ),
    (
        Method::POST,
        "/orgs/{org}/enrollment-keys",
        Operation::execute(DevicesWrite),
    ),
    (
        Method::DELETE,
        "/orgs/{org}/enrollment-keys/{id}",
        Operation::write(DevicesWrite),
    ),
    (
        Method::GET,
        "/orgs/{org}/scripts",
        Operation::read(ScriptsRead),
    ),
    (
        Method::POST,
        "/orgs/{org}/scripts",
        Operation::write(ScriptsWrite),
    ),
    (
        Method::GET,
        "/orgs/{org}/scripts/{id}",
        Operation::read(ScriptsRead),
    ),
    (
        Method::DELETE,
        "/orgs/{org}/scripts/{id}",
        Operation::write(ScriptsWrite),
    ),
    (
        Method::GET,
        "/orgs/{org}/protected-paths",
        Operation::read(DevicesRead),
    ),
    (
        Method::PUT,
        "/orgs/{org}/protected-paths",
        Operation::write(SettingsManage),
    ),
    (
        Method::GET,
        "/orgs/{org}/tickets",
        Operation::read(TicketsRead),
    ),
    (
        Method::POST,
        "/orgs/{org}/tickets",
        Operation::write(TicketsWrite),
    ),
    (
        Method::GET,
        "/orgs/{org}/tickets/{ticket}",
        Operation::read(TicketsRead),
    ),
    (
        Method::POST,
        "/orgs/{org}/tickets/{ticket}/comments",
        Operation::write(TicketsWrite),
    ),
    (
        Method::POST,
        "/orgs/{org}/tickets/{ticket}/status",
        Operation::write(TicketsWrite),
    ),
    // Financial data is Tier 2 even to read, as the billing tools are.
    (
        Method::GET,
        "/orgs/{org}/invoices",
        Operation::write(InvoicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/invoices/{invoice}",
        Operation::write(InvoicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/invoices/{invoice}/pdf",
        Operation::write(InvoicesRead),
    ),
    (
        Method::GET,
        "/orgs/{org}/quotes/{quote}/pdf",
        Operation::write(QuotesWrite),
    ), // Tool sources: reading needs the external-tools read grant, changing the write grant;
    // a partner-wide source also needs `partner_policies.manage` (`partner_wide`, in the handler).
    (
        Method::GET,
        "/orgs/{org}/tool-sources",
        Operation::read(ExternalToolsRead),
    ),
    (
        Method::POST,
        "/orgs/{org}/tool-sources",
        Operation::write(ExternalToolsWrite),
    ),
    (
        Method::GET,
        "/orgs/{org}/tool-sources/{source}",
        Operation::read(ExternalToolsRead),
    ),
    (
        Method::PATCH,
        "/orgs/{org}/tool-sources/{source}",
        Operation::write(ExternalToolsWrite),
    ),
    (
        Method::DELETE,
        "/orgs/{org}/tool-sources/{source}",
        Operation::write(ExternalToolsWrite),
    ),
    (
        Method::POST,
        "/orgs/{org}/tool-sources/{source}/discover",
        Operation::write(ExternalToolsWrite),
    ),
    (
        Method::GET,
        "/orgs/{org}/tool-sources/{source}/tools",
        Operation::read(ExternalToolsRead),
    ),
    (
        Method::POST,
        "/orgs/{org}/tool-sources/{source}/enable-reads",
        Operation::write(ExternalToolsWrite),
    ),
    (
        Method::POST,
        "/orgs/{org}/tool-sources/{source}/disable-all",
        Operation::write(ExternalToolsWrite),
    ),
    (
        Method::PATCH,
        "/orgs/{org}/tool-sources/{source}/tools/{tool}",
        Operation::write(ExternalToolsWrite),
    ),
    (
        Method::POST,
        "/orgs/{org}/tool-sources/{source}/tools/{tool}/test",
        Operation::write(ExternalToolsWrite),
    ),
];

/// The operation a routed request performs; `None` when its route declares none.
pub(crate) fn operation(method: &Method, path: &str) -> Option<Operation> {
    // HEAD is routed to GET handlers.
    let method = if method == Method::HEAD {
        &Method::GET
    } else {
        method
    };
    ORG_ROUTES
        .iter()
        .find(|(m, p, _)| m == method && *p == path)
        .map(|(_, _, op)| *op)
}

/// The layer in front of every route: for one under `/orgs/{org}`, authorizes the request
/// against its declared operation and hands the handler the [`OrgScope`] (and who
/// authenticated, so it is not authenticated twice).
pub(crate) async fn org_routes(
    State(state): State<AppState>,
    matched: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let Some(path) = matched
        .as_ref()
        .map(|m| m.as_str().strip_prefix("/api/v1").unwrap_or(m.as_str()))
        .filter(|p| p.starts_with("/orgs/{org}"))
    else {
        return next.run(req).await;
    };
    let (mut parts, body) = req.into_parts();
    let Some(op) = operation(&parts.method, path) else {
        return ApiError::internal(format!(
            "{} {path} declares no operation in authz::ORG_ROUTES; refused",
            parts.method
        ))
        .into_response();
    };
    let authorized = async {
        let who = Authenticated::from_request_parts(&mut parts, &state).await?;
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(&mut parts, &state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        let org_ref = params.get("org").map_or("", String::as_str);
        let scope = org_scope(&state, &who, org_ref, op).await?;
        Ok::<_, ApiError>((who, scope))
    };
    match authorized.await {
        Ok((who, scope)) => {
            parts.extensions.insert(who);
            parts.extensions.insert(scope);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(e) => e.into_response(),
    }
}

fn org_not_found() -> ApiError {
    ApiError::not_found("organization not found")
}

/// Resolves `org_ref` (id or slug) for `who` and decides `op` there.
pub(crate) async fn org_scope(
    state: &AppState,
    who: &Authenticated,
    org_ref: &str,
    op: Operation,
) -> Result<OrgScope, ApiError> {
    let org = match state.store.find_organization(org_ref).await {
        Ok(org) => org,
        Err(StoreError::NotFound(_)) => return Err(org_not_found()),
        Err(e) => return Err(e.into()),
    };
    let caller = match who {
        Authenticated::Credential(c) if c.org() == org.id => c.clone(),
        Authenticated::Credential(_) => return Err(org_not_found()),
        Authenticated::Person(user) => {
            let access = state
                .store
                .org_access(user.id, org.id)
                .await?
                .ok_or_else(org_not_found)?;
            Caller::dashboard_session(user.id, org.id, Some(access.permissions))
        }
    };
    // A user without a role here has no reach into it at all.
    if caller.permissions().is_none() {
        return Err(org_not_found());
    }
    match authz::authorize(&caller, op, state.scope_policy()) {
        Ok(Verdict::Allowed) => Ok(OrgScope { org, caller }),
        Ok(Verdict::NeedsApproval) => Err(ApiError::forbidden(format!(
            "this is a Tier 3 operation ({}): a credential needs a person's approval for it, which only Breeze's MCP tools ask for; sign in as a user, or call the tool",
            op.permission
        ))),
        Err(Denied::PersonOnly(p)) => Err(ApiError::forbidden(format!(
            "API keys cannot do this ({p}); sign in as a user"
        ))),
        Err(Denied::MissingScope { scope, .. }) => Err(ApiError::forbidden(format!(
            "this API key lacks the {scope} scope"
        ))),
        Err(denied) => Err(ApiError::forbidden(format!("permission denied: {denied}"))),
    }
}

/// The partner whose partner-wide sources and policies the caller may manage from `scope`'s
/// organization: only a person (never a credential), judged on their partner-wide role (a
/// role in one organization never reaches what serves all of them) by the one permission
/// model, for `partner_policies.manage`. Refused with 403 otherwise.
pub(crate) async fn partner_wide(
    state: &AppState,
    scope: &OrgScope,
) -> Result<breeze_core::PartnerId, ApiError> {
    let refused = || {
        ApiError::forbidden(
            "partner-wide sources serve every organization: managing one needs the \
             partner_policies.manage permission in a partner-wide role, as a person",
        )
    };
    if !scope.caller.is_person() {
        return Err(refused());
    }
    let permissions = state
        .store
        .partner_permissions(scope.caller.user())
        .await?
        .ok_or_else(refused)?;
    let caller = Caller::dashboard_session(scope.caller.user(), scope.org.id, Some(permissions));
    match authz::authorize(
        &caller,
        Operation::write(PartnerPoliciesManage),
        state.scope_policy(),
    ) {
        Ok(Verdict::Allowed) => Ok(scope.org.partner_id),
        _ => Err(refused()),
    }
}
