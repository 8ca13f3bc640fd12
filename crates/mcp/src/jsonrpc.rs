//! JSON-RPC 2.0: message shapes, error codes, and parsing that answers malformed input the way
//! the specification says (parse error and invalid request with a `null` id).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The JSON-RPC error codes Breeze answers with, by name (use these, never literals).
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i32 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i32 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Invalid method parameters (an unknown tool, resource or prompt included).
    pub const INVALID_PARAMS: i32 = -32602;
    /// Internal error; the MCP specification also answers scope, role, permission and
    /// allowlist refusals of a tool call with it.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Implementation-defined server error: rate limits, caps, temporary unavailability.
    pub const SERVER_ERROR: i32 = -32000;
    /// Implementation-defined: the client is not authenticated or lacks the scope to read.
    pub const UNAUTHORIZED: i32 = -32001;
    /// A request the client cancelled (answered only where an answer is still owed).
    pub const REQUEST_CANCELLED: i32 = -32800;
    /// MCP 2026-07-28: a header disagrees with the body (`HeaderMismatch`).
    pub const HEADER_MISMATCH: i32 = -32020;
    /// MCP 2026-07-28: the requested protocol version is not supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
}

pub use codes::{
    HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
    PARSE_ERROR, UNSUPPORTED_PROTOCOL_VERSION,
};

/// A request id: a string or a number (never null for a request).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    Number(i64),
    String(String),
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Number(n) => write!(f, "{n}"),
            Id::String(s) => f.write_str(s),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i32,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }
}

/// A request: has an id and expects a response.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: Id,
    pub method: String,
    pub params: Option<Value>,
}

/// A notification: no id, no response.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Option<Value>,
}

/// A response from the other side (to a request we sent it).
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: Id,
    pub outcome: Result<Value, ErrorObject>,
}

/// One incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

/// What arrived in one body: a single message or a batch.
#[derive(Debug)]
pub enum Incoming {
    Single(Result<Message, Reply>),
    /// Each element parsed on its own; an invalid element yields its own error reply.
    Batch(Vec<Result<Message, Reply>>),
}

/// A successful result: a JSON tree, or JSON text this process wrote (a tool's result, written
/// once from its typed value and not parsed again on the way out).
#[derive(Debug, Clone)]
pub enum Payload {
    Tree(Value),
    /// Valid JSON text, trusted as such: only this crate's writers make one.
    Json(Vec<u8>),
}

impl Payload {
    /// The result as a tree (parses written JSON: for the rare paths that need one).
    pub fn to_value(&self) -> Value {
        match self {
            Self::Tree(v) => v.clone(),
            Self::Json(bytes) => serde_json::from_slice(bytes).unwrap_or(Value::Null),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            // Writing into a Vec cannot fail.
            Self::Tree(v) => drop(serde_json::to_writer(out, v)),
            Self::Json(bytes) => out.extend_from_slice(bytes),
        }
    }

    fn len_hint(&self) -> usize {
        match self {
            Self::Tree(_) => 128,
            Self::Json(bytes) => bytes.len(),
        }
    }
}

impl From<Value> for Payload {
    fn from(v: Value) -> Self {
        Self::Tree(v)
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.to_value() == other.to_value()
    }
}

/// A message we send: a response (success or error) to a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// `None` only when the request's id could not be determined.
    pub id: Option<Id>,
    pub outcome: Result<Payload, ErrorObject>,
}

impl Reply {
    pub fn ok(id: Id, result: impl Into<Payload>) -> Self {
        Self {
            id: Some(id),
            outcome: Ok(result.into()),
        }
    }

    pub fn err(id: Option<Id>, error: ErrorObject) -> Self {
        Self {
            id,
            outcome: Err(error),
        }
    }

    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut m = Map::with_capacity(3);
        m.insert("jsonrpc".into(), Value::from("2.0"));
        m.insert(
            "id".into(),
            self.id.as_ref().map_or(Value::Null, |id| {
                serde_json::to_value(id).unwrap_or(Value::Null)
            }),
        );
        match &self.outcome {
            Ok(v) => m.insert("result".into(), v.to_value()),
            Err(e) => m.insert(
                "error".into(),
                serde_json::to_value(e).unwrap_or(Value::Null),
            ),
        };
        Value::Object(m)
    }

    /// The wire form, serialized.
    pub fn to_bytes(&self) -> Vec<u8> {
        let hint = self.outcome.as_ref().map_or(128, Payload::len_hint);
        let mut out = Vec::with_capacity(hint + 64);
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        // Writing into a Vec cannot fail.
        drop(serde_json::to_writer(&mut out, &self.id));
        match &self.outcome {
            Ok(payload) => {
                out.extend_from_slice(b",\"result\":");
                payload.write(&mut out);
            }
            Err(error) => {
                out.extend_from_slice(b",\"error\":");
                drop(serde_json::to_writer(&mut out, error));
            }
        }
        out.push(b'}');
        out
    }

    /// The wire form as JSON text.
    pub fn to_json(&self) -> String {
        String::from_utf8(self.to_bytes()).unwrap_or_default()
    }
}

/// A notification or request we send to the client.
pub fn outgoing(id: Option<&Id>, method: &str, params: Value) -> Value {
    let mut m = Map::with_capacity(4);
    m.insert("jsonrpc".into(), Value::from("2.0"));
    if let Some(id) = id {
        m.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
    }
    m.insert("method".into(), Value::from(method));
    m.insert("params".into(), params);
    Value::Object(m)
}

/// Parses a request body. Malformed JSON is one parse error; a JSON value that is not a
/// message (or an empty batch) is an invalid request.
pub fn parse(body: &[u8]) -> Incoming {
    if let Some(message) = well_formed_call(body) {
        return Incoming::Single(Ok(message));
    }
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Single(Err(Reply::err(
                None,
                ErrorObject::new(PARSE_ERROR, format!("Parse error: {e}")),
            )));
        }
    };
    match value {
        Value::Array(items) if items.is_empty() => Incoming::Single(Err(Reply::err(
            None,
            ErrorObject::new(INVALID_REQUEST, "Invalid Request: empty batch"),
        ))),
        Value::Array(items) => Incoming::Batch(items.into_iter().map(parse_message).collect()),
        other => Incoming::Single(parse_message(other)),
    }
}

/// The common body, a single well-formed request or notification, read straight into its
/// fields rather than through a map of the whole object (a quarter of a small request's
/// parsing). `None` for anything else: a batch, a response, a field that is missing, null,
/// duplicated or of the wrong kind, a `jsonrpc` that is not "2.0", JSON that does not parse.
/// Those take [`parse`]'s general path, which answers each as before; a test holds the two
/// paths to the same answer wherever this one answers.
fn well_formed_call(body: &[u8]) -> Option<Message> {
    #[derive(Deserialize)]
    struct Call<'a> {
        #[serde(borrow)]
        jsonrpc: &'a str,
        #[serde(default, deserialize_with = "present_id")]
        id: Option<Id>,
        method: String,
        #[serde(default, deserialize_with = "structured_params")]
        params: Option<Value>,
    }
    /// An id that is there (a null one fails, as the general path refuses it).
    fn present_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Id>, D::Error> {
        Id::deserialize(d).map(Some)
    }
    /// Params that are there and an object or an array (anything else fails).
    fn structured_params<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Value>, D::Error> {
        match Value::deserialize(d)? {
            v @ (Value::Object(_) | Value::Array(_)) => Ok(Some(v)),
            _ => Err(serde::de::Error::custom(
                "params must be an object or an array",
            )),
        }
    }
    if body.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let call: Call<'_> = serde_json::from_slice(body).ok()?;
    if call.jsonrpc != "2.0" {
        return None;
    }
    Some(match call.id {
        Some(id) => Message::Request(Request {
            id,
            method: call.method,
            params: call.params,
        }),
        None => Message::Notification(Notification {
            method: call.method,
            params: call.params,
        }),
    })
}

fn invalid(id: Option<Id>, why: &str) -> Reply {
    Reply::err(
        id,
        ErrorObject::new(INVALID_REQUEST, format!("Invalid Request: {why}")),
    )
}

/// Interprets one JSON value as a message.
pub fn parse_message(value: Value) -> Result<Message, Reply> {
    let Value::Object(mut m) = value else {
        return Err(invalid(None, "expected a JSON object"));
    };
    let id = match m.remove("id") {
        None => None,
        Some(Value::Null) => {
            return Err(invalid(None, "id must be a string or a number, not null"));
        }
        Some(v) => match serde_json::from_value::<Id>(v) {
            Ok(id) => Some(id),
            Err(_) => return Err(invalid(None, "id must be a string or an integer")),
        },
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(id, "jsonrpc must be \"2.0\""));
    }
    let params = m.remove("params");
    if let Some(p) = &params
        && !p.is_object()
        && !p.is_array()
    {
        return Err(invalid(id, "params must be an object or an array"));
    }
    match (m.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            Ok(Message::Request(Request { id, method, params }))
        }
        (Some(Value::String(method)), None) => {
            Ok(Message::Notification(Notification { method, params }))
        }
        (Some(_), id) => Err(invalid(id, "method must be a string")),
        (None, Some(id)) => {
            if let Some(result) = m.remove("result") {
                Ok(Message::Response(Response {
                    id,
                    outcome: Ok(result),
                }))
            } else if let Some(error) = m.remove("error") {
                match serde_json::from_value::<ErrorObject>(error) {
                    Ok(e) => Ok(Message::Response(Response {
                        id,
                        outcome: Err(e),
                    })),
                    Err(_) => Err(invalid(Some(id), "malformed error object")),
                }
            } else {
                Err(invalid(Some(id), "missing method"))
            }
        }
        (None, None) => Err(invalid(None, "missing method")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn single(body: &str) -> Result<Message, Reply> {
        match parse(body.as_bytes()) {
            Incoming::Single(m) => m,
            Incoming::Batch(_) => panic!("expected a single message"),
        }
    }

    #[test]
    fn requests_notifications_responses() {
        let m = single(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert_eq!(
            m,
            Message::Request(Request {
                id: Id::Number(1),
                method: "ping".into(),
                params: None
            })
        );
        let m = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(m, Message::Notification(n) if n.method == "notifications/initialized"));
        let m = single(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert!(
            matches!(m, Message::Response(r) if r.id == Id::String("a".into()) && r.outcome.is_ok())
        );
    }

    #[test]
    fn malformed_input_gets_the_standard_errors() {
        let e = single("{oops").unwrap_err();
        assert_eq!(
            (e.id.clone(), e.outcome.clone().unwrap_err().code),
            (None, PARSE_ERROR)
        );
        assert_eq!(e.to_value()["id"], Value::Null);
        for bad in [
            r#"42"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            r#"[]"#,
        ] {
            let e = single(bad).unwrap_err();
            assert_eq!(e.outcome.unwrap_err().code, INVALID_REQUEST, "{bad}");
        }
        // The id is kept when it could be read.
        let e = single(r#"{"jsonrpc":"1.0","id":9,"method":"x"}"#).unwrap_err();
        assert_eq!(e.id, Some(Id::Number(9)));
    }

    /// Wherever the well-formed fast path answers, it answers as the general path does; and it
    /// answers the plain requests and notifications it exists for.
    #[test]
    fn the_fast_path_agrees_with_the_general_one() {
        let general = |body: &str| match serde_json::from_slice::<Value>(body.as_bytes()) {
            Ok(v) => parse_message(v),
            Err(_) => Err(invalid(None, "unparsable")),
        };
        let answered = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,{"b":null}]}}}"#,
            r#" {"method":"ping","id":"abc","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":-7,"method":"ping","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            r#"{"jsonrpc":"2.0","id":"\u00e9\n","method":"p\"ing","result":{},"extra":true}"#,
        ];
        for body in answered {
            let fast = well_formed_call(body.as_bytes());
            assert!(fast.is_some(), "{body}");
            assert_eq!(fast.map(Ok), Some(general(body)), "{body}");
        }
        let declined = [
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2\u002e0","id":1,"method":"ping"}"#,
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
            "1",
            "",
        ];
        for body in declined {
            assert_eq!(well_formed_call(body.as_bytes()), None, "{body}");
        }
        // Duplicates: the general path keeps the last, as before.
        let m = single(r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#).unwrap();
        assert!(matches!(m, Message::Request(r) if r.method == "b"));
    }

    #[test]
    fn batches_parse_each_element() {
        let Incoming::Batch(items) = parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 5]"#)
        else {
            panic!()
        };
        assert!(items[0].is_ok() && items[1].is_err());
    }

    #[test]
    fn bytes_and_values_agree() {
        for r in [
            Reply::ok(Id::Number(1), json!({ "a": [1, 2] })),
            Reply::ok(Id::Number(2), Payload::Json(br#"{"b":"\"q\""}"#.to_vec())),
            Reply::err(Some(Id::String("x".into())), ErrorObject::internal("boom")),
            Reply::err(None, ErrorObject::new(PARSE_ERROR, "bad")),
        ] {
            let from_bytes: Value = serde_json::from_slice(&r.to_bytes()).unwrap();
            assert_eq!(from_bytes, r.to_value());
        }
    }

    #[test]
    fn replies_serialize() {
        let r = Reply::ok(Id::Number(3), json!({}));
        assert_eq!(r.to_value(), json!({"jsonrpc":"2.0","id":3,"result":{}}));
        let e = Reply::err(
            Some(Id::String("x".into())),
            ErrorObject::method_not_found("nope"),
        );
        assert_eq!(e.to_value()["error"]["code"], METHOD_NOT_FOUND);
    }
}
