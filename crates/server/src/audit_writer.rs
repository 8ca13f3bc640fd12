//! Group-committed audit writes for hot paths (every MCP request writes a record).
//!
//! Callers hand a record to the writer and wait until it is committed; the writer task commits
//! whatever has queued up in one transaction. Many concurrent requests share one commit, so the
//! database sees few transactions, and no caller's answer leaves before its record is durable.
//! When a batch fails, each record is retried alone; one that still fails is logged in full.

use breeze_core::AuditEvent;
use breeze_store::Store;
use tokio::sync::{mpsc, oneshot};

/// Most records committed in one transaction.
const MAX_BATCH: usize = 256;

type Job = (AuditEvent, oneshot::Sender<()>);

/// A handle to the writer task. Cheap to clone.
#[derive(Clone)]
pub struct AuditWriter {
    tx: mpsc::Sender<Job>,
}

impl AuditWriter {
    /// Starts the writer task on the current runtime.
    pub fn spawn(store: Store) -> Self {
        let (tx, rx) = mpsc::channel::<Job>(4096);
        tokio::spawn(run(store, rx));
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

async fn run(store: Store, mut rx: mpsc::Receiver<Job>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (events, waiters): (Vec<AuditEvent>, Vec<oneshot::Sender<()>>) =
            batch.drain(..).unzip();
        if let Err(e) = store.append_audit_batch(&events).await {
            tracing::warn!(error = %e, records = events.len(), "audit batch failed; retrying one by one");
            for event in &events {
                if let Err(e) = store.append_audit(event).await {
                    tracing::error!(error = %e, record = ?event, "audit record could not be written");
                }
            }
        }
        for done in waiters {
            let _ = done.send(());
        }
    }
}
