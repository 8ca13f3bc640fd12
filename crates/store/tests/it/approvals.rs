//! Approval requests in the store: decided once, claimed once, expired, reported (the key is
//! revoked with it), interrupted executions failed at start, policies most-specific-first.

use breeze_core::{ApiKeyId, OrgId, ScopeSet, UserId};
use breeze_store::{Decision, NewApiKey, NewApproval, NewUser, Store, StoreError, testing::Ctx};
use chrono::Duration;
use serde_json::json;

use crate::audit;

async fn world(s: &Store) -> (OrgId, UserId, ApiKeyId, OrgId) {
    let p = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(p.id, "A", "a", audit("o", "organization"))
        .await
        .unwrap();
    let b = s
        .create_organization(p.id, "B", "b", audit("o", "organization"))
        .await
        .unwrap();
    let user = s
        .create_user(
            NewUser {
                partner_id: p.id,
                org_id: None,
                email: "u@p.test".into(),
                name: "U".into(),
                password_hash: "x".into(),
            },
            audit("u", "user"),
        )
        .await
        .unwrap();
    let role = s.find_role(p.id, "Administrator").await.unwrap();
    s.assign_role(user.id, a.id, role.id, audit("r", "user"))
        .await
        .unwrap();
    let key = s
        .insert_api_key(
            NewApiKey {
                org_id: a.id,
                user_id: user.id,
                name: "k".into(),
                key_hash: [7; 32],
                key_prefix: "brz_x".into(),
                scopes: ScopeSet::parse_list("ai:execute").unwrap(),
                expires_at: None,
            },
            audit("k", "api_key"),
        )
        .await
        .unwrap();
    (a.id, user.id, key.id, b.id)
}

fn request(s: &Store, user: UserId, key: ApiKeyId) -> NewApproval {
    NewApproval {
        api_key_id: Some(key),
        oauth_grant_id: None,
        ai_session_id: None,
        client_name: None,
        requester_user_id: user,
        tool: "manage_groups".into(),
        action: Some("create".into()),
        tier: 3,
        arguments: json!({ "action": "create", "name": "x" }),
        arguments_hash: [1; 32],
        definition_hash: [2; 32],
        description: "create a group".into(),
        mode: "supervised".into(),
        request_id: None,
        expires_at: s.clock().now() + Duration::minutes(5),
        pinned: None,
    }
}

async fn approvals_move_forward_once(cx: Ctx) {
    let s = &cx.store;
    let (org, user, key, other) = world(s).await;
    let o = s.org(org);
    let r = o
        .approvals()
        .create_approval(
            request(s, user, key),
            audit("approval.request", "approval_request"),
        )
        .await
        .unwrap();
    assert_eq!(r.status.as_str(), "pending");
    assert!(
        s.org(other).approvals().get_approval(r.id).await.is_err(),
        "confined to its organization"
    );
    assert_eq!(
        s.cross_org()
            .pending_approvals(&[org, other])
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        !s.claim_approval(r.id).await.unwrap(),
        "pending cannot be claimed"
    );

    let decided = o
        .approvals()
        .decide_approval(
            r.id,
            Decision::Approve,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await
        .unwrap();
    assert_eq!(decided.status.as_str(), "approved");
    let again = o
        .approvals()
        .decide_approval(
            r.id,
            Decision::Deny,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await;
    assert!(
        matches!(again, Err(StoreError::Conflict(ref m)) if m.contains("already approved")),
        "{again:?}"
    );
    assert_eq!(s.cross_org().unclaimed_approvals().await.unwrap().len(), 1);
    assert!(s.claim_approval(r.id).await.unwrap());
    assert!(
        !s.claim_approval(r.id).await.unwrap(),
        "claimed exactly once"
    );
    assert!(
        s.cross_org()
            .unclaimed_approvals()
            .await
            .unwrap()
            .is_empty()
    );

    // A crash mid-execution: at the next start it fails and is never retried.
    assert_eq!(s.fail_interrupted_approvals().await.unwrap(), 1);
    let failed = o.approvals().get_approval(r.id).await.unwrap();
    assert_eq!(failed.status.as_str(), "failed");
    assert!(failed.reason.unwrap().contains("not retried"));
    assert!(!s.claim_approval(r.id).await.unwrap());

    // Expiry.
    let late = o
        .approvals()
        .create_approval(
            request(s, user, key),
            audit("approval.request", "approval_request"),
        )
        .await
        .unwrap();
    cx.clock.advance(Duration::minutes(6));
    assert!(
        o.approvals()
            .decide_approval(
                late.id,
                Decision::Approve,
                user,
                None,
                audit("a", "approval_request")
            )
            .await
            .is_err()
    );
    assert_eq!(s.expire_approvals().await.unwrap(), 1);
    assert_eq!(
        o.approvals()
            .get_approval(late.id)
            .await
            .unwrap()
            .status
            .as_str(),
        "expired"
    );
    cx.clock.advance(Duration::minutes(-6));

    // Report revokes the requesting key in the same transaction.
    let bad = o
        .approvals()
        .create_approval(
            request(s, user, key),
            audit("approval.request", "approval_request"),
        )
        .await
        .unwrap();
    o.approvals()
        .decide_approval(
            bad.id,
            Decision::Report,
            user,
            Some("not me"),
            audit("a", "approval_request"),
        )
        .await
        .unwrap();
    assert!(
        o.api_keys()
            .get_api_key(key)
            .await
            .unwrap()
            .revoked_at
            .is_some()
    );
}

async fn policies_resolve_most_specific_first(cx: Ctx) {
    let s = &cx.store;
    let (org, ..) = world(s).await;
    let o = s.org(org);
    assert_eq!(
        o.approvals()
            .approval_mode("run_script", None)
            .await
            .unwrap(),
        "supervised"
    );
    o.approvals()
        .set_approval_policy("*", "four_eyes", audit("p", "organization"))
        .await
        .unwrap();
    o.approvals()
        .set_approval_policy("run_script", "supervised", audit("p", "organization"))
        .await
        .unwrap();
    o.approvals()
        .set_approval_policy(
            "file_operations.delete",
            "four_eyes",
            audit("p", "organization"),
        )
        .await
        .unwrap();
    assert_eq!(
        o.approvals()
            .approval_mode("run_script", None)
            .await
            .unwrap(),
        "supervised"
    );
    assert_eq!(
        o.approvals()
            .approval_mode("network_discovery", None)
            .await
            .unwrap(),
        "four_eyes"
    );
    assert_eq!(
        o.approvals()
            .approval_mode("file_operations", Some("delete"))
            .await
            .unwrap(),
        "four_eyes"
    );
    o.approvals()
        .set_approval_policy("*", "supervised", audit("p", "organization"))
        .await
        .unwrap();
    assert_eq!(
        o.approvals()
            .approval_mode("file_operations", Some("write"))
            .await
            .unwrap(),
        "supervised"
    );
    let err = o
        .approvals()
        .set_approval_policy("*", "three_eyes", audit("p", "organization"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("three_eyes"));
}

/// `automatic` is for one action: `*` and a bare tool are refused (the registry decides which
/// actions are read-only); a request in mode automatic is recorded approved by the policy, with
/// no person in `decided_by` and an `approval.auto_approved` audit record by the requester;
/// policy changes are audited with the mode they replace.
async fn automatic_approval_is_per_action_and_audited(cx: Ctx) {
    let s = &cx.store;
    let (org, user, key, _) = world(s).await;
    let o = s.org(org);
    for class in [
        "*",
        "execute_command",
        "execute_command.",
        ".list_processes",
    ] {
        let err = o
            .approvals()
            .set_approval_policy(class, "automatic", audit("p", "organization"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid(m) if m.contains(class) && m.contains("automatic")),
            "{class}: {err}"
        );
    }
    assert_eq!(
        o.approvals()
            .approval_mode("execute_command", Some("list_processes"))
            .await
            .unwrap(),
        "supervised",
        "the refused settings left nothing behind"
    );
    o.approvals()
        .set_approval_policy(
            "execute_command.list_processes",
            "automatic",
            audit("approval_policy.set", "organization"),
        )
        .await
        .unwrap();
    assert_eq!(
        o.approvals()
            .approval_mode("execute_command", Some("list_processes"))
            .await
            .unwrap(),
        "automatic"
    );
    assert_eq!(
        o.approvals()
            .approval_mode("execute_command", Some("kill_process"))
            .await
            .unwrap(),
        "supervised"
    );
    // A request without an action cannot be automatic, whatever the caller passes.
    let mut bare = request(s, user, key);
    bare.action = None;
    bare.mode = "automatic".into();
    assert!(matches!(
        o.approvals()
            .create_approval(bare, audit("a", "approval_request"))
            .await,
        Err(StoreError::Invalid(_))
    ));

    let mut new = request(s, user, key);
    new.tool = "execute_command".into();
    new.action = Some("list_processes".into());
    new.mode = "automatic".into();
    let requester = breeze_core::Actor::new(breeze_core::ActorType::ApiKey, key);
    let r = o
        .approvals()
        .create_approval(
            new,
            breeze_core::AuditEvent::new(requester, "approval.request", "approval_request"),
        )
        .await
        .unwrap();
    assert_eq!(r.status.as_str(), "approved");
    assert_eq!(r.mode, "automatic");
    assert_eq!(r.decided_by, None);
    assert!(r.decided_at.is_some());
    assert_eq!(
        r.reason.as_deref(),
        Some("automatic: organization policy for execute_command.list_processes")
    );
    assert!(
        s.claim_approval(r.id).await.unwrap(),
        "it runs like an approved request"
    );
    assert!(!s.claim_approval(r.id).await.unwrap(), "once");
    let page = o
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some("approval.auto_approved".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    let e = &page.records[0].event;
    assert_eq!(e.resource_id.as_deref(), Some(r.id.to_string().as_str()));
    assert_eq!(e.actor.id, key.to_string());
    assert_eq!(e.details["class"], "execute_command.list_processes");

    // Back to supervised: audited with what it replaced; new requests wait again.
    o.approvals()
        .set_approval_policy(
            "execute_command.list_processes",
            "supervised",
            audit("approval_policy.set", "organization"),
        )
        .await
        .unwrap();
    let page = o
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some("approval_policy.set".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(page.records.len(), 2);
    assert_eq!(page.records[0].event.details["mode"], "supervised");
    assert_eq!(page.records[0].event.details["previous"], "automatic");
    assert_eq!(
        page.records[1].event.details["previous"],
        serde_json::Value::Null
    );
    assert_eq!(
        o.approvals()
            .approval_mode("execute_command", Some("list_processes"))
            .await
            .unwrap(),
        "supervised"
    );
}

/// Every change to what an API key authenticates as moves the credentials generation on, as
/// seen through any clone of the store; other decisions leave it alone.
async fn credential_changes_move_the_generation(cx: Ctx) {
    let s = &cx.store;
    let (org, user, key, _) = world(s).await;
    let o = s.org(org);
    let clone = s.clone();
    let moved = |before: u64| clone.credentials_generation() > before;

    let g = s.credentials_generation();
    let denied = o
        .approvals()
        .create_approval(
            request(s, user, key),
            audit("approval.request", "approval_request"),
        )
        .await
        .unwrap();
    o.approvals()
        .decide_approval(
            denied.id,
            Decision::Deny,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await
        .unwrap();
    assert_eq!(clone.credentials_generation(), g, "a denial changes no key");

    let g = s.credentials_generation();
    let reported = o
        .approvals()
        .create_approval(
            request(s, user, key),
            audit("approval.request", "approval_request"),
        )
        .await
        .unwrap();
    o.approvals()
        .decide_approval(
            reported.id,
            Decision::Report,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await
        .unwrap();
    assert!(moved(g), "a report revokes the requesting key");

    let g = s.credentials_generation();
    let partner = s.get_user(user).await.unwrap().partner_id;
    let role = s.find_role(partner, "Technician").await.unwrap();
    s.assign_role(user, org, role.id, audit("r", "user"))
        .await
        .unwrap();
    assert!(moved(g), "a role assignment");

    // The report already revoked the key; revoking again still moves the generation (a
    // spurious move costs a cache miss, a missing one a stale principal).
    let g = s.credentials_generation();
    o.api_keys()
        .revoke_api_key(key, audit("k", "api_key"))
        .await
        .unwrap();
    assert!(moved(g), "a revocation");
}

/// A request whose waiting caller went away is withdrawn — from pending, or from approved while
/// unclaimed — and then can be neither decided nor claimed; a request already claimed, or
/// decided otherwise, is not withdrawn. The pinned snapshot is stored with its hash.
async fn withdrawn_requests_cannot_be_approved_or_run(cx: Ctx) {
    let s = &cx.store;
    let (org, user, key, _) = world(s).await;
    let o = s.org(org);
    let new = || {
        let mut n = request(s, user, key);
        n.pinned = Some((
            json!({ "script": { "name": "cleanup", "body": "rm -rf /tmp/x" } }),
            [9; 32],
        ));
        n
    };
    let r = o
        .approvals()
        .create_approval(new(), audit("approval.request", "approval_request"))
        .await
        .unwrap();
    assert_eq!(
        r.pinned.as_ref().unwrap()["script"]["body"],
        "rm -rf /tmp/x"
    );
    assert_eq!(r.pinned_hash.as_deref(), Some(&[9u8; 32][..]));
    assert!(
        s.withdraw_approval(r.id, "the caller cancelled", audit("w", "approval_request"))
            .await
            .unwrap()
    );
    let w = o.approvals().get_approval(r.id).await.unwrap();
    assert_eq!(w.status.as_str(), "withdrawn");
    assert!(w.is_final());
    let approve = o
        .approvals()
        .decide_approval(
            r.id,
            Decision::Approve,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await;
    assert!(
        matches!(approve, Err(StoreError::Conflict(ref m)) if m.contains("already withdrawn")),
        "{approve:?}"
    );
    assert!(!s.claim_approval(r.id).await.unwrap());
    assert!(
        s.cross_org()
            .unclaimed_approvals()
            .await
            .unwrap()
            .is_empty()
    );

    // Approved but not yet claimed: still withdrawn, and the resumer never sees it.
    let r = o
        .approvals()
        .create_approval(new(), audit("approval.request", "approval_request"))
        .await
        .unwrap();
    o.approvals()
        .decide_approval(
            r.id,
            Decision::Approve,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await
        .unwrap();
    assert!(
        s.withdraw_approval(r.id, "the caller went away", audit("w", "approval_request"))
            .await
            .unwrap()
    );
    assert!(
        s.cross_org()
            .unclaimed_approvals()
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!s.claim_approval(r.id).await.unwrap());

    // Claimed (running) or denied: withdrawing changes nothing.
    let r = o
        .approvals()
        .create_approval(new(), audit("approval.request", "approval_request"))
        .await
        .unwrap();
    o.approvals()
        .decide_approval(
            r.id,
            Decision::Approve,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await
        .unwrap();
    assert!(s.claim_approval(r.id).await.unwrap());
    assert!(
        !s.withdraw_approval(r.id, "late", audit("w", "approval_request"))
            .await
            .unwrap()
    );
    assert_eq!(
        o.approvals()
            .get_approval(r.id)
            .await
            .unwrap()
            .status
            .as_str(),
        "executing"
    );
    let r = o
        .approvals()
        .create_approval(new(), audit("approval.request", "approval_request"))
        .await
        .unwrap();
    o.approvals()
        .decide_approval(
            r.id,
            Decision::Deny,
            user,
            None,
            audit("a", "approval_request"),
        )
        .await
        .unwrap();
    assert!(
        !s.withdraw_approval(r.id, "late", audit("w", "approval_request"))
            .await
            .unwrap()
    );
    assert_eq!(
        o.approvals()
            .get_approval(r.id)
            .await
            .unwrap()
            .status
            .as_str(),
        "denied"
    );
}

breeze_store::on_both_backends!(
    withdrawn_requests_cannot_be_approved_or_run,
    approvals_move_forward_once,
    policies_resolve_most_specific_first,
    automatic_approval_is_per_action_and_audited,
    credential_changes_move_the_generation,
);
