//! Log watches: the agent tails log files named in its config file and turns each line that
//! contains one of a watch's patterns into an event (source `log_watch`, kind the watch's
//! name) for the server's event alert rules.
//!
//! Why polling rather than inotify: it needs nothing of the platform, survives the file being
//! absent at start, and a one-second delay is far below any rule's window. Each poll checks
//! the path's identity (device and inode): a rename or deletion (logrotate's default) drains
//! the old file to its end, then the new file is read from its start; a file shorter than the
//! position read (logrotate's `copytruncate`) is read again from its start. A watch starts at
//! the end of a file that exists when the agent starts (old lines are history, not news), and at
//! the start of one that appears later. Lines longer than [`MAX_LINE_BYTES`] are cut; a poll
//! reads at most [`MAX_READ_PER_POLL`], so a burst is spread over polls rather than held in
//! memory. Events are rate-limited per watch (`maxPerMinute`): lines past the limit are
//! counted, and the count goes out as one summary event when the minute ends.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use breeze_agent_proto::{AgentEvent, EVENT_SOURCE_LOG_WATCH, EventSeverity};
use breeze_core::Clock;
use serde::{Deserialize, Serialize};

/// Lines longer than this are cut (the rest, up to the newline, is skipped).
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// The most one poll reads from a file.
pub const MAX_READ_PER_POLL: u64 = 1024 * 1024;
/// How often a watched file is looked at.
pub const POLL_EVERY: Duration = Duration::from_secs(1);
/// The most watches a config file may name, and patterns per watch.
pub const MAX_WATCHES: usize = 32;
pub const MAX_PATTERNS: usize = 32;

/// One watched file, as the config file's `logWatches` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogWatch {
    /// The events' kind: 1–64 ASCII letters, digits, `_`, `-`, `.`, `:`.
    pub name: String,
    pub path: PathBuf,
    /// Substrings; a line containing any of them is an event.
    pub patterns: Vec<String>,
    /// Compare ignoring case.
    #[serde(default)]
    pub ignore_case: bool,
    #[serde(default = "default_severity")]
    pub severity: EventSeverity,
    /// The most events a minute (further matching lines are counted, not sent).
    #[serde(default = "default_rate")]
    pub max_per_minute: u32,
}

fn default_severity() -> EventSeverity {
    EventSeverity::Medium
}

fn default_rate() -> u32 {
    30
}

impl LogWatch {
    /// Checks the watch; the error names the watch and the field.
    pub fn validate(&self) -> Result<(), String> {
        if !breeze_core::is_event_name(&self.name) {
            return Err(format!(
                "log watch {:?}: name must be 1-64 ASCII letters, digits, '_', '-', '.', ':'",
                self.name
            ));
        }
        if !self.path.is_absolute() {
            return Err(format!(
                "log watch {:?}: path {} is not absolute",
                self.name,
                self.path.display()
            ));
        }
        if self.patterns.is_empty() || self.patterns.len() > MAX_PATTERNS {
            return Err(format!(
                "log watch {:?}: patterns needs 1-{MAX_PATTERNS} entries",
                self.name
            ));
        }
        if self.patterns.iter().any(|p| p.is_empty() || p.len() > 200) {
            return Err(format!(
                "log watch {:?}: a pattern is empty or longer than 200 bytes",
                self.name
            ));
        }
        if self.max_per_minute == 0 || self.max_per_minute > 600 {
            return Err(format!(
                "log watch {:?}: maxPerMinute must lie in 1-600",
                self.name
            ));
        }
        Ok(())
    }
}

/// Checks a config file's watches: each valid, names unique, at most [`MAX_WATCHES`].
pub fn validate_all(watches: &[LogWatch]) -> Result<(), String> {
    if watches.len() > MAX_WATCHES {
        return Err(format!("at most {MAX_WATCHES} log watches"));
    }
    for (i, w) in watches.iter().enumerate() {
        w.validate()?;
        if watches[..i].iter().any(|o| o.name == w.name) {
            return Err(format!("two log watches are named {:?}", w.name));
        }
    }
    Ok(())
}

/// A rotation-safe reader of the complete lines appended to one path.
#[derive(Debug)]
pub struct Tail {
    path: PathBuf,
    file: Option<File>,
    /// The open file's device and inode.
    identity: Option<(u64, u64)>,
    offset: u64,
    partial: Vec<u8>,
    /// Skipping the rest of a line that was cut.
    skipping: bool,
    /// The first poll happened: files found from now on are read from their start.
    started: bool,
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn identity(_meta: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

impl Tail {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: None,
            identity: None,
            offset: 0,
            partial: Vec::new(),
            skipping: false,
            started: false,
        }
    }

    /// The complete lines appended since the last poll (a line still being written waits for
    /// its newline, except in a file rotated away, whose last line counts as it is).
    pub fn poll(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let current = std::fs::metadata(&self.path).ok();
        let current_id = current.as_ref().map(identity);
        if self.file.is_some() && current_id != self.identity {
            // Rotated away or deleted: what was appended before is still news.
            self.read_available(&mut lines);
            self.flush_partial(&mut lines);
            self.file = None;
            self.identity = None;
        }
        if self.file.is_none()
            && let Some(meta) = &current
            && let Ok(mut file) = File::open(&self.path)
        {
            self.offset = if self.started { 0 } else { meta.len() };
            if file.seek(SeekFrom::Start(self.offset)).is_ok() {
                self.file = Some(file);
                self.identity = current_id;
                self.partial.clear();
                self.skipping = false;
            }
        }
        self.started = true;
        if self.file.is_some()
            && let Some(meta) = &current
            && meta.len() < self.offset
        {
            // Truncated in place: start over.
            if let Some(file) = &mut self.file
                && file.seek(SeekFrom::Start(0)).is_ok()
            {
                self.offset = 0;
                self.partial.clear();
                self.skipping = false;
            }
        }
        self.read_available(&mut lines);
        lines
    }

    fn read_available(&mut self, lines: &mut Vec<String>) {
        let Some(file) = &mut self.file else { return };
        let mut buf = Vec::new();
        match file.take(MAX_READ_PER_POLL).read_to_end(&mut buf) {
            Ok(n) => self.offset += n as u64,
            Err(e) => {
                tracing::debug!(path = %self.path.display(), error = %e, "log watch read failed");
                return;
            }
        }
        let mut rest = &buf[..];
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            self.take_bytes(&rest[..nl]);
            lines.push(finish(&mut self.partial));
            self.skipping = false;
            rest = &rest[nl + 1..];
        }
        self.take_bytes(rest);
    }

    /// Appends to the line being built, up to [`MAX_LINE_BYTES`].
    fn take_bytes(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        let room = MAX_LINE_BYTES.saturating_sub(self.partial.len());
        if bytes.len() > room {
            self.partial.extend_from_slice(&bytes[..room]);
            self.skipping = true;
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }

    fn flush_partial(&mut self, lines: &mut Vec<String>) {
        if !self.partial.is_empty() {
            lines.push(finish(&mut self.partial));
        }
        self.skipping = false;
    }
}

fn finish(partial: &mut Vec<u8>) -> String {
    let line = String::from_utf8_lossy(partial)
        .trim_end_matches('\r')
        .to_owned();
    partial.clear();
    line
}

/// A watch's matching, rate limit and event building.
#[derive(Debug)]
pub struct Watcher {
    watch: LogWatch,
    lowered: Vec<String>,
    tail: Tail,
    window_start: Instant,
    sent: u32,
    dropped: u32,
}

impl Watcher {
    pub fn new(watch: LogWatch) -> Self {
        let lowered = watch.patterns.iter().map(|p| p.to_lowercase()).collect();
        Self {
            tail: Tail::new(watch.path.clone()),
            watch,
            lowered,
            window_start: Instant::now(),
            sent: 0,
            dropped: 0,
        }
    }

    /// The pattern a line contains, if any.
    fn matching(&self, line: &str) -> Option<&str> {
        if self.watch.ignore_case {
            let lower = line.to_lowercase();
            self.lowered
                .iter()
                .position(|p| lower.contains(p.as_str()))
                .map(|i| self.watch.patterns[i].as_str())
        } else {
            self.watch
                .patterns
                .iter()
                .find(|p| line.contains(p.as_str()))
                .map(String::as_str)
        }
    }

    fn event(&self, clock: &dyn Clock, message: String, extra: &[(&str, String)]) -> AgentEvent {
        let mut attributes = BTreeMap::new();
        attributes.insert("path".to_owned(), self.watch.path.display().to_string());
        for (k, v) in extra {
            attributes.insert((*k).to_owned(), v.clone());
        }
        AgentEvent {
            at: clock.now(),
            source: EVENT_SOURCE_LOG_WATCH.to_owned(),
            kind: self.watch.name.clone(),
            severity: self.watch.severity,
            message,
            attributes,
        }
    }

    /// Reads what was appended and returns the events it makes (with a summary of lines the
    /// rate limit held back once their minute is over).
    pub fn poll(&mut self, clock: &dyn Clock, now: Instant) -> Vec<AgentEvent> {
        let mut events = Vec::new();
        if now.duration_since(self.window_start) >= Duration::from_secs(60) {
            if self.dropped > 0 {
                let message = format!(
                    "{} more matching lines in {} were not reported (limit {} a minute)",
                    self.dropped,
                    self.watch.path.display(),
                    self.watch.max_per_minute
                );
                events.push(self.event(clock, message, &[("dropped", self.dropped.to_string())]));
            }
            self.window_start = now;
            self.sent = 0;
            self.dropped = 0;
        }
        for line in self.tail.poll() {
            let Some(pattern) = self.matching(&line).map(str::to_owned) else {
                continue;
            };
            if self.sent >= self.watch.max_per_minute {
                self.dropped += 1;
                continue;
            }
            self.sent += 1;
            events.push(self.event(clock, line, &[("pattern", pattern)]));
        }
        events
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code
mod tests {
    use std::io::Write;

    use super::*;

    fn append(path: &std::path::Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn tails_new_lines_across_rotation_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.log");
        append(&path, "old line\n");
        let mut tail = Tail::new(path.clone());
        assert!(tail.poll().is_empty(), "history is not news");
        append(&path, "one\ntw");
        assert_eq!(tail.poll(), vec!["one"]);
        append(&path, "o\r\n");
        assert_eq!(tail.poll(), vec!["two"]);
        // logrotate: rename, then a new file; the old file's last lines still count.
        append(&path, "three\nfour");
        std::fs::rename(&path, dir.path().join("app.log.1")).unwrap();
        append(&path, "five\n");
        assert_eq!(tail.poll(), vec!["three", "four", "five"]);
        // copytruncate: the same file, shorter.
        std::fs::write(&path, "").unwrap();
        assert!(tail.poll().is_empty());
        append(&path, "six\n");
        assert_eq!(tail.poll(), vec!["six"]);
        // Deleted, then created again later: read from its start.
        std::fs::remove_file(&path).unwrap();
        assert!(tail.poll().is_empty());
        append(&path, "seven\n");
        assert_eq!(tail.poll(), vec!["seven"]);
    }

    #[test]
    fn a_missing_file_is_read_from_its_start_once_it_appears() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("later.log");
        let mut tail = Tail::new(path.clone());
        assert!(tail.poll().is_empty());
        append(&path, "first\n");
        assert_eq!(tail.poll(), vec!["first"]);
    }

    #[test]
    fn long_lines_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.log");
        std::fs::write(&path, "").unwrap();
        let mut tail = Tail::new(path.clone());
        tail.poll();
        append(
            &path,
            &format!("{}\nshort\n", "x".repeat(MAX_LINE_BYTES * 2)),
        );
        let lines = tail.poll();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), MAX_LINE_BYTES);
        assert_eq!(lines[1], "short");
    }

    #[test]
    fn matching_lines_become_events_within_the_rate_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sys.log");
        std::fs::write(&path, "").unwrap();
        let watch = LogWatch {
            name: "disk".into(),
            path: path.clone(),
            patterns: vec!["I/O error".into(), "FAILED".into()],
            ignore_case: true,
            severity: EventSeverity::High,
            max_per_minute: 2,
        };
        watch.validate().unwrap();
        let clock = breeze_core::SystemClock;
        let mut w = Watcher::new(watch);
        let start = Instant::now();
        assert!(w.poll(&clock, start).is_empty());
        append(
            &path,
            "ok\nsda: i/o error\nsdb: Failed\nsdc: failed\nfine\n",
        );
        let events = w.poll(&clock, start);
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].message, "sda: i/o error");
        assert_eq!(events[0].kind, "disk");
        assert_eq!(events[0].source, "log_watch");
        assert_eq!(events[0].attributes["pattern"], "I/O error");
        let later = w.poll(&clock, start + Duration::from_secs(61));
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].attributes["dropped"], "1");
    }

    #[test]
    fn watches_are_validated_with_their_names() {
        let mut w = LogWatch {
            name: "bad name".into(),
            path: "/var/log/syslog".into(),
            patterns: vec!["x".into()],
            ignore_case: false,
            severity: EventSeverity::Low,
            max_per_minute: 10,
        };
        assert!(w.validate().unwrap_err().contains("name"));
        w.name = "ok".into();
        w.path = "relative.log".into();
        assert!(w.validate().unwrap_err().contains("not absolute"));
        w.path = "/var/log/syslog".into();
        assert!(validate_all(&[w.clone(), w]).unwrap_err().contains("two"));
    }
}
