//! One progress scale for a Tier 3 call: waiting for a person, then running. A client must see
//! progress only increase, but the two phases report on scales of their own (seconds of the
//! request's life, then the handler's steps), so [`Phases`] maps them onto one: the wait onto
//! `[0, 0.5)` and the run onto `[0.5, 1)` of a total of 1. A report that would not move forward
//! (it has no total, or its handler started again) is still forwarded, a step past the last
//! one: its message is never lost.

use std::sync::{Arc, Mutex, PoisonError};

use breeze_tools::ProgressReport;
use tokio::sync::mpsc;

/// The share of the scale the wait for a person takes.
const WAIT_SHARE: f64 = 0.5;

/// How far a report that does not move forward on its own is moved.
const STEP: f64 = 1e-6;

/// The client's progress channel, shared by the two phases of one call.
#[derive(Clone)]
pub(crate) struct Phases {
    out: Option<mpsc::UnboundedSender<ProgressReport>>,
    last: Arc<Mutex<f64>>,
}

impl Phases {
    pub(crate) fn new(out: Option<mpsc::UnboundedSender<ProgressReport>>) -> Self {
        Self {
            out,
            last: Arc::new(Mutex::new(-1.0)),
        }
    }

    /// Where the wait reports, as `(progress, Some(total))` of the request's life.
    pub(crate) fn waiting(&self) -> Option<mpsc::UnboundedSender<ProgressReport>> {
        self.phase(0.0)
    }

    /// Where the approved call reports, on its handler's own scale.
    pub(crate) fn running(&self) -> Option<mpsc::UnboundedSender<ProgressReport>> {
        self.phase(WAIT_SHARE)
    }

    /// A sender whose reports are mapped onto `[start, start + share)` and forwarded when they
    /// move the scale forward.
    fn phase(&self, start: f64) -> Option<mpsc::UnboundedSender<ProgressReport>> {
        let out = self.out.clone()?;
        let last = self.last.clone();
        let (tx, mut rx) = mpsc::unbounded_channel::<ProgressReport>();
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                let fraction = match report.total {
                    Some(total) if total > 0.0 => (report.progress / total).clamp(0.0, 0.999),
                    _ => 0.0,
                };
                let mapped = start + WAIT_SHARE * fraction;
                let progress = {
                    let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
                    *last = if mapped > *last { mapped } else { *last + STEP };
                    *last
                };
                let _ = out.send(ProgressReport {
                    progress,
                    total: Some(1.0),
                    message: report.message,
                });
            }
        });
        Some(tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(progress: f64, total: Option<f64>) -> ProgressReport {
        ProgressReport {
            progress,
            total,
            message: None,
        }
    }

    #[tokio::test]
    async fn the_run_continues_where_the_wait_stopped() {
        let (out, mut seen) = mpsc::unbounded_channel();
        let phases = Phases::new(Some(out));
        let wait = phases.waiting().unwrap();
        wait.send(report(0.0, Some(300.0))).unwrap();
        wait.send(report(12.0, Some(300.0))).unwrap();
        drop(wait);
        tokio::task::yield_now().await;
        let run = phases.running().unwrap();
        // A handler starting again at 0, then reporting without a total, then a step back.
        for r in [
            report(0.0, Some(3.0)),
            report(0.0, None),
            report(2.0, Some(3.0)),
            report(1.0, Some(3.0)),
        ] {
            run.send(r).unwrap();
        }
        drop((run, phases));
        let mut values = Vec::new();
        while let Some(r) = seen.recv().await {
            assert_eq!(r.total, Some(1.0));
            values.push(r.progress);
        }
        assert_eq!(values.len(), 6, "every report is forwarded: {values:?}");
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)), "{values:?}");
    }
}
