//! The Breeze device agent.
//!
//! One binary (`breeze-agent`) that enrolls a machine with a Breeze server, then keeps one
//! outbound WebSocket to the device gateway and falls back to HTTP while the socket is down.
//! It reports heartbeats, inventory, metrics and its own log lines, and runs the commands the
//! server sends exactly once per command id (see [`journal`]).
//!
//! The wire contract lives in `breeze-agent-proto`; this crate only implements the agent side.
//! Module map:
//!
//! - [`config`]: the agent's JSON config file (atomic, mode 0600) and its default location;
//! - [`cli`]: the command line (`enroll`, `run`, `rotate-token`), shared with `breeze agent`;
//! - [`api`]: the HTTP client for the `/api/v1/agents/*` endpoints;
//! - [`enroll`]: enrollment and token rotation;
//! - [`runtime`]: the `run` loop — socket, HTTP fallback, timers, running received commands;
//! - [`backoff`]: the reconnect schedule;
//! - [`journal`]: the persistent exactly-once command journal;
//! - [`exec`]: every command kind, against the real OS;
//! - [`system`]: inventory, metrics and heartbeat facts;
//! - [`logship`]: the shipped-log capture layer and the temporary level override;
//! - [`logwatch`]: tailing the log files the config file names, matching lines as events.

pub mod api;
pub mod backoff;
pub mod cli;
pub mod config;
pub mod enroll;
pub mod error;
pub mod exec;
pub mod journal;
pub mod logship;
pub mod logwatch;
pub mod runtime;
pub mod system;

pub use error::AgentError;

/// The agent's version as reported to the server.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The exit status of `breeze-agent run` when the server refuses the device's token for good
/// (`EX_CONFIG` of sysexits.h): retrying cannot help, so a service manager should not restart
/// it (`RestartPreventExitStatus=78` in the systemd unit). Every other failure exits with 1.
pub const EXIT_TOKEN_REFUSED: u8 = 78;
