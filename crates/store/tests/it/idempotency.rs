//! Idempotency records: a requestId is claimed once per organization and principal, its
//! outcome replayed, a different payload refused, a stale claim taken over once, records pruned
//! after the retention window, and all of it still true for a store opened after a restart.

use breeze_core::{Actor, ActorType, OrgId, Timestamp};
use breeze_store::{
    ClaimOutcome, IDEMPOTENCY_RETENTION, IDEMPOTENCY_STALE_AFTER, MAX_REQUEST_ID_CHARS,
    RequestClaim, Store, StoreError, testing::Ctx,
};
use chrono::Duration;
use serde_json::json;

use crate::audit;

const HASH: [u8; 32] = [1; 32];
const OTHER_HASH: [u8; 32] = [2; 32];

async fn two_orgs(s: &Store) -> (OrgId, OrgId) {
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
    (a.id, b.id)
}

fn key() -> Actor {
    Actor::new(ActorType::ApiKey, "0192aaaa-0000-7000-8000-000000000001")
}

fn user() -> Actor {
    Actor::new(ActorType::User, "0192bbbb-0000-7000-8000-000000000002")
}

/// Claims `id` for `create_group` with `hash`, at the store's time.
async fn claim(s: &Store, org: OrgId, actor: &Actor, id: &str, hash: &[u8; 32]) -> ClaimOutcome {
    s.org(org)
        .idempotency()
        .claim_request(
            actor,
            id,
            "create_group",
            hash,
            s.clock().now(),
            IDEMPOTENCY_STALE_AFTER,
        )
        .await
        .unwrap()
}

fn claimed(outcome: ClaimOutcome) -> RequestClaim {
    match outcome {
        ClaimOutcome::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn claim_complete_replay(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let t0 = s.clock().now();
    let c = claimed(claim(s, org, &key(), "r-1", &HASH).await);
    assert!(!c.reclaimed);
    assert_eq!(c.request_id, "r-1");
    // Running: the same call again is told to wait, not run.
    assert_eq!(
        claim(s, org, &key(), "r-1", &HASH).await,
        ClaimOutcome::InProgress { claimed_at: t0 }
    );
    cx.clock.advance(Duration::seconds(3));
    let result = json!({ "id": "g-1", "name": "x\u{0}y" });
    assert!(
        s.org(org)
            .idempotency()
            .complete_request(&c, &result, false, s.clock().now())
            .await
            .unwrap()
    );
    let done_at = s.clock().now();
    cx.clock.advance(Duration::minutes(1));
    let expected = ClaimOutcome::Replay {
        // U+0000 is stored as U+FFFD, on both backends.
        result: json!({ "id": "g-1", "name": "x\u{FFFD}y" }),
        is_error: false,
        completed_at: done_at,
    };
    assert_eq!(claim(s, org, &key(), "r-1", &HASH).await, expected);
    // Completing again changes nothing: the first outcome is the one replayed.
    assert!(
        !s.org(org)
            .idempotency()
            .complete_request(&c, &json!({ "other": true }), true, s.clock().now())
            .await
            .unwrap()
    );
    assert!(!s.org(org).idempotency().release_request(&c).await.unwrap());
    assert_eq!(claim(s, org, &key(), "r-1", &HASH).await, expected);
    assert_eq!(s.raw_dump("idempotency_records").await.unwrap().len(), 1);

    // An error outcome is replayed as an error.
    let e = claimed(claim(s, org, &key(), "r-2", &HASH).await);
    s.org(org)
        .idempotency()
        .complete_request(&e, &json!({ "code": "NOT_FOUND" }), true, done_at)
        .await
        .unwrap();
    assert!(matches!(
        claim(s, org, &key(), "r-2", &HASH).await,
        ClaimOutcome::Replay { is_error: true, result, .. } if result["code"] == "NOT_FOUND"
    ));
}

async fn a_different_payload_or_tool_is_a_mismatch(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let c = claimed(claim(s, org, &key(), "r-1", &HASH).await);
    // While it runs …
    assert_eq!(
        claim(s, org, &key(), "r-1", &OTHER_HASH).await,
        ClaimOutcome::Mismatch
    );
    let other_tool = s
        .org(org)
        .idempotency()
        .claim_request(
            &key(),
            "r-1",
            "delete_group",
            &HASH,
            s.clock().now(),
            IDEMPOTENCY_STALE_AFTER,
        )
        .await
        .unwrap();
    assert_eq!(other_tool, ClaimOutcome::Mismatch);
    // … and once it is done, even when the old claim has gone stale.
    s.org(org)
        .idempotency()
        .complete_request(&c, &json!({ "ok": 1 }), false, s.clock().now())
        .await
        .unwrap();
    cx.clock.advance(Duration::hours(1));
    assert_eq!(
        claim(s, org, &key(), "r-1", &OTHER_HASH).await,
        ClaimOutcome::Mismatch
    );
    assert!(matches!(
        claim(s, org, &key(), "r-1", &HASH).await,
        ClaimOutcome::Replay { result, .. } if result == json!({ "ok": 1 })
    ));
    // A stale in-progress claim is not taken over with a different payload either.
    claimed(claim(s, org, &key(), "r-2", &HASH).await);
    cx.clock.advance(Duration::hours(1));
    assert_eq!(
        claim(s, org, &key(), "r-2", &OTHER_HASH).await,
        ClaimOutcome::Mismatch
    );
}

async fn released_claims_run_again(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let c = claimed(claim(s, org, &key(), "r-1", &HASH).await);
    assert!(s.org(org).idempotency().release_request(&c).await.unwrap());
    let again = claimed(claim(s, org, &key(), "r-1", &HASH).await);
    assert_ne!(again.token, c.token);
    // The released claim's token no longer completes anything.
    assert!(
        !s.org(org)
            .idempotency()
            .complete_request(&c, &json!(1), false, s.clock().now())
            .await
            .unwrap()
    );
    assert!(
        s.org(org)
            .idempotency()
            .complete_request(&again, &json!(2), false, s.clock().now())
            .await
            .unwrap()
    );
    // A done record cannot be released.
    assert!(
        !s.org(org)
            .idempotency()
            .release_request(&again)
            .await
            .unwrap()
    );
    assert!(matches!(
        claim(s, org, &key(), "r-1", &HASH).await,
        ClaimOutcome::Replay { result, .. } if result == json!(2)
    ));
}

async fn concurrent_claims_have_one_winner(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let race = |id: &'static str| {
        let tasks: Vec<_> = (0..12)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { claim(&s, org, &key(), id, &HASH).await })
            })
            .collect();
        async move {
            let mut outcomes = Vec::new();
            for t in tasks {
                outcomes.push(t.await.unwrap());
            }
            outcomes
        }
    };
    let outcomes = race("r-1").await;
    let winners = outcomes
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::Claimed(_)))
        .count();
    assert_eq!(winners, 1, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|o| matches!(
            o,
            ClaimOutcome::Claimed(_) | ClaimOutcome::InProgress { .. }
        )),
        "{outcomes:?}"
    );
    // Once stale, concurrent takers: exactly one takes it over.
    cx.clock.advance(IDEMPOTENCY_STALE_AFTER);
    let outcomes = race("r-1").await;
    let takers: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            ClaimOutcome::Claimed(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(takers.len(), 1, "{outcomes:?}");
    assert!(takers[0].reclaimed);
}

async fn a_replay_survives_a_restart(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let done = claimed(claim(s, org, &key(), "r-done", &HASH).await);
    let done_at = s.clock().now();
    s.org(org)
        .idempotency()
        .complete_request(&done, &json!({ "id": 7 }), false, done_at)
        .await
        .unwrap();
    let open = claimed(claim(s, org, &key(), "r-open", &HASH).await);
    // The new store is opened first (PostgreSQL: it asks the old one for its schema), then
    // the old one is gone.
    let restarted = s.reopen().await.unwrap();
    s.close().await;
    assert_eq!(
        claim(&restarted, org, &key(), "r-done", &HASH).await,
        ClaimOutcome::Replay {
            result: json!({ "id": 7 }),
            is_error: false,
            completed_at: done_at,
        }
    );
    assert_eq!(
        claim(&restarted, org, &key(), "r-done", &OTHER_HASH).await,
        ClaimOutcome::Mismatch
    );
    // The claim the old process held is still running as far as anyone can tell …
    assert!(matches!(
        claim(&restarted, org, &key(), "r-open", &HASH).await,
        ClaimOutcome::InProgress { .. }
    ));
    // … until it goes stale, when the new process takes it over and the old one's token is
    // worthless.
    cx.clock.advance(IDEMPOTENCY_STALE_AFTER);
    let taken = claimed(claim(&restarted, org, &key(), "r-open", &HASH).await);
    assert!(taken.reclaimed);
    let r = restarted.org(org);
    assert!(
        !r.idempotency()
            .complete_request(&open, &json!("old"), false, s.clock().now())
            .await
            .unwrap()
    );
    restarted.close().await;
}

async fn organizations_and_principals_are_independent(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = two_orgs(s).await;
    let in_a = claimed(claim(s, a, &key(), "r-1", &HASH).await);
    s.org(a)
        .idempotency()
        .complete_request(&in_a, &json!("A's secret"), false, s.clock().now())
        .await
        .unwrap();
    // The same principal id and requestId in organization B: B's own, new claim.
    let in_b = claimed(claim(s, b, &key(), "r-1", &HASH).await);
    // B cannot complete or release A's claim through its handle (a stolen token).
    assert!(
        !s.org(b)
            .idempotency()
            .complete_request(&in_a, &json!("B's"), false, s.clock().now())
            .await
            .unwrap()
    );
    assert!(!s.org(b).idempotency().release_request(&in_a).await.unwrap());
    s.org(b)
        .idempotency()
        .complete_request(&in_b, &json!("B's"), false, s.clock().now())
        .await
        .unwrap();
    assert!(matches!(
        claim(s, a, &key(), "r-1", &HASH).await,
        ClaimOutcome::Replay { result, .. } if result == json!("A's secret")
    ));
    assert!(matches!(
        claim(s, b, &key(), "r-1", &HASH).await,
        ClaimOutcome::Replay { result, .. } if result == json!("B's")
    ));
    // Another principal of A with the same requestId: its own, new claim — even with a
    // different payload (no mismatch across principals).
    claimed(claim(s, a, &user(), "r-1", &OTHER_HASH).await);
    // Same id, other kind of principal: independent too.
    let same_id_user = Actor::new(ActorType::User, key().id);
    claimed(claim(s, a, &same_id_user, "r-1", &HASH).await);
    assert_eq!(s.raw_dump("idempotency_records").await.unwrap().len(), 4);
}

async fn stale_claims_are_taken_over(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let first = claimed(claim(s, org, &key(), "r-1", &HASH).await);
    cx.clock
        .advance(IDEMPOTENCY_STALE_AFTER - Duration::milliseconds(1));
    assert!(matches!(
        claim(s, org, &key(), "r-1", &HASH).await,
        ClaimOutcome::InProgress { .. }
    ));
    cx.clock.advance(Duration::milliseconds(1));
    let second = claimed(claim(s, org, &key(), "r-1", &HASH).await);
    assert!(second.reclaimed);
    // The slow first holder can neither overwrite nor delete the new claim.
    assert!(
        !s.org(org)
            .idempotency()
            .release_request(&first)
            .await
            .unwrap()
    );
    assert!(
        !s.org(org)
            .idempotency()
            .complete_request(&first, &json!("first"), false, s.clock().now())
            .await
            .unwrap()
    );
    // The takeover restarted the stale clock.
    assert!(matches!(
        claim(s, org, &key(), "r-1", &HASH).await,
        ClaimOutcome::InProgress { claimed_at } if claimed_at == s.clock().now()
    ));
    assert!(
        s.org(org)
            .idempotency()
            .complete_request(&second, &json!("second"), false, s.clock().now())
            .await
            .unwrap()
    );
    assert!(matches!(
        claim(s, org, &key(), "r-1", &HASH).await,
        ClaimOutcome::Replay { result, .. } if result == json!("second")
    ));
    // A shorter stale_after is the caller's to choose.
    claimed(claim(s, org, &key(), "r-2", &HASH).await);
    cx.clock.advance(Duration::seconds(30));
    let quick = s
        .org(org)
        .idempotency()
        .claim_request(
            &key(),
            "r-2",
            "create_group",
            &HASH,
            s.clock().now(),
            Duration::seconds(30),
        )
        .await
        .unwrap();
    assert!(matches!(
        quick,
        ClaimOutcome::Claimed(RequestClaim {
            reclaimed: true,
            ..
        })
    ));
}

async fn pruning_removes_only_old_records(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let o = s.org(org);
    let start = s.clock().now();
    let at = |hours_ago: i64| -> Timestamp { start - Duration::hours(hours_ago) };
    let claim_at = |id: &'static str, t: Timestamp| async move {
        claimed(
            o.idempotency()
                .claim_request(
                    &key(),
                    id,
                    "create_group",
                    &HASH,
                    t,
                    IDEMPOTENCY_STALE_AFTER,
                )
                .await
                .unwrap(),
        )
    };
    // Done long ago; done recently though claimed long ago; open long ago; open just now.
    let old = claim_at("old-done", at(30)).await;
    o.idempotency()
        .complete_request(&old, &json!(1), false, at(29))
        .await
        .unwrap();
    let late = claim_at("late-done", at(30)).await;
    o.idempotency()
        .complete_request(&late, &json!(2), false, at(1))
        .await
        .unwrap();
    claim_at("old-open", at(25)).await;
    // (Recent enough not to be stale either, so that it still answers InProgress below.)
    claim_at("new-open", start - Duration::minutes(5)).await;
    assert_eq!(
        s.prune_idempotency(start - IDEMPOTENCY_RETENTION)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        s.prune_idempotency(start - IDEMPOTENCY_RETENTION)
            .await
            .unwrap(),
        0
    );
    assert!(matches!(
        claim(s, org, &key(), "late-done", &HASH).await,
        ClaimOutcome::Replay { result, .. } if result == json!(2)
    ));
    assert!(matches!(
        claim(s, org, &key(), "new-open", &HASH).await,
        ClaimOutcome::InProgress { .. }
    ));
    // The pruned ones are forgotten: a new call runs afresh, not as a takeover.
    assert!(!claimed(claim(s, org, &key(), "old-done", &HASH).await).reclaimed);
    assert!(!claimed(claim(s, org, &key(), "old-open", &HASH).await).reclaimed);
}

async fn request_ids_are_bounded(cx: Ctx) {
    let s = &cx.store;
    let (org, _) = two_orgs(s).await;
    let attempt = |id: String| async move {
        s.org(org)
            .idempotency()
            .claim_request(
                &key(),
                &id,
                "create_group",
                &HASH,
                s.clock().now(),
                IDEMPOTENCY_STALE_AFTER,
            )
            .await
    };
    for bad in [String::new(), "x".repeat(MAX_REQUEST_ID_CHARS + 1)] {
        match attempt(bad).await {
            Err(StoreError::Invalid(m)) => assert!(m.contains("requestId"), "{m}"),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }
    // The bound counts characters, not bytes: 200 two-byte characters fit, in the database too.
    let wide = "é".repeat(MAX_REQUEST_ID_CHARS);
    let c = claimed(attempt(wide.clone()).await.unwrap());
    assert!(
        s.org(org)
            .idempotency()
            .complete_request(&c, &json!(true), false, s.clock().now())
            .await
            .unwrap()
    );
    assert!(matches!(
        attempt(wide).await.unwrap(),
        ClaimOutcome::Replay { .. }
    ));
    assert!(matches!(
        attempt("x".into()).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
}

breeze_store::on_both_backends!(
    claim_complete_replay,
    a_different_payload_or_tool_is_a_mismatch,
    released_claims_run_again,
    concurrent_claims_have_one_winner,
    a_replay_survives_a_restart,
    organizations_and_principals_are_independent,
    stale_claims_are_taken_over,
    pruning_removes_only_old_records,
    request_ids_are_bounded,
);
