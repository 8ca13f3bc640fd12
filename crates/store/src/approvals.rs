//! Step-up approvals as stored: a Tier 3 call becomes a durable request that a person approves,
//! denies or reports, and that is executed at most once.
//!
//! The status moves forward only, by conditional updates:
//!
//! ```text
//! pending ──approve──▶ approved ──claim──▶ executing ──▶ completed | failed
//!    ├──deny──▶ denied        (approved stays approved until exactly one claimer wins)
//!    ├──report─▶ reported     (and the requesting API key — or, for a call made with an OAuth
//!    │                         token, the client's grants for that user — is revoked in the
//!    │                         same transaction)
//!    ├──(expiry)─▶ expired
//!    └──withdraw─▶ withdrawn (the waiting caller cancelled or went away; also from approved,
//!                             while nobody has claimed it)
//! ```
//!
//! A row found `executing` when the server starts was interrupted mid-call: it becomes `failed`
//! and is never retried. An `approved` row nobody claimed (its caller went away, or the server
//! was down when it was approved) is claimed and run by the server's resumer — once.

pub use breeze_core::Decision;
use breeze_core::{
    Actor, AiSessionId, ApiKeyId, ApprovalStatus, AuditEvent, GrantId, OrgId, Timestamp, UserId,
};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    CrossOrg, Result, Store, StoreError, audit,
    sql::{Arg, Tx, sql},
};

const COLUMNS: &str = "id, org_id, api_key_id, requester_user_id, tool, action, tier, arguments, \
    arguments_hash, definition_hash, description, mode, status, reason, decided_by, decided_at, \
    request_id, created_at, expires_at, claimed_at, completed_at, result, result_is_error, \
    pinned, pinned_hash, oauth_grant_id, ai_session_id, client_name";

/// Who must approve: the requester may (`supervised`, the default), someone else must
/// (`four_eyes`), or nobody — the organization's policy approves at once (`automatic`, only for
/// a `tool.action` class that the registry finds read-only; the store checks the class's shape).
pub const APPROVAL_MODES: [&str; 3] = ["supervised", "four_eyes", "automatic"];

/// The mode in which the organization's policy approves a request itself.
pub const AUTOMATIC: &str = "automatic";

/// `automatic` is for one action (`tool.action`), never for `*` or a whole tool.
fn check_automatic_shape(class: &str) -> Result<()> {
    match class.split_once('.') {
        Some((tool, action)) if !tool.is_empty() && !action.is_empty() && tool != "*" => Ok(()),
        _ => Err(StoreError::Invalid(format!(
            "cannot set approval mode automatic for {class}: it is set per read-only action \
             (tool.action), never for * or a whole tool"
        ))),
    }
}

/// A stored approval request.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ApprovalRecord {
    pub id: Uuid,
    pub org_id: OrgId,
    pub api_key_id: Option<ApiKeyId>,
    pub requester_user_id: UserId,
    pub tool: String,
    pub action: Option<String>,
    pub tier: i64,
    #[sqlx(json)]
    pub arguments: Value,
    #[serde(skip)]
    pub arguments_hash: Vec<u8>,
    #[serde(skip)]
    pub definition_hash: Vec<u8>,
    pub description: String,
    /// `supervised`, `four_eyes` or `automatic` (approved by the organization's policy:
    /// `decided_by` empty, the reason names the policy).
    pub mode: String,
    pub status: ApprovalStatus,
    pub reason: Option<String>,
    pub decided_by: Option<UserId>,
    pub decided_at: Option<Timestamp>,
    pub request_id: Option<String>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub claimed_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    #[sqlx(json(nullable))]
    pub result: Option<Value>,
    pub result_is_error: bool,
    /// The stored data the call depends on, as the approver reviews it (a script's name,
    /// language, body hash, body and parameters, …); the call runs only while it is unchanged.
    #[sqlx(json(nullable))]
    pub pinned: Option<Value>,
    #[serde(skip)]
    pub pinned_hash: Option<Vec<u8>>,
    /// The OAuth grant whose access token made the request (`api_key_id` is then empty).
    pub oauth_grant_id: Option<GrantId>,
    /// The AI assistant's chat session that made the request (no key, no grant: the session's
    /// person, as they stand now, is the requester).
    pub ai_session_id: Option<AiSessionId>,
    /// The AI client that asked, as it named itself (MCP `clientInfo.name`), when known.
    pub client_name: Option<String>,
}

impl ApprovalRecord {
    /// Whether nothing more will happen to it.
    pub fn is_final(&self) -> bool {
        self.status.is_final()
    }
}

/// An approval request to record.
#[derive(Debug, Clone)]
pub struct NewApproval {
    pub api_key_id: Option<ApiKeyId>,
    /// The OAuth grant, for a call made with one of its access tokens.
    pub oauth_grant_id: Option<GrantId>,
    /// The chat session, for a call the AI assistant made.
    pub ai_session_id: Option<AiSessionId>,
    /// The AI client, as it named itself (at most 100 characters are kept).
    pub client_name: Option<String>,
    pub requester_user_id: UserId,
    pub tool: String,
    pub action: Option<String>,
    pub tier: u8,
    pub arguments: Value,
    pub arguments_hash: [u8; 32],
    pub definition_hash: [u8; 32],
    pub description: String,
    pub mode: String,
    pub request_id: Option<String>,
    pub expires_at: Timestamp,
    /// The snapshot of stored data the call depends on, and its SHA-256.
    pub pinned: Option<(Value, [u8; 32])>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl crate::OrgApprovals<'_> {
    /// Records an approval request, audited: pending, or — in mode `automatic` — approved at
    /// once by the organization's policy (no person in `decided_by`, the reason naming the
    /// policy), with an `approval.auto_approved` audit record by the same actor.
    pub async fn create_approval(
        &self,
        new: NewApproval,
        audit: AuditEvent,
    ) -> Result<ApprovalRecord> {
        if !APPROVAL_MODES.contains(&new.mode.as_str()) {
            return Err(StoreError::Invalid(format!(
                "unknown approval mode {:?}",
                new.mode
            )));
        }
        let automatic = new.mode == AUTOMATIC;
        let class = match &new.action {
            Some(a) => format!("{}.{a}", new.tool),
            None => new.tool.clone(),
        };
        if automatic {
            check_automatic_shape(&class)?;
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO approval_requests ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, $10, $11, $12, 'pending', NULL, NULL, NULL, $13, $14, $15, NULL, NULL, NULL, FALSE, \
             $16, $17, $18, $19, $20)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.api_key_id.map(|k| k.0))
        .bind(new.requester_user_id)
        .bind(&new.tool)
        .bind(new.action.as_deref())
        .bind(i64::from(new.tier))
        .bind(Arg::json(&new.arguments))
        .bind(&new.arguments_hash[..])
        .bind(&new.definition_hash[..])
        .bind(&new.description)
        .bind(&new.mode)
        .bind(new.request_id.as_deref())
        .bind(now)
        .bind(new.expires_at)
        .bind(
            new.pinned
                .as_ref()
                .map_or(Arg::Json(None), |(v, _)| Arg::json(v)),
        )
        .bind(new.pinned.as_ref().map(|(_, h)| h.to_vec()))
        .bind(new.oauth_grant_id)
        .bind(new.ai_session_id)
        .bind(
            new.client_name
                .as_deref()
                .map(|n| n.chars().take(100).collect::<String>()),
        )
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "tool": new.tool, "action": new.action, "tier": new.tier,
            "description": new.description, "mode": new.mode, "expires_at": new.expires_at,
            "pinned_sha256": new.pinned.as_ref().map(|(_, h)| hex(h)),
        }));
        let actor = audit.actor.clone();
        let request_id = audit.request_id.clone();
        audit::insert(&mut tx, &audit, now).await?;
        if automatic {
            let reason = format!("automatic: organization policy for {class}");
            sql(
                "UPDATE approval_requests SET status = 'approved', decided_at = $1, reason = $2 \
                 WHERE id = $3 AND status = 'pending'",
            )
            .bind(now)
            .bind(&reason)
            .bind(id)
            .execute(&mut tx)
            .await?;
            let auto = AuditEvent::new(actor, "approval.auto_approved", "approval_request")
                .request(request_id)
                .org(self.org)
                .resource(id)
                .details(serde_json::json!({ "class": class, "reason": reason }));
            audit::insert(&mut tx, &auto, now).await?;
        }
        tx.commit().await?;
        self.get_approval(id).await
    }

    /// One approval request of this organization.
    pub async fn get_approval(&self, id: Uuid) -> Result<ApprovalRecord> {
        sql(format!(
            "SELECT {COLUMNS} FROM approval_requests WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("approval request"))
    }

    /// This organization's approval requests, newest first; only pending ones when asked.
    pub async fn list_approvals(
        &self,
        pending_only: bool,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>> {
        let mut q = sql(format!(
            "SELECT {COLUMNS} FROM approval_requests WHERE org_id = $1"
        ))
        .bind(self.org);
        if pending_only {
            let now = q.arg(self.store.clock.now());
            q.push(&format!(" AND status = 'pending' AND expires_at > {now}"));
        }
        let p = q.arg(i64::from(limit));
        q.push(&format!(" ORDER BY created_at DESC, id DESC LIMIT {p}"));
        q.fetch_all(self).await
    }

    /// Every pending, unexpired request of this organization, newest first.
    pub async fn pending_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        self.list_approvals(true, u32::MAX).await
    }

    /// Applies a person's decision to a pending, unexpired request — once. A report also
    /// revokes the requesting API key, in the same transaction, and moves the credentials
    /// generation on. Deciding twice, or too late, is a conflict naming the request's state.
    pub async fn decide_approval(
        &self,
        id: Uuid,
        decision: Decision,
        by: UserId,
        reason: Option<&str>,
        audit: AuditEvent,
    ) -> Result<ApprovalRecord> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let changed = sql(
            "UPDATE approval_requests SET status = $1, decided_by = $2, decided_at = $3, \
             reason = $4 WHERE id = $5 AND org_id = $6 AND status = 'pending' AND expires_at > $3",
        )
        .bind(decision.status().as_str())
        .bind(by)
        .bind(now)
        .bind(reason)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if changed == 0 {
            drop(tx);
            let current = self.get_approval(id).await?;
            // Still pending after a refused update means its time ran out.
            let state = match current.status {
                ApprovalStatus::Pending => ApprovalStatus::Expired,
                other => other,
            };
            return Err(StoreError::Conflict(format!(
                "approval request {id} is already {state}; it can be decided only once, while pending"
            )));
        }
        if decision == Decision::Report {
            sql("UPDATE api_keys SET revoked_at = $1 WHERE id = \
                 (SELECT api_key_id FROM approval_requests WHERE id = $2) AND revoked_at IS NULL")
            .bind(now)
            .bind(id)
            .execute(&mut tx)
            .await?;
        }
        // A chat's request: the decision row names the chat session too, so the session's
        // trail reads whole (its own rows name it as their actor).
        let chat: Option<(Option<AiSessionId>,)> =
            sql("SELECT ai_session_id FROM approval_requests WHERE id = $1 AND org_id = $2")
                .bind(id)
                .bind(self.org)
                .fetch_optional(&mut tx)
                .await?;
        let mut details = serde_json::json!({ "decision": decision.status(), "reason": reason });
        if let Some((Some(session),)) = chat {
            details["aiSessionId"] = serde_json::json!(session);
        }
        let audit = audit.org(self.org).resource(id).details(details);
        let (actor, request_id) = (audit.actor.clone(), audit.request_id.clone());
        audit::insert(&mut tx, &audit, now).await?;
        if decision == Decision::Report {
            self.revoke_reported_client(&mut tx, id, actor, request_id, now)
                .await?;
        }
        let committed = tx.commit().await;
        if decision == Decision::Report {
            // The requesting key was revoked in that transaction.
            self.store.credentials_changed().await;
        }
        committed?;
        // Awaited, not spawned: a decision made by the CLI must be announced before it exits.
        self.store.announce(crate::Signal::ApprovalDecided).await;
        self.get_approval(id).await
    }

    /// A reported request made with an OAuth token: the client loses the user's trust, so
    /// every active grant of that client for the requesting user (the requesting grant among
    /// them) is revoked, audited as `oauth.grant.revoke` with the reason `approval_reported`.
    async fn revoke_reported_client(
        &self,
        tx: &mut Tx,
        id: Uuid,
        actor: Actor,
        request_id: Option<String>,
        now: Timestamp,
    ) -> Result<()> {
        let grant: Option<(Option<GrantId>,)> =
            sql("SELECT oauth_grant_id FROM approval_requests WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some((Some(grant),)) = grant else {
            return Ok(());
        };
        let revoked: Vec<(GrantId, OrgId, String)> = sql(
            "UPDATE oauth_grants SET status = 'revoked', revoked_at = $1, \
             revoke_reason = 'approval_reported' \
             WHERE status = 'active' AND (user_id, client_id) = \
             (SELECT user_id, client_id FROM oauth_grants WHERE id = $2) \
             RETURNING id, org_id, client_id",
        )
        .bind(now)
        .bind(grant)
        .fetch_all(&mut *tx)
        .await?;
        for (g, org, client_id) in revoked {
            let event = AuditEvent::new(actor.clone(), "oauth.grant.revoke", "oauth_grant")
                .org(org)
                .resource(g)
                .request(request_id.clone())
                .details(serde_json::json!({
                    "reason": "approval_reported", "approval_request": id,
                    "client_id": client_id, "requesting_grant": grant,
                }));
            audit::insert(&mut *tx, &event, now).await?;
        }
        Ok(())
    }

    /// The approval mode for a tool's action: the most specific policy of `tool.action`,
    /// `tool`, `*`, else `supervised`.
    pub async fn approval_mode(&self, tool: &str, action: Option<&str>) -> Result<String> {
        let rows: Vec<(String, String)> =
            sql("SELECT action_class, mode FROM approval_policies WHERE org_id = $1")
                .bind(self.org)
                .fetch_all(self)
                .await?;
        let find = |class: &str| {
            rows.iter()
                .find(|(c, _)| c == class)
                .map(|(_, m)| m.clone())
        };
        Ok(action
            .and_then(|a| find(&format!("{tool}.{a}")))
            .or_else(|| find(tool))
            .or_else(|| find("*"))
            .unwrap_or_else(|| "supervised".to_owned()))
    }

    /// Sets the approval mode for an action class (`*`, `tool` or `tool.action`), audited
    /// (`details` carry the class, the new mode and the one it replaces). `automatic` is
    /// refused for `*` and a bare tool here; whether the action is read-only is the registry's
    /// to say (`breeze_tools::Registry::check_approval_policy`), asked by every door first.
    pub async fn set_approval_policy(
        &self,
        class: &str,
        mode: &str,
        audit: AuditEvent,
    ) -> Result<()> {
        if !APPROVAL_MODES.contains(&mode) {
            return Err(StoreError::Invalid(format!(
                "unknown approval mode {mode:?} (expected supervised, four_eyes or automatic)"
            )));
        }
        if class.is_empty() || class.len() > 200 {
            return Err(StoreError::Invalid(
                "the action class must be 1 to 200 characters".into(),
            ));
        }
        if mode == AUTOMATIC {
            check_automatic_shape(class)?;
        }

        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let previous: Option<(String,)> =
            sql("SELECT mode FROM approval_policies WHERE org_id = $1 AND action_class = $2")
                .bind(self.org)
                .bind(class)
                .fetch_optional(&mut tx)
                .await?;
        let previous = previous.map(|(m,)| m);
        sql("DELETE FROM approval_policies WHERE org_id = $1 AND action_class = $2")
            .bind(self.org)
            .bind(class)
            .execute(&mut tx)
            .await?;
        sql("INSERT INTO approval_policies (org_id, action_class, mode) VALUES ($1, $2, $3)")
            .bind(self.org)
            .bind(class)
            .bind(mode)
            .execute(&mut tx)
            .await?;
        let audit = audit
            .org(self.org)
            .details(serde_json::json!({ "class": class, "mode": mode, "previous": previous }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await
    }
}

impl Store {
    /// Withdraws a request whose waiting caller cancelled or went away: a pending request, or
    /// an approved one nobody has claimed yet, becomes `withdrawn` and can no longer be approved
    /// or run. Returns whether it was withdrawn (false: it was already decided otherwise,
    /// claimed, or finished).
    pub async fn withdraw_approval(
        &self,
        id: Uuid,
        reason: &str,
        audit: AuditEvent,
    ) -> Result<bool> {
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        let changed = sql(
            "UPDATE approval_requests SET status = 'withdrawn', reason = $1, completed_at = $2 \
             WHERE id = $3 AND status IN ('pending', 'approved')",
        )
        .bind(reason)
        .bind(now)
        .bind(id)
        .execute(&mut tx)
        .await?;
        if changed == 0 {
            return Ok(false);
        }
        let org: Uuid = sql("SELECT org_id FROM approval_requests WHERE id = $1")
            .bind(id)
            .fetch_scalar(&mut tx)
            .await?;
        let audit = audit
            .org(OrgId(org))
            .resource(id)
            .details(serde_json::json!({ "reason": reason }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Claims an approved request for execution. Exactly one caller gets `true`.
    pub async fn claim_approval(&self, id: Uuid) -> Result<bool> {
        let n = sql(
            "UPDATE approval_requests SET status = 'executing', claimed_at = $1 \
                     WHERE id = $2 AND status = 'approved'",
        )
        .bind(self.clock.now())
        .bind(id)
        .execute(self)
        .await?;
        Ok(n > 0)
    }

    /// Records the outcome of a claimed request.
    pub async fn finish_approval(&self, id: Uuid, result: &Value, is_error: bool) -> Result<()> {
        sql(
            "UPDATE approval_requests SET status = $1, result = $2, result_is_error = $3, \
             completed_at = $4 WHERE id = $5 AND status = 'executing'",
        )
        .bind(
            if is_error {
                ApprovalStatus::Failed
            } else {
                ApprovalStatus::Completed
            }
            .as_str(),
        )
        .bind(Arg::json(result))
        .bind(is_error)
        .bind(self.clock.now())
        .bind(id)
        .execute(self)
        .await
        .map(drop)
    }

    /// At start: requests left `executing` by a previous process fail, never to be retried.
    pub async fn fail_interrupted_approvals(&self) -> Result<u64> {
        sql(
            "UPDATE approval_requests SET status = 'failed', completed_at = $1, \
             reason = 'the server stopped while this call was running; it was not retried', \
             result_is_error = TRUE WHERE status = 'executing'",
        )
        .bind(self.clock.now())
        .execute(self)
        .await
    }

    /// Pending requests past their expiry become `expired`.
    pub async fn expire_approvals(&self) -> Result<u64> {
        sql("UPDATE approval_requests SET status = 'expired', \
             reason = 'nobody decided before it expired' \
             WHERE status = 'pending' AND expires_at <= $1")
        .bind(self.clock.now())
        .execute(self)
        .await
    }
}

impl CrossOrg<'_> {
    /// Pending, unexpired requests of these organizations, newest first.
    pub async fn pending_approvals(&self, orgs: &[OrgId]) -> Result<Vec<ApprovalRecord>> {
        if orgs.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = sql(format!(
            "SELECT {COLUMNS} FROM approval_requests WHERE status = 'pending' AND expires_at > $1"
        ))
        .bind(self.store.clock.now());
        let ids: Vec<String> = orgs.iter().map(|o| q.arg(*o)).collect();
        q.push(&format!(
            " AND org_id IN ({}) ORDER BY created_at DESC, id DESC",
            ids.join(", ")
        ));
        q.fetch_all(self).await
    }

    /// Approved requests nobody has claimed, oldest first (their callers went away, or the
    /// server was down when they were approved).
    pub async fn unclaimed_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        sql(format!(
            "SELECT {COLUMNS} FROM approval_requests WHERE status = 'approved' \
             ORDER BY decided_at, id"
        ))
        .fetch_all(self)
        .await
    }
}
