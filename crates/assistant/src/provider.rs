//! A model provider over real HTTP with streaming: the conversation in a neutral form, the
//! settings, and the one request path both wire formats share — a timeout per request and per
//! idle stream, and retries with backoff on 429, 529 and 5xx that honour `retry-after`.
//!
//! A retry happens only before the stream began: once text reached the person, a failure is
//! reported, never replayed (the model would say it twice). The key is sent only in its header
//! and never logged; [`ProviderConfig`]'s `Debug` hides it.

use std::time::Duration;

use serde_json::Value;

use crate::{anthropic, openai, sse};

/// Which wire format the provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions, as OpenAI and self-hosted servers (vLLM, Ollama, LM Studio)
    /// speak it.
    OpenAi,
}

impl std::str::FromStr for ProviderKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "anthropic" => Ok(ProviderKind::Anthropic),
            "openai" => Ok(ProviderKind::OpenAi),
            other => Err(format!(
                "unknown provider {other:?} (expected anthropic or openai)"
            )),
        }
    }
}

/// A provider's settings (`BREEZE_AI_*`).
#[derive(Clone)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    pub model: String,
    /// `https://api.anthropic.com` or an OpenAI-compatible base ending in `/v1`.
    pub base_url: String,
    /// Optional for a self-hosted OpenAI-compatible server.
    pub api_key: Option<String>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// The whole request, until the response's headers.
    pub request_timeout: Duration,
    /// The longest silence between two chunks of a stream.
    pub idle_timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff (doubled each retry) when the provider names no `retry-after`.
    pub backoff: Duration,
    /// The longest `retry-after` honoured; longer ones fail at once.
    pub max_retry_after: Duration,
    /// The model's context window, in tokens: longer conversations are trimmed to it.
    pub context_tokens: usize,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .finish_non_exhaustive()
    }
}

impl ProviderConfig {
    /// Settings for `kind` with the defaults for everything else.
    pub fn new(kind: ProviderKind, model: &str, base_url: &str) -> Self {
        Self {
            kind,
            model: model.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: None,
            max_tokens: 4096,
            temperature: None,
            request_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(30),
            context_tokens: 200_000,
        }
    }
}

/// One part of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    /// The model asked for a tool call.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// A tool call's answer, handed back to the model.
    ToolResult {
        id: String,
        content: String,
        is_error: bool,
    },
}

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    User,
    Assistant,
}

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub speaker: Speaker,
    pub parts: Vec<Part>,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// What is sent: the system prompt, the conversation and the tools.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub system: &'a str,
    pub turns: &'a [Turn],
    pub tools: &'a [ToolDef],
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// One complete model response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    pub text: String,
    pub tool_uses: Vec<ToolUse>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The provider's reason (`end_turn`, `tool_use`, `stop`, `tool_calls`, `max_tokens`, …).
    pub stop_reason: Option<String>,
}

/// Why a provider call failed. The message is for the person; it never holds the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered an HTTP error (after the retries, for a retryable one).
    #[error("the model provider answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    /// The provider could not be reached or took too long.
    #[error("the model provider could not be reached: {0}")]
    Unreachable(String),
    /// The stream broke the wire format or ended early.
    #[error("the model provider's stream was malformed: {0}")]
    Malformed(String),
    /// The provider reported an error inside the stream.
    #[error("the model provider reported an error: {0}")]
    Stream(String),
}

/// A provider: settings and an HTTP client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Provider {
    config: ProviderConfig,
    http: reqwest::Client,
}

/// What a wire format turns a stream's events into.
pub(crate) trait Decoder: Default {
    /// Takes one event; text deltas go to `on_text`. `Ok(true)`: the stream is complete.
    fn event(
        &mut self,
        event: &sse::Event,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ProviderError>;
    /// The response, once the stream said it was complete.
    fn finish(self) -> Result<Response, ProviderError>;
    /// What a stream that ended without completing lacked, for the error.
    const END_MARKER: &'static str;
}

impl Provider {
    /// A provider with `config`. No redirect is followed: a key goes only where configured.
    pub fn new(config: ProviderConfig) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(config.request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self { config, http }
    }

    /// The settings.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// Sends `req` and reads the streamed response, text deltas to `on_text` as they come.
    pub async fn complete(
        &self,
        req: Request<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Response, ProviderError> {
        match self.config.kind {
            ProviderKind::Anthropic => {
                let body = anthropic::body(&self.config, req);
                let url = format!("{}/v1/messages", self.config.base_url);
                let mut headers = vec![("anthropic-version", anthropic::VERSION.to_owned())];
                if let Some(k) = &self.config.api_key {
                    headers.push(("x-api-key", k.clone()));
                }
                self.stream::<anthropic::Decoder>(&url, &headers, &body, on_text)
                    .await
            }
            ProviderKind::OpenAi => {
                let body = openai::body(&self.config, req);
                let url = format!("{}/chat/completions", self.config.base_url);
                let mut headers = Vec::new();
                if let Some(k) = &self.config.api_key {
                    headers.push(("authorization", format!("Bearer {k}")));
                }
                self.stream::<openai::Decoder>(&url, &headers, &body, on_text)
                    .await
            }
        }
    }

    async fn stream<D: Decoder>(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: &Value,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Response, ProviderError> {
        let mut res = self.send(url, headers, body).await?;
        let mut parser = sse::Parser::default();
        let mut decoder = D::default();
        loop {
            let chunk = tokio::time::timeout(self.config.idle_timeout, res.chunk())
                .await
                .map_err(|_| {
                    ProviderError::Unreachable(format!(
                        "the stream was silent for {} s",
                        self.config.idle_timeout.as_secs()
                    ))
                })?
                .map_err(|e| ProviderError::Unreachable(e.without_url().to_string()))?;
            let Some(chunk) = chunk else {
                return Err(ProviderError::Malformed(format!(
                    "the stream ended before {}",
                    D::END_MARKER
                )));
            };
            let events = parser
                .feed(&chunk)
                .map_err(|e| ProviderError::Malformed(e.to_string()))?;
            for event in &events {
                if decoder.event(event, on_text)? {
                    return decoder.finish();
                }
            }
        }
    }

    /// The request, retried on 429, 529 and 5xx (and a connection that failed) until the
    /// stream's headers arrive.
    async fn send(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: &Value,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut attempt = 0;
        loop {
            let mut req = self
                .http
                .post(url)
                .timeout(self.config.request_timeout)
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .json(body);
            for (name, value) in headers {
                req = req.header(*name, value);
            }
            let (error, retry_after) = match req.send().await {
                Ok(res) if res.status().is_success() => return Ok(res),
                Ok(res) => {
                    let status = res.status().as_u16();
                    let retry_after = res
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text = res.text().await.unwrap_or_default();
                    let error = ProviderError::Status {
                        status,
                        message: error_message(&text),
                    };
                    if !(status == 429 || status == 529 || status >= 500) {
                        return Err(error);
                    }
                    (error, retry_after)
                }
                Err(e) => (
                    ProviderError::Unreachable(e.without_url().to_string()),
                    None,
                ),
            };
            if attempt >= self.config.max_retries {
                return Err(error);
            }
            let pause = match retry_after {
                Some(d) if d > self.config.max_retry_after => return Err(error),
                Some(d) => d,
                None => self.config.backoff * 2u32.saturating_pow(attempt),
            };
            tracing::info!(attempt, error = %error, pause_ms = pause.as_millis() as u64, "model provider: retrying");
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }
}

/// The provider's error message from an error body (both formats put it at
/// `error.message`), or the body itself, cut short.
fn error_message(body: &str) -> String {
    let parsed = serde_json::from_str::<Value>(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str())
        .unwrap_or(body);
    message.chars().take(300).collect()
}
