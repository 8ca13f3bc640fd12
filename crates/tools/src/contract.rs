//! The tool contract: how a tool is declared, and what the registry derives from it.
//!
//! A tool is a unit struct implementing [`Tool`]: name, title, description, an input type whose
//! JSON Schema is derived, an output type (→ `outputSchema` and `structuredContent`), a base
//! tier, a per-action tier table, the effects its actions have, and the handler. Annotations are
//! *derived* from the effects, so no tool can claim to be read-only while it deletes.

use std::future::Future;

pub use breeze_core::Tier;
use breeze_core::{Actor, Clock, OrgId, Permission, Scope, Timestamp};
use breeze_gateway::{Gateway, OrgFleet};
pub use breeze_guard::RateLimit;
use breeze_store::{OrgStore, Store, StoreError};
use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// What a tool (or one of its actions) does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    Read,
    Create,
    Update,
    Delete,
    /// Runs something on a device: not idempotent, reaches beyond Breeze's own data.
    Execute,
}

/// One row of a tool's action table.
#[derive(Debug, Clone, Copy)]
pub struct Action {
    pub name: &'static str,
    pub tier: Tier,
    pub effect: Effect,
    /// What the acting user's role must allow for this action.
    pub permission: Permission,
}

/// Shorthand for an [`Action`] row.
pub const fn action(
    name: &'static str,
    tier: Tier,
    effect: Effect,
    permission: Permission,
) -> Action {
    Action {
        name,
        tier,
        effect,
        permission,
    }
}

/// Shorthand for a [`RateLimit`]: `max` calls per `window_secs`.
pub const fn per(max: u32, window_secs: u64) -> Option<RateLimit> {
    Some(RateLimit { max, window_secs })
}

/// The MCP behaviour hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

impl Hints {
    /// Derives hints from effects: reads are read-only and idempotent; creates are additive and
    /// not idempotent; updates are idempotent and not destructive; deletes are destructive and
    /// idempotent; executes are destructive, not idempotent, and open-world. A tool with
    /// several kinds of effect takes the strongest and is never idempotent.
    pub fn derive(effects: &[Effect]) -> Hints {
        let has = |e: Effect| effects.contains(&e);
        let read_only = !effects.is_empty() && effects.iter().all(|e| *e == Effect::Read);
        let kinds = {
            let mut k: Vec<Effect> = effects
                .iter()
                .copied()
                .filter(|e| *e != Effect::Read)
                .collect();
            k.sort_by_key(|e| *e as u8);
            k.dedup();
            k
        };
        let idempotent = read_only
            || (kinds.len() == 1
                && matches!(kinds[0], Effect::Update | Effect::Delete)
                && !has(Effect::Execute));
        Hints {
            read_only,
            destructive: has(Effect::Delete) || has(Effect::Execute),
            idempotent,
            open_world: has(Effect::Execute),
        }
    }
}

/// A machine-readable tool error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    InvalidArgument,
    NotFound,
    Forbidden,
    InsufficientScope,
    RateLimited,
    Conflict,
    UpstreamError,
    Internal,
}

impl ErrorCode {
    /// Every code, for the error envelope's schema.
    pub const ALL: [ErrorCode; 8] = [
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::Forbidden,
        ErrorCode::InsufficientScope,
        ErrorCode::RateLimited,
        ErrorCode::Conflict,
        ErrorCode::UpstreamError,
        ErrorCode::Internal,
    ];
}

/// The schema of an error result's `structuredContent` (`{"error": ToolError}`), one branch
/// of every tool's `outputSchema`.
pub fn error_envelope_schema() -> Value {
    let codes: Vec<Value> = ErrorCode::ALL
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let scopes = json!({ "type": "array", "items": { "type": "string" } });
    json!({
        "type": "object",
        "description": "The call failed (isError: true).",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "retryable"],
                "properties": {
                    "code": { "type": "string", "enum": codes },
                    "message": { "type": "string" },
                    "retryable": { "type": "boolean" },
                    "hint": { "type": "string" },
                    "requiredScopes": scopes,
                    "grantedScopes": scopes,
                }
            }
        }
    })
}

/// The schema of a Tier 3 call's answer while it waits for a person's approval, one branch
/// of the `outputSchema` of every tool that can need approval.
pub fn pending_approval_schema() -> Value {
    json!({
        "type": "object",
        "description": "The call waits for a person's approval; check with get_approval_status.",
        "required": ["status", "approvalId", "description", "expiresAt", "message"],
        "properties": {
            "status": { "type": "string", "const": "pending_approval" },
            "approvalId": { "type": "string" },
            "description": { "type": "string" },
            "expiresAt": { "type": "string" },
            "message": { "type": "string" },
        }
    })
}

/// A failed tool call, shown to the model as `isError: true` with `structuredContent.error`.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{message}")]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
    pub retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub required_scopes: Vec<Scope>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub granted_scopes: Vec<Scope>,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: matches!(code, ErrorCode::RateLimited | ErrorCode::UpstreamError),
            hint: None,
            required_scopes: Vec::new(),
            granted_scopes: Vec::new(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The `structuredContent` of the error result.
    pub fn to_structured(&self) -> Value {
        json!({ "error": self })
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => {
                ToolError::not_found(format!("{what} not found or access denied"))
            }
            StoreError::Conflict(m) => ToolError::new(ErrorCode::Conflict, m),
            StoreError::Invalid(m) => ToolError::invalid(m),
            StoreError::Unavailable(inner) => {
                tracing::warn!(error = %inner, "tool found the database unavailable");
                ToolError::new(
                    ErrorCode::UpstreamError,
                    "the database is busy or unavailable",
                )
                .hint("retry in a few seconds")
            }
            other => {
                tracing::error!(error = %other, "tool failed on the store");
                ToolError::new(ErrorCode::Internal, "internal error").hint("try again later")
            }
        }
    }
}

/// What a handler can reach: the store and the device gateway confined to the organization the
/// guard cleared the call for, who acts, the clock, and where progress goes. Tools never check
/// authorization: a `ToolCx` is made only inside [`crate::ToolSpec::call`] and
/// [`crate::ToolSpec::precheck`], from the guard's verdict.
pub struct ToolCx<'a> {
    pub(crate) org: OrgStore<'a>,
    /// The device gateway: runs commands on the organization's agents.
    pub(crate) fleet: OrgFleet<'a>,
    pub(crate) actor: Actor,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) request_id: Option<String>,
    /// Where progress of a long call goes (to the client's progress notifications).
    pub(crate) progress: Option<mpsc::UnboundedSender<ProgressReport>>,
}

/// The services tools run against, for every organization; a handler sees them only through a
/// [`ToolCx`] narrowed to the cleared organization.
#[derive(Clone, Copy)]
pub struct Services<'a> {
    pub store: &'a Store,
    pub gateway: &'a Gateway,
}

/// What the front door passes along with a call: its request id (for audit records) and where
/// progress reports go.
#[derive(Debug, Default)]
pub struct CallOptions {
    pub request_id: Option<String>,
    pub progress: Option<mpsc::UnboundedSender<ProgressReport>>,
}

/// One progress report of a long-running call.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressReport {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

impl<'a> ToolCx<'a> {
    pub(crate) fn new(
        services: Services<'a>,
        org: OrgId,
        actor: Actor,
        options: CallOptions,
    ) -> Self {
        ToolCx {
            org: services.store.org(org),
            fleet: services.gateway.org(org),
            actor,
            clock: services.store.clock().as_ref(),
            request_id: options.request_id,
            progress: options.progress,
        }
    }

    pub fn org_id(&self) -> OrgId {
        self.org.org_id()
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Reports progress, when the caller listens for it.
    pub fn report(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let Some(tx) = &self.progress {
            let _ = tx.send(ProgressReport {
                progress,
                total,
                message,
            });
        }
    }
}

/// An output serialized inside the handler, for outputs that borrow what the handler read (a
/// device listing borrows the directory's snapshot). `T` is the output's shape, usually the
/// `'static` form of the borrowed type the handler fills in: its schema is the tool's
/// `outputSchema`.
pub struct Rendered<T> {
    json: Box<serde_json::value::RawValue>,
    shape: std::marker::PhantomData<fn() -> T>,
}

impl<T> Rendered<T> {
    /// `output` — a `T`, or `T` with shorter borrows — serialized now.
    pub fn of(output: &impl Serialize) -> Result<Self, ToolError> {
        serde_json::value::to_raw_value(output)
            .map(|json| Self {
                json,
                shape: std::marker::PhantomData,
            })
            .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))
    }
}

impl<T> Serialize for Rendered<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(s)
    }
}

impl<T: JsonSchema> JsonSchema for Rendered<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// The stored data a Tier 3 call depends on (a script's body, …), as its approver reviews it.
/// The approval keeps it with its SHA-256, and the call runs only while it is unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    /// One line for the approval's description, e.g. the script's name and body hash.
    pub summary: String,
    /// The snapshot itself, shown to the approver.
    pub data: Value,
}

/// One tool. See the module docs.
pub trait Tool: Send + Sync + 'static {
    const NAME: &'static str;
    const TITLE: &'static str;
    const DESCRIPTION: &'static str;
    /// The tier of the tool as a whole (the per-action table may raise a call above it).
    const TIER: Tier;
    /// What the acting user's role must allow (actions may name their own).
    const PERMISSION: Permission;
    /// The per-user sliding-window limit, if the tool has one.
    const RATE_LIMIT: Option<RateLimit> = None;
    /// Effects of a tool without actions.
    const EFFECTS: &'static [Effect] = &[Effect::Read];
    /// Per-action tiers and effects, for tools whose [`Tool::ACTION_KEY`] argument picks an
    /// action.
    const ACTIONS: &'static [Action] = &[];
    /// The argument naming the action.
    const ACTION_KEY: &'static str = "action";

    type Input: DeserializeOwned + JsonSchema + Send + 'static;
    type Output: Serialize + JsonSchema + Send + 'static;

    fn call(
        cx: &ToolCx<'_>,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;

    /// Everything about a call that can be checked before a person is asked to approve it
    /// (the device is the caller's and online, the script exists, the arguments make sense),
    /// failing with the error the call itself would give; and the stored data the call
    /// depends on, to pin in the approval. Run before a Tier 3 call becomes an approval
    /// request, and again just before the approved call runs.
    fn precheck(
        cx: &ToolCx<'_>,
        input: &Self::Input,
    ) -> impl Future<Output = Result<Option<Pin>, ToolError>> + Send {
        let _ = (cx, input);
        async { Ok(None) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_follow_effects() {
        let h = Hints::derive(&[Effect::Read]);
        assert!(h.read_only && h.idempotent && !h.destructive && !h.open_world);
        let h = Hints::derive(&[Effect::Create]);
        assert!(!h.read_only && !h.idempotent && !h.destructive);
        let h = Hints::derive(&[Effect::Update]);
        assert!(!h.read_only && h.idempotent && !h.destructive);
        let h = Hints::derive(&[Effect::Delete]);
        assert!(h.destructive && h.idempotent);
        let h = Hints::derive(&[Effect::Execute]);
        assert!(h.destructive && !h.idempotent && h.open_world);
        let h = Hints::derive(&[Effect::Read, Effect::Create, Effect::Delete]);
        assert!(
            !h.read_only && h.destructive && !h.idempotent,
            "mixed tools are never idempotent"
        );
        let h = Hints::derive(&[Effect::Read, Effect::Update]);
        assert!(!h.read_only && h.idempotent);
    }
}
