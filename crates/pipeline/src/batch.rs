//! Batches: one call of a tool that carries many items instead of its own arguments.
//!
//! `{"items": [{"clientRef": "a", "input": {…the tool's arguments…}}, …], "mode": "preview" |
//! "commit", "atomicity": "best_effort" | "atomic"}` — every tool takes it (the registry
//! advertises it, `breeze_tools::registry::with_batch_envelope`). `mode` is required and never
//! defaulted; `atomicity` defaults to `best_effort`; `clientRef`s are unique; at most
//! `BREEZE_MCP_MAX_ITEMS` items (default [`DEFAULT_MAX_ITEMS`]); items are never mixed with the
//! tool's own arguments.
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
//! Atomicity: `atomic` is honoured only for exactly one item — one call is as atomic as the
//! tool is — and refused with `ATOMICITY_UNSUPPORTED` for more, before anything runs: items are
//! never grouped into one transaction, and never quietly downgraded to best effort.

use std::collections::HashSet;

use breeze_guard::{Caller, Clearance, Cleared, Guard, Refusal};
use breeze_store::ApprovalRecord;
use breeze_tools::{
    CallOptions, ErrorCode, Pin, ProgressReport, REQUEST_ID, Services, ToolError, ToolSpec,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    CallOutcome, Pipeline,
    approvals::Outcome,
    budget,
    idempotency::{self, Begin},
};

/// Items in one batch unless `BREEZE_MCP_MAX_ITEMS` says otherwise.
pub const DEFAULT_MAX_ITEMS: usize = 1000;

/// The envelope's own keys; anything else beside `items` is a tool argument, refused.
const ENVELOPE_KEYS: [&str; 4] = ["items", "mode", "atomicity", REQUEST_ID];

/// Whether `args` is a batch envelope rather than the tool's own arguments.
pub fn is_batch(args: &Value) -> bool {
    args.get("items").is_some()
}

/// What a batch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Runs nothing: says what would run.
    Preview,
    /// Runs the items.
    Commit,
}

/// What a batch promises about its items together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atomicity {
    /// Every item runs, each with its own outcome.
    BestEffort,
    /// All or nothing: honoured for one item only.
    Atomic,
}

/// One item: the caller's reference and the tool's arguments.
#[derive(Debug, Clone)]
pub struct Item {
    pub client_ref: String,
    pub input: Value,
}

/// A parsed batch envelope.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub mode: Mode,
    pub atomicity: Atomicity,
    pub items: Vec<Item>,
    /// The batch's idempotency key, when given (see the module docs).
    pub request_id: Option<String>,
}

fn invalid(spec: &ToolSpec, message: impl std::fmt::Display) -> ToolError {
    ToolError::invalid(format!("Invalid batch for {}: {message}", spec.name))
}

impl Envelope {
    /// Reads `args` as a batch of `spec`, with at most `max_items` items.
    pub fn parse(spec: &ToolSpec, args: &Value, max_items: usize) -> Result<Self, ToolError> {
        let Some(obj) = args.as_object() else {
            return Err(invalid(spec, "arguments must be an object"));
        };
        let mut mixed: Vec<&str> = obj
            .keys()
            .map(String::as_str)
            .filter(|k| !ENVELOPE_KEYS.contains(k))
            .collect();
        if !mixed.is_empty() {
            mixed.sort_unstable();
            return Err(invalid(
                spec,
                format!(
                    "items cannot be mixed with the tool's own arguments ({}); put them in each item's input",
                    mixed.join(", ")
                ),
            ));
        }
        let mode = match obj.get("mode") {
            None => {
                return Err(invalid(
                    spec,
                    "mode is required with items (\"preview\" or \"commit\"); it is never defaulted",
                ));
            }
            Some(v) if v == "preview" => Mode::Preview,
            Some(v) if v == "commit" => Mode::Commit,
            Some(v) => {
                return Err(invalid(
                    spec,
                    format!("mode must be \"preview\" or \"commit\", not {v}"),
                ));
            }
        };
        let atomicity = match obj.get("atomicity") {
            None => Atomicity::BestEffort,
            Some(v) if v == "best_effort" => Atomicity::BestEffort,
            Some(v) if v == "atomic" => Atomicity::Atomic,
            Some(v) => {
                return Err(invalid(
                    spec,
                    format!("atomicity must be \"best_effort\" or \"atomic\", not {v}"),
                ));
            }
        };
        let Some(list) = obj.get("items").and_then(Value::as_array) else {
            return Err(invalid(spec, "items must be an array"));
        };
        if list.is_empty() {
            return Err(invalid(spec, "items must not be empty"));
        }
        if list.len() > max_items {
            return Err(invalid(
                spec,
                format!(
                    "{} items is more than the {max_items} one call may carry (BREEZE_MCP_MAX_ITEMS); split the batch",
                    list.len()
                ),
            ));
        }
        let mut seen = HashSet::new();
        let mut items = Vec::with_capacity(list.len());
        for (i, raw) in list.iter().enumerate() {
            let Some(item) = raw.as_object() else {
                return Err(invalid(spec, format!("items[{i}] must be an object")));
            };
            if let Some(extra) = item.keys().find(|k| *k != "clientRef" && *k != "input") {
                return Err(invalid(
                    spec,
                    format!(
                        "items[{i}] has an unknown field {extra:?} (expected clientRef and input)"
                    ),
                ));
            }
            let client_ref = match item.get("clientRef").and_then(Value::as_str) {
                Some(r) if !r.is_empty() && r.len() <= 200 => r.to_owned(),
                _ => {
                    return Err(invalid(
                        spec,
                        format!("items[{i}].clientRef is required: a string of 1-200 characters"),
                    ));
                }
            };
            if !seen.insert(client_ref.clone()) {
                return Err(invalid(
                    spec,
                    format!("items[{i}].clientRef {client_ref:?} is not unique in the batch"),
                ));
            }
            let Some(input) = item.get("input").filter(|v| v.is_object()) else {
                return Err(invalid(
                    spec,
                    format!("items[{i}].input is required: the tool's own arguments, an object"),
                ));
            };
            items.push(Item {
                client_ref,
                input: input.clone(),
            });
        }
        let request_id = match obj.get(REQUEST_ID) {
            None => None,
            Some(Value::String(id))
                if (1..=breeze_store::MAX_REQUEST_ID_CHARS).contains(&id.chars().count()) =>
            {
                Some(id.clone())
            }
            Some(other) => {
                return Err(invalid(
                    spec,
                    format!(
                        "requestId must be a string of 1 to {} characters, got {other}",
                        breeze_store::MAX_REQUEST_ID_CHARS
                    ),
                ));
            }
        };
        if atomicity == Atomicity::Atomic && items.len() > 1 {
            return Err(ToolError::new(
                ErrorCode::AtomicityUnsupported,
                format!(
                    "{} cannot run {} items atomically: items are never grouped into one transaction; nothing ran",
                    spec.name,
                    items.len()
                ),
            )
            .hint("use atomicity \"best_effort\" (one outcome per item), or one item per call"));
        }
        Ok(Self {
            mode,
            atomicity,
            items,
            request_id,
        })
    }

    /// The envelope as an approval request stores it (and its arguments hash pins), and as
    /// its requestId's payload hash covers it: without the requestId.
    pub fn to_value(&self) -> Value {
        let items: Vec<Value> = self
            .items
            .iter()
            .map(|i| json!({ "clientRef": i.client_ref, "input": i.input }))
            .collect();
        json!({ "items": items, "mode": self.mode_name(), "atomicity": self.atomicity_name() })
    }

    fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::Preview => "preview",
            Mode::Commit => "commit",
        }
    }

    fn atomicity_name(&self) -> &'static str {
        match self.atomicity {
            Atomicity::BestEffort => "best_effort",
            Atomicity::Atomic => "atomic",
        }
    }

    /// The batch's answer: the mode, how it ended, counts per status, the items in order.
    fn answer(&self, outcome: &str, items: Vec<Map<String, Value>>) -> Value {
        let count = |s: &str| items.iter().filter(|i| i["status"] == s).count();
        let counts = json!({
            "total": items.len(),
            "wouldRun": count("would_run"),
            "ok": count("ok"),
            "error": count("error"),
            "rejected": count("rejected"),
            "notRun": count("not_run"),
        });
        json!({
            "mode": self.mode_name(),
            "atomicity": self.atomicity_name(),
            "outcome": outcome,
            "counts": counts,
            "items": items,
        })
    }
}

/// Whether a batch's answer is an error result: nothing ran or would run because an item was
/// rejected, or a commit of which no item succeeded.
pub fn is_error(answer: &Value) -> bool {
    answer["outcome"] == "rejected" || (answer["mode"] == "commit" && answer["counts"]["ok"] == 0)
}

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

/// A guard refusal as an item's error.
fn refusal_error(r: &Refusal) -> ToolError {
    let code = match r {
        Refusal::MissingScope { .. } => ErrorCode::InsufficientScope,
        Refusal::RateLimited { .. } => ErrorCode::RateLimited,
        Refusal::LimiterUnavailable => ErrorCode::UpstreamError,
        _ => ErrorCode::Forbidden,
    };
    let mut e = ToolError::new(code, r.to_string());
    if let Refusal::MissingScope { scope, .. } = r {
        e.required_scopes = vec![*scope];
    }
    e
}

/// The guard's verdict on an item, then its validation — the single call's order — counting
/// nothing.
fn judge(
    guard: &Guard,
    caller: &Caller<'_>,
    spec: &ToolSpec,
    input: &Value,
) -> Result<Clearance, ToolError> {
    let clearance = guard
        .check_uncounted(caller, spec, input)
        .map_err(|r| refusal_error(&r))?;
    spec.validate(input)?;
    Ok(clearance)
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
    caller: &Caller<'_>,
    spec: &ToolSpec,
    args: Value,
    options: CallOptions,
    cancel: &CancellationToken,
) -> CallOutcome {
    let env = match Envelope::parse(spec, &args, p.inner.max_batch_items) {
        Ok(env) => env,
        Err(e) => return CallOutcome::Failed(e),
    };
    let guard = &p.inner.guard;
    let verdicts: Vec<Result<Clearance, ToolError>> = env
        .items
        .iter()
        .map(|item| judge(guard, caller, spec, &item.input))
        .collect();
    if env.mode == Mode::Preview {
        let outcome = preview(p, spec, &env, verdicts).await;
        return budget::apply(p.inner.max_response_bytes, false, outcome);
    }
    if verdicts.iter().any(Result::is_err) {
        let errors: Vec<Option<ToolError>> = verdicts.into_iter().map(Result::err).collect();
        return rejected(&env, &errors);
    }
    drop(verdicts);
    let max_bytes = p.inner.max_response_bytes;
    // Every item counts against the tool's rate limit; the counted verdicts are the ones used.
    let mut clearances = Vec::with_capacity(env.items.len());
    for (i, item) in env.items.iter().enumerate() {
        match guard.check(caller, spec, &item.input).await {
            Ok(c) => clearances.push(c),
            Err(r) => {
                let mut errors = vec![None; env.items.len()];
                errors[i] = Some(refusal_error(&r));
                return rejected(&env, &errors);
            }
        }
    }
    let needs_approval = clearances
        .iter()
        .any(|c| matches!(c, Clearance::NeedsApproval(_)));
    let writes = env.items.iter().any(|i| spec.is_write(&i.input));
    let held = match env.request_id.as_deref().filter(|_| writes) {
        None => None,
        Some(id) => {
            let (store, args) = (&p.inner.store, env.to_value());
            match idempotency::begin(store, caller, spec, needs_approval, id, &args).await {
                Begin::Run(held) => Some(held),
                Begin::Answer(outcome) => return as_batch(outcome),
            }
        }
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
        } = options;
        answer(
            run_items(
                p.services(),
                spec,
                &env,
                cleared,
                request_id,
                progress,
                cancel,
            )
            .await,
        )
    };
    let outcome = budget::apply(max_bytes, true, outcome);
    if let Some(held) = held {
        held.finish(&outcome, cancel.is_cancelled()).await;
    }
    outcome
}

/// A stored answer replayed ([`idempotency::begin`]) as a batch's: with the batch's error flag.
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
                let options = CallOptions::default();
                match spec
                    .precheck(p.services(), &awaiting, &item.input, options)
                    .await
                {
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
    caller: &Caller<'_>,
    spec: &ToolSpec,
    env: &Envelope,
    clearances: Vec<Clearance>,
    options: CallOptions,
    cancel: &CancellationToken,
) -> CallOutcome {
    let CallOptions {
        request_id,
        progress,
    } = options;
    let mut pins = Vec::new();
    for (i, (item, clearance)) in env.items.iter().zip(&clearances).enumerate() {
        let Clearance::NeedsApproval(awaiting) = clearance else {
            continue;
        };
        let options = CallOptions {
            request_id: request_id.clone(),
            progress: None,
        };
        match spec
            .precheck(p.services(), awaiting, &item.input, options)
            .await
        {
            Ok(Some(pin)) => pins.push((item.client_ref.as_str(), pin)),
            Ok(None) => {}
            Err(e) => {
                let mut errors = vec![None; env.items.len()];
                errors[i] = Some(e);
                return rejected(env, &errors);
            }
        }
    }
    // The approved batch is cleared again, item by item, when it runs.
    drop(clearances);
    let outcome = p
        .inner
        .approvals
        .request_and_wait(
            caller,
            spec,
            &env.to_value(),
            request_id,
            combined_pin(pins),
            progress,
            cancel,
        )
        .await;
    match outcome {
        Outcome::Ran(Ok(value)) => answer(value),
        Outcome::Ran(Err(e)) | Outcome::Refused(e) => CallOutcome::Failed(e),
        Outcome::Pending(r) => CallOutcome::Pending(r),
    }
}

/// Runs cleared items in order, each with its own outcome; a cancelled batch stops, and the
/// items it did not reach are `not_run`.
async fn run_items(
    services: Services<'_>,
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
        };
        let call = spec.call(services, &cleared, item.input.clone(), options);
        let result = tokio::select! {
            r = call => r,
            () = cancel.cancelled() => Err(crate::cancelled()),
        };
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

/// Runs an approved batch request, claimed: every item is validated and cleared again as the
/// requester stands now (uncounted: the items were counted when requested), every Tier 3
/// item's precheck re-run and the snapshot compared with the approved one. Anything failing
/// voids the whole request before any item runs.
pub(crate) async fn run_approved(
    guard: &Guard,
    services: Services<'_>,
    spec: &ToolSpec,
    r: &ApprovalRecord,
    caller: &Caller<'_>,
    progress: Option<mpsc::UnboundedSender<ProgressReport>>,
) -> Result<Value, ToolError> {
    let env = Envelope::parse(spec, &r.arguments, usize::MAX)?;
    let mut cleared = Vec::with_capacity(env.items.len());
    let mut pins = Vec::new();
    for item in &env.items {
        let void =
            |why: String| crate::approvals::void(r, &format!("item {}: {why}", item.client_ref));
        spec.validate(&item.input).map_err(|e| void(e.message))?;
        match guard
            .check_uncounted(caller, spec, &item.input)
            .map_err(|refusal| void(refusal.to_string()))?
        {
            Clearance::Run(c) => cleared.push(c),
            Clearance::NeedsApproval(awaiting) => {
                let options = CallOptions {
                    request_id: r.request_id.clone(),
                    progress: None,
                };
                if let Some(pin) = spec
                    .precheck(services, &awaiting, &item.input, options)
                    .await?
                {
                    pins.push((item.client_ref.as_str(), pin));
                }
                cleared.push(awaiting.approved());
            }
        }
    }
    let pin = combined_pin(pins);
    if !crate::approvals::pin_unchanged(pin.as_ref(), r) {
        let now = pin.map_or_else(|| "nothing".to_owned(), |p| p.summary);
        return Err(crate::approvals::refused(format!(
            "what the batch of {} depends on changed after it was approved (now: {now}); refusing to run what nobody approved",
            r.tool
        )));
    }
    // Apart from any caller: nothing cancels an approved execution once it starts.
    let never = CancellationToken::new();
    Ok(run_items(
        services,
        spec,
        &env,
        cleared,
        r.request_id.clone(),
        progress,
        &never,
    )
    .await)
}

/// The approval request's description of a batch: the tool, then every item (its reference
/// and action), within a bound; the stored arguments hold every item in full.
pub(crate) fn describe(spec: &ToolSpec, env: &Envelope, pin: Option<&Pin>) -> String {
    const MAX: usize = 4000;
    let mut text = format!(
        "{} — batch of {} item{} ({}):",
        spec.title,
        env.items.len(),
        if env.items.len() == 1 { "" } else { "s" },
        env.atomicity_name()
    );
    for (i, item) in env.items.iter().enumerate() {
        let mut input = item.input.to_string();
        if input.len() > 160 {
            let mut end = 160;
            while !input.is_char_boundary(end) {
                end -= 1;
            }
            input.truncate(end);
            input.push('…');
        }
        let line = format!(" {}: {}({input});", item.client_ref, spec.name);
        if text.len() + line.len() > MAX {
            text.push_str(&format!(
                " … and {} more (every item is in the request's arguments)",
                env.items.len() - i
            ));
            break;
        }
        text.push_str(&line);
    }
    if let Some(pin) = pin {
        text.push_str(&format!(" [{}]", pin.summary));
    }
    text
}

/// The distinct actions of a batch's Tier 3 items (`None`: a tool without actions), whose
/// approval policies the request takes the strictest of.
pub(crate) fn approval_actions(spec: &ToolSpec, env: &Envelope) -> Vec<Option<&'static str>> {
    let mut actions = Vec::new();
    for item in &env.items {
        if spec.effective_tier(&item.input) == breeze_tools::Tier::T3 {
            let a = spec.action(&item.input).map(|a| a.name);
            if !actions.contains(&a) {
                actions.push(a);
            }
        }
    }
    actions
}
