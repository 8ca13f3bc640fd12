//! The batch envelope: what a batch call carries instead of the tool's own arguments, read and
//! checked ([`Envelope::parse`]), as an approval request stores it ([`Envelope::to_value`]),
//! described for the approver ([`describe`]), and the shape of a batch's answer. Pure data:
//! running a batch is [`crate::batch`]'s.
//!
//! `{"items": [{"clientRef": "a", "input": {…the tool's arguments…}}, …], "mode": "preview" |
//! "commit", "atomicity": "best_effort" | "atomic"}` — `mode` is required and never defaulted;
//! `atomicity` defaults to `best_effort`; `clientRef`s are unique; at most
//! `BREEZE_MCP_MAX_ITEMS` items (default [`DEFAULT_MAX_ITEMS`]); items are never mixed with the
//! tool's own arguments. `atomic` is honoured only for exactly one item — one call is as atomic
//! as the tool is — and refused with `ATOMICITY_UNSUPPORTED` for more, before anything runs.

use std::collections::HashSet;

use breeze_tools::{ErrorCode, Pin, REQUEST_ID, ToolError, ToolSpec};
use serde_json::{Map, Value, json};

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

    pub(crate) fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::Preview => "preview",
            Mode::Commit => "commit",
        }
    }

    pub(crate) fn atomicity_name(&self) -> &'static str {
        match self.atomicity {
            Atomicity::BestEffort => "best_effort",
            Atomicity::Atomic => "atomic",
        }
    }

    /// The batch's answer: the mode, how it ended, counts per status, the items in order.
    pub(crate) fn answer(&self, outcome: &str, items: Vec<Map<String, Value>>) -> Value {
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

/// The approval request's description of a batch: the tool, then every item (its reference
/// and action), within a bound; the stored arguments hold every item in full.
pub fn describe(spec: &ToolSpec, env: &Envelope, pin: Option<&Pin>) -> String {
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
pub fn approval_actions(spec: &ToolSpec, env: &Envelope) -> Vec<Option<&'static str>> {
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
