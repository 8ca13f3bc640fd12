//! `ListServices` and `ServiceAction` through `systemctl`. Machines without a running systemd
//! (containers, other init systems) get a failed result that says so.

use std::path::Path;
use std::process::{Command, Stdio};

use breeze_agent_proto::ServiceActionKind;
use serde_json::{Value, json};

use super::Typed;

/// Whether systemd is the running init (the check `sd_booted` makes).
pub fn systemd_running() -> bool {
    cfg!(target_os = "linux") && Path::new("/run/systemd/system").is_dir()
}

fn require_systemd() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err(format!(
            "service management is not supported on {} yet",
            std::env::consts::OS
        ));
    }
    if !systemd_running() {
        return Err(
            "systemd is not running on this machine (no /run/systemd/system); services cannot be managed"
                .to_owned(),
        );
    }
    Ok(())
}

fn systemctl(args: &[&str]) -> Result<std::process::Output, String> {
    Command::new("systemctl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                "systemctl is not installed".to_owned()
            } else {
                format!("could not run systemctl: {e}")
            }
        })
}

/// `{"services":[{name,description,loadState,activeState,subState,enabled}]}`.
pub fn list() -> Typed {
    require_systemd()?;
    let enabled = unit_file_states();
    let json_out = systemctl(&[
        "list-units",
        "--type=service",
        "--all",
        "--output=json",
        "--no-pager",
    ])?;
    let mut services = if json_out.status.success() {
        serde_json::from_slice::<Vec<Value>>(&json_out.stdout)
            .ok()
            .map(|units| units.iter().filter_map(from_json_unit).collect::<Vec<_>>())
    } else {
        None
    };
    if services.is_none() {
        let plain = systemctl(&[
            "list-units",
            "--type=service",
            "--all",
            "--plain",
            "--no-legend",
            "--no-pager",
        ])?;
        if !plain.status.success() {
            return Err(format!(
                "systemctl list-units failed: {}",
                String::from_utf8_lossy(&plain.stderr).trim()
            ));
        }
        services = Some(parse_plain_units(&String::from_utf8_lossy(&plain.stdout)));
    }
    let services: Vec<Value> = services
        .unwrap_or_default()
        .into_iter()
        .map(|mut s| {
            let name = s["name"].as_str().unwrap_or_default().to_owned();
            s["enabled"] = enabled
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, state)| Value::Bool(is_enabled(state)))
                .unwrap_or(Value::Null);
            s
        })
        .collect();
    Ok(json!({ "services": services }))
}

fn from_json_unit(unit: &Value) -> Option<Value> {
    Some(json!({
        "name": unit.get("unit")?.as_str()?,
        "description": unit.get("description").and_then(Value::as_str).unwrap_or_default(),
        "loadState": unit.get("load").and_then(Value::as_str).unwrap_or_default(),
        "activeState": unit.get("active").and_then(Value::as_str).unwrap_or_default(),
        "subState": unit.get("sub").and_then(Value::as_str).unwrap_or_default(),
        "enabled": Value::Null,
    }))
}

/// Parses `systemctl list-units --plain --no-legend`: `unit load active sub description…`.
pub fn parse_plain_units(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start_matches(['●', '*', ' ']);
            let mut parts = line.split_whitespace();
            let name = parts.next()?;
            let load = parts.next()?;
            let active = parts.next()?;
            let sub = parts.next()?;
            let description = parts.collect::<Vec<_>>().join(" ");
            Some(json!({
                "name": name,
                "description": description,
                "loadState": load,
                "activeState": active,
                "subState": sub,
                "enabled": Value::Null,
            }))
        })
        .collect()
}

fn unit_file_states() -> Vec<(String, String)> {
    let Ok(out) = systemctl(&[
        "list-unit-files",
        "--type=service",
        "--plain",
        "--no-legend",
        "--no-pager",
    ]) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

fn is_enabled(state: &str) -> bool {
    matches!(state, "enabled" | "enabled-runtime" | "alias")
}

/// A unit name systemctl will take as a name and never as an option.
pub fn valid_unit_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@._:-\\".contains(c))
}

/// Starts, stops, restarts or reads a service; answers its `ActiveState` afterwards.
pub fn action(name: &str, action: ServiceActionKind) -> Typed {
    if !valid_unit_name(name) {
        return Err(format!("{name:?} is not a valid service name"));
    }
    require_systemd()?;
    let verb = match action {
        ServiceActionKind::Start => Some("start"),
        ServiceActionKind::Stop => Some("stop"),
        ServiceActionKind::Restart => Some("restart"),
        ServiceActionKind::Status => None,
    };
    if let Some(verb) = verb {
        let out = systemctl(&[verb, "--no-pager", "--", name])?;
        if !out.status.success() {
            return Err(format!(
                "systemctl {verb} {name} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let out = systemctl(&["show", "--property=ActiveState", "--value", "--", name])?;
    let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Ok(json!({
        "name": name,
        "action": action,
        "activeState": if state.is_empty() { "unknown".to_owned() } else { state },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_units_parse() {
        let units = parse_plain_units(
            "ssh.service loaded active running OpenBSD Secure Shell server\n● cron.service loaded failed failed Regular background program\n",
        );
        assert_eq!(units.len(), 2);
        assert_eq!(units[0]["name"], "ssh.service");
        assert_eq!(units[0]["description"], "OpenBSD Secure Shell server");
        assert_eq!(units[1]["name"], "cron.service");
        assert_eq!(units[1]["activeState"], "failed");
    }

    #[test]
    fn names_and_clean_failures() {
        assert!(valid_unit_name("nginx.service"));
        assert!(valid_unit_name("getty@tty1.service"));
        assert!(!valid_unit_name("--now"));
        assert!(!valid_unit_name("a b"));
        if !systemd_running() {
            let err = list().unwrap_err();
            assert!(err.contains("systemd is not running"), "{err}");
            let err = action("ssh.service", ServiceActionKind::Status).unwrap_err();
            assert!(err.contains("systemd is not running"), "{err}");
        }
    }
}
