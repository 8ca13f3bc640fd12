//! A stand-in model provider: a local HTTP server that answers each request with the next
//! scripted response, written in Anthropic's Messages streaming format or OpenAI's Chat
//! Completions streaming format byte for byte as their public documentation shows it, and
//! records what it was sent.

#![allow(dead_code)] // each test binary uses part of it

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use axum::{
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use futures::StreamExt;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Scripted {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) chunks: Vec<String>,
    /// After the chunks, hold the connection open and silent.
    pub(crate) stall: bool,
}

impl Scripted {
    /// A 200 event stream of `events`, one chunk each.
    pub(crate) fn stream(events: Vec<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            chunks: events,
            stall: false,
        }
    }

    /// An error answer with a JSON body in the providers' shared error shape.
    pub(crate) fn error(status: u16, kind: &str, message: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".into())],
            chunks: vec![
                json!({ "type": "error", "error": { "type": kind, "message": message } })
                    .to_string(),
            ],
            stall: false,
        }
    }

    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// A request the stand-in received.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

#[derive(Clone, Default)]
struct Shared {
    script: Arc<Mutex<VecDeque<Scripted>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

/// The running stand-in.
pub(crate) struct StandIn {
    pub(crate) url: String,
    shared: Shared,
}

impl StandIn {
    pub(crate) async fn start() -> Self {
        let shared = Shared::default();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, shared }
    }

    /// Queues answers, in order.
    pub(crate) fn script(&self, answers: impl IntoIterator<Item = Scripted>) {
        self.shared.script.lock().unwrap().extend(answers);
    }

    /// What was received so far.
    pub(crate) fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Answers not yet given.
    pub(crate) fn left(&self) -> usize {
        self.shared.script.lock().unwrap().len()
    }
}

async fn answer(
    State(shared): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    shared.received.lock().unwrap().push(Received {
        path: uri.path().to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let next = shared.script.lock().unwrap().pop_front();
    let Some(s) = next else {
        return Response::builder()
            .status(500)
            .body(Body::from("the stand-in has no scripted answer left"))
            .unwrap();
    };
    let chunks = futures::stream::iter(
        s.chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::from(c))),
    );
    let body = if s.stall {
        Body::from_stream(chunks.chain(futures::stream::pending()))
    } else {
        Body::from_stream(chunks)
    };
    let mut res = Response::builder().status(StatusCode::from_u16(s.status).unwrap());
    for (k, v) in s.headers {
        res = res.header(k, v);
    }
    res.body(body).unwrap()
}

/// Anthropic's Messages streaming format, as in "Streaming Messages" of its documentation.
pub(crate) mod anthropic {
    use serde_json::{Value, json};

    /// One event: `event: <type>` and its `data:` line, then a blank line.
    pub(crate) fn event(data: Value) -> String {
        format!(
            "event: {}\ndata: {}\n\n",
            data["type"].as_str().unwrap(),
            data
        )
    }

    pub(crate) fn message_start(input_tokens: u64) -> String {
        event(json!({"type": "message_start", "message": {
            "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant",
            "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}))
    }

    pub(crate) fn ping() -> String {
        event(json!({"type": "ping"}))
    }

    /// A text block at `index`, its text in `pieces`.
    pub(crate) fn text_block(index: u64, pieces: &[&str]) -> Vec<String> {
        let mut v = vec![event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}))];
        for p in pieces {
            v.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": p}})));
        }
        v.push(event(json!({"type": "content_block_stop", "index": index})));
        v
    }

    /// A tool_use block at `index`, its input's JSON text in `pieces` (the first empty, as the
    /// documentation's example shows).
    pub(crate) fn tool_block(index: u64, id: &str, name: &str, pieces: &[&str]) -> Vec<String> {
        let mut v = vec![event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}))];
        for p in std::iter::once(&"").chain(pieces) {
            v.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": p}})));
        }
        v.push(event(json!({"type": "content_block_stop", "index": index})));
        v
    }

    pub(crate) fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
        event(json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}}))
    }

    pub(crate) fn message_stop() -> String {
        event(json!({"type": "message_stop"}))
    }

    /// A whole text answer.
    pub(crate) fn text(pieces: &[&str], input: u64, output: u64) -> Vec<String> {
        let mut v = vec![message_start(input)];
        v.extend(text_block(0, pieces));
        v.push(ping());
        v.push(message_delta("end_turn", output));
        v.push(message_stop());
        v
    }

    /// A whole answer of some text, then tool calls `(id, name, input JSON pieces)`.
    pub(crate) fn tools(
        text: &str,
        calls: &[(&str, &str, &[&str])],
        input: u64,
        output: u64,
    ) -> Vec<String> {
        let mut v = vec![message_start(input)];
        let mut index = 0;
        if !text.is_empty() {
            v.extend(text_block(0, &[text]));
            index = 1;
        }
        for (id, name, pieces) in calls {
            v.extend(tool_block(index, id, name, pieces));
            index += 1;
        }
        v.push(message_delta("tool_use", output));
        v.push(message_stop());
        v
    }
}

/// OpenAI's Chat Completions streaming format, as in its API reference ("The chat completion
/// chunk object") and its function-calling guide.
pub(crate) mod openai {
    use serde_json::{Value, json};

    fn chunk(choices: Value, usage: Option<Value>) -> String {
        let mut c = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk",
            "created": 1694268190, "model": "gpt-4o-mini", "system_fingerprint": "fp_44709d6fcb",
            "choices": choices});
        if let Some(u) = usage {
            c["usage"] = u;
        }
        format!("data: {c}\n\n")
    }

    pub(crate) fn delta(delta: Value, finish: Option<&str>) -> String {
        chunk(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
            None,
        )
    }

    pub(crate) fn usage(prompt: u64, completion: u64) -> String {
        chunk(
            json!([]),
            Some(
                json!({"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}),
            ),
        )
    }

    pub(crate) fn done() -> String {
        "data: [DONE]\n\n".into()
    }

    pub(crate) fn text(pieces: &[&str], prompt: u64, completion: u64) -> Vec<String> {
        let mut v = vec![delta(json!({"role": "assistant", "content": ""}), None)];
        for p in pieces {
            v.push(delta(json!({"content": p}), None));
        }
        v.push(delta(json!({}), Some("stop")));
        v.push(usage(prompt, completion));
        v.push(done());
        v
    }

    /// Tool calls `(id, name, argument pieces)`, streamed as the function-calling guide shows.
    pub(crate) fn tools(
        calls: &[(&str, &str, &[&str])],
        prompt: u64,
        completion: u64,
    ) -> Vec<String> {
        let mut v = Vec::new();
        for (i, (id, name, pieces)) in calls.iter().enumerate() {
            let mut first = json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]});
            if i == 0 {
                first["role"] = json!("assistant");
                first["content"] = Value::Null;
            }
            v.push(delta(first, None));
            for p in *pieces {
                v.push(delta(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                    None,
                ));
            }
        }
        v.push(delta(json!({}), Some("tool_calls")));
        v.push(usage(prompt, completion));
        v.push(done());
        v
    }
}
