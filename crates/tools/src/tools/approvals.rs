//! `get_approval_status`: where a Tier 3 call's approval request stands, and its result once
//! it ran — for clients that got a "pending approval" answer instead of holding the call open.
//! Only the API key that made the request can see it.

use breeze_core::{ActorType, Permission};
use breeze_store::StoreError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parse_uuid;
use crate::reach;
use crate::{NoActions, Registry, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetApprovalStatus>();
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct StatusInput {
    /// The approval request's id (UUID), from the pending answer.
    #[schemars(length(min = 36, max = 36))]
    approval_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusOutput {
    approval_id: String,
    tool: String,
    /// The tool's action, when it has actions.
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<String>,
    /// The arguments the approval is pinned to: it runs with exactly these.
    #[schemars(with = "serde_json::Map<String, Value>")]
    arguments: Value,
    description: String,
    /// pending, approved, executing, completed, failed, denied, reported or expired.
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    expires_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    decided_at: Option<String>,
    /// The call's output (completed) or its error (failed), once it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    result: Option<Value>,
}

const NOT_FOUND: &str = "Approval request not found or access denied";

pub(crate) struct GetApprovalStatus;

impl Tool for GetApprovalStatus {
    const NAME: &'static str = "get_approval_status";
    const TITLE: &'static str = "Get approval status";
    const DESCRIPTION: &'static str = "Where a Tier 3 call's approval request stands (pending, approved, completed, denied, expired, …) and, once it ran, its result. Use the approvalId from a pending_approval answer.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = StatusInput;
    type Output = StatusOutput;
    type Reach = reach::Approvals;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let id = parse_uuid("approvalId", &input.approval_id)?;
        let r = match cx.approvals().get_approval(id).await {
            Ok(r) => r,
            Err(StoreError::NotFound(_)) => return Err(ToolError::not_found(NOT_FOUND)),
            Err(e) => return Err(e.into()),
        };
        // Only the credential that asked may follow the request and read its result.
        let own = r
            .api_key_id
            .is_some_and(|k| cx.actor.kind == ActorType::ApiKey && cx.actor.id == k.to_string());
        if !own {
            return Err(ToolError::not_found(NOT_FOUND));
        }
        Ok(StatusOutput {
            approval_id: r.id.to_string(),
            tool: r.tool,
            action: r.action,
            arguments: r.arguments,
            description: r.description,
            status: r.status.to_string(),
            reason: r.reason,
            expires_at: r.expires_at.to_rfc3339(),
            decided_at: r.decided_at.map(|t| t.to_rfc3339()),
            result: r.result,
        })
    }
}
