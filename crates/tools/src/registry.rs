//! The registry: every tool's declaration, erased to one shape, in a deterministic order.

use std::collections::BTreeMap;

use futures::future::{BoxFuture, FutureExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use breeze_core::Permission;
use breeze_guard::{AwaitingApproval, Cleared, Guarded};

use crate::contract::{
    Action, ActionSet, CallOptions, Effect, ErrorCode, Hints, Pin, RateLimit, Tier, Tool, ToolCx,
    ToolError, Unscoped,
};

/// A tool's output, serialized once from its typed value.
pub type RawOutput = Box<serde_json::value::RawValue>;

// The erased handlers own their `ToolCx`, so a call is one boxed future. They make it
// themselves, for their tool's reach, from the cleared organization.
type CallFn = for<'a> fn(Scope<'a>, Value) -> BoxFuture<'a, Result<RawOutput, ToolError>>;
type PrecheckFn = for<'a> fn(Scope<'a>, &'a Value) -> BoxFuture<'a, Result<Option<Pin>, ToolError>>;

/// What a call's [`ToolCx`] is made of: the unscoped services and the organization, actor and
/// options of the clearance.
struct Scope<'a> {
    unscoped: &'a Unscoped,
    org: breeze_core::OrgId,
    actor: breeze_core::Actor,
    user: breeze_core::UserId,
    options: CallOptions,
}

impl<'a> Scope<'a> {
    fn cx<T: Tool>(self) -> ToolCx<'a, T::Reach> {
        ToolCx::new(
            self.unscoped,
            self.org,
            (self.actor, self.user),
            self.options,
        )
    }
}

/// A registered tool.
pub struct ToolSpec {
    pub name: &'static str,
    /// The domain (toolset) the tool belongs to: the name its module registers it under
    /// ([`Registry::domain`]), e.g. `devices`.
    pub domain: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub tier: Tier,
    pub permission: Permission,
    pub rate_limit: Option<RateLimit>,
    pub actions: &'static [Action],
    pub action_key: &'static str,
    pub effects: Vec<Effect>,
    pub hints: Hints,
    /// The tool's own arguments: what one call takes, and what every call (and every item of
    /// a batch) is validated against.
    pub input_schema: Value,
    /// What `tools/list` advertises: `input_schema` in a form every client maps
    /// ([`portable_input`]). The batch envelope every tool also takes is not repeated here: the
    /// server's `instructions` and docs/tools.md describe it once.
    pub listed_input_schema: Value,
    /// Every `structuredContent` a call can answer with, in full: what `breeze_describe`, the
    /// tool catalogue and the skill show ([`output_schema_of`]).
    pub output_schema: Value,
    /// What `tools/list` advertises: `output_schema` cut to its top level
    /// ([`listed_output_schema`]), which accepts everything the full one does.
    pub listed_output_schema: Value,
    validator: jsonschema::Validator,
    call: CallFn,
    precheck: PrecheckFn,
}

impl ToolSpec {
    /// The action named in `args`, when the tool has actions and the name is one of them.
    pub fn action(&self, args: &Value) -> Option<&'static Action> {
        let name = args.get(self.action_key)?.as_str()?;
        self.actions.iter().find(|a| a.name == name)
    }

    /// The action a call is judged as: the one it names, else (no action, or an unknown one)
    /// the tool's highest-tier action, the first of them in declaration order. `None` only for
    /// a tool without actions.
    fn judged_as(&self, args: &Value) -> Option<&'static Action> {
        self.action(args).or_else(|| {
            self.actions
                .iter()
                .fold(None, |top: Option<&'static Action>, a| match top {
                    Some(t) if t.tier >= a.tier => Some(t),
                    _ => Some(a),
                })
        })
    }

    /// The tier of a call: the named action's; for a call naming no action or an unknown one,
    /// the tool's highest (fail closed: schema validation then refuses the call anyway, but
    /// nothing before it may treat the call as cheaper than the tool's costliest action); the
    /// tool's tier for a tool without actions.
    pub fn effective_tier(&self, args: &Value) -> Tier {
        self.judged_as(args).map_or(self.tier, |a| a.tier)
    }

    /// Whether a call with `args` writes: the named action's effect is not [`Effect::Read`]
    /// (a call naming no action or an unknown one counts as a write: fail closed, validation
    /// refuses it anyway); for a tool without actions, any of its effects is not a read.
    pub fn is_write(&self, args: &Value) -> bool {
        if self.actions.is_empty() {
            return self.effects.iter().any(|e| *e != Effect::Read);
        }
        self.action(args).is_none_or(|a| a.effect != Effect::Read)
    }

    /// Whether any call of this tool can write: its input schema takes a `requestId`.
    pub fn has_write(&self) -> bool {
        self.effects.iter().any(|e| *e != Effect::Read)
    }

    /// The lowest tier any call of this tool can have: what a caller needs to see it listed.
    pub fn lowest_tier(&self) -> Tier {
        self.actions
            .iter()
            .map(|a| a.tier)
            .min()
            .unwrap_or(self.tier)
    }

    /// The permission a call needs: the action's it is judged as (see
    /// [`effective_tier`](Self::effective_tier)), else the tool's.
    pub fn permission_for(&self, args: &Value) -> Permission {
        self.judged_as(args)
            .map_or(self.permission, |a| a.permission)
    }

    /// Why calls of `action` (none: the tool as a whole) may not be approved automatically by
    /// an organization's policy, or `None` when they may: only an action of the action table
    /// whose effect is [`Effect::Read`] and that needs approval (Tier 3) qualifies — a command
    /// type that only looks.
    pub fn automatic_approval_refusal(&self, action: Option<&str>) -> Option<String> {
        let Some(action) = action else {
            return Some(format!(
                "automatic approval is set per read-only action, never for a whole tool ({})",
                self.name
            ));
        };
        let class = format!("{}.{action}", self.name);
        let Some(row) = self.actions.iter().find(|a| a.name == action) else {
            return Some(format!("{class}: {} has no action {action:?}", self.name));
        };
        if row.effect != Effect::Read {
            return Some(format!(
                "{class} is not read-only (its effect is {:?}); only read-only actions can be approved automatically",
                row.effect
            ));
        }
        if row.tier != Tier::T3 {
            return Some(format!(
                "{class} never waits for approval (Tier {}), so there is nothing to approve automatically",
                row.tier.number()
            ));
        }
        None
    }

    /// Checks `args` against the input schema; the error names each offending field.
    pub fn validate(&self, args: &Value) -> Result<(), ToolError> {
        // The common case answers without building the error iterator's state.
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let problems: Vec<String> = self
            .validator
            .iter_errors(args)
            .map(|e| {
                let path = e.instance_path().to_string();
                let field = path.trim_start_matches('/').replace('/', ".");
                if field.is_empty() {
                    e.to_string()
                } else {
                    format!("{field}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ToolError::invalid(format!(
                "Invalid arguments for {}: {}",
                self.name,
                problems.join("; ")
            )))
        }
    }

    /// Runs the handler on already validated arguments, as the guard cleared it: in the
    /// cleared organization, as the cleared actor. Returns the structured output as JSON text
    /// (`serde_json::from_str` makes a tree of it where one is needed). The clearance is
    /// spent; one for another tool, action or arguments runs nothing.
    pub fn call<'a>(
        &self,
        unscoped: &'a Unscoped,
        cleared: Cleared,
        args: Value,
        options: CallOptions,
    ) -> BoxFuture<'a, Result<RawOutput, ToolError>> {
        if !cleared.binds(self, &args) {
            return Box::pin(std::future::ready(Err(mismatch(&cleared, self.name))));
        }
        let scope = Scope {
            unscoped,
            org: cleared.org(),
            actor: cleared.actor().clone(),
            user: cleared.user(),
            options,
        };
        (self.call)(scope, args)
    }

    /// The tool's [`Tool::precheck`] on already validated arguments of a call awaiting a
    /// person's approval: what can be refused before a person is asked, and the stored data to
    /// pin.
    pub fn precheck<'a>(
        &self,
        unscoped: &'a Unscoped,
        awaiting: &AwaitingApproval,
        args: &'a Value,
        options: CallOptions,
    ) -> BoxFuture<'a, Result<Option<Pin>, ToolError>> {
        let cleared = awaiting.cleared_for_precheck();
        if !cleared.binds(self, args) {
            return Box::pin(std::future::ready(Err(mismatch(cleared, self.name))));
        }
        let scope = Scope {
            unscoped,
            org: cleared.org(),
            actor: cleared.actor().clone(),
            user: cleared.user(),
            options,
        };
        (self.precheck)(scope, args)
    }
}

fn mismatch(cleared: &Cleared, tool: &str) -> ToolError {
    let (cleared_tool, action) = (cleared.tool(), cleared.action().unwrap_or("-"));
    tracing::error!(
        cleared = cleared_tool,
        action,
        tool,
        "a clearance was presented for another call"
    );
    ToolError::new(
        ErrorCode::Internal,
        format!(
            "the clearance was for {cleared_tool} ({action}) with other arguments, not this call of {tool}; nothing was run"
        ),
    )
}

impl Guarded for ToolSpec {
    fn name(&self) -> &str {
        self.name
    }

    fn clearance_name(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(self.name)
    }

    fn tier_for(&self, args: &Value) -> Tier {
        self.effective_tier(args)
    }

    fn action_for(&self, args: &Value) -> Option<&'static str> {
        self.action(args).map(|a| a.name)
    }

    fn lowest_tier(&self) -> Tier {
        ToolSpec::lowest_tier(self)
    }

    fn permission_for(&self, args: &Value) -> Permission {
        ToolSpec::permission_for(self, args)
    }

    fn rate_limit(&self) -> Option<RateLimit> {
        self.rate_limit
    }
}

/// A schema as MCP wants it: no `$schema` (2020-12 is the default), no top-level title, and
/// none of schemars' numeric `format`s (`uint32`, `int64`, …), which are not JSON Schema formats
/// and make strict clients warn; the bounds carry the meaning.
fn schema_of<T: JsonSchema>() -> Value {
    let mut schema = tidy(schemars::schema_for!(T).to_value());
    if let Some(m) = schema.as_object_mut() {
        // The input type's Rust doc: the tool's description says it for models.
        m.remove("description");
    }
    inline_enums(&mut schema);
    schema
}

/// Replaces each reference to a `$defs` entry that is a plain string enum (`type` and `enum`,
/// perhaps a `description`) by the enum itself, and an optional one — schemars' `anyOf: [{$ref},
/// {type: null}]` — by `type: [string, null]` with `null` among the values; drops the entries
/// no longer referenced. The same instances validate (these are the same sets of values,
/// written once where they are used): a listing repeats every schema, and a reference costs a
/// reader a lookup.
fn inline_enums(schema: &mut Value) {
    let Some(defs) = schema.get("$defs").and_then(Value::as_object).cloned() else {
        return;
    };
    let enums: Map<String, Value> = defs
        .into_iter()
        .filter(|(_, d)| {
            d.as_object().is_some_and(|m| {
                m.get("type").is_some_and(|t| t == "string")
                    && m.get("enum").is_some_and(Value::is_array)
                    && m.keys()
                        .all(|k| ["type", "enum", "description"].contains(&k.as_str()))
            })
        })
        .map(|(name, d)| (format!("#/$defs/{name}"), d))
        .collect();
    if enums.is_empty() {
        return;
    }
    // The values of the enum `v` references; `None` when `v` is no reference to one, or has a
    // `type` or `enum` of its own (which the inlined ones would overwrite).
    fn enum_values(enums: &Map<String, Value>, v: &Map<String, Value>) -> Option<Vec<Value>> {
        if v.contains_key("type") || v.contains_key("enum") {
            return None;
        }
        let r = v.get("$ref")?.as_str()?;
        enums.get(r)?.get("enum")?.as_array().cloned()
    }
    fn walk(enums: &Map<String, Value>, v: &mut Value) {
        match v {
            Value::Object(m) => {
                if let Some(values) = enum_values(enums, m) {
                    m.remove("$ref");
                    m.insert("type".into(), json!("string"));
                    m.insert("enum".into(), Value::Array(values));
                    return;
                }
                let nullable = m
                    .get("anyOf")
                    .and_then(Value::as_array)
                    .and_then(|alts| match alts.as_slice() {
                        [a, null] | [null, a] if *null == json!({ "type": "null" }) => a
                            .as_object()
                            .filter(|a| a.len() == 1)
                            .and_then(|a| enum_values(enums, a)),
                        _ => None,
                    });
                if let Some(mut values) = nullable {
                    values.push(Value::Null);
                    m.remove("anyOf");
                    m.insert("type".into(), json!(["string", "null"]));
                    m.insert("enum".into(), Value::Array(values));
                    return;
                }
                m.values_mut().for_each(|sub| walk(enums, sub));
            }
            Value::Array(items) => items.iter_mut().for_each(|sub| walk(enums, sub)),
            _ => {}
        }
    }
    let Some(root) = schema.as_object_mut() else {
        return;
    };
    let mut defs = root.remove("$defs");
    for (_, sub) in root.iter_mut() {
        walk(&enums, sub);
    }
    if let Some(Value::Object(d)) = &mut defs {
        for (_, sub) in d.iter_mut() {
            walk(&enums, sub);
        }
        let text = Value::Object(root.clone()).to_string() + &Value::Object(d.clone()).to_string();
        d.retain(|name, _| text.contains(&format!("\"#/$defs/{name}\"")));
        if !d.is_empty() {
            root.insert("$defs".into(), Value::Object(std::mem::take(d)));
        }
    }
}

fn tidy(mut v: Value) -> Value {
    fn strip_numeric_formats(v: &mut Value) {
        match v {
            Value::Object(m) => {
                let numeric = m.get("format").and_then(Value::as_str).is_some_and(|f| {
                    ["int", "uint", "float", "double"]
                        .iter()
                        .any(|p| f.starts_with(p))
                });
                if numeric {
                    m.remove("format");
                }
                m.values_mut().for_each(strip_numeric_formats);
            }
            Value::Array(items) => items.iter_mut().for_each(strip_numeric_formats),
            _ => {}
        }
    }
    if let Value::Object(m) = &mut v {
        m.remove("$schema");
        m.remove("title");
    }
    strip_numeric_formats(&mut v);
    v
}

/// A listed input schema every client can map: no `type` arrays. Schemars writes an optional
/// argument as `type: [T, "null"]`, which clients that translate schemas into a one-type
/// dialect (the OpenAPI subset of some model providers) reject or drop; for an argument,
/// absent and `null` mean the same, so the listing says only `T` (and leaves `null` out of an
/// `enum`). What the server validates against is unchanged: it still accepts `null`. A type
/// array of several non-null types becomes an `anyOf` of one type each.
///
/// An id argument is a string of exactly 36 characters in what the server validates; the
/// listing names it `format: uuid` instead, which is shorter and says what to send.
pub fn portable_input(mut schema: Value) -> Value {
    single_types(&mut schema, false);
    uuid_format(&mut schema);
    schema
}

fn uuid_format(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let is_uuid = m.get("type").is_some_and(|t| t == "string")
                && m.get("minLength").and_then(Value::as_u64) == Some(36)
                && m.get("maxLength").and_then(Value::as_u64) == Some(36)
                && !m.contains_key("format");
            if is_uuid {
                m.remove("minLength");
                m.remove("maxLength");
                m.insert("format".into(), json!("uuid"));
            }
            m.values_mut().for_each(uuid_format);
        }
        Value::Array(a) => a.iter_mut().for_each(uuid_format),
        _ => {}
    }
}

/// A listed output schema with no `type` arrays: a nullable field (`[T, "null"]`, which an
/// answer may really hold) becomes `anyOf: [{type: T}, {type: null}]`, the same set of values.
pub fn portable_output(mut schema: Value) -> Value {
    single_types(&mut schema, true);
    schema
}

fn single_types(v: &mut Value, keep_null: bool) {
    match v {
        Value::Object(m) => {
            if let Some(types) = m.get("type").and_then(Value::as_array).cloned() {
                let non_null: Vec<Value> = types.into_iter().filter(|t| t != "null").collect();
                let nullable =
                    m.get("type").and_then(Value::as_array).map_or(0, Vec::len) > non_null.len();
                if non_null.len() == 1 && !(keep_null && nullable) {
                    m.insert("type".into(), non_null[0].clone());
                    if let Some(e) = m.get_mut("enum").and_then(Value::as_array_mut) {
                        e.retain(|x| !x.is_null());
                    }
                } else {
                    // Each type its own branch, carrying the keywords that constrain values;
                    // annotations stay on the whole.
                    m.remove("type");
                    let annotations = ["description", "title", "default", "examples"];
                    let constraints: Map<String, Value> = m
                        .iter()
                        .filter(|(k, _)| !annotations.contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    m.retain(|k, _| annotations.contains(&k.as_str()));
                    let mut branches: Vec<Value> = non_null
                        .into_iter()
                        .map(|t| {
                            let mut b = constraints.clone();
                            b.insert("type".into(), t);
                            Value::Object(b)
                        })
                        .collect();
                    if nullable && keep_null {
                        branches.push(json!({ "type": "null" }));
                    }
                    m.insert("anyOf".into(), Value::Array(branches));
                }
            }
            m.values_mut().for_each(|x| single_types(x, keep_null));
        }
        Value::Array(items) => items.iter_mut().for_each(|x| single_types(x, keep_null)),
        _ => {}
    }
}

/// The `structuredContent` of a batch (`breeze-pipeline::batch`), one branch of every tool's
/// `outputSchema`, kept minimal since every listing repeats it: how it ended, counts, and one
/// outcome per item in order (`clientRef`, `status`; the item's output or error, or for a preview
/// its tier, approval and precheck).
pub fn batch_result_schema() -> Value {
    json!({ "type": "object", "required": ["outcome", "counts", "items"] })
}

/// Removes the `description` annotations from an output schema (a property that happens to
/// be called `description` is a schema object, not a string, and stays). Output shapes are
/// repeated in every listing; their fields are documented in docs/tools.md, and the Rust docs
/// schemars would copy are written for developers, not models.
fn strip_descriptions(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("description").is_some_and(Value::is_string) {
                m.remove("description");
            }
            m.values_mut().for_each(strip_descriptions);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// The `outputSchema` of a tool: every `structuredContent` a call can answer with, so that
/// clients that validate it (both official SDKs do) accept every result, errors included.
///
/// `{"type": "object", "$defs": …, "anyOf": [success, error envelope, batch, (pending approval)]}`:
/// the success shape is derived for *serialization* (a field the output skips when empty is
/// not required), schemars' `$defs` are hoisted to the root so its `$ref`s resolve there, and
/// the pending-approval envelope is admitted only by tools that can need approval.
/// A tool with a write (`has_write`) also admits `replayed: true` on its success answer (an
/// idempotent replay) and the `payloadOmitted` answer of a write over the response budget.
pub fn output_schema_of<T: JsonSchema>(can_need_approval: bool, has_write: bool) -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let mut success = tidy(generator.into_root_schema_for::<T>().to_value());
    strip_descriptions(&mut success);
    let defs = success
        .as_object_mut()
        .and_then(|m| m.remove("$defs"))
        .filter(|d| d.as_object().is_some_and(|d| !d.is_empty()));
    if has_write && let Some(props) = success.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert("replayed".into(), json!({ "type": "boolean" }));
    }
    let mut any_of = vec![
        success,
        crate::contract::error_envelope_schema(),
        batch_result_schema(),
    ];
    if can_need_approval {
        any_of.push(crate::contract::pending_approval_schema());
    }
    if has_write {
        any_of.push(crate::contract::payload_omitted_schema());
    }
    let mut root = Map::new();
    root.insert("type".into(), Value::from("object"));
    if let Some(defs) = defs {
        root.insert("$defs".into(), defs);
    }
    root.insert("anyOf".into(), Value::Array(any_of));
    Value::Object(root)
}

/// The listed form of an [`output_schema_of`] schema: the same branches, the success branch
/// cut to its top level — its `required` fields and each property's JSON type, nothing nested —
/// the shared envelopes to the fields they require, and no `$defs`. Every instance the full schema accepts, this one accepts (it drops
/// constraints and adds none: a property's type set is the union of what its schema allows, or
/// no constraint where that cannot be read off), so clients that validate `structuredContent`
/// against the listing accept every real answer. The full schema stays in `breeze_describe`,
/// docs/tools.md and the skill; every listing repeats this one, so it is kept small.
pub fn listed_output_schema(full: &Value) -> Value {
    let defs = full.get("$defs");
    let Some(branches) = full.get("anyOf").and_then(Value::as_array) else {
        return shallow(full, defs);
    };
    let branches: Vec<Value> = branches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if i == 0 {
                let mut success = shallow(b, defs);
                // The root says `object` already.
                if let Some(m) = success.as_object_mut()
                    && m.get("type").is_some_and(|t| t == "object")
                {
                    m.remove("type");
                }
                success
            } else {
                // The shared envelopes (error, batch, pending approval, payload omitted) are
                // told apart by the fields they require; their inner shape is the catalogue's.
                let mut m = Map::new();
                if let Some(r) = b.get("required") {
                    m.insert("required".into(), r.clone());
                }
                Value::Object(m)
            }
        })
        .collect();
    json!({ "type": "object", "anyOf": branches })
}

/// `schema` (resolved through `defs`) with only its type, `required` and each property's type.
fn shallow(schema: &Value, defs: Option<&Value>) -> Value {
    let Some(s) = resolve(schema, defs).and_then(Value::as_object) else {
        return json!({});
    };
    let mut out = Map::new();
    if let Some(t) = s.get("type") {
        out.insert("type".into(), t.clone());
    }
    if let Some(required) = s
        .get("required")
        .filter(|r| r.as_array().is_some_and(|r| !r.is_empty()))
    {
        out.insert("required".into(), required.clone());
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        let props: Map<String, Value> = props
            .iter()
            .map(|(name, p)| {
                let only_type = match json_types(p, defs) {
                    Some(types) if types.len() == 1 => json!({ "type": types[0] }),
                    Some(types) => json!({ "type": types }),
                    None => json!({}),
                };
                (name.clone(), only_type)
            })
            .collect();
        out.insert("properties".into(), Value::Object(props));
    }
    // A success shape that is itself a choice (a tagged enum) keeps its branches, each cut the
    // same way.
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            let alts: Vec<Value> = alts.iter().map(|a| shallow(a, defs)).collect();
            out.insert(key.into(), Value::Array(alts));
        }
    }
    Value::Object(out)
}

/// `schema` itself, or the `$defs` entry its local `$ref` names (`None` for a reference that
/// does not resolve).
fn resolve<'a>(schema: &'a Value, defs: Option<&'a Value>) -> Option<&'a Value> {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => defs?.get(r.strip_prefix("#/$defs/")?),
        None => Some(schema),
    }
}

/// The JSON types an instance of `schema` can have, sorted, or `None` when that cannot be read
/// off its `type` (or, for a choice, every branch's type).
fn json_types(schema: &Value, defs: Option<&Value>) -> Option<Vec<String>> {
    let s = resolve(schema, defs)?;
    let mut types: Vec<String> = match s.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .map(|t| t.as_str().map(str::to_owned))
            .collect::<Option<_>>()?,
        Some(_) => return None,
        None => {
            let alts = s.get("anyOf").or_else(|| s.get("oneOf"))?.as_array()?;
            let mut all = Vec::new();
            for a in alts {
                all.extend(json_types(a, defs)?);
            }
            all
        }
    };
    types.sort_unstable();
    types.dedup();
    // `integer` is a subset of `number`: listing both says nothing more than `number`.
    if types.iter().any(|t| t == "number") {
        types.retain(|t| t != "integer");
    }
    (!types.is_empty()).then_some(types)
}

fn call_erased<'a, T: Tool>(
    scope: Scope<'a>,
    args: Value,
) -> BoxFuture<'a, Result<RawOutput, ToolError>> {
    let cx = scope.cx::<T>();
    async move {
        let input: T::Input = serde_json::from_value(args)
            .map_err(|e| ToolError::invalid(format!("Invalid arguments for {}: {e}", T::NAME)))?;
        let output = T::call(&cx, input).await?;
        serde_json::value::to_raw_value(&output)
            .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))
    }
    .boxed()
}

fn precheck_erased<'a, T: Tool>(
    scope: Scope<'a>,
    args: &'a Value,
) -> BoxFuture<'a, Result<Option<Pin>, ToolError>> {
    let cx = scope.cx::<T>();
    async move {
        let input: T::Input = T::Input::deserialize(args)
            .map_err(|e| ToolError::invalid(format!("Invalid arguments for {}: {e}", T::NAME)))?;
        T::precheck(&cx, &input).await
    }
    .boxed()
}

/// The name of the idempotency key every tool with a write accepts.
pub const REQUEST_ID: &str = "requestId";

/// The description of `requestId` in every write tool's input schema.
pub const REQUEST_ID_DESCRIPTION: &str = "Idempotency key: a replay answers the stored result";

/// Adds the optional `requestId` (1 to 200 characters) to the input schema of a tool with a
/// write. Generated here, so every write tool, a new one included, takes it; the pipeline
/// removes it from the arguments before validation and the handler (whose input type denies
/// unknown fields never sees it).
fn add_request_id(input_schema: &mut Value) {
    let Some(root) = input_schema.as_object_mut() else {
        return;
    };
    let props = root
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(props) = props.as_object_mut() {
        props.insert(
            REQUEST_ID.into(),
            json!({
                "type": "string",
                "minLength": 1,
                "maxLength": breeze_store::MAX_REQUEST_ID_CHARS,
                "description": REQUEST_ID_DESCRIPTION,
            }),
        );
    }
}

/// Every tool, by name.
#[derive(Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, ToolSpec>,
    /// The domain the tools being registered belong to (see [`Registry::domain`]).
    current_domain: &'static str,
}

/// The domain of a tool registered outside [`Registry::domain`] (tests' own registries).
pub const NO_DOMAIN: &str = "other";

impl Registry {
    /// Registers the tools `register` adds as the domain `name` (a toolset clients can choose,
    /// `?toolsets=devices,scripts`): each domain module's `register` is called this way, so
    /// every tool gets exactly one domain.
    pub fn domain(&mut self, name: &'static str, register: fn(&mut Registry)) {
        let outer = std::mem::replace(&mut self.current_domain, name);
        register(self);
        self.current_domain = outer;
    }

    /// Every domain, in name order.
    pub fn domains(&self) -> Vec<&'static str> {
        let mut d: Vec<&'static str> = self.iter().map(|t| t.domain).collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    /// Adds `T`. Panics on a duplicate name or a schema that does not compile: both are
    /// programming errors caught by the registry tests.
    pub fn register<T: Tool>(&mut self) {
        let mut input_schema = schema_of::<T::Input>();
        let actions = <T::Actions as ActionSet>::TABLE;
        let can_need_approval = T::TIER == Tier::T3 || actions.iter().any(|a| a.tier == Tier::T3);
        let effects: Vec<Effect> = if actions.is_empty() {
            T::EFFECTS.to_vec()
        } else {
            actions.iter().map(|a| a.effect).collect()
        };
        let domain = if self.current_domain.is_empty() {
            NO_DOMAIN
        } else {
            self.current_domain
        };
        let has_write = effects.iter().any(|e| *e != Effect::Read);
        if has_write {
            add_request_id(&mut input_schema);
        }
        let output_schema = output_schema_of::<T::Output>(can_need_approval, has_write);
        let listed_output_schema = portable_output(listed_output_schema(&output_schema));
        #[allow(clippy::expect_used)] // a static schema; proven by the registry test
        let validator =
            jsonschema::validator_for(&input_schema).expect("tool input schema compiles");
        let spec = ToolSpec {
            name: T::NAME,
            domain,
            title: T::TITLE,
            description: T::DESCRIPTION,
            tier: T::TIER,
            permission: T::PERMISSION,
            rate_limit: T::RATE_LIMIT,
            actions,
            action_key: T::ACTION_KEY,
            hints: Hints::derive(&effects),
            effects,
            listed_input_schema: portable_input(input_schema.clone()),
            input_schema,
            output_schema,
            listed_output_schema,
            validator,
            call: call_erased::<T>,
            precheck: precheck_erased::<T>,
        };
        let previous = self.tools.insert(T::NAME, spec);
        assert!(previous.is_none(), "tool {} registered twice", T::NAME);
    }

    /// Whether an organization may give the action class `class` (`*`, `tool` or
    /// `tool.action`) the approval mode `mode`: `automatic` only for a read-only Tier 3
    /// action ([`ToolSpec::automatic_approval_refusal`]); the error names the class and why.
    /// Every door that sets a policy asks this (the store can check only the class's shape).
    pub fn check_approval_policy(&self, class: &str, mode: &str) -> Result<(), String> {
        if mode != "automatic" {
            return Ok(());
        }
        let refusal = match class.split_once('.') {
            _ if class == "*" => Some(
                "automatic approval cannot be the organization's default (class *); set it per read-only action".to_owned(),
            ),
            None => match self.get(class) {
                Some(spec) => spec.automatic_approval_refusal(None),
                None => Some(format!("{class}: no such tool")),
            },
            Some((tool, action)) => match self.get(tool) {
                Some(spec) => spec.automatic_approval_refusal(Some(action)),
                None => Some(format!("{class}: no such tool {tool:?}")),
            },
        };
        match refusal {
            None => Ok(()),
            Some(why) => Err(format!(
                "cannot set approval mode automatic for {class}: {why}; allowed: {}",
                self.automatic_approval_classes().join(", ")
            )),
        }
    }

    /// Every action class an organization may approve automatically, derived from the action
    /// tables (read-only Tier 3 actions).
    pub fn automatic_approval_classes(&self) -> Vec<String> {
        self.iter()
            .flat_map(|spec| {
                spec.actions
                    .iter()
                    .filter(|a| spec.automatic_approval_refusal(Some(a.name)).is_none())
                    .map(|a| format!("{}.{}", spec.name, a.name))
            })
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name)
    }

    /// Every tool, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values()
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The `_meta` of a tool's result: its tier, its actions' tiers and the server identity.
pub fn tool_meta(spec: &ToolSpec, server: &Value) -> Value {
    let mut m = Map::new();
    m.insert("breeze/tier".into(), Value::from(spec.tier.number()));
    if !spec.actions.is_empty() {
        m.insert("breeze/actionTiers".into(), action_tiers(spec));
    }
    m.insert("breeze/server".into(), server.clone());
    Value::Object(m)
}

/// The `_meta` of a tool's `tools/list` entry: its tier, and its actions' tiers where they
/// differ from it (an action not named runs at `breeze/tier`). The server identity is left to
/// `initialize`, the `breeze://server` resource and every result: each listing entry would
/// repeat it.
pub fn listed_meta(spec: &ToolSpec) -> Value {
    let mut m = Map::new();
    m.insert("breeze/tier".into(), Value::from(spec.tier.number()));
    if spec.actions.iter().any(|a| a.tier != spec.tier) {
        m.insert("breeze/actionTiers".into(), action_tiers(spec));
    }
    Value::Object(m)
}

fn action_tiers(spec: &ToolSpec) -> Value {
    spec.actions
        .iter()
        .map(|a| (a.name.to_owned(), Value::from(a.tier.number())))
        .collect::<Map<String, Value>>()
        .into()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{inline_enums, listed_output_schema};

    fn valid(schema: &Value, v: &Value) -> bool {
        jsonschema::validator_for(schema)
            .unwrap_or_else(|e| panic!("{schema} compiles: {e}"))
            .is_valid(v)
    }

    /// Every tool's listed output schema accepts each shared envelope and every answer its full
    /// one accepts among a set of samples (the server's `output_schemas` test checks real
    /// answers against both), holds no reference, and keeps the success branch's required
    /// fields.
    #[test]
    fn listed_output_schemas_accept_what_the_full_ones_do() {
        let error = crate::ToolError::new(crate::ErrorCode::NotFound, "gone").to_structured();
        let envelopes = [
            error,
            json!({ "outcome": "committed", "mode": "commit", "counts": {}, "items": [] }),
            json!({ "status": "pending_approval", "approvalId": "a", "expiresAt": "t",
                    "description": "d", "message": "m" }),
            json!({ "status": "applied", "payloadOmitted": true, "bytes": 9, "hint": "h" }),
        ];
        for t in crate::all().iter() {
            let listed = &t.listed_output_schema;
            assert_eq!(listed["type"], "object", "{}", t.name);
            assert!(!listed.to_string().contains("$ref"), "{}: {listed}", t.name);
            let full_success = &t.output_schema["anyOf"][0];
            assert_eq!(
                listed["anyOf"][0].get("required"),
                full_success.get("required").filter(|r| r != &&json!([])),
                "{}",
                t.name
            );
            for e in &envelopes {
                if valid(&t.output_schema, e) {
                    assert!(valid(listed, e), "{}: listed refuses {e}", t.name);
                }
            }
            // The error and batch envelopes are every tool's.
            assert!(valid(listed, &envelopes[0]) && valid(listed, &envelopes[1]));
        }
    }

    /// The cut keeps each property's JSON types, unions a choice's, and drops what cannot be
    /// read off (no constraint rather than a wrong one).
    #[test]
    fn the_success_branch_is_cut_to_property_types() {
        let full = json!({
            "type": "object",
            "$defs": {
                "E": { "type": "string", "enum": ["a", "b"] },
                "O": { "type": "object", "properties": { "x": { "type": "integer", "minimum": 3 } } }
            },
            "anyOf": [
                {
                    "type": "object",
                    "required": ["e"],
                    "properties": {
                        "e": { "$ref": "#/$defs/E" },
                        "o": { "anyOf": [{ "$ref": "#/$defs/O" }, { "type": "null" }] },
                        "n": { "type": ["integer", "number"] },
                        "c": { "const": 1 }
                    }
                },
                { "type": "object", "required": ["error"], "properties": { "error": { "type": "object" } } }
            ]
        });
        assert_eq!(
            listed_output_schema(&full),
            json!({
                "type": "object",
                "anyOf": [
                    {
                        "required": ["e"],
                        "properties": {
                            "e": { "type": "string" },
                            "o": { "type": ["null", "object"] },
                            "n": { "type": "number" },
                            "c": {}
                        }
                    },
                    { "required": ["error"] }
                ]
            })
        );
        // Wider, never narrower: a value the full schema refuses only for a nested constraint
        // passes; a value of another type still fails.
        let listed = listed_output_schema(&full);
        assert!(valid(&listed, &json!({ "e": "zz", "o": { "x": 1 } })));
        assert!(!valid(&listed, &json!({ "e": 5 })));
    }

    /// Inlining referenced enums keeps the accepted values exactly.
    #[test]
    fn inlined_enums_accept_the_same_values() {
        let before = json!({
            "type": "object",
            "additionalProperties": false,
            "$defs": {
                "S": { "type": "string", "enum": ["on", "off"] },
                "P": { "type": "object", "properties": { "s": { "$ref": "#/$defs/S" } } }
            },
            "properties": {
                "a": { "$ref": "#/$defs/S", "description": "one" },
                "b": { "anyOf": [{ "$ref": "#/$defs/S" }, { "type": "null" }] },
                "p": { "$ref": "#/$defs/P" }
            }
        });
        let mut after = before.clone();
        inline_enums(&mut after);
        assert_eq!(
            after["properties"]["a"],
            json!({ "type": "string", "enum": ["on", "off"], "description": "one" })
        );
        assert_eq!(
            after["properties"]["b"],
            json!({ "type": ["string", "null"], "enum": ["on", "off", null] })
        );
        assert_eq!(
            after["$defs"].as_object().map(|d| d.len()),
            Some(1),
            "{after}"
        );
        for v in [
            json!({ "a": "on" }),
            json!({ "a": "x" }),
            json!({ "a": null }),
            json!({ "b": null }),
            json!({ "b": "off" }),
            json!({ "b": "no" }),
            json!({ "b": 1 }),
            json!({ "p": { "s": "on" } }),
            json!({ "p": { "s": "up" } }),
            json!({ "z": 1 }),
        ] {
            assert_eq!(valid(&before, &v), valid(&after, &v), "{v}");
        }
    }
}
