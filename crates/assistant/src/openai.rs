//! OpenAI's Chat Completions, streamed, as OpenAI and self-hosted servers (vLLM, Ollama, LM
//! Studio) speak it: `chat.completion.chunk` objects whose `choices[0].delta` carries
//! `content` and `tool_calls` pieces (by `index`; the id and name come first, the arguments'
//! JSON text in pieces), a `finish_reason`, a last chunk with `usage` (asked for with
//! `stream_options.include_usage`), then `data: [DONE]`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::{
    provider::{self, Part, ProviderConfig, ProviderError, Request, Response, Speaker, ToolUse},
    sse,
};

pub(crate) fn body(config: &ProviderConfig, req: Request<'_>) -> Value {
    let mut messages = vec![json!({ "role": "system", "content": req.system })];
    for t in req.turns {
        match t.speaker {
            Speaker::Assistant => {
                let text: String = t
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.as_str()),
                        _ => None,
                    })
                    .collect();
                let calls: Vec<Value> = t
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolUse { id, name, input } => Some(json!({
                            "id": id, "type": "function",
                            "function": { "name": name, "arguments": input.to_string() },
                        })),
                        _ => None,
                    })
                    .collect();
                let mut m = json!({ "role": "assistant", "content": text });
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                messages.push(m);
            }
            Speaker::User => {
                // Tool results are messages of their own; text goes in one user message.
                let mut text = String::new();
                for p in &t.parts {
                    match p {
                        Part::ToolResult { id, content, .. } => messages.push(json!({
                            "role": "tool", "tool_call_id": id, "content": content,
                        })),
                        Part::Text(t) => text.push_str(t),
                        Part::ToolUse { .. } => {}
                    }
                }
                if !text.is_empty() {
                    messages.push(json!({ "role": "user", "content": text }));
                }
            }
        }
    }
    let mut body = json!({
        "model": config.model,
        "max_tokens": config.max_tokens,
        "messages": messages,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({ "type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                } })
            })
            .collect();
    }
    if let Some(t) = config.temperature {
        body["temperature"] = json!(t);
    }
    body
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Debug, Default)]
pub(crate) struct Decoder {
    calls: BTreeMap<u64, Call>,
    response: Response,
}

fn malformed(what: impl Into<String>) -> ProviderError {
    ProviderError::Malformed(what.into())
}

impl provider::Decoder for Decoder {
    const END_MARKER: &'static str = "data: [DONE]";

    fn event(
        &mut self,
        event: &sse::Event,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ProviderError> {
        if event.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|e| malformed(format!("a chunk is not JSON: {e}")))?;
        if let Some(e) = chunk.get("error") {
            return Err(ProviderError::Stream(
                e["message"].as_str().unwrap_or("no message").to_owned(),
            ));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.response.input_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
            self.response.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
        }
        let Some(choices) = chunk["choices"].as_array() else {
            return Err(malformed("a chunk without choices"));
        };
        for choice in choices {
            let delta = &choice["delta"];
            if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.response.text.push_str(t);
                on_text(t);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let i = call["index"]
                    .as_u64()
                    .ok_or_else(|| malformed("a tool_calls delta without an index"))?;
                let c = self.calls.entry(i).or_default();
                if let Some(id) = call["id"].as_str() {
                    c.id = id.to_owned();
                }
                if let Some(name) = call["function"]["name"].as_str() {
                    c.name.push_str(name);
                }
                if let Some(args) = call["function"]["arguments"].as_str() {
                    c.arguments.push_str(args);
                }
            }
            if let Some(r) = choice["finish_reason"].as_str() {
                self.response.stop_reason = Some(r.to_owned());
            }
        }
        Ok(false)
    }

    fn finish(mut self) -> Result<Response, ProviderError> {
        for (i, c) in std::mem::take(&mut self.calls) {
            if c.id.is_empty() || c.name.is_empty() {
                return Err(malformed(format!("tool call {i} without an id or a name")));
            }
            let input = if c.arguments.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&c.arguments).map_err(|e| {
                    malformed(format!("tool {}'s arguments are not JSON: {e}", c.name))
                })?
            };
            self.response.tool_uses.push(ToolUse {
                id: c.id,
                name: c.name,
                input,
            });
        }
        Ok(self.response)
    }
}
