//! Idempotent writes as stored: a write tool's `requestId` claimed once per organization and
//! principal, its outcome kept for a retention window and replayed to every later call with
//! the same requestId and payload.
//!
//! A record's life (table `idempotency_records`, key `(org_id, actor_type, actor_id,
//! request_id)`):
//!
//! ```text
//! (none) ──claim──▶ in_progress ──complete──▶ done ──(retention)──▶ pruned
//!                      │  ├──release──▶ (none)      (a retryable failure: a retry runs again)
//!                      │  └──(stale: no completion within `stale_after`)──▶ claimed again
//!                      └──(retention, counted from the last claim)──▶ pruned
//! ```
//!
//! Claiming is race-free on both backends without a transaction: the claim is an
//! insert-or-nothing on the primary key (`ON CONFLICT DO NOTHING`), so of concurrent first
//! calls exactly one inserts; the others then read the row and learn whether to replay, wait
//! or refuse. Taking over a stale claim is a compare-and-set on the claim's token, so of
//! concurrent takers exactly one wins. Completing and releasing also name the token: a process
//! whose stale claim was taken over (it was slow, not dead) can no longer overwrite or delete
//! the new holder's record.
//!
//! What "the same payload" means is the caller's: it passes the SHA-256 of the tool and its
//! canonical arguments without the requestId. A different hash or a different tool under the
//! same requestId is a [`ClaimOutcome::Mismatch`], whatever the record's state.

use breeze_core::{Actor, Timestamp};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use crate::{Result, Store, StoreError, sql::Arg, sql::sql};

/// The longest `requestId` accepted, in characters (the shortest is 1).
pub const MAX_REQUEST_ID_CHARS: usize = 200;

/// How long a finished record is replayed: records completed (or, still open, last claimed)
/// longer ago than this are removed by [`Store::prune_idempotency`] (the gateway's hourly
/// sweep passes `now - IDEMPOTENCY_RETENTION`).
pub const IDEMPOTENCY_RETENTION: chrono::Duration = chrono::Duration::hours(24);

/// A suggested `stale_after` for [`crate::OrgIdempotency::claim_request`]: an in-progress claim this old is
/// taken to belong to a process that died before completing it. It must exceed the longest a
/// call can legitimately run while holding its claim (including any wait for an approval),
/// or a slow call's requestId runs twice.
pub const IDEMPOTENCY_STALE_AFTER: chrono::Duration = chrono::Duration::minutes(10);

/// A claim on a requestId: the right (and duty) to run the call, then to
/// [`complete`](crate::OrgIdempotency::complete_request) or [`release`](crate::OrgIdempotency::release_request) it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestClaim {
    /// Who called.
    pub actor: Actor,
    pub request_id: String,
    /// Names this claim: completing or releasing checks it.
    pub token: Uuid,
    /// Whether this claim took over a stale one: an earlier call with this requestId started
    /// and never completed (its process likely died), so it may have done part of its work.
    pub reclaimed: bool,
}

/// What [`crate::OrgIdempotency::claim_request`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The requestId is this caller's to run: run the call, then complete or release it.
    Claimed(RequestClaim),
    /// The same call already finished: answer with its stored result (`replayed: true`) and
    /// run nothing.
    Replay {
        result: Value,
        is_error: bool,
        completed_at: Timestamp,
    },
    /// The same call is running now (claimed at `claimed_at`, not yet stale): a retryable
    /// conflict.
    InProgress { claimed_at: Timestamp },
    /// The requestId was used for a different tool or payload: a conflict, not retryable.
    Mismatch,
}

/// A stored record, as claiming reads it.
#[derive(sqlx::FromRow)]
struct Row {
    tool: String,
    payload_hash: Vec<u8>,
    state: String,
    claim_token: Uuid,
    result: Option<Json<Value>>,
    result_is_error: bool,
    claimed_at: Timestamp,
    completed_at: Option<Timestamp>,
}

/// Checks a requestId's length, naming it in the error.
fn check_request_id(request_id: &str) -> Result<()> {
    let chars = request_id.chars().count();
    if chars == 0 || chars > MAX_REQUEST_ID_CHARS {
        return Err(StoreError::Invalid(format!(
            "requestId must be 1 to {MAX_REQUEST_ID_CHARS} characters, got {chars}"
        )));
    }
    Ok(())
}

/// The key's columns, `org_id = $1 AND actor_type = $2 AND actor_id = $3 AND request_id = $4`.
const KEY: &str = "org_id = $1 AND actor_type = $2 AND actor_id = $3 AND request_id = $4";

impl crate::OrgIdempotency<'_> {
    /// Claims `request_id` of `actor` for a call of `tool` whose payload hashes to
    /// `payload_hash`, at `now`. Returns [`ClaimOutcome::Claimed`] to exactly one of any number
    /// of concurrent callers (on either backend); the others get `InProgress`, or `Replay` once
    /// it is done, or `Mismatch` when their tool or payload differs. An in-progress claim last
    /// taken at or before `now - stale_after` is taken over (`reclaimed`), by exactly one
    /// caller. A requestId of 0 or more than [`MAX_REQUEST_ID_CHARS`] characters is
    /// `StoreError::Invalid`.
    pub async fn claim_request(
        &self,
        actor: &Actor,
        request_id: &str,
        tool: &str,
        payload_hash: &[u8; 32],
        now: Timestamp,
        stale_after: chrono::Duration,
    ) -> Result<ClaimOutcome> {
        check_request_id(request_id)?;
        // A row can vanish between the insert that found it and the read (released, pruned):
        // then the claim is tried again. Three rounds make a livelock with a releasing peer
        // practically impossible; a fourth miss is reported as a retryable conflict.
        for _ in 0..3 {
            let token = Uuid::now_v7();
            let inserted = sql(
                "INSERT INTO idempotency_records (org_id, actor_type, actor_id, request_id, tool, \
                 payload_hash, state, claim_token, result, result_is_error, created_at, \
                 claimed_at, completed_at) VALUES ($1, $2, $3, $4, $5, $6, 'in_progress', $7, \
                 NULL, FALSE, $8, $8, NULL) ON CONFLICT DO NOTHING",
            )
            .bind(self.org)
            .bind(actor.kind.as_str())
            .bind(&actor.id)
            .bind(request_id)
            .bind(tool)
            .bind(&payload_hash[..])
            .bind(token)
            .bind(now)
            .execute(self)
            .await?;
            let claim = |reclaimed| {
                ClaimOutcome::Claimed(RequestClaim {
                    actor: actor.clone(),
                    request_id: request_id.to_owned(),
                    token,
                    reclaimed,
                })
            };
            if inserted == 1 {
                return Ok(claim(false));
            }
            let Some(row) = sql(format!(
                "SELECT tool, payload_hash, state, claim_token, result, result_is_error, \
                 claimed_at, completed_at FROM idempotency_records WHERE {KEY}"
            ))
            .bind(self.org)
            .bind(actor.kind.as_str())
            .bind(&actor.id)
            .bind(request_id)
            .fetch_optional::<Row>(self)
            .await?
            else {
                continue;
            };
            if row.tool != tool || row.payload_hash[..] != payload_hash[..] {
                return Ok(ClaimOutcome::Mismatch);
            }
            match (row.state.as_str(), row.result, row.completed_at) {
                ("done", Some(Json(result)), Some(completed_at)) => {
                    return Ok(ClaimOutcome::Replay {
                        result,
                        is_error: row.result_is_error,
                        completed_at,
                    });
                }
                ("in_progress", _, _) if row.claimed_at > now - stale_after => {
                    return Ok(ClaimOutcome::InProgress {
                        claimed_at: row.claimed_at,
                    });
                }
                ("in_progress", _, _) => {
                    // Stale: take it over if nobody else has since (the token is unchanged).
                    let taken = sql(format!(
                        "UPDATE idempotency_records SET claim_token = $5, claimed_at = $6 \
                         WHERE {KEY} AND state = 'in_progress' AND claim_token = $7"
                    ))
                    .bind(self.org)
                    .bind(actor.kind.as_str())
                    .bind(&actor.id)
                    .bind(request_id)
                    .bind(token)
                    .bind(now)
                    .bind(row.claim_token)
                    .execute(self)
                    .await?;
                    if taken == 1 {
                        return Ok(claim(true));
                    }
                    // Someone else took it over, completed or released it: look again.
                }
                (state, _, _) => {
                    return Err(StoreError::Corrupt(format!(
                        "idempotency record {request_id:?} in state {state:?} without a result"
                    )));
                }
            }
        }
        Err(StoreError::Conflict(format!(
            "requestId {request_id:?} is being claimed and released concurrently; retry"
        )))
    }

    /// Stores the outcome of a claimed call at `now`: later claims of its requestId with the
    /// same payload replay `result`. Returns `false` when the claim is no longer held (it went
    /// stale and was taken over, or was pruned): nothing was stored.
    pub async fn complete_request(
        &self,
        claim: &RequestClaim,
        result: &Value,
        is_error: bool,
        now: Timestamp,
    ) -> Result<bool> {
        let n = sql(format!(
            "UPDATE idempotency_records SET state = 'done', result = $5, result_is_error = $6, \
             completed_at = $7 WHERE {KEY} AND state = 'in_progress' AND claim_token = $8"
        ))
        .bind(self.org)
        .bind(claim.actor.kind.as_str())
        .bind(&claim.actor.id)
        .bind(&claim.request_id)
        .bind(Arg::json(result))
        .bind(is_error)
        .bind(now)
        .bind(claim.token)
        .execute(self)
        .await?;
        Ok(n == 1)
    }

    /// Gives a claim up, deleting its record, when the call failed in a way worth retrying
    /// (nothing was done, e.g. the database was unavailable): the next call with the requestId
    /// runs. Returns `false` when the claim was no longer held (nothing was deleted).
    pub async fn release_request(&self, claim: &RequestClaim) -> Result<bool> {
        let n = sql(format!(
            "DELETE FROM idempotency_records WHERE {KEY} AND state = 'in_progress' \
             AND claim_token = $5"
        ))
        .bind(self.org)
        .bind(claim.actor.kind.as_str())
        .bind(&claim.actor.id)
        .bind(&claim.request_id)
        .bind(claim.token)
        .execute(self)
        .await?;
        Ok(n == 1)
    }
}

impl Store {
    /// Deletes idempotency records completed before `before`, and in-progress claims last
    /// taken before it (their processes are long gone), in every organization. Returns the
    /// rows deleted. The gateway's hourly sweep passes `now - IDEMPOTENCY_RETENTION`.
    pub async fn prune_idempotency(&self, before: Timestamp) -> Result<u64> {
        let done = sql("DELETE FROM idempotency_records WHERE completed_at < $1")
            .bind(before)
            .execute(self)
            .await?;
        let open =
            sql("DELETE FROM idempotency_records WHERE state = 'in_progress' AND claimed_at < $1")
                .bind(before)
                .execute(self)
                .await?;
        Ok(done + open)
    }
}
