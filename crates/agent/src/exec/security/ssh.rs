//! The SSH check: `sshd -T` when it runs, else `sshd_config` and its `Include`s read as
//! sshd reads them, judged for root login and password authentication.

use super::*;

/// What sshd is configured with, as far as the scan could read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshSettings {
    pub permit_root_login: Option<String>,
    pub password_authentication: Option<String>,
    /// Files read, in order.
    pub files: Vec<String>,
    /// Files named but unreadable.
    pub unreadable: Vec<String>,
}

/// Parses `sshd -T` output (lower-case keywords, effective values).
pub fn parse_sshd_t(text: &str) -> SshSettings {
    let mut s = SshSettings::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        match (it.next(), it.next()) {
            (Some("permitrootlogin"), Some(v)) => {
                s.permit_root_login = Some(v.to_ascii_lowercase());
            }
            (Some("passwordauthentication"), Some(v)) => {
                s.password_authentication = Some(v.to_ascii_lowercase());
            }
            _ => {}
        }
    }
    s
}

/// Reads `main` as sshd does for the global section: the first value of a keyword wins,
/// `Include` pulls in files (globs, relative to `base`) where it stands, and keywords after a
/// `Match` line (other than `Match all`) belong to that block, not to the global settings.
pub fn read_sshd_config(main: &Path, base: &Path) -> SshSettings {
    let mut s = SshSettings::default();
    read_config_file(main, base, 0, &mut s);
    s
}

fn read_config_file(path: &Path, base: &Path, depth: u32, s: &mut SshSettings) {
    if depth > 8 {
        return;
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(_) => {
            s.unreadable.push(path.to_string_lossy().into_owned());
            return;
        }
    };
    s.files.push(path.to_string_lossy().into_owned());
    let mut in_match = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = match line.split_once(|c: char| c.is_whitespace() || c == '=') {
            Some((k, v)) => (
                k.to_ascii_lowercase(),
                v.trim().trim_start_matches('=').trim(),
            ),
            None => continue,
        };
        if key == "match" {
            in_match = !value.eq_ignore_ascii_case("all");
            continue;
        }
        if in_match {
            continue;
        }
        let first = value
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_matches('"');
        match key.as_str() {
            "include" => {
                for pattern in value.split_whitespace() {
                    let pattern = if pattern.starts_with('/') {
                        PathBuf::from(pattern)
                    } else {
                        base.join(pattern)
                    };
                    for file in glob_files(&pattern) {
                        read_config_file(&file, base, depth + 1, s);
                    }
                }
            }
            "permitrootlogin" if s.permit_root_login.is_none() => {
                s.permit_root_login = Some(first.to_ascii_lowercase());
            }
            "passwordauthentication" if s.password_authentication.is_none() => {
                s.password_authentication = Some(first.to_ascii_lowercase());
            }
            _ => {}
        }
    }
}

/// The files a pattern with `*`/`?` in its last component names, sorted (as glob(3) does).
fn glob_files(pattern: &Path) -> Vec<PathBuf> {
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    let Some(dir) = pattern.parent() else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| wildcard(&name, &e.file_name().to_string_lossy()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// `*` and `?` matching of one name.
fn wildcard(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

/// The two SSH findings from settings (`source` says where they came from).
pub fn ssh_findings(s: &SshSettings, source: &str) -> [Check; 2] {
    // OpenSSH's defaults since 7.0.
    let root = s.permit_root_login.clone();
    let root_effective = root.clone().unwrap_or_else(|| "prohibit-password".into());
    let password = s.password_authentication.clone();
    let password_effective = password.clone().unwrap_or_else(|| "yes".into());
    let evidence = |key: &str, configured: &Option<String>, effective: &str| {
        json!({
            "source": source,
            "setting": key,
            "configured": configured,
            "effective": effective,
            "defaulted": configured.is_none(),
            "files": s.files,
            "unreadable": s.unreadable,
        })
    };
    let root_check = match root_effective.as_str() {
        "yes" => check(
            "ssh_root_login",
            "fail",
            "high",
            "SSH allows root to log in with a password",
            evidence("PermitRootLogin", &root, &root_effective),
        ),
        "no" => check(
            "ssh_root_login",
            "pass",
            "info",
            "SSH refuses root logins",
            evidence("PermitRootLogin", &root, &root_effective),
        ),
        _ => check(
            "ssh_root_login",
            "pass",
            "low",
            format!("SSH allows root logins by key only ({root_effective})"),
            evidence("PermitRootLogin", &root, &root_effective),
        ),
    };
    let password_check = if password_effective == "no" {
        check(
            "ssh_password_auth",
            "pass",
            "info",
            "SSH password authentication is off",
            evidence("PasswordAuthentication", &password, &password_effective),
        )
    } else {
        check(
            "ssh_password_auth",
            "fail",
            "medium",
            "SSH accepts password authentication",
            evidence("PasswordAuthentication", &password, &password_effective),
        )
    };
    [root_check, password_check]
}

pub(super) fn ssh_checks() -> Vec<Check> {
    let main = Path::new("/etc/ssh/sshd_config");
    let sshd = run_tool(&["sshd"], &["-T"]);
    if let Some(r) = &sshd
        && r.success
    {
        return ssh_findings(&parse_sshd_t(&r.stdout), "sshd -T").into();
    }
    if main.exists() {
        let s = read_sshd_config(main, Path::new("/etc/ssh"));
        if s.files.is_empty() {
            return ["ssh_root_login", "ssh_password_auth"]
                .into_iter()
                .map(|c| {
                    check(
                        c,
                        "unknown",
                        "medium",
                        "Could not read the SSH server's configuration",
                        json!({ "unreadable": s.unreadable, "sshdInstalled": sshd.is_some() }),
                    )
                })
                .collect();
        }
        return ssh_findings(&s, "sshd_config").into();
    }
    let evidence = json!({ "sshdInstalled": sshd.is_some(), "config": null });
    if sshd.is_some() {
        return ["ssh_root_login", "ssh_password_auth"]
            .into_iter()
            .map(|c| {
                check(
                    c,
                    "unknown",
                    "medium",
                    "sshd is installed but its configuration was not found",
                    evidence.clone(),
                )
            })
            .collect();
    }
    ["ssh_root_login", "ssh_password_auth"]
        .into_iter()
        .map(|c| {
            check(
                c,
                "pass",
                "info",
                "No SSH server is installed",
                evidence.clone(),
            )
        })
        .collect()
}
