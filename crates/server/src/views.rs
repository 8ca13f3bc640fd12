//! MCP Apps views (the `io.modelcontextprotocol/ui` extension): which tool's result a client that
//! negotiated the extension may draw, and with what. The engine negotiates the extension and
//! carries resources' `_meta`; this module is Breeze's side: the registry [`VIEWS`] (a view for
//! one more tool is one entry there and one script in `crates/server/views/`), the
//! `_meta.ui.resourceUri` a tool carries, and the `ui://breeze/…` documents.
//!
//! A view is one self-contained HTML document assembled at compile time from files in
//! `crates/server/views/`: the shared stylesheet (light and dark), the hand-written bridge
//! (`bridge.js`: JSON-RPC over `postMessage` with the host, no dependency) and the view's own
//! script. Nothing is fetched: the declared CSP names no origin, so the host lets the frame reach
//! nothing. A view renders the tool's `structuredContent` and calls tools only through the host
//! (`tools/call`), which runs them as the connection's credential through the pipeline.

use serde_json::{Value, json};

use breeze_mcp::Extensions;

/// The extension's id, as clients declare it in `capabilities.extensions`.
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// The MIME type of a view document.
pub const VIEW_MIME: &str = "text/html;profile=mcp-app";

/// A view of one tool's results.
#[derive(Debug)]
pub struct View {
    /// The tool whose results it draws.
    pub tool: &'static str,
    /// Its resource, `ui://breeze/<name>`.
    pub uri: &'static str,
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// The view's own script, run after the shared bridge.
    script: &'static str,
    /// Reference data the script reads from `<script type="application/json" id="data">`,
    /// when it needs some that no result carries (the live query catalogue's columns).
    data: Option<fn() -> Value>,
}

macro_rules! view {
    ($tool:literal, $name:literal, $title:literal, $description:literal $(, $data:expr)?) => {
        View {
            tool: $tool,
            uri: concat!("ui://breeze/", $name),
            name: $name,
            title: $title,
            description: $description,
            script: include_str!(concat!("../views/", $name, ".js")),
            data: view!(@data $($data)?),
        }
    };
    (@data) => { None };
    (@data $data:expr) => { Some($data) };
}

/// Every view, one entry each.
pub const VIEWS: &[View] = &[
    view!(
        "get_device_details",
        "device-card",
        "Device card",
        "A device's status, facts, disks and open alerts."
    ),
    view!(
        "analyze_metrics",
        "metrics-chart",
        "Metrics chart",
        "CPU, RAM and disk over time, with a range switch."
    ),
    view!(
        "query_devices",
        "device-table",
        "Device table",
        "Devices in a table to sort and filter."
    ),
    view!(
        "get_approval_status",
        "approval-card",
        "Approval card",
        "A Tier 3 call's approval request: what, why, pinned arguments, time left."
    ),
    view!(
        "run_live_query",
        "live-query",
        "Live query",
        "A live query's rows under the question's columns, and each device's answer.",
        live_query_columns
    ),
    view!(
        "get_vulnerability_exposure",
        "vulnerability-summary",
        "Vulnerability exposure",
        "Exposure by severity, advisories and CVEs with the devices they affect."
    ),
];

/// Each live query question's columns (name, type, description), by question name: the row
/// schema the live query view heads its table with, whatever rows a result happens to hold.
fn live_query_columns() -> Value {
    Value::Object(
        breeze_agent_proto::livequery::CATALOGUE
            .iter()
            .map(|q| {
                (
                    q.name.to_owned(),
                    json!({ "title": q.title, "columns": q.columns }),
                )
            })
            .collect(),
    )
}

const STYLE: &str = include_str!("../views/style.css");
const BRIDGE: &str = include_str!("../views/bridge.js");

/// Whether the request's client negotiated the extension with Breeze's MIME type.
pub fn negotiated(extensions: &Extensions) -> bool {
    extensions
        .get(UI_EXTENSION)
        .and_then(|s| s.get("mimeTypes"))
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|t| t.as_str() == Some(VIEW_MIME)))
}

/// The view of `tool`'s results, if it has one.
pub fn for_tool(tool: &str) -> Option<&'static View> {
    VIEWS.iter().find(|v| v.tool == tool)
}

/// The view behind resource `uri`, if any.
pub fn by_uri(uri: &str) -> Option<&'static View> {
    VIEWS.iter().find(|v| v.uri == uri)
}

/// What the server advertises for the extension.
pub fn capability() -> Value {
    json!({ "mimeTypes": [VIEW_MIME] })
}

/// A view resource's `_meta`: no origin may be reached (every asset is inline), and a border.
pub fn resource_meta() -> Value {
    json!({ "ui": {
        "csp": { "connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": [] },
        "prefersBorder": true,
    } })
}

impl View {
    /// The document, naming `dashboard` (the server's public URL, where a person signs in).
    pub fn html(&self, dashboard: &str) -> String {
        format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
             <meta name=\"breeze-dashboard\" content=\"{dashboard}\">\
             <title>{title}</title><style>{STYLE}</style></head>\
             <body><main id=\"app\" aria-busy=\"true\" aria-label=\"{title}\">\
             <p class=\"muted\">Waiting for the tool's result…</p></main>{data}\
             <script>{BRIDGE}\n{script}</script></body></html>\n",
            dashboard = attribute(dashboard.trim_end_matches('/')),
            title = self.title,
            script = self.script,
            data = self.data.map_or_else(String::new, |data| format!(
                "<script type=\"application/json\" id=\"data\">{}</script>",
                script_json(&data())
            )),
        )
    }
}

/// `v` as JSON that cannot end the `<script>` element holding it (every `<` escaped; JSON
/// reads `\u003c` back as `<`).
fn script_json(v: &Value) -> String {
    v.to_string().replace('<', "\\u003c")
}

/// `s` escaped for a double-quoted HTML attribute.
fn attribute(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn every_view_names_a_distinct_tool_and_resource() {
        for (i, v) in VIEWS.iter().enumerate() {
            assert!(v.uri.starts_with("ui://breeze/"));
            assert!(
                VIEWS[..i]
                    .iter()
                    .all(|o| o.tool != v.tool && o.uri != v.uri)
            );
            assert!(
                breeze_tools::all().get(v.tool).is_some(),
                "{} is a tool",
                v.tool
            );
        }
    }

    #[test]
    fn views_are_self_contained_and_small() {
        for v in VIEWS {
            let html = v.html("https://rmm.example.com");
            for outside in [
                "src=",
                "href=\"http",
                "@import",
                "url(",
                "fetch(",
                "XMLHttpRequest",
                "WebSocket",
            ] {
                assert!(!html.contains(outside), "{}: {outside}", v.name);
            }
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(html.as_bytes()).unwrap();
            let gzipped = gz.finish().unwrap().len();
            assert!(gzipped <= 60 * 1024, "{}: {gzipped} bytes gzipped", v.name);
        }
    }

    #[test]
    fn reference_data_cannot_end_its_script_element() {
        let s = script_json(&json!({ "a": "</script><script>alert(1)</script>" }));
        assert!(!s.contains('<'));
        let back: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back["a"], "</script><script>alert(1)</script>");
        let html = by_uri("ui://breeze/live-query")
            .unwrap()
            .html("https://rmm.example.com");
        assert!(html.contains(r#"<script type="application/json" id="data">{"#));
        assert!(
            html.contains(r#""processes":{"#),
            "the catalogue's questions"
        );
    }

    #[test]
    fn the_dashboard_url_cannot_break_out_of_its_attribute() {
        let html = VIEWS[0].html("https://x.example/\"><script>");
        assert!(html.contains("https://x.example/&quot;&gt;&lt;script&gt;"));
    }

    #[test]
    fn negotiation_needs_the_view_mime_type() {
        let supported = serde_json::Map::from_iter([(UI_EXTENSION.to_owned(), capability())]);
        let ext = |v: Value| Extensions::negotiate(Some(&v), &supported);
        assert!(negotiated(&ext(
            json!({ UI_EXTENSION: { "mimeTypes": [VIEW_MIME] } })
        )));
        assert!(!negotiated(&ext(
            json!({ UI_EXTENSION: { "mimeTypes": ["text/html"] } })
        )));
        assert!(!negotiated(&ext(
            json!({ "other/ext": { "mimeTypes": [VIEW_MIME] } })
        )));
        assert!(!negotiated(&Extensions::default()));
    }
}
