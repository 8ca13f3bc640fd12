//! The five guided prompts: ready-made starting points that steer a client through the right
//! tools, reads before writes, one target at a time.

use serde_json::{Map, Value};

/// A prompt argument.
#[derive(Debug, Clone, Copy)]
pub struct PromptArg {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
}

/// A prompt.
#[derive(Debug, Clone, Copy)]
pub struct PromptSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub arguments: &'static [PromptArg],
    render: fn(&Args<'_>) -> String,
}

/// Argument values, with the ones not given rendered as absent.
pub struct Args<'a>(&'a Map<String, Value>);

impl Args<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
}

/// Why a prompt could not be rendered.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    #[error("Unknown prompt: {0}")]
    Unknown(String),
    #[error("Missing required argument \"{argument}\" for prompt {prompt}")]
    MissingArgument {
        prompt: &'static str,
        argument: &'static str,
    },
    #[error("Argument \"{0}\" must be a string")]
    NotAString(String),
}

const READ_FIRST: &str = "Work read-before-write: gather facts with read-only tools first, echo the target and its organization back before any change, and ask me before anything that changes a device or a policy. If Breeze refuses a call, tell me why instead of retrying.";

fn scope_phrase(scope: Option<&str>) -> String {
    scope.map_or_else(
        || "across every organization this connection can reach".to_owned(),
        |s| format!("scoped to {s}"),
    )
}

fn fleet_triage(a: &Args<'_>) -> String {
    format!(
        "Triage the fleet {}.\n\n1. Get the overall picture: query_devices with status=offline, then query_devices for the rest; manage_alerts with action=list (unresolved, by severity) and manage_alert_rules with action=summary.\n2. Check what is expected: manage_maintenance_windows with action=active_now (alerts held back there are known work), and manage_automations with action=list for what already reacts on its own.\n3. For each device that stands out, get_device_details (hardware, disks, latest metrics, open alerts) and get_device_context to see what is already known.\n4. Check recent activity with query_audit_log.\n5. Produce one prioritized attention list: what is wrong, on which device, how sure you are, and the next read-only step for each. If I want it on record, generate_report (alert_history or device_inventory) after I agree.\n\nThis is a read-only sweep: do not change anything. {READ_FIRST}",
        scope_phrase(a.get("scope"))
    )
}

fn device_investigate(a: &Args<'_>) -> String {
    let device = a.get("device").unwrap_or_default();
    format!(
        "Investigate the device \"{device}\".\n\n1. Find it: query_devices with search set to the name (or use the id), and confirm the exact device and its organization with me if more than one matches.\n2. get_device_details and get_device_context for what is known (issues, quirks, follow-ups).\n3. Look at metrics and agent logs where those tools are available, and at query_audit_log for recent changes to it.\n4. Conclude with the likely root cause, the evidence for it, and the next steps.\n\nRecord anything worth remembering with set_device_context only after telling me. {READ_FIRST}"
    )
}

fn patch_remediate(a: &Args<'_>) -> String {
    let target = a.get("target").unwrap_or_default();
    format!(
        "Remediate missing patches on \"{target}\" (a device, site or organization).\n\n1. Resolve the target with query_devices and echo the devices back with their organization; use exactly these device ids from here on.\n2. Scan now: manage_patches action=scan with deviceIds (results arrive as agents answer; offline devices answer later).\n3. Show the gaps: manage_patches action=compliance (per device: approved updates still missing, security updates nobody decided about, reboot required, who is logged in) and action=list (securityOnly=true first; severity where the package manager gives one). Check manage_maintenance_windows for a window to install in.\n4. Propose decisions and wait for my answer: approve (or bulk_approve, e.g. securityOnly=true), decline or defer (deferUntil) per package, organization-wide or for a configuration policy. Deciding is Tier 2: do it only after I agree.\n5. Stop and get my explicit confirmation of the install: which devices, which packages (default: every approved one), now or in which maintenance window, and the reboot policy (never, if_needed, always; a reboot is deferred while users are logged in unless rebootWithUsers). install is Tier 3 and waits for a person's approval of exactly that plan.\n6. Only then manage_patches action=install, never beyond the confirmed target; follow it with action=results jobId=… and report each device's result (installed, failed, not available; the reboot outcome). Offer action=rollback for a package that broke something (also Tier 3).\n7. For a fix that is a library script (a workaround, a configuration change) or a wide target, stage it instead with manage_deployments: create a draft with a small canary ring first (deviceIds or percent) and maxFailurePercent, show me its rings and devices, and start only after I confirm (Tier 3; each device's run is run_script's Tier 3 approval too). Follow it with action=get and device_status; it pauses by itself when a ring fails — report the reason, and resume (retryFailed=true after a fix) or cancel only on my word.\n\n{READ_FIRST}"
    )
}

fn incident_kickoff(a: &Args<'_>) -> String {
    let summary = a.get("summary").unwrap_or_default();
    let scope = a
        .get("scope")
        .map(|s| format!(" Scope: {s}."))
        .unwrap_or_default();
    format!(
        "Open an incident: {summary}.{scope}\n\n1. Echo the organization and scope back to me.\n2. Find what is affected: query_devices, then get_device_details and get_device_context for each affected device.\n3. Build a timeline from manage_alerts (action=list, then get for each alert's history), manage_alert_rules (action=get for the rules that fired), query_audit_log, and manage_automations (action=history) for what ran on its own.\n4. Check whether a maintenance window explains it: manage_maintenance_windows with action=active_now for the affected devices.\n5. Collect evidence read-only and summarize it; keep the record with generate_report (alert_history and audit_activity for the period) after I agree, and give me the download paths.\n6. Draft the incident report: impact, timeline, evidence, open questions, next actions. Acknowledge alerts (manage_alerts action=acknowledge) or note follow-ups with set_device_context only after I agree.\n\n{READ_FIRST}"
    )
}

fn turnkey_setup(a: &Args<'_>) -> String {
    let scope = a
        .get("scope")
        .unwrap_or("partner-wide (every organization)");
    format!(
        "Set up a baseline configuration, {scope}.\n\nWalk me through it one category at a time, previewing each policy before applying it: patch rings (pilot, production with a deferral, security auto-approval), backups (daily, 30-day retention, alert after 48 h without success), DNS filtering (malware, phishing, command-and-control), peripheral control (block USB storage), a CIS level 1 baseline, and core alert rules (device offline over 15 minutes, disk over 90%, CPU over 95% for 10 minutes, failed backups, critical patches missing for 7 days).\n\nThe values are adjustable defaults. Confirm the scope with me first and never assign a policy without my confirmation. {READ_FIRST}"
    )
}

/// The prompts, in listing order.
pub const PROMPTS: &[PromptSpec] = &[
    PromptSpec {
        name: "breeze-fleet-triage",
        title: "Fleet triage",
        description: "A read-only sweep of the fleet ending in one prioritized attention list.",
        arguments: &[PromptArg {
            name: "scope",
            description: "Organization or site to limit the sweep to (default: everything reachable)",
            required: false,
        }],
        render: fleet_triage,
    },
    PromptSpec {
        name: "breeze-device-investigate",
        title: "Investigate a device",
        description: "Root-cause one device: identity, context, metrics, logs, recent changes.",
        arguments: &[PromptArg {
            name: "device",
            description: "Hostname, name or id of the device",
            required: true,
        }],
        render: device_investigate,
    },
    PromptSpec {
        name: "breeze-patch-remediate",
        title: "Patch remediation",
        description: "Find and close patch gaps on a target, installing only after confirmation.",
        arguments: &[PromptArg {
            name: "target",
            description: "A device, site or organization",
            required: true,
        }],
        render: patch_remediate,
    },
    PromptSpec {
        name: "breeze-incident-kickoff",
        title: "Incident kickoff",
        description: "Open and structure an incident: timeline, evidence, report.",
        arguments: &[
            PromptArg {
                name: "summary",
                description: "What happened, in a sentence",
                required: true,
            },
            PromptArg {
                name: "scope",
                description: "Affected organization, site or devices",
                required: false,
            },
        ],
        render: incident_kickoff,
    },
    PromptSpec {
        name: "breeze-turnkey-setup",
        title: "Turnkey setup",
        description: "An opinionated baseline-configuration wizard, partner-wide by default.",
        arguments: &[PromptArg {
            name: "scope",
            description: "Where to apply (default: partner-wide)",
            required: false,
        }],
        render: turnkey_setup,
    },
];

/// Renders prompt `name` with `args`: its description and the one user message.
pub fn render(
    name: &str,
    args: &Map<String, Value>,
) -> Result<(&'static str, String), PromptError> {
    let spec = PROMPTS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| PromptError::Unknown(name.to_owned()))?;
    for (k, v) in args {
        if !v.is_string() && !v.is_null() {
            return Err(PromptError::NotAString(k.clone()));
        }
    }
    let a = Args(args);
    for arg in spec.arguments.iter().filter(|a| a.required) {
        if a.get(arg.name).is_none() {
            return Err(PromptError::MissingArgument {
                prompt: spec.name,
                argument: arg.name,
            });
        }
    }
    Ok((spec.description, (spec.render)(&a)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn renders_with_arguments_and_refuses_missing_ones() {
        let (_, text) = render(
            "breeze-device-investigate",
            &args(json!({ "device": "ACME-LT-014" })),
        )
        .unwrap();
        assert!(text.contains("ACME-LT-014") && text.contains("get_device_details"));
        assert_eq!(
            render("breeze-device-investigate", &args(json!({})))
                .unwrap_err()
                .to_string(),
            "Missing required argument \"device\" for prompt breeze-device-investigate"
        );
        assert!(render("breeze-incident-kickoff", &args(json!({ "summary": "  " }))).is_err());
        let (_, text) = render(
            "breeze-incident-kickoff",
            &args(json!({ "summary": "Mail down", "scope": "acme" })),
        )
        .unwrap();
        assert!(text.contains("Mail down") && text.contains("Scope: acme"));
        let (_, text) = render("breeze-turnkey-setup", &Map::new()).unwrap();
        assert!(text.contains("partner-wide"));
        assert!(matches!(
            render("nope", &Map::new()),
            Err(PromptError::Unknown(_))
        ));
        assert!(matches!(
            render("breeze-fleet-triage", &args(json!({ "scope": 3 }))),
            Err(PromptError::NotAString(_))
        ));
    }

    #[test]
    fn triage_and_incident_steer_through_the_monitoring_tools() {
        let registry = crate::all();
        let steer = [
            "query_devices",
            "get_device_details",
            "manage_alerts",
            "manage_alert_rules",
            "manage_maintenance_windows",
            "generate_report",
            "query_audit_log",
        ];
        for (name, given) in [
            ("breeze-fleet-triage", json!({})),
            ("breeze-incident-kickoff", json!({ "summary": "Mail down" })),
        ] {
            let (_, text) = render(name, &args(given)).unwrap();
            for tool in steer {
                assert!(text.contains(tool), "{name} names {tool}");
                assert!(registry.get(tool).is_some(), "{tool} is a registered tool");
            }
            // Named before it lands (issue #26); the client is told by Breeze if it is missing.
            assert!(text.contains("manage_automations"), "{name}");
        }
    }

    #[test]
    fn patch_remediation_steers_to_staged_deployments() {
        let registry = crate::all();
        let (_, text) = render(
            "breeze-patch-remediate",
            &args(json!({ "target": "web-01" })),
        )
        .unwrap();
        for tool in ["manage_patches", "manage_deployments", "query_devices"] {
            assert!(text.contains(tool), "names {tool}");
            assert!(registry.get(tool).is_some(), "{tool} is a registered tool");
        }
    }

    #[test]
    fn read_before_write_everywhere() {
        for p in PROMPTS {
            let mut a = Map::new();
            for arg in p.arguments {
                a.insert(arg.name.into(), json!("x"));
            }
            let (_, text) = render(p.name, &a).unwrap();
            assert!(text.contains("read-before-write"), "{}", p.name);
        }
    }
}
