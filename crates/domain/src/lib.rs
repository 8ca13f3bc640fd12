//! The domain layer: operations that must behave the same whichever door asks for them.
//!
//! Breeze has several doors onto the same data — MCP tools (`breeze-tools`, run by the call
//! pipeline), REST routes and dashboard pages (`breeze-server`), the administration CLI
//! (`breeze-cli`) and the server's background workers. A change is more than its row: it has an
//! audit record, and often a side effect (agents must be told of a new configuration). When
//! that side effect lives in one door's handler, the other doors silently skip it — a
//! configuration policy assigned with the CLI used to reach agents only at their next
//! connection, because the push lived in the `apply_configuration_policy` tool. Here each
//! domain has one home for such operations, and every door calls it.
//!
//! **Why a crate of its own.** The operations need the store and the device gateway, so they
//! cannot live in `breeze-store` (below the gateway) or `breeze-gateway` (which knows no domain
//! rules); putting them in `breeze-tools` would make the server and the CLI link the MCP tool
//! contract to reach them, and in `breeze-server` the tools could not call them. So
//! `breeze-domain` sits on `core`, `store` and `gateway`, and `tools`, `server` and `cli`
//! depend on it; the MCP engine (`breeze-mcp`) knows nothing of it, and nothing here knows
//! tools, HTTP or MCP.
//!
//! **Narrow handles.** A service takes what it may touch, never the whole [`breeze_store::Store`]:
//! [`config_policies::ConfigPolicies`] holds one organization's `OrgStore` and how its agents
//! are reached ([`Agents`]); a service is made by the door after it authorized the caller, so
//! nothing here checks authorization (the guard, `authz` and the CLI's operator decide who).
//! The one exception is partner-wide configuration ([`config_policies::PartnerConfigPolicies`]),
//! which spans a partner's organizations and so holds the store, as partner-level rows are
//! reached only through it.
//!
//! **Errors** are [`Error`]: what the store refused, or an argument a domain rule refuses. The
//! doors word them for their callers (a tool's "not found or access denied", the CLI's
//! message).

use breeze_gateway::{GatewayError, OrgFleet};
use breeze_store::StoreError;

pub mod alerts;
pub mod compliance;
pub mod config_policies;
pub mod live_queries;
pub mod vulnerabilities;

/// Why a domain operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store refused or failed (not found, a constraint, unavailable).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<GatewayError> for Error {
    fn from(e: GatewayError) -> Self {
        match e {
            GatewayError::Store(e) => Error::Store(e),
        }
    }
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a change reaches one organization's agents, as the door's process can reach them.
#[derive(Clone, Copy)]
pub enum Agents<'a> {
    /// A server: its gateway pushes to the agents connected to this process and announces the
    /// change on the cluster bus for those connected to other instances.
    Gateway(OrgFleet<'a>),
    /// A process that holds no agent sockets (the CLI): the change is announced on the cluster
    /// bus, and the operation returns once the signal is sent, so a process that exits at once
    /// loses nothing. The running servers holding the agents' sockets push it.
    ///
    /// The bus is PostgreSQL's; on SQLite (one serving process per file) nothing is announced
    /// and agents get the change when they next connect or send an HTTP heartbeat.
    Bus,
}
