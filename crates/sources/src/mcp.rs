//! MCP sources: discovery (initialize, every `tools/list` page) and calls, over Streamable
//! HTTP with rmcp's client, whose HTTP client is the egress guard's ([`Egress::client`]), so
//! every rule there — https, public addresses per connection, no redirects, no proxy — holds
//! for every request rmcp makes. Bounded: the whole operation by a timeout, each JSON answer
//! and SSE event by a size, the listing by a page and tool count (a server that lists without
//! end fails, it does not hang or fill memory).

use std::{collections::HashMap, time::Duration};

use rmcp::{
    ServiceExt,
    model::{CallToolRequestParams, PaginatedRequestParams},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use url::Url;

use crate::{
    auth::Headers,
    egress::{self, Egress},
    model::{Discovered, Hints, proposed_tier_mcp},
};

/// The most tools one source may list; over it, discovery fails whole.
pub const MAX_TOOLS: usize = 2_000;
/// The most `tools/list` pages read.
pub const MAX_PAGES: usize = 200;

/// Why discovery or a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error("{0}")]
    Egress(#[from] egress::EgressError),
    #[error("the MCP session could not start: {0}")]
    Initialize(String),
    #[error("tools/list failed: {0}")]
    List(String),
    #[error("the server lists more than {MAX_TOOLS} tools; nothing was imported")]
    TooManyTools,
    #[error("the server's tool list did not end after {MAX_PAGES} pages; nothing was imported")]
    TooManyPages,
    #[error("the server lists the tool {0:?} twice")]
    Duplicate(String),
    #[error("the call failed: {0}")]
    Call(String),
    #[error("the source did not answer within {0:?}")]
    Timeout(Duration),
}

fn transport(
    egress: &Egress,
    url: &Url,
    headers: Headers,
    max_answer: usize,
) -> StreamableHttpClientTransport<reqwest13::Client> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    config.custom_headers = headers.into_iter().collect::<HashMap<_, _>>();
    config.max_json_response_size = max_answer;
    config.max_sse_event_size = max_answer;
    config.max_error_response_size = 16 * 1024;
    // A source that forgot our session is not retried behind the caller's back.
    config.reinit_on_expired_session = false;
    StreamableHttpClientTransport::with_client(egress.client().clone(), config)
}

/// Every tool the MCP server at `url` lists, with the tier its annotations propose, within
/// `timeout` (normally [`egress::DISCOVERY_TIMEOUT`]).
pub async fn discover(
    egress: &Egress,
    url: &Url,
    headers: Headers,
    timeout: Duration,
) -> Result<Vec<Discovered>, McpError> {
    egress.check_url(url.as_str())?;
    let work = async {
        let client =
            ().serve(transport(egress, url, headers, egress::MAX_LIST_PAGE))
                .await
                .map_err(|e| McpError::Initialize(e.to_string()))?;
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let page = client
                .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                .await
                .map_err(|e| McpError::List(e.to_string()))?;
            tools.extend(page.tools);
            if tools.len() > MAX_TOOLS {
                return Err(McpError::TooManyTools);
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                let _ = client.cancel().await;
                return Ok(tools);
            }
        }
        Err(McpError::TooManyPages)
    };
    let tools = tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| McpError::Timeout(timeout))??;
    let mut seen = std::collections::BTreeSet::new();
    tools
        .into_iter()
        .map(|t| {
            if !seen.insert(t.name.to_string()) {
                return Err(McpError::Duplicate(t.name.to_string()));
            }
            let hints = t.annotations.as_ref().map_or(Hints::default(), |a| Hints {
                read_only: a.read_only_hint,
                destructive: a.destructive_hint,
            });
            Ok(Discovered {
                name: t.name.to_string(),
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*t.input_schema).clone()),
                output_schema: t.output_schema.map(|s| Value::Object((*s).clone())),
                annotations: t
                    .annotations
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok())
                    .unwrap_or(Value::Null),
                proposed_tier: proposed_tier_mcp(hints),
                call_plan: Value::Null,
            })
        })
        .collect()
}

/// What an upstream call answered: its `CallToolResult` as JSON, and whether the upstream
/// called it an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub result: Value,
    pub is_error: bool,
}

/// Calls `name` with `arguments` on the server at `url`, in a session of its own, within
/// `timeout`.
pub async fn call(
    egress: &Egress,
    url: &Url,
    headers: Headers,
    name: &str,
    arguments: Value,
    timeout: Duration,
) -> Result<Answer, McpError> {
    egress.check_url(url.as_str())?;
    let arguments = match arguments {
        Value::Object(m) => Some(m),
        Value::Null => None,
        other => {
            return Err(McpError::Call(format!(
                "arguments must be an object, not {other}"
            )));
        }
    };
    let work = async {
        let client =
            ().serve(transport(egress, url, headers, egress::MAX_CALL_RESPONSE))
                .await
                .map_err(|e| McpError::Initialize(e.to_string()))?;
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments;
        let result = client
            .call_tool(params)
            .await
            .map_err(|e| McpError::Call(e.to_string()))?;
        let _ = client.cancel().await;
        let is_error = result.is_error == Some(true);
        let value =
            serde_json::to_value(&result).unwrap_or_else(|e| json!({"error": e.to_string()}));
        Ok(Answer {
            result: value,
            is_error,
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| McpError::Timeout(timeout))?
}
