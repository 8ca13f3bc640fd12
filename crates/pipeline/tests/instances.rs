//! Two servers on one PostgreSQL database: a Tier 3 call waits for approval on one while the
//! person decides through the other. The waiting call must go on when the decision is
//! announced on the cluster bus, not at its next poll: the poll here is far longer than the
//! test's patience.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{sync::Arc, time::Duration};

use breeze_core::{Actor, AuditEvent, PermissionSet, ScopeSet, SystemClock};
use breeze_gateway::{Gateway, GatewayConfig};
use breeze_guard::GuardConfig;
use breeze_limits::MemoryLimiter;
use breeze_pipeline::{CallOutcome, Caller, Guard, Pipeline, approvals::ApprovalConfig};
use breeze_store::{Backend, Decision, NewApiKey, NewUser, testing::TestStore};
use breeze_tools::CallOptions;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(20);

fn audit() -> AuditEvent {
    AuditEvent::new(Actor::system("test"), "test", "test")
}

#[tokio::test]
async fn an_approval_decided_on_another_instance_wakes_the_call() {
    let test = TestStore::new(Backend::Postgres, Arc::new(SystemClock)).await;
    let here = test.store.clone();
    let there = here.reopen().await.unwrap();
    here.spawn_bus_listener();
    here.bus_listening().await;

    let partner = here.create_partner("P", "p", audit()).await.unwrap();
    let org = here
        .create_organization(partner.id, "A", "a", audit())
        .await
        .unwrap()
        .id;
    let mut users = Vec::new();
    for name in ["requester", "approver"] {
        let user = here
            .create_user(
                NewUser {
                    partner_id: partner.id,
                    org_id: None,
                    email: format!("{name}@p.test"),
                    name: name.into(),
                    password_hash: "unused".into(),
                },
                audit(),
            )
            .await
            .unwrap();
        users.push(user.id);
    }
    let (requester, approver) = (users[0], users[1]);
    // The requester's standing (its key, its user's role) is checked again before an approved
    // call runs.
    let admin = here.find_role(partner.id, "Administrator").await.unwrap();
    here.assign_role(requester, org, admin.id, audit())
        .await
        .unwrap();
    let key = here
        .insert_api_key(
            NewApiKey {
                org_id: org,
                user_id: requester,
                name: "assistant".into(),
                key_hash: [7; 32],
                key_prefix: "brz_test".into(),
                scopes: ScopeSet::parse_list("*").unwrap(),
                expires_at: None,
            },
            audit(),
        )
        .await
        .unwrap()
        .id;

    let stop = CancellationToken::new();
    let pipeline = Pipeline::new(
        here.clone(),
        Gateway::new(here.clone(), GatewayConfig::default()),
        Arc::new(breeze_tools::all()),
        Guard::new(
            GuardConfig::default(),
            Arc::new(MemoryLimiter::new()),
            Arc::new(SystemClock),
        ),
        ApprovalConfig {
            wait: Duration::from_secs(120),
            poll: Duration::from_secs(600),
            ..ApprovalConfig::default()
        },
    );
    pipeline.approvals().spawn_bus_follower(stop.clone());

    // A Tier 3 call on this instance waits for a person.
    let call = {
        let pipeline = pipeline.clone();
        tokio::spawn(async move {
            let scopes = ScopeSet::parse_list("*").unwrap();
            let all = Some(PermissionSet::all());
            let me = Caller::api_key(key, org, requester, scopes, all);
            pipeline
                .call(
                    &me,
                    "manage_groups",
                    json!({ "action": "create", "name": "Web servers" }),
                    CallOptions::default(),
                    &CancellationToken::new(),
                )
                .await
        })
    };
    let mut call = call;
    let request = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(r) = there
                .org(org)
                .approvals()
                .list_approvals(true, 10)
                .await
                .unwrap()
                .into_iter()
                .next()
            {
                return r;
            }
            if call.is_finished() {
                panic!("the call ended without asking: {:?}", (&mut call).await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the call asked for approval");

    // The person approves through the other instance.
    there
        .org(org)
        .approvals()
        .decide_approval(request.id, Decision::Approve, approver, None, audit())
        .await
        .unwrap();
    let outcome = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("the waiting call went on when the decision was announced")
        .unwrap();
    assert!(matches!(outcome, CallOutcome::Output(_)), "{outcome:?}");
    let groups = there.org(org).tenancy().list_groups().await.unwrap();
    assert_eq!(groups.len(), 1);

    stop.cancel();
    there.close().await;
    test.cleanup().await;
}
