//! The tool contract: how a tool is declared, and what the registry derives from it.
//!
//! A tool is a unit struct implementing [`Tool`]: name, title, description, an input type whose
//! JSON Schema is derived, an output type (→ `outputSchema` and `structuredContent`), its listed
//! tier, its action type, the effects of a tool without actions, and the handler. Annotations
//! are *derived* from the effects, so no tool can claim to be read-only while it deletes.
//!
//! A tool whose calls pick an action declares the action enum with [`actions!`](crate::actions):
//! each variant with its wire name, tier, effect and permission in one line, so a variant
//! without them does not compile and no string-keyed table sits beside the enum. The input's
//! action field has that type; a call naming no action or an unknown one is judged at the
//! tool's highest tier (fail closed) before schema validation refuses it.

use std::future::Future;

pub use breeze_core::Permission;
pub use breeze_core::Tier;
use breeze_core::{Actor, Clock, OrgId, Scope, Timestamp, UserId};
use breeze_gateway::{Gateway, OrgFleet};
pub use breeze_guard::RateLimit;
use breeze_store::{OrgStore, Store, StoreError};

use crate::reach::{self, Reach};
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

/// One row of a tool's action table: what one action is called on the wire, and what it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    pub name: &'static str,
    pub tier: Tier,
    pub effect: Effect,
    /// What the acting user's role must allow for this action.
    pub permission: Permission,
}

/// A tool's action type, declared with [`actions!`](crate::actions): every variant carries its
/// row, so an action without a tier, effect or permission does not compile.
pub trait ActionSet: Copy + Send + Sync + 'static {
    /// Every variant, in declaration order.
    const ALL: &'static [Self];
    /// One row per variant, in declaration order (`TABLE[i]` is `ALL[i].rule()`).
    const TABLE: &'static [Action];

    /// This action's row (an exhaustive match).
    fn rule(self) -> &'static Action;

    /// The wire name, as the tool's action argument spells it.
    fn name(self) -> &'static str {
        self.rule().name
    }
}

/// The action type of a tool whose calls name no action: it has no variants and no rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoActions {}

impl ActionSet for NoActions {
    const ALL: &'static [Self] = &[];
    const TABLE: &'static [Action] = &[];

    fn rule(self) -> &'static Action {
        match self {}
    }
}

/// Declares a tool's action enum with each variant's wire name, tier, effect and permission in
/// one place:
///
/// ```
/// use breeze_tools::{ActionSet, Tier};
///
/// breeze_tools::actions! {
///     /// What `manage_groups` does.
///     enum GroupAction {
///         List = "list" => (T1, Read, DevicesRead),
///         Delete = "delete" => (T3, Delete, DevicesWrite),
///     }
/// }
/// assert_eq!(GroupAction::Delete.rule().tier, Tier::T3);
/// assert_eq!(GroupAction::TABLE[0].name, "list");
/// ```
///
/// A variant without its tier, effect and permission is refused at compile time:
///
/// ```compile_fail
/// breeze_tools::actions! {
///     enum GroupAction {
///         List = "list" => (T1, Read, DevicesRead),
///         Delete = "delete",
///     }
/// }
/// ```
///
/// The enum derives serde (each variant renamed to its wire name), `JsonSchema`, `Copy`, `Eq`
/// and `Debug`; its [`ActionSet`] table and `rule` are generated from the same list, so every
/// variant has exactly one row. Tiers, effects and permissions are [`Tier`], [`Effect`] and
/// [`Permission`] variant names. A `///` doc on the enum or a variant becomes a `description`
/// in the tool's input schema (models read it; it counts against the catalogue's size); notes
/// for developers go in `//` comments.
#[macro_export]
macro_rules! actions {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal => ($tier:ident, $effect:ident, $perm:ident) ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash,
            ::serde::Serialize, ::serde::Deserialize, ::schemars::JsonSchema,
        )]
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant ),+
        }

        impl $crate::ActionSet for $name {
            const ALL: &'static [Self] = &[$($name::$variant),+];
            const TABLE: &'static [$crate::Action] = &[$(
                $crate::actions!(@row $wire, $tier, $effect, $perm)
            ),+];

            fn rule(self) -> &'static $crate::Action {
                match self {
                    $( $name::$variant => &$crate::actions!(@row $wire, $tier, $effect, $perm) ),+
                }
            }
        }
    };
    (@row $wire:literal, $tier:ident, $effect:ident, $perm:ident) => {
        $crate::Action {
            name: $wire,
            tier: $crate::Tier::$tier,
            effect: $crate::Effect::$effect,
            permission: $crate::contract::Permission::$perm,
        }
    };
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
    /// A `breeze_discover` cursor used with other filters, from another catalog version, or
    /// not made by this server.
    InvalidCursor,
    /// A consolidated-catalog call named no operation the caller's catalog has.
    UnknownOperation,
    /// A consolidated-catalog call ran an operation through the wrong meta-tool (a write
    /// through `breeze_read`, …).
    ToolEffectMismatch,
    /// A read's answer is larger than `BREEZE_MCP_MAX_RESPONSE_BYTES`: narrow it and call
    /// again.
    ResponseTooLarge,
    /// A batch asked for `atomicity: "atomic"` where it cannot be honoured (more than one item);
    /// nothing ran.
    AtomicityUnsupported,
}

impl ErrorCode {
    /// Every code, for the error envelope's schema.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::Forbidden,
        ErrorCode::InsufficientScope,
        ErrorCode::RateLimited,
        ErrorCode::Conflict,
        ErrorCode::UpstreamError,
        ErrorCode::Internal,
        ErrorCode::InvalidCursor,
        ErrorCode::UnknownOperation,
        ErrorCode::ToolEffectMismatch,
        ErrorCode::ResponseTooLarge,
        ErrorCode::AtomicityUnsupported,
    ];

    /// What to do about an error of this code, when the site that raised it gave no hint of
    /// its own: every error carries a hint.
    pub fn default_hint(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => {
                "fix the fields the message names (see the tool's inputSchema) and call again"
            }
            ErrorCode::NotFound => "look the id up again with a read tool; do not guess ids",
            ErrorCode::Forbidden => "do not retry; tell the user the reason",
            ErrorCode::InsufficientScope => {
                "do not retry; the API key needs the scope in requiredScopes"
            }
            ErrorCode::RateLimited => "wait for the time named, then retry once",
            ErrorCode::Conflict => "re-read the current state, then decide whether to call again",
            ErrorCode::UpstreamError => "retry in a few seconds",
            ErrorCode::Internal => "retry at most once later, then report the message",
            ErrorCode::ResponseTooLarge => {
                "narrow the query (a smaller limit or a filter) and call again"
            }
            ErrorCode::InvalidCursor => {
                "start again without a cursor and follow nextCursor unchanged"
            }
            ErrorCode::UnknownOperation => "find the operation's name with breeze_discover",
            ErrorCode::ToolEffectMismatch => "call the meta-tool the message names",
            ErrorCode::AtomicityUnsupported => {
                "send the items with atomicity best_effort, or one item per call"
            }
        }
    }
}

// The branches below are repeated in every tool's listing, so they hold what a validating
// client needs (the required fields and the discriminating constants) and nothing else; what
// each field means is in docs/tools.md and the skill's error-recovery reference.

/// The schema of an error result's `structuredContent` (`{"error": ToolError}`), one branch
/// of every tool's `outputSchema`: `code`, `message`, `retryable` and `hint` always present.
pub fn error_envelope_schema() -> Value {
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": { "type": "object", "required": ["code", "message", "retryable", "hint"] }
        }
    })
}

/// The schema of a write whose answer exceeded `BREEZE_MCP_MAX_RESPONSE_BYTES`: the change
/// was made, its payload is left out (`status: "applied"`, `payloadOmitted: true`, `bytes`,
/// `hint`). One branch of the `outputSchema` of every tool that has a write.
pub fn payload_omitted_schema() -> Value {
    json!({
        "type": "object",
        "required": ["status", "payloadOmitted"],
        "properties": { "status": { "const": "applied" } }
    })
}

/// The schema of a Tier 3 call's answer while it waits for a person's approval
/// (`status: "pending_approval"`, `approvalId`, `description`, `expiresAt`, `message`), one
/// branch of the `outputSchema` of every tool that can need approval.
pub fn pending_approval_schema() -> Value {
    json!({
        "type": "object",
        "required": ["status", "approvalId", "expiresAt"],
        "properties": { "status": { "const": "pending_approval" } }
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
    /// For a rate limit: when to try again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: matches!(code, ErrorCode::RateLimited | ErrorCode::UpstreamError),
            hint: Some(code.default_hint().to_owned()),
            required_scopes: Vec::new(),
            granted_scopes: Vec::new(),
            retry_after_seconds: None,
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

    /// The `structuredContent` of the error result (and its text content): `{"error": …}`
    /// with code, message, retryable and a hint (the code's default when none was given).
    pub fn to_structured(&self) -> Value {
        if self.hint.is_some() {
            return json!({ "error": self });
        }
        let mut e = self.clone();
        e.hint = Some(self.code.default_hint().to_owned());
        json!({ "error": e })
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
            StoreError::Forbidden(m) => ToolError::new(ErrorCode::Forbidden, m),
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

/// What a handler acts through: the parts of the organization its tool's
/// [`Reach`] names (`cx.alerts()`, `cx.fleet()`, …; asking for another
/// does not compile), who acts, the clock, and where progress goes. Tools never check
/// authorization: a `ToolCx` is made only inside [`crate::ToolSpec::call`] and
/// [`crate::ToolSpec::precheck`], from the guard's verdict, and making one needs the
/// [`Unscoped`] handle no tool holds.
pub struct ToolCx<'a, R = ()> {
    org: OrgStore<'a>,
    fleet: OrgFleet<'a>,
    billing: Option<&'a breeze_billing::Billing>,
    pub(crate) actor: Actor,
    /// The person the actor acts for (a key's creator): whose timer, whose comments.
    pub(crate) user: UserId,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) request_id: Option<String>,
    /// Where progress of a long call goes (to the client's progress notifications).
    pub(crate) progress: Option<mpsc::UnboundedSender<ProgressReport>>,
    reach: std::marker::PhantomData<fn() -> R>,
}

/// The store and the device gateway for every organization: the escape hatch from tenancy,
/// held by the pipeline alone and opened only inside [`crate::ToolSpec::call`] and
/// [`crate::ToolSpec::precheck`], which narrow it to the organization a guard verdict names
/// (a [`ToolCx`]). Its fields are private, so holding one lets nobody read across
/// organizations.
#[derive(Clone)]
pub struct Unscoped {
    store: Store,
    gateway: Gateway,
    billing: Option<breeze_billing::Billing>,
}

impl Unscoped {
    pub fn new(store: Store, gateway: Gateway) -> Self {
        Self {
            store,
            gateway,
            billing: None,
        }
    }

    /// These handles with the outside billing services (payment links, distributor lookups);
    /// without them the tools that need them answer that billing is not set up.
    #[must_use]
    pub fn with_billing(mut self, billing: breeze_billing::Billing) -> Self {
        self.billing = Some(billing);
        self
    }
}

impl std::fmt::Debug for Unscoped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unscoped").finish_non_exhaustive()
    }
}

/// What the front door passes along with a call: its request id (for audit records), where
/// progress reports go, and what it wants of a Tier 3 call's wait for approval.
#[derive(Debug, Default)]
pub struct CallOptions {
    pub request_id: Option<String>,
    pub progress: Option<mpsc::UnboundedSender<ProgressReport>>,
    pub approval: ApprovalWait,
}

/// A front door's wishes for a Tier 3 call's wait (the AI chat's: its own timeout, and the
/// request as soon as it is recorded, to show the person at once). Default: the pipeline's
/// wait, and nobody told.
#[derive(Debug, Default, Clone)]
pub struct ApprovalWait {
    /// How long the call waits for the decision; `None`: the pipeline's setting.
    pub wait: Option<std::time::Duration>,
    /// Told each approval request the call records, as soon as it is recorded.
    pub requested: Option<mpsc::UnboundedSender<breeze_store::ApprovalRecord>>,
    /// The AI client making the call, as it named itself (MCP `clientInfo.name`): kept on
    /// the approval request for the person deciding.
    pub client: Option<String>,
}

/// One progress report of a long-running call.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressReport {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

impl<'a, R: Reach> ToolCx<'a, R> {
    pub(crate) fn new(
        unscoped: &'a Unscoped,
        org: OrgId,
        (actor, user): (Actor, UserId),
        options: CallOptions,
    ) -> Self {
        ToolCx {
            org: unscoped.store.org(org),
            fleet: unscoped.gateway.org(org),
            billing: unscoped.billing.as_ref(),
            actor,
            user,
            clock: unscoped.store.clock().as_ref(),
            request_id: options.request_id,
            progress: options.progress,
            reach: std::marker::PhantomData,
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

macro_rules! reaches {
    ($( $accessor:ident: $domain:ident => $handle:ident; )*) => {
        impl<'a, R: Reach> ToolCx<'a, R> {$(
            #[doc = concat!("The organization's [`", stringify!($handle), "`](breeze_store::", stringify!($handle), "); compiles only in a tool whose reach includes [`reach::", stringify!($domain), "`].")]
            pub fn $accessor(&self) -> breeze_store::$handle<'a> {
                const {
                    assert!(
                        R::DOMAINS & reach::$domain::DOMAINS != 0,
                        concat!("this tool's `type Reach` does not include reach::", stringify!($domain))
                    );
                };
                self.org.$accessor()
            }
        )*}
    };
}

reaches! {
    agents: Agents => OrgAgents;
    alerts: Alerts => OrgAlerts;
    approvals: Approvals => OrgApprovals;
    audit: Audit => OrgAudit;
    automations: Automations => OrgAutomations;
    catalog: Catalog => OrgCatalog;
    commands: Commands => OrgCommands;
    compliance: Compliance => OrgCompliance;
    config_policies: ConfigPolicies => OrgConfigPolicies;
    context: Context => OrgContext;
    contracts: Contracts => OrgContracts;
    deployments: Deployments => OrgDeployments;
    devices: Devices => OrgDevices;
    dynamic_groups: DynamicGroups => OrgDynamicGroups;
    invoices: Invoices => OrgInvoices;
    live_queries: LiveQueries => OrgLiveQueries;
    maintenance: Maintenance => OrgMaintenance;
    patches: Patches => OrgPatches;
    quotes: Quotes => OrgQuotes;
    reports: Reports => OrgReports;
    scripts: Scripts => OrgScripts;
    security: Security => OrgSecurity;
    telemetry: Telemetry => OrgTelemetry;
    tenancy: Tenancy => OrgTenancy;
    tickets: Tickets => OrgTickets;
    vulnerabilities: Vulnerabilities => OrgVulnerabilities;
}

impl<'a, R: Reach> ToolCx<'a, R> {
    /// The outside billing services for this organization (payment links, distributor
    /// lookups); compiles only in a tool whose reach includes [`reach::Billing`]. An error
    /// when this server runs without them.
    pub fn billing(&self) -> Result<breeze_billing::OrgBilling<'a>, ToolError> {
        const {
            assert!(
                R::DOMAINS & reach::Billing::DOMAINS != 0,
                "this tool's `type Reach` does not include reach::Billing"
            );
        };
        self.billing.map(|b| b.org(self.org)).ok_or_else(|| {
            ToolError::new(
                ErrorCode::Forbidden,
                "this server runs without its outside billing services",
            )
        })
    }

    /// The device gateway confined to this organization; compiles only in a tool whose reach
    /// includes [`reach::Fleet`].
    pub fn fleet(&self) -> &OrgFleet<'a> {
        const {
            assert!(
                R::DOMAINS & reach::Fleet::DOMAINS != 0,
                "this tool's `type Reach` does not include reach::Fleet"
            );
        };
        &self.fleet
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
    /// The tool's tier as the specification lists it. For a tool with actions it is what the
    /// listing shows (`_meta`); every call is judged at its action's tier instead.
    const TIER: Tier;
    /// What the acting user's role must allow (for a tool with actions, each action's own).
    const PERMISSION: Permission;
    /// The per-user sliding-window limit, if the tool has one.
    const RATE_LIMIT: Option<RateLimit> = None;
    /// Effects of a tool without actions (a tool with actions has its actions' effects).
    const EFFECTS: &'static [Effect] = &[Effect::Read];
    /// The actions a call can name in its [`Tool::ACTION_KEY`] argument, each with its tier,
    /// effect and permission ([`actions!`](crate::actions)); [`NoActions`] for a tool without.
    /// The input's action field has this type.
    type Actions: ActionSet;
    /// The argument naming the action.
    const ACTION_KEY: &'static str = "action";

    type Input: DeserializeOwned + JsonSchema + Send + 'static;
    type Output: Serialize + JsonSchema + Send + 'static;
    /// What of the organization the handler can touch ([`crate::reach`]).
    type Reach: Reach;

    fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;

    /// Everything about a call that can be checked before a person is asked to approve it
    /// (the device is the caller's and online, the script exists, the arguments make sense),
    /// failing with the error the call itself would give; and the stored data the call
    /// depends on, to pin in the approval. Run before a Tier 3 call becomes an approval
    /// request, and again just before the approved call runs.
    fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> impl Future<Output = Result<Option<Pin>, ToolError>> + Send {
        let _ = (cx, input);
        async { Ok(None) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::actions! {
        /// A test action type.
        enum Sample {
            /// Documented variants keep their rows.
            Look = "look" => (T1, Read, DevicesRead),
            Poke = "poke_it" => (T2, Update, DevicesWrite),
            Wipe = "wipe" => (T3, Delete, FilesWrite),
        }
    }

    #[test]
    fn declared_actions_carry_their_rows() {
        assert_eq!(Sample::ALL.len(), Sample::TABLE.len());
        for (i, a) in Sample::ALL.iter().enumerate() {
            assert_eq!(a.rule(), &Sample::TABLE[i], "{a:?}");
            assert_eq!(serde_json::to_value(a).ok(), Some(json!(a.name())));
            let back: Sample = serde_json::from_value(json!(a.name())).unwrap_or_else(|e| {
                panic!("{a:?} does not read back from its wire name: {e}");
            });
            assert_eq!(back, *a);
        }
        assert_eq!(
            Sample::Poke.rule(),
            &Action {
                name: "poke_it",
                tier: Tier::T2,
                effect: Effect::Update,
                permission: Permission::DevicesWrite,
            }
        );
        assert!(serde_json::from_value::<Sample>(json!("Poke")).is_err());
        assert!(NoActions::TABLE.is_empty() && NoActions::ALL.is_empty());
    }

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
