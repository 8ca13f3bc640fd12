//! [`CrossOrg`]: the one door to rows of more than one organization.
//!
//! Everything else reads organization data through [`OrgStore`](crate::OrgStore), bound to one
//! organization (and, on PostgreSQL, to its row-security scope). A few readers must see every
//! organization at once: the server's workers and the gateway's sweeper finding what is due
//! across the fleet, the approval resumer finding approved calls whose callers went away, and a person who belongs
//! to several organizations listing what waits for them there. They go through this handle,
//! so that each such read is named at its call site (`store.cross_org()…`) and all of them are
//! listed here; a tool handler never holds one.
//!
//! What it reads, each defined beside its domain's other statements:
//! - approvals: [`CrossOrg::pending_approvals`] (of the organizations named),
//!   [`CrossOrg::unclaimed_approvals`];
//! - automations: [`CrossOrg::due_automations`], [`CrossOrg::alert_automations`],
//!   [`CrossOrg::claim_queued_runs`], [`CrossOrg::runs_awaiting_approval`];
//! - compliance: [`CrossOrg::due_compliance_policies`],
//!   [`CrossOrg::finished_compliance_checks`], [`CrossOrg::claim_queued_remediations`],
//!   [`CrossOrg::remediations_awaiting_approval`];
//! - deployments: [`CrossOrg::due_deployments`];
//! - scan schedules: [`CrossOrg::due_scan_schedules`];
//! - patches: [`CrossOrg::scheduled_patch_jobs`];
//! - alerts: [`CrossOrg::alert_rules_after`];
//! - devices and commands (the gateway's sweeper): [`CrossOrg::mark_stale_devices_offline`],
//!   [`CrossOrg::time_out_commands`];
//! - dynamic groups: [`CrossOrg::reevaluate_time_dependent_groups`];
//! - tool sources: [`CrossOrg::tool_sources_exist`] (a production start without a key).
//!
//! A row read here is acted on through its own organization's handle (`store.org(row.org_id)`).
//! Cluster-wide upkeep that reads nothing back (expiring, pruning, failing interrupted work)
//! and the leases on single rows stay on [`Store`].

use crate::Store;

/// Reads across organizations (see the module docs for who may, and what).
#[derive(Debug, Clone, Copy)]
pub struct CrossOrg<'a> {
    pub(crate) store: &'a Store,
}

impl Store {
    /// The handle for reads across organizations: a worker's sweep or a multi-organization
    /// list, never a tool's or a request's view of one organization.
    pub fn cross_org(&self) -> CrossOrg<'_> {
        CrossOrg { store: self }
    }
}
