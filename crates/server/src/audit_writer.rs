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
//!
//! A lone request has nobody to share a batch with, so it writes its record itself when the
//! store can do that without awaiting ([`AuditAppender::append_now`]: the journal of a SQLite
//! file, or of PostgreSQL with a journal directory). That skips the hand-over, the writer's
//! wake-up and its yield rounds, and with them one `epoll_wait` of the runtime per request: on
//! a virtual machine where syscalls are dear, a measurable share of a request at concurrency 1.
//! "Lone" is judged three ways, since a record written alone under load costs far more than it
//! saves (a journal write each, and a mover that falls behind), and on a one-thread runtime
//! concurrent requests rarely overlap in the engine even at concurrency 50:
//!
//! - the caller says no other request is in flight (the engine counts them);
//! - nothing is queued at or being written by the writer (a request arriving meanwhile joins
//!   that batch, which is how batching resumes when load comes back);
//! - the writer's last [`SOLO_BATCHES`] batches held one record each; and every
//!   [`PROBE_EVERY`]th lone record still goes through the writer to test that again.
//!
//! Other stores (PostgreSQL without a journal: an awaited insert that a dropped request could
//! cut off) always go through the writer.
//!
//! Refusals beyond a rate limit are sampled by [`RefusalSampler`], so a client hammering a
//! limit cannot make the audit log its own: per key and per window of [`SAMPLE_WINDOW`]
//! (the limits' window), the first is written in full and the others are counted. The count is
//! written as one `mcp.refused.count` record when the window has passed (the engine's minute
//! tick), or on the key's next full refusal record (`details.unrecorded_before`), whichever
//! comes first: never dropped, except by a process that dies with counts pending.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
};

use breeze_core::{AuditEvent, Timestamp};
use breeze_store::AuditAppender;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinSet,
};

/// Most records committed in one transaction.
const MAX_BATCH: usize = 256;
/// Most scheduler rounds a batch waits for stragglers.
const MAX_GATHER_ROUNDS: usize = 8;
/// Consecutive one-record batches after which lone requests write their own records.
const SOLO_BATCHES: u32 = 8;
/// One in this many lone records goes through the writer all the same (a probe for load).
const PROBE_EVERY: u32 = 64;

/// A record, and where to say whether it was written.
type Job = (AuditEvent, oneshot::Sender<bool>);

/// A handle to the writer task. Cheap to clone.
#[derive(Clone)]
pub struct AuditWriter {
    tx: mpsc::Sender<Job>,
    appender: AuditAppender,
    lane: Arc<Lane>,
}

/// What the writer task tells writers about its work, for the lone-request path.
#[derive(Default)]
struct Lane {
    /// A batch is being gathered or written.
    working: AtomicBool,
    /// Consecutive batches of one record, up to [`SOLO_BATCHES`].
    solo_batches: AtomicU32,
    /// Records written on the lone path, for [`PROBE_EVERY`].
    lone_writes: AtomicU32,
}

impl AuditWriter {
    /// Starts the writer task on the current runtime.
    pub fn spawn(appender: AuditAppender) -> Self {
        let (tx, rx) = mpsc::channel::<Job>(4096);
        let lane = Arc::new(Lane::default());
        tokio::spawn(run(appender.clone(), rx, lane.clone()));
        Self { tx, appender, lane }
    }

    /// Writes `event` and waits until it is written; `alone` when no other request is in
    /// flight (see the module docs). Backpressure, not loss, when the queue is full. Whether
    /// the record was written: one that was not is logged in full (at error level), and the
    /// caller decides whether its answer may still go out.
    pub async fn write(&self, event: AuditEvent, alone: bool) -> bool {
        if alone && self.goes_lone() && self.appender.append_now(std::slice::from_ref(&event)) {
            return true;
        }
        let (done, wait) = oneshot::channel();
        match self.tx.send((event, done)).await {
            Ok(()) => wait.await.unwrap_or(false),
            Err(mpsc::error::SendError((event, _))) => {
                tracing::error!(record = ?event, "audit writer stopped; record logged instead");
                false
            }
        }
    }

    /// Whether a lone request's record skips the writer (see the module docs).
    fn goes_lone(&self) -> bool {
        let idle = self.tx.capacity() == self.tx.max_capacity()
            && !self.lane.working.load(Ordering::Acquire);
        idle && self.lane.solo_batches.load(Ordering::Relaxed) >= SOLO_BATCHES
            && !self
                .lane
                .lone_writes
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_add(1)
                .is_multiple_of(PROBE_EVERY)
    }
}

/// The window over which rate-limited refusals of one key are sampled (the transport limits').
pub(crate) const SAMPLE_WINDOW: chrono::Duration = chrono::Duration::seconds(60);

/// What [`RefusalSampler::sample`] decided for one rate-limited refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampled {
    /// Write it in full; `unrecorded_before` refusals of the key's previous window were counted
    /// but not yet written.
    Record { unrecorded_before: u64 },
    /// Counted, to be written by [`RefusalSampler::due`].
    Counted,
}

/// The counts of one key's window.
struct Tally<T> {
    started: Timestamp,
    counted: u64,
    /// What the count's record needs to say (whose, where).
    whose: T,
}

/// Samples rate-limited refusals per key (see the module docs). `T` is what a count's record
/// needs besides the count.
pub(crate) struct RefusalSampler<T> {
    windows: Mutex<HashMap<Arc<str>, Tally<T>>>,
}

impl<T> Default for RefusalSampler<T> {
    fn default() -> Self {
        Self {
            windows: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> RefusalSampler<T> {
    /// Decides for a refusal of `key` at `now`.
    pub(crate) fn sample(&self, key: &Arc<str>, now: Timestamp, whose: T) -> Sampled {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        match windows.get_mut(key) {
            Some(t) if now < t.started + SAMPLE_WINDOW => {
                t.counted += 1;
                Sampled::Counted
            }
            _ => {
                let before = windows.insert(
                    key.clone(),
                    Tally {
                        started: now,
                        counted: 0,
                        whose,
                    },
                );
                Sampled::Record {
                    unrecorded_before: before.map_or(0, |t| t.counted),
                }
            }
        }
    }

    /// Takes the windows that ended by `now`: each one's start, count and `whose`, for those
    /// that counted refusals not yet written.
    pub(crate) fn due(&self, now: Timestamp) -> Vec<(Timestamp, u64, T)> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let ended: Vec<Arc<str>> = windows
            .iter()
            .filter(|(_, t)| now >= t.started + SAMPLE_WINDOW)
            .map(|(k, _)| k.clone())
            .collect();
        ended
            .iter()
            .filter_map(|k| windows.remove(k))
            .filter(|t| t.counted > 0)
            .map(|t| (t.started, t.counted, t.whose))
            .collect()
    }
}

async fn run(appender: AuditAppender, mut rx: mpsc::Receiver<Job>, lane: Arc<Lane>) {
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
        lane.working.store(true, Ordering::Release);
        gather(&mut rx, &mut batch).await;
        let jobs = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
        if jobs.len() == 1 {
            let solo = lane.solo_batches.load(Ordering::Relaxed);
            lane.solo_batches
                .store((solo + 1).min(SOLO_BATCHES), Ordering::Relaxed);
        } else {
            lane.solo_batches.store(0, Ordering::Relaxed);
        }
        if in_flight == 1 {
            // One batch at a time (SQLite): the loop would only wait for it, so it is written
            // here rather than in a task of its own (a spawn and two task switches a batch).
            commit(appender.clone(), jobs).await;
        } else {
            commits.spawn(commit(appender.clone(), jobs));
        }
        lane.working.store(false, Ordering::Release);
    }
    while commits.join_next().await.is_some() {}
}

/// Hands `jobs` to the appender as one batch, then answers their callers.
async fn commit(appender: AuditAppender, jobs: Vec<Job>) {
    let (events, waiters): (Vec<AuditEvent>, Vec<oneshot::Sender<bool>>) = jobs.into_iter().unzip();
    let mut written = vec![true; waiters.len()];
    for (i, event, e) in appender.append(events).await {
        tracing::error!(error = %e, record = ?event, "audit record could not be written");
        if let Some(w) = written.get_mut(i) {
            *w = false;
        }
    }
    for (done, written) in waiters.into_iter().zip(written) {
        let _ = done.send(written);
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

#[cfg(test)]
mod tests {
    use std::{
        future::Future,
        pin::pin,
        task::{Context, Waker},
    };

    use breeze_core::Actor;
    use breeze_store::{Store, testing::Ctx};

    use super::*;

    /// Polls `fut` once, without letting any other task run.
    fn polled_once<T>(fut: impl Future<Output = T>) -> bool {
        let mut fut = pin!(fut);
        fut.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    async fn rows_of(store: &Store, action: &str) -> usize {
        let rows = store.raw_dump("audit_log").await.unwrap();
        rows.iter().filter(|r| r.contains(action)).count()
    }

    fn event(action: &str) -> AuditEvent {
        AuditEvent::new(Actor::system("test"), action, "mcp")
    }

    /// Writes a lone record that must go through the writer task (not done at the first poll).
    async fn through_the_writer(writer: &AuditWriter, action: &str, why: &str) {
        let mut write = pin!(writer.write(event(action), true));
        assert!(!polled_once(write.as_mut()), "{why}");
        write.await;
    }

    async fn a_lone_request_writes_its_own_record_where_that_cannot_be_cut_off(cx: Ctx) {
        let on_a_file = cx.dir.is_some();
        let writer = AuditWriter::spawn(cx.store.audit_appender());

        // Until the writer has seen SOLO_BATCHES batches of one, lone records go through it.
        for _ in 0..SOLO_BATCHES {
            through_the_writer(&writer, "mcp.alone", "written before load was judged").await;
        }
        // Then, on a SQLite file, a lone record is written by the first poll, before the writer
        // task runs. On PostgreSQL the write is an awaited insert and always goes through it.
        if on_a_file {
            assert!(
                polled_once(writer.write(event("mcp.alone"), true)),
                "a lone write on SQLite did not finish at once"
            );
        } else {
            through_the_writer(&writer, "mcp.alone", "PostgreSQL wrote without the writer").await;
        }
        let lone = SOLO_BATCHES as usize + 1;
        assert_eq!(rows_of(&cx.store, "mcp.alone").await, lone);

        // A request that is not alone hands its record to the writer (not done at the first
        // poll). Its caller going away then (the client hung up) loses nothing. While that
        // record waits, a lone request joins it (one batch) rather than write its own.
        assert!(!polled_once(writer.write(event("mcp.shared"), false)));
        through_the_writer(&writer, "mcp.joined", "wrote alone beside a queued record").await;
        assert_eq!(rows_of(&cx.store, "mcp.shared").await, 1);
        assert_eq!(rows_of(&cx.store, "mcp.joined").await, 1);

        if on_a_file {
            // That batch held two records, so lone records go through the writer again until
            // SOLO_BATCHES batches of one; then one in PROBE_EVERY still does.
            for _ in 0..SOLO_BATCHES {
                through_the_writer(
                    &writer,
                    "mcp.alone",
                    "wrote alone right after a shared batch",
                )
                .await;
            }
            let mut through_writer = 0;
            for _ in 0..PROBE_EVERY * 2 {
                let mut alone = pin!(writer.write(event("mcp.probe"), true));
                if !polled_once(alone.as_mut()) {
                    through_writer += 1;
                    alone.await;
                }
            }
            assert_eq!(through_writer, 2, "one probe in {PROBE_EVERY} lone records");
            assert_eq!(
                rows_of(&cx.store, "mcp.probe").await,
                PROBE_EVERY as usize * 2
            );
        }
    }

    breeze_store::on_both_backends!(
        a_lone_request_writes_its_own_record_where_that_cannot_be_cut_off
    );

    #[test]
    fn rate_limited_refusals_are_sampled_and_counted() {
        let sampler = RefusalSampler::<&str>::default();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let t0 = chrono::DateTime::UNIX_EPOCH;
        let s = chrono::Duration::seconds;
        assert_eq!(
            sampler.sample(&a, t0, "a"),
            Sampled::Record {
                unrecorded_before: 0
            }
        );
        assert_eq!(sampler.sample(&a, t0 + s(1), "a"), Sampled::Counted);
        assert_eq!(sampler.sample(&a, t0 + s(59), "a"), Sampled::Counted);
        assert_eq!(
            sampler.sample(&b, t0 + s(2), "b"),
            Sampled::Record {
                unrecorded_before: 0
            },
            "per key"
        );
        assert!(sampler.due(t0 + s(59)).is_empty(), "no window has ended");
        // The next window's first refusal is written in full, with the last window's count.
        assert_eq!(
            sampler.sample(&a, t0 + s(60), "a"),
            Sampled::Record {
                unrecorded_before: 2
            }
        );
        assert_eq!(sampler.sample(&a, t0 + s(61), "a"), Sampled::Counted);
        // Or the count is taken once the window has passed; windows with nothing counted go.
        assert_eq!(sampler.due(t0 + s(120)), vec![(t0 + s(60), 1, "a")]);
        assert!(sampler.due(t0 + s(200)).is_empty());
        assert_eq!(
            sampler.sample(&a, t0 + s(200), "a"),
            Sampled::Record {
                unrecorded_before: 0
            },
            "a count is written once"
        );
    }
}
