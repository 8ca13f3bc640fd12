//! What of an organization a tool can reach, declared on the tool and enforced by the compiler.
//!
//! A tool names its reach as a type: `type Reach = (reach::Alerts, reach::Audit);`. Its
//! [`ToolCx`](crate::ToolCx) then hands out exactly those narrowed store handles
//! (`cx.alerts()`, `cx.audit()`) and, for [`Fleet`], the device gateway (`cx.fleet()`);
//! asking for anything else (`cx.patches()` in an alerts tool) fails to compile. The check is
//! a constant evaluated when the tool's code is compiled for its reach, so it also holds
//! inside helpers shared between tools: a helper generic over the reach compiles for each tool
//! that calls it, against that tool's declaration.
//!
//! Reading the declarations (`grep 'type Reach'`) answers "which tools can touch patch jobs"
//! without reading handler code.
//!
//! A handler that reaches within its declaration compiles:
//!
//! ```
//! use breeze_tools::{ToolCx, reach};
//! fn handler(cx: &ToolCx<'_, (reach::Alerts, reach::Audit)>) {
//!     let _ = cx.alerts();
//! }
//! let _ = handler as fn(&ToolCx<'_, (reach::Alerts, reach::Audit)>);
//! ```
//!
//! and one that reaches beyond it does not:
//!
//! ```compile_fail,E0080
//! use breeze_tools::{ToolCx, reach};
//! fn handler(cx: &ToolCx<'_, (reach::Alerts, reach::Audit)>) {
//!     let _ = cx.patches();
//! }
//! let _ = handler as fn(&ToolCx<'_, (reach::Alerts, reach::Audit)>);
//! ```

/// A set of domains. Implemented by each domain marker and by tuples of them.
pub trait Reach: Send + Sync + 'static {
    /// One bit per domain.
    const DOMAINS: u32;
}

macro_rules! domains {
    ($( $(#[$doc:meta])* $name:ident = $bit:literal; )*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;
        impl Reach for $name {
            const DOMAINS: u32 = 1 << $bit;
        }
    )*};
}

domains! {
    /// Enrollment keys and agents' reports: state, sessions, logs.
    Agents = 0;
    /// Alerts, alert rules and notification channels.
    Alerts = 1;
    /// Approval requests.
    Approvals = 2;
    /// Appending to and reading the audit log.
    Audit = 3;
    /// Automations and their runs.
    Automations = 4;
    /// Device commands and protected paths.
    Commands = 5;
    /// Compliance policies and checks.
    Compliance = 6;
    /// Configuration policies.
    ConfigPolicies = 7;
    /// Context notes on devices.
    Context = 8;
    /// Software deployments.
    Deployments = 9;
    /// Device records and the device listing.
    Devices = 10;
    /// Dynamic device groups.
    DynamicGroups = 11;
    /// Maintenance windows.
    Maintenance = 12;
    /// Patches and patch jobs.
    Patches = 13;
    /// Reports.
    Reports = 14;
    /// The script library.
    Scripts = 15;
    /// Security posture, threats and scans.
    Security = 16;
    /// Metrics and device events.
    Telemetry = 17;
    /// The organization, its sites and device groups.
    Tenancy = 18;
    /// The device gateway: running commands on the organization's agents.
    Fleet = 19;
    /// Tickets, their comments, alert links, time and parts.
    Tickets = 20;
    /// Invoices, their lines and payments.
    Invoices = 21;
    /// The partner's catalog as the organization sees it.
    Catalog = 22;
    /// Recurring contracts, their lines and billed periods.
    Contracts = 23;
    /// Quotes, their blocks and lines.
    Quotes = 24;
    /// The partner's outside billing services: Stripe payment links, TD SYNNEX lookups. Each
    /// call may be a billed, or money-moving, request outside Breeze.
    Billing = 25;
    /// Live queries and their stored answers.
    LiveQueries = 26;
    /// Advisories and the organization's vulnerability exposure.
    Vulnerabilities = 27;
}

impl Reach for () {
    const DOMAINS: u32 = 0;
}

macro_rules! tuples {
    ($( ($($t:ident),+) )*) => {$(
        impl<$($t: Reach),+> Reach for ($($t,)+) {
            const DOMAINS: u32 = 0 $(| $t::DOMAINS)+;
        }
    )*};
}

tuples! {
    (A)
    (A, B)
    (A, B, C)
    (A, B, C, D)
    (A, B, C, D, E)
    (A, B, C, D, E, F)
    (A, B, C, D, E, F, G)
    (A, B, C, D, E, F, G, H)
    (A, B, C, D, E, F, G, H, I)
    (A, B, C, D, E, F, G, H, I, J)
}
