//! Security advisories in OSV format (the schema osv.dev publishes) and the one decision of
//! whether an installed package version is affected.
//!
//! A record names packages per ecosystem (`Debian:12`, `Ubuntu:22.04:LTS`, `Alpine:v3.19`,
//! `Rocky Linux:9`, …); an affected entry lists exact versions and/or `ECOSYSTEM` ranges of
//! events (`introduced`, `fixed`, `last_affected`, `limit`). A version is affected when it is
//! listed, or when the last event at or below it in the ecosystem's ordering
//! ([`crate::pkgversion`]) opens a range (the evaluation the OSV schema describes). Debian and
//! Ubuntu records name source packages: the caller matches an installed binary package by its
//! source package name where the device reports one. Nothing here does IO.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::pkgversion::VersionOrder;

/// One OSV record (only the fields Breeze reads; the rest are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OsvRecord {
    pub id: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Schema 1.7's upstream identifiers (Alpine and Debian records carry the CVE here).
    #[serde(default)]
    pub upstream: Vec<String>,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub details: Option<String>,
    #[serde(default)]
    pub published: Option<String>,
    #[serde(default)]
    pub modified: Option<String>,
    #[serde(default)]
    pub withdrawn: Option<String>,
    #[serde(default)]
    pub severity: Vec<OsvSeverity>,
    #[serde(default)]
    pub affected: Vec<OsvAffected>,
    #[serde(default)]
    pub database_specific: Option<Value>,
}

/// A severity score: `CVSS_V3` / `CVSS_V4` vectors, or a distribution's own label type.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OsvSeverity {
    #[serde(rename = "type")]
    pub kind: String,
    pub score: String,
}

/// One affected package.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OsvAffected {
    #[serde(default)]
    pub package: Option<OsvPackage>,
    #[serde(default)]
    pub ranges: Vec<OsvRange>,
    #[serde(default)]
    pub versions: Vec<String>,
    #[serde(default)]
    pub ecosystem_specific: Option<Value>,
    #[serde(default)]
    pub database_specific: Option<Value>,
}

/// The package an affected entry names.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OsvPackage {
    pub ecosystem: String,
    pub name: String,
}

/// A range of events.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OsvRange {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub events: Vec<OsvEvent>,
}

/// One event of a range (exactly one field set).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct OsvEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introduced: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_affected: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an OSV record: {0}")]
pub struct OsvError(String);

impl OsvRecord {
    /// Parses one record from JSON text.
    pub fn parse(text: &str) -> Result<OsvRecord, OsvError> {
        let record: OsvRecord = serde_json::from_str(text).map_err(|e| OsvError(e.to_string()))?;
        if record.id.trim().is_empty() {
            return Err(OsvError("the id is empty".to_owned()));
        }
        Ok(record)
    }

    /// The CVE ids the record is about: its own id, aliases and upstream ids that are CVEs,
    /// and a distribution's prefixed id (`DEBIAN-CVE-…`, `ALPINE-CVE-…`, `UBUNTU-CVE-…`)
    /// without its prefix; sorted, without repeats.
    pub fn cve_ids(&self) -> Vec<String> {
        let mut out: Vec<String> = std::iter::once(&self.id)
            .chain(&self.aliases)
            .chain(&self.upstream)
            .filter_map(|id| {
                let at = id.find("CVE-")?;
                let cve = &id[at..];
                (at == 0 || id[..at].ends_with('-')).then(|| cve.to_owned())
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The CVSS vector the record carries (v3 preferred over v4 over v2), if any.
    pub fn cvss_vector(&self) -> Option<&str> {
        ["CVSS_V3", "CVSS_V4", "CVSS_V2"].iter().find_map(|kind| {
            self.severity
                .iter()
                .find(|s| s.kind == *kind)
                .map(|s| s.score.as_str())
        })
    }

    /// Whether `installed` of `package` on a device of `ecosystem` (`Debian:12`) is affected:
    /// the versions that fix it (the lowest fix above the installed version per range), or
    /// `None` when not affected. A withdrawn record affects nothing.
    pub fn affects(&self, ecosystem: &str, package: &str, installed: &str) -> Option<Exposure> {
        if self.withdrawn.is_some() {
            return None;
        }
        let order = VersionOrder::for_ecosystem(ecosystem)?;
        let entries = self.affected.iter().filter(|entry| {
            entry
                .package
                .as_ref()
                .is_some_and(|p| p.name == package && same_ecosystem(&p.ecosystem, ecosystem))
        });
        entries_affect(entries, order, installed)
    }
}

/// Whether `installed` is affected by any of `entries` (already narrowed to one package of
/// one release), under `order`: the lowest fix above it, or `None` when not affected.
pub fn entries_affect<'a>(
    entries: impl IntoIterator<Item = &'a OsvAffected>,
    order: VersionOrder,
    installed: &str,
) -> Option<Exposure> {
    {
        let mut found = false;
        let mut fixed: Vec<String> = Vec::new();
        for entry in entries {
            let listed = entry
                .versions
                .iter()
                .any(|v| order.compare(v, installed) == Ordering::Equal);
            let mut in_range = false;
            for range in entry.ranges.iter().filter(|r| r.kind == "ECOSYSTEM") {
                if let Some(fix) = range_affects(order, &range.events, installed) {
                    in_range = true;
                    if let Some(f) = fix {
                        fixed.push(f);
                    }
                }
            }
            if listed || in_range {
                found = true;
                if listed && !in_range {
                    // A listed version with no range: any fix named above it counts.
                    for range in &entry.ranges {
                        for e in &range.events {
                            if let Some(f) = &e.fixed
                                && order.compare(f, installed) == Ordering::Greater
                            {
                                fixed.push(f.clone());
                            }
                        }
                    }
                }
            }
        }
        if !found {
            return None;
        }
        fixed.sort_by(|a, b| order.compare(a, b));
        fixed.dedup();
        Some(Exposure {
            fixed_in: fixed.into_iter().next(),
        })
    }
}

/// The release an OSV ecosystem name stands for, as advisories and devices are keyed:
/// `Debian:12`, `Ubuntu:22.04` (from `Ubuntu:22.04:LTS`), `Alpine:v3.19`, `Rocky Linux:9`,
/// `AlmaLinux:9`, `Red Hat:9` (from `Red Hat:enterprise_linux:9::baseos` and its other
/// repositories); an ecosystem without a release (`Debian`) keys as itself and covers every
/// release. `None` for ecosystems Breeze does not match: other distributions, language
/// ecosystems, and Ubuntu Pro/FIPS streams (their fixes need a subscription, so they would
/// name a fixed-in version an ordinary device cannot install).
pub fn release_key(ecosystem: &str) -> Option<String> {
    let parts: Vec<&str> = ecosystem.split(':').map(str::trim).collect();
    let base = *parts.first()?;
    match (base, parts.len()) {
        ("Debian" | "Ubuntu" | "Alpine" | "Rocky Linux" | "AlmaLinux", 1) => Some(base.to_owned()),
        ("Ubuntu", _) => {
            let release = parts[1];
            (release.chars().next().is_some_and(|c| c.is_ascii_digit()))
                .then(|| format!("Ubuntu:{release}"))
        }
        ("Debian" | "Alpine" | "Rocky Linux" | "AlmaLinux", _) if !parts[1].is_empty() => {
            Some(format!("{base}:{}", parts[1]))
        }
        ("Red Hat", n) if n >= 3 && parts[1] == "enterprise_linux" => {
            let major = parts[2].split('.').next().unwrap_or_default();
            (!major.is_empty() && major.chars().all(|c| c.is_ascii_digit()))
                .then(|| format!("Red Hat:{major}"))
        }
        _ => None,
    }
}

/// The release key ([`release_key`]) of a device from its OS name and version as
/// `/etc/os-release` gives them (`NAME`, `VERSION_ID`): `Debian GNU/Linux` `12` →
/// `Debian:12`, `Ubuntu` `22.04` → `Ubuntu:22.04`, `Alpine Linux` `3.19.1` → `Alpine:v3.19`,
/// `Rocky Linux` `9.3` → `Rocky Linux:9`, `AlmaLinux` `9.3` → `AlmaLinux:9`, `Red Hat
/// Enterprise Linux` `9.3` → `Red Hat:9`. `None` for an OS no advisory feed covers.
pub fn device_release(os_name: &str, os_version: &str) -> Option<String> {
    let name = os_name.to_ascii_lowercase();
    let version = os_version.trim();
    let mut nums = version.split('.');
    let major = nums
        .next()
        .filter(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit()))?;
    let minor = nums.next();
    if name.contains("ubuntu") {
        return minor.map(|m| format!("Ubuntu:{major}.{m}"));
    }
    if name.contains("alpine") {
        return minor.map(|m| format!("Alpine:v{major}.{m}"));
    }
    let base = if name.contains("debian") {
        "Debian"
    } else if name.contains("rocky") {
        "Rocky Linux"
    } else if name.contains("alma") {
        "AlmaLinux"
    } else if name.contains("red hat") || name.starts_with("rhel") {
        "Red Hat"
    } else {
        return None;
    };
    Some(format!("{base}:{major}"))
}

/// A severity band (CVSS v3's qualitative scale).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Unknown,
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    /// The band of a CVSS base score (0 is `Unknown`: no severity to rank by).
    pub fn from_score(score: f64) -> Severity {
        match score {
            s if s >= 9.0 => Severity::Critical,
            s if s >= 7.0 => Severity::High,
            s if s >= 4.0 => Severity::Medium,
            s if s > 0.0 => Severity::Low,
            _ => Severity::Unknown,
        }
    }

    /// A distribution's label (`HIGH`, `Important`, `moderate`, …), case-insensitive.
    pub fn from_label(label: &str) -> Severity {
        match label.trim().to_ascii_lowercase().as_str() {
            "critical" => Severity::Critical,
            "high" | "important" => Severity::High,
            "medium" | "moderate" => Severity::Medium,
            "low" | "negligible" | "unimportant" => Severity::Low,
            _ => Severity::Unknown,
        }
    }
}

/// CVSS v3.x's round-up to one decimal (the specification's integer form, so 4.000001 is 4.1
/// and 4.0 stays 4.0 whatever the floating point says).
fn round_up(x: f64) -> f64 {
    let int = (x * 100_000.0).round() as i64;
    if int % 10_000 == 0 {
        int as f64 / 100_000.0
    } else {
        ((int / 10_000) + 1) as f64 / 10.0
    }
}

/// The base score of a CVSS v3.0 or v3.1 vector (`CVSS:3.1/AV:N/AC:L/…`); `None` for anything
/// else or a vector missing a base metric.
pub fn cvss3_base_score(vector: &str) -> Option<f64> {
    let mut parts = vector.split('/');
    if !matches!(parts.next()?, "CVSS:3.0" | "CVSS:3.1") {
        return None;
    }
    let mut m = std::collections::HashMap::new();
    for p in parts {
        let (k, v) = p.split_once(':')?;
        m.insert(k, v);
    }
    let changed = match *m.get("S")? {
        "U" => false,
        "C" => true,
        _ => return None,
    };
    let av = match *m.get("AV")? {
        "N" => 0.85,
        "A" => 0.62,
        "L" => 0.55,
        "P" => 0.2,
        _ => return None,
    };
    let ac = match *m.get("AC")? {
        "L" => 0.77,
        "H" => 0.44,
        _ => return None,
    };
    let pr = match (*m.get("PR")?, changed) {
        ("N", _) => 0.85,
        ("L", false) => 0.62,
        ("L", true) => 0.68,
        ("H", false) => 0.27,
        ("H", true) => 0.5,
        _ => return None,
    };
    let ui = match *m.get("UI")? {
        "N" => 0.85,
        "R" => 0.62,
        _ => return None,
    };
    let cia = |k: &str| -> Option<f64> {
        match *m.get(k)? {
            "H" => Some(0.56),
            "L" => Some(0.22),
            "N" => Some(0.0),
            _ => None,
        }
    };
    let iss = 1.0 - (1.0 - cia("C")?) * (1.0 - cia("I")?) * (1.0 - cia("A")?);
    let impact = if changed {
        7.52 * (iss - 0.029) - 3.25 * (iss - 0.02).powi(15)
    } else {
        6.42 * iss
    };
    if impact <= 0.0 {
        return Some(0.0);
    }
    let exploitability = 8.22 * av * ac * pr * ui;
    let total = if changed {
        1.08 * (impact + exploitability)
    } else {
        impact + exploitability
    };
    Some(round_up(total.min(10.0)))
}

impl OsvRecord {
    /// The CVSS v3 base score, when the record carries a v3 vector.
    pub fn cvss_score(&self) -> Option<f64> {
        self.severity
            .iter()
            .filter(|s| s.kind == "CVSS_V3")
            .find_map(|s| cvss3_base_score(&s.score))
    }

    /// The record's severity: from its CVSS v3 score where it has one, else the label its
    /// database gives (`database_specific.severity`, or an affected entry's).
    pub fn severity(&self) -> Severity {
        if let Some(score) = self.cvss_score() {
            return Severity::from_score(score);
        }
        let label = |v: &Option<Value>| {
            v.as_ref()
                .and_then(|d| d.get("severity"))
                .and_then(Value::as_str)
                .map(Severity::from_label)
        };
        label(&self.database_specific)
            .into_iter()
            .chain(
                self.affected
                    .iter()
                    .flat_map(|a| [label(&a.ecosystem_specific), label(&a.database_specific)])
                    .flatten(),
            )
            .max()
            .unwrap_or(Severity::Unknown)
    }
}

/// An affected installed version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    /// The lowest version that fixes it, when the advisory names one.
    pub fixed_in: Option<String>,
}

/// One installed package as matching reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledPackage<'a> {
    pub name: &'a str,
    /// The source package (Debian and Ubuntu records name those), when the device reports one.
    pub source: Option<&'a str>,
    pub version: &'a str,
}

/// One advisory affecting one installed package.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Index of the record in the [`AdvisoryIndex`].
    pub record: usize,
    pub package: String,
    pub installed: String,
    pub fixed_in: Option<String>,
}

/// Records indexed by (ecosystem without release, package name), so one device's exposure is
/// a lookup per installed package, never a scan of every advisory: what recomputing a device
/// when its inventory changes costs.
#[derive(Debug, Default)]
pub struct AdvisoryIndex {
    records: Vec<OsvRecord>,
    by_package: std::collections::HashMap<(String, String), Vec<usize>>,
}

impl AdvisoryIndex {
    /// Indexes `records` (withdrawn ones are left out).
    pub fn new(records: Vec<OsvRecord>) -> AdvisoryIndex {
        let mut index = AdvisoryIndex::default();
        for r in records {
            index.add(r);
        }
        index
    }

    /// Adds one record.
    pub fn add(&mut self, record: OsvRecord) {
        if record.withdrawn.is_some() {
            return;
        }
        let at = self.records.len();
        let mut keys: Vec<(String, String)> = record
            .affected
            .iter()
            .filter_map(|a| a.package.as_ref())
            .map(|p| (ecosystem_base(&p.ecosystem).to_owned(), p.name.clone()))
            .collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            self.by_package.entry(key).or_default().push(at);
        }
        self.records.push(record);
    }

    /// The record at `at` (a [`Finding::record`]).
    pub fn record(&self, at: usize) -> Option<&OsvRecord> {
        self.records.get(at)
    }

    /// How many records are indexed.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is indexed.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every advisory affecting `packages` on a device of `ecosystem` (`Debian:12`): each
    /// package is looked up by its own name and by its source package's.
    pub fn exposures(&self, ecosystem: &str, packages: &[InstalledPackage<'_>]) -> Vec<Finding> {
        let base = ecosystem_base(ecosystem);
        let mut out = Vec::new();
        for p in packages {
            let mut names = vec![p.name];
            if let Some(src) = p.source.filter(|s| *s != p.name) {
                names.push(src);
            }
            let mut seen = std::collections::HashSet::new();
            for name in names {
                let key = (base.to_owned(), name.to_owned());
                for &at in self.by_package.get(&key).into_iter().flatten() {
                    if !seen.insert(at) {
                        continue;
                    }
                    if let Some(hit) = self.records[at].affects(ecosystem, name, p.version) {
                        out.push(Finding {
                            record: at,
                            package: p.name.to_owned(),
                            installed: p.version.to_owned(),
                            fixed_in: hit.fixed_in,
                        });
                    }
                }
            }
        }
        out
    }
}

/// An ecosystem name without its release (`Debian:12` → `Debian`).
pub fn ecosystem_base(ecosystem: &str) -> &str {
    ecosystem.split(':').next().unwrap_or(ecosystem)
}

/// Whether the record's ecosystem names the device's: equal, or the record's is the device's
/// without the release (`Debian` covers `Debian:12`). Releases never cross (`Debian:11` does
/// not cover `Debian:12`).
pub fn same_ecosystem(record: &str, device: &str) -> bool {
    if record == device {
        return true;
    }
    !record.contains(':') && device.split(':').next() == Some(record)
}

/// The OSV evaluation of one range: `Some(fix)` when `v` is affected (with the first `fixed`
/// above it, if any), `None` when not.
fn range_affects(order: VersionOrder, events: &[OsvEvent], v: &str) -> Option<Option<String>> {
    // Events sorted by their version; `introduced: "0"` is below everything.
    let key = |e: &OsvEvent| -> (String, bool) {
        let text = e
            .introduced
            .as_ref()
            .or(e.fixed.as_ref())
            .or(e.last_affected.as_ref())
            .or(e.limit.as_ref())
            .cloned()
            .unwrap_or_default();
        let zero = e.introduced.as_deref() == Some("0");
        (text, zero)
    };
    let mut sorted: Vec<&OsvEvent> = events.iter().collect();
    sorted.sort_by(|a, b| {
        let ((ta, za), (tb, zb)) = (key(a), key(b));
        match (za, zb) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            _ => order.compare(&ta, &tb),
        }
    });
    let mut affected = false;
    for e in &sorted {
        if let Some(i) = &e.introduced {
            if i == "0" || order.compare(v, i) != Ordering::Less {
                affected = true;
            }
        } else if let Some(f) = &e.fixed {
            if order.compare(v, f) != Ordering::Less {
                affected = false;
            }
        } else if let Some(l) = &e.last_affected {
            if order.compare(v, l) == Ordering::Greater {
                affected = false;
            }
        } else if let Some(l) = &e.limit
            && order.compare(v, l) != Ordering::Less
        {
            affected = false;
        }
    }
    if !affected {
        return None;
    }
    let fix = sorted
        .iter()
        .filter_map(|e| e.fixed.as_ref())
        .find(|f| order.compare(f, v) == Ordering::Greater)
        .cloned();
    Some(fix)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A synthetic record in the published schema's shape.
    const RECORD: &str = r#"{
      "id": "DEBIAN-CVE-2099-0001",
      "upstream": ["CVE-2099-0001"],
      "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
      "affected": [
        {"package": {"ecosystem": "Debian:12", "name": "openssl"},
         "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.0.11-1~deb12u2"}]}]},
        {"package": {"ecosystem": "Debian:11", "name": "openssl"},
         "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.1.1n-0+deb11u1"}, {"last_affected": "1.1.1n-0+deb11u5"}]}]}
      ]
    }"#;

    #[test]
    fn ranges_decide_with_the_ecosystems_ordering() {
        let r = OsvRecord::parse(RECORD).unwrap();
        assert_eq!(r.cve_ids(), vec!["CVE-2099-0001".to_owned()]);
        assert!(r.cvss_vector().unwrap().starts_with("CVSS:3.1/"));
        let hit = r
            .affects("Debian:12", "openssl", "3.0.11-1~deb12u1")
            .unwrap();
        assert_eq!(hit.fixed_in.as_deref(), Some("3.0.11-1~deb12u2"));
        assert!(
            r.affects("Debian:12", "openssl", "3.0.11-1~deb12u2")
                .is_none()
        );
        assert!(r.affects("Debian:12", "openssl", "3.0.11-1").is_none());
        // last_affected is inclusive; nothing before introduced.
        assert!(
            r.affects("Debian:11", "openssl", "1.1.1n-0+deb11u5")
                .is_some()
        );
        assert!(
            r.affects("Debian:11", "openssl", "1.1.1n-0+deb11u6")
                .is_none()
        );
        assert!(r.affects("Debian:11", "openssl", "1.1.1m-1").is_none());
        // Other releases, packages and ecosystems are not matched.
        assert!(r.affects("Debian:13", "openssl", "3.0.0-1").is_none());
        assert!(r.affects("Debian:12", "libssl3", "3.0.0-1").is_none());
        assert!(r.affects("Alpine:v3.19", "openssl", "3.0.0-r0").is_none());
    }

    #[test]
    fn withdrawn_and_listed_versions() {
        let mut r = OsvRecord::parse(RECORD).unwrap();
        r.affected[0].ranges.clear();
        r.affected[0].versions = vec!["3.0.9-1".into()];
        assert!(r.affects("Debian:12", "openssl", "3.0.9-1").is_some());
        assert!(r.affects("Debian:12", "openssl", "3.0.10-1").is_none());
        r.withdrawn = Some("2099-01-01T00:00:00Z".into());
        assert!(r.affects("Debian:12", "openssl", "3.0.9-1").is_none());
    }

    #[test]
    fn ecosystems_without_a_release_cover_every_release() {
        assert!(same_ecosystem("Debian", "Debian:12"));
        assert!(same_ecosystem("Alpine:v3.19", "Alpine:v3.19"));
        assert!(!same_ecosystem("Alpine:v3.18", "Alpine:v3.19"));
        assert!(!same_ecosystem("Debian:12", "Debian"));
    }

    #[test]
    fn cvss_base_scores_match_the_specification() {
        // Scores as FIRST's CVSS v3.1 calculator gives them.
        for (vector, want) in [
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8),
            ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:N/A:H", 5.9),
            ("CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H", 7.8),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0),
            ("CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N", 7.5),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0),
        ] {
            assert_eq!(cvss3_base_score(vector), Some(want), "{vector}");
        }
        assert_eq!(cvss3_base_score("AV:N/AC:L/Au:N/C:P/I:P/A:P"), None);
        assert_eq!(cvss3_base_score("CVSS:3.1/AV:N"), None);
        let r = OsvRecord::parse(RECORD).unwrap();
        assert_eq!(r.cvss_score(), Some(9.8));
        assert_eq!(r.severity(), Severity::Critical);
        let labelled =
            OsvRecord::parse(r#"{"id":"X-1","database_specific":{"severity":"Moderate"}}"#)
                .unwrap();
        assert_eq!(labelled.severity(), Severity::Medium);
        assert_eq!(
            OsvRecord::parse(r#"{"id":"X-2"}"#).unwrap().severity(),
            Severity::Unknown
        );
    }

    #[test]
    fn the_index_matches_binary_packages_by_their_source() {
        let other = OsvRecord::parse(
            r#"{"id":"ALPINE-CVE-2099-0002","affected":[{"package":{"ecosystem":"Alpine:v3.19","name":"busybox"},
                "ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"1.36.1-r16"}]}]}]}"#,
        )
        .unwrap();
        let index = AdvisoryIndex::new(vec![OsvRecord::parse(RECORD).unwrap(), other]);
        assert_eq!(index.len(), 2);
        let debian = [
            InstalledPackage {
                name: "libssl3",
                source: Some("openssl"),
                version: "3.0.11-1~deb12u1",
            },
            InstalledPackage {
                name: "openssl",
                source: Some("openssl"),
                version: "3.0.11-1~deb12u1",
            },
            InstalledPackage {
                name: "bash",
                source: None,
                version: "5.2.15-2+b2",
            },
        ];
        let found = index.exposures("Debian:12", &debian);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].package, "libssl3");
        assert_eq!(found[0].fixed_in.as_deref(), Some("3.0.11-1~deb12u2"));
        assert_eq!(
            index.record(found[0].record).unwrap().id,
            "DEBIAN-CVE-2099-0001"
        );
        // Another release of the same ecosystem, and another ecosystem, see nothing of it.
        assert!(index.exposures("Debian:13", &debian).is_empty());
        let alpine = [InstalledPackage {
            name: "busybox",
            source: Some("busybox"),
            version: "1.36.1-r15",
        }];
        assert_eq!(index.exposures("Alpine:v3.19", &alpine).len(), 1);
        assert!(index.exposures("Alpine:v3.20", &alpine).is_empty());
    }

    #[test]
    fn prefixed_ids_name_their_cve() {
        let r = OsvRecord::parse(r#"{"id":"ALPINE-CVE-2022-37434","aliases":["GHSA-x"]}"#).unwrap();
        assert_eq!(r.cve_ids(), vec!["CVE-2022-37434".to_owned()]);
        assert!(OsvRecord::parse(r#"{"id":""}"#).is_err());
        assert!(OsvRecord::parse("[]").is_err());
    }
}
