//! The AI assistant inside Breeze: a technician asks in plain language and the assistant
//! answers by calling Breeze's own tools, under exactly the tiers, approvals, limits and audit
//! an MCP client gets.
//!
//! - `provider` (with `anthropic`, `openai`, `sse`): the model providers over real streaming
//!   HTTP — Anthropic's Messages API and OpenAI-compatible Chat Completions (for self-hosted
//!   models too) — with timeouts and retries.
//! - [`chat`]: one turn of a chat session, from the person's message to a stream of
//!   [`ChatEvent`]s, every tool call through `breeze_pipeline::Pipeline::call` as the chat's
//!   `Caller`, usage and cost stored per message, budgets and rate limits failing closed.
//! - `context`: the system prompt and the trimming of long conversations.
//!
//! **API boundary:** no HTTP server types: `breeze-server` turns a request into a
//! [`chat::Speaker`] and the events into `text/event-stream`.

mod anthropic;
pub mod chat;
mod context;
mod openai;
pub mod provider;
mod sse;

pub use chat::{
    Assistant, AssistantConfig, BeginError, Begun, ChatEvent, PROVIDER_SETTING, Speaker, held_to,
    no_provider_message,
};
pub use context::PromptFacts;
pub use provider::{
    Part, Provider, ProviderConfig, ProviderError, ProviderKind, Request, Response, ToolDef,
    ToolUse, Turn,
};
