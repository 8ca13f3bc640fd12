//! OAuth grants: one user's consent for one client in one organization.

use crate::string_enum;

string_enum! {
    /// Whether a grant's tokens may still be used.
    pub enum GrantStatus: "grant status" {
        Active = "active",
        /// By the user, an administrator, or a reported approval request; for good.
        Revoked = "revoked",
    }
}
