//! Compliance policies' rules and their evaluation over stored inventory (pure, no IO).
//!
//! A rule is either decided by the server over the device's latest inventory (a package
//! installed, a package at least a version, the OS at least a version) or by the agent
//! (a service running, a file present or with a given SHA-256, a setting's value in a config
//! file, disk encryption, the firewall): [`ComplianceRule::is_inventory`] tells which. A rule's
//! result is `passed: Some(true|false)` or `None` when it cannot be told (no inventory yet, the
//! agent could not check); a device is compliant when every rule passed, non-compliant when one
//! failed, unknown otherwise ([`overall`]).
//!
//! Versions compare the way the package manager does ([`compare_versions`]): dpkg's ordering
//! (epoch, upstream, revision; `~` before anything, letters before other characters) on
//! Debian-family systems, rpm's (`rpmvercmp`: alphanumeric segments, numbers newer than
//! letters, `~` before and `^` after the base) elsewhere.

use std::cmp::Ordering;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::string_enum;

/// The most rules one policy may hold.
pub const MAX_RULES: usize = 50;
/// The longest name, key, value or version a rule may carry.
pub const MAX_RULE_TEXT: usize = 255;
/// The longest path a rule may name.
pub const MAX_RULE_PATH: usize = 4096;

string_enum! {
    /// A device's standing against one policy.
    pub enum ComplianceState: "compliance status" {
        /// Every rule passed.
        Compliant = "compliant",
        /// At least one rule failed.
        NonCompliant = "non_compliant",
        /// No rule failed, but at least one could not be told yet.
        Unknown = "unknown",
    }
}

string_enum! {
    /// What a policy does about non-compliance.
    pub enum PolicyEnforcement: "policy enforcement" {
        /// Report only; remediation runs only when asked (`remediate`).
        Monitor = "monitor",
        /// After an evaluation finds non-compliant devices, the worker queues a remediation
        /// as the policy's owner (its script still goes through `run_script`'s Tier 3 approval).
        Remediate = "remediate",
    }
}

/// One rule of a compliance policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum ComplianceRule {
    /// Inventory: the package is installed (any version).
    PackageInstalled { name: String },
    /// Inventory: the package is installed at minVersion or later (dpkg or rpm ordering).
    PackageMinVersion { name: String, min_version: String },
    /// Inventory: the OS version is at least minVersion; when name is given the OS name must
    /// contain it (case-insensitive).
    OsVersion {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        min_version: String,
    },
    /// Agent: the systemd service is active.
    ServiceRunning { name: String },
    /// Agent: a regular file exists at path.
    FilePresent { path: String },
    /// Agent: the file's SHA-256 equals sha256 (hex).
    FileSha256 { path: String, sha256: String },
    /// Agent: the config file sets key to value (`key value` or `key=value`; the first
    /// uncommented occurrence before any `Match` block counts, as sshd reads it; keys and
    /// values compare case-insensitively).
    SettingValue {
        path: String,
        key: String,
        value: String,
    },
    /// Agent: the root filesystem is on an encrypted (dm-crypt/LUKS) device.
    DiskEncrypted,
    /// Agent: a host firewall is active (ufw, firewalld or nftables).
    FirewallEnabled,
}

/// Where a rule is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleSource {
    Inventory,
    Agent,
}

/// One rule's outcome on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleResult {
    /// The rule's position in the policy's rules (0-based).
    pub rule: usize,
    pub source: RuleSource,
    /// True or false; null when it cannot be told yet.
    pub passed: Option<bool>,
    /// What was found, in words.
    pub detail: String,
}

fn check_text(field: &str, v: &str, max: usize) -> Result<(), String> {
    if v.trim().is_empty() {
        return Err(format!("{field} cannot be empty"));
    }
    if v.chars().count() > max {
        return Err(format!("{field} is longer than {max} characters"));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("{field} cannot hold control characters"));
    }
    Ok(())
}

fn check_path(field: &str, v: &str) -> Result<(), String> {
    check_text(field, v, MAX_RULE_PATH)?;
    if !v.starts_with('/') {
        return Err(format!("{field} must be an absolute path, got {v:?}"));
    }
    Ok(())
}

impl ComplianceRule {
    /// Whether the server decides it over stored inventory (else the agent checks it).
    pub fn is_inventory(&self) -> bool {
        matches!(
            self,
            ComplianceRule::PackageInstalled { .. }
                | ComplianceRule::PackageMinVersion { .. }
                | ComplianceRule::OsVersion { .. }
        )
    }

    /// Where it is decided.
    pub fn source(&self) -> RuleSource {
        if self.is_inventory() {
            RuleSource::Inventory
        } else {
            RuleSource::Agent
        }
    }

    /// Checks the rule's fields; the error names the field (`rules[i].field`).
    pub fn validate(&self, i: usize) -> Result<(), String> {
        let f = |name: &str| format!("rules[{i}].{name}");
        match self {
            ComplianceRule::PackageInstalled { name } => {
                check_text(&f("name"), name, MAX_RULE_TEXT)
            }
            ComplianceRule::PackageMinVersion { name, min_version } => {
                check_text(&f("name"), name, MAX_RULE_TEXT)?;
                check_text(&f("minVersion"), min_version, MAX_RULE_TEXT)
            }
            ComplianceRule::OsVersion { name, min_version } => {
                if let Some(n) = name {
                    check_text(&f("name"), n, MAX_RULE_TEXT)?;
                }
                check_text(&f("minVersion"), min_version, MAX_RULE_TEXT)
            }
            ComplianceRule::ServiceRunning { name } => {
                check_text(&f("name"), name, MAX_RULE_TEXT)?;
                let ok = name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ":-_.@\\".contains(c));
                if !ok {
                    return Err(format!("{} {name:?} is not a unit name", f("name")));
                }
                Ok(())
            }
            ComplianceRule::FilePresent { path } => check_path(&f("path"), path),
            ComplianceRule::FileSha256 { path, sha256 } => {
                check_path(&f("path"), path)?;
                if sha256.len() != 64 || !sha256.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(format!("{} must be 64 hexadecimal digits", f("sha256")));
                }
                Ok(())
            }
            ComplianceRule::SettingValue { path, key, value } => {
                check_path(&f("path"), path)?;
                check_text(&f("key"), key, MAX_RULE_TEXT)?;
                if key.contains(|c: char| c.is_whitespace() || c == '=') {
                    return Err(format!("{} cannot hold spaces or '='", f("key")));
                }
                check_text(&f("value"), value, MAX_RULE_TEXT)
            }
            ComplianceRule::DiskEncrypted | ComplianceRule::FirewallEnabled => Ok(()),
        }
    }
}

/// Checks a policy's rules: at least one, at most [`MAX_RULES`], each valid.
pub fn validate_rules(rules: &[ComplianceRule]) -> Result<(), String> {
    if rules.is_empty() {
        return Err("rules must hold at least one rule".into());
    }
    if rules.len() > MAX_RULES {
        return Err(format!("rules holds more than {MAX_RULES} rules"));
    }
    rules
        .iter()
        .enumerate()
        .try_for_each(|(i, r)| r.validate(i))
}

/// A device's standing from its rules' results: every rule must have a result.
pub fn overall(rules: usize, results: &[RuleResult]) -> ComplianceState {
    if results.iter().any(|r| r.passed == Some(false)) {
        ComplianceState::NonCompliant
    } else if results.len() >= rules && results.iter().all(|r| r.passed == Some(true)) {
        ComplianceState::Compliant
    } else {
        ComplianceState::Unknown
    }
}

// ---- versions --------------------------------------------------------------------------------

/// Which package manager's ordering applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionScheme {
    /// dpkg (Debian, Ubuntu and derivatives).
    Deb,
    /// rpm (Fedora, RHEL and derivatives, SUSE, Amazon Linux).
    Rpm,
}

impl VersionScheme {
    /// The scheme of an OS by its name (dpkg unless it names an rpm distribution).
    pub fn for_os(os_name: &str) -> VersionScheme {
        let n = os_name.to_ascii_lowercase();
        const RPM: &[&str] = &[
            "fedora", "red hat", "rhel", "centos", "rocky", "alma", "suse", "amazon", "oracle",
            "mageia",
        ];
        if RPM.iter().any(|d| n.contains(d)) {
            VersionScheme::Rpm
        } else {
            VersionScheme::Deb
        }
    }
}

/// Compares two package versions under `scheme`.
pub fn compare_versions(scheme: VersionScheme, a: &str, b: &str) -> Ordering {
    match scheme {
        VersionScheme::Deb => deb_compare(a, b),
        VersionScheme::Rpm => rpm_evr_compare(a, b),
    }
}

/// Splits `[epoch:]rest`; a missing or unreadable epoch is 0.
fn split_epoch(v: &str) -> (u64, &str) {
    match v.split_once(':') {
        Some((e, rest)) if !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()) => {
            (e.parse().unwrap_or(u64::MAX), rest)
        }
        _ => (0, v),
    }
}

/// dpkg's version comparison: epoch, then upstream, then revision (after the last `-`).
pub fn deb_compare(a: &str, b: &str) -> Ordering {
    let (ea, ra) = split_epoch(a.trim());
    let (eb, rb) = split_epoch(b.trim());
    let split_rev = |s: &str| -> (String, String) {
        match s.rsplit_once('-') {
            Some((u, r)) => (u.to_owned(), r.to_owned()),
            None => (s.to_owned(), String::new()),
        }
    };
    let (ua, va) = split_rev(ra);
    let (ub, vb) = split_rev(rb);
    ea.cmp(&eb)
        .then_with(|| verrevcmp(&ua, &ub))
        .then_with(|| verrevcmp(&va, &vb))
}

/// dpkg's character weight: `~` lowest (below the end), the end 0, letters by code, others
/// after letters.
fn deb_order(c: Option<u8>) -> i32 {
    match c {
        None => 0,
        Some(b'~') => -1,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(c),
        Some(c) => i32::from(c) + 256,
    }
}

/// dpkg's `verrevcmp`: alternating non-digit and digit runs.
fn verrevcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        // Non-digit run, character by character.
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let ac = deb_order(a.get(i).copied().filter(|c| !c.is_ascii_digit()));
            let bc = deb_order(b.get(j).copied().filter(|c| !c.is_ascii_digit()));
            if ac != bc {
                return ac.cmp(&bc);
            }
            if i < a.len() && !a[i].is_ascii_digit() {
                i += 1;
            }
            if j < b.len() && !b[j].is_ascii_digit() {
                j += 1;
            }
        }
        // Digit run, as a number (leading zeros ignored).
        while i < a.len() && a[i] == b'0' {
            i += 1;
        }
        while j < b.len() && b[j] == b'0' {
            j += 1;
        }
        let si = i;
        let sj = j;
        while i < a.len() && a[i].is_ascii_digit() {
            i += 1;
        }
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        let (na, nb) = (&a[si..i], &b[sj..j]);
        let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

/// rpm's epoch:version-release comparison (a side without a release matches any release).
pub fn rpm_evr_compare(a: &str, b: &str) -> Ordering {
    let (ea, ra) = split_epoch(a.trim());
    let (eb, rb) = split_epoch(b.trim());
    let split_rel = |s: &str| -> (String, Option<String>) {
        match s.rsplit_once('-') {
            Some((v, r)) => (v.to_owned(), Some(r.to_owned())),
            None => (s.to_owned(), None),
        }
    };
    let (va, la) = split_rel(ra);
    let (vb, lb) = split_rel(rb);
    ea.cmp(&eb)
        .then_with(|| rpmvercmp(&va, &vb))
        .then_with(|| match (la, lb) {
            (Some(x), Some(y)) => rpmvercmp(&x, &y),
            _ => Ordering::Equal,
        })
}

/// rpm's `rpmvercmp`.
pub fn rpmvercmp(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    let sep = |c: u8| !c.is_ascii_alphanumeric() && c != b'~' && c != b'^';
    loop {
        while i < a.len() && sep(a[i]) {
            i += 1;
        }
        while j < b.len() && sep(b[j]) {
            j += 1;
        }
        // Tilde: sorts before everything, even the end.
        let (ta, tb) = (a.get(i) == Some(&b'~'), b.get(j) == Some(&b'~'));
        if ta || tb {
            if !ta {
                return Ordering::Greater;
            }
            if !tb {
                return Ordering::Less;
            }
            i += 1;
            j += 1;
            continue;
        }
        // Caret: after the base version, before anything else that follows.
        let (ca, cb) = (a.get(i) == Some(&b'^'), b.get(j) == Some(&b'^'));
        if ca || cb {
            if i >= a.len() {
                return Ordering::Less;
            }
            if j >= b.len() {
                return Ordering::Greater;
            }
            if !ca {
                return Ordering::Greater;
            }
            if !cb {
                return Ordering::Less;
            }
            i += 1;
            j += 1;
            continue;
        }
        if i >= a.len() || j >= b.len() {
            break;
        }
        let numeric = a[i].is_ascii_digit();
        let (si, sj) = (i, j);
        let same = |c: u8| {
            if numeric {
                c.is_ascii_digit()
            } else {
                c.is_ascii_alphabetic()
            }
        };
        while i < a.len() && same(a[i]) {
            i += 1;
        }
        while j < b.len() && same(b[j]) {
            j += 1;
        }
        let (mut sa, mut sb) = (&a[si..i], &b[sj..j]);
        if sb.is_empty() {
            // Different kinds of segment: a number is newer than letters.
            return if numeric {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
        if numeric {
            while sa.first() == Some(&b'0') {
                sa = &sa[1..];
            }
            while sb.first() == Some(&b'0') {
                sb = &sb[1..];
            }
            let ord = sa.len().cmp(&sb.len());
            if ord != Ordering::Equal {
                return ord;
            }
        }
        let ord = sa.cmp(sb);
        if ord != Ordering::Equal {
            return ord;
        }
    }
    match (i >= a.len(), j >= b.len()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        _ => Ordering::Greater,
    }
}

// ---- inventory evaluation --------------------------------------------------------------------

/// What inventory rules are decided over: the OS and the installed packages (sorted by name).
#[derive(Debug, Clone, Default)]
pub struct InventoryFacts {
    pub os_name: String,
    pub os_version: String,
    /// `None` when the platform does not list packages.
    pub packages: Option<Vec<(String, String)>>,
}

impl InventoryFacts {
    /// Facts with the packages sorted for lookup.
    pub fn new(
        os_name: String,
        os_version: String,
        packages: Option<Vec<(String, String)>>,
    ) -> Self {
        let packages = packages.map(|mut p| {
            p.sort_unstable();
            p
        });
        Self {
            os_name,
            os_version,
            packages,
        }
    }

    /// The installed versions of `name`.
    fn versions<'a>(&'a self, name: &str) -> Option<impl Iterator<Item = &'a str>> {
        let p = self.packages.as_deref()?;
        let start = p.partition_point(|(n, _)| n.as_str() < name);
        Some(
            p[start..]
                .iter()
                .take_while(move |(n, _)| n == name)
                .map(|(_, v)| v.as_str()),
        )
    }
}

/// Decides an inventory rule over `facts` (`None`: there is no inventory). An agent rule is
/// not decided here (`passed: None`).
pub fn evaluate_inventory(
    index: usize,
    rule: &ComplianceRule,
    facts: Option<&InventoryFacts>,
) -> RuleResult {
    let result = |passed: Option<bool>, detail: String| RuleResult {
        rule: index,
        source: rule.source(),
        passed,
        detail,
    };
    if !rule.is_inventory() {
        return result(None, "checked by the agent".into());
    }
    let Some(facts) = facts else {
        return result(None, "no inventory reported yet".into());
    };
    let scheme = VersionScheme::for_os(&facts.os_name);
    match rule {
        ComplianceRule::PackageInstalled { name } => match facts.versions(name) {
            None => result(None, "the device does not list packages".into()),
            Some(mut v) => match v.next() {
                Some(version) => result(Some(true), format!("{name} {version} installed")),
                None => result(Some(false), format!("{name} is not installed")),
            },
        },
        ComplianceRule::PackageMinVersion { name, min_version } => match facts.versions(name) {
            None => result(None, "the device does not list packages".into()),
            Some(v) => {
                let best = v.max_by(|a, b| compare_versions(scheme, a, b));
                match best {
                    None => result(Some(false), format!("{name} is not installed")),
                    Some(version) => {
                        let ok = compare_versions(scheme, version, min_version) != Ordering::Less;
                        let cmp = if ok { ">=" } else { "<" };
                        result(Some(ok), format!("{name} {version} {cmp} {min_version}"))
                    }
                }
            }
        },
        ComplianceRule::OsVersion { name, min_version } => {
            if let Some(n) = name
                && !facts.os_name.to_lowercase().contains(&n.to_lowercase())
            {
                return result(Some(false), format!("OS is {:?}, not {n:?}", facts.os_name));
            }
            let ok = rpmvercmp(&facts.os_version, min_version) != Ordering::Less;
            let cmp = if ok { ">=" } else { "<" };
            result(
                Some(ok),
                format!("{} {} {cmp} {min_version}", facts.os_name, facts.os_version),
            )
        }
        _ => result(None, "checked by the agent".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::{Equal, Greater, Less};

    #[test]
    fn debian_versions_compare_like_dpkg() {
        // (a, b, a cmp b), cases from dpkg's own test suite and policy examples.
        let table: &[(&str, &str, Ordering)] = &[
            ("1.0", "1.0", Equal),
            ("1.0", "1.1", Less),
            ("1.10", "1.9", Greater),
            ("1.0~rc1", "1.0", Less),
            ("1.0~~", "1.0~", Less),
            ("1.0~", "1.0", Less),
            ("1.0", "1.0+b1", Less),
            ("1.0a", "1.0", Greater),
            ("1.0a", "1.0+", Less),
            ("1:1.0", "2.0", Greater),
            ("0:1.0", "1.0", Equal),
            ("1.0-1", "1.0-2", Less),
            ("1.0-10", "1.0-9", Greater),
            ("1.0-1ubuntu1", "1.0-1", Greater),
            ("2.36-9+deb12u4", "2.36-9+deb12u10", Less),
            ("1:9.2p1-2ubuntu0.1", "1:9.2p1-2", Greater),
            ("3.0.2-0ubuntu1.10", "3.0.2-0ubuntu1.9", Greater),
            ("001", "1", Equal),
            ("1.0-0", "1.0", Equal),
            ("7.4.052-1ubuntu3", "7.4.052-1ubuntu3.1", Less),
            ("a", "b", Less),
            ("1.2.3", "1.2.3.0", Less),
        ];
        for (a, b, want) in table {
            assert_eq!(deb_compare(a, b), *want, "{a} vs {b}");
            assert_eq!(deb_compare(b, a), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn rpm_versions_compare_like_rpmvercmp() {
        // Cases from rpm's rpmvercmp tests.
        let table: &[(&str, &str, Ordering)] = &[
            ("1.0", "1.0", Equal),
            ("1.0", "2.0", Less),
            ("2.0.1", "2.0", Greater),
            ("2.0.1a", "2.0.1", Greater),
            ("5.5p1", "5.5p2", Less),
            ("5.5p10", "5.5p1", Greater),
            ("10xyz", "10.1xyz", Less),
            ("xyz10", "xyz10.1", Less),
            ("xyz.4", "8", Less),
            ("1b.fc17", "1.fc17", Less),
            ("1.0~rc1", "1.0", Less),
            ("1.0~rc1", "1.0~rc2", Less),
            ("1.0^", "1.0", Greater),
            ("1.0^git1", "1.0.1", Less),
            ("1.0^git1", "1.0^git2", Less),
            ("2_0", "2_0", Equal),
            ("2.0", "2_0", Equal),
            ("a+", "a_", Equal),
            ("1.010", "1.9", Greater),
            ("1.05", "1.5", Equal),
        ];
        for (a, b, want) in table {
            assert_eq!(rpmvercmp(a, b), *want, "{a} vs {b}");
            assert_eq!(rpmvercmp(b, a), want.reverse(), "{b} vs {a}");
        }
        assert_eq!(rpm_evr_compare("1:1.0-1", "2.0-1"), Greater);
        assert_eq!(rpm_evr_compare("1.0", "1.0-5.el9"), Equal);
        assert_eq!(rpm_evr_compare("1.0-4.el9", "1.0-5.el9"), Less);
    }

    #[test]
    fn schemes_follow_the_os() {
        assert_eq!(
            VersionScheme::for_os("Debian GNU/Linux"),
            VersionScheme::Deb
        );
        assert_eq!(VersionScheme::for_os("Ubuntu"), VersionScheme::Deb);
        assert_eq!(VersionScheme::for_os("Rocky Linux"), VersionScheme::Rpm);
        assert_eq!(VersionScheme::for_os("Fedora Linux"), VersionScheme::Rpm);
    }

    fn facts() -> InventoryFacts {
        InventoryFacts::new(
            "Debian GNU/Linux".into(),
            "12".into(),
            Some(vec![
                ("openssl".into(), "3.0.15-1~deb12u1".into()),
                ("bash".into(), "5.2.15-2+b7".into()),
            ]),
        )
    }

    #[test]
    fn inventory_rules_decide() {
        let f = facts();
        let eval = |r: ComplianceRule| evaluate_inventory(0, &r, Some(&f)).passed;
        assert_eq!(
            eval(ComplianceRule::PackageInstalled {
                name: "bash".into()
            }),
            Some(true)
        );
        assert_eq!(
            eval(ComplianceRule::PackageInstalled { name: "zsh".into() }),
            Some(false)
        );
        assert_eq!(
            eval(ComplianceRule::PackageMinVersion {
                name: "openssl".into(),
                min_version: "3.0.11".into()
            }),
            Some(true)
        );
        assert_eq!(
            eval(ComplianceRule::PackageMinVersion {
                name: "openssl".into(),
                min_version: "3.0.15-1".into()
            }),
            Some(false),
            "~deb12u1 sorts before -1"
        );
        assert_eq!(
            eval(ComplianceRule::OsVersion {
                name: Some("debian".into()),
                min_version: "11".into()
            }),
            Some(true)
        );
        assert_eq!(
            eval(ComplianceRule::OsVersion {
                name: Some("ubuntu".into()),
                min_version: "11".into()
            }),
            Some(false)
        );
        assert_eq!(eval(ComplianceRule::FirewallEnabled), None);
        let none = evaluate_inventory(
            0,
            &ComplianceRule::PackageInstalled { name: "x".into() },
            None,
        );
        assert_eq!(none.passed, None);
    }

    #[test]
    fn overall_needs_every_rule() {
        let r = |passed| RuleResult {
            rule: 0,
            source: RuleSource::Inventory,
            passed,
            detail: String::new(),
        };
        assert_eq!(overall(1, &[r(Some(true))]), ComplianceState::Compliant);
        assert_eq!(overall(2, &[r(Some(true))]), ComplianceState::Unknown);
        assert_eq!(
            overall(2, &[r(Some(true)), r(None)]),
            ComplianceState::Unknown
        );
        assert_eq!(
            overall(2, &[r(None), r(Some(false))]),
            ComplianceState::NonCompliant
        );
    }

    #[test]
    fn rules_validate_naming_the_field() {
        let bad = ComplianceRule::FileSha256 {
            path: "/etc/x".into(),
            sha256: "zz".into(),
        };
        assert!(bad.validate(3).unwrap_err().contains("rules[3].sha256"));
        let rel = ComplianceRule::FilePresent {
            path: "etc/x".into(),
        };
        assert!(rel.validate(0).unwrap_err().contains("rules[0].path"));
        assert!(validate_rules(&[]).is_err());
        let json = serde_json::json!({"type": "setting_value", "path": "/etc/ssh/sshd_config",
            "key": "PermitRootLogin", "value": "no"});
        let rule: ComplianceRule = serde_json::from_value(json).expect("reads");
        assert!(rule.validate(0).is_ok());
    }
}
