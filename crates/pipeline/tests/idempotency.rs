//! Idempotent writes and the response budget, through the whole pipeline, on both backends:
//! a replay answers the stored result (`replayed: true`) and runs nothing, also after a
//! restart; a different call under the same requestId, or one still running, is CONFLICT; a
//! Tier 3 replay answers the same approval request; a cancelled call releases its requestId;
//! an oversized read fails with RESPONSE_TOO_LARGE while an oversized write answers
//! `payloadOmitted`.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{sync::Arc, time::Duration};

use breeze_core::{
    Actor, ApiKeyId, AuditEvent, Clock, DeviceId, DeviceStatus, OrgId, PermissionSet, ScopeSet,
    UserId,
};
use breeze_gateway::{Gateway, GatewayConfig};
use breeze_guard::GuardConfig;
use breeze_limits::MemoryLimiter;
use breeze_pipeline::{
    CallOutcome, Caller, Guard, Pipeline, approvals::ApprovalConfig, idempotency::payload_hash,
};
use breeze_store::{
    ClaimOutcome, NewApiKey, NewDevice, NewUser, Store, on_both_backends, testing::Ctx,
};
use breeze_tools::{CallOptions, ErrorCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn audit() -> AuditEvent {
    AuditEvent::new(Actor::system("test"), "test", "test")
}

struct World {
    org: OrgId,
    device: DeviceId,
    user: UserId,
    key: ApiKeyId,
    scopes: ScopeSet,
}

impl World {
    fn caller(&self) -> Caller {
        let all = Some(PermissionSet::all());
        Caller::api_key(self.key, self.org, self.user, self.scopes, all)
    }
}

async fn world(cx: &Ctx) -> World {
    let s = &cx.store;
    let p = s.create_partner("P", "p", audit()).await.unwrap();
    let org = s
        .create_organization(p.id, "A", "a", audit())
        .await
        .unwrap();
    let site = s
        .org(org.id)
        .tenancy()
        .create_site("HQ", "UTC", audit())
        .await
        .unwrap();
    let device = s
        .org(org.id)
        .devices()
        .create_device(
            NewDevice {
                os_version: "13".into(),
                ..breeze_store::testing::new_device(site.id, "a-host", DeviceStatus::Online)
            },
            audit(),
        )
        .await
        .unwrap();
    // A real user: an approval request names its requester.
    let user = s
        .create_user(
            NewUser {
                partner_id: p.id,
                org_id: None,
                email: "u@p.test".into(),
                name: "U".into(),
                password_hash: "not a login".into(),
            },
            audit(),
        )
        .await
        .unwrap();
    // A real key: an approval request names the requesting credential.
    let key = s
        .insert_api_key(
            NewApiKey {
                org_id: org.id,
                user_id: user.id,
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
    World {
        org: org.id,
        device: device.id,
        user: user.id,
        key,
        scopes: ScopeSet::parse_list("*").unwrap(),
    }
}

/// A pipeline over `store`, as a (re)started process builds it.
fn pipeline(cx: &Ctx, store: &Store, wait: Duration) -> Pipeline {
    let guard = Guard::new(
        GuardConfig::default(),
        Arc::new(MemoryLimiter::new()),
        Arc::new(cx.clock.clone()),
    );
    Pipeline::new(
        store.clone(),
        Gateway::new(store.clone(), GatewayConfig::default()),
        Arc::new(breeze_tools::all()),
        guard,
        ApprovalConfig {
            wait,
            ..ApprovalConfig::default()
        },
    )
}

async fn call(p: &Pipeline, caller: &Caller, tool: &str, args: Value) -> CallOutcome {
    p.call(
        caller,
        tool,
        args,
        CallOptions::default(),
        &CancellationToken::new(),
    )
    .await
}

/// The structured output of a successful call (a replayed one included).
fn output(o: CallOutcome) -> Value {
    match o {
        CallOutcome::Output(raw) => serde_json::from_str(raw.get()).unwrap(),
        CallOutcome::Pending(r) => breeze_pipeline::pending_answer(&r),
        other => panic!("expected an output, got {other:?}"),
    }
}

fn failure(o: CallOutcome) -> breeze_tools::ToolError {
    match o {
        CallOutcome::Failed(e) => e,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn remember(w: &World, summary: &str, request_id: Option<&str>) -> Value {
    let mut args = json!({
        "deviceId": w.device.to_string(), "contextType": "issue", "summary": summary,
    });
    if let Some(id) = request_id {
        args["requestId"] = json!(id);
    }
    args
}

async fn context_rows(cx: &Ctx, w: &World) -> usize {
    cx.store
        .org(w.org)
        .context()
        .device_context(w.device, true)
        .await
        .unwrap()
        .len()
}

/// The same write twice with one requestId: the second answer is the first's, marked
/// replayed, and the handler ran once. The same requestId with another payload is CONFLICT.
async fn a_replay_answers_the_stored_result_and_runs_nothing(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO);
    let me = w.caller();
    let first = output(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "disk", Some("r-1")),
        )
        .await,
    );
    assert!(first.get("replayed").is_none(), "{first}");
    let again = output(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "disk", Some("r-1")),
        )
        .await,
    );
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["id"], first["id"], "the stored result: {again}");
    assert_eq!(context_rows(&cx, &w).await, 1, "the handler ran once");

    let e = failure(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "other", Some("r-1")),
        )
        .await,
    );
    assert_eq!(e.code, ErrorCode::Conflict);
    assert!(!e.retryable);
    assert!(
        e.message.contains("was used for a different call"),
        "{}",
        e.message
    );
    // Another tool under the same requestId is a different call too.
    let group = json!({ "action": "add_devices", "groupId": uuid::Uuid::nil().to_string(),
                        "deviceIds": [w.device.to_string()], "requestId": "r-1" });
    assert_eq!(
        failure(call(&p, &me, "manage_groups", group).await).code,
        ErrorCode::Conflict
    );
    assert_eq!(context_rows(&cx, &w).await, 1);

    // Without a requestId every call runs; a new requestId runs once more.
    output(call(&p, &me, "set_device_context", remember(&w, "disk", None)).await);
    output(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "disk", Some("r-2")),
        )
        .await,
    );
    assert_eq!(context_rows(&cx, &w).await, 3);

    // Another principal's requestId is its own.
    let other = World {
        user: UserId::new(),
        key: ApiKeyId::new(),
        ..w
    };
    let theirs = output(
        call(
            &p,
            &other.caller(),
            "set_device_context",
            remember(&other, "x", Some("r-1")),
        )
        .await,
    );
    assert!(theirs.get("replayed").is_none(), "{theirs}");
}

/// A requestId is checked on a write (1 to 200 characters, a string) and ignored on a read.
async fn a_request_id_is_checked_on_writes_and_ignored_on_reads(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO);
    let me = w.caller();
    for bad in [json!(""), json!("x".repeat(201)), json!(17)] {
        let mut args = remember(&w, "disk", None);
        args["requestId"] = bad.clone();
        let e = failure(call(&p, &me, "set_device_context", args).await);
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        assert!(e.message.contains("requestId"), "{}", e.message);
    }
    assert_eq!(context_rows(&cx, &w).await, 0);
    let ok = remember(&w, "disk", Some(&"é".repeat(200)));
    output(call(&p, &me, "set_device_context", ok).await);
    // A read (a tool without writes, and a read action of a tool with writes) ignores it.
    for (tool, args) in [
        ("query_devices", json!({ "requestId": "q-1" })),
        (
            "manage_groups",
            json!({ "action": "list", "requestId": "q-1" }),
        ),
    ] {
        for _ in 0..2 {
            let out = output(call(&p, &me, tool, args.clone()).await);
            assert!(out.get("replayed").is_none(), "{tool}: {out}");
        }
    }
}

/// The record is durable: a restarted process (a new store and pipeline on the same database)
/// replays it.
async fn a_replay_survives_a_restart(cx: Ctx) {
    let w = world(&cx).await;
    let me = w.caller();
    let first = {
        let p = pipeline(&cx, &cx.store, Duration::ZERO);
        output(
            call(
                &p,
                &me,
                "set_device_context",
                remember(&w, "disk", Some("boot")),
            )
            .await,
        )
    };
    let reopened = cx.store.reopen().await.unwrap();
    let p = pipeline(&cx, &reopened, Duration::ZERO);
    let again = output(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "disk", Some("boot")),
        )
        .await,
    );
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["id"], first["id"]);
    assert_eq!(context_rows(&cx, &w).await, 1);
}

/// The same call while the first is still running: CONFLICT, retryable; nothing ran.
async fn a_call_still_running_is_a_retryable_conflict(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO);
    let me = w.caller();
    let args = remember(&w, "disk", None);
    let claimed = cx
        .store
        .org(w.org)
        .idempotency()
        .claim_request(
            &me.actor(),
            "busy",
            "set_device_context",
            &payload_hash("set_device_context", &args),
            cx.clock.now(),
            breeze_store::IDEMPOTENCY_STALE_AFTER,
        )
        .await
        .unwrap();
    assert!(matches!(claimed, ClaimOutcome::Claimed(_)));
    let e = failure(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "disk", Some("busy")),
        )
        .await,
    );
    assert_eq!(e.code, ErrorCode::Conflict);
    assert!(e.retryable, "in progress is worth retrying");
    assert_eq!(context_rows(&cx, &w).await, 0);
}

/// A Tier 3 call answered "pending": its replay is the same pending answer (the same approval
/// request), and no second request is made.
async fn a_tier_3_replay_answers_the_same_approval(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO);
    let me = w.caller();
    let args = json!({ "action": "create", "name": "Servers", "requestId": "t3" });
    let first = output(call(&p, &me, "manage_groups", args.clone()).await);
    assert_eq!(first["status"], "pending_approval", "{first}");
    let again = output(call(&p, &me, "manage_groups", args).await);
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["approvalId"], first["approvalId"]);
    let org = cx.store.org(w.org);
    assert_eq!(
        org.approvals()
            .list_approvals(true, 50)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(org.tenancy().list_groups().await.unwrap().is_empty());
}

/// A cancelled call releases its requestId: the retry runs (a new approval request), it is not
/// answered with the cancellation.
async fn a_cancelled_call_releases_its_request_id(cx: Ctx) {
    let w = world(&cx).await;
    let waiting = pipeline(&cx, &cx.store, Duration::from_secs(30));
    let me = w.caller();
    let args = json!({ "action": "create", "name": "Servers", "requestId": "c-1" });
    let cancel = CancellationToken::new();
    cancel.cancel();
    let out = waiting
        .call(
            &me,
            "manage_groups",
            args.clone(),
            CallOptions::default(),
            &cancel,
        )
        .await;
    failure(out);
    let p = pipeline(&cx, &cx.store, Duration::ZERO);
    let retry = output(call(&p, &me, "manage_groups", args).await);
    assert_eq!(retry["status"], "pending_approval", "{retry}");
    assert!(retry.get("replayed").is_none(), "the retry ran: {retry}");
    // The cancelled call's request is withdrawn by a task of its own (the call may be dropped
    // at any await), so it may still be on its way.
    let mut pending = Vec::new();
    for _ in 0..100 {
        pending = cx
            .store
            .org(w.org)
            .approvals()
            .list_approvals(true, 50)
            .await
            .unwrap();
        if pending.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(pending.len(), 1, "the cancelled request was withdrawn");
    assert_eq!(retry["approvalId"], json!(pending[0].id));
}

/// Over the budget a read fails (saying the size and the limit) and a write answers
/// `payloadOmitted` — the change was made — also on its replay.
async fn the_response_budget_fails_reads_and_trims_writes(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO).with_max_response_bytes(40);
    let me = w.caller();
    let e = failure(call(&p, &me, "query_devices", json!({})).await);
    assert_eq!(e.code, ErrorCode::ResponseTooLarge);
    assert!(!e.retryable);
    assert!(
        e.message.contains("above the server's limit of 40 bytes"),
        "{}",
        e.message
    );
    assert!(
        e.hint.as_deref().unwrap().contains("smaller limit"),
        "{e:?}"
    );

    let out = output(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "disk", Some("b-1")),
        )
        .await,
    );
    assert_eq!(out["status"], "applied", "{out}");
    assert_eq!(out["payloadOmitted"], true);
    assert!(out["bytes"].as_u64().unwrap() > 40, "{out}");
    assert_eq!(context_rows(&cx, &w).await, 1, "the write happened");
    let again = output(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "disk", Some("b-1")),
        )
        .await,
    );
    assert_eq!(again["replayed"], true);
    assert_eq!(again["payloadOmitted"], true);
    assert_eq!(context_rows(&cx, &w).await, 1);

    // 0 is off.
    let off = pipeline(&cx, &cx.store, Duration::ZERO).with_max_response_bytes(0);
    let out = output(call(&off, &me, "query_devices", json!({})).await);
    assert!(out.to_string().contains("a-host"), "{out}");
}

/// A failed write is stored too (it is not worth retrying): its replay is the same error,
/// marked replayed.
async fn a_failed_write_replays_its_error(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO);
    let me = w.caller();
    let mut args = remember(&w, "disk", Some("nf"));
    args["deviceId"] = json!(uuid::Uuid::nil().to_string());
    let e = failure(call(&p, &me, "set_device_context", args.clone()).await);
    assert_eq!(e.code, ErrorCode::NotFound);
    match call(&p, &me, "set_device_context", args).await {
        CallOutcome::ReplayedError(raw) => {
            let v: Value = serde_json::from_str(raw.get()).unwrap();
            assert_eq!(v["replayed"], true, "{v}");
            assert_eq!(v["error"]["code"], "NOT_FOUND", "{v}");
            assert!(v["error"]["hint"].is_string(), "{v}");
        }
        other => panic!("expected a replayed error, got {other:?}"),
    }
}

/// A batch's answer and error flag.
fn batch(o: CallOutcome) -> (Value, bool) {
    match o {
        CallOutcome::Batch { answer, is_error } => {
            (serde_json::from_str(answer.get()).unwrap(), is_error)
        }
        other => panic!("expected a batch answer, got {other:?}"),
    }
}

fn batch_of(w: &World, mode: &str, summaries: &[&str], request_id: Option<&str>) -> Value {
    let items: Vec<Value> = summaries
        .iter()
        .map(|s| json!({ "clientRef": s, "input": remember(w, s, None) }))
        .collect();
    let mut args = json!({ "items": items, "mode": mode });
    if let Some(id) = request_id {
        args["requestId"] = json!(id);
    }
    args
}

/// A committed batch takes one requestId for the whole batch: the replay answers the stored
/// batch answer, marked replayed, and runs no item again; other items under the same
/// requestId are CONFLICT; a preview ignores it; a malformed one is refused naming it.
async fn a_batch_replays_under_its_request_id(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO);
    let me = w.caller();

    let (preview, _) = batch(
        call(
            &p,
            &me,
            "set_device_context",
            batch_of(&w, "preview", &["a", "b"], Some("b-1")),
        )
        .await,
    );
    assert_eq!(preview["outcome"], "previewed", "{preview}");
    assert_eq!(context_rows(&cx, &w).await, 0);

    let (first, is_error) = batch(
        call(
            &p,
            &me,
            "set_device_context",
            batch_of(&w, "commit", &["a", "b"], Some("b-1")),
        )
        .await,
    );
    assert!(!is_error, "{first}");
    assert_eq!(first["counts"]["ok"], 2, "{first}");
    assert!(first.get("replayed").is_none(), "{first}");
    assert_eq!(context_rows(&cx, &w).await, 2);

    let (again, is_error) = batch(
        call(
            &p,
            &me,
            "set_device_context",
            batch_of(&w, "commit", &["a", "b"], Some("b-1")),
        )
        .await,
    );
    assert!(!is_error);
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["items"], first["items"], "the stored answer");
    assert_eq!(context_rows(&cx, &w).await, 2, "no item ran again");

    let e = failure(
        call(
            &p,
            &me,
            "set_device_context",
            batch_of(&w, "commit", &["a", "c"], Some("b-1")),
        )
        .await,
    );
    assert_eq!(e.code, ErrorCode::Conflict, "{e:?}");
    // The batch's requestId is not a single call's: the same key for one call is a conflict.
    let e = failure(
        call(
            &p,
            &me,
            "set_device_context",
            remember(&w, "a", Some("b-1")),
        )
        .await,
    );
    assert_eq!(e.code, ErrorCode::Conflict, "{e:?}");
    assert_eq!(context_rows(&cx, &w).await, 2);

    for bad in [json!(""), json!(7), json!("x".repeat(201))] {
        let mut args = batch_of(&w, "commit", &["d"], None);
        args["requestId"] = bad;
        let e = failure(call(&p, &me, "set_device_context", args).await);
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{e:?}");
        assert!(e.message.contains("requestId"), "{}", e.message);
    }
    assert_eq!(context_rows(&cx, &w).await, 2);
}

/// A batch is held to the response budget: a preview over it fails like a read and runs
/// nothing; a commit keeps every item's status, omits what they returned, and still ran.
async fn a_batch_is_held_to_the_response_budget(cx: Ctx) {
    let w = world(&cx).await;
    let p = pipeline(&cx, &cx.store, Duration::ZERO).with_max_response_bytes(600);
    let me = w.caller();
    let refs = ["a", "b", "c", "d", "e", "f"];
    let many: Vec<String> = (0..12).map(|i| format!("item-{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = failure(
        call(
            &p,
            &me,
            "set_device_context",
            batch_of(&w, "preview", &many, None),
        )
        .await,
    );
    assert_eq!(e.code, ErrorCode::ResponseTooLarge, "{e:?}");
    assert_eq!(context_rows(&cx, &w).await, 0);

    let (out, is_error) = batch(
        call(
            &p,
            &me,
            "set_device_context",
            batch_of(&w, "commit", &refs, Some("q")),
        )
        .await,
    );
    assert!(!is_error, "{out}");
    assert_eq!(out["payloadOmitted"], true, "{out}");
    assert!(out["bytes"].as_u64().unwrap() > 600, "{out}");
    assert_eq!(out["counts"]["ok"], 6, "{out}");
    assert!(out.to_string().len() <= 600, "{out}");
    for item in out["items"].as_array().unwrap() {
        assert_eq!(item["status"], "ok", "{out}");
        assert!(item.get("output").is_none(), "{out}");
    }
    assert_eq!(context_rows(&cx, &w).await, 6, "every item ran");
    // The replay is the trimmed answer too.
    let (again, _) = batch(
        call(
            &p,
            &me,
            "set_device_context",
            batch_of(&w, "commit", &refs, Some("q")),
        )
        .await,
    );
    assert_eq!(again["replayed"], true);
    assert_eq!(again["payloadOmitted"], true);
    assert_eq!(context_rows(&cx, &w).await, 6);
}

on_both_backends!(
    a_replay_answers_the_stored_result_and_runs_nothing,
    a_request_id_is_checked_on_writes_and_ignored_on_reads,
    a_replay_survives_a_restart,
    a_call_still_running_is_a_retryable_conflict,
    a_tier_3_replay_answers_the_same_approval,
    a_cancelled_call_releases_its_request_id,
    the_response_budget_fails_reads_and_trims_writes,
    a_failed_write_replays_its_error,
    a_batch_replays_under_its_request_id,
    a_batch_is_held_to_the_response_budget,
);
