//! OpenAPI sources: a document (3.0.x or 3.1.x, one model over `serde_json::Value`) becomes
//! tools, one per operation Breeze can call safely; every other operation is skipped with its
//! reason, and a document over the limits fails whole ([`import`]). A tool is called by
//! [`call`]: its path, query, header and JSON body built from the arguments, sent only to the
//! base URL the administrator entered — the document's `servers[]` is ignored, and servers on
//! other origins are reported as warnings.
//!
//! Only local `$ref`s (`#/…`) are followed; an operation needing another is skipped. Schemas
//! are inlined with a budget (a reference bomb stops at [`MAX_SCHEMA`]) and recursion is cut
//! to an open schema. OpenAPI 3.0's `nullable` becomes a 2020-12 type list.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use url::Url;

use crate::{
    auth::Headers,
    egress::{self, Egress, EgressError},
    model::{Discovered, proposed_tier_http},
};

/// The largest document.
pub const MAX_DOCUMENT: usize = egress::MAX_DOCUMENT;
/// The most operations a document may describe.
pub const MAX_OPERATIONS: usize = 2_000;
/// The largest generated input schema, as JSON text.
pub const MAX_SCHEMA: usize = 64 * 1024;
/// The most parameters an operation may take.
pub const MAX_PARAMETERS: usize = 100;
/// The longest tool name.
pub const MAX_NAME: usize = 64;

const METHODS: [&str; 6] = ["get", "head", "post", "put", "patch", "delete"];
const OTHER_METHODS: [&str; 2] = ["options", "trace"];
/// Headers an operation may not set: the client's, the credential's, or framing.
const RESERVED_HEADERS: [&str; 9] = [
    "host",
    "authorization",
    "cookie",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "accept",
    "proxy-authorization",
];

/// Why a whole document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("the document is larger than {MAX_DOCUMENT} bytes; nothing was imported")]
    TooLarge,
    #[error("the document is not JSON: {0}")]
    NotJson(String),
    #[error("Swagger 2.0 documents are not supported; convert it to OpenAPI 3")]
    Swagger2,
    #[error("only OpenAPI 3.0.x and 3.1.x are supported, not {0:?}")]
    Version(String),
    #[error(
        "the document describes {0} operations, more than {MAX_OPERATIONS}; nothing was imported"
    )]
    TooManyOperations(usize),
    #[error("the document has no paths object")]
    NoPaths,
}

/// An operation that did not become a tool, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub method: String,
    pub path: String,
    pub reason: String,
}

/// What a document imports to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Import {
    pub tools: Vec<Discovered>,
    pub skipped: Vec<Skipped>,
    /// Servers the document names on another origin than the base URL.
    pub warnings: Vec<String>,
}

/// How a tool's call is made; stored as the tool's `call_plan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub method: String,
    pub path: String,
    pub params: Vec<Param>,
    pub body: bool,
}

/// One parameter of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    #[serde(rename = "in")]
    pub location: String,
}

/// Imports a document for an API whose calls go to `base`.
pub fn import(document: &[u8], base: &Url) -> Result<Import, ImportError> {
    if document.len() > MAX_DOCUMENT {
        return Err(ImportError::TooLarge);
    }
    let doc: Value =
        serde_json::from_slice(document).map_err(|e| ImportError::NotJson(e.to_string()))?;
    if doc.get("swagger").is_some() {
        return Err(ImportError::Swagger2);
    }
    let version = doc["openapi"].as_str().unwrap_or_default();
    if !(version.starts_with("3.0.") || version.starts_with("3.1.")) {
        return Err(ImportError::Version(version.to_owned()));
    }
    let Some(paths) = doc["paths"].as_object() else {
        return Err(ImportError::NoPaths);
    };
    let count: usize = paths
        .values()
        .filter_map(Value::as_object)
        .map(|item| {
            item.keys()
                .filter(|k| METHODS.contains(&k.as_str()) || OTHER_METHODS.contains(&k.as_str()))
                .count()
        })
        .sum();
    if count > MAX_OPERATIONS {
        return Err(ImportError::TooManyOperations(count));
    }
    let mut out = Import {
        warnings: server_warnings(&doc, base),
        ..Import::default()
    };
    let mut names = BTreeSet::new();
    for (path, item) in paths {
        let item = match local(&doc, item) {
            Ok(item) => item,
            Err(reason) => {
                out.skipped.push(Skipped {
                    method: "*".into(),
                    path: path.clone(),
                    reason,
                });
                continue;
            }
        };
        let Some(item) = item.as_object() else {
            continue;
        };
        for (method, op) in item {
            let skip = |reason: String| Skipped {
                method: method.to_uppercase(),
                path: path.clone(),
                reason,
            };
            if OTHER_METHODS.contains(&method.as_str()) {
                out.skipped.push(skip(format!(
                    "the HTTP method {} is not supported",
                    method.to_uppercase()
                )));
                continue;
            }
            if !METHODS.contains(&method.as_str()) {
                continue; // `parameters`, `summary`, `servers`, extensions
            }
            match operation(&doc, path, method, item, op) {
                Ok(tool) => {
                    if names.insert(tool.name.clone()) {
                        out.tools.push(tool);
                    } else {
                        out.skipped.push(skip(format!(
                            "another operation is already named {}",
                            tool.name
                        )));
                    }
                }
                Err(reason) => out.skipped.push(skip(reason)),
            }
        }
    }
    Ok(out)
}

/// The servers the document lists on other origins than `base`, named.
fn server_warnings(doc: &Value, base: &Url) -> Vec<String> {
    let servers = doc["servers"].as_array().cloned().unwrap_or_default();
    servers
        .iter()
        .filter_map(|s| s["url"].as_str())
        .filter_map(|u| Url::parse(u).ok())
        .filter(|u| !egress::same_origin(u, base))
        .map(|u| {
            format!(
                "the document names the server {} on another origin; calls go only to {}",
                u.origin().ascii_serialization(),
                base.origin().ascii_serialization()
            )
        })
        .collect()
}

/// Follows a `$ref` at the top of `v` (only local ones, a bounded chain).
fn local<'a>(doc: &'a Value, mut v: &'a Value) -> Result<&'a Value, String> {
    for _ in 0..16 {
        let Some(r) = v.get("$ref").and_then(Value::as_str) else {
            return Ok(v);
        };
        v = pointer(doc, r)?;
    }
    Err("a $ref chain is longer than 16 steps".into())
}

fn pointer<'a>(doc: &'a Value, r: &str) -> Result<&'a Value, String> {
    let Some(p) = r.strip_prefix('#') else {
        return Err(format!(
            "the $ref {r:?} is not local; only #/… references are followed"
        ));
    };
    doc.pointer(p)
        .ok_or_else(|| format!("the $ref {r:?} points at nothing"))
}

/// One operation as a tool, or why not.
fn operation(
    doc: &Value,
    path: &str,
    method: &str,
    item: &Map<String, Value>,
    op: &Value,
) -> Result<Discovered, String> {
    check_path(path)?;
    check_security(doc, op)?;
    // Path-level parameters, overridden by the operation's of the same name and location.
    let mut params: BTreeMap<(String, String), Value> = BTreeMap::new();
    let lists = [item.get("parameters"), op.get("parameters")];
    for list in lists.into_iter().flatten() {
        for p in list.as_array().into_iter().flatten() {
            let p = local(doc, p)?;
            let name = p["name"].as_str().unwrap_or_default().to_owned();
            let location = p["in"].as_str().unwrap_or_default().to_owned();
            params.insert((location, name), p.clone());
        }
    }
    if params.len() > MAX_PARAMETERS {
        return Err(format!(
            "it has {} parameters, more than {MAX_PARAMETERS}",
            params.len()
        ));
    }
    let mut budget = Budget(MAX_SCHEMA);
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut plan = Plan {
        method: method.to_uppercase(),
        path: path.to_owned(),
        params: Vec::new(),
        body: false,
    };
    for ((location, name), p) in &params {
        check_param(location, name, p)?;
        if properties.contains_key(name) {
            return Err(format!("two parameters are named {name:?}"));
        }
        let mut schema = match p.get("schema") {
            Some(s) => inline(doc, s, &mut budget, &mut Vec::new())?,
            None => json!({}),
        };
        if let (Some(d), Some(m)) = (p["description"].as_str(), schema.as_object_mut()) {
            m.insert("description".into(), json!(d));
        }
        properties.insert(name.clone(), schema);
        if location == "path" || p["required"] == json!(true) {
            required.push(json!(name));
        }
        plan.params.push(Param {
            name: name.clone(),
            location: location.clone(),
        });
    }
    if let Some(body) = op.get("requestBody") {
        let body = local(doc, body)?;
        let content = body["content"].as_object().cloned().unwrap_or_default();
        let json_media = content
            .iter()
            .find(|(media, _)| is_json(media))
            .map(|(_, m)| m.clone());
        match json_media {
            Some(m) => {
                if properties.contains_key("body") {
                    return Err("a parameter is named \"body\", which the JSON body takes".into());
                }
                let schema = match m.get("schema") {
                    Some(s) => inline(doc, s, &mut budget, &mut Vec::new())?,
                    None => json!({}),
                };
                properties.insert("body".into(), schema);
                if body["required"] == json!(true) {
                    required.push(json!("body"));
                }
                plan.body = true;
            }
            None if content.is_empty() => {}
            None => {
                let kinds: Vec<&String> = content.keys().collect();
                return Err(format!("its request body is not JSON ({kinds:?})"));
            }
        }
    }
    let input_schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    if input_schema.to_string().len() > MAX_SCHEMA {
        return Err(format!(
            "its input schema is larger than {MAX_SCHEMA} bytes"
        ));
    }
    let name = tool_name(op, method, path)?;
    let summary = op["summary"].as_str().unwrap_or_default();
    let details = op["description"].as_str().unwrap_or_default();
    let description: String = [summary, details]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
        .chars()
        .take(2_000)
        .collect();
    Ok(Discovered {
        name,
        description,
        input_schema,
        output_schema: None,
        annotations: json!({"method": method.to_uppercase(), "path": path}),
        proposed_tier: proposed_tier_http(method),
        call_plan: serde_json::to_value(&plan).unwrap_or(Value::Null),
    })
}

fn is_json(media: &str) -> bool {
    let m = media
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
}

/// A path Breeze appends to the base URL: absolute, no dot segments, no query or fragment,
/// no encoded characters, no backslashes; templates `{name}` only as whole segments' content.
fn check_path(path: &str) -> Result<(), String> {
    let bad = || Err(format!("the path {path:?} cannot be called safely"));
    if !path.starts_with('/') || path.starts_with("//") {
        return bad();
    }
    if path.contains(['?', '#', '%', '\\', ' ']) || path.chars().any(char::is_control) {
        return bad();
    }
    for seg in path.split('/') {
        if seg == "." || seg == ".." {
            return bad();
        }
        if seg.matches('{').count() != seg.matches('}').count() {
            return bad();
        }
    }
    Ok(())
}

fn check_param(location: &str, name: &str, p: &Value) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("a parameter name {name:?} is empty or too long"));
    }
    let default_style = match location {
        "path" | "header" => "simple",
        "query" => "form",
        "cookie" => return Err(format!("the cookie parameter {name:?} is not supported")),
        other => return Err(format!("the parameter location {other:?} is unknown")),
    };
    if p.get("content").is_some() {
        return Err(format!("the parameter {name:?} uses content, not a schema"));
    }
    if let Some(style) = p["style"].as_str()
        && style != default_style
    {
        return Err(format!("the parameter {name:?} uses the style {style}"));
    }
    if location == "header" {
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(format!("the header parameter {name:?} is reserved"));
        }
        if reqwest13::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("{name:?} is not a valid header name"));
        }
    }
    if location == "path"
        && !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(format!(
            "the path parameter name {name:?} cannot be templated safely"
        ));
    }
    Ok(())
}

/// Refuses an operation every one of whose security alternatives needs a credential Breeze
/// cannot send: in the query string or a cookie, OpenID Connect, mutual TLS.
fn check_security(doc: &Value, op: &Value) -> Result<(), String> {
    let requirements = op
        .get("security")
        .or_else(|| doc.get("security"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if requirements.is_empty() {
        return Ok(());
    }
    let schemes = &doc["components"]["securitySchemes"];
    let mut why = String::new();
    for req in &requirements {
        let Some(req) = req.as_object() else {
            continue;
        };
        let unsupported = req.keys().find_map(|name| {
            let scheme = local(doc, &schemes[name]).ok()?;
            match (scheme["type"].as_str(), scheme["in"].as_str()) {
                (Some("apiKey"), Some(place @ ("query" | "cookie"))) => {
                    Some(format!("the credential {name:?} goes in the {place}"))
                }
                (Some("openIdConnect"), _) => Some(format!("{name:?} is OpenID Connect")),
                (Some("mutualTLS"), _) => Some(format!("{name:?} is mutual TLS")),
                _ => None,
            }
        });
        match unsupported {
            None => return Ok(()),
            Some(w) => why = w,
        }
    }
    Err(format!("it needs a credential Breeze cannot send: {why}"))
}

fn tool_name(op: &Value, method: &str, path: &str) -> Result<String, String> {
    let raw = match op["operationId"].as_str() {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("{method}{path}"),
    };
    // Characters MCP names cannot hold become `_`; runs of them collapse, so the name stays
    // readable and never starts with `_` (which would make `<slug>__<name>` ambiguous).
    let mut name = String::new();
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('_') {
            name.push('_');
        }
    }
    let name = name.trim_end_matches('_').to_owned();
    if name.is_empty() {
        return Err(format!("no usable name can be made of {raw:?}"));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "its name {name:?} is longer than {MAX_NAME} characters"
        ));
    }
    Ok(name)
}

/// What inlining may still produce, in bytes of JSON (roughly): a document whose references
/// multiply (a "reference bomb") runs out of it instead of memory.
struct Budget(usize);

/// `schema` with every local `$ref` inlined, 3.0 `nullable` as a type list; a reference back
/// into its own chain (recursion) becomes an open schema.
fn inline(
    doc: &Value,
    schema: &Value,
    budget: &mut Budget,
    chain: &mut Vec<String>,
) -> Result<Value, String> {
    let too_big = || format!("its input schema is larger than {MAX_SCHEMA} bytes");
    if chain.len() > 64 {
        return Err("its schema nests more than 64 references deep".into());
    }
    match schema {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                if chain.iter().any(|c| c == r) {
                    return Ok(json!({"description": "recursive; any value"}));
                }
                let target = pointer(doc, r)?;
                chain.push(r.to_owned());
                let out = inline(doc, target, budget, chain);
                chain.pop();
                return out;
            }
            let mut out = Map::new();
            for (k, v) in m {
                budget.0 = budget.0.checked_sub(k.len() + 4).ok_or_else(too_big)?;
                out.insert(k.clone(), inline(doc, v, budget, chain)?);
            }
            if out.remove("nullable") == Some(json!(true))
                && let Some(t) = out.get("type").cloned()
            {
                let mut types = match t {
                    Value::Array(a) => a,
                    one => vec![one],
                };
                if !types.contains(&json!("null")) {
                    types.push(json!("null"));
                }
                out.insert("type".into(), Value::Array(types));
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => items
            .iter()
            .map(|i| inline(doc, i, budget, chain))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => {
            budget.0 = budget
                .0
                .checked_sub(other.to_string().len() + 1)
                .ok_or_else(too_big)?;
            Ok(other.clone())
        }
    }
}

/// What a call answered: status and the body (JSON when it is JSON, else text).
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: Value,
}

/// Why a call failed before or while reaching the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Egress(#[from] EgressError),
    #[error("the call cannot be made: {0}")]
    Plan(String),
}

/// Encodes one path segment value: everything but unreserved characters percent-encoded, so
/// a value cannot add segments, a query or a fragment.
fn path_value(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    percent_encoding::utf8_percent_encode(&text, UNRESERVED_SET).to_string()
}

const UNRESERVED_SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The URL a call of `plan` with `args` goes to: `base` + the templated path + the query.
pub fn url_for(base: &Url, plan: &Plan, args: &Map<String, Value>) -> Result<Url, CallError> {
    let mut path = plan.path.clone();
    for p in plan.params.iter().filter(|p| p.location == "path") {
        let v = args
            .get(&p.name)
            .ok_or_else(|| CallError::Plan(format!("the path parameter {} is missing", p.name)))?;
        path = path.replace(&format!("{{{}}}", p.name), &path_value(v));
    }
    let mut url = base.clone();
    let joined = format!("{}{}", base.path().trim_end_matches('/'), path);
    url.set_path(&joined);
    url.set_query(None);
    url.set_fragment(None);
    {
        let mut q = url.query_pairs_mut();
        for p in plan.params.iter().filter(|p| p.location == "query") {
            match args.get(&p.name) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for i in items {
                        q.append_pair(&p.name, &scalar(i));
                    }
                }
                Some(v) => {
                    q.append_pair(&p.name, &scalar(v));
                }
            }
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    if !egress::same_origin(&url, base) {
        return Err(CallError::Plan(
            "the call would leave the base URL's origin".into(),
        ));
    }
    Ok(url)
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Calls the operation `plan` describes with `args`, at `base`, with `headers` (the
/// source's credential, made for `base`'s origin).
pub async fn call(
    egress: &Egress,
    base: &Url,
    headers: Headers,
    plan: &Plan,
    args: &Value,
    timeout: std::time::Duration,
) -> Result<Response, CallError> {
    let empty = Map::new();
    let args = args.as_object().unwrap_or(&empty);
    let url = url_for(base, plan, args)?;
    egress.check_url(url.as_str())?;
    let method = reqwest13::Method::from_bytes(plan.method.as_bytes())
        .map_err(|_| CallError::Plan(format!("the method {} is unknown", plan.method)))?;
    let mut request = egress
        .client()
        .request(method, url)
        .timeout(timeout)
        .header("accept", "application/json");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    for p in plan.params.iter().filter(|p| p.location == "header") {
        if let Some(v) = args.get(&p.name).filter(|v| !v.is_null()) {
            let value = reqwest13::header::HeaderValue::from_str(&scalar(v)).map_err(|_| {
                CallError::Plan(format!(
                    "the header {} holds characters a header cannot",
                    p.name
                ))
            })?;
            request = request.header(p.name.as_str(), value);
        }
    }
    if plan.body
        && let Some(body) = args.get("body")
    {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.map_err(|e| egress::http_error(&e))?;
    egress::refuse_redirect(&response)?;
    let status = response.status().as_u16();
    let bytes = egress::read_capped(response, egress::MAX_CALL_RESPONSE).await?;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok(Response { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("https://api.example.com/v2").unwrap_or_else(|e| panic!("{e}"))
    }

    fn imported(doc: Value) -> Import {
        import(doc.to_string().as_bytes(), &base()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn skipped_reason(i: &Import, path: &str) -> String {
        i.skipped
            .iter()
            .find(|s| s.path == path)
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| panic!("{path} not skipped: {:?}", i.skipped))
    }

    #[test]
    fn versions_and_limits_fail_whole() {
        let b = base();
        assert_eq!(
            import(br#"{"swagger":"2.0","paths":{}}"#, &b),
            Err(ImportError::Swagger2)
        );
        assert!(matches!(
            import(br#"{"openapi":"4.0.0","paths":{}}"#, &b),
            Err(ImportError::Version(_))
        ));
        assert!(matches!(
            import(b"openapi: 3.0.0", &b),
            Err(ImportError::NotJson(_))
        ));
        let big = vec![b' '; MAX_DOCUMENT + 1];
        assert_eq!(import(&big, &b), Err(ImportError::TooLarge));
        let mut paths = Map::new();
        for i in 0..=MAX_OPERATIONS {
            paths.insert(format!("/p{i}"), json!({"get": {}}));
        }
        let doc = json!({"openapi": "3.1.0", "paths": paths});
        assert_eq!(
            import(doc.to_string().as_bytes(), &b),
            Err(ImportError::TooManyOperations(MAX_OPERATIONS + 1))
        );
    }

    #[test]
    fn operations_become_tools_with_params_body_and_tier() {
        let i = imported(json!({
            "openapi": "3.0.3",
            "servers": [{"url": "https://evil.example.net/api"}, {"url": "/relative"}],
            "components": {"schemas": {"Asset": {"type": "object", "nullable": true,
                "properties": {"name": {"type": "string"}, "parent": {"$ref": "#/components/schemas/Asset"}}}}},
            "paths": {
                "/assets/{id}": {
                    "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                    "get": {"operationId": "getAsset", "summary": "One asset",
                        "parameters": [{"name": "fields", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}}]},
                    "put": {"operationId": "updateAsset", "requestBody": {"required": true,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Asset"}}}}}
                },
                "/things": {"get": {}}
            }
        }));
        let names: Vec<&str> = i.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["getAsset", "updateAsset", "get_things"]);
        let get = &i.tools[0];
        assert_eq!(get.proposed_tier, breeze_core::Tier::T1);
        assert_eq!(get.input_schema["required"], json!(["id"]));
        assert_eq!(
            get.input_schema["properties"]["fields"]["type"],
            json!("array")
        );
        let put = &i.tools[1];
        assert_eq!(put.proposed_tier, breeze_core::Tier::T3);
        assert_eq!(put.input_schema["required"], json!(["id", "body"]));
        let body = &put.input_schema["properties"]["body"];
        assert_eq!(
            body["type"],
            json!(["object", "null"]),
            "nullable becomes a type list"
        );
        assert_eq!(
            body["properties"]["parent"]["description"],
            json!("recursive; any value")
        );
        assert_eq!(i.warnings.len(), 1);
        assert!(
            i.warnings[0].contains("https://evil.example.net"),
            "{:?}",
            i.warnings
        );
    }

    #[test]
    fn unsupported_operations_are_skipped_with_reasons() {
        let many: Vec<Value> = (0..=MAX_PARAMETERS)
            .map(|n| json!({"name": format!("p{n}"), "in": "query"}))
            .collect();
        let i = imported(json!({
            "openapi": "3.1.0",
            "components": {"securitySchemes": {
                "q": {"type": "apiKey", "in": "query", "name": "key"},
                "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://x"},
                "h": {"type": "apiKey", "in": "header", "name": "X-Key"}}},
            "paths": {
                "/opt": {"options": {}},
                "/cookie": {"get": {"parameters": [{"name": "s", "in": "cookie"}]}},
                "/deep": {"get": {"parameters": [{"name": "f", "in": "query", "style": "deepObject"}]}},
                "/form": {"post": {"requestBody": {"content": {"multipart/form-data": {}}}}},
                "/qkey": {"get": {"security": [{"q": []}]}},
                "/oidc": {"get": {"security": [{"oidc": []}]}},
                "/either": {"get": {"security": [{"q": []}, {"h": []}]}},
                "/many": {"get": {"parameters": many}},
                "/long": {"get": {"operationId": "x".repeat(65)}},
                "/ext": {"get": {"parameters": [{"$ref": "https://evil.example/p.json"}]}},
                "/a/../b": {"get": {}},
                "/host": {"get": {"parameters": [{"name": "Host", "in": "header"}]}},
            }
        }));
        for (path, fragment) in [
            ("/opt", "OPTIONS is not supported"),
            ("/cookie", "cookie parameter"),
            ("/deep", "style deepObject"),
            ("/form", "not JSON"),
            ("/qkey", "goes in the query"),
            ("/oidc", "OpenID Connect"),
            ("/many", "more than 100"),
            ("/long", "longer than 64"),
            ("/ext", "not local"),
            ("/a/../b", "cannot be called safely"),
            ("/host", "reserved"),
        ] {
            let reason = skipped_reason(&i, path);
            assert!(reason.contains(fragment), "{path}: {reason}");
        }
        // One alternative the credential can satisfy is enough.
        assert!(i.tools.iter().any(|t| t.name == "get_either"));
    }

    #[test]
    fn a_reference_bomb_stops_at_the_schema_budget() {
        let mut schemas = Map::new();
        schemas.insert(
            "L0".into(),
            json!({"type": "string", "description": "x".repeat(100)}),
        );
        for n in 1..30 {
            let prev = format!("#/components/schemas/L{}", n - 1);
            schemas.insert(
                format!("L{n}"),
                json!({"type": "object", "properties": {"a": {"$ref": prev}, "b": {"$ref": prev}}}),
            );
        }
        let i = imported(json!({
            "openapi": "3.1.0",
            "components": {"schemas": schemas},
            "paths": {"/bomb": {"post": {"requestBody": {"content": {"application/json":
                {"schema": {"$ref": "#/components/schemas/L29"}}}}}}}
        }));
        assert!(skipped_reason(&i, "/bomb").contains("larger than"));
    }

    #[test]
    fn call_urls_stay_on_the_base_origin() {
        let plan = Plan {
            method: "GET".into(),
            path: "/assets/{id}".into(),
            params: vec![
                Param {
                    name: "id".into(),
                    location: "path".into(),
                },
                Param {
                    name: "tag".into(),
                    location: "query".into(),
                },
            ],
            body: false,
        };
        let args = |id: Value| {
            json!({"id": id, "tag": ["a&b", "c"]})
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        let url = url_for(&base(), &plan, &args(json!(7))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            url.as_str(),
            "https://api.example.com/v2/assets/7?tag=a%26b&tag=c"
        );
        for hostile in [
            "../../admin",
            "x?admin=1",
            "x#f",
            "//evil.example/x",
            "%2e%2e",
        ] {
            let url =
                url_for(&base(), &plan, &args(json!(hostile))).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(url.host_str(), Some("api.example.com"));
            assert!(url.path().starts_with("/v2/assets/"), "{hostile}: {url}");
            assert_eq!(url.path().matches('/').count(), 3, "{hostile}: {url}");
            assert!(
                url.query().is_some_and(|q| q.starts_with("tag=")),
                "{hostile}: {url}"
            );
        }
    }
}
