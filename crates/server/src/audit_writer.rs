//! Group-written audit records for hot paths (every MCP request writes a record).
//!
//! Callers hand a record to the writer and wait until it is safe; the writer task hands
//! whatever has queued up to the store's [`AuditAppender`] as one batch (one transaction, or one
//! journal write for a small batch on SQLite), so no caller's answer leaves before its record is
//! written. Before writing, the writer lets every other ready task run (a few `yield_now`
//! rounds, until a round brings nothing new): under load those are requests about to hand in
//! their own records, which then join the batch (at concurrency 50, batches of ~50 instead of
//! ~3). Idle, the rounds find nothing and cost nothing measurable. A record the appender could
//! not write at all is logged here in full.

use breeze_core::AuditEvent;
use breeze_store::AuditAppender;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinSet,
};

/// Most records committed in one transaction.
const MAX_BATCH: usize = 256;
/// Most scheduler rounds a batch waits for stragglers.
const MAX_GATHER_ROUNDS: usize = 8;

type Job = (AuditEvent, oneshot::Sender<()>);

/// A handle to the writer task. Cheap to clone.
#[derive(Clone)]
pub struct AuditWriter {
    tx: mpsc::Sender<Job>,
}

impl AuditWriter {
    /// Starts the writer task on the current runtime.
    pub fn spawn(appender: AuditAppender) -> Self {
        let (tx, rx) = mpsc::channel::<Job>(4096);
        tokio::spawn(run(appender, rx));
        Self { tx }
    }

    /// Writes `event` and waits for its commit. Backpressure, not loss, when the queue is full.
    pub async fn write(&self, event: AuditEvent) {
        let (done, wait) = oneshot::channel();
        match self.tx.send((event, done)).await {
            Ok(()) => {
                let _ = wait.await;
            }
            Err(mpsc::error::SendError((event, _))) => {
                tracing::error!(record = ?event, "audit writer stopped; record logged instead");
            }
        }
    }
}

async fn run(appender: AuditAppender, mut rx: mpsc::Receiver<Job>) {
    let in_flight = appender.max_in_flight();
    let mut commits = JoinSet::new();
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    loop {
        // A free slot first: meanwhile records queue up (and the queue pushes back).
        while commits.len() >= in_flight {
            commits.join_next().await;
        }
        if rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            break;
        }
        gather(&mut rx, &mut batch).await;
        let jobs = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
        if in_flight == 1 {
            // One batch at a time (SQLite): the loop would only wait for it, so it is written
            // here rather than in a task of its own (a spawn and two task switches a batch).
            commit(appender.clone(), jobs).await;
        } else {
            commits.spawn(commit(appender.clone(), jobs));
        }
    }
    while commits.join_next().await.is_some() {}
}

/// Hands `jobs` to the appender as one batch, then answers their callers.
async fn commit(appender: AuditAppender, jobs: Vec<Job>) {
    let (events, waiters): (Vec<AuditEvent>, Vec<oneshot::Sender<()>>) = jobs.into_iter().unzip();
    for (event, e) in appender.append(events).await {
        tracing::error!(error = %e, record = ?event, "audit record could not be written");
    }
    for done in waiters {
        let _ = done.send(());
    }
}

/// Lets the other ready tasks run, taking the records they hand in, until a round brings
/// nothing new (or the batch is full, or [`MAX_GATHER_ROUNDS`] passed).
async fn gather(rx: &mut mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    for _ in 0..MAX_GATHER_ROUNDS {
        if batch.len() >= MAX_BATCH {
            return;
        }
        tokio::task::yield_now().await;
        let before = batch.len();
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if batch.len() == before {
            return;
        }
    }
}
