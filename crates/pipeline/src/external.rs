//! Calls of external tools (Tool Sources, `breeze-sources`): a name Breeze's registry does
//! not hold that addresses `<slug>__<name>` of a source the caller's organization sees. The
//! call takes the same steps as a built-in one — the guard (scope for the tool's tier, the
//! role's `external_tools.read` or `.write`, the per-tool limit, the production allowlist),
//! validation against the upstream's input schema, for Tier 3 a durable approval pinned to the
//! definition's hash, then the upstream call (audited by `breeze-sources` with source, tool,
//! hash, duration and outcome) and the response budget.
//!
//! A tool that is not enabled, removed upstream, unaddressable, or whose source is not active
//! answers as unknown: a caller learns nothing of tools nobody offered it. An approved Tier 3
//! call is released only if the tool still has the approved definition, is still enabled and
//! its source still active; an upstream that stopped answering fails the release with the
//! reason. `requestId` replays and batch envelopes are not offered for external tools: their
//! arguments pass to the upstream as given.

use std::borrow::Cow;

use breeze_core::{Permission, Tier};
use breeze_guard::{Clearance, Guarded, RateLimit};
use breeze_sources::service::{CallFailure, CallResult, Sources};
use breeze_store::{ApprovalRecord, AuditEvent, SourceTool};
use breeze_tools::{CallOptions, ErrorCode, ToolError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{
    CallOutcome, Caller, Pipeline,
    approvals::{Draft, approval_of, arguments_hash, refused, void},
    budget, raw,
    standing::{self, StandingError},
};

/// Calls of one external tool a person may make per minute.
const LIMIT: RateLimit = RateLimit {
    max: 60,
    window_secs: 60,
};

/// An external tool as the guard judges it: its address, its tier (the administrator's), the
/// permission that tier needs, and its compiled input schema.
pub(crate) struct External {
    address: String,
    pub(crate) found: SourceTool,
    validator: jsonschema::Validator,
}

impl External {
    /// The tool `found` under `address`, or why its input schema cannot be used.
    fn new(address: &str, found: SourceTool) -> Result<Self, ToolError> {
        let validator = jsonschema::validator_for(&found.tool.input_schema).map_err(|e| {
            ToolError::new(
                ErrorCode::UpstreamError,
                format!("the upstream's input schema for {address} is not valid JSON Schema: {e}"),
            )
        })?;
        Ok(Self {
            address: address.to_owned(),
            found,
            validator,
        })
    }

    fn validate(&self, args: &Value) -> Result<(), ToolError> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(args)
            .take(10)
            .map(|e| {
                let path = e.instance_path().to_string();
                format!("{}: {e}", path.trim_start_matches('/'))
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ToolError::invalid(format!(
                "Invalid arguments for {}: {}",
                self.address,
                problems.join("; ")
            )))
        }
    }

    /// The definition's hash as the approval record pins it.
    pub(crate) fn definition_hash(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        if let Ok(bytes) = hex::decode(&self.found.tool.definition_hash) {
            let n = bytes.len().min(32);
            out[..n].copy_from_slice(&bytes[..n]);
        }
        out
    }

    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    pub(crate) fn title(&self) -> String {
        format!(
            "{} ({})",
            self.found.tool.name, self.found.source.display_name
        )
    }
}

impl Guarded for External {
    fn name(&self) -> &str {
        &self.address
    }

    fn clearance_name(&self) -> Cow<'static, str> {
        Cow::Owned(self.address.clone())
    }

    fn tier_for(&self, _: &Value) -> Tier {
        self.found.tool.tier
    }

    fn action_for(&self, _: &Value) -> Option<&'static str> {
        None
    }

    fn lowest_tier(&self) -> Tier {
        self.found.tool.tier
    }

    fn permission_for(&self, _: &Value) -> Permission {
        if self.found.tool.tier == Tier::T1 {
            Permission::ExternalToolsRead
        } else {
            Permission::ExternalToolsWrite
        }
    }

    fn rate_limit(&self) -> Option<RateLimit> {
        Some(LIMIT)
    }
}

fn failure(e: CallFailure) -> ToolError {
    let code = match e {
        CallFailure::Unknown(_) => ErrorCode::NotFound,
        CallFailure::Unavailable(_) => ErrorCode::Conflict,
        CallFailure::Upstream(_) => ErrorCode::UpstreamError,
    };
    ToolError::new(code, e.to_string())
}

/// An upstream's answer as the call's outcome: its result, or a structured upstream error
/// carrying the upstream's status and what it said.
fn answer(address: &str, r: CallResult) -> Result<Value, ToolError> {
    if !r.is_error {
        return Ok(r.result);
    }
    let said: String = r.result.to_string().chars().take(500).collect();
    let mut e = ToolError::new(
        ErrorCode::UpstreamError,
        match r.status {
            Some(s) => format!("{address}: the upstream answered HTTP {s}: {said}"),
            None => format!("{address}: the upstream reported an error: {said}"),
        },
    );
    e.retryable = r.status.is_some_and(|s| s >= 500 || s == 429);
    e.hint = r.status.map(|s| format!("upstreamStatus={s}"));
    Err(e)
}

/// An external tool as a listing shows it.
#[derive(Debug, Clone)]
pub struct ExternalListing {
    /// `<slug>__<name>`.
    pub name: String,
    pub title: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub tier: Tier,
}

impl Pipeline {
    /// The external tools offered to MCP clients that `caller` may call: enabled tools of
    /// active sources marked "offer to MCP clients", whose tier its scopes reach and whose
    /// grant its role holds. Read from the store only — no upstream is asked, so a slow or
    /// broken source never delays a listing. A source whose tools cannot be read is left out
    /// (and logged), never failing the listing.
    pub async fn visible_external(&self, caller: &Caller) -> Vec<ExternalListing> {
        let Some(_) = &self.inner.sources else {
            return Vec::new();
        };
        let offered = match self
            .inner
            .store
            .org(caller.org())
            .tool_sources()
            .offered_tools()
            .await
        {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "external tools could not be listed");
                return Vec::new();
            }
        };
        let policy = self.inner.guard.scope_policy();
        offered
            .into_iter()
            .filter_map(|t| {
                let address =
                    breeze_core::tool_source::address(&t.source.slug, &t.tool.name).ok()?;
                let ext = External::new(&address, t).ok()?;
                let op = breeze_core::Operation {
                    tier: ext.found.tool.tier,
                    permission: ext.permission_for(&Value::Null),
                };
                breeze_core::authz::authorize(caller, op, policy).ok()?;
                Some(ExternalListing {
                    title: ext.title(),
                    description: format!(
                        "[{} — external tool, Tier {}] {}",
                        ext.found.source.display_name,
                        ext.found.tool.tier.number(),
                        ext.found.tool.description
                    ),
                    input_schema: ext.found.tool.input_schema.clone(),
                    output_schema: ext.found.tool.output_schema.clone(),
                    tier: ext.found.tool.tier,
                    name: address,
                })
            })
            .collect()
    }

    /// Whether `address` is a tool of a source offered to MCP clients in `caller`'s
    /// organization: the MCP door calls no other external tool (the AI chat may).
    pub async fn offered_to_mcp(&self, caller: &Caller, address: &str) -> bool {
        let Some(sources) = &self.inner.sources else {
            return false;
        };
        matches!(
            sources.find_tool(caller.org(), address).await,
            Ok(Some(t)) if t.source.offer_to_mcp
        )
    }

    /// The external tool `address` callable in `org` now, if any.
    async fn external(
        &self,
        sources: &Sources,
        org: breeze_core::OrgId,
        address: &str,
    ) -> Result<Option<External>, ToolError> {
        let found = sources
            .find_tool(org, address)
            .await
            .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))?;
        match found {
            Some(t) if Sources::unavailable(&t).is_none() => External::new(address, t).map(Some),
            _ => Ok(None),
        }
    }

    /// A call of a name the registry does not hold: an external tool's, or unknown.
    pub(crate) async fn call_external(
        &self,
        caller: &Caller,
        address: &str,
        arguments: Value,
        options: CallOptions,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let Some(sources) = self.inner.sources.clone() else {
            return CallOutcome::UnknownTool;
        };
        let ext = match self.external(&sources, caller.org(), address).await {
            Ok(Some(ext)) => ext,
            Ok(None) => return CallOutcome::UnknownTool,
            Err(e) => return CallOutcome::Failed(e),
        };
        let clearance = match self.inner.guard.check(caller, &ext, &arguments).await {
            Ok(c) => c,
            Err(refusal) => return CallOutcome::Refused(refusal),
        };
        if let Err(e) = ext.validate(&arguments) {
            return CallOutcome::Failed(e);
        }
        let write = ext.found.tool.tier > Tier::T1;
        let outcome = match clearance {
            Clearance::Run(cleared) => {
                if !cleared.binds(&ext, &arguments) {
                    return CallOutcome::Failed(ToolError::new(
                        ErrorCode::Internal,
                        "the clearance was for another call; nothing was run",
                    ));
                }
                let audit = AuditEvent::new(caller.actor(), "external_tool.call", "tool_source");
                let call = sources.call(caller.org(), &ext.found, arguments, audit);
                let result = tokio::select! {
                    r = call => r,
                    () = cancel.cancelled() => return CallOutcome::Failed(crate::cancelled()),
                };
                match result.map_err(failure).and_then(|r| answer(address, r)) {
                    Ok(v) => CallOutcome::Output(raw(&v)),
                    Err(e) => CallOutcome::Failed(e),
                }
            }
            Clearance::NeedsApproval(awaiting) => {
                // Checked again at release, as the requester stands then.
                drop(awaiting);
                let draft = Draft::external(&ext, arguments, options.request_id.clone());
                let approval = &options.approval;
                match Box::pin(self.approve_and_run(
                    caller,
                    draft,
                    options.progress,
                    approval,
                    cancel,
                ))
                .await
                {
                    Ok(v) => CallOutcome::Output(raw(&v)),
                    Err(outcome) => outcome,
                }
            }
        };
        budget::apply(self.inner.max_response_bytes, write, outcome)
    }

    /// Runs an approved request for an external tool: only if the tool still has the
    /// definition the approver saw, is enabled, its source active, the arguments the approved
    /// ones and the requester still allowed.
    pub(crate) async fn release_external(&self, r: &ApprovalRecord) -> Result<Value, ToolError> {
        let Some(sources) = self.inner.sources.clone() else {
            return Err(refused(format!(
                "the tool {} no longer exists; nothing was run",
                r.tool
            )));
        };
        let found = sources
            .find_tool(r.org_id, &r.tool)
            .await
            .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))?
            .ok_or_else(|| {
                refused(format!(
                    "the tool {} no longer exists; nothing was run",
                    r.tool
                ))
            })?;
        if let Some(why) = Sources::unavailable(&found) {
            return Err(refused(format!(
                "{why} since it was approved; nothing was run"
            )));
        }
        let ext = External::new(&r.tool, found)?;
        if ext.definition_hash().as_slice() != r.definition_hash.as_slice() {
            return Err(refused(format!(
                "the definition of {} changed after it was approved; refusing to run what nobody approved",
                r.tool
            )));
        }
        if arguments_hash(&r.arguments).as_slice() != r.arguments_hash.as_slice() {
            return Err(refused(
                "the arguments differ from the approved ones; nothing was run",
            ));
        }
        let caller = match standing::approval_release(&self.inner.store, r).await {
            Ok(caller) => caller,
            Err(StandingError::Void(why)) => {
                return Err(void(r, &format!("the requesting {why}")));
            }
            Err(StandingError::Store(e)) => return Err(e.into()),
        };
        ext.validate(&r.arguments)?;
        let guard = &self.inner.guard;
        let awaiting = guard
            .recheck_approved(&caller, &ext, &r.arguments)
            .map_err(|refusal| void(r, &refusal.to_string()))?;
        let cleared = guard
            .release(awaiting, approval_of(r, &r.arguments))
            .map_err(|refusal| void(r, &refusal.to_string()))?;
        if !cleared.binds(&ext, &r.arguments) {
            return Err(refused("the release was for another call; nothing was run"));
        }
        let audit = AuditEvent::new(caller.actor(), "external_tool.call", "tool_source");
        let result = sources
            .call(r.org_id, &ext.found, r.arguments.clone(), audit)
            .await
            .map_err(failure)?;
        answer(&r.tool, result)
    }
}
