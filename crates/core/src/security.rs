//! Security scans' vocabulary and the posture score (pure).
//!
//! A scan's checks (`firewall`, `security_updates`, `disk_encryption`, `ssh_root_login`,
//! `ssh_password_auth`, `world_writable`, `listening_services`, `antivirus`, `indicators`)
//! each answer [`CheckStatus`] with a [`FindingSeverity`] and evidence. [`score`] turns one
//! scan's findings into a device's posture: eight factors scored 0–100, weighted
//! ([`FACTOR_WEIGHTS`], summing to 100) into the overall score, with a [`RiskLevel`]. A factor
//! the scan could not judge scores 50 and names its data gap, so "unknown" neither passes nor
//! fails a device. [`recommendations`] orders the factors by what fixing each would gain
//! (`(100 - score) × weight / 100` points).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::string_enum;

string_enum! {
    /// One check's answer.
    pub enum CheckStatus: "check status" {
        Pass = "pass",
        Fail = "fail",
        /// The agent could not tell (unprivileged, tool missing, unreadable).
        Unknown = "unknown",
    }
}

string_enum! {
    /// How much a finding matters.
    pub enum FindingSeverity: "finding severity" {
        Info = "info",
        Low = "low",
        Medium = "medium",
        High = "high",
        Critical = "critical",
    }
}

string_enum! {
    /// Where a scan is.
    pub enum ScanStatus: "scan status" {
        Running = "running",
        Completed = "completed",
        Failed = "failed",
    }
}

string_enum! {
    /// What a scan schedule's occurrence came to.
    pub enum ScheduledScanStatus: "scheduled scan status" {
        /// The scans were requested.
        Ran = "ran",
        /// The call waits for a person's approval.
        PendingApproval = "pending_approval",
        /// The guard or the approval refused it.
        Refused = "refused",
        Failed = "failed",
    }
}

string_enum! {
    /// Where a quarantined file is.
    pub enum QuarantineState: "quarantine state" {
        /// In the agent's quarantine, restorable.
        Quarantined = "quarantined",
        /// Deleted; the record stays.
        Removed = "removed",
        /// Put back at its original path.
        Restored = "restored",
    }
}

string_enum! {
    /// A posture score's band.
    pub enum RiskLevel: "risk level" {
        Low = "low",
        Medium = "medium",
        High = "high",
        Critical = "critical",
    }
}

impl RiskLevel {
    /// ≥ 85 low, ≥ 70 medium, ≥ 45 high, below critical.
    pub fn of(score: u32) -> RiskLevel {
        match score {
            85.. => RiskLevel::Low,
            70..=84 => RiskLevel::Medium,
            45..=69 => RiskLevel::High,
            _ => RiskLevel::Critical,
        }
    }
}

/// The factors and their weights (percent of the overall score).
pub const FACTOR_WEIGHTS: &[(&str, &str, u32)] = &[
    ("patch_compliance", "Pending security updates", 25),
    ("encryption", "Disk encryption", 15),
    ("av_health", "Antivirus / EDR", 15),
    ("firewall", "Host firewall", 10),
    ("open_ports", "Listening services exposure", 10),
    ("ssh_config", "SSH configuration", 10),
    ("file_permissions", "World-writable system files", 10),
    ("threats", "Indicator matches", 5),
];

/// One finding as scoring reads it.
#[derive(Debug, Clone, Copy)]
pub struct FindingInput<'a> {
    pub check: &'a str,
    pub status: CheckStatus,
    pub severity: FindingSeverity,
    pub evidence: &'a Value,
}

/// One factor's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FactorScore {
    pub factor: String,
    pub label: String,
    /// Percent of the overall score.
    pub weight: u32,
    /// 0–100.
    pub score: u32,
    /// Points the overall score loses to this factor: `(100 - score) × weight / 100`.
    pub impact: u32,
    /// What the scan could not tell, when it scored 50 for want of data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_gap: Option<String>,
    /// The checks it was scored from and their statuses.
    #[serde(default)]
    pub basis: Vec<String>,
}

/// A device's posture from one scan.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Posture {
    pub score: u32,
    pub risk_level: String,
    pub factors: Vec<FactorScore>,
}

/// What to do first.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recommendation {
    pub factor: String,
    /// critical (impact ≥ 20), high (≥ 12), medium (≥ 7) or low.
    pub priority: String,
    /// Points the overall score would gain.
    pub impact: u32,
    pub action: String,
}

fn clamp(v: i64) -> u32 {
    u32::try_from(v.clamp(0, 100)).unwrap_or(0)
}

fn count(evidence: &Value, key: &str) -> i64 {
    match &evidence[key] {
        Value::Array(a) => i64::try_from(a.len()).unwrap_or(i64::MAX),
        v => v.as_i64().unwrap_or(0),
    }
}

/// A factor's score from its checks: `(score, data gap)`.
fn factor_score(factor: &str, findings: &[FindingInput<'_>]) -> (u32, Option<String>, Vec<String>) {
    let of = |check: &str| findings.iter().find(|f| f.check == check);
    let basis = |checks: &[&str]| -> Vec<String> {
        checks
            .iter()
            .filter_map(|c| of(c).map(|f| format!("{}: {}", f.check, f.status)))
            .collect()
    };
    let simple = |check: &str, fail: u32| -> (u32, Option<String>, Vec<String>) {
        match of(check) {
            Some(f) if f.status == CheckStatus::Pass => (100, None, basis(&[check])),
            Some(f) if f.status == CheckStatus::Fail => (fail, None, basis(&[check])),
            Some(_) => (
                50,
                Some(format!("the {check} check could not tell")),
                basis(&[check]),
            ),
            None => (
                50,
                Some(format!("no {check} check in the scan")),
                Vec::new(),
            ),
        }
    };
    match factor {
        "patch_compliance" => match of("security_updates") {
            Some(f) if f.status == CheckStatus::Fail => {
                let n = count(f.evidence, "pendingSecurity").max(1);
                (clamp(100 - 10 * n), None, basis(&["security_updates"]))
            }
            _ => simple("security_updates", 0),
        },
        "encryption" => simple("disk_encryption", 0),
        "av_health" => match of("antivirus") {
            // Installed but not running is worse than nothing to show, better than nothing.
            Some(f) if f.status == CheckStatus::Fail && f.severity >= FindingSeverity::High => {
                (30, None, basis(&["antivirus"]))
            }
            _ => simple("antivirus", 0),
        },
        "firewall" => simple("firewall", 0),
        "open_ports" => match of("listening_services") {
            Some(f) if f.status != CheckStatus::Unknown => {
                let risky = count(f.evidence, "riskyExposed");
                let exposed = count(f.evidence, "exposedCount");
                (
                    clamp(100 - 15 * risky - 3 * (exposed - 12).max(0)),
                    None,
                    basis(&["listening_services"]),
                )
            }
            _ => simple("listening_services", 0),
        },
        "ssh_config" => {
            let mut score: i64 = 100;
            let mut gaps = Vec::new();
            for (check, penalty) in [("ssh_root_login", 60), ("ssh_password_auth", 40)] {
                match of(check).map(|f| f.status) {
                    Some(CheckStatus::Fail) => score -= penalty,
                    Some(CheckStatus::Pass) => {}
                    _ => {
                        score -= penalty / 2;
                        gaps.push(check);
                    }
                }
            }
            let gap = (!gaps.is_empty()).then(|| format!("{} could not be read", gaps.join(", ")));
            (
                clamp(score),
                gap,
                basis(&["ssh_root_login", "ssh_password_auth"]),
            )
        }
        "file_permissions" => match of("world_writable") {
            Some(f) if f.status == CheckStatus::Fail => {
                let files = count(f.evidence, "files");
                let dirs = count(f.evidence, "directories");
                let weight = if f.severity >= FindingSeverity::High {
                    25
                } else {
                    15
                };
                (
                    clamp(100 - weight * files - 10 * dirs),
                    None,
                    basis(&["world_writable"]),
                )
            }
            _ => simple("world_writable", 0),
        },
        "threats" => match of("indicators") {
            None => (100, None, Vec::new()),
            Some(_) => simple("indicators", 0),
        },
        _ => (50, Some("unknown factor".into()), Vec::new()),
    }
}

/// The posture one scan's findings give.
pub fn score(findings: &[FindingInput<'_>]) -> Posture {
    let mut total = 0u32;
    let factors: Vec<FactorScore> = FACTOR_WEIGHTS
        .iter()
        .map(|(factor, label, weight)| {
            let (score, data_gap, basis) = factor_score(factor, findings);
            total += score * weight;
            FactorScore {
                factor: (*factor).to_owned(),
                label: (*label).to_owned(),
                weight: *weight,
                score,
                impact: ((100 - score) * weight + 50) / 100,
                data_gap,
                basis,
            }
        })
        .collect();
    let score = (total + 50) / 100;
    Posture {
        score,
        risk_level: RiskLevel::of(score).as_str().to_owned(),
        factors,
    }
}

fn action_for(factor: &str, gap: bool) -> &'static str {
    if gap {
        return match factor {
            "firewall" | "ssh_config" => {
                "Run the agent as root (or give it read access) so the scan can read the firewall rules and sshd configuration"
            }
            _ => {
                "Re-run the scan where the agent can read this (root, a supported package manager)"
            }
        };
    }
    match factor {
        "patch_compliance" => "Install the pending security updates (manage_patches)",
        "encryption" => "Encrypt the system volumes with LUKS (dm-crypt) at the next rebuild",
        "av_health" => {
            "Install or start an antivirus/EDR agent (e.g. ClamAV, Wazuh, osquery, your EDR)"
        }
        "firewall" => {
            "Enable a host firewall (nftables, ufw or firewalld) that filters incoming traffic"
        }
        "open_ports" => {
            "Bind risky services (databases, telnet, SMB, RDP, VNC) to loopback or firewall them"
        }
        "ssh_config" => {
            "Set PermitRootLogin no (or prohibit-password) and PasswordAuthentication no in sshd_config"
        }
        "file_permissions" => {
            "Remove world-write permission from system files, or quarantine the flagged ones"
        }
        "threats" => "Quarantine the files matching indicators (security_scan action quarantine)",
        _ => "Review this factor",
    }
}

/// Factors that lose points, the largest loss first.
pub fn recommendations(factors: &[FactorScore]) -> Vec<Recommendation> {
    let mut out: Vec<Recommendation> = factors
        .iter()
        .filter(|f| f.impact > 0)
        .map(|f| Recommendation {
            factor: f.factor.clone(),
            priority: match f.impact {
                20.. => "critical",
                12..=19 => "high",
                7..=11 => "medium",
                _ => "low",
            }
            .to_owned(),
            impact: f.impact,
            action: action_for(&f.factor, f.data_gap.is_some()).to_owned(),
        })
        .collect();
    out.sort_by(|a, b| b.impact.cmp(&a.impact).then(a.factor.cmp(&b.factor)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f<'a>(
        check: &'a str,
        status: CheckStatus,
        severity: FindingSeverity,
        evidence: &'a Value,
    ) -> FindingInput<'a> {
        FindingInput {
            check,
            status,
            severity,
            evidence,
        }
    }

    #[test]
    fn weights_sum_to_100() {
        assert_eq!(FACTOR_WEIGHTS.iter().map(|w| w.2).sum::<u32>(), 100);
    }

    #[test]
    fn a_clean_device_scores_100_and_gets_no_recommendations() {
        let e = json!({});
        let open = json!({ "riskyExposed": [], "exposedCount": 2 });
        let pass = |c| f(c, CheckStatus::Pass, FindingSeverity::Info, &e);
        let findings = [
            pass("security_updates"),
            pass("disk_encryption"),
            pass("antivirus"),
            pass("firewall"),
            f(
                "listening_services",
                CheckStatus::Pass,
                FindingSeverity::Info,
                &open,
            ),
            pass("ssh_root_login"),
            pass("ssh_password_auth"),
            pass("world_writable"),
        ];
        let p = score(&findings);
        assert_eq!(p.score, 100);
        assert_eq!(p.risk_level, "low");
        assert!(recommendations(&p.factors).is_empty());
    }

    #[test]
    fn failures_weigh_by_factor_and_unknowns_score_half() {
        let updates = json!({ "pendingSecurity": 3 });
        let e = json!({});
        let findings = [
            f(
                "security_updates",
                CheckStatus::Fail,
                FindingSeverity::High,
                &updates,
            ),
            f(
                "disk_encryption",
                CheckStatus::Fail,
                FindingSeverity::Medium,
                &e,
            ),
            f("antivirus", CheckStatus::Fail, FindingSeverity::Medium, &e),
            f(
                "firewall",
                CheckStatus::Unknown,
                FindingSeverity::Medium,
                &e,
            ),
            f(
                "ssh_root_login",
                CheckStatus::Fail,
                FindingSeverity::High,
                &e,
            ),
            f(
                "ssh_password_auth",
                CheckStatus::Pass,
                FindingSeverity::Info,
                &e,
            ),
        ];
        let p = score(&findings);
        let by = |name: &str| {
            p.factors
                .iter()
                .find(|x| x.factor == name)
                .cloned()
                .expect("factor")
        };
        assert_eq!(by("patch_compliance").score, 70);
        assert_eq!(by("encryption").score, 0);
        assert_eq!(by("av_health").score, 0);
        assert_eq!(by("firewall").score, 50);
        assert!(by("firewall").data_gap.is_some());
        assert_eq!(by("ssh_config").score, 40);
        assert_eq!(
            by("threats").score,
            100,
            "no indicator list, nothing to hold against it"
        );
        // 70*.25 + 0 + 0 + 50*.10 + 50*.10 (no listening check) + 40*.10 + 50*.10 + 100*.05
        assert_eq!(p.score, 42);
        assert_eq!(p.risk_level, "critical");
        let recs = recommendations(&p.factors);
        // Encryption and antivirus both lose their whole 15; ties go by name.
        assert_eq!(recs[0].factor, "av_health");
        assert_eq!(recs[1].factor, "encryption");
        assert_eq!((recs[1].impact, recs[1].priority.as_str()), (15, "high"));
        assert!(recs.windows(2).all(|w| w[0].impact >= w[1].impact));
        let fw = recs
            .iter()
            .find(|r| r.factor == "firewall")
            .expect("firewall");
        assert!(
            fw.action.contains("root"),
            "a data gap asks for data: {}",
            fw.action
        );
    }

    #[test]
    fn risk_levels_band_the_score() {
        assert_eq!(RiskLevel::of(100), RiskLevel::Low);
        assert_eq!(RiskLevel::of(85), RiskLevel::Low);
        assert_eq!(RiskLevel::of(84), RiskLevel::Medium);
        assert_eq!(RiskLevel::of(69), RiskLevel::High);
        assert_eq!(RiskLevel::of(44), RiskLevel::Critical);
    }
}
