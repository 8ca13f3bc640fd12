//! Heartbeat facts: uptime, a pending reboot, and who is logged in (utmp on Linux, `who`
//! output as a fallback).

use std::path::Path;

use breeze_agent_proto::UserSession;
use chrono::{DateTime, Utc};

/// Seconds since boot.
pub fn uptime_secs() -> u64 {
    sysinfo::System::uptime()
}

/// Whether the OS asks for a reboot (`/var/run/reboot-required` or `/run/reboot-required` on
/// Debian and Ubuntu).
pub fn pending_reboot() -> bool {
    ["/var/run/reboot-required", "/run/reboot-required"]
        .iter()
        .any(|p| Path::new(p).exists())
}

/// Logged-in user sessions, with how long each terminal has been idle.
pub fn logged_in_users() -> Vec<UserSession> {
    let mut sessions = 'found: {
        for path in ["/var/run/utmp", "/run/utmp"] {
            if let Ok(bytes) = std::fs::read(path) {
                break 'found parse_utmp(&bytes);
            }
        }
        match std::process::Command::new("who")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => parse_who(&String::from_utf8_lossy(&out.stdout)),
            _ => Vec::new(),
        }
    };
    for s in &mut sessions {
        s.idle_secs = s.terminal.as_deref().and_then(terminal_idle_secs);
    }
    sessions
}

/// Seconds since the terminal's last input: the age of its device's access time, as `who -u`
/// computes it.
fn terminal_idle_secs(line: &str) -> Option<u64> {
    if line.contains("..") || line.is_empty() {
        return None;
    }
    let accessed = std::fs::metadata(format!("/dev/{line}"))
        .ok()?
        .accessed()
        .ok()?;
    Some(accessed.elapsed().map_or(0, |d| d.as_secs()))
}

/// Size of one glibc `struct utmp` record on Linux (x86_64 and aarch64 alike).
pub const UTMP_RECORD: usize = 384;
const USER_PROCESS: i16 = 7;

/// Parses glibc's utmp file: `USER_PROCESS` records become sessions.
pub fn parse_utmp(bytes: &[u8]) -> Vec<UserSession> {
    bytes
        .chunks_exact(UTMP_RECORD)
        .filter_map(|rec| {
            let kind = i16::from_ne_bytes([rec[0], rec[1]]);
            if kind != USER_PROCESS {
                return None;
            }
            let line = c_string(&rec[8..40]);
            let user = c_string(&rec[44..76]);
            let host = c_string(&rec[76..332]);
            let secs = i32::from_ne_bytes([rec[340], rec[341], rec[342], rec[343]]);
            if user.is_empty() {
                return None;
            }
            Some(UserSession {
                username: user,
                terminal: (!line.is_empty()).then_some(line),
                host: (!host.is_empty()).then_some(host),
                login_at: DateTime::<Utc>::from_timestamp(i64::from(secs), 0),
                login_duration_secs: None,
                idle_secs: None,
            })
        })
        .collect()
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).trim().to_owned()
}

/// Parses `who` output: `user tty date time (host)`. The login time is local and is left out.
pub fn parse_who(text: &str) -> Vec<UserSession> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let username = fields.next()?.to_owned();
            let terminal = fields.next().map(str::to_owned);
            let host = line
                .rfind('(')
                .and_then(|start| line[start + 1..].split(')').next())
                .map(str::to_owned)
                .filter(|h| !h.is_empty());
            Some(UserSession {
                username,
                terminal,
                host,
                login_at: None,
                login_duration_secs: None,
                idle_secs: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: i16, user: &str, line: &str, host: &str, secs: i32) -> Vec<u8> {
        let mut rec = vec![0u8; UTMP_RECORD];
        rec[0..2].copy_from_slice(&kind.to_ne_bytes());
        rec[8..8 + line.len()].copy_from_slice(line.as_bytes());
        rec[44..44 + user.len()].copy_from_slice(user.as_bytes());
        rec[76..76 + host.len()].copy_from_slice(host.as_bytes());
        rec[340..344].copy_from_slice(&secs.to_ne_bytes());
        rec
    }

    #[test]
    fn utmp_user_processes_only() {
        let mut bytes = record(2, "reboot", "~", "", 1);
        bytes.extend(record(7, "alice", "pts/0", "10.0.0.9", 1_700_000_000));
        bytes.extend(record(8, "gone", "pts/1", "", 5));
        let sessions = parse_utmp(&bytes);
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].username, "alice");
        assert_eq!(sessions[0].terminal.as_deref(), Some("pts/0"));
        assert_eq!(sessions[0].host.as_deref(), Some("10.0.0.9"));
        assert_eq!(
            sessions[0].login_at.map(|t| t.timestamp()),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn who_output() {
        let sessions = parse_who(
            "alice    pts/0        2024-05-01 10:00 (192.168.1.2)\nbob      tty1         2024-05-01 09:00\n",
        );
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions[0].host.as_deref(), Some("192.168.1.2"));
        assert_eq!(sessions[1].terminal.as_deref(), Some("tty1"));
        assert_eq!(sessions[1].host, None);
        let _ = (uptime_secs(), pending_reboot(), logged_in_users());
    }
}
