//! Automations' vocabulary: what starts one (a cron schedule in an IANA time zone, an alert, a
//! person), what it does, and how a run ended. Pure: the schedule is computed here, the worker
//! and the store decide when to ask.
//!
//! A schedule is a standard five-field cron expression (minute, hour, day of month, month, day
//! of week; `0`–`6` or `SUN`–`SAT`, `7` is Sunday too; ranges, lists, steps and names), read in
//! its time zone with `croner`: `0 2 * * *` in `Europe/Berlin` is 02:00 local time every day,
//! across daylight-saving changes (a time skipped by the spring change fires at the first
//! local time after it, one repeated in the autumn once).
//!
//! **Missed runs.** A schedule that came due while no instance ran (or ran late) fires at most
//! once when the worker sees it: for the latest occurrence at or before now, provided that one
//! is at most [`CATCH_UP`] old; every older missed occurrence is skipped (recorded as one
//! `skipped` run that counts them), and the next run is the first occurrence after now.

use chrono::Duration;
use chrono_tz::Tz;
use croner::{
    Cron,
    parser::{CronParser, Seconds},
};

use crate::{Timestamp, maintenance::parse_time_zone, string_enum};

/// How late a scheduled run may still fire (one catch-up run at most; older ones are skipped).
pub const CATCH_UP: Duration = Duration::hours(1);

/// The most missed occurrences counted when a late schedule is skipped.
const MAX_COUNTED: usize = 10_000;

string_enum! {
    /// What starts an automation.
    pub enum AutomationTrigger: "automation trigger" {
        /// A cron schedule in a time zone.
        Schedule = "schedule",
        /// An alert raised by a rule (one rule, or any rule at or above a severity).
        Alert = "alert",
        /// Only a person's or client's `run`.
        Manual = "manual",
    }
}

string_enum! {
    /// What an automation does.
    pub enum AutomationAction: "automation action" {
        /// Run a library script on the target's devices (through the Tier 3 rules of `run_script`).
        RunScript = "run_script",
        /// Send a message to a notification channel.
        Notify = "notify",
        /// Open a ticket (refused until tickets exist).
        CreateTicket = "create_ticket",
    }
}

string_enum! {
    /// Where a run is, or how it ended.
    pub enum RunStatus: "automation run status" {
        /// Waiting for the worker.
        Queued = "queued",
        Running = "running",
        /// Its script run waits for a person's approval (the run names the request).
        PendingApproval = "pending_approval",
        /// Every device (or the notification) succeeded.
        Succeeded = "succeeded",
        /// Some devices succeeded, some did not.
        Partial = "partial",
        Failed = "failed",
        /// The guard or the approval refused the script run; nothing ran.
        Refused = "refused",
        /// Every target device was under maintenance; nothing ran.
        Suppressed = "suppressed",
        /// A schedule missed beyond the catch-up window; nothing ran.
        Skipped = "skipped",
    }
}

string_enum! {
    /// Where one device's part of a script run (an automation's, a remediation's, a
    /// deployment's) is, or how it ended: the device command's own status once one was sent,
    /// else why none was.
    #[derive(Default)]
    pub enum DeviceOutcomeStatus: "device outcome status" {
        /// The command is queued; no agent has it yet.
        Pending = "pending",
        /// Handed to the agent.
        Sent = "sent",
        /// The agent started it.
        Running = "running",
        /// The script ran to its end (its exit code says how it went).
        Completed = "completed",
        Failed = "failed",
        TimedOut = "timed_out",
        Cancelled = "cancelled",
        /// The device was offline: nothing was sent.
        Offline = "offline",
        /// No such device (or not this organization's).
        NotFound = "not_found",
        /// The guard or the approval refused the run; nothing ran.
        Refused = "refused",
        /// Waiting for a person's approval.
        PendingApproval = "pending_approval",
        /// Held back by a maintenance window.
        Suppressed = "suppressed",
        /// Beyond the most devices a run acts on.
        NotRun = "not_run",
        /// The answer named no status this server knows.
        #[default]
        Unknown = "unknown",
    }
}

impl RunStatus {
    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            RunStatus::Queued | RunStatus::Running | RunStatus::PendingApproval
        )
    }
}

/// A parsed schedule: a cron expression and its zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    cron: Cron,
    tz: Tz,
}

/// What a schedule that came due (at `due`) does when the worker sees it at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueRun {
    /// The occurrence to run now, if one is recent enough.
    pub fire: Option<Timestamp>,
    /// Occurrences at or before `now` that will not run.
    pub skipped: usize,
    /// The next occurrence after `now`.
    pub next: Option<Timestamp>,
}

impl CronSchedule {
    /// Parses a five-field expression (no seconds) in the IANA zone `time_zone`.
    pub fn parse(expression: &str, time_zone: &str) -> Result<Self, String> {
        let tz = parse_time_zone(time_zone)?;
        if expression.split_whitespace().count() != 5 {
            return Err(format!(
                "{expression:?} is not a five-field cron expression (minute hour day-of-month month day-of-week, e.g. \"0 2 * * 1-5\")"
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .build()
            .parse(expression)
            .map_err(|e| format!("{expression:?} is not a valid cron expression: {e}"))?;
        let schedule = Self { cron, tz };
        // An expression that never fires (e.g. 30 February) is refused now; whether it fires
        // does not depend on where the search starts.
        if schedule.next_after(Timestamp::UNIX_EPOCH).is_none() {
            return Err(format!("{expression:?} never fires"));
        }
        Ok(schedule)
    }

    /// The first occurrence strictly after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let local = t.with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|d| d.with_timezone(&chrono::Utc))
    }

    /// The schedule's answer for a run due at `due`, seen at `now` (see the module's rule).
    pub fn due(&self, due: Timestamp, now: Timestamp) -> DueRun {
        let mut latest = None;
        let mut count = 0usize;
        let mut t = Some(due);
        while let Some(at) = t {
            if at > now || count >= MAX_COUNTED {
                break;
            }
            latest = Some(at);
            count += 1;
            t = self.next_after(at);
        }
        let fire = latest.filter(|l| now - *l <= CATCH_UP);
        DueRun {
            skipped: count - usize::from(fire.is_some()),
            fire,
            next: self.next_after(now),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn five_fields_in_a_zone() {
        let s = CronSchedule::parse("0 2 * * *", "Europe/Berlin").unwrap();
        // 02:00 in Berlin is 01:00 UTC in winter.
        assert_eq!(
            s.next_after(at("2026-01-10T00:00:00Z")),
            Some(at("2026-01-10T01:00:00Z"))
        );
        // and 00:00 UTC in summer.
        assert_eq!(
            s.next_after(at("2026-07-10T03:00:00Z")),
            Some(at("2026-07-11T00:00:00Z"))
        );
        let weekdays = CronSchedule::parse("30 9 * * MON-FRI", "UTC").unwrap();
        // 2026-01-10 is a Saturday.
        assert_eq!(
            weekdays.next_after(at("2026-01-10T00:00:00Z")),
            Some(at("2026-01-12T09:30:00Z"))
        );
    }

    #[test]
    fn bad_expressions_name_the_problem() {
        for (expr, tz, needle) in [
            ("* * * *", "UTC", "five-field"),
            ("0 0 * * * *", "UTC", "five-field"),
            ("61 * * * *", "UTC", "not a valid"),
            ("0 0 * * *", "Mars/Base", "IANA"),
            ("0 0 30 2 *", "UTC", "never"),
        ] {
            let e = CronSchedule::parse(expr, tz).unwrap_err();
            assert!(e.contains(needle), "{expr}: {e}");
        }
    }

    #[test]
    fn at_most_one_catch_up_run() {
        let hourly = CronSchedule::parse("0 * * * *", "UTC").unwrap();
        // On time: fires the due occurrence.
        let d = hourly.due(at("2026-01-10T10:00:00Z"), at("2026-01-10T10:00:05Z"));
        assert_eq!(d.fire, Some(at("2026-01-10T10:00:00Z")));
        assert_eq!(d.skipped, 0);
        assert_eq!(d.next, Some(at("2026-01-10T11:00:00Z")));
        // Down for five hours: the latest occurrence fires once, four are skipped.
        let d = hourly.due(at("2026-01-10T05:00:00Z"), at("2026-01-10T10:20:00Z"));
        assert_eq!(d.fire, Some(at("2026-01-10T10:00:00Z")));
        assert_eq!(d.skipped, 5);
        // A daily run missed by more than the catch-up window is skipped.
        let daily = CronSchedule::parse("0 2 * * *", "UTC").unwrap();
        let d = daily.due(at("2026-01-10T02:00:00Z"), at("2026-01-10T05:00:00Z"));
        assert_eq!(d.fire, None);
        assert_eq!(d.skipped, 1);
        assert_eq!(d.next, Some(at("2026-01-11T02:00:00Z")));
    }
}
