//! Dynamic groups through `manage_groups` over MCP: a filter previewed, a dynamic group's
//! members and membership log, hand changes refused on it, bad filters refused, and another
//! organization's group answering not found on every action that names one.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use breeze_core::{FilterCondition, FilterField, FilterOp, GroupFilter, MatchMode};
use breeze_store::testing::Ctx;
use common::{audit, code, tool, world};
use serde_json::json;

const TOOL: &str = "manage_groups";

async fn dynamic_groups_over_mcp(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let web_01 =
        json!({ "conditions": [{ "field": "hostname", "op": "matches", "value": "web-*" }] });
    let preview = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "preview", "filter": web_01 }),
    )
    .await;
    assert_eq!(
        preview["matched"], 1,
        "A's web-01 only, never B's: {preview}"
    );
    assert_eq!(preview["members"][0]["id"], w.a_device.as_str());

    // A static group gets its filter (update is Tier 3: through the store here, as an
    // approved call would), and shows as dynamic with its members and log.
    let o = w.store.org(w.org_a);
    let group = o.create_group("Web", None, None, audit("g")).await.unwrap();
    let filter = GroupFilter {
        mode: MatchMode::All,
        conditions: vec![FilterCondition {
            field: FilterField::Hostname,
            op: FilterOp::Matches,
            value: json!("web-*"),
        }],
    };
    o.set_group_filter(
        group.id,
        &filter,
        &breeze_core::Actor::system("test"),
        audit("f"),
    )
    .await
    .unwrap();
    let id = group.id.to_string();
    let got = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "get", "groupId": id }),
    )
    .await;
    assert_eq!(got["group"]["dynamic"], true, "{got}");
    assert_eq!(got["group"]["filter"]["conditions"][0]["field"], "hostname");
    assert_eq!(got["members"][0]["id"], w.a_device.as_str());
    let log = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "membership_log", "groupId": id }),
    )
    .await;
    assert_eq!(log["log"][0]["change"], "added", "{log}");
    assert_eq!(log["log"][0]["reason"], "filter changed");
    let listed = tool(app, &w.read, TOOL, json!({ "action": "list" })).await;
    assert_eq!(listed["groups"][0]["dynamic"], true, "{listed}");

    // Hand changes are refused on a dynamic group, logged on a static one.
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "remove_devices", "groupId": id, "deviceIds": [w.a_device] }),
    )
    .await;
    assert_eq!(code(&r), "CONFLICT", "{r}");
    let plain = o
        .create_group("Plain", None, None, audit("g"))
        .await
        .unwrap()
        .id
        .to_string();
    let r = tool(
        app,
        &w.write,
        TOOL,
        json!({ "action": "add_devices", "groupId": plain, "deviceIds": [w.a_device] }),
    )
    .await;
    assert_eq!(r["changed"], 1, "{r}");
    let log = tool(
        app,
        &w.read,
        TOOL,
        json!({ "action": "membership_log", "groupId": plain }),
    )
    .await;
    assert_eq!(log["log"][0]["reason"], "by hand", "{log}");
    assert!(
        log["log"][0]["actor"]
            .as_str()
            .unwrap()
            .starts_with("api_key:"),
        "{log}"
    );

    // Bad filters.
    for filter in [
        json!({ "conditions": [] }),
        json!({ "conditions": [{ "field": "hostname", "op": "gt", "value": "a" }] }),
        json!({ "conditions": [{ "field": "diskFreePercent", "op": "lt", "value": "ten" }] }),
        json!({ "conditions": [{ "field": "shoeSize", "op": "eq", "value": "9" }] }),
        json!({ "match": "most", "conditions": [{ "field": "os", "op": "eq", "value": "linux" }] }),
    ] {
        let r = tool(
            app,
            &w.read,
            TOOL,
            json!({ "action": "preview", "filter": filter }),
        )
        .await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{filter}: {r}");
    }

    // Another organization's group.
    let b_group = w
        .store
        .org(w.org_b)
        .create_group("B", None, None, audit("g"))
        .await
        .unwrap()
        .id
        .to_string();
    for args in [
        json!({ "action": "get", "groupId": b_group }),
        json!({ "action": "membership_log", "groupId": b_group }),
        json!({ "action": "add_devices", "groupId": b_group, "deviceIds": [w.a_device] }),
    ] {
        let r = tool(app, &w.write, TOOL, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{args}: {r}");
    }
}

breeze_store::on_both_backends!(dynamic_groups_over_mcp);
