//! Tickets and invoices over REST, for administrators and integrations: list, read, open a
//! ticket, comment, and move its status; list and read invoices. Each route's operation is
//! declared in `authz::ORG_ROUTES` (invoice reads are Tier 2, as the MCP tools are: financial
//! data needs more than a read scope). Handlers are thin: the store's ticket and invoice
//! handles do the work and write the audit records.

use axum::{
    Json, Router,
    extract::{Path, Query, State, rejection::QueryRejection},
    http::StatusCode,
    routing::{get, post},
};
use breeze_core::{AuditEvent, InvoiceStatus, TicketPriority, TicketStatus};
use breeze_store::{
    Invoice, InvoiceLine, NewTicket, Payment, Ticket, TicketComment, TicketFilter, TimeEntry,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    ApiError, AppState,
    authz::OrgScope,
    extract::{Json as JsonBody, RequestId},
};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/tickets", get(list).post(create))
        .route("/orgs/{org}/tickets/{ticket}", get(show))
        .route("/orgs/{org}/tickets/{ticket}/comments", post(comment))
        .route("/orgs/{org}/tickets/{ticket}/status", post(status))
        .route("/orgs/{org}/invoices", get(invoices))
        .route("/orgs/{org}/invoices/{invoice}", get(invoice))
        .route("/orgs/{org}/invoices/{invoice}/pdf", get(invoice_pdf))
        .route("/orgs/{org}/quotes/{quote}/pdf", get(quote_pdf))
}

/// A PDF document as a download named `name`.
pub(crate) fn pdf_download(name: &str, pdf: Vec<u8>) -> axum::response::Response {
    use axum::{
        http::{HeaderValue, header},
        response::IntoResponse,
    };
    let mut r = pdf.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/pdf"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}.pdf\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    r
}

/// `GET …/invoices/{invoice}/pdf`: the invoice as a PDF (Tier 2, as reading it is).
async fn invoice_pdf(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, invoice)): Path<(String, String)>,
) -> Result<axum::response::Response, ApiError> {
    let id = Uuid::parse_str(&invoice).map_err(|_| ApiError::not_found("invoice not found"))?;
    let invoices = scope.store(&state).invoices();
    let inv = invoices.get_invoice(id).await?;
    let name = inv.reference().unwrap_or_else(|| format!("draft-{id}"));
    Ok(pdf_download(&name, invoices.pdf(id).await?))
}

/// `GET …/quotes/{quote}/pdf`: the quote as a PDF (Tier 2 with quotes.write, as the quote
/// tool's reads are).
async fn quote_pdf(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, quote)): Path<(String, String)>,
) -> Result<axum::response::Response, ApiError> {
    let id = Uuid::parse_str(&quote).map_err(|_| ApiError::not_found("quote not found"))?;
    let quotes = scope.store(&state).quotes();
    let q = quotes.get_quote(id).await?;
    Ok(pdf_download(&q.reference(), quotes.pdf(id).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<TicketStatus>,
    /// `true`: only tickets not resolved or closed.
    active: Option<bool>,
    priority: Option<TicketPriority>,
    text: Option<String>,
    tag: Option<String>,
    /// The `next` of the previous page.
    before: Option<i64>,
    limit: Option<u32>,
}

#[derive(Serialize)]
struct TicketPage {
    tickets: Vec<Ticket>,
    /// Pass as `before` for the next page; absent on the last.
    next: Option<i64>,
}

async fn list(
    State(state): State<AppState>,
    scope: OrgScope,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<TicketPage>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let filter = TicketFilter {
        status: q.status,
        active: q.active.unwrap_or(false),
        priority: q.priority,
        text: q.text,
        tag: q.tag,
        ..Default::default()
    };
    let page = scope
        .store(&state)
        .tickets()
        .list_tickets(&filter, q.before, q.limit.unwrap_or(50))
        .await?;
    Ok(Json(TicketPage {
        tickets: page.tickets,
        next: page.next_before,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    subject: String,
    #[serde(default)]
    description: String,
    category: Option<String>,
    priority: Option<TicketPriority>,
    submitter: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
}

async fn create(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    JsonBody(req): JsonBody<Create>,
) -> Result<(StatusCode, Json<Ticket>), ApiError> {
    let actor = scope.caller.actor();
    let new = NewTicket {
        subject: req.subject,
        description: req.description,
        category: req.category,
        priority: req.priority.unwrap_or(TicketPriority::Normal),
        device_id: None,
        submitter: req.submitter,
        assignee_id: None,
        tags: req.tags,
        due_at: None,
        created_by: actor.to_string(),
    };
    let audit = AuditEvent::new(actor, "ticket.create", "ticket").request(request_id);
    let t = scope
        .store(&state)
        .tickets()
        .create_ticket(new, audit)
        .await?;
    Ok((StatusCode::CREATED, Json(t)))
}

#[derive(Serialize)]
struct TicketDetail {
    #[serde(flatten)]
    ticket: Ticket,
    comments: Vec<TicketComment>,
    time_entries: Vec<TimeEntry>,
}

fn ticket_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found("ticket not found"))
}

async fn show(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, ticket)): Path<(String, String)>,
) -> Result<Json<TicketDetail>, ApiError> {
    let tickets = scope.store(&state).tickets();
    let t = tickets.get_ticket(ticket_id(&ticket)?).await?;
    Ok(Json(TicketDetail {
        comments: tickets.comments(t.id).await?,
        time_entries: tickets.time_entries(t.id).await?,
        ticket: t,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Comment {
    body: String,
    #[serde(default)]
    internal: bool,
}

async fn comment(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, ticket)): Path<(String, String)>,
    JsonBody(req): JsonBody<Comment>,
) -> Result<(StatusCode, Json<TicketComment>), ApiError> {
    let actor = scope.caller.actor();
    let audit = AuditEvent::new(actor.clone(), "ticket.comment", "ticket").request(request_id);
    let c = scope
        .store(&state)
        .tickets()
        .add_comment(
            ticket_id(&ticket)?,
            &actor,
            scope.caller.user(),
            &req.body,
            req.internal,
            audit,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(c)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetStatus {
    status: TicketStatus,
}

async fn status(
    State(state): State<AppState>,
    scope: OrgScope,
    RequestId(request_id): RequestId,
    Path((_, ticket)): Path<(String, String)>,
    JsonBody(req): JsonBody<SetStatus>,
) -> Result<Json<Ticket>, ApiError> {
    let audit =
        AuditEvent::new(scope.caller.actor(), "ticket.status", "ticket").request(request_id);
    let t = scope
        .store(&state)
        .tickets()
        .set_status(ticket_id(&ticket)?, req.status, audit)
        .await?;
    Ok(Json(t))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InvoiceQuery {
    status: Option<InvoiceStatus>,
    before: Option<Uuid>,
    limit: Option<u32>,
}

#[derive(Serialize)]
struct InvoicePage {
    invoices: Vec<Invoice>,
    next: Option<Uuid>,
}

async fn invoices(
    State(state): State<AppState>,
    scope: OrgScope,
    q: Result<Query<InvoiceQuery>, QueryRejection>,
) -> Result<Json<InvoicePage>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let page = scope
        .store(&state)
        .invoices()
        .list_invoices(q.status, q.before, q.limit.unwrap_or(50))
        .await?;
    Ok(Json(InvoicePage {
        invoices: page.invoices,
        next: page.next_before,
    }))
}

#[derive(Serialize)]
struct InvoiceDetail {
    #[serde(flatten)]
    invoice: Invoice,
    reference: Option<String>,
    lines: Vec<InvoiceLine>,
    payments: Vec<Payment>,
}

async fn invoice(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, invoice)): Path<(String, String)>,
) -> Result<Json<InvoiceDetail>, ApiError> {
    let id = Uuid::parse_str(&invoice).map_err(|_| ApiError::not_found("invoice not found"))?;
    let invoices = scope.store(&state).invoices();
    let inv = invoices.get_invoice(id).await?;
    Ok(Json(InvoiceDetail {
        reference: inv.reference(),
        lines: invoices.lines(id).await?,
        payments: invoices.payments(id).await?,
        invoice: inv,
    }))
}
