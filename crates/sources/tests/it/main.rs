//! Tool sources against local upstreams: the egress rules under attack, MCP discovery and calls
//! against well-behaved and hostile servers, every authentication method, and OpenAPI calls.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod corpus;
mod egress;
mod mcp;
mod openapi;
mod service;

use std::sync::Arc;

use breeze_core::{Clock, ManualClock};
use chrono::TimeZone;

pub(crate) fn clock() -> Arc<dyn Clock> {
    Arc::new(ManualClock::new(
        chrono::Utc.with_ymd_and_hms(2026, 12, 6, 10, 0, 0).unwrap(),
    ))
}
