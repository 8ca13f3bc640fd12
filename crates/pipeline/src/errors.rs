//! The structured error of a guard refusal, for every front door: the same fields as any tool
//! error (code, message, retryable, hint) plus the scopes or the retry time where they apply.
//! MCP answers some refusals as JSON-RPC errors (as the specification does) and carries this
//! object in the error's `data`.

use breeze_core::ScopeSet;
use breeze_guard::Refusal;
use breeze_tools::{ErrorCode, ToolError};

/// The structured error of `refusal`, for a caller holding `granted`.
pub fn refusal_error(refusal: &Refusal, granted: ScopeSet) -> ToolError {
    let message = refusal.to_string();
    match refusal {
        Refusal::MissingScope { scope, .. } => {
            let mut e = ToolError::new(ErrorCode::InsufficientScope, message).hint(format!(
                "do not retry; the API key needs the {scope} scope (ask an administrator for a key with it)"
            ));
            e.required_scopes = vec![*scope];
            e.granted_scopes = granted.iter().collect();
            e
        }
        Refusal::PersonOnly { .. } => ToolError::new(ErrorCode::Forbidden, message)
            .hint("do not retry; a person must do this in the dashboard"),
        Refusal::NoRole | Refusal::MissingPermission(_) => ToolError::new(
            ErrorCode::Forbidden,
            message,
        )
        .hint("do not retry; the key's user needs a role with this permission in the organization"),
        Refusal::NotAllowlisted { .. } => ToolError::new(ErrorCode::Forbidden, message)
            .hint("do not retry; an administrator must add the tool to MCP_EXECUTE_TOOL_ALLOWLIST"),
        Refusal::Blocked { .. } => {
            ToolError::new(ErrorCode::Forbidden, message).hint("do not retry; this tool never runs")
        }
        Refusal::NotApprovable { .. } => ToolError::new(ErrorCode::Forbidden, message),
        Refusal::RateLimited { retry_after, .. } => {
            let secs = retry_after.as_secs().max(1);
            let mut e = ToolError::new(ErrorCode::RateLimited, message)
                .hint(format!("wait {secs} seconds, then retry once"));
            e.retry_after_seconds = Some(secs);
            e
        }
        Refusal::LimiterUnavailable => {
            ToolError::new(ErrorCode::RateLimited, message).hint("retry in a few seconds")
        }
    }
}
