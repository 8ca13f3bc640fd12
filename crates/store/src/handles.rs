//! The organization's store, narrowed by domain.
//!
//! [`OrgStore`] confines a caller to one organization; the handles here confine it further, to
//! one domain of that organization: [`OrgAlerts`] reads and changes alerts and alert rules and
//! nothing else, [`OrgDevices`] the device records and listing, and so on. `OrgStore` itself
//! has no queries of its own, only the accessors that hand these out (`org.alerts()`,
//! `org.devices()`, …), so a function's parameters say what it can touch: a tool handler given
//! `(OrgAlerts, OrgAudit)` cannot delete a policy.
//!
//! Each handle is the same pair as `OrgStore` (the store and the organization), so narrowing
//! is free and every query still runs in the organization's row-security scope. Handles are
//! per domain, not per table: a domain's writes and their audit records commit together
//! inside the handle (see `stamp_once`), which is why [`OrgAudit`] is needed only to append
//! records of one's own or to read the log.

use breeze_core::OrgId;

use crate::{OrgStore, Store};

/// What the store's statements need to run in one organization's scope: implemented by
/// [`OrgStore`] and every narrowed handle, so a transaction or query can begin from any of
/// them.
pub(crate) trait Scoped {
    fn store(&self) -> &Store;
    fn org(&self) -> OrgId;
}

impl Scoped for OrgStore<'_> {
    fn store(&self) -> &Store {
        self.store
    }
    fn org(&self) -> OrgId {
        self.org
    }
}

macro_rules! narrow {
    ($( $(#[$doc:meta])* $name:ident => $accessor:ident; )*) => {
        impl<'a> OrgStore<'a> {$(
            #[doc = concat!("This organization's store narrowed to [`", stringify!($name), "`].")]
            pub fn $accessor(self) -> $name<'a> {
                $name { store: self.store, org: self.org }
            }
        )*}

        $(
            $(#[$doc])*
            #[derive(Clone, Copy)]
            pub struct $name<'a> {
                pub(crate) store: &'a Store,
                pub(crate) org: OrgId,
            }

            impl<'a> $name<'a> {
                /// The organization this handle is bound to.
                pub fn org_id(&self) -> OrgId {
                    self.org
                }

                /// The whole organization's store, for a domain's query that has to read or
                /// write beside another domain in one transaction.
                #[allow(dead_code)]
                pub(crate) fn whole(&self) -> OrgStore<'a> {
                    OrgStore { store: self.store, org: self.org }
                }
            }

            impl Scoped for $name<'_> {
                fn store(&self) -> &Store {
                    self.store
                }
                fn org(&self) -> OrgId {
                    self.org
                }
            }

            impl std::fmt::Debug for $name<'_> {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.debug_struct(stringify!($name)).field("org", &self.org).finish_non_exhaustive()
                }
            }
        )*
    };
}

narrow! {
    /// The AI assistant: chat sessions (each one person's), their messages and tool calls,
    /// usage and the organization's budget.
    OrgAi => ai;
    /// Enrollment keys and what agents report about their devices: state, user sessions, logs.
    OrgAgents => agents;
    /// Alerts, alert rules, notification channels and what the rules observe.
    OrgAlerts => alerts;
    /// The organization's API keys.
    OrgApiKeys => api_keys;
    /// Approval requests for Tier 3 calls.
    OrgApprovals => approvals;
    /// The audit log: appending records and reading them.
    OrgAudit => audit;
    /// Automations and their runs.
    OrgAutomations => automations;
    /// The partner's catalog as this organization sees it: items, bundles, its prices.
    OrgCatalog => catalog;
    /// Device commands and the paths they may not touch.
    OrgCommands => commands;
    /// Compliance policies, checks and remediations.
    OrgCompliance => compliance;
    /// Configuration policies, their assignments, and the signal that they changed.
    OrgConfigPolicies => config_policies;
    /// Context notes attached to devices.
    OrgContext => context;
    /// Recurring contracts, their lines and billed periods.
    OrgContracts => contracts;
    /// Software deployments and their runs.
    OrgDeployments => deployments;
    /// Device records, the device listing and installed software.
    OrgDevices => devices;
    /// Dynamic device groups and their membership rules.
    OrgDynamicGroups => dynamic_groups;
    /// Live queries and each device's answer, kept for their retention.
    OrgLiveQueries => live_queries;
    /// Invoices: drafts, their lines, issuing with the partner's next number, payments, voids.
    OrgInvoices => invoices;
    /// Request ids claimed for idempotent retries.
    OrgIdempotency => idempotency;
    /// Maintenance windows and the alerts they suppressed.
    OrgMaintenance => maintenance;
    /// Patches, patch approvals and patch jobs.
    OrgPatches => patches;
    /// Quotes: drafts, their blocks and lines, sending and declining.
    OrgQuotes => quotes;
    /// Reports, their schedules and their runs.
    OrgReports => reports;
    /// The script library.
    OrgScripts => scripts;
    /// Security posture, threats, scans and scan schedules.
    OrgSecurity => security;
    /// Metric samples and device events.
    OrgTelemetry => telemetry;
    /// Advisories as this organization sees them and its devices' vulnerability exposure.
    OrgVulnerabilities => vulnerabilities;
    /// Tickets, their comments, alert links, time entries and parts.
    OrgTickets => tickets;
    /// The organization itself, its sites and static device groups.
    OrgTenancy => tenancy;
    /// Tool sources: its own (to change) and its partner's (to read), their tools and the
    /// sealed credential the call path opens.
    OrgToolSources => tool_sources;
}
