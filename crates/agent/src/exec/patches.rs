//! `PatchScan`, `PatchInstall` and `PatchRollback` through the machine's package manager: apt
//! (`apt-get`) or dnf.
//!
//! Which manager and which executable is [`PatchingConfig`] (the agent config file's
//! `patching`): tests name a fake executable that prints canned output and records its
//! invocations, so nothing here ever needs the real package database to change. Without a
//! configuration the agent looks for `/usr/bin/apt-get`, then `/usr/bin/dnf`.
//!
//! - Scan (read-only): apt `apt-get -s dist-upgrade` (a simulation: `Inst name [installed]
//!   (candidate origins [arch])`; an origin in a `-security` suite marks a security update;
//!   apt gives no severity); dnf `check-update` (exit 100: updates), `updateinfo list
//!   --updates` (advisory, `Severity/Sec.`) and `list --installed` (installed versions).
//! - Install: apt `apt-get install -y --only-upgrade` (noninteractive, keeping changed
//!   configuration files); dnf `upgrade -y`. A package still offered afterwards failed.
//! - Rollback: apt `apt-get install -y --allow-downgrades name=version` (possible while the
//!   repository still offers the version); dnf `downgrade -y name-version`.
//! - Remove (`PackageRemove`): apt simulates `apt-get -s remove name` per package (`Remv`
//!   lines: installed, and what else would go) and refuses when a package not named would be
//!   removed with it, else `apt-get remove -y` (configuration files kept); dnf `list
//!   --installed`, then `remove --assumeno` (its transaction summary: what else would go) and
//!   the same refusal, else `remove -y` — both with `clean_requirements_on_remove` off, so dnf
//!   takes only what was named. Checked again afterwards: a package still installed failed.
//!   Never reboots.
//! - Reboot: required when `/var/run/reboot-required` exists (apt) or `needs-restarting -r`
//!   says so (dnf). Policy `never` never reboots; `if_needed` when required; `always` always —
//!   but with users logged in (the safety signal) only when the call allows it; otherwise the
//!   answer says the reboot was deferred and who is logged in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use breeze_agent_proto::{
    AvailablePatch, PackageOutcome, PackageVersion, PatchInstallReport, PatchScanReport, RebootMode,
};
use breeze_core::{Clock, PackageStatus};
use serde::{Deserialize, Serialize};

/// The package managers the agent drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Manager {
    Apt,
    Dnf,
}

impl Manager {
    fn name(self) -> &'static str {
        match self {
            Manager::Apt => "apt",
            Manager::Dnf => "dnf",
        }
    }
}

/// How the agent patches (the config file's `patching`; every field optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchingConfig {
    /// apt or dnf (default: whichever is installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<Manager>,
    /// The executable to run (default `/usr/bin/apt-get` or `/usr/bin/dnf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<PathBuf>,
    /// The reboot command; `+<minutes>` is appended (default `shutdown -r`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_command: Option<Vec<String>>,
    /// The file whose presence means a reboot is required (default
    /// `/var/run/reboot-required`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_required_file: Option<PathBuf>,
}

/// A package manager ready to run.
#[derive(Debug, Clone)]
pub struct PackageManager {
    manager: Manager,
    executable: PathBuf,
    reboot_command: Vec<String>,
    reboot_required_file: PathBuf,
}

/// Whether `s` is a safe package name or version argument: 1–200 characters of letters,
/// digits and `.+-_:~`, not starting with `-` (never an option).
fn safe_arg(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+-_:~".contains(c))
}

impl PackageManager {
    /// The configured manager, else the one installed.
    pub fn detect(config: &PatchingConfig) -> Result<PackageManager, String> {
        let (manager, executable) = match (config.manager, &config.executable) {
            (Some(m), Some(e)) => (m, e.clone()),
            (Some(Manager::Apt), None) => (Manager::Apt, PathBuf::from("/usr/bin/apt-get")),
            (Some(Manager::Dnf), None) => (Manager::Dnf, PathBuf::from("/usr/bin/dnf")),
            (None, exe) => {
                if Path::new("/usr/bin/apt-get").exists() {
                    (
                        Manager::Apt,
                        exe.clone().unwrap_or_else(|| "/usr/bin/apt-get".into()),
                    )
                } else if Path::new("/usr/bin/dnf").exists() {
                    (
                        Manager::Dnf,
                        exe.clone().unwrap_or_else(|| "/usr/bin/dnf".into()),
                    )
                } else {
                    return Err(
                        "no supported package manager (apt-get or dnf) on this machine".to_owned(),
                    );
                }
            }
        };
        Ok(PackageManager {
            manager,
            executable,
            reboot_command: reboot_command(config),
            reboot_required_file: config
                .reboot_required_file
                .clone()
                .unwrap_or_else(|| "/var/run/reboot-required".into()),
        })
    }

    fn run(&self, args: &[String]) -> Result<Output, String> {
        Command::new(&self.executable)
            .args(args)
            .env("LC_ALL", "C")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("could not run {}: {e}", self.executable.display()))
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Whether the OS asks for a reboot.
    pub fn reboot_required(&self) -> bool {
        if self.reboot_required_file.exists() {
            return true;
        }
        self.manager == Manager::Dnf
            && self
                .run(&Self::args(&["needs-restarting", "-r"]))
                .is_ok_and(|o| o.status.code() == Some(1))
    }

    /// The updates on offer, read-only.
    pub fn scan(&self, clock: &dyn Clock, users: Vec<String>) -> Result<PatchScanReport, String> {
        let patches = match self.manager {
            Manager::Apt => {
                let out = self.run(&Self::args(&[
                    "-s",
                    "-o",
                    "Debug::NoLocking=1",
                    "dist-upgrade",
                ]))?;
                if !out.status.success() {
                    return Err(failure("apt-get -s dist-upgrade", &out));
                }
                parse_apt_simulation(&String::from_utf8_lossy(&out.stdout))
            }
            Manager::Dnf => {
                let out = self.run(&Self::args(&["-q", "check-update"]))?;
                match out.status.code() {
                    Some(0) => Vec::new(),
                    Some(100) => {
                        let updates = parse_dnf_check_update(&String::from_utf8_lossy(&out.stdout));
                        let info = self
                            .run(&Self::args(&["-q", "updateinfo", "list", "--updates"]))
                            .map(|o| parse_dnf_updateinfo(&String::from_utf8_lossy(&o.stdout)))
                            .unwrap_or_default();
                        let mut args = Self::args(&["-q", "list", "--installed"]);
                        args.extend(updates.iter().map(|u| u.name.clone()));
                        let installed = self
                            .run(&args)
                            .map(|o| parse_dnf_installed(&String::from_utf8_lossy(&o.stdout)))
                            .unwrap_or_default();
                        merge_dnf(updates, &info, &installed)
                    }
                    _ => return Err(failure("dnf check-update", &out)),
                }
            }
        };
        Ok(PatchScanReport {
            manager: self.manager.name().to_owned(),
            scanned_at: clock.now(),
            patches,
            reboot_required: self.reboot_required(),
            logged_in_users: users,
        })
    }

    /// Installs (upgrades) `packages`, then handles the reboot. `users` is asked who is logged
    /// in when a reboot is considered.
    pub fn install(
        &self,
        clock: &dyn Clock,
        packages: &[String],
        reboot: Reboot,
        users: &dyn Fn() -> Vec<String>,
    ) -> Result<PatchInstallReport, String> {
        check_names(packages.iter().map(String::as_str))?;
        if packages.is_empty() {
            return Err("packages: name at least one package".to_owned());
        }
        let before = self.scan(clock, Vec::new())?;
        let offered: HashMap<&str, &AvailablePatch> = before
            .patches
            .iter()
            .map(|p| (p.name.as_str(), p))
            .collect();
        let wanted: Vec<&String> = packages
            .iter()
            .filter(|p| offered.contains_key(p.as_str()))
            .collect();
        let mut error = None;
        if !wanted.is_empty() {
            let mut args = match self.manager {
                Manager::Apt => Self::args(&[
                    "install",
                    "-y",
                    "--only-upgrade",
                    "-o",
                    "Dpkg::Options::=--force-confdef",
                    "-o",
                    "Dpkg::Options::=--force-confold",
                ]),
                Manager::Dnf => Self::args(&["upgrade", "-y"]),
            };
            args.extend(wanted.iter().map(|p| (*p).clone()));
            let out = self.run(&args)?;
            if !out.status.success() {
                error = Some(failure("the install", &out));
            }
        }
        let after = self.scan(clock, Vec::new())?;
        let still: HashMap<&str, &AvailablePatch> =
            after.patches.iter().map(|p| (p.name.as_str(), p)).collect();
        let outcomes = packages
            .iter()
            .map(|name| match offered.get(name.as_str()) {
                None => PackageOutcome {
                    name: name.clone(),
                    status: PackageStatus::NotAvailable,
                    from_version: None,
                    to_version: None,
                    error: Some("no update is offered for this package".into()),
                },
                Some(p) => {
                    let failed = still
                        .get(name.as_str())
                        .is_some_and(|s| s.installed_version == p.installed_version);
                    PackageOutcome {
                        name: name.clone(),
                        status: if failed {
                            PackageStatus::Failed
                        } else {
                            PackageStatus::Installed
                        },
                        from_version: p.installed_version.clone(),
                        to_version: (!failed).then(|| p.available_version.clone()),
                        error: failed.then(|| {
                            error
                                .clone()
                                .unwrap_or_else(|| "still offered after the install".into())
                        }),
                    }
                }
            })
            .collect();
        Ok(self.finish(outcomes, reboot, users, after))
    }

    /// Puts `packages` back to the given versions.
    pub fn rollback(
        &self,
        clock: &dyn Clock,
        packages: &[PackageVersion],
        reboot: Reboot,
        users: &dyn Fn() -> Vec<String>,
    ) -> Result<PatchInstallReport, String> {
        check_names(packages.iter().map(|p| p.name.as_str()))?;
        check_names(packages.iter().map(|p| p.version.as_str()))?;
        if packages.is_empty() {
            return Err("packages: name at least one package".to_owned());
        }
        let mut outcomes = Vec::new();
        for p in packages {
            let args = match self.manager {
                Manager::Apt => vec![
                    "install".into(),
                    "-y".into(),
                    "--allow-downgrades".into(),
                    "-o".into(),
                    "Dpkg::Options::=--force-confold".into(),
                    format!("{}={}", p.name, p.version),
                ],
                Manager::Dnf => vec![
                    "downgrade".into(),
                    "-y".into(),
                    format!("{}-{}", p.name, p.version),
                ],
            };
            let out = self.run(&args)?;
            let text = String::from_utf8_lossy(&out.stderr).to_string()
                + &String::from_utf8_lossy(&out.stdout);
            let (status, error) = if out.status.success() {
                (PackageStatus::RolledBack, None)
            } else if text.contains("was not found")
                || text.contains("No package")
                || text.contains("not available")
            {
                (
                    PackageStatus::NotAvailable,
                    Some(format!(
                        "version {} is no longer offered by the repositories",
                        p.version
                    )),
                )
            } else {
                (PackageStatus::Failed, Some(failure("the rollback", &out)))
            };
            outcomes.push(PackageOutcome {
                name: p.name.clone(),
                status,
                from_version: None,
                to_version: (status == PackageStatus::RolledBack).then(|| p.version.clone()),
                error,
            });
        }
        let after = self.scan(clock, Vec::new())?;
        Ok(self.finish(outcomes, reboot, users, after))
    }

    /// Which of `packages` are installed, with their versions, and what removing them would
    /// remove besides them (their dependents) from a simulation where nothing changes: apt's
    /// `apt-get -s remove` per package (always: it is also how apt tells what is installed);
    /// dnf's `remove --assumeno` of the installed ones, when `simulate`. A name apt does not
    /// know is not installed.
    fn installed(
        &self,
        packages: &[String],
        simulate: bool,
    ) -> Result<HashMap<String, Installed>, String> {
        let mut found = HashMap::new();
        match self.manager {
            Manager::Apt => {
                for name in packages {
                    let out = self.run(&[
                        "-s".into(),
                        "-o".into(),
                        "Debug::NoLocking=1".into(),
                        "remove".into(),
                        name.clone(),
                    ])?;
                    let text = String::from_utf8_lossy(&out.stdout);
                    let removed = parse_apt_removals(&text);
                    if let Some(version) = removed
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                    {
                        let also = removed
                            .into_iter()
                            .map(|(n, _)| n)
                            .filter(|n| n != name)
                            .collect();
                        found.insert(name.clone(), Installed { version, also });
                    } else if !out.status.success()
                        && !String::from_utf8_lossy(&out.stderr).contains("Unable to locate")
                    {
                        return Err(failure("apt-get -s remove", &out));
                    }
                }
            }
            Manager::Dnf => {
                let mut args = Self::args(&["-q", "list", "--installed"]);
                args.extend(packages.iter().cloned());
                // Exit 1 with nothing listed: none of them is installed.
                let out = self.run(&args)?;
                for (name, version) in parse_dnf_installed(&String::from_utf8_lossy(&out.stdout)) {
                    if packages.contains(&name) {
                        found.insert(
                            name,
                            Installed {
                                version,
                                also: Vec::new(),
                            },
                        );
                    }
                }
                if simulate && !found.is_empty() {
                    let mut present: Vec<String> = found.keys().cloned().collect();
                    present.sort();
                    let also = self.dnf_dependents(&present)?;
                    for i in found.values_mut() {
                        i.also.clone_from(&also);
                    }
                }
            }
        }
        Ok(found)
    }

    /// What `dnf remove` of `packages` would take besides them, from its transaction summary
    /// with `--assumeno` (nothing changes). Unused dependencies are left out of the removal
    /// (`clean_requirements_on_remove` off, here and in the removal itself), like apt without
    /// autoremove: what remains are the packages that need one of them (dependents).
    fn dnf_dependents(&self, packages: &[String]) -> Result<Vec<String>, String> {
        let mut args = Self::args(&["remove", "--assumeno", DNF_KEEP_UNUSED]);
        args.extend(packages.iter().cloned());
        // dnf answers "Operation aborted" with exit 1: the summary is what counts.
        let out = self.run(&args)?;
        let text = String::from_utf8_lossy(&out.stdout);
        let taken = parse_dnf_removals(&text);
        if !packages.iter().all(|p| taken.contains(p)) {
            return Err(format!(
                "dnf's removal check did not list what it would remove; {}",
                failure("dnf remove --assumeno", &out)
            ));
        }
        Ok(taken
            .into_iter()
            .filter(|n| !packages.contains(n))
            .collect())
    }

    /// Removes the installed ones of `packages` (apt keeps their configuration files); never
    /// reboots. When removing them would also remove a package not named (apt's simulation,
    /// dnf's `--assumeno` summary), nothing is removed and each says which: a removal takes
    /// exactly what was asked for.
    pub fn remove(&self, packages: &[String]) -> Result<PatchInstallReport, String> {
        check_names(packages.iter().map(String::as_str))?;
        if packages.is_empty() {
            return Err("packages: name at least one package".to_owned());
        }
        let before = self.installed(packages, true)?;
        let mut dependents: Vec<String> = before
            .values()
            .flat_map(|i| i.also.iter())
            .filter(|n| !packages.contains(n))
            .cloned()
            .collect();
        dependents.sort();
        dependents.dedup();
        let mut error = None;
        if !dependents.is_empty() {
            error = Some(format!(
                "removing it would also remove {}; nothing was removed",
                dependents.join(", ")
            ));
        } else if !before.is_empty() {
            let mut args = Self::args(&["remove", "-y"]);
            if self.manager == Manager::Dnf {
                args.push(DNF_KEEP_UNUSED.to_owned());
            }
            args.extend(packages.iter().filter(|p| before.contains_key(*p)).cloned());
            let out = self.run(&args)?;
            if !out.status.success() {
                error = Some(failure("the removal", &out));
            }
        }
        let after = if dependents.is_empty() && !before.is_empty() {
            self.installed(packages, false)?
        } else {
            before.clone()
        };
        let outcomes = packages
            .iter()
            .map(|name| match before.get(name) {
                None => PackageOutcome {
                    name: name.clone(),
                    status: PackageStatus::NotInstalled,
                    from_version: None,
                    to_version: None,
                    error: None,
                },
                Some(was) => {
                    let still = after.contains_key(name);
                    PackageOutcome {
                        name: name.clone(),
                        status: if still {
                            PackageStatus::Failed
                        } else {
                            PackageStatus::Removed
                        },
                        from_version: Some(was.version.clone()),
                        to_version: None,
                        error: still.then(|| {
                            error
                                .clone()
                                .unwrap_or_else(|| "still installed after the removal".into())
                        }),
                    }
                }
            })
            .collect();
        Ok(PatchInstallReport {
            manager: self.manager.name().to_owned(),
            packages: outcomes,
            reboot_required: self.reboot_required(),
            reboot: "not_requested".into(),
            reboot_detail: None,
            scan: None,
        })
    }

    fn finish(
        &self,
        packages: Vec<PackageOutcome>,
        reboot: Reboot,
        users: &dyn Fn() -> Vec<String>,
        scan: PatchScanReport,
    ) -> PatchInstallReport {
        let required = self.reboot_required();
        let changed = packages.iter().any(|p| p.status.changed_as_asked());
        let logged_in = if reboot.mode == RebootMode::Never {
            Vec::new()
        } else {
            users()
        };
        let (action, mut detail) = reboot_decision(reboot, required, changed, &logged_in);
        let mut action = action.to_owned();
        if action == "scheduled" {
            match schedule_reboot(&self.reboot_command, reboot.delay_minutes) {
                Ok(said) => detail = Some(said),
                Err(e) => {
                    action = "failed".into();
                    detail = Some(e);
                }
            }
        }
        PatchInstallReport {
            manager: self.manager.name().to_owned(),
            packages,
            reboot_required: required,
            reboot: action,
            reboot_detail: detail,
            scan: Some(PatchScanReport {
                reboot_required: required,
                logged_in_users: logged_in,
                ..scan
            }),
        }
    }
}

/// The machine's reboot command as `config` sets it (`rebootCommand`, default `shutdown -r`):
/// the one command both a patch job's reboot and a [`reboot`] run.
fn reboot_command(config: &PatchingConfig) -> Vec<String> {
    config
        .reboot_command
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec!["shutdown".into(), "-r".into()])
}

/// Runs the reboot command with `+<delay_minutes>`; the sentence saying what was done.
fn schedule_reboot(command: &[String], delay_minutes: u32) -> Result<String, String> {
    let mut cmd = command.to_vec();
    cmd.push(format!("+{delay_minutes}"));
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run {}: {e}", cmd[0]))?;
    if !out.status.success() {
        return Err(failure("the reboot command", &out));
    }
    Ok(format!("reboot in {delay_minutes} minutes"))
}

/// A reboot asked for by itself (the `reboot` command): deferred while `users` are logged in
/// unless `with_users`, else the configured reboot command is run. The test suites configure a
/// fake command that records its arguments, so no test machine is ever restarted.
pub fn reboot(
    config: &PatchingConfig,
    delay_minutes: u32,
    with_users: bool,
    users: &[String],
) -> Result<serde_json::Value, String> {
    let asked = Reboot {
        mode: RebootMode::Always,
        with_users,
        delay_minutes,
    };
    let (action, detail) = reboot_decision(asked, true, true, users);
    let detail = if action == "scheduled" {
        Some(schedule_reboot(&reboot_command(config), delay_minutes)?)
    } else {
        detail
    };
    Ok(serde_json::json!({
        "reboot": action,
        "detail": detail,
        "delayMinutes": delay_minutes,
        "loggedInUsers": users,
    }))
}

/// An installed package a removal would take: its version and, for apt, what else removing it
/// would remove.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Installed {
    version: String,
    also: Vec<String>,
}

/// dnf's option that keeps a removal to the named packages and their dependents (no
/// clean-up of dependencies nothing else needs, which dnf does by default on Fedora and RHEL).
const DNF_KEEP_UNUSED: &str = "--setopt=clean_requirements_on_remove=False";

/// Parses the transaction summary of `dnf remove` (dnf 4 and dnf 5): the package names listed
/// under its `Removing…:` headings (`Removing:`, `Removing dependent packages:`, `Removing
/// unused dependencies:`), up to `Transaction Summary`. A package line starts with exactly one
/// space; a long name wrapped onto a line of its own is followed by a continuation line
/// indented further, which is not a package.
pub fn parse_dnf_removals(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_removal = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            let heading = line.trim();
            if heading.starts_with("Transaction Summary") {
                break;
            }
            if heading.ends_with(':') {
                in_removal = heading.starts_with("Removing");
            }
            continue;
        }
        if !in_removal || line.starts_with("  ") {
            continue;
        }
        if let Some(name) = line.split_whitespace().next()
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    }
    names
}

/// Parses `apt-get -s remove`: `Remv name [version]` (or `Remv name:arch [version]`), one line
/// per package the removal would take.
pub fn parse_apt_removals(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("Remv ")?;
            let mut parts = rest.split_whitespace();
            let name = parts.next()?;
            let name = name.split(':').next().unwrap_or(name).to_owned();
            let version = parts
                .next()
                .and_then(|v| v.strip_prefix('['))
                .and_then(|v| v.strip_suffix(']'))
                .unwrap_or_default()
                .to_owned();
            Some((name, version))
        })
        .collect()
}

/// A call's reboot handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reboot {
    pub mode: RebootMode,
    pub with_users: bool,
    pub delay_minutes: u32,
}

/// What to do about a reboot: `not_requested` (policy never), `not_needed`,
/// `deferred_users_logged_in`, or `scheduled`; with a sentence.
pub fn reboot_decision(
    reboot: Reboot,
    required: bool,
    changed: bool,
    users: &[String],
) -> (&'static str, Option<String>) {
    let wanted = match reboot.mode {
        RebootMode::Never => {
            return (
                "not_requested",
                required.then(|| "the OS asks for a reboot; the policy says never".to_owned()),
            );
        }
        RebootMode::IfNeeded => required,
        RebootMode::Always => changed || required,
    };
    if !wanted {
        return ("not_needed", None);
    }
    if !users.is_empty() && !reboot.with_users {
        let mut names = users.to_vec();
        names.sort();
        names.dedup();
        return (
            "deferred_users_logged_in",
            Some(format!(
                "not rebooted: {} logged in ({})",
                if names.len() == 1 {
                    "a user is"
                } else {
                    "users are"
                },
                names.join(", ")
            )),
        );
    }
    ("scheduled", None)
}

fn check_names<'a>(mut names: impl Iterator<Item = &'a str>) -> Result<(), String> {
    match names.find(|n| !safe_arg(n)) {
        Some(bad) => Err(format!(
            "packages: {bad:?} is not a package name or version (letters, digits and .+-_:~, \
             not starting with -)"
        )),
        None => Ok(()),
    }
}

fn failure(what: &str, out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("WARNING: apt does not have"))
        .collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" / ");
    format!(
        "{what} failed (exit {}){}",
        out.status
            .code()
            .map_or_else(|| "by signal".to_owned(), |c| c.to_string()),
        if tail.is_empty() {
            String::new()
        } else {
            format!(": {tail}")
        }
    )
}

/// Parses `apt-get -s dist-upgrade`: `Inst name [installed] (candidate origin, origin [arch])`.
/// Packages newly pulled in (no installed version) are not updates and are left out.
pub fn parse_apt_simulation(text: &str) -> Vec<AvailablePatch> {
    let mut out: Vec<AvailablePatch> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("Inst ")?;
            let (name, rest) = rest.split_once(' ')?;
            let rest = rest.trim_start();
            let rest = rest.strip_prefix('[')?;
            let (installed, rest) = rest.split_once(']')?;
            let rest = rest.trim_start().strip_prefix('(')?;
            let (candidate, rest) = rest.split_once(' ')?;
            // "origin, origin [arch])", perhaps followed by " []".
            let rest = rest.split(')').next()?;
            let (origins, arch) = match rest.rfind('[') {
                Some(i) => (
                    &rest[..i],
                    rest[i + 1..].split(']').next().map(str::to_owned),
                ),
                None => (rest, None),
            };
            let origins: Vec<&str> = origins
                .split(',')
                .map(str::trim)
                .filter(|o| !o.is_empty())
                .collect();
            let security = origins.iter().any(|o| o.contains("-security"));
            let source = origins
                .iter()
                .find(|o| o.contains("-security"))
                .or(origins.first())
                .map(|o| (*o).to_owned());
            Some(AvailablePatch {
                name: name.to_owned(),
                installed_version: Some(installed.to_owned()),
                available_version: candidate.to_owned(),
                arch,
                source,
                security,
                severity: None,
                advisory: None,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// One line of `dnf check-update`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnfUpdate {
    pub name: String,
    pub arch: String,
    pub version: String,
    pub repo: String,
}

/// Parses `dnf check-update`: `name.arch version repo` lines, up to "Obsoleting Packages".
pub fn parse_dnf_check_update(text: &str) -> Vec<DnfUpdate> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("Obsoleting") || line.starts_with("Security:") {
            break;
        }
        if line.starts_with(' ') || line.starts_with("Last metadata") {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            continue;
        }
        let Some((name, arch)) = f[0].rsplit_once('.') else {
            continue;
        };
        out.push(DnfUpdate {
            name: name.to_owned(),
            arch: arch.to_owned(),
            version: f[1].to_owned(),
            repo: f[2].to_owned(),
        });
    }
    out
}

/// An advisory for a package: id, whether it is a security one, its severity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advisory {
    pub id: String,
    pub security: bool,
    pub severity: Option<String>,
}

const SEVERITIES: [&str; 4] = ["critical", "important", "moderate", "low"];

fn severity_rank(s: Option<&str>) -> usize {
    s.and_then(|s| SEVERITIES.iter().position(|x| *x == s))
        .map_or(0, |i| SEVERITIES.len() - i)
}

/// The package name of a `name-[epoch:]version-release.arch` string.
fn nevra_name(nevra: &str) -> Option<&str> {
    let no_arch = nevra.rsplit_once('.').map_or(nevra, |(n, _)| n);
    let (rest, _release) = no_arch.rsplit_once('-')?;
    let (name, _version) = rest.rsplit_once('-')?;
    Some(name)
}

/// Parses `dnf updateinfo list --updates` (`ID Severity/Sec. nevra`, or dnf5's `ID type
/// severity nevra`); per package the most severe advisory.
pub fn parse_dnf_updateinfo(text: &str) -> HashMap<String, Advisory> {
    let mut out: HashMap<String, Advisory> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || line.starts_with("Last metadata") {
            continue;
        }
        let Some(name) = f.last().copied().and_then(nevra_name) else {
            continue;
        };
        let mid = &f[1..f.len() - 1];
        let security = mid.iter().any(|t| {
            let t = t.to_ascii_lowercase();
            t.ends_with("/sec.") || t == "security"
        });
        let severity = mid
            .iter()
            .map(|t| t.split('/').next().unwrap_or("").to_ascii_lowercase())
            .find(|t| SEVERITIES.contains(&t.as_str()));
        let adv = Advisory {
            id: f[0].to_owned(),
            security,
            severity,
        };
        let better = match out.get(name) {
            None => true,
            Some(old) => {
                (adv.security && !old.security)
                    || (adv.security == old.security
                        && severity_rank(adv.severity.as_deref())
                            > severity_rank(old.severity.as_deref()))
            }
        };
        if better {
            out.insert(name.to_owned(), adv);
        }
    }
    out
}

/// Parses `dnf list --installed`: the newest installed version per package name.
pub fn parse_dnf_installed(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 || !f[2].starts_with('@') {
            continue;
        }
        if let Some((name, _arch)) = f[0].rsplit_once('.') {
            // Listed oldest first (several kernels): the last one wins.
            out.insert(name.to_owned(), f[1].to_owned());
        }
    }
    out
}

fn merge_dnf(
    updates: Vec<DnfUpdate>,
    info: &HashMap<String, Advisory>,
    installed: &HashMap<String, String>,
) -> Vec<AvailablePatch> {
    let mut out: Vec<AvailablePatch> = updates
        .into_iter()
        .map(|u| {
            let adv = info.get(&u.name);
            AvailablePatch {
                installed_version: installed.get(&u.name).cloned(),
                available_version: u.version,
                arch: Some(u.arch),
                source: Some(u.repo),
                security: adv.is_some_and(|a| a.security),
                severity: adv.and_then(|a| a.severity.clone()),
                advisory: adv.map(|a| a.id.clone()),
                name: u.name,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const APT: &str = include_str!("../../tests/fixtures/apt-get-dist-upgrade.txt");
    const DNF_CHECK: &str = include_str!("../../tests/fixtures/dnf-check-update.txt");
    const DNF_INFO: &str = include_str!("../../tests/fixtures/dnf-updateinfo.txt");
    const DNF_INSTALLED: &str = include_str!("../../tests/fixtures/dnf-list-installed.txt");

    #[test]
    fn apt_simulation_output_parses() {
        let p = parse_apt_simulation(APT);
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "appstream",
                "apt",
                "base-files",
                "bash",
                "libgcrypt20",
                "liblzma5",
                "libpam0g"
            ],
            "new packages pulled in are not updates"
        );
        let gcrypt = &p[4];
        assert_eq!(gcrypt.installed_version.as_deref(), Some("1.10.1-3"));
        assert_eq!(gcrypt.available_version, "1.10.1-3+deb12u1");
        assert!(gcrypt.security, "one of its origins is a -security suite");
        assert_eq!(
            gcrypt.source.as_deref(),
            Some("Debian-Security:12/oldstable-security")
        );
        assert_eq!(gcrypt.arch.as_deref(), Some("amd64"));
        assert_eq!(gcrypt.severity, None, "apt gives no severity");
        let bash = &p[3];
        assert!(!bash.security);
        assert_eq!(bash.source.as_deref(), Some("Debian:12.15/oldstable"));
        assert!(p[6].security, "a trailing [] after the origins is fine");
    }

    #[test]
    fn dnf_output_parses_and_merges() {
        let updates = parse_dnf_check_update(DNF_CHECK);
        assert_eq!(updates.len(), 6, "{updates:?}");
        assert_eq!(updates[2].name, "openssl");
        assert_eq!(updates[2].version, "1:3.0.7-28.el9_4");
        let info = parse_dnf_updateinfo(DNF_INFO);
        assert_eq!(
            info["kernel"],
            Advisory {
                id: "RLSA-2024:9999".into(),
                security: true,
                severity: Some("critical".into())
            },
            "the most severe advisory wins"
        );
        assert_eq!(info["openssl-libs"].severity.as_deref(), Some("moderate"));
        assert!(!info["python3-setuptools"].security);
        let installed = parse_dnf_installed(DNF_INSTALLED);
        assert_eq!(installed["kernel"], "5.14.0-427.37.1.el9_4");
        let merged = merge_dnf(updates, &info, &installed);
        let kernel = merged.iter().find(|p| p.name == "kernel").unwrap();
        assert!(kernel.security);
        assert_eq!(kernel.severity.as_deref(), Some("critical"));
        assert_eq!(
            kernel.installed_version.as_deref(),
            Some("5.14.0-427.37.1.el9_4")
        );
        let vim = merged.iter().find(|p| p.name == "vim-minimal").unwrap();
        assert!(!vim.security && vim.advisory.is_none());
        // dnf5's columns read the same.
        let five =
            parse_dnf_updateinfo("FEDORA-2025-1 security Important curl-8.6.0-10.fc40.x86_64");
        assert_eq!(five["curl"].severity.as_deref(), Some("important"));
        assert!(five["curl"].security);
    }

    #[test]
    fn reboot_follows_policy_and_the_users_signal() {
        let r = |mode, with_users| Reboot {
            mode,
            with_users,
            delay_minutes: 5,
        };
        let alice = vec!["alice".to_owned(), "alice".to_owned()];
        assert_eq!(
            reboot_decision(r(RebootMode::Never, true), true, true, &[]).0,
            "not_requested"
        );
        assert_eq!(
            reboot_decision(r(RebootMode::IfNeeded, false), false, true, &[]).0,
            "not_needed"
        );
        assert_eq!(
            reboot_decision(r(RebootMode::IfNeeded, false), true, true, &[]).0,
            "scheduled"
        );
        let (a, d) = reboot_decision(r(RebootMode::IfNeeded, false), true, true, &alice);
        assert_eq!(a, "deferred_users_logged_in");
        assert_eq!(
            d.as_deref(),
            Some("not rebooted: a user is logged in (alice)")
        );
        assert_eq!(
            reboot_decision(r(RebootMode::Always, true), false, true, &alice).0,
            "scheduled"
        );
        assert_eq!(
            reboot_decision(r(RebootMode::Always, false), false, false, &[]).0,
            "not_needed",
            "nothing changed, nothing asks"
        );
    }

    #[test]
    fn apt_removal_simulation_parses() {
        let text = "Reading package lists...\nRemv htop [3.2.2-2]\nRemv libfoo:amd64 [1.0]\n\
                    Package 'nope' is not installed, so not removed\n";
        assert_eq!(
            parse_apt_removals(text),
            vec![
                ("htop".to_owned(), "3.2.2-2".to_owned()),
                ("libfoo".to_owned(), "1.0".to_owned())
            ]
        );
    }

    #[test]
    fn dnf_removal_summary_parses() {
        // dnf 4, with a wrapped long name and unused dependencies.
        let dnf4 = "Dependencies resolved.\n\
            ================================================================================\n \
            Package            Architecture   Version            Repository        Size\n\
            ================================================================================\n\
            Removing:\n \
            htop               x86_64         3.2.2-1.el9        @epel            500 k\n\
            Removing dependent packages:\n \
            a-very-long-package-name-that-dnf-wraps-onto-its-own-line\n   \
                               noarch         1.0-1.el9          @appstream        10 k\n\
            Removing unused dependencies:\n \
            libbar             x86_64         2.0-1              @baseos           20 k\n\
            \n\
            Transaction Summary\n\
            ================================================================================\n\
            Remove  3 Packages\n\
            \n\
            Freed space: 530 k\n\
            Operation aborted.\n";
        assert_eq!(
            parse_dnf_removals(dnf4),
            [
                "htop",
                "a-very-long-package-name-that-dnf-wraps-onto-its-own-line",
                "libbar"
            ]
        );
        // dnf 5.
        let dnf5 = "Package              Arch   Version         Repository      Size\n\
            Removing:\n \
            htop                 x86_64 3.3.0-1.fc40    <unknown>   500.0 KiB\n\
            \n\
            Transaction Summary:\n \
            Removing:           1 package\n\
            Operation aborted by the user.\n";
        assert_eq!(parse_dnf_removals(dnf5), ["htop"]);
        assert!(parse_dnf_removals("No match for argument: nope\n").is_empty());
    }

    #[test]
    fn package_arguments_are_never_options() {
        assert!(safe_arg("libssl3"));
        assert!(safe_arg("1:3.0.7-28.el9_4"));
        assert!(!safe_arg("-oAPT::Get=x"));
        assert!(!safe_arg("a b"));
        assert!(!safe_arg("a;rm"));
        assert!(!safe_arg(""));
        assert!(check_names(["ok", "--purge"].into_iter()).is_err());
    }
}
