//! `breeze mcp tools`: this binary's tools, from its registry — a table for people, or
//! (`--json`) the registry as data for programs: the official-client suites derive the tool
//! lists they expect each key to see from it instead of keeping their own.

use std::fmt::Write as _;

use breeze_tools::docs;

/// The listing `breeze mcp tools [--json]` prints.
pub(crate) fn list(json: bool) -> String {
    let registry = breeze_tools::all();
    if json {
        return format!("{}\n", docs::index(&registry));
    }
    let width = registry.iter().map(|t| t.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "{:width$}  TIERS    PERMISSION", "TOOL");
    for t in registry.iter() {
        let tiers = docs::tiers_label(t);
        let _ = writeln!(
            out,
            "{:width$}  {tiers:<7}  {}",
            t.name,
            t.permission.as_str()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lists_every_tool_with_its_lowest_tier_first() {
        let index: serde_json::Value = serde_json::from_str(&list(true)).expect("json");
        let tools = index["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), breeze_tools::all().len());
        let qd = tools
            .iter()
            .find(|t| t["name"] == "query_devices")
            .expect("query_devices");
        assert_eq!(qd["tiers"], serde_json::json!([1]));
        let services = tools
            .iter()
            .find(|t| t["name"] == "manage_services")
            .expect("manage_services");
        assert_eq!(services["baseTier"], 3);
        assert_eq!(services["tiers"][0], 2, "its lowest call is Tier 2");
    }

    #[test]
    fn the_table_has_a_row_per_tool() {
        let table = list(false);
        assert_eq!(table.lines().count(), breeze_tools::all().len() + 1);
        assert!(table.contains("run_script"), "{table}");
    }
}
