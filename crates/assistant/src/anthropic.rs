//! Anthropic's Messages API, streamed: the request body, and the events of the response —
//! `message_start` (input usage), `content_block_start` / `content_block_delta`
//! (`text_delta`, `input_json_delta`) / `content_block_stop`, `message_delta` (stop reason and
//! output usage), `message_stop`, `ping`, and `error`. A tool call's input arrives as pieces of
//! JSON text, whole only at its block's stop.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::{
    provider::{self, Part, ProviderConfig, ProviderError, Request, Response, Speaker, ToolUse},
    sse,
};

/// The `anthropic-version` header.
pub(crate) const VERSION: &str = "2023-06-01";

pub(crate) fn body(config: &ProviderConfig, req: Request<'_>) -> Value {
    let messages: Vec<Value> = req
        .turns
        .iter()
        .map(|t| {
            let content: Vec<Value> = t
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text(text) => json!({ "type": "text", "text": text }),
                    Part::ToolUse { id, name, input } => {
                        json!({ "type": "tool_use", "id": id, "name": name, "input": input })
                    }
                    Part::ToolResult {
                        id,
                        content,
                        is_error,
                    } => json!({
                        "type": "tool_result", "tool_use_id": id, "content": content,
                        "is_error": is_error,
                    }),
                })
                .collect();
            let role = match t.speaker {
                Speaker::User => "user",
                Speaker::Assistant => "assistant",
            };
            json!({ "role": role, "content": content })
        })
        .collect();
    let mut body = json!({
        "model": config.model,
        "max_tokens": config.max_tokens,
        "system": req.system,
        "messages": messages,
        "stream": true,
    });
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({ "name": t.name, "description": t.description, "input_schema": t.input_schema })
            })
            .collect();
    }
    if let Some(t) = config.temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        json: String,
    },
    /// A kind this client does not use (thinking, …): its deltas are ignored.
    Other,
}

#[derive(Debug, Default)]
pub(crate) struct Decoder {
    started: bool,
    blocks: BTreeMap<u64, Block>,
    response: Response,
}

fn malformed(what: impl Into<String>) -> ProviderError {
    ProviderError::Malformed(what.into())
}

impl provider::Decoder for Decoder {
    const END_MARKER: &'static str = "message_stop";

    fn event(
        &mut self,
        event: &sse::Event,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ProviderError> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| malformed(format!("{} event is not JSON: {e}", event.name)))?;
        // The data's `type` names the event; the `event:` line says the same.
        let kind = data["type"].as_str().unwrap_or(&event.name);
        if kind != "message_start" && kind != "ping" && kind != "error" && !self.started {
            return Err(malformed(format!("{kind} before message_start")));
        }
        let index = || {
            data["index"]
                .as_u64()
                .ok_or_else(|| malformed(format!("{kind} without an index")))
        };
        match kind {
            "message_start" => {
                self.started = true;
                let usage = &data["message"]["usage"];
                self.response.input_tokens = input_tokens(usage);
                self.response.output_tokens = usage["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let block = &data["content_block"];
                let b = match block["type"].as_str() {
                    Some("text") => {
                        if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            self.response.text.push_str(t);
                            on_text(t);
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::Tool {
                        id: block["id"]
                            .as_str()
                            .ok_or_else(|| malformed("tool_use block without an id"))?
                            .to_owned(),
                        name: block["name"]
                            .as_str()
                            .ok_or_else(|| malformed("tool_use block without a name"))?
                            .to_owned(),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index()?, b);
            }
            "content_block_delta" => {
                let i = index()?;
                let delta = &data["delta"];
                match (self.blocks.get_mut(&i), delta["type"].as_str()) {
                    (Some(Block::Text), Some("text_delta")) => {
                        let t = delta["text"]
                            .as_str()
                            .ok_or_else(|| malformed("text_delta without text"))?;
                        self.response.text.push_str(t);
                        on_text(t);
                    }
                    (Some(Block::Tool { json, .. }), Some("input_json_delta")) => {
                        json.push_str(
                            delta["partial_json"].as_str().ok_or_else(|| {
                                malformed("input_json_delta without partial_json")
                            })?,
                        );
                    }
                    (Some(Block::Other), _) => {}
                    (None, _) => return Err(malformed(format!("delta for unknown block {i}"))),
                    (Some(_), other) => {
                        return Err(malformed(format!("delta {other:?} does not fit block {i}")));
                    }
                }
            }
            "content_block_stop" => {
                let i = index()?;
                match self.blocks.remove(&i) {
                    Some(Block::Tool { id, name, json }) => {
                        let input = if json.trim().is_empty() {
                            json!({})
                        } else {
                            serde_json::from_str(&json).map_err(|e| {
                                malformed(format!("tool {name}'s input is not JSON: {e}"))
                            })?
                        };
                        self.response.tool_uses.push(ToolUse { id, name, input });
                    }
                    Some(_) => {}
                    None => return Err(malformed(format!("stop for unknown block {i}"))),
                }
            }
            "message_delta" => {
                if let Some(r) = data["delta"]["stop_reason"].as_str() {
                    self.response.stop_reason = Some(r.to_owned());
                }
                let usage = &data["usage"];
                if let Some(o) = usage["output_tokens"].as_u64() {
                    self.response.output_tokens = o;
                }
                let input = input_tokens(usage);
                if input > 0 {
                    self.response.input_tokens = input;
                }
            }
            "message_stop" => return Ok(true),
            "ping" => {}
            "error" => {
                let e = &data["error"];
                return Err(ProviderError::Stream(format!(
                    "{}: {}",
                    e["type"].as_str().unwrap_or("error"),
                    e["message"].as_str().unwrap_or("no message")
                )));
            }
            // New event types may be added; the documentation asks clients to ignore them.
            _ => {}
        }
        Ok(false)
    }

    fn finish(self) -> Result<Response, ProviderError> {
        if !self.blocks.is_empty() {
            return Err(malformed("message_stop before every content block stopped"));
        }
        Ok(self.response)
    }
}

/// Input tokens as billed: the plain ones and those written to or read from the cache.
fn input_tokens(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|k| usage[*k].as_u64())
    .sum()
}
