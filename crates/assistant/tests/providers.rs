//! The providers against a stand-in speaking each wire format: streamed text, tool calls whose
//! input arrives in pieces, retries on 429 / 529 honouring `retry-after`, no retry once a
//! stream began or for a client error, and every way a stream can go wrong answered with an
//! error that says what happened.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod stand_in;

use std::time::Duration;

use breeze_assistant::{
    Part, Provider, ProviderConfig, ProviderError, ProviderKind, Request, ToolDef, Turn,
    provider::Speaker,
};
use serde_json::json;
use stand_in::{Scripted, StandIn, anthropic, openai};

fn config(kind: ProviderKind, url: &str) -> ProviderConfig {
    let mut c = ProviderConfig::new(kind, "claude-sonnet-4-5-20250929", url);
    c.api_key = Some("sk-test-secret".into());
    c.backoff = Duration::from_millis(10);
    c.idle_timeout = Duration::from_millis(500);
    c
}

fn question() -> Vec<Turn> {
    vec![Turn {
        speaker: Speaker::User,
        parts: vec![Part::Text("why is ACME-FS01 slow?".into())],
    }]
}

fn tools() -> Vec<ToolDef> {
    vec![ToolDef {
        name: "query_devices".into(),
        description: "List devices".into(),
        input_schema: json!({"type": "object"}),
    }]
}

async fn ask(
    kind: ProviderKind,
    stand_in: &StandIn,
) -> (
    Result<breeze_assistant::Response, ProviderError>,
    Vec<String>,
) {
    let provider = Provider::new(config(kind, &stand_in.url));
    let (turns, tools) = (question(), tools());
    let mut deltas = Vec::new();
    let r = provider
        .complete(
            Request {
                system: "sys",
                turns: &turns,
                tools: &tools,
            },
            &mut |d| deltas.push(d.to_owned()),
        )
        .await;
    (r, deltas)
}

#[tokio::test]
async fn anthropic_text_streams_in_order_with_usage_and_the_documented_headers() {
    let s = StandIn::start().await;
    s.script([Scripted::stream(anthropic::text(&["Hello", "!"], 25, 15))]);
    let (r, deltas) = ask(ProviderKind::Anthropic, &s).await;
    let r = r.unwrap();
    assert_eq!(deltas, ["Hello", "!"]);
    assert_eq!(
        (r.text.as_str(), r.input_tokens, r.output_tokens),
        ("Hello!", 25, 15)
    );
    assert_eq!(r.stop_reason.as_deref(), Some("end_turn"));
    let req = &s.received()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.headers["anthropic-version"], "2023-06-01");
    assert_eq!(req.headers["x-api-key"], "sk-test-secret");
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["system"], "sys");
    assert_eq!(
        req.body["tools"][0]["input_schema"],
        json!({"type": "object"})
    );
    assert_eq!(
        req.body["messages"][0]["content"][0]["text"],
        "why is ACME-FS01 slow?"
    );
}

#[tokio::test]
async fn anthropic_tool_calls_are_assembled_from_their_json_pieces() {
    let s = StandIn::start().await;
    s.script([Scripted::stream(anthropic::tools(
        "Let me look.",
        &[
            ("toolu_01", "query_devices", &["{\"search\":", " \"ACME\"}"]),
            ("toolu_02", "list_alerts", &[]),
        ],
        40,
        89,
    ))]);
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    let r = r.unwrap();
    assert_eq!(r.text, "Let me look.");
    assert_eq!(r.tool_uses.len(), 2);
    assert_eq!(r.tool_uses[0].input, json!({"search": "ACME"}));
    assert_eq!(r.tool_uses[1].input, json!({}), "no pieces: an empty input");
    assert_eq!(r.stop_reason.as_deref(), Some("tool_use"));
}

#[tokio::test]
async fn overload_and_rate_limits_are_retried_honouring_retry_after() {
    let s = StandIn::start().await;
    s.script([
        Scripted::error(429, "rate_limit_error", "slow down").header("retry-after", "1"),
        Scripted::error(529, "overloaded_error", "Overloaded"),
        Scripted::stream(anthropic::text(&["ok"], 1, 1)),
    ]);
    let started = std::time::Instant::now();
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert_eq!(r.unwrap().text, "ok");
    assert_eq!(s.received().len(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retry-after: 1 was honoured"
    );
}

#[tokio::test]
async fn a_client_error_is_not_retried_and_a_retry_after_too_long_fails_at_once() {
    let s = StandIn::start().await;
    s.script([Scripted::error(
        400,
        "invalid_request_error",
        "max_tokens: too large",
    )]);
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert_eq!(
        r.unwrap_err(),
        ProviderError::Status {
            status: 400,
            message: "max_tokens: too large".into()
        }
    );
    assert_eq!(s.received().len(), 1);
    s.script([Scripted::error(429, "rate_limit_error", "later").header("retry-after", "3600")]);
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert!(matches!(r, Err(ProviderError::Status { status: 429, .. })));
    assert_eq!(s.received().len(), 2, "an hour's wait is not sat out");
}

#[tokio::test]
async fn retries_stop_after_the_configured_number() {
    let s = StandIn::start().await;
    s.script((0..4).map(|_| Scripted::error(500, "api_error", "Internal server error")));
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert!(matches!(r, Err(ProviderError::Status { status: 500, .. })));
    assert_eq!(s.received().len(), 4, "one attempt and three retries");
}

#[tokio::test]
async fn an_error_mid_stream_is_reported_and_not_retried() {
    let s = StandIn::start().await;
    let mut events = vec![anthropic::message_start(5)];
    events.extend(anthropic::text_block(0, &["Part"]).into_iter().take(2));
    events.push(anthropic::event(
        json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}),
    ));
    s.script([
        Scripted::stream(events),
        Scripted::stream(anthropic::text(&["x"], 1, 1)),
    ]);
    let (r, deltas) = ask(ProviderKind::Anthropic, &s).await;
    assert_eq!(
        r.unwrap_err(),
        ProviderError::Stream("api_error: Internal server error".into())
    );
    assert_eq!(deltas, ["Part"], "what was said stays said, once");
    assert_eq!(s.received().len(), 1);
}

#[tokio::test]
async fn malformed_and_unfinished_streams_say_what_is_wrong() {
    let s = StandIn::start().await;
    let mut unfinished = anthropic::text(&["Hi"], 1, 1);
    unfinished.pop(); // no message_stop
    s.script([
        Scripted::stream(vec![
            anthropic::message_start(1),
            "event: content_block_delta\ndata: {not json\n\n".into(),
        ]),
        Scripted::stream(unfinished),
        Scripted::stream(vec![anthropic::event(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}),
        )]),
    ]);
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert!(
        matches!(&r, Err(ProviderError::Malformed(m)) if m.contains("not JSON")),
        "{r:?}"
    );
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert_eq!(
        r.unwrap_err(),
        ProviderError::Malformed("the stream ended before message_stop".into())
    );
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert!(
        matches!(&r, Err(ProviderError::Malformed(m)) if m.contains("before message_start")),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_silent_stream_times_out() {
    let s = StandIn::start().await;
    let mut stalled = Scripted::stream(vec![anthropic::message_start(1)]);
    stalled.stall = true;
    s.script([stalled]);
    let (r, _) = ask(ProviderKind::Anthropic, &s).await;
    assert!(
        matches!(&r, Err(ProviderError::Unreachable(m)) if m.contains("silent")),
        "{r:?}"
    );
}

#[tokio::test]
async fn openai_text_and_tool_calls_stream_with_usage() {
    let s = StandIn::start().await;
    s.script([
        Scripted::stream(openai::text(&["Hel", "lo"], 9, 12)),
        Scripted::stream(openai::tools(
            &[
                (
                    "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                    "query_devices",
                    &["{\"sea", "rch\":\"web\"}"],
                ),
                ("call_2", "list_alerts", &["{}"]),
            ],
            20,
            30,
        )),
    ]);
    let (r, deltas) = ask(ProviderKind::OpenAi, &s).await;
    let r = r.unwrap();
    assert_eq!(deltas, ["Hel", "lo"]);
    assert_eq!((r.input_tokens, r.output_tokens), (9, 12));
    let req = &s.received()[0];
    assert_eq!(req.path, "/chat/completions");
    assert_eq!(req.headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(req.body["stream_options"]["include_usage"], true);
    assert_eq!(req.body["messages"][0]["role"], "system");
    assert_eq!(req.body["tools"][0]["function"]["name"], "query_devices");
    let (r, _) = ask(ProviderKind::OpenAi, &s).await;
    let r = r.unwrap();
    assert_eq!(r.tool_uses.len(), 2);
    assert_eq!(r.tool_uses[0].input, json!({"search": "web"}));
    assert_eq!(r.tool_uses[1].name, "list_alerts");
    assert_eq!(r.stop_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn openai_without_done_or_a_key_behaves() {
    let s = StandIn::start().await;
    let mut cut = openai::text(&["a"], 1, 1);
    cut.pop();
    s.script([Scripted::stream(cut)]);
    let (r, _) = ask(ProviderKind::OpenAi, &s).await;
    assert_eq!(
        r.unwrap_err(),
        ProviderError::Malformed("the stream ended before data: [DONE]".into())
    );
    // A self-hosted server without a key: no authorization header at all.
    s.script([Scripted::stream(openai::text(&["a"], 1, 1))]);
    let mut c = config(ProviderKind::OpenAi, &s.url);
    c.api_key = None;
    let provider = Provider::new(c);
    let turns = question();
    provider
        .complete(
            Request {
                system: "s",
                turns: &turns,
                tools: &[],
            },
            &mut |_| {},
        )
        .await
        .unwrap();
    assert!(s.received()[1].headers.get("authorization").is_none());
}

#[test]
fn the_key_never_shows_in_debug_output() {
    let c = config(ProviderKind::Anthropic, "http://x");
    let shown = format!("{c:?}");
    assert!(!shown.contains("sk-test-secret"), "{shown}");
    assert!(shown.contains("<redacted>"));
}
