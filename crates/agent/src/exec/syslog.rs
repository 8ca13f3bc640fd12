//! `QueryLogs`: journald through `journalctl -o json` where it works, else the tail of
//! `/var/log/syslog` or `/var/log/messages`, filtered here.

use std::io::{Read, Seek, SeekFrom};
use std::process::{Command, Stdio};

use breeze_core::{Clock, Timestamp};
use chrono::{Datelike, NaiveDateTime, TimeZone};
use serde_json::{Value, json};

use super::Typed;

/// Most lines one query returns.
pub const MAX_LINES: u32 = 10_000;
/// How much of a plain log file's end is read.
const TAIL_BYTES: u64 = 8 * 1024 * 1024;

/// `{"source","lines":[{at,unit,priority,message}]}`.
pub fn query(
    clock: &dyn Clock,
    pattern: Option<&str>,
    unit: Option<&str>,
    since_minutes: u32,
    limit: u32,
) -> Typed {
    let limit = if limit == 0 {
        100
    } else {
        limit.min(MAX_LINES)
    };
    let pattern = pattern.filter(|p| !p.is_empty());
    let unit = unit.filter(|u| !u.is_empty());
    if let Some(lines) = journal(pattern, unit, since_minutes, limit)? {
        return Ok(json!({ "source": "journald", "lines": lines }));
    }
    for path in ["/var/log/syslog", "/var/log/messages"] {
        if let Ok(text) = tail(path) {
            let since = clock.now() - chrono::Duration::minutes(i64::from(since_minutes));
            let lines = filter_plain(&text, clock.now(), since, pattern, unit, limit);
            return Ok(json!({ "source": path, "lines": lines }));
        }
    }
    Err("no system log is available: journalctl does not work here and neither /var/log/syslog nor /var/log/messages exists".to_owned())
}

/// Lines from journald, or `None` when journald is not usable here.
fn journal(
    pattern: Option<&str>,
    unit: Option<&str>,
    since_minutes: u32,
    limit: u32,
) -> Result<Option<Vec<Value>>, String> {
    if let Some(u) = unit
        && u.starts_with('-')
    {
        return Err(format!("{u:?} is not a valid unit name"));
    }
    let run = |with_grep: bool| {
        let mut cmd = Command::new("journalctl");
        cmd.args(["-o", "json", "--no-pager", "-q"])
            .arg(format!("--since=-{since_minutes}min"))
            .arg(format!("-n{limit}"));
        if let Some(u) = unit {
            cmd.arg(format!("--unit={u}"));
        }
        if let (true, Some(p)) = (with_grep, pattern) {
            cmd.arg(format!("--grep={p}"));
        }
        cmd.stdin(Stdio::null()).output()
    };
    let Ok(mut out) = run(true) else {
        return Ok(None);
    };
    let mut filter_here = false;
    if !out.status.success() && pattern.is_some() {
        // Builds without PCRE2 refuse --grep; filter the lines ourselves.
        match run(false) {
            Ok(o) => {
                out = o;
                filter_here = true;
            }
            Err(_) => return Ok(None),
        }
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // journalctl exits 1 with "No entries" when a --grep matched nothing.
    if !out.status.success() && !stderr.contains("No entries") {
        return Ok(None);
    }
    if out.stdout.is_empty() && stderr.contains("No journal files") {
        return Ok(None);
    }
    let needle = pattern.map(str::to_lowercase);
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|entry| journal_line(&entry))
        .filter(|line| {
            !filter_here
                || needle.as_ref().is_none_or(|n| {
                    line["message"]
                        .as_str()
                        .is_some_and(|m| m.to_lowercase().contains(n))
                })
        })
        .collect();
    Ok(Some(lines))
}

fn journal_line(entry: &Value) -> Value {
    let at = entry
        .get("__REALTIME_TIMESTAMP")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(chrono::DateTime::from_timestamp_micros);
    let unit = entry
        .get("_SYSTEMD_UNIT")
        .or_else(|| entry.get("SYSLOG_IDENTIFIER"))
        .and_then(Value::as_str);
    let priority = entry
        .get("PRIORITY")
        .and_then(Value::as_str)
        .and_then(|p| p.parse::<u8>().ok());
    let message = match entry.get("MESSAGE") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(bytes)) => {
            let raw: Vec<u8> = bytes
                .iter()
                .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect();
            String::from_utf8_lossy(&raw).into_owned()
        }
        _ => String::new(),
    };
    json!({ "at": at, "unit": unit, "priority": priority, "message": message })
}

fn tail(path: &str) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0
        && let Some(nl) = text.find('\n')
    {
        text.drain(..=nl);
    }
    Ok(text)
}

/// Parses one syslog line: RFC 3339 (`2024-05-01T10:00:00.1+00:00 host prog[1]: msg`) or BSD
/// (`May  1 10:00:00 host prog[1]: msg`, local time, year of `now`).
pub fn parse_syslog_line(
    line: &str,
    now: Timestamp,
) -> (Option<Timestamp>, Option<String>, String) {
    let (at, rest) = if let Some((first, rest)) = line.split_once(' ') {
        match chrono::DateTime::parse_from_rfc3339(first) {
            Ok(t) => (Some(t.with_timezone(&chrono::Utc)), rest),
            Err(_) => bsd_time(line, now),
        }
    } else {
        (None, line)
    };
    // rest = "host prog[pid]: message"
    let rest = rest.trim_start();
    let after_host = rest.split_once(' ').map(|x| x.1).unwrap_or(rest);
    match after_host.split_once(": ") {
        Some((tag, message)) if !tag.contains(' ') => {
            let program = tag.split('[').next().unwrap_or(tag).to_owned();
            (at, Some(program), message.to_owned())
        }
        _ => (at, None, after_host.to_owned()),
    }
}

fn bsd_time(line: &str, now: Timestamp) -> (Option<Timestamp>, &str) {
    if line.len() < 16 || !line.is_char_boundary(15) {
        return (None, line);
    }
    let (stamp, rest) = line.split_at(15);
    let with_year = format!(
        "{} {}",
        now.year(),
        stamp.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    let at = NaiveDateTime::parse_from_str(&with_year, "%Y %b %d %H:%M:%S")
        .ok()
        .and_then(|naive| chrono::Local.from_local_datetime(&naive).earliest())
        .map(|t| t.with_timezone(&chrono::Utc));
    match at {
        Some(t) => (Some(t), rest),
        None => (None, line),
    }
}

fn filter_plain(
    text: &str,
    now: Timestamp,
    since: Timestamp,
    pattern: Option<&str>,
    unit: Option<&str>,
    limit: u32,
) -> Vec<Value> {
    let needle = pattern.map(str::to_lowercase);
    let unit = unit.map(|u| u.trim_end_matches(".service"));
    let mut out: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|line| {
            let (at, program, message) = parse_syslog_line(line, now);
            if at.is_some_and(|t| t < since) {
                return None;
            }
            if let Some(u) = unit
                && program.as_deref() != Some(u)
            {
                return None;
            }
            if let Some(n) = &needle
                && !line.to_lowercase().contains(n)
            {
                return None;
            }
            Some(json!({ "at": at, "unit": program, "priority": Value::Null, "message": message }))
        })
        .collect();
    let keep = limit as usize;
    if out.len() > keep {
        out.drain(..out.len() - keep);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[test]
    fn plain_log_lines_filter() {
        let now = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();
        let text = "2026-05-01T11:59:00.000+00:00 box sshd[10]: Accepted key for alice\n\
                    2026-05-01T11:00:00+00:00 box sshd[11]: old line\n\
                    2026-05-01T11:59:30+00:00 box cron[12]: (root) CMD run\n";
        let since = now - chrono::Duration::minutes(5);
        let lines = filter_plain(text, now, since, None, Some("sshd.service"), 10);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["unit"], "sshd");
        assert_eq!(lines[0]["message"], "Accepted key for alice");
        let lines = filter_plain(text, now, since, Some("CMD"), None, 10);
        assert_eq!(lines.len(), 1);
        let lines = filter_plain(text, now, since, None, None, 1);
        assert_eq!(lines[0]["unit"], "cron");
        let (at, program, msg) = parse_syslog_line("May  1 11:58:00 box kernel: hello", now);
        assert!(at.is_some());
        assert_eq!(program.as_deref(), Some("kernel"));
        assert_eq!(msg, "hello");
    }

    #[test]
    fn journal_lines() {
        let entry = json!({"__REALTIME_TIMESTAMP":"1714564800000000","_SYSTEMD_UNIT":"ssh.service","PRIORITY":"6","MESSAGE":[104,105]});
        let line = journal_line(&entry);
        assert_eq!(line["unit"], "ssh.service");
        assert_eq!(line["priority"], 6);
        assert_eq!(line["message"], "hi");
    }
}
