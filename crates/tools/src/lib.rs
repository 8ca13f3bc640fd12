//! Breeze's tools, resources and prompts, declared once and shared by every front door (MCP
//! now, the AI chat later).
//!
//! - [`contract`]: the [`Tool`] trait, tiers, effects and derived hints, tool errors, and the
//!   [`ToolCx`] capability a handler acts through.
//! - [`registry`]: the erased registry; [`all`] lists every tool domain explicitly.
//! - [`resources`] and [`prompts`]: the MCP resources and guided prompts.
//! - [`docs`]: the tool catalogue and the agent skill, generated from the registry.
//!
//! Invariant: tools never check authorization. The guard decides before a handler runs, and its
//! verdict (`breeze_guard::Cleared`) is the only way to [`ToolSpec::call`]: the handler gets a
//! store and a device gateway confined to the organization the guard cleared.

pub mod contract;
pub mod docs;
pub mod prompts;
pub mod reach;
pub mod registry;
pub mod resources;
mod tools;

pub use contract::{
    Action, ActionSet, ApprovalWait, CallOptions, Effect, ErrorCode, Hints, NoActions, Pin,
    ProgressReport, RateLimit, Rendered, Tier, Tool, ToolCx, ToolError, Unscoped, per,
};
pub use registry::{REQUEST_ID, RawOutput, Registry, ToolSpec, listed_meta, tool_meta};
/// Starts one organization's install or rollback job whose maintenance window has opened
/// (the server's patch-job dispatcher finds those jobs).
pub use tools::patches::{FleetPatchCompliance, fleet_patch_compliance, start_scheduled_patch_job};

/// The byte budget of an execute key's full `tools/list` (compact JSON of the `result`) for
/// [`BUDGETED_CATALOGUE`]. 36 KB: these tools measured 36,422 bytes once the batch envelope left
/// every listed input schema for one description in the server's instructions.
pub const FULL_LISTING_BUDGET: usize = 36 * 1024;

/// The catalogue [`FULL_LISTING_BUDGET`] was set for. The budget keeps each of these tools'
/// listing terse; it is not held against tools added since — a catalogue that outgrows any fixed
/// budget is what the consolidated mode (≤ 8 KB for every key) is for.
pub const BUDGETED_CATALOGUE: [&str; 21] = [
    "analyze_disk_usage",
    "analyze_metrics",
    "disk_cleanup",
    "execute_command",
    "file_operations",
    "get_active_users",
    "get_approval_status",
    "get_device_context",
    "get_device_details",
    "get_device_software",
    "get_user_experience_metrics",
    "manage_groups",
    "manage_services",
    "network_discovery",
    "query_audit_log",
    "query_devices",
    "resolve_device_context",
    "run_script",
    "search_agent_logs",
    "set_agent_log_level",
    "set_device_context",
];

/// Every tool. Domains are listed alphabetically; add new ones here.
pub fn all() -> Registry {
    let mut r = Registry::default();
    r.domain("agent", tools::agent::register);
    r.domain("alerts", tools::alerts::register);
    r.domain("approvals", tools::approvals::register);
    r.domain("audit", tools::audit::register);
    r.domain("automations", tools::automations::register);
    r.domain("catalog", tools::catalog::register);
    r.domain("configuration", tools::config_policies::register);
    r.domain("context", tools::context::register);
    r.domain("contracts", tools::contracts::register);
    r.domain("deployments", tools::deployments::register);
    r.domain("devices", tools::devices::register);
    r.domain("disk", tools::disk::register);
    r.domain("groups", tools::groups::register);
    r.domain("invoices", tools::invoices::register);
    r.domain("live_queries", tools::live_queries::register);
    r.domain("maintenance", tools::maintenance::register);
    r.domain("patches", tools::patches::register);
    r.domain("policies", tools::policies::register);
    r.domain("quotes", tools::quotes::register);
    r.domain("reports", tools::reports::register);
    r.domain("scripts", tools::scripts::register);
    r.domain("security", tools::security::register);
    r.domain("telemetry", tools::telemetry::register);
    r.domain("tickets", tools::tickets::register);
    r.domain("vulnerabilities", tools::vulnerabilities::register);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    use breeze_core::Permission;

    #[test]
    fn every_tool_has_its_modules_domain() {
        let r = all();
        assert_eq!(
            r.domains(),
            [
                "agent",
                "alerts",
                "approvals",
                "audit",
                "automations",
                "catalog",
                "configuration",
                "context",
                "contracts",
                "deployments",
                "devices",
                "disk",
                "groups",
                "invoices",
                "live_queries",
                "maintenance",
                "patches",
                "policies",
                "quotes",
                "reports",
                "scripts",
                "security",
                "telemetry",
                "tickets",
                "vulnerabilities"
            ]
        );
        assert!(r.iter().all(|t| t.domain != registry::NO_DOMAIN));
        assert_eq!(r.get("query_devices").map(|t| t.domain), Some("devices"));
        assert_eq!(r.get("run_script").map(|t| t.domain), Some("scripts"));
        // A tool registered outside a domain says so rather than borrowing one.
        let mut bare = Registry::default();
        tools::devices::register(&mut bare);
        assert!(bare.iter().all(|t| t.domain == registry::NO_DOMAIN));
    }

    #[test]
    fn every_tool_is_well_formed() {
        let r = all();
        assert!(!r.is_empty());
        let names: Vec<&str> = r.iter().map(|t| t.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "deterministic, sorted order");
        for t in r.iter() {
            assert!(
                t.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                t.name
            );
            assert!(t.name.len() <= 64);
            assert!(
                !t.title.is_empty() && t.description.len() > 20,
                "{} needs a title and a description",
                t.name
            );
            assert_eq!(
                t.input_schema["type"], "object",
                "{}: input schema must be an object",
                t.name
            );
            assert_eq!(
                t.output_schema["type"], "object",
                "{}: output schema must be an object",
                t.name
            );
            assert!(
                t.tier < Tier::T4,
                "{}: tier 4 tools are never registered",
                t.name
            );
            if let Some(top) = t.actions.iter().map(|a| a.tier).max() {
                // The fail-closed tier (the highest action's) is never below the listed one.
                assert!(t.tier <= top, "{}: listed above every action", t.name);
            }
            for a in t.actions {
                assert!(
                    a.tier < Tier::T4,
                    "{}.{}: tier 4 is never callable",
                    t.name,
                    a.name
                );
                let in_schema = t
                    .input_schema
                    .to_string()
                    .contains(&format!("\"{}\"", a.name));
                assert!(
                    in_schema,
                    "{}.{} is missing from the input schema",
                    t.name, a.name
                );
            }
        }
    }

    /// The specification's tool tables (breeze-mcp-server.md, "Available tools" and "Per-tool
    /// rate limits"), one row per tool: its name, the Tier column as the spec prints it (`None`
    /// for Breeze's own tools the spec does not list), whether the spec's description breaks
    /// the tier down per action, and the per-user limit (calls, window in seconds).
    type SpecTool = (&'static str, Option<&'static str>, bool, Option<(u32, u64)>);
    #[rustfmt::skip]
    const SPEC_TOOLS: &[SpecTool] = &[
        ("analyze_disk_usage",          Some("1"),     false, Some((10, 300))),
        ("analyze_metrics",             Some("1"),     false, None),
        ("apply_configuration_policy",  Some("2"),     false, None),
        ("disk_cleanup",                Some("1/3"),   true,  Some((3, 600))),
        ("execute_command",             Some("3"),     false, Some((10, 300))),
        ("file_operations",             Some("1/3"),   true,  Some((20, 300))),
        ("generate_report",             Some("1/2"),   false, Some((10, 300))),
        ("get_active_users",            Some("1"),     false, None),
        ("get_approval_status",         None,          false, None),
        ("get_device_context",          Some("1"),     false, None),
        ("get_device_details",          Some("1"),     false, None),
        // Breeze's own: get_device_details counts packages, this pages them.
        ("get_device_software",         None,          false, None),
        ("get_effective_configuration", Some("1"),     false, None),
        ("get_catalog_item",            Some("2"),     false, None),
        ("get_contract",                Some("2"),     false, None),
        ("get_invoice",                 Some("2"),     false, None),
        ("get_security_posture",        Some("1"),     false, None),
        ("get_user_experience_metrics", Some("1"),     false, None),
        // Breeze's own: exposure to OSV advisories, and the advisories.
        ("get_vulnerability_exposure",  None,          false, None),
        ("list_configuration_policies", Some("1"),     false, None),
        ("list_contracts",              Some("2"),     false, None),
        ("list_invoices",               Some("2"),     false, None),
        // Breeze's own: a read-only question asked of the fleet at once.
        ("list_live_queries",           None,          false, None),
        ("manage_advisories",           None,          false, None),
        ("manage_alert_rules",          Some("1/2/3"), true,  Some((15, 300))),
        ("manage_alerts",               Some("1/2"),   true,  None),
        ("manage_automations",          Some("1/2/3"), false, Some((10, 600))),
        ("lookup_distributor_product",  Some("2"),     false, None),
        ("manage_catalog",              Some("2"),     false, None),
        ("manage_contracts",            Some("2/3"),   true,  None),
        ("manage_deployments",          Some("1/2/3"), false, Some((10, 600))),
        ("manage_groups",               Some("1/2/3"), false, Some((20, 300))),
        ("manage_invoices",           Some("2/3"),   true,  None),
        ("manage_maintenance_windows",  Some("1/2/3"), false, Some((15, 300))),
        ("manage_patches",              Some("1/2/3"), true,  Some((15, 300))),
        ("manage_policies",             Some("1/2/3"), false, Some((20, 300))),
        ("manage_quotes",               Some("2/3"),   true,  None),
        ("manage_services",             Some("3"),     true,  Some((10, 300))),
        ("manage_tickets",            Some("1/2/3"), true,  None),
        ("network_discovery",           Some("3"),     false, Some((2, 600))),
        ("preview_configuration_change", Some("1"),    false, None),
        ("query_audit_log",             Some("1"),     false, None),
        ("query_devices",               Some("1"),     false, None),
        ("run_live_query",              None,          false, Some((20, 300))),
        ("remove_configuration_policy_assignment", Some("2"), false, None),
        ("resolve_device_context",      Some("2"),     false, Some((20, 300))),
        ("run_script",                  Some("3"),     false, Some((5, 300))),
        ("search_agent_logs",           Some("1"),     false, None),
        ("search_catalog",              Some("2"),     false, None),
        ("security_scan",               Some("3"),     false, Some((3, 600))),
        ("set_agent_log_level",         Some("2"),     false, None),
        ("set_device_context",          Some("2"),     false, Some((20, 300))),
    ];

    /// Every call a tool can take, one row per action (`None` for a tool without actions):
    /// the tier (the spec's per-action breakdown where it gives one, else the tool's tier) and
    /// the permission the acting user's role must hold.
    #[rustfmt::skip]
    const SPEC_CALLS: &[(&str, Option<&str>, Tier, Permission)] = &[
        ("analyze_disk_usage",          None,                     Tier::T1, Permission::DevicesRead),
        ("analyze_metrics",             None,                     Tier::T1, Permission::DevicesRead),
        ("apply_configuration_policy",  None,                     Tier::T2, Permission::DevicesWrite),
        ("disk_cleanup",                Some("preview"),          Tier::T1, Permission::DevicesRead),
        ("disk_cleanup",                Some("execute"),          Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("list_processes"),   Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("kill_process"),     Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("list_services"),    Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("start_service"),    Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("stop_service"),     Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("restart_service"),  Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("file_list"),        Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("file_read"),        Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("event_logs_list"),  Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("event_logs_query"), Tier::T3, Permission::DevicesExecute),
        ("execute_command",             Some("reboot"),           Tier::T3, Permission::DevicesExecute),
        ("file_operations",             Some("list"),             Tier::T1, Permission::FilesRead),
        ("file_operations",             Some("read"),             Tier::T1, Permission::FilesRead),
        ("file_operations",             Some("write"),            Tier::T3, Permission::FilesWrite),
        ("file_operations",             Some("delete"),           Tier::T3, Permission::FilesWrite),
        ("file_operations",             Some("mkdir"),            Tier::T3, Permission::FilesWrite),
        ("file_operations",             Some("rename"),           Tier::T3, Permission::FilesWrite),
        ("generate_report",             Some("list"),             Tier::T1, Permission::AuditRead),
        ("generate_report",             Some("get"),              Tier::T1, Permission::AuditRead),
        ("generate_report",             Some("history"),          Tier::T1, Permission::AuditRead),
        ("generate_report",             Some("data"),             Tier::T1, Permission::AuditRead),
        ("generate_report",             Some("generate"),         Tier::T2, Permission::AuditRead),
        ("generate_report",             Some("create"),           Tier::T2, Permission::DevicesWrite),
        ("generate_report",             Some("update"),           Tier::T2, Permission::DevicesWrite),
        ("generate_report",             Some("delete"),           Tier::T2, Permission::DevicesWrite),
        ("get_active_users",            None,                     Tier::T1, Permission::DevicesRead),
        ("get_approval_status",         None,                     Tier::T1, Permission::DevicesRead),
        ("get_device_context",          None,                     Tier::T1, Permission::DevicesRead),
        ("get_device_details",          None,                     Tier::T1, Permission::DevicesRead),
        ("get_device_software",         None,                     Tier::T1, Permission::DevicesRead),
        ("get_effective_configuration", None,                     Tier::T1, Permission::DevicesRead),
        ("get_catalog_item",            None,                     Tier::T2, Permission::CatalogRead),
        ("get_contract",                None,                     Tier::T2, Permission::ContractsRead),
        ("get_invoice",                 None,                     Tier::T2, Permission::InvoicesRead),
        ("get_security_posture",        None,                     Tier::T1, Permission::DevicesRead),
        ("get_user_experience_metrics", None,                     Tier::T1, Permission::DevicesRead),
        ("get_vulnerability_exposure",  Some("summary"),          Tier::T1, Permission::DevicesRead),
        ("get_vulnerability_exposure",  Some("advisories"),       Tier::T1, Permission::DevicesRead),
        ("get_vulnerability_exposure",  Some("devices"),          Tier::T1, Permission::DevicesRead),
        ("get_vulnerability_exposure",  Some("device"),           Tier::T1, Permission::DevicesRead),
        ("manage_advisories",           Some("list"),             Tier::T1, Permission::DevicesRead),
        ("manage_advisories",           Some("get"),              Tier::T1, Permission::DevicesRead),
        ("manage_advisories",           Some("import"),           Tier::T3, Permission::DevicesWrite),
        ("list_configuration_policies", None,                     Tier::T1, Permission::DevicesRead),
        ("list_contracts",              None,                     Tier::T2, Permission::ContractsRead),
        ("list_invoices",               None,                     Tier::T2, Permission::InvoicesRead),
        ("list_live_queries",           None,                     Tier::T1, Permission::DevicesRead),
        ("lookup_distributor_product",  None,                     Tier::T2, Permission::CatalogRead),
        ("manage_alert_rules",          Some("list"),             Tier::T1, Permission::AlertsRead),
        ("manage_alert_rules",          Some("get"),              Tier::T1, Permission::AlertsRead),
        ("manage_alert_rules",          Some("test"),             Tier::T1, Permission::AlertsRead),
        ("manage_alert_rules",          Some("list_channels"),    Tier::T1, Permission::AlertsRead),
        ("manage_alert_rules",          Some("summary"),          Tier::T1, Permission::AlertsRead),
        ("manage_alert_rules",          Some("create"),           Tier::T2, Permission::AlertsManage),
        ("manage_alert_rules",          Some("update"),           Tier::T2, Permission::AlertsManage),
        ("manage_alert_rules",          Some("delete"),           Tier::T3, Permission::AlertsManage),
        ("manage_alerts",               Some("list"),             Tier::T1, Permission::AlertsRead),
        ("manage_alerts",               Some("get"),              Tier::T1, Permission::AlertsRead),
        ("manage_alerts",               Some("acknowledge"),      Tier::T2, Permission::AlertsManage),
        ("manage_alerts",               Some("resolve"),          Tier::T2, Permission::AlertsManage),
        ("manage_alerts",               Some("suppress"),         Tier::T2, Permission::AlertsManage),
        ("manage_automations",          Some("list"),           Tier::T1, Permission::ScriptsRead),
        ("manage_automations",          Some("get"),            Tier::T1, Permission::ScriptsRead),
        ("manage_automations",          Some("history"),        Tier::T1, Permission::ScriptsRead),
        ("manage_automations",          Some("create"),         Tier::T2, Permission::ScriptsWrite),
        ("manage_automations",          Some("update"),         Tier::T2, Permission::ScriptsWrite),
        ("manage_automations",          Some("enable"),         Tier::T2, Permission::ScriptsWrite),
        ("manage_automations",          Some("disable"),        Tier::T2, Permission::ScriptsWrite),
        ("manage_automations",          Some("run"),            Tier::T2, Permission::ScriptsExecute),
        ("manage_automations",          Some("delete"),         Tier::T3, Permission::ScriptsWrite),
        ("manage_deployments",          Some("list"),           Tier::T1, Permission::ScriptsRead),
        ("manage_deployments",          Some("get"),            Tier::T1, Permission::ScriptsRead),
        ("manage_deployments",          Some("device_status"),  Tier::T1, Permission::ScriptsRead),
        ("manage_deployments",          Some("create"),         Tier::T2, Permission::ScriptsWrite),
        ("manage_deployments",          Some("start"),          Tier::T3, Permission::ScriptsExecute),
        ("manage_deployments",          Some("pause"),          Tier::T3, Permission::ScriptsExecute),
        ("manage_deployments",          Some("resume"),         Tier::T3, Permission::ScriptsExecute),
        ("manage_deployments",          Some("cancel"),         Tier::T3, Permission::ScriptsExecute),
        ("manage_groups",               Some("list"),             Tier::T1, Permission::DevicesRead),
        ("manage_groups",               Some("get"),              Tier::T1, Permission::DevicesRead),
        ("manage_groups",               Some("preview"),          Tier::T1, Permission::DevicesRead),
        ("manage_groups",               Some("membership_log"),   Tier::T1, Permission::DevicesRead),
        ("manage_groups",               Some("add_devices"),      Tier::T2, Permission::DevicesWrite),
        ("manage_groups",               Some("remove_devices"),   Tier::T2, Permission::DevicesWrite),
        ("manage_groups",               Some("create"),           Tier::T3, Permission::DevicesWrite),
        ("manage_groups",               Some("update"),           Tier::T3, Permission::DevicesWrite),
        ("manage_groups",               Some("delete"),           Tier::T3, Permission::DevicesWrite),
        ("manage_catalog",              Some("create"),           Tier::T2, Permission::CatalogWrite),
        ("manage_catalog",              Some("update"),           Tier::T2, Permission::CatalogWrite),
        ("manage_catalog",              Some("archive"),          Tier::T2, Permission::CatalogWrite),
        ("manage_catalog",              Some("set_component"),    Tier::T2, Permission::CatalogWrite),
        ("manage_catalog",              Some("remove_component"), Tier::T2, Permission::CatalogWrite),
        ("manage_catalog",              Some("set_price_override"),Tier::T2, Permission::CatalogWrite),
        ("manage_catalog",              Some("remove_price_override"),Tier::T2, Permission::CatalogWrite),
        ("manage_catalog",              Some("import_distributor_product"),Tier::T2, Permission::CatalogWrite),
        ("manage_contracts",            Some("create"),           Tier::T2, Permission::ContractsWrite),
        ("manage_contracts",            Some("update"),           Tier::T2, Permission::ContractsWrite),
        ("manage_contracts",            Some("delete"),           Tier::T2, Permission::ContractsWrite),
        ("manage_contracts",            Some("add_line"),         Tier::T2, Permission::ContractsWrite),
        ("manage_contracts",            Some("remove_line"),      Tier::T2, Permission::ContractsWrite),
        ("manage_contracts",            Some("activate"),         Tier::T3, Permission::ContractsManage),
        ("manage_contracts",            Some("pause"),            Tier::T3, Permission::ContractsManage),
        ("manage_contracts",            Some("resume"),           Tier::T3, Permission::ContractsManage),
        ("manage_contracts",            Some("cancel"),           Tier::T3, Permission::ContractsManage),
        ("manage_invoices",             Some("create"),           Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("update"),           Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("delete"),           Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("add_line"),         Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("remove_line"),      Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("add_catalog_line"), Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("assemble_from_ticket"),Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("assemble_from_period"),Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("add_contract_lines"),Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("create_payment_link"),Tier::T2, Permission::InvoicesWrite),
        ("manage_invoices",             Some("issue"),            Tier::T3, Permission::InvoicesSend),
        ("manage_invoices",             Some("void"),             Tier::T3, Permission::InvoicesSend),
        ("manage_invoices",             Some("record_payment"),   Tier::T3, Permission::InvoicesSend),
        ("manage_invoices",             Some("void_payment"),     Tier::T3, Permission::InvoicesSend),
        ("manage_maintenance_windows",  Some("list"),             Tier::T1, Permission::DevicesRead),
        ("manage_maintenance_windows",  Some("get"),              Tier::T1, Permission::DevicesRead),
        ("manage_maintenance_windows",  Some("active_now"),       Tier::T1, Permission::DevicesRead),
        ("manage_maintenance_windows",  Some("create"),           Tier::T2, Permission::DevicesWrite),
        ("manage_maintenance_windows",  Some("update"),           Tier::T2, Permission::DevicesWrite),
        ("manage_maintenance_windows",  Some("delete"),           Tier::T3, Permission::DevicesWrite),
        ("manage_patches",              Some("list"),             Tier::T1, Permission::DevicesRead),
        ("manage_patches",              Some("compliance"),       Tier::T1, Permission::DevicesRead),
        ("manage_patches",              Some("results"),          Tier::T1, Permission::DevicesRead),
        ("manage_patches",              Some("scan"),             Tier::T2, Permission::DevicesExecute),
        ("manage_patches",              Some("approve"),          Tier::T2, Permission::DevicesWrite),
        ("manage_patches",              Some("decline"),          Tier::T2, Permission::DevicesWrite),
        ("manage_patches",              Some("defer"),            Tier::T2, Permission::DevicesWrite),
        ("manage_patches",              Some("bulk_approve"),     Tier::T2, Permission::DevicesWrite),
        ("manage_patches",              Some("cancel"),           Tier::T2, Permission::DevicesExecute),
        ("manage_patches",              Some("install"),          Tier::T3, Permission::DevicesExecute),
        ("manage_patches",              Some("rollback"),         Tier::T3, Permission::DevicesExecute),
        ("manage_patches",              Some("remove"),           Tier::T3, Permission::DevicesExecute),
        ("manage_policies",             Some("list"),             Tier::T1, Permission::DevicesRead),
        ("manage_policies",             Some("get"),              Tier::T1, Permission::DevicesRead),
        ("manage_policies",             Some("compliance_status"),Tier::T1, Permission::DevicesRead),
        ("manage_policies",             Some("compliance_summary"),Tier::T1, Permission::DevicesRead),
        ("manage_policies",             Some("history"),          Tier::T1, Permission::DevicesRead),
        ("manage_policies",             Some("evaluate"),         Tier::T2, Permission::DevicesWrite),
        ("manage_policies",             Some("create"),           Tier::T2, Permission::DevicesWrite),
        ("manage_policies",             Some("update"),           Tier::T2, Permission::DevicesWrite),
        ("manage_policies",             Some("activate"),         Tier::T2, Permission::DevicesWrite),
        ("manage_policies",             Some("deactivate"),       Tier::T2, Permission::DevicesWrite),
        ("manage_policies",             Some("delete"),           Tier::T3, Permission::DevicesWrite),
        ("manage_policies",             Some("remediate"),        Tier::T3, Permission::ScriptsExecute),
        ("manage_services",             Some("list"),             Tier::T2, Permission::ServicesManage),
        ("manage_services",             Some("start"),            Tier::T3, Permission::ServicesManage),
        ("manage_services",             Some("stop"),             Tier::T3, Permission::ServicesManage),
        ("manage_services",             Some("restart"),          Tier::T3, Permission::ServicesManage),
        ("manage_quotes",               Some("list"),             Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("get"),              Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("create"),           Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("update"),           Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("delete"),           Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("add_block"),        Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("remove_block"),     Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("add_line"),         Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("remove_line"),      Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("decline"),          Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("create_payment_link"),Tier::T2, Permission::QuotesWrite),
        ("manage_quotes",               Some("send"),             Tier::T3, Permission::QuotesSend),
        ("manage_tickets",              Some("list"),             Tier::T1, Permission::TicketsRead),
        ("manage_tickets",              Some("get"),              Tier::T1, Permission::TicketsRead),
        ("manage_tickets",              Some("create"),           Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("create_from_alert"),Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("comment"),          Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("assign"),           Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("update_status"),    Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("update"),           Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("link_alert"),       Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("unlink_alert"),     Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("add_part"),         Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("edit_comment"),     Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("delete_comment"),   Tier::T2, Permission::TicketsWrite),
        ("manage_tickets",              Some("edit_any_comment"), Tier::T2, Permission::TicketsManage),
        ("manage_tickets",              Some("delete_any_comment"),Tier::T2, Permission::TicketsManage),
        ("manage_tickets",              Some("log_time"),         Tier::T3, Permission::TicketsWrite),
        ("manage_tickets",              Some("start_timer"),      Tier::T3, Permission::TicketsWrite),
        ("manage_tickets",              Some("stop_timer"),       Tier::T3, Permission::TicketsWrite),
        ("manage_tickets",              Some("move"),             Tier::T3, Permission::TicketsManage),
        ("network_discovery",           None,                     Tier::T3, Permission::DevicesExecute),
        ("preview_configuration_change", None,                    Tier::T1, Permission::DevicesRead),
        ("query_audit_log",             None,                     Tier::T1, Permission::AuditRead),
        ("query_devices",               None,                     Tier::T1, Permission::DevicesRead),
        ("remove_configuration_policy_assignment", None,          Tier::T2, Permission::DevicesWrite),
        ("resolve_device_context",      None,                     Tier::T2, Permission::DevicesWrite),
        ("run_live_query",              Some("catalogue"),        Tier::T1, Permission::DevicesRead),
        ("run_live_query",              Some("prepare"),          Tier::T1, Permission::DevicesRead),
        ("run_live_query",              Some("run"),              Tier::T1, Permission::DevicesRead),
        ("run_live_query",              Some("results"),          Tier::T1, Permission::DevicesRead),
        ("run_script",                  None,                     Tier::T3, Permission::ScriptsExecute),
        ("search_agent_logs",           None,                     Tier::T1, Permission::DevicesRead),
        ("search_catalog",              None,                     Tier::T2, Permission::CatalogRead),
        ("security_scan",               Some("scan"),             Tier::T3, Permission::DevicesExecute),
        ("security_scan",               Some("status"),           Tier::T3, Permission::DevicesRead),
        ("security_scan",               Some("results"),          Tier::T3, Permission::DevicesRead),
        ("security_scan",               Some("quarantine"),       Tier::T3, Permission::FilesWrite),
        ("security_scan",               Some("remove"),           Tier::T3, Permission::FilesWrite),
        ("security_scan",               Some("restore"),          Tier::T3, Permission::FilesWrite),
        ("security_scan",               Some("schedule"),         Tier::T3, Permission::DevicesExecute),
        ("security_scan",               Some("list_schedules"),   Tier::T3, Permission::DevicesRead),
        ("security_scan",               Some("unschedule"),       Tier::T3, Permission::DevicesExecute),
        ("set_agent_log_level",         None,                     Tier::T2, Permission::DevicesExecute),
        ("set_device_context",          None,                     Tier::T2, Permission::DevicesWrite),
    ];

    fn tier_of(digit: &str) -> Tier {
        match digit {
            "1" => Tier::T1,
            "2" => Tier::T2,
            "3" => Tier::T3,
            other => panic!("not a tier in the spec's table: {other}"),
        }
    }

    /// Every registered tool and action against the tables above, both ways: a tool or action
    /// missing from the tables fails, and so does a row naming one that is not registered.
    #[test]
    fn tiers_permissions_and_limits_follow_the_spec() {
        use serde_json::json;
        use std::collections::BTreeSet;
        let r = all();

        let registered: BTreeSet<&str> = r.iter().map(|t| t.name).collect();
        let listed: BTreeSet<&str> = SPEC_TOOLS.iter().map(|row| row.0).collect();
        assert_eq!(listed.len(), SPEC_TOOLS.len(), "a tool is listed twice");
        assert_eq!(
            registered, listed,
            "registry and spec table disagree on the tools"
        );

        let calls: BTreeSet<(&str, Option<&str>)> = r
            .iter()
            .flat_map(|t| {
                let actions: Vec<Option<&str>> = if t.actions.is_empty() {
                    vec![None]
                } else {
                    t.actions.iter().map(|a| Some(a.name)).collect()
                };
                actions.into_iter().map(move |a| (t.name, a))
            })
            .collect();
        let rows: BTreeSet<(&str, Option<&str>)> =
            SPEC_CALLS.iter().map(|row| (row.0, row.1)).collect();
        assert_eq!(rows.len(), SPEC_CALLS.len(), "a call is listed twice");
        assert_eq!(
            calls, rows,
            "registry and spec table disagree on the actions"
        );

        for (name, action, tier, permission) in SPEC_CALLS {
            let spec = r
                .get(name)
                .unwrap_or_else(|| panic!("{name} is not registered"));
            let args = action.map_or(json!({}), |a| json!({ spec.action_key: a }));
            assert_eq!(spec.effective_tier(&args), *tier, "{name} {args}");
            assert_eq!(spec.permission_for(&args), *permission, "{name} {args}");
            let declared = spec.action(&args);
            assert_eq!(declared.is_some(), action.is_some(), "{name} {args}");
        }

        for (name, column, per_action, limit) in SPEC_TOOLS {
            let spec = r
                .get(name)
                .unwrap_or_else(|| panic!("{name} is not registered"));
            assert_eq!(
                spec.rate_limit.map(|l| (l.max, l.window_secs)),
                *limit,
                "{name}"
            );
            let Some(column) = column else {
                continue;
            };
            let column: Vec<Tier> = column.split('/').map(tier_of).collect();
            // The tool's own tier is the Tier column as listed (its lowest for "1/3").
            assert_eq!(spec.tier, column[0], "{name}: tier");
            let action_tiers: BTreeSet<Tier> = spec.actions.iter().map(|a| a.tier).collect();
            if column.len() > 1 {
                // "1/2/3": exactly these tiers occur among the actions.
                assert_eq!(
                    action_tiers,
                    column.iter().copied().collect::<BTreeSet<_>>(),
                    "{name}: the action tiers are not the spec's {column:?}"
                );
            } else if !per_action {
                // One tier and no per-action breakdown: no action may run below it.
                assert!(
                    action_tiers.iter().all(|t| *t >= column[0]),
                    "{name}: an action runs below the spec's Tier {column:?}"
                );
            } else {
                // One tier with a breakdown in the text (manage_services "3", list Tier 2):
                // the rows above decide each action; the listed tier is the highest.
                assert_eq!(action_tiers.last(), Some(&column[0]), "{name}");
            }
        }
    }

    /// Every subschema under `properties` is an object (the TypeScript SDK refuses a bare
    /// `true`), and no non-standard `format` remains.
    fn check_schema(tool: &str, path: &str, v: &serde_json::Value) {
        if let Some(props) = v.get("properties").and_then(serde_json::Value::as_object) {
            for (name, sub) in props {
                assert!(
                    sub.is_object(),
                    "{tool}: {path}.properties.{name} must be a schema object, got {sub}"
                );
            }
        }
        if let Some(f) = v.get("format").and_then(serde_json::Value::as_str) {
            assert!(
                !f.starts_with("int") && !f.starts_with("uint"),
                "{tool}: {path} has format {f}"
            );
        }
        match v {
            serde_json::Value::Object(m) => m
                .iter()
                .for_each(|(k, sub)| check_schema(tool, &format!("{path}.{k}"), sub)),
            serde_json::Value::Array(a) => a.iter().for_each(|sub| check_schema(tool, path, sub)),
            _ => {}
        }
    }

    #[test]
    fn schemas_are_objects_all_the_way_down() {
        for t in all().iter() {
            check_schema(t.name, "inputSchema", &t.input_schema);
            check_schema(t.name, "outputSchema", &t.output_schema);
        }
    }

    /// Every listed input schema is the tool's own arguments, flat (no top-level `anyOf`,
    /// `oneOf` or `allOf`, which the Anthropic API refuses), with its `required` fields at the
    /// top level and no `type` arrays anywhere; it compiles, and it refuses a call missing a
    /// required field. The batch envelope every tool also takes is not repeated in it (the
    /// server's instructions describe it once).
    #[test]
    fn listed_inputs_are_the_tools_own_arguments() {
        use serde_json::{Value, json};
        fn no_type_arrays(tool: &str, v: &Value) {
            match v {
                Value::Object(m) => {
                    assert!(
                        !m.get("type").is_some_and(Value::is_array),
                        "{tool}: a type array in {v}"
                    );
                    m.values().for_each(|x| no_type_arrays(tool, x));
                }
                Value::Array(a) => a.iter().for_each(|x| no_type_arrays(tool, x)),
                _ => {}
            }
        }
        for t in all().iter() {
            let listed = &t.listed_input_schema;
            check_schema(t.name, "listedInputSchema", listed);
            no_type_arrays(t.name, listed);
            for key in ["anyOf", "oneOf", "allOf", "if", "else"] {
                assert!(listed.get(key).is_none(), "{}: top-level {key}", t.name);
            }
            for key in ["items", "mode", "atomicity"] {
                assert!(
                    listed["properties"].get(key).is_none()
                        || t.input_schema["properties"].get(key).is_some(),
                    "{}: the batch envelope's {key} is listed",
                    t.name
                );
            }
            assert_eq!(
                listed.get("required"),
                t.input_schema.get("required"),
                "{}",
                t.name
            );
            let v = jsonschema::validator_for(listed)
                .unwrap_or_else(|e| panic!("{}: the listed schema does not compile: {e}", t.name));
            if listed["required"].as_array().is_some_and(|r| !r.is_empty()) {
                assert!(
                    !v.is_valid(&json!({})),
                    "{}: required fields dropped",
                    t.name
                );
            }
        }
    }

    #[test]
    fn no_tool_claims_an_inconsistent_hint() {
        for t in all().iter() {
            let h = t.hints;
            let reads_only = t.effects.iter().all(|e| *e == Effect::Read);
            assert_eq!(
                h.read_only, reads_only,
                "{}: readOnlyHint must match its effects",
                t.name
            );
            // The billing reads are Tier 2 on purpose: financial data needs ai:write, and a
            // distributor lookup is a billed outbound request (the specification's note under
            // "Billing tools").
            let financial = [
                "lookup_distributor_product",
                "get_catalog_item",
                "get_contract",
                "get_invoice",
                "list_contracts",
                "list_invoices",
                "search_catalog",
            ]
            .contains(&t.name);
            if h.read_only {
                assert!(
                    !h.destructive,
                    "{}: read-only tools are not destructive",
                    t.name
                );
                assert_eq!(
                    t.tier,
                    if financial { Tier::T2 } else { Tier::T1 },
                    "{}: a read-only tool is Tier 1",
                    t.name
                );
            }
            if t.effects.contains(&Effect::Delete) || t.effects.contains(&Effect::Execute) {
                assert!(
                    h.destructive,
                    "{}: deleting or executing is destructive",
                    t.name
                );
            }
            if t.effects.contains(&Effect::Create) {
                assert!(!h.idempotent, "{}: creating is not idempotent", t.name);
            }
            // A Tier 1 action must be a read; writes are at least Tier 2. (Reads that run on a
            // device, like listing its processes, may sit higher.)
            for a in t.actions {
                assert!(
                    a.tier > Tier::T1 || a.effect == Effect::Read,
                    "{}.{}: a Tier 1 action must only read",
                    t.name,
                    a.name
                );
            }
            if t.actions.is_empty() && !financial {
                assert_eq!(
                    t.tier == Tier::T1,
                    reads_only,
                    "{}: tier and effects disagree",
                    t.name
                );
            }
        }
    }

    #[test]
    fn effective_tier_follows_the_action_table() {
        use serde_json::json;
        let r = all();
        let g = r.get("manage_groups").unwrap();
        let tier = |args: serde_json::Value| g.effective_tier(&args);
        assert_eq!(tier(json!({ "action": "list" })), Tier::T1);
        assert_eq!(tier(json!({ "action": "add_devices" })), Tier::T2);
        assert_eq!(tier(json!({ "action": "delete" })), Tier::T3);
        // Fail closed: no action, an unknown one, or one of the wrong type is judged at the
        // tool's highest tier and that action's permission, never at the listed Tier 1.
        for args in [
            json!({ "action": "bogus" }),
            json!({}),
            json!({ "action": 3 }),
            json!({ "action": "LIST" }),
        ] {
            assert_eq!(g.effective_tier(&args), Tier::T3, "{args}");
            assert_eq!(g.permission_for(&args), Permission::DevicesWrite, "{args}");
        }
        assert_eq!(g.tier, Tier::T1, "the listed tier is unchanged");
        assert_eq!(g.lowest_tier(), Tier::T1, "still listed to a read key");
        let d = r.get("disk_cleanup").unwrap();
        assert_eq!(d.effective_tier(&json!({ "action": "nope" })), Tier::T3);
        assert_eq!(
            d.permission_for(&json!({ "action": "nope" })),
            Permission::DevicesExecute
        );
        // manage_services: listed Tier 3, but listing is Tier 2 and so is the tool's lowest.
        let m = r.get("manage_services").unwrap();
        assert_eq!(m.lowest_tier(), Tier::T2);
        assert_eq!(m.effective_tier(&json!({})), Tier::T3);
        // A tool without actions: its own tier whatever the arguments say.
        let q = r.get("query_devices").unwrap();
        assert_eq!(q.effective_tier(&json!({ "action": "delete" })), Tier::T1);
    }

    /// A tool's action type is its input's action field: the input schema at
    /// [`ToolSpec::action_key`] admits exactly the action table's names and is required, so
    /// the guard's view of a call and the handler's cannot differ.
    #[test]
    fn the_action_field_admits_exactly_the_action_table() {
        for t in all().iter() {
            if t.actions.is_empty() {
                // (An `action` field of such a tool is data, e.g. query_audit_log's filter.)
                assert_eq!(t.action_key, "action", "{}: a key with no actions", t.name);
                continue;
            }
            let field = t.input_schema["properties"].get(t.action_key);
            let field = field.unwrap_or_else(|| panic!("{}: no {} field", t.name, t.action_key));
            let mut names = Vec::new();
            wire_names(&t.input_schema, field, &mut names);
            names.sort_unstable();
            let mut table: Vec<&str> = t.actions.iter().map(|a| a.name).collect();
            table.sort_unstable();
            assert_eq!(names, table, "{}.{}", t.name, t.action_key);
            let required = t.input_schema["required"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                required.iter().any(|k| k == t.action_key),
                "{}: {} must be required",
                t.name,
                t.action_key
            );
        }
    }

    /// The strings a (sub)schema admits: its `enum` and `const` values, following `$ref`s into
    /// the root's `$defs` and `oneOf`/`anyOf` branches.
    fn wire_names(root: &serde_json::Value, v: &serde_json::Value, out: &mut Vec<String>) {
        if let Some(r) = v.get("$ref").and_then(serde_json::Value::as_str) {
            let def = r.trim_start_matches("#/$defs/");
            wire_names(root, &root["$defs"][def], out);
        }
        for e in v
            .get("enum")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            out.extend(e.as_str().map(str::to_owned));
        }
        if let Some(c) = v.get("const").and_then(serde_json::Value::as_str) {
            out.push(c.to_owned());
        }
        for key in ["oneOf", "anyOf"] {
            for b in v
                .get(key)
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
            {
                wire_names(root, b, out);
            }
        }
    }

    /// Automatic approval is derived from the action tables: exactly the read-only Tier 3
    /// actions (today execute_command's read-only command types); everything else is refused
    /// with a message naming the class.
    #[test]
    fn automatic_approval_only_for_read_only_tier_3_actions() {
        let r = all();
        let allowed = r.automatic_approval_classes();
        for class in [
            "execute_command.list_processes",
            "execute_command.file_list",
            "execute_command.event_logs_list",
        ] {
            assert!(allowed.iter().any(|c| c == class), "{class}: {allowed:?}");
            assert_eq!(r.check_approval_policy(class, "automatic"), Ok(()));
        }
        for class in &allowed {
            let (tool, action) = class.split_once('.').unwrap();
            let row = r
                .get(tool)
                .unwrap()
                .actions
                .iter()
                .find(|a| a.name == action);
            assert!(
                row.is_some_and(|a| a.effect == Effect::Read && a.tier == Tier::T3),
                "{class}"
            );
        }
        for (class, why) in [
            ("*", "default"),
            ("execute_command", "whole tool"),
            ("execute_command.kill_process", "not read-only"),
            ("execute_command.start_service", "not read-only"),
            ("run_script", "whole tool"),
            ("file_operations.write", "not read-only"),
            ("file_operations.read", "never waits for approval"),
            ("manage_groups.delete", "not read-only"),
            ("execute_command.bogus", "no action"),
            ("no_such_tool.x", "no such tool"),
        ] {
            let err = r.check_approval_policy(class, "automatic").unwrap_err();
            assert!(err.contains(class) && err.contains(why), "{class}: {err}");
        }
        // The other modes are for any class.
        assert_eq!(r.check_approval_policy("*", "four_eyes"), Ok(()));
        assert_eq!(
            r.check_approval_policy("execute_command.kill_process", "supervised"),
            Ok(())
        );
    }

    #[test]
    fn validation_names_the_field() {
        let r = all();
        let q = r.get("query_devices").unwrap();
        let err = q
            .validate(&serde_json::json!({ "limit": 1000 }))
            .unwrap_err();
        assert!(
            err.message.contains("limit") && err.message.contains("100"),
            "{}",
            err.message
        );
        let err = q
            .validate(&serde_json::json!({ "status": "exploded" }))
            .unwrap_err();
        assert!(err.message.contains("status"), "{}", err.message);
        let err = q
            .validate(&serde_json::json!({ "colour": "red" }))
            .unwrap_err();
        assert!(err.message.contains("colour"), "{}", err.message);
        let d = r.get("get_device_details").unwrap();
        let err = d.validate(&serde_json::json!({})).unwrap_err();
        assert!(err.message.contains("deviceId"), "{}", err.message);
        assert!(
            q.validate(&serde_json::json!({ "status": "online", "limit": 5 }))
                .is_ok()
        );
    }
}
