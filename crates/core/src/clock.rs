//! The clock: the only way Breeze code reads the current time, so tests can move it.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Duration, SubsecRound, Utc};

/// A point in time. Breeze stores times in UTC with microsecond precision.
pub type Timestamp = DateTime<Utc>;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time, truncated to microseconds (the precision both databases keep).
    fn now(&self) -> Timestamp;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one sanctioned reading of the wall clock
    fn now(&self) -> Timestamp {
        Utc::now().trunc_subsecs(6)
    }
}

/// A clock that stands still until a test moves it. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Timestamp>>);

impl ManualClock {
    /// A clock showing `at`.
    pub fn new(at: Timestamp) -> Self {
        Self(Arc::new(Mutex::new(at.trunc_subsecs(6))))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }

    /// Sets the clock to `at`.
    pub fn set(&self, at: Timestamp) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = at.trunc_subsecs(6);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
