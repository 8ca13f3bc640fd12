//! Breeze's domain vocabulary, shared by every other crate.
//!
//! This crate does no IO. It defines the tenancy hierarchy (partner → organization → site →
//! device group → device), callers and the one permission model over them, API-key scopes, audit events and
//! the [`Clock`] through which all code reads the time.

pub mod advisory;
pub mod ai;
pub mod alert;
pub mod approval;
pub mod audit;
pub mod authz;
pub mod automation;
pub mod caller;
pub mod clock;
pub mod compliance;
pub mod config_policy;
pub mod deployment;
pub mod device;
pub mod grant;
pub mod group_filter;
pub mod ids;
pub mod maintenance;
pub mod money;
pub mod net;
pub mod patch;
pub mod pkgversion;
pub mod rbac;
pub mod report;
pub mod scope;
pub mod security;
pub mod tenancy;
pub mod ticket;
pub mod tier;
pub mod tool_source;
pub mod user;

pub use ai::{AiMessageRole, AiSessionStatus, AiToolStatus, ModelPrice, Pricing};
pub use alert::{
    AlertCondition, AlertStatus, ChannelKind, Comparison, EventCondition, Metric, Severity,
    TargetKind, is_event_name,
};
pub use approval::{ApprovalStatus, Decision};
pub use audit::{Actor, ActorType, AuditEvent, AuditRecord, AuditResult};
pub use authz::{Denied, Operation, ScopePolicy, Verdict};
pub use automation::{
    AutomationAction, AutomationTrigger, CronSchedule, DeviceOutcomeStatus, RunStatus,
};
pub use caller::{Caller, Credential};
pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use compliance::{ComplianceRule, ComplianceState, PolicyEnforcement, RuleResult, RuleSource};
pub use config_policy::{ConfigLevel, FeatureType, PolicyStatus};
pub use deployment::{DeploymentStatus, DeviceRunStatus};
pub use device::{CommandStatus, Device, DeviceStatus, OsFamily, TelemetryKind};
pub use grant::GrantStatus;
pub use group_filter::{
    DeviceFacts, FilterCondition, FilterField, FilterOp, GroupFilter, MatchMode,
};
pub use ids::{
    AiSessionId, ApiKeyId, AuditId, DeviceGroupId, DeviceId, GrantId, OrgId, PartnerId, RoleId,
    SessionId, SiteId, UserId,
};
pub use maintenance::{DayOfWeek, MaintenanceSchedule, Occurrence};
pub use money::{Currency, Money, MoneyError, Quantity, Totals};
pub use patch::{PackageStatus, PatchJobKind, PatchJobStatus, PatchPartStatus};
pub use rbac::{OrgAccess, Permission, PermissionDenied, PermissionSet, Role};
pub use report::{ReportFilters, ReportFormat, ReportKind, ReportStatus};
pub use scope::{Scope, ScopeSet};
pub use tenancy::{DeviceGroup, Organization, Partner, Site};
pub use ticket::{
    BillingPeriod, CatalogKind, ContractStatus, InvoiceLineKind, InvoiceStatus, TicketPriority,
    TicketStatus,
};
pub use tier::Tier;
pub use user::{User, UserKind};

/// A value that failed to parse from its stored or wire form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what}: {value:?} (expected {expected})")]
pub struct ParseError {
    /// What was being parsed, e.g. "scope".
    pub what: &'static str,
    /// The offending input.
    pub value: String,
    /// The accepted forms.
    pub expected: &'static str,
}

/// Declares a string-backed enum with `as_str`, `FromStr`, `TryFrom<String>`, `Display` and serde.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $what:literal { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name { $( $(#[$vmeta])* $variant ),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stored and wire form.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::ParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::ParseError {
                        what: $what,
                        value: s.to_owned(),
                        expected: concat!($($text, " "),+),
                    }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::ParseError;
            fn try_from(s: String) -> Result<Self, Self::Error> { s.parse() }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(::serde::de::Error::custom)
            }
        }

        // Stored as its text on either database, so a row field (or an `Option` of one) can
        // be the enum itself: an unknown text is a decoding error, not a silent default.
        #[cfg(feature = "sqlx")]
        impl<DB: ::sqlx::Database> ::sqlx::Type<DB> for $name
        where
            String: ::sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as ::sqlx::Type<DB>>::type_info()
            }
            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as ::sqlx::Type<DB>>::compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r, DB: ::sqlx::Database> ::sqlx::Decode<'r, DB> for $name
        where
            &'r str: ::sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as ::sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, ::sqlx::error::BoxDynError> {
                let s = <&'r str as ::sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(s.parse::<$name>()?)
            }
        }
    };
}
pub(crate) use string_enum;
