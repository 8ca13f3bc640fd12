//! Typed identifiers: one newtype over a UUIDv7 per entity, so ids of different kinds never mix.
//!
//! UUIDv7 keeps ids roughly time-ordered, which keeps database indexes compact.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! id_type {
    ($($(#[$meta:meta])* $name:ident),+ $(,)?) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    )+};
}

id_type! {
    /// A partner: the MSP at the top of the hierarchy.
    PartnerId,
    /// An organization: one customer of a partner, and the unit of data isolation.
    OrgId,
    /// A site (a location) within an organization.
    SiteId,
    /// A group of devices within an organization.
    DeviceGroupId,
    /// A managed device.
    DeviceId,
    /// A human user.
    UserId,
    /// A role: a named set of permissions.
    RoleId,
    /// An API key.
    ApiKeyId,
    /// A dashboard login session.
    SessionId,
    /// An audit record.
    AuditId,
    /// An OAuth grant: one user's consent for one client in one organization.
    GrantId,
    /// A conversation with the AI assistant: one user's, in one organization.
    AiSessionId,
}
