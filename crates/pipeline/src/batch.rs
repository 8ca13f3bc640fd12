//! Batches: one call of a tool that carries many items instead of its own arguments (the
//! [`crate::envelope`]; every tool takes it, the registry advertises it). A batch is not a
//! second pipeline: it composes the single call's steps (`Pipeline::clear`, `hold`, `run_now`,
//! `approve_and_run`, `settle`) over its items.
//!
//! Before the first item runs, every item is validated against the tool's schema and judged by
//! the guard at its own tier (scope, RBAC, allowlist); a commit then counts every item against
//! the tool's rate limit. One invalid or refused item and nothing runs: the answer lists each
//! item's outcome. `preview` runs nothing and counts nothing: per item its tier, whether it
//! needs approval, and (Tier 3) the tool's precheck. `commit` runs the items in order, each
//! with its own outcome (`ok` with the output, `error` with the tool error). A commit with a
//! Tier 3 item is one approval request listing every item, pinned to every item's precheck
//! snapshot; once approved the items are re-cleared (the requester as they stand then, every
//! pin unchanged) and run in order as one execution whose stored result is the batch's answer.
//!
//! Idempotency: a commit of a tool with a write takes one `requestId` beside `items`, for the
//! whole batch ([`crate::idempotency`]): claimed after every item is cleared and counted, keyed
//! by the envelope (items, mode, atomicity) as the approval request stores it, and answered
//! from the stored batch answer on a replay. A preview ignores it (it changes nothing), as a
//! read does.
//!
//! Budget: the answer is held to the response budget like any other ([`crate::budget`]): a
//! preview over it fails with RESPONSE_TOO_LARGE; a commit keeps each item's status and error
//! and omits what the items returned (`payloadOmitted`), then the items themselves.
//!
//! Atomicity: items are never grouped into one transaction, and never quietly downgraded to
//! best effort (see [`crate::envelope`]).

use breeze_core::Caller;
use breeze_guard::{Clearance, Cleared};
use breeze_store::ApprovalRecord;
use breeze_tools::{CallOptions, Pin, ProgressReport, ToolError, ToolSpec};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    CallOutcome, Count, Pipeline,
    approvals::{Draft, approval_of, pin_unchanged, refused, void},
    envelope::{Envelope, Mode, is_error},
};

fn outcome_of(client_ref: &str, status: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("clientRef".into(), json!(client_ref));
    m.insert("status".into(), json!(status));
    m
}

fn with_error(mut m: Map<String, Value>, e: &ToolError) -> Map<String, Value> {
    m.insert("error".into(), json!(e));
    m
}

/// The answer of a batch refused before anything ran: each failing item `rejected` with its
/// error, the others `not_run` (a preview still shows what they would do).
fn rejected(env: &Envelope, errors: &[Option<ToolError>]) -> CallOutcome {
    let items = env
        .items
        .iter()
        .zip(errors)
        .map(|(item, e)| match e {
            Some(e) => with_error(outcome_of(&item.client_ref, "rejected"), e),
            None => outcome_of(&item.client_ref, "not_run"),
        })
        .collect();
    answer(env.answer("rejected", items))
}

/// The answer of a batch of which item `i` was refused with `e` before anything ran.
fn rejected_at(env: &Envelope, i: usize, e: ToolError) -> CallOutcome {
    let mut errors = vec![None; env.items.len()];
    errors[i] = Some(e);
    rejected(env, &errors)
}

fn answer(value: Value) -> CallOutcome {
    CallOutcome::Batch {
        is_error: is_error(&value),
        answer: crate::raw(&value),
    }
}

/// The pins of a batch's Tier 3 items as one snapshot (`None` when no item pinned anything):
/// what the approval request stores and the execution compares.
fn combined_pin(pins: Vec<(&str, Pin)>) -> Option<Pin> {
    if pins.is_empty() {
        return None;
    }
    let summary = pins
        .iter()
        .map(|(r, p)| format!("{r}: {}", p.summary))
        .collect::<Vec<_>>()
        .join("; ");
    let data = pins
        .into_iter()
        .map(|(r, p)| json!({ "clientRef": r, "pinned": p.data }))
        .collect();
    Some(Pin {
        summary,
        data: json!({ "items": Value::Array(data) }),
    })
}

/// Runs a batch call (see the module docs).
pub(crate) async fn run(
    p: &Pipeline,
    caller: &Caller,
    spec: &ToolSpec,
    args: Value,
    options: CallOptions,
    cancel: &CancellationToken,
) -> CallOutcome {
    let env = match Envelope::parse(spec, &args, p.inner.max_batch_items) {
        Ok(env) => env,
        Err(e) => return CallOutcome::Failed(e),
    };
    // Every item judged before anything runs or counts.
    let mut verdicts = Vec::with_capacity(env.items.len());
    for item in &env.items {
        let verdict = p.clear(caller, spec, &item.input, Count::No).await;
        verdicts.push(verdict.map_err(|stop| stop.into_error(caller)));
    }
    if env.mode == Mode::Preview {
        let outcome = preview(p, spec, &env, verdicts).await;
        return p.settle(false, None, outcome, cancel).await;
    }
    if verdicts.iter().any(Result::is_err) {
        let errors: Vec<Option<ToolError>> = verdicts.into_iter().map(Result::err).collect();
        return rejected(&env, &errors);
    }
    drop(verdicts);
    // Every item counts against the tool's rate limit; the counted verdicts are the ones used.
    let mut clearances = Vec::with_capacity(env.items.len());
    for (i, item) in env.items.iter().enumerate() {
        match p.clear(caller, spec, &item.input, Count::Yes).await {
            Ok(c) => clearances.push(c),
            Err(stop) => return rejected_at(&env, i, stop.into_error(caller)),
        }
    }
    let needs_approval = clearances
        .iter()
        .any(|c| matches!(c, Clearance::NeedsApproval(_)));
    let writes = env.items.iter().any(|i| spec.is_write(&i.input));
    let request_id = env.request_id.as_deref().filter(|_| writes);
    let held = match p
        .hold(caller, spec, request_id, needs_approval, &env.to_value())
        .await
    {
        Ok(held) => held,
        Err(replay) => return as_batch(replay),
    };
    let outcome = if needs_approval {
        Box::pin(with_approval(
            p, caller, spec, &env, clearances, options, cancel,
        ))
        .await
    } else {
        let cleared = clearances
            .into_iter()
            .filter_map(|c| match c {
                Clearance::Run(c) => Some(c),
                Clearance::NeedsApproval(_) => None,
            })
            .collect();
        let CallOptions {
            request_id,
            progress,
            ..
        } = options;
        answer(run_items(p, spec, &env, cleared, request_id, progress, cancel).await)
    };
    p.settle(true, held, outcome, cancel).await
}

/// A stored answer replayed (`Pipeline::hold`) as a batch's: with the batch's error flag.
fn as_batch(outcome: CallOutcome) -> CallOutcome {
    match outcome {
        CallOutcome::Output(answer) => CallOutcome::Batch {
            answer,
            is_error: false,
        },
        CallOutcome::ReplayedError(answer) => CallOutcome::Batch {
            answer,
            is_error: true,
        },
        other => other,
    }
}

/// Runs nothing: per item, its tier, whether it needs approval, and for a Tier 3 item the
/// tool's precheck; or why it would be rejected.
async fn preview(
    p: &Pipeline,
    spec: &ToolSpec,
    env: &Envelope,
    verdicts: Vec<Result<Clearance, ToolError>>,
) -> CallOutcome {
    let mut items = Vec::with_capacity(env.items.len());
    let mut any_rejected = false;
    for (item, verdict) in env.items.iter().zip(verdicts) {
        let mut m = outcome_of(&item.client_ref, "would_run");
        m.insert(
            "tier".into(),
            json!(spec.effective_tier(&item.input).number()),
        );
        match verdict {
            Err(e) => {
                any_rejected = true;
                m = with_error(m, &e);
                m.insert("status".into(), json!("rejected"));
            }
            Ok(Clearance::Run(_)) => {
                m.insert("needsApproval".into(), json!(false));
            }
            Ok(Clearance::NeedsApproval(awaiting)) => {
                m.insert("needsApproval".into(), json!(true));
                match p.precheck(spec, &awaiting, &item.input, None).await {
                    Ok(pin) => {
                        let mut check = json!({ "passed": true });
                        if let Some(pin) = pin {
                            check["pinned"] = json!(pin.summary);
                        }
                        m.insert("precheck".into(), check);
                    }
                    Err(e) => {
                        any_rejected = true;
                        m.insert("precheck".into(), json!({ "passed": false }));
                        m = with_error(m, &e);
                        m.insert("status".into(), json!("rejected"));
                    }
                }
            }
        }
        items.push(m);
    }
    let outcome = if any_rejected {
        "rejected"
    } else {
        "previewed"
    };
    answer(env.answer(outcome, items))
}

/// A commit with a Tier 3 item: every Tier 3 item's precheck (any failure refuses the batch
/// before anyone is asked), then one approval request listing every item and pinned to every
/// snapshot.
async fn with_approval(
    p: &Pipeline,
    caller: &Caller,
    spec: &ToolSpec,
    env: &Envelope,
    clearances: Vec<Clearance>,
    options: CallOptions,
    cancel: &CancellationToken,
) -> CallOutcome {
    let CallOptions {
        request_id,
        progress,
        approval,
    } = options;
    let mut pins = Vec::new();
    for (i, (item, clearance)) in env.items.iter().zip(&clearances).enumerate() {
        let Clearance::NeedsApproval(awaiting) = clearance else {
            continue;
        };
        match p
            .precheck(spec, awaiting, &item.input, request_id.clone())
            .await
        {
            Ok(Some(pin)) => pins.push((item.client_ref.as_str(), pin)),
            Ok(None) => {}
            Err(e) => return rejected_at(env, i, e),
        }
    }
    // The approved batch is cleared again, item by item, when it runs.
    drop(clearances);
    let draft = Draft::batch(spec, env, request_id, combined_pin(pins));
    match p
        .approve_and_run(caller, draft, progress, &approval, cancel)
        .await
    {
        Ok(value) => answer(value),
        Err(outcome) => outcome,
    }
}

/// Runs cleared items in order, each as a single call runs, with its own outcome; a cancelled
/// batch stops, and the items it did not reach are `not_run`.
async fn run_items(
    p: &Pipeline,
    spec: &ToolSpec,
    env: &Envelope,
    cleared: Vec<Cleared>,
    request_id: Option<String>,
    progress: Option<mpsc::UnboundedSender<ProgressReport>>,
    cancel: &CancellationToken,
) -> Value {
    let mut items = Vec::with_capacity(env.items.len());
    for (item, cleared) in env.items.iter().zip(cleared) {
        if cancel.is_cancelled() {
            items.push(with_error(
                outcome_of(&item.client_ref, "not_run"),
                &crate::cancelled(),
            ));
            continue;
        }
        let options = CallOptions {
            request_id: request_id.clone(),
            progress: progress.clone(),
            ..CallOptions::default()
        };
        let result = p
            .run_now(spec, cleared, item.input.clone(), options, cancel)
            .await;
        items.push(match result {
            Ok(output) => {
                let mut m = outcome_of(&item.client_ref, "ok");
                let output: Value = serde_json::from_str(output.get()).unwrap_or(Value::Null);
                m.insert("output".into(), output);
                m
            }
            Err(e) => with_error(outcome_of(&item.client_ref, "error"), &e),
        });
    }
    env.answer("completed", items)
}

/// Runs an approved batch request, claimed, as `caller` (the requester as they stand now):
/// every item validated and cleared again (uncounted: the items were counted when requested),
/// every Tier 3 item's precheck re-run and the snapshot compared with the approved one, each
/// released by the guard against the approval. Anything failing voids the whole request before
/// any item runs.
pub(crate) async fn release(
    p: &Pipeline,
    spec: &ToolSpec,
    r: &ApprovalRecord,
    caller: &Caller,
    progress: Option<mpsc::UnboundedSender<ProgressReport>>,
) -> Result<Value, ToolError> {
    let env = Envelope::parse(spec, &r.arguments, usize::MAX)?;
    let guard = p.guard();
    let mut cleared = Vec::with_capacity(env.items.len());
    let mut pins = Vec::new();
    for item in &env.items {
        let void = |why: String| void(r, &format!("item {}: {why}", item.client_ref));
        let clearance = p
            .clear(caller, spec, &item.input, Count::No)
            .await
            .map_err(|stop| void(stop.into_error(caller).message))?;
        match clearance {
            Clearance::Run(c) => cleared.push(c),
            Clearance::NeedsApproval(awaiting) => {
                let request_id = r.request_id.clone();
                if let Some(pin) = p.precheck(spec, &awaiting, &item.input, request_id).await? {
                    pins.push((item.client_ref.as_str(), pin));
                }
                let released = guard
                    .release(awaiting, approval_of(r, &item.input))
                    .map_err(|refusal| void(refusal.to_string()))?;
                cleared.push(released);
            }
        }
    }
    let pin = combined_pin(pins);
    if !pin_unchanged(pin.as_ref(), r) {
        let now = pin.map_or_else(|| "nothing".to_owned(), |p| p.summary);
        return Err(refused(format!(
            "what the batch of {} depends on changed after it was approved (now: {now}); refusing to run what nobody approved",
            r.tool
        )));
    }
    // Apart from any caller: nothing cancels an approved execution once it starts.
    let never = CancellationToken::new();
    Ok(run_items(
        p,
        spec,
        &env,
        cleared,
        r.request_id.clone(),
        progress,
        &never,
    )
    .await)
}
