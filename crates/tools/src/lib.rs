//! Breeze's tools, resources and prompts, declared once and shared by every front door (MCP
//! now, the AI chat later).
//!
//! - [`contract`]: the [`Tool`] trait, tiers, effects and derived hints, tool errors, and the
//!   [`ToolCx`] capability a handler acts through.
//! - [`registry`]: the erased registry; [`all`] lists every tool domain explicitly.
//! - [`resources`] and [`prompts`]: the MCP resources and guided prompts.
//!
//! Invariant: tools never check authorization. The guard decides before a handler runs, and the
//! handler only gets a store confined to one organization.

pub mod contract;
pub mod prompts;
pub mod registry;
pub mod resources;
mod tools;

pub use contract::{
    Action, Effect, ErrorCode, Hints, Pin, ProgressReport, RateLimit, Rendered, Tier, Tool, ToolCx,
    ToolError, action, per, tool_cx,
};
pub use registry::{RawOutput, Registry, ToolSpec, tool_meta};

/// Every tool. Domains are listed alphabetically; add new ones here.
pub fn all() -> Registry {
    let mut r = Registry::default();
    tools::agent::register(&mut r);
    tools::approvals::register(&mut r);
    tools::audit::register(&mut r);
    tools::context::register(&mut r);
    tools::devices::register(&mut r);
    tools::disk::register(&mut r);
    tools::groups::register(&mut r);
    tools::scripts::register(&mut r);
    tools::telemetry::register(&mut r);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The specification's table, row by row: for every tool and action, the effective tier,
    /// the permission and the per-user rate limit.
    #[test]
    fn tiers_permissions_and_limits_follow_the_spec() {
        use breeze_core::Permission::*;
        use serde_json::json;
        let r = all();
        #[rustfmt::skip]
        type Row = (&'static str, Option<&'static str>, Tier, breeze_core::Permission, Option<(u32, u64)>);
        let table: &[Row] = &[
            (
                "analyze_disk_usage",
                None,
                Tier::T1,
                DevicesRead,
                Some((10, 300)),
            ),
            ("analyze_metrics", None, Tier::T1, DevicesRead, None),
            (
                "disk_cleanup",
                Some("preview"),
                Tier::T1,
                DevicesRead,
                Some((3, 600)),
            ),
            (
                "disk_cleanup",
                Some("execute"),
                Tier::T3,
                DevicesExecute,
                Some((3, 600)),
            ),
            (
                "execute_command",
                Some("list_processes"),
                Tier::T3,
                DevicesExecute,
                Some((10, 300)),
            ),
            (
                "execute_command",
                Some("file_list"),
                Tier::T3,
                DevicesExecute,
                Some((10, 300)),
            ),
            (
                "execute_command",
                Some("event_logs_list"),
                Tier::T3,
                DevicesExecute,
                Some((10, 300)),
            ),
            (
                "execute_command",
                Some("kill_process"),
                Tier::T3,
                DevicesExecute,
                Some((10, 300)),
            ),
            (
                "execute_command",
                Some("file_read"),
                Tier::T3,
                DevicesExecute,
                Some((10, 300)),
            ),
            (
                "execute_command",
                Some("restart_service"),
                Tier::T3,
                DevicesExecute,
                Some((10, 300)),
            ),
            (
                "execute_command",
                Some("no_such_command"),
                Tier::T3,
                DevicesExecute,
                Some((10, 300)),
            ),
            (
                "file_operations",
                Some("list"),
                Tier::T1,
                FilesRead,
                Some((20, 300)),
            ),
            (
                "file_operations",
                Some("read"),
                Tier::T1,
                FilesRead,
                Some((20, 300)),
            ),
            (
                "file_operations",
                Some("write"),
                Tier::T3,
                FilesWrite,
                Some((20, 300)),
            ),
            (
                "file_operations",
                Some("delete"),
                Tier::T3,
                FilesWrite,
                Some((20, 300)),
            ),
            (
                "file_operations",
                Some("mkdir"),
                Tier::T3,
                FilesWrite,
                Some((20, 300)),
            ),
            (
                "file_operations",
                Some("rename"),
                Tier::T3,
                FilesWrite,
                Some((20, 300)),
            ),
            ("get_active_users", None, Tier::T1, DevicesRead, None),
            (
                "get_user_experience_metrics",
                None,
                Tier::T1,
                DevicesRead,
                None,
            ),
            (
                "manage_services",
                Some("list"),
                Tier::T2,
                ServicesManage,
                Some((10, 300)),
            ),
            (
                "manage_services",
                Some("start"),
                Tier::T3,
                ServicesManage,
                Some((10, 300)),
            ),
            (
                "manage_services",
                Some("stop"),
                Tier::T3,
                ServicesManage,
                Some((10, 300)),
            ),
            (
                "manage_services",
                Some("restart"),
                Tier::T3,
                ServicesManage,
                Some((10, 300)),
            ),
            (
                "network_discovery",
                None,
                Tier::T3,
                DevicesExecute,
                Some((2, 600)),
            ),
            ("run_script", None, Tier::T3, ScriptsExecute, Some((5, 300))),
            ("search_agent_logs", None, Tier::T1, DevicesRead, None),
            ("get_device_software", None, Tier::T1, DevicesRead, None),
            (
                "set_agent_log_level",
                None,
                Tier::T2,
                DevicesExecute,
                Some((5, 600)),
            ),
        ];
        for (name, act, tier, permission, limit) in table {
            let spec = r
                .get(name)
                .unwrap_or_else(|| panic!("{name} is not registered"));
            let args = act.map_or(json!({}), |a| json!({ spec.action_key: a }));
            assert_eq!(spec.effective_tier(&args), *tier, "{name} {args}");
            assert_eq!(spec.permission_for(&args), *permission, "{name} {args}");
            assert_eq!(
                spec.rate_limit.map(|l| (l.max, l.window_secs)),
                *limit,
                "{name}"
            );
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
            if h.read_only {
                assert!(
                    !h.destructive,
                    "{}: read-only tools are not destructive",
                    t.name
                );
                assert_eq!(t.tier, Tier::T1, "{}: a read-only tool is Tier 1", t.name);
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
            if t.actions.is_empty() {
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
        let r = all();
        let g = r.get("manage_groups").unwrap();
        assert_eq!(
            g.effective_tier(&serde_json::json!({ "action": "list" })),
            Tier::T1
        );
        assert_eq!(
            g.effective_tier(&serde_json::json!({ "action": "add_devices" })),
            Tier::T2
        );
        assert_eq!(
            g.effective_tier(&serde_json::json!({ "action": "delete" })),
            Tier::T3
        );
        assert_eq!(
            g.effective_tier(&serde_json::json!({ "action": "bogus" })),
            Tier::T1
        );
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
