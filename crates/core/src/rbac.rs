//! Role-based access control: permissions, roles, and the one check everyone calls.
//!
//! A user holds one role per organization it can reach; an API key acts with the permissions
//! its creating user holds in the key's organization. [`check`] is the single place where a
//! permission is decided.

use serde::{Deserialize, Serialize};

use crate::{OrgId, PartnerId, RoleId, UserId, string_enum};

string_enum! {
    /// One thing a role may allow.
    pub enum Permission: "permission" {
        DevicesRead = "devices.read",
        DevicesWrite = "devices.write",
        DevicesExecute = "devices.execute",
        ScriptsRead = "scripts.read",
        ScriptsWrite = "scripts.write",
        ScriptsExecute = "scripts.execute",
        AlertsRead = "alerts.read",
        AlertsManage = "alerts.manage",
        FilesRead = "files.read",
        FilesWrite = "files.write",
        ServicesManage = "services.manage",
        AuditRead = "audit.read",
        SettingsManage = "settings.manage",
        UsersManage = "users.manage",
        ApikeysManage = "apikeys.manage",
        TicketsRead = "tickets.read",
        TicketsWrite = "tickets.write",
        /// Moving tickets between organizations, and editing or deleting others' comments.
        TicketsManage = "tickets.manage",
        InvoicesRead = "invoices.read",
        InvoicesWrite = "invoices.write",
        /// Issuing and voiding invoices, recording and voiding payments.
        InvoicesSend = "invoices.send",
        /// Reading the partner's catalog (items, bundles, an organization's prices).
        CatalogRead = "catalog.read",
        /// Creating, changing and archiving catalog items; setting price overrides.
        CatalogWrite = "catalog.write",
        ContractsRead = "contracts.read",
        /// Drafting contracts and their lines.
        ContractsWrite = "contracts.write",
        /// Activating, pausing, resuming and cancelling contracts.
        ContractsManage = "contracts.manage",
        /// Drafting quotes: their blocks and lines, declining one.
        QuotesWrite = "quotes.write",
        /// Sending a quote to the customer.
        QuotesSend = "quotes.send",
        /// Calling Tier 1 tools of tool sources (external MCP servers and APIs).
        ExternalToolsRead = "external_tools.read",
        /// Calling Tier 2 and 3 tools of tool sources.
        ExternalToolsWrite = "external_tools.write",
        /// Creating, changing and re-discovering what serves every organization of the
        /// partner (partner-wide tool sources). Judged on the person's partner-wide role.
        PartnerPoliciesManage = "partner_policies.manage",
    }
}

impl Permission {
    const fn bit(self) -> u64 {
        1 << (self as u32)
    }

    /// Whether only a person exercises this permission, never a credential acting for one:
    /// managing API keys, users, settings and partner-wide policies (see [`crate::authz`]).
    pub const fn is_personal(self) -> bool {
        matches!(
            self,
            Permission::ApikeysManage
                | Permission::UsersManage
                | Permission::SettingsManage
                | Permission::PartnerPoliciesManage
        )
    }
}

/// A set of permissions, stored as a list of their names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "Vec<Permission>", into = "Vec<Permission>")]
pub struct PermissionSet(u64);

// A set is one bit per permission.
const _: () = assert!(Permission::ALL.len() <= u64::BITS as usize);

impl PermissionSet {
    /// No permissions.
    pub const EMPTY: Self = Self(0);

    /// Every permission there is.
    pub fn all() -> Self {
        Self::from_iter(Permission::ALL.iter().copied())
    }

    /// Whether `p` is in the set.
    pub const fn contains(self, p: Permission) -> bool {
        self.0 & p.bit() != 0
    }

    /// The union of two sets.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The permissions in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL
            .iter()
            .copied()
            .filter(move |p| self.contains(*p))
    }
}

impl FromIterator<Permission> for PermissionSet {
    fn from_iter<I: IntoIterator<Item = Permission>>(iter: I) -> Self {
        Self(iter.into_iter().fold(0, |acc, p| acc | p.bit()))
    }
}

impl From<Vec<Permission>> for PermissionSet {
    fn from(v: Vec<Permission>) -> Self {
        v.into_iter().collect()
    }
}

impl From<PermissionSet> for Vec<Permission> {
    fn from(s: PermissionSet) -> Self {
        s.iter().collect()
    }
}

/// A permission the acting user lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("permission denied: requires {0}")]
pub struct PermissionDenied(pub Permission);

/// The permission check: `Ok` when `granted` holds `needed`.
pub fn check(granted: PermissionSet, needed: Permission) -> Result<(), PermissionDenied> {
    if granted.contains(needed) {
        Ok(())
    } else {
        Err(PermissionDenied(needed))
    }
}

/// A named set of permissions, owned by a partner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Role {
    pub id: RoleId,
    pub partner_id: PartnerId,
    pub name: String,
    pub description: String,
    pub permissions: PermissionSet,
    /// Created by Breeze for every partner; cannot be edited.
    pub builtin: bool,
}

/// The roles every partner starts with: name, description, permissions.
pub fn builtin_roles() -> [(&'static str, &'static str, PermissionSet); 3] {
    use Permission::*;
    [
        (
            "Administrator",
            "Full control of the organization",
            PermissionSet::all(),
        ),
        (
            "Technician",
            "Operates devices, scripts, alerts, files and tickets; no billing, settings, users or keys",
            PermissionSet::from_iter([
                DevicesRead,
                DevicesWrite,
                DevicesExecute,
                ScriptsRead,
                ScriptsExecute,
                AlertsRead,
                AlertsManage,
                FilesRead,
                FilesWrite,
                ServicesManage,
                AuditRead,
                TicketsRead,
                TicketsWrite,
                ExternalToolsRead,
                ExternalToolsWrite,
            ]),
        ),
        (
            "Read Only",
            "Sees devices, scripts, alerts, files, tickets and the audit log; changes nothing",
            PermissionSet::from_iter([
                DevicesRead,
                ScriptsRead,
                AlertsRead,
                FilesRead,
                AuditRead,
                TicketsRead,
                ExternalToolsRead,
            ]),
        ),
    ]
}

/// What one user may do in one organization: the result of resolving their role there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OrgAccess {
    pub user_id: UserId,
    pub org_id: OrgId,
    pub role_id: RoleId,
    pub permissions: PermissionSet,
}

impl OrgAccess {
    /// [`check`] against this access.
    pub fn require(&self, needed: Permission) -> Result<(), PermissionDenied> {
        check(self.permissions, needed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_allows_only_granted_permissions() {
        let set = PermissionSet::from_iter([Permission::DevicesRead, Permission::AuditRead]);
        assert!(check(set, Permission::DevicesRead).is_ok());
        assert_eq!(
            check(set, Permission::ScriptsExecute),
            Err(PermissionDenied(Permission::ScriptsExecute))
        );
        assert_eq!(
            PermissionDenied(Permission::ScriptsExecute).to_string(),
            "permission denied: requires scripts.execute"
        );
        assert!(check(PermissionSet::EMPTY, Permission::DevicesRead).is_err());
    }

    #[test]
    fn sets_round_trip_through_names() {
        let set = PermissionSet::from_iter([Permission::FilesWrite, Permission::DevicesRead]);
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, r#"["devices.read","files.write"]"#);
        assert_eq!(serde_json::from_str::<PermissionSet>(&json).unwrap(), set);
        assert!(serde_json::from_str::<PermissionSet>(r#"["devices.fly"]"#).is_err());
        assert_eq!(PermissionSet::all().iter().count(), Permission::ALL.len());
    }

    #[test]
    fn read_only_role_cannot_execute() {
        let [_, _, (_, _, read_only)] = builtin_roles();
        assert!(read_only.iter().all(|p| p.as_str().ends_with(".read")));
    }
}
