//! `ComplianceCheck`: each probe answered in order as `{passed, detail}`. A probe that cannot be
//! decided answers `passed: null` with the reason and never fails the command. File probes go
//! through the command's [`PathGuard`] (a protected path is refused like a file read) and open
//! what was checked; only a verdict leaves the machine, never the file's content.

use std::io::Read;

use breeze_agent_proto::{ComplianceProbe, ProbeResult};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::Typed;
use super::protect::{PathGuard, Resolve};
use crate::system::probes;

/// The most of a config file a setting probe reads.
const MAX_SETTING_FILE_BYTES: u64 = 1024 * 1024;

fn unknown(detail: impl Into<String>) -> ProbeResult {
    ProbeResult {
        passed: None,
        detail: detail.into(),
    }
}

fn verdict(passed: bool, detail: impl Into<String>) -> ProbeResult {
    ProbeResult {
        passed: Some(passed),
        detail: detail.into(),
    }
}

/// Whether `path` names a regular file (a missing one is `false`, a refusal `Err`).
fn present(guard: &PathGuard, path: &str) -> Result<bool, String> {
    let p = guard.resolve(path, Resolve::Follow)?;
    match guard.open_read(path, &p) {
        Ok(_) => Ok(true),
        Err(e) if e.contains("no such file") => Ok(false),
        Err(e) => Err(e),
    }
}

fn sha256_of(guard: &PathGuard, path: &str) -> Result<String, String> {
    let p = guard.resolve(path, Resolve::Follow)?;
    let mut file = guard.open_read(path, &p)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read {path}: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The value of `key` in config text: the first uncommented occurrence before any `Match`
/// block, `key value` or `key=value`, quotes stripped.
pub fn setting_of(text: &str, key: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let split = line
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(line.len());
        let (k, rest) = line.split_at(split);
        if k.eq_ignore_ascii_case("match") {
            return None;
        }
        if k.eq_ignore_ascii_case(key) {
            let v = rest.trim_start().strip_prefix('=').unwrap_or(rest).trim();
            let v = v.split(" #").next().unwrap_or(v).trim();
            return Some(v.trim_matches(|c| c == '"' || c == '\'').to_owned());
        }
    }
    None
}

fn setting(guard: &PathGuard, path: &str, key: &str, want: &str) -> ProbeResult {
    let read = || -> Result<String, String> {
        let p = guard.resolve(path, Resolve::Follow)?;
        let file = guard.open_read(path, &p)?;
        let mut bytes = Vec::new();
        file.take(MAX_SETTING_FILE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {path}: {e}"))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Err(e) if e.contains("no such file") => verdict(false, format!("{path} does not exist")),
        Err(e) => unknown(e),
        Ok(text) => match setting_of(&text, key) {
            None => verdict(false, format!("{key} is not set in {path}")),
            Some(v) => {
                let ok = v.eq_ignore_ascii_case(want.trim());
                verdict(ok, format!("{key} is {v:?} in {path}"))
            }
        },
    }
}

/// Answers every probe; `guard` is `Err` when the protected paths could not be loaded (then
/// file probes are undecided).
pub fn check(guard: &Result<PathGuard, String>, probes_asked: &[ComplianceProbe]) -> Typed {
    let results: Vec<ProbeResult> = probes_asked
        .iter()
        .map(|probe| {
            let with_guard = |f: &dyn Fn(&PathGuard) -> ProbeResult| match guard {
                Ok(g) => f(g),
                Err(e) => unknown(e.clone()),
            };
            match probe {
                ComplianceProbe::ServiceRunning { name } => match probes::unit_active(name) {
                    Some(true) => verdict(true, format!("{name} is active")),
                    Some(false) => verdict(false, format!("{name} is not active")),
                    None => unknown("systemd is not running here (or the name is not a unit)"),
                },
                ComplianceProbe::FilePresent { path } => with_guard(&|g| match present(g, path) {
                    Ok(true) => verdict(true, format!("{path} exists")),
                    Ok(false) => verdict(false, format!("{path} does not exist")),
                    Err(e) => unknown(e),
                }),
                ComplianceProbe::FileSha256 { path, sha256 } => {
                    with_guard(&|g| match sha256_of(g, path) {
                        Ok(h) => {
                            let ok = h.eq_ignore_ascii_case(sha256);
                            verdict(ok, format!("sha256 of {path} is {h}"))
                        }
                        Err(e) if e.contains("no such file") => {
                            verdict(false, format!("{path} does not exist"))
                        }
                        Err(e) => unknown(e),
                    })
                }
                ComplianceProbe::SettingValue { path, key, value } => {
                    with_guard(&|g| setting(g, path, key, value))
                }
                ComplianceProbe::DiskEncrypted => match probes::disk_encrypted() {
                    Some(true) => verdict(true, "the root filesystem is on dm-crypt"),
                    Some(false) => verdict(false, "the root filesystem is not encrypted"),
                    None => unknown("cannot tell (the root is not a block device here)"),
                },
                ComplianceProbe::FirewallEnabled => match probes::firewall_enabled() {
                    Some(true) => verdict(true, "a host firewall is active"),
                    Some(false) => verdict(false, "no host firewall is active"),
                    None => unknown("cannot tell whether a firewall is active"),
                },
            }
        })
        .collect();
    Ok(json!({ "checks": results }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_like_sshd() {
        let text = "# PermitRootLogin yes\nPort 22\npermitrootlogin  no # inline\nPermitRootLogin yes\nMatch User x\n  PasswordAuthentication yes\n";
        assert_eq!(setting_of(text, "PermitRootLogin").as_deref(), Some("no"));
        assert_eq!(setting_of(text, "PasswordAuthentication"), None);
        assert_eq!(setting_of("key = \"v\"\n", "key").as_deref(), Some("v"));
        assert_eq!(setting_of("key=v\n", "key").as_deref(), Some("v"));
    }
}
