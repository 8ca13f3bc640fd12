//! Human users: partner-level (access to several organizations) or organization-level.

use serde::Serialize;

use crate::{OrgId, PartnerId, Timestamp, UserId};

/// Where a user lives in the hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UserKind {
    /// Belongs to the partner; reaches each organization it holds a role in.
    Partner,
    /// Belongs to exactly one organization.
    Organization { org_id: OrgId },
}

/// A person who signs in to Breeze. The password hash never leaves the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    pub id: UserId,
    pub partner_id: PartnerId,
    pub kind: UserKind,
    pub email: String,
    pub name: String,
    pub disabled: bool,
    pub created_at: Timestamp,
    pub last_login_at: Option<Timestamp>,
}
