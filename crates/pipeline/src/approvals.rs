//! Step-up approval of Tier 3 calls: the request, the wait, the decision, the one execution.
//!
//! A Tier 3 call that passed every other check — the guard, the schema, and the tool's own
//! [`breeze_tools::Tool::precheck`] (device, script, arguments: refused with the call's own
//! error before anyone is asked) — becomes a durable request ([`breeze_store::ApprovalRecord`])
//! pinned to the tool definition and arguments the approver sees (SHA-256 of each) and to a
//! snapshot of the stored data the call depends on (a script's body, …). The caller waits —
//! bounded by [`ApprovalConfig::wait`] (45 s by default, below common client request timeouts)
//! and the request's 5-minute expiry, with progress notifications, polling the row every second
//! and woken at once by a decision made in this process or announced by another server on the
//! database ([`Approvals::spawn_bus_follower`]); five consecutive database errors end the wait
//! (circuit breaker). While it waits the request belongs to that call: if the client cancels
//! it, its session ends or its connection closes, the request is withdrawn and can no longer be
//! approved. Once the wait ends with a `pending_approval` answer the request is detached from
//! the connection and stays pending for a person; the client follows it with
//! `get_approval_status`. A person decides through REST or the CLI ([`decide`]): approve,
//! deny, or report (deny and revoke the requesting key — or, for a call made with an OAuth
//! access token, the client's grants for the requesting user). Whoever claims the approved row first
//! — the waiting call (its progress reaching the client), or the pipeline's resumer
//! (`Pipeline::spawn_resumer`) for requests answered pending or approved while the server was
//! down — runs it, once, through the pipeline's release (`crate::release`), which re-checks
//! both hashes, the pinned snapshot, and that the requesting credential (API key or OAuth
//! grant) and user are still active and allowed (a revoked or disabled requester's request is
//! void). This module records, waits and decides; it never runs a tool. A request left
//! running by a crashed server fails at the next start; it is never retried.

use std::{borrow::Cow, sync::Arc, time::Duration};

use breeze_core::ApprovalStatus;
use breeze_core::{
    Actor, AuditEvent, Caller, Clock, Operation, OrgId, ScopePolicy, User, UserId, authz,
};
use breeze_guard::Approval;
use breeze_store::{ApprovalRecord, Decision, NewApproval, Signal, Store, StoreError};
use breeze_tools::{ApprovalWait, ErrorCode, Pin, ProgressReport, Registry, ToolError, ToolSpec};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::envelope::{self, Envelope};

/// How long a request waits for a person.
pub const APPROVAL_TTL_SECS: i64 = 300;

/// How long a call waits for the decision before answering `pending_approval`, by default:
/// below the 60 s request timeout of the MCP TypeScript SDK (and most clients), so a client
/// gets the pending answer and follows the request instead of timing out and cancelling it.
pub const DEFAULT_WAIT_SECS: u64 = 45;

/// Consecutive database errors after which a waiting call gives up.
const CIRCUIT_BREAKER: u32 = 5;

/// Settings.
#[derive(Debug, Clone)]
pub struct ApprovalConfig {
    /// How long a call waits for the decision before answering "pending" with the request id
    /// (`MCP_APPROVAL_WAIT_SECONDS`, default [`DEFAULT_WAIT_SECS`]; 0 answers at once, for
    /// clients that cannot hold a call).
    pub wait: Duration,
    /// Called with each new request (`BREEZE_APPROVAL_WEBHOOK_URL`).
    pub webhook_url: Option<String>,
    /// Where approvers find the API (for the webhook's links).
    pub public_url: String,
    /// How often waiting calls and the resumer re-read the database.
    pub poll: Duration,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(DEFAULT_WAIT_SECS),
            webhook_url: None,
            public_url: String::new(),
            poll: Duration::from_secs(1),
        }
    }
}

/// The SHA-256 of what an approver is shown of a tool: name, description, input schema, tiers.
pub fn definition_hash(spec: &ToolSpec) -> [u8; 32] {
    let actions: Vec<Value> = spec
        .actions
        .iter()
        .map(|a| json!([a.name, a.tier.number()]))
        .collect();
    let doc = json!({
        "name": spec.name, "description": spec.description, "inputSchema": spec.input_schema,
        "tier": spec.tier.number(), "actions": actions,
    });
    Sha256::digest(doc.to_string().as_bytes()).into()
}

/// The SHA-256 of a call's arguments (serde_json objects serialize with sorted keys).
pub fn arguments_hash(args: &Value) -> [u8; 32] {
    Sha256::digest(args.to_string().as_bytes()).into()
}

/// The SHA-256 of a pinned snapshot.
pub fn pin_hash(pin: &Pin) -> [u8; 32] {
    Sha256::digest(pin.data.to_string().as_bytes()).into()
}

/// Whether `pin`, taken just before an approved call runs, is the snapshot the request pinned
/// (both none, or the same SHA-256).
pub(crate) fn pin_unchanged(pin: Option<&Pin>, r: &ApprovalRecord) -> bool {
    pin.map(pin_hash).as_ref().map(<[u8; 32]>::as_slice) == r.pinned_hash.as_deref()
}

/// The mode a new request gets from its organization's policy `mode`: `automatic` (approved
/// at once by the store, then claimed and run like any approved request) only while the
/// registry still finds the action read-only; otherwise a person approves (`supervised`).
fn policy_mode(tool: &str, refusal: Option<&str>, mode: String) -> String {
    if mode == breeze_store::AUTOMATIC
        && let Some(why) = refusal
    {
        tracing::warn!(tool, "approval policy automatic ignored: {why}");
        return "supervised".to_owned();
    }
    mode
}

/// How strict an approval mode is, to take the strictest of a batch's items.
fn strictness(mode: &str) -> u8 {
    match mode {
        "automatic" => 0,
        "supervised" => 1,
        _ => 2,
    }
}

/// How a waited-for request ended, for the caller.
#[derive(Debug)]
pub(crate) enum Waited {
    /// Approved, and claimed by this call: the caller runs it (`crate::release`).
    Claimed(Box<ApprovalRecord>),
    /// Someone else ran it already: its stored output, or its error.
    Finished(Result<Value, ToolError>),
    /// Still undecided when the wait ended: the caller gets the id to check later.
    Pending(Box<ApprovalRecord>),
    /// Denied, reported, expired or withdrawn, or the wait failed.
    Refused(ToolError),
}

/// An approval request about to be recorded: everything the approver is shown and the
/// execution is pinned to, read from the tool while the call still holds it.
#[derive(Debug)]
pub(crate) struct Draft {
    /// A built-in tool's name, or an external tool's address (`<slug>__<name>`).
    tool: Cow<'static, str>,
    title: Cow<'static, str>,
    /// A single call's action (a batch records none: its items name theirs).
    action: Option<&'static str>,
    /// The actions whose approval policies apply (the strictest wins), each with why it may
    /// not be approved automatically.
    policies: Vec<(Option<&'static str>, Option<String>)>,
    tier: u8,
    arguments: Value,
    definition_hash: [u8; 32],
    /// A batch's description, made up front; a single call's is made as it is recorded (it
    /// names the device).
    description: Option<String>,
    request_id: Option<String>,
    pin: Option<Pin>,
}

impl Draft {
    /// The request for one Tier 3 call.
    pub(crate) fn single(
        spec: &ToolSpec,
        arguments: Value,
        request_id: Option<String>,
        pin: Option<Pin>,
    ) -> Self {
        let action = spec.action(&arguments).map(|a| a.name);
        Self {
            tool: Cow::Borrowed(spec.name),
            title: Cow::Borrowed(spec.title),
            action,
            policies: vec![(action, spec.automatic_approval_refusal(action))],
            tier: spec.effective_tier(&arguments).number(),
            definition_hash: definition_hash(spec),
            arguments,
            description: None,
            request_id,
            pin,
        }
    }

    /// The one request for a batch with Tier 3 items, pinned to their combined snapshot.
    pub(crate) fn batch(
        spec: &ToolSpec,
        env: &Envelope,
        request_id: Option<String>,
        pin: Option<Pin>,
    ) -> Self {
        let arguments = env.to_value();
        Self {
            tool: Cow::Borrowed(spec.name),
            title: Cow::Borrowed(spec.title),
            action: None,
            policies: envelope::approval_actions(spec, env)
                .into_iter()
                .map(|a| (a, spec.automatic_approval_refusal(a)))
                .collect(),
            tier: spec.effective_tier(&arguments).number(),
            definition_hash: definition_hash(spec),
            description: Some(envelope::describe(spec, env, pin.as_ref())),
            arguments,
            request_id,
            pin,
        }
    }
}

impl Draft {
    /// The request for one Tier 3 call of an external tool, pinned to the hash of the
    /// definition the approver is shown. Never approved automatically: an organization's
    /// `automatic` policy is for Breeze's own read-only actions.
    pub(crate) fn external(
        ext: &crate::external::External,
        arguments: Value,
        request_id: Option<String>,
    ) -> Self {
        Self {
            tool: Cow::Owned(ext.address().to_owned()),
            title: Cow::Owned(ext.title()),
            action: None,
            policies: vec![(
                None,
                Some(format!(
                    "{} is an external tool; external tools are never approved automatically",
                    ext.address()
                )),
            )],
            tier: breeze_core::Tier::T3.number(),
            definition_hash: ext.definition_hash(),
            arguments,
            description: None,
            request_id,
            pin: None,
        }
    }
}

/// A person's approval of `arguments` (a call's, or one batch item's input) under request `r`,
/// for the guard to release.
pub(crate) fn approval_of<'a>(r: &'a ApprovalRecord, arguments: &'a Value) -> Approval<'a> {
    Approval {
        id: r.id.to_string(),
        tool: &r.tool,
        org: r.org_id,
        arguments,
    }
}

struct Inner {
    store: Store,
    clock: Arc<dyn Clock>,
    config: ApprovalConfig,
    decided: watch::Sender<u64>,
    http: reqwest::Client,
    /// Cancelled when the server starts draining: every wait ends with its request pending.
    draining: CancellationToken,
}

/// The approval service. Cheap to clone.
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

pub(crate) fn refused(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::Forbidden, message)
}

/// The error of a request whose requester may no longer make the call.
pub(crate) fn void(r: &ApprovalRecord, why: &str) -> ToolError {
    refused(format!(
        "Approval request {} is void: {why}; nothing was run",
        r.id
    ))
}

/// A short, human-readable account of a single call about to be requested.
async fn describe(store: &Store, org: OrgId, draft: &Draft) -> String {
    let args = &draft.arguments;
    let mut text = draft.title.to_string();
    if let Some(action) = draft.action {
        text.push_str(&format!(" — {action}"));
    }
    if let Some(id) = args.get("deviceId").and_then(Value::as_str)
        && let Ok(id) = id.parse()
        && let Ok(device) = store.org(org).devices().get_device(id).await
    {
        text.push_str(&format!(" on {}", device.hostname));
    }
    if let Some(pin) = &draft.pin {
        text.push_str(&format!(" [{}]", pin.summary));
    }
    let mut shown = args.to_string();
    if shown.len() > 400 {
        let mut end = 400;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push('…');
    }
    format!("{text}: {}({shown})", draft.tool)
}

impl Approvals {
    pub fn new(store: Store, config: ApprovalConfig) -> Self {
        let clock = store.clock().clone();
        Self {
            inner: Arc::new(Inner {
                store,
                clock,
                config,
                decided: watch::channel(0).0,
                draining: CancellationToken::new(),
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .unwrap_or_default(),
            }),
        }
    }

    /// The server is shutting down: every call waiting for a decision answers
    /// `pending_approval` now (its request detached and left pending for a person, followed
    /// with `get_approval_status`), and calls that reach the wait from now on answer it at once,
    /// so each gets its answer before its connection closes rather than being cut off with
    /// neither a result nor the request to follow.
    pub fn drain(&self) {
        self.inner.draining.cancel();
    }

    /// Wakes waiting calls after a decision made in this process.
    pub fn notify_decided(&self) {
        self.inner.decided.send_modify(|n| *n += 1);
    }

    /// Wakes waiting calls when another server on the database announces a decision (the
    /// store's cluster bus), until `stop`; without it they see the decision at their next poll.
    pub fn spawn_bus_follower(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        self.inner
            .store
            .follow_bus(stop.cancelled_owned(), move |signal| {
                if matches!(signal, Signal::ApprovalDecided | Signal::Resync) {
                    this.notify_decided();
                }
                std::future::ready(())
            })
    }

    /// How often waiting calls and the resumer re-read the database.
    pub fn poll(&self) -> Duration {
        self.inner.config.poll
    }

    /// Records `draft` as `caller`'s request (made through AI client `client`, when known) and
    /// tells the webhook.
    async fn request(
        &self,
        caller: &Caller,
        draft: Draft,
        client: Option<String>,
    ) -> Result<ApprovalRecord, StoreError> {
        let org = self.inner.store.org(caller.org());
        // The strictest policy of the request's actions (a batch: of its Tier 3 items').
        let mut mode = None::<String>;
        for (action, refusal) in &draft.policies {
            let stored = org.approvals().approval_mode(&draft.tool, *action).await?;
            let m = policy_mode(&draft.tool, refusal.as_deref(), stored);
            if mode
                .as_deref()
                .is_none_or(|s| strictness(&m) > strictness(s))
            {
                mode = Some(m);
            }
        }
        let mode = mode.unwrap_or_else(|| "supervised".to_owned());
        let description = match draft.description.clone() {
            Some(d) => d,
            None => describe(&self.inner.store, caller.org(), &draft).await,
        };
        let audit = AuditEvent::new(caller.actor(), "approval.request", "approval_request")
            .request(draft.request_id.clone());
        let Draft {
            tool,
            action,
            tier,
            arguments,
            definition_hash,
            request_id,
            pin,
            ..
        } = draft;
        let record = org
            .approvals()
            .create_approval(
                NewApproval {
                    api_key_id: caller.api_key_id(),
                    oauth_grant_id: caller.grant_id(),
                    ai_session_id: caller.ai_session_id(),
                    client_name: client,
                    requester_user_id: caller.user(),
                    tool: tool.into_owned(),
                    action: action.map(str::to_owned),
                    tier,
                    arguments_hash: arguments_hash(&arguments),
                    arguments,
                    definition_hash,
                    description,
                    mode,
                    request_id,
                    expires_at: self.inner.clock.now()
                        + chrono::Duration::seconds(APPROVAL_TTL_SECS),
                    pinned: pin.map(|p| {
                        let hash = pin_hash(&p);
                        (p.data, hash)
                    }),
                },
                audit,
            )
            .await?;
        if record.status == ApprovalStatus::Pending {
            // An automatically approved request has nobody to notify.
            self.call_webhook(&record);
        }
        Ok(record)
    }

    fn call_webhook(&self, r: &ApprovalRecord) {
        let Some(url) = self.inner.config.webhook_url.clone() else {
            return;
        };
        let base = &self.inner.config.public_url;
        let body = json!({
            "type": "approval.requested",
            "id": r.id, "orgId": r.org_id, "tool": r.tool, "action": r.action, "tier": r.tier,
            "description": r.description, "mode": r.mode, "requesterUserId": r.requester_user_id,
            "expiresAt": r.expires_at, "pinned": r.pinned,
            "approveUrl": format!("{base}/api/v1/approvals/{}/approve", r.id),
            "denyUrl": format!("{base}/api/v1/approvals/{}/deny", r.id),
            // The dashboard's page for the request (sign-in first, then back to it).
            "pageUrl": format!("{base}/approvals/{}", r.id),
        });
        let http = self.inner.http.clone();
        tokio::spawn(async move {
            match http.post(&url).json(&body).send().await {
                Ok(res) if res.status().is_success() => {}
                Ok(res) => {
                    tracing::warn!(status = %res.status(), "approval webhook refused the notification");
                }
                Err(e) => tracing::warn!(error = %e, "approval webhook unreachable"),
            }
        });
    }

    /// Records `draft` as `caller`'s request, waits for the decision (bounded by the configured
    /// wait and the expiry) reporting progress, and claims it once approved, for the caller to
    /// run. While it waits the request is this call's: `cancel`, or this future being dropped
    /// (the client's connection closed), withdraws it. Once it returns — `Pending` included —
    /// the request no longer depends on the caller.
    pub(crate) async fn request_and_wait(
        &self,
        caller: &Caller,
        draft: Draft,
        progress: Option<mpsc::UnboundedSender<ProgressReport>>,
        approval: &ApprovalWait,
        cancel: &CancellationToken,
    ) -> Waited {
        // Recorded by a task of its own, so a caller dropped half-way never leaves a request
        // that nobody would withdraw: the task withdraws it when the caller is gone.
        let (tx, rx) = oneshot::channel();
        let (this, caller, cancelled) = (self.clone(), caller.clone(), cancel.clone());
        let client = approval.client.clone();
        tokio::spawn(async move {
            let created = this.request(&caller, draft, client).await;
            if let Err(Ok(record)) = tx.send(created) {
                let why = dropped_because(&cancelled, WENT_AWAY_AS_MADE);
                this.withdraw(record.id, why).await;
            }
        });
        let mut rx = Unreceived {
            rx,
            approvals: self.clone(),
            cancel: cancel.clone(),
        };
        let record = match (&mut rx.rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Waited::Refused(e.into()),
            Err(_) => {
                return Waited::Refused(ToolError::new(
                    ErrorCode::Internal,
                    "the approval request could not be recorded",
                ));
            }
        };
        if let Some(tell) = &approval.requested {
            // Nobody listening any more is the listener's business: the wait goes on.
            let _ = tell.send(record.clone());
        }
        let wait = approval.wait.unwrap_or(self.inner.config.wait);
        let mut guard = WithdrawOnDrop {
            approvals: self.clone(),
            id: record.id,
            cancel: cancel.clone(),
            armed: true,
        };
        let outcome = self.wait(record, progress.as_ref(), wait, cancel).await;
        // A cancelled call is not answered, so even a request about to be answered pending is
        // withdrawn. The withdrawal runs in a task of its own: the transport may drop this
        // future at any await, and a transaction cut off half-way would hold the row's lock.
        guard.armed = cancel.is_cancelled();
        outcome
    }

    /// [`Approvals::withdraw`] in a task of its own, from a `Drop` (nothing when no runtime
    /// runs).
    fn withdraw_later(&self, id: Uuid, why: &'static str) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let approvals = self.clone();
            runtime.spawn(async move { approvals.withdraw(id, why).await });
        }
    }

    /// Withdraws the request `id` of a caller that cancelled or went away; a no-op when it was
    /// decided, claimed or finished already.
    async fn withdraw(&self, id: Uuid, why: &str) {
        let audit = AuditEvent::new(
            Actor::system("mcp"),
            "approval.withdraw",
            "approval_request",
        );
        let reason = format!("withdrawn: {why}");
        match self.inner.store.withdraw_approval(id, &reason, audit).await {
            Ok(true) => tracing::info!(approval = %id, "approval request withdrawn: {why}"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(approval = %id, error = %e, "could not withdraw an approval request");
            }
        }
    }

    async fn wait(
        &self,
        record: ApprovalRecord,
        progress: Option<&mpsc::UnboundedSender<ProgressReport>>,
        wait: Duration,
        cancel: &CancellationToken,
    ) -> Waited {
        let store = self.inner.store.org(record.org_id);
        let started = tokio::time::Instant::now();
        let wait_until = started + wait;
        let mut decided = self.inner.decided.subscribe();
        let mut errors = 0;
        let mut last_report = None::<tokio::time::Instant>;
        loop {
            let current = match store.approvals().get_approval(record.id).await {
                Ok(r) => {
                    errors = 0;
                    r
                }
                Err(e) => {
                    errors += 1;
                    tracing::warn!(approval = %record.id, error = %e, errors, "approval wait: database error");
                    if errors >= CIRCUIT_BREAKER {
                        return Waited::Refused(
                            ToolError::new(
                                ErrorCode::UpstreamError,
                                format!(
                                    "stopped waiting for approval {}: the database failed {CIRCUIT_BREAKER} times in a row",
                                    record.id
                                ),
                            )
                            .hint("check the request's status later with get_approval_status"),
                        );
                    }
                    tokio::time::sleep(self.inner.config.poll).await;
                    continue;
                }
            };
            match current.status {
                ApprovalStatus::Approved => {
                    let won = self.inner.store.claim_approval(current.id).await;
                    if won.unwrap_or(false) {
                        return Waited::Claimed(Box::new(current));
                    }
                }
                ApprovalStatus::Completed | ApprovalStatus::Failed => return finished(&current),
                ApprovalStatus::Denied
                | ApprovalStatus::Reported
                | ApprovalStatus::Expired
                | ApprovalStatus::Withdrawn => {
                    return Waited::Refused(decision_error(&current));
                }
                ApprovalStatus::Pending | ApprovalStatus::Executing => {}
            }
            let now = tokio::time::Instant::now();
            if current.status == ApprovalStatus::Pending
                && self.inner.clock.now() >= current.expires_at
            {
                let _ = self.inner.store.expire_approvals().await;
                continue;
            }
            if current.status == ApprovalStatus::Pending
                && (now >= wait_until || self.inner.draining.is_cancelled())
            {
                return Waited::Pending(Box::new(current));
            }
            if last_report.is_none_or(|t| now - t >= Duration::from_secs(5)) {
                last_report = Some(now);
                let _ = progress.map(|p| {
                    p.send(ProgressReport {
                        progress: (now - started).as_secs_f64(),
                        total: Some(APPROVAL_TTL_SECS as f64),
                        message: Some(format!(
                            "Waiting for a person to approve {} (approval {}, expires {})",
                            current.description,
                            current.id,
                            current.expires_at.to_rfc3339()
                        )),
                    })
                });
            }
            tokio::select! {
                _ = decided.changed() => {}
                // Looks at the request once more, then answers pending.
                () = self.inner.draining.cancelled() => {}
                () = tokio::time::sleep(self.inner.config.poll) => {}
                () = cancel.cancelled() => {
                    return Waited::Refused(refused("cancelled by the client; the approval request was withdrawn"));
                }
            }
        }
    }

    /// Records a claimed request's outcome on it.
    pub(crate) async fn finish(&self, r: &ApprovalRecord, outcome: &Result<Value, ToolError>) {
        let (stored, is_error) = match outcome {
            Ok(v) => (v.clone(), false),
            Err(e) => (e.to_structured(), true),
        };
        if let Err(e) = self
            .inner
            .store
            .finish_approval(r.id, &stored, is_error)
            .await
        {
            tracing::error!(approval = %r.id, error = %e, "could not record an approved call's outcome");
        }
    }

    /// Expires stale requests, then claims the approved ones nobody is waiting for, for the
    /// resumer to run.
    pub(crate) async fn claim_orphans(&self) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.inner.store.expire_approvals().await?;
        let mut claimed = Vec::new();
        for r in self.inner.store.cross_org().unclaimed_approvals().await? {
            // Give a live waiter the first chance, so its client gets progress and the result.
            if r.decided_at
                .is_some_and(|t| self.inner.clock.now() - t < chrono::Duration::seconds(3))
            {
                continue;
            }
            if self.inner.store.claim_approval(r.id).await? {
                claimed.push(r);
            }
        }
        Ok(claimed)
    }
}

fn finished(r: &ApprovalRecord) -> Waited {
    let result = r.result.clone().unwrap_or(Value::Null);
    if r.result_is_error {
        let message = result["error"]["message"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| r.reason.clone())
            .unwrap_or_else(|| "the approved call failed".into());
        Waited::Finished(Err(ToolError::new(ErrorCode::UpstreamError, message)))
    } else {
        Waited::Finished(Ok(result))
    }
}

/// The caller's end of the recording task's channel. The task withdraws a request it could not
/// hand over; one it handed over that the caller never took (dropped between the send and the
/// receive) is withdrawn here, when the caller is dropped.
struct Unreceived<E> {
    rx: oneshot::Receiver<Result<ApprovalRecord, E>>,
    approvals: Approvals,
    cancel: CancellationToken,
}

impl<E> Drop for Unreceived<E> {
    fn drop(&mut self) {
        let Ok(Ok(record)) = self.rx.try_recv() else {
            return;
        };
        let why = dropped_because(&self.cancel, WENT_AWAY_AS_MADE);
        self.approvals.withdraw_later(record.id, why);
    }
}

/// Withdraws a waiting call's request if the call is dropped before its wait ended (the
/// transport dropped it: the client cancelled, its session ended, or its connection closed).
struct WithdrawOnDrop {
    approvals: Approvals,
    id: Uuid,
    cancel: CancellationToken,
    armed: bool,
}

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let why = dropped_because(&self.cancel, "the client went away while the call waited");
            self.approvals.withdraw_later(self.id, why);
        }
    }
}

/// Why a call was dropped, for its withdrawn request: a cancellation drops it too, so say
/// which it was; `otherwise` when the client just went away.
fn dropped_because(cancel: &CancellationToken, otherwise: &'static str) -> &'static str {
    if cancel.is_cancelled() {
        "the client cancelled the call or ended its session"
    } else {
        otherwise
    }
}

/// [`dropped_because`] for a caller gone before it received its recorded request.
const WENT_AWAY_AS_MADE: &str = "the client went away as the request was made";

/// The tool error for a request a person (or the clock) turned down.
pub fn decision_error(r: &ApprovalRecord) -> ToolError {
    // An expiry's recorded reason only repeats the status; a person's reason is worth quoting.
    let why = r
        .reason
        .as_deref()
        .filter(|_| r.status != ApprovalStatus::Expired)
        .map(|m| m.strip_prefix("withdrawn: ").unwrap_or(m))
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    let what = match r.status {
        ApprovalStatus::Reported if r.oauth_grant_id.is_some() => {
            "was reported as suspicious; the requesting OAuth client's access has been revoked"
        }
        ApprovalStatus::Reported => {
            "was reported as suspicious; the requesting API key has been revoked"
        }
        ApprovalStatus::Expired => "expired before anyone decided",
        ApprovalStatus::Withdrawn => "was withdrawn",
        _ => "was denied",
    };
    refused(format!("Approval request {} {what}{why}", r.id))
}

/// Why a person could not decide.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("approval request not found")]
    NotFound,
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a person decided, on which request.
#[derive(Debug, Clone)]
pub struct DecisionRequest {
    pub id: Uuid,
    pub decision: Decision,
    pub reason: Option<String>,
    pub request_id: Option<String>,
}

/// A person's decision on an approval request. The request must belong to an organization
/// `user` can reach, where their role holds the permission the call needs; under four-eyes an
/// approval must come from someone other than the requester.
pub async fn decide(
    store: &Store,
    registry: &Registry,
    user: &User,
    actor: Actor,
    req: DecisionRequest,
) -> Result<ApprovalRecord, DecideError> {
    let DecisionRequest {
        id,
        decision,
        reason,
        request_id,
    } = req;
    let record = find_for(store, user.id, id).await?;
    let access = store
        .org_access(user.id, record.org_id)
        .await?
        .ok_or(DecideError::NotFound)?;
    if let Some(spec) = registry.get(&record.tool) {
        // The approver must be allowed to make the call themselves (a batch: every item), by
        // the same permission model as every door.
        let approver = Caller::dashboard_session(user.id, record.org_id, Some(access.permissions));
        let calls: Vec<&Value> = match record.arguments.get("items").and_then(Value::as_array) {
            Some(items) if envelope::is_batch(&record.arguments) => {
                items.iter().map(|i| &i["input"]).collect()
            }
            _ => vec![&record.arguments],
        };
        for args in calls {
            let op = Operation {
                tier: spec.effective_tier(args),
                permission: spec.permission_for(args),
            };
            if authz::authorize(&approver, op, ScopePolicy::default()).is_err() {
                return Err(DecideError::Forbidden(format!(
                    "deciding this request needs the {} permission in its organization",
                    op.permission
                )));
            }
        }
    } else if breeze_core::tool_source::split_address(&record.tool).is_some() {
        // An external tool's Tier 3 call: the approver must be allowed to make it themselves.
        let approver = Caller::dashboard_session(user.id, record.org_id, Some(access.permissions));
        let op = Operation {
            tier: breeze_core::Tier::T3,
            permission: breeze_core::Permission::ExternalToolsWrite,
        };
        if authz::authorize(&approver, op, ScopePolicy::default()).is_err() {
            return Err(DecideError::Forbidden(format!(
                "deciding this request needs the {} permission in its organization",
                op.permission
            )));
        }
    }
    if decision == Decision::Approve
        && record.mode == "four_eyes"
        && record.requester_user_id == user.id
    {
        return Err(DecideError::Forbidden(
            "four-eyes approval: a different person must approve this request".into(),
        ));
    }
    let action = match decision {
        Decision::Approve => "approval.approve",
        Decision::Deny => "approval.deny",
        Decision::Report => "approval.report",
    };
    Ok(store
        .org(record.org_id)
        .approvals()
        .decide_approval(
            id,
            decision,
            user.id,
            reason.as_deref(),
            AuditEvent::new(actor, action, "approval_request").request(request_id),
        )
        .await?)
}

/// The request `id`, when it belongs to an organization `user` can reach.
pub async fn find_for(
    store: &Store,
    user: UserId,
    id: Uuid,
) -> Result<ApprovalRecord, DecideError> {
    for (org, _) in store.user_organizations(user).await? {
        match store.org(org.id).approvals().get_approval(id).await {
            Ok(r) => return Ok(r),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(DecideError::NotFound)
}
