//! The agent's own log lines, shipped to the server.
//!
//! [`ShipLayer`] is a `tracing` layer that copies the agent's events at or above the current
//! shipping level into a bounded buffer held by [`LogControl`]; the runtime sends the buffer as
//! `LogBatch` frames (or over HTTP). The level is `warn` unless a `SetLogLevel` command raised
//! it for a while; the override reverts by itself once its time is up (checked against the
//! injected clock on every read).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use breeze_agent_proto::{LogEntry, LogLevel};
use breeze_core::{Clock, Timestamp};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Entries kept while they wait to be shipped.
pub const LOG_BUFFER_CAPACITY: usize = 1_000;
/// The shipped level when nothing overrides it.
pub const DEFAULT_SHIP_LEVEL: LogLevel = LogLevel::Warn;

#[derive(Debug)]
struct State {
    /// The level shipped without an override: the policy's (`agent_log`), else the default.
    base: LogLevel,
    override_: Option<(LogLevel, Timestamp)>,
    entries: VecDeque<LogEntry>,
    dropped: u64,
}

/// The shipping level (with its temporary override) and the buffer of captured entries.
pub struct LogControl {
    clock: Arc<dyn Clock>,
    /// The base level when no policy sets one.
    default_base: LogLevel,
    state: Mutex<State>,
}

impl std::fmt::Debug for LogControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogControl")
            .field("default_base", &self.default_base)
            .finish_non_exhaustive()
    }
}

impl LogControl {
    /// Shipping at `base` level, time read from `clock`.
    pub fn new(clock: Arc<dyn Clock>, base: LogLevel) -> LogControl {
        LogControl {
            clock,
            default_base: base,
            state: Mutex::new(State {
                base,
                override_: None,
                entries: VecDeque::new(),
                dropped: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The level shipped now: the override while it lasts, else the base level.
    pub fn current(&self) -> LogLevel {
        let now = self.clock.now();
        let mut state = self.lock();
        match state.override_ {
            Some((level, until)) if now < until => level,
            Some(_) => {
                state.override_ = None;
                state.base
            }
            None => state.base,
        }
    }

    /// Sets the base level (a configuration policy's `agent_log.level`); `None` goes back to
    /// the default. A temporary override still wins while it lasts.
    pub fn set_base(&self, level: Option<LogLevel>) {
        self.lock().base = level.unwrap_or(self.default_base);
    }

    /// The base level in effect (without the temporary override).
    pub fn base(&self) -> LogLevel {
        self.lock().base
    }

    /// Ships `level` for `minutes`, then reverts to the base level. Returns when it reverts.
    pub fn set_override(&self, level: LogLevel, minutes: u32) -> Timestamp {
        let until = self.clock.now() + chrono::Duration::minutes(i64::from(minutes));
        self.lock().override_ = Some((level, until));
        until
    }

    /// Buffers an entry if its level is shipped now.
    pub fn capture(&self, level: LogLevel, target: &str, message: String) {
        if level < self.current() {
            return;
        }
        let at = self.clock.now();
        let mut state = self.lock();
        if state.entries.len() >= LOG_BUFFER_CAPACITY {
            state.entries.pop_front();
            state.dropped += 1;
        }
        state.entries.push_back(LogEntry {
            at,
            level,
            target: target.to_owned(),
            message,
        });
    }

    /// Takes up to `max` of the oldest entries.
    pub fn take(&self, max: usize) -> Vec<LogEntry> {
        let mut state = self.lock();
        let n = max.min(state.entries.len());
        state.entries.drain(..n).collect()
    }

    /// Puts entries that could not be shipped back in front.
    pub fn restore(&self, entries: Vec<LogEntry>) {
        let mut state = self.lock();
        for entry in entries.into_iter().rev() {
            if state.entries.len() >= LOG_BUFFER_CAPACITY {
                state.dropped += 1;
                continue;
            }
            state.entries.push_front(entry);
        }
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Converts a tracing level to the wire level.
pub fn wire_level(level: &tracing::Level) -> LogLevel {
    match *level {
        tracing::Level::TRACE => LogLevel::Trace,
        tracing::Level::DEBUG => LogLevel::Debug,
        tracing::Level::INFO => LogLevel::Info,
        tracing::Level::WARN => LogLevel::Warn,
        _ => LogLevel::Error,
    }
}

/// The layer that feeds [`LogControl`] with the agent's own events (`breeze_agent*` targets).
#[derive(Debug, Clone)]
pub struct ShipLayer {
    control: Arc<LogControl>,
}

impl ShipLayer {
    pub fn new(control: Arc<LogControl>) -> ShipLayer {
        ShipLayer { control }
    }
}

impl<S: Subscriber> Layer<S> for ShipLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if !meta.target().starts_with("breeze_agent") {
            return;
        }
        let level = wire_level(meta.level());
        if level < self.control.current() {
            return;
        }
        let mut visitor = MessageVisitor::default();
        event.record(&mut visitor);
        self.control.capture(level, meta.target(), visitor.finish());
    }
}

#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
}

impl MessageVisitor {
    fn finish(self) -> String {
        if self.fields.is_empty() {
            self.message
        } else {
            format!("{}{}", self.message, self.fields)
        }
    }
}

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else if field.name().contains("token") {
            let _ = write!(self.fields, " {}=<redacted>", field.name());
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else if field.name().contains("token") {
            let _ = write!(self.fields, " {}=<redacted>", field.name());
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use breeze_core::ManualClock;
    use chrono::TimeZone;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn override_reverts_by_itself() {
        let start = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let clock = ManualClock::new(start);
        let control = LogControl::new(Arc::new(clock.clone()), LogLevel::Warn);
        assert_eq!(control.current(), LogLevel::Warn);
        let until = control.set_override(LogLevel::Debug, 10);
        assert_eq!(until, start + chrono::Duration::minutes(10));
        assert_eq!(control.current(), LogLevel::Debug);
        clock.advance(chrono::Duration::minutes(9));
        assert_eq!(control.current(), LogLevel::Debug);
        clock.advance(chrono::Duration::minutes(1));
        assert_eq!(control.current(), LogLevel::Warn);
    }

    #[test]
    fn layer_captures_at_the_shipping_level() {
        let clock = ManualClock::new(chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
        let control = Arc::new(LogControl::new(Arc::new(clock), LogLevel::Warn));
        let subscriber = tracing_subscriber::registry().with(ShipLayer::new(control.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not shipped");
            tracing::warn!(token = "brz_secret", attempt = 3, "shipped");
            control.set_override(LogLevel::Info, 5);
            tracing::info!("now shipped");
        });
        let entries = control.take(10);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].level, LogLevel::Warn);
        assert!(entries[0].message.starts_with("shipped"));
        assert!(entries[0].message.contains("attempt=3"));
        assert!(!entries[0].message.contains("brz_secret"));
        assert_eq!(entries[1].message, "now shipped");
        assert!(entries[0].target.starts_with("breeze_agent"));
    }
}
