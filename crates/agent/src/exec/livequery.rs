//! `LiveQuery`: the catalogue questions ([`breeze_agent_proto::livequery`]) answered from the
//! running system, read-only.
//!
//! Every answer goes through one `Rows` collector, which holds the caps this agent enforces
//! whatever the server asked (rows, serialized bytes, bytes hashed, directory entries visited)
//! and names the first one reached. Paths the question reads by name or finds by walking —
//! the file glob, executables hashed, cron files — pass the command's [`PathGuard`]: a
//! protected path is never opened, never hashed and never named; it is only counted in
//! `protectedSkipped`. Nothing answers a file's contents.
//!
//! | question | source |
//! |---|---|
//! | `processes` | sysinfo (CPU between two refreshes); executables hashed through the guard |
//! | `listening_ports` | `/proc/net/{tcp,tcp6,udp,udp6}`, owners from `/proc/*/fd` |
//! | `packages` | `dpkg-query`, else `rpm`, else apk's `/lib/apk/db/installed` |
//! | `users`, `groups` | `/etc/passwd`, `/etc/group` (never the shadows) |
//! | `sessions` | utmp (the heartbeat's reading) |
//! | `services` | `systemctl` (the `ListServices` reading) |
//! | `kernel_modules` | `/proc/modules` |
//! | `files` | a bounded walk under the glob's literal prefix, links not followed |
//! | `scheduled_tasks` | `/etc/crontab`, `/etc/cron.d`, user crontabs, systemd `.timer` unit files |
//! | `interfaces`, `routes` | sysinfo; `/proc/net/route`, `/proc/net/ipv6_route` |

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use breeze_agent_proto::livequery::{
    Cap, Caps, LiveAnswer, MAX_HASH_BYTES, MAX_HASH_FILE_BYTES, MAX_WALK_ENTRIES, Question,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sysinfo::{
    CpuRefreshKind, ProcessRefreshKind, ProcessesToUpdate, RefreshKind, System, UpdateKind, Users,
};

use super::protect::{PathGuard, Resolve};
use super::{Typed, system_time, unix_time};

/// Trees the file question does not walk: kernel interfaces, not files.
const NOT_FILE_TREES: &[&str] = &["/proc", "/sys", "/dev"];

/// The bounds of one answer, and what it has used of them.
#[derive(Debug)]
pub struct Limits {
    pub caps: Caps,
    /// Bytes this answer may still hash.
    pub hash_budget: u64,
    /// Directory entries the file walk may still visit.
    pub walk_budget: u64,
    pub deadline: Instant,
}

impl Limits {
    /// The agent's limits for `caps` (already clamped) until `deadline`.
    pub fn new(caps: Caps, deadline: Instant) -> Limits {
        Limits {
            caps,
            hash_budget: MAX_HASH_BYTES,
            walk_budget: MAX_WALK_ENTRIES,
            deadline,
        }
    }
}

/// Rows collected under the caps.
#[derive(Debug)]
struct Rows {
    limits: Limits,
    rows: Vec<Value>,
    bytes: u64,
    cap: Option<Cap>,
    stopped: bool,
    protected_skipped: u64,
}

impl Rows {
    fn new(limits: Limits) -> Rows {
        Rows {
            limits,
            rows: Vec::new(),
            bytes: 0,
            cap: None,
            stopped: false,
            protected_skipped: 0,
        }
    }

    /// Adds a row; false once a row or byte cap stops the answer (this row not added).
    fn push(&mut self, row: Value) -> bool {
        if self.stopped {
            return false;
        }
        let n = serde_json::to_vec(&row).map_or(0, |v| v.len() as u64) + 1;
        if self.rows.len() as u64 >= u64::from(self.limits.caps.rows) {
            return self.stop(Cap::Rows);
        }
        if self.bytes + n > self.limits.caps.bytes {
            return self.stop(Cap::Bytes);
        }
        self.bytes += n;
        self.rows.push(row);
        true
    }

    fn stop(&mut self, cap: Cap) -> bool {
        self.note(cap);
        self.stopped = true;
        false
    }

    /// Names `cap` unless an earlier one is named.
    fn note(&mut self, cap: Cap) {
        self.cap.get_or_insert(cap);
    }

    fn full(&self) -> bool {
        self.stopped
    }

    /// Hashes the file at `given` through the guard within the hash budget: `None` when
    /// protected (counted), unreadable, too large or past the budget (named).
    fn hash(&mut self, guard: &PathGuard, given: &str, size: u64) -> Option<String> {
        if size > MAX_HASH_FILE_BYTES || size > self.limits.hash_budget {
            self.note(Cap::HashBytes);
            return None;
        }
        let resolved = match guard.resolve(given, Resolve::Follow) {
            Ok(p) => p,
            Err(e) => {
                if e == PathGuard::refusal(given) {
                    self.protected_skipped += 1;
                }
                return None;
            }
        };
        let file = match guard.open_read(given, &resolved) {
            Ok(f) => f,
            Err(e) => {
                if e == PathGuard::refusal(given) {
                    self.protected_skipped += 1;
                }
                return None;
            }
        };
        let allowed = self.limits.hash_budget.min(MAX_HASH_FILE_BYTES);
        let mut reader = file.take(allowed + 1);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut read = 0u64;
        loop {
            let n = reader.read(&mut buf).ok()?;
            if n == 0 {
                break;
            }
            read += n as u64;
            h.update(&buf[..n]);
        }
        self.limits.hash_budget = self.limits.hash_budget.saturating_sub(read);
        if read > allowed {
            // The file grew past the budget while read: no hash of a part.
            self.note(Cap::HashBytes);
            return None;
        }
        Some(hex::encode(h.finalize()))
    }

    fn answer(self, question: &Question) -> Typed {
        let answer = LiveAnswer {
            question: question.name().to_owned(),
            rows: self.rows,
            cap: self.cap,
            bytes: self.bytes,
            protected_skipped: self.protected_skipped,
        };
        serde_json::to_value(answer).map_err(|e| e.to_string())
    }
}

/// Whether `text` holds `filter` (case-insensitive); no filter holds everything.
fn holds(text: &str, filter: Option<&String>) -> bool {
    filter.is_none_or(|f| text.to_lowercase().contains(&f.to_lowercase()))
}

/// Answers `question` under `limits`; `guard` is the command's view of the protected paths.
pub fn answer(guard: &PathGuard, question: &Question, limits: Limits) -> Typed {
    question.validate()?;
    let mut rows = Rows::new(limits);
    match question {
        Question::Processes { name, hash } => processes(guard, &mut rows, name.as_ref(), *hash),
        Question::ListeningPorts { port } => listening_ports(&mut rows, *port),
        Question::Packages { name } => packages(&mut rows, name.as_ref())?,
        Question::Users { name } => users(&mut rows, name.as_ref())?,
        Question::Groups { name } => groups(&mut rows, name.as_ref())?,
        Question::Sessions => sessions(&mut rows),
        Question::Services { name, state } => services(&mut rows, name.as_ref(), state.as_ref())?,
        Question::KernelModules { name } => kernel_modules(&mut rows, name.as_ref())?,
        Question::Files { pattern } => files(guard, &mut rows, pattern)?,
        Question::ScheduledTasks => scheduled_tasks(guard, &mut rows),
        Question::Interfaces => interfaces(&mut rows),
        Question::Routes => routes(&mut rows),
    }
    rows.answer(question)
}

fn processes(guard: &PathGuard, rows: &mut Rows, name: Option<&String>, hash: bool) {
    let kind = ProcessRefreshKind::nothing()
        .with_cpu()
        .with_memory()
        .with_user(UpdateKind::OnlyIfNotSet)
        .with_exe(UpdateKind::OnlyIfNotSet);
    let mut system =
        System::new_with_specifics(RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing()));
    system.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
    std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
    system.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
    let cores = system.cpus().len().max(1) as f64;
    let users = Users::new_with_refreshed_list();
    let mut list: Vec<_> = system
        .processes()
        .values()
        .filter(|p| p.thread_kind().is_none())
        .filter(|p| holds(&p.name().to_string_lossy(), name))
        .collect();
    list.sort_by_key(|p| p.pid().as_u32());
    let mut hashes: HashMap<PathBuf, Option<String>> = HashMap::new();
    for p in list {
        let path = p.exe().map(Path::to_path_buf);
        let sha256 = match (&path, hash) {
            (Some(exe), true) => {
                if let Some(known) = hashes.get(exe) {
                    known.clone()
                } else {
                    let size = std::fs::metadata(exe).map_or(0, |m| m.len());
                    let h = rows.hash(guard, &exe.to_string_lossy(), size);
                    hashes.insert(exe.clone(), h.clone());
                    h
                }
            }
            _ => None,
        };
        let cpu = f64::from(p.cpu_usage()) / cores;
        let row = json!({
            "pid": p.pid().as_u32(),
            "name": p.name().to_string_lossy(),
            "path": path.map(|e| e.to_string_lossy().into_owned()),
            "user": p.user_id().and_then(|u| users.get_user_by_id(u)).map(|u| u.name().to_owned()),
            "cpuPercent": (cpu * 100.0).round() / 100.0,
            "memoryBytes": p.memory(),
            "startedAt": unix_time(p.start_time()),
            "sha256": sha256,
        });
        if !rows.push(row) {
            break;
        }
    }
}

/// Socket inode → (pid, process name), from `/proc/<pid>/fd` (every process as root, one's own
/// otherwise).
fn socket_owners(wanted: &HashSet<u64>) -> HashMap<u64, (u32, String)> {
    let mut out = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.filter_map(Result::ok).take(20_000) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_default();
        for fd in fds.filter_map(Result::ok) {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if let Some(inode) = target
                .to_string_lossy()
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok())
                && wanted.contains(&inode)
            {
                out.entry(inode).or_insert_with(|| (pid, comm.clone()));
            }
        }
    }
    out
}

fn listening_ports(rows: &mut Rows, port: Option<u16>) {
    let mut listeners = Vec::new();
    for proto in ["tcp", "tcp6", "udp", "udp6"] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/net/{proto}")) {
            listeners.extend(super::security::parse_proc_net(&text, proto));
        }
    }
    listeners.retain(|l| port.is_none_or(|p| l.port == p));
    listeners
        .sort_by(|a, b| (a.port, a.protocol, &a.address).cmp(&(b.port, b.protocol, &b.address)));
    let wanted: HashSet<u64> = listeners.iter().map(|l| l.inode).collect();
    let owners = socket_owners(&wanted);
    for l in listeners {
        let owner = owners.get(&l.inode);
        let row = json!({
            "protocol": l.protocol,
            "address": l.address,
            "port": l.port,
            "process": owner.map(|o| o.1.clone()),
            "pid": owner.map(|o| o.0),
        });
        if !rows.push(row) {
            break;
        }
    }
}

/// One installed package as the packages question answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledPackage {
    pub name: String,
    pub version: String,
    pub arch: Option<String>,
    pub source: &'static str,
    pub source_package: Option<String>,
}

/// `dpkg-query -W -f '${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\t${source:Package}\n'`
/// lines; only installed packages (`ii`, `hi`, …: second letter `i`).
pub fn parse_dpkg(text: &str) -> Vec<InstalledPackage> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 5 || f[0].as_bytes().get(1) != Some(&b'i') {
                return None;
            }
            let name = f[1].trim();
            let source_package = f[4].trim();
            (!name.is_empty()).then(|| InstalledPackage {
                name: name.to_owned(),
                version: f[2].trim().to_owned(),
                arch: Some(f[3].trim().to_owned()).filter(|a| !a.is_empty()),
                source: "dpkg",
                source_package: Some(source_package.to_owned()).filter(|s| !s.is_empty()),
            })
        })
        .collect()
}

/// `rpm -qa --qf '%{NAME}\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\t%{ARCH}\t%{SOURCERPM}\n'`
/// lines; the source package is the source RPM's name without version.
pub fn parse_rpm(text: &str) -> Vec<InstalledPackage> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 4 || f[0].trim().is_empty() || f[0].starts_with("gpg-pubkey") {
                return None;
            }
            // `openssl-3.0.7-27.el9.src.rpm` → `openssl`: drop the last two `-` fields.
            let source_package = f[3]
                .trim()
                .strip_suffix(".src.rpm")
                .and_then(|s| s.rsplitn(3, '-').nth(2))
                .map(str::to_owned);
            Some(InstalledPackage {
                name: f[0].trim().to_owned(),
                version: f[1].trim().to_owned(),
                arch: Some(f[2].trim().to_owned()).filter(|a| !a.is_empty() && a != "(none)"),
                source: "rpm",
                source_package,
            })
        })
        .collect()
}

/// apk's installed database (`P:` name, `V:` version, `A:` arch, `o:` origin; blank-line
/// separated).
pub fn parse_apk(text: &str) -> Vec<InstalledPackage> {
    let mut out = Vec::new();
    let mut cur: Option<InstalledPackage> = None;
    for line in text.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if let Some(p) = cur.take().filter(|p| !p.name.is_empty()) {
                out.push(p);
            }
            continue;
        }
        let p = cur.get_or_insert_with(|| InstalledPackage {
            name: String::new(),
            version: String::new(),
            arch: None,
            source: "apk",
            source_package: None,
        });
        match line.split_once(':') {
            Some(("P", v)) => p.name = v.to_owned(),
            Some(("V", v)) => p.version = v.to_owned(),
            Some(("A", v)) => p.arch = Some(v.to_owned()),
            Some(("o", v)) => p.source_package = Some(v.to_owned()),
            _ => {}
        }
    }
    out
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The installed packages from whichever manager this machine has.
pub fn installed_packages() -> Result<Vec<InstalledPackage>, String> {
    if let Some(text) = run(
        "dpkg-query",
        &[
            "-W",
            "-f",
            "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\t${source:Package}\n",
        ],
    ) {
        return Ok(parse_dpkg(&text));
    }
    if let Some(text) = run(
        "rpm",
        &[
            "-qa",
            "--qf",
            "%{NAME}\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\t%{ARCH}\t%{SOURCERPM}\n",
        ],
    ) {
        return Ok(parse_rpm(&text));
    }
    if let Ok(text) = std::fs::read_to_string("/lib/apk/db/installed") {
        return Ok(parse_apk(&text));
    }
    Err("no package manager found (dpkg, rpm or apk)".to_owned())
}

fn packages(rows: &mut Rows, name: Option<&String>) -> Result<(), String> {
    let mut list = installed_packages()?;
    list.sort_by(|a, b| a.name.cmp(&b.name).then(a.arch.cmp(&b.arch)));
    for p in list.into_iter().filter(|p| holds(&p.name, name)) {
        let row = json!({
            "name": p.name,
            "version": p.version,
            "arch": p.arch,
            "source": p.source,
            "sourcePackage": p.source_package,
        });
        if !rows.push(row) {
            break;
        }
    }
    Ok(())
}

/// `/etc/passwd` lines as user rows (the password field is never read out).
pub fn parse_passwd(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f.len() >= 7).then(|| {
                json!({
                    "name": f[0],
                    "uid": f[2].parse::<u32>().ok(),
                    "gid": f[3].parse::<u32>().ok(),
                    "home": f[5],
                    "shell": f[6],
                    "description": f[4],
                })
            })
        })
        .collect()
}

/// `/etc/group` lines as group rows.
pub fn parse_group(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f.len() >= 4).then(|| {
                let members: Vec<&str> = f[3].split(',').filter(|m| !m.is_empty()).collect();
                json!({ "name": f[0], "gid": f[2].parse::<u32>().ok(), "members": members })
            })
        })
        .collect()
}

fn push_named(rows: &mut Rows, list: Vec<Value>, name: Option<&String>) {
    for row in list {
        if !holds(row["name"].as_str().unwrap_or_default(), name) {
            continue;
        }
        if !rows.push(row) {
            break;
        }
    }
}

fn users(rows: &mut Rows, name: Option<&String>) -> Result<(), String> {
    let text = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    push_named(rows, parse_passwd(&text), name);
    Ok(())
}

fn groups(rows: &mut Rows, name: Option<&String>) -> Result<(), String> {
    let text = std::fs::read_to_string("/etc/group")
        .map_err(|e| format!("cannot read /etc/group: {e}"))?;
    push_named(rows, parse_group(&text), name);
    Ok(())
}

fn sessions(rows: &mut Rows) {
    for s in crate::system::heartbeat::logged_in_users() {
        let row = json!({
            "user": s.username,
            "terminal": s.terminal,
            "host": s.host,
            "loginAt": s.login_at,
            "idleSecs": s.idle_secs,
        });
        if !rows.push(row) {
            break;
        }
    }
}

fn services(rows: &mut Rows, name: Option<&String>, state: Option<&String>) -> Result<(), String> {
    let listed = super::services::list()?;
    let list = listed["services"].as_array().cloned().unwrap_or_default();
    for s in list {
        let unit = s["name"].as_str().unwrap_or_default();
        let active = s["activeState"].as_str().unwrap_or_default();
        if !holds(unit, name) || state.is_some_and(|st| st != active) {
            continue;
        }
        let row = json!({
            "name": unit,
            "description": s["description"],
            "activeState": active,
            "subState": s["subState"],
            "enabled": s["enabled"],
        });
        if !rows.push(row) {
            break;
        }
    }
    Ok(())
}

/// `/proc/modules` lines: `name size refcount usedby,… state address`.
pub fn parse_modules(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 5).then(|| {
                let used_by: Vec<&str> = f[3]
                    .split(',')
                    .filter(|m| !m.is_empty() && *m != "-")
                    .collect();
                json!({
                    "name": f[0],
                    "sizeBytes": f[1].parse::<u64>().ok(),
                    "usedBy": used_by,
                    "state": f[4],
                })
            })
        })
        .collect()
}

fn kernel_modules(rows: &mut Rows, name: Option<&String>) -> Result<(), String> {
    let text = match std::fs::read_to_string("/proc/modules") {
        Ok(t) => t,
        // A kernel without loadable modules (or a container without the file) has none.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read /proc/modules: {e}")),
    };
    let mut list = parse_modules(&text);
    list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    push_named(rows, list, name);
    Ok(())
}

/// Whether the glob component `pattern` (`*`, `?`) matches `name`.
pub fn component_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative wildcard matching with backtracking to the last `*`.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn is_wild(component: &str) -> bool {
    component.contains(['*', '?'])
}

/// A walk of the file glob.
struct Walk<'a> {
    guard: &'a PathGuard,
    parts: Vec<String>,
    seen: HashSet<PathBuf>,
}

impl Walk<'_> {
    /// Visits `dir` (real, link-free) for `parts[i..]`; `shown` is its name as the pattern
    /// spells it. False once the answer is complete (a cap or the deadline).
    fn visit(&mut self, rows: &mut Rows, dir: &Path, i: usize) -> bool {
        if rows.full() {
            return false;
        }
        if Instant::now() >= rows.limits.deadline {
            return false;
        }
        let part = self.parts[i].clone();
        let last = i + 1 == self.parts.len();
        if part == "**" {
            // Zero directories: the next part here; then every subdirectory, still at `**`.
            if last {
                // A trailing `**` means every file beneath.
                return self.each(
                    rows,
                    dir,
                    |_| true,
                    |walk, rows, path, is_dir| {
                        if is_dir {
                            walk.visit(rows, path, i)
                        } else {
                            walk.file(rows, path)
                        }
                    },
                );
            }
            if !self.visit(rows, dir, i + 1) {
                return false;
            }
            return self.each(
                rows,
                dir,
                |_| true,
                |walk, rows, path, is_dir| !is_dir || walk.visit(rows, path, i),
            );
        }
        self.each(
            rows,
            dir,
            |name| component_matches(&part, name),
            |walk, rows, path, is_dir| match (last, is_dir) {
                (true, false) => walk.file(rows, path),
                (false, true) => walk.visit(rows, path, i + 1),
                _ => true,
            },
        )
    }

    /// Calls `then` on each entry of `dir` whose name passes `keep` (sorted, links skipped,
    /// protected entries counted and skipped, every entry charged to the walk budget).
    fn each(
        &mut self,
        rows: &mut Rows,
        dir: &Path,
        keep: impl Fn(&str) -> bool,
        mut then: impl FnMut(&mut Self, &mut Rows, &Path, bool) -> bool,
    ) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return true;
        };
        let mut names: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for name in names {
            if rows.limits.walk_budget == 0 {
                rows.note(Cap::WalkEntries);
                return false;
            }
            rows.limits.walk_budget -= 1;
            let Some(text) = name.to_str() else {
                continue;
            };
            if !keep(text) {
                continue;
            }
            let path = dir.join(&name);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if self.guard.skips(&path, &meta) {
                rows.protected_skipped += 1;
                continue;
            }
            let ft = meta.file_type();
            if ft.is_symlink() || !(ft.is_dir() || ft.is_file()) {
                continue;
            }
            if !then(self, rows, &path, ft.is_dir()) {
                return false;
            }
        }
        true
    }

    fn file(&mut self, rows: &mut Rows, path: &Path) -> bool {
        if !self.seen.insert(path.to_path_buf()) {
            return true;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return true;
        };
        let shown = path.to_string_lossy().into_owned();
        let sha256 = rows.hash(self.guard, &shown, meta.len());
        #[cfg(unix)]
        let (mode, uid) = {
            use std::os::unix::fs::MetadataExt;
            (
                Some(format!("{:o}", meta.mode() & 0o7777)),
                Some(meta.uid()),
            )
        };
        #[cfg(not(unix))]
        let (mode, uid): (Option<String>, Option<u32>) = (None, None);
        rows.push(json!({
            "path": shown,
            "sizeBytes": meta.len(),
            "modifiedAt": meta.modified().ok().and_then(system_time),
            "mode": mode,
            "uid": uid,
            "sha256": sha256,
        }))
    }
}

fn files(guard: &PathGuard, rows: &mut Rows, pattern: &str) -> Result<(), String> {
    let parts: Vec<String> = pattern
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
        .collect();
    let literal = parts
        .iter()
        .take_while(|c| !is_wild(c) && *c != "**")
        .count();
    let prefix = format!("/{}", parts[..literal].join("/"));
    if NOT_FILE_TREES
        .iter()
        .any(|t| Path::new(&prefix).starts_with(t))
    {
        return Err(format!(
            "{prefix} is not a file tree; the file question does not read it"
        ));
    }
    // The literal prefix is checked like any file command's path (a protected one refused).
    let base = match guard.resolve(&prefix, Resolve::Follow) {
        Ok(p) => p,
        Err(e) if e == PathGuard::refusal(&prefix) => return Err(e),
        Err(_) => return Ok(()),
    };
    let Ok(meta) = std::fs::metadata(&base) else {
        return Ok(());
    };
    let mut walk = Walk {
        guard,
        parts: parts[literal..].to_vec(),
        seen: HashSet::new(),
    };
    if walk.parts.is_empty() {
        // A literal path: the file itself.
        if meta.is_file() {
            walk.file(rows, &base);
        }
        return Ok(());
    }
    if !meta.is_dir() {
        return Ok(());
    }
    // The walk from `/` itself never enters the kernel trees.
    if literal == 0 {
        walk.guard_roots(rows, &base);
        return Ok(());
    }
    walk.visit(rows, &base, 0);
    Ok(())
}

impl Walk<'_> {
    /// A walk whose pattern starts with a wildcard at `/`: the kernel trees are left out.
    fn guard_roots(&mut self, rows: &mut Rows, root: &Path) {
        let part = self.parts[0].clone();
        let last = self.parts.len() == 1;
        self.each(
            rows,
            root,
            |name| {
                !NOT_FILE_TREES.contains(&format!("/{name}").as_str())
                    && (part == "**" || component_matches(&part, name))
            },
            |walk, rows, path, is_dir| {
                if part == "**" {
                    return if is_dir {
                        walk.visit(rows, path, 0)
                    } else {
                        last && walk.file(rows, path)
                    };
                }
                match (last, is_dir) {
                    (true, false) => walk.file(rows, path),
                    (false, true) => walk.visit(rows, path, 1),
                    _ => true,
                }
            },
        );
    }
}

/// One cron line as a row (`user` from the line where the file format has one).
fn cron_rows(text: &str, source: &str, with_user: bool, file_user: Option<&str>) -> Vec<Value> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let first = *fields.first()?;
            // Variable assignments (`SHELL=/bin/sh`) are not tasks.
            if first.contains('=') {
                return None;
            }
            let (schedule, rest) = if first.starts_with('@') {
                (first.to_owned(), &fields[1..])
            } else if fields.len() >= 6 {
                (fields[..5].join(" "), &fields[5..])
            } else {
                return None;
            };
            let (user, command) = if with_user {
                (rest.first().map(|u| (*u).to_owned()), rest.get(1..)?.join(" "))
            } else {
                (file_user.map(str::to_owned), rest.join(" "))
            };
            (!command.is_empty()).then(|| {
                json!({ "kind": "cron", "source": source, "schedule": schedule, "user": user, "command": command })
            })
        })
        .collect()
}

/// Parses cron text: the system format (`/etc/crontab`, `/etc/cron.d`) names the user on
/// each line; a user crontab is that user's.
pub fn parse_cron(text: &str, source: &str, user: Option<&str>) -> Vec<Value> {
    cron_rows(text, source, user.is_none(), user)
}

/// A systemd `.timer` unit file as a row: its `OnCalendar=`/`On*Sec=` settings and the unit it
/// activates (`Unit=`, else the timer's own name with `.service`).
pub fn parse_timer(text: &str, source: &str, name: &str) -> Option<Value> {
    let mut schedule = Vec::new();
    let mut unit = None;
    let mut in_timer = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_timer = line == "[Timer]";
            continue;
        }
        if !in_timer {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let (k, v) = (k.trim(), v.trim());
            if k == "Unit" {
                unit = Some(v.to_owned());
            } else if k.starts_with("On") && !v.is_empty() {
                schedule.push(format!("{k}={v}"));
            }
        }
    }
    if schedule.is_empty() {
        return None;
    }
    let unit = unit.unwrap_or_else(|| format!("{}.service", name.trim_end_matches(".timer")));
    Some(json!({
        "kind": "systemd_timer",
        "source": source,
        "schedule": schedule.join("; "),
        "user": null,
        "command": unit,
    }))
}

/// Reads `path` through the guard (protected: counted, skipped).
fn guarded_text(guard: &PathGuard, rows: &mut Rows, path: &Path) -> Option<String> {
    let given = path.to_string_lossy();
    let resolved = match guard.resolve(&given, Resolve::Follow) {
        Ok(p) => p,
        Err(e) => {
            if e == PathGuard::refusal(&given) {
                rows.protected_skipped += 1;
            }
            return None;
        }
    };
    let file = match guard.open_read(&given, &resolved) {
        Ok(f) => f,
        Err(e) => {
            if e == PathGuard::refusal(&given) {
                rows.protected_skipped += 1;
            }
            return None;
        }
    };
    let mut text = String::new();
    file.take(1024 * 1024).read_to_string(&mut text).ok()?;
    Some(text)
}

fn sorted_files(dir: &str) -> Vec<PathBuf> {
    let mut list: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|es| es.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    list.sort();
    list
}

fn scheduled_tasks(guard: &PathGuard, rows: &mut Rows) {
    let mut found = Vec::new();
    let mut system_files = vec![PathBuf::from("/etc/crontab")];
    system_files.extend(sorted_files("/etc/cron.d"));
    for path in system_files {
        if let Some(text) = guarded_text(guard, rows, &path) {
            found.extend(parse_cron(&text, &path.to_string_lossy(), None));
        }
    }
    for dir in ["/var/spool/cron/crontabs", "/var/spool/cron"] {
        for path in sorted_files(dir) {
            if !path.is_file() {
                continue;
            }
            let user = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if let Some(text) = guarded_text(guard, rows, &path) {
                found.extend(parse_cron(&text, &path.to_string_lossy(), user.as_deref()));
            }
        }
    }
    let mut timers_seen = HashSet::new();
    for dir in [
        "/etc/systemd/system",
        "/run/systemd/system",
        "/usr/lib/systemd/system",
        "/lib/systemd/system",
    ] {
        for path in sorted_files(dir) {
            let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            // The first directory in systemd's order that defines a timer wins.
            if !name.ends_with(".timer") || !timers_seen.insert(name.clone()) {
                continue;
            }
            if let Some(text) = guarded_text(guard, rows, &path)
                && let Some(row) = parse_timer(&text, &path.to_string_lossy(), &name)
            {
                found.push(row);
            }
        }
    }
    for row in found {
        if !rows.push(row) {
            break;
        }
    }
}

fn interfaces(rows: &mut Rows) {
    for i in crate::system::inventory::interfaces() {
        if !rows.push(json!({ "name": i.name, "mac": i.mac, "addresses": i.addresses })) {
            break;
        }
    }
}

/// `/proc/net/route` (IPv4; little-endian hex addresses) as route rows.
pub fn parse_route_v4(text: &str) -> Vec<Value> {
    let ip = |hex: &str| {
        u32::from_str_radix(hex, 16)
            .ok()
            .map(|n| std::net::Ipv4Addr::from(n.to_le_bytes()))
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let dest = ip(f[1])?;
            let gateway = ip(f[2])?;
            let prefix = ip(f[7]).map_or(0, |m| u32::from(m).count_ones());
            Some(json!({
                "destination": format!("{dest}/{prefix}"),
                "gateway": (!gateway.is_unspecified()).then(|| gateway.to_string()),
                "interface": f[0],
                "metric": f[6].parse::<u64>().ok(),
            }))
        })
        .collect()
}

/// `/proc/net/ipv6_route` (big-endian hex) as route rows.
pub fn parse_route_v6(text: &str) -> Vec<Value> {
    let ip = |hex: &str| {
        u128::from_str_radix(hex, 16)
            .ok()
            .map(std::net::Ipv6Addr::from)
    };
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                return None;
            }
            let dest = ip(f[0])?;
            let prefix = u8::from_str_radix(f[1], 16).ok()?;
            let gateway = ip(f[4])?;
            Some(json!({
                "destination": format!("{dest}/{prefix}"),
                "gateway": (!gateway.is_unspecified()).then(|| gateway.to_string()),
                "interface": f[9],
                "metric": u64::from_str_radix(f[5], 16).ok(),
            }))
        })
        .collect()
}

fn routes(rows: &mut Rows) {
    let mut list = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/proc/net/route") {
        list.extend(parse_route_v4(&text));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/net/ipv6_route") {
        list.extend(parse_route_v6(&text));
    }
    for row in list {
        if !rows.push(row) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn globs_match_within_a_component() {
        assert!(component_matches("*.jar", "log4j-core-2.14.jar"));
        assert!(component_matches("log4j-*-2.1?.jar", "log4j-core-2.14.jar"));
        assert!(!component_matches("*.jar", "log4j.jar.sig"));
        assert!(component_matches("*", ""));
        assert!(component_matches("a*b*c", "aXXbYYc"));
        assert!(!component_matches("a*b*c", "aXXbYY"));
    }

    #[test]
    fn package_databases_parse() {
        let dpkg = parse_dpkg(
            "ii \topenssl\t3.0.11-1~deb12u2\tamd64\topenssl\nrc \told\t1.0\tamd64\told\nii \tlibssl3\t3.0.11-1~deb12u2\tamd64\topenssl\n",
        );
        assert_eq!(dpkg.len(), 2);
        assert_eq!(dpkg[1].source_package.as_deref(), Some("openssl"));
        let rpm = parse_rpm(
            "openssl-libs\t1:3.0.7-27.el9\tx86_64\topenssl-3.0.7-27.el9.src.rpm\ngpg-pubkey\t0\t(none)\t(none)\n",
        );
        assert_eq!(rpm.len(), 1);
        assert_eq!(rpm[0].version, "1:3.0.7-27.el9");
        assert_eq!(rpm[0].source_package.as_deref(), Some("openssl"));
        let apk = parse_apk(
            "C:Q1abc=\nP:musl\nV:1.2.4-r2\nA:x86_64\no:musl\n\nP:busybox\nV:1.36.1-r5\no:busybox\n",
        );
        assert_eq!(apk.len(), 2);
        assert_eq!(apk[0].version, "1.2.4-r2");
        assert_eq!(apk[1].source_package.as_deref(), Some("busybox"));
    }

    #[test]
    fn cron_and_timers_parse() {
        let sys = parse_cron(
            "SHELL=/bin/sh\n# m h dom mon dow user command\n17 * * * * root cd / && run-parts --report /etc/cron.hourly\n@reboot root /usr/bin/start\n",
            "/etc/crontab",
            None,
        );
        assert_eq!(sys.len(), 2);
        assert_eq!(sys[0]["schedule"], "17 * * * *");
        assert_eq!(sys[0]["user"], "root");
        assert_eq!(sys[1]["schedule"], "@reboot");
        let user = parse_cron(
            "*/5 * * * * /home/a/bin/sync\n",
            "/var/spool/cron/crontabs/a",
            Some("a"),
        );
        assert_eq!(user[0]["user"], "a");
        assert_eq!(user[0]["command"], "/home/a/bin/sync");
        let t = parse_timer(
            "[Unit]\nDescription=x\n[Timer]\nOnCalendar=daily\nPersistent=true\n",
            "/lib/systemd/system/apt-daily.timer",
            "apt-daily.timer",
        )
        .unwrap();
        assert_eq!(t["command"], "apt-daily.service");
        assert_eq!(t["schedule"], "OnCalendar=daily");
    }

    #[test]
    fn routes_parse() {
        let v4 = parse_route_v4(
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\neth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\neth0\t0000A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n",
        );
        assert_eq!(v4[0]["destination"], "0.0.0.0/0");
        assert_eq!(v4[0]["gateway"], "192.168.0.1");
        assert_eq!(v4[1]["destination"], "192.168.0.0/24");
        assert_eq!(v4[1]["gateway"], Value::Null);
        let v6 = parse_route_v6(
            "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n",
        );
        assert_eq!(v6[0]["destination"], "fe80::/64");
        assert_eq!(v6[0]["metric"], 256);
    }

    #[test]
    fn modules_and_accounts_parse() {
        let m = parse_modules(
            "nf_tables 348160 12 nft_chain_nat,nft_compat, Live 0x0000000000000000\nloop 40960 0 - Live 0x0\n",
        );
        assert_eq!(m[0]["usedBy"], json!(["nft_chain_nat", "nft_compat"]));
        assert_eq!(m[1]["usedBy"], json!([]));
        let u = parse_passwd("root:x:0:0:root:/root:/bin/bash\n");
        assert_eq!(u[0]["uid"], 0);
        assert!(u[0].get("password").is_none());
        let g = parse_group("sudo:x:27:alice,bob\n");
        assert_eq!(g[0]["members"], json!(["alice", "bob"]));
    }
}
