//! Maintenance windows' schedules: when a window is open.
//!
//! A window is either one-off (two instants) or weekly: on the listed weekdays, from a local
//! start time, for a duration, in an IANA time zone. Local times are resolved in the zone on
//! each day, so a window at 02:00 Europe/Berlin stays at 02:00 across daylight-saving changes;
//! a start that falls in a spring-forward gap begins at the first local time after it, and one
//! that occurs twice in the autumn begins at the first. An occurrence may run past midnight
//! (and past the next weekday), up to a week.

use chrono::{Datelike, Duration, LocalResult, NaiveDate, NaiveTime, TimeZone, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// The longest occurrence of a weekly window (a week) in minutes.
pub const MAX_WEEKLY_MINUTES: u32 = 7 * 24 * 60;
/// The longest one-off window (31 days).
pub const MAX_ONCE_DAYS: i64 = 31;

/// When a maintenance window is open, as stored (JSON) with the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MaintenanceSchedule {
    /// Open from `starts_at` until `ends_at` (exclusive), once.
    #[serde(rename_all = "camelCase")]
    Once {
        starts_at: Timestamp,
        ends_at: Timestamp,
    },
    /// Open on each of `days` from the local `start_time` for `duration_minutes`.
    #[serde(rename_all = "camelCase")]
    Weekly {
        /// Three-letter English names (`mon` … `sun`), each at most once.
        days: Vec<DayOfWeek>,
        /// Local wall-clock time, `HH:MM`.
        #[serde(with = "hhmm")]
        start_time: NaiveTime,
        duration_minutes: u32,
    },
}

/// A weekday as written in schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DayOfWeek {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl DayOfWeek {
    /// The chrono weekday.
    pub fn weekday(self) -> Weekday {
        match self {
            DayOfWeek::Mon => Weekday::Mon,
            DayOfWeek::Tue => Weekday::Tue,
            DayOfWeek::Wed => Weekday::Wed,
            DayOfWeek::Thu => Weekday::Thu,
            DayOfWeek::Fri => Weekday::Fri,
            DayOfWeek::Sat => Weekday::Sat,
            DayOfWeek::Sun => Weekday::Sun,
        }
    }
}

/// One opening of a window: `[starts_at, ends_at)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Occurrence {
    pub starts_at: Timestamp,
    pub ends_at: Timestamp,
}

impl Occurrence {
    /// Whether `t` falls inside.
    pub fn contains(&self, t: Timestamp) -> bool {
        self.starts_at <= t && t < self.ends_at
    }
}

/// Parses an IANA time-zone name (`Europe/Berlin`, `UTC`).
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>()
        .map_err(|_| format!("{name:?} is not an IANA time zone (e.g. Europe/Berlin, UTC)"))
}

impl MaintenanceSchedule {
    /// Checks the schedule's own limits (the time zone is checked by [`parse_time_zone`]).
    pub fn validate(&self) -> Result<(), String> {
        match self {
            MaintenanceSchedule::Once { starts_at, ends_at } => {
                if ends_at <= starts_at {
                    return Err("endsAt must be after startsAt".into());
                }
                if *ends_at - *starts_at > Duration::days(MAX_ONCE_DAYS) {
                    return Err(format!(
                        "a one-off window lasts at most {MAX_ONCE_DAYS} days"
                    ));
                }
                Ok(())
            }
            MaintenanceSchedule::Weekly {
                days,
                duration_minutes,
                ..
            } => {
                if days.is_empty() {
                    return Err("a weekly window needs at least one day".into());
                }
                let mut sorted = days.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != days.len() {
                    return Err("a day is listed twice".into());
                }
                if *duration_minutes == 0 || *duration_minutes > MAX_WEEKLY_MINUTES {
                    return Err(format!("durationMinutes must be 1-{MAX_WEEKLY_MINUTES}"));
                }
                Ok(())
            }
        }
    }

    /// The occurrence open at `t`, if any.
    pub fn occurrence_at(&self, tz: Tz, t: Timestamp) -> Option<Occurrence> {
        match self {
            MaintenanceSchedule::Once { starts_at, ends_at } => {
                let o = Occurrence {
                    starts_at: *starts_at,
                    ends_at: *ends_at,
                };
                o.contains(t).then_some(o)
            }
            MaintenanceSchedule::Weekly { .. } => {
                // Newest first: the latest start at or before `t` decides.
                self.weekly_around(tz, t)
                    .into_iter()
                    .rev()
                    .find(|o| o.contains(t))
            }
        }
    }

    /// The occurrence open at `t`, or else the next one to begin after `t` (within a week for
    /// weekly windows; `None` once a one-off window is over).
    pub fn current_or_next(&self, tz: Tz, t: Timestamp) -> Option<Occurrence> {
        if let Some(o) = self.occurrence_at(tz, t) {
            return Some(o);
        }
        match self {
            MaintenanceSchedule::Once { starts_at, ends_at } => {
                (*starts_at > t).then_some(Occurrence {
                    starts_at: *starts_at,
                    ends_at: *ends_at,
                })
            }
            MaintenanceSchedule::Weekly { .. } => self
                .weekly_around(tz, t)
                .into_iter()
                .find(|o| o.starts_at > t),
        }
    }

    /// Every occurrence open at some time in `[from, to)`, in order of start: a one-off window
    /// once if it overlaps, a weekly one on each of its days (one already open at `from`
    /// included). For calendars; `to - from` is meant to be days or weeks, not years.
    pub fn occurrences_between(&self, tz: Tz, from: Timestamp, to: Timestamp) -> Vec<Occurrence> {
        let overlaps = |o: &Occurrence| o.starts_at < to && o.ends_at > from;
        match self {
            MaintenanceSchedule::Once { starts_at, ends_at } => {
                let o = Occurrence {
                    starts_at: *starts_at,
                    ends_at: *ends_at,
                };
                if overlaps(&o) { vec![o] } else { Vec::new() }
            }
            MaintenanceSchedule::Weekly {
                days,
                start_time,
                duration_minutes,
            } => {
                let first = from.with_timezone(&tz).date_naive();
                let last = to.with_timezone(&tz).date_naive();
                let back = i64::from(duration_minutes.div_ceil(24 * 60));
                let duration = Duration::minutes(i64::from(*duration_minutes));
                let span = (last - first).num_days().clamp(0, 400);
                (-back..=span)
                    .filter_map(|offset| first.checked_add_signed(Duration::days(offset)))
                    .filter(|d| days.iter().any(|w| w.weekday() == d.weekday()))
                    .filter_map(|d| local_instant(tz, d, *start_time))
                    .map(|starts_at| Occurrence {
                        starts_at,
                        ends_at: starts_at + duration,
                    })
                    .filter(overlaps)
                    .collect()
            }
        }
    }

    /// The weekly occurrences whose local start day lies from the longest duration before
    /// `t`'s local day to eight days after it, in order.
    fn weekly_around(&self, tz: Tz, t: Timestamp) -> Vec<Occurrence> {
        let MaintenanceSchedule::Weekly {
            days,
            start_time,
            duration_minutes,
        } = self
        else {
            return Vec::new();
        };
        let today = t.with_timezone(&tz).date_naive();
        let back = i64::from(duration_minutes.div_ceil(24 * 60));
        let duration = Duration::minutes(i64::from(*duration_minutes));
        (-back..=8)
            .filter_map(|offset| today.checked_add_signed(Duration::days(offset)))
            .filter(|d| days.iter().any(|w| w.weekday() == d.weekday()))
            .filter_map(|d| local_instant(tz, d, *start_time))
            .map(|starts_at| Occurrence {
                starts_at,
                ends_at: starts_at + duration,
            })
            .collect()
    }
}

/// The instant of a local date and time in `tz`: the earlier of two in a repeated hour, the
/// first valid local time after a skipped one.
fn local_instant(tz: Tz, date: NaiveDate, time: NaiveTime) -> Option<Timestamp> {
    let naive = date.and_time(time);
    for step in 0..=4 {
        let shifted = naive + Duration::minutes(30 * step);
        match tz.from_local_datetime(&shifted) {
            LocalResult::Single(t) => return Some(t.with_timezone(&chrono::Utc)),
            LocalResult::Ambiguous(first, _) => return Some(first.with_timezone(&chrono::Utc)),
            LocalResult::None => {}
        }
    }
    None
}

/// `HH:MM` (de)serialization of a local time.
mod hhmm {
    use chrono::NaiveTime;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &NaiveTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.format("%H:%M").to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NaiveTime, D::Error> {
        let raw = String::deserialize(d)?;
        super::parse_hhmm(&raw).map_err(serde::de::Error::custom)
    }
}

/// Parses a local time written `HH:MM` (24-hour).
pub fn parse_hhmm(raw: &str) -> Result<NaiveTime, String> {
    let bad = || format!("{raw:?} is not a time of day (HH:MM, 24-hour)");
    if raw.len() != 5 {
        return Err(bad());
    }
    NaiveTime::parse_from_str(raw, "%H:%M").map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn weekly(days: &[DayOfWeek], start: &str, minutes: u32) -> MaintenanceSchedule {
        MaintenanceSchedule::Weekly {
            days: days.to_vec(),
            start_time: parse_hhmm(start).unwrap(),
            duration_minutes: minutes,
        }
    }

    #[test]
    fn occurrences_between_expand_weekly_windows_and_keep_one_offs() {
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        let weekly = MaintenanceSchedule::Weekly {
            days: vec![DayOfWeek::Mon, DayOfWeek::Thu],
            start_time: NaiveTime::from_hms_opt(2, 0, 0).unwrap(),
            duration_minutes: 120,
        };
        let berlin = parse_time_zone("Europe/Berlin").unwrap();
        // Two weeks from Monday 2026-11-30 12:00 UTC: Thu 3, Mon 7, Thu 10, Mon 14 (02:00
        // Berlin = 01:00 UTC); Monday the 30th's window closed before noon.
        let got = weekly.occurrences_between(
            berlin,
            t("2026-11-30T12:00:00Z"),
            t("2026-12-14T12:00:00Z"),
        );
        let starts: Vec<String> = got.iter().map(|o| o.starts_at.to_rfc3339()).collect();
        assert_eq!(
            starts,
            [
                "2026-12-03T01:00:00+00:00",
                "2026-12-07T01:00:00+00:00",
                "2026-12-10T01:00:00+00:00",
                "2026-12-14T01:00:00+00:00",
            ]
        );
        // One open at `from` is included.
        let open = weekly.occurrences_between(
            berlin,
            t("2026-11-30T01:30:00Z"),
            t("2026-11-30T02:00:00Z"),
        );
        assert_eq!(open.len(), 1);
        let once = MaintenanceSchedule::Once {
            starts_at: t("2026-12-01T00:00:00Z"),
            ends_at: t("2026-12-01T04:00:00Z"),
        };
        assert_eq!(
            once.occurrences_between(berlin, t("2026-11-30T00:00:00Z"), t("2026-12-02T00:00:00Z"))
                .len(),
            1
        );
        assert!(
            once.occurrences_between(berlin, t("2026-12-02T00:00:00Z"), t("2026-12-03T00:00:00Z"))
                .is_empty()
        );
    }

    #[test]
    fn one_off_windows_are_half_open() {
        let s = MaintenanceSchedule::Once {
            starts_at: at("2026-03-01T10:00:00Z"),
            ends_at: at("2026-03-01T12:00:00Z"),
        };
        let tz = parse_time_zone("UTC").unwrap();
        assert!(s.occurrence_at(tz, at("2026-03-01T09:59:59Z")).is_none());
        assert!(s.occurrence_at(tz, at("2026-03-01T10:00:00Z")).is_some());
        assert!(s.occurrence_at(tz, at("2026-03-01T12:00:00Z")).is_none());
        assert_eq!(
            s.current_or_next(tz, at("2026-02-01T00:00:00Z"))
                .unwrap()
                .starts_at,
            at("2026-03-01T10:00:00Z")
        );
        assert!(s.current_or_next(tz, at("2026-04-01T00:00:00Z")).is_none());
    }

    #[test]
    fn weekly_windows_follow_local_time_across_dst() {
        let berlin = parse_time_zone("Europe/Berlin").unwrap();
        let s = weekly(&[DayOfWeek::Sun], "02:30", 60);
        // 2026-03-29 is the spring-forward Sunday in Berlin: 02:30 does not exist, so the
        // window opens at 03:00 CEST (01:00 UTC).
        let o = s.occurrence_at(berlin, at("2026-03-29T01:10:00Z")).unwrap();
        assert_eq!(o.starts_at, at("2026-03-29T01:00:00Z"));
        // A winter Sunday: 02:30 CET is 01:30 UTC.
        assert!(
            s.occurrence_at(berlin, at("2026-01-04T01:29:00Z"))
                .is_none()
        );
        assert!(
            s.occurrence_at(berlin, at("2026-01-04T01:30:00Z"))
                .is_some()
        );
        // A summer Sunday: 02:30 CEST is 00:30 UTC.
        assert!(
            s.occurrence_at(berlin, at("2026-07-05T00:45:00Z"))
                .is_some()
        );
        assert!(
            s.occurrence_at(berlin, at("2026-07-05T01:30:00Z"))
                .is_none()
        );
        // Autumn: 02:30 happens twice on 2026-10-25; the first (CEST, 00:30 UTC) counts.
        let o = s.occurrence_at(berlin, at("2026-10-25T00:40:00Z")).unwrap();
        assert_eq!(o.starts_at, at("2026-10-25T00:30:00Z"));
        // Not on a Monday.
        assert!(
            s.occurrence_at(berlin, at("2026-07-06T00:45:00Z"))
                .is_none()
        );
    }

    #[test]
    fn weekly_windows_run_past_midnight_and_find_the_next() {
        let ny = parse_time_zone("America/New_York").unwrap();
        // Fridays 22:00 for 6 hours, New York (EST in January: UTC-5).
        let s = weekly(&[DayOfWeek::Fri], "22:00", 360);
        // Saturday 02:00 local = 07:00 UTC: still in Friday's occurrence.
        let o = s.occurrence_at(ny, at("2026-01-03T07:00:00Z")).unwrap();
        assert_eq!(o.starts_at, at("2026-01-03T03:00:00Z"));
        assert_eq!(o.ends_at, at("2026-01-03T09:00:00Z"));
        assert!(s.occurrence_at(ny, at("2026-01-03T09:00:00Z")).is_none());
        let next = s.current_or_next(ny, at("2026-01-03T09:00:00Z")).unwrap();
        assert_eq!(next.starts_at, at("2026-01-10T03:00:00Z"));
    }

    #[test]
    fn schedules_are_validated() {
        assert!(weekly(&[], "01:00", 60).validate().is_err());
        assert!(
            weekly(&[DayOfWeek::Mon, DayOfWeek::Mon], "01:00", 60)
                .validate()
                .is_err()
        );
        assert!(weekly(&[DayOfWeek::Mon], "01:00", 0).validate().is_err());
        assert!(
            weekly(&[DayOfWeek::Mon], "01:00", MAX_WEEKLY_MINUTES + 1)
                .validate()
                .is_err()
        );
        assert!(parse_hhmm("24:00").is_err());
        assert!(parse_hhmm("7:00").is_err());
        assert!(parse_time_zone("Mars/Olympus").is_err());
        let s = MaintenanceSchedule::Once {
            starts_at: at("2026-03-01T10:00:00Z"),
            ends_at: at("2026-03-01T10:00:00Z"),
        };
        assert!(s.validate().is_err());
        let json = serde_json::to_value(weekly(&[DayOfWeek::Sat], "23:15", 90)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "weekly", "days": ["sat"], "startTime": "23:15", "durationMinutes": 90})
        );
        let back: MaintenanceSchedule = serde_json::from_value(json).unwrap();
        assert_eq!(back, weekly(&[DayOfWeek::Sat], "23:15", 90));
    }
}
