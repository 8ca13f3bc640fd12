//! The console's shared list-page parts: tabs between the pages of one area, tables that
//! become cards on a phone (`kit_table.html`), small forms (`kit_form.html`) and one page
//! shape built of sections (`console_page.html`), used by the scripts, patches, organization,
//! policies and reports pages.
//!
//! A page here is authorized like every other page: by the operation the MCP tool action
//! declares ([`super::tool_operation`]) or the REST route declares ([`route_operation`]), so
//! the page, the tool and the REST route cannot disagree.

use askama::Template;
use axum::http::Method;
use breeze_core::{Operation, Permission, Tier};

use super::{Layout, PageError};
use crate::ApiError;

/// A link among the pages of one area.
pub(crate) struct Tab {
    pub(crate) href: String,
    pub(crate) label: &'static str,
    pub(crate) active: bool,
}

/// Tabs for `org` from `(suffix, label)` pairs; the one whose suffix is `current` is active.
pub(crate) fn tabs(org: &str, pairs: &[(&str, &'static str)], current: &str) -> Vec<Tab> {
    pairs
        .iter()
        .map(|(suffix, label)| Tab {
            href: format!("/o/{org}{suffix}"),
            label,
            active: *suffix == current,
        })
        .collect()
}

/// A button in a table cell: a small form posting hidden fields.
pub(crate) struct RowForm {
    pub(crate) action: String,
    pub(crate) fields: Vec<(String, String)>,
    pub(crate) label: String,
    /// The accessible name when the label alone is ambiguous ("Approve openssl").
    pub(crate) aria: String,
    pub(crate) danger: bool,
    pub(crate) confirm: String,
}

impl RowForm {
    pub(crate) fn new(action: String, label: &str, aria: String) -> Self {
        Self {
            action,
            fields: Vec::new(),
            label: label.to_owned(),
            aria,
            danger: false,
            confirm: String::new(),
        }
    }

    pub(crate) fn field(mut self, name: &str, value: impl Into<String>) -> Self {
        self.fields.push((name.to_owned(), value.into()));
        self
    }

    pub(crate) fn danger(mut self, confirm: &str) -> Self {
        self.danger = true;
        self.confirm = confirm.to_owned();
        self
    }
}

/// One table cell.
#[derive(Default)]
pub(crate) struct Cell {
    /// The column's header, shown before the value when the table is a card.
    pub(crate) label: &'static str,
    pub(crate) text: String,
    pub(crate) href: String,
    /// A badge's class (`s-online`, `sev-high`); empty for plain text.
    pub(crate) badge: String,
    pub(crate) mono: bool,
    /// Output shown folded under the value.
    pub(crate) detail: String,
    pub(crate) forms: Vec<RowForm>,
}

impl Cell {
    pub(crate) fn text(s: impl Into<String>) -> Self {
        Self {
            text: s.into(),
            ..Self::default()
        }
    }

    pub(crate) fn link(s: impl Into<String>, href: impl Into<String>) -> Self {
        Self {
            text: s.into(),
            href: href.into(),
            ..Self::default()
        }
    }

    /// A status badge: `s-{status}` colours it.
    pub(crate) fn status(s: &str) -> Self {
        Self {
            text: s.replace('_', " "),
            badge: format!("s-{s}"),
            ..Self::default()
        }
    }

    pub(crate) fn mono(s: impl Into<String>) -> Self {
        Self {
            text: s.into(),
            mono: true,
            ..Self::default()
        }
    }

    pub(crate) fn with_detail(mut self, detail: String) -> Self {
        self.detail = detail;
        self
    }

    pub(crate) fn forms(forms: Vec<RowForm>) -> Self {
        Self {
            forms,
            ..Self::default()
        }
    }
}

/// A table row.
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) cells: Vec<Cell>,
}

/// A table (cards on a phone), or a sentence when it has no row.
pub(crate) struct Table {
    pub(crate) id: String,
    pub(crate) caption: String,
    pub(crate) headers: Vec<&'static str>,
    pub(crate) rows: Vec<Row>,
    pub(crate) empty: String,
    /// The session's CSRF token, for the rows' buttons.
    pub(crate) csrf: String,
    /// A visible heading above the table (a calendar's day); none when empty.
    pub(crate) heading: String,
}

impl Table {
    pub(crate) fn new(id: &str, caption: &str, headers: &[&'static str], empty: &str) -> Self {
        Self {
            id: id.to_owned(),
            caption: caption.to_owned(),
            headers: headers.to_vec(),
            rows: Vec::new(),
            empty: empty.to_owned(),
            csrf: String::new(),
            heading: String::new(),
        }
    }

    /// With a visible heading (e.g. a day in a calendar-like list).
    pub(crate) fn heading(mut self, h: impl Into<String>) -> Self {
        self.heading = h.into();
        self
    }

    /// With buttons posting `csrf`.
    pub(crate) fn csrf(mut self, csrf: &str) -> Self {
        csrf.clone_into(&mut self.csrf);
        self
    }

    /// Adds a row; each cell takes its column's header as its label.
    pub(crate) fn row(&mut self, id: impl Into<String>, mut cells: Vec<Cell>) {
        for (cell, header) in cells.iter_mut().zip(&self.headers) {
            cell.label = header;
        }
        self.rows.push(Row {
            id: id.into(),
            cells,
        });
    }
}

/// A choice in a select.
pub(crate) struct Opt {
    pub(crate) value: String,
    pub(crate) label: String,
    pub(crate) selected: bool,
}

impl Opt {
    pub(crate) fn new(value: impl Into<String>, label: impl Into<String>, selected: bool) -> Self {
        Self {
            value: value.into(),
            label: label.into(),
            selected,
        }
    }
}

/// A form field: `kind` is an input type, `textarea`, `select` or `hidden`.
pub(crate) struct Field {
    pub(crate) kind: &'static str,
    pub(crate) name: &'static str,
    pub(crate) label: String,
    pub(crate) value: String,
    pub(crate) help: String,
    pub(crate) options: Vec<Opt>,
    pub(crate) required: bool,
    pub(crate) wide: bool,
}

impl Field {
    pub(crate) fn new(kind: &'static str, name: &'static str, label: &str) -> Self {
        Self {
            kind,
            name,
            label: label.to_owned(),
            value: String::new(),
            help: String::new(),
            options: Vec::new(),
            required: false,
            wide: false,
        }
    }

    pub(crate) fn value(mut self, v: impl Into<String>) -> Self {
        self.value = v.into();
        self
    }

    pub(crate) fn help(mut self, h: &str) -> Self {
        h.clone_into(&mut self.help);
        self
    }

    pub(crate) fn options(mut self, o: Vec<Opt>) -> Self {
        self.options = o;
        self
    }

    pub(crate) fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Across the whole form.
    pub(crate) fn wide(mut self) -> Self {
        self.wide = true;
        self
    }
}

/// A small form posting to `action`.
pub(crate) struct Form {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) action: String,
    pub(crate) submit: String,
    pub(crate) fields: Vec<Field>,
    /// A form that only reads (a preview): GET, without the CSRF token.
    pub(crate) get: bool,
}

impl Form {
    pub(crate) fn new(id: &str, title: &str, action: String, submit: &str) -> Self {
        Self {
            id: id.to_owned(),
            title: title.to_owned(),
            action,
            submit: submit.to_owned(),
            fields: Vec::new(),
            get: false,
        }
    }

    pub(crate) fn field(mut self, f: Field) -> Self {
        self.fields.push(f);
        self
    }
}

/// A card of a page: facts, a command to copy, output, tables, forms.
#[derive(Default)]
pub(crate) struct Part {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) note: String,
    pub(crate) facts: Vec<(String, String)>,
    /// One line to copy (an install command), with a Copy button.
    pub(crate) copy: String,
    pub(crate) pre: String,
    pub(crate) tables: Vec<Table>,
    pub(crate) forms: Vec<Form>,
    /// A fragment URL the tables reload from every few seconds (live progress).
    pub(crate) poll: String,
}

impl Part {
    pub(crate) fn new(id: &str, title: &str) -> Self {
        Self {
            id: id.to_owned(),
            title: title.to_owned(),
            ..Self::default()
        }
    }

    pub(crate) fn note(mut self, n: impl Into<String>) -> Self {
        self.note = n.into();
        self
    }

    pub(crate) fn table(mut self, t: Table) -> Self {
        self.tables.push(t);
        self
    }

    pub(crate) fn form(mut self, f: Form) -> Self {
        self.forms.push(f);
        self
    }

    pub(crate) fn fact(mut self, k: &str, v: impl Into<String>) -> Self {
        self.facts.push((k.to_owned(), v.into()));
        self
    }
}

/// A console page: a heading, tabs, the last action's outcome, and its parts.
#[derive(Template)]
#[template(path = "console_page.html")]
pub(crate) struct Page {
    pub(crate) l: Layout,
    pub(crate) heading: String,
    pub(crate) intro: String,
    pub(crate) tabs: Vec<Tab>,
    pub(crate) tabs_label: String,
    pub(crate) back: Option<(String, String)>,
    /// A button beside the heading: href, label, element id.
    pub(crate) primary: Option<(String, String, String)>,
    /// A search box (its current text) above the parts.
    pub(crate) search: Option<String>,
    pub(crate) notice: String,
    pub(crate) error: String,
    pub(crate) parts: Vec<Part>,
}

impl Page {
    pub(crate) fn new(l: Layout, heading: &str) -> Self {
        Self {
            l,
            heading: heading.to_owned(),
            intro: String::new(),
            tabs: Vec::new(),
            tabs_label: String::new(),
            back: None,
            primary: None,
            search: None,
            notice: String::new(),
            error: String::new(),
            parts: Vec::new(),
        }
    }

    /// The page as one tab of a section: `label` names the tab list for screen readers, and
    /// the tab whose suffix is `current` is marked active.
    pub(crate) fn tabbed(
        mut self,
        org: &str,
        label: &str,
        pairs: &[(&str, &'static str)],
        current: &str,
    ) -> Self {
        self.tabs = tabs(org, pairs, current);
        self.tabs_label = label.to_owned();
        self
    }

    /// The outcome of the action that led back here (`?done=` / `?failed=`).
    pub(crate) fn outcome(mut self, o: super::device_actions::Outcome) -> Self {
        let o = o.trimmed();
        self.notice = o.done;
        self.error = o.failed;
        self
    }
}

/// Just a table, for a part that reloads itself.
#[derive(Template)]
#[template(path = "kit_fragment.html")]
pub(crate) struct Fragment {
    pub(crate) t: Table,
}

/// The operation the REST route `method path` declares in `authz::ORG_ROUTES`; a route that
/// declares nothing is never allowed (fail closed).
pub(crate) fn route_operation(method: &Method, path: &str) -> Operation {
    crate::authz::ORG_ROUTES
        .iter()
        .find(|(m, p, _)| m == method && *p == path)
        .map_or(
            Operation {
                tier: Tier::T4,
                permission: Permission::SettingsManage,
            },
            |(_, _, op)| *op,
        )
}

/// A timestamp as pages show it.
pub(crate) fn when(t: breeze_core::Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// An optional timestamp, or `—`.
pub(crate) fn when_opt(t: Option<breeze_core::Timestamp>) -> String {
    t.map_or_else(|| "—".to_owned(), when)
}

/// "`what` not found" as a page.
pub(crate) fn not_found(what: &str) -> PageError {
    PageError::from(ApiError::not_found(format!("{what} not found")))
}

/// A UUID from a path, or "`what` not found".
pub(crate) fn uuid(raw: &str, what: &str) -> Result<uuid::Uuid, PageError> {
    uuid::Uuid::parse_str(raw).map_err(|_| not_found(what))
}

/// A store error as a page: "not found" for a record that is not this organization's.
pub(crate) fn store_err(what: &'static str) -> impl Fn(breeze_store::StoreError) -> PageError {
    move |e| match e {
        breeze_store::StoreError::NotFound(_) => not_found(what),
        other => PageError::from(other),
    }
}

/// A redirect back to `to` with the outcome of an action.
pub(crate) fn back_to(to: &str, ok: bool, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let sep = if to.contains('?') { '&' } else { '?' };
    let key = if ok { "done" } else { "failed" };
    let q = serde_urlencoded::to_string([(key, message)]).unwrap_or_default();
    axum::response::Redirect::to(&format!("{to}{sep}{q}")).into_response()
}

/// Names for a target (an alert rule's, a window's, a policy's): sites and groups by name, a
/// device by hostname; `None` (an unreadable target) as the whole organization.
pub(crate) async fn target_name(
    store: breeze_store::OrgStore<'_>,
    target: Option<breeze_store::RuleTarget>,
) -> String {
    use breeze_store::RuleTarget;
    match target {
        Some(RuleTarget::Organization) | None => "every device".to_owned(),
        Some(RuleTarget::Site(s)) => match store.tenancy().get_site(s).await {
            Ok(site) => format!("site {}", site.name),
            Err(_) => "a site".to_owned(),
        },
        Some(RuleTarget::Group(g)) => match store.tenancy().get_group(g).await {
            Ok(group) => format!("group {}", group.name),
            Err(_) => "a group".to_owned(),
        },
        Some(RuleTarget::Device(d)) => match store.devices().hostnames(&[d]).await {
            Ok(mut m) => format!("device {}", m.remove(&d).unwrap_or_default()),
            Err(_) => "a device".to_owned(),
        },
    }
}

/// Runs a tool action from a console form through the pipeline as the signed-in person
/// ([`super::actions::run`]) and goes back to `to` with its outcome.
pub(crate) async fn run_and_return(
    state: &crate::AppState,
    scope: &crate::authz::OrgScope,
    tool: &str,
    args: serde_json::Value,
    request_id: Option<String>,
    to: &str,
) -> axum::response::Response {
    let ran = super::actions::run(state, scope, tool, args, request_id).await;
    back_to(to, ran.ok, &ran.message)
}
