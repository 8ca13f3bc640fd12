//! Tool Sources: external MCP servers and OpenAPI-described REST APIs whose tools Breeze
//! offers beside its own, under the same tiers, approvals and audit.
//!
//! - [`model`]: the source's slug, kind and state, tool addresses (`<slug>__<name>`), the tier
//!   discovery proposes, definition hashes, and how a re-discovery merges into known tools.
//! - [`vault`]: credentials sealed at rest (AEAD under `TOOL_SOURCES_KEY`), never shown.
//! - [`egress`]: the only way out — https, public addresses judged on every connection, no
//!   redirects, timeouts and size caps.
//! - [`auth`]: a credential as request headers, only for the base URL's origin.
//! - [`mcp`]: discovery and calls of MCP servers (rmcp's client over the egress client).
//! - [`openapi`]: OpenAPI 3.0/3.1 documents as tools, and their calls.
//! - [`service`]: what every door shares — create, discover, call (audited).
//!
//! No authorization here: the door decides who may manage a source (a partner-wide one needs
//! the permission to manage partner-wide policies), and a call of an external tool is decided
//! by the guard in `breeze-pipeline` like any other before [`service::Sources::call`] runs.

pub mod auth;
pub mod egress;
pub mod mcp;
pub mod openapi;
pub mod service;
pub mod vault;

#[cfg(feature = "testing")]
pub mod testing;

/// The plain data of sources and their tools (in `breeze-core`, where the store reads it).
pub use breeze_core::tool_source as model;
