//! Documentation generated from the registry: the tool catalogue (`docs/tools.md`) and the
//! agent skill (`SKILL.md` plus `references/`) that `breeze install-skill` installs.
//!
//! Everything that depends on the tools — names, tiers, scopes, permissions, effects, limits,
//! actions, arguments, prompts, resources, error codes — is generated here, so a new tool or
//! action appears in both without anyone editing prose. Hand-written prose lives in the
//! markdown templates under `docs/` beside this file, with `{{NAME}}` slots filled from the
//! registry. The output is deterministic (the registry is ordered by name, actions and prompts
//! by declaration), so the checked-in copies can be compared byte for byte: `cargo xtask docs`
//! rewrites them and a test fails while they are stale.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::{
    ErrorCode, Registry, Tier, ToolError, ToolSpec,
    contract::Effect,
    prompts::{self, PROMPTS},
    resources::{self, DEVICE_TEMPLATE, RESOURCES},
};

/// The skill's name: the directory it is installed as and its frontmatter `name`. The same as
/// the MCP server's name (`breeze-server`'s `SERVER_NAME`; a test in the CLI holds them equal).
pub const SKILL_NAME: &str = "breeze-rmm";

/// The Breeze version the generated documents describe and the skill is locked to.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The command that rewrites the checked-in documents.
pub const REGENERATE: &str = "cargo xtask docs";

/// Where the catalogue is checked in, relative to the repository root.
pub const CATALOGUE_PATH: &str = "docs/tools.md";

/// Where the generated skill is checked in, relative to the repository root.
pub const SKILL_DIR: &str = "docs/skill";

const SKILL_TEMPLATE: &str = include_str!("docs/skill.md");
const FOOTGUNS_TEMPLATE: &str = include_str!("docs/footguns.md");
const ERRORS_TEMPLATE: &str = include_str!("docs/error_recovery.md");

/// One generated file: its path (relative to the skill directory, or to the repository root
/// for [`repository_files`]) and its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocFile {
    pub path: String,
    pub contents: String,
}

/// The skill's files, relative to its directory: `SKILL.md` first, then the references.
pub fn skill_files(r: &Registry) -> Vec<DocFile> {
    let file = |path: &str, contents: String| DocFile {
        path: path.to_owned(),
        contents,
    };
    vec![
        file("SKILL.md", skill_md(r)),
        file("references/workflows.md", workflows_md(r)),
        file("references/tool-selection.md", tool_selection_md(r)),
        file("references/footguns.md", footguns_md(r)),
        file("references/error-recovery.md", error_recovery_md()),
    ]
}

/// Every checked-in generated file, relative to the repository root: the catalogue and the
/// skill under [`SKILL_DIR`].
pub fn repository_files(r: &Registry) -> Vec<DocFile> {
    let mut files = vec![DocFile {
        path: CATALOGUE_PATH.to_owned(),
        contents: catalogue(r),
    }];
    files.extend(skill_files(r).into_iter().map(|f| DocFile {
        path: format!("{SKILL_DIR}/{}", f.path),
        contents: f.contents,
    }));
    files
}

/// Replaces each `{{KEY}}` of `template`. A slot left unfilled is a programming error that the
/// tests catch (every template is rendered there).
fn fill(template: &str, slots: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (key, value) in slots {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    out
}

fn tier_label(t: Tier) -> String {
    format!("Tier {}", t.number())
}

/// The scope a tier needs, with the production rule for Tier 3 and what else it takes.
fn scope_label(t: Tier) -> String {
    match t {
        Tier::T1 | Tier::T2 => format!("`{}`", t.scope()),
        Tier::T3 => format!(
            "`{}` (`ai:execute_admin` in production) + approval",
            t.scope()
        ),
        Tier::T4 => "never allowed".to_owned(),
    }
}

fn effect_label(e: Effect) -> &'static str {
    match e {
        Effect::Read => "read",
        Effect::Create => "create",
        Effect::Update => "update",
        Effect::Delete => "delete",
        Effect::Execute => "execute",
    }
}

fn effects_label(effects: &[Effect]) -> String {
    let mut names: Vec<&str> = effects.iter().map(|e| effect_label(*e)).collect();
    names.sort_unstable();
    names.dedup();
    names.join(", ")
}

fn hints_label(t: &ToolSpec) -> String {
    let h = t.hints;
    let set: Vec<&str> = [
        (h.read_only, "readOnly"),
        (h.destructive, "destructive"),
        (h.idempotent, "idempotent"),
        (h.open_world, "openWorld"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    if set.is_empty() {
        "none".to_owned()
    } else {
        set.join(", ")
    }
}

fn rate_limit_label(t: &ToolSpec) -> String {
    match t.rate_limit {
        None => "none".to_owned(),
        Some(l) => {
            let window = match l.window_secs {
                60 => "minute".to_owned(),
                s if s % 60 == 0 => format!("{} minutes", s / 60),
                s => format!("{s} seconds"),
            };
            format!("{} calls per {window} per user", l.max)
        }
    }
}

/// The first sentence of a description: the one-line summary.
fn first_sentence(text: &str) -> &str {
    text.find(". ").map_or(text, |i| &text[..=i])
}

/// Every tier a call of `t` can have, lowest first.
fn tiers_of(t: &ToolSpec) -> Vec<Tier> {
    let mut tiers: Vec<Tier> = if t.actions.is_empty() {
        vec![t.tier]
    } else {
        t.actions.iter().map(|a| a.tier).collect()
    };
    tiers.sort_unstable();
    tiers.dedup();
    tiers
}

/// Every tier a call of `t` can have, lowest first, as "1, 3".
pub fn tiers_label(t: &ToolSpec) -> String {
    tiers_of(t)
        .iter()
        .map(|t| t.number().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names of `t`'s actions at `tier`, or `None` for a tool without actions.
fn actions_at(t: &ToolSpec, tier: Tier) -> Option<Vec<&'static str>> {
    (!t.actions.is_empty()).then(|| {
        t.actions
            .iter()
            .filter(|a| a.tier == tier)
            .map(|a| a.name)
            .collect()
    })
}

/// Markdown table cells must not hold a raw `|` or a line break.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The top-level arguments of an input schema: name, whether required, and a summary.
fn arguments(schema: &Value) -> Vec<(String, bool, String)> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, sub)| {
            (
                name.clone(),
                required.contains(&name.as_str()),
                argument_summary(sub, schema),
            )
        })
        .collect()
}

/// A property's description, else what its type or allowed values are.
fn argument_summary(sub: &Value, root: &Value) -> String {
    if let Some(d) = sub.get("description").and_then(Value::as_str) {
        return d.to_owned();
    }
    // An enum (the action argument, mostly) is a `$ref` into `$defs`.
    let target = sub
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| root.get("$defs").and_then(|d| d.get(name)))
        .unwrap_or(sub);
    if let Some(d) = target.get("description").and_then(Value::as_str) {
        return d.to_owned();
    }
    if let Some(values) = enum_values(target) {
        return format!("one of {}", values.join(", "));
    }
    match target.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => String::new(),
    }
}

fn enum_values(schema: &Value) -> Option<Vec<String>> {
    let quote = |v: &Value| v.as_str().map(|s| format!("`{s}`"));
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return Some(values.iter().filter_map(quote).collect());
    }
    // schemars writes documented variants as `oneOf` of `const`s.
    let variants = schema.get("oneOf").and_then(Value::as_array)?;
    let values: Vec<String> = variants
        .iter()
        .filter_map(|v| v.get("const").and_then(quote))
        .collect();
    (values.len() == variants.len()).then_some(values)
}

/// The registry as data, for tools outside Rust (`breeze mcp tools --json`; the official-client
/// suites derive the tool lists they expect per key from it): per tool, in name order, its
/// name, domain, title, base tier, every tier its calls can have (lowest first), permission,
/// and actions with their tiers and permissions.
pub fn index(r: &Registry) -> Value {
    let tools = r
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name,
                "domain": t.domain,
                "title": t.title,
                "baseTier": t.tier.number(),
                "tiers": tiers_of(t).iter().map(|t| t.number()).collect::<Vec<_>>(),
                "permission": t.permission.as_str(),
                "actions": t.actions.iter().map(|a| serde_json::json!({
                    "name": a.name,
                    "tier": a.tier.number(),
                    "permission": a.permission.as_str(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect::<Vec<_>>();
    serde_json::json!({ "version": VERSION, "tools": tools })
}

/// The catalogue: every tool, action, tier, scope, permission, effect, hint and limit; the
/// resources and the prompts.
pub fn catalogue(r: &Registry) -> String {
    let actions: usize = r.iter().map(|t| t.actions.len()).sum();
    let mut s = String::new();
    let _ = writeln!(s, "# Breeze tool catalogue\n");
    let _ = writeln!(
        s,
        "<!-- Generated from the tool registry by `{REGENERATE}`; do not edit. A test fails when this file is stale. -->\n"
    );
    let _ = writeln!(
        s,
        "Breeze {VERSION} serves {} MCP tools ({actions} actions), {} resources and {} prompts. \
         A call's tier decides the API-key scope it needs: {}; an action can put a call above \
         or below its tool's base tier. The key's user must also hold the permission in the \
         key's organization. Rate limits are sliding windows counted per user.\n\n\
         Every tool also takes a batch instead of its arguments: `items` (each `{{clientRef, input}}`, \
         `input` being the tool's own arguments), `mode` (`preview` or `commit`, required) and \
         `atomicity` (`best_effort`, the default, or `atomic`, for one item only; more items are \
         refused with `ATOMICITY_UNSUPPORTED`). Every item is validated and guarded before any \
         runs; one invalid or refused item and nothing runs. `preview` runs nothing: per item its \
         tier, whether it needs approval and, for a Tier 3 item, the tool's pre-approval check. \
         `commit` runs the items in order, each with its own outcome, and counts each against the \
         rate limit; a commit with a Tier 3 item is one approval request listing every item. A \
         commit of a write tool takes one `requestId` for the whole batch (a replay answers the \
         stored batch answer and runs nothing); over the response budget a preview fails with \
         `RESPONSE_TOO_LARGE` and a commit omits the items' outputs (`payloadOmitted`).\n",
        r.len(),
        RESOURCES.len() + 1,
        PROMPTS.len(),
        [Tier::T1, Tier::T2, Tier::T3]
            .iter()
            .map(|t| format!("{} {}", tier_label(*t), scope_label(*t)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(s, "## Summary\n");
    let _ = writeln!(
        s,
        "| tool | title | base tier | tiers of its calls | permission | rate limit |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for t in r.iter() {
        let _ = writeln!(
            s,
            "| [`{0}`](#{0}) | {1} | {2} | {3} | `{4}` | {5} |",
            t.name,
            cell(t.title),
            t.tier.number(),
            tiers_label(t),
            t.permission,
            rate_limit_label(t)
        );
    }
    let _ = writeln!(s, "\n## Tools");
    for t in r.iter() {
        let _ = writeln!(s, "\n### {}\n", t.name);
        let _ = writeln!(s, "**{}.** {}\n", t.title, t.description);
        let _ = writeln!(
            s,
            "- Base tier: {} (scope {})",
            t.tier.number(),
            scope_label(t.tier)
        );
        let _ = writeln!(s, "- Permission: `{}`", t.permission);
        let _ = writeln!(s, "- Effects: {}", effects_label(&t.effects));
        let _ = writeln!(s, "- Hints: {}", hints_label(t));
        let _ = writeln!(s, "- Rate limit: {}", rate_limit_label(t));
        if !t.actions.is_empty() {
            let _ = writeln!(
                s,
                "\nActions (argument `{}`; an action not listed runs at the base tier):\n",
                t.action_key
            );
            let _ = writeln!(s, "| action | tier | scope | effect | permission |");
            let _ = writeln!(s, "|---|---|---|---|---|");
            for a in t.actions {
                let _ = writeln!(
                    s,
                    "| `{}` | {} | {} | {} | `{}` |",
                    a.name,
                    a.tier.number(),
                    scope_label(a.tier),
                    effect_label(a.effect),
                    a.permission
                );
            }
        }
        let args = arguments(&t.input_schema);
        if !args.is_empty() {
            let _ = writeln!(s, "\nArguments:\n");
            let _ = writeln!(s, "| argument | required | meaning |");
            let _ = writeln!(s, "|---|---|---|");
            for (name, required, summary) in args {
                let _ = writeln!(
                    s,
                    "| `{name}` | {} | {} |",
                    if required { "yes" } else { "no" },
                    cell(&summary)
                );
            }
        }
    }
    let _ = writeln!(s, "\n## Resources\n");
    let _ = writeln!(
        s,
        "Read with `resources/read`; every resource needs `ai:read`, and the permission listed.\n"
    );
    let _ = writeln!(s, "| URI | title | permission | what |");
    let _ = writeln!(s, "|---|---|---|---|");
    for res in RESOURCES.iter().chain(std::iter::once(&DEVICE_TEMPLATE)) {
        // The template's permission is that of any URI it expands to.
        let uri = res.uri.replace("{id}", "x");
        let permission =
            resources::permission_for(&uri).map_or_else(|| "none".to_owned(), |p| format!("`{p}`"));
        let _ = writeln!(
            s,
            "| `{}` | {} | {permission} | {} |",
            res.uri,
            cell(res.title),
            cell(res.description)
        );
    }
    let _ = writeln!(s, "\n## Prompts\n");
    let _ = writeln!(s, "| prompt | title | arguments | what |");
    let _ = writeln!(s, "|---|---|---|---|");
    for p in PROMPTS {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} |",
            p.name,
            cell(p.title),
            prompt_arguments(p),
            cell(p.description)
        );
    }
    s
}

fn prompt_arguments(p: &prompts::PromptSpec) -> String {
    if p.arguments.is_empty() {
        return "none".to_owned();
    }
    p.arguments
        .iter()
        .map(|a| {
            format!(
                "`{}`{}",
                a.name,
                if a.required { " (required)" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn skill_md(r: &Registry) -> String {
    let mut table = String::from("| tool | tiers | use it to |\n|---|---|---|\n");
    for t in r.iter() {
        let _ = writeln!(
            table,
            "| `{}` | {} | {} |",
            t.name,
            tiers_label(t),
            cell(first_sentence(t.description))
        );
    }
    let _ = write!(
        table,
        "\nThe full catalogue (every action, permission, limit and argument) is `docs/tools.md` in \
         the Breeze repository; `tools/list` is always the truth for your key."
    );
    fill(
        SKILL_TEMPLATE,
        &[
            ("SKILL_NAME", SKILL_NAME.to_owned()),
            ("VERSION", VERSION.to_owned()),
            ("TOOL_COUNT", r.len().to_string()),
            ("TOOL_TABLE", table),
        ],
    )
}

/// The tool-like names (`word_word`) a prompt's text mentions that the registry does not
/// serve: prompts may name tools of features still to come, and the agent must know to skip
/// those steps rather than call a tool that is not there.
fn missing_tools(r: &Registry, text: &str) -> Vec<String> {
    let mut missing: Vec<String> = text
        .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
        .filter(|w| w.contains('_') && !w.starts_with('_') && !w.ends_with('_'))
        .filter(|w| r.get(w).is_none())
        .map(str::to_owned)
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

/// The guided workflows, from the server's own prompts rendered with placeholder arguments.
fn workflows_md(r: &Registry) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Workflows\n");
    let _ = writeln!(
        s,
        "Generated for Breeze {VERSION} from the server's guided prompts. A client that \
         supports MCP prompts can start each one by name with `prompts/get`; the steps are the \
         same when you follow them yourself.\n"
    );
    let _ = writeln!(s, "## Read before you write\n");
    let _ = writeln!(
        s,
        "Every workflow follows the same rules:\n\n\
         1. Gather facts with Tier 1 (read-only) tools first.\n\
         2. Resolve the target exactly (`query_devices`), and echo the device and its \
         organization back to the user before any change.\n\
         3. Ask the user before anything that changes a device or a policy; Tier 3 calls \
         additionally wait for a person's approval in Breeze.\n\
         4. Change one target at a time, and report each result.\n\
         5. If Breeze refuses a call, say why instead of retrying or working around it.\n"
    );
    for p in PROMPTS {
        let mut args = Map::new();
        for a in p.arguments {
            args.insert(a.name.to_owned(), Value::from(format!("<{}>", a.name)));
        }
        let text = match prompts::render(p.name, &args) {
            Ok((_, text)) => text,
            Err(e) => format!("(cannot render: {e})"),
        };
        let _ = writeln!(s, "## {} (`{}`)\n", p.title, p.name);
        let _ = writeln!(s, "{}\n", p.description);
        let _ = writeln!(s, "Arguments: {}.\n", prompt_arguments(p));
        let missing = missing_tools(r, &text);
        if !missing.is_empty() {
            let _ = writeln!(
                s,
                "Not served by Breeze {VERSION}, so skip those steps and say so: {}.\n",
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for line in text.lines() {
            if line.is_empty() {
                let _ = writeln!(s, ">");
            } else {
                let _ = writeln!(s, "> {line}");
            }
        }
        let _ = writeln!(s);
    }
    s
}

/// The permission's domain (`devices` of `devices.read`), for grouping.
fn domain(p: breeze_core::Permission) -> &'static str {
    let name = p.as_str();
    name.split_once('.').map_or(name, |(d, _)| d)
}

fn tool_selection_md(r: &Registry) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Tool selection\n");
    let _ = writeln!(
        s,
        "Generated for Breeze {VERSION} from the tool registry. Tools are grouped by the tier \
         of their calls (what the key needs), then by the domain of the permission the call \
         needs. Prefer the lowest tier that answers the question: read before you change, and \
         change Breeze's own records (Tier 2) before acting on a device (Tier 3).\n"
    );
    let intro = [
        (
            Tier::T1,
            "Look things up (read-only, safe to call freely within rate limits)",
        ),
        (
            Tier::T2,
            "Change Breeze's records or low-risk settings (the user should agree first)",
        ),
        (
            Tier::T3,
            "Act on devices or change structure (a person approves each call)",
        ),
    ];
    for (tier, heading) in intro {
        let _ = writeln!(s, "## {}: {heading}\n", tier_label(tier));
        let _ = writeln!(s, "Needs scope {}.\n", scope_label(tier));
        // (domain, line) pairs, grouped by domain in name order.
        let mut rows: Vec<(&str, String)> = Vec::new();
        for t in r.iter().filter(|t| tiers_of(t).contains(&tier)) {
            let (permission, which) = match actions_at(t, tier) {
                None => (t.permission, String::new()),
                Some(names) => {
                    let permission = t
                        .actions
                        .iter()
                        .find(|a| a.tier == tier)
                        .map_or(t.permission, |a| a.permission);
                    let list = names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    (permission, format!(" ({} {list})", t.action_key))
                }
            };
            rows.push((
                domain(permission),
                format!("- `{}`{which}: {}", t.name, first_sentence(t.description)),
            ));
        }
        rows.sort_by_key(|(d, _)| *d);
        let mut current = "";
        for (d, line) in rows {
            if d != current {
                let _ = writeln!(s, "{}### {d}\n", if current.is_empty() { "" } else { "\n" });
                current = d;
            }
            let _ = writeln!(s, "{line}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Resources and prompts\n");
    let _ = writeln!(
        s,
        "Resources are read-only snapshots, handy as context: {}. Prompts start a guided \
         workflow (see `workflows.md`): {}.",
        RESOURCES
            .iter()
            .chain(std::iter::once(&DEVICE_TEMPLATE))
            .map(|r| format!("`{}`", r.uri))
            .collect::<Vec<_>>()
            .join(", "),
        PROMPTS
            .iter()
            .map(|p| format!("`{}`", p.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    s
}

fn footguns_md(r: &Registry) -> String {
    let mut tier3 = String::new();
    for t in r.iter().filter(|t| tiers_of(t).contains(&Tier::T3)) {
        let which = actions_at(t, Tier::T3)
            .map(|names| {
                let list = names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!(" with {} {list}", t.action_key)
            })
            .unwrap_or_default();
        let _ = writeln!(tier3, "- `{}`{which}", t.name);
    }
    let mut limits = String::new();
    for t in r.iter().filter(|t| t.rate_limit.is_some()) {
        let _ = writeln!(limits, "- `{}`: {}", t.name, rate_limit_label(t));
    }
    fill(
        FOOTGUNS_TEMPLATE,
        &[
            ("VERSION", VERSION.to_owned()),
            ("TIER3_LIST", tier3.trim_end().to_owned()),
            ("RATE_LIMITS", limits.trim_end().to_owned()),
        ],
    )
}

/// What an error code means and what to do about it. Exhaustive: a new code does not compile
/// until it is documented here.
fn error_advice(code: ErrorCode) -> (&'static str, &'static str) {
    match code {
        ErrorCode::InvalidArgument => (
            "The arguments are wrong; the message names each offending field.",
            "Fix the named fields (check the tool's input schema) and call again.",
        ),
        ErrorCode::NotFound => (
            "The device, group, script or approval does not exist in the key's organization (another organization's is the same as none).",
            "Look the id up again (`query_devices`, `manage_groups` list, `breeze://scripts`); do not guess ids.",
        ),
        ErrorCode::Forbidden => (
            "The call is not allowed: a blocked tool, a protected path, or an approval that was denied, expired, withdrawn or void.",
            "Do not retry. Tell the user the reason in the message; a denied action needs a person's decision, not another call.",
        ),
        ErrorCode::InsufficientScope => (
            "The API key lacks the scope for this call's tier; `requiredScopes` and `grantedScopes` say which.",
            "Do not retry. Tell the user which scope the key needs.",
        ),
        ErrorCode::RateLimited => (
            "A limit was reached.",
            "Wait for the time the message or hint names, then retry once; batch or narrow your calls.",
        ),
        ErrorCode::Conflict => (
            "The change conflicts with the current state (a duplicate name, data changed since it was read or approved).",
            "Re-read the current state, then decide with the user whether to try again.",
        ),
        ErrorCode::UpstreamError => (
            "A dependency failed for now: the database is busy, or the device's agent did not answer in time.",
            "Retry after a few seconds. For a device command, check its status first so it does not run twice.",
        ),
        ErrorCode::Internal => (
            "Breeze failed unexpectedly (or the call was cancelled).",
            "Do not loop: retry at most once later, then report the message and the time to the user.",
        ),
        ErrorCode::InvalidCursor => (
            "A `breeze_discover` cursor was reused with other filters, came from an older catalog version, or was altered.",
            "Start discovery again without a cursor, with the filters you want, and follow its `nextCursor` unchanged.",
        ),
        ErrorCode::UnknownOperation => (
            "The consolidated catalog has no operation of that name for this connection (a typo, or outside the chosen toolsets).",
            "Find the name with `breeze_discover` (filter by query or domain); do not guess names.",
        ),
        ErrorCode::ToolEffectMismatch => (
            "The operation was sent through the wrong meta-tool: `breeze_read` runs reads, `breeze_write` changes, `breeze_execute` Tier 3 and device-executing calls.",
            "Call the meta-tool the message names, with the same `operation` and `input`.",
        ),
        ErrorCode::ResponseTooLarge => (
            "A read's answer is larger than the server's response budget (BREEZE_MCP_MAX_RESPONSE_BYTES); nothing changed.",
            "Narrow the query (a smaller limit, a filter, one device) and call again. A write is never refused for its size: it answers payloadOmitted; re-query with a read tool.",
        ),
        ErrorCode::AtomicityUnsupported => (
            "A batch asked for `atomicity: \"atomic\"` with more than one item; Breeze never groups several items into one transaction, and nothing ran.",
            "Send the items with `atomicity: \"best_effort\"` (each item has its own outcome) or one item per call.",
        ),
    }
}

fn error_recovery_md() -> String {
    let mut table =
        String::from("| code | retryable | meaning | what to do |\n|---|---|---|---|\n");
    for code in ErrorCode::ALL {
        let name = serde_json::to_value(code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        // What the tools actually set by default for this code.
        let retryable = ToolError::new(code, "").retryable;
        let (meaning, todo) = error_advice(code);
        let _ = writeln!(
            table,
            "| `{name}` | {} | {meaning} | {todo} |",
            if retryable { "yes" } else { "no" }
        );
    }
    fill(
        ERRORS_TEMPLATE,
        &[
            ("VERSION", VERSION.to_owned()),
            ("ERROR_CODES", table.trim_end().to_owned()),
        ],
    )
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn repo_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn every_template_slot_is_filled() {
        let r = crate::all();
        for f in repository_files(&r) {
            assert!(
                !f.contents.contains("{{") && !f.contents.contains("}}"),
                "{} has an unfilled slot",
                f.path
            );
            assert!(f.contents.ends_with('\n'), "{} ends with a newline", f.path);
        }
    }

    /// Generated over the registry: a tool or action missing from the catalogue fails here.
    #[test]
    fn the_catalogue_lists_every_tool_action_tier_and_limit() {
        let r = crate::all();
        let doc = catalogue(&r);
        for t in r.iter() {
            let section = doc
                .split(&format!("\n### {}\n", t.name))
                .nth(1)
                .unwrap_or_else(|| panic!("{} has no section", t.name));
            let section = section.split("\n### ").next().unwrap_or_default();
            assert!(section.contains(t.title), "{}", t.name);
            assert!(
                section.contains(&format!("`{}`", t.permission)),
                "{}",
                t.name
            );
            assert!(
                section.contains(&format!("Base tier: {}", t.tier.number())),
                "{}",
                t.name
            );
            assert!(section.contains(&rate_limit_label(t)), "{}", t.name);
            for a in t.actions {
                let row = format!(
                    "| `{}` | {} | {} | {} | `{}` |",
                    a.name,
                    a.tier.number(),
                    scope_label(a.tier),
                    effect_label(a.effect),
                    a.permission
                );
                assert!(section.contains(&row), "{}.{}: {row}", t.name, a.name);
            }
            for (name, ..) in arguments(&t.input_schema) {
                assert!(
                    section.contains(&format!("| `{name}` |")),
                    "{}.{name}",
                    t.name
                );
            }
        }
        for p in PROMPTS {
            assert!(doc.contains(&format!("| `{}` |", p.name)), "{}", p.name);
        }
        for res in RESOURCES {
            assert!(doc.contains(&format!("| `{}` |", res.uri)), "{}", res.uri);
        }
        assert!(doc.contains(DEVICE_TEMPLATE.uri));
    }

    #[test]
    fn the_skill_is_version_locked_and_names_every_tool() {
        let r = crate::all();
        let files = skill_files(&r);
        let skill = &files[0];
        assert_eq!(skill.path, "SKILL.md");
        let front = skill
            .contents
            .strip_prefix("---\n")
            .and_then(|rest| rest.split_once("\n---\n"))
            .map(|(front, _)| front)
            .expect("SKILL.md starts with frontmatter");
        assert!(front.lines().any(|l| l == format!("name: {SKILL_NAME}")));
        let description = front
            .lines()
            .find_map(|l| l.strip_prefix("description: "))
            .expect("a description");
        assert!(description.contains("Use when"), "{description}");
        // AgentSkills limits: a name of lowercase letters, digits and hyphens; a description of
        // at most 1024 characters. A colon followed by a space would break plain YAML.
        assert!(
            SKILL_NAME
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        assert!(description.len() <= 1024 && !description.contains(": "));
        assert!(front.contains(&format!("breeze-version: \"{VERSION}\"")));
        assert!(skill.contents.contains(&format!("Breeze {VERSION}")));
        let selection = files
            .iter()
            .find(|f| f.path == "references/tool-selection.md")
            .unwrap();
        for t in r.iter() {
            assert!(
                skill.contents.contains(&format!("| `{}` |", t.name)),
                "{}",
                t.name
            );
            assert!(
                selection.contents.contains(&format!("- `{}`", t.name)),
                "{}",
                t.name
            );
        }
        let footguns = files
            .iter()
            .find(|f| f.path == "references/footguns.md")
            .unwrap();
        for t in r.iter() {
            if tiers_of(t).contains(&Tier::T3) {
                assert!(
                    footguns.contents.contains(&format!("- `{}`", t.name)),
                    "{}",
                    t.name
                );
            }
            if t.rate_limit.is_some() {
                assert!(
                    footguns
                        .contents
                        .contains(&format!("- `{}`: {}", t.name, rate_limit_label(t))),
                    "{}",
                    t.name
                );
            }
        }
        let errors = files
            .iter()
            .find(|f| f.path == "references/error-recovery.md")
            .unwrap();
        for code in ErrorCode::ALL {
            let name = serde_json::to_value(code).unwrap();
            let name = name.as_str().unwrap();
            assert!(errors.contents.contains(&format!("| `{name}` |")), "{name}");
        }
        let workflows = files
            .iter()
            .find(|f| f.path == "references/workflows.md")
            .unwrap();
        for p in PROMPTS {
            assert!(workflows.contents.contains(p.name), "{}", p.name);
            assert!(!workflows.contents.contains("cannot render"), "{}", p.name);
        }
    }

    #[test]
    fn generation_is_deterministic() {
        assert_eq!(
            repository_files(&crate::all()),
            repository_files(&crate::all())
        );
    }

    /// The checked-in catalogue and skill are what the registry generates now, and the skill
    /// directory holds nothing else.
    #[test]
    fn checked_in_docs_are_fresh() {
        let root = repo_root();
        let files = repository_files(&crate::all());
        let mut stale = Vec::new();
        for f in &files {
            match std::fs::read_to_string(root.join(&f.path)) {
                Ok(on_disk) if on_disk == f.contents => {}
                Ok(_) => stale.push(format!("{} differs", f.path)),
                Err(e) => stale.push(format!("{} cannot be read: {e}", f.path)),
            }
        }
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.join(SKILL_DIR)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if let Ok(rel) = path.strip_prefix(&root) {
                    on_disk.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        for path in on_disk {
            if !files.iter().any(|f| f.path == path) {
                stale.push(format!("{path} is not generated any more"));
            }
        }
        assert!(
            stale.is_empty(),
            "the generated docs are stale ({}); run `{REGENERATE}` and commit the result",
            stale.join("; ")
        );
    }
}
