//! `cargo xtask bench chat [--turns N] [--streams N] [--duration SECS] [--pace-ms MS]
//! [--per-session N] [--database sqlite|postgres]`: what the AI assistant adds to a model's
//! own time.
//!
//! A stand-in of Anthropic's Messages API runs in this process (the streaming format the
//! browser suite's stand-in speaks: `message_start`, text and `tool_use` blocks with
//! `input_json_delta`, `message_delta` with usage, `message_stop`). Each turn asks "how are my
//! devices?": the model answers with some text and a `query_devices` call (Tier 1, so it runs
//! at once through the pipeline), Breeze runs it, sends the result back, and the model answers
//! with text. One turn is two model requests and one tool call, as a person's usual question.
//! A conversation holds `--per-session` turns (default 10), then the next one starts: every
//! model request carries the conversation so far, so a conversation of hundreds of turns
//! costs the model, and Breeze, more per turn (the second row measures that).
//!
//! 1. **Overhead**: N turns one after another (default 200, after 10 unmeasured) with the
//!    stand-in answering at once; each turn's time from the POST to the `done` event is what
//!    Breeze adds (plus two loopback round trips to the stand-in). Server CPU per turn from
//!    `/proc`. Aim: p50 ≤ 5 ms.
//! 2. **Streams**: S sessions (default 100) each sending turns for D seconds (default 20) while
//!    the stand-in streams like a model, one delta every `--pace-ms` (default 50 ms, 10 deltas
//!    a response). The time added is a turn's time less the stand-in's paced time. Aim: p99 ≤
//!    50 ms added with 100 streams held.
//!
//! Breeze runs `breeze demo` on CPU 0 with its per-person message limit raised through its
//! setting; the person is the demo admin, signed in like a browser.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use axum::{Json, Router, body::Body, extract::State, response::Response, routing::post};
use futures::StreamExt;
use reqwest::{Client, header::COOKIE, header::ORIGIN, redirect::Policy};
use serde_json::{Value, json};

use super::{
    build_breeze, cpu_micros,
    instance::{Db, Instance},
    pages::sign_in,
    percentile, workspace_root,
};

/// Deltas in each paced text block.
const DELTAS: u32 = 10;

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &[
            "--turns",
            "--streams",
            "--duration",
            "--pace-ms",
            "--per-session",
            "--database",
        ],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let turns = num("--turns", 200)?.max(1) as usize;
    let streams = num("--streams", 100)?.max(1) as usize;
    let duration = Duration::from_secs(num("--duration", 20)?.max(1));
    let pace = Duration::from_millis(num("--pace-ms", 50)?);
    let per_session = num("--per-session", 10)?.max(1) as usize;
    let db = Db::parse(f.get("--database").map_or("sqlite", String::as_str))?;
    let root = workspace_root()?;
    let bin = build_breeze(&root)?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let model = Arc::new(StandIn::default());
    let model_url = rt.block_on(model.clone().serve())?;
    let limits = [
        ("BREEZE_AI_PROVIDER", "anthropic"),
        ("BREEZE_AI_API_KEY", "sk-stand-in"),
        ("BREEZE_AI_BASE_URL", model_url.as_str()),
        ("BREEZE_AI_MESSAGES_PER_MINUTE", "1000000000"),
        ("MCP_TOOL_RATE_LIMITS", "false"),
    ];
    let inst = Instance::start(&root, &bin, db, 0, &limits)?;
    let org = inst.demo["organization"]["slug"]
        .as_str()
        .context("demo.json has no organization")?
        .to_owned();
    let admin = |field: &str| {
        inst.demo["admin"][field]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("demo.json has no admin {field}"))
    };
    let (email, password) = (admin("email")?, admin("password")?);
    let chat = Chat {
        http: Client::builder()
            .redirect(Policy::none())
            .timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(streams + 8)
            .build()?,
        base: inst.base_url.clone(),
        org,
        cookie: String::new(),
    };

    let (overhead, long, streamed, held) = rt.block_on(async {
        let cookie = sign_in(&chat.http, &chat.base, &email, &password).await?;
        let chat = Arc::new(Chat { cookie, ..chat });

        eprintln!("overhead: {turns} turns, one at a time, the model answering at once…");
        let session = chat.session().await?;
        for _ in 0..10 {
            chat.turn(&session).await?;
        }
        let cpu_before = cpu_micros(inst.pid())?;
        let mut overhead = Vec::with_capacity(turns);
        let mut session = String::new();
        for i in 0..turns {
            if i % per_session == 0 {
                session = chat.session().await?;
            }
            overhead.push(chat.turn(&session).await?.as_secs_f64() * 1000.0);
        }
        let cpu_per_turn = (cpu_micros(inst.pid())? - cpu_before) as f64 / turns as f64;

        eprintln!("a long conversation: {turns} turns in one session…");
        let session = chat.session().await?;
        let cpu_before = cpu_micros(inst.pid())?;
        let mut long = Vec::with_capacity(turns);
        for _ in 0..turns {
            long.push(chat.turn(&session).await?.as_secs_f64() * 1000.0);
        }
        let cpu_per_long_turn = (cpu_micros(inst.pid())? - cpu_before) as f64 / turns as f64;

        eprintln!(
            "streams: {streams} sessions for {} s, the model streaming a delta every {} ms…",
            duration.as_secs(),
            pace.as_millis()
        );
        model
            .pace_ms
            .store(pace.as_millis() as u64, Ordering::Relaxed);
        // Two responses of DELTAS paced deltas each, as the stand-in streams them.
        let paced = pace * DELTAS * 2;
        let mut sessions = Vec::with_capacity(streams);
        for _ in 0..streams {
            sessions.push(chat.session().await?);
        }
        let deadline = Instant::now() + duration;
        let tasks: Vec<_> = sessions
            .into_iter()
            .map(|s| {
                let chat = chat.clone();
                tokio::spawn(async move {
                    let mut added = Vec::new();
                    let mut s = s;
                    while Instant::now() < deadline {
                        if added.len() % per_session == per_session - 1 {
                            s = chat.session().await?;
                        }
                        let took = chat.turn(&s).await?;
                        added.push(took.saturating_sub(paced).as_secs_f64() * 1000.0);
                    }
                    anyhow::Ok(added)
                })
            })
            .collect();
        let mut streamed = Vec::new();
        for t in futures::future::join_all(tasks).await {
            streamed.extend(t??);
        }
        anyhow::Ok((
            (overhead, cpu_per_turn),
            (long, cpu_per_long_turn),
            streamed,
            model.most_open.load(Ordering::Relaxed),
        ))
    })?;

    let ((mut overhead, cpu_per_turn), (mut long, cpu_per_long_turn), mut streamed) =
        (overhead, long, streamed);
    overhead.sort_by(f64::total_cmp);
    long.sort_by(f64::total_cmp);
    streamed.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&overhead, 0.5), percentile(&overhead, 0.99));
    let (s50, s99) = (percentile(&streamed, 0.5), percentile(&streamed, 0.99));
    report!();
    report!(
        "## A chat turn with one tool call, {} (`breeze demo`, {} build)",
        db.name(),
        super::profile().1
    );
    report!();
    report!("| run | turns | p50 ms | p99 ms | server CPU per turn |");
    report!("|---|---:|---:|---:|---:|");
    report!(
        "| one at a time, the model answering at once, {per_session} turns a conversation | {} \
         | {p50:.2} | {p99:.2} | {cpu_per_turn:.0} µs |",
        overhead.len(),
    );
    report!(
        "| one at a time, all {} turns in one conversation | {} | {:.2} | {:.2} | \
         {cpu_per_long_turn:.0} µs |",
        long.len(),
        long.len(),
        percentile(&long, 0.5),
        percentile(&long, 0.99),
    );
    report!(
        "| {streams} sessions, the model streaming ({} ms a delta): time added | {} | {s50:.2} | \
         {s99:.2} | |",
        pace.as_millis(),
        streamed.len()
    );
    report!();
    report!("most model streams open at once: {held}");
    report!(
        "{}",
        super::verdict(
            p50 <= 5.0,
            &format!("aim: overhead p50 ≤ 5 ms a turn; {p50:.2} ms")
        )
    );
    report!(
        "{}",
        super::verdict(
            s99 <= 50.0 && held as usize >= streams,
            &format!("aim: {streams} streams held with p99 ≤ 50 ms added; {s99:.2} ms")
        )
    );
    Ok(())
}

/// The signed-in person's chat.
struct Chat {
    http: Client,
    base: String,
    org: String,
    cookie: String,
}

impl Chat {
    /// A new chat session's id.
    async fn session(&self) -> anyhow::Result<String> {
        let r = self
            .http
            .post(format!("{}/api/v1/ai/sessions", self.base))
            .header(COOKIE, &self.cookie)
            .header(ORIGIN, &self.base)
            .json(&json!({ "org": self.org }))
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await?;
        body["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("creating a session answered {status}: {body}"))
    }

    /// Sends one message and reads its stream to `done`; fails when the turn did not run the
    /// tool and answer.
    async fn turn(&self, session: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let r = self
            .http
            .post(format!(
                "{}/api/v1/ai/sessions/{session}/messages",
                self.base
            ))
            .header(COOKIE, &self.cookie)
            .header(ORIGIN, &self.base)
            .json(&json!({ "content": "how are my devices?" }))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("a message answered {}: {}", r.status(), r.text().await?);
        }
        let mut r = r;
        let mut seen = String::new();
        while let Some(chunk) = r.chunk().await? {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("event: done") {
                break;
            }
        }
        let took = started.elapsed();
        if !seen.contains("event: done") || seen.contains("event: error") {
            bail!(
                "a turn ended without done or with an error: {}",
                seen.chars().take(600).collect::<String>()
            );
        }
        if !seen.contains("query_devices") {
            bail!(
                "a turn ran no tool: {}",
                seen.chars().take(600).collect::<String>()
            );
        }
        Ok(took)
    }
}

/// The stand-in model: answers a question with a `query_devices` call and a tool result with
/// text, pacing its text deltas by `pace_ms`.
#[derive(Default)]
struct StandIn {
    pace_ms: AtomicU64,
    open: AtomicU64,
    most_open: AtomicU64,
    calls: AtomicU64,
}

impl StandIn {
    /// Serves `POST /v1/messages` on a loopback port; returns the base URL.
    async fn serve(self: Arc<Self>) -> anyhow::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(self);
        // A model's API streams small writes too: without TCP_NODELAY each event after the
        // first waits on Breeze's delayed ACK (~40 ms), time that is the stand-in's, not Breeze's.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(format!("http://{addr}"))
    }
}

fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("ping")
    )
}

async fn messages(State(me): State<Arc<StandIn>>, Json(body): Json<Value>) -> Response {
    let n = me.calls.fetch_add(1, Ordering::Relaxed);
    let pace = Duration::from_millis(me.pace_ms.load(Ordering::Relaxed));
    let answered_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|last| last["content"].as_array())
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
    let mut head = vec![event(json!({"type": "message_start", "message": {
        "id": format!("msg_bench_{n}"), "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 1000, "output_tokens": 1}}}))];
    head.push(event(json!({"type": "content_block_start", "index": 0,
        "content_block": {"type": "text", "text": ""}})));
    let mut tail = vec![event(json!({"type": "content_block_stop", "index": 0}))];
    let stop = if answered_tool {
        "end_turn"
    } else {
        let input = json!({"limit": 5}).to_string();
        let (a, b) = input.split_at(input.len() / 2);
        tail.push(event(json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": format!("toolu_bench_{n}"),
            "name": "query_devices", "input": {}}})));
        for part in [a, b] {
            tail.push(event(json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": part}})));
        }
        tail.push(event(json!({"type": "content_block_stop", "index": 1})));
        "tool_use"
    };
    tail.push(event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 40}})));
    tail.push(event(json!({"type": "message_stop"})));

    let open = me.open.fetch_add(1, Ordering::Relaxed) + 1;
    me.most_open.fetch_max(open, Ordering::Relaxed);
    let stream = paced_events(me, head, tail, pace);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

/// The response's chunks: `head`, DELTAS text deltas `pace` apart, `tail`; counts the stream
/// closed after its last chunk.
fn paced_events(
    me: Arc<StandIn>,
    head: Vec<String>,
    tail: Vec<String>,
    pace: Duration,
) -> impl futures::Stream<Item = Result<String, std::convert::Infallible>> {
    let deltas = (0..DELTAS).map(|i| {
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": format!("word{i} ")}}))
    });
    let first = futures::stream::iter(head.into_iter().map(Ok));
    let paced = futures::stream::iter(deltas).then(move |d| async move {
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
        Ok(d)
    });
    let last =
        futures::stream::iter(tail.into_iter().map(Ok)).chain(futures::stream::once(async move {
            me.open.fetch_sub(1, Ordering::Relaxed);
            Ok(String::new())
        }));
    first.chain(paced).chain(last)
}
