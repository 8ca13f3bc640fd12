//! The reconnect schedule: exponential from 1 s to 60 s with ±30 % jitter, reset after a
//! connection that stayed up.

use std::time::Duration;

use rand::Rng;

/// First delay.
pub const INITIAL: Duration = Duration::from_secs(1);
/// Largest delay (before jitter).
pub const MAX: Duration = Duration::from_secs(60);
/// Jitter as a fraction of the delay, either way.
pub const JITTER: f64 = 0.3;
/// A connection up at least this long resets the schedule.
pub const STABLE_AFTER: Duration = Duration::from_secs(30);

/// Exponential backoff with jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: INITIAL }
    }
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff::default()
    }

    /// The delay before the next attempt (jittered); the base doubles up to [`MAX`].
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(MAX);
        jitter(base)
    }

    /// Starts again from [`INITIAL`].
    pub fn reset(&mut self) {
        self.next = INITIAL;
    }
}

/// `base` ± 30 %.
pub fn jitter(base: Duration) -> Duration {
    let factor = rand::thread_rng().gen_range((1.0 - JITTER)..=(1.0 + JITTER));
    base.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_stays_within_bounds() {
        for _ in 0..50 {
            let mut b = Backoff::new();
            let mut base = INITIAL;
            for _ in 0..12 {
                let d = b.next_delay();
                assert!(
                    d >= base.mul_f64(1.0 - JITTER) && d <= base.mul_f64(1.0 + JITTER),
                    "{d:?} vs {base:?}"
                );
                base = (base * 2).min(MAX);
            }
            // Capped: never more than 60 s + 30 %.
            assert!(b.next_delay() <= MAX.mul_f64(1.0 + JITTER));
            b.reset();
            assert!(b.next_delay() <= INITIAL.mul_f64(1.0 + JITTER));
        }
    }
}
