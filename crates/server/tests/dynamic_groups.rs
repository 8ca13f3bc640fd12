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
    let group = o
        .tenancy()
        .create_group("Web", None, None, audit("g"))
        .await
        .unwrap();
    let filter = GroupFilter {
        mode: MatchMode::All,
        conditions: vec![FilterCondition {
            field: FilterField::Hostname,
            op: FilterOp::Matches,
            value: json!("web-*"),
        }],
    };
    o.dynamic_groups()
        .set_group_filter(
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
        .tenancy()
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
        .tenancy()
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

/// Groups over `lastSeenMinutes` follow the clock with no write to any device: the periodic
/// re-evaluation (one instance per period, by lease) adds the device that has been away long
/// enough and removes the one no longer seen recently, each change logged as the clock's;
/// organization B's group over the same filter never gets A's device.
async fn time_dependent_groups_follow_the_clock(cx: Ctx) {
    let w = world(&cx).await;
    let o = w.store.org(w.org_a);
    let site = o.tenancy().list_sites().await.unwrap()[0].id;
    let now = w.state.clock.now();
    let stale = o
        .devices()
        .create_device(
            breeze_store::NewDevice {
                last_seen_at: Some(now),
                ..breeze_store::testing::new_device(
                    site,
                    "stale-01",
                    breeze_core::DeviceStatus::Offline,
                )
            },
            audit("d"),
        )
        .await
        .unwrap();
    let condition = |field, op, value| FilterCondition { field, op, value };
    let away = GroupFilter {
        mode: MatchMode::All,
        conditions: vec![
            condition(FilterField::Status, FilterOp::Eq, json!("offline")),
            condition(FilterField::LastSeenMinutes, FilterOp::Gt, json!(10)),
        ],
    };
    let recent = GroupFilter {
        mode: MatchMode::All,
        conditions: vec![condition(
            FilterField::LastSeenMinutes,
            FilterOp::Lt,
            json!(15),
        )],
    };
    let test_actor = breeze_core::Actor::system("test");
    let mut groups = Vec::new();
    for (name, filter) in [("Away 10 min", &away), ("Seen in 15 min", &recent)] {
        let g = o
            .tenancy()
            .create_group(name, None, None, audit("g"))
            .await
            .unwrap();
        o.dynamic_groups()
            .set_group_filter(g.id, filter, &test_actor, audit("f"))
            .await
            .unwrap();
        groups.push(g.id);
    }
    let ob = w.store.org(w.org_b);
    let b_group = ob
        .tenancy()
        .create_group("B away", None, None, audit("g"))
        .await
        .unwrap();
    ob.dynamic_groups()
        .set_group_filter(b_group.id, &away, &test_actor, audit("f"))
        .await
        .unwrap();
    let members = |g| async move {
        o.devices()
            .group_members(g)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.hostname)
            .collect::<Vec<_>>()
    };
    assert!(members(groups[0]).await.is_empty());
    assert_eq!(members(groups[1]).await, ["stale-01"]);

    use breeze_server::{groups::GroupTimer, workers::Worker};
    use std::sync::Arc;
    let timer = Arc::new(GroupTimer::new(w.store.clone(), Default::default()));
    let other_instance = Arc::new(GroupTimer::new(w.store.clone(), Default::default()));
    cx.clock.advance(chrono::Duration::minutes(5));
    assert_eq!(
        timer.tick().await.unwrap(),
        Some(vec![]),
        "nothing moved yet"
    );
    cx.clock.advance(chrono::Duration::minutes(6));
    let changed = timer.tick().await.unwrap().unwrap();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].1, groups[0]);
    assert_eq!(changed[0].2.added, vec![stale.id]);
    assert_eq!(members(groups[0]).await, ["stale-01"]);
    // Within the period, neither this instance nor another runs it again.
    assert_eq!(timer.tick().await.unwrap(), None);
    assert_eq!(other_instance.tick().await.unwrap(), None);
    // Later, the other instance takes its turn: the device is no longer recent.
    cx.clock.advance(chrono::Duration::minutes(5));
    let changed = other_instance.tick().await.unwrap().unwrap();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].2.removed, vec![stale.id]);
    assert!(members(groups[1]).await.is_empty());
    let log = o
        .dynamic_groups()
        .membership_log(groups[0], 10)
        .await
        .unwrap();
    assert_eq!(log[0].change, "added");
    assert_eq!(log[0].actor, "system:dynamic-groups-clock");
    assert_eq!(log[0].reason, breeze_store::TIME_REEVALUATION);
    assert_eq!(
        log[0].at,
        w.state.clock.now() - chrono::Duration::minutes(5)
    );
    assert!(
        ob.devices()
            .group_members(b_group.id)
            .await
            .unwrap()
            .is_empty(),
        "B's group never holds A's device"
    );
}

breeze_store::on_both_backends!(
    dynamic_groups_over_mcp,
    time_dependent_groups_follow_the_clock
);
