//! Chat turns end to end on both databases, against the stand-in provider: the events in their
//! order and always ending in `done`, messages and usage stored as the provider reported them,
//! tool calls through the one pipeline as the chat's caller (audited, Tier 3 as the one durable
//! approval request, approved, rejected or expired), and the refusals that fail closed.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod stand_in;

use std::{sync::Arc, time::Duration};

use breeze_assistant::{
    Assistant, AssistantConfig, BeginError, ChatEvent, ProviderConfig, ProviderKind, Speaker,
};
use breeze_core::{
    Actor, ActorType, AiMessageRole, AiSessionId, AiToolStatus, ApprovalStatus, AuditEvent,
    Decision, OrgId, PermissionSet, UserId,
};
use breeze_gateway::{Gateway, GatewayConfig};
use breeze_guard::GuardConfig;
use breeze_limits::{MemoryLimiter, RateLimiter, RedisLimiter};
use breeze_pipeline::{
    Guard, Pipeline,
    approvals::{self, ApprovalConfig, DecisionRequest},
};
use breeze_store::{AiBudget, AuditFilter, NewUser, on_both_backends, testing::Ctx};
use serde_json::{Value, json};
use stand_in::{Scripted, StandIn, anthropic, openai};
use tokio::sync::mpsc;

fn audit() -> AuditEvent {
    AuditEvent::new(Actor::system("test"), "test", "test")
}

struct World {
    cx: Ctx,
    provider: StandIn,
    assistant: Assistant,
    pipeline: Pipeline,
    org: OrgId,
    user: UserId,
    session: AiSessionId,
}

impl World {
    fn speaker(&self) -> Speaker {
        Speaker {
            org_id: self.org,
            org_name: "ACME".into(),
            user_id: self.user,
            user_name: "Tess".into(),
            user_email: "tess@acme.test".into(),
            permissions: Some(PermissionSet::all()),
        }
    }

    /// Sends `text` and returns the turn's events, and the running turn's receiver for tests
    /// that act while it runs.
    async fn start(&self, text: &str) -> mpsc::UnboundedReceiver<ChatEvent> {
        let begun = self
            .assistant
            .begin(self.speaker(), self.session, text)
            .await
            .unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let a = self.assistant.clone();
        tokio::spawn(async move { a.run(begun, tx).await });
        rx
    }

    async fn turn(&self, text: &str) -> Vec<ChatEvent> {
        drain(self.start(text).await).await
    }

    async fn decide(&self, approval: uuid::Uuid, decision: Decision) {
        let user = self.cx.store.get_user(self.user).await.unwrap();
        approvals::decide(
            &self.cx.store,
            self.pipeline.registry(),
            &user,
            Actor::new(ActorType::User, self.user),
            DecisionRequest {
                id: approval,
                decision,
                reason: Some("not tonight".into()),
                request_id: None,
            },
        )
        .await
        .unwrap();
        self.pipeline.approvals().notify_decided();
    }
}

async fn drain(mut rx: mpsc::UnboundedReceiver<ChatEvent>) -> Vec<ChatEvent> {
    let mut v = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .unwrap()
    {
        let done = e == ChatEvent::Done;
        v.push(e);
        if done {
            break;
        }
    }
    v
}

fn names(events: &[ChatEvent]) -> Vec<&'static str> {
    events.iter().map(ChatEvent::name).collect()
}

async fn world_with(
    cx: Ctx,
    kind: Option<ProviderKind>,
    limiter: Arc<dyn RateLimiter>,
    tweak: impl FnOnce(&mut AssistantConfig),
) -> World {
    let s = &cx.store;
    let p = s.create_partner("P", "p", audit()).await.unwrap();
    let org = s
        .create_organization(p.id, "ACME", "acme", audit())
        .await
        .unwrap();
    let user = s
        .create_user(
            NewUser {
                partner_id: p.id,
                org_id: Some(org.id),
                email: "tess@acme.test".into(),
                name: "Tess".into(),
                password_hash: String::new(),
            },
            audit(),
        )
        .await
        .unwrap();
    let admin = s.find_role(p.id, "administrator").await.unwrap();
    s.assign_role(user.id, org.id, admin.id, audit())
        .await
        .unwrap();
    let guard = Guard::new(
        GuardConfig::default(),
        Arc::new(MemoryLimiter::new()),
        Arc::new(cx.clock.clone()),
    );
    let pipeline = Pipeline::new(
        s.clone(),
        Gateway::new(s.clone(), GatewayConfig::default()),
        Arc::new(breeze_tools::all()),
        guard,
        ApprovalConfig {
            poll: Duration::from_millis(50),
            ..ApprovalConfig::default()
        },
    );
    let provider = StandIn::start().await;
    let mut config = AssistantConfig {
        provider: kind.map(|k| {
            let mut c = ProviderConfig::new(k, "claude-sonnet-4-5-20250929", &provider.url);
            c.api_key = Some("sk-test".into());
            c.backoff = Duration::from_millis(10);
            c
        }),
        ..AssistantConfig::default()
    };
    tweak(&mut config);
    let assistant = Assistant::new(s.clone(), pipeline.clone(), limiter, config);
    let ctx = json!({"type": "device", "id": "d1", "hostname": "ACME-FS01"});
    let session = s
        .org(org.id)
        .ai()
        .create_session(user.id, "FS01", Some(&ctx), audit())
        .await
        .unwrap()
        .id;
    World {
        cx,
        provider,
        assistant,
        pipeline,
        org: org.id,
        user: user.id,
        session,
    }
}

async fn world(cx: Ctx) -> World {
    world_with(
        cx,
        Some(ProviderKind::Anthropic),
        Arc::new(MemoryLimiter::new()),
        |_| {},
    )
    .await
}

async fn text_only_streams_stores_and_costs(cx: Ctx) {
    let w = world(cx).await;
    w.provider.script([Scripted::stream(anthropic::text(
        &["FS01 ", "is fine."],
        1200,
        80,
    ))]);
    let events = w.turn("why is ACME-FS01 slow?").await;
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_delta",
            "content_delta",
            "message_end",
            "done"
        ]
    );
    assert_eq!(
        events[3],
        ChatEvent::MessageEnd {
            input_tokens: 1200,
            output_tokens: 80
        }
    );
    let ChatEvent::MessageStart { message_id } = events[0] else {
        panic!()
    };
    let ai = w.cx.store.org(w.org).ai();
    let msgs = ai.messages(w.user, w.session).await.unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(
        (msgs[0].role, msgs[0].content.as_str()),
        (AiMessageRole::User, "why is ACME-FS01 slow?")
    );
    assert_eq!(
        (msgs[1].id, msgs[1].content.as_str()),
        (message_id, "FS01 is fine.")
    );
    // Usage is what the provider reported, costed at Sonnet's 300/1500 cents per million.
    let rows = ai
        .usage_since(w.cx.store.clock().now() - chrono::Duration::days(1))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].input_tokens, rows[0].output_tokens), (1200, 80));
    assert_eq!(rows[0].cost_micro_cents, Some(1200 * 300 + 80 * 1500));
    // The system prompt names the organization, the person and the page.
    let sent = &w.provider.received()[0].body;
    let system = sent["system"].as_str().unwrap();
    assert!(
        system.contains("ACME")
            && system.contains("tess@acme.test")
            && system.contains("ACME-FS01"),
        "{system}"
    );
}

async fn a_tool_call_runs_through_the_pipeline_and_the_model_continues(cx: Ctx) {
    let w = world(cx).await;
    w.provider.script([
        Scripted::stream(anthropic::tools(
            "Checking.",
            &[
                ("toolu_1", "query_devices", &["{\"limit\": 5}"]),
                ("toolu_2", "manage_groups", &["{\"action\":\"list\"}"]),
            ],
            100,
            20,
        )),
        Scripted::stream(anthropic::text(&["No devices yet."], 300, 10)),
    ]);
    let events = w.turn("what do I have?").await;
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_delta",
            "message_end",
            "tool_use_start",
            "tool_result",
            "tool_use_start",
            "tool_result",
            "message_start",
            "content_delta",
            "message_end",
            "done",
        ]
    );
    let ChatEvent::ToolResult {
        is_error, output, ..
    } = &events[4]
    else {
        panic!()
    };
    assert!(!is_error, "{output}");
    // The second request carries both results back, by id, in one user turn.
    let second = &w.provider.received()[1].body;
    let results = &second["messages"][2];
    assert_eq!(results["role"], "user");
    assert_eq!(results["content"][0]["tool_use_id"], "toolu_1");
    assert_eq!(results["content"][1]["tool_use_id"], "toolu_2");
    // Each call is an execution row and an audit record of the chat's own actor.
    let ai = w.cx.store.org(w.org).ai();
    let execs = ai.executions(w.user, w.session).await.unwrap();
    assert_eq!(execs.len(), 2);
    assert!(execs.iter().all(|e| e.status == AiToolStatus::Completed));
    let page =
        w.cx.store
            .org(w.org)
            .audit()
            .query_audit(
                &AuditFilter {
                    action: Some("ai.tools.call".into()),
                    ..AuditFilter::default()
                },
                None,
                50,
            )
            .await
            .unwrap();
    assert_eq!(page.records.len(), 2);
    let actor = &page.records[0].event.actor;
    assert_eq!(
        (actor.kind, actor.id.clone()),
        (ActorType::AiChat, w.session.to_string())
    );
    // Two responses' usage.
    let rows = ai
        .usage_since(w.cx.store.clock().now() - chrono::Duration::days(1))
        .await
        .unwrap();
    assert_eq!(rows[0].messages, 2);
    assert_eq!((rows[0].input_tokens, rows[0].output_tokens), (400, 30));
}

/// A Tier 3 call: the one approval request (pointing back at the session), announced, the turn
/// waits; approved by a person through the same decision every door uses, it runs and the
/// model continues.
async fn tier3_waits_for_approval_then_runs(cx: Ctx) {
    let w = world(cx).await;
    w.provider.script([
        Scripted::stream(anthropic::tools(
            "",
            &[(
                "toolu_g",
                "manage_groups",
                &["{\"action\":\"create\",\"name\":\"web servers\"}"],
            )],
            50,
            10,
        )),
        Scripted::stream(anthropic::text(&["Created."], 60, 5)),
    ]);
    let mut rx = w.start("group the web servers").await;
    let mut seen = Vec::new();
    let execution = loop {
        let e = rx.recv().await.unwrap();
        seen.push(e.name());
        if let ChatEvent::ApprovalRequired {
            execution_id,
            tool_name,
            description,
            ..
        } = &e
        {
            assert_eq!(tool_name, "manage_groups");
            assert!(description.contains("manage_groups"), "{description}");
            break *execution_id;
        }
    };
    assert_eq!(
        seen,
        [
            "message_start",
            "message_end",
            "tool_use_start",
            "approval_required"
        ]
    );
    let ai = w.cx.store.org(w.org).ai();
    let exec = ai
        .get_execution(w.user, w.session, execution)
        .await
        .unwrap();
    assert_eq!(exec.status, AiToolStatus::Pending);
    let approval_id = exec.approval_id.unwrap();
    let approval =
        w.cx.store
            .org(w.org)
            .approvals()
            .get_approval(approval_id)
            .await
            .unwrap();
    assert_eq!(approval.ai_session_id, Some(w.session));
    assert_eq!((approval.api_key_id, approval.oauth_grant_id), (None, None));
    assert_eq!(
        w.cx.store
            .org(w.org)
            .approvals()
            .list_approvals(true, 50)
            .await
            .unwrap()
            .len(),
        1,
        "one record"
    );
    w.decide(approval_id, Decision::Approve).await;
    let rest = drain(rx).await;
    assert_eq!(
        names(&rest),
        [
            "tool_result",
            "message_start",
            "content_delta",
            "message_end",
            "done"
        ]
    );
    let ChatEvent::ToolResult {
        is_error: false, ..
    } = &rest[0]
    else {
        panic!("{:?}", rest[0])
    };
    let exec = ai
        .get_execution(w.user, w.session, execution)
        .await
        .unwrap();
    assert_eq!(exec.status, AiToolStatus::Completed);
    let approval =
        w.cx.store
            .org(w.org)
            .approvals()
            .get_approval(approval_id)
            .await
            .unwrap();
    assert_eq!(approval.status, ApprovalStatus::Completed);
    let groups = w.cx.store.org(w.org).tenancy().list_groups().await.unwrap();
    assert_eq!(groups.len(), 1, "the approved call ran once");
    // Every row the call wrote names the chat session where it can be queried: the rows of the
    // chat's own acts as their actor (the request, the handler's change, the chat's call
    // record), the person's decision in its details.
    let audit = w.cx.store.org(w.org).audit();
    let by_session = audit
        .query_audit(
            &AuditFilter {
                actor_type: Some(ActorType::AiChat),
                actor_id: Some(w.session.to_string()),
                ..AuditFilter::default()
            },
            None,
            50,
        )
        .await
        .unwrap();
    let mut actions: Vec<&str> = by_session
        .records
        .iter()
        .map(|r| r.event.action.as_str())
        .collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        ["ai.tools.call", "approval.request", "device_group.create"]
    );
    let decided = audit
        .query_audit(
            &AuditFilter {
                action: Some("approval.approve".into()),
                resource_id: Some(approval_id.to_string()),
                ..AuditFilter::default()
            },
            None,
            50,
        )
        .await
        .unwrap();
    assert_eq!(decided.records.len(), 1);
    assert_eq!(
        decided.records[0].event.details["aiSessionId"],
        w.session.to_string()
    );
}

async fn a_rejected_or_expired_call_is_a_tool_error_and_the_turn_goes_on(cx: Ctx) {
    let w = world(cx).await;
    let create = || {
        Scripted::stream(anthropic::tools(
            "",
            &[(
                "toolu_g",
                "manage_groups",
                &["{\"action\":\"create\",\"name\":\"g\"}"],
            )],
            50,
            10,
        ))
    };
    w.provider.script([
        create(),
        Scripted::stream(anthropic::text(&["Understood."], 60, 5)),
    ]);
    let mut rx = w.start("make a group").await;
    let approval = loop {
        if let ChatEvent::ApprovalRequired { execution_id, .. } = rx.recv().await.unwrap() {
            let e =
                w.cx.store
                    .org(w.org)
                    .ai()
                    .get_execution(w.user, w.session, execution_id)
                    .await
                    .unwrap();
            break (execution_id, e.approval_id.unwrap());
        }
    };
    w.decide(approval.1, Decision::Deny).await;
    let rest = drain(rx).await;
    let ChatEvent::ToolResult {
        is_error: true,
        output,
        ..
    } = &rest[0]
    else {
        panic!("{rest:?}")
    };
    assert!(output.to_string().contains("denied"), "{output}");
    assert_eq!(names(&rest).last(), Some(&"done"));
    assert!(
        names(&rest).contains(&"content_delta"),
        "the model continued"
    );
    let ai = w.cx.store.org(w.org).ai();
    assert_eq!(
        ai.get_execution(w.user, w.session, approval.0)
            .await
            .unwrap()
            .status,
        AiToolStatus::Rejected
    );
    // Five minutes without a decision (on the fake clock): expired, rejected.
    w.provider
        .script([create(), Scripted::stream(anthropic::text(&["Ok."], 60, 5))]);
    let mut rx = w.start("again").await;
    let execution = loop {
        if let ChatEvent::ApprovalRequired { execution_id, .. } = rx.recv().await.unwrap() {
            break execution_id;
        }
    };
    w.cx.clock.advance(chrono::Duration::seconds(301));
    let rest = drain(rx).await;
    let ChatEvent::ToolResult {
        is_error: true,
        output,
        ..
    } = &rest[0]
    else {
        panic!("{rest:?}")
    };
    assert!(output.to_string().contains("expired"), "{output}");
    assert_eq!(
        ai.get_execution(w.user, w.session, execution)
            .await
            .unwrap()
            .status,
        AiToolStatus::Rejected
    );
    assert!(
        w.cx.store
            .org(w.org)
            .tenancy()
            .list_groups()
            .await
            .unwrap()
            .is_empty()
    );
}

/// While a Tier 3 call waits, the database stops answering for its approval: after five
/// failed polls in a row the wait gives up (circuit breaker), the call is a tool error, and the
/// turn ends with an `error` event, then `done`.
async fn the_approval_wait_gives_up_after_five_database_errors(cx: Ctx) {
    let w = world(cx).await;
    w.provider.script([Scripted::stream(anthropic::tools(
        "",
        &[(
            "t",
            "manage_groups",
            &["{\"action\":\"create\",\"name\":\"g\"}"],
        )],
        5,
        5,
    ))]);
    let mut rx = w.start("make a group").await;
    loop {
        if rx.recv().await.unwrap().name() == "approval_required" {
            break;
        }
    }
    w.cx.store
        .raw_execute("ALTER TABLE approval_requests RENAME TO approval_requests_gone")
        .await
        .unwrap();
    let rest = drain(rx).await;
    assert_eq!(names(&rest), ["tool_result", "error", "done"], "{rest:?}");
    let ChatEvent::Error { message } = &rest[1] else {
        panic!()
    };
    assert!(message.contains("5 times in a row"), "{message}");
    assert_eq!(
        w.provider.received().len(),
        1,
        "the model was not asked again"
    );
}

async fn a_chat_wait_shorter_than_the_expiry_rejects_the_request(cx: Ctx) {
    let w = world_with(
        cx,
        Some(ProviderKind::Anthropic),
        Arc::new(MemoryLimiter::new()),
        |c| {
            c.approval_timeout = Duration::from_millis(300);
        },
    )
    .await;
    w.provider.script([
        Scripted::stream(anthropic::tools(
            "",
            &[(
                "t",
                "manage_groups",
                &["{\"action\":\"create\",\"name\":\"g\"}"],
            )],
            5,
            5,
        )),
        Scripted::stream(anthropic::text(&["Ok."], 5, 5)),
    ]);
    let events = w.turn("make a group").await;
    let result = events.iter().find(|e| e.name() == "tool_result").unwrap();
    let ChatEvent::ToolResult {
        is_error: true,
        output,
        ..
    } = result
    else {
        panic!()
    };
    assert!(
        output.to_string().contains("no decision in the chat"),
        "{output}"
    );
    let pending =
        w.cx.store
            .org(w.org)
            .approvals()
            .list_approvals(true, 50)
            .await
            .unwrap();
    assert!(
        pending.is_empty(),
        "the request can no longer be approved: {pending:?}"
    );
}

async fn openai_compatible_provider_runs_the_same_loop(cx: Ctx) {
    let w = world_with(
        cx,
        Some(ProviderKind::OpenAi),
        Arc::new(MemoryLimiter::new()),
        |_| {},
    )
    .await;
    w.provider.script([
        Scripted::stream(openai::tools(
            &[("call_1", "query_devices", &["{}"])],
            10,
            5,
        )),
        Scripted::stream(openai::text(&["None."], 20, 3)),
    ]);
    let events = w.turn("devices?").await;
    assert_eq!(
        names(&events),
        [
            "message_start",
            "message_end",
            "tool_use_start",
            "tool_result",
            "message_start",
            "content_delta",
            "message_end",
            "done"
        ]
    );
    let second = &w.provider.received()[1].body;
    assert_eq!(second["messages"][3]["role"], "tool");
    assert_eq!(second["messages"][3]["tool_call_id"], "call_1");
}

async fn provider_failures_end_with_error_then_done_and_keep_the_question(cx: Ctx) {
    let w = world(cx).await;
    let mut cut = anthropic::text(&["Half"], 1, 1);
    cut.pop();
    w.provider.script([
        Scripted::error(429, "rate_limit_error", "slow").header("retry-after", "0"),
        Scripted::stream(cut),
    ]);
    let events = w.turn("first question").await;
    assert_eq!(
        names(&events),
        ["message_start", "content_delta", "error", "done"]
    );
    let ChatEvent::Error { message } = &events[2] else {
        panic!()
    };
    assert!(message.contains("message_stop"), "{message}");
    let msgs =
        w.cx.store
            .org(w.org)
            .ai()
            .messages(w.user, w.session)
            .await
            .unwrap();
    assert_eq!(msgs.len(), 1, "the question is kept, no half answer stored");
    assert_eq!(msgs[0].content, "first question");
    assert_eq!(w.provider.received().len(), 2, "the 429 was retried");
}

async fn no_provider_budget_and_limiter_refuse_before_the_provider(cx: Ctx) {
    let w = world_with(cx, None, Arc::new(MemoryLimiter::new()), |_| {}).await;
    let events = w.turn("hello").await;
    assert_eq!(names(&events), ["error", "done"]);
    let ChatEvent::Error { message } = &events[0] else {
        panic!()
    };
    assert!(message.contains("BREEZE_AI_PROVIDER"), "{message}");
    assert!(
        w.cx.store
            .org(w.org)
            .ai()
            .messages(w.user, w.session)
            .await
            .unwrap()
            .is_empty()
    );
    // Another person's session: not found, nothing stored.
    let other = w.assistant.begin(
        Speaker {
            user_id: UserId::new(),
            ..w.speaker()
        },
        w.session,
        "hi",
    );
    assert!(matches!(other.await, Err(BeginError::NotFound)));
}

async fn budgets_and_the_limiter_fail_closed(cx: Ctx) {
    let w = world(cx).await;
    let ai = w.cx.store.org(w.org).ai();
    ai.set_budget(
        AiBudget {
            daily_cents: Some(1),
            monthly_cents: None,
        },
        audit(),
    )
    .await
    .unwrap();
    // 1200 input tokens of Sonnet is 0.36 cents: under; then 10k more is 3 cents: over.
    w.provider.script([
        Scripted::stream(anthropic::text(&["a"], 1200, 0)),
        Scripted::stream(anthropic::text(&["b"], 10_000, 0)),
    ]);
    assert_eq!(names(&w.turn("one").await).last(), Some(&"done"));
    assert!(w.assistant.budget_refusal(w.org).await.is_none());
    w.turn("two").await;
    let events = w.turn("three").await;
    assert_eq!(names(&events), ["error", "done"]);
    assert_eq!(
        w.provider.received().len(),
        2,
        "the provider was not called"
    );
    // The budget cannot be read: refused too.
    w.cx.store
        .raw_execute("DROP TABLE ai_budgets")
        .await
        .unwrap();
    let why = w.assistant.budget_refusal(w.org).await.unwrap();
    assert!(why.contains("cannot be checked"), "{why}");
}

async fn a_limiter_that_cannot_decide_refuses(cx: Ctx) {
    // Redis unreachable: the per-person message limit cannot decide, so the turn is refused.
    let down: Arc<dyn RateLimiter> =
        Arc::new(RedisLimiter::new("redis://127.0.0.1:1/", "t:").unwrap());
    let w = world_with(cx, Some(ProviderKind::Anthropic), down, |_| {}).await;
    let events = w.turn("hello").await;
    assert_eq!(names(&events), ["error", "done"]);
    let ChatEvent::Error { message } = &events[0] else {
        panic!()
    };
    assert!(message.contains("rate limiter is unavailable"), "{message}");
    assert!(w.provider.received().is_empty());
}

/// A context window too small for the whole conversation: old tool results are trimmed and
/// the turn still runs.
async fn a_long_conversation_is_trimmed_to_the_window(cx: Ctx) {
    let w = world_with(
        cx,
        Some(ProviderKind::Anthropic),
        Arc::new(MemoryLimiter::new()),
        |c| {
            let p = c.provider.as_mut().unwrap();
            p.context_tokens = 40_000;
            p.max_tokens = 1000;
        },
    )
    .await;
    let ai = w.cx.store.org(w.org).ai();
    let big: Value = json!({"rows": "x".repeat(30_000)});
    for i in 0..3 {
        ai.append_messages(
            w.user,
            w.session,
            &[
                breeze_store::NewAiMessage::text(AiMessageRole::User, format!("q{i}")),
                breeze_store::NewAiMessage {
                    tool_use_id: Some(format!("t{i}")),
                    tool_name: Some("query_devices".into()),
                    payload: Some(json!({})),
                    ..breeze_store::NewAiMessage::text(AiMessageRole::ToolUse, "")
                },
                breeze_store::NewAiMessage {
                    tool_use_id: Some(format!("t{i}")),
                    ..breeze_store::NewAiMessage::text(AiMessageRole::ToolResult, big.to_string())
                },
            ],
            None,
        )
        .await
        .unwrap();
    }
    w.provider
        .script([Scripted::stream(anthropic::text(&["ok"], 5, 5))]);
    assert_eq!(names(&w.turn("and now?").await).last(), Some(&"done"));
    let sent = &w.provider.received()[0].body;
    let messages = sent["messages"].to_string();
    // Three 30 kB results do not fit: the oldest went first, the question stays, and the
    // conversation still opens with the person's words.
    assert!(messages.len() < 90_000, "trimmed: {} bytes", messages.len());
    assert!(messages.contains("removed to fit the context window"));
    assert!(messages.contains("and now?"));
    assert_eq!(sent["messages"][0]["role"], "user");
    assert!(
        sent["messages"][0]["content"][0]["text"].is_string(),
        "{}",
        sent["messages"][0]
    );
}

on_both_backends!(
    text_only_streams_stores_and_costs,
    a_tool_call_runs_through_the_pipeline_and_the_model_continues,
    tier3_waits_for_approval_then_runs,
    a_rejected_or_expired_call_is_a_tool_error_and_the_turn_goes_on,
    a_chat_wait_shorter_than_the_expiry_rejects_the_request,
    the_approval_wait_gives_up_after_five_database_errors,
    openai_compatible_provider_runs_the_same_loop,
    provider_failures_end_with_error_then_done_and_keep_the_question,
    no_provider_budget_and_limiter_refuse_before_the_provider,
    budgets_and_the_limiter_fail_closed,
    a_limiter_that_cannot_decide_refuses,
    a_long_conversation_is_trimmed_to_the_window,
);
