//! Tickets, invoices, quotes and contracts in the dashboard.
//!
//! `GET /o/{org}/tickets` lists tickets (active by default, or one status), newest first;
//! `GET /o/{org}/tickets/{ticket}` (a UUID or `T-42`) shows one with its comments and time,
//! and `POST …/act` comments (public or internal), changes the status, assigns it to the
//! signed-in person, or starts and stops their timer. `GET /o/{org}/invoices`, `…/quotes`,
//! `…/contracts` list those; `GET …/invoices/{id}`, `…/quotes/{id}`, `…/contracts/{id}` show
//! one with its lines and totals (an invoice also its payments, refunds and payment links);
//! `GET …/invoices/{id}/pdf` and `…/quotes/{id}/pdf` download the document; `POST …/invoices/{id}/payment-link` makes (or shows) the Stripe payment link
//! of an issued invoice, and `POST …/quotes/{id}/payment-link` that of a sent quote.
//! `POST …/quotes/{id}/act` sends (Tier 3, `quotes.send`) or declines a quote;
//! `POST …/contracts/{id}/act` activates, pauses, resumes or cancels a contract (Tier 3,
//! `contracts.manage`).
//!
//! Every page is judged by the operation the MCP tool's matching action declares
//! ([`super::tool_operation`]): reading invoices needs what `get_invoice` needs (Tier 2,
//! `invoices.read`), a comment what `manage_tickets comment` needs, and so on; a button the
//! person may not use is not shown, and its post is refused all the same. Each change is the
//! store's (or the billing service's) own operation, with the same audit record a tool call
//! writes. Money is shown exactly as stored: minor units as decimals with their currency.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use breeze_core::{AuditEvent, Money, Operation, Quantity, TicketStatus};
use breeze_store::{OrgStore, StoreError, Ticket, TicketFilter};
use serde::Deserialize;
use uuid::Uuid;

use super::kit::{Cell, Table as KitTable};
use super::{Layout, PageError, Section, SignedForm, SignedIn, allowed, render, tool_operation};
use crate::{ApiError, AppState, authz::OrgScope, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/tickets", get(tickets))
        .route("/o/{org}/tickets/{ticket}", get(ticket))
        .route("/o/{org}/tickets/{ticket}/act", post(ticket_act))
        .route("/o/{org}/alerts/{id}/ticket", post(ticket_from_alert))
        .route("/o/{org}/invoices", get(invoices))
        .route("/o/{org}/invoices/{id}", get(invoice))
        .route("/o/{org}/invoices/{id}/pdf", get(invoice_pdf))
        .route(
            "/o/{org}/invoices/{id}/payment-link",
            post(invoice_payment_link),
        )
        .route("/o/{org}/quotes", get(quotes))
        .route("/o/{org}/quotes/{id}", get(quote))
        .route("/o/{org}/quotes/{id}/pdf", get(quote_pdf))
        .route(
            "/o/{org}/quotes/{id}/payment-link",
            post(quote_payment_link),
        )
        .route("/o/{org}/quotes/{id}/act", post(quote_act))
        .route("/o/{org}/contracts", get(contracts))
        .route("/o/{org}/contracts/{id}", get(contract))
        .route("/o/{org}/contracts/{id}/act", post(contract_act))
}

fn when(t: breeze_core::Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn money(minor: i64, currency: breeze_core::Currency) -> String {
    Money::new(minor, currency).to_string()
}

fn not_found(what: &str) -> PageError {
    PageError::from(ApiError::not_found(format!("{what} not found")))
}

/// A store error in a page's words: "not found" for a record that is not this
/// organization's, the store's message for a refusal.
fn page_err(what: &'static str) -> impl Fn(StoreError) -> PageError {
    move |e| match e {
        StoreError::NotFound(_) => not_found(what),
        other => PageError::from(other),
    }
}

/// A billing record with a page of its own, for the end of an action taken from that page.
#[derive(Clone, Copy)]
enum Record {
    Invoice,
    Quote,
    Contract,
}

/// Why an action on a record did not happen: a reason its page shows, or an error that
/// answers as itself (a record that is not this organization's is a 404).
enum Refusal {
    Shown(String),
    Failed(StoreError),
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(m) | StoreError::Conflict(m) => Refusal::Shown(m),
            other => Refusal::Failed(other),
        }
    }
}

impl From<breeze_billing::BillingError> for Refusal {
    fn from(e: breeze_billing::BillingError) -> Self {
        match e {
            breeze_billing::BillingError::Store(e) => e.into(),
            other => Refusal::Shown(other.to_string()),
        }
    }
}

impl Record {
    fn noun(self) -> &'static str {
        match self {
            Record::Invoice => "Invoice",
            Record::Quote => "Quote",
            Record::Contract => "Contract",
        }
    }

    async fn page(
        self,
        state: &AppState,
        who: &SignedIn,
        org: &str,
        raw: &str,
        message: String,
    ) -> Result<Response, PageError> {
        match self {
            Record::Invoice => invoice_page(state, who, org, raw, message).await,
            Record::Quote => quote_page(state, who, org, raw, message).await,
            Record::Contract => contract_page(state, who, org, raw, message).await,
        }
    }

    /// Back to the record's page when the action was taken, the page with the reason when
    /// it was refused, the error's own answer otherwise.
    async fn after<T>(
        self,
        state: &AppState,
        scope: &OrgScope,
        who: &SignedIn,
        id: Uuid,
        done: Result<T, impl Into<Refusal>>,
    ) -> Result<Response, PageError> {
        let path = match self {
            Record::Invoice => "invoices",
            Record::Quote => "quotes",
            Record::Contract => "contracts",
        };
        match done.map_err(Into::into) {
            Ok(_) => {
                Ok(Redirect::to(&format!("/o/{}/{path}/{id}", scope.org.slug)).into_response())
            }
            Err(Refusal::Shown(m)) => {
                self.page(state, who, &scope.org.slug, &id.to_string(), m)
                    .await
            }
            Err(Refusal::Failed(e)) => Err(page_err(self.noun())(e)),
        }
    }
}

/// The organization scope for `tool`'s `action`.
async fn scope(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    tool: &str,
    action: &str,
) -> Result<OrgScope, PageError> {
    let op = if action.is_empty() {
        tool_operation_plain(state, tool)
    } else {
        tool_operation(state, tool, action)
    };
    Ok(who.scope(state, org, op).await?)
}

/// The operation of a tool without actions (its own tier and permission).
fn tool_operation_plain(state: &AppState, tool: &str) -> Operation {
    match state.pipeline.registry().get(tool) {
        Some(spec) => Operation {
            tier: spec.effective_tier(&serde_json::json!({})),
            permission: spec.permission_for(&serde_json::json!({})),
        },
        None => tool_operation(state, tool, "no such tool"),
    }
}

fn audit(scope: &OrgScope, request_id: Option<String>, action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(scope.caller.actor(), action, resource).request(request_id)
}

// ---- tickets ---------------------------------------------------------------------------------

/// A ticket named by UUID or number (`T-42`, `42`).
async fn find_ticket(org: OrgStore<'_>, raw: &str) -> Result<Ticket, PageError> {
    let tickets = org.tickets();
    let upper = raw.to_ascii_uppercase();
    let found = match upper.strip_prefix("T-").unwrap_or(&upper).parse::<i64>() {
        Ok(n) => tickets.ticket_by_number(n).await,
        Err(_) => match Uuid::parse_str(raw) {
            Ok(id) => tickets.get_ticket(id).await,
            Err(_) => return Err(not_found("Ticket")),
        },
    };
    found.map_err(page_err("Ticket"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TicketQuery {
    status: String,
}

struct TicketRow {
    reference: String,
    subject: String,
    status: &'static str,
    priority: &'static str,
    updated: String,
}

struct Choice {
    value: &'static str,
    selected: bool,
}

#[derive(Template)]
#[template(path = "tickets.html")]
struct TicketsPage {
    l: Layout,
    rows: Vec<TicketRow>,
    statuses: Vec<Choice>,
}

async fn tickets(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<TicketQuery>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org, "manage_tickets", "list").await?;
    let status = q.status.parse::<TicketStatus>().ok();
    let filter = TicketFilter {
        status,
        active: status.is_none() && q.status != "all",
        ..TicketFilter::default()
    };
    let page = scope
        .store(&state)
        .tickets()
        .list_tickets(&filter, None, 100)
        .await?;
    let rows = page
        .tickets
        .into_iter()
        .map(|t| TicketRow {
            reference: t.reference(),
            status: t.status.as_str(),
            priority: t.priority.as_str(),
            updated: when(t.updated_at),
            subject: t.subject,
        })
        .collect();
    let statuses = ["active", "all"]
        .into_iter()
        .chain(TicketStatus::ALL.iter().map(|s| s.as_str()))
        .map(|value| Choice {
            value,
            selected: value == q.status || (q.status.is_empty() && value == "active"),
        })
        .collect();
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Tickets, "Tickets").await?;
    render(&TicketsPage { l, rows, statuses })
}

struct CommentRow {
    author: String,
    body: String,
    internal: bool,
    at: String,
}

struct TimeRow {
    who: String,
    started: String,
    minutes: String,
    billable: bool,
    rate: String,
    invoiced: bool,
}

#[derive(Template)]
#[template(path = "ticket.html")]
struct TicketPage {
    l: Layout,
    reference: String,
    subject: String,
    description: String,
    status: &'static str,
    priority: &'static str,
    assignee: String,
    created: String,
    comments: Vec<CommentRow>,
    time: Vec<TimeRow>,
    /// Statuses the ticket may move to now.
    moves: Vec<&'static str>,
    can_comment: bool,
    can_status: bool,
    can_assign: bool,
    can_time: bool,
    /// The signed-in person's timer runs on this ticket.
    timer_here: bool,
    message: String,
}

async fn ticket(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, raw)): Path<(String, String)>,
) -> Result<Response, PageError> {
    ticket_page(&state, &who, &org, &raw, String::new()).await
}

async fn ticket_page(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    raw: &str,
    message: String,
) -> Result<Response, PageError> {
    let scope = scope(state, who, org, "manage_tickets", "get").await?;
    let store = scope.store(state);
    let t = find_ticket(store, raw).await?;
    let tickets = store.tickets();
    let comments = tickets
        .comments(t.id)
        .await?
        .into_iter()
        .map(|c| CommentRow {
            author: c.author,
            body: c.body,
            internal: c.internal,
            at: when(c.created_at),
        })
        .collect();
    let time = tickets
        .time_entries(t.id)
        .await?
        .into_iter()
        .map(|e| TimeRow {
            who: e.actor.clone(),
            started: when(e.started_at),
            minutes: e
                .minutes
                .map_or_else(|| "running".to_owned(), |m| format!("{m} min")),
            billable: e.billable,
            rate: e.rate().to_string(),
            invoiced: e.invoice_id.is_some(),
        })
        .collect();
    let timer_here = tickets
        .running_timer(who.user.id)
        .await?
        .is_some_and(|e| e.ticket_id == t.id);
    let assignee = match t.assignee_id {
        Some(u) if u == who.user.id => who.user.name.clone(),
        Some(u) => state
            .store
            .get_user(u)
            .await
            .map_or_else(|_| u.to_string(), |u| u.name),
        None => String::new(),
    };
    let can = |action: &str| {
        allowed(
            state,
            &scope,
            tool_operation(state, "manage_tickets", action),
        )
    };
    let moves = TicketStatus::ALL
        .iter()
        .filter(|s| t.status.can_move_to(**s))
        .map(|s| s.as_str())
        .collect();
    let mut l = Layout::for_user(
        state,
        who,
        Some(&scope.org),
        Section::Tickets,
        &t.reference(),
    )
    .await?;
    // A custom context: the chat shows and injects the text as it is.
    l.chat_about(&format!("context=ticket%20{}", t.reference()));
    render(&TicketPage {
        l,
        reference: t.reference(),
        status: t.status.as_str(),
        priority: t.priority.as_str(),
        created: when(t.created_at),
        subject: t.subject,
        description: t.description,
        assignee,
        comments,
        time,
        moves,
        can_comment: can("comment"),
        can_status: can("update_status"),
        can_assign: can("assign"),
        can_time: can("start_timer"),
        timer_here,
        message,
    })
}

#[derive(Debug, Deserialize)]
struct TicketForm {
    action: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    internal: Option<String>,
    #[serde(default)]
    status: String,
    /// start_timer: an hourly rate makes the time billable (decimal, in `currency`).
    #[serde(default)]
    rate: String,
    #[serde(default)]
    currency: String,
}

async fn ticket_act(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, raw)): Path<(String, String)>,
    f: SignedForm<TicketForm>,
) -> Result<Response, PageError> {
    let (who, form) = (f.who, f.form);
    let tool_action = match form.action.as_str() {
        "comment" => "comment",
        "status" => "update_status",
        "assign_me" => "assign",
        "start_timer" => "start_timer",
        "stop_timer" => "stop_timer",
        _ => return Err(PageError::bad_request("Unknown action.")),
    };
    let scope = scope(&state, &who, &org, "manage_tickets", tool_action).await?;
    let store = scope.store(&state);
    let t = find_ticket(store, &raw).await?;
    let tickets = store.tickets();
    let a = |name: &str| {
        audit(
            &scope,
            request_id.clone(),
            &format!("ticket.{name}"),
            "ticket",
        )
    };
    let done = match form.action.as_str() {
        "comment" => tickets
            .add_comment(
                t.id,
                &scope.caller.actor(),
                who.user.id,
                form.body.trim(),
                form.internal.is_some(),
                a("comment"),
            )
            .await
            .map(|_| ()),
        "status" => match form.status.parse::<TicketStatus>() {
            Ok(to) => tickets
                .set_status(t.id, to, a("update_status"))
                .await
                .map(|_| ()),
            Err(_) => Err(StoreError::Invalid("Choose a status.".into())),
        },
        "assign_me" => tickets
            .assign(t.id, Some(who.user.id), a("assign"))
            .await
            .map(|_| ()),
        "start_timer" => match timer_rate(&form.rate, &form.currency) {
            Ok((billable, rate)) => tickets
                .start_timer(
                    t.id,
                    breeze_store::NewTime {
                        user: who.user.id,
                        actor: scope.caller.actor(),
                        billable,
                        rate,
                        note: None,
                    },
                    a("start_timer"),
                )
                .await
                .map(|_| ()),
            Err(m) => Err(StoreError::Invalid(m)),
        },
        _ => tickets
            .stop_timer(t.id, who.user.id, a("stop_timer"))
            .await
            .map(|_| ()),
    };
    match done {
        Ok(()) => Ok(
            Redirect::to(&format!("/o/{}/tickets/{}", scope.org.slug, t.reference()))
                .into_response(),
        ),
        Err(StoreError::Invalid(m) | StoreError::Conflict(m)) => {
            ticket_page(&state, &who, &org, &raw, m).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Whose tickets a page shows.
pub(super) enum TicketsOf {
    Alert(Uuid),
    Device(breeze_core::DeviceId),
}

/// Tickets a device's page lists (its newest).
const DEVICE_TICKETS: u32 = 50;

/// The tickets linked to an alert, or opened for a device (newest first), as the table its
/// page shows; `None` when the person may not list tickets (`manage_tickets list`).
pub(super) async fn linked_tickets(
    state: &AppState,
    scope: &OrgScope,
    of: TicketsOf,
) -> Result<Option<KitTable>, PageError> {
    if !allowed(
        state,
        scope,
        tool_operation(state, "manage_tickets", "list"),
    ) {
        return Ok(None);
    }
    let tickets = scope.store(state).tickets();
    let list = match of {
        TicketsOf::Alert(id) => tickets.tickets_of_alert(id).await?,
        TicketsOf::Device(d) => {
            let filter = TicketFilter {
                device: Some(d),
                ..TicketFilter::default()
            };
            tickets
                .list_tickets(&filter, None, DEVICE_TICKETS)
                .await?
                .tickets
        }
    };
    let slug = &scope.org.slug;
    let mut table = KitTable::new(
        "linked-tickets",
        "Tickets",
        &["Ticket", "Subject", "Status"],
        "No ticket yet.",
    );
    for t in list {
        let reference = t.reference();
        table.row(
            format!("ticket-{reference}"),
            vec![
                Cell::link(reference.clone(), format!("/o/{slug}/tickets/{reference}")),
                Cell::text(t.subject),
                Cell::status(t.status.as_str()),
            ],
        );
    }
    Ok(Some(table))
}

/// Whether the person may open a ticket from an alert here.
pub(super) fn may_ticket_alert(state: &AppState, scope: &OrgScope) -> bool {
    allowed(
        state,
        scope,
        tool_operation(state, "manage_tickets", "create_from_alert"),
    )
}

/// Opens a ticket from an alert of this organization (its device, severity and message, the
/// two linked) through the store call `manage_tickets create_from_alert` makes, and shows it.
async fn ticket_from_alert(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, raw)): Path<(String, String)>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = scope(&state, &who, &org, "manage_tickets", "create_from_alert").await?;
    let alert = Uuid::parse_str(&raw).map_err(|_| not_found("Alert"))?;
    let t = scope
        .store(&state)
        .tickets()
        .create_from_alert(
            alert,
            &scope.caller.actor().to_string(),
            audit(&scope, request_id, "ticket.create_from_alert", "ticket"),
        )
        .await
        .map_err(page_err("Alert"))?;
    Ok(Redirect::to(&format!("/o/{}/tickets/{}", scope.org.slug, t.reference())).into_response())
}

/// A timer's rate: billable at `rate` in `currency` (ISO 4217, default USD) when a rate is
/// given, else not billable.
fn timer_rate(rate: &str, currency: &str) -> Result<(bool, Money), String> {
    let code = if currency.trim().is_empty() {
        "USD"
    } else {
        currency.trim()
    };
    let currency = breeze_core::Currency::parse(code).map_err(|e| e.to_string())?;
    if rate.trim().is_empty() {
        return Ok((false, Money::zero(currency)));
    }
    Money::parse(rate.trim(), currency)
        .map(|m| (true, m))
        .map_err(|e| format!("rate: {e}"))
}

// ---- ledgers: lists --------------------------------------------------------------------------

/// A list of invoices, quotes or contracts: a heading, column names, and rows whose first
/// cell links to the record.
#[derive(Template)]
#[template(path = "ledger_list.html")]
struct LedgerList {
    l: Layout,
    heading: &'static str,
    id: &'static str,
    columns: Vec<&'static str>,
    rows: Vec<(String, Vec<String>)>,
}

async fn invoices(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org, "list_invoices", "").await?;
    let page = scope
        .store(&state)
        .invoices()
        .list_invoices(None, None, 100)
        .await?;
    let slug = &scope.org.slug;
    let rows = page
        .invoices
        .into_iter()
        .map(|i| {
            (
                format!("/o/{slug}/invoices/{}", i.id),
                vec![
                    i.reference().unwrap_or_else(|| "draft".into()),
                    i.status.to_string(),
                    i.total().to_string(),
                    i.balance().to_string(),
                    when(i.created_at),
                ],
            )
        })
        .collect();
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Invoices,
        "Invoices",
    )
    .await?;
    render(&LedgerList {
        l,
        heading: "Invoices",
        id: "invoices",
        columns: vec!["Invoice", "Status", "Total", "Balance", "Created"],
        rows,
    })
}

async fn quotes(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org, "manage_quotes", "list").await?;
    let (list, _) = scope.store(&state).quotes().list_quotes(None, 100).await?;
    let slug = &scope.org.slug;
    let rows = list
        .into_iter()
        .map(|q| {
            (
                format!("/o/{slug}/quotes/{}", q.id),
                vec![
                    q.reference(),
                    q.title.clone(),
                    q.status.clone(),
                    q.total().to_string(),
                    when(q.created_at),
                ],
            )
        })
        .collect();
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Quotes, "Quotes").await?;
    render(&LedgerList {
        l,
        heading: "Quotes",
        id: "quotes",
        columns: vec!["Quote", "Title", "Status", "Total", "Created"],
        rows,
    })
}

async fn contracts(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org, "list_contracts", "").await?;
    let page = scope
        .store(&state)
        .contracts()
        .list_contracts(None, None, 100)
        .await?;
    let slug = &scope.org.slug;
    let rows = page
        .contracts
        .into_iter()
        .map(|c| {
            (
                format!("/o/{slug}/contracts/{}", c.id),
                vec![
                    c.name.clone(),
                    c.status.to_string(),
                    c.billing_period.to_string(),
                    c.currency.to_string(),
                    when(c.next_period_at),
                ],
            )
        })
        .collect();
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Contracts,
        "Contracts",
    )
    .await?;
    render(&LedgerList {
        l,
        heading: "Contracts",
        id: "contracts",
        columns: vec!["Contract", "Status", "Period", "Currency", "Next period"],
        rows,
    })
}

// ---- ledgers: one record ---------------------------------------------------------------------

/// A table under a record: a heading, column names, rows.
struct Table {
    heading: &'static str,
    id: &'static str,
    columns: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

/// One invoice, quote or contract: facts, its lines, its totals, and what may be done.
#[derive(Template)]
#[template(path = "ledger_record.html")]
struct LedgerRecord {
    l: Layout,
    back: String,
    back_label: &'static str,
    heading: String,
    status: String,
    facts: Vec<(&'static str, String)>,
    lines: Table,
    totals: Vec<(&'static str, String)>,
    more: Vec<Table>,
    /// A download link (the PDF), when there is one.
    pdf: String,
    /// Where the payment-link button posts, when the person may make one.
    pay_action: String,
    /// An open payment link to show.
    pay_url: String,
    /// Where the record's action buttons post, and the buttons the person may use now.
    act_url: String,
    acts: Vec<Act>,
    message: String,
}

/// A button on a record's page: posts `action` = `value` to the record's `…/act`.
struct Act {
    value: &'static str,
    label: &'static str,
    danger: bool,
    /// The action takes a reason (a quote's decline).
    reason: bool,
}

impl Act {
    fn new(value: &'static str, label: &'static str) -> Self {
        Self {
            value,
            label,
            danger: false,
            reason: false,
        }
    }
}

const LINE_COLUMNS: [&str; 5] = ["Description", "Quantity", "Unit price", "Amount", "Tax"];

fn line(
    desc: &str,
    q: i64,
    [unit, amount, tax]: [i64; 3],
    c: breeze_core::Currency,
) -> Vec<String> {
    vec![
        desc.to_owned(),
        Quantity(q).decimal(),
        money(unit, c),
        money(amount, c),
        money(tax, c),
    ]
}

async fn invoice(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    invoice_page(&state, &who, &org, &id, String::new()).await
}

async fn invoice_page(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    raw: &str,
    message: String,
) -> Result<Response, PageError> {
    let scope = scope(state, who, org, "get_invoice", "").await?;
    let id = Uuid::parse_str(raw).map_err(|_| not_found("Invoice"))?;
    let invoices = scope.store(state).invoices();
    let i = invoices
        .get_invoice(id)
        .await
        .map_err(page_err("Invoice"))?;
    let c = i.currency;
    let slug = &scope.org.slug;
    let lines = invoices
        .lines(id)
        .await?
        .iter()
        .map(|l| {
            line(
                &l.description,
                l.quantity_milli,
                [l.unit_price_minor, l.amount_minor, l.tax_minor],
                c,
            )
        })
        .collect();
    let payments = invoices
        .payments(id)
        .await?
        .into_iter()
        .map(|p| {
            vec![
                when(p.received_at),
                money(p.amount_minor, p.currency),
                p.method,
                p.reference.unwrap_or_default(),
                p.voided_at.map_or_else(String::new, |_| "void".into()),
            ]
        })
        .collect();
    let refunds = invoices
        .refunds(id)
        .await?
        .into_iter()
        .map(|r| {
            vec![
                when(r.created_at),
                r.amount().to_string(),
                money(r.refunded_total_minor, r.currency),
                r.charge_id,
            ]
        })
        .collect();
    let links = invoices.payment_links(id).await?;
    let pay_url = links
        .iter()
        .find(|l| l.status == "open")
        .map(|l| l.url.clone())
        .unwrap_or_default();
    let link_rows = links
        .into_iter()
        .map(|l| vec![when(l.created_at), l.amount().to_string(), l.status, l.url])
        .collect();
    let may_link = allowed(
        state,
        &scope,
        tool_operation(state, "manage_invoices", "create_payment_link"),
    ) && i.status == breeze_core::InvoiceStatus::Issued
        && state.billing.is_some();
    let heading = match i.reference() {
        Some(r) => format!("Invoice {r}"),
        None => "Draft invoice".to_owned(),
    };
    let l = Layout::for_user(state, who, Some(&scope.org), Section::Invoices, &heading).await?;
    render(&LedgerRecord {
        l,
        back: format!("/o/{slug}/invoices"),
        back_label: "Invoices",
        heading,
        status: i.status.to_string(),
        facts: vec![
            ("Currency", c.to_string()),
            ("Created", when(i.created_at)),
            ("Issued", i.issued_at.map(when).unwrap_or_default()),
            ("Due", i.due_at.map(when).unwrap_or_default()),
            ("Notes", i.notes.clone().unwrap_or_default()),
        ],
        lines: Table {
            heading: "Lines",
            id: "lines",
            columns: LINE_COLUMNS.to_vec(),
            rows: lines,
        },
        totals: vec![
            ("Subtotal", money(i.subtotal_minor, c)),
            ("Tax", money(i.tax_minor, c)),
            ("Total", money(i.total_minor, c)),
            ("Paid", money(i.paid_minor, c)),
            ("Balance", i.balance().to_string()),
        ],
        more: vec![
            Table {
                heading: "Payments",
                id: "payments",
                columns: vec!["Received", "Amount", "Method", "Reference", ""],
                rows: payments,
            },
            Table {
                heading: "Refunds",
                id: "refunds",
                columns: vec!["Recorded", "Refunded", "Refunded in all", "Charge"],
                rows: refunds,
            },
            Table {
                heading: "Payment links",
                id: "payment-links",
                columns: vec!["Made", "Amount", "State", "Link"],
                rows: link_rows,
            },
        ],
        pdf: format!("/o/{slug}/invoices/{id}/pdf"),
        pay_action: if may_link {
            format!("/o/{slug}/invoices/{id}/payment-link")
        } else {
            String::new()
        },
        pay_url,
        act_url: String::new(),
        acts: Vec::new(),
        message,
    })
}

/// Makes (or shows) an issued invoice's Stripe payment link, as `manage_invoices
/// create_payment_link` does.
async fn invoice_payment_link(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, raw)): Path<(String, String)>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    payment_link(Record::Invoice, state, request_id, &org, &raw, f.who).await
}

/// Makes (or shows) a sent quote's Stripe payment link, as `manage_quotes create_payment_link`
/// does.
async fn quote_payment_link(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, raw)): Path<(String, String)>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    payment_link(Record::Quote, state, request_id, &org, &raw, f.who).await
}

/// A payment link for an invoice or a quote (a contract has none: 404), through the same
/// billing call and audit as the tool's action.
async fn payment_link(
    record: Record,
    state: AppState,
    request_id: Option<String>,
    org: &str,
    raw: &str,
    who: SignedIn,
) -> Result<Response, PageError> {
    let tool = match record {
        Record::Invoice => "manage_invoices",
        Record::Quote => "manage_quotes",
        Record::Contract => return Err(not_found("Payment link")),
    };
    let scope = scope(&state, &who, org, tool, "create_payment_link").await?;
    let id = Uuid::parse_str(raw).map_err(|_| not_found(record.noun()))?;
    let Some(billing) = state.billing.as_ref() else {
        let why = "Payments are not available on this server.";
        return record.page(&state, &who, org, raw, why.into()).await;
    };
    let store = scope.store(&state);
    let actor = scope.caller.actor().to_string();
    let made = if let Record::Quote = record {
        let q = store
            .quotes()
            .get_quote(id)
            .await
            .map_err(page_err("Quote"))?;
        let audit = audit(&scope, request_id, "quote.create_payment_link", "quote");
        billing
            .org(store)
            .quote_link(&q, &actor, audit)
            .await
            .map(drop)
    } else {
        let inv = store
            .invoices()
            .get_invoice(id)
            .await
            .map_err(page_err("Invoice"))?;
        let audit = audit(&scope, request_id, "invoice.create_payment_link", "invoice");
        billing
            .org(store)
            .invoice_link(&inv, &actor, audit)
            .await
            .map(drop)
    };
    record.after(&state, &scope, &who, id, made).await
}

async fn invoice_pdf(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, raw)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org, "get_invoice", "").await?;
    let id = Uuid::parse_str(&raw).map_err(|_| not_found("Invoice"))?;
    let invoices = scope.store(&state).invoices();
    let i = invoices
        .get_invoice(id)
        .await
        .map_err(page_err("Invoice"))?;
    let name = i.reference().unwrap_or_else(|| format!("draft-{id}"));
    Ok(crate::routes::tickets::pdf_download(
        &name,
        invoices.pdf(id).await?,
    ))
}

async fn quote(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, raw)): Path<(String, String)>,
) -> Result<Response, PageError> {
    quote_page(&state, &who, &org, &raw, String::new()).await
}

async fn quote_page(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    raw: &str,
    message: String,
) -> Result<Response, PageError> {
    let scope = scope(state, who, org, "manage_quotes", "get").await?;
    let id = Uuid::parse_str(raw).map_err(|_| not_found("Quote"))?;
    let quotes = scope.store(state).quotes();
    let q = quotes.get_quote(id).await.map_err(page_err("Quote"))?;
    let c = q.currency;
    let slug = &scope.org.slug;
    let lines = quotes
        .lines(id)
        .await?
        .iter()
        .map(|l| {
            line(
                &l.description,
                l.quantity_milli,
                [l.unit_price_minor, l.amount_minor, l.tax_minor],
                c,
            )
        })
        .collect();
    let blocks = quotes
        .blocks(id)
        .await?
        .into_iter()
        .map(|b| vec![b.kind, b.body])
        .collect();
    let links = quotes.payment_links(id).await?;
    let paid = links.iter().any(|l| l.status == "paid");
    let pay_url = links
        .iter()
        .find(|l| l.status == "open")
        .map(|l| l.url.clone())
        .unwrap_or_default();
    let link_rows = links
        .into_iter()
        .map(|l| vec![when(l.created_at), l.amount().to_string(), l.status, l.url])
        .collect();
    let may_link = allowed(
        state,
        &scope,
        tool_operation(state, "manage_quotes", "create_payment_link"),
    ) && q.status == "sent"
        && !paid
        && state.billing.is_some();
    let can = |action: &str| {
        allowed(
            state,
            &scope,
            tool_operation(state, "manage_quotes", action),
        )
    };
    let mut acts = Vec::new();
    if q.status == "draft" && can("send") {
        acts.push(Act::new("send", "Send to the customer"));
    }
    if q.status != "declined" && !paid && can("decline") {
        acts.push(Act {
            danger: true,
            reason: true,
            ..Act::new("decline", "Decline")
        });
    }
    let heading = format!("Quote {}: {}", q.reference(), q.title);
    let l = Layout::for_user(state, who, Some(&scope.org), Section::Quotes, &heading).await?;
    render(&LedgerRecord {
        l,
        back: format!("/o/{slug}/quotes"),
        back_label: "Quotes",
        heading,
        status: if paid {
            "paid".into()
        } else {
            q.status.clone()
        },
        facts: vec![
            ("Currency", c.to_string()),
            ("Created", when(q.created_at)),
            ("Valid until", q.valid_until.map(when).unwrap_or_default()),
            ("Sent", q.sent_at.map(when).unwrap_or_default()),
            ("Declined", q.decline_reason.clone().unwrap_or_default()),
        ],
        lines: Table {
            heading: "Lines",
            id: "lines",
            columns: LINE_COLUMNS.to_vec(),
            rows: lines,
        },
        totals: vec![
            ("Subtotal", money(q.subtotal_minor, c)),
            ("Tax", money(q.tax_minor, c)),
            ("Total", money(q.total_minor, c)),
        ],
        more: vec![
            Table {
                heading: "Content",
                id: "blocks",
                columns: vec!["Kind", "Text"],
                rows: blocks,
            },
            Table {
                heading: "Payment links",
                id: "payment-links",
                columns: vec!["Made", "Amount", "State", "Link"],
                rows: link_rows,
            },
        ],
        pdf: format!("/o/{slug}/quotes/{id}/pdf"),
        pay_action: if may_link {
            format!("/o/{slug}/quotes/{id}/payment-link")
        } else {
            String::new()
        },
        pay_url,
        act_url: format!("/o/{slug}/quotes/{id}/act"),
        acts,
        message,
    })
}

async fn quote_pdf(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, raw)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = scope(&state, &who, &org, "manage_quotes", "get").await?;
    let id = Uuid::parse_str(&raw).map_err(|_| not_found("Quote"))?;
    let quotes = scope.store(&state).quotes();
    let q = quotes.get_quote(id).await.map_err(page_err("Quote"))?;
    Ok(crate::routes::tickets::pdf_download(
        &q.reference(),
        quotes.pdf(id).await?,
    ))
}

async fn contract(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, raw)): Path<(String, String)>,
) -> Result<Response, PageError> {
    contract_page(&state, &who, &org, &raw, String::new()).await
}

/// A contract's lifecycle moves, as `manage_contracts` names them.
const CONTRACT_MOVES: [(&str, &str); 4] = [
    ("activate", "Activate"),
    ("pause", "Pause"),
    ("resume", "Resume"),
    ("cancel", "Cancel contract"),
];

async fn contract_page(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    raw: &str,
    message: String,
) -> Result<Response, PageError> {
    let scope = scope(state, who, org, "get_contract", "").await?;
    let id = Uuid::parse_str(raw).map_err(|_| not_found("Contract"))?;
    let contracts = scope.store(state).contracts();
    let k = contracts
        .get_contract(id)
        .await
        .map_err(page_err("Contract"))?;
    let slug = &scope.org.slug;
    let lines = contracts
        .lines(id)
        .await?
        .into_iter()
        .map(|l| {
            vec![
                l.description,
                Quantity(l.quantity_milli).decimal(),
                money(l.unit_price_minor, l.currency),
            ]
        })
        .collect();
    let periods = contracts
        .periods(id)
        .await?
        .into_iter()
        .map(|p| {
            vec![
                when(p.starts_at),
                when(p.ends_at),
                money(p.total_minor, p.currency),
                p.invoice_id
                    .map(|i| format!("/o/{slug}/invoices/{i}"))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    // A move is offered when the contract's status allows it and the person holds what
    // manage_contracts declares for it (Tier 3, contracts.manage).
    let acts = CONTRACT_MOVES
        .into_iter()
        .filter(|(value, _)| {
            k.status.after(value).is_ok()
                && allowed(
                    state,
                    &scope,
                    tool_operation(state, "manage_contracts", value),
                )
        })
        .map(|(value, label)| Act {
            danger: value == "cancel",
            ..Act::new(value, label)
        })
        .collect();
    let heading = format!("Contract {}", k.name);
    let l = Layout::for_user(state, who, Some(&scope.org), Section::Contracts, &heading).await?;
    render(&LedgerRecord {
        l,
        back: format!("/o/{slug}/contracts"),
        back_label: "Contracts",
        heading,
        status: k.status.to_string(),
        facts: vec![
            ("Currency", k.currency.to_string()),
            ("Billing period", k.billing_period.to_string()),
            ("Tax", format!("{}.{:02} %", k.tax_bp / 100, k.tax_bp % 100)),
            ("Starts", when(k.starts_at)),
            ("Next period", when(k.next_period_at)),
        ],
        lines: Table {
            heading: "Lines",
            id: "lines",
            columns: vec!["Description", "Quantity", "Unit price per period"],
            rows: lines,
        },
        totals: Vec::new(),
        more: vec![Table {
            heading: "Billed periods",
            id: "periods",
            columns: vec!["From", "To", "Total", "Draft invoice"],
            rows: periods,
        }],
        pdf: String::new(),
        pay_action: String::new(),
        pay_url: String::new(),
        act_url: format!("/o/{slug}/contracts/{id}/act"),
        acts,
        message,
    })
}

#[derive(Debug, Deserialize)]
struct RecordForm {
    action: String,
    #[serde(default)]
    reason: String,
}

/// A quote's action from its page: `send` (to the customer: Tier 3 with `quotes.send`, as
/// `manage_quotes send` declares) or `decline` (with a reason), each the store call the tool
/// makes, with the same audit record.
async fn quote_act(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, raw)): Path<(String, String)>,
    f: SignedForm<RecordForm>,
) -> Result<Response, PageError> {
    let (who, form) = (f.who, f.form);
    let action = match form.action.as_str() {
        a @ ("send" | "decline") => a,
        _ => return Err(PageError::bad_request("Unknown action.")),
    };
    let scope = scope(&state, &who, &org, "manage_quotes", action).await?;
    let id = Uuid::parse_str(&raw).map_err(|_| not_found("Quote"))?;
    let quotes = scope.store(&state).quotes();
    let q = quotes.get_quote(id).await.map_err(page_err("Quote"))?;
    let a = audit(&scope, request_id, &format!("quote.{action}"), "quote");
    let done = if action == "send" {
        quotes.send(q.id, a).await
    } else if form.reason.trim().is_empty() {
        Err(StoreError::Invalid(
            "reason: say why the customer declined.".into(),
        ))
    } else {
        quotes.decline(q.id, form.reason.trim(), a).await
    };
    Record::Quote.after(&state, &scope, &who, id, done).await
}

/// A contract's lifecycle move from its page (`activate`, `pause`, `resume`, `cancel`): held
/// to what `manage_contracts` declares for it (Tier 3, `contracts.manage`), allowed by the
/// same rule ([`breeze_core::ContractStatus::after`]), made by the store call the tool makes,
/// with the same audit record.
async fn contract_act(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, raw)): Path<(String, String)>,
    f: SignedForm<RecordForm>,
) -> Result<Response, PageError> {
    let (who, form) = (f.who, f.form);
    let Some((action, _)) = CONTRACT_MOVES
        .into_iter()
        .find(|(value, _)| *value == form.action)
    else {
        return Err(PageError::bad_request("Unknown action."));
    };
    let scope = scope(&state, &who, &org, "manage_contracts", action).await?;
    let id = Uuid::parse_str(&raw).map_err(|_| not_found("Contract"))?;
    let contracts = scope.store(&state).contracts();
    let k = contracts
        .get_contract(id)
        .await
        .map_err(page_err("Contract"))?;
    let to = match k.status.after(action) {
        Ok(to) => to,
        Err(m) => return contract_page(&state, &who, &org, &raw, m).await,
    };
    let done = contracts
        .set_status(
            k.id,
            to,
            audit(
                &scope,
                request_id,
                &format!("contract.{action}"),
                "contract",
            ),
        )
        .await;
    Record::Contract.after(&state, &scope, &who, id, done).await
}
