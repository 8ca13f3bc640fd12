//! An MCP protocol engine over axum, free of any domain knowledge.
//!
//! - [`jsonrpc`]: JSON-RPC 2.0 messages, parsing, errors.
//! - [`json`]: JSON writing on the hot path (string escaping, tool results).
//! - [`protocol`]: revisions 2024-11-05 through 2026-07-28 and negotiation.
//! - [`model`]: result shapes (tools, content, resources, prompts).
//! - [`app`]: the [`McpApp`] trait an application implements, and the [`Cx`] its handlers get.
//! - [`engine`]: dispatch of methods onto the app; audit hook; cancellation.
//! - [`session`]: sessions bound to credentials, with caps and idle expiry.
//! - [`cluster`]: sessions shared by several instances through Redis.
//! - [`http`]: Streamable HTTP and legacy HTTP+SSE transports.

pub mod app;
pub mod cluster;
pub mod engine;
// The transports return ready HTTP responses as their error values: built once, on the
// refusal path only, so their size does not matter.
#[allow(clippy::result_large_err)]
pub mod http;
pub mod json;
pub mod jsonrpc;
pub mod model;
pub mod protocol;
mod relay;
pub mod session;

pub use app::{
    Client, Cx, Extensions, HttpError, McpApp, Peer, RequestRecord, Transport, TransportEvent,
    TransportRecord,
};
pub use engine::{Engine, EngineConfig, ReplyMode};
pub use protocol::ProtocolVersion;
