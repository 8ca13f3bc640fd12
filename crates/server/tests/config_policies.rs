//! The configuration policy tools over MCP: the attacks (another organization's policy,
//! assignment, device, site and group ids answer not found on every tool that names one; bad
//! levels, priorities and empty previews are refused naming the problem; a read-only key
//! cannot assign) and the way a person uses them — preview an assignment, apply it, read the
//! effective configuration with its sources, and see that the preview was exactly what
//! applying did; remove it and fall back.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use breeze_core::{FeatureType, PolicyStatus};
use breeze_store::{NewConfigPolicy, testing::Ctx};
use common::{audit, code, tool, world};
use serde_json::{Value, json};

fn policy(name: &str, settings: Vec<(FeatureType, Value)>) -> NewConfigPolicy {
    NewConfigPolicy {
        name: name.into(),
        description: None,
        status: PolicyStatus::Active,
        settings,
        created_by: "test".into(),
    }
}

fn metric(m: u32) -> Vec<(FeatureType, Value)> {
    vec![(
        FeatureType::Monitoring,
        json!({ "metricIntervalSeconds": m }),
    )]
}

async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let (oa, ob) = (w.store.org(w.org_a), w.store.org(w.org_b));
    let a_site = oa.tenancy().list_sites().await.unwrap()[0].id.to_string();
    let b_site = ob.tenancy().list_sites().await.unwrap()[0].id.to_string();
    let b_group = ob
        .tenancy()
        .create_group("B group", None, None, audit("g"))
        .await
        .unwrap()
        .id
        .to_string();
    let a_policy = oa
        .config_policies()
        .create_config_policy(policy("mine", metric(10)), audit("c"))
        .await
        .unwrap()
        .id
        .to_string();
    let b_policy = ob
        .config_policies()
        .create_config_policy(policy("theirs", metric(20)), audit("c"))
        .await
        .unwrap();
    let b_assignment = ob
        .config_policies()
        .assign_config_policy(
            breeze_store::NewAssignment {
                policy_id: b_policy.id,
                level: breeze_core::ConfigLevel::Organization,
                target_id: w.org_b.0,
                priority: 0,
                created_by: "test".into(),
            },
            audit("a"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    let b_policy = b_policy.id.to_string();
    let org_b = w.org_b.to_string();
    let org_a = w.org_a.to_string();

    let cases = [
        (
            "get_effective_configuration",
            json!({ "deviceId": w.b_device }),
        ),
        (
            "preview_configuration_change",
            json!({ "deviceId": w.b_device,
            "add": [{ "configPolicyId": a_policy, "level": "organization", "targetId": org_a }] }),
        ),
        (
            "preview_configuration_change",
            json!({ "remove": [b_assignment] }),
        ),
        (
            "preview_configuration_change",
            json!({
            "add": [{ "configPolicyId": b_policy, "level": "organization", "targetId": org_a }] }),
        ),
        (
            "remove_configuration_policy_assignment",
            json!({ "assignmentId": b_assignment }),
        ),
        (
            "remove_configuration_policy_assignment",
            json!({ "assignmentId": "not-a-uuid-but-36-characters-long-xx" }),
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": b_policy,
            "level": "organization", "targetId": org_a }),
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": a_policy,
            "level": "organization", "targetId": org_b }),
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": a_policy,
            "level": "site", "targetId": b_site }),
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": a_policy,
            "level": "device_group", "targetId": b_group }),
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": a_policy,
            "level": "device", "targetId": w.b_device }),
        ),
        // A's policy at A's site, but named with B's site's level mixed up: a site id as a group.
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": a_policy,
            "level": "device_group", "targetId": a_site }),
        ),
    ];
    for (name, args) in &cases {
        let r = tool(app, &w.write, name, args.clone()).await;
        assert_eq!(code(&r), "NOT_FOUND", "{name} {args}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.ends_with("not found or access denied"), "{message}");
    }
    // A sees none of B's policies; B's assignment still stands; nothing was assigned in A.
    let list = tool(app, &w.read, "list_configuration_policies", json!({})).await;
    assert_eq!(list["total"], 1, "{list}");
    assert_eq!(list["policies"][0]["name"], "mine");
    assert_eq!(
        ob.config_policies()
            .list_config_assignments()
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        oa.config_policies()
            .list_config_assignments()
            .await
            .unwrap()
            .is_empty()
    );
    // B's key reads nothing of A's device.
    let r = tool(
        app,
        &w.other_org_key,
        "get_effective_configuration",
        json!({ "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
}

async fn bad_inputs_and_scopes_are_refused(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let oa = w.store.org(w.org_a);
    let p = oa
        .config_policies()
        .create_config_policy(policy("p", metric(10)), audit("c"))
        .await
        .unwrap()
        .id
        .to_string();
    let org = w.org_a.to_string();
    for (name, args, needle) in [
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": p, "level": "organization", "targetId": org, "priority": 1001 }),
            "priority",
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": p, "level": "partner", "targetId": org }),
            "partner",
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": p, "level": "galaxy", "targetId": org }),
            "level",
        ),
        (
            "apply_configuration_policy",
            json!({ "configPolicyId": p, "level": "organization", "targetId": org, "extra": 1 }),
            "extra",
        ),
        ("preview_configuration_change", json!({}), "add or remove"),
        (
            "list_configuration_policies",
            json!({ "limit": 0 }),
            "limit",
        ),
    ] {
        let r = tool(app, &w.write, name, args.clone()).await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{name} {args}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{name}: {message}");
    }
    // Assigning twice is a conflict naming the policy.
    let args = json!({ "configPolicyId": p, "level": "organization", "targetId": org });
    let first = tool(app, &w.write, "apply_configuration_policy", args.clone()).await;
    assert_eq!(code(&first), "", "{first}");
    let again = tool(app, &w.write, "apply_configuration_policy", args.clone()).await;
    assert_eq!(code(&again), "CONFLICT", "{again}");
    // A read-only key reads but cannot assign or remove.
    let r = tool(app, &w.read, "apply_configuration_policy", args).await;
    assert!(r["rpcError"].is_object(), "{r}");
    let id = first["assignment"]["id"].as_str().unwrap();
    let r = tool(
        app,
        &w.read,
        "remove_configuration_policy_assignment",
        json!({ "assignmentId": id }),
    )
    .await;
    assert!(r["rpcError"].is_object(), "{r}");
    let r = tool(app, &w.read, "list_configuration_policies", json!({})).await;
    assert_eq!(r["policies"][0]["assignments"][0]["id"], id, "{r}");
}

fn effective_values(out: &Value) -> Value {
    // Values and sources without assignment ids (a preview's new assignment has its own).
    let mut v = out["effective"].clone();
    if let Some(features) = v.as_object_mut() {
        for fields in features.values_mut() {
            for field in fields.as_object_mut().unwrap().values_mut() {
                field["source"]
                    .as_object_mut()
                    .unwrap()
                    .remove("assignmentId");
            }
        }
    }
    v
}

async fn preview_apply_read_and_remove(cx: Ctx) {
    let w = world(&cx).await;
    let app = &w.app;
    let oa = w.store.org(w.org_a);
    let site = oa.tenancy().list_sites().await.unwrap()[0].id.to_string();
    let base = oa
        .config_policies()
        .create_config_policy(
            policy(
                "baseline",
                vec![
                    (
                        FeatureType::Monitoring,
                        json!({ "metricIntervalSeconds": 60,
                                                       "inventoryIntervalSeconds": 3600 }),
                    ),
                    (FeatureType::AgentLog, json!({ "level": "warn" })),
                ],
            ),
            audit("c"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    let fast = oa
        .config_policies()
        .create_config_policy(policy("fast", metric(10)), audit("c"))
        .await
        .unwrap()
        .id
        .to_string();
    let org = w.org_a.to_string();
    let r = tool(
        app,
        &w.write,
        "apply_configuration_policy",
        json!({ "configPolicyId": base, "level": "organization", "targetId": org }),
    )
    .await;
    assert_eq!(r["affectedDevices"], 1, "{r}");

    // The preview of "fast" at the site: only the metric interval moves, from the baseline.
    let add = json!([{ "configPolicyId": fast, "level": "site", "targetId": site, "priority": 5 }]);
    let preview = tool(
        app,
        &w.read,
        "preview_configuration_change",
        json!({ "add": add }),
    )
    .await;
    assert_eq!(preview["affectedDevices"], 1, "{preview}");
    let changes = &preview["devices"][0]["changes"];
    assert_eq!(changes.as_array().unwrap().len(), 1, "{preview}");
    assert_eq!(changes[0]["featureType"], "monitoring");
    assert_eq!(changes[0]["field"], "metricIntervalSeconds");
    assert_eq!(changes[0]["before"]["value"], 60);
    assert_eq!(changes[0]["before"]["source"]["policyName"], "baseline");
    assert_eq!(changes[0]["after"]["value"], 10);
    assert_eq!(changes[0]["after"]["source"]["level"], "site");
    assert_eq!(changes[0]["after"]["source"]["priority"], 5);
    // Nothing changed yet.
    let before = tool(
        app,
        &w.read,
        "get_effective_configuration",
        json!({ "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(
        before["effective"]["monitoring"]["metricIntervalSeconds"]["value"], 60,
        "{before}"
    );
    // Not reported by an agent yet: no applied values, not in sync.
    assert_eq!(before["applied"], Value::Null);
    assert_eq!(before["inSync"], false);

    let applied = tool(
        app,
        &w.write,
        "apply_configuration_policy",
        json!({ "configPolicyId": fast, "level": "site", "targetId": site, "priority": 5 }),
    )
    .await;
    let assignment = applied["assignment"]["id"].as_str().unwrap().to_owned();
    let after = tool(
        app,
        &w.read,
        "get_effective_configuration",
        json!({ "deviceId": w.a_device }),
    )
    .await;
    // The preview's "after" is exactly what applying did.
    let mut expected = effective_values(&before);
    expected["monitoring"]["metricIntervalSeconds"] = changes[0]["after"].clone();
    expected["monitoring"]["metricIntervalSeconds"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("assignmentId");
    assert_eq!(effective_values(&after), expected, "{after}");
    assert_eq!(after["effective"]["agent_log"]["level"]["value"], "warn");
    assert_ne!(after["revision"], before["revision"]);

    // An agent report that differs shows as drift.
    let device: breeze_core::DeviceId = w.a_device.parse().unwrap();
    w.store
        .record_config_report(
            device,
            w.org_a,
            Some("stale"),
            &json!({ "metricsIntervalSecs": 60, "inventoryIntervalSecs": 3600, "logLevel": "warn" }),
        )
        .await
        .unwrap();
    let drifted = tool(
        app,
        &w.read,
        "get_effective_configuration",
        json!({ "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(drifted["inSync"], false);
    assert_eq!(
        drifted["drift"],
        json!([{ "setting": "monitoring.metricIntervalSeconds", "desired": 10, "applied": 60 }]),
        "{drifted}"
    );

    // The patch scan interval the agent applies drifts the same way.
    let patch = w
        .store
        .org(w.org_a)
        .config_policies()
        .create_config_policy(
            policy(
                "patch cadence",
                vec![(FeatureType::Patch, json!({ "scanIntervalMinutes": 30 }))],
            ),
            audit("config_policy.create"),
        )
        .await
        .unwrap();
    tool(
        app,
        &w.write,
        "apply_configuration_policy",
        json!({ "configPolicyId": patch.id.to_string(), "level": "organization",
                "targetId": w.org_a.to_string() }),
    )
    .await;
    w.store
        .record_config_report(
            device,
            w.org_a,
            Some("stale"),
            &json!({ "metricsIntervalSecs": 10, "inventoryIntervalSecs": 3600, "logLevel": "warn",
                     "patchScanIntervalMinutes": 1440 }),
        )
        .await
        .unwrap();
    let drifted = tool(
        app,
        &w.read,
        "get_effective_configuration",
        json!({ "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(
        drifted["drift"],
        json!([{ "setting": "patch.scanIntervalMinutes", "desired": 30, "applied": 1440 }]),
        "{drifted}"
    );
    let assignment_patch =
        drifted["effective"]["patch"]["scanIntervalMinutes"]["source"]["assignmentId"]
            .as_str()
            .map(str::to_owned);
    assert!(assignment_patch.is_some(), "{drifted}");
    tool(
        app,
        &w.write,
        "remove_configuration_policy_assignment",
        json!({ "assignmentId": assignment_patch.unwrap() }),
    )
    .await;

    // The preview of removing it is the way back; removing it does exactly that.
    let preview = tool(
        app,
        &w.read,
        "preview_configuration_change",
        json!({ "remove": [assignment], "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(
        preview["devices"][0]["changes"][0]["after"]["value"], 60,
        "{preview}"
    );
    let removed = tool(
        app,
        &w.write,
        "remove_configuration_policy_assignment",
        json!({ "assignmentId": assignment }),
    )
    .await;
    assert_eq!(removed["assignment"]["level"], "site", "{removed}");
    let back = tool(
        app,
        &w.read,
        "get_effective_configuration",
        json!({ "deviceId": w.a_device }),
    )
    .await;
    assert_eq!(effective_values(&back), effective_values(&before));
    assert_eq!(back["revision"], before["revision"]);
    // Removing it again: not found.
    let again = tool(
        app,
        &w.write,
        "remove_configuration_policy_assignment",
        json!({ "assignmentId": assignment }),
    )
    .await;
    assert_eq!(code(&again), "NOT_FOUND", "{again}");
}

breeze_store::on_both_backends!(
    another_organizations_ids_are_not_found,
    bad_inputs_and_scopes_are_refused,
    preview_apply_read_and_remove
);
