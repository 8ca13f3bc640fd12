//! The server's periodic background jobs, all run one way.
//!
//! A job is a [`Worker`]: a name, a period and a tick. [`spawn`] runs it until `stop`:
//! - the first tick at once (or after [`Worker::first_delay`]), then one every
//!   [`Worker::period`], measured from tick start to tick start; a tick that overruns delays
//!   the next instead of making the missed ones up in a burst;
//! - a tick's error is logged at warn (`"{NAME} tick failed"`) and the next tick comes as
//!   usual: nothing a tick meets stops the job;
//! - `stop` ends the job between ticks; a tick under way is finished, unless the worker says
//!   it may be cut short ([`Worker::STOPS_MID_TICK`]);
//! - [`Worker::start`] runs once before the first tick, [`Worker::stopped`] once after the last
//!   (e.g. giving a once-per-cluster lease up, so another instance takes over at once).
//!
//! Which instance of a cluster does a tick's work is each worker's own affair (a lease or a
//! conditional claim in the store); this module only paces them.
//!
//! Work a tick starts but does not wait for (a run, a step, a scan) goes into the worker's
//! [`Tasks`], so tests and shutdown can wait for it ([`Tasks::settle`]).

use std::{fmt::Display, future::Future, sync::Arc, time::Duration};

use tokio::task::JoinHandle;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// A periodic background job of the server (see the module docs for how it is run).
pub trait Worker: Send + Sync + Sized + 'static {
    /// What the logs call it: `"{NAME} tick failed"`.
    const NAME: &'static str;
    /// Whether `stop` may cut a tick short (for a long job whose half-done work the next
    /// tick takes up again); otherwise a tick under way is finished.
    const STOPS_MID_TICK: bool = false;
    /// What one tick did.
    type Report: Send;
    /// Why a tick failed.
    type Error: Display + Send;

    /// Time from one tick's start to the next's.
    fn period(&self) -> Duration;

    /// How long after the start the first tick comes.
    fn first_delay(&self) -> Duration {
        Duration::ZERO
    }

    /// One round of the job.
    fn tick(self: &Arc<Self>) -> impl Future<Output = Result<Self::Report, Self::Error>> + Send;

    /// Logs what a tick did, where that is worth a line (most ticks log nothing).
    fn log(&self, _report: &Self::Report) {}

    /// Runs once before the first tick.
    fn start(self: &Arc<Self>) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Runs once after `stop`.
    fn stopped(self: &Arc<Self>) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Runs `worker` until `stop` is cancelled.
pub fn spawn<W: Worker>(worker: Arc<W>, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        worker.start().await;
        let first = tokio::time::Instant::now() + worker.first_delay();
        let mut ticks = tokio::time::interval_at(first, worker.period());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticks.tick() => {}
            }
            let done = if W::STOPS_MID_TICK {
                tokio::select! {
                    () = stop.cancelled() => break,
                    done = worker.tick() => done,
                }
            } else {
                worker.tick().await
            };
            match done {
                Ok(report) => worker.log(&report),
                Err(e) => tracing::warn!(error = %e, "{} tick failed", W::NAME),
            }
        }
        worker.stopped().await;
    })
}

/// The tasks a worker's ticks started and did not wait for.
#[derive(Debug, Default)]
pub struct Tasks(TaskTracker);

impl Tasks {
    /// Starts `task`, tracked.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(task);
    }

    /// Waits until every task started so far has finished (tests, and shutdown); tasks may be
    /// started again afterwards.
    pub async fn settle(&self) {
        self.0.close();
        self.0.wait().await;
        self.0.reopen();
    }
}
