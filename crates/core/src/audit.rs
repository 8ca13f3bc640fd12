//! Audit events: who did what to which resource, with what result.
//!
//! The log is append-only. An event is built where the action happens and written by the
//! store, in the same transaction as the change it records when there is one.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{AuditId, OrgId, Timestamp, string_enum};

string_enum! {
    /// The kind of principal that acted.
    pub enum ActorType: "actor type" {
        User = "user",
        ApiKey = "api_key",
        /// An OAuth grant: an AI client acting for the user who consented.
        OauthGrant = "oauth_grant",
        /// The AI assistant acting for a signed-in person in one chat session (the id is the
        /// session's; the session names its person).
        AiChat = "ai_chat",
        Agent = "agent",
        System = "system",
    }
}

string_enum! {
    /// How the action ended.
    pub enum AuditResult: "audit result" {
        Success = "success",
        Failure = "failure",
        /// Refused by authentication or authorization before it ran.
        Denied = "denied",
    }
}

/// Who acted: a kind and that principal's id (a user id, key id, device id, or a system name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    #[serde(rename = "type")]
    pub kind: ActorType,
    pub id: String,
}

/// `kind:id`, e.g. `api_key:0192…` — how records name who created them.
impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.id)
    }
}

impl Actor {
    /// An actor of `kind` with `id`.
    pub fn new(kind: ActorType, id: impl ToString) -> Self {
        Self {
            kind,
            id: id.to_string(),
        }
    }

    /// Breeze itself (the CLI, the demo seeder, background jobs).
    pub fn system(name: &str) -> Self {
        Self::new(ActorType::System, name)
    }
}

/// An audit event about to be written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    pub org_id: Option<OrgId>,
    pub actor: Actor,
    /// Dotted verb, e.g. `api_key.create`, `auth.login`, `mcp.tools.call`.
    pub action: String,
    pub resource_type: String,
    pub resource_id: Option<String>,
    pub details: Value,
    pub result: AuditResult,
    pub error_message: Option<String>,
    pub request_id: Option<String>,
}

impl AuditEvent {
    /// A successful `action` by `actor` on a resource of `resource_type`.
    pub fn new(actor: Actor, action: &str, resource_type: &str) -> Self {
        Self {
            org_id: None,
            actor,
            action: action.to_owned(),
            resource_type: resource_type.to_owned(),
            resource_id: None,
            details: Value::Object(Default::default()),
            result: AuditResult::Success,
            error_message: None,
            request_id: None,
        }
    }

    /// The organization the action happened in.
    #[must_use]
    pub fn org(mut self, org: OrgId) -> Self {
        self.org_id = Some(org);
        self
    }

    /// The id of the resource acted on.
    #[must_use]
    pub fn resource(mut self, id: impl ToString) -> Self {
        self.resource_id = Some(id.to_string());
        self
    }

    /// Structured details; never secrets.
    #[must_use]
    pub fn details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// Marks the event as failed or denied, with the reason.
    #[must_use]
    pub fn failed(mut self, result: AuditResult, message: impl Into<String>) -> Self {
        self.result = result;
        self.error_message = Some(message.into());
        self
    }

    /// The request that caused the event.
    #[must_use]
    pub fn request(mut self, request_id: Option<String>) -> Self {
        self.request_id = request_id;
        self
    }
}

/// An audit event as stored (and as archived: one JSON line per record, read back by
/// deserializing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub id: AuditId,
    pub created_at: Timestamp,
    #[serde(flatten)]
    pub event: AuditEvent,
}
