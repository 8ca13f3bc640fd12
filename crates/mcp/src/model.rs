//! The MCP result shapes the engine produces: server identity, tools, results, content,
//! resources and prompts. Field names follow the specification's camelCase wire form.

use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, value::RawValue};

/// JSON text built once and shared by every result that carries it (a tool's `_meta`, the
/// same for each of its calls): attaching it is a reference count, writing it a copy.
pub type SharedJson = Arc<RawValue>;

/// `value` as [`SharedJson`].
pub fn shared_json(value: &impl Serialize) -> serde_json::Result<SharedJson> {
    serde_json::value::to_raw_value(value).map(Arc::from)
}

/// Who the server is, as told in `initialize` and `server/discover`.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    /// Build revision (e.g. a git hash), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// Behaviour hints for a tool (2025-03-26+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    pub read_only_hint: bool,
    pub destructive_hint: bool,
    pub idempotent_hint: bool,
    pub open_world_hint: bool,
}

/// A tool as listed by `tools/list`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDef {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotationsWithTitle>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// Annotations as sent: the hints plus the human title.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotationsWithTitle {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(flatten)]
    pub hints: ToolAnnotations,
}

/// One content block of a tool result or prompt message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    Text {
        text: String,
    },
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Audio {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Resource {
        resource: ResourceContents,
    },
    ResourceLink {
        uri: String,
        name: String,
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

impl Content {
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text { text: text.into() }
    }
}

/// The result of `tools/call`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    pub content: Vec<Content>,
    /// Serialized once by the tool (large outputs are not rebuilt as a tree).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Box<serde_json::value::RawValue>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    #[serde(
        rename = "_meta",
        skip_serializing_if = "Option::is_none",
        serialize_with = "shared"
    )]
    pub meta: Option<SharedJson>,
}

fn shared<S: Serializer>(json: &Option<SharedJson>, s: S) -> Result<S::Ok, S::Error> {
    json.as_deref().serialize(s)
}

impl CallToolResult {
    /// A successful result with only text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(text)],
            structured_content: None,
            is_error: false,
            meta: None,
        }
    }

    /// A tool error: the model sees `message` and may try again.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(message)],
            structured_content: None,
            is_error: true,
            meta: None,
        }
    }

    /// The wire form, written by hand: the text blocks of a large result are its structured
    /// content as JSON text, and escaping them is most of the work of answering; this writes
    /// exactly what the `Serialize` derive does, faster (see [`crate::json`]).
    pub fn to_json_bytes(&self) -> Vec<u8> {
        let text: usize = self
            .content
            .iter()
            .map(|c| match c {
                Content::Text { text } => text.len() + text.len() / 8,
                _ => 256,
            })
            .sum();
        let structured = self
            .structured_content
            .as_ref()
            .map_or(0, |r| r.get().len());
        let mut out = Vec::with_capacity(text + structured + 512);
        out.extend_from_slice(b"{\"content\":[");
        for (i, c) in self.content.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            match c {
                Content::Text { text } => {
                    out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
                    crate::json::write_str(&mut out, text);
                    out.push(b'}');
                }
                // Writing into a Vec cannot fail.
                other => drop(serde_json::to_writer(&mut out, other)),
            }
        }
        out.push(b']');
        if let Some(raw) = &self.structured_content {
            out.extend_from_slice(b",\"structuredContent\":");
            out.extend_from_slice(raw.get().as_bytes());
        }
        if self.is_error {
            out.extend_from_slice(b",\"isError\":true");
        }
        if let Some(meta) = &self.meta {
            out.extend_from_slice(b",\"_meta\":");
            out.extend_from_slice(meta.get().as_bytes());
        }
        out.push(b'}');
        out
    }

    /// For a tool error, what went wrong: `structuredContent.error.message` when present, else
    /// the first text block. `None` for a success.
    pub fn error_text(&self) -> Option<String> {
        if !self.is_error {
            return None;
        }
        let structured = self.structured_content.as_ref().and_then(|raw| {
            #[derive(serde::Deserialize)]
            struct Structured {
                error: Inner,
            }
            #[derive(serde::Deserialize)]
            struct Inner {
                message: String,
            }
            serde_json::from_str::<Structured>(raw.get()).ok()
        });
        Some(match structured {
            Some(s) => s.error.message,
            None => match self.content.first() {
                Some(Content::Text { text }) => text.clone(),
                _ => "tool error".to_owned(),
            },
        })
    }
}

/// A resource as listed by `resources/list`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDef {
    pub uri: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Metadata for the client (e.g. an extension's settings for this resource).
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// A URI template as listed by `resources/templates/list`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplateDef {
    pub uri_template: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// The contents of a resource: text or base64 bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    pub uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    /// Metadata for the client (e.g. an extension's settings for these contents).
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl ResourceContents {
    pub fn text(uri: impl Into<String>, mime_type: &str, text: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            text: Some(text.into()),
            blob: None,
            meta: None,
        }
    }

    pub fn blob(uri: impl Into<String>, mime_type: &str, base64: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            text: None,
            blob: Some(base64.into()),
            meta: None,
        }
    }

    /// The same contents with `_meta`.
    #[must_use]
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }
}

/// A prompt argument as listed.
#[derive(Debug, Clone, Serialize)]
pub struct PromptArgument {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub required: bool,
}

/// A prompt as listed by `prompts/list`.
#[derive(Debug, Clone, Serialize)]
pub struct PromptDef {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub arguments: Vec<PromptArgument>,
}

/// One rendered prompt message.
#[derive(Debug, Clone, Serialize)]
pub struct PromptMessage {
    /// `user` or `assistant`.
    pub role: &'static str,
    pub content: Content,
}

/// The result of `prompts/get`.
#[derive(Debug, Clone, Serialize)]
pub struct GetPromptResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub messages: Vec<PromptMessage>,
}
