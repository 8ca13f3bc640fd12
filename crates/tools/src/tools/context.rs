//! Device context memory: `get_device_context`, `set_device_context`, `resolve_device_context`.

use breeze_store::{ContextEntry, NewContext, StoreError};
use chrono::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::devices::find_device;
use breeze_core::Permission;

use crate::reach;
use crate::{Effect, NoActions, RateLimit, Registry, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetDeviceContext>();
    r.register::<ResolveDeviceContext>();
    r.register::<SetDeviceContext>();
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContextView {
    id: String,
    /// issue, quirk, followup or preference.
    context_type: String,
    summary: String,
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    details: Option<Value>,
    /// active, resolved or expired.
    state: String,
    created_by: String,
    created_at: String,
    expires_at: Option<String>,
    resolved_at: Option<String>,
}

impl ContextView {
    fn new(e: ContextEntry, now: breeze_core::Timestamp) -> Self {
        Self {
            id: e.id.to_string(),
            state: e.state(now).to_owned(),
            context_type: e.context_type,
            summary: e.summary,
            details: e.details,
            created_by: e.created_by,
            created_at: e.created_at.to_rfc3339(),
            expires_at: e.expires_at.map(|t| t.to_rfc3339()),
            resolved_at: e.resolved_at.map(|t| t.to_rfc3339()),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GetContextInput {
    /// The device's id (UUID).
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    /// Also list resolved and expired entries (default false).
    include_resolved: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ContextList {
    entries: Vec<ContextView>,
    showing: usize,
}

pub(crate) struct GetDeviceContext;

impl Tool for GetDeviceContext {
    const NAME: &'static str = "get_device_context";
    const TITLE: &'static str = "Get device context";
    const DESCRIPTION: &'static str = "What is remembered about a device: known issues, quirks, follow-ups and preferences recorded earlier. Read this before acting on a device. Resolved and expired entries are included only on request.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = GetContextInput;
    type Output = ContextList;
    type Reach = (reach::Context, reach::Devices);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        let now = cx.now();
        let entries: Vec<ContextView> = cx
            .context()
            .device_context(device.id, input.include_resolved.unwrap_or(false))
            .await?
            .into_iter()
            .map(|e| ContextView::new(e, now))
            .collect();
        Ok(ContextList {
            showing: entries.len(),
            entries,
        })
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ContextType {
    Issue,
    Quirk,
    Followup,
    Preference,
}

impl ContextType {
    fn as_str(self) -> &'static str {
        match self {
            ContextType::Issue => "issue",
            ContextType::Quirk => "quirk",
            ContextType::Followup => "followup",
            ContextType::Preference => "preference",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SetContextInput {
    /// The device's id (UUID).
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    context_type: ContextType,
    /// One line, 1-255 characters.
    #[schemars(length(min = 1, max = 255))]
    summary: String,
    /// Structured details (optional).
    details: Option<serde_json::Map<String, Value>>,
    /// Forget the entry after this many days (1-365).
    #[schemars(range(min = 1, max = 365))]
    expires_in_days: Option<u32>,
}

pub(crate) struct SetDeviceContext;

impl Tool for SetDeviceContext {
    const NAME: &'static str = "set_device_context";
    const TITLE: &'static str = "Remember something about a device";
    const DESCRIPTION: &'static str = "Record a known issue, quirk, follow-up or preference about a device so later conversations start with it. Optionally expires.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::DevicesWrite;
    const RATE_LIMIT: Option<RateLimit> = per(20, 300);
    const EFFECTS: &'static [Effect] = &[Effect::Create];
    type Actions = NoActions;
    type Input = SetContextInput;
    type Output = ContextView;
    type Reach = (reach::Context, reach::Devices);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        let entry = cx
            .context()
            .add_context(
                NewContext {
                    device_id: device.id,
                    context_type: input.context_type.as_str().to_owned(),
                    summary: input.summary,
                    details: input.details.map(Value::Object),
                    created_by: cx.actor.to_string(),
                    expires_at: input
                        .expires_in_days
                        .map(|d| cx.now() + Duration::days(i64::from(d))),
                },
                breeze_core::AuditEvent::new(
                    cx.actor.clone(),
                    "device_context.create",
                    "device_context",
                )
                .request(cx.request_id.clone()),
            )
            .await?;
        Ok(ContextView::new(entry, cx.now()))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ResolveContextInput {
    /// The context entry's id (UUID), from get_device_context.
    #[schemars(length(min = 36, max = 36))]
    context_id: String,
}

pub(crate) struct ResolveDeviceContext;

impl Tool for ResolveDeviceContext {
    const NAME: &'static str = "resolve_device_context";
    const TITLE: &'static str = "Resolve a device context entry";
    const DESCRIPTION: &'static str = "Mark a device context entry (by its id from get_device_context) as resolved. It leaves the active context and stays in the history.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::DevicesWrite;
    const RATE_LIMIT: Option<RateLimit> = per(20, 300);
    const EFFECTS: &'static [Effect] = &[Effect::Update];
    type Actions = NoActions;
    type Input = ResolveContextInput;
    type Output = ContextView;
    type Reach = reach::Context;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let not_found = || ToolError::not_found("Context entry not found or access denied");
        let id = uuid::Uuid::parse_str(&input.context_id).map_err(|_| not_found())?;
        let audit = breeze_core::AuditEvent::new(
            cx.actor.clone(),
            "device_context.resolve",
            "device_context",
        )
        .request(cx.request_id.clone());
        match cx.context().resolve_context(id, audit).await {
            Ok(e) => Ok(ContextView::new(e, cx.now())),
            Err(StoreError::NotFound(_)) => Err(not_found()),
            Err(e) => Err(e.into()),
        }
    }
}
