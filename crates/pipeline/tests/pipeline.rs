//! The pipeline's guarantees by construction, on both backends: a clearance runs only the tool
//! and the organization it was given for, and a Tier 3 call naming another organization's
//! device is refused before anyone is asked to approve it.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;

use breeze_core::{
    Actor, ApiKeyId, AuditEvent, DeviceStatus, OrgId, PermissionSet, ScopeSet, UserId,
};
use breeze_gateway::{Gateway, GatewayConfig};
use breeze_guard::{Clearance, GuardConfig};
use breeze_limits::MemoryLimiter;
use breeze_pipeline::{CallOutcome, Caller, Guard, Pipeline, approvals::ApprovalConfig};
use breeze_store::{NewDevice, on_both_backends, testing::Ctx};
use breeze_tools::{CallOptions, ErrorCode, Unscoped};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn audit() -> AuditEvent {
    AuditEvent::new(Actor::system("test"), "test", "test")
}

struct World {
    pipeline: Pipeline,
    gateway: Gateway,
    a: OrgId,
    b: OrgId,
    b_device: String,
}

async fn world(cx: &Ctx) -> World {
    let s = &cx.store;
    let p = s.create_partner("P", "p", audit()).await.unwrap();
    let a = s
        .create_organization(p.id, "A", "a", audit())
        .await
        .unwrap();
    let b = s
        .create_organization(p.id, "B", "b", audit())
        .await
        .unwrap();
    let site = s
        .org(b.id)
        .tenancy()
        .create_site("HQ", "UTC", audit())
        .await
        .unwrap();
    let device = s
        .org(b.id)
        .devices()
        .create_device(
            NewDevice {
                os_version: "13".into(),
                ..breeze_store::testing::new_device(site.id, "b-host", DeviceStatus::Online)
            },
            audit(),
        )
        .await
        .unwrap();
    let gateway = Gateway::new(s.clone(), GatewayConfig::default());
    let guard = Guard::new(
        GuardConfig::default(),
        Arc::new(MemoryLimiter::new()),
        Arc::new(cx.clock.clone()),
    );
    let pipeline = Pipeline::new(
        s.clone(),
        gateway.clone(),
        Arc::new(breeze_tools::all()),
        guard,
        ApprovalConfig::default(),
    );
    World {
        pipeline,
        gateway,
        a: a.id,
        b: b.id,
        b_device: device.id.to_string(),
    }
}

fn caller(org: OrgId, scopes: &ScopeSet) -> Caller {
    let all = Some(PermissionSet::all());
    Caller::api_key(ApiKeyId::new(), org, UserId::new(), *scopes, all)
}

/// A clearance is bound to the call it cleared: presented to another tool's handler, or with
/// other arguments (a wider filter, another device), it runs nothing; the very call it cleared
/// runs, in its own organization. (That it is spent by the run is the type's: `call` takes it
/// by value.)
async fn a_clearance_runs_only_the_call_it_cleared(cx: Ctx) {
    let w = world(&cx).await;
    let all = ScopeSet::parse_list("*").unwrap();
    let me = caller(w.b, &all);
    let registry = w.pipeline.registry();
    let query = registry.get("query_devices").unwrap();
    let unscoped = Unscoped::new(cx.store.clone(), w.gateway.clone());
    let cleared_for = |args: serde_json::Value| {
        let (guard, me) = (w.pipeline.guard(), &me);
        async move {
            match guard.check(me, query, &args).await {
                Ok(Clearance::Run(cleared)) => cleared,
                _ => panic!("a Tier 1 call is cleared"),
            }
        }
    };
    let narrow = json!({ "search": "b-host" });
    let refused = |err: breeze_tools::ToolError| {
        assert_eq!(err.code, ErrorCode::Internal);
        assert!(err.message.contains("nothing was run"), "{}", err.message);
    };
    // Another tool.
    let details = registry.get("get_device_details").unwrap();
    let other_tool = details.call(
        &unscoped,
        cleared_for(narrow.clone()).await,
        json!({ "deviceId": w.b_device }),
        CallOptions::default(),
    );
    refused(other_tool.await.unwrap_err());
    // The same tool with other arguments: wider, or none.
    for other in [json!({ "search": "a-host" }), json!({})] {
        let call = query.call(
            &unscoped,
            cleared_for(narrow.clone()).await,
            other,
            CallOptions::default(),
        );
        refused(call.await.unwrap_err());
    }
    // The call it cleared.
    let out = query
        .call(
            &unscoped,
            cleared_for(narrow.clone()).await,
            narrow,
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(out.get().contains("b-host"), "{}", out.get());
}

/// A caller of organization A reaches none of B's devices, whatever the tier: a read is "not
/// found", and a Tier 3 call is refused by its precheck before an approval request exists.
async fn another_organizations_device_is_out_of_reach(cx: Ctx) {
    let w = world(&cx).await;
    let all = ScopeSet::parse_list("*").unwrap();
    let me = caller(w.a, &all);
    let cancel = CancellationToken::new();
    let read = w
        .pipeline
        .call(
            &me,
            "get_device_details",
            json!({ "deviceId": w.b_device }),
            CallOptions::default(),
            &cancel,
        )
        .await;
    assert!(
        matches!(&read, CallOutcome::Failed(e) if e.code == ErrorCode::NotFound),
        "{read:?}"
    );
    let exec = w
        .pipeline
        .call(
            &me,
            "execute_command",
            json!({ "deviceId": w.b_device, "commandType": "list_processes" }),
            CallOptions::default(),
            &cancel,
        )
        .await;
    assert!(
        matches!(&exec, CallOutcome::Failed(e) if e.code == ErrorCode::NotFound),
        "{exec:?}"
    );
    for org in [w.a, w.b] {
        assert!(
            cx.store
                .org(org)
                .approvals()
                .list_approvals(false, 10)
                .await
                .unwrap()
                .is_empty(),
            "no approval was requested"
        );
    }
    // An unknown tool is its own outcome, and a refusal names what is missing.
    let read_only = ScopeSet::parse_list("ai:read").unwrap();
    let reader = caller(w.a, &read_only);
    assert!(matches!(
        w.pipeline
            .call(
                &reader,
                "no_such_tool",
                json!({}),
                CallOptions::default(),
                &cancel
            )
            .await,
        CallOutcome::UnknownTool
    ));
    let refused = w
        .pipeline
        .call(
            &reader,
            "execute_command",
            json!({ "deviceId": w.b_device, "commandType": "list_processes" }),
            CallOptions::default(),
            &cancel,
        )
        .await;
    assert!(
        matches!(&refused, CallOutcome::Refused(r) if r.to_string().contains("ai:execute")),
        "{refused:?}"
    );
}

on_both_backends!(
    a_clearance_runs_only_the_call_it_cleared,
    another_organizations_device_is_out_of_reach
);
