//! `SecurityScan`, `QuarantineFile`, `RestoreQuarantined` and `DeleteQuarantined`.
//!
//! The scan is read-only: it changes nothing on the machine and refreshes no package list.
//! Each check answers `pass`, `fail` or `unknown` (the agent could not tell — say, the rules
//! need root) with a severity and the evidence it decided on:
//!
//! | check | how |
//! |---|---|
//! | `firewall` | `system::probes::firewall_state` (nft, iptables, ufw) |
//! | `security_updates` | `apt-get -s upgrade` (origins naming `-security`) or `dnf updateinfo list --security` |
//! | `disk_encryption` | `system::probes::disk_encryption_state` (dm-crypt under the root and data mounts) |
//! | `ssh_root_login`, `ssh_password_auth` | `sshd -T` when it runs, else `sshd_config` with its `Include`s (first value wins, `Match` blocks skipped) |
//! | `world_writable` | a bounded walk of system paths (and `extraRoots`) without following links, skipping protected paths |
//! | `listening_services` | `/proc/net/{tcp,tcp6,udp,udp6}`, owners from `/proc/*/fd` when readable |
//! | `antivirus` | known AV/EDR process names in `/proc/*/comm`, and install directories |
//! | `indicators` | files present at the command's indicator paths |
//!
//! Flagged files (world-writable regular files under system paths, indicator matches) are
//! listed with path, mode, owner, size and sha256: what a quarantine pins.
//!
//! The quarantine lives under the agent's state directory (`quarantine/<id>/`: `record.json`
//! and `content`, mode 0600 in a 0700 directory), which the protected paths cover, so no file
//! command reaches it. A file is quarantined only through the protection guard (never a
//! protected path, a link or a non-regular file) and restored only to its recorded path when
//! nothing is there and the path is still allowed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use breeze_core::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::Typed;
use super::protect::{PathGuard, Resolve};
use crate::system::probes::{self, run_tool};

mod listening;
mod quarantine;
mod ssh;

use listening::listening_check;
pub use listening::{Listener, listening_finding, parse_proc_net};
pub use quarantine::{QuarantineRecord, delete, quarantine, restore};
use ssh::ssh_checks;
pub use ssh::{SshSettings, parse_sshd_t, read_sshd_config, ssh_findings};

/// System directories walked for world-writable files.
pub const SYSTEM_ROOTS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/lib/systemd/system",
    "/etc",
];
/// Most entries the world-writable walk visits.
pub const WALK_BUDGET: u64 = 200_000;
/// Deepest directory level the walk enters below a root.
const WALK_DEPTH: usize = 12;
/// Most flagged files one scan lists.
const MAX_FLAGGED: usize = 100;
/// Files larger than this are flagged without a sha256 (and cannot be quarantined by hash).
const MAX_HASH_BYTES: u64 = 512 * 1024 * 1024;
/// Ports whose exposure beyond loopback is a finding, with what usually listens there.
const RISKY_PORTS: &[(u16, &str)] = &[
    (21, "ftp"),
    (23, "telnet"),
    (445, "smb"),
    (3389, "rdp"),
    (5900, "vnc"),
    (3306, "mysql"),
    (5432, "postgresql"),
    (6379, "redis"),
    (11211, "memcached"),
    (27017, "mongodb"),
];
/// Known antivirus and EDR processes (as `/proc/<pid>/comm` shows them, at most 15 bytes)
/// and products.
const AV_PROCESSES: &[(&str, &str)] = &[
    ("clamd", "ClamAV"),
    ("freshclam", "ClamAV"),
    ("falcon-sensor", "CrowdStrike Falcon"),
    ("falcond", "CrowdStrike Falcon"),
    ("wazuh-agentd", "Wazuh"),
    ("ossec-agentd", "OSSEC"),
    ("osqueryd", "osquery"),
    ("sentinelone-agent", "SentinelOne"),
    ("s1-agent", "SentinelOne"),
    ("sentinel-agent", "SentinelOne"),
    ("wdavdaemon", "Microsoft Defender for Endpoint"),
    ("mdatp", "Microsoft Defender for Endpoint"),
    ("savd", "Sophos"),
    ("sophos-spl", "Sophos"),
    ("elastic-endpoint", "Elastic Defend"),
    ("cbagentd", "Carbon Black"),
    ("ds_agent", "Trend Micro Deep Security"),
    ("rtvscand", "Symantec Endpoint Protection"),
];
/// Install locations of the same products.
const AV_PATHS: &[(&str, &str)] = &[
    ("/opt/CrowdStrike", "CrowdStrike Falcon"),
    ("/opt/sentinelone", "SentinelOne"),
    ("/var/ossec", "Wazuh/OSSEC"),
    ("/opt/microsoft/mdatp", "Microsoft Defender for Endpoint"),
    ("/etc/clamav", "ClamAV"),
    ("/opt/sophos-spl", "Sophos"),
    ("/opt/Elastic/Endpoint", "Elastic Defend"),
    ("/opt/carbonblack", "Carbon Black"),
    ("/opt/osquery", "osquery"),
];

/// One check's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub check: &'static str,
    /// pass, fail or unknown.
    pub status: &'static str,
    /// info, low, medium, high or critical.
    pub severity: &'static str,
    pub title: String,
    pub evidence: Value,
}

fn check(
    check: &'static str,
    status: &'static str,
    severity: &'static str,
    title: impl Into<String>,
    evidence: Value,
) -> Check {
    Check {
        check,
        status,
        severity,
        title: title.into(),
        evidence,
    }
}

/// A file a check flags.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Flagged {
    pub path: String,
    pub reason: String,
    pub check: &'static str,
    pub severity: &'static str,
    pub sha256: Option<String>,
    pub mode: String,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
}

/// Runs every check. `roots` replaces [`SYSTEM_ROOTS`] when given (tests); `extra_roots` and
/// `indicator_paths` come from the command.
pub fn scan(
    guard: &PathGuard,
    roots: Option<&[PathBuf]>,
    extra_roots: &[String],
    indicator_paths: &[String],
    deadline: Instant,
) -> Typed {
    let mut checks = Vec::new();
    let mut flagged = Vec::new();
    checks.push(firewall_check());
    checks.push(updates_check());
    checks.push(encryption_check());
    checks.extend(ssh_checks());
    let mut walk_roots: Vec<PathBuf> = match roots {
        Some(r) => r.to_vec(),
        None => SYSTEM_ROOTS.iter().map(PathBuf::from).collect(),
    };
    for extra in extra_roots {
        walk_roots.push(guard.resolve(extra, Resolve::Follow)?);
    }
    checks.push(world_writable_check(
        guard,
        &walk_roots,
        deadline,
        &mut flagged,
    ));
    checks.push(listening_check());
    checks.push(antivirus_check(Path::new("/proc")));
    if !indicator_paths.is_empty() {
        checks.push(indicator_check(guard, indicator_paths, &mut flagged));
    }
    Ok(json!({
        "checks": checks,
        "flaggedFiles": flagged,
        "privileged": is_root(),
    }))
}

fn is_root() -> bool {
    #[cfg(unix)]
    {
        nix::unistd::geteuid().is_root()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Firewall, encryption
// ---------------------------------------------------------------------------------------------

fn firewall_check() -> Check {
    let s = probes::firewall_state();
    match s.value {
        Some(true) => check(
            "firewall",
            "pass",
            "info",
            "A host firewall filters incoming traffic",
            s.evidence,
        ),
        Some(false) => check(
            "firewall",
            "fail",
            "high",
            "No host firewall filters incoming traffic",
            s.evidence,
        ),
        None => check(
            "firewall",
            "unknown",
            "medium",
            "Could not tell whether a host firewall is on (reading the rules needs root)",
            s.evidence,
        ),
    }
}

fn encryption_check() -> Check {
    let s = probes::disk_encryption_state();
    match s.value {
        Some(true) => check(
            "disk_encryption",
            "pass",
            "info",
            "System volumes are encrypted (dm-crypt/LUKS)",
            s.evidence,
        ),
        Some(false) => check(
            "disk_encryption",
            "fail",
            "medium",
            "A system volume is not encrypted",
            s.evidence,
        ),
        None => check(
            "disk_encryption",
            "unknown",
            "low",
            "Could not tell whether the system volumes are encrypted",
            s.evidence,
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Pending security updates
// ---------------------------------------------------------------------------------------------

/// `(package, is_security)` for each `Inst` line of `apt-get -s upgrade`.
pub fn parse_apt_simulation(text: &str) -> Vec<(String, bool)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("Inst ")?;
            let name = rest.split_whitespace().next()?.to_owned();
            let origin = rest.split_once('(').map(|(_, o)| o).unwrap_or("");
            Some((name, origin.to_ascii_lowercase().contains("-security")))
        })
        .collect()
}

/// Packages named by `dnf updateinfo list --security` (`ADVISORY TYPE PACKAGE` lines).
pub fn parse_dnf_security(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[1].contains("Sec")).then(|| f[2].to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn updates_check() -> Check {
    if let Some(r) = run_tool(&["apt-get"], &["-s", "-q", "upgrade"]) {
        if !r.success {
            return check(
                "security_updates",
                "unknown",
                "medium",
                "Could not list pending updates (apt-get failed)",
                json!({ "manager": "apt", "error": r.stderr.trim().chars().take(300).collect::<String>() }),
            );
        }
        let all = parse_apt_simulation(&r.stdout);
        let security: Vec<&str> = all
            .iter()
            .filter(|(_, s)| *s)
            .map(|(n, _)| n.as_str())
            .collect();
        return updates_finding("apt", all.len(), &security);
    }
    if let Some(r) = run_tool(
        &["dnf", "yum"],
        &["-q", "-C", "updateinfo", "list", "--security"],
    ) {
        if !r.success {
            return check(
                "security_updates",
                "unknown",
                "medium",
                "Could not list pending updates (dnf failed)",
                json!({ "manager": "dnf", "error": r.stderr.trim().chars().take(300).collect::<String>() }),
            );
        }
        let names = parse_dnf_security(&r.stdout);
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        return updates_finding("dnf", names.len(), &refs);
    }
    check(
        "security_updates",
        "unknown",
        "medium",
        "No supported package manager (apt, dnf) to list pending updates",
        json!({ "manager": null }),
    )
}

fn updates_finding(manager: &str, total: usize, security: &[&str]) -> Check {
    let evidence = json!({
        "manager": manager,
        "pendingSecurity": security.len(),
        "pendingTotal": total,
        "packages": security.iter().take(50).collect::<Vec<_>>(),
        "note": "from the package lists as last refreshed; the scan refreshes nothing",
    });
    match security.len() {
        0 => check(
            "security_updates",
            "pass",
            "info",
            "No pending security updates",
            evidence,
        ),
        n => check(
            "security_updates",
            "fail",
            if n > 10 { "critical" } else { "high" },
            format!("{n} pending security update(s)"),
            evidence,
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// World-writable files
// ---------------------------------------------------------------------------------------------

fn mode_string(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// A file's metadata as a flag lists it (the sha256 only up to [`MAX_HASH_BYTES`]).
fn flag(
    path: &Path,
    meta: &std::fs::Metadata,
    reason: String,
    check: &'static str,
    severity: &'static str,
) -> Flagged {
    use std::os::unix::fs::MetadataExt;
    let sha256 = (meta.len() <= MAX_HASH_BYTES)
        .then(|| sha256_of(path).ok())
        .flatten();
    Flagged {
        path: path.to_string_lossy().into_owned(),
        reason,
        check,
        severity,
        sha256,
        mode: mode_string(meta.mode()),
        uid: meta.uid(),
        gid: meta.gid(),
        size_bytes: meta.len(),
    }
}

fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    sha256_of_reader(&mut f)
}

fn sha256_of_reader(r: &mut impl Read) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Walks `roots` (resolved, deduplicated) without following links, staying on each root's
/// filesystem, for world-writable files and non-sticky world-writable directories.
pub fn world_writable_check(
    guard: &PathGuard,
    roots: &[PathBuf],
    deadline: Instant,
    flagged: &mut Vec<Flagged>,
) -> Check {
    use std::os::unix::fs::MetadataExt;
    let mut seen = HashSet::new();
    let mut budget = WALK_BUDGET;
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut walked = Vec::new();
    let mut incomplete = false;
    let mut unreadable = 0u64;
    // Resolved, and a root inside another is walked as part of it.
    let mut real_roots: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .filter(|r| seen.insert(r.clone()))
        .collect();
    real_roots.sort();
    let mut kept: Vec<PathBuf> = Vec::new();
    for r in real_roots {
        if !kept.iter().any(|k| r.starts_with(k)) {
            kept.push(r);
        }
    }
    for real in kept {
        let Ok(meta) = std::fs::symlink_metadata(&real) else {
            continue;
        };
        if !meta.is_dir() || guard.skips(&real, &meta) {
            continue;
        }
        walked.push(real.to_string_lossy().into_owned());
        let dev = meta.dev();
        let mut stack = vec![(real, 0usize)];
        while let Some((dir, depth)) = stack.pop() {
            if budget == 0 || Instant::now() >= deadline {
                incomplete = true;
                break;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                unreadable += 1;
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                budget = budget.saturating_sub(1);
                let path = entry.path();
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.file_type().is_symlink() || guard.skips(&path, &meta) {
                    continue;
                }
                let mode = meta.mode();
                let other_writable = mode & 0o002 != 0;
                if meta.is_dir() {
                    if other_writable && mode & 0o1000 == 0 && dirs.len() < MAX_FLAGGED {
                        dirs.push(
                            json!({ "path": path.to_string_lossy(), "mode": mode_string(mode) }),
                        );
                    }
                    if meta.dev() == dev && depth < WALK_DEPTH {
                        stack.push((path, depth + 1));
                    }
                } else if meta.is_file() && other_writable && files.len() < MAX_FLAGGED {
                    let executable = mode & 0o111 != 0;
                    let (severity, reason) = if executable {
                        ("high", "world-writable executable in a system path")
                    } else {
                        ("medium", "world-writable file in a system path")
                    };
                    let f = flag(&path, &meta, reason.to_owned(), "world_writable", severity);
                    files.push(f.path.clone());
                    flagged.push(f);
                }
            }
        }
    }
    let evidence = json!({
        "roots": walked,
        "files": files,
        "directories": dirs,
        "complete": !incomplete,
        "unreadableDirectories": unreadable,
        "budget": WALK_BUDGET,
    });
    if !files.is_empty() || !dirs.is_empty() {
        let executables = flagged
            .iter()
            .any(|f| f.check == "world_writable" && f.severity == "high");
        check(
            "world_writable",
            "fail",
            if executables { "high" } else { "medium" },
            format!(
                "{} world-writable file(s) and {} world-writable director(ies) in system paths",
                files.len(),
                dirs.len()
            ),
            evidence,
        )
    } else if walked.is_empty() {
        check(
            "world_writable",
            "unknown",
            "low",
            "No system path could be walked",
            evidence,
        )
    } else if incomplete {
        check(
            "world_writable",
            "unknown",
            "low",
            "The walk stopped at its budget before finishing; nothing found so far",
            evidence,
        )
    } else {
        check(
            "world_writable",
            "pass",
            "info",
            "No world-writable files in system paths",
            evidence,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Antivirus / EDR
// ---------------------------------------------------------------------------------------------

/// Products whose process runs, from the `comm` names of `proc`'s processes.
pub fn av_running(proc: &Path) -> BTreeMap<&'static str, String> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(proc) else {
        return found;
    };
    for entry in entries.filter_map(Result::ok) {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        for (name, product) in AV_PROCESSES {
            // comm holds at most 15 bytes of the name.
            let short = &name[..name.len().min(15)];
            if comm == *name || comm == short {
                found.entry(*product).or_insert_with(|| comm.to_owned());
            }
        }
    }
    found
}

/// The antivirus finding (`proc`: where the processes are, injectable for tests).
pub fn antivirus_check(proc: &Path) -> Check {
    let running = av_running(proc);
    let installed: Vec<&str> = AV_PATHS
        .iter()
        .filter(|(p, _)| Path::new(p).exists())
        .map(|(_, product)| *product)
        .collect();
    let evidence = json!({
        "running": running.iter().map(|(p, c)| json!({ "product": p, "process": c })).collect::<Vec<_>>(),
        "installed": installed,
        "processesLookedFor": AV_PROCESSES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
    });
    if !running.is_empty() {
        let names: Vec<&str> = running.keys().copied().collect();
        check(
            "antivirus",
            "pass",
            "info",
            format!("Antivirus/EDR running: {}", names.join(", ")),
            evidence,
        )
    } else if !installed.is_empty() {
        check(
            "antivirus",
            "fail",
            "high",
            format!(
                "Antivirus/EDR installed but not running: {}",
                installed.join(", ")
            ),
            evidence,
        )
    } else {
        check(
            "antivirus",
            "fail",
            "medium",
            "No antivirus or EDR found",
            evidence,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Indicators
// ---------------------------------------------------------------------------------------------

fn indicator_check(guard: &PathGuard, paths: &[String], flagged: &mut Vec<Flagged>) -> Check {
    let mut matched = Vec::new();
    let mut refused = Vec::new();
    for given in paths.iter().take(MAX_FLAGGED) {
        let p = match guard.resolve(given, Resolve::Parent) {
            Ok(p) => p,
            Err(e) => {
                refused.push(json!({ "path": given, "reason": e }));
                continue;
            }
        };
        if let Ok(meta) = std::fs::symlink_metadata(&p)
            && meta.is_file()
        {
            let mut f = flag(
                &p,
                &meta,
                "matches a configured indicator path".into(),
                "indicators",
                "high",
            );
            f.path.clone_from(given);
            matched.push(given.clone());
            flagged.push(f);
        }
    }
    let evidence = json!({ "checked": paths.len(), "matched": matched, "refused": refused });
    if matched.is_empty() {
        check(
            "indicators",
            "pass",
            "info",
            "No indicator path is present",
            evidence,
        )
    } else {
        check(
            "indicators",
            "fail",
            "high",
            format!("{} indicator path(s) present", matched.len()),
            evidence,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn guard_for(own: &[PathBuf]) -> PathGuard {
        super::super::protect::Protection::new(own)
            .for_command(&[])
            .expect("guard")
    }

    #[test]
    fn apt_simulation_counts_security_origins() {
        let text = "NOTE: This is only a simulation!\n\
            Inst base-files [12.4+deb12u11] (12.4+deb12u15 Debian:12.15/oldstable [amd64])\n\
            Inst libgcrypt20 [1.10.1-3] (1.10.1-3+deb12u1 Debian:12.15/oldstable, Debian-Security:12/oldstable-security [amd64]) []\n\
            Conf base-files (12.4+deb12u15 Debian:12.15/oldstable [amd64])\n\
            Inst openssl [3.0.15-1] (3.0.17-1~deb12u2 Debian-Security:12/stable-security [amd64])\n";
        let parsed = parse_apt_simulation(text);
        assert_eq!(parsed.len(), 3);
        let security: Vec<&str> = parsed
            .iter()
            .filter(|p| p.1)
            .map(|p| p.0.as_str())
            .collect();
        assert_eq!(security, ["libgcrypt20", "openssl"]);
        let c = updates_finding("apt", 3, &security);
        assert_eq!((c.status, c.severity), ("fail", "high"));
        assert_eq!(c.evidence["pendingSecurity"], 2);
        assert_eq!(updates_finding("apt", 3, &[]).status, "pass");
    }

    #[test]
    fn dnf_updateinfo_lists_packages() {
        let text = "FEDORA-2024-1 Important/Sec. openssl-libs-3.1.4-1.fc39.x86_64\n\
            FEDORA-2024-2 bugfix        kernel-6.7.0-1.fc39.x86_64\n\
            FEDORA-2024-3 Moderate/Sec. curl-8.2.1-4.fc39.x86_64\n\
            FEDORA-2024-4 Low/Sec.      curl-8.2.1-4.fc39.x86_64\n";
        assert_eq!(
            parse_dnf_security(text),
            [
                "curl-8.2.1-4.fc39.x86_64",
                "openssl-libs-3.1.4-1.fc39.x86_64"
            ]
        );
    }

    fn write(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    #[test]
    fn sshd_config_first_value_wins_includes_and_match_blocks() {
        let dir = tempfile::tempdir().expect("tmp");
        let base = dir.path();
        // Debian's shape: the Include comes first, so a drop-in overrides the main file.
        write(
            &base.join("sshd_config"),
            "Include sshd_config.d/*.conf\n# PermitRootLogin yes\nPermitRootLogin yes\nPasswordAuthentication yes\nMatch User backup\n  PasswordAuthentication no\n",
        );
        write(
            &base.join("sshd_config.d/10-hardening.conf"),
            "PermitRootLogin no\n",
        );
        write(
            &base.join("sshd_config.d/20-other.conf"),
            "PermitRootLogin yes\n",
        );
        write(
            &base.join("sshd_config.d/readme.txt"),
            "PasswordAuthentication no\n",
        );
        let s = read_sshd_config(&base.join("sshd_config"), base);
        assert_eq!(s.permit_root_login.as_deref(), Some("no"), "{s:?}");
        assert_eq!(
            s.password_authentication.as_deref(),
            Some("yes"),
            "Match block and .txt ignored"
        );
        assert_eq!(s.files.len(), 3);
        let [root, pw] = ssh_findings(&s, "sshd_config");
        assert_eq!((root.status, pw.status), ("pass", "fail"));
        assert_eq!(pw.severity, "medium");
        assert_eq!(pw.evidence["configured"], "yes");
    }

    #[test]
    fn sshd_config_defaults_and_equals_syntax() {
        let dir = tempfile::tempdir().expect("tmp");
        let base = dir.path();
        write(&base.join("sshd_config"), "Port 22\n");
        let s = read_sshd_config(&base.join("sshd_config"), base);
        let [root, pw] = ssh_findings(&s, "sshd_config");
        assert_eq!(root.evidence["effective"], "prohibit-password");
        assert_eq!(root.evidence["defaulted"], true);
        assert_eq!((root.status, root.severity), ("pass", "low"));
        assert_eq!(pw.status, "fail", "passwords default to yes");

        write(
            &base.join("sshd_config"),
            "PermitRootLogin=Yes\nPasswordAuthentication = no\nInclude /nonexistent/*.conf\n",
        );
        let s = read_sshd_config(&base.join("sshd_config"), base);
        let [root, pw] = ssh_findings(&s, "sshd_config");
        assert_eq!((root.status, root.severity), ("fail", "high"));
        assert_eq!(pw.status, "pass");
    }

    #[test]
    fn sshd_t_output_is_read() {
        let s =
            parse_sshd_t("port 22\npermitrootlogin without-password\npasswordauthentication no\n");
        assert_eq!(s.permit_root_login.as_deref(), Some("without-password"));
        let [root, pw] = ssh_findings(&s, "sshd -T");
        assert_eq!((root.status, pw.status), ("pass", "pass"));
        assert_eq!(root.evidence["source"], "sshd -T");
    }

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:6448 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 6510 1 0000000000000000 100 0 0 10 0\n\
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5431 1 0000000000000000 100 0 0 10 0\n\
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 7777 1 0000000000000000 20 4 30 10 -1\n\
   3: 00000000:0017 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5432 1 0000000000000000 100 0 0 10 0\n";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000001000000:18EB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3929 1 0000000000000000 100 0 0 10 0\n\
   1: 00000000000000000000000000000000:1538 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   105        0 3930 1 0000000000000000 100 0 0 10 0\n";
    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  100: 00000000:0044 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 9001 2 0000000000000000 0\n\
  101: 0A00000A:D431 08080808:0035 01 00000000:00000000 00:00000000 00000000  1000        0 9002 2 0000000000000000 0\n";

    #[test]
    fn proc_net_tables_are_parsed() {
        let tcp = parse_proc_net(TCP, "tcp");
        assert_eq!(tcp.len(), 3, "the established connection is not listening");
        assert_eq!(
            (tcp[0].address.as_str(), tcp[0].port, tcp[0].uid),
            ("127.0.0.1", 25672, 106)
        );
        assert!(!tcp[0].exposed());
        assert_eq!((tcp[1].address.as_str(), tcp[1].port), ("0.0.0.0", 22));
        assert!(tcp[1].exposed());
        let tcp6 = parse_proc_net(TCP6, "tcp6");
        assert_eq!((tcp6[0].address.as_str(), tcp6[0].port), ("::1", 6379));
        assert!(!tcp6[0].exposed());
        assert_eq!((tcp6[1].address.as_str(), tcp6[1].port), ("::", 5432));
        let udp = parse_proc_net(UDP, "udp");
        assert_eq!(udp.len(), 1, "a connected UDP socket is not a listener");
        assert_eq!(udp[0].port, 68);

        let mut all = tcp;
        all.extend(tcp6);
        all.extend(udp);
        let c = listening_finding(&all, 3);
        assert_eq!(
            (c.status, c.severity),
            ("fail", "high"),
            "telnet on 0.0.0.0"
        );
        let risky: Vec<u64> = c.evidence["riskyExposed"]
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|r| r["port"].as_u64())
            .collect();
        assert_eq!(
            risky,
            [23, 5432],
            "redis on ::1 is loopback; ssh is not in the list"
        );
        assert_eq!(listening_finding(&[], 0).status, "unknown");
    }

    #[test]
    fn antivirus_is_found_by_process_name() {
        let dir = tempfile::tempdir().expect("tmp");
        write(&dir.path().join("1/comm"), "systemd\n");
        write(&dir.path().join("200/comm"), "sentinelone-age\n");
        write(&dir.path().join("300/comm"), "clamd\n");
        write(&dir.path().join("self/comm"), "clamd\n");
        let running = av_running(dir.path());
        assert_eq!(
            running.keys().copied().collect::<Vec<_>>(),
            ["ClamAV", "SentinelOne"]
        );
        let c = antivirus_check(dir.path());
        assert_eq!(c.status, "pass");
        let empty = tempfile::tempdir().expect("tmp");
        let c = antivirus_check(empty.path());
        assert_ne!(c.status, "pass");
        assert!(
            c.evidence["processesLookedFor"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        );
    }

    #[test]
    fn world_writable_walk_flags_files_skips_sticky_dirs_links_and_protected() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().join("sys");
        let chmod = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
        };
        write(&root.join("bin/tool"), "#!/bin/sh\n");
        chmod(&root.join("bin/tool"), 0o777);
        write(&root.join("etc/app.conf"), "x=1\n");
        chmod(&root.join("etc/app.conf"), 0o666);
        write(&root.join("etc/ok.conf"), "x=1\n");
        chmod(&root.join("etc/ok.conf"), 0o644);
        std::fs::create_dir_all(root.join("tmp")).expect("mkdir");
        chmod(&root.join("tmp"), 0o1777);
        std::fs::create_dir_all(root.join("open")).expect("mkdir");
        chmod(&root.join("open"), 0o777);
        std::os::unix::fs::symlink("/etc/passwd", root.join("bin/link")).expect("link");
        write(&root.join("secret/key"), "k");
        chmod(&root.join("secret/key"), 0o666);
        let guard = guard_for(&[root.join("secret")]);
        let mut flagged = Vec::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let c = world_writable_check(
            &guard,
            &[root.clone(), root.join("bin")],
            deadline,
            &mut flagged,
        );
        assert_eq!((c.status, c.severity), ("fail", "high"), "{}", c.evidence);
        let paths: Vec<&str> = flagged.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(flagged.len(), 2, "{paths:?}");
        assert!(paths.iter().any(|p| p.ends_with("bin/tool")));
        assert!(paths.iter().any(|p| p.ends_with("etc/app.conf")));
        let tool = flagged
            .iter()
            .find(|f| f.path.ends_with("bin/tool"))
            .expect("tool");
        assert_eq!((tool.severity, tool.mode.as_str()), ("high", "0777"));
        assert_eq!(
            tool.sha256.as_deref(),
            Some(sha256_of(&root.join("bin/tool")).expect("hash").as_str())
        );
        let dirs = c.evidence["directories"].as_array().expect("dirs");
        assert_eq!(dirs.len(), 1, "the sticky dir is fine: {dirs:?}");
        assert!(
            dirs[0]["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/open"))
        );

        chmod(&root.join("bin/tool"), 0o755);
        chmod(&root.join("etc/app.conf"), 0o644);
        chmod(&root.join("open"), 0o755);
        let mut flagged = Vec::new();
        let c = world_writable_check(&guard, &[root], deadline, &mut flagged);
        assert_eq!(c.status, "pass", "{}", c.evidence);
        assert!(flagged.is_empty());
    }

    #[test]
    fn quarantine_restore_and_remove_round_trip() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tmp");
        let state = dir.path().join("state");
        let qdir = state.join("quarantine");
        let guard = guard_for(&[state]);
        let work = dir.path().join("work");
        let victim = work.join("payload.sh");
        write(&victim, "#!/bin/sh\necho pwned\n");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o757)).expect("chmod");
        let given = victim.to_string_lossy().into_owned();
        let sha = sha256_of(&victim).expect("hash");
        let now = chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("a valid time");

        let wrong = quarantine(&guard, &qdir, &given, Some(&"0".repeat(64)), false, now);
        assert!(wrong.is_err_and(|e| e.contains("changed since the scan")));
        assert!(victim.exists(), "a mismatched hash moves nothing");

        let q = quarantine(&guard, &qdir, &given, Some(&sha), false, now).expect("quarantined");
        assert_eq!(q["state"], "quarantined");
        assert_eq!(q["sha256"], sha.as_str());
        assert_eq!(q["mode"], "0757");
        assert!(!victim.exists());
        let id = q["quarantineId"].as_str().expect("id").to_owned();
        let content = qdir.join(&id).join("content");
        assert_eq!(
            std::fs::metadata(&content).expect("content").mode() & 0o7777,
            0o600
        );
        // The quarantine is under the protected state directory: file commands cannot reach it.
        assert!(
            guard
                .resolve(&content.to_string_lossy(), Resolve::Follow)
                .is_err()
        );

        // Something new at the path blocks the restore.
        write(&victim, "other");
        assert!(restore(&guard, &qdir, &id, now).is_err_and(|e| e.contains("something is at")));
        std::fs::remove_file(&victim).expect("rm");
        let r = restore(&guard, &qdir, &id, now).expect("restored");
        assert_eq!(r["state"], "restored");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("back"),
            "#!/bin/sh\necho pwned\n"
        );
        assert_eq!(
            std::fs::metadata(&victim).expect("meta").mode() & 0o7777,
            0o757
        );
        assert!(restore(&guard, &qdir, &id, now).is_err(), "restored once");

        // Quarantine with delete: the record stays, the content is gone.
        let q = quarantine(&guard, &qdir, &given, None, true, now).expect("removed");
        assert_eq!(q["state"], "removed");
        assert!(!victim.exists());
        let id2 = q["quarantineId"].as_str().expect("id").to_owned();
        assert!(!qdir.join(&id2).join("content").exists());
        assert!(qdir.join(&id2).join("record.json").exists());
        assert!(restore(&guard, &qdir, &id2, now).is_err());

        // Quarantine then delete.
        write(&victim, "again");
        let q = quarantine(&guard, &qdir, &given, None, false, now).expect("quarantined");
        let id3 = q["quarantineId"].as_str().expect("id").to_owned();
        assert_eq!(
            delete(&qdir, &id3, now).expect("deleted")["state"],
            "removed"
        );

        // Ids are ids, not paths.
        assert!(restore(&guard, &qdir, "../../etc", now).is_err());
        assert!(delete(&qdir, "../x", now).is_err());
    }

    #[test]
    fn quarantine_refuses_protected_paths_links_and_directories() {
        let dir = tempfile::tempdir().expect("tmp");
        let state = dir.path().join("state");
        let qdir = state.join("quarantine");
        let protected_dir = dir.path().join("keep");
        write(&protected_dir.join("file"), "x");
        let guard = guard_for(&[state, protected_dir.clone()]);
        let now = chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("a valid time");
        let p = protected_dir.join("file").to_string_lossy().into_owned();
        assert!(quarantine(&guard, &qdir, &p, None, false, now).is_err());
        assert!(quarantine(&guard, &qdir, "/etc/shadow", None, false, now).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(protected_dir.join("file"), &link).expect("link");
        assert!(quarantine(&guard, &qdir, &link.to_string_lossy(), None, false, now).is_err());
        assert!(
            quarantine(
                &guard,
                &qdir,
                &dir.path().to_string_lossy(),
                None,
                false,
                now
            )
            .is_err()
        );
        assert!(protected_dir.join("file").exists());
    }
}
