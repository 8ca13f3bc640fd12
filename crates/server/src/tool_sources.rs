//! The tool-source discovery worker, one of the server's background tasks ([`crate::serve`]).
//!
//! A discovery is queued when a source is created and when a person asks to re-discover it
//! (REST, page, CLI); Breeze never polls an upstream on its own. Each tick takes the queued
//! discoveries whose time has come — each claimed first, by a conditional update that also
//! leases it ([`DISCOVERY_LEASE`]), so one instance of a cluster runs each and one cut short by
//! a crash is taken again — and runs them one after the other through
//! `breeze_sources::service::Sources::run_queued`, which records each outcome (the merged
//! tools, or the source in error with the reason). A slow upstream delays only the discoveries
//! queued behind it in this worker, never a call, a listing or another process.

use std::{sync::Arc, time::Duration};

use breeze_core::{Actor, AuditEvent};
use breeze_sources::service::{Sources, SourcesError};

use crate::workers::Worker;

/// How often the worker looks for queued discoveries.
pub const DISCOVERY_TICK: Duration = Duration::from_secs(2);

/// How long a claimed discovery is held before another worker may take it again: well over a
/// discovery's own timeout.
pub const DISCOVERY_LEASE: Duration = Duration::from_secs(300);

/// The most discoveries one tick takes.
const PER_TICK: i64 = 10;

/// The worker. Cheap to share (`Arc`).
pub struct DiscoveryWorker {
    sources: Sources,
}

impl DiscoveryWorker {
    pub fn new(sources: Sources) -> Self {
        Self { sources }
    }
}

impl Worker for DiscoveryWorker {
    const NAME: &'static str = "tool source discovery";
    type Report = usize;
    type Error = SourcesError;

    fn period(&self) -> Duration {
        DISCOVERY_TICK
    }

    /// Runs the queued discoveries this instance claims; returns how many ran.
    async fn tick(self: &Arc<Self>) -> Result<usize, SourcesError> {
        self.sources
            .run_queued(PER_TICK, DISCOVERY_LEASE, || {
                AuditEvent::new(
                    Actor::system("tool-sources"),
                    "tool_source.discovered",
                    "tool_source",
                )
            })
            .await
    }

    fn log(&self, ran: &usize) {
        if *ran > 0 {
            tracing::debug!(ran, "tool source discoveries ran");
        }
    }
}
