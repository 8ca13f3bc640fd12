//! The AI assistant's tables: a session is one person's in one organization (another person of
//! the same organization, or anyone in another, gets `NotFound` for it, its messages and its
//! tool calls), search matches `%` and `_` literally, a response's messages and usage commit
//! together, deleting a chat leaves its spending, and a closed session takes no message.

use breeze_core::{AiMessageRole, AiSessionStatus, AiToolStatus, OrgId, PartnerId, UserId};
use breeze_store::{
    AiBudget, NewAiMessage, NewAiUsage, NewUser, Store, StoreError, on_both_backends, testing::Ctx,
};
use chrono::Duration;
use serde_json::json;

use crate::audit;

async fn user(s: &Store, partner: PartnerId, org: OrgId, email: &str) -> UserId {
    s.create_user(
        NewUser {
            partner_id: partner,
            org_id: Some(org),
            email: email.into(),
            name: email.into(),
            password_hash: String::new(),
        },
        audit("user.create", "user"),
    )
    .await
    .unwrap()
    .id
}

struct World {
    a: OrgId,
    b: OrgId,
    alice: UserId,
    bob: UserId,
    carol: UserId,
}

async fn world(s: &Store) -> World {
    let (a, b) = crate::two_orgs(s).await;
    let partner = s.org(a).tenancy().organization().await.unwrap().partner_id;
    World {
        a,
        b,
        alice: user(s, partner, a, "alice@a.test").await,
        bob: user(s, partner, a, "bob@a.test").await,
        carol: user(s, partner, b, "carol@b.test").await,
    }
}

fn usage(model: &str, cost: Option<i64>) -> NewAiUsage {
    NewAiUsage {
        model: model.into(),
        input_tokens: 100,
        output_tokens: 50,
        cost_micro_cents: cost,
    }
}

async fn a_session_is_its_owners_alone(cx: Ctx) {
    let s = &cx.store;
    let w = world(s).await;
    let ai = s.org(w.a).ai();
    let ctx = json!({"type": "device", "id": "d1", "hostname": "ACME-FS01"});
    let mine = ai
        .create_session(
            w.alice,
            "Disk on FS01",
            Some(&ctx),
            audit("ai.session.create", "ai_session"),
        )
        .await
        .unwrap();
    assert_eq!(mine.status, AiSessionStatus::Active);
    assert_eq!(mine.page_context, Some(ctx));
    ai.append_messages(
        w.alice,
        mine.id,
        &[NewAiMessage::text(AiMessageRole::User, "why slow?")],
        None,
    )
    .await
    .unwrap();
    let exec = ai
        .create_execution(w.alice, mine.id, "toolu_1", "query_devices", &json!({}))
        .await
        .unwrap();
    // Bob, same organization: nothing of Alice's is there for him.
    let nf = |r: Result<_, StoreError>| matches!(r, Err(StoreError::NotFound(_)));
    assert!(nf(ai.get_session(w.bob, mine.id).await.map(|_| ())));
    assert!(nf(ai.messages(w.bob, mine.id).await.map(|_| ())));
    assert!(nf(ai
        .get_execution(w.bob, mine.id, exec.id)
        .await
        .map(|_| ())));
    assert!(nf(ai
        .rename_session(w.bob, mine.id, "mine now", audit("x", "y"))
        .await
        .map(|_| ())));
    assert!(nf(ai.delete_session(w.bob, mine.id, audit("x", "y")).await));
    assert!(nf(ai
        .append_messages(
            w.bob,
            mine.id,
            &[NewAiMessage::text(AiMessageRole::User, "hi")],
            None
        )
        .await));
    assert!(ai.list_sessions(w.bob, 50, 0).await.unwrap().is_empty());
    assert!(
        ai.search_sessions(w.bob, "slow", 50)
            .await
            .unwrap()
            .is_empty()
    );
    // Carol, another organization, even naming Alice as the owner: nothing.
    let b = s.org(w.b).ai();
    assert!(nf(b.get_session(w.alice, mine.id).await.map(|_| ())));
    assert!(nf(b.get_session(w.carol, mine.id).await.map(|_| ())));
    assert!(nf(b
        .get_execution(w.alice, mine.id, exec.id)
        .await
        .map(|_| ())));
    // Alice sees hers, with its message, in order.
    let msgs = ai.messages(w.alice, mine.id).await.unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!((msgs[0].seq, msgs[0].content.as_str()), (1, "why slow?"));
    assert_eq!(
        ai.get_execution(w.alice, mine.id, exec.id)
            .await
            .unwrap()
            .status,
        AiToolStatus::Executing
    );
}

async fn listing_is_newest_first_and_search_escapes_wildcards(cx: Ctx) {
    let s = &cx.store;
    let w = world(s).await;
    let ai = s.org(w.a).ai();
    let mut ids = Vec::new();
    for title in ["100% disk", "web_01 patch", "plain"] {
        let sess = ai
            .create_session(
                w.alice,
                title,
                None,
                audit("ai.session.create", "ai_session"),
            )
            .await
            .unwrap();
        ids.push(sess.id);
        cx.clock.advance(Duration::seconds(1));
    }
    let listed: Vec<_> = ai
        .list_sessions(w.alice, 50, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, [ids[2], ids[1], ids[0]]);
    let page: Vec<_> = ai.list_sessions(w.alice, 1, 1).await.unwrap();
    assert_eq!(page[0].id, ids[1]);
    let titles = |v: Vec<breeze_store::AiSession>| -> Vec<String> {
        v.into_iter().map(|s| s.title).collect()
    };
    assert_eq!(
        titles(ai.search_sessions(w.alice, "%", 50).await.unwrap()),
        ["100% disk"]
    );
    assert_eq!(
        titles(ai.search_sessions(w.alice, "_", 50).await.unwrap()),
        ["web_01 patch"]
    );
    assert!(
        ai.search_sessions(w.alice, "web%01", 50)
            .await
            .unwrap()
            .is_empty()
    );
    // A message's words find their session too, case folded.
    ai.append_messages(
        w.alice,
        ids[2],
        &[NewAiMessage::text(
            AiMessageRole::Assistant,
            "The SPOOLER restarted",
        )],
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        titles(ai.search_sessions(w.alice, "spooler", 50).await.unwrap()),
        ["plain"]
    );
}

async fn usage_commits_with_its_messages_and_outlives_the_session(cx: Ctx) {
    let s = &cx.store;
    let w = world(s).await;
    let ai = s.org(w.a).ai();
    let sess = ai
        .create_session(
            w.alice,
            "costs",
            None,
            audit("ai.session.create", "ai_session"),
        )
        .await
        .unwrap();
    let start = s.clock().now();
    let answer = NewAiMessage::text(AiMessageRole::Assistant, "done");
    ai.append_messages(
        w.alice,
        sess.id,
        &[answer],
        Some(&usage("claude-sonnet-4-5-20250929", Some(1_050_000))),
    )
    .await
    .unwrap();
    // A message that fails to insert takes its usage with it: nothing half-recorded.
    let clash = NewAiMessage::text(AiMessageRole::Assistant, "again");
    let twice = [clash.clone(), clash];
    assert!(
        ai.append_messages(w.alice, sess.id, &twice, Some(&usage("m", Some(5))))
            .await
            .is_err()
    );
    let spent = ai.spent_since(start).await.unwrap();
    assert_eq!((spent.micro_cents, spent.unpriced_messages), (1_050_000, 0));
    assert_eq!(ai.messages(w.alice, sess.id).await.unwrap().len(), 1);
    // An unpriced model: counted as unknown, never as zero.
    ai.append_messages(
        w.alice,
        sess.id,
        &[NewAiMessage::text(AiMessageRole::Assistant, "local")],
        Some(&usage("llama3", None)),
    )
    .await
    .unwrap();
    let spent = ai.spent_since(start).await.unwrap();
    assert_eq!((spent.micro_cents, spent.unpriced_messages), (1_050_000, 1));
    let rows = ai.usage_since(start).await.unwrap();
    assert_eq!(rows.len(), 2);
    let llama = rows.iter().find(|r| r.model == "llama3").unwrap();
    assert_eq!((llama.cost_micro_cents, llama.input_tokens), (None, 100));
    // Deleting the chat leaves the spending.
    ai.delete_session(w.alice, sess.id, audit("ai.session.delete", "ai_session"))
        .await
        .unwrap();
    assert_eq!(ai.spent_since(start).await.unwrap().micro_cents, 1_050_000);
    // Another organization spent nothing.
    assert_eq!(
        s.org(w.b)
            .ai()
            .spent_since(start)
            .await
            .unwrap()
            .micro_cents,
        0
    );
}

async fn closed_and_idle_sessions_take_no_message(cx: Ctx) {
    let s = &cx.store;
    let w = world(s).await;
    let ai = s.org(w.a).ai();
    let sess = ai
        .create_session(w.alice, "t", None, audit("ai.session.create", "ai_session"))
        .await
        .unwrap();
    let closed = ai
        .close_session(w.alice, sess.id, audit("ai.session.close", "ai_session"))
        .await
        .unwrap();
    assert_eq!(closed.status, AiSessionStatus::Closed);
    let err = ai
        .append_messages(
            w.alice,
            sess.id,
            &[NewAiMessage::text(AiMessageRole::User, "hi")],
            None,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
    let idle = ai
        .create_session(
            w.alice,
            "idle",
            None,
            audit("ai.session.create", "ai_session"),
        )
        .await
        .unwrap();
    let swept = s
        .org(w.b)
        .ai()
        .create_session(w.carol, "b", None, audit("ai.session.create", "ai_session"))
        .await
        .unwrap();
    cx.clock.advance(Duration::days(31));
    let fresh = ai
        .create_session(
            w.alice,
            "fresh",
            None,
            audit("ai.session.create", "ai_session"),
        )
        .await
        .unwrap();
    let cutoff = s.clock().now() - Duration::days(30);
    assert!(!ai.expire_if_idle(w.alice, fresh.id, cutoff).await.unwrap());
    assert!(ai.expire_if_idle(w.alice, idle.id, cutoff).await.unwrap());
    assert_eq!(
        ai.get_session(w.alice, idle.id).await.unwrap().status,
        AiSessionStatus::Expired
    );
    // The sweep (every organization) expires the other idle one only; the closed one stays
    // closed, with its history.
    assert_eq!(s.expire_idle_ai_sessions(cutoff).await.unwrap(), 1);
    let b = s.org(w.b).ai();
    assert_eq!(
        b.get_session(w.carol, swept.id).await.unwrap().status,
        AiSessionStatus::Expired
    );
    assert_eq!(
        ai.get_session(w.alice, fresh.id).await.unwrap().status,
        AiSessionStatus::Active
    );
    assert_eq!(
        ai.get_session(w.alice, sess.id).await.unwrap().status,
        AiSessionStatus::Closed
    );
    assert!(
        ai.rename_session(w.alice, idle.id, "  ", audit("x", "y"))
            .await
            .is_err()
    );
}

async fn budgets_are_per_organization(cx: Ctx) {
    let s = &cx.store;
    let w = world(s).await;
    assert_eq!(s.org(w.a).ai().budget().await.unwrap(), AiBudget::default());
    let b = AiBudget {
        daily_cents: Some(500),
        monthly_cents: Some(10_000),
    };
    s.org(w.a)
        .ai()
        .set_budget(b, audit("ai.budget.set", "ai_budget"))
        .await
        .unwrap();
    assert_eq!(s.org(w.a).ai().budget().await.unwrap(), b);
    assert_eq!(s.org(w.b).ai().budget().await.unwrap(), AiBudget::default());
    let neg = AiBudget {
        daily_cents: Some(-1),
        monthly_cents: None,
    };
    assert!(
        s.org(w.a)
            .ai()
            .set_budget(neg, audit("x", "y"))
            .await
            .is_err()
    );
}

on_both_backends!(
    a_session_is_its_owners_alone,
    listing_is_newest_first_and_search_escapes_wildcards,
    usage_commits_with_its_messages_and_outlives_the_session,
    closed_and_idle_sessions_take_no_message,
    budgets_are_per_organization,
);
