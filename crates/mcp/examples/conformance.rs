//! A fixtures server for the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, server scenarios): every tool, resource, prompt and
//! utility the suite exercises, served by the engine on `127.0.0.1` with no authentication.
//!
//! ```text
//! cargo run --example conformance -p breeze-mcp -- [PORT] [--replies adaptive|stream]
//! ```
//!
//! The port comes from the first argument, else `CONFORMANCE_PORT`, else the OS picks one. The
//! first line on stdout is the endpoint URL (`http://127.0.0.1:PORT/mcp`). `--replies` (or
//! `CONFORMANCE_REPLIES`) chooses the engine's [`ReplyMode`]; the default is `stream`, the
//! reference server's behaviour.
//!
//! With `CONFORMANCE_REDIS_URL` set the server joins a cluster of such servers sharing that
//! Redis (and `CONFORMANCE_REDIS_PREFIX`, default `conformance:`), as `breeze serve` does with
//! `REDIS_URL`: the suite can then run through a round-robin balancer over several of them.
//!
//! `.ci/conformance.sh` builds this example and runs the suite against it.

use std::{
    collections::HashMap,
    io::Write,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    extract::Request,
    http::{HeaderMap, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use breeze_limits::MemoryLimiter;
use breeze_mcp::{
    Client, Cx, Engine, EngineConfig, HttpError, McpApp, Peer, ReplyMode, RequestRecord,
    http::{Routes, router},
    jsonrpc::ErrorObject,
    model::{
        CallToolResult, Content, GetPromptResult, PromptArgument, PromptDef, PromptMessage,
        ResourceContents, ResourceDef, ResourceTemplateDef, ServerInfo, ToolDef,
    },
    session::SessionLimits,
};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A minimal WAV file.
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// JSON-RPC error code for an unknown resource.
const RESOURCE_NOT_FOUND: i32 = -32002;

/// Log levels, least severe first (RFC 5424 order, as MCP uses them).
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn severity(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The resource that changes every [`WATCH_PERIOD`], with `notifications/resources/updated`
/// to its subscribers.
const WATCHED: &str = "test://watched-resource";
/// How often [`WATCHED`] changes.
const WATCH_PERIOD: Duration = Duration::from_secs(3);

/// Per session: the subscribed URIs, each with the id of the subscription watching it.
type Subscriptions = Arc<Mutex<HashMap<Arc<str>, HashMap<String, u64>>>>;

/// The fixtures: per-session log levels and resource subscriptions.
struct Fixtures {
    started: Instant,
    log_levels: Mutex<HashMap<Arc<str>, usize>>,
    subscriptions: Subscriptions,
    next_subscription: AtomicU64,
}

impl Fixtures {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            log_levels: Mutex::default(),
            subscriptions: Subscriptions::default(),
            next_subscription: AtomicU64::new(1),
        }
    }

    /// The current revision of `test://watched-resource`.
    fn watched_revision(&self) -> u128 {
        self.started.elapsed().as_millis() / WATCH_PERIOD.as_millis()
    }

    /// Sends a log message on the request's stream unless the session's level filters it out.
    async fn log(&self, cx: &Cx<()>, level: &str, data: &str) {
        let min = cx
            .session_id
            .as_ref()
            .and_then(|s| lock(&self.log_levels).get(s).copied())
            .unwrap_or(0);
        if severity(level).is_some_and(|s| s >= min) {
            cx.log(level, json!(data)).await;
        }
    }

    fn set_level(&self, cx: &Cx<()>, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let level = params
            .and_then(|p| p.get("level"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorObject::invalid_params("Missing required parameter: level"))?;
        let severity = severity(level).ok_or_else(|| {
            ErrorObject::invalid_params(format!(
                "Invalid level {level:?}: expected one of {}",
                LEVELS.join(", ")
            ))
        })?;
        if let Some(s) = &cx.session_id {
            lock(&self.log_levels).insert(s.clone(), severity);
        }
        Ok(json!({}))
    }

    fn subscription(
        &self,
        cx: &Cx<()>,
        params: Option<&Value>,
        subscribe: bool,
    ) -> Result<Value, ErrorObject> {
        let uri = params
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorObject::invalid_params("Missing required parameter: uri"))?;
        if !static_resources().iter().any(|r| r.uri == uri) && template_id(uri).is_none() {
            return Err(resource_not_found(uri));
        }
        let Some(session) = &cx.session_id else {
            return Ok(json!({}));
        };
        let mut subs = lock(&self.subscriptions);
        if !subscribe {
            if let Some(uris) = subs.get_mut(session) {
                uris.remove(uri);
            }
            return Ok(json!({}));
        }
        let uris = subs.entry(session.clone()).or_default();
        if uri == WATCHED && !uris.contains_key(uri) {
            let id = self.next_subscription.fetch_add(1, Ordering::Relaxed);
            uris.insert(uri.to_owned(), id);
            if let Some(stream) = cx.peer.standalone() {
                tokio::spawn(watch(
                    self.subscriptions.clone(),
                    session.clone(),
                    id,
                    stream,
                ));
            }
        } else {
            uris.entry(uri.to_owned()).or_insert(0);
        }
        Ok(json!({}))
    }

    async fn tool_with_logging(&self, cx: &Cx<()>) -> CallToolResult {
        self.log(cx, "info", "Tool execution started").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.log(cx, "info", "Tool processing data").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.log(cx, "info", "Tool execution completed").await;
        CallToolResult::text("Tool with logging executed successfully")
    }
}

/// Tells the client `test://watched-resource` changed, every [`WATCH_PERIOD`], on the session's
/// own stream, until the subscription `id` ends or the session does.
async fn watch(subs: Subscriptions, session: Arc<str>, id: u64, stream: Peer) {
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + WATCH_PERIOD, WATCH_PERIOD);
    loop {
        tokio::select! {
            () = stream.session_ended() => {
                lock(&subs).remove(&session);
                return;
            }
            _ = tick.tick() => {
                let current = lock(&subs)
                    .get(&session)
                    .and_then(|uris| uris.get(WATCHED))
                    .is_some_and(|sub| *sub == id);
                if !current {
                    return;
                }
                stream
                    .notify("notifications/resources/updated", json!({ "uri": WATCHED }))
                    .await;
            }
        }
    }
}

fn empty_object_schema() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn tool(name: &str, description: &str, input_schema: Value) -> ToolDef {
    ToolDef {
        name: name.to_owned(),
        title: None,
        description: description.to_owned(),
        input_schema,
        output_schema: None,
        annotations: None,
        meta: None,
    }
}

fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "test_simple_text",
            "Tests simple text content response",
            empty_object_schema(),
        ),
        tool(
            "test_image_content",
            "Tests image content response",
            empty_object_schema(),
        ),
        tool(
            "test_audio_content",
            "Tests audio content response",
            empty_object_schema(),
        ),
        tool(
            "test_embedded_resource",
            "Tests embedded resource content response",
            empty_object_schema(),
        ),
        tool(
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            empty_object_schema(),
        ),
        tool(
            "test_tool_with_logging",
            "Tests tool that emits log messages during execution",
            empty_object_schema(),
        ),
        tool(
            "test_tool_with_progress",
            "Tests tool that reports progress notifications",
            empty_object_schema(),
        ),
        tool(
            "test_error_handling",
            "Tests error response handling",
            empty_object_schema(),
        ),
        tool(
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            json!({
                "type": "object",
                "properties": {
                    "prompt": { "type": "string", "description": "The prompt to send to the LLM" }
                },
                "required": ["prompt"]
            }),
        ),
        tool(
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            json!({
                "type": "object",
                "properties": {
                    "message": { "type": "string", "description": "The message to show the user" }
                },
                "required": ["message"]
            }),
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034",
            empty_object_schema(),
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            empty_object_schema(),
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {
                    "address": {
                        "type": "object",
                        "properties": {
                            "street": { "type": "string" },
                            "city": { "type": "string" }
                        }
                    }
                },
                "properties": {
                    "name": { "type": "string" },
                    "address": { "$ref": "#/$defs/address" }
                },
                "additionalProperties": false
            }),
        ),
    ]
}

fn result(content: Vec<Content>) -> CallToolResult {
    CallToolResult {
        content,
        structured_content: None,
        is_error: false,
        meta: None,
    }
}

fn image() -> Content {
    Content::Image {
        data: PNG.into(),
        mime_type: "image/png".into(),
    }
}

fn string_arg<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, ErrorObject> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params(format!("Missing required argument: {name}")))
}

/// The text of a sampling result's content (one block, or several in 2025-11-25).
fn sampled_text(result: &Value) -> String {
    let blocks = match result.get("content") {
        Some(Value::Array(blocks)) => blocks.iter().collect(),
        Some(block) => vec![block],
        None => Vec::new(),
    };
    blocks
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Sends `elicitation/create` and describes the answer as `<prefix>: action=…, content=…`.
async fn elicit(cx: &Cx<()>, params: Value, prefix: &str) -> CallToolResult {
    match cx.peer.request("elicitation/create", params).await {
        Ok(answer) => {
            let action = answer
                .get("action")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            let content = answer.get("content").cloned().unwrap_or(Value::Null);
            CallToolResult::text(format!("{prefix}: action={action}, content={content}"))
        }
        Err(e) => CallToolResult::error(format!("Elicitation failed: {}", e.message)),
    }
}

fn sep1034_request() -> Value {
    json!({
        "message": "Please review and update the form fields with defaults",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "name": { "type": "string", "description": "User name", "default": "John Doe" },
                "age": { "type": "integer", "description": "User age", "default": 30 },
                "score": { "type": "number", "description": "User score", "default": 95.5 },
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active"
                },
                "verified": { "type": "boolean", "description": "Verification status", "default": true }
            },
            "required": []
        }
    })
}

fn sep1330_request() -> Value {
    json!({
        "message": "Please select options from the enum fields",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "untitledSingle": {
                    "type": "string",
                    "description": "Select one option",
                    "enum": ["option1", "option2", "option3"]
                },
                "titledSingle": {
                    "type": "string",
                    "description": "Select one option with titles",
                    "oneOf": [
                        { "const": "value1", "title": "First Option" },
                        { "const": "value2", "title": "Second Option" },
                        { "const": "value3", "title": "Third Option" }
                    ]
                },
                "legacyEnum": {
                    "type": "string",
                    "description": "Select one option (legacy)",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]
                },
                "untitledMulti": {
                    "type": "array",
                    "description": "Select multiple options",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
                },
                "titledMulti": {
                    "type": "array",
                    "description": "Select multiple options with titles",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {
                        "anyOf": [
                            { "const": "value1", "title": "First Choice" },
                            { "const": "value2", "title": "Second Choice" },
                            { "const": "value3", "title": "Third Choice" }
                        ]
                    }
                }
            },
            "required": []
        }
    })
}

fn static_resources() -> Vec<ResourceDef> {
    let def =
        |uri: &str, name: &str, title: Option<&str>, description: &str, mime: &str| ResourceDef {
            uri: uri.to_owned(),
            name: name.to_owned(),
            title: title.map(str::to_owned),
            description: Some(description.to_owned()),
            mime_type: Some(mime.to_owned()),
            meta: None,
        };
    vec![
        def(
            "test://static-text",
            "static-text",
            Some("Static Text Resource"),
            "A static text resource for testing",
            "text/plain",
        ),
        def(
            "test://static-binary",
            "static-binary",
            Some("Static Binary Resource"),
            "A static binary resource (image) for testing",
            "image/png",
        ),
        def(
            WATCHED,
            "watched-resource",
            None,
            "A resource that auto-updates every 3 seconds",
            "text/plain",
        ),
    ]
}

/// The `{id}` of `test://template/{id}/data`.
fn template_id(uri: &str) -> Option<&str> {
    uri.strip_prefix("test://template/")?
        .strip_suffix("/data")
        .filter(|id| !id.is_empty() && !id.contains('/'))
}

fn resource_not_found(uri: &str) -> ErrorObject {
    ErrorObject::new(RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({ "uri": uri }))
}

fn prompt_arg(name: &str, description: &str) -> PromptArgument {
    PromptArgument {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        required: true,
    }
}

fn prompt_arg_value<'a>(
    arguments: &'a Map<String, Value>,
    name: &str,
) -> Result<&'a str, ErrorObject> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params(format!("Missing required argument: {name}")))
}

fn user(content: Content) -> PromptMessage {
    PromptMessage {
        role: "user",
        content,
    }
}

/// `completion/complete`: prompt arguments of `test_prompt_with_arguments` and the `{id}` of
/// the resource template; anything else completes to nothing.
fn complete(params: Option<&Value>) -> Result<Value, ErrorObject> {
    let reference = params
        .and_then(|p| p.get("ref"))
        .ok_or_else(|| ErrorObject::invalid_params("Missing required parameter: ref"))?;
    let argument = params
        .and_then(|p| p.get("argument"))
        .ok_or_else(|| ErrorObject::invalid_params("Missing required parameter: argument"))?;
    let name = argument.get("name").and_then(Value::as_str).unwrap_or("");
    let value = argument.get("value").and_then(Value::as_str).unwrap_or("");
    let candidates: &[&str] = match (
        reference.get("type").and_then(Value::as_str),
        reference.get("name").and_then(Value::as_str),
        reference.get("uri").and_then(Value::as_str),
    ) {
        (Some("ref/prompt"), Some("test_prompt_with_arguments"), _) => match name {
            "arg1" => &["testValue1", "test1", "value1"],
            "arg2" => &["testValue2", "test2", "value2"],
            _ => &[],
        },
        (Some("ref/resource"), _, Some("test://template/{id}/data")) if name == "id" => {
            &["1", "2", "3", "123"]
        }
        _ => &[],
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| c.starts_with(value))
        .collect();
    Ok(json!({
        "completion": { "values": values, "total": values.len(), "hasMore": false }
    }))
}

impl McpApp for Fixtures {
    type Principal = ();

    async fn authenticate(
        &self,
        _headers: &HeaderMap,
        _query: Option<&str>,
    ) -> Result<Client<()>, HttpError> {
        Ok(Client {
            principal: (),
            key: "anonymous".into(),
            tenant: "anonymous".into(),
            binding: None,
        })
    }

    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "breeze-mcp-conformance".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            revision: None,
            title: Some("Breeze MCP engine conformance fixtures".into()),
        }
    }

    fn capabilities(&self) -> Value {
        json!({
            "tools": { "listChanged": false },
            "resources": { "subscribe": true, "listChanged": false },
            "prompts": { "listChanged": false },
            "logging": {},
            "completions": {},
        })
    }

    async fn list_tools(&self, _cx: &Cx<()>) -> Result<Vec<ToolDef>, ErrorObject> {
        Ok(tools())
    }

    async fn call_tool(
        &self,
        cx: Cx<()>,
        name: String,
        arguments: Value,
    ) -> Result<CallToolResult, ErrorObject> {
        Ok(match name.as_str() {
            "test_simple_text" => {
                CallToolResult::text("This is a simple text response for testing.")
            }
            "test_image_content" => result(vec![image()]),
            "test_audio_content" => result(vec![Content::Audio {
                data: WAV.into(),
                mime_type: "audio/wav".into(),
            }]),
            "test_embedded_resource" => result(vec![Content::Resource {
                resource: ResourceContents::text(
                    "test://embedded-resource",
                    "text/plain",
                    "This is an embedded resource content.",
                ),
            }]),
            "test_multiple_content_types" => result(vec![
                Content::text("Multiple content types test:"),
                image(),
                Content::Resource {
                    resource: ResourceContents::text(
                        "test://mixed-content-resource",
                        "application/json",
                        json!({ "test": "data", "value": 123 }).to_string(),
                    ),
                },
            ]),
            "test_tool_with_logging" => self.tool_with_logging(&cx).await,
            "test_tool_with_progress" => {
                for step in [0u8, 50, 100] {
                    if step > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let message = format!("Completed step {step} of 100");
                    cx.progress(f64::from(step), Some(100.0), Some(&message))
                        .await;
                }
                CallToolResult::text(match &cx.progress_token {
                    Some(Value::String(token)) => format!("Progress reported with token {token}"),
                    Some(token) => format!("Progress reported with token {token}"),
                    None => "No progress token was given, so no progress was reported".into(),
                })
            }
            "test_error_handling" => {
                CallToolResult::error("This tool intentionally returns an error for testing")
            }
            "test_sampling" => {
                let prompt = string_arg(&arguments, "prompt")?;
                let params = json!({
                    "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
                    "maxTokens": 100
                });
                match cx.peer.request("sampling/createMessage", params).await {
                    Ok(answer) => {
                        CallToolResult::text(format!("LLM response: {}", sampled_text(&answer)))
                    }
                    Err(e) => CallToolResult::error(format!("Sampling failed: {}", e.message)),
                }
            }
            "test_elicitation" => {
                let message = string_arg(&arguments, "message")?;
                let params = json!({
                    "message": message,
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "username": { "type": "string", "description": "User's response" },
                            "email": { "type": "string", "description": "User's email address" }
                        },
                        "required": ["username", "email"]
                    }
                });
                elicit(&cx, params, "User response").await
            }
            "test_elicitation_sep1034_defaults" => {
                elicit(&cx, sep1034_request(), "Elicitation completed").await
            }
            "test_elicitation_sep1330_enums" => {
                elicit(&cx, sep1330_request(), "Elicitation completed").await
            }
            "json_schema_2020_12_tool" => {
                CallToolResult::text(format!("JSON Schema 2020-12 tool called with: {arguments}"))
            }
            other => {
                return Err(ErrorObject::invalid_params(format!(
                    "Unknown tool: {other}"
                )));
            }
        })
    }

    async fn list_resources(&self, _cx: &Cx<()>) -> Result<Vec<ResourceDef>, ErrorObject> {
        Ok(static_resources())
    }

    async fn list_resource_templates(
        &self,
        _cx: &Cx<()>,
    ) -> Result<Vec<ResourceTemplateDef>, ErrorObject> {
        Ok(vec![ResourceTemplateDef {
            uri_template: "test://template/{id}/data".into(),
            name: "template".into(),
            title: Some("Resource Template".into()),
            description: Some("A resource template with parameter substitution".into()),
            mime_type: Some("application/json".into()),
        }])
    }

    async fn read_resource(
        &self,
        _cx: Cx<()>,
        uri: String,
    ) -> Result<Vec<ResourceContents>, ErrorObject> {
        let contents = match uri.as_str() {
            "test://static-text" => ResourceContents::text(
                &uri,
                "text/plain",
                "This is the content of the static text resource.",
            ),
            "test://static-binary" => ResourceContents::blob(&uri, "image/png", PNG),
            WATCHED => ResourceContents::text(
                &uri,
                "text/plain",
                format!(
                    "Watched resource content (revision {})",
                    self.watched_revision()
                ),
            ),
            _ => match template_id(&uri) {
                Some(id) => {
                    let text = json!({
                        "id": id,
                        "templateTest": true,
                        "data": format!("Data for ID: {id}")
                    });
                    ResourceContents::text(&uri, "application/json", text.to_string())
                }
                None => return Err(resource_not_found(&uri)),
            },
        };
        Ok(vec![contents])
    }

    async fn list_prompts(&self, _cx: &Cx<()>) -> Result<Vec<PromptDef>, ErrorObject> {
        let prompt = |name: &str, title: &str, description: &str, arguments| PromptDef {
            name: name.to_owned(),
            title: Some(title.to_owned()),
            description: Some(description.to_owned()),
            arguments,
        };
        Ok(vec![
            prompt(
                "test_simple_prompt",
                "Simple Test Prompt",
                "A simple prompt without arguments",
                Vec::new(),
            ),
            prompt(
                "test_prompt_with_arguments",
                "Prompt With Arguments",
                "A prompt with required arguments",
                vec![
                    prompt_arg("arg1", "First test argument"),
                    prompt_arg("arg2", "Second test argument"),
                ],
            ),
            prompt(
                "test_prompt_with_embedded_resource",
                "Prompt With Embedded Resource",
                "A prompt that includes an embedded resource",
                vec![prompt_arg("resourceUri", "URI of the resource to embed")],
            ),
            prompt(
                "test_prompt_with_image",
                "Prompt With Image",
                "A prompt that includes image content",
                Vec::new(),
            ),
        ])
    }

    async fn get_prompt(
        &self,
        _cx: Cx<()>,
        name: String,
        arguments: Map<String, Value>,
    ) -> Result<GetPromptResult, ErrorObject> {
        let messages = match name.as_str() {
            "test_simple_prompt" => {
                vec![user(Content::text("This is a simple prompt for testing."))]
            }
            "test_prompt_with_arguments" => {
                let arg1 = prompt_arg_value(&arguments, "arg1")?;
                let arg2 = prompt_arg_value(&arguments, "arg2")?;
                vec![user(Content::text(format!(
                    "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
                )))]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = prompt_arg_value(&arguments, "resourceUri")?;
                vec![
                    user(Content::Resource {
                        resource: ResourceContents::text(
                            uri,
                            "text/plain",
                            "Embedded resource content for testing.",
                        ),
                    }),
                    user(Content::text("Please process the embedded resource above.")),
                ]
            }
            "test_prompt_with_image" => vec![
                user(image()),
                user(Content::text("Please analyze the image above.")),
            ],
            other => {
                return Err(ErrorObject::invalid_params(format!(
                    "Unknown prompt: {other}"
                )));
            }
        };
        Ok(GetPromptResult {
            description: None,
            messages,
        })
    }

    async fn extension(
        &self,
        cx: Cx<()>,
        method: String,
        params: Option<Value>,
    ) -> Option<Result<Value, ErrorObject>> {
        let params = params.as_ref();
        Some(match method.as_str() {
            "logging/setLevel" => self.set_level(&cx, params),
            "completion/complete" => complete(params),
            "resources/subscribe" => self.subscription(&cx, params, true),
            "resources/unsubscribe" => self.subscription(&cx, params, false),
            _ => return None,
        })
    }

    async fn record(&self, _record: RequestRecord<'_, ()>) -> Result<(), ErrorObject> {
        Ok(())
    }
}

/// Whether a `Host` value names this machine (any port).
fn is_local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(v6, |(addr, _)| addr),
        None => host.split_once(':').map_or(host, |(name, _)| name),
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

/// DNS-rebinding protection for a server bound to loopback: refuses any `Host` that does not
/// name this machine, before the engine sees the request.
async fn local_host_only(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default()
        .to_owned();
    if is_local_host(&host) {
        return next.run(request).await;
    }
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32000, "message": format!("Invalid Host: {host}") }
    });
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The port and reply mode from the command line, then the environment.
fn settings() -> Result<(u16, ReplyMode), String> {
    let mut port = None;
    let mut replies = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--replies" => replies = args.next(),
            _ if port.is_none() => port = Some(arg),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let env = |name: &str| std::env::var_os(name).and_then(|v| v.into_string().ok());
    let port = match port.or_else(|| env("CONFORMANCE_PORT")) {
        Some(p) => p.parse().map_err(|_| format!("invalid port {p:?}"))?,
        None => 0,
    };
    let replies = match replies
        .or_else(|| env("CONFORMANCE_REPLIES"))
        .as_deref()
        .unwrap_or("stream")
    {
        "stream" => ReplyMode::Stream,
        "adaptive" => ReplyMode::Adaptive,
        other => return Err(format!("invalid reply mode {other:?} (adaptive or stream)")),
    };
    Ok((port, replies))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (port, replies) = settings()?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let config = EngineConfig {
        // The suite never ends its sessions (no DELETE): about 30 stay open per run.
        sessions: SessionLimits {
            max_total: 10_000,
            max_per_tenant: 10_000,
            max_per_key: 10_000,
            ..SessionLimits::default()
        },
        // A local fixture also used for throughput benchmarks: limits still apply, set out of reach.
        sse_rate_per_minute: u32::MAX,
        message_rate_per_minute: u32::MAX,
        public_base_url: format!("http://{addr}"),
        replies,
        ..EngineConfig::default()
    };
    let env = |name: &str| std::env::var_os(name).and_then(|v| v.into_string().ok());
    let (fixtures, limiter) = (Arc::new(Fixtures::new()), Arc::new(MemoryLimiter::new()));
    let engine = match env("CONFORMANCE_REDIS_URL") {
        Some(url) => {
            let prefix = env("CONFORMANCE_REDIS_PREFIX").unwrap_or_else(|| "conformance:".into());
            let cluster = breeze_mcp::cluster::SessionCluster::new(&url, &prefix)?;
            Engine::in_cluster(fixtures, config, limiter, Arc::new(cluster))
        }
        None => Engine::new(fixtures, config, limiter),
    };
    // Also runs the cluster's tasks; a request relayed here before this server hears the
    // cluster would be lost, so the URL is printed only once it does.
    let _sweeper = engine.spawn_sweeper(CancellationToken::new());
    engine.cluster_ready().await;
    let routes = Routes {
        streamable: vec!["/mcp"],
        ..Routes::default()
    };
    let app = router(engine, &routes).layer(middleware::from_fn(local_host_only));

    let mut out = std::io::stdout().lock();
    writeln!(out, "http://{addr}/mcp")?;
    out.flush()?;
    drop(out);

    axum::serve(listener, app).await?;
    Ok(())
}
