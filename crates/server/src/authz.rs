//! REST authorization: from a principal and an organization reference to a scoped handle.
//!
//! An organization the principal cannot reach answers exactly like one that does not exist.
//! Permissions are decided by `breeze_core::rbac::check` (through `OrgAccess::require`) on the
//! acting user's role in that organization; API keys additionally need the scope for the
//! operation, and cannot manage credentials at all.

use breeze_core::{OrgAccess, Organization, Permission, Principal, Scope};
use breeze_store::{OrgStore, StoreError};

use crate::{ApiError, AppState};

/// A principal's verified reach into one organization.
pub(crate) struct OrgScope {
    pub(crate) org: Organization,
    pub(crate) access: OrgAccess,
}

impl OrgScope {
    /// The store confined to this organization.
    pub(crate) fn store<'a>(&self, state: &'a AppState) -> OrgStore<'a> {
        state.store.org(self.org.id)
    }
}

/// The scope an API key needs for an operation that requires `p`; `None` when keys may not do
/// it at all.
fn scope_for(p: Permission) -> Option<Scope> {
    use Permission::*;
    match p {
        DevicesRead | ScriptsRead | AlertsRead | FilesRead | AuditRead => Some(Scope::AiRead),
        ApikeysManage | UsersManage | SettingsManage => None,
        DevicesWrite | DevicesExecute | ScriptsWrite | ScriptsExecute | AlertsManage
        | FilesWrite | ServicesManage => None,
    }
}

fn org_not_found() -> ApiError {
    ApiError::not_found("organization not found")
}

/// Resolves `org_ref` (id or slug) for `principal` and checks it holds `needed` there.
pub(crate) async fn org_scope(
    state: &AppState,
    principal: &Principal,
    org_ref: &str,
    needed: Permission,
) -> Result<OrgScope, ApiError> {
    let org = match state.store.find_organization(org_ref).await {
        Ok(org) => org,
        Err(StoreError::NotFound(_)) => return Err(org_not_found()),
        Err(e) => return Err(e.into()),
    };
    if let Principal::ApiKey(key) = principal {
        if key.org_id != org.id {
            return Err(org_not_found());
        }
        match scope_for(needed) {
            Some(scope) if key.scopes.grants(scope) => {}
            Some(scope) => {
                return Err(ApiError::forbidden(format!(
                    "this API key lacks the {scope} scope"
                )));
            }
            None => {
                return Err(ApiError::forbidden(format!(
                    "API keys cannot do this ({needed}); sign in as a user"
                )));
            }
        }
    }
    let access = state
        .store
        .org_access(principal.user_id(), org.id)
        .await?
        .ok_or_else(org_not_found)?;
    access
        .require(needed)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    Ok(OrgScope { org, access })
}
