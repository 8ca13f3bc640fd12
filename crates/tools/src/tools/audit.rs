//! `query_audit_log`: the organization's audit trail.

use breeze_core::{ActorType, AiSessionId, AuditRecord, Permission};
use breeze_store::AuditFilter;
use chrono::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::reach;
use crate::tools::parse_uuid;
use crate::{NoActions, Registry, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<QueryAuditLog>();
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum ActorArg {
    User,
    ApiKey,
    /// A connected app (an OAuth grant).
    OauthGrant,
    /// The AI assistant in a chat session.
    AiChat,
    Agent,
    System,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct QueryAuditInput {
    /// Exact action (e.g. `mcp.tools.call`), or a prefix ending in `.` or `*`.
    #[schemars(length(max = 100))]
    action: Option<String>,
    #[schemars(length(max = 100))]
    resource_type: Option<String>,
    #[schemars(length(max = 100))]
    resource_id: Option<String>,
    actor_type: Option<ActorArg>,
    /// Only what the AI assistant did in this chat session (UUID): its tool calls, the
    /// changes they made and their approval requests.
    #[schemars(length(min = 36, max = 36))]
    chat_session_id: Option<String>,
    /// How far back to look, in hours (1-168, default 24).
    #[schemars(range(min = 1, max = 168))]
    hours_back: Option<u32>,
    /// How many entries (1-100, default 25).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditEntry {
    id: String,
    timestamp: String,
    actor_type: String,
    actor_id: String,
    action: String,
    resource_type: String,
    resource_id: Option<String>,
    result: String,
    error_message: Option<String>,
    #[schemars(with = "serde_json::Map<String, Value>")]
    details: Value,
}

impl From<AuditRecord> for AuditEntry {
    fn from(r: AuditRecord) -> Self {
        Self {
            id: r.id.to_string(),
            timestamp: r.created_at.to_rfc3339(),
            actor_type: r.event.actor.kind.to_string(),
            actor_id: r.event.actor.id,
            action: r.event.action,
            resource_type: r.event.resource_type,
            resource_id: r.event.resource_id,
            result: r.event.result.to_string(),
            error_message: r.event.error_message,
            details: r.event.details,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct AuditOutput {
    entries: Vec<AuditEntry>,
    showing: usize,
}

pub(crate) struct QueryAuditLog;

impl Tool for QueryAuditLog {
    const NAME: &'static str = "query_audit_log";
    const TITLE: &'static str = "Query the audit log";
    const DESCRIPTION: &'static str = "Who did what, newest first: filter the organization's audit log by action, resource, actor type, AI chat session and time window.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::AuditRead;
    type Actions = NoActions;
    type Input = QueryAuditInput;
    type Output = AuditOutput;
    type Reach = reach::Audit;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let filter = AuditFilter {
            action: input.action,
            resource_type: input.resource_type,
            resource_id: input.resource_id,
            actor_type: input.actor_type.map(|a| match a {
                ActorArg::User => ActorType::User,
                ActorArg::ApiKey => ActorType::ApiKey,
                ActorArg::OauthGrant => ActorType::OauthGrant,
                ActorArg::AiChat => ActorType::AiChat,
                ActorArg::Agent => ActorType::Agent,
                ActorArg::System => ActorType::System,
            }),
            since: Some(cx.now() - Duration::hours(i64::from(input.hours_back.unwrap_or(24)))),
            ..AuditFilter::default()
        };
        let filter = match input.chat_session_id.as_deref() {
            Some(s) => filter.in_chat_session(AiSessionId(parse_uuid("chatSessionId", s)?))?,
            None => filter,
        };
        let page = cx
            .audit()
            .query_audit(&filter, None, input.limit.unwrap_or(25).clamp(1, 100))
            .await?;
        let entries: Vec<AuditEntry> = page.records.into_iter().map(AuditEntry::from).collect();
        Ok(AuditOutput {
            showing: entries.len(),
            entries,
        })
    }
}
